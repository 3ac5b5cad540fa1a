"""Pivoting kernels on a small row-basis approximator ``X`` (thesis Section 2.2.5): LUPP,
column-pivoted QR (LAPACK or portable XLA), leverage scores, maxvol swaps and the
interpolation matrix ``W = X_1^+ X`` with its certificate ``eta``. Details: ``docs/id-cur.md``
("Pivoting kernels").
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from rdr_jax._src import dense, fp as _fp, jit as _jit, linalg as _linalg
from rdr_jax.operators import HIGHEST

__all__ = ["BackendError", "lupp", "cpqr", "leverage_scores", "leverage", "maxvol_refine",
           "interpolation", "eta_from_interpolation", "eta_from_gram",
           "eta_rows_from_gram",
           "cpqr_available"]

# A supplied Gram matrix is used only when its trace matches ||X||_F^2 to this relative
# tolerance (after the common power-of-two rescaling; a coarse check that catches a Gram of a
# differently scaled matrix) and X's scale kept every product in range (_gram_scale_ok).
_GRAM_RTOL = 1e-2
# Row certificates: the number of rows m of C is unknown from C^H C; assume m <= 2^_LOG2_M.
_LOG2_M = 24


class BackendError(RuntimeError):
    """A pivoting scheme has no implementation on the current backend (CPQR on TPU)."""


def cpqr_available(platform: str | None = None) -> bool:
    """Whether LAPACK-style CPQR (geqp3) lowers on ``platform`` (default: the default backend).

    XLA lowers ``jax.lax.linalg.qr(pivoting=True)`` on CPU (LAPACK) and GPU (cuSOLVER/MAGMA)
    but not on TPU.
    """
    platform = platform or jax.default_backend()
    return platform in ("cpu", "gpu", "cuda", "rocm")


@functools.partial(_jit.jit, static_argnames=("k",))
def lupp(X: jax.Array, k: int) -> jax.Array:
    """First k column pivots of LU with partial pivoting on ``X^T`` (Eq. (2.18)).

    ``X Pi = L_l [R_1^LU, R_2^LU]`` with ``|R^LU(i, j)| <= 1``; the returned ``J`` are the
    first k columns of ``Pi``. Only ``X[:k]`` is factored (the first k pivots of partial
    pivoting depend only on the first k rows), O(n k^2).

    Scale-invariant: ``X[:k]`` is first rescaled by a power of two (exact), so the pivots of X
    and ``c X`` agree for any c, subnormal X included. Once the Schur complement is exactly
    zero (``rank(X[:k]) < k``, e.g. an all-zero X) the remaining pivots are arbitrary distinct
    columns (LAPACK's tie rule: the column already in position t).

    Args:
      X: (l x n) with ``k <= l <= n``.
      k: number of pivots (static).

    Returns:
      ``J`` (k,) int32, distinct column indices in pivot order.
    """
    _, _, perm = dense.lu(_fp.normalize(X[:k])[0].T)
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


@functools.partial(_jit.jit, static_argnames=("k", "impl"))
def cpqr(X: jax.Array, k: int, *, impl: str = "lapack") -> jax.Array:
    """First k column pivots of QR with column pivoting on ``X`` (Eq. (2.17)).

    Scale-invariant like :func:`lupp` (X is rescaled by a power of two first, so the column
    norms of ``impl="xla"`` cannot overflow). For ``rank(X) < k`` the pivots after the first
    ``rank(X)`` are arbitrary distinct columns.

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
        return _cpqr_xla(_fp.normalize(X)[0], k)
    if impl != "lapack":
        raise ValueError(f"impl must be 'lapack' or 'xla'; got {impl!r}")
    if not cpqr_available():
        raise BackendError(
            f"column-pivoted QR (geqp3) has no lowering on backend {jax.default_backend()!r}; "
            "use method='lupp' (available everywhere) or cpqr_impl='xla' (portable pivoted "
            "Gram-Schmidt)")
    _, _, P = jax.lax.linalg.qr(_fp.normalize(X)[0], pivoting=True, full_matrices=False)
    return P[:k].astype(jnp.int32)


@_jit.jit
def leverage_scores(V: jax.Array) -> jax.Array:
    """Column leverage scores ``p_j = ||V(:, j)||^2 / k`` of a k x n matrix with orthonormal
    rows (approximate right singular vectors); ``sum_j p_j = 1``.

    Computed as ``p_j = ||V(:, j)||^2 / ||V||_F^2`` after an exact power-of-two rescaling, so
    any scaling of V gives the same scores; an all-zero V gives the uniform ``p_j = 1/n``."""
    p = jnp.sum(jnp.abs(_fp.normalize(V)[0]) ** 2, axis=0)
    tot = jnp.sum(p)
    return jnp.where(tot > 0, p / jnp.where(tot > 0, tot, 1), 1.0 / p.shape[0])


@functools.partial(_jit.jit, static_argnames=("k", "mode"))
def leverage(key, V: jax.Array, k: int, *, mode: str = "sample") -> jax.Array:
    """k column indices from the leverage scores of ``V`` (k' x n, orthonormal rows).

    ``mode="sample"``: k distinct columns drawn without replacement with probabilities
    proportional to ``p_j`` (successive sampling; implemented exactly by the Gumbel-top-k
    trick: ``argtopk(log p_j + G_j)``, ``G_j ~ Gumbel``). ``mode="topk"``: the k largest
    scores (deterministic; what the thesis authors' code did). Scale-invariant; an all-zero
    V samples uniformly (``"topk"``: the first k columns).
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
    """``M = X_1^+`` (k x l) for the l x k pivot block ``X_1`` (``l >= k``, columns in pivot
    order) from one Householder factorisation of the damped ``[X_1; d I]`` and one
    triangular solve (``rdr_jax._src.linalg.pseudo_inverse``): ``X_1^+`` to working accuracy
    for a block of full numerical rank, the pseudo-inverse of its leading independent
    columns for a rank-deficient one (0 for an all-zero block). No SVD, no branch. Callers
    pass a power-of-two-rescaled block (``_fp.normalize``), so nothing overflows.
    """
    l, k = X1.shape
    valid = jnp.ones((k,), bool)
    R, Qt = _linalg.sketch_qr(_linalg.damped_block(X1, valid))
    return _linalg.pseudo_inverse(R, Qt, valid)


@_jit.jit
def interpolation(X: jax.Array, J: jax.Array) -> jax.Array:
    """Interpolation matrix ``W = X_1^+ X`` (k x n) with ``X_1 = X(:, J)`` (l x k).

    ``W(:, J) = I_k`` (set exactly), so ``W`` is the rank-k row-basis approximator with unit
    pivot block that Theorem 2.1 is applied to when
    ``l > k``; for ``l = k`` it is ``X_1^{-1} X``. ``X_1^+ = R_1^{-1} Q_1^H`` from a QR of the
    small ``X_1``, then one GEMM with X. For CPQR pivots this equals
    ``R_11^{-1} [R_11, R_12]`` (the classic ID coefficients); for LUPP pivots with ``l = k``,
    ``(R_1^LU)^{-1} R^LU``.

    W does not depend on the scale of X: X is rescaled by a power of two first (exact), so
    any X from 1e-30 to 1e30 (float32), subnormal X included, gives the same W. Degenerate
    cases: for a rank-deficient ``X_1`` the pseudo-inverse on its numerical rank is used
    (see the module docstring); an all-zero X gives ``W(:, J) = I`` and zeros elsewhere.
    NaN/Inf in X give NaN.
    """
    Xn = _fp.normalize(X)[0]
    W = jnp.matmul(_pivot_map(Xn[:, J]), Xn, precision=HIGHEST)
    k = J.shape[0]
    return W.at[:, J].set(jnp.eye(k, dtype=W.dtype))


def _sqrt_lmax(G, dtype, e=0):
    """``max(2^e sqrt(lambda_max(G)), 1)`` for a Hermitian PSD G (the Gram of a matrix
    rescaled by ``2^-e``); the factor ``2^e`` is applied exactly (Inf if eta overflows)."""
    lam = jnp.linalg.eigvalsh(G)[-1]
    rdt = jnp.finfo(dtype).dtype
    eta = _fp.ldexp(jnp.sqrt(jnp.maximum(lam, 0.0)).astype(rdt), e)
    return jnp.maximum(eta, jnp.ones((), rdt))


@_jit.jit
def eta_from_interpolation(W: jax.Array) -> jax.Array:
    """``eta = ||W||_2 = sqrt(1 + ||X_1^+ X_2||_2^2)`` for ``W = X_1^+ X`` (``W(:, J) = I``).

    Since ``W Pi = [I, B]``, ``W W^H = I + B B^H`` and ``||W||_2^2 = 1 + ||B||_2^2``: the
    a-posteriori factor of Theorem 2.1
    (Eq. (2.19)), O(n k^2).

    W is rescaled by a power of two before its Gram is formed, so large entries (an
    ill-conditioned pivot block) cannot overflow ``W W^H``; the result is ``>= 1`` (exactly 1
    for ``W = [I, 0]``), ``+Inf`` only when ``||W||_2`` itself exceeds the dtype's range, NaN
    when W holds NaN.
    """
    Tn, e = _fp.normalize(W)
    G = jnp.matmul(Tn, Tn.conj().T, precision=HIGHEST)
    return _sqrt_lmax(G, W.dtype, jnp.where(e == _fp.ZERO_EXPONENT, 0, e))


def _trace(G):
    return jnp.real(jnp.trace(G))


def _gram_scale_ok(e, dtype, log2_len):
    """Whether a Gram matrix ``Y^H Y`` formed in ``dtype`` from Y with largest entry in
    ``[2^e, 2^(e+1))`` and inner products of length ``<= 2^log2_len`` is accurate: no entry can
    overflow, and the products that underflow (``< tiny``) sum to less than ``eps`` times the
    largest one."""
    fi = jnp.finfo(dtype)
    lo = fi.minexp + fi.nmant + log2_len         # tiny 2^log2_len <= eps 2^(2e)
    hi = fi.maxexp - 2 - log2_len                 # 2^(2e+2) 2^log2_len < max
    return (2 * e >= lo) & (2 * e < hi)


@_jit.jit
def eta_from_gram(X: jax.Array, J: jax.Array, gram: jax.Array | None = None) -> jax.Array:
    """``eta`` without forming W: ``eta^2 = lambda_max(X_1^+ (X X^H) X_1^{+H})``.

    ``gram`` is ``X X^H`` (l x l) when already known (``None``: computed, O(n l^2); pass the
    identity for X with orthonormal rows such as ``V_k^H``). Same value as
    ``eta_from_interpolation(interpolation(X, J))``, without the k x n intermediate, for
    every scale of X (X and gram are rescaled by ``2^-e`` and ``2^-2e`` first, exactly), for
    subnormal X, and for degenerate pivot blocks (pseudo-inverse; ``eta = 1`` for X = 0).

    A supplied ``gram`` must be ``X X^H`` formed from this X in its dtype. It is used only
    when X's scale keeps ``X X^H`` representable (no overflow, underflowed products below
    ``eps`` relative: roughly ``1e-14 < max|X| < 1e18`` in float32), it is finite, and its
    trace matches ``||X||_F^2`` within 1% (a Gram of a differently scaled X); otherwise it is
    ignored and the Gram is recomputed from the rescaled X (under ``vmap`` both are
    computed), so the result is true either way. NaN/Inf in X give NaN.
    """
    Xn, e = _fp.normalize(X)
    M = _pivot_map(Xn[:, J])

    def own():
        return jnp.matmul(Xn, Xn.conj().T, precision=HIGHEST)

    if gram is None:
        gn = own()
    else:
        shift = jnp.where(e == _fp.ZERO_EXPONENT, 0, -2 * e)
        gn = _fp.ldexp(jnp.asarray(gram, X.dtype), shift)
        fro2 = jnp.sum(jnp.abs(Xn) ** 2)
        log2_n = max(X.shape[1] - 1, 1).bit_length()
        ok = (_gram_scale_ok(e, X.dtype, log2_n) & jnp.all(jnp.isfinite(gn))
              & (jnp.abs(_trace(gn) - fro2) <= _GRAM_RTOL * fro2))
        gn = jax.lax.cond(ok, lambda: gn, own)
    return _eta_of_map(M, gn, jnp.matmul(M, Xn[:, J], precision=HIGHEST), X.dtype)


def _eta_of_map(M, gn, TJ, dtype):
    """``||W||_2`` for ``W = M X`` with ``W(:, J) := I``, from the pivot map ``M = X_1^+``,
    the (rescaled) Gram ``gn = X X^H`` and ``T_J = M X_1``:
    ``W W^H = M gn M^H - T_J T_J^H + I`` (``T_J = I`` for a pivot block of full rank)."""
    G = jnp.matmul(M, jnp.matmul(gn, M.conj().T, precision=HIGHEST), precision=HIGHEST)
    G = G - jnp.matmul(TJ, TJ.conj().T, precision=HIGHEST) + jnp.eye(G.shape[0], dtype=G.dtype)
    return _sqrt_lmax(0.5 * (G + G.conj().T), dtype)


@_jit.jit
def eta_rows_from_gram(gram_C: jax.Array, S: jax.Array, *, C: jax.Array | None = None
                       ) -> jax.Array:
    """Row certificate ``||C S^{-1}||_2`` from ``C^H C`` (k x k) and ``S = C(I, :)``:
    ``lambda_max(S^{-H} C^H C S^{-1})`` (no m x k intermediate).

    Scale-robust: S and ``gram_C`` are rescaled by ``2^-e`` and ``2^-2e`` (exact) before the
    products, so any scale of C whose Gram is representable gives the true value; a singular
    S uses the pseudo-inverse on its numerical rank (``C = 0`` gives 1). ``gram_C`` must be
    ``C^H C`` formed in S's dtype from the same C that S was taken from. It is used only when
    it can be accurate -- finite, trace ``||C||_F^2`` at least 99% of ``||S||_F^2``, and
    ``max|S|`` above the scale where ``C^H C`` loses products to underflow (about 1e-12 in
    float32, 1e-146 in float64, allowing up to 2^24 rows) -- otherwise (e.g. float32 C scaled
    by 1e20 or 1e-18) the result is recomputed from ``C`` when given (pass ``C`` for
    scale-robust results; under ``vmap`` both paths run), and is NaN when it is not -- never a
    silently wrong certificate. NaN/Inf in S give NaN.
    """
    Sn, eS = _fp.normalize(S)
    eS = jnp.where(eS == _fp.ZERO_EXPONENT, 0, eS)
    gn = _fp.ldexp(jnp.asarray(gram_C, S.dtype), -2 * eS)
    fro2 = jnp.sum(jnp.abs(Sn) ** 2)
    # underflow side only: C's largest entry (>= S's) is unknown, overflow shows up as Inf
    fi = jnp.finfo(S.dtype)
    ok = ((2 * eS >= fi.minexp + fi.nmant + _LOG2_M) | (fro2 == 0)) \
        & jnp.all(jnp.isfinite(gn)) & (_trace(gn) >= (1 - _GRAM_RTOL) * fro2)
    Si = _pivot_map(Sn)                                     # (S 2^-eS)^{-1} (or pinv)

    def from_gram():
        G = jnp.matmul(Si.conj().T, jnp.matmul(gn, Si, precision=HIGHEST), precision=HIGHEST)
        return _sqrt_lmax(G, S.dtype)

    if C is None:
        return jnp.where(ok, from_gram(), jnp.nan)

    def from_C():
        Cn, eC = _fp.normalize(C)
        CSi = jnp.matmul(Cn, Si, precision=HIGHEST)         # C S^{-1} 2^(eS - eC)
        G = jnp.matmul(CSi.conj().T, CSi, precision=HIGHEST)
        return _sqrt_lmax(G, S.dtype, jnp.where(eC == _fp.ZERO_EXPONENT, 0, eC - eS))

    return jax.lax.cond(ok, from_gram, from_C)


@functools.partial(_jit.jit, static_argnames=("max_swaps",))
def maxvol_refine(W: jax.Array, J: jax.Array, *, g: float = 1.1, max_swaps: int = 100):
    """Spectrum-revealing swaps on a k x n interpolation matrix with ``W(:, J) = I``.

    While ``max |T_ij| > g`` (and fewer than ``max_swaps`` swaps), replace pivot ``J_i`` by
    column ``j``; the pivot-block volume ``|det X(:, J)|`` grows by the factor ``|T_ij| > g``
    each time, so the loop terminates, and on exit every interpolation coefficient is
    bounded by ``g`` (a locally ``g``-maximal volume, the strong rank-revealing condition of
    Gu-Eisenstat for the k-row approximator), which gives
    ``eta <= sqrt(1 + g^2 k (n - k))``. Rank-1 update per swap, O(k n).

    Returns:
      ``(J, W, num_swaps)``.
    """
    k, n = W.shape

    def cond(c):
        W, J, s = c
        return (jnp.max(jnp.abs(W)) > g) & (s < max_swaps)

    def body(c):
        W, J, s = c
        flat = jnp.argmax(jnp.abs(W))
        i, j = flat // n, flat % n
        col = W[:, j]
        row = W[i, :] / W[i, j]
        e = jnp.zeros((k,), W.dtype).at[i].set(1.0)
        W = W - jnp.outer(col - e, row)
        return W, J.at[i].set(j.astype(J.dtype)), s + 1

    W, J, s = jax.lax.while_loop(cond, body, (W, J, jnp.int32(0)))
    return J, W, s
