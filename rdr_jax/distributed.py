"""Sharded inputs: placing a matrix on a device mesh, reading how an operator is sharded,
and checking a factored operator's factors.

Every entry point accepts a dense A sharded by rows, columns or 2-D blocks, and a factored
operator with row-sharded factors; XLA (GSPMD) partitions the computation. How each step is
partitioned, and the multi-host recipe: ``docs/operators.md``.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = ["shard", "row_shards", "col_shards", "check_factor_shardings", "auto_axes"]


def _auto_mesh(mesh: Mesh) -> Mesh:
    """``mesh`` with every axis of type ``Auto`` (GSPMD partitions the computation)."""
    types = getattr(mesh, "axis_types", None)
    auto = getattr(jax.sharding, "AxisType", None)
    if types is None or auto is None or all(t == auto.Auto for t in types):
        return mesh
    return Mesh(mesh.devices, mesh.axis_names, axis_types=(auto.Auto,) * len(mesh.axis_names))


def auto_axes(a: Any) -> Any:
    """``a`` with its mesh axes made ``Auto`` when it is a concrete jax array sharded over
    ``Explicit`` axes (the ``jax.make_mesh`` default); anything else unchanged.

    Why: XLA's LU/QR refuse operands sharded on non-batch dimensions under explicit sharding,
    and rdr_jax's pipelines are written for GSPMD. Traced arrays are not converted.
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
    """``jax.device_put(A, NamedSharding(mesh, spec))`` with ``Auto`` mesh axes, and a clear
    error when a mesh axis does not divide the dimension it shards.

    Args:
      A: a 2-D array (numpy or jax).
      mesh: a ``jax.sharding.Mesh``.
      spec: e.g. ``P("x", None)`` (rows), ``P(None, "x")`` (columns), ``P("x", "y")``.

    Returns:
      The sharded jax array.

    Raises:
      ValueError: an axis that does not divide its dimension or is not in the mesh, or a spec
        longer than A's rank. TypeError: ``mesh``/``spec`` of the wrong type.
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
    """Number of shards of dimension ``axis`` of a concrete 2-D jax array (1 otherwise)."""
    if not isinstance(a, jax.Array) or isinstance(a, jax.core.Tracer) or a.ndim != 2:
        return 1
    try:
        part = a.sharding.shard_shape(a.shape)[axis]
    except Exception:  # pragma: no cover - shardings without a shard shape
        return 1
    return max(int(a.shape[axis]) // max(int(part), 1), 1)


def row_shards(op: Any) -> int:
    """Number of shards the rows of a concrete jax array or operator are split into
    (``op.shards(0)``; 1 when unsharded or traced)."""
    return _shards(op, 0)


def col_shards(op: Any) -> int:
    """Number of shards the columns of a concrete jax array or operator are split into."""
    return _shards(op, 1)


def _shards(op: Any, axis: int) -> int:
    if isinstance(op, jax.Array):
        return _array_shards(op, axis)
    shards = getattr(op, "shards", None)
    return shards(axis) if callable(shards) else 1


def _device_set(x: Any):
    if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
        return frozenset(x.sharding.device_set)
    return None


def check_factor_shardings(**factors: Any) -> None:
    """Raise ValueError when the concrete jax arrays among ``factors`` (name -> array) live
    on different sets of devices (XLA cannot combine them) or shard their inner (rank)
    dimensions differently."""
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
