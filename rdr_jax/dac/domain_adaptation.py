"""Domain adaptation with DAC vs DA-ERM in linear regression (thesis App. ``apx:case_ood``).

Generative model (``fig:data-distribution-causal-graph``), shared by the source ``P^s`` and
the target ``P^t``::

    x = S_iv zeta_iv + S_e zeta_e,      S = [S_iv, S_e] (d x (d_iv + d_e)) orthonormal columns
    y = theta*^T x + z = theta*^T S_iv zeta_iv + z,   z ~ N(0, sigma^2),  theta* in range(S_iv)
    zeta_iv ~ N(0, I_{d_iv});   zeta_e = sgn(z) e  (``example:ood``)
    e ~ N(0, I_{d_e}) under P^s,   e ~ N(0, sigma_t^2 I_{d_e}) under P^t.

The environmental feature is driven by the label noise, so a model fitted on the source can
use it; it carries no signal in any domain (``E[z zeta_e] = 0``) and its scale changes across
domains. Augmentations perturb only the environmental feature (``eq:def_envi_data_aug``): the
linear transforms of ``example:ood``, ``x_{i,j}^T = x_i^T A_j`` with
``A_j = P_iv + u_j v_j^T``, ``u_j, v_j in col(S_e)``.

Target excess risk: ``L_t(theta) - L_t(theta*) = 1/2 ||theta - theta*||^2_{Sigma_t}`` with
``Sigma_t = E_{P^t}[x x^T] = P_iv + sigma_t^2 P_e`` (``E[z zeta_e] = 0`` removes the cross
term), so each fitted theta gives an invariant part ``1/2 ||S_iv^T (theta - theta*)||^2`` and
an environmental part ``1/2 ||S_e^T (theta - theta*)||^2`` that is multiplied by
``sigma_t^2``; one Monte-Carlo run serves every ``sigma_t``.

Theory (``thm:domain-adaption-data-aug-consistency``, ``thm:domain-adaption-plain-data-aug``,
``example:ood``):

* DAC: ``E[L_t(theta^dac) - L_t(theta*)] <~ sigma^2 d_iv / N``; for this Gaussian model it is
  exactly ``sigma^2 / (2N) E tr(Sigma_hat_iv^{-1}) = sigma^2 d_iv / (2 (N - d_iv - 1))``
  (inverse-Wishart mean), independent of ``sigma_t``;
* DA-ERM: ``E[L_t(theta^da-erm) - L_t(theta*)] >= E[L_t(theta^dac) - L_t(theta*)]
  + c_{t,e} EER_e`` with ``c_{t,e} = sigma_t^2`` and
  ``EER_e = E 1/2 ||A~(X_e)^+ M~ z||^2`` (``A~(X_e) = A~(X) P_e``), and
  ``EER_e >~ sigma^2 d_e nu_2^2 / (2 N nu_1^4)``; here we report the Gaussian-exact version
  ``sigma^2 d_e nu_2^2 / (2 nu_1^4 (N - d_e - 1))`` of the last step.

Example::

    model = make_ood_model(jax.random.key(0), d=30, d_iv=10, d_e=20)
    mc = ood_monte_carlo(jax.random.key(1), model, N=200, num_draws=2000)
    ood_target_risks(mc, sigma_t=4.0)       # DAC vs DA-ERM excess risk in the target domain
    ood_theory(model, N=200, sigma_t=4.0)
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from rdr_jax._src import validation as V
from rdr_jax.dac.linear import MCEstimate, _check_nonneg, _dac_hard_K, _delta_svd, _erm_K, _mm, \
    _pinv, _rtol_or, _stack

__all__ = ["OODModel", "OODMonteCarlo", "OODRisks", "OODTheory", "make_ood_model",
           "sample_domain", "augment", "target_covariance", "target_excess_risk",
           "ood_monte_carlo", "ood_target_risks", "ood_theory"]


class OODModel(NamedTuple):
    """The linear generative model of App. ``apx:case_ood`` and the augmentations.

    Attributes:
        S_iv: ``(d, d_iv)``, S_e: ``(d, d_e)``: orthonormal columns, ``[S_iv, S_e]``
            orthonormal.
        theta_star: ``(d,)`` in ``range(S_iv)``.
        A: ``(alpha, d, d)``, ``A_j = P_iv + u_j v_j^T`` with ``u_j, v_j in col(S_e)``.
        sigma: label-noise std (0-d array).
    """
    S_iv: Float[Array, "d d_iv"]
    S_e: Float[Array, "d d_e"]
    theta_star: Float[Array, "d"]
    A: Float[Array, "alpha d d"]
    sigma: Any


class OODMonteCarlo(NamedTuple):
    """Per-draw parts of the target excess risk (source datasets drawn i.i.d., vmapped).

    The target excess risk of a draw at ``sigma_t`` is
    ``iv + sigma_t^2 * e``.

    Attributes:
        dac_iv, dac_e: ``1/2 ||S_iv^T delta||^2``, ``1/2 ||S_e^T delta||^2`` for
            ``delta = theta^dac - theta*``.
        erm_iv, erm_e: the same for DA-ERM.
        eer_e: ``1/2 ||A~(X_e)^+ M~ z||^2`` (its mean is ``EER_e``).
        (all of the above ``(num_draws,)``)
        d_aug: ``rank(Delta)`` of the first draw's design (0-d; ``d_e`` under
            ``ass:case_ood_sample``, almost surely the same for every draw).
    """
    dac_iv: Any
    dac_e: Any
    erm_iv: Any
    erm_e: Any
    eer_e: Any
    d_aug: Any


class OODRisks(NamedTuple):
    """Target-domain expected excess risks at one ``sigma_t`` (Monte-Carlo).

    Attributes:
        dac, da_erm: :class:`rdr_jax.dac.linear.MCEstimate`.
        eer_e: ``EER_e`` (:class:`rdr_jax.dac.linear.MCEstimate`).
        erm_minus_dac_bound: ``sigma_t^2 EER_e`` -- the theorem's lower bound on
            ``da_erm - dac``.
        margin: :class:`rdr_jax.dac.linear.MCEstimate` of ``da_erm - dac - sigma_t^2 EER_e``
            (paired over the same draws, so its standard error is small); the theorem says its
            mean is ``>= 0``.
    """
    dac: MCEstimate
    da_erm: MCEstimate
    eer_e: MCEstimate
    erm_minus_dac_bound: Any
    margin: MCEstimate


class OODTheory(NamedTuple):
    """Closed-form predictions of App. ``apx:case_ood`` for a model, N and sigma_t.

    Attributes:
        dac_exact: ``sigma^2 d_iv / (2 (N - d_iv - 1))`` (Gaussian model; needs
            ``N > d_iv + 1``).
        dac_rate: ``sigma^2 d_iv / (2 N)``, the theorem's order.
        nu1: ``max({1} U {sigma_max(A_j)})``; nu2: ``sigma_min((I + sum_j A_j) / (1+alpha))``
            restricted to ``col(S_e)`` (the directions the proof uses).
        separation: ``sigma_t^2 sigma^2 d_e nu2^2 / (2 nu1^4 (N - d_e - 1))``, the lower bound
            of ``example:ood`` on ``E[L_t(da-erm)] - E[L_t(dac)]``.
    """
    dac_exact: Any
    dac_rate: Any
    nu1: Any
    nu2: Any
    separation: Any


def _dims(model: OODModel):
    return model.S_iv.shape[0], model.S_iv.shape[1], model.S_e.shape[1], model.A.shape[0]


def _check_model(model: Any) -> OODModel:
    if not isinstance(model, OODModel):
        raise TypeError(f"model must be an OODModel (see make_ood_model); got "
                        f"{type(model).__name__}")
    return model


def make_ood_model(key: jax.Array, d: int = 30, d_iv: int = 10, d_e: int = 20, *,
                   alpha: int = 1, sigma: float = 1.0, dtype=None) -> OODModel:
    """Draw ``S = [S_iv, S_e]`` (QR of a Gaussian), ``theta* = S_iv beta`` (``beta ~ N(0, I)``)
    and the augmentations ``A_j = P_iv + u_j v_j^T`` with ``u_j = S_e a_j``,
    ``v_j = S_e b_j``, ``a_j, b_j ~ N(0, I_{d_e} / d_e)`` (``example:ood``).

    Args:
        key: PRNG key. d, d_iv, d_e: dimensions with ``d_iv + d_e <= d``, ``d_iv, d_e >= 1``.
        alpha: augmentations per sample (``>= 1``). sigma: label-noise std.
        dtype: float dtype (default: float64 under x64, else float32).

    Returns:
        :class:`OODModel`.

    Example::

        model = make_ood_model(jax.random.key(0), d=30, d_iv=10, d_e=20)
    """
    key = V.check_key(key)
    d = V.check_int("d", d, low=2)
    d_iv = V.check_int("d_iv", d_iv, low=1, high=d - 1)
    d_e = V.check_int("d_e", d_e, low=1, high=d - d_iv, high_desc="d_iv + d_e <= d")
    alpha = V.check_int("alpha", alpha, low=1)
    sigma = _check_nonneg("sigma", sigma)
    dtype = V.default_float() if dtype is None else V.check_dtype("dtype", dtype,
                                                                  allow_complex=False)
    return _make_model(key, d, d_iv, d_e, alpha, jnp.asarray(sigma, dtype), np.dtype(dtype))


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4, 6))
def _make_model(key, d, d_iv, d_e, alpha, sigma, dtype):
    ks, kb, ka, kv = jax.random.split(key, 4)
    Q, _ = jnp.linalg.qr(jax.random.normal(ks, (d, d_iv + d_e), dtype))
    S_iv, S_e = Q[:, :d_iv], Q[:, d_iv:]
    theta = _mm(S_iv, jax.random.normal(kb, (d_iv,), dtype))
    a = jax.random.normal(ka, (alpha, d_e), dtype) / math.sqrt(d_e)
    b = jax.random.normal(kv, (alpha, d_e), dtype) / math.sqrt(d_e)
    u, v = _mm(a, S_e.T), _mm(b, S_e.T)
    P_iv = _mm(S_iv, S_iv.T)
    A = P_iv[None] + u[:, :, None] * v[:, None, :]
    return OODModel(S_iv, S_e, theta, A, sigma)


def _sample(key, model, n, env_scale, batch=()):
    """Draw ``batch + (n,)`` samples from one Gaussian call (cheap to compile, no vmap)."""
    d, d_iv, d_e, _ = _dims(model)
    dt = model.S_iv.dtype
    g = jax.random.normal(key, batch + (n, d_iv + 1 + d_e), dt)
    z_iv, z, e = g[..., :d_iv], model.sigma * g[..., d_iv], env_scale * g[..., d_iv + 1:]
    z_e = jnp.sign(z)[..., None] * e
    X = _mm(z_iv, model.S_iv.T) + _mm(z_e, model.S_e.T)
    y = _mm(X, model.theta_star) + z
    return X, y, z


def sample_domain(key: jax.Array, model: OODModel, n: int, env_scale: float = 1.0):
    """Draw ``n`` samples ``(X, y)``; ``env_scale = 1`` is the source ``P^s``, ``sigma_t`` the
    target (``e ~ N(0, env_scale^2 I)``, ``zeta_e = sgn(z) e``).

    Example::

        X, y = sample_domain(jax.random.key(1), model, 200)
    """
    key = V.check_key(key)
    model = _check_model(model)
    n = V.check_int("n", n, low=1)
    env_scale = _check_nonneg("env_scale", env_scale)
    X, y, _ = _sample(key, model, n, env_scale)
    return X, y


def augment(model: OODModel, X: Float[Array, "N d"]) -> Float[Array, "alpha N d"]:
    """The augmentations of ``example:ood``: ``X_aug[j] = X A_j`` (shape ``(alpha, N, d)``).

    Example::

        X_aug = augment(model, X)      # S_iv^T x_{i,j} = S_iv^T x_i (eq:def_envi_data_aug)
    """
    model = _check_model(model)
    if X.ndim != 2 or X.shape[1] != model.A.shape[1]:
        raise ValueError(f"X must have shape (N, {model.A.shape[1]}); got {tuple(X.shape)}")
    return jnp.einsum("nd,jdk->jnk", X, model.A, precision=jax.lax.Precision.HIGHEST)


def target_covariance(model: OODModel, sigma_t: float) -> Float[Array, "d d"]:
    """``Sigma_t = E_{P^t}[x x^T] = S_iv S_iv^T + sigma_t^2 S_e S_e^T``.

    Example::

        Sigma_t = target_covariance(model, 4.0)
    """
    model = _check_model(model)
    sigma_t = _check_nonneg("sigma_t", sigma_t)
    return _mm(model.S_iv, model.S_iv.T) + sigma_t ** 2 * _mm(model.S_e, model.S_e.T)


def target_excess_risk(model: OODModel, theta: Float[Array, "d"], sigma_t: float):
    """``L_t(theta) - L_t(theta*) = 1/2 ||theta - theta*||^2_{Sigma_t}`` (App. ``apx:case_ood``).

    Example::

        target_excess_risk(model, fit_dac(X, y, augment(model, X)), 4.0)
    """
    delta = theta - model.theta_star
    return 0.5 * jnp.dot(delta, _mm(target_covariance(model, sigma_t), delta))


@functools.partial(jax.jit, static_argnames=("N", "num_draws", "rtol"))
def _ood_mc(key, model, N, num_draws, rtol):
    d, _, _, alpha = _dims(model)
    P_e = _mm(model.S_e, model.S_e.T)

    Xs, ys, zs = _sample(key, model, N, jnp.ones((), model.S_iv.dtype), (num_draws,))

    def one(X, y, z):
        Xa = jnp.einsum("nd,jdk->jnk", X, model.A, precision=jax.lax.Precision.HIGHEST)
        t_dac = _mm(_dac_hard_K(X, Xa, rtol), y)
        t_erm = _mm(_erm_K(X, Xa, rtol), y)

        def parts(t):
            dl = t - model.theta_star
            a, b = _mm(model.S_iv.T, dl), _mm(model.S_e.T, dl)
            return 0.5 * jnp.sum(a * a), 0.5 * jnp.sum(b * b)

        Ae = _mm(_stack(X, Xa), P_e)
        r = _rtol_or(rtol, Ae.shape[0], d, X.dtype)
        w = _mm(_pinv(Ae, r), jnp.tile(z, 1 + alpha))
        return (*parts(t_dac), *parts(t_erm), 0.5 * jnp.sum(w * w))

    out = jax.vmap(one)(Xs, ys, zs)
    # d_aug of the first draw's design (every draw has d_aug = d_e almost surely)
    X0 = Xs[0]
    Xa0 = jnp.einsum("nd,jdk->jnk", X0, model.A, precision=jax.lax.Precision.HIGHEST)
    r0 = _rtol_or(rtol, (1 + alpha) * N, d, X0.dtype)
    d_aug = jnp.sum(_delta_svd(X0, Xa0, r0)[2]).astype(jnp.int32)
    return OODMonteCarlo(*out, d_aug)


def ood_monte_carlo(key: jax.Array, model: OODModel, N: int, num_draws: int = 2000, *,
                    rtol=None) -> OODMonteCarlo:
    """Monte-Carlo over source datasets: draw ``(X, y)`` from ``P^s`` (``X`` and the noise
    ``z`` jointly: ``zeta_e`` depends on ``z``), augment, fit hard DAC and DA-ERM
    (:mod:`rdr_jax.dac.linear`), and record the parts of the target excess risk
    (``jax.vmap`` over keys).

    Args:
        key: PRNG key. model: :class:`OODModel`. N: source sample size (Python int).
        num_draws: number of source datasets (Python int, ``>= 2``). rtol: rank tolerance.

    Returns:
        :class:`OODMonteCarlo`; combine with :func:`ood_target_risks`.

    Example::

        mc = ood_monte_carlo(jax.random.key(1), model, N=200, num_draws=2000)
    """
    key = V.check_key(key)
    model = _check_model(model)
    N = V.check_int("N", N, low=1)
    num_draws = V.check_int("num_draws", num_draws, low=2)
    if rtol is not None:
        rtol = _check_nonneg("rtol", rtol)
    return _ood_mc(key, model, N, num_draws, rtol)


def _est(x) -> MCEstimate:
    x = jnp.asarray(x)
    return MCEstimate(jnp.mean(x), jnp.std(x, ddof=1) / jnp.sqrt(x.shape[0]))


def ood_target_risks(mc: OODMonteCarlo, sigma_t: float) -> OODRisks:
    """Target expected excess risks at ``sigma_t`` from one :func:`ood_monte_carlo` run.

    ``risk = iv + sigma_t^2 e`` per draw; ``c_{t,e} = sigma_t^2`` (the smallest eigenvalue of
    ``E_{P^t}[zeta_e zeta_e^T]``) in ``thm:domain-adaption-plain-data-aug``.

    Example::

        r = ood_target_risks(mc, 4.0); r.da_erm.mean - r.dac.mean >= r.erm_minus_dac_bound
    """
    sigma_t = _check_nonneg("sigma_t", sigma_t)
    s2 = sigma_t ** 2
    eer = _est(mc.eer_e)
    dac = mc.dac_iv + s2 * mc.dac_e
    erm = mc.erm_iv + s2 * mc.erm_e
    return OODRisks(_est(dac), _est(erm), eer, s2 * eer.mean, _est(erm - dac - s2 * mc.eer_e))


def ood_theory(model: OODModel, N: int, sigma_t: float) -> OODTheory:
    """Closed-form predictions of App. ``apx:case_ood`` (see :class:`OODTheory`).

    Example::

        th = ood_theory(model, 200, 4.0)     # th.dac_exact, th.separation
    """
    model = _check_model(model)
    N = V.check_int("N", N, low=1)
    sigma_t = _check_nonneg("sigma_t", sigma_t)
    d, d_iv, d_e, alpha = _dims(model)
    A = np.asarray(model.A, np.float64)
    S_e = np.asarray(model.S_e, np.float64)
    nu1 = max([1.0] + [float(np.linalg.norm(a, 2)) for a in A])
    Bm = (np.eye(d) + A.sum(0)) / (1 + alpha)
    nu2 = float(np.linalg.svd(S_e.T @ Bm @ S_e, compute_uv=False)[-1])
    s2 = float(model.sigma) ** 2
    dac_exact = s2 * d_iv / (2 * (N - d_iv - 1)) if N > d_iv + 1 else math.inf
    sep = (sigma_t ** 2 * s2 * d_e * nu2 ** 2 / (2 * nu1 ** 4 * (N - d_e - 1))
           if N > d_e + 1 else math.inf)
    return OODTheory(dac_exact, s2 * d_iv / (2 * N), nu1, nu2, sep)
