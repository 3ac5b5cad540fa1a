"""Interpolative and CUR decompositions from randomized skeletons (thesis ``subsec:cur``).

Given column skeletons ``J`` and row skeletons ``I`` (:mod:`rdr_jax.skeletons`), with
``C = A(:, J)``, ``R = A(I, :)``, ``S = A(I, J)``:

* column ID  (Eq. ``eq:def_column_id``):   ``A ~ C W``, ``W = C^+ A`` (``interp="exact"``, one
  extra pass) or ``W = X_1^+ X`` from the sketch (``interp="sketch"``, no extra pass);
* row ID     (Eq. ``eq:def_row_id``):      ``A ~ W R``, ``W = A R^+`` (or ``Y Y_1^+``-type);
* two-sided ID (Eq. ``eq:def_two_sided_id``): ``A ~ (C S^{-1}) S W`` with ``C S^{-1}``
  from the LU of C (entries bounded by 1 for LUPP rows), never forming ``S^{-1}``;
* CUR        (Eq. ``eq:def_cur``):          ``A ~ C U R`` with ``U = C^+ A R^+`` computed by the
  stable QR construction (Eq. ``eq:cur_stable``): ``C = Q_C R_C``, ``R^H = Q_R R_R``,
  ``U = R_C^{-1} (Q_C^H A Q_R) R_R^{-H}``.

Certificates (Thm ``thm:pivoting_on_rangeapprox_error_bound``): ``eta`` for the column
selection, ``eta_rows`` for rows chosen on C, and (``certify=True``) the computable
Frobenius bounds
``||A - C C^+ A||_F <= bound = eta ||A - A T^+ T||_F`` and, for CUR via Eq.
``eq:id_cur_suboptimality``,
``||A - CUR||_F <= sqrt(1 + eta_rows^2) eta ||A - A T^+ T||_F``.
:func:`certificate` evaluates the same bound in the spectral norm.

Fixed accuracy: pass a float ``tol`` in (0, 1) instead of an integer rank (like
``scipy.linalg.interpolative.interp_decomp(A, eps_or_k)``); the rank is found by the blocked
randomized LUPP of :func:`rdr_jax.skeletons.adaptive_row_skeletons`.
"""

from __future__ import annotations

import warnings
from typing import Any, Iterable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from rdr_jax import _validation as V
from rdr_jax import pivoting as P
from rdr_jax import skeletons as SK
from rdr_jax.operators import (HIGHEST, DenseOperator, FactoredOperator, LinearOperator,
                               SparseOperator, _concrete_on_cpu, _factor_core,
                               as_operator)
from rdr_jax.randomized_svd import RSVD

__all__ = ["ColumnID", "RowID", "TwoSidedID", "CUR", "interpolative", "cur", "id_to_svd",
           "lowrank_error", "certificate", "retrieve_skeletons", "cur_from_skeletons"]


def _mm(a, b):
    return jnp.matmul(a, b, precision=HIGHEST)


class ColumnID(NamedTuple):
    """Column ID ``A ~ C W`` (Eq. ``eq:def_column_id``).

    cols (k,), C (m x k) = A(:, cols), W (k x n) with ``W(:, cols) = I``; eta: certificate;
    bound: Frobenius bound ``eta ||A - A T^+ T||_F`` on ``||A - C C^+ A||_F`` (None unless
    certified); rank: k; error_estimate: relative Frobenius error estimate (fixed-accuracy
    mode; None otherwise).
    """

    cols: jax.Array
    C: jax.Array
    W: jax.Array
    eta: jax.Array
    bound: Optional[jax.Array] = None
    error_estimate: Optional[float] = None

    @property
    def rank(self) -> int:
        return int(self.cols.shape[0])

    def factors(self):
        """``(F, G, H)`` with ``A_hat = F G H^H``."""
        return self.C, None, self.W.conj().T

    def todense(self):
        return _mm(self.C, self.W)


class RowID(NamedTuple):
    """Row ID ``A ~ W R`` (Eq. ``eq:def_row_id``): rows (k,), W (m x k) with
    ``W(rows, :) = I``, R (k x n) = A(rows, :); eta, bound, error_estimate as
    :class:`ColumnID`."""

    rows: jax.Array
    W: jax.Array
    R: jax.Array
    eta: jax.Array
    bound: Optional[jax.Array] = None
    error_estimate: Optional[float] = None

    @property
    def rank(self) -> int:
        return int(self.rows.shape[0])

    def factors(self):
        return self.W, None, self.R.conj().T

    def todense(self):
        return _mm(self.W, self.R)


class TwoSidedID(NamedTuple):
    """Two-sided ID ``A ~ P S W`` (Eq. ``eq:def_two_sided_id``) with ``P = C S^{-1}``
    (m x k, ``P(rows, :) = I``), ``S = A(rows, cols)``, ``W`` (k x n) the column
    interpolation matrix. eta: column certificate; eta_rows: ``||P||_2``."""

    rows: jax.Array
    cols: jax.Array
    P: jax.Array
    S: jax.Array
    W: jax.Array
    eta: jax.Array
    eta_rows: jax.Array
    bound: Optional[jax.Array] = None
    error_estimate: Optional[float] = None

    @property
    def rank(self) -> int:
        return int(self.cols.shape[0])

    def factors(self):
        return self.P, self.S, self.W.conj().T

    def todense(self):
        return _mm(self.P, _mm(self.S, self.W))


class CUR(NamedTuple):
    """CUR decomposition ``A ~ C U R`` (Eq. ``eq:def_cur``, stable construction
    Eq. ``eq:cur_stable``).

    rows, cols (k,); C (m x k); U (k x k) = ``C^+ A R^+``; R (k x n); eta (columns) and
    eta_rows (rows on C) certificates; bound: Frobenius bound
    ``sqrt(1 + eta_rows^2) eta ||A - A T^+ T||_F`` (None unless certified).
    """

    rows: jax.Array
    cols: jax.Array
    C: jax.Array
    U: jax.Array
    R: jax.Array
    eta: jax.Array
    eta_rows: jax.Array
    bound: Optional[jax.Array] = None

    @property
    def rank(self) -> int:
        return int(self.cols.shape[0])

    def factors(self):
        return self.C, self.U, self.R.conj().T

    def todense(self):
        return _mm(self.C, _mm(self.U, self.R))


# --------------------------------------------------------------------------------------
# building blocks (traceable)
# --------------------------------------------------------------------------------------
def _gram_path(C) -> bool:
    """Use Cholesky of the Gram matrix instead of Householder QR for very tall 64-bit C.

    XLA's CPU Householder QR of a 10^6 x 200 matrix takes minutes; the Gram route
    (``R = chol(C^H C)``, CholeskyQR) costs one GEMM and is accurate to
    ``~eps cond(C)^2`` -- fine in float64 for cond(C) < ~1e6. Chosen statically by size
    (``m k^2 > 2^33``) and only for 64-bit dtypes; smaller or float32 problems use QR.
    """
    m, k = C.shape
    return m * k * k > 2 ** 33 and np.dtype(C.dtype).itemsize * (
        2 if np.dtype(C.dtype).kind == "f" else 1) >= 16


def _pinv_tri(Rm):
    """Pseudo-inverse of a small k x k factor: equals ``R^{-1}`` for a well-conditioned R and
    stays finite (singular values below ``k eps ||R||`` cut) when k exceeds the numerical
    rank -- no Inf/NaN from a rank-deficient skeleton."""
    return jnp.linalg.pinv(Rm)


def _exact_col_interp(op: LinearOperator, C, J):
    """``W = C^+ A = R_C^+ Q_C^H A`` (one pass, ``A^H Q_C``); for very tall 64-bit C,
    ``W = (C^H C)^+ (C^H A)``."""
    if _gram_path(C):
        G = jnp.matmul(C.conj().T, C, precision=HIGHEST)
        W = _mm(jnp.linalg.pinv(G, hermitian=True), op.rmatmat(C).conj().T)
    else:
        Q, Rc = jnp.linalg.qr(C, mode="reduced")
        W = _mm(_pinv_tri(Rc), op.rmatmat(Q).conj().T)          # R_C^+ Q^H A (k x n)
    return W.at[:, J].set(jnp.eye(J.shape[0], dtype=W.dtype))


def _stable_cur_U(op: LinearOperator, C, R, gram_C=None):
    """``U = C^+ A R^+`` via QR of C and R^H (Eq. ``eq:cur_stable``):
    ``U = R_C^+ (Q_C^H A Q_R) R_R^{+H}``; for very tall 64-bit factors,
    ``U = (C^H C)^+ (C^H A R^H) (R R^H)^+`` (CholeskyQR-equivalent, one GEMM per Gram)."""
    if _gram_path(C) or _gram_path(R.conj().T):
        if gram_C is None:
            gram_C = jnp.matmul(C.conj().T, C, precision=HIGHEST)
        GR = jnp.matmul(R, R.conj().T, precision=HIGHEST)
        Mid = _mm(C.conj().T, op.matmat(R.conj().T))           # C^H A R^H (k x k)
        return _mm(jnp.linalg.pinv(gram_C, hermitian=True),
                   _mm(Mid, jnp.linalg.pinv(GR, hermitian=True)))
    Qc, Rc = jnp.linalg.qr(C, mode="reduced")
    Qr, Rr = jnp.linalg.qr(R.conj().T, mode="reduced")
    M = _mm(Qc.conj().T, op.matmat(Qr))                          # Q_C^H A Q_R (k x k)
    return _mm(_pinv_tri(Rc), _mm(M, _pinv_tri(Rr).conj().T))


def _row_space_residual_fro(op: LinearOperator, T):
    """``||A - A T^+ T||_F`` for a k x n T (traceable; dense/sparse exact)."""
    Q = jnp.linalg.qr(T.conj().T, mode="reduced")[0]         # n x k
    AQ = op.matmat(Q)
    if isinstance(op, DenseOperator):
        return jnp.linalg.norm(op.array - _mm(AQ, Q.conj().T))
    a2 = jnp.sum(jnp.abs(op.data_r) ** 2)                   # sparse: ||A||_F^2 - ||A Q||_F^2
    return jnp.sqrt(jnp.maximum(a2 - jnp.sum(jnp.abs(AQ) ** 2), 0.0))


_FIX = ("k", "l", "q", "method", "sketch", "stable", "opts", "ls_mode", "max_swaps",
        "cpqr_impl", "interp", "side", "certify")


def _id_impl(key, op, k, l, q, method, sketch, stable, opts, ls_mode, g, max_swaps, cpqr_impl,
            interp, side, certify):
    if side == "row":
        res = _id_impl(key, op.H, k, l, q, method, sketch, stable, opts, ls_mode, g,
                                  max_swaps, cpqr_impl, interp, "column", certify)
        return RowID(res.cols, res.W.conj().T, res.C.conj().T, res.eta, res.bound)
    k1, k2 = jax.random.split(key)
    dense_like = isinstance(op, (DenseOperator, SparseOperator))
    need_T = interp == "sketch" or (certify and dense_like)
    J, T, eta, Uk = SK._select_cols_impl(k1, op, k, l, q, method, sketch, stable, opts,
                                         ls_mode, g, max_swaps, cpqr_impl, need_T)
    C = op.cols(J)
    W = _exact_col_interp(op, C, J) if interp == "exact" else T
    bound = None
    if certify and dense_like:
        bound = eta * _row_space_residual_fro(op, T)
    if side == "column":
        return ColumnID(J, C, W, eta, bound)
    I, Pm, eta_r, _ = SK._rows_from_C(C, k, method, g, max_swaps, cpqr_impl, k2, Uk, ls_mode)
    return TwoSidedID(I, J, Pm, C[I], W, eta, eta_r, bound)


_id_jit = jax.jit(_id_impl, static_argnames=_FIX)


def _cur_impl(key, op, k, l, q, method, sketch, stable, opts, ls_mode, g, max_swaps, cpqr_impl,
             certify):
    dense_like = isinstance(op, (DenseOperator, SparseOperator))
    sk, C, gram_C = SK._select_both_impl(key, op, k, l, q, method, sketch, stable, opts,
                                         ls_mode, g, max_swaps, cpqr_impl,
                                         need_T=bool(certify and dense_like), need_P=False)
    R = op.rows(sk.rows)
    U = _stable_cur_U(op, C, R, gram_C)
    bound = None
    if certify and dense_like:
        r = _row_space_residual_fro(op, sk.T)
        bound = jnp.sqrt(1.0 + sk.eta_rows ** 2) * sk.eta * r
    return CUR(sk.rows, sk.cols, C, U, R, sk.eta, sk.eta_rows, bound)


_cur_jit = jax.jit(_cur_impl, static_argnames=_FIX[:-3] + ("certify",))


def _runner(op, key, jitted, impl):
    """Sparse/factored operators on CPU run their products through host kernels that are
    fastest outside jit (no callback copies of m x k blocks); for them the pipeline runs op by
    op (every dense step is still a compiled XLA primitive, same results). Everything else,
    and any call made inside the caller's jit/vmap, uses the single jitted function."""
    has_sparse = isinstance(op, SparseOperator) or (
        isinstance(op, FactoredOperator) and (isinstance(op.L, SparseOperator)
                                              or isinstance(op.R, SparseOperator)))
    host = _concrete_on_cpu(key, *jax.tree_util.tree_leaves(op))
    return impl if (has_sparse and host) else jitted


# --------------------------------------------------------------------------------------
# public entry points
# --------------------------------------------------------------------------------------
def interpolative(key, A: Any, k, *, side: str = "column", method: str = "lupp",
                  oversample: int | None = None, l: int | None = None,
                  power_iters: int | None = None, sketch: str = "gaussian", stable: bool = False,
                  sketch_options: dict | None = None, interp: str = "exact",
                  ls_mode: str = "sample", g: float = 1.1, max_swaps: int = 256,
                  cpqr_impl: str = "lapack", certify: bool = True, block_size: int = 16,
                  max_rank: int | None = None, on_rank_deficient: str = "warn"):
    """Randomized interpolative decomposition (column, row or two-sided).

    Skeletons by Algorithm ``algo:sketch_pivot_CUR_general`` (default Rand-LUPP, Algorithm
    ``algo:rand-id-lupp``), then

    * ``side="column"``: ``A ~ C W``, ``C = A(:, J)`` (Eq. ``eq:def_column_id``);
    * ``side="row"``: ``A ~ W R``, ``R = A(I, :)`` (Eq. ``eq:def_row_id``);
    * ``side="two_sided"``: ``A ~ (C S^{-1}) S W`` (Eq. ``eq:def_two_sided_id``).

    With ``interp="exact"`` ``W = C^+ A`` (the best coefficients for these skeletons; one
    more pass over A); ``interp="sketch"`` uses ``W = X_1^+ X`` (no extra pass; the
    classic randomized ID). The certificate ``eta`` and (``certify=True``; dense and sparse
    inputs) the bound ``||A - C C^+ A||_F <= eta ||A - A T^+ T||_F`` come with the result.

    Args:
      key: ``jax.random.key``.
      A: m x n matrix or operator (dense, scipy.sparse, BCOO, implicit, factored).
      k: an int rank ``1 <= k <= min(m, n)`` (static), or a float tolerance in (0, 1): the
        rank is then chosen by blocked randomized LUPP so that the estimated relative
        Frobenius error is below ``tol`` (``method`` must be ``"lupp"``).
      side: ``"column"``, ``"row"`` or ``"two_sided"``.
      method, oversample, l, power_iters, sketch, stable, sketch_options, ls_mode, g,
        max_swaps, cpqr_impl: see :func:`rdr_jax.skeletons.select_columns`.
      interp: ``"exact"`` or ``"sketch"``.
      certify: compute the Frobenius bound (dense/sparse inputs; use :func:`certificate` for
        others).
      block_size, max_rank: fixed-accuracy mode only.
      on_rank_deficient: k above the numerical rank of A makes the skeleton ill-conditioned.
        ``"warn"`` (default) warns when the skeleton's condition number exceeds 1/eps and
        ``"raise"`` raises ``ValueError``; ``"ignore"`` skips the check (which needs
        concrete values). Use the tolerance mode to let the rank be found.

    Returns:
      :class:`ColumnID`, :class:`RowID` or :class:`TwoSidedID`.

    Example:
      >>> cid = interpolative(jax.random.key(0), A, 20)
      >>> jnp.linalg.norm(A - cid.C @ cid.W) / jnp.linalg.norm(A)
      >>> rid = interpolative(jax.random.key(0), A, 1e-6, side="row")  # fixed accuracy
    """
    if side not in ("column", "row", "two_sided"):
        raise ValueError(f"side must be 'column', 'row' or 'two_sided'; got {side!r}")
    if interp not in ("exact", "sketch"):
        raise ValueError(f"interp must be 'exact' or 'sketch'; got {interp!r}")
    _check_rank_policy(on_rank_deficient)
    if _is_tol(k):
        return _interpolative_tol(key, A, k, side=side, method=method, block_size=block_size,
                                  max_rank=max_rank, interp=interp, certify=certify)
    key, op, k, l, base, q, opts = SK._check_args(key, A, k, method, oversample, l, power_iters,
                                                  sketch, sketch_options, cpqr_impl)
    ls_mode, g, max_swaps = SK._common_kwargs(ls_mode, g, max_swaps)
    res = _runner(op, key, _id_jit, _id_impl)(key, op, k, l, q, base, sketch, bool(stable), opts, ls_mode, g, max_swaps,
                  cpqr_impl, interp, side, bool(certify))
    skel = res.R.conj().T if side == "row" else (res.C if side == "column" else res.P @ res.S)
    _rank_check(skel, k, on_rank_deficient)
    return res


def cur(key, A: Any, k: int, *, method: str = "lupp", oversample: int | None = None,
        l: int | None = None, power_iters: int | None = None, sketch: str = "gaussian",
        stable: bool = False, sketch_options: dict | None = None, ls_mode: str = "sample",
        g: float = 1.1, max_swaps: int = 256, cpqr_impl: str = "lapack", certify: bool = True,
        on_rank_deficient: str = "warn") -> CUR:
    """Randomized CUR decomposition ``A ~ C U R`` (Eqs. ``eq:def_cur``, ``eq:cur_stable``).

    Columns by pivoting on a row-basis approximator, rows by pivoting on ``C`` (Algorithm
    ``algo:sketch_pivot_CUR_general``), ``U = C^+ A R^+`` by the stable QR construction.
    The thesis' seven algorithms are ``method="Rand-LUPP"``, ``"Rand-LUPP-1piter"``,
    ``"Rand-CPQR"``, ``"Rand-CPQR-1piter"``, ``"RSVD-DEIM"``, ``"RSVD-LS"``, ``"SRCUR"``
    (or the base names ``"lupp"``, ``"cpqr"``, ``"deim"``, ``"leverage"``, ``"srcur"`` with
    ``power_iters``).

    Certificates: ``eta`` (columns), ``eta_rows`` (rows) and, with ``certify`` on dense and
    sparse inputs, ``bound`` with ``||A - CUR||_F <= bound`` (Thm
    ``thm:pivoting_on_rangeapprox_error_bound`` with Eq. ``eq:id_cur_suboptimality``).

    Args:
      key, A, k, ...: as :func:`interpolative` (k must be an int here).

    Returns:
      :class:`CUR` ``(rows, cols, C, U, R, eta, eta_rows, bound)``.

    Example:
      >>> d = cur(jax.random.key(0), A, 50, method="Rand-LUPP-1piter")
      >>> err = lowrank_error(A, d)          # {'fro': ..., '2': ...}
    """
    _check_rank_policy(on_rank_deficient)
    if _is_tol(k):
        raise TypeError("cur() takes an integer rank k; for a tolerance use "
                        "interpolative(key, A, tol, side='two_sided') or pick k from it")
    key, op, k, l, base, q, opts = SK._check_args(key, A, k, method, oversample, l, power_iters,
                                                  sketch, sketch_options, cpqr_impl)
    ls_mode, g, max_swaps = SK._common_kwargs(ls_mode, g, max_swaps)
    res = _runner(op, key, _cur_jit, _cur_impl)(key, op, k, l, q, base, sketch, bool(stable), opts, ls_mode, g, max_swaps,
                   cpqr_impl, bool(certify))
    _rank_check(res.C, k, on_rank_deficient)
    return res


def _is_tol(k) -> bool:
    return isinstance(k, (float, np.floating)) and not isinstance(k, bool)


def _check_rank_policy(p):
    if p not in ("warn", "raise", "ignore"):
        raise ValueError(f"on_rank_deficient must be 'warn', 'raise' or 'ignore'; got {p!r}")


def _rank_check(C, k, policy):
    """k above the numerical rank of A: the skeleton block C (m x k, or R^H) is numerically
    rank deficient. Proxy: the diagonal of the R factor of C (columns in pivot order),
    ``min |R_ii| <= eps max(m, n) max |R_ii|``. Checked on the host for C up to 2^24
    entries (skipped for larger inputs and inside jit/vmap)."""
    if policy == "ignore" or not V.is_concrete(C) or C.ndim != 2 or C.size > 2 ** 24:
        return
    Cn = np.asarray(C)
    r = np.abs(np.diagonal(np.linalg.qr(Cn.astype(np.complex128 if np.iscomplexobj(Cn)
                                                   else np.float64), mode="r")))
    eps = float(jnp.finfo(C.dtype).eps)
    thr = r.max() * eps * max(Cn.shape) if r.size else 0.0
    if r.size and (r.max() == 0 or r.min() <= thr):
        numrank = int(np.sum(r > thr))
        msg = (f"k = {k} exceeds the numerical rank of A (the selected skeleton has numerical "
               f"rank {numrank}); the factors are ill-conditioned. Use a smaller k or pass a "
               f"tolerance (e.g. interpolative(key, A, 1e-8)) to choose the rank")
        if policy == "raise":
            raise ValueError(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)


def _interpolative_tol(key, A, tol, *, side, method, block_size, max_rank, interp, certify):
    base, _ = SK.resolve_method(method, None)
    if base != "lupp":
        raise ValueError(f"fixed-accuracy mode (float tol) uses blocked randomized LUPP; "
                         f"method must be 'lupp', got {method!r}")
    key = V.check_key(key)
    op = as_operator(A)
    kc, kr = jax.random.split(key)
    if side == "row":
        sel = SK.adaptive_row_skeletons(kr, op, tol, block_size=block_size, max_rank=max_rank)
        I = sel.idx
        R = op.rows(I)
        eta = P.eta_from_interpolation(sel.W.conj().T)
        est = sel.error_estimate
        if interp == "sketch":
            W = sel.W
        else:
            I, Rh, Wh, est = _truncate_exact(op.H, I, R.conj().T, tol, est)
            R, W = Rh.conj().T, Wh.conj().T
        return RowID(I, W, R, eta, None, est)
    sel = SK.adaptive_column_skeletons(kc, op, tol, block_size=block_size, max_rank=max_rank)
    J = sel.idx
    C = op.cols(J)
    eta = P.eta_from_interpolation(sel.W)
    est = sel.error_estimate
    if interp == "sketch":
        W = sel.W
    else:
        J, C, W, est = _truncate_exact(op, J, C, tol, est)
    if side == "column":
        return ColumnID(J, C, W, eta, None, est)
    k = int(J.shape[0])
    I, Pm, eta_r, _ = SK._rows_from_C(C, k, "lupp", 1.1, 0, "lapack")
    return TwoSidedID(I, J, Pm, C[I], W, eta, eta_r, None, est)


def _truncate_exact(op, J, C, tol, est):
    """Shortest pivot prefix whose *exact-coefficient* column ID meets ``tol``.

    With ``C = Q R`` (pivot order) and ``B = Q^H A``, the prefix ``C_j`` has
    ``||A - C_j C_j^+ A||_F^2 = ||A||_F^2 - sum_{i<=j} ||B(i, :)||^2`` (nested Q), so one pass
    gives the error of every prefix. Used when ``||A||_F`` is exact (dense/sparse inputs) and
    ``tol^2`` is well above the rounding level of that difference; otherwise the blocked
    estimate's rank is kept. Returns ``(J, C, W, relative error)``."""
    k = int(J.shape[0])
    if k == 0:
        return J, C, jnp.zeros((0, op.shape[1]), op.dtype), est
    eps = float(jnp.finfo(op.dtype).eps)
    exact_norm = isinstance(op, (DenseOperator, SparseOperator))
    if not exact_norm or tol ** 2 < 1e3 * eps:
        return J, C, _exact_col_interp(op, C, J), est
    Q, Rc = jnp.linalg.qr(C, mode="reduced")
    B = op.rmatmat(Q).conj().T                                   # k x n
    a2 = float(jnp.sum(jnp.abs(op.array) ** 2) if isinstance(op, DenseOperator)
               else jnp.sum(jnp.abs(op.data_r) ** 2))
    err2 = a2 - np.cumsum(np.asarray(jnp.sum(jnp.abs(B) ** 2, axis=1), np.float64))
    ok = np.nonzero(err2 <= tol ** 2 * a2)[0]
    j = int(ok[0]) + 1 if ok.size else k
    W = jax.scipy.linalg.solve_triangular(Rc[:j, :j], B[:j], lower=False)
    W = W.at[:, J[:j]].set(jnp.eye(j, dtype=W.dtype))
    return J[:j], C[:, :j], W, float(np.sqrt(max(err2[j - 1], 0.0) / a2))


def id_to_svd(decomp) -> RSVD:
    """Truncated SVD from an ID or CUR: ``A_hat = F G H^H`` -> ``U diag(s) V^H``.

    ``F = Q_F R_F``, ``H = Q_H R_H`` (thin QR), SVD of the k x k core
    ``R_F G R_H^H = U_c S V_c^H``; ``U = Q_F U_c``, ``V = Q_H V_c`` (like
    ``scipy.linalg.interpolative.id_to_svd``). O((m + n) k^2).
    """
    F, G, H = decomp.factors()
    Qf, Rf = jnp.linalg.qr(F, mode="reduced")
    Qh, Rh = jnp.linalg.qr(H, mode="reduced")
    core = Rf if G is None else _mm(Rf, G)
    core = _mm(core, Rh.conj().T)
    Uc, s, Vch = jnp.linalg.svd(core, full_matrices=False)
    return RSVD(_mm(Qf, Uc), s, _mm(Vch, Qh.conj().T))


# --------------------------------------------------------------------------------------
# errors and certificates
# --------------------------------------------------------------------------------------
def lowrank_error(A: Any, approx, *, key=None, dense_limit: int = 1 << 26,
                  num_matvecs: int = 40) -> dict:
    """``||A - A_hat||_F`` and ``||A - A_hat||_2`` for a low-rank ``A_hat = F G H^H``.

    ``approx`` is an ID/CUR result (anything with ``.factors()``), an :class:`RSVD`, or a
    tuple ``(F, G, H)`` (G may be None). Exact for dense inputs and for sparse inputs with
    ``m n <= dense_limit`` (densified, float64 SVD), and for factored inputs
    ``A = L diag(d) R^H`` when ``range(F) in range(L)``, ``range(H) in range(R)`` (true for
    anything built from A's rows, columns and products): then
    ``A - A_hat = Q_L (K - c_F G c_H^H) Q_R^H`` with an r x r core. Otherwise estimated with
    ``key`` (Hutch++ and the power method from :mod:`rdr_jax.norms`).

    Returns:
      ``{"fro": float, "2": float, "exact": bool}``.
    """
    op = as_operator(A)
    F, G, H = _factors_of(approx)
    if isinstance(op, FactoredOperator):
        out = _factored_error(op, F, G, H)
        if out is not None:
            return out
    m, n = op.shape
    if isinstance(op, DenseOperator) or (m * n <= dense_limit and not isinstance(
            op, FactoredOperator)):
        wide = np.complex128 if np.dtype(op.dtype).kind == "c" else np.float64
        Ad = (op.to_scipy().toarray() if isinstance(op, SparseOperator)
              else np.asarray(op.todense())).astype(wide)
        Ah = np.asarray(F, wide)
        if G is not None:
            Ah = Ah @ np.asarray(G, wide)
        E = Ad - Ah @ np.asarray(H, wide).conj().T
        s = np.linalg.svd(E, compute_uv=False)
        return {"fro": float(np.sqrt(np.sum(s ** 2))), "2": float(s[0]), "exact": True}
    if key is None:
        raise ValueError("A is too large to densify and not factored: pass key= for a "
                         "randomized error estimate")
    from rdr_jax import norms
    from rdr_jax.operators import implicit_operator
    Gm = jnp.eye(F.shape[1], dtype=F.dtype) if G is None else G

    def mv(X):
        return op.matmat(X) - _mm(F, _mm(Gm, _mm(H.conj().T, X)))

    def rmv(Y):
        return op.rmatmat(Y) - _mm(H, _mm(Gm.conj().T, _mm(F.conj().T, Y)))

    E = implicit_operator(mv, rmv, op.shape, op.dtype)
    k1, k2 = jax.random.split(V.check_key(key))
    return {"fro": float(norms.frobenius_norm(k1, E, num_matvecs=num_matvecs)),
            "2": float(norms.spectral_norm(k2, E)), "exact": False}


def _factors_of(approx):
    if isinstance(approx, RSVD):
        return approx.U * approx.s[None, :], None, approx.Vt.conj().T
    if hasattr(approx, "factors"):
        return approx.factors()
    if isinstance(approx, tuple) and len(approx) == 3:
        return approx
    raise TypeError("approx must be an ID/CUR result, an RSVD, or a tuple (F, G, H)")


def _factor_coords(Fop: LinearOperator, X: np.ndarray):
    """``M`` with ``Fop = Q M`` (Q orthonormal) and ``c = Q^H X = M^{-H} Fop^H X``."""
    M = _factor_core(Fop)
    FhX = np.asarray(Fop.rmatmat(jnp.asarray(X, dtype=Fop.dtype)), dtype=M.dtype)
    c = np.linalg.lstsq(M.conj().T, FhX, rcond=None)[0]
    return M, c


def _factored_error(op: FactoredOperator, F, G, H):
    wide = np.complex128 if np.dtype(op.dtype).kind == "c" else np.float64
    F = np.asarray(F, wide)
    H = np.asarray(H, wide)
    ML, cF = _factor_coords(op.L, F)
    MR, cH = _factor_coords(op.R, H)
    # containment check: ||F - Q_L c_F||_F^2 = ||F||_F^2 - ||c_F||_F^2
    for name, X, c in (("F", F, cF), ("H", H, cH)):
        nx = np.sum(np.abs(X) ** 2)
        out = nx - np.sum(np.abs(c) ** 2)
        if nx > 0 and out > 1e-6 * nx:
            warnings.warn(f"lowrank_error: the approximation's {name} factor is not in the "
                          "range of A's factor; falling back", RuntimeWarning, stacklevel=3)
            return None
    K = (ML * np.asarray(op.d, wide)[None, :]) @ MR.conj().T
    Gm = np.eye(F.shape[1]) if G is None else np.asarray(G, wide)
    core = K - cF @ Gm @ cH.conj().T
    s = np.linalg.svd(core, compute_uv=False)
    return {"fro": float(np.sqrt(np.sum(s ** 2))), "2": float(s[0]), "exact": True}


def certificate(A: Any, selection, *, key=None) -> dict:
    """The bound of Thm ``thm:pivoting_on_rangeapprox_error_bound`` in both norms.

    For a :class:`rdr_jax.skeletons.Selection` (or anything with ``T`` and ``eta``):
    ``||A - C C^+ A|| <= eta ||A - A T^+ T||`` with ``C = A(:, idx)``. The right-hand side is
    evaluated exactly when :func:`lowrank_error` can (dense, small sparse, factored), else
    estimated with ``key``.

    Returns:
      ``{"fro": bound_F, "2": bound_2, "eta": eta, "residual_fro": ..., "residual_2": ...}``.
    """
    op = as_operator(A)
    T = selection.T
    Q = jnp.linalg.qr(T.conj().T, mode="reduced")[0]
    AQ = op.matmat(Q)
    r = lowrank_error(op, (AQ, None, Q), key=key)
    eta = float(selection.eta)
    return {"fro": eta * r["fro"], "2": eta * r["2"], "eta": eta, "residual_fro": r["fro"],
            "residual_2": r["2"]}


# --------------------------------------------------------------------------------------
# streaming helpers
# --------------------------------------------------------------------------------------
def retrieve_skeletons(blocks: Iterable[Any], shape: tuple[int, int], rows, cols, *,
                       axis: int = 0):
    """One pass over a blocked matrix collecting ``C = A(:, cols)``, ``R = A(rows, :)`` and
    ``S = A(rows, cols)`` (the pass that follows :func:`rdr_jax.skeletons.streaming_skeletons`).

    Returns ``(C, S, R)`` as jax arrays.
    """
    m, n = shape
    rows = np.asarray(rows)
    cols = np.asarray(cols)
    C = R = None
    pos = 0
    for blk in blocks:
        blk = blk.toarray() if sp.issparse(blk) else np.asarray(blk)
        if axis == 0:
            b = blk.shape[0]
            if C is None:
                C = np.zeros((m, cols.size), blk.dtype)
                R = np.zeros((rows.size, n), blk.dtype)
            C[pos:pos + b] = blk[:, cols]
            sel = (rows >= pos) & (rows < pos + b)
            R[sel] = blk[rows[sel] - pos]
        else:
            b = blk.shape[1]
            if C is None:
                C = np.zeros((m, cols.size), blk.dtype)
                R = np.zeros((rows.size, n), blk.dtype)
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
    streaming CUR of ``algo:sketch_pivot_CUR_online``; less accurate and stable than
    ``C^+ A R^+``). ``S^{-1}`` is applied as a least-squares pseudo-inverse (``S^+``), so a
    singular S does not produce Inf/NaN. ``eta``/``eta_rows`` (e.g. from
    :class:`rdr_jax.skeletons.StreamingSkeletons`) are carried into the result; when not
    given they are NaN, meaning "no certificate"."""
    U = jnp.linalg.pinv(S)
    k = S.shape[0]
    rdt = jnp.finfo(S.dtype).dtype
    eta = jnp.asarray(jnp.nan if eta is None else eta, rdt)
    eta_rows = jnp.asarray(jnp.nan if eta_rows is None else eta_rows, rdt)
    rows = jnp.arange(k) if rows is None else jnp.asarray(rows)
    cols = jnp.arange(k) if cols is None else jnp.asarray(cols)
    return CUR(rows, cols, C, U, R, eta, eta_rows, None)
