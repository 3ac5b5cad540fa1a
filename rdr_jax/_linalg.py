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
* :func:`solve_triangular` -- ``jax.lax.linalg.triangular_solve`` with named arguments.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

HIGHEST = jax.lax.Precision.HIGHEST

#: squarings of ``T T^H`` in :func:`norm2_bound`: the bound is at most ``k^(1/512)`` above
#: ``||T||_2`` (0.8% for k = 50, 1.4% for k = 1000)
SQUARINGS = 8

#: Newton-Schulz steps of :func:`precond_qr`: the error of ``(Q^H Q)^{-1}`` goes from
#: ``delta`` to ``delta^(2^3)``
NS_STEPS = 3


def mm(a, b):
    return jnp.matmul(a, b, precision=HIGHEST)


def ct(a):
    """Conjugate transpose of the last two axes."""
    return jnp.swapaxes(a, -1, -2).conj()


def gram(Y):
    """``Y^H Y`` (last two axes), exactly Hermitian."""
    G = mm(ct(Y), Y)
    return 0.5 * (G + ct(G))


def eps(dtype) -> float:
    return float(np.finfo(np.dtype(dtype)).eps)


def real_dtype(dtype):
    return np.finfo(np.dtype(dtype)).dtype


def solve_triangular(a, b, *, left: bool, lower: bool, trans: bool = False,
                     unit: bool = False):
    """``op(a)^{-1} b`` (``left``) or ``b op(a)^{-1}``, ``op(a) = a^H`` when ``trans``."""
    return jax.lax.linalg.triangular_solve(a, b, left_side=left, lower=lower,
                                           transpose_a=trans, conjugate_a=trans,
                                           unit_diagonal=unit)


def pad_to(x, shape):
    """``x`` zero-padded at the end of each axis to ``shape``."""
    return jnp.pad(x, [(0, s - d) for s, d in zip(shape, x.shape)])


def stack_padded(arrays):
    """Stack arrays of one rank, each zero-padded to the largest shape."""
    shape = tuple(max(a.shape[i] for a in arrays) for i in range(arrays[0].ndim))
    return jnp.stack([pad_to(a, shape) for a in arrays])


def damped_block(X1, valid, k, l):
    """``[X_1; D]`` with ``D = diag(d, ..., d, 1, ..., 1)``: the damping ``d`` of
    :func:`damping` on the ``k`` valid columns, 1 on the padding columns (whose entries in
    X_1 are zero)."""
    diag = jnp.where(valid, damping(X1, k, l), 1.0).astype(X1.dtype)
    return jnp.concatenate([X1, jnp.diag(diag)], axis=0)


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
        R = jnp.linalg.qr(jnp.concatenate([X1_aug, eye], axis=-1), mode="r")
        return jnp.triu(R[..., :kb, :kb]), R[..., :kb, kb:]
    R = jnp.linalg.qr(X1_aug, mode="r")
    return jnp.triu(R[..., :kb, :kb]), None


#: a pivot-block column whose damped diagonal entry ``|R_jj|`` is below this many times the
#: damping ``d`` is numerically dependent on the previous ones (see :func:`pseudo_inverse`)
RANK_FACTOR = 16.0


def damping(X1, k, l):
    """``d = eps sqrt(l k) ||X_1||_F`` (1 for an all-zero block): the damping of
    :func:`damped_block`, about the rounding level of the block."""
    rdt = real_dtype(X1.dtype)
    fro = jnp.sqrt(jnp.sum(jnp.abs(X1) ** 2)).astype(rdt)
    d = (eps(rdt) * jnp.sqrt((jnp.asarray(l) * jnp.asarray(k)).astype(rdt))) * fro
    return jnp.where(d > 0, d, 1.0)


def pseudo_inverse_system(R, Qt, valid, d):
    """``(a, b)`` with ``a^{-1} b = X_1^+`` on the numerical rank (see
    :func:`pseudo_inverse`), for callers that batch the triangular solve with others."""
    good = valid & (jnp.abs(jnp.diagonal(R, axis1=-2, axis2=-1)) > RANK_FACTOR * d[..., None])
    keep = jnp.cumprod(good.astype(jnp.int32), axis=-1).astype(bool)
    both = keep[..., :, None] & keep[..., None, :]
    Rk = jnp.where(both, R, 0) + jnp.eye(R.shape[-1], dtype=R.dtype) * (~keep)[..., None, :]
    return Rk, jnp.where(keep[..., :, None], Qt, 0)


def pseudo_inverse(R, Qt, valid, d):
    """``X_1^+ = R^{-1} Q_1^H`` on the numerical rank, from the damped factor of
    :func:`sketch_qr` (one triangular solve, no SVD, no branch): the leading columns whose
    diagonal entries exceed ``RANK_FACTOR d`` are kept, and the pseudo-inverse of that
    leading block is returned (rows past it zero). The pivots order the block so that a
    numerically dependent column comes after the independent ones (LUPP/CPQR on a rank-r
    sketch: the first r pivots are independent), so the leading block spans ``range(X_1)``.
    (Damping alone is not enough: ``sigma / (sigma^2 + d^2)`` peaks at ``1 / (2d)``, which
    amplifies rounding noise of X along the dependent directions.)"""
    Rk, b = pseudo_inverse_system(R, Qt, valid, d)
    return solve_triangular(Rk, b, left=True, lower=False)


def lam_max_bound(G, squarings: int = SQUARINGS):
    """Upper bound on ``lambda_max`` of a Hermitian PSD ``G`` (batched):
    ``tr(G^p)^(1/p)`` with ``p = 2^squarings``, by repeated squaring with trace
    normalisation; at most ``k^(1/p)`` times ``lambda_max`` (k the order), inflated by
    ``1 + 4 k u`` for the rounding of the squarings. NaN in G gives NaN."""
    k = G.shape[-1]
    rdt = real_dtype(G.dtype)
    log_bound = jnp.zeros(G.shape[:-2], rdt)
    zero = jnp.real(jnp.trace(G, axis1=-2, axis2=-1)) <= 0
    H = G
    for j in range(squarings + 1):
        c = jnp.real(jnp.trace(H, axis1=-2, axis2=-1)).astype(rdt)
        c = jnp.where(c > 0, c, jnp.where(jnp.isnan(c), c, 1.0))
        log_bound = log_bound + jnp.log(c) * (2.0 ** -j)
        if j < squarings:
            H = H / c[..., None, None].astype(H.dtype)
            H = mm(H, H)
            H = 0.5 * (H + ct(H))
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
    return jnp.sqrt(1.0 + jnp.maximum(jnp.where(jnp.isnan(lam), lam, lam), 0.0))


def _guarded_cholesky(G, rows: int):
    """Cholesky factor of the Hermitian PSD ``G`` (batched): the plain factor when it exists
    and is accurate (``(max L_ii / min L_ii)^2 <= 0.1 / (k u)``), else the factor of
    ``G + s I`` with Fukaya et al.'s shift ``s = 11 (h k + k (k + 1)) u tr(G)`` (h the
    number of rows of the Gram's factor). Both in one batched call."""
    k = G.shape[-1]
    rdt = real_dtype(G.dtype)
    u = eps(rdt) / 2
    tr = jnp.real(jnp.trace(G, axis1=-2, axis2=-1)).astype(rdt)
    s = 11.0 * (rows * k + k * (k + 1)) * u * jnp.where(tr > 0, tr, 1.0)
    eye = jnp.eye(k, dtype=G.dtype)
    both = jnp.linalg.cholesky(jnp.concatenate([G[None], (G + s[..., None, None] * eye)[None]]))
    L0, Ls = both[0], both[1]
    dg = jnp.abs(jnp.diagonal(L0, axis1=-2, axis2=-1))
    ok = (jnp.all(jnp.isfinite(L0), axis=(-2, -1))
          & ((jnp.max(dg, axis=-1) / jnp.min(dg, axis=-1)) ** 2 <= 0.1 / (k * u)))
    return jnp.where(ok[..., None, None], L0, Ls)


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
    numerical rank of Y.

    ``Y_p = Y P^{-1}``; ``Y_p^H Y_p = L L^H`` (guarded Cholesky, padding block set to I);
    ``Q = Y_p L^{-H}``, ``R = L^H P`` (``Y = Q R``, upper triangular). The leading columns
    of Y whose ``|R_jj|`` exceed ``eps max(h, kb) max_i |R_ii|`` are kept (the pivots put
    numerically dependent columns last): Q's other columns are zeroed, R's other block is
    the identity, and ``Z ~ (Q^H Q)^{-1}`` (Newton-Schulz) on the kept block, so that
    ``Q Z Q^H`` is the projector onto the numerical range of Y and ``R^{-1} Z Q^H B`` the
    minimum-norm-like least-squares solution ``Y^+ B``. Any invertible P keeps
    ``range(Q) = range(Y)``; P only has to make ``Y P^{-1}`` well-conditioned (a sketch or
    LU factor). Three library calls (two solves, one Cholesky).

    Returns ``(Q, R, Z, numerical rank)``."""
    rows, kb = Y.shape[-2:]
    pad = jnp.diag((~valid).astype(Y.dtype))
    Yp = right_solve_rows(Y, P, blocks, lower=False)
    L = _guarded_cholesky(gram(Yp) + pad, rows)
    Q = right_solve_rows(Yp, L, blocks, lower=True, trans=True)
    R = mm(ct(L), P)
    d = jnp.where(valid, jnp.abs(jnp.diagonal(R, axis1=-2, axis2=-1)), 0)
    nonzero = jnp.any(Y != 0, axis=(-2, -1))[..., None]         # Y = 0: rank 0
    good = valid & nonzero & (d > jnp.max(d, axis=-1, keepdims=True) * eps(d.dtype)
                              * max(rows, kb))
    keep = jnp.cumprod(good.astype(jnp.int32), axis=-1).astype(bool)
    both = keep[..., :, None] & keep[..., None, :]
    Q = jnp.where(keep[..., None, :], Q, 0)
    R = jnp.where(both, R, 0) + jnp.eye(kb, dtype=R.dtype) * (~keep)[..., None, :]
    eye_out = jnp.eye(kb, dtype=Y.dtype) * (~keep)[..., None, :]
    Z = jnp.where(both, newton_schulz_inverse(gram(Q) + eye_out), 0)
    return Q, R, Z, jnp.sum(good, axis=-1).astype(jnp.int32)


def right_solve_rows(Y, a, blocks: int = 1, *, lower: bool, trans: bool = False):
    """``Y op(a)^{-1}`` for a tall ``Y`` (..., h, n), written as ``blocks`` independent row
    blocks (a batched solve: XLA's SPMD partitioner keeps a batch dimension local, so a
    row-sharded Y is never gathered); ``blocks`` is ignored when it does not divide h."""
    *batch, h, n = Y.shape
    b = blocks if (blocks > 1 and h % blocks == 0) else 1
    Yb = Y.reshape(*batch, b, h // b, n)
    ab = jnp.broadcast_to(jnp.expand_dims(a, -3), (*a.shape[:-2], b, n, n))
    ab = jnp.broadcast_to(ab, (*batch, b, n, n))
    X = solve_triangular(ab, Yb, left=False, lower=lower, trans=trans)
    return X.reshape(*batch, h, n)


def numerical_rank(R, valid, rows: int):
    """``#{|R_jj| > eps max(rows, k) max_i |R_ii|}`` over the valid diagonal entries of the
    triangular factor ``R`` of an ``rows x k`` block (0 for a zero block)."""
    d = jnp.where(valid, jnp.abs(jnp.diagonal(R, axis1=-2, axis2=-1)), 0)
    thr = jnp.max(d, axis=-1, keepdims=True) * eps(d.dtype) * max(rows, R.shape[-1])
    return jnp.sum((d > thr) & valid, axis=-1).astype(jnp.int32)
