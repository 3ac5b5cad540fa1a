"""Interpolative and CUR decompositions from randomized skeletons (thesis ``subsec:cur``).

The whole pipeline, sketch -> row-basis approximator -> pivoting -> decomposition, is one
lean jitted program per call signature and rank bucket (:mod:`rdr_jax.id_cur.selection` holds
Lines 1-4 of the general Algorithm; this module forms the factors). With column skeletons
``cols`` and row skeletons ``rows``, ``C = A(:, cols)``, ``R = A(rows, :)``,
``S = A(rows, cols)``:

* column ID (Eq. ``eq:def_column_id``): ``A ~ C W``, ``W = C^+ A`` (``interp="exact"``, one extra pass)
  or ``W = X_1^+ X`` from the sketch (``interp="sketch"``, no extra pass);
* row ID: ``A ~ W R``, ``W = A R^+`` (the column ID of ``A^H``);
* two-sided ID: ``A ~ W_rows S W_cols`` with ``W_rows = C S^{-1} = P^T L L_1^{-1}`` from the
  LU of C that picked the rows (entries of L at most 1; no solve with S);
* CUR (Eq. ``eq:def_cur``): ``A ~ C U R``, ``U = C^+ A R^+`` by the stable construction
  ``U = R_C^{-1} (Q_C^H A Q_R) R_R^{-H}`` (Eq. ``eq:cur_stable``).

``W`` and ``U`` use orthonormal bases of C and ``R^H`` from right-preconditioned CholeskyQR
(``rdr_jax._src.linalg.precond_qr``; preconditioners: the triangular factors of Gaussian
sketches of C and ``R^H``, for C the pivot block of the sketch itself), restricted to the
numerical rank: no data-dependent branch, no SVD or eigensolver, 7 LAPACK/cuSOLVER calls for
the column ID and 8 for CUR (``docs/design.md``, "The lean ID/CUR program").

Certificates (Thm ``thm:pivoting_on_rangeapprox_error_bound``): ``eta >= ||T||_2`` for the sketch interpolation matrix T of
the column selection (an upper bound within ``k^(1/512)``, from traces of powers: GEMMs
only), ``eta_rows >= ||W_rows||_2``, and (``certify=True``; dense and sparse A) the Frobenius
bounds ``||A - C C^+ A||_F <= bound = eta ||A - A T^+ T||_F`` and, for CUR (Eq. ``eq:id_cur_suboptimality``),
``||A - CUR||_F <= sqrt(1 + eta_rows^2) eta ||A - A T^+ T||_F``.

Fixed accuracy: pass a float ``tol`` in (0, 1) instead of an integer rank (like
``scipy.linalg.interpolative.interp_decomp(A, eps_or_k)``); the rank is found by the blocked
randomized LUPP of :mod:`rdr_jax.id_cur.fixed_accuracy` inside the same jitted computation.

Inside ``jax.jit`` no value check can raise. What the caller gets instead: every result
carries ``numerical_rank`` (``< rank`` means k exceeded the numerical rank of A; 0 means A is
numerically zero), ``eta`` is NaN when A holds NaN/Inf, and in fixed-accuracy mode
``error_estimate > tol`` means max_rank was reached. Eager calls read these scalars and warn
(or raise, ``on_rank_deficient="raise"``). The programs contain no host callbacks, so JAX's
persistent compilation cache can store them (:func:`rdr_jax.compilation_cache`).
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

from rdr_jax._src import jit as _jit
from rdr_jax._src import linalg as L
from rdr_jax._src import validation as V
from rdr_jax import distributed
from rdr_jax import certify as CE
from rdr_jax.id_cur import fixed_accuracy as FA
from rdr_jax.id_cur import selection as SL
from rdr_jax import sketching
from rdr_jax._src.tallqr import as_orthonormalizer
from rdr_jax.operators import HIGHEST, DenseOperator, LinearOperator, SparseOperator, as_operator
from rdr_jax.randomized_svd import RSVD
from rdr_jax.id_cur.selection import LUPP, SRCUR, Method, check_rank, resolve_method, sketch_size

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
def _blocks(method: Method) -> int:
    """Row blocks of the tall triangular solves: the number of row shards of A when the
    method's orthonormaliser was resolved for a row-sharded input (no gather of C)."""
    ortho = as_orthonormalizer(method.orthonormalize)
    return getattr(ortho, "blocks", 1)


def _sketch_block(key, Y, sz: SL.Sizes):
    """The damped block ``[Gamma Y; D]`` ((lb + kb) x kb) of a fresh Gaussian sketch of the
    tall ``Y`` (h x kb, HIGHEST; its triangular factor preconditions Y: Gamma is an
    oblivious subspace embedding of range(Y))."""
    S = sketching.Gaussian().draw(key, sz.lb, Y.shape[0], dtype=Y.dtype)
    Z = SL._unit_scale(S.apply_dense(Y, precision=HIGHEST))
    if not isinstance(sz.l, int):
        Z = jnp.where((jnp.arange(sz.lb) < sz.l)[:, None] & sz.valid()[None, :], Z, 0)
    return L.damped_block(Z, sz.valid())


def _c_preconditioner(key, C, R, sz: SL.Sizes):
    """``(P, independent columns)``: the triangular preconditioner of the skeleton block C
    -- the factor ``R`` of its sketch when the pivots came from an oblivious sketch (free),
    else the damped factor of a fresh Gaussian sketch ``Gamma_c C`` (one more geqrf) -- and
    the columns it finds numerically independent."""
    if R is None:
        R = L.sketch_qr(_sketch_block(key, C, sz), with_inverse=False)[0]
    return R, L.independent(R, sz.valid(), sz.lb)


def _unit(C):
    """``(C 2^-e, 2^-e)``: C rescaled by a power of two (exact) so that its Gram cannot
    over- or underflow."""
    mx = jnp.max(jnp.abs(C))
    e = jnp.where(mx > 0, jnp.floor(jnp.log2(jnp.where(mx > 0, mx, 1.0))), 0.0)
    s = jnp.exp2(-e).astype(C.dtype)
    return C * s, s


def _exact_coefficients(op, C, J, P, keep, sz: SL.Sizes, blocks: int = 1):
    """``W = C^+ A`` (Eq. ``eq:def_column_id``, the best coefficients for these skeletons)
    by right-preconditioned CholeskyQR (``rdr_jax._src.linalg.precond_qr``):
    ``C = Q R``, ``W = R^{-1} Z Q^H A``, ``Z ~ (Q^H Q)^{-1}``. Returns ``(W, numerical
    rank of C)``; rows of W past k, and of the columns ``keep`` leaves out (numerically
    dependent), are zero, and ``W(:, cols) = I`` on the valid block."""
    valid = sz.valid()
    Cn, s = _unit(C)
    Q, R, Z, nr = L.precond_qr(Cn, P, keep, blocks)
    B = op.rmatmat(Q * s).conj().T                                   # 2^-e Q^H A (kb x n)
    W = L.solve_triangular(R, L.mm(Z, B), left=True, lower=False)
    W = jnp.where(valid[:, None], W, 0)
    return SL._with_identity(W, J, valid), nr


def _stable_cur_U(op, C, Rm, PC, PR, sz: SL.Sizes, opts: "_Options", extra_left=()):
    """``U = C^+ A R^+`` (Eq. ``eq:cur_stable``) from preconditioned CholeskyQR of C and
    ``R^H`` in one batch (``rdr_jax._src.linalg.precond_qr``, ``C = Q_C R_C``,
    ``R^H = Q_R R_R``): ``U = R_C^{-1} Z_C (Q_C^H A Q_R) Z_R R_R^{-H}``. ``PC``, ``PR``:
    triangular preconditioners of C and ``R^H``. ``extra_left``: further ``(a, b)`` upper
    triangular left solves batched with the first solve of U (their results are returned).
    ``opts``: the call's options (row blocks of the method's orthonormaliser; ``sharded``:
    A is sharded over devices, and C and ``R^H`` are then factored apart (stacked,
    the R^H half would inherit C's row sharding and be sliced across shard boundaries,
    which deadlocked XLA:CPU's partitioned product with A on 4 virtual devices)).
    ``PC``, ``PR``: ``(P, independent columns)`` pairs. Returns ``(U, numerical rank of C,
    extra results)``."""
    m, n = op.shape
    blocks, sharded = _blocks(opts.method), opts.sharded
    valid = sz.valid()
    Cn, sc = _unit(C)
    Rn, sr = _unit(Rm.conj().T)                                      # R^H, n x kb
    if blocks > 1 or sharded:     # C row-sharded like A: its solves stay local
        (Qc, Rc, Zc, nr), (Qr, Rr, Zr, _) = (L.precond_qr(Cn, *PC, blocks),
                                             L.precond_qr(Rn, *PR))
    else:                   # one batch: every small factorisation is a single library call
        Q, Rf, Z, nrs = L.precond_qr(L.stack_padded([Cn, Rn]), jnp.stack([PC[0], PR[0]]),
                                     jnp.stack([PC[1], PR[1]]))
        (Qc, Rc, Zc), (Qr, Rr, Zr) = (Q[0, :m], Rf[0], Z[0]), (Q[1, :n], Rf[1], Z[1])
        nr = nrs[0]
    Qc, Qr = Qc * sc, Qr * sr
    Mid = L.mm(Qc.conj().T, op.matmat(Qr))                           # Q_C^H A Q_R (kb x kb)
    N = L.mm(Zc, L.mm(Mid, Zr))
    sol = L.left_solves([(Rc, N)] + list(extra_left), separate=sharded)
    U = L.solve_triangular(Rr, sol[0], left=False, lower=False, trans=True)
    U = jnp.where(valid[:, None] & valid[None, :], U, 0)
    return U, nr, sol[1:]


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
    #: a concrete input sharded over several devices: no batched factorisation (jaxlib's
    #: CPU LAPACK kernels spread a batch over the intra-op thread pool and wait for it; with
    #: several CPU devices on few cores every pool thread can be such a waiter: a deadlock
    #: seen with 4 virtual devices on 2 cores), and C and R^H factored apart
    sharded: bool = False


def _sharded(op) -> bool:
    """Whether a concrete operator is sharded over several devices (see ``_Options``)."""
    return distributed.row_shards(op) > 1 or distributed.col_shards(op) > 1


# --------------------------------------------------------------------------------------
# the pipeline, top to bottom (one jitted function per call signature and rank bucket)
# --------------------------------------------------------------------------------------
def _column_id(key, op, sz: SL.Sizes, opts: _Options):
    """Column (or two-sided) ID padded to the bucket ``sz.kb``: Lines 1-3, the exact or
    sketch coefficients, and for two-sided Line 4 on C."""
    method = opts.method
    valid = sz.valid()
    k1, k2, k3 = jax.random.split(key, 3)
    pb = SL.pivot_block(k1, op, sz, method)                             # Lines 1-3
    J = pb.cols
    C = jnp.where(valid[None, :], op.cols(J), 0)
    R_s, Qt = L.sketch_qr(SL.damped_pivot_block(pb, sz))
    two = opts.side == "two_sided"
    lu = SL.lu_rows(C, sz) if two and type(method.pivot) is LUPP else None
    # X_1^+ (and L_1^{-H} for the rows) in one batched solve
    pinv = L.pseudo_inverse_system(R_s, Qt, valid)
    lefts = [pinv] + ([SL.l1_inverse_rhs(lu)] if lu is not None else [])
    sol = L.left_solves(lefts, separate=opts.sharded)
    piv = SL.finish_columns(pb, R_s, Qt, sol[0], sz, method)
    J = piv.cols                                                          # SRCUR: swapped
    if type(method.pivot) is SRCUR:
        C = jnp.where(valid[None, :], op.cols(J), 0)
    need_T = method.interp == "sketch" or opts.certify
    T = SL.sketch_interpolation(piv, valid) if need_T else None
    if method.interp == "exact":
        P, keep = _c_preconditioner(k3, C, piv.R, sz)
        W, nr = _exact_coefficients(op, C, J, P, keep, sz, _blocks(method))
    else:
        W = T
        nr = jnp.sum(_c_preconditioner(k3, C, piv.R, sz)[1])
        nr = nr.astype(jnp.int32)
    certifiable = isinstance(op, (DenseOperator, SparseOperator))
    bound = piv.eta * _row_space_residual_fro(op, T) if opts.certify and certifiable else None
    rank = jnp.asarray(sz.k, jnp.int32)
    if not two:
        return ColumnID(J, C, W, piv.eta, rank, nr, bound)
    if lu is not None:                                                     # Line 4
        rp = SL.rows_from_lu(lu, L.ct(sol[1]), sz)
    else:
        rp = SL.pivot_rows(k2, C, sz, method, piv.Uk)
    S = jnp.where(valid[:, None], C[rp.rows], 0)
    return TwoSidedID(rp.rows, J, rp.W, S, W, piv.eta, rp.eta, rank, nr, bound)


def _with_certificate(res, key, op, delta):
    """``res`` with its :class:`~rdr_jax.certify.ErrorCertificate` (when ``delta``)."""
    if delta is None:
        return res
    return res._replace(error_certificate=CE.certify_result(key, op, res.factors(), delta))


@functools.partial(_jit.jit, static_argnames=("kb", "lb", "opts"))
def _interpolative(key, op, k, l, kb, lb, opts: _Options):
    sz = SL.Sizes.of(k, l, kb, lb)
    if opts.side == "row":
        res = _column_id(key, op.H, sz, dataclasses.replace(opts, side="column"))
        res = RowID(res.cols, res.W.conj().T, res.C.conj().T, res.eta, res.rank,
                    res.numerical_rank, res.bound)
    else:
        res = _column_id(key, op, sz, opts)
    return _with_certificate(res, key, op, opts.delta)


@functools.partial(_jit.jit, static_argnames=("kb", "lb", "opts"))
def _cur(key, op, k, l, kb, lb, opts: _Options):
    sz = SL.Sizes.of(k, l, kb, lb)
    method = opts.method
    valid = sz.valid()
    certify = opts.certify and isinstance(op, (DenseOperator, SparseOperator))
    k1, k2, k3 = jax.random.split(key, 3)
    pb = SL.pivot_block(k1, op, sz, method)                               # Lines 1-3
    srcur = type(method.pivot) is SRCUR
    if srcur:                     # the swaps need T before the skeleton block is known
        piv = SL.pivot_columns(k1, op, sz, method)
        pb = pb._replace(cols=piv.cols)
    J = pb.cols
    C = jnp.where(valid[None, :], op.cols(J), 0)
    lupp = type(method.pivot) is LUPP
    if lupp:                                                              # Line 4
        lu = SL.lu_rows(C, sz)
        I = lu.rows
    else:
        rp = SL.pivot_rows(k2, C, sz, method, pb.Uk)
        I = rp.rows
    Rm = jnp.where(valid[:, None], op.rows(I), 0)
    # triangular factors of the damped sketch pivot block (preconditions C, gives X_1^+) and
    # of a damped Gaussian sketch of R^H (preconditions R^H): one batched Householder call
    k3, k4 = jax.random.split(k3)
    r_block = _sketch_block(k4, Rm.conj().T, sz)
    if opts.sharded:        # no batched LAPACK call: see _Options.sharded
        R_s, Qt = L.sketch_qr(SL.damped_pivot_block(pb, sz))
        R_r = L.sketch_qr(r_block, with_inverse=False)[0]
    else:
        Rb, Qtb = L.sketch_qr(L.stack_padded([SL.damped_pivot_block(pb, sz), r_block]))
        R_s, Qt, R_r = Rb[0], Qtb[0][:, :pb.X1.shape[0]], Rb[1]
    PR = (R_r, L.independent(R_r, valid, sz.lb))
    PC = _c_preconditioner(k3, C, R_s if pb.oblivious else None, sz)
    extra = [] if srcur else [L.pseudo_inverse_system(R_s, Qt, valid)]
    if lupp:
        extra.append(SL.l1_inverse_rhs(lu))
    U, nr, sols = _stable_cur_U(op, C, Rm, PC, PR, sz, opts, extra)
    if srcur:
        eta = piv.eta
        Wsk = piv.T
    else:
        cp = SL.finish_columns(pb, R_s, Qt, sols[0], sz, method)
        eta = cp.eta
        Wsk = SL.sketch_interpolation(cp, valid) if certify else None
    eta_r = SL.rows_from_lu(lu, L.ct(sols[-1]), sz).eta if lupp else rp.eta
    bound = None
    if certify:
        bound = jnp.sqrt(1.0 + eta_r ** 2) * eta * _row_space_residual_fro(op, Wsk)
    rank = jnp.asarray(sz.k, jnp.int32)
    return _with_certificate(CUR(I, J, C, U, Rm, eta, eta_r, rank, nr, bound), key, op,
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
    """Fixed accuracy: blocked randomized LUPP picks the rank (``rdr_jax.id_cur.fixed_accuracy``);
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
    r = J.shape[0]
    valid = jnp.arange(r) < rank
    C = jnp.where(valid[None, :], target.cols(J), 0)
    eta = L.interpolation_norm_bound(L.gram(L.ct(sel.W)), valid)
    if opts.interp == "sketch":
        W = sel.W
        nr = L.numerical_rank(jnp.linalg.qr(SL._unit_scale(C), mode="r"), valid, C.shape[0])
    else:
        rank_x, W, rel, Rc = FA.exact_prefix(target, J, C, rank, tol, estimate=jnp.nan,
                                              return_factor=True)
        exact = ~jnp.isnan(rel)          # the prefix errors were computed exactly
        est = jnp.where(exact, rel, est)
        if eb is None:
            rank = rank_x
        else:   # certified mode: keep the certified W unless the exact errors are known
            W = jnp.where(exact, W, sel.W)
            rank = jnp.where(exact, rank_x, rank)
            eb = jnp.where(exact, rel, eb)
        valid = jnp.arange(r) < rank
        J = jnp.where(valid, J, 0)
        C = jnp.where(valid[None, :], C, 0)
        nr = L.numerical_rank(Rc, valid, C.shape[0])
    if side == "row":
        res = RowID(J, W.conj().T, C.conj().T, eta, rank, nr, None, est, eb)
        return _with_certificate(res, key, op, opts.delta)
    if side == "column":
        return _with_certificate(ColumnID(J, C, W, eta, rank, nr, None, est, eb), key, op,
                                 opts.delta)
    # two-sided: LUPP on the valid columns of C (padding columns are zero; the first `rank`
    # pivots depend only on them); W_rows = P^T L L_1^{-1} (no solve with the pivot block)
    sz = SL.Sizes(rank, rank, r, r)
    lu = SL.lu_rows(C, sz)
    a, b = SL.l1_inverse_rhs(lu)
    rp = SL.rows_from_lu(lu, L.ct(L.solve_triangular(a, b, left=True, lower=False)), sz)
    I = jnp.where(valid, rp.rows, 0)
    S = jnp.where(valid[:, None] & valid[None, :], C[I], 0)
    return _with_certificate(TwoSidedID(I, J, rp.W, S, W, eta, rp.eta, rank, nr, None, est,
                                        eb), key, op, opts.delta)


# --------------------------------------------------------------------------------------
# public entry points
# --------------------------------------------------------------------------------------
#: the padded axis of each result field (cut to the rank after the call)
_TRIM = {"column": {"cols": 0, "C": 1, "W": 0},
         "row": {"rows": 0, "W": 1, "R": 0},
         "two_sided": {"rows": 0, "cols": 0, "W_rows": 1, "S": (0, 1), "W_cols": 0},
         "cur": {"rows": 0, "cols": 0, "C": 1, "U": (0, 1), "R": 0}}


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
        rank is then chosen by blocked randomized LUPP (:mod:`rdr_jax.id_cur.fixed_accuracy`) so
        that the estimated relative Frobenius error is below ``tol``; the arrays are padded
        to ``max_rank`` (default ``min(m, n, 1024)``) and ``rank`` holds the rank found
        (``.trim()`` cuts them eagerly). ``tol`` is traced: no recompilation per tolerance.
      side: ``"column"``, ``"row"`` or ``"two_sided"``.
      method, sketch, power_iters, stable, oversample, l: see
        :func:`rdr_jax.id_cur.selection.select_columns` (``method`` may be a
        :class:`rdr_jax.id_cur.selection.Method`).
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
        (:mod:`rdr_jax.id_cur.fixed_accuracy`, "Certified stopping"), so
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
    sz = SL.plan(m, k, l, op.shape)
    res = _interpolative(key, op, *sz, _Options(m, side, bool(certify), delta, _sharded(op)))
    res = SL.trim(res, k, _TRIM[side])
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
    (or pivoting objects / a :class:`rdr_jax.id_cur.selection.Method`).

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
    sz = SL.plan(m, k, l, op.shape)
    res = SL.trim(_cur(key, op, *sz, _Options(m, "cur", bool(certify), delta, _sharded(op))), k,
                  _TRIM["cur"])
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
