"""Small dense factorisations written as XLA programs (private), used on CPU.

On CPU, jaxlib runs ``jax.lax.linalg`` (getrf, geqrf, potrf, trsm) as calls into the
OpenBLAS that ships with scipy. OpenBLAS runs a large enough call on its own thread pool,
whose workers keep spinning after the call; XLA's next GEMM, on XLA's own intra-op pool,
then fights them for the cores (issue 30: a column ID 4-27x slower than with one BLAS thread
on a 2-core machine). A library may not limit its user's thread pools, so the skeleton
pipelines do not enter OpenBLAS at all on CPU: the factorisations below are blocked
algorithms whose flops are XLA GEMMs (on XLA's pool) and whose panels are short rolled
loops. On GPU/TPU the library kernels (cuSOLVER, XLA's expanders) are used unchanged: the
choice is made per platform at lowering time (``jax.lax.platform_dependent``).

Every kernel has static shapes (padding to a multiple of the block size ``NB`` with identity
or zero blocks) and rolled loops (one small body to compile). The results agree with LAPACK's
to rounding: the same Householder convention (``dlarfg``: ``beta = -sign(Re alpha) ||x||``),
LU with LAPACK's pivot and tie rule (the first largest ``|x|`` in the current row order after
the swaps), Cholesky ``G = L L^H``. Derivations and measurements: ``docs/performance.md``
("OpenBLAS threads and the XLA kernels").

* :func:`lu` -- ``(lu, pivots, perm)`` like ``jax.lax.linalg.lu`` (partial pivoting; large
  matrices, where getrf's own time dwarfs a thread fight, go to LAPACK on CPU too);
* :func:`cholesky` -- lower Cholesky factor like ``jax.lax.linalg.cholesky`` (NaN when G is
  not positive definite);
* :func:`triangular_solve` -- like ``jax.lax.linalg.triangular_solve``;
* :func:`qr_r` -- the first ``f`` rows of R of a Householder QR (``f`` reflectors applied to
  every column), like ``jnp.linalg.qr(A, mode="r")[:f]``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

HIGHEST = jax.lax.Precision.HIGHEST

#: block size of the blocked kernels (panel width; diagonal blocks inverted explicitly)
NB = 32


def mm(a, b):
    """``a @ b`` at HIGHEST precision (full float32/float64 passes on every backend)."""
    return jnp.matmul(a, b, precision=HIGHEST)


def _ct(a):
    return jnp.swapaxes(a, -1, -2).conj()


def _blocking(k: int) -> tuple[int, int]:
    """``(nb, K)``: the block size for order k and k rounded up to a multiple of it."""
    nb = min(NB, k)
    return nb, -(-k // nb) * nb


def _batched(fn, core_ndim):
    """``fn`` mapped over the leading axes of its array arguments (core rank ``core_ndim``)."""
    @functools.wraps(fn)
    def wrapped(*args):
        batch = args[0].ndim - core_ndim
        f = fn
        for _ in range(batch):
            f = jax.vmap(f)
        return f(*args)
    return wrapped


# --------------------------------------------------------------------------------------
# triangular inverse of a small block and the blocked triangular solve
# --------------------------------------------------------------------------------------
def _lower_inverse_small(T, unit: bool):
    """``T^{-1}`` of a small lower triangular T (k x k, batched), by forward substitution
    row by row (k steps of a rolled loop): ``X[r] = (e_r - T[r, :r] X[:r]) / T[r, r]``."""
    k = T.shape[-1]
    eye = jnp.eye(k, dtype=T.dtype)
    rows = jnp.arange(k)

    def body(r, X):
        t = jnp.where(rows < r, T[..., r, :], 0)                     # T[r, :r]
        xr = eye[r] - jnp.einsum("...j,...jc->...c", t, X, precision=HIGHEST)
        d = T[..., r, r] if not unit else jnp.ones_like(T[..., r, r])
        return X.at[..., r, :].set(xr / d[..., None])

    return jax.lax.fori_loop(0, k, body, jnp.zeros_like(T))


def _lower_left_solve(T, B, unit: bool):
    """``T^{-1} B`` for lower triangular T (..., k, k) and B (..., k, N): blocked forward
    substitution, ``X_i = T_ii^{-1} (B_i - T_i: X)`` (the rows of X not yet solved are zero),
    with the diagonal blocks inverted by :func:`_lower_inverse_small` (the scheme of XLA's
    own TriangularSolveExpander)."""
    *batch, k, N = B.shape
    nb, K = _blocking(k)
    if K != k:
        pad = [(0, 0)] * len(batch)
        T = jnp.pad(T, pad + [(0, K - k), (0, K - k)]) + jnp.diag(
            (jnp.arange(K) >= k).astype(T.dtype))
        B = jnp.pad(B, pad + [(0, K - k), (0, 0)])
    nblk = K // nb
    if unit:
        T = jnp.where(jnp.eye(K, dtype=bool), jnp.ones((), T.dtype), T)
    T4 = T.reshape(*batch, nblk, nb, nblk, nb)
    D = jnp.moveaxis(jnp.diagonal(T4, axis1=-4, axis2=-2), -1, -3)    # (..., nblk, nb, nb)
    Dinv = _lower_inverse_small(D, False)
    if nblk == 1:
        return mm(Dinv[..., 0, :, :], B)[..., :k, :]

    def body(i, X):
        rows = jax.lax.dynamic_slice_in_dim(T, i * nb, nb, axis=-2)
        rhs = jax.lax.dynamic_slice_in_dim(B, i * nb, nb, axis=-2) - mm(rows, X)
        Di = jax.lax.dynamic_index_in_dim(Dinv, i, axis=-3, keepdims=False)
        return jax.lax.dynamic_update_slice_in_dim(X, mm(Di, rhs), i * nb, axis=-2)

    X = jax.lax.fori_loop(0, nblk, body, jnp.zeros(B.shape, B.dtype))
    return X[..., :k, :]


def _flip(x):
    return jnp.flip(x, axis=(-2, -1))


def _triangular_solve_xla(a, b, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    # op(a): conj/transpose applied explicitly (k x k, cheap)
    if transpose_a:
        a = jnp.swapaxes(a, -1, -2)
        lower = not lower
    if conjugate_a:
        a = a.conj()
    if not left_side:
        # X op(a) = b: b (h x k) is typically tall (a basis): one GEMM with op(a)^{-1}
        # (the inverse by a blocked solve against I) instead of transposing b
        eye = jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), a.shape)
        return mm(b, _triangular_solve_xla(a, eye, True, lower, False, False, unit_diagonal))
    if not lower:                                  # J a J is lower; a^{-1} b = J (J a J)^{-1} J b
        return jnp.flip(_lower_left_solve(_flip(a), jnp.flip(b, axis=-2), unit_diagonal),
                        axis=-2)
    return _lower_left_solve(a, b, unit_diagonal)


def triangular_solve(a, b, *, left_side=False, lower=False, transpose_a=False,
                     conjugate_a=False, unit_diagonal=False):
    """``jax.lax.linalg.triangular_solve`` with the same arguments; on CPU a blocked XLA
    program (no OpenBLAS call), elsewhere the library kernel."""
    args = (left_side, lower, transpose_a, conjugate_a, unit_diagonal)
    return jax.lax.platform_dependent(
        a, b, cpu=lambda a, b: _triangular_solve_xla(a, b, *args),
        default=lambda a, b: jax.lax.linalg.triangular_solve(
            a, b, left_side=left_side, lower=lower, transpose_a=transpose_a,
            conjugate_a=conjugate_a, unit_diagonal=unit_diagonal))


# --------------------------------------------------------------------------------------
# Cholesky
# --------------------------------------------------------------------------------------
def _cholesky_small(D):
    """Lower Cholesky factor of a small Hermitian D (nb x nb, unblocked right-looking;
    NaN from the first non-positive pivot on)."""
    n = D.shape[-1]
    rows = jnp.arange(n)

    def body(j, A):
        d = jnp.sqrt(jnp.real(A[j, j]))
        c = jnp.where(rows > j, A[:, j] / d.astype(A.dtype), 0)
        A = A - jnp.outer(c, c.conj())
        c = c.at[j].set(d.astype(A.dtype))
        return A.at[:, j].set(c)

    return jnp.tril(jax.lax.fori_loop(0, n, body, D))


def _cholesky_xla_one(G):
    k = G.shape[-1]
    nb, K = _blocking(k)
    if K != k:
        G = jnp.pad(G, ((0, K - k), (0, K - k))) + jnp.diag(
            (jnp.arange(K) >= k).astype(G.dtype))
    nblk = K // nb
    if nblk == 1:
        return _cholesky_small(G)[:k, :k]
    rows = jnp.arange(K)

    def body(i, A):
        col = jax.lax.dynamic_slice(A, (0, i * nb), (K, nb))       # updated panel
        Ld = _cholesky_small(jax.lax.dynamic_slice(col, (i * nb, 0), (nb, nb)))
        below = (rows >= (i + 1) * nb)[:, None]
        L21 = jnp.where(below, mm(col, _ct(_lower_inverse_small(Ld, False))), 0)
        A = A - mm(L21, _ct(L21))                                 # trailing block only
        new = L21 + jax.lax.dynamic_update_slice(jnp.zeros_like(col), Ld, (i * nb, 0))
        return jax.lax.dynamic_update_slice(A, new, (0, i * nb))

    return jnp.tril(jax.lax.fori_loop(0, nblk, body, G))[:k, :k]


def cholesky(G):
    """Lower Cholesky factor of Hermitian positive definite ``G`` (batched; the lower
    triangle is read), like ``jax.lax.linalg.cholesky(G, symmetrize_input=False)``; NaN
    entries where G is not numerically positive definite. CPU: blocked XLA program."""
    return jax.lax.platform_dependent(
        G, cpu=_batched(_cholesky_xla_one, 2),
        default=lambda G: jax.lax.linalg.cholesky(G, symmetrize_input=False))


# --------------------------------------------------------------------------------------
# LU with partial pivoting
# --------------------------------------------------------------------------------------
def _cabs1(x):
    """BLAS's pivot magnitude (i?amax): ``|x|`` for real, ``|Re x| + |Im x|`` for complex."""
    if np.issubdtype(np.dtype(x.dtype), np.complexfloating):
        return jnp.abs(jnp.real(x)) + jnp.abs(jnp.imag(x))
    return jnp.abs(x)


def _lu_xla_one(A, blocked: bool = False):
    """Blocked right-looking LUPP of A (r x c) without moving rows: ``perm`` maps positions
    to rows (LAPACK's swaps applied to it), the factors stay in the rows of A, and the pivot
    of step t is the first largest ``|A(perm[q], t)|`` over positions ``q >= t`` (LAPACK's
    rule, ties included). One panel without trailing columns (``c <= NB``, ``r >= c``: the
    pipelines' sketches and skeleton blocks at k <= 32) runs the panel loop alone, the same
    arithmetic in a smaller program; ``blocked=True`` forces the panel-and-update loop."""
    r, c = A.shape
    steps = min(r, c)
    nb, S = _blocking(steps)
    Ct = max(c, S)
    if Ct > c:                                  # padding columns: never pivoted on
        A = jnp.pad(A, ((0, 0), (0, Ct - c)))
    positions = jnp.arange(r)
    cols = jnp.arange(Ct)

    def panel_step(t, carry):
        P, perm, pos, j0 = carry
        j = t - j0
        colv = jnp.take(P[:, j], perm)                          # column t in position order
        mag = jnp.where(positions >= t, _cabs1(colv), -1)
        q = jnp.argmax(mag).astype(perm.dtype)
        a, b = perm[t], perm[q]
        perm = perm.at[t].set(b).at[q].set(a)
        pos = pos.at[b].set(jnp.asarray(t, pos.dtype)).at[a].set(q)
        piv = P[b, j]
        below = pos > t
        lcol = jnp.where(below, P[:, j] / jnp.where(piv == 0, jnp.ones((), P.dtype), piv), 0)
        later = jnp.arange(nb) > j
        P = P - jnp.where(later[None, :], jnp.outer(lcol, P[b]), 0)
        P = P.at[:, j].set(jnp.where(below, lcol, P[:, j]))
        return P, perm, pos, j0

    def panel(i, carry):
        M, perm, pos = carry
        j0 = i * nb
        P = jax.lax.dynamic_slice_in_dim(M, j0, nb, axis=1)
        n_here = jnp.minimum(nb, steps - j0)
        P, perm, pos, _ = jax.lax.fori_loop(j0, j0 + n_here, panel_step, (P, perm, pos, j0))
        # trailing columns: U12 = L11^{-1} A(pivot rows, trailing); A(rows below) -= L21 U12
        slot = j0 + jnp.arange(nb)
        in_panel = slot < j0 + n_here
        prow = jnp.where(in_panel, jnp.take(perm, jnp.minimum(slot, r - 1)), r)  # r: none
        both = in_panel[:, None] & in_panel[None, :]
        L11 = jnp.where(both, jnp.tril(jnp.take(P, prow, axis=0, mode="fill", fill_value=0),
                                       -1), 0)
        trailing = (cols >= j0 + nb)[None, :] & in_panel[:, None]
        Mp = jnp.take(M, prow, axis=0, mode="fill", fill_value=0)
        U12 = _lower_left_solve(L11, jnp.where(trailing, Mp, 0), True)
        L21 = jnp.where((pos >= j0 + n_here)[:, None] & in_panel[None, :], P, 0)
        M = M - mm(L21, U12)
        M = M.at[prow].set(jnp.where(trailing, U12, Mp), mode="drop")
        M = jax.lax.dynamic_update_slice_in_dim(M, P, j0, axis=1)
        return M, perm, pos

    perm0 = jnp.arange(r, dtype=jnp.int32)
    if S == nb == Ct and not blocked:     # the panel is the whole matrix: no update
        M, perm, _, _ = jax.lax.fori_loop(0, steps, panel_step, (A, perm0, perm0, 0))
    else:
        M, perm, _ = jax.lax.fori_loop(0, S // nb, panel, (A, perm0, perm0))
    return jnp.take(M[:, :c], perm, axis=0), perm


def _pivots_from_perm(perm, steps):
    """LAPACK's swap sequence (``pivots[t]``: the position swapped with t) from the final
    permutation (positions -> rows), replaying the swaps on the identity."""
    r = perm.shape[-1]

    def body(t, carry):
        cur, where_, piv = carry                 # cur: position -> row now
        row = perm[t]
        q = where_[row]
        a = cur[t]
        cur = cur.at[t].set(row).at[q].set(a)
        where_ = where_.at[row].set(jnp.asarray(t, where_.dtype)).at[a].set(q)
        return cur, where_, piv.at[t].set(q)

    ident = jnp.arange(r, dtype=jnp.int32)
    _, _, piv = jax.lax.fori_loop(0, steps, body, (ident, ident, jnp.zeros((steps,), jnp.int32)))
    return piv


def _lu_xla(A):
    steps = min(A.shape[-2:])

    def one(A):
        lu, perm = _lu_xla_one(A)
        return lu, _pivots_from_perm(perm, steps).astype(jnp.int32), perm.astype(jnp.int32)

    return _batched(one, 2)(A)


#: entries of one factorised matrix above which the CPU LU is LAPACK's after all: the XLA
#: kernel's panel loop costs ~3x getrf in isolation (+50 ms at 2^21 entries, +0.4 s at
#: 50000 x 200, seconds at 10^6 x 200), against at most ~0.1 s of thread fight per call
LU_LAPACK_ENTRIES = 1 << 21


def lu(A):
    """``(lu, pivots, perm)`` of LU with partial pivoting, like ``jax.lax.linalg.lu`` (A
    batched over leading axes). CPU: a blocked XLA program with LAPACK's pivot rule for
    matrices of at most :data:`LU_LAPACK_ENTRIES` entries, LAPACK's getrf above (the same
    pivots: the same rule)."""
    def lib(A):
        return tuple(jax.lax.linalg.lu(A))
    if A.shape[-2] * A.shape[-1] > LU_LAPACK_ENTRIES:
        return lib(A)
    return jax.lax.platform_dependent(A, cpu=_lu_xla, default=lib)


# --------------------------------------------------------------------------------------
# Householder QR (R only)
# --------------------------------------------------------------------------------------
def _qr_r_xla_one(A, f: int, blocked: bool = False):
    """Top f rows of R after f Householder reflectors (LAPACK's ``zlarfg`` convention),
    blocked: each panel of ``nb`` columns is factored by a rolled loop, then applied to the
    whole matrix as ``(I - V T V^H)^H`` (compact WY, two GEMMs). One panel without trailing
    columns (``f = c <= NB``) runs the reflector loop alone, the same arithmetic in a smaller
    program; ``blocked=True`` forces the panel-and-update loop."""
    r, c = A.shape
    nb, F = _blocking(f)
    if F > c:
        A = jnp.pad(A, ((0, 0), (0, F - c)))
    C = A.shape[1]
    if F > r:
        A = jnp.pad(A, ((0, F - r), (0, 0)))
    R_ = A.shape[0]
    rows = jnp.arange(R_)
    rdt = np.finfo(np.dtype(A.dtype)).dtype
    cplx = np.issubdtype(np.dtype(A.dtype), np.complexfloating)

    def reflect(t, carry):
        P, V, tau, j0 = carry
        j = t - j0
        x = P[:, j]
        alpha = x[t]
        tail = rows > t
        xn2 = jnp.sum(jnp.where(tail, jnp.abs(x) ** 2, 0)).astype(rdt)
        ar = jnp.real(alpha).astype(rdt)
        ai = jnp.imag(alpha).astype(rdt) if cplx else jnp.zeros((), rdt)
        nrm = jnp.sqrt(ar * ar + ai * ai + xn2)
        trivial = (xn2 == 0) & (ai == 0)
        beta = jnp.where(ar >= 0, -nrm, nrm)
        beta_s = jnp.where(trivial, 1, beta)
        tau_t = jnp.where(trivial, 0, (beta_s - alpha) / beta_s).astype(A.dtype)
        denom = jnp.where(trivial, 1, alpha - beta_s)
        v = jnp.where(tail, x / denom, 0).at[t].set(1).astype(A.dtype)
        v = jnp.where(rows >= t, v, 0)
        later = jnp.arange(nb) > j
        w = mm(v.conj()[None, :], P)[0]                              # v^H P
        P = P - jnp.where(later[None, :], jnp.conj(tau_t) * jnp.outer(v, w), 0)
        newcol = jnp.where(rows < t, x, 0).at[t].set(jnp.where(trivial, alpha, beta))
        P = P.at[:, j].set(newcol.astype(A.dtype))
        return P, V.at[:, j].set(v), tau.at[j].set(tau_t), j0

    def t_factor(V, tau):
        """Upper triangular T with ``H_1 ... H_nb = I - V T V^H`` (LAPACK dlarft)."""
        VV = mm(_ct(V), V)
        idx = jnp.arange(nb)

        def body(j, T):
            col = -tau[j] * mm(T, jnp.where(idx < j, VV[:, j], 0)[:, None])[:, 0]
            col = jnp.where(idx < j, col, 0).at[j].set(tau[j])
            return T.at[:, j].set(col)

        return jax.lax.fori_loop(0, nb, body, jnp.zeros((nb, nb), A.dtype))

    def panel(i, M):
        j0 = i * nb
        P = jax.lax.dynamic_slice(M, (0, j0), (R_, nb))
        V0 = jnp.zeros((R_, nb), A.dtype)
        tau0 = jnp.zeros((nb,), A.dtype)
        P, V, tau, _ = jax.lax.fori_loop(j0, j0 + nb, reflect, (P, V0, tau0, j0))
        T = t_factor(V, tau)
        after = (jnp.arange(C) >= j0 + nb)[None, :]
        W = mm(_ct(T), mm(_ct(V), jnp.where(after, M, 0)))           # T^H V^H A_trail
        M = M - mm(V, W)
        return jax.lax.dynamic_update_slice(M, P, (0, j0))

    if F == nb == C and not blocked:      # the panel is the whole matrix: no update
        M = jax.lax.fori_loop(0, nb, reflect, (A, jnp.zeros((R_, nb), A.dtype),
                                               jnp.zeros((nb,), A.dtype), 0))[0]
    else:
        M = jax.lax.fori_loop(0, F // nb, panel, A)
    return jnp.triu(M[:f, :c])


def qr_r(A, f: int):
    """The first ``f`` rows of the triangular factor of a Householder QR of A (r x c,
    batched; ``f <= min(r, c)`` reflectors, applied to all c columns): equal to
    ``jnp.linalg.qr(A, mode="r")[..., :f, :]`` up to rounding (same sign convention). CPU:
    a blocked XLA program."""
    def lib(A):
        return jnp.linalg.qr(A, mode="r")[..., :f, :]
    return jax.lax.platform_dependent(A, cpu=_batched(lambda a: _qr_r_xla_one(a, f), 2),
                                      default=lib)
