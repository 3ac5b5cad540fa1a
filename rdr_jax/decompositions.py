"""Interpolative and CUR decompositions from randomized skeletons (thesis ``subsec:cur``).

The whole pipeline, sketch -> row-basis approximator -> pivoting -> decomposition, is one
jitted function per call signature (:mod:`rdr_jax.selection` holds Lines 1-4 of Algorithm
``algo:sketch_pivot_CUR_general``; this module forms the factors). With column skeletons
``cols`` and row skeletons ``rows``, ``C = A(:, cols)``, ``R = A(rows, :)``,
``S = A(rows, cols)``:

* column ID  (Eq. ``eq:def_column_id``):   ``A ~ C W``, ``W = C^+ A`` (``interp="exact"``, one
  extra pass) or ``W = X_1^+ X`` from the sketch (``interp="sketch"``, no extra pass);
* row ID     (Eq. ``eq:def_row_id``):      ``A ~ W R``, ``W = A R^+`` (or the sketch analogue);
* two-sided ID (Eq. ``eq:def_two_sided_id``): ``A ~ W_rows S W_cols`` with
  ``W_rows = C S^{-1}`` (entries bounded by 1 for LUPP rows), never forming ``S^{-1}``;
* CUR        (Eq. ``eq:def_cur``):          ``A ~ C U R`` with ``U = C^+ A R^+`` computed by the
  stable QR construction (Eq. ``eq:cur_stable``): ``C = Q_C R_C``, ``R^H = Q_R R_R``,
  ``U = R_C^{-1} (Q_C^H A Q_R) R_R^{-H}``.

Certificates (Thm ``thm:pivoting_on_rangeapprox_error_bound``): ``eta`` for the column
selection, ``eta_rows`` for rows chosen on C, and (``certify=True``; dense and sparse A) the
computable Frobenius bounds ``||A - C C^+ A||_F <= bound = eta ||A - A W^+ W||_F`` (W the
sketch's interpolation matrix) and, for CUR via Eq. ``eq:id_cur_suboptimality``,
``||A - CUR||_F <= sqrt(1 + eta_rows^2) eta ||A - A W^+ W||_F``.

Fixed accuracy: pass a float ``tol`` in (0, 1) instead of an integer rank (like
``scipy.linalg.interpolative.interp_decomp(A, eps_or_k)``); the rank is found by the blocked
randomized LUPP of :mod:`rdr_jax.fixed_accuracy` inside the same jitted computation.

Inside ``jax.jit`` no value check can raise. What the caller gets instead: every result
carries ``numerical_rank`` (the numerical rank of the skeleton block; ``< rank`` means k
exceeded the numerical rank of A; 0 means A is numerically zero), ``eta`` is NaN when A holds
NaN/Inf, and in fixed-accuracy mode ``error_estimate > tol`` means max_rank was reached.
Eager calls read these three scalars and warn (or raise, ``on_rank_deficient="raise"``). The
jitted computations contain no host callbacks, so JAX's persistent compilation cache can
store them (see the README's "Compile time"). On the CPU backend the first call of each
signature (64-bit data) runs a quickly compiled, speculative executable and the second call
compiles the optimised one (tiered compilation, ``rdr_jax._jit``; off with
``RDR_JAX_TIERED_COMPILE=0``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from rdr_jax import _jit
from rdr_jax import _validation as V
from rdr_jax import certify as CE
from rdr_jax import fixed_accuracy as FA
from rdr_jax import pivoting as P
from rdr_jax._tallqr import as_orthonormalizer
from rdr_jax.operators import HIGHEST, DenseOperator, LinearOperator, SparseOperator, as_operator
from rdr_jax.randomized_svd import RSVD
from rdr_jax.selection import (LUPP, Method, check_rank, pivot_columns, pivot_rows,
                               resolve_method, sketch_size)

__all__ = ["ColumnID", "RowID", "TwoSidedID", "CUR", "interpolative", "cur", "id_to_svd"]


def _mm(a, b):
    return jnp.matmul(a, b, precision=HIGHEST)


class ColumnID(NamedTuple):
    """Column ID ``A ~ C W`` (Eq. ``eq:def_column_id``).

    cols (k,), C (m x k) = A(:, cols), W (k x n) with ``W(:, cols) = I``; eta: certificate;
    rank: number of valid skeletons (k; in fixed-accuracy mode the rank found, with the
    arrays padded to ``max_rank`` by zeros: see :meth:`trim`); numerical_rank: numerical
    rank of C (``< rank`` flags k above the numerical rank of A); bound: Frobenius bound
    ``eta ||A - A T^+ T||_F`` on ``||A - C C^+ A||_F`` (None unless ``certify``);
    error_estimate: relative Frobenius error estimate (fixed-accuracy mode; else None);
    error_bound: fixed accuracy with ``confidence``: relative Frobenius bound that holds
    with probability >= confidence (exact for dense/sparse A with ``interp="exact"``; NaN
    when tol could not be certified); error_certificate: :class:`rdr_jax.ErrorCertificate`
    of the returned factors when ``confidence`` is given (else None).
    """

    cols: jax.Array
    C: jax.Array
    W: jax.Array
    eta: jax.Array
    rank: jax.Array
    numerical_rank: jax.Array
    bound: Optional[jax.Array] = None
    error_estimate: Optional[jax.Array] = None
    error_bound: Optional[jax.Array] = None
    error_certificate: Optional[CE.ErrorCertificate] = None

    def factors(self):
        """``(F, G, H)`` with ``A_hat = F G H^H``."""
        return self.C, None, self.W.conj().T

    def todense(self):
        return _mm(self.C, self.W)

    def trim(self) -> "ColumnID":
        """The same ID cut to its (concrete) ``rank`` (host call; not under jit)."""
        r = int(self.rank)
        return self._replace(cols=self.cols[:r], C=self.C[:, :r], W=self.W[:r])


class RowID(NamedTuple):
    """Row ID ``A ~ W R`` (Eq. ``eq:def_row_id``): rows (k,), W (m x k) with
    ``W(rows, :) = I``, R (k x n) = A(rows, :); other fields as :class:`ColumnID`."""

    rows: jax.Array
    W: jax.Array
    R: jax.Array
    eta: jax.Array
    rank: jax.Array
    numerical_rank: jax.Array
    bound: Optional[jax.Array] = None
    error_estimate: Optional[jax.Array] = None
    error_bound: Optional[jax.Array] = None
    error_certificate: Optional[CE.ErrorCertificate] = None

    def factors(self):
        return self.W, None, self.R.conj().T

    def todense(self):
        return _mm(self.W, self.R)

    def trim(self) -> "RowID":
        r = int(self.rank)
        return self._replace(rows=self.rows[:r], W=self.W[:, :r], R=self.R[:r])


class TwoSidedID(NamedTuple):
    """Two-sided ID ``A ~ W_rows S W_cols`` (Eq. ``eq:def_two_sided_id``) with
    ``W_rows = C S^{-1}`` (m x k, ``W_rows(rows, :) = I``), ``S = A(rows, cols)``,
    ``W_cols`` (k x n) the column interpolation matrix. eta: column certificate;
    eta_rows: ``||W_rows||_2``; other fields as :class:`ColumnID`."""

    rows: jax.Array
    cols: jax.Array
    W_rows: jax.Array
    S: jax.Array
    W_cols: jax.Array
    eta: jax.Array
    eta_rows: jax.Array
    rank: jax.Array
    numerical_rank: jax.Array
    bound: Optional[jax.Array] = None
    error_estimate: Optional[jax.Array] = None
    error_bound: Optional[jax.Array] = None
    error_certificate: Optional[CE.ErrorCertificate] = None

    def factors(self):
        return self.W_rows, self.S, self.W_cols.conj().T

    def todense(self):
        return _mm(self.W_rows, _mm(self.S, self.W_cols))

    def trim(self) -> "TwoSidedID":
        r = int(self.rank)
        return self._replace(rows=self.rows[:r], cols=self.cols[:r], W_rows=self.W_rows[:, :r],
                             S=self.S[:r, :r], W_cols=self.W_cols[:r])


class CUR(NamedTuple):
    """CUR decomposition ``A ~ C U R`` (Eq. ``eq:def_cur``, stable construction
    Eq. ``eq:cur_stable``).

    rows, cols (k,); C (m x k); U (k x k) = ``C^+ A R^+``; R (k x n); eta (columns) and
    eta_rows (rows on C) certificates; rank, numerical_rank as :class:`ColumnID`; bound:
    Frobenius bound ``sqrt(1 + eta_rows^2) eta ||A - A T^+ T||_F`` (None unless certified);
    error_certificate: :class:`rdr_jax.ErrorCertificate` when ``confidence`` is given.
    """

    rows: jax.Array
    cols: jax.Array
    C: jax.Array
    U: jax.Array
    R: jax.Array
    eta: jax.Array
    eta_rows: jax.Array
    rank: jax.Array
    numerical_rank: jax.Array
    bound: Optional[jax.Array] = None
    error_certificate: Optional[CE.ErrorCertificate] = None

    def factors(self):
        return self.C, self.U, self.R.conj().T

    def todense(self):
        return _mm(self.C, _mm(self.U, self.R))


# --------------------------------------------------------------------------------------
# building blocks (traceable)
# --------------------------------------------------------------------------------------
def _gram_path(C) -> bool:
    """Use the Gram matrix instead of Householder QR for very tall 64-bit C.

    XLA's CPU Householder QR of a 10^6 x 200 matrix takes minutes; the Gram route
    (``C^H C``, CholeskyQR-equivalent) costs one GEMM and is accurate to ``~eps cond(C)^2``
    -- fine in float64 for cond(C) < ~1e6. Chosen statically by size (``m k^2 > 2^33``) and
    only for 64-bit dtypes; smaller or float32 problems use QR.
    """
    m, k = C.shape
    return m * k * k > 2 ** 33 and np.dtype(C.dtype).itemsize * (
        2 if np.dtype(C.dtype).kind == "f" else 1) >= 16


def _numerical_rank(r, m):
    """Numerical rank from the singular values (or |diag R| of a QR) ``r`` of an m x k block:
    ``#{r_i > eps max(m, k) max r}`` (0 for a zero block)."""
    eps = jnp.finfo(r.dtype).eps
    thr = jnp.max(r) * eps * max(m, r.shape[0])
    return jnp.sum(r > thr).astype(jnp.int32)


def _tall_qr(C, ortho=None):
    """Thin QR of the tall skeleton block C: Householder, or ``ortho``'s (the method's
    resolved orthonormaliser: :class:`rdr_jax._tallqr.CholeskyQR2` when A's rows are sharded,
    so that C -- row-sharded like A -- is never gathered)."""
    return as_orthonormalizer("householder" if ortho is None else ortho).qr(C)  # "auto": HH


def _skeleton_qr(C, ortho=None, G=None):
    """``(Q, R_C, numerical rank)`` of the skeleton block C (Gram route for huge C, which
    reuses ``G = C^H C`` when the caller already formed it)."""
    if _gram_path(C):
        G = _mm(C.conj().T, C) if G is None else G
        sv = jnp.sqrt(jnp.maximum(jnp.linalg.eigvalsh(G), 0.0))
        return None, G, _numerical_rank(sv, C.shape[0])
    Q, Rc = _tall_qr(C, ortho)
    return Q, Rc, _numerical_rank(jnp.abs(jnp.diagonal(Rc)), C.shape[0])


#: the normal-equations route of :func:`_exact_col_interp` is taken when the estimate of
#: ``u k cond(C)^2`` is below this (its forward error in W is ``~u cond(C)^2``)
_NORMAL_EQ_TOL = 1e-9


def _gram_cond2(G, L, iters: int = 4):
    """Estimate of ``cond(C)^2 = lambda_max(G) / lambda_min(G)`` for ``G = C^H C = L L^H``:
    ``trace(G)`` (>= lambda_max) times a power-iteration estimate of ``lambda_max(G^{-1})``
    (two k x k triangular solves per step). Non-finite when the Cholesky failed."""
    k = G.shape[0]
    v = jnp.cos(1.7 * jnp.arange(k) + 0.3).astype(G.dtype)[:, None]   # fixed, dense start
    lam = jnp.ones((), V.real_dtype(G.dtype))
    for _ in range(iters):
        y = jax.lax.linalg.triangular_solve(L, v, left_side=True, lower=True)
        x = jax.lax.linalg.triangular_solve(L, y, left_side=True, lower=True,
                                            transpose_a=True, conjugate_a=True)
        lam = jnp.linalg.norm(x) / jnp.linalg.norm(v)
        v = x / jnp.linalg.norm(x)
    return jnp.real(jnp.trace(G)) * lam


def _exact_col_interp(op: LinearOperator, C, J, ortho=None, speculate: bool = False):
    """``W = C^+ A`` (Eq. ``eq:def_column_id``, exact coefficients; one pass over A).
    Returns ``(W, numerical rank of C, ok)``.

    * Well-conditioned 64-bit C (estimated ``u k cond(C)^2 <= 1e-9``, see
      :func:`_gram_cond2`): the normal equations ``W = L^{-H} L^{-1} (C^H A)`` with
      ``C^H C = L L^H`` -- one k x k Cholesky, one GEMM ``C^H A`` and two triangular solves;
      forward error ``~u cond(C)^2 <= 1e-9 / k``. About 20% faster than the QR route on the
      4000 x 200 skeleton of ``experiments/bench_cur.py``, and no tall QR at all (nothing
      to gather when A's rows are sharded).
    * Otherwise (float32, ill-conditioned C, k above the numerical rank of A):
      ``W = R_C^+ Q_C^H A`` from a QR of C (Householder, or the method's CholeskyQR2 on
      row-sharded A); the pseudo-inverse of the small factor stays finite when R_C is
      singular. For very tall 64-bit C, ``W = (C^H C)^+ (C^H A)``.

    A ``lax.cond`` picks the route at run time (under ``vmap`` both run). ``speculate=True``
    (the first call's quick tier, ``rdr_jax._jit``) traces the normal-equations route only
    and returns its precondition as ``ok`` (False: the caller reruns the full program);
    otherwise ``ok`` is True."""
    k = C.shape[1]

    def qr_route(G=None):
        Q, Rc, nr = _skeleton_qr(C, ortho, G)
        if Q is None:
            return _mm(jnp.linalg.pinv(Rc, hermitian=True), op.rmatmat(C).conj().T), nr
        return _mm(jnp.linalg.pinv(Rc), op.rmatmat(Q).conj().T), nr     # R_C^+ Q^H A

    ok = True
    if np.finfo(V.real_dtype(C.dtype)).bits < 64:
        W, nr = qr_route()
    else:
        G = _mm(C.conj().T, C)
        L = jnp.linalg.cholesky(G)
        est = _gram_cond2(G, L) * (np.finfo(V.real_dtype(C.dtype)).eps * k)
        ok = jnp.all(jnp.isfinite(L)) & (est <= _NORMAL_EQ_TOL)

        def normal_route():
            B = op.rmatmat(C).conj().T                                   # C^H A (k x n)
            Y = jax.lax.linalg.triangular_solve(L, B, left_side=True, lower=True)
            W = jax.lax.linalg.triangular_solve(L, Y, left_side=True, lower=True,
                                                transpose_a=True, conjugate_a=True)
            return W, jnp.asarray(k, jnp.int32)

        if speculate:
            W, nr = normal_route()
        else:
            W, nr = jax.lax.cond(ok, normal_route, lambda: qr_route(G))
            ok = True
    return W.at[:, J].set(jnp.eye(J.shape[0], dtype=W.dtype)), nr, ok


def _stable_cur_U(op: LinearOperator, C, R, ortho=None):
    """``U = C^+ A R^+`` via QR of C and R^H (Eq. ``eq:cur_stable``):
    ``U = R_C^+ (Q_C^H A Q_R) R_R^{+H}``; for very tall 64-bit factors,
    ``U = (C^H C)^+ (C^H A R^H) (R R^H)^+`` (one GEMM per Gram). Returns ``(U, numerical
    rank of C)``."""
    if _gram_path(C) or _gram_path(R.conj().T):
        gram_C = jnp.matmul(C.conj().T, C, precision=HIGHEST)
        sv = jnp.sqrt(jnp.maximum(jnp.linalg.eigvalsh(gram_C), 0.0))
        GR = jnp.matmul(R, R.conj().T, precision=HIGHEST)
        Mid = _mm(C.conj().T, op.matmat(R.conj().T))           # C^H A R^H (k x k)
        U = _mm(jnp.linalg.pinv(gram_C, hermitian=True),
                _mm(Mid, jnp.linalg.pinv(GR, hermitian=True)))
        return U, _numerical_rank(sv, C.shape[0])
    Qc, Rc = _tall_qr(C, ortho)
    Qr, Rr = jnp.linalg.qr(R.conj().T, mode="reduced")
    M = _mm(Qc.conj().T, op.matmat(Qr))                          # Q_C^H A Q_R (k x k)
    U = _mm(jnp.linalg.pinv(Rc), _mm(M, jnp.linalg.pinv(Rr).conj().T))
    return U, _numerical_rank(jnp.abs(jnp.diagonal(Rc)), C.shape[0])


def _scaled_fro(E):
    """``||E||_F`` without overflow/underflow of the squares (scaled by max |E_ij|)."""
    s = jnp.max(jnp.abs(E))
    safe = jnp.where(s > 0, s, 1.0)
    return s * jnp.linalg.norm(E / safe)


def _row_space_residual_fro(op: LinearOperator, T):
    """``||A - A T^+ T||_F`` for a k x n T (traceable; exact for dense/sparse A), computed
    on ``A / max|A|`` so float32 inputs of any scale neither overflow nor underflow."""
    Q = jnp.linalg.qr(T.conj().T, mode="reduced")[0]         # n x k
    AQ = op.matmat(Q)
    if isinstance(op, DenseOperator):
        return _scaled_fro(op.array - _mm(AQ, Q.conj().T))
    s = jnp.max(jnp.abs(op.data_r), initial=0.0)
    safe = jnp.where(s > 0, s, 1.0)
    a2 = jnp.sum(jnp.abs(op.data_r / safe) ** 2)             # ||A||_F^2 - ||A Q||_F^2
    return s * jnp.sqrt(jnp.maximum(a2 - jnp.sum(jnp.abs(AQ / safe) ** 2), 0.0))


def _check_result(res, k, policy, tol=None):
    """Eager calls: warn (or raise) from the result's flags -- ``numerical_rank`` (k above the
    numerical rank of A, or A numerically zero), a non-finite ``eta`` (NaN/Inf in A) and, in
    fixed-accuracy mode, an ``error_estimate`` above ``tol`` (max_rank reached). One small
    device-to-host read of three scalars; skipped with ``on_rank_deficient="ignore"`` (then
    only NaN is checked) and under the caller's jit/vmap (there the fields are the flags)."""
    if not V.is_concrete(res.numerical_rank):
        return
    V.warn_if_nonfinite(res.eta, "the certificate eta", stacklevel=4)
    eb = getattr(res, "error_bound", None)
    if tol is not None and eb is not None:
        bound = float(eb)
        if not bound <= tol:
            warnings.warn(f"tolerance {tol:g} could not be certified by max_rank = {k} "
                          f"(certified relative bound {bound:.3g}); raise max_rank",
                          RuntimeWarning, stacklevel=3)
    elif tol is not None and res.error_estimate is not None:
        est = float(res.error_estimate)
        if est > tol:
            warnings.warn(f"tolerance {tol:g} not reached at max_rank = {k} (estimated "
                          f"relative error {est:.3g}); raise max_rank", RuntimeWarning,
                          stacklevel=3)
    if policy == "ignore":
        return
    nr, rk = int(res.numerical_rank), int(res.rank)
    if nr >= rk:
        return
    if nr == 0 and rk > 0:
        warnings.warn(
            "A is numerically zero (all entries zero, or subnormal: XLA flushes subnormal "
            "numbers to zero); every skeleton is exact (error 0, eta 1). Rescale A if its "
            "entries are below the smallest normal number of its dtype.", RuntimeWarning,
            stacklevel=3)
        return
    msg = (f"k = {k} exceeds the numerical rank of A (the selected skeleton has numerical "
           f"rank {nr}); the factors are ill-conditioned. Use a smaller k or pass a tolerance "
           "(e.g. interpolative(key, A, 1e-8)) to choose the rank. (The result's "
           "numerical_rank field holds this value.)")
    if policy == "raise":
        raise ValueError(msg)
    warnings.warn(msg, RuntimeWarning, stacklevel=3)


@dataclasses.dataclass(frozen=True)
class _Options:
    """Static, hashable options of one call (with the :class:`Method`)."""

    method: Method
    side: str = "column"
    certify: bool = False
    delta: Optional[float] = None     # error certificate at failure probability delta
    #: the first call's quick tier (rdr_jax._jit): trace only the fast route of the exact
    #: coefficients and return ``(result, ok)``; ``ok`` False means "rerun in full"
    speculate: bool = False


# --------------------------------------------------------------------------------------
# the pipeline, top to bottom (one jitted function per call signature)
# --------------------------------------------------------------------------------------
def _column_id(key, op, k, l, opts: _Options):
    method = opts.method
    certifiable = isinstance(op, (DenseOperator, SparseOperator))
    k1, k2 = jax.random.split(key)
    # Lines 1-3: sketch, row-basis approximator, column pivots (+ sketch interpolation)
    J, Wsk, eta, Uk = pivot_columns(k1, op, k, l, method,
                                    method.interp == "sketch" or opts.certify, opts.speculate)
    C = op.cols(J)
    # the interpolation matrix
    ok = True
    if method.interp == "exact":
        W, nr, ok = _exact_col_interp(op, C, J, method.orthonormalize, opts.speculate)
    else:
        W, nr = Wsk, _skeleton_qr(C)[2]
    bound = eta * _row_space_residual_fro(op, Wsk) if opts.certify and certifiable else None
    rank = jnp.asarray(k, jnp.int32)
    if opts.side == "column":
        return ColumnID(J, C, W, eta, rank, nr, bound), ok
    # Line 4 (two-sided): rows of C
    I, Wr, eta_r, _ = pivot_rows(k2, C, k, method, Uk, True)
    return TwoSidedID(I, J, Wr, C[I], W, eta, eta_r, rank, nr, bound), ok


def _with_certificate(res, key, op, delta):
    """``res`` with its :class:`~rdr_jax.certify.ErrorCertificate` (when ``delta``)."""
    if delta is None:
        return res
    return res._replace(error_certificate=CE.certify_result(key, op, res.factors(), delta))


def _speculative_options(opts: _Options) -> _Options:
    return dataclasses.replace(opts, speculate=True)


@functools.partial(_jit.jit, static_argnames=("k", "l", "opts"), quick_first=_jit.sketch_work,
                   speculative={"opts": _speculative_options})
def _interpolative(key, op, k, l, opts: _Options):
    if opts.side == "row":
        res, ok = _column_id(key, op.H, k, l, dataclasses.replace(opts, side="column"))
        res = RowID(res.cols, res.W.conj().T, res.C.conj().T, res.eta, res.rank,
                    res.numerical_rank, res.bound)
    else:
        res, ok = _column_id(key, op, k, l, opts)
    res = _with_certificate(res, key, op, opts.delta)
    if not opts.speculate:
        return res
    # the quick tier's answer stands only for a well-posed problem: a numerically rank-
    # deficient skeleton (k above the rank of A) or a NaN eta is rerun in full, where the
    # last-bit differences of the quick executable could be amplified
    return res, ok & (res.numerical_rank == res.rank) & jnp.isfinite(res.eta)


@functools.partial(_jit.jit, static_argnames=("k", "l", "opts"), quick_first=_jit.sketch_work)
def _cur(key, op, k, l, opts: _Options):
    method = opts.method
    certify = opts.certify and isinstance(op, (DenseOperator, SparseOperator))
    k1, k2 = jax.random.split(key)
    J, Wsk, eta, Uk = pivot_columns(k1, op, k, l, method, certify)     # Lines 1-3
    C = op.cols(J)
    I, _, eta_r, _ = pivot_rows(k2, C, k, method, Uk, False)             # Line 4
    R = op.rows(I)
    U, nr = _stable_cur_U(op, C, R, method.orthonormalize)           # Eq. eq:cur_stable
    bound = None
    if certify:
        bound = jnp.sqrt(1.0 + eta_r ** 2) * eta * _row_space_residual_fro(op, Wsk)
    rank = jnp.asarray(k, jnp.int32)
    return _with_certificate(CUR(I, J, C, U, R, eta, eta_r, rank, nr, bound), key, op,
                             opts.delta)


@dataclasses.dataclass(frozen=True)
class _TolOptions:
    side: str
    interp: str
    block_size: int
    max_rank: Optional[int]
    delta: Optional[float] = None


@functools.partial(_jit.jit, static_argnames=("opts",))
def _interpolative_tol(key, op, tol, opts: _TolOptions):
    """Fixed accuracy: blocked randomized LUPP picks the rank (``rdr_jax.fixed_accuracy``);
    with ``interp="exact"`` the shortest pivot prefix whose exact-coefficient ID meets
    ``tol`` is kept (exact for dense/sparse A)."""
    kc, kr = jax.random.split(key)
    side = opts.side
    target = op.H if side == "row" else op
    confidence = None if opts.delta is None else 1.0 - opts.delta
    sel = FA.adaptive_column_skeletons(kr if side == "row" else kc, target, tol,
                                       block_size=opts.block_size, max_rank=opts.max_rank,
                                       confidence=confidence)
    J, rank, est, eb = sel.cols, sel.rank, sel.error_estimate, sel.error_bound
    valid = jnp.arange(J.shape[0]) < rank
    C = jnp.where(valid[None, :], target.cols(J), 0)
    eta = P.eta_from_interpolation(sel.W)
    if opts.interp == "sketch":
        W = sel.W
    else:
        rank_x, W, rel = FA.exact_prefix(target, J, C, rank, tol, estimate=jnp.nan)
        exact = ~jnp.isnan(rel)          # the prefix errors were computed exactly
        est = jnp.where(exact, rel, est)
        if eb is None:
            rank = rank_x
        else:   # certified mode: keep the certified W unless the exact errors are known
            W = jnp.where(exact, W, sel.W)
            rank = jnp.where(exact, rank_x, rank)
            eb = jnp.where(exact, rel, eb)
        valid = jnp.arange(J.shape[0]) < rank
        J = jnp.where(valid, J, 0)
        C = jnp.where(valid[None, :], C, 0)
    nr = _skeleton_qr(C)[2]
    if side == "row":
        res = RowID(J, W.conj().T, C.conj().T, eta, rank, nr, None, est, eb)
        return _with_certificate(res, key, op, opts.delta)
    if side == "column":
        return _with_certificate(ColumnID(J, C, W, eta, rank, nr, None, est, eb), key, op,
                                 opts.delta)
    # two-sided: LUPP on the valid columns of C (padding columns are zero; the first `rank`
    # pivots depend only on them); W_rows = C S^+ with S = A(rows, cols) masked to the
    # valid rank x rank block. W_rows = C S^{-1} by an LU solve (backward stable; S is the
    # LUPP pivot block, so |W_rows| <= 1), with the padding block replaced by the identity;
    # a pseudo-inverse would truncate S's small singular values (rcond ~ 10 k eps) and
    # lose accuracy near full rank in float32.
    I = jnp.where(valid, P.lupp(C.T, C.shape[1]), 0)
    S = jnp.where(valid[:, None] & valid[None, :], C[I], 0)
    pad = jnp.diag((~valid).astype(S.dtype))
    Wr = jnp.linalg.solve((S + pad).T, C.T).T
    Wr = jax.lax.cond(jnp.all(jnp.isfinite(Wr)), lambda: Wr,        # singular S: pinv
                      lambda: _mm(C, jnp.linalg.pinv(S)))
    eta_r = P.eta_from_interpolation(Wr.T)
    return _with_certificate(TwoSidedID(I, J, Wr, S, W, eta, eta_r, rank, nr, None, est, eb),
                             key, op, opts.delta)


# --------------------------------------------------------------------------------------
# public entry points
# --------------------------------------------------------------------------------------
def _is_tol(k) -> bool:
    return isinstance(k, (float, np.floating)) and not isinstance(k, bool)


def _check_policy(p):
    if p not in ("warn", "raise", "ignore"):
        raise ValueError(f"on_rank_deficient must be 'warn', 'raise' or 'ignore'; got {p!r}")


def interpolative(key, A: Any, k, *, side: str = "column", method: Any = "lupp",
                  sketch: Any = None, power_iters: int | None = None,
                  stable: bool | None = None, oversample: int | None = None,
                  l: int | None = None, interp: str | None = None, certify: bool = False,
                  on_rank_deficient: str = "warn", block_size: int = 16,
                  max_rank: int | None = None, confidence: float | None = None):
    """Randomized interpolative decomposition (column, row or two-sided).

    Skeletons by Algorithm ``algo:sketch_pivot_CUR_general`` (default Rand-LUPP, Algorithm
    ``algo:rand-id-lupp``, Gaussian sketch, ``l = k + 10``), then

    * ``side="column"``: ``A ~ C W``, ``C = A(:, cols)`` (Eq. ``eq:def_column_id``);
    * ``side="row"``: ``A ~ W R``, ``R = A(rows, :)`` (Eq. ``eq:def_row_id``);
    * ``side="two_sided"``: ``A ~ W_rows S W_cols`` (Eq. ``eq:def_two_sided_id``).

    With ``interp="exact"`` (default) ``W = C^+ A`` (the best coefficients for these
    skeletons; one more pass over A); ``interp="sketch"`` uses ``W = X_1^+ X`` (no extra
    pass). The certificate ``eta`` always comes with the result; ``certify=True`` (dense and
    sparse A) adds ``bound >= ||A - C C^+ A||_F`` (one more pass; use
    :func:`rdr_jax.diagnostics.certificate` for other operators).

    Args:
      key: ``jax.random.key``.
      A: m x n matrix or operator (dense, scipy.sparse, BCOO, implicit, factored).
      k: an int rank ``1 <= k <= min(m, n)`` (static), or a float tolerance in (0, 1): the
        rank is then chosen by blocked randomized LUPP (:mod:`rdr_jax.fixed_accuracy`) so
        that the estimated relative Frobenius error is below ``tol``; the arrays are padded
        to ``max_rank`` (default ``min(m, n, 1024)``) and ``rank`` holds the rank found
        (``.trim()`` cuts them eagerly). ``tol`` is traced: no recompilation per tolerance.
      side: ``"column"``, ``"row"`` or ``"two_sided"``.
      method, sketch, power_iters, stable, oversample, l: see
        :func:`rdr_jax.selection.select_columns` (``method`` may be a
        :class:`rdr_jax.selection.Method`).
      interp: ``"exact"`` or ``"sketch"`` (overrides the method's; default ``"exact"``).
      certify: compute the Frobenius bound (dense/sparse inputs).
      on_rank_deficient: k above the numerical rank of A makes the skeleton
        ill-conditioned. ``"warn"`` (default) warns and ``"raise"`` raises ValueError on
        eager calls (after reading the scalar ``numerical_rank``); under the caller's
        jit/vmap nothing can be raised: read ``numerical_rank``. ``"ignore"`` skips the read
        (fully asynchronous dispatch).
      block_size, max_rank: fixed-accuracy mode only.
      confidence: None, or a probability in (0, 1). The result then carries
        ``error_certificate`` (:func:`rdr_jax.error_certificate` of the returned factors,
        failure probability ``1 - confidence``, 20 Gaussian test vectors: one more pass
        over A with 20 vectors). In fixed-accuracy mode it also changes the stopping rule:
        the loop stops only when a *certified* bound is below ``tol``
        (:mod:`rdr_jax.fixed_accuracy`, "Certified stopping"), so
        ``||A - A_hat||_F <= tol ||A||_F`` holds with probability >= ``confidence``;
        ``error_bound`` reports that bound (a warning when tol could not be certified).

    Returns:
      :class:`ColumnID`, :class:`RowID` or :class:`TwoSidedID`.

    Example:
      >>> cid = interpolative(jax.random.key(0), A, 20)
      >>> jnp.linalg.norm(A - cid.C @ cid.W) / jnp.linalg.norm(A)
      >>> rid = interpolative(jax.random.key(0), A, 1e-6, side="row").trim()  # fixed accuracy
    """
    if side not in ("column", "row", "two_sided"):
        raise ValueError(f"side must be 'column', 'row' or 'two_sided'; got {side!r}")
    _check_policy(on_rank_deficient)
    delta = FA.check_confidence(confidence)
    key = V.check_key(key)
    op = as_operator(A)
    if _is_tol(k):
        m = resolve_method(method, sketch=sketch, power_iters=power_iters, stable=stable,
                           oversample=oversample, interp=interp)
        if not isinstance(m.pivot, LUPP) or m.power_iters:
            raise ValueError("fixed-accuracy mode (float tol) uses blocked randomized LUPP; "
                             f"method must be 'lupp'/'Rand-LUPP', got {method!r}")
        tol = float(k)
        if not (0.0 < tol < 1.0) or not math.isfinite(tol):
            raise ValueError(f"tol must be in (0, 1) (a relative Frobenius error); got {k}")
        mn = min(op.shape)
        b = min(V.check_int("block_size", block_size, low=1), mn)
        cap = min(mn, 1024) if max_rank is None else V.check_int(
            "max_rank", max_rank, low=1, high=mn, high_desc=f"min(m, n) = {mn}")
        res = _interpolative_tol(key, op, jnp.asarray(tol, V.real_dtype(op.dtype)),
                                 _TolOptions(side, m.interp, b, cap, delta))
        _check_result(res, cap, "ignore", tol)
        return res
    k = check_rank(k, op.shape)
    m = resolve_method(method, sketch=sketch, power_iters=power_iters, stable=stable,
                       oversample=oversample, interp=interp).for_operator(
                           op, adjoint=side == "row")     # a row ID runs on A^H
    m.pivot.check_backend()
    l = sketch_size(m, k, op.shape, l)
    res = _interpolative(key, op, k, l, _Options(m, side, bool(certify), delta))
    _check_result(res, k, on_rank_deficient)
    return res


def cur(key, A: Any, k: int, *, method: Any = "lupp", sketch: Any = None,
        power_iters: int | None = None, stable: bool | None = None,
        oversample: int | None = None, l: int | None = None, certify: bool = False,
        on_rank_deficient: str = "warn", confidence: float | None = None) -> CUR:
    """Randomized CUR decomposition ``A ~ C U R`` (Eqs. ``eq:def_cur``, ``eq:cur_stable``).

    Columns by pivoting on a row-basis approximator, rows by pivoting on ``C`` (Algorithm
    ``algo:sketch_pivot_CUR_general``), ``U = C^+ A R^+`` by the stable QR construction.
    The thesis' seven algorithms are ``method="Rand-LUPP"``, ``"Rand-LUPP-1piter"``,
    ``"Rand-CPQR"``, ``"Rand-CPQR-1piter"``, ``"RSVD-DEIM"``, ``"RSVD-LS"``, ``"SRCUR"``
    (or pivoting objects / a :class:`rdr_jax.selection.Method`).

    Certificates: ``eta`` (columns), ``eta_rows`` (rows) and, with ``certify`` on dense and
    sparse inputs, ``bound`` with ``||A - CUR||_F <= bound`` (Thm
    ``thm:pivoting_on_rangeapprox_error_bound`` with Eq. ``eq:id_cur_suboptimality``).

    Args:
      key, A, k, method, sketch, power_iters, stable, oversample, l, certify,
        on_rank_deficient, confidence: as :func:`interpolative` (k must be an int here;
        ``confidence`` adds ``error_certificate``, an a posteriori bound on
        ``||A - CUR||`` in both norms).

    Returns:
      :class:`CUR` ``(rows, cols, C, U, R, eta, eta_rows, rank, numerical_rank, bound)``.

    Example:
      >>> d = cur(jax.random.key(0), A, 50, method="Rand-LUPP-1piter")
      >>> err = rdr_jax.lowrank_error(A, d)          # LowRankError(fro, spec, exact)
    """
    _check_policy(on_rank_deficient)
    delta = FA.check_confidence(confidence)
    if _is_tol(k):
        raise TypeError("cur() takes an integer rank k; for a tolerance use "
                        "interpolative(key, A, tol, side='two_sided') or pick k from it")
    key = V.check_key(key)
    op = as_operator(A)
    k = check_rank(k, op.shape)
    m = resolve_method(method, sketch=sketch, power_iters=power_iters, stable=stable,
                       oversample=oversample).for_operator(op)
    m.pivot.check_backend()
    l = sketch_size(m, k, op.shape, l)
    res = _cur(key, op, k, l, _Options(m, "cur", bool(certify), delta))
    _check_result(res, k, on_rank_deficient)
    return res


def id_to_svd(decomp) -> RSVD:
    """Truncated SVD from an ID or CUR: ``A_hat = F G H^H`` -> ``U diag(s) V^H``.

    ``F = Q_F R_F``, ``H = Q_H R_H`` (thin QR), SVD of the k x k core
    ``R_F G R_H^H = U_c S V_c^H``; ``U = Q_F U_c``, ``V = Q_H V_c`` (like
    ``scipy.linalg.interpolative.id_to_svd``). O((m + n) k^2). Traceable.
    """
    F, G, H = decomp.factors()
    Qf, Rf = jnp.linalg.qr(F, mode="reduced")
    Qh, Rh = jnp.linalg.qr(H, mode="reduced")
    core = Rf if G is None else _mm(Rf, G)
    core = _mm(core, Rh.conj().T)
    Uc, s, Vch = jnp.linalg.svd(core, full_matrices=False)
    return RSVD(_mm(Qf, Uc), s, _mm(Vch, Qh.conj().T))
