"""Randomized pivoting-based skeleton selection (thesis Chapter 2, ``ch:cur``).

The general framework (Algorithm ``algo:sketch_pivot_CUR_general``):

1. draw an embedding and build a *row-basis approximator* ``X`` (l x n) of ``A`` (m x n);
2. pivot on the columns of ``X`` -> column skeletons ``J`` (|J| = k);
3. pivot on the rows of ``C = A(:, J)`` -> row skeletons ``I``.

The thesis' named algorithms are combinations of an approximator and a pivoting scheme
(:data:`VARIANTS`):

===================  ====================================================  ===============
name                 row-basis approximator X                              pivoting
===================  ====================================================  ===============
Rand-LUPP            ``Gamma A``  (Algorithm ``algo:rand-id-lupp``)          LUPP on X^T
Rand-LUPP-1piter     ``Omega A^H A`` (one plain power iteration,            LUPP on X^T
                     Eq. ``eq:def_power_iter``)
Rand-CPQR            ``Gamma A`` (Voronin-Martinsson 2017)                   CPQR on X
Rand-CPQR-1piter     ``Omega A^H A``                                        CPQR on X
RSVD-DEIM            ``V_k^H`` from a rank-k rSVD (Eq. ``eq:rsvd_procedures``) LUPP on V_k^H
RSVD-LS              ``V_k^H`` from a rank-k rSVD                            leverage scores
SRCUR                ``Gamma A``                                            CPQR + swaps
===================  ====================================================  ===============

Every selection returns the interpolation matrix ``T = X_1^+ X`` (``X_1 = X(:, J)``) and the
a-posteriori factor ``eta = sqrt(1 + ||X_1^+ X_2||_2^2)`` of Thm
``thm:pivoting_on_rangeapprox_error_bound``:

    ``||A - C C^+ A|| <= eta ||A - A T^+ T||``   (spectral and Frobenius norms),

where ``T`` (k x n, ``T(:, J) = I``) spans a subspace of the row space of ``X``; for
``l = k`` it has the row space of ``X`` itself. With oversampling ``l > k`` the theorem is
applied to this rank-k approximator (the bound with the full l-row ``X`` on the right is
not implied when ``l > k``).

SRCUR (Chen et al. 2020): our implementation follows the paper's structure -- a randomized
complete-pivoting-type selection on a sketch, then spectrum-revealing swaps that increase
the pivot-block volume by a factor > g until every interpolation coefficient is at most g
(:func:`rdr_jax.pivoting.maxvol_refine`), for columns (on ``T``) and rows (on ``C``). What
is *not* implemented from the paper: its swap test on the Schur complement of the full
matrix ``A`` (O(mn) per test), hence the paper's gap-dependent bound on that Schur
complement is not certified; the ``eta`` certificate above holds instead. The authors'
thesis code for SRCUR was broken (its error was constant in k); ours is tested to
reconstruct exact-rank matrices and to track the other pivoting schemes' error.

Also here: the streaming variant (Algorithm ``algo:sketch_pivot_CUR_online``,
:func:`streaming_sketches`, :func:`streaming_skeletons`) and the fixed-accuracy blocked
randomized LUPP (:func:`adaptive_row_skeletons`).
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, Iterable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from rdr_jax import _validation as V
from rdr_jax import pivoting as P
from rdr_jax.operators import HIGHEST, LinearOperator, as_operator
from rdr_jax.randomized_svd import _orth, _range_sketch
from rdr_jax.sketching import SKETCHES, make_sketch

__all__ = ["VARIANTS", "THESIS_NAMES", "METHODS", "Selection", "Skeletons", "select_columns",
           "select_rows", "select_skeletons", "resolve_method", "StreamingSketches",
           "StreamingSkeletons", "streaming_sketches", "streaming_skeletons",
           "AdaptiveSelection", "adaptive_row_skeletons", "adaptive_column_skeletons"]

METHODS = ("lupp", "cpqr", "deim", "leverage", "srcur")
_ALIASES = {"ls": "leverage", "lu": "lupp", "qr": "cpqr", "qrcp": "cpqr"}
#: thesis variant name -> (pivoting method, power iterations)
VARIANTS = {
    "rand-lupp": ("lupp", 0),
    "rand-lupp-1piter": ("lupp", 1),
    "rand-cpqr": ("cpqr", 0),
    "rand-cpqr-1piter": ("cpqr", 1),
    "rsvd-deim": ("deim", 0),
    "rsvd-ls": ("leverage", 0),
    "srcur": ("srcur", 0),
}
THESIS_NAMES = {"rand-lupp": "Rand-LUPP", "rand-lupp-1piter": "Rand-LUPP-1piter",
                "rand-cpqr": "Rand-CPQR", "rand-cpqr-1piter": "Rand-CPQR-1piter",
                "rsvd-deim": "RSVD-DEIM", "rsvd-ls": "RSVD-LS", "srcur": "SRCUR"}
#: default oversampling l - k (implementation notes: k + 10 for pivoting on sketches,
#: k + 5 for the rSVD-based methods)
DEFAULT_OVERSAMPLE = {"lupp": 10, "cpqr": 10, "srcur": 10, "deim": 5, "leverage": 5}


class Selection(NamedTuple):
    """One-sided skeleton selection.

    Attributes:
      idx: (k,) int32 selected column indices ``J`` (row indices ``I`` for row selections),
        in pivot order.
      T: (k x n) interpolation matrix ``X_1^+ X`` with ``T(:, J) = I`` (the sketch-based
        interpolation coefficients; ``A ~ A(:, J) T``).
      eta: scalar ``sqrt(1 + ||X_1^+ X_2||_2^2) = ||T||_2`` (Thm
        ``thm:pivoting_on_rangeapprox_error_bound``).
    """

    idx: jax.Array
    T: jax.Array
    eta: jax.Array


class Skeletons(NamedTuple):
    """Column and row skeletons (Algorithm ``algo:sketch_pivot_CUR_general``).

    ``cols``/``rows``: (k,) int32; ``eta``/``eta_rows``: certificates of the column
    selection (on X) and of the row selection (on ``C = A(:, cols)``:
    ``||A - A R^+ R|| <= eta_rows ||A - C C^+ A||``); ``T``: column interpolation matrix
    (k x n); ``P``: row interpolation matrix ``C C(I, :)^{-1}`` (m x k, ``P(I, :) = I``).
    """

    cols: jax.Array
    rows: jax.Array
    T: jax.Array
    P: jax.Array
    eta: jax.Array
    eta_rows: jax.Array


# --------------------------------------------------------------------------------------
# argument handling
# --------------------------------------------------------------------------------------
def resolve_method(method: str, power_iters: Optional[int]) -> tuple[str, int]:
    """Map a method or thesis variant name to ``(pivoting method, power_iters)``.

    ``method`` is one of :data:`METHODS` (``"lupp"``, ``"cpqr"``, ``"deim"``,
    ``"leverage"``/``"ls"``, ``"srcur"``) or a thesis name from :data:`VARIANTS`
    (case-insensitive, e.g. ``"Rand-LUPP-1piter"``). An explicit ``power_iters`` overrides
    the variant's.
    """
    if not isinstance(method, str):
        raise TypeError(f"method must be a string; got {type(method).__name__}")
    name = method.strip().lower()
    name = _ALIASES.get(name, name)
    if name in VARIANTS:
        base, q = VARIANTS[name]
    elif name in METHODS:
        base, q = name, 0
    else:
        raise ValueError(f"unknown method {method!r}; choose one of {list(METHODS)} or a "
                         f"thesis variant {list(THESIS_NAMES.values())}")
    if power_iters is not None:
        q = V.check_int("power_iters", power_iters, low=0)
    return base, q


def _check_args(key, A, k, method, oversample, l, power_iters, sketch, sketch_options,
                cpqr_impl="lapack"):
    key = V.check_key(key)
    op = as_operator(A)
    m, n = op.shape
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be a Python int rank; got {type(k).__name__} {k!r}")
    k = int(k)
    if k < 1:
        raise ValueError(f"k must be >= 1; got {k}")
    if k > min(m, n):
        raise ValueError(f"k must be <= min(m, n) = {min(m, n)} for A of shape {(m, n)}; "
                         f"got {k}")
    base, q = resolve_method(method, power_iters)
    if l is None:
        p = DEFAULT_OVERSAMPLE[base] if oversample is None else V.check_int(
            "oversample", oversample, low=0)
        l = min(k + p, m, n)
    else:
        l = V.check_int("l", l, low=k, high=min(m, n),
                        high_desc=f"min(m, n) for A of shape {(m, n)}")
    if not isinstance(sketch, str) or sketch not in SKETCHES:
        raise ValueError(f"sketch must be one of {sorted(SKETCHES)}; got {sketch!r}")
    if base == "cpqr" or base == "srcur":
        if cpqr_impl not in ("lapack", "xla"):
            raise ValueError(f"cpqr_impl must be 'lapack' or 'xla'; got {cpqr_impl!r}")
        if cpqr_impl == "lapack" and not P.cpqr_available():
            raise P.BackendError(
                f"method {method!r} needs column-pivoted QR, which has no lowering on backend "
                f"{jax.default_backend()!r}; use method='lupp' or cpqr_impl='xla'")
    opts = tuple(sorted((sketch_options or {}).items()))
    return key, op, k, l, base, q, opts


# --------------------------------------------------------------------------------------
# row-basis approximators (Lines 1-2)
# --------------------------------------------------------------------------------------
def row_basis(key, op: LinearOperator, k: int, l: int, power_iters: int, method: str,
              sketch: str = "gaussian", stable: bool = False, sketch_options: tuple = ()):
    """Row-basis approximator for a method (Lines 1-2 of ``algo:sketch_pivot_CUR_general``).

    * ``lupp``/``cpqr``/``srcur``: ``X = Gamma A`` (l x n) for ``power_iters = 0``;
      ``X = Omega (A^H A)^q`` (Eq. ``eq:def_power_iter``; re-orthonormalised in between when
      ``stable``, Eq. ``eq:ortho_power_iter``) for ``q >= 1``.
    * ``deim``/``leverage``: ``X = V_k^H`` (k x n) from the rSVD with sketch size l and q
      (stable) power iterations; the left vectors ``U_k`` (m x k) are returned too.

    Returns ``(X, U_k or None)``.
    """
    m, n = op.shape
    if method in ("deim", "leverage"):
        Q = _orth(_range_sketch(key, op, l, power_iters, sketch, True, sketch_options))
        B = op.rmatmat(Q).conj().T
        Ut, _, Vt = jnp.linalg.svd(B, full_matrices=False)
        return Vt[:k], jnp.matmul(Q, Ut[:, :k], precision=HIGHEST)
    if power_iters == 0:
        S = make_sketch(sketch, key, l, m, dtype=op.dtype, **dict(sketch_options))
        return op.apply_sketch(S), None
    Y = _range_sketch(key, op, l, power_iters - 1, sketch, stable, sketch_options)
    return op.rmatmat(Y).conj().T, None


def _select_cols_impl(key, op, k, l, q, method, sketch, stable, opts, ls_mode, g, max_swaps,
                      cpqr_impl, need_T=True):
    """Lines 1-3: returns ``(J, T or None, eta, U_k or None)``.

    ``need_T=False`` skips the k x n interpolation matrix (eta then comes from the l x l
    Gram of X, :func:`rdr_jax.pivoting.eta_from_gram`), which is what CUR needs."""
    kx, kl = jax.random.split(key)
    X, Uk = row_basis(kx, op, k, l, q, method, sketch, stable, opts)
    if method == "lupp" or method == "deim":
        J = P.lupp(X, k)
    elif method == "cpqr" or method == "srcur":
        J = P.cpqr(X, k, impl=cpqr_impl)
    else:  # leverage
        J = P.leverage(kl, X, k, mode=ls_mode)
    if method == "srcur":
        T = P.interpolation(X, J)
        J, T, _ = P.maxvol_refine(T, J, g=g, max_swaps=max_swaps)
        T = P.interpolation(T, J)  # re-anchor T(:, J) = I after the rank-1 updates
        return J, T, P.eta_from_interpolation(T), Uk
    if need_T:
        T = P.interpolation(X, J)
        return J, T, P.eta_from_interpolation(T), Uk
    # V_k^H from the rSVD has orthonormal rows: X X^H = I
    gram = jnp.eye(X.shape[0], dtype=X.dtype) if Uk is not None else None
    return J, None, P.eta_from_gram(X, J, gram), Uk


def _rows_from_C(C, k, method, g, max_swaps, cpqr_impl, key=None, Uk=None, ls_mode="sample",
                 need_P=True):
    """Line 4: row skeletons ``I``, the row interpolation matrix ``P = C C(I,:)^{-1}`` (None
    unless ``need_P``), ``eta_rows = ||P||_2`` and the Gram ``C^H C`` (reused for U)."""
    if method == "deim":
        I = P.lupp(Uk.T, k)
    elif method == "leverage":
        I = P.leverage(key, Uk.T, k, mode=ls_mode)
    elif method == "cpqr":
        I = P.cpqr(C.T, k, impl=cpqr_impl)
    else:
        I = P.lupp(C.T, k)
    if method == "srcur":
        Tr = P.interpolation(C.T, I)  # (k x m) = (C C_I^{-1})^T
        I, Tr, _ = P.maxvol_refine(Tr, I, g=g, max_swaps=max_swaps)
        Tr = P.interpolation(Tr, I)
        return I, Tr.T, P.eta_from_interpolation(Tr), None
    gram_C = jnp.matmul(C.conj().T, C, precision=HIGHEST)
    eta_r = P.eta_rows_from_gram(gram_C, C[I])
    Pm = None
    if need_P:
        Pm = P.interpolation(C.T, I).T
    return I, Pm, eta_r, gram_C


_STATIC = ("k", "l", "q", "method", "sketch", "stable", "opts", "ls_mode", "max_swaps",
           "cpqr_impl")


@functools.partial(jax.jit, static_argnames=_STATIC)
def _select_cols_jit(key, op, k, l, q, method, sketch, stable, opts, ls_mode, g, max_swaps,
                     cpqr_impl):
    J, T, eta, _ = _select_cols_impl(key, op, k, l, q, method, sketch, stable, opts, ls_mode,
                                     g, max_swaps, cpqr_impl, True)
    return Selection(J, T, eta)


def _select_both_impl(key, op, k, l, q, method, sketch, stable, opts, ls_mode, g, max_swaps,
                      cpqr_impl, need_T=True, need_P=True):
    """All four lines; CUR passes ``need_P=False`` (and ``need_T=False`` unless certifying).
    Also returns C and its Gram ``C^H C`` (None for SRCUR)."""
    k1, k2 = jax.random.split(key)
    J, T, eta, Uk = _select_cols_impl(k1, op, k, l, q, method, sketch, stable, opts, ls_mode,
                                      g, max_swaps, cpqr_impl, need_T)
    C = op.cols(J)
    I, Pm, eta_r, gram_C = _rows_from_C(C, k, method, g, max_swaps, cpqr_impl, k2, Uk, ls_mode,
                                        need_P)
    return Skeletons(J, I, T, Pm, eta, eta_r), C, gram_C


_select_both_jit = jax.jit(_select_both_impl, static_argnames=_STATIC + ("need_T", "need_P"))


def _common_kwargs(ls_mode, g, max_swaps):
    if ls_mode not in ("sample", "topk"):
        raise ValueError(f"ls_mode must be 'sample' or 'topk'; got {ls_mode!r}")
    if not (isinstance(g, (int, float)) and g > 1.0):
        raise ValueError(f"g (SRCUR swap tolerance) must be a number > 1; got {g!r}")
    max_swaps = V.check_int("max_swaps", max_swaps, low=0)
    return ls_mode, float(g), max_swaps


def select_columns(key, A: Any, k: int, *, method: str = "lupp", oversample: int | None = None,
                   l: int | None = None, power_iters: int | None = None,
                   sketch: str = "gaussian", stable: bool = False,
                   sketch_options: dict | None = None, ls_mode: str = "sample",
                   g: float = 1.1, max_swaps: int = 256, cpqr_impl: str = "lapack") -> Selection:
    """Column skeletons by randomized pivoting (Lines 1-3 of ``algo:sketch_pivot_CUR_general``).

    Math: build ``X`` (see :func:`row_basis`), pivot to get ``J``, return
    ``T = X(:, J)^+ X`` and ``eta = sqrt(1 + ||X_1^+ X_2||_2^2)`` so that
    ``||A - C C^+ A|| <= eta ||A - A T^+ T||`` (Eq. ``eq:pivoting_on_rangeapprox_error_bound``).

    Args:
      key: ``jax.random.key``.
      A: m x n matrix or operator (dense, scipy.sparse, BCOO, implicit, factored).
      k: number of skeletons (static), ``1 <= k <= min(m, n)``.
      method: ``"lupp"`` (default; Rand-LUPP, Algorithm ``algo:rand-id-lupp``), ``"cpqr"``,
        ``"deim"``, ``"leverage"``, ``"srcur"``, or a thesis name such as
        ``"Rand-LUPP-1piter"`` (see :data:`VARIANTS`).
      oversample: ``l = k + oversample`` (default 10 for lupp/cpqr/srcur, 5 for deim/leverage).
      l: explicit sketch size, ``k <= l <= min(m, n)``.
      power_iters: q; default from the variant name (0 for plain method names).
      sketch: ``"gaussian"``, ``"srtt"`` or ``"sparse_sign"``.
      stable: orthonormalise between power iterations (the thesis' 1piter variants use the
        plain iteration, ``stable=False``; deim/leverage always use the stable rSVD).
      sketch_options: extra sketch arguments (e.g. ``{"zeta": 4}``).
      ls_mode: leverage scores: ``"sample"`` (without replacement) or ``"topk"``.
      g, max_swaps: SRCUR swap tolerance (> 1) and cap.
      cpqr_impl: ``"lapack"`` (geqp3; CPU/GPU) or ``"xla"`` (portable, also TPU).

    Returns:
      :class:`Selection` ``(idx, T, eta)``.

    Raises:
      ValueError/TypeError: bad k, l, method, sketch, NaN/Inf in A.
      rdr_jax.pivoting.BackendError: CPQR requested where it has no lowering (TPU).

    Example:
      >>> sel = select_columns(jax.random.key(0), A, 20)
      >>> C = A[:, sel.idx]; float(sel.eta)
    """
    key, op, k, l, base, q, opts = _check_args(key, A, k, method, oversample, l, power_iters,
                                               sketch, sketch_options, cpqr_impl)
    ls_mode, g, max_swaps = _common_kwargs(ls_mode, g, max_swaps)
    return _select_cols_jit(key, op, k, l, q, base, sketch, bool(stable), opts, ls_mode, g,
                            max_swaps, cpqr_impl)


def select_rows(key, A: Any, k: int, **kwargs) -> Selection:
    """Row skeletons: :func:`select_columns` on ``A^H``; ``idx`` are rows, ``T`` is k x m
    with ``A ~ T^H A(idx, :)``."""
    return select_columns(key, as_operator(A).H, k, **kwargs)


def select_skeletons(key, A: Any, k: int, *, method: str = "lupp",
                     oversample: int | None = None, l: int | None = None,
                     power_iters: int | None = None, sketch: str = "gaussian",
                     stable: bool = False, sketch_options: dict | None = None,
                     ls_mode: str = "sample", g: float = 1.1, max_swaps: int = 256,
                     cpqr_impl: str = "lapack") -> Skeletons:
    """Column and row skeletons (all four lines of ``algo:sketch_pivot_CUR_general``).

    Columns as :func:`select_columns`; rows by pivoting on ``C = A(:, J)`` (LUPP on C, CPQR
    on ``C^H`` for ``cpqr``, LUPP/leverage on the rSVD's ``U_k`` for ``deim``/``leverage``,
    LUPP + swaps for ``srcur``). Since C has full column rank, selecting rows from it is
    exact: the two-sided ID equals the column ID in exact arithmetic. Arguments as
    :func:`select_columns`.
    """
    key, op, k, l, base, q, opts = _check_args(key, A, k, method, oversample, l, power_iters,
                                               sketch, sketch_options, cpqr_impl)
    ls_mode, g, max_swaps = _common_kwargs(ls_mode, g, max_swaps)
    return _select_both_jit(key, op, k, l, q, base, sketch, bool(stable), opts, ls_mode, g,
                            max_swaps, cpqr_impl)[0]



# --------------------------------------------------------------------------------------
# Streaming (Algorithm algo:sketch_pivot_CUR_online)
# --------------------------------------------------------------------------------------
class StreamingSketches(NamedTuple):
    """Row sketch ``X = Gamma A`` (l x n) and column sketch ``Y = A Omega^H`` (m x l)."""

    X: jax.Array
    Y: jax.Array


class StreamingSkeletons(NamedTuple):
    """Result of :func:`streaming_skeletons`.

    ``cols``, ``rows``: (k,) skeletons from pivoting on X and Y; ``eta``, ``eta_rows``:
    their certificates; ``col_coeffs = X_1^+ X`` (k x n) estimates ``C^+ A`` and
    ``row_coeffs = Y Y_1^+`` (m x k) estimates ``A R^+`` -- both from the sketches alone
    (no second pass); ``X``, ``Y``: the sketches.
    """

    cols: jax.Array
    rows: jax.Array
    eta: jax.Array
    eta_rows: jax.Array
    col_coeffs: jax.Array
    row_coeffs: jax.Array
    X: jax.Array
    Y: jax.Array


@functools.partial(jax.jit, static_argnames=("l", "sketch", "opts"), donate_argnums=(0,))
def _stream_update(X, blk, i0, kg, l, sketch, opts, Omega):
    # Gamma(:, i0:i0+b) for this block: an independent sketch of the block's b coordinates
    b = blk.shape[0]
    S = make_sketch(sketch, jax.random.fold_in(kg, i0), l, b, dtype=blk.dtype, **dict(opts))
    X = X + S.apply_dense(blk)
    Yb = jnp.matmul(blk, Omega.conj().T, precision=HIGHEST)
    return X, Yb


def streaming_sketches(key, blocks: Iterable[Any], shape: tuple[int, int], l: int, *,
                       sketch: str = "gaussian", axis: int = 0, dtype=None,
                       sketch_options: dict | None = None) -> StreamingSketches:
    """Both sketches ``X = Gamma A`` and ``Y = A Omega^H`` in ONE pass over A
    (Algorithm ``algo:sketch_pivot_CUR_online``, Line 2).

    ``A`` is only available as consecutive blocks of rows (``axis=0``) or columns
    (``axis=1``), each seen once (e.g. read from disk or produced by a simulation). For a
    row block ``A_b = A(i0:i1, :)``: ``X += Gamma(:, i0:i1) A_b`` and
    ``Y(i0:i1, :) = A_b Omega^H``. ``Gamma``'s columns for a block are drawn from
    ``fold_in(key, i0)`` (independent columns, so Gamma has the chosen distribution for any
    blocking; the realisation depends on the blocking). SRTT mixes all coordinates and
    cannot be streamed this way: use ``"gaussian"`` or ``"sparse_sign"`` for Gamma
    (Omega is always Gaussian).

    Args:
      key: ``jax.random.key``.
      blocks: iterable of 2-D arrays (numpy/jax/scipy.sparse), consecutive along ``axis``.
      shape: ``(m, n)`` of the full matrix.
      l: sketch size (static).
      sketch: embedding for Gamma.
      axis: 0 for row blocks, 1 for column blocks.
      dtype: working dtype (default: the first block's, or the default float).

    Returns:
      :class:`StreamingSketches` ``(X, Y)``.

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
    if sketch == "srtt":
        raise ValueError("SRTT mixes all coordinates and cannot be applied block by block; "
                         "use sketch='gaussian' or 'sparse_sign' for streaming")
    if sketch not in SKETCHES:
        raise ValueError(f"sketch must be one of {sorted(SKETCHES)}; got {sketch!r}")
    opts = tuple(sorted((sketch_options or {}).items()))
    kg, ko = jax.random.split(key)
    if axis == 1:  # stream columns of A = rows of A^H, swap the roles of X and Y
        res = streaming_sketches(key, (_adjoint_block(b) for b in blocks), (n, m), l,
                                 sketch=sketch, axis=0, dtype=dtype, sketch_options=sketch_options)
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
        X, Yb = _stream_update(X, blk.astype(X.dtype), pos, kg, l, sketch, opts, Omega)
        Ys.append(Yb)
        pos += blk.shape[0]
    if pos != m:
        raise ValueError(f"blocks cover {pos} rows; expected m = {m}")
    return StreamingSketches(X, jnp.concatenate(Ys, axis=0))


def _dense_block(blk, dtype):
    import scipy.sparse as sp
    if sp.issparse(blk):
        blk = blk.toarray()
    arr = jnp.asarray(blk)
    if dtype is not None:
        arr = arr.astype(V.check_dtype("dtype", dtype))
    elif arr.dtype.kind not in "fc":
        raise TypeError(f"blocks must be floating point; got dtype {arr.dtype}")
    return arr


def _adjoint_block(blk):
    import scipy.sparse as sp
    if sp.issparse(blk):
        return blk.conj().T
    return jnp.asarray(blk).conj().T


@functools.partial(jax.jit, static_argnames=("k", "method", "cpqr_impl"))
def _stream_pivot(X, Y, k, method, cpqr_impl):
    if method == "cpqr":
        J = P.cpqr(X, k, impl=cpqr_impl)
        I = P.cpqr(Y.T, k, impl=cpqr_impl)
    else:
        J = P.lupp(X, k)
        I = P.lupp(Y.T, k)
    T = P.interpolation(X, J)
    Tr = P.interpolation(Y.T, I)
    return StreamingSkeletons(J, I, P.eta_from_interpolation(T), P.eta_from_interpolation(Tr),
                              T, Tr.T, X, Y)


def streaming_skeletons(key, blocks: Iterable[Any], shape: tuple[int, int], k: int, *,
                        method: str = "lupp", l: int | None = None, oversample: int = 10,
                        sketch: str = "gaussian", axis: int = 0, dtype=None,
                        sketch_options: dict | None = None,
                        cpqr_impl: str = "lapack") -> StreamingSkeletons:
    """Streaming LUPP/CPQR skeleton selection (Algorithm ``algo:sketch_pivot_CUR_online``).

    One pass builds ``X = Gamma A`` and ``Y = A Omega^H`` (:func:`streaming_sketches`);
    columns ``J`` by LUPP on ``X^T`` (or CPQR on X), rows ``I`` by LUPP on ``Y`` (or CPQR on
    ``Y^H``). Sketch-only estimates (no second pass):
    ``C^+ A ~ X_1^+ X`` (``col_coeffs``), ``A R^+ ~ Y Y_1^+`` (``row_coeffs``). With the
    skeletons retrieved in one more pass (:func:`rdr_jax.id_cur.retrieve_skeletons`),
    ``A ~ C S^{-1} R`` (:func:`rdr_jax.id_cur.cur_from_skeletons`). The remark after the
    algorithm bounds the CUR error by
    ``eta ||A - A X^+ X|| + eta_rows ||A - Y Y^+ A||``.

    Args:
      key, blocks, shape, sketch, axis, dtype, sketch_options: as
        :func:`streaming_sketches`.
      k: number of skeletons (static), ``1 <= k <= l``.
      method: ``"lupp"`` or ``"cpqr"``.
      l, oversample: sketch size (``l = k + oversample`` by default).

    Returns:
      :class:`StreamingSkeletons`.
    """
    m, n = shape
    k = V.check_int("k", k, low=1, high=min(m, n), high_desc=f"min(m, n) = {min(m, n)}")
    base, _ = resolve_method(method, None)
    if base not in ("lupp", "cpqr"):
        raise ValueError(f"streaming selection supports method 'lupp' or 'cpqr'; got {method!r}")
    if base == "cpqr" and cpqr_impl == "lapack" and not P.cpqr_available():
        raise P.BackendError("CPQR has no lowering on this backend; use method='lupp'")
    if l is None:
        l = min(k + V.check_int("oversample", oversample, low=0), m, n)
    l = V.check_int("l", l, low=k, high=min(m, n), high_desc=f"min(m, n) = {min(m, n)}")
    Xs = streaming_sketches(key, blocks, shape, l, sketch=sketch, axis=axis, dtype=dtype,
                            sketch_options=sketch_options)
    return _stream_pivot(Xs.X, Xs.Y, k, base, cpqr_impl)


# --------------------------------------------------------------------------------------
# Fixed accuracy: blocked randomized LUPP on the Schur complement
# --------------------------------------------------------------------------------------
class AdaptiveSelection(NamedTuple):
    """Result of the fixed-accuracy selection.

    ``idx``: (rank,) skeleton indices; ``W``: interpolation matrix (m x rank for rows,
    ``A ~ W A(idx, :)``; rank x n for columns, ``A ~ A(:, idx) W``); ``rank``: Python int;
    ``error_estimate``: estimated ``||A - ID||_F / ||A||_F`` of the sketch-based ID at the
    returned rank (unbiased for the squared numerator); ``norm_estimate``: estimated
    ``||A||_F``; ``converged``: whether the estimate fell below ``tol``.
    """

    idx: jax.Array
    W: jax.Array
    rank: int
    error_estimate: float
    norm_estimate: float
    converged: bool


@functools.partial(jax.jit, static_argnames=("b",))
def _adaptive_sketch(op, W, I, s, key, step, b):
    """Fresh block ``Y' = A Omega'`` and its Schur complement ``S = Y' - W Y'(I, :)``."""
    m, n = op.shape
    cap = W.shape[1]
    dt = W.dtype
    Om = jax.random.normal(jax.random.fold_in(key, step), (n, b), dtype=dt) / np.sqrt(b)
    Yn = op.matmat(Om)                                       # one pass over A
    valid = (jnp.arange(cap) < s).astype(jnp.int32)
    taken = jnp.zeros((m,), jnp.int32).at[I].max(valid) > 0
    S = Yn - jnp.matmul(W, Yn[I], precision=HIGHEST)          # unused W columns are zero
    S = jnp.where(taken[:, None], 0.0, S)
    return S, jnp.sum(jnp.abs(S) ** 2), jnp.sum(jnp.abs(Yn) ** 2)


@functools.partial(jax.jit, static_argnames=("b",), donate_argnums=(0,))
def _adaptive_extend(W, I, s, S, limit, floor, b):
    """LUPP on the block picks b rows ``I'``; ``w = S S(I', :)^+`` (least squares over all b + p
    sketch columns); ``W <- [W - w W(I', :), w]``, ``I <- [I, I']``."""
    m, bp = S.shape
    dt = W.dtype
    lu, _, perm = jax.lax.linalg.lu(S)
    piv = jnp.abs(jnp.diagonal(lu[:b, :b]))
    eps = jnp.finfo(jnp.finfo(dt).dtype).eps
    # numerically zero pivots: relative to the block, or below the rounding floor of A
    good = (piv > eps * max(m, bp) * jnp.max(piv)) & (piv > floor)
    g = jnp.sum(jnp.cumprod(good.astype(jnp.int32)))          # leading nonzero pivots
    g = jnp.minimum(g, limit)                                # never exceed max_rank
    keep = jnp.arange(b) < g
    Inew = perm[:b].astype(I.dtype)
    Snew = jnp.where(keep[:, None], S[Inew], 0.0)            # b x (b + p), junk rows zeroed
    w = jnp.matmul(S, jnp.linalg.pinv(Snew), precision=HIGHEST)   # m x b
    w = jnp.where(keep[None, :], w, 0.0)
    W = W - jnp.matmul(w, W[Inew], precision=HIGHEST)
    W = jax.lax.dynamic_update_slice(W, w, (jnp.int32(0), s.astype(jnp.int32)))
    I = jax.lax.dynamic_update_slice(I, jnp.where(keep, Inew, 0), (s.astype(jnp.int32),))
    return W, I, s + g


def adaptive_row_skeletons(key, A: Any, tol: float, *, block_size: int = 16,
                           oversample: int = 8,
                           max_rank: int | None = None) -> AdaptiveSelection:
    """Fixed-accuracy row ID by blocked randomized LUPP (implementation notes; Pearce, Chen,
    Dong and Martinsson 2023).

    Repeat with a fresh Gaussian ``Omega'`` (n x (b + p), N(0, 1/(b + p))) each block:

    1. ``Y' = A Omega'``; Schur complement ``S = Y' - W Y'(I, :)`` where ``A ~ W A(I, :)``
       is the current row ID (``S = (A - W A_I) Omega'``, so
       ``E ||S||_F^2 = ||A - W A_I||_F^2``: an unbiased residual estimate from a sketch the
       pivots never saw);
    2. stop when ``||S||_F <= tol * ||A||_F`` (``||A||_F^2`` estimated by the running mean of
       ``||Y'||_F^2``);
    3. otherwise LUPP on S picks b new rows ``I'`` with ``w = S S(I', :)^+`` (the p extra
       sketch columns oversample the interpolation, as in Rand-LUPP's ``X_1^+ X``), and
       ``W <- [W - w W(I', :), w]``, ``I <- [I, I']`` (pivots that are numerically zero --
       exact rank reached inside a block -- are dropped).

    Args:
      key: ``jax.random.key``.
      A: m x n matrix or operator.
      tol: relative Frobenius tolerance in (0, 1).
      block_size: b, rows added per step (static).
      oversample: p extra sketch columns per block (static; p = 0 is the plain blocked
        LUPP, whose sketch-based coefficients are noticeably worse).
      max_rank: cap on the rank (default ``min(m, n)``); a warning is issued if ``tol`` is
        not met by then.

    Returns:
      :class:`AdaptiveSelection` with ``W`` (m x rank), ``A ~ W A(idx, :)``.
    """
    key = V.check_key(key)
    op = as_operator(A)
    m, n = op.shape
    tol = _check_tol(tol)
    b = V.check_int("block_size", block_size, low=1, high=min(m, n))
    p = min(V.check_int("oversample", oversample, low=0), n - b)
    cap = min(m, n) if max_rank is None else V.check_int("max_rank", max_rank, low=1,
                                                          high=min(m, n))
    dt = op.dtype
    eps = float(jnp.finfo(dt).eps)
    W = jnp.zeros((m, cap + b), dt)
    I = jnp.zeros((cap + b,), jnp.int32)
    s, step = 0, 0
    norm2_sum = 0.0
    converged = False
    while True:
        S, e2, y2 = _adaptive_sketch(op, W, I, jnp.int32(s), key, jnp.int32(step), b + p)
        step += 1
        e2, norm2_sum = float(e2), norm2_sum + float(y2)
        norm2 = norm2_sum / step
        if e2 <= (tol ** 2) * norm2:
            converged = True
            break
        if s >= cap:
            warnings.warn(f"tolerance {tol:g} not reached at max_rank = {cap} (estimated "
                          f"relative error {math.sqrt(e2 / norm2):.3g})", RuntimeWarning,
                          stacklevel=2)
            break
        floor = 10.0 * eps * math.sqrt(max(m, n)) * math.sqrt(norm2 / (b + p))
        W, I, s_new = _adaptive_extend(W, I, jnp.int32(s), S, jnp.int32(cap - s), floor, b)
        s_new = int(s_new)
        if s_new == s:            # no numerically nonzero pivot: the residual is zero
            converged = True
            e2 = 0.0
            break
        s = s_new
    norm = math.sqrt(norm2)
    return AdaptiveSelection(I[:s], W[:, :s], s, math.sqrt(max(e2, 0.0)) / max(norm, 1e-300),
                             norm, converged)


def adaptive_column_skeletons(key, A: Any, tol: float, *, block_size: int = 16,
                              oversample: int = 8,
                              max_rank: int | None = None) -> AdaptiveSelection:
    """Fixed-accuracy column ID: :func:`adaptive_row_skeletons` on ``A^H``; returns ``W``
    (rank x n) with ``A ~ A(:, idx) W``."""
    res = adaptive_row_skeletons(key, as_operator(A).H, tol, block_size=block_size,
                                 oversample=oversample, max_rank=max_rank)
    return res._replace(W=res.W.conj().T)


def _check_tol(tol) -> float:
    if isinstance(tol, bool) or not isinstance(tol, (float, int, np.floating)):
        raise TypeError(f"tol must be a float in (0, 1); got {type(tol).__name__}")
    tol = float(tol)
    if not (0.0 < tol < 1.0) or not math.isfinite(tol):
        raise ValueError(f"tol must be in (0, 1) (a relative Frobenius error); got {tol}")
    return tol
