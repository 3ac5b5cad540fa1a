"""Pivoting schemes on a row-basis approximator (thesis Sec. ``subsec:pivoting_mat_decomp``).

Every function here works on a small matrix ``X`` (l x n, typically a sketch ``Gamma A`` or
approximate right singular vectors ``V_k^H``) and returns k column indices ``J``. They are
the "Line 3" of the general framework (Algorithm ``algo:sketch_pivot_CUR_general``); row
skeletons use the same functions on ``C^H`` (Line 4).

* :func:`lupp` -- LU with partial pivoting on ``X^T`` (Eq. ``eq:def_LUPP``): step t picks
  ``j_t = argmax_j |X^{(t-1)}(t, j)|`` in the current Schur complement. O(n k^2); available on
  CPU, GPU and TPU (``jax.lax.linalg.lu``). Its first k pivots depend only on the first k
  rows of X, so oversampling does not change them (it pays off in :func:`interpolation`).
* :func:`cpqr` -- column-pivoted QR (Eq. ``eq:def_QRCP``): step t picks the column of
  largest residual norm. ``impl="lapack"`` calls geqp3 (CPU/GPU; there is no TPU lowering,
  so it raises :class:`BackendError` there); ``impl="xla"`` is a portable pivoted
  Gram-Schmidt in ``lax.fori_loop`` (O(k l n), runs on every backend).
* :func:`leverage_scores` / :func:`leverage` -- sampling by the leverage scores
  ``p_j = ||V_k^H(:, j)||^2 / k`` without replacement (Gumbel top-k), or the deterministic
  top-k the authors' code used.
* :func:`maxvol_refine` -- spectrum-revealing swaps: while some interpolation coefficient
  ``|T_ij| > g`` swap column ``J_i`` for column ``j``; each swap multiplies the volume
  ``|det X(:, J)|`` by ``|T_ij| > g`` (used by SRCUR).
* :func:`interpolation` -- ``T = X_1^+ X`` (k x n, ``T[:, J] = I``) and the a-posteriori
  factor ``eta = ||[I, X_1^+ X_2]||_2 = sqrt(1 + ||X_1^+ X_2||_2^2)`` of
  Thm ``thm:pivoting_on_rangeapprox_error_bound``.

All functions are jit/vmap compatible with ``k`` static.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from rdr_jax.operators import HIGHEST

__all__ = ["BackendError", "lupp", "cpqr", "leverage_scores", "leverage", "maxvol_refine",
           "interpolation", "eta_from_interpolation", "eta_from_gram", "eta_rows_from_gram",
           "cpqr_available"]


class BackendError(RuntimeError):
    """A pivoting scheme has no implementation on the current backend (CPQR on TPU)."""


def cpqr_available(platform: str | None = None) -> bool:
    """Whether LAPACK-style CPQR (geqp3) lowers on ``platform`` (default: the default backend).

    XLA lowers ``jax.lax.linalg.qr(pivoting=True)`` on CPU (LAPACK) and GPU (cuSOLVER/MAGMA)
    but not on TPU.
    """
    platform = platform or jax.default_backend()
    return platform in ("cpu", "gpu", "cuda", "rocm")


def lupp(X: jax.Array, k: int) -> jax.Array:
    """First k column pivots of LU with partial pivoting on ``X^T`` (Eq. ``eq:def_LUPP``).

    ``X Pi = L_l [R_1^LU, R_2^LU]`` with ``|R^LU(i, j)| <= 1``; the returned ``J`` are the
    first k columns of ``Pi``. Only ``X[:k]`` is factored (the first k pivots of partial
    pivoting depend only on the first k rows), O(n k^2).

    Args:
      X: (l x n) with ``k <= l <= n``.
      k: number of pivots (static).

    Returns:
      ``J`` (k,) int32, distinct column indices in pivot order.
    """
    _, _, perm = jax.lax.linalg.lu(X[:k].T)
    return perm[:k].astype(jnp.int32)


def _cpqr_xla(X, k):
    """Pivoted modified Gram-Schmidt with norm recomputation (portable CPQR, O(k l n))."""
    l, n = X.shape
    rdt = jnp.finfo(X.dtype).dtype

    def body(t, carry):
        R, J, taken = carry
        norms = jnp.sum(jnp.abs(R) ** 2, axis=0).astype(rdt)
        norms = jnp.where(taken, -1.0, norms)
        j = jnp.argmax(norms)
        col = R[:, j]
        nrm = jnp.sqrt(jnp.sum(jnp.abs(col) ** 2))
        q = col / jnp.where(nrm > 0, nrm, 1.0)
        R = R - jnp.outer(q, jnp.matmul(q.conj(), R, precision=HIGHEST))
        # re-orthogonalise once (twice is enough) to keep the residual clean
        R = R - jnp.outer(q, jnp.matmul(q.conj(), R, precision=HIGHEST))
        return R, J.at[t].set(j.astype(jnp.int32)), taken.at[j].set(True)

    init = (X, jnp.zeros((k,), jnp.int32), jnp.zeros((n,), bool))
    _, J, _ = jax.lax.fori_loop(0, k, body, init)
    return J


def cpqr(X: jax.Array, k: int, *, impl: str = "lapack") -> jax.Array:
    """First k column pivots of QR with column pivoting on ``X`` (Eq. ``eq:def_QRCP``).

    Args:
      X: (l x n), ``k <= min(l, n)``.
      k: number of pivots (static).
      impl: ``"lapack"`` (geqp3 via ``jax.lax.linalg.qr(pivoting=True)``; CPU/GPU only) or
        ``"xla"`` (pivoted Gram-Schmidt in a ``fori_loop``; every backend, same pivots up to
        ties).

    Returns:
      ``J`` (k,) int32.

    Raises:
      BackendError: ``impl="lapack"`` on a backend without a CPQR lowering (TPU).
    """
    if impl == "xla":
        return _cpqr_xla(X, k)
    if impl != "lapack":
        raise ValueError(f"impl must be 'lapack' or 'xla'; got {impl!r}")
    if not cpqr_available():
        raise BackendError(
            f"column-pivoted QR (geqp3) has no lowering on backend {jax.default_backend()!r}; "
            "use method='lupp' (available everywhere) or cpqr_impl='xla' (portable pivoted "
            "Gram-Schmidt)")
    _, _, P = jax.lax.linalg.qr(X, pivoting=True, full_matrices=False)
    return P[:k].astype(jnp.int32)


def leverage_scores(V: jax.Array) -> jax.Array:
    """Column leverage scores ``p_j = ||V(:, j)||^2 / k`` of a k x n matrix with orthonormal
    rows (approximate right singular vectors); ``sum_j p_j = 1``."""
    p = jnp.sum(jnp.abs(V) ** 2, axis=0)
    return p / jnp.sum(p)


def leverage(key, V: jax.Array, k: int, *, mode: str = "sample") -> jax.Array:
    """k column indices from the leverage scores of ``V`` (k' x n, orthonormal rows).

    ``mode="sample"``: k distinct columns drawn without replacement with probabilities
    proportional to ``p_j`` (successive sampling; implemented exactly by the Gumbel-top-k
    trick: ``argtopk(log p_j + G_j)``, ``G_j ~ Gumbel``). ``mode="topk"``: the k largest
    scores (deterministic; what the thesis authors' code did).
    """
    p = leverage_scores(V)
    if mode == "topk":
        return jax.lax.top_k(p, k)[1].astype(jnp.int32)
    if mode != "sample":
        raise ValueError(f"mode must be 'sample' or 'topk'; got {mode!r}")
    rdt = p.dtype
    tiny = jnp.finfo(rdt).tiny
    g = jax.random.gumbel(key, p.shape, dtype=rdt)
    return jax.lax.top_k(jnp.log(jnp.maximum(p, tiny)) + g, k)[1].astype(jnp.int32)


def _pivot_map(X1):
    """``M = X_1^+ = R_1^{-1} Q_1^H`` (k x l) for the l x k pivot block ``X_1``."""
    Q1, R1 = jnp.linalg.qr(X1, mode="reduced")
    return jax.scipy.linalg.solve_triangular(R1, Q1.conj().T, lower=False)


def interpolation(X: jax.Array, J: jax.Array) -> jax.Array:
    """Interpolation matrix ``T = X_1^+ X`` (k x n) with ``X_1 = X(:, J)`` (l x k).

    ``T(:, J) = I_k`` (set exactly), so ``T`` is the rank-k row-basis approximator with unit
    pivot block that Thm ``thm:pivoting_on_rangeapprox_error_bound`` is applied to when
    ``l > k``; for ``l = k`` it is ``X_1^{-1} X``. ``X_1^+ = R_1^{-1} Q_1^H`` from a QR of the
    small ``X_1``, then one GEMM with X. For CPQR pivots this equals
    ``R_11^{-1} [R_11, R_12]`` (the classic ID coefficients); for LUPP pivots with ``l = k``,
    ``(R_1^LU)^{-1} R^LU``.
    """
    T = jnp.matmul(_pivot_map(X[:, J]), X, precision=HIGHEST)
    k = J.shape[0]
    return T.at[:, J].set(jnp.eye(k, dtype=T.dtype))


def eta_from_interpolation(T: jax.Array) -> jax.Array:
    """``eta = ||T||_2 = sqrt(1 + ||X_1^+ X_2||_2^2)`` for ``T = X_1^+ X`` (``T(:, J) = I``).

    Since ``T Pi = [I, B]``, ``T T^H = I + B B^H`` and ``||T||_2^2 = 1 + ||B||_2^2``: the
    a-posteriori factor of Thm ``thm:pivoting_on_rangeapprox_error_bound``
    (Eq. ``eq:pivoting_on_rangeapprox_error_bound``), O(n k^2).
    """
    G = jnp.matmul(T, T.conj().T, precision=HIGHEST)
    return _sqrt_lmax(G, T.dtype)


def _sqrt_lmax(G, dtype):
    lam = jnp.linalg.eigvalsh(G)[-1]
    return jnp.sqrt(jnp.maximum(lam, 1.0)).astype(jnp.finfo(dtype).dtype)


def eta_from_gram(X: jax.Array, J: jax.Array, gram: jax.Array | None = None) -> jax.Array:
    """``eta`` without forming T: ``eta^2 = lambda_max(X_1^+ (X X^H) X_1^{+H})``.

    ``gram`` is ``X X^H`` (l x l) when already known (``None``: computed, O(n l^2); pass the
    identity for X with orthonormal rows such as ``V_k^H``). Same value as
    ``eta_from_interpolation(interpolation(X, J))``, without the k x n intermediate.
    """
    M = _pivot_map(X[:, J])
    if gram is None:
        gram = jnp.matmul(X, X.conj().T, precision=HIGHEST)
    G = jnp.matmul(M, jnp.matmul(gram, M.conj().T, precision=HIGHEST), precision=HIGHEST)
    return _sqrt_lmax(G, X.dtype)


def eta_rows_from_gram(gram_C: jax.Array, S: jax.Array) -> jax.Array:
    """Row certificate ``||C S^{-1}||_2`` from ``C^H C`` (k x k) and ``S = C(I, :)``:
    ``lambda_max(S^{-H} C^H C S^{-1})`` (no m x k intermediate)."""
    k = S.shape[0]
    Si = jnp.linalg.solve(S, jnp.eye(k, dtype=S.dtype))
    G = jnp.matmul(Si.conj().T, jnp.matmul(gram_C, Si, precision=HIGHEST), precision=HIGHEST)
    return _sqrt_lmax(G, S.dtype)


@functools.partial(jax.jit, static_argnames=("max_swaps",))
def maxvol_refine(T: jax.Array, J: jax.Array, *, g: float = 1.1, max_swaps: int = 100):
    """Spectrum-revealing swaps on a k x n interpolation matrix with ``T(:, J) = I``.

    While ``max |T_ij| > g`` (and fewer than ``max_swaps`` swaps), replace pivot ``J_i`` by
    column ``j``; the pivot-block volume ``|det X(:, J)|`` grows by the factor ``|T_ij| > g``
    each time, so the loop terminates, and on exit every interpolation coefficient is
    bounded by ``g`` (a locally ``g``-maximal volume, the strong rank-revealing condition of
    Gu-Eisenstat for the k-row approximator), which gives
    ``eta <= sqrt(1 + g^2 k (n - k))``. Rank-1 update per swap, O(k n).

    Returns:
      ``(J, T, num_swaps)``.
    """
    k, n = T.shape

    def cond(c):
        T, J, s = c
        return (jnp.max(jnp.abs(T)) > g) & (s < max_swaps)

    def body(c):
        T, J, s = c
        flat = jnp.argmax(jnp.abs(T))
        i, j = flat // n, flat % n
        col = T[:, j]
        row = T[i, :] / T[i, j]
        e = jnp.zeros((k,), T.dtype).at[i].set(1.0)
        T = T - jnp.outer(col - e, row)
        return T, J.at[i].set(j.astype(J.dtype)), s + 1

    T, J, s = jax.lax.while_loop(cond, body, (T, J, jnp.int32(0)))
    return J, T, s
