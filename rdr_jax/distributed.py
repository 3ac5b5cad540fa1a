"""Sharded inputs: placing a matrix on a device mesh, reading its row sharding, and checking
the shardings of a factored operator's factors.

The engine is JAX's own sharding (``jax.sharding.Mesh``, ``NamedSharding``, GSPMD): every
entry point of rdr_jax (``rsvd``, ``rangefinder``, ``interpolative``, ``cur``,
``select_columns``/``select_rows``, ``streaming_skeletons``, ``lowrank_error``) accepts a
dense A whose rows, columns or 2-D blocks are sharded, and a factored operator whose
factors are sharded, and XLA partitions the computation:

* sketch ``Gamma A``: each device multiplies the columns of Gamma that meet its rows of A
  and one all-reduce sums the l x n partial sketches (row-sharded A); a column-sharded A
  needs no communication (each device owns whole columns of ``Gamma A``). The Gaussian
  sketch is a counter-based hash of (row, column, key) (:func:`rdr_jax.sketching.hash_normal`)
  generated where it is used, so the sketch -- and the skeletons -- do not depend on the
  number of devices;
* the small l x n sketch's LU/QR/SVD is replicated; C = A(:, cols) and R = A(rows, :) are
  gathers of k columns/rows, never of A;
* tall bases (m x l, row-sharded) are orthonormalised by CholeskyQR2
  (:func:`rdr_jax.randomized_svd.cholesky_qr2`: one all-reduce of an l x l Gram per pass)
  instead of a gathered Householder QR; ``orthonormalize="auto"`` chooses it when A's rows
  are sharded.

Multi-host: call ``jax.distributed.initialize()`` on every process first, build the mesh
over ``jax.devices()`` and the global array with ``jax.make_array_from_process_local_data``
(or :func:`shard` on each process with the same global array); the rest is unchanged.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = ["shard", "row_shards", "check_factor_shardings", "auto_axes"]


def _auto_mesh(mesh: Mesh) -> Mesh:
    """``mesh`` with every axis of type ``Auto`` (GSPMD partitions the computation)."""
    types = getattr(mesh, "axis_types", None)
    auto = getattr(jax.sharding, "AxisType", None)
    if types is None or auto is None or all(t == auto.Auto for t in types):
        return mesh
    return Mesh(mesh.devices, mesh.axis_names, axis_types=(auto.Auto,) * len(mesh.axis_names))


def auto_axes(a: Any) -> Any:
    """A concrete jax array sharded over a mesh with ``Explicit`` axes (the default of
    ``jax.make_mesh`` since jax 0.7) placed on the same devices with the same layout but
    ``Auto`` axes; anything else unchanged.

    rdr_jax's pipelines are written for GSPMD (``Auto`` axes): under explicit sharding
    ("sharding in types") XLA's LU/QR refuse operands sharded on non-batch dimensions
    ("Input 0 to lu must be unsharded on non-batch dimensions"). Every entry point calls
    this on its dense input and on a factored operator's factors, so meshes from
    ``jax.make_mesh`` work as they are. Traced arrays (inside the caller's jit) are not
    converted: build such meshes with ``axis_types=(jax.sharding.AxisType.Auto, ...)``.
    """
    if not isinstance(a, jax.Array) or isinstance(a, jax.core.Tracer):
        return a
    sh = a.sharding
    if not isinstance(sh, NamedSharding):
        return a
    mesh = _auto_mesh(sh.mesh)
    if mesh is sh.mesh:
        return a
    return jax.device_put(a, NamedSharding(mesh, sh.spec))


def _axis_size(mesh: Mesh, entry) -> int:
    names = entry if isinstance(entry, tuple) else (entry,)
    return int(np.prod([mesh.shape[a] for a in names if a is not None], dtype=np.int64))


def shard(A: Any, mesh: Mesh, spec: PartitionSpec) -> jax.Array:
    """``jax.device_put(A, NamedSharding(mesh, spec))`` with a clear error when a mesh axis
    does not divide the dimension it shards.

    Args:
      A: a 2-D array (numpy or jax).
      mesh: a ``jax.sharding.Mesh``.
      spec: e.g. ``P("x", None)`` (rows), ``P(None, "x")`` (columns), ``P("x", "y")``
        (2-D blocks).

    The result's mesh axes are ``Auto`` (GSPMD) even when ``mesh``'s are ``Explicit`` (the
    default of ``jax.make_mesh``): see :func:`rdr_jax.distributed.auto_axes`.

    Raises:
      ValueError: a sharded dimension not divisible by the size of its mesh axes, an axis
        name not in the mesh, or a spec longer than A's rank.
      TypeError: ``mesh``/``spec`` of the wrong type.

    Example:
      >>> mesh = jax.make_mesh((jax.device_count(),), ("x",))
      >>> A_sh = shard(A, mesh, P("x", None))           # rows over all devices
      >>> d = rdr_jax.cur(jax.random.key(0), A_sh, 20)
    """
    if not isinstance(mesh, Mesh):
        raise TypeError(f"mesh must be a jax.sharding.Mesh; got {type(mesh).__name__}")
    if not isinstance(spec, PartitionSpec):
        raise TypeError(f"spec must be a jax.sharding.PartitionSpec; got {type(spec).__name__}")
    shape = np.shape(A)
    if len(spec) > len(shape):
        raise ValueError(f"spec {spec} has {len(spec)} entries but A has shape {shape}")
    for dim, entry in enumerate(spec):
        if entry is None:
            continue
        names = entry if isinstance(entry, tuple) else (entry,)
        for a in names:
            if a not in mesh.shape:
                raise ValueError(f"spec {spec} names mesh axis {a!r}, but the mesh has axes "
                                 f"{tuple(mesh.axis_names)}")
        size = _axis_size(mesh, entry)
        if shape[dim] % size:
            raise ValueError(
                f"A has shape {shape}: dimension {dim} ({shape[dim]}) is sharded over mesh "
                f"axis {entry!r} of size {size}, which does not divide it; pad A, use a mesh "
                f"axis whose size divides {shape[dim]}, or shard another dimension")
    return jax.device_put(A, NamedSharding(_auto_mesh(mesh), spec))


def _array_shards(a: Any, axis: int) -> int:
    """Number of shards dimension ``axis`` of a concrete 2-D jax array is split into (1 for
    anything else: numpy, traced, other ranks)."""
    if not isinstance(a, jax.Array) or isinstance(a, jax.core.Tracer) or a.ndim != 2:
        return 1
    try:
        part = a.sharding.shard_shape(a.shape)[axis]
    except Exception:  # pragma: no cover - shardings without a shard shape
        return 1
    return max(int(a.shape[axis]) // max(int(part), 1), 1)


def row_shards(op: Any) -> int:
    """Number of shards the rows of a concrete operator are split into (1: unsharded,
    traced, sparse or implicit). Dense: from the array's sharding; factored
    ``L diag(d) R^H``: from L's (A's rows are L's rows)."""
    return _operator_shards(op, 0)


def col_shards(op: Any) -> int:
    """Number of shards the columns of a concrete operator are split into (the rows of
    ``A^H``; 1: unsharded, traced, sparse or implicit). Dense: from the array's sharding;
    factored ``L diag(d) R^H``: from R's rows (A's columns are R's rows)."""
    return _operator_shards(op, 1)


def _operator_shards(op: Any, axis: int) -> int:
    from rdr_jax.operators import DenseOperator, FactoredOperator
    if isinstance(op, DenseOperator):
        return _array_shards(op.array, axis)
    if isinstance(op, FactoredOperator):            # A's rows / columns are L's / R's rows
        return row_shards(op.L if axis == 0 else op.R)
    if isinstance(op, jax.Array):
        return _array_shards(op, axis)
    return 1


def _device_set(x: Any):
    if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
        return frozenset(x.sharding.device_set)
    return None


def check_factor_shardings(**factors: Any) -> None:
    """Raise ValueError when the concrete jax arrays among ``factors`` (name -> array) live
    on different sets of devices, e.g. ``L`` sharded over one mesh and ``R`` over another
    (XLA cannot combine them in one computation), or when their inner (rank) dimensions are
    sharded differently (``L``'s columns split into c shards, ``R``'s into c' != c)."""
    sets = {k: _device_set(v) for k, v in factors.items()}
    sets = {k: s for k, s in sets.items() if s is not None}
    sharded = {k: s for k, s in sets.items() if len(s) > 1}
    if sharded:
        ref_name, ref = next(iter(sharded.items()))
        for k, s in sets.items():
            if s != ref and (len(s) > 1 or not s <= ref):
                raise ValueError(
                    f"factors on incompatible devices: {ref_name} is sharded over "
                    f"{sorted(d.id for d in ref)} but {k} lives on {sorted(d.id for d in s)}; "
                    "put all factors on the same mesh (jax.device_put with NamedSharding over "
                    "one Mesh)")
    inner = {}
    for k, v in factors.items():
        if isinstance(v, jax.Array) and not isinstance(v, jax.core.Tracer) and v.ndim == 2:
            inner[k] = v.shape[1] // max(int(v.sharding.shard_shape(v.shape)[1]), 1)
    if len(set(inner.values())) > 1:
        desc = ", ".join(f"{k} in {c}" for k, c in inner.items())
        raise ValueError(f"mixed shardings of the factors' inner (rank) dimension ({desc} "
                         "shards); shard L and R by rows (P('x', None)) and keep the rank "
                         "dimension whole, or shard it the same way in both")
