"""Domain adaptation with DAC vs DA-ERM in linear regression (thesis Section B.4).

A source and a target domain share ``y = theta*^T x + z``; an environmental feature driven by
the label noise changes scale across domains and augmentations perturb only it
(Example 4). Why: it shows DAC's target risk independent of the shift while DA-ERM's
grows. Model, risks and theory: ``docs/training.md`` ("Domain adaptation").
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from rdr_jax._src import validation as V
from rdr_jax._src.jit import jit
from rdr_jax.dac._common import (check_nonneg, dac_hard_K, delta_svd, erm_K, mm, pinv, rtol_or,
                                 stack)
from rdr_jax.dac.linear import MCEstimate

__all__ = ["OODModel", "OODMonteCarlo", "OODRisks", "OODTheory", "make_ood_model",
           "sample_domain", "augment", "target_covariance", "target_excess_risk",
           "ood_monte_carlo", "ood_target_risks", "ood_theory"]


class OODModel(NamedTuple):
    """The generative model of Section B.4 and its augmentations.

    Attributes:
        S_iv: ``(d, d_iv)``, S_e: ``(d, d_e)``: ``[S_iv, S_e]`` has orthonormal columns.
        theta_star: ``(d,)`` in ``range(S_iv)``.
        A: ``(alpha, d, d)``, ``A_j = P_iv + u_j v_j^T`` with ``u_j, v_j in col(S_e)``.
        sigma: label-noise std.
    """
    S_iv: Float[Array, "d d_iv"]
    S_e: Float[Array, "d d_e"]
    theta_star: Float[Array, "d"]
    A: Float[Array, "alpha d d"]
    sigma: Any


class OODMonteCarlo(NamedTuple):
    """Per-draw parts of the target excess risk ``iv + sigma_t^2 e``.

    Attributes:
        dac_iv, dac_e, erm_iv, erm_e: ``1/2 ||S_iv^T delta||^2``, ``1/2 ||S_e^T delta||^2`` of
            DAC and DA-ERM, ``(num_draws,)``.
        eer_e: ``1/2 ||A~(X_e)^+ M~ z||^2`` (mean ``EER_e``).
        d_aug: ``rank(Delta)`` of the first draw.
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
        dac, da_erm, eer_e: :class:`rdr_jax.dac.linear.MCEstimate`.
        erm_minus_dac_bound: ``sigma_t^2 EER_e``, the theorem's bound on ``da_erm - dac``.
        margin: paired estimate of ``da_erm - dac - sigma_t^2 EER_e`` (mean ``>= 0``).
    """
    dac: MCEstimate
    da_erm: MCEstimate
    eer_e: MCEstimate
    erm_minus_dac_bound: Any
    margin: MCEstimate


class OODTheory(NamedTuple):
    """Closed-form predictions of Section B.4.

    Attributes:
        dac_exact: ``sigma^2 d_iv / (2 (N - d_iv - 1))``; dac_rate: ``sigma^2 d_iv / (2 N)``.
        nu1, nu2: the augmentation constants of Example 4.
        separation: lower bound on ``E[L_t(da-erm)] - E[L_t(dac)]``.
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
    """Draw an :class:`OODModel` (Example 4).

    Args:
        key: PRNG key. d, d_iv, d_e: dimensions, ``d_iv + d_e <= d``.
        alpha: augmentations per sample. sigma: label-noise std. dtype: float dtype.

    Returns:
        :class:`OODModel`.
    """
    key = V.check_key(key)
    d = V.check_int("d", d, low=2)
    d_iv = V.check_int("d_iv", d_iv, low=1, high=d - 1)
    d_e = V.check_int("d_e", d_e, low=1, high=d - d_iv, high_desc="d_iv + d_e <= d")
    alpha = V.check_int("alpha", alpha, low=1)
    sigma = check_nonneg("sigma", sigma)
    dtype = V.default_float() if dtype is None else V.check_dtype("dtype", dtype,
                                                                  allow_complex=False)
    return _make_model(key, d, d_iv, d_e, alpha, jnp.asarray(sigma, dtype), np.dtype(dtype))


@jit(static_argnums=(1, 2, 3, 4, 6), fast_cpu_compile=False)
def _make_model(key, d, d_iv, d_e, alpha, sigma, dtype):
    ks, kb, ka, kv = jax.random.split(key, 4)
    Q, _ = jnp.linalg.qr(jax.random.normal(ks, (d, d_iv + d_e), dtype))
    S_iv, S_e = Q[:, :d_iv], Q[:, d_iv:]
    theta = mm(S_iv, jax.random.normal(kb, (d_iv,), dtype))
    a = jax.random.normal(ka, (alpha, d_e), dtype) / math.sqrt(d_e)
    b = jax.random.normal(kv, (alpha, d_e), dtype) / math.sqrt(d_e)
    u, v = mm(a, S_e.T), mm(b, S_e.T)
    P_iv = mm(S_iv, S_iv.T)
    A = P_iv[None] + u[:, :, None] * v[:, None, :]
    return OODModel(S_iv, S_e, theta, A, sigma)


def _sample(key, model, n, env_scale, batch=()):
    """Draw ``batch + (n,)`` samples from one Gaussian call (cheap to compile, no vmap)."""
    d, d_iv, d_e, _ = _dims(model)
    dt = model.S_iv.dtype
    g = jax.random.normal(key, batch + (n, d_iv + 1 + d_e), dt)
    z_iv, z, e = g[..., :d_iv], model.sigma * g[..., d_iv], env_scale * g[..., d_iv + 1:]
    z_e = jnp.sign(z)[..., None] * e
    X = mm(z_iv, model.S_iv.T) + mm(z_e, model.S_e.T)
    y = mm(X, model.theta_star) + z
    return X, y, z


def sample_domain(key: jax.Array, model: OODModel, n: int, env_scale: float = 1.0):
    """Draw ``n`` samples ``(X, y)``: ``env_scale = 1`` is the source, ``sigma_t``
    the target.
    """
    key = V.check_key(key)
    model = _check_model(model)
    n = V.check_int("n", n, low=1)
    env_scale = check_nonneg("env_scale", env_scale)
    X, y, _ = _sample(key, model, n, env_scale)
    return X, y


def augment(model: OODModel, X: Float[Array, "N d"]) -> Float[Array, "alpha N d"]:
    """The augmentations of Example 4: ``X_aug[j] = X A_j``, ``(alpha, N, d)``."""
    model = _check_model(model)
    if X.ndim != 2 or X.shape[1] != model.A.shape[1]:
        raise ValueError(f"X must have shape (N, {model.A.shape[1]}); got {tuple(X.shape)}")
    return jnp.einsum("nd,jdk->jnk", X, model.A, precision=jax.lax.Precision.HIGHEST)


def target_covariance(model: OODModel, sigma_t: float) -> Float[Array, "d d"]:
    """``Sigma_t = S_iv S_iv^T + sigma_t^2 S_e S_e^T``."""
    model = _check_model(model)
    sigma_t = check_nonneg("sigma_t", sigma_t)
    return mm(model.S_iv, model.S_iv.T) + sigma_t ** 2 * mm(model.S_e, model.S_e.T)


def target_excess_risk(model: OODModel, theta: Float[Array, "d"], sigma_t: float):
    """``L_t(theta) - L_t(theta*) = 1/2 ||theta - theta*||^2_{Sigma_t}``."""
    delta = theta - model.theta_star
    return 0.5 * jnp.dot(delta, mm(target_covariance(model, sigma_t), delta))


@jit(static_argnames=("N", "num_draws", "rtol"), fast_cpu_compile=False)
def _ood_mc(key, model, N, num_draws, rtol):
    d, _, _, alpha = _dims(model)
    P_e = mm(model.S_e, model.S_e.T)

    Xs, ys, zs = _sample(key, model, N, jnp.ones((), model.S_iv.dtype), (num_draws,))

    def one(X, y, z):
        Xa = jnp.einsum("nd,jdk->jnk", X, model.A, precision=jax.lax.Precision.HIGHEST)
        t_dac = mm(dac_hard_K(X, Xa, rtol), y)
        t_erm = mm(erm_K(X, Xa, rtol), y)

        def parts(t):
            dl = t - model.theta_star
            a, b = mm(model.S_iv.T, dl), mm(model.S_e.T, dl)
            return 0.5 * jnp.sum(a * a), 0.5 * jnp.sum(b * b)

        Ae = mm(stack(X, Xa), P_e)
        r = rtol_or(rtol, Ae.shape[0], d, X.dtype)
        w = mm(pinv(Ae, r), jnp.tile(z, 1 + alpha))
        return (*parts(t_dac), *parts(t_erm), 0.5 * jnp.sum(w * w))

    out = jax.vmap(one)(Xs, ys, zs)
    # d_aug of the first draw's design (every draw has d_aug = d_e almost surely)
    X0 = Xs[0]
    Xa0 = jnp.einsum("nd,jdk->jnk", X0, model.A, precision=jax.lax.Precision.HIGHEST)
    r0 = rtol_or(rtol, (1 + alpha) * N, d, X0.dtype)
    d_aug = jnp.sum(delta_svd(X0, Xa0, r0)[2]).astype(jnp.int32)
    return OODMonteCarlo(*out, d_aug)


def ood_monte_carlo(key: jax.Array, model: OODModel, N: int, num_draws: int = 2000, *,
                    rtol=None) -> OODMonteCarlo:
    """Monte-Carlo over source data sets: fit hard DAC and DA-ERM on each and
    record the parts of the target excess risk (vmapped).

    Args:
        key: PRNG key. model: :class:`OODModel`. N: source sample size.
        num_draws: number of data sets (``>= 2``). rtol: rank tolerance.

    Returns:
        :class:`OODMonteCarlo`; combine with :func:`ood_target_risks`.
    """
    key = V.check_key(key)
    model = _check_model(model)
    N = V.check_int("N", N, low=1)
    num_draws = V.check_int("num_draws", num_draws, low=2)
    if rtol is not None:
        rtol = check_nonneg("rtol", rtol)
    return _ood_mc(key, model, N, num_draws, rtol)


def _est(x) -> MCEstimate:
    x = jnp.asarray(x)
    return MCEstimate(jnp.mean(x), jnp.std(x, ddof=1) / jnp.sqrt(x.shape[0]))


def ood_target_risks(mc: OODMonteCarlo, sigma_t: float) -> OODRisks:
    """Target expected excess risks at ``sigma_t`` from one
    :func:`ood_monte_carlo` run (``c_{t,e} = sigma_t^2``).
    """
    sigma_t = check_nonneg("sigma_t", sigma_t)
    s2 = sigma_t ** 2
    eer = _est(mc.eer_e)
    dac = mc.dac_iv + s2 * mc.dac_e
    erm = mc.erm_iv + s2 * mc.erm_e
    return OODRisks(_est(dac), _est(erm), eer, s2 * eer.mean, _est(erm - dac - s2 * mc.eer_e))


def ood_theory(model: OODModel, N: int, sigma_t: float) -> OODTheory:
    """Closed-form predictions of Section B.4 (see :class:`OODTheory`)."""
    model = _check_model(model)
    N = V.check_int("N", N, low=1)
    sigma_t = check_nonneg("sigma_t", sigma_t)
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
