"""Interpolative and CUR decompositions from randomized skeletons (thesis Section 2.2.2).

One lean jitted program per call signature and rank bucket: sketch, pivot, then the factors
``W = C^+ A`` (ID) or ``U = C^+ A R^+`` (CUR, stable construction). No data-dependent branch, no
SVD, 7-8 LAPACK calls (``docs/design.md``, "The lean ID/CUR program"). Under jit nothing can
raise: results carry ``numerical_rank`` and NaN ``eta`` as flags; eager calls warn.
Details: ``docs/id-cur.md`` ("Decompositions").
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
from rdr_jax.operators import HIGHEST, as_operator
from rdr_jax.randomized_svd import RSVD
from rdr_jax.id_cur.selection import Method, check_rank, resolve_method, sketch_size

__all__ = ["ColumnID", "RowID", "TwoSidedID", "CUR", "interpolative", "interpolative_to_tolerance",
           "cur", "id_to_svd", "interpolative_with_bound", "cur_with_bound"]


class ColumnID(NamedTuple):
    """Column ID ``A ~ C W`` (thesis Eq. (2.5)).

    cols (k,); C (m x k) = A(:, cols); W (k x n), ``W(:, cols) = I``; eta: the selection's
    conditioning certificate; rank: valid skeletons (from :func:`interpolative_to_tolerance`:
    the rank found, arrays padded to ``max_rank``, see :meth:`trim`); numerical_rank: of C
    (``< rank`` flags k above the numerical rank of A); error_estimate: the relative Frobenius
    error of the returned factors (exact for dense A, else estimated; with ``failure_prob`` a
    bound), NaN for a fixed rank; converged: the tolerance was met (True for a fixed rank);
    stop_reason: why the rank search stopped, a :class:`~rdr_jax.StopReason` code
    (:meth:`reason` in words).
    """

    cols: jax.Array
    C: jax.Array
    W: jax.Array
    eta: jax.Array
    rank: jax.Array
    numerical_rank: jax.Array
    error_estimate: jax.Array
    converged: jax.Array
    stop_reason: jax.Array

    def factors(self):
        """``(F, G, H)`` with ``A_hat = F G H^H``."""
        return self.C, None, self.W.conj().T

    def todense(self):
        return L.mm(self.C, self.W)

    def trim(self) -> "ColumnID":
        """The same ID cut to its (concrete) ``rank`` (host call; not under jit)."""
        r = int(self.rank)
        return self._replace(cols=self.cols[:r], C=self.C[:, :r], W=self.W[:r])

    def reason(self) -> str:
        """Why the rank search stopped, in words (host call): ``"tolerance met"``,
        ``"precision floor reached"``, ``"max_rank reached"``, ... (:class:`~rdr_jax.StopReason`)."""
        return FA.describe(self.stop_reason)


class RowID(NamedTuple):
    """Row ID ``A ~ W R`` (thesis Eq. (2.6)): rows (k,), W (m x k) with ``W(rows, :) = I``,
    R (k x n) = A(rows, :); other fields as :class:`ColumnID`."""

    rows: jax.Array
    W: jax.Array
    R: jax.Array
    eta: jax.Array
    rank: jax.Array
    numerical_rank: jax.Array
    error_estimate: jax.Array
    converged: jax.Array
    stop_reason: jax.Array

    reason = ColumnID.reason

    def factors(self):
        return self.W, None, self.R.conj().T

    def todense(self):
        return L.mm(self.W, self.R)

    def trim(self) -> "RowID":
        r = int(self.rank)
        return self._replace(rows=self.rows[:r], W=self.W[:, :r], R=self.R[:r])


class TwoSidedID(NamedTuple):
    """Two-sided ID ``A ~ W_rows S W_cols`` (thesis Eq. (2.7)): ``W_rows = C S^{-1}`` (m x k),
    ``S = A(rows, cols)``, ``W_cols`` (k x n); eta_rows: ``>= ||W_rows||_2``; other fields as
    :class:`ColumnID`."""

    rows: jax.Array
    cols: jax.Array
    W_rows: jax.Array
    S: jax.Array
    W_cols: jax.Array
    eta: jax.Array
    eta_rows: jax.Array
    rank: jax.Array
    numerical_rank: jax.Array
    error_estimate: jax.Array
    converged: jax.Array
    stop_reason: jax.Array

    reason = ColumnID.reason

    def factors(self):
        return self.W_rows, self.S, self.W_cols.conj().T

    def todense(self):
        return L.mm(self.W_rows, L.mm(self.S, self.W_cols))

    def trim(self) -> "TwoSidedID":
        r = int(self.rank)
        return self._replace(rows=self.rows[:r], cols=self.cols[:r], W_rows=self.W_rows[:, :r],
                             S=self.S[:r, :r], W_cols=self.W_cols[:r])


class CUR(NamedTuple):
    """CUR decomposition ``A ~ C U R`` (thesis Eq. (2.8), stable construction Eq. (2.10)).

    rows, cols (k,); C (m x k); U (k x k) = ``C^+ A R^+``; R (k x n); eta and eta_rows: the
    column and row selections' certificates; rank, numerical_rank as :class:`ColumnID`.
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

    def factors(self):
        return self.C, self.U, self.R.conj().T

    def todense(self):
        return L.mm(self.C, L.mm(self.U, self.R))


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
    Z = L.unit_scale(S.apply_dense(Y, precision=HIGHEST))
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


def _exact_coefficients(op, C, J, P, keep, sz: SL.Sizes, blocks: int = 1, Om=None):
    """``W = C^+ A`` (Eq. (2.5), the best coefficients for these skeletons)
    by right-preconditioned CholeskyQR (``rdr_jax._src.linalg.precond_qr``):
    ``C = Q R``, ``W = R^{-1} Z Q^H A``, ``Z ~ (Q^H Q)^{-1}``. Returns ``(W, numerical
    rank of C)``; rows of W past k, and of the columns ``keep`` leaves out (numerically
    dependent), are zero, and ``W(:, cols) = I`` on the valid block. ``Om``: left test
    vectors (m x s) whose product ``A^H Omega`` shares the pass (returned third; else None)."""
    valid = sz.valid()
    Cn, s = L.unit_scale(C, return_scale=True)
    Q, R, Z, nr = L.precond_qr(Cn, P, keep, blocks)
    B, AhOm = _split_product(op.rmatmat(_with_test_vectors(Q * s, Om)), Q.shape[1], Om)
    B = B.conj().T                                                   # 2^-e Q^H A (kb x n)
    W = L.solve_triangular(R, L.mm(Z, B), left=True, lower=False)
    W = jnp.where(valid[:, None], W, 0)
    return L.with_identity(W, J, valid), nr, AhOm


def _stable_cur_U(op, C, Rm, precs, sz: SL.Sizes, opts: "_Options", extra_left=(), Om=None):
    """``U = C^+ A R^+`` (Eq. (2.10)) from preconditioned CholeskyQR of C and
    ``R^H`` in one batch (``rdr_jax._src.linalg.precond_qr``, ``C = Q_C R_C``,
    ``R^H = Q_R R_R``): ``U = R_C^{-1} Z_C (Q_C^H A Q_R) Z_R R_R^{-H}``. ``precs = (PC, PR)``:
    triangular preconditioners of C and ``R^H``. ``extra_left``: further ``(a, b)`` upper
    triangular left solves batched with the first solve of U (their results are returned).
    ``opts``: the call's options (row blocks of the method's orthonormaliser; ``sharded``:
    A is sharded over devices, and C and ``R^H`` are then factored apart (stacked,
    the R^H half would inherit C's row sharding and be sliced across shard boundaries,
    which deadlocked XLA:CPU's partitioned product with A on 4 virtual devices)).
    ``PC``, ``PR``: ``(P, independent columns)`` pairs. ``Om``: test vectors (n x s) whose
    product ``A Omega`` shares the pass over A. Returns ``(U, numerical rank of C, extra
    results, A Omega or None)``."""
    m, n = op.shape
    PC, PR = precs
    blocks, sharded = _blocks(opts.method), opts.sharded
    valid = sz.valid()
    Cn, sc = L.unit_scale(C, return_scale=True)
    Rn, sr = L.unit_scale(Rm.conj().T, return_scale=True)          # R^H, n x kb
    if blocks > 1 or sharded:     # C row-sharded like A: its solves stay local
        (Qc, Rc, Zc, nr), (Qr, Rr, Zr, _) = (L.precond_qr(Cn, *PC, blocks),
                                             L.precond_qr(Rn, *PR))
    else:                   # one batch: every small factorisation is a single library call
        Q, Rf, Z, nrs = L.precond_qr(L.stack_padded([Cn, Rn]), jnp.stack([PC[0], PR[0]]),
                                     jnp.stack([PC[1], PR[1]]))
        (Qc, Rc, Zc), (Qr, Rr, Zr) = (Q[0, :m], Rf[0], Z[0]), (Q[1, :n], Rf[1], Z[1])
        nr = nrs[0]
    Qc, Qr = Qc * sc, Qr * sr
    AQr, AOm = _split_product(op.matmat(_with_test_vectors(Qr, Om)), Qr.shape[1], Om)
    Mid = L.mm(Qc.conj().T, AQr)                                     # Q_C^H A Q_R (kb x kb)
    N = L.mm(Zc, L.mm(Mid, Zr))
    sol = L.left_solves([(Rc, N)] + list(extra_left), separate=sharded)
    U = L.solve_triangular(Rr, sol[0], left=False, lower=False, trans=True)
    U = jnp.where(valid[:, None] & valid[None, :], U, 0)
    return U, nr, sol[1:], AOm


def _tolerance_message(res, tol, cap, certified) -> str:
    """Why ``tol`` was not met, and the one thing that can help."""
    est, rank = float(res.error_estimate), int(res.rank)
    dt = np.dtype(res.C.dtype if hasattr(res, "C") else res.R.dtype)
    rdt = V.real_dtype(dt).name
    what = "certified" if certified else "reached"
    kind = "bound" if certified else "error"
    reason = FA.StopReason(int(res.stop_reason))
    if reason == FA.StopReason.PRECISION_FLOOR:
        fix = ("use float64 (jax.enable_x64 / jax.config.update('jax_enable_x64', True)) and "
               "a float64 A" if rdt == "float32" else
               "no rank does better: this is the rounding level of the stored matrix")
        return (f"{rdt} cannot reach tol = {tol:g} on this matrix: its floor here is about "
                f"{est:.2g} (relative {kind} at rank {rank}); {fix}")
    if reason == FA.StopReason.MAX_RANK:
        mn = min(res.C.shape[0], res.W.shape[1]) if hasattr(res, "C") else min(
            res.W.shape[0], res.R.shape[1])
        return (f"tolerance {tol:g} not {what} at max_rank = {cap} (relative {kind} {est:.3g}"
                f"); raise max_rank (at most min(m, n) = {mn})")
    if reason == FA.StopReason.NOT_FINITE:
        return "A (or a product with it) is not finite: the result is not usable"
    return (f"tolerance {tol:g} not {what} at rank {rank} (relative {kind} {est:.3g}): the "
            "loop's estimate met it but the final check of the factors did not, an unlikely "
            "draw; call again with another key")


def _check_result(res, k, policy, tol=None, certified=False):
    """Eager calls: warn (or raise) from the result's flags -- ``numerical_rank`` (k above the
    numerical rank of A, or A numerically zero), a non-finite ``eta`` (NaN/Inf in A) and, for a
    tolerance, why it was not met (``stop_reason``). Skipped under jit/vmap."""
    if not V.is_concrete(res.numerical_rank):
        return
    V.warn_if_nonfinite(res.eta, "the certificate eta")
    if tol is not None and not bool(res.converged):
        warnings.warn(_tolerance_message(res, tol, k, certified), RuntimeWarning,
                      stacklevel=V.user_stacklevel())
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
            stacklevel=V.user_stacklevel())
        return
    msg = (f"k = {k} exceeds the numerical rank of A (the selected skeleton has numerical "
           f"rank {nr}); the factors are ill-conditioned. Use a smaller k or let "
           "interpolative_to_tolerance(key, A, tol) choose the rank. (The result's "
           "numerical_rank field holds this value.)")
    if policy == "raise":
        raise ValueError(msg)
    warnings.warn(msg, RuntimeWarning, stacklevel=V.user_stacklevel())


@dataclasses.dataclass(frozen=True)
class _Options:
    """Static, hashable options of one call (with the :class:`Method`)."""

    method: Method
    side: str = "column"
    #: a concrete input sharded over several devices: no batched factorisation (jaxlib's
    #: CPU LAPACK kernels spread a batch over the intra-op thread pool and wait for it; with
    #: several CPU devices on few cores every pool thread can be such a waiter: a deadlock
    #: seen with 4 virtual devices on 2 cores), and C and R^H factored apart
    sharded: bool = False
    #: ``(num_vectors, failure_prob)``: also bound the error from test vectors whose product
    #: with A rides in the program's last pass over A (None: no bound)
    bound: Optional[tuple] = None
    #: CUR's core: ``"stable"`` (``C^+ A R^+``, Eq. (2.10)) or ``"cross"`` (``A(I, J)^+``)
    core: str = "stable"


def _test_vectors(key, op, opts: _Options, adjoint: bool):
    """The bound's Gaussian test vectors (``n x s``, or ``m x s`` for a product with
    ``A^H``), drawn from a stream the factors never use; None without a bound."""
    if opts.bound is None:
        return None
    return CE.gaussian_test_vectors(jax.random.fold_in(key, CE.CERT_STREAM),
                                    op.shape[0 if adjoint else 1], opts.bound[0], op.dtype)


def _with_test_vectors(X, Om):
    """``[X, Omega]`` for one product with A (Omega None: X)."""
    return X if Om is None else jnp.concatenate([X, Om.astype(X.dtype)], axis=1)


def _split_product(P, kb: int, Om):
    """The halves of a product with ``[X, Omega]``: ``(A X, A Omega)`` (Omega None: None)."""
    return (P, None) if Om is None else (P[:, :kb], P[:, kb:])


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
    cs = SL.column_step(k1, op, sz, method)                               # Lines 1-3
    J = cs.pb.cols
    C = SL.skeleton_block(op, J, sz)
    two = opts.side == "two_sided"
    rs = SL.row_step(k2, C, sz, method, cs.pb.Uk) if two else None      # Line 4
    # X_1^+ (unless the rule refined: done then) and the rows' pending solve in one call
    lefts = []
    if cs.piv is None:
        R_s, Qt = L.sketch_qr(SL.damped_pivot_block(cs.pb, sz))
        lefts.append(L.pseudo_inverse_system(R_s, Qt, valid))
    lefts += rs.pending() if two else []
    sol = L.left_solves(lefts, separate=opts.sharded) if lefts else []
    if cs.piv is None:
        piv, sol = SL.finish_columns(cs.pb, R_s, Qt, sol[0], sz), sol[1:]
    else:
        piv = cs.piv
    Om = _test_vectors(key, op, opts, adjoint=True)       # the bound's: E^H Omega
    AhOm = None
    if method.interp == "exact":
        P, keep = _c_preconditioner(k3, C, piv.R, sz)
        fuse = _fusable(opts)
        W, nr, AhOm = _exact_coefficients(op, C, J, P, keep, sz, _blocks(method),
                                          Om if fuse else None)
    else:
        W = SL.sketch_interpolation(piv, valid)
        nr = jnp.sum(_c_preconditioner(k3, C, piv.R, sz)[1])
        nr = nr.astype(jnp.int32)
    rank = jnp.asarray(sz.k, jnp.int32)
    est = _no_estimate(op)
    if not two:
        res = ColumnID(J, C, W, piv.eta, rank, nr, est, *_fixed_rank_flags())
        return _with_bound(res, op, opts, Om, AhOm, (C, None, W.conj().T))
    rp = rs.finish(sol, sz)
    S = jnp.where(valid[:, None], C[rp.rows], 0)
    res = TwoSidedID(rp.rows, J, rp.W, S, W, piv.eta, rp.eta, rank, nr, est,
                     *_fixed_rank_flags())
    return _with_bound(res, op, opts, Om, AhOm, (rp.W, S, W.conj().T))


def _fusable(opts: _Options) -> bool:
    """Whether the bound's test vectors may join the last product with A: not for an input
    sharded over devices or a row-blocked orthonormaliser (their products keep their own
    layouts; the bound then takes a product of its own in the same program)."""
    return not opts.sharded and _blocks(opts.method) == 1


def _with_bound(res, op, opts: _Options, Om, AhOm, factors):
    """``res``, or ``(res, ErrorBound)`` when the call asked for a bound: from
    ``E^H Omega = A^H Omega - H G^H F^H Omega`` (``factors = (F, G, H)``, ``A_hat = F G H^H``)
    with ``A^H Omega`` from the fused pass, or one product of its own."""
    if opts.bound is None:
        return res
    if AhOm is None:
        AhOm = op.rmatmat(Om)
    Y = CE.adjoint_residual(AhOm, Om, *factors)
    return res, CE.bound_from_sample(Y, AhOm, opts.bound[1])


def _no_estimate(op):
    """The ``error_estimate`` of a fixed-rank result: NaN (nothing was estimated)."""
    return jnp.full((), jnp.nan, V.real_dtype(op.dtype))


def _fixed_rank_flags():
    """``(converged, stop_reason)`` of a fixed-rank result: ``(True, FIXED_RANK)``."""
    return jnp.ones((), bool), jnp.asarray(FA.StopReason.FIXED_RANK, jnp.int32)


@functools.partial(_jit.jit, static_argnames=("kb", "lb", "opts"))
def _interpolative(key, op, k, l, kb, lb, opts: _Options):
    sz = SL.Sizes.of(k, l, kb, lb)
    if opts.side == "row":     # the column ID of A^H (a bound of its error is one of A's)
        out = _column_id(key, op.H, sz, dataclasses.replace(opts, side="column"))
        res = out if opts.bound is None else out[0]
        res = RowID(res.cols, res.W.conj().T, res.C.conj().T, res.eta, res.rank,
                    res.numerical_rank, res.error_estimate, res.converged, res.stop_reason)
        return res if opts.bound is None else (res, out[1])
    return _column_id(key, op, sz, opts)


@functools.partial(_jit.jit, static_argnames=("kb", "lb", "opts"))
def _cur(key, op, k, l, kb, lb, opts: _Options):
    sz = SL.Sizes.of(k, l, kb, lb)
    method = opts.method
    valid = sz.valid()
    k1, k2, k3 = jax.random.split(key, 3)
    cs = SL.column_step(k1, op, sz, method)                               # Lines 1-3
    pb, J = cs.pb, cs.pb.cols
    C = SL.skeleton_block(op, J, sz)
    rs = SL.row_step(k2, C, sz, method, pb.Uk)                            # Line 4
    I = rs.rows
    Rm = jnp.where(valid[:, None], op.rows(I), 0)
    if opts.core == "cross":
        U, nr, sols, R_s, Qt = _cross_core(k3, C, I, cs, rs, sz, opts.sharded)
        parts = (I, J, C, U, Rm, nr, sols, R_s, Qt, None, None)
        return _cur_tail(key, op, opts, cs, rs, sz, parts)
    # triangular factors of the damped sketch pivot block (preconditions C, gives X_1^+;
    # unless the rule refined: done) and of a damped Gaussian sketch of R^H (preconditions
    # R^H): one batched Householder call
    k3, k4 = jax.random.split(k3)
    r_block = _sketch_block(k4, Rm.conj().T, sz)
    R_s = Qt = None
    if cs.piv is not None:
        R_r = L.sketch_qr(r_block, with_inverse=False)[0]
    elif opts.sharded:        # no batched LAPACK call: see _Options.sharded
        R_s, Qt = L.sketch_qr(SL.damped_pivot_block(pb, sz))
        R_r = L.sketch_qr(r_block, with_inverse=False)[0]
    else:
        Rb, Qtb = L.sketch_qr(L.stack_padded([SL.damped_pivot_block(pb, sz), r_block]))
        R_s, Qt, R_r = Rb[0], Qtb[0][:, :pb.X1.shape[0]], Rb[1]
    PR = (R_r, L.independent(R_r, valid, sz.lb))
    PC = _c_preconditioner(k3, C, R_s if pb.oblivious else None, sz)
    extra = [] if cs.piv is not None else [L.pseudo_inverse_system(R_s, Qt, valid)]
    extra += rs.pending()
    # the bound's test vectors ride in the last pass A Q_R: right ones, E Omega
    Om = _test_vectors(key, op, opts, adjoint=False) if _fusable(opts) else None
    U, nr, sols, AOm = _stable_cur_U(op, C, Rm, (PC, PR), sz, opts, extra, Om)
    return _cur_tail(key, op, opts, cs, rs, sz, (I, J, C, U, Rm, nr, sols, R_s, Qt, AOm, Om))


def _cross_core(key, C, I, cs, rs, sz: SL.Sizes, separate: bool):
    """The cross-approximation core ``U = A(I, J)^+`` (beyond the thesis; Goreinov,
    Tyrtyshnikov and Zamarashkin's skeleton/cross approximation): the pseudo-inverse of the
    k x k intersection ``S = C(I, :)`` on its numerical rank, from the damped factor of
    ``[S; D]`` (``rdr_jax._src.linalg.pseudo_inverse``), batched with the pipeline's pending
    solves. No pass over A. Returns ``(U, numerical rank of C, the other solutions, R_s,
    Qt)`` (``R_s, Qt``: the pivot block's factor when the rule did not refine, else None)."""
    valid = sz.valid()
    both = valid[:, None] & valid[None, :]
    Sn, s = L.unit_scale(jnp.where(both, C[I], 0), return_scale=True)   # S = Sn / s
    Rw, Qw = L.sketch_qr(L.damped_block(Sn, valid))
    extra = [L.pseudo_inverse_system(Rw, Qw, valid)]
    R_s = Qt = None
    if cs.piv is None:
        R_s, Qt = L.sketch_qr(SL.damped_pivot_block(cs.pb, sz))
        extra.append(L.pseudo_inverse_system(R_s, Qt, valid))
    sols = L.left_solves(extra + rs.pending(), separate=separate)
    U = jnp.where(both, sols[0] * s, 0)                                  # S^+ = s Sn^+
    keep = _c_preconditioner(key, C, R_s if cs.pb.oblivious else None, sz)[1]
    return U, jnp.sum(keep, axis=-1).astype(jnp.int32), sols[1:], R_s, Qt


def _cur_tail(key, op, opts: _Options, cs, rs, sz: SL.Sizes, parts):
    """The certificates and the result of :func:`_cur` from ``parts = (I, J, C, U, Rm, nr,
    sols, R_s, Qt, AOm, Om)`` (``sols``: the pending solutions, the pivot block's first when
    the rule did not refine; ``AOm``: the fused ``A Omega`` of the bound's test vectors
    ``Om``, or None)."""
    I, J, C, U, Rm, nr, sols, R_s, Qt, AOm, Om = parts
    pb = cs.pb
    if cs.piv is None:
        eta, sols = SL.finish_columns(pb, R_s, Qt, sols[0], sz).eta, sols[1:]
    else:
        eta = cs.piv.eta
    eta_r = rs.finish(sols, sz).eta
    res = CUR(I, J, C, U, Rm, eta, eta_r, jnp.asarray(sz.k, jnp.int32), nr)
    if AOm is not None:
        Y = AOm - L.mm(C, L.mm(U, L.mm(Rm, Om)))                     # E Omega
        return res, CE.bound_from_sample(Y, AOm, opts.bound[1])
    return _with_bound(res, op, opts, _test_vectors(key, op, opts, adjoint=True), None,
                       res.factors())


@dataclasses.dataclass(frozen=True)
class _TolOptions:
    side: str
    interp: str
    block_size: int
    max_rank: Optional[int]
    delta: Optional[float] = None


#: with exact coefficients the loop aims below tol (they are truncated back to the shortest
#: prefix that meets it), so that the final check at the loop's rank almost never fails
_LOOP_MARGIN = 0.5


@functools.partial(_jit.jit, static_argnames=("opts",))
def _interpolative_tol(key, op, tol, opts: _TolOptions):
    """Fixed accuracy (``docs/id-cur.md``, "Fixed accuracy"): blocked randomized LUPP
    proposes skeletons until its estimate is below tol, the precision floor or max_rank;
    with ``interp="exact"`` the shortest prefix whose least-squares coefficients meet
    ``tol`` is kept, and its error is that of the returned factors. With ``failure_prob``,
    the loop's certificate and the final bound each spend half of it."""
    kc, kr = jax.random.split(key)
    side, exact = opts.side, opts.interp == "exact"
    target = op.H if side == "row" else op
    k_sel = kr if side == "row" else kc
    delta = opts.delta
    d_loop = None if delta is None else (0.5 * delta if exact else delta)
    sel = FA.column_skeletons_core(k_sel, target, tol, block_size=opts.block_size,
                                   max_rank=opts.max_rank, delta=d_loop,
                                   margin=_LOOP_MARGIN if exact and delta is None else 1.0)
    J, rank = sel.cols, sel.rank
    r = J.shape[0]
    valid = jnp.arange(r) < rank
    C = jnp.where(valid[None, :], target.cols(J), 0)
    eta = L.interpolation_norm_bound(L.gram(L.ct(sel.W)), valid)
    certified = delta is not None
    if not exact:
        W, est = sel.W, sel.error_bound if certified else sel.error_estimate
        conv, reason = sel.converged, sel.stop_reason
        nr = L.numerical_rank(jnp.linalg.qr(L.unit_scale(C), mode="r"), valid, C.shape[0])
    else:
        pre, Rc = FA.shortest_prefix(k_sel, target, J, C, rank, tol,
                                     None if delta is None else 0.5 * delta)
        rank, W, met = pre.rank, pre.W, pre.met
        est = pre.bound if certified else pre.error
        if certified:     # the loop certified its own W at this rank: C^+ A does no worse
            fall = ~met & sel.converged & (rank == sel.rank)
            est = jnp.where(fall, jnp.maximum(sel.error_bound, pre.error), est)
            met = met | fall
        conv = met
        # the loop met tol but the factors did not: rounding (a floor) or an unlucky draw
        floor = pre.error <= FA.FLOOR_ULPS * float(jnp.finfo(pre.error.dtype).eps)
        late = jnp.where(floor, FA.StopReason.PRECISION_FLOOR, FA.StopReason.RESAMPLE)
        reason = jnp.where(met, FA.StopReason.TOLERANCE,
                           jnp.where(sel.converged, late, sel.stop_reason))
        valid = jnp.arange(r) < rank
        J = jnp.where(valid, J, 0)
        C = jnp.where(valid[None, :], C, 0)
        nr = L.numerical_rank(Rc, valid, C.shape[0])
    reason = reason.astype(jnp.int32)
    if side == "row":
        return RowID(J, W.conj().T, C.conj().T, eta, rank, nr, est, conv, reason)
    if side == "column":
        return ColumnID(J, C, W, eta, rank, nr, est, conv, reason)
    # two-sided: LUPP on the valid columns of C (padding columns are zero; the first `rank`
    # pivots depend only on them); W_rows = P^T L L_1^{-1} (no solve with the pivot block)
    sz = SL.Sizes(rank, rank, r, r)
    rp = SL.lu_row_step(C, sz).solve(sz)
    I = jnp.where(valid, rp.rows, 0)
    S = jnp.where(valid[:, None] & valid[None, :], C[I], 0)
    # the row step's own error, ||C - W_rows S||_F ||W_cols||_F (zero in exact arithmetic),
    # added to the relative error (triangle inequality), so that est describes the factors
    e_rows = _relative_row_step_error(op, C, rp.W, S, W, sel.norm_estimate)
    est = est + e_rows
    lost = conv & ~(est <= tol)                     # the row step's rounding: a floor
    conv = conv & ~lost
    reason = jnp.where(lost, FA.StopReason.PRECISION_FLOOR, reason).astype(jnp.int32)
    return TwoSidedID(I, J, rp.W, S, W, eta, rp.eta, rank, nr, est, conv, reason)


def _relative_row_step_error(op, C, W_rows, S, W_cols, norm_estimate):
    """``||C - W_rows S||_F ||W_cols||_F / ||A||_F`` (``||A||_F`` exact when stored)."""
    dC = C - L.mm(W_rows, S)
    scale = jnp.max(jnp.abs(C))
    safe = jnp.where(scale > 0, scale, 1)
    num = jnp.linalg.norm(dC / safe) * jnp.linalg.norm(W_cols) * scale
    a2 = op.fro_norm_sq() if op.explicit else None
    a = jnp.sqrt(a2) if a2 is not None else norm_estimate
    rdt = V.real_dtype(op.dtype)
    return jnp.where(a > 0, num / jnp.where(a > 0, a, 1), 0.0).astype(rdt)


# --------------------------------------------------------------------------------------
# public entry points
# --------------------------------------------------------------------------------------
#: the padded axis of each result field (cut to the rank after the call)
_TRIM = {"column": {"cols": 0, "C": 1, "W": 0},
         "row": {"rows": 0, "W": 1, "R": 0},
         "two_sided": {"rows": 0, "cols": 0, "W_rows": 1, "S": (0, 1), "W_cols": 0},
         "cur": {"rows": 0, "cols": 0, "C": 1, "U": (0, 1), "R": 0}}


def _check_policy(p):
    if p not in ("warn", "raise", "ignore"):
        raise ValueError(f"on_rank_deficient must be 'warn', 'raise' or 'ignore'; got {p!r}")


def _check_side(side):
    if side not in ("column", "row", "two_sided"):
        raise ValueError(f"side must be 'column', 'row' or 'two_sided'; got {side!r}")


def interpolative(key, A: Any, k: int, *, side: str = "column", method: Any = "lupp",
                  on_rank_deficient: str = "warn"):
    """Randomized interpolative decomposition of rank k (thesis Section 2.2.2, Algorithm 1).

    ``side="column"``: ``A ~ C W`` with ``C = A(:, cols)`` (Eq. (2.5)); ``"row"``: ``A ~ W R``
    with ``R = A(rows, :)`` (Eq. (2.6)); ``"two_sided"``: ``A ~ W_rows S W_cols`` (Eq. (2.7)).
    Skeletons by pivoting on a sketch (default Rand-LUPP, Gaussian sketch, ``l = k + 10``);
    ``W = C^+ A`` (the method's ``interp="exact"``) or from the sketch (``"sketch"``).
    Why: the pivots cost a factorisation of an l x n sketch, not of A.

    Args:
      key: ``jax.random.key``.
      A: m x n matrix or operator (dense, scipy.sparse, BCOO, implicit, factored, scipy
        LinearOperator).
      k: rank, an int ``1 <= k <= min(m, n)`` (static). For a tolerance use
        :func:`interpolative_to_tolerance`.
      side: ``"column"``, ``"row"`` or ``"two_sided"``.
      method: a :class:`~rdr_jax.Method` (sketch, power iterations, oversampling,
        interpolation), a pivoting object or a name (``"lupp"``, ``"Rand-CPQR-1piter"``, ...).
      on_rank_deficient: k above A's numerical rank: ``"warn"`` (default), ``"raise"``
        (ValueError) or ``"ignore"``; under jit read the result's ``numerical_rank``.

    Returns:
      :class:`ColumnID`, :class:`RowID` or :class:`TwoSidedID` (by ``side``), each with
      the certificate ``eta``. Bound its error with :func:`rdr_jax.error_bound`, or ask
      :func:`interpolative_with_bound` for both in one program.
    """
    return _run_interpolative(key, A, k, side, method, on_rank_deficient, None)


def interpolative_with_bound(key, A: Any, k: int, *, side: str = "column",
                             method: Any = "lupp", failure_prob: float = 0.01,
                             on_rank_deficient: str = "warn"):
    """:func:`interpolative` and the a posteriori bound of :func:`rdr_jax.error_bound` on
    its error, in one program: the 20 Gaussian test vectors (drawn from ``key``'s
    certificate stream, independent of the factors) are multiplied by A in the same pass as
    the exact coefficients ``W = C^+ A`` (``A^H [Q, Omega]``; beyond the thesis,
    ``docs/error-bounds.md``). Why: a decomposition with a stated-probability error bound
    from one call and one pass over A.

    Args:
      key, A, k, side, method, on_rank_deficient: as :func:`interpolative` (k an int rank).
      failure_prob: in (0, 1), the failure probability of each bound (default 0.01).

    Returns:
      ``(result, ErrorBound)``: the result of :func:`interpolative` (the same skeletons; the
      factors equal to rounding) and :class:`~rdr_jax.ErrorBound`.
    """
    return _run_interpolative(key, A, k, side, method, on_rank_deficient, failure_prob)


def _run_interpolative(key, A, k, side, method, on_rank_deficient, failure_prob):
    """The body of :func:`interpolative` (``failure_prob`` None) and of
    :func:`interpolative_with_bound`."""
    _check_side(side)
    _check_policy(on_rank_deficient)
    key = V.check_key(key)
    op = as_operator(A)
    k = check_rank(k, op.shape)
    m = resolve_method(method).for_operator(op, adjoint=side == "row")   # a row ID runs on A^H
    m.pivot.check_backend()
    sz = SL.plan(m, k, sketch_size(m, k, op.shape), op.shape, key)
    out = _interpolative(key, op, *sz, _Options(m, side, _sharded(op),
                                                _bound_options(failure_prob, op)))
    return _finish(out, failure_prob is not None, k, _TRIM[side], on_rank_deficient)


def _bound_options(failure_prob, op) -> Optional[tuple]:
    """The static ``(num_vectors, failure_prob)`` of a fixed-rank call's bound (None: no
    bound), validated as :func:`rdr_jax.error_bound` validates them."""
    if failure_prob is None:
        return None
    delta = CE.check_failure_prob(failure_prob)
    cplx = np.dtype(op.dtype).kind == "c"
    return CE.check_num_vectors(CE.DEFAULT_NUM_VECTORS, delta, cplx), delta


def _finish(out, bounded: bool, k, fields, policy):
    """The padded program output (a result, or ``(result, ErrorBound)`` when ``bounded``)
    cut to rank k and checked."""
    res = SL.trim(out[0] if bounded else out, k, fields)
    _check_result(res, k, policy)
    return (res, out[1]) if bounded else res


def interpolative_to_tolerance(key, A: Any, tol: float, *, side: str = "column",
                               method: Any = "lupp", max_rank: int | None = None,
                               block_size: int = 16, failure_prob: float | None = None):
    """Interpolative decomposition whose rank is chosen so that the relative Frobenius error
    is at most ``tol`` (fixed accuracy, like ``scipy.linalg.interpolative.interp_decomp(A,
    eps)``).

    Blocked randomized LUPP (beyond the thesis: Pearce et al. 2023, extending Algorithm 2)
    adds ``block_size`` skeletons at a time until its estimate is below ``tol``, the working
    precision's floor or ``max_rank``; with the exact interpolation (the default) the shortest
    skeleton prefix whose least-squares coefficients meet ``tol`` is kept
    (``docs/id-cur.md``, "Fixed accuracy"). Why: no rank to guess, one compiled program for
    every tolerance (``tol`` is traced), and a result that says whether it met ``tol``.

    Args:
      key, A, side: as :func:`interpolative`.
      tol: relative Frobenius tolerance in (0, 1).
      method: LUPP without power iterations (the default): ``"lupp"`` or a
        :class:`~rdr_jax.Method` with ``pivot=LUPP()`` (its ``interp`` is used).
      max_rank: largest rank tried (default ``min(m, n, 1024)``); arrays are padded to it.
      block_size: skeletons added per step.
      failure_prob: None, or in (0, 1): stop only when a *certified* bound is below ``tol``,
        so the error is at most ``tol ||A||_F`` with probability ``>= 1 - failure_prob``.

    Returns:
      :class:`ColumnID`, :class:`RowID` or :class:`TwoSidedID` padded to ``max_rank``
      (``.trim()`` cuts it to ``rank``): ``error_estimate`` is the relative error of the
      factors returned (exact for dense A, else from fresh random vectors; with
      ``failure_prob`` the certified bound), ``converged`` whether it met ``tol``, and
      ``stop_reason`` (:class:`~rdr_jax.StopReason`; ``.reason()`` in words) why not: the
      precision floor of the dtype on this matrix, or ``max_rank``. Eager calls warn then.
    """
    _check_side(side)
    delta = None if failure_prob is None else CE.check_failure_prob(failure_prob)
    key = V.check_key(key)
    op = as_operator(A)
    m = resolve_method(method)
    if not m.pivot.fixed_accuracy or m.power_iters:
        raise ValueError("interpolative_to_tolerance uses blocked randomized LUPP; method must "
                         f"be 'lupp' (or a Method with pivot=LUPP(), power_iters=0); got "
                         f"{method!r}")
    if isinstance(tol, bool) or not isinstance(tol, (int, float, np.floating, np.integer)):
        raise TypeError(f"tol must be a float in (0, 1); got {type(tol).__name__} {tol!r}")
    tol = float(tol)
    if not (0.0 < tol < 1.0) or not math.isfinite(tol):
        raise ValueError(f"tol must be in (0, 1) (a relative Frobenius error); got {tol}")
    mn = min(op.shape)
    b = min(V.check_int("block_size", block_size, low=1), mn)
    cap = min(mn, 1024) if max_rank is None else V.check_int(
        "max_rank", max_rank, low=1, high=mn, high_desc=f"min(m, n) = {mn}")
    res = _interpolative_tol(key, op, jnp.asarray(tol, V.real_dtype(op.dtype)),
                             _TolOptions(side, m.interp, b, cap, delta))
    _check_result(res, cap, "ignore", tol, certified=delta is not None)
    return res


def cur(key, A: Any, k: int, *, method: Any = "lupp", on_rank_deficient: str = "warn",
        core: str = "stable") -> CUR:
    """Randomized CUR decomposition ``A ~ C U R`` (thesis Eq. (2.8), Algorithm 1).

    Columns by pivoting on a sketch, rows by pivoting on ``C = A(:, cols)``, and
    ``U = C^+ A R^+`` by the stable construction (Eq. (2.10)). The thesis' seven algorithms
    are the names ``"Rand-LUPP"`` (default), ``"Rand-LUPP-1piter"``, ``"Rand-CPQR"``,
    ``"Rand-CPQR-1piter"``, ``"RSVD-DEIM"``, ``"RSVD-LS"``, ``"SRCUR"``
    (``docs/choosing-a-method.md`` says which to use when). Why: C and R are actual columns
    and rows of A, which keeps sparsity and interpretability.

    Args:
      key, A, k, method, on_rank_deficient: as :func:`interpolative` (k an int rank).
      core: ``"stable"`` (default): ``U = C^+ A R^+`` (Eq. (2.10); one more pass over A,
        the best U for these C and R in the Frobenius norm); ``"cross"``: ``U = A(I, J)^+``,
        the pseudo-inverse of the k x k intersection (cross approximation; no pass over A
        for U, but its error can grow with ``1 / sigma_min(A(I, J))``;
        ``docs/choosing-a-method.md`` says when to use which).

    Returns:
      :class:`CUR` with the certificates ``eta`` (columns) and ``eta_rows`` (rows). Bound its
      error with :func:`rdr_jax.error_bound`, or ask :func:`cur_with_bound` for both.
    """
    return _run_cur(key, A, k, method, on_rank_deficient, None, core)


def cur_with_bound(key, A: Any, k: int, *, method: Any = "lupp", failure_prob: float = 0.01,
                   on_rank_deficient: str = "warn", core: str = "stable"):
    """:func:`cur` and the a posteriori bound of :func:`rdr_jax.error_bound` on its error, in
    one program: the 20 Gaussian test vectors (from ``key``'s certificate stream,
    independent of the factors) ride in the pass ``A Q_R`` that builds ``U`` (``A [Q_R,
    Omega]``; beyond the thesis, ``docs/error-bounds.md``). Why: a CUR with a
    stated-probability error bound from one call and one pass over A.

    Args:
      key, A, k, method, on_rank_deficient, core: as :func:`cur` (with ``core="cross"``
        the test vectors take a product of their own: there is no pass ``A Q_R``).
      failure_prob: in (0, 1), the failure probability of each bound (default 0.01).

    Returns:
      ``(CUR, ErrorBound)``: the CUR of :func:`cur` (the same skeletons; the factors equal
      to rounding) and :class:`~rdr_jax.ErrorBound`.
    """
    return _run_cur(key, A, k, method, on_rank_deficient, failure_prob, core)


#: the cores of :func:`cur`
CUR_CORES = ("stable", "cross")


def _run_cur(key, A, k, method, on_rank_deficient, failure_prob, core):
    """The body of :func:`cur` (``failure_prob`` None) and of :func:`cur_with_bound`."""
    _check_policy(on_rank_deficient)
    if core not in CUR_CORES:
        raise ValueError(f"core must be one of {CUR_CORES}: 'stable' (U = C^+ A R^+, "
                         f"Eq. (2.10)) or 'cross' (U = A(I, J)^+); got {core!r}")
    key = V.check_key(key)
    op = as_operator(A)
    k = check_rank(k, op.shape)
    m = resolve_method(method).for_operator(op)
    m.pivot.check_backend()
    sz = SL.plan(m, k, sketch_size(m, k, op.shape), op.shape, key)
    out = _cur(key, op, *sz, _Options(m, "cur", _sharded(op), _bound_options(failure_prob, op),
                                      core))
    return _finish(out, failure_prob is not None, k, _TRIM["cur"], on_rank_deficient)


def id_to_svd(decomp) -> RSVD:
    """Truncated SVD from an ID or CUR: ``A_hat = F G H^H`` -> ``U diag(s) V^H``.

    ``F = Q_F R_F``, ``H = Q_H R_H`` (thin QR), SVD of the k x k core
    ``R_F G R_H^H = U_c S V_c^H``; ``U = Q_F U_c``, ``V = Q_H V_c`` (like
    ``scipy.linalg.interpolative.id_to_svd``). O((m + n) k^2). Traceable.
    """
    F, G, H = decomp.factors()
    Qf, Rf = jnp.linalg.qr(F, mode="reduced")
    Qh, Rh = jnp.linalg.qr(H, mode="reduced")
    core = Rf if G is None else L.mm(Rf, G)
    core = L.mm(core, Rh.conj().T)
    Uc, s, Vch = jnp.linalg.svd(core, full_matrices=False)
    return RSVD(L.mm(Qf, Uc), s, L.mm(Vch, Qh.conj().T))
