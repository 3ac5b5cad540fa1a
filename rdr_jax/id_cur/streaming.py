"""Streaming skeleton selection (thesis Algorithm 3): sketch a matrix seen once, block by
block, then pick skeletons from the two sketches and read only the chosen rows and columns.
Details: ``docs/id-cur.md`` ("Streaming").
"""

from __future__ import annotations

import functools
from typing import Any, Iterable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from rdr_jax._src import jit as _jit
from rdr_jax._src import validation as V
from rdr_jax.id_cur import pivoting as P
from rdr_jax.id_cur import selection as SL
from rdr_jax.id_cur.decompositions import CUR
from rdr_jax.operators import HIGHEST
from rdr_jax.id_cur.selection import resolve_method
from rdr_jax.randomized_svd import sketch_options
from rdr_jax.sketching import as_sketch

__all__ = ["StreamingSketches", "StreamingSkeletons", "streaming_sketches",
           "streaming_skeletons", "retrieve_skeletons", "cur_from_skeletons"]


class StreamingSketches(NamedTuple):
    """Row sketch ``X = Gamma A`` (l x n) and column sketch ``Y = A Omega^H`` (m x l)."""

    X: jax.Array
    Y: jax.Array


class StreamingSkeletons(NamedTuple):
    """Result of :func:`streaming_skeletons`.

    ``cols``, ``rows``: (k,) skeletons from pivoting on X and Y; ``eta``, ``eta_rows``:
    their certificates; ``W_cols = X_1^+ X`` (k x n) estimates ``C^+ A`` and
    ``W_rows = Y Y_1^+`` (m x k) estimates ``A R^+`` -- both from the sketches alone (no
    second pass); ``X``, ``Y``: the sketches.
    """

    cols: jax.Array
    rows: jax.Array
    eta: jax.Array
    eta_rows: jax.Array
    W_cols: jax.Array
    W_rows: jax.Array
    X: jax.Array
    Y: jax.Array


@functools.partial(_jit.jit, static_argnames=("l", "sketch"), donate_argnums=(0,))
def _stream_update(X, blk, i0, kg, Omega, l, sketch):
    # Gamma(:, i0:i0+b) for this block: an independent sketch of the block's b coordinates
    S = sketch.draw(jax.random.fold_in(kg, i0), l, blk.shape[0], dtype=blk.dtype)
    X = X + S.apply_dense(blk)
    Yb = jnp.matmul(blk, Omega.conj().T, precision=HIGHEST)
    return X, Yb


def streaming_sketches(key, blocks: Iterable[Any], shape: tuple[int, int], l: int, *,
                       method: Any = None, sketch: Any = None, axis: int = 0,
                       dtype=None) -> StreamingSketches:
    """Both sketches ``X = Gamma A`` and ``Y = A Omega^H`` in ONE pass over A
    (Algorithm 3, Line 2).

    For a row block ``A_b = A(i0:i1, :)``: ``X += Gamma(:, i0:i1) A_b`` and
    ``Y(i0:i1, :) = A_b Omega^H``. ``Gamma``'s columns for a block are drawn from
    ``fold_in(key, i0)`` (independent columns, so Gamma has the chosen distribution for any
    blocking; the realisation depends on the blocking). SRTT mixes all coordinates and
    cannot be streamed this way: use ``"gaussian"`` or ``"sparse_sign"`` for Gamma
    (Omega is always Gaussian). Each block update is one compiled function (per block
    shape).

    Args:
      key: ``jax.random.key``.
      blocks: iterable of 2-D arrays (numpy/jax/scipy.sparse), consecutive along ``axis``.
      shape: ``(m, n)`` of the full matrix.
      l: sketch size (static).
      method: a :class:`rdr_jax.Method` whose ``sketch`` is Gamma's embedding (its other
        fields do not apply to one pass); default ``Method()``, a Gaussian.
      sketch: Gamma's embedding (name or choice object), overriding the method's.
      axis: 0 for row blocks, 1 for column blocks.
      dtype: working dtype (default: the first block's).

    Returns:
      :class:`rdr_jax.id_cur.streaming.StreamingSketches` ``(X, Y)``.

    Raises:
      ValueError: blocks that do not tile ``shape`` along ``axis``, wrong widths, SRTT, NaN.
    """
    key = V.check_key(key)
    if axis not in (0, 1):
        raise ValueError(f"axis must be 0 (row blocks) or 1 (column blocks); got {axis!r}")
    if (not isinstance(shape, (tuple, list)) or len(shape) != 2):
        raise ValueError(f"shape must be (m, n); got {shape!r}")
    m = V.check_int("shape[0]", shape[0], low=1)
    n = V.check_int("shape[1]", shape[1], low=1)
    l = V.check_int("l", l, low=1, high=min(m, n), high_desc=f"min(m, n) = {min(m, n)}")
    sk = as_sketch(sketch_options(method, sketch=sketch)["sketch"])
    if not sk.streamable:
        raise ValueError("SRTT mixes all coordinates and cannot be applied block by block; "
                         "use sketch='gaussian' or 'sparse_sign' for streaming")
    kg, ko = jax.random.split(key)
    if axis == 1:  # stream columns of A = rows of A^H, swap the roles of X and Y
        res = streaming_sketches(key, (_adjoint_block(b) for b in blocks), (n, m), l,
                                 sketch=sk, axis=0, dtype=dtype)
        return StreamingSketches(res.Y.conj().T, res.X.conj().T)
    X = None
    Ys = []
    pos = 0
    Omega = None
    for blk in blocks:
        blk = _dense_block(blk, dtype)
        if blk.ndim != 2 or blk.shape[1] != n:
            raise ValueError(f"row block at row {pos} has shape {blk.shape}; expected (b, {n})")
        if pos + blk.shape[0] > m:
            raise ValueError(f"blocks have more than m = {m} rows")
        V.check_array_values(f"block at row {pos}", blk)
        if X is None:
            dt = blk.dtype
            X = jnp.zeros((l, n), dt)
            Omega = jax.random.normal(ko, (l, n), dtype=dt) / np.sqrt(l)
        X, Yb = _stream_update(X, blk.astype(X.dtype), pos, kg, Omega, l, sk)
        Ys.append(Yb)
        pos += blk.shape[0]
    if pos != m:
        raise ValueError(f"blocks cover {pos} rows; expected m = {m}")
    return StreamingSketches(X, jnp.concatenate(Ys, axis=0))


def _dense_block(blk, dtype):
    if sp.issparse(blk):
        blk = blk.toarray()
    arr = jnp.asarray(blk)
    if dtype is not None:
        arr = arr.astype(V.check_dtype("dtype", dtype))
    elif arr.dtype.kind not in "fc":
        raise TypeError(f"blocks must be floating point; got dtype {arr.dtype}")
    return arr


def _adjoint_block(blk):
    if sp.issparse(blk):
        return blk.conj().T
    return jnp.asarray(blk).conj().T


@functools.partial(_jit.jit, static_argnames=("k", "pivot"))
def _stream_pivot(X, Y, k, pivot):
    J = pivot.select(None, X, k)
    I = pivot.select(None, Y.T, k)
    T = P.interpolation(X, J)
    Tr = P.interpolation(Y.T, I)
    return StreamingSkeletons(J, I, P.eta_from_interpolation(T), P.eta_from_interpolation(Tr),
                              T, Tr.T, X, Y)


def streaming_method(method: Any, k: int, shape) -> tuple:
    """``(pivot, l, sketch)`` of a streaming selection from a name or :class:`Method` (LUPP or
    CPQR pivots; ``l = min(k + oversample, m, n)``)."""
    m = resolve_method(method)
    if not m.pivot.streamable or m.power_iters:
        raise ValueError(f"streaming selection supports method 'lupp' or 'cpqr' (no power "
                         f"iterations: one pass); got {method!r}")
    m.pivot.check_backend()
    return m.pivot, SL.sketch_size(m, k, shape), m.sketch


def streaming_skeletons(key, blocks: Iterable[Any], shape: tuple[int, int], k: int, *,
                        method: Any = "lupp", axis: int = 0, dtype=None) -> StreamingSkeletons:
    """Streaming LUPP/CPQR skeleton selection in one pass (thesis Algorithm 3).

    ``X = Gamma A`` and ``Y = A Omega^H`` in one pass (:func:`streaming_sketches`); columns by
    pivoting on X, rows on Y; ``W_cols = X_1^+ X`` and ``W_rows = Y Y_1^+`` estimate ``C^+ A``
    and ``A R^+`` without a second pass. Why: a matrix seen once (disk, simulation) still
    gets certified skeletons.

    Args:
      key, blocks, shape, axis, dtype: as :func:`streaming_sketches`.
      k: number of skeletons (static).
      method: ``"lupp"`` (default), ``"cpqr"`` or a :class:`~rdr_jax.Method` with one of them
        (its sketch and oversampling are used; SRTT cannot stream).

    Returns:
      :class:`StreamingSkeletons`.
    """
    m, n = shape
    k = V.check_int("k", k, low=1, high=min(m, n), high_desc=f"min(m, n) = {min(m, n)}")
    pivot, l, sketch = streaming_method(method, k, shape)
    Xs = streaming_sketches(key, blocks, shape, l, sketch=sketch, axis=axis, dtype=dtype)
    return _stream_pivot(Xs.X, Xs.Y, k, pivot)


def retrieve_skeletons(blocks: Iterable[Any], shape: tuple[int, int], rows, cols, *,
                       axis: int = 0):
    """One pass over a blocked matrix collecting ``C = A(:, cols)``, ``R = A(rows, :)`` and
    ``S = A(rows, cols)`` (the pass that follows :func:`streaming_skeletons`).

    Returns ``(C, S, R)`` as jax arrays.
    """
    m, n = shape
    rows = np.asarray(rows)
    cols = np.asarray(cols)
    C = R = None
    pos = 0
    for blk in blocks:
        blk = blk.toarray() if sp.issparse(blk) else np.asarray(blk)
        if C is None:
            C = np.zeros((m, cols.size), blk.dtype)
            R = np.zeros((rows.size, n), blk.dtype)
        if axis == 0:
            b = blk.shape[0]
            C[pos:pos + b] = blk[:, cols]
            sel = (rows >= pos) & (rows < pos + b)
            R[sel] = blk[rows[sel] - pos]
        else:
            b = blk.shape[1]
            R[:, pos:pos + b] = blk[rows]
            sel = (cols >= pos) & (cols < pos + b)
            C[:, sel] = blk[:, cols[sel] - pos]
        pos += b
    total = m if axis == 0 else n
    if pos != total:
        raise ValueError(f"blocks cover {pos} of {total} {'rows' if axis == 0 else 'columns'}")
    return jnp.asarray(C), jnp.asarray(C[rows]), jnp.asarray(R)


def cur_from_skeletons(C, S, R, *, rows=None, cols=None, eta=None, eta_rows=None) -> CUR:
    """``A ~ C S^{-1} R`` from retrieved skeletons, without another pass over A (the
    streaming CUR of Algorithm 3; less accurate and stable than
    ``C^+ A R^+``). ``S^{-1}`` is applied as a least-squares pseudo-inverse (``S^+``), so a
    singular S does not produce Inf/NaN. ``eta``/``eta_rows`` (e.g. from
    :class:`StreamingSkeletons`) are carried into the result; when not given they are NaN,
    meaning "no certificate"."""
    U = jnp.linalg.pinv(S)
    k = S.shape[0]
    rdt = jnp.finfo(S.dtype).dtype
    eta = jnp.asarray(jnp.nan if eta is None else eta, rdt)
    eta_rows = jnp.asarray(jnp.nan if eta_rows is None else eta_rows, rdt)
    rows = jnp.arange(k) if rows is None else jnp.asarray(rows)
    cols = jnp.arange(k) if cols is None else jnp.asarray(cols)
    sv = jnp.linalg.svd(S, compute_uv=False)
    nr = jnp.sum(sv > sv[0] * jnp.finfo(rdt).eps * k).astype(jnp.int32)
    return CUR(rows, cols, C, U, R, eta, eta_rows, jnp.asarray(k, jnp.int32), nr)
