"""A posteriori error certificates for any low-rank approximation (beyond the thesis).

The thesis certifies a skeleton selection by ``eta`` (Thm
``thm:pivoting_on_rangeapprox_error_bound``): ``||A - C C^+ A|| <= eta ||A - A W^+ W||``.
That bound always holds but is loose (60-100x the true error on the Ch. 2 test matrices).
This module certifies the error ``E = A - A_hat`` of *any* approximation ``A_hat = F G H^H``
(ID, CUR, rSVD or user factors) from ``s`` extra Gaussian test vectors, with an upper bound
that holds with a stated probability ``1 - delta`` and is typically within 2x of the truth.

Setting. ``Omega = [omega_1, ..., omega_s]`` (n x s) with i.i.d. standard Gaussian entries
(complex Gaussian ``(g + i g')/sqrt(2)`` for complex A; drawn by the counter-based
generator :func:`rdr_jax.sketching.hash_normal`), independently of ``A_hat``;
``Y = E Omega = A Omega - F (G (H^H Omega))`` costs one product of A with s vectors (never
densifying an operator). Write ``E = sum_j sigma_j u_j v_j^H``.

**Frobenius estimate.** ``||E omega||^2 = sum_j sigma_j^2 |v_j^H omega|^2``, so
``X = ||Y||_F^2 / s = sum_j sigma_j^2 Q_j`` with ``Q_j`` i.i.d. ``chi^2_nu / nu``
(``nu = s`` real, ``2s`` complex): ``E X = ||E||_F^2`` (Hutchinson; Halko, Martinsson and
Tropp 2011, Sec. 4.3; Gratton and Titley-Peloquin 2018). ``fro_estimate = sqrt(X)``.

**Frobenius bound** (a Chernoff bound; the rank-one error is the worst case). With weights
``w_j = sigma_j^2 / ||E||_F^2`` (summing to 1) and any ``theta > 0``,

    P(X <= tau ||E||_F^2) <= e^{theta tau} prod_j E e^{-theta w_j Q_j}
                          =  e^{theta tau} prod_j (1 + 2 theta w_j / nu)^{-nu/2}
                          <= e^{theta tau} (1 + 2 theta / nu)^{-nu/2},

the last step because ``w -> log(1 + a w)`` is concave with value 0 at 0, hence subadditive:
``sum_j log(1 + a w_j) >= log(1 + a)``. Minimising over theta (at ``1 + 2 theta/nu = 1/tau``)
gives, for ``0 < tau < 1``,

    P(X <= tau ||E||_F^2) <= (tau e^{1 - tau})^{nu/2}.                              (F)

Setting the right-hand side to delta, ``tau = -W_0(-delta^{2/nu} / e)`` (principal branch of
Lambert's W), and ``fro_bound = sqrt(X / tau) >= ||E||_F`` with probability >= 1 - delta,
for every spectrum. (For a rank-one E, (F) is the Chernoff bound of ``chi^2_nu``, so it is
within a small factor of exact: ``s = 20``, ``delta = 0.01`` gives ``1/sqrt(tau) = 1.77``
against 1.56 from the exact chi-square quantile.)

**Spectral bound** (exact in the rank-one case). ``||Y||_F^2 >= sigma_1^2 sum_i |v_1^H
omega_i|^2 = sigma_1^2 T`` with ``T ~ chi^2_nu / (nu / s)`` whatever the rest of E is, so

    P(||Y||_F^2 <= q ||E||_2^2) <= P(T <= q) = delta   for q the delta-quantile of T,   (S)

and ``spec_bound = ||Y||_F / sqrt(q)`` is an upper bound on ``||E||_2`` with probability
>= 1 - delta. It never exceeds ``fro_bound``: (F) is a Chernoff bound on the rank-one case,
whose exact quantile q is larger, ``q >= tau s``. (This improves Halko et al.'s Lemma 4.1, which bounds through
``max_i ||E omega_i||`` and ``P(|g| <= t) <= t sqrt(2/pi)``.) For errors of high numerical
rank ``r`` the spectral bound exceeds ``||E||_2`` by up to ``~sqrt(r)``: test vectors see the
Frobenius mass, not the top direction; the ratios are reported by
``experiments/bench_certificate.py``.

**Spectral estimate.** ``power_iters=0``: ``spec_estimate = sigma_max(Y) / sqrt(s)`` (the
root of the top eigenvalue of the sample covariance ``Y Y^H / s``, whose mean is
``E E^H``; exact for rank one as s grows, biased up for flat errors). ``power_iters >= 1``
adds a Rayleigh-Ritz step per iteration, ``Q = orth(Y)``, ``B = E^H Q``, ``Y <- E B``:
``spec_estimate = sigma_max(B) <= ||E||_2`` is then a guaranteed *lower* bound, so
``[spec_estimate, spec_bound]`` brackets ``||E||_2`` (two more passes over A each).

**Norm lower bound** (for relative tolerances). The same argument on the upper tail (with
``w -> -log(1 - a w)`` convex, hence superadditive) gives, for ``tau' > 1``,
``P(||A Omega||_F^2 / s >= tau' ||A||_F^2) <= (tau' e^{1 - tau'})^{nu/2}``, so
``||A||_F >= sqrt(X_A / tau')`` with probability >= 1 - delta for
``tau' = -W_{-1}(-delta^{2/nu} / e)``. :mod:`rdr_jax.id_cur.fixed_accuracy` uses it for implicit
operators, whose ``||A||_F`` is not known.

Public: :func:`error_certificate` -> :class:`ErrorCertificate`; the factors
:func:`fro_factor`, :func:`spec_quantile`, :func:`norm_factor` (host floats) for callers that
certify inside their own loops.
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
from rdr_jax.diagnostics import low_rank_factors
from rdr_jax.operators import HIGHEST, LinearOperator, as_operator
from rdr_jax.sketching import hash_normal

__all__ = ["ErrorCertificate", "error_certificate", "certify_factors", "certify_result",
           "CERT_STREAM", "fro_factor",
           "spec_quantile", "norm_factor", "chernoff_root", "check_delta", "min_vectors", "DEFAULT_NUM_VECTORS", "MAX_LOOSENESS"]

#: default number of Gaussian test vectors: with delta = 0.01 the Frobenius bound is at most
#: 1.77x the estimate (1/sqrt(tau) of (F)), so its median ratio to the truth is below 2.
DEFAULT_NUM_VECTORS = 20
#: a certificate looser than this factor (bound / estimate, Frobenius) is refused as
#: uninformative: :func:`error_certificate` asks for more test vectors instead.
MAX_LOOSENESS = 10.0


class ErrorCertificate(NamedTuple):
    """A posteriori certificate of ``||A - A_hat||`` (see the module docstring).

    Attributes:
      fro_estimate: ``sqrt(||E Omega||_F^2 / s)``; its square is unbiased for ``||E||_F^2``.
      fro_bound: ``>= ||E||_F`` with probability >= 1 - delta (Eq. (F)).
      spec_estimate: estimate of ``||E||_2`` (a guaranteed lower bound when
        ``power_iters >= 1``).
      spec_bound: ``>= ||E||_2`` with probability >= 1 - delta (Eq. (S)); never above
        ``fro_bound``.
      norm_estimate: ``sqrt(||A Omega||_F^2 / s)``, an unbiased-in-square estimate of
        ``||A||_F`` from the same vectors (for relative errors).
      delta: the failure probability each bound was computed for.
    """

    fro_estimate: jax.Array
    fro_bound: jax.Array
    spec_estimate: jax.Array
    spec_bound: jax.Array
    norm_estimate: jax.Array
    delta: jax.Array


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


def check_delta(delta: Any, name: str = "delta") -> float:
    """``delta`` as a float in (0, 1) (a failure probability), else ValueError/TypeError."""
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
# the traceable core
# --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _CertConfig:
    num_vectors: int
    delta: float
    power_iters: int


def _mm(a, b):
    return jnp.matmul(a, b, precision=HIGHEST)


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
    T = _mm(H.conj().T, X)
    if G is not None:
        T = _mm(G, T)
    return _mm(F, T)


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
    lam = jnp.linalg.eigvalsh(_mm(Xs.conj().T, Xs))[-1]
    return c * jnp.sqrt(jnp.maximum(lam, 0.0))


def certify_factors(key, op: LinearOperator, F, G, H, num_vectors: int, delta: float,
                    power_iters: int = 0) -> ErrorCertificate:
    """Traceable core of :func:`error_certificate` (no validation; ``num_vectors``,
    ``delta`` and ``power_iters`` static). Usable inside other jitted pipelines."""
    n = op.shape[1]
    s = num_vectors
    dt = np.dtype(op.dtype)
    rdt = V.real_dtype(dt)
    cplx = dt.kind == "c"
    tau = fro_factor(s, delta, cplx)
    q = spec_quantile(s, delta, cplx)
    Om = gaussian_test_vectors(key, n, s, dt)
    AOm = op.matmat(Om)
    Y = AOm - _lowrank_apply(F, G, H, Om)                          # E Omega
    yc, y2 = _scaled_sq(Y, rdt)                                    # ||Y||_F^2 = yc^2 y2
    ac, a2 = _scaled_sq(AOm, rdt)
    fro_est = yc * jnp.sqrt(y2 / s)
    fro_bound = fro_est / math.sqrt(tau)
    spec_bound = yc * jnp.sqrt(y2 / q)          # <= fro_bound: q >= tau s (q is exact)
    if power_iters == 0:   # root of the top eigenvalue of the sample covariance Y Y^H / s
        spec_est = _top_singular(Y, rdt) / math.sqrt(s)
    else:                  # Rayleigh-Ritz: ||E^H Q||_2 <= ||E||_2 for orthonormal Q
        Z = Y
        for it in range(power_iters):
            Q = jnp.linalg.qr(Z, mode="reduced")[0]
            B = op.rmatmat(Q) - _lowrank_apply(H, None if G is None else G.conj().T, F, Q)
            if it + 1 < power_iters:
                Z = op.matmat(B) - _lowrank_apply(F, G, H, B)
        spec_est = _top_singular(B, rdt)
    spec_est = jnp.minimum(spec_est, spec_bound)
    return ErrorCertificate(fro_est.astype(rdt), fro_bound.astype(rdt), spec_est.astype(rdt),
                            spec_bound.astype(rdt), (ac * jnp.sqrt(a2 / s)).astype(rdt),
                            jnp.asarray(delta, rdt))


#: decompositions draw their certificate's vectors from ``fold_in(key, CERT_STREAM)``, a
#: stream they never use themselves, so the vectors are independent of the factors
CERT_STREAM = 0x5EED


def certify_result(key, op: LinearOperator, factors, delta: float) -> ErrorCertificate:
    """The certificate a decomposition attaches to its result (``confidence=``): the
    decomposition's own ``key`` folded with :data:`CERT_STREAM`, default test vectors."""
    return certify_factors(jax.random.fold_in(key, CERT_STREAM), op, *factors,
                           DEFAULT_NUM_VECTORS, delta)


@functools.partial(_jit.jit, static_argnames=("cfg",))
def _certificate_jit(key, op, F, G, H, cfg: _CertConfig):
    return certify_factors(key, op, F, G, H, cfg.num_vectors, cfg.delta, cfg.power_iters)


def check_num_vectors(num_vectors: Any, delta: float, complex_: bool = False) -> int:
    """``num_vectors`` as an int >= :func:`min_vectors` ``(delta)``, else a clear error."""
    s = V.check_int("num_vectors", num_vectors, low=1)
    need = min_vectors(delta, complex_)
    if s < need:
        raise ValueError(
            f"num_vectors = {s} test vectors are too few for delta = {delta:g}: the bound "
            f"would exceed the estimate by more than {MAX_LOOSENESS:g}x "
            f"(1/sqrt(tau) = {1 / math.sqrt(fro_factor(s, delta, complex_)):.3g}); use "
            f"num_vectors >= {need} (default {DEFAULT_NUM_VECTORS})")
    return s


def error_certificate(key, A: Any, approx, *, delta: float = 0.01,
                      num_vectors: int = DEFAULT_NUM_VECTORS,
                      power_iters: int = 0) -> ErrorCertificate:
    """Certified upper bounds on ``||A - A_hat||_F`` and ``||A - A_hat||_2`` that hold with
    probability at least ``1 - delta``, from ``num_vectors`` Gaussian test vectors.

    ``X = ||(A - A_hat) Omega||_F^2 / s`` with ``Omega`` (n x s) standard Gaussian, drawn
    from ``key`` independently of ``A_hat``; then (module docstring)

    * ``fro_bound = sqrt(X / tau)``, ``tau = -W_0(-delta^{2/s} / e)`` -- the Chernoff bound
      ``P(X <= tau ||E||_F^2) <= (tau e^{1 - tau})^{s/2}``, worst case rank one;
    * ``spec_bound = sqrt(s X / q)``, q the delta-quantile of ``chi^2_s`` -- because
      ``s X >= sigma_1^2 chi^2_s`` for every E (never above ``fro_bound``).

    Not a thesis result: the thesis' certificate is ``eta`` (Thm
    ``thm:pivoting_on_rangeapprox_error_bound``), which these bounds complement (cf. Halko,
    Martinsson and Tropp 2011, Sec. 4.3; Gratton and Titley-Peloquin 2018; Martinsson and
    Tropp 2020, Sec. 12 on a posteriori error estimation).

    Works for every operator :func:`rdr_jax.as_operator` accepts (dense, sparse, implicit,
    factored) without densifying it: the cost is one product of A with an n x s block plus
    ``O((m + n) r s)`` for the factors. Pure: works under ``jax.jit`` (``delta``,
    ``num_vectors``, ``power_iters`` static) and ``jax.vmap`` over keys.

    Args:
      key: ``jax.random.key``; must be independent of the one that built ``approx``.
      A: m x n matrix or operator.
      approx: an ID/CUR result (``.factors()``), an :class:`rdr_jax.RSVD`, or a tuple
        ``(F, G, H)`` with ``A_hat = F G H^H`` (G may be None).
      delta: failure probability in (0, 1) of each bound.
      num_vectors: s, the number of test vectors (>= :func:`rdr_jax.certify.min_vectors`
        (delta): fewer make the bound more than 10x the estimate and raise).
      power_iters: Rayleigh-Ritz steps for ``spec_estimate`` (0: none; each costs two more
        passes over A and makes ``spec_estimate`` a guaranteed lower bound).

    Returns:
      :class:`ErrorCertificate` ``(fro_estimate, fro_bound, spec_estimate, spec_bound,
      norm_estimate, delta)``, jax scalars in A's real dtype.

    Raises:
      ValueError: delta outside (0, 1), too few test vectors for delta, an approximation
        whose factors do not fit A's shape, power_iters < 0.

    Example:
      >>> d = rdr_jax.cur(jax.random.key(0), A, 50)
      >>> c = rdr_jax.error_certificate(jax.random.key(1), A, d, delta=0.01)
      >>> float(c.fro_bound)       # >= ||A - CUR||_F with probability >= 0.99
    """
    delta = check_delta(delta)
    key = V.check_key(key)
    op = as_operator(A)
    cplx = np.dtype(op.dtype).kind == "c"
    s = check_num_vectors(num_vectors, delta, cplx)
    p = V.check_int("power_iters", power_iters, low=0)
    F, G, H = low_rank_factors(approx, op.shape)
    dt = op.dtype
    F, H = F.astype(dt), H.astype(dt)
    G = None if G is None else jnp.asarray(G).astype(dt)
    return _certificate_jit(key, op, F, G, H, _CertConfig(s, delta, p))
