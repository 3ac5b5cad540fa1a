"""Small linear-algebra kernels of the skeleton pipelines (private).

Everything here is written for accelerators: no data-dependent ``lax.cond``, few library
(LAPACK/cuSOLVER) calls, same-shaped small factorisations batched into one call. The math and
the reasons are in ``docs/design.md`` ("The lean ID/CUR program").

* :func:`sketch_qr` -- damped QR of a sketch pivot block ``X_1`` and its pseudo-inverse
  ``M = (X_1^H X_1 + d^2 I)^{-1} X_1^H`` from one Householder call (no ``Q`` formed);
* :func:`precond_qr` -- right-preconditioned CholeskyQR of a tall ``Y = Q R`` with a
  Newton-Schulz polish of ``(Q^H Q)^{-1}`` (randomized/LU preconditioning, one Cholesky);
* :func:`norm2_bound` -- an upper bound on ``||T||_2`` from traces of powers of ``T T^H``
  (GEMMs only; at most ``k^(1/2^(s+1))`` above the norm);
* :func:`solve_triangular` -- a triangular solve with named arguments.

On CPU every factorisation and solve here is an XLA program (``rdr_jax._src.dense``), not an
OpenBLAS call (whose spinning worker threads slow XLA's GEMMs; issue 30).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rdr_jax._src import dense
from rdr_jax._src import validation as V
from rdr_jax._src.dense import mm

#: squarings of ``T T^H`` in :func:`norm2_bound`: the bound is at most ``k^(1/512)`` above
#: ``||T||_2`` (0.8% for k = 50, 1.4% for k = 1000)
SQUARINGS = 8

#: Newton-Schulz steps of :func:`precond_qr`: the error of ``(Q^H Q)^{-1}`` goes from
#: ``delta`` to ``delta^(2^3)``
NS_STEPS = 3


def ct(a):
    """Conjugate transpose of the last two axes."""
    return jnp.swapaxes(a, -1, -2).conj()


def gram(Y):
    """``Y^H Y`` (last two axes), exactly Hermitian."""
    G = mm(ct(Y), Y)
    return 0.5 * (G + ct(G))


def eps(dtype) -> float:
    return float(np.finfo(np.dtype(dtype)).eps)


def solve_triangular(a, b, *, left: bool, lower: bool, trans: bool = False,
                     unit: bool = False):
    """``op(a)^{-1} b`` (``left``) or ``b op(a)^{-1}``, ``op(a) = a^H`` when ``trans``."""
    return dense.triangular_solve(a, b, left_side=left, lower=lower, transpose_a=trans,
                                  conjugate_a=trans, unit_diagonal=unit)


def pad_to(x, shape):
    """``x`` zero-padded at the end of each axis to ``shape``."""
    return jnp.pad(x, [(0, s - d) for s, d in zip(shape, x.shape)])


def stack_padded(arrays):
    """Stack arrays of one rank, each zero-padded to the largest shape."""
    shape = tuple(max(a.shape[i] for a in arrays) for i in range(arrays[0].ndim))
    return jnp.stack([pad_to(a, shape) for a in arrays])


def damped_block(X1, valid):
    """``[X_1; D]`` with ``D = diag(d, ..., d, 1, ..., 1)``: the damping ``d`` of
    ``damping`` on the valid columns, 1 on the padding columns (whose entries in X_1
    are zero)."""
    diag = jnp.where(valid, damping(X1)[..., None], 1.0).astype(X1.dtype)
    return jnp.concatenate([X1, diag[..., None] * jnp.eye(X1.shape[-1], dtype=X1.dtype)],
                           axis=-2)


def sketch_qr(X1_aug, with_inverse: bool = True):
    """Householder factor of a damped block ``[X_1; D]`` ((l + kb) x kb; batched over leading
    axes) from one geqrf call on ``[[X_1, I_l], [D, 0]]``: ``(R, Qt)`` with
    ``R^H R = X_1^H X_1 + D^2`` (kb x kb upper) and ``Qt = Q_1^H`` (kb x l, the top rows of
    the orthonormal factor, read off the augmented columns), so that
    ``X_1^+ = R^{-1} Qt`` (damped). ``with_inverse=False`` skips the identity columns."""
    *batch, rows, kb = X1_aug.shape
    l = rows - kb
    if with_inverse:
        eye = jnp.broadcast_to(jnp.eye(rows, l, dtype=X1_aug.dtype), (*batch, rows, l))
        R = dense.qr_r(jnp.concatenate([X1_aug, eye], axis=-1), kb)
        return jnp.triu(R[..., :kb, :kb]), R[..., :kb, kb:]
    R = dense.qr_r(X1_aug, kb)
    return jnp.triu(R[..., :kb, :kb]), None


def damping(X1):
    """``d = eps ||X_1||_F`` (1 for an all-zero block): the damping of :func:`damped_block`,
    the rounding level of the block. It keeps every triangular solve finite; which columns
    count is decided by ``independent``."""
    rdt = V.real_dtype(X1.dtype)
    d = eps(rdt) * jnp.sqrt(jnp.sum(jnp.abs(X1) ** 2, axis=(-2, -1))).astype(rdt)
    return jnp.where(d > 0, d, 1.0)


def independent(R, valid, rows: int):
    """The valid columns of a (damped) block of ``rows`` rows whose triangular factor ``R``
    has ``|R_jj| > eps max(rows, kb) max_i |R_ii|`` (the cut-off of a pseudo-inverse on the
    numerical rank): numerically independent of the columns before them. The others --
    zero columns, duplicates, columns past the numerical rank -- get zero coefficients."""
    dg = jnp.where(valid, jnp.abs(jnp.diagonal(R, axis1=-2, axis2=-1)), 0)
    thr = jnp.max(dg, axis=-1, keepdims=True) * eps(dg.dtype) * max(rows, R.shape[-1])
    return valid & (dg > thr)


def restrict(R, keep):
    """``R`` on the ``keep`` block, the identity elsewhere (still upper triangular)."""
    both = keep[..., :, None] & keep[..., None, :]
    return jnp.where(both, R, 0) + jnp.eye(R.shape[-1], dtype=R.dtype) * (~keep)[..., None, :]


def pseudo_inverse_system(R, Qt, valid):
    """``(a, b)`` with ``a^{-1} b = X_1^+`` on the numerical rank (see
    :func:`pseudo_inverse`), for callers that batch the triangular solve with others."""
    keep = independent(R, valid, Qt.shape[-1])
    return restrict(R, keep), jnp.where(keep[..., :, None], Qt, 0)


def pseudo_inverse(R, Qt, valid):
    """``X_1^+ = R^{-1} Q_1^H`` on the numerical rank, from the damped factor of
    :func:`sketch_qr` (one triangular solve, no SVD, no branch): the columns that are
    numerically independent of the columns before them (``independent``) are kept, the
    rows of the others are zero. For a block of full numerical rank this is ``X_1^+`` to
    working accuracy; for a rank-deficient one (the pivots put the independent columns
    first: LUPP/CPQR on a rank-r sketch) the pseudo-inverse of its independent columns.
    (Damping alone is not enough: ``sigma / (sigma^2 + d^2)`` peaks at ``1 / (2d)``, which
    amplifies rounding noise of X along the dependent directions.)"""
    a, b = pseudo_inverse_system(R, Qt, valid)
    return solve_triangular(a, b, left=True, lower=False)


def lam_max_bound(G, squarings: int = SQUARINGS):
    """Upper bound on ``lambda_max`` of a Hermitian PSD ``G`` (batched):
    ``tr(G^p)^(1/p)`` with ``p = 2^squarings``, by repeated squaring with trace
    normalisation (a rolled loop: one small body to compile); at most ``k^(1/p)`` times
    ``lambda_max`` (k the order), inflated by ``1 + 4 k u`` for the rounding of the
    squarings. 0 for ``G = 0``; NaN in G gives NaN."""
    k = G.shape[-1]
    rdt = V.real_dtype(G.dtype)

    def trace(H):
        return jnp.real(jnp.trace(H, axis1=-2, axis2=-1)).astype(rdt)

    t0 = trace(G)
    zero = t0 <= 0
    safe = jnp.where(zero, 1.0, t0)

    def body(j, carry):
        H, log_bound = carry
        H = mm(H, H)
        c = trace(H)
        c = jnp.where(c > 0, c, jnp.where(jnp.isnan(c), c, 1.0))
        return H / c[..., None, None].astype(H.dtype), log_bound + jnp.log(c) * jnp.exp2(
            -(j + 1).astype(rdt))

    _, log_bound = jax.lax.fori_loop(0, squarings, body,
                                     (G / safe[..., None, None].astype(G.dtype), jnp.log(safe)))
    return jnp.where(zero, 0.0, jnp.exp(log_bound) * (1.0 + 4.0 * k * eps(rdt))).astype(rdt)


def norm2_bound(T):
    """Upper bound on ``||T||_2`` (``T`` kb x n or batched; rows may be zero): the square
    root of :func:`lam_max_bound` of ``T T^H``, at least ``||T||_2`` and at most
    ``kb^(1/512)`` times it (up to the rounding of the Gram)."""
    return jnp.sqrt(lam_max_bound(gram(ct(T))))


def interpolation_norm_bound(G, valid):
    """Upper bound on ``||T||_2`` for an interpolation matrix ``T`` with an identity block
    (``T Pi = [I, B]`` on the valid rows), from its Gram ``G = T T^H``: since
    ``T T^H = I + B B^H``, ``||T||_2 <= sqrt(1 + lam_max_bound(G - I))`` -- exactly 1 for
    ``B = 0``, and the slack of the bound only multiplies ``||B||^2``."""
    eye = jnp.diag(valid.astype(G.dtype))
    BB = G - eye
    BB = jnp.where(valid[..., :, None] & valid[..., None, :], 0.5 * (BB + ct(BB)), 0)
    lam = lam_max_bound(BB)
    return jnp.sqrt(1.0 + jnp.maximum(lam, 0.0))          # NaN (from NaN input) propagates


def _cholesky(G):
    """Cholesky factor of the Hermitian PSD ``G`` (batched; one library call), shifted by
    ``u tr(G)`` (exact ties and zero pivots of a Gram of orthogonal-ish columns; corrected by
    the Newton-Schulz polish of :func:`precond_qr`). Should the factorisation still fail --
    a Gram far worse conditioned than ``u^{-1}``, which the preconditioning and the rank cut
    before it exclude -- the diagonal (Jacobi) factor is used instead: the result stays
    finite and :func:`precond_qr` degrades to a regularised least-squares solution."""
    k = G.shape[-1]
    rdt = V.real_dtype(G.dtype)
    dg = jnp.real(jnp.diagonal(G, axis1=-2, axis2=-1)).astype(rdt)
    s = eps(rdt) * jnp.sum(dg, axis=-1)
    L = dense.cholesky(G + (s[..., None, None] * jnp.eye(k, dtype=rdt)).astype(G.dtype))
    jacobi = jnp.sqrt(jnp.maximum(dg, jnp.finfo(rdt).tiny))[..., None, :] * jnp.eye(k, dtype=rdt)
    ok = jnp.all(jnp.isfinite(jnp.diagonal(L, axis1=-2, axis2=-1)), axis=-1)
    return jnp.where(ok[..., None, None], L, jacobi.astype(G.dtype))


def newton_schulz_inverse(G, steps: int = NS_STEPS):
    """``Z ~ G^{-1}`` for a Hermitian ``G`` near the identity: ``Z <- Z (2I - G Z)`` from
    ``Z = I`` (error ``||I - G||^(2^steps)``); eigenvalues far from 1 are regularised
    (``Z`` stays bounded by ``2^steps`` on them)."""
    eye = jnp.eye(G.shape[-1], dtype=G.dtype)
    Z = jnp.broadcast_to(eye, G.shape)
    for _ in range(steps):
        Z = mm(Z, 2 * eye - mm(G, Z))
    return 0.5 * (Z + ct(Z))


def precond_qr(Y, P, valid, blocks: int = 1):
    """Right-preconditioned CholeskyQR of tall ``Y`` (h x kb; batched over leading axes)
    with an invertible upper-triangular preconditioner ``P`` (kb x kb), restricted to the
    numerically independent columns.

    ``valid`` marks the columns to factor (the others -- padding, or columns the sketch
    found dependent, ``independent`` -- are left out: zero in Q, identity in R).
    ``Y_p = Y P^{-1}``; ``Y_p^H Y_p = L L^H`` (``_cholesky``); ``Q = Y_p L^{-H}``,
    ``R = L^H P`` (``Y = Q R``, upper triangular); a column whose ``|R_jj|`` falls below
    ``eps max(h, kb) max_i |R_ii|`` is left out too; ``Z ~ (Q^H Q)^{-1}`` (Newton-Schulz) on
    the kept block, so that ``Q Z Q^H`` projects onto the numerical range of Y and
    ``R^{-1} Z Q^H B`` is the least-squares solution ``Y^+ B`` with zero rows for the
    columns left out. Any invertible P keeps ``range(Q) = range(Y)``; P only has to make
    ``Y P^{-1}`` well-conditioned (a factor of a sketch of Y). Three library calls (two
    solves, one Cholesky).

    Returns ``(Q, R, Z, numerical rank)``."""
    rows, kb = Y.shape[-2:]
    Y = jnp.where(valid[..., None, :], Y, 0)
    P = restrict(P, valid)
    pad = jnp.eye(kb, dtype=Y.dtype) * (~valid)[..., None, :]
    Yp = right_solve_rows(Y, P, blocks, lower=False)
    L = _cholesky(gram(Yp) + pad)
    Q = right_solve_rows(Yp, L, blocks, lower=True, trans=True)
    R = mm(ct(L), P)
    d = jnp.where(valid, jnp.abs(jnp.diagonal(R, axis1=-2, axis2=-1)), 0)
    nonzero = jnp.any(Y != 0, axis=(-2, -1))[..., None]         # Y = 0: rank 0
    dmax = jnp.max(d, axis=-1, keepdims=True) * eps(d.dtype)
    keep = valid & nonzero & (d > dmax * kb)                     # a pseudo-inverse's cut-off
    nr = jnp.sum(keep & (d > dmax * max(rows, kb)), axis=-1)     # the reported rank
    both = keep[..., :, None] & keep[..., None, :]
    Q = jnp.where(keep[..., None, :], Q, 0)
    R = restrict(R, keep)
    eye_out = jnp.eye(kb, dtype=Y.dtype) * (~keep)[..., None, :]
    Z = jnp.where(both, newton_schulz_inverse(gram(Q) + eye_out, NS_STEPS), 0)
    return Q, R, Z, nr.astype(jnp.int32)


def right_solve_rows(Y, a, blocks: int = 1, *, lower: bool, trans: bool = False):
    """``Y op(a)^{-1}`` for a tall ``Y`` (..., h, n). With ``blocks > 1`` (Y row-sharded over
    that many devices) it is ``Y`` times the explicit inverse of the small triangular ``a``
    (one unbatched solve with the identity, then a GEMM that XLA's SPMD partitioner keeps
    local to each row shard): no batched library call, which jaxlib's CPU kernels spread
    over the intra-op thread pool and wait for -- a deadlock when several CPU devices
    share few cores (seen with 2 devices on 2 cores)."""
    if blocks > 1:
        eye = jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), a.shape)
        inv = solve_triangular(a, eye, left=True, lower=lower, trans=trans)
        return mm(Y, inv)
    return solve_triangular(a, Y, left=False, lower=lower, trans=trans)


def left_solves(pairs, separate: bool = False):
    """``[a_i^{-1} b_i]`` for upper triangular ``a_i`` (same order): one batched library call
    (the ``b_i`` zero-padded to a common width), or one call each when ``separate`` (a
    sharded input: see :func:`right_solve_rows`)."""
    if separate:
        return [solve_triangular(a, b, left=True, lower=False) for a, b in pairs]
    width = max(b.shape[-1] for _, b in pairs)
    sol = solve_triangular(jnp.stack([a for a, _ in pairs]),
                           jnp.stack([pad_to(b, (b.shape[0], width)) for _, b in pairs]),
                           left=True, lower=False)
    return [sol[i][:, :b.shape[-1]] for i, (_, b) in enumerate(pairs)]


def numerical_rank(R, valid, rows: int):
    """``#{|R_jj| > eps max(rows, k) max_i |R_ii|}`` over the valid diagonal entries of the
    triangular factor ``R`` of an ``rows x k`` block (0 for a zero block): the count of
    :func:`independent` (one threshold)."""
    return jnp.sum(independent(R, valid, rows), axis=-1).astype(jnp.int32)


def unit_scale(X, return_scale: bool = False):
    """``X / 2^e`` with ``2^e ~ max |X|`` (exact in floating point), and ``2^-e`` when
    ``return_scale``: eta, W and the pivots are scale invariant, but the Gram products behind
    them under/overflow for inputs scaled by 1e-30 or 1e30 in float32."""
    mx = jnp.max(jnp.abs(X))
    e = jnp.where(mx > 0, jnp.floor(jnp.log2(jnp.where(mx > 0, mx, 1.0))), 0.0)
    s = jnp.exp2(-e).astype(X.dtype)
    return (X * s, s) if return_scale else X * s


def with_identity(T, cols, valid):
    """``T`` with ``T(:, cols) = I`` on the valid pivots."""
    eye = jnp.eye(T.shape[0], dtype=T.dtype)
    return T.at[:, cols].set(jnp.where(valid[None, :], eye, T[:, cols]))
