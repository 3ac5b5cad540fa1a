"""A posteriori error bounds for any low-rank approximation (beyond the thesis).

:func:`error_bound` bounds ``||A - A_hat||`` in the Frobenius and spectral norms from a few
Gaussian test vectors, with a stated failure probability; the derivation is in
``docs/error-bounds.md``. The thesis' own certificate, ``eta`` (Theorem 2.1), bounds a skeleton
selection relative to its sketch and is loose (60-100x the true error in Ch. 2's tests).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.special
import scipy.stats

from rdr_jax._src import jit as _jit
from rdr_jax._src import validation as V
from rdr_jax._src.dense import mm
from rdr_jax.diagnostics import low_rank_factors
from rdr_jax.operators import LinearOperator, as_operator
from rdr_jax.sketching import hash_normal

__all__ = ["ErrorBound", "error_bound", "certify_factors", "bound_from_sample",
           "adjoint_residual", "gaussian_test_vectors", "fro_factor", "spec_quantile",
           "norm_factor", "chernoff_root", "check_failure_prob", "min_vectors", "DEFAULT_NUM_VECTORS",
           "MAX_LOOSENESS", "KrylovCertificate", "krylov_depth", "krylov_failure_prob",
           "krylov_spectral", "residual_spectral", "check_spectral", "KW_LANCZOS_CONST"]

#: default number of Gaussian test vectors: with delta = 0.01 the Frobenius bound is at most
#: 1.77x the estimate (1/sqrt(tau) of (F)), so its median ratio to the truth is below 2.
DEFAULT_NUM_VECTORS = 20
#: a certificate looser than this factor (bound / estimate, Frobenius) is refused as
#: uninformative: :func:`error_bound` asks for more test vectors instead.
MAX_LOOSENESS = 10.0


class ErrorBound(NamedTuple):
    """An a posteriori bound on the error ``E = A - A_hat`` in both norms.

    Attributes:
      fro: ``>= ||E||_F`` with probability ``>= 1 - failure_prob``.
      spectral: ``>= ||E||_2`` with probability ``>= 1 - failure_prob``; never above ``fro``
        for the default ``spectral="sample"``; with ``spectral="krylov"`` the Krylov
        certificate, at most ``looseness`` times ``||E||_2``.
      fro_estimate: ``sqrt(||E Omega||_F^2 / s)``, unbiased in square for ``||E||_F^2``.
      spectral_estimate: an estimate of ``||E||_2`` (a lower bound when ``power_iters >= 1``
        or ``spectral="krylov"``).
      norm_estimate: the same estimate of ``||A||_F`` (for relative errors).
      failure_prob: the failure probability of each bound.
    """

    fro: jax.Array
    spectral: jax.Array
    fro_estimate: jax.Array
    spectral_estimate: jax.Array
    norm_estimate: jax.Array
    failure_prob: jax.Array


# --------------------------------------------------------------------------------------
# the tail factors (host floats; static per call)
# --------------------------------------------------------------------------------------
def _dof(s: int, complex_: bool) -> int:
    return 2 * s if complex_ else s


def fro_factor(s: int, delta: float, complex_: bool = False) -> float:
    """``tau`` in (0, 1) of Eq. (F): ``P(X <= tau ||E||_F^2) <= delta`` for ``X`` the mean of
    ``s`` squared Gaussian test-vector norms; ``tau = -W_0(-delta^{2/nu} / e)``."""
    nu = _dof(s, complex_)
    z = -math.exp(2.0 * math.log(delta) / nu - 1.0)
    return float(-scipy.special.lambertw(z, 0).real)


def norm_factor(s: int, delta: float, complex_: bool = False) -> float:
    """``tau' > 1`` with ``P(X_A >= tau' ||A||_F^2) <= delta`` (the upper-tail analogue of
    (F)): ``tau' = -W_{-1}(-delta^{2/nu} / e)``."""
    nu = _dof(s, complex_)
    z = -math.exp(2.0 * math.log(delta) / nu - 1.0)
    return float(-scipy.special.lambertw(z, -1).real)


def spec_quantile(s: int, delta: float, complex_: bool = False) -> float:
    """``q`` of Eq. (S): the delta-quantile of ``sum_i |v^H omega_i|^2`` (``chi^2_s`` for real
    test vectors, ``chi^2_{2s} / 2`` for complex ones)."""
    if complex_:
        return float(scipy.stats.chi2.ppf(delta, 2 * s) / 2.0)
    return float(scipy.stats.chi2.ppf(delta, s))


def chernoff_root(nu, log_delta, *, upper: bool):
    """Traceable solution of ``(nu / 2) (ln t + 1 - t) = log_delta`` (``nu``, ``log_delta``
    may be traced): the root ``t`` in (0, 1) (``upper=False``: the factor ``tau`` of Eq. (F))
    or in (1, inf) (``upper=True``: ``tau'`` of the norm lower bound), by 80 bisection
    steps (the same values as :func:`fro_factor` / :func:`norm_factor`)."""
    log_delta = jnp.asarray(log_delta)
    c = 2.0 * log_delta / jnp.asarray(nu, log_delta.dtype)            # < 0

    def g(t):
        return jnp.log(t) + 1.0 - t - c
    if upper:
        lo, hi = jnp.ones_like(c), 4.0 - 2.0 * c                      # g(lo) > 0 > g(hi)
    else:
        lo, hi = jnp.exp(c - 1.0), jnp.ones_like(c)                   # g(lo) < 0 < g(hi)

    def step(_, lh):
        lo, hi = lh
        mid = 0.5 * (lo + hi)
        below = (g(mid) < 0) if not upper else (g(mid) > 0)
        return jnp.where(below, mid, lo), jnp.where(below, hi, mid)
    lo, hi = jax.lax.fori_loop(0, 80, step, (lo, hi))
    return lo if not upper else hi      # the conservative end: smaller tau, larger tau'


def check_failure_prob(delta: Any, name: str = "failure_prob") -> float:
    """A failure probability as a float in (0, 1), else ValueError/TypeError."""
    if isinstance(delta, (bool, np.bool_)) or not isinstance(delta, (numbers.Real,)):
        raise TypeError(f"{name} must be a float in (0, 1) (a failure probability); got "
                        f"{type(delta).__name__} {delta!r}")
    d = float(delta)
    if not (math.isfinite(d) and 0.0 < d < 1.0):
        raise ValueError(f"{name} must be in (0, 1) (a failure probability); got {delta!r}")
    return d


def min_vectors(delta: float, complex_: bool = False) -> int:
    """Fewest test vectors whose Frobenius certificate at failure probability ``delta`` is at
    most :data:`MAX_LOOSENESS` times the estimate (``1/sqrt(tau) <= MAX_LOOSENESS``)."""
    s = 1
    while 1.0 / math.sqrt(fro_factor(s, delta, complex_)) > MAX_LOOSENESS:
        s += 1
    return s


# --------------------------------------------------------------------------------------
# the Krylov spectral certificate (Kuczynski and Wozniakowski 1992)
# --------------------------------------------------------------------------------------
#: the constant of Kuczynski and Wozniakowski (1992), Theorem 4.1(a): a Lanczos estimate of
#: the top eigenvalue of an N x N PSD matrix from k products and a uniformly random start is
#: below ``(1 - eps) lambda_max`` with probability ``<= 1.648 sqrt(N) exp(-sqrt(eps)(2k - 1))``
KW_LANCZOS_CONST = 1.648
#: the stream of the Krylov start block: ``fold_in(key, KRYLOV_STREAM)``, independent of the
#: Frobenius test vectors drawn from ``key`` itself
KRYLOV_STREAM = 0x4B57


@dataclasses.dataclass(frozen=True)
class KrylovCertificate:
    """Options of the Krylov spectral certificate of :func:`error_bound` (``spectral=``).

    Attributes:
      looseness: ``L > 1``: the bound is ``L`` times a Rayleigh-Ritz lower estimate of
        ``||E||_2``, so it never exceeds ``L ||E||_2`` (to rounding); the depth grows like
        ``log(sqrt(N) / failure_prob) / sqrt(1 - 1/L^2)``.
      block_size: ``b >= 1`` Gaussian start vectors (a block Krylov space); the failure
        probability per column may then be ``failure_prob ** (1/b)`` (fewer passes over A,
        ``b`` vectors each).
    """

    looseness: float = 2.0
    block_size: int = 1

    def __post_init__(self):
        L = self.looseness
        if isinstance(L, (bool, np.bool_)) or not isinstance(L, numbers.Real):
            raise TypeError(f"looseness must be a float > 1; got {type(L).__name__} {L!r}")
        if not (math.isfinite(float(L)) and float(L) > 1.0):
            raise ValueError(f"looseness must be a finite float > 1 (bound / estimate); got {L!r}")
        V.check_int("block_size", self.block_size, low=1)


def _kw_dim(m: int, n: int, complex_: bool) -> int:
    """The dimension N of the KW bound: ``min(m, n)`` (the smaller Gram matrix), doubled for
    complex data (a complex Hermitian N x N matrix acts as a real symmetric 2N x 2N one)."""
    return min(m, n) * (2 if complex_ else 1)


def krylov_failure_prob(depth: int, looseness: float, dim: int, block_size: int = 1) -> float:
    """Failure probability of the Krylov certificate: ``min(1, 1.648 sqrt(N) exp(-sqrt(eps)
    (2 depth - 1)))^b`` with ``eps = 1 - 1/looseness^2`` (KW 1992, Thm. 4.1(a), per start
    column; the block contains each column's Krylov space and the columns are independent)."""
    eps = 1.0 - 1.0 / looseness ** 2
    p = KW_LANCZOS_CONST * math.sqrt(dim) * math.exp(-math.sqrt(eps) * (2 * depth - 1))
    return min(1.0, p) ** block_size


def krylov_depth(delta: float, looseness: float, dim: int, block_size: int = 1) -> int:
    """Smallest Krylov depth k (products with ``E^H E``) whose certificate fails with
    probability ``<= delta`` (:func:`krylov_failure_prob`)."""
    eps = 1.0 - 1.0 / looseness ** 2
    per_col = math.log(KW_LANCZOS_CONST * math.sqrt(dim)) - math.log(delta) / block_size
    k = max(1, math.ceil((per_col / math.sqrt(eps) + 1.0) / 2.0))
    while krylov_failure_prob(k, looseness, dim, block_size) > delta:   # rounding guard
        k += 1
    return k


def _orth_against(W, Qs):
    """``W`` with the span of the (orthonormal) blocks ``Qs`` projected out twice (CGS2),
    then an orthonormal basis of it (thin QR)."""
    for _ in range(2):
        for Q in Qs:
            W = W - mm(Q, mm(Q.conj().T, W))
    return jnp.linalg.qr(W, mode="reduced")[0]


def krylov_spectral(key, apply_e, apply_eh, n: int, depth: int, block_size: int, dtype):
    """Rayleigh-Ritz lower estimate of ``||E||_2`` over the block Krylov space
    ``span{Omega, (E^H E) Omega, ..., (E^H E)^{depth-1} Omega}`` for an ``n x b`` Gaussian
    start ``Omega``; ``apply_e`` (``X -> E X``) and ``apply_eh`` (``Y -> E^H Y``) are called
    ``depth`` and ``depth - 1`` times. Traceable (``n``, ``depth``, ``block_size`` static).

    The estimate is ``sigma_max(E Q T)`` for the basis ``Q`` re-weighted by ``T`` (from the
    eigendecomposition of ``Q^H Q``, dropping directions of a collapsed, rank-deficient
    block), so it never exceeds ``||E||_2`` beyond rounding."""
    rdt = V.real_dtype(dtype)
    Om = gaussian_test_vectors(key, n, block_size, dtype)
    Qs = [jnp.linalg.qr(Om, mode="reduced")[0]]
    EQs = [apply_e(Qs[0])]
    for _ in range(depth - 1):
        Qs.append(_orth_against(apply_eh(EQs[-1]), Qs))
        EQs.append(apply_e(Qs[-1]))
    Q, EQ = jnp.concatenate(Qs, axis=1), jnp.concatenate(EQs, axis=1)
    g, Vg = jnp.linalg.eigh(mm(Q.conj().T, Q))
    keep = g > jnp.max(g) * (Q.shape[1] * jnp.finfo(rdt).eps)
    T = Vg * jnp.where(keep, 1.0 / jnp.sqrt(jnp.where(keep, g, 1.0)), 0.0).astype(dtype)
    return _top_singular(mm(EQ, T), rdt)


# --------------------------------------------------------------------------------------
# the traceable core
# --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _CertConfig:
    num_vectors: int
    delta: float
    power_iters: int
    krylov_depth: int = 0          # 0: the sample bound (S); else the Krylov certificate
    block_size: int = 1
    looseness: float = 1.0


def gaussian_test_vectors(key, n: int, s: int, dtype) -> jax.Array:
    """``n x s`` standard Gaussian test vectors from the counter-based generator
    :func:`rdr_jax.sketching.hash_normal` (3-4x faster than threefry on CPU); complex dtypes
    get ``(g + i g') / sqrt(2)``, so that ``E |omega_j|^2 = 1``."""
    dt = np.dtype(dtype)
    if dt.kind != "c":
        return hash_normal(key, (n, s), dt)
    rdt = V.real_dtype(dt)
    k1, k2 = jax.random.split(key)
    return ((hash_normal(k1, (n, s), rdt) + 1j * hash_normal(k2, (n, s), rdt))
            / np.sqrt(2.0)).astype(dt)


def _lowrank_apply(F, G, H, X):
    """``F G H^H X`` (G None means identity), right to left."""
    T = mm(H.conj().T, X)
    if G is not None:
        T = mm(G, T)
    return mm(F, T)


def _scaled_sq(X, rdt):
    """``(c, t)`` with ``||X||_F^2 = c^2 t``, computed on ``X / max|X_ij|`` so that the
    squares neither underflow nor overflow."""
    xmax = jnp.max(jnp.abs(X))
    c = jnp.where(xmax > 0, xmax, 1).astype(rdt)
    return c, jnp.sum(jnp.abs(X / c) ** 2).astype(rdt)


def _top_singular(X, rdt):
    """Largest singular value of a tall ``X`` (m x s) from its s x s Gram matrix (an SVD of
    the tall matrix would allocate m x m workspace)."""
    c, _ = _scaled_sq(X, rdt)
    Xs = X / c
    lam = jnp.linalg.eigvalsh(mm(Xs.conj().T, Xs))[-1]
    return c * jnp.sqrt(jnp.maximum(lam, 0.0))


def bound_from_sample(Y, AOm, delta: float, spectral_estimate=None) -> ErrorBound:
    """The bounds of :func:`error_bound` from the sampled products: ``Y = E Omega`` (or
    ``E^H Omega``: the same norms) and ``AOm = A Omega`` (or ``A^H Omega``) for ``s``
    Gaussian test vectors ``Omega`` independent of ``E``; ``delta`` static. Traceable: the
    decompositions call it on products fused into their own last pass over A.
    ``spectral_estimate``: a better estimate of ``||E||_2`` than the default (the root of
    the top eigenvalue of ``Y Y^H / s``), capped at the spectral bound."""
    s = Y.shape[1]
    dt = np.dtype(Y.dtype)
    rdt = V.real_dtype(dt)
    cplx = dt.kind == "c"
    tau = fro_factor(s, delta, cplx)
    q = spec_quantile(s, delta, cplx)
    yc, y2 = _scaled_sq(Y, rdt)                                    # ||Y||_F^2 = yc^2 y2
    ac, a2 = _scaled_sq(AOm, rdt)
    fro_est = yc * jnp.sqrt(y2 / s)
    fro_bound = fro_est / math.sqrt(tau)
    spec_bound = yc * jnp.sqrt(y2 / q)          # <= fro_bound: q >= tau s (q is exact)
    if spectral_estimate is None:   # root of the top eigenvalue of the sample covariance
        spectral_estimate = _top_singular(Y, rdt) / math.sqrt(s)
    spec_est = jnp.minimum(spectral_estimate, spec_bound)
    return ErrorBound(fro_bound.astype(rdt), spec_bound.astype(rdt), fro_est.astype(rdt),
                      spec_est.astype(rdt), (ac * jnp.sqrt(a2 / s)).astype(rdt),
                      jnp.asarray(delta, rdt))


def certify_factors(key, op: LinearOperator, F, G, H, num_vectors: int, delta: float,
                    power_iters: int = 0) -> ErrorBound:
    """Traceable core of :func:`error_bound` (no validation; ``num_vectors``,
    ``delta`` and ``power_iters`` static). Usable inside other jitted pipelines."""
    n = op.shape[1]
    dt = np.dtype(op.dtype)
    Om = gaussian_test_vectors(key, n, num_vectors, dt)
    AOm = op.matmat(Om)
    Y = AOm - _lowrank_apply(F, G, H, Om)                          # E Omega
    spec_est = None
    if power_iters > 0:    # Rayleigh-Ritz: ||E^H Q||_2 <= ||E||_2 for orthonormal Q
        Z = Y
        for it in range(power_iters):
            Q = jnp.linalg.qr(Z, mode="reduced")[0]
            B = op.rmatmat(Q) - _lowrank_apply(H, None if G is None else G.conj().T, F, Q)
            if it + 1 < power_iters:
                Z = op.matmat(B) - _lowrank_apply(F, G, H, B)
        spec_est = _top_singular(B, V.real_dtype(dt))
    return bound_from_sample(Y, AOm, delta, spec_est)


def adjoint_residual(AhOm, Om, F, G, H):
    """``E^H Omega = A^H Omega - H G^H F^H Omega`` for ``A_hat = F G H^H`` (G None: identity),
    from a product ``A^H Omega`` the caller already has."""
    return AhOm - _lowrank_apply(H, None if G is None else G.conj().T, F, Om)


#: a stream the decompositions never use for themselves: the certified fixed-accuracy loop
#: draws its test vectors from ``fold_in(key, CERT_STREAM)``, independent of the factors
CERT_STREAM = 0x5EED


def residual_spectral(key, op: LinearOperator, F, G, H, depth: int, block_size: int):
    """:func:`krylov_spectral` on ``E = A - F G H^H`` (or on ``E^H`` when ``m < n``: the
    smaller Gram matrix); start block from ``key``. Traceable (``depth``, ``block_size``
    static)."""
    Gh = None if G is None else G.conj().T

    def e(X):
        return op.matmat(X) - _lowrank_apply(F, G, H, X)

    def eh(Y):
        return op.rmatmat(Y) - _lowrank_apply(H, Gh, F, Y)
    m, n = op.shape
    if m < n:
        return krylov_spectral(key, eh, e, m, depth, block_size, op.dtype)
    return krylov_spectral(key, e, eh, n, depth, block_size, op.dtype)


@functools.partial(_jit.jit, static_argnames=("cfg",))
def _certificate_jit(key, op, F, G, H, cfg: _CertConfig):
    b = certify_factors(key, op, F, G, H, cfg.num_vectors, cfg.delta, cfg.power_iters)
    if cfg.krylov_depth == 0:
        return b
    est = residual_spectral(jax.random.fold_in(key, KRYLOV_STREAM), op, F, G, H,
                            cfg.krylov_depth, cfg.block_size)
    rdt = b.spectral.dtype
    return b._replace(spectral=(cfg.looseness * est).astype(rdt),
                      spectral_estimate=est.astype(rdt))


def check_num_vectors(num_vectors: Any, delta: float, complex_: bool = False) -> int:
    """``num_vectors`` as an int >= :func:`min_vectors` ``(delta)``, else a clear error."""
    s = V.check_int("num_vectors", num_vectors, low=1)
    need = min_vectors(delta, complex_)
    if s < need:
        raise ValueError(
            f"num_vectors = {s} test vectors are too few for failure_prob = {delta:g}: the bound "
            f"would exceed the estimate by more than {MAX_LOOSENESS:g}x "
            f"(1/sqrt(tau) = {1 / math.sqrt(fro_factor(s, delta, complex_)):.3g}); use "
            f"num_vectors >= {need} (default {DEFAULT_NUM_VECTORS})")
    return s


def check_spectral(spectral: Any) -> KrylovCertificate | None:
    """``spectral=`` of :func:`error_bound`: ``"sample"`` (None), ``"krylov"`` (the default
    :class:`KrylovCertificate`) or a :class:`KrylovCertificate`; else a clear error."""
    if isinstance(spectral, KrylovCertificate):
        return spectral
    if isinstance(spectral, str):
        if spectral == "sample":
            return None
        if spectral == "krylov":
            return KrylovCertificate()
        raise ValueError(f"spectral must be 'sample', 'krylov' or a KrylovCertificate; "
                         f"got {spectral!r}")
    raise TypeError(f"spectral must be 'sample', 'krylov' or a KrylovCertificate; got "
                    f"{type(spectral).__name__} {spectral!r}")


def error_bound(key, A: Any, approx, *, failure_prob: float = 0.01,
                num_vectors: int = DEFAULT_NUM_VECTORS, power_iters: int = 0,
                spectral: Any = "sample") -> ErrorBound:
    """Upper bounds on ``||A - A_hat||_F`` and ``||A - A_hat||_2`` that each hold with
    probability ``>= 1 - failure_prob``, from ``num_vectors`` Gaussian test vectors.

    ``fro = sqrt(X / tau)`` with ``X = ||E Omega||_F^2 / s`` and ``tau`` from a Chernoff bound
    (worst case rank one); ``spectral = sqrt(s X / q)`` with q the ``failure_prob``-quantile of
    ``chi^2_s``. Derivation: ``docs/error-bounds.md``. Beyond the thesis (it complements
    ``eta``, Theorem 2.1); cf. Halko, Martinsson and Tropp (2011), Sec. 4.3. Why: a certificate
    for any approximation at the cost of one product of A with s vectors, no densifying.

    Args:
      key: ``jax.random.key``, independent of the one that built ``approx``.
      A: m x n matrix or operator.
      approx: an ID/CUR/RSVD result or a tuple ``(F, G, H)`` with ``A_hat = F G H^H``
        (G may be None).
      failure_prob: in (0, 1), for each bound.
      num_vectors: test vectors s (too few for ``failure_prob`` raise: the bound would exceed
        the estimate by more than 10x).
      power_iters: Rayleigh-Ritz steps for ``spectral_estimate`` (two passes each).
      spectral: ``"sample"`` (the bound above, from the same test vectors), or ``"krylov"``
        / a :class:`rdr_jax.certify.KrylovCertificate`: ``spectral = L * est`` with ``est``
        the Lanczos (block Krylov) estimate of ``||E||_2`` from a Gaussian start, a lower bound,
        and a depth chosen from ``failure_prob``, ``min(m, n)`` and ``L`` by Kuczynski and
        Wozniakowski (1992), Thm. 4.1(a); so ``||E||_2 <= spectral <= L ||E||_2``
        (``docs/error-bounds.md``, "Krylov spectral certificate"). Costs ``2 depth - 1``
        products of A with ``block_size`` vectors (``depth`` 6 for ``min(m, n) = 1000``).

    Returns:
      :class:`ErrorBound`, scalars in A's real dtype; jit (options static) and vmap-able.
    """
    delta = check_failure_prob(failure_prob)
    key = V.check_key(key)
    op = as_operator(A)
    cplx = np.dtype(op.dtype).kind == "c"
    s = check_num_vectors(num_vectors, delta, cplx)
    p = V.check_int("power_iters", power_iters, low=0)
    kc = check_spectral(spectral)
    cfg = _CertConfig(s, delta, p)
    if kc is not None:
        if p:
            raise ValueError(f"power_iters = {p} sets the estimate of spectral='sample'; "
                             "spectral='krylov' chooses its own depth: leave power_iters 0")
        dim = _kw_dim(*op.shape, cplx)
        depth = krylov_depth(delta, float(kc.looseness), dim, kc.block_size)
        depth = min(depth, -(-min(op.shape) // kc.block_size))   # a full space: exact
        cfg = _CertConfig(s, delta, 0, depth, kc.block_size, float(kc.looseness))
    F, G, H = low_rank_factors(approx, op.shape)
    dt = op.dtype
    F, H = F.astype(dt), H.astype(dt)
    G = None if G is None else jnp.asarray(G).astype(dt)
    return _certificate_jit(key, op, F, G, H, cfg)
