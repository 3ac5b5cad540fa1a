"""Linear-regression theory of data augmentation consistency (thesis Chapter 4).

``N`` samples ``X (N, d)``, labels ``y = X theta* + eps``, ``alpha`` augmentations per sample
as ``X_aug (alpha, N, d)``. DAC (hard or soft) and DA-ERM are linear in ``y``: the
``*_operator`` functions return the ``d x N`` matrix ``K`` with ``theta = K y``. Why: exact
risks and Monte-Carlo checks of Thm 4.1 and the soft-DAC bounds. Notation, rank rule and an
example: ``docs/training.md`` ("DAC in linear regression").
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from rdr_jax._src import validation as V
from rdr_jax._src.jit import jit
from rdr_jax.dac._common import (check_nonneg, dac_hard_K, dac_soft_K, default_rtol, delta_svd,
                                 erm_K, mm, pinv, rtol_or, stack)

__all__ = [
    "AugmentedDesign", "Dimensions", "LabelInvariantTheory", "RiskTerms", "MCEstimate",
    "MonteCarloRisks", "MonteCarloOptions", "SoftDACTheory", "OptimalLambda",
    "augmented_design", "dimensions", "default_rtol",
    "dac_operator", "da_erm_operator", "fit_dac", "fit_da_erm",
    "excess_risk", "expected_excess_risk", "label_invariant_theory",
    "monte_carlo_risks", "soft_dac_theory", "soft_dac_risk", "optimal_lambda",
    "linear_regression_example", "misspec_example",
]



# ======================================================================================
# results
# ======================================================================================
class AugmentedDesign(NamedTuple):
    """The augmented design of Section 4.3.

    Attributes:
        A: ``A~(X)``, ``((1+alpha) N, d)``: the originals, then augmentation 1 of every sample, ...
        M: ``M~``, ``((1+alpha) N, N)``: ``1+alpha`` stacked identities.
        Delta: ``A~(X) - M~ X`` (its first N rows are zero).
    """
    A: Float[Array, "m d"]
    M: Float[Array, "m n"]
    Delta: Float[Array, "m d"]


class Dimensions(NamedTuple):
    """Dimensions of Theorem B.1 (0-d arrays).

    Attributes:
        d: feature dimension.
        d_aug: ``rank(Delta)``.
        d_prime: ``tr(M~^T (P_A~ - P_S) M~) / (1+alpha)``, in ``[0, d_aug]``.
        rank_A: ``rank(A~(X))``.
        rank_dac: ``rank(X V_0)``, ``V_0`` a basis of ``null(Delta)``.
    """
    d: Any
    d_aug: Any
    d_prime: Any
    rank_A: Any
    rank_dac: Any


class LabelInvariantTheory(NamedTuple):
    """Theorem B.1: expected excess risks.

    Attributes:
        dims: :class:`Dimensions`.
        dac_risk: ``(d - d_aug) sigma^2 / N``.
        da_erm_risk: ``(d - d_aug + d') sigma^2 / N``.
    """
    dims: Dimensions
    dac_risk: Any
    da_erm_risk: Any


class RiskTerms(NamedTuple):
    """Expected excess risk ``total = bias + variance`` (Section B.1.2)."""
    bias: Any
    variance: Any
    total: Any


class MCEstimate(NamedTuple):
    """A Monte-Carlo mean over label-noise draws and its standard error."""
    mean: Any
    stderr: Any


class MonteCarloRisks(NamedTuple):
    """Monte-Carlo excess risks over label-noise draws.

    Attributes:
        dac, da_erm: :class:`MCEstimate` of DAC (hard or soft) and DA-ERM.
        dac_draws, da_erm_draws: per-draw risks, ``(num_draws,)``.
    """
    dac: MCEstimate
    da_erm: MCEstimate
    dac_draws: Any
    da_erm_draws: Any


class SoftDACTheory(NamedTuple):
    """Quantities of Theorem 4.2 (risk ``||X(.)||^2/N``).

    Attributes:
        gamma: descending eigenvalues of ``Sigma_X^{-1/2} Sigma_aug Sigma_X^{-1/2}``, ``(d,)``.
        vartheta: ``Q^T Sigma_X^{1/2} P_Delta theta*``, ``(d,)``.
        d, d_aug, N, sigma: sizes and noise level.
        misspec: ``||Delta theta*||^2 / ((1+alpha) N)`` (``C_mis^2``; 0 if label invariant).
        misspec_tilde: the DA-ERM bias ``||P_Delta theta*||^2_{Sigma~_aug}``.
        trace_term: ``tr(Sigma_X Sigma_aug^+)``.
        lam_bound: the proof's lambda (``inf`` when ``misspec = 0``).
        dac_upper_bound: the theorem's upper bound on soft DAC at ``lam_bound``.
        c_X, c_S: minimal constants with ``Sigma_A~ <= c_X Sigma_X``, ``<= c_S Sigma_S``.
        erm_lower_bound: ``sigma^2 d / (N c_X c_S) + misspec_tilde``.
        erm, hard: exact :class:`RiskTerms` of DA-ERM and hard DAC.
    """
    gamma: Any
    vartheta: Any
    d: Any
    d_aug: Any
    N: Any
    sigma: Any
    misspec: Any
    misspec_tilde: Any
    trace_term: Any
    lam_bound: Any
    dac_upper_bound: Any
    c_X: Any
    c_S: Any
    erm_lower_bound: Any
    erm: RiskTerms
    hard: RiskTerms


class OptimalLambda(NamedTuple):
    """The soft-DAC lambda with the smallest exact excess risk.

    Attributes:
        lam: the minimiser (``inf`` when the hard constraint is as good).
        risk: its risk. lams, risks: the searched grid and its risks.
        hard_risk, erm_risk: risks of hard DAC and DA-ERM.
    """
    lam: Any
    risk: Any
    lams: Any
    risks: Any
    hard_risk: Any
    erm_risk: Any


# ======================================================================================
# validation
# ======================================================================================
def _check_matrix(name: str, a: Any, ndim: int) -> jax.Array:
    if not hasattr(a, "shape") or not hasattr(a, "dtype"):
        a = np.asarray(a)
    if a.ndim != ndim:
        shapes = {1: "(N,)", 2: "(N, d)", 3: "(alpha, N, d)"}
        raise ValueError(f"{name} must be {ndim}-D with shape {shapes[ndim]}; got shape "
                         f"{tuple(a.shape)}")
    if not jnp.issubdtype(a.dtype, jnp.floating):
        if jnp.issubdtype(a.dtype, jnp.integer) or a.dtype == np.bool_:
            a = jnp.asarray(a, V.default_float())
        else:
            raise TypeError(f"{name} must hold real floats; got dtype {a.dtype}")
    V.check_dtype(name, a.dtype, allow_complex=False)
    V.check_array_values(name, a)
    return jnp.asarray(a)


def _check_design(X: Any, X_aug: Any) -> tuple[jax.Array, jax.Array]:
    X = _check_matrix("X", X, 2)
    X_aug = _check_matrix("X_aug", X_aug, 3)
    N, d = X.shape
    if N < 1 or d < 1:
        raise ValueError(f"X must have at least one row and one column; got shape {X.shape}")
    if X_aug.shape[0] < 1:
        raise ValueError("X_aug must hold alpha >= 1 augmentations per sample (shape "
                         f"(alpha, N, d)); got alpha = 0 (shape {tuple(X_aug.shape)})")
    if X_aug.shape[1:] != (N, d):
        raise ValueError(f"X_aug must have shape (alpha, N, d) = (alpha, {N}, {d}) to match X "
                         f"of shape {X.shape}; got {tuple(X_aug.shape)}")
    dt = jnp.result_type(X.dtype, X_aug.dtype)
    return X.astype(dt), X_aug.astype(dt)


def _check_y(y: Any, N: int, dtype) -> jax.Array:
    y = _check_matrix("y", y, 1)
    if y.shape[0] != N:
        raise ValueError(f"y must have length N = {N} (the rows of X); got {y.shape[0]}")
    return y.astype(dtype)


def _check_theta(theta_star: Any, d: int, dtype) -> jax.Array:
    t = _check_matrix("theta_star", theta_star, 1)
    if t.shape[0] != d:
        raise ValueError(f"theta_star must have length d = {d} (the columns of X); "
                         f"got {t.shape[0]}")
    return t.astype(dtype)


def _check_rtol(rtol: Any):
    if rtol is None:
        return None
    return check_nonneg("rtol", rtol)


def _K(X, X_aug, lam, rtol):
    if lam is None:
        return dac_hard_K(X, X_aug, rtol)
    return dac_soft_K(X, X_aug, lam, rtol)


def _dims(X, X_aug, rtol):
    N, d = X.shape
    alpha = X_aug.shape[0]
    A = stack(X, X_aug)
    r = rtol_or(rtol, A.shape[0], d, X.dtype)
    _, Vt, nonzero, _ = delta_svd(X, X_aug, r)
    d_aug = jnp.sum(nonzero).astype(jnp.int32)
    U, s, _ = jnp.linalg.svd(A, full_matrices=False)
    keepA = s > r * s[0]
    rank_A = jnp.sum(keepA).astype(jnp.int32)
    # tr(M~^T P_A M~) = ||U_r^T M~||_F^2; U^T M~ sums the row blocks of U.
    UM = (U * keepA).reshape(1 + alpha, N, -1).sum(axis=0)
    tr_A = jnp.sum(UM * UM)
    # S = col(M~ X V_0): tr(M~^T P_S M~) = (1+alpha) rank(X V_0).
    rb = rtol_or(rtol, N, d, X.dtype)
    B = mm(X, Vt.T * (~nonzero))
    sb = jnp.linalg.svd(B, compute_uv=False)
    rank_dac = jnp.sum(sb > rb * jnp.maximum(sb[0], jnp.finfo(X.dtype).tiny)).astype(jnp.int32)
    d_prime = tr_A / (1 + alpha) - rank_dac
    return Dimensions(jnp.asarray(d, jnp.int32), d_aug, d_prime, rank_A, rank_dac)


# ======================================================================================
# public API: design, dimensions, estimators
# ======================================================================================
def augmented_design(X: Float[Array, "N d"], X_aug: Float[Array, "alpha N d"]) -> AugmentedDesign:
    """``(A~(X), M~, Delta)`` of Section 4.3.

    Args:
        X: originals ``(N, d)``.
        X_aug: ``(alpha, N, d)``, ``X_aug[j, i] = x_{i, j+1}``.

    Returns:
        :class:`rdr_jax.dac.linear.AugmentedDesign`.
    """
    X, X_aug = _check_design(X, X_aug)
    N, _ = X.shape
    alpha = X_aug.shape[0]
    A = stack(X, X_aug)
    M = jnp.tile(jnp.eye(N, dtype=X.dtype), (1 + alpha, 1))
    return AugmentedDesign(A, M, A - jnp.tile(X, (1 + alpha, 1)))


@jit(static_argnames=("rtol",), fast_cpu_compile=False)
def _dims_jit(X, X_aug, rtol):
    return _dims(X, X_aug, rtol)


def dimensions(X: Float[Array, "N d"], X_aug: Float[Array, "alpha N d"], *,
               rtol: Optional[float] = None) -> Dimensions:
    """``d``, ``d_aug = rank(Delta)`` and ``d'`` of Theorem B.1.

    Args:
        X: ``(N, d)``; X_aug: ``(alpha, N, d)``.
        rtol: relative rank tolerance (default ``max(rows, cols) eps``).

    Returns:
        :class:`rdr_jax.dac.linear.Dimensions`.
    """
    X, X_aug = _check_design(X, X_aug)
    return _dims_jit(X, X_aug, _check_rtol(rtol))


@jit(static_argnames=("rtol", "hard"), fast_cpu_compile=False)
def _dac_K_jit(X, X_aug, lam, rtol, hard):
    return _K(X, X_aug, None if hard else lam, rtol)


@jit(static_argnames=("rtol",), fast_cpu_compile=False)
def _erm_K_jit(X, X_aug, rtol):
    return erm_K(X, X_aug, rtol)


def dac_operator(X: Float[Array, "N d"], X_aug: Float[Array, "alpha N d"],
                 lam: Optional[float] = None, *, rtol: Optional[float] = None
                 ) -> Float[Array, "d N"]:
    """The ``d x N`` matrix ``K`` with ``theta^dac = K y`` (Eqs. (4.2),
    (4.4)).

    ``lam=None``: ``K = V_0 (X V_0)^+`` (least squares over ``null(Delta)``); ``lam >= 0``:
    least squares on ``[X; sqrt(lam / (1+alpha)) Delta] theta ~ [y; 0]`` (``lam`` may be traced).

    Args:
        X: ``(N, d)``; X_aug: ``(alpha, N, d)``.
        lam: ``None`` (hard constraint) or a float ``>= 0``.
        rtol: relative rank tolerance.

    Returns:
        ``K``, ``(d, N)``.
    """
    X, X_aug = _check_design(X, X_aug)
    lam = check_nonneg("lam", lam, allow_none=True)
    rtol = _check_rtol(rtol)
    hard = lam is None
    return _dac_K_jit(X, X_aug, jnp.zeros((), X.dtype) if hard else jnp.asarray(lam, X.dtype),
                      rtol, hard)


def da_erm_operator(X: Float[Array, "N d"], X_aug: Float[Array, "alpha N d"], *,
                    rtol: Optional[float] = None) -> Float[Array, "d N"]:
    """``K = A~(X)^+ M~`` with ``theta^da-erm = K y`` (Eq. (4.3)).

    Args:
        X: ``(N, d)``; X_aug: ``(alpha, N, d)``; rtol: rank tolerance.

    Returns:
        ``K``, ``(d, N)``.
    """
    X, X_aug = _check_design(X, X_aug)
    return _erm_K_jit(X, X_aug, _check_rtol(rtol))


def fit_dac(X: Float[Array, "N d"], y: Float[Array, "N"], X_aug: Float[Array, "alpha N d"],
            lam: Optional[float] = None, *, rtol: Optional[float] = None) -> Float[Array, "d"]:
    """DAC regression: ``argmin ||X theta - y||^2`` with ``Delta theta = 0`` (``lam=None``)
    or the soft penalty ``lam / ((1+alpha) N) ||Delta theta||^2`` (min-norm solutions).

    Args:
        X: ``(N, d)``; y: ``(N,)``; X_aug: ``(alpha, N, d)``.
        lam: ``None`` or a float ``>= 0``; rtol: rank tolerance.

    Returns:
        ``theta^dac``, ``(d,)``.

    Raises:
        ValueError / TypeError: bad shapes, ``alpha = 0``, ``lam < 0``, non-finite inputs.
    """
    X, X_aug = _check_design(X, X_aug)
    y = _check_y(y, X.shape[0], X.dtype)
    return mm(dac_operator(X, X_aug, lam, rtol=rtol), y)


def fit_da_erm(X: Float[Array, "N d"], y: Float[Array, "N"], X_aug: Float[Array, "alpha N d"],
               *, rtol: Optional[float] = None) -> Float[Array, "d"]:
    """DA-ERM regression ``theta = A~(X)^+ M~ y`` (Eq. (4.3)).

    Args:
        X: ``(N, d)``; y: ``(N,)``; X_aug: ``(alpha, N, d)``; rtol: rank tolerance.

    Returns:
        ``theta^da-erm``, ``(d,)``.
    """
    X, X_aug = _check_design(X, X_aug)
    y = _check_y(y, X.shape[0], X.dtype)
    return mm(da_erm_operator(X, X_aug, rtol=rtol), y)


# ======================================================================================
# risks
# ======================================================================================
def excess_risk(theta: Float[Array, "d"], theta_star: Float[Array, "d"],
                W: Float[Array, "n d"]) -> jax.Array:
    """Fixed-design excess risk ``||W (theta - theta*)||^2 / n`` (traced, unchecked)."""
    r = mm(W, theta - theta_star)
    return jnp.sum(r * r) / W.shape[0]


def expected_excess_risk(K: Float[Array, "d N"], X: Float[Array, "N d"],
                         theta_star: Float[Array, "d"], sigma: float,
                         W: Optional[Float[Array, "n d"]] = None) -> RiskTerms:
    """Exact ``E ||W (K y - theta*)||^2 / n`` for ``y = X theta* + eps``,
    ``Cov(eps) = sigma^2 I`` (Section B.1.2; jitted, unchecked).

    Args:
        K: ``(d, N)`` linear estimator. X: ``(N, d)``. theta_star: ``(d,)``. sigma: noise std.
        W: ``(n, d)`` risk design (default ``X``).

    Returns:
        :class:`rdr_jax.dac.linear.RiskTerms`.
    """
    return _expected_risk_jit(K, X, theta_star, sigma, X if W is None else W)


def _expected_risk(K, X, theta_star, sigma, W):
    b = mm(W, mm(K, mm(X, theta_star)) - theta_star)
    WK = mm(W, K)
    n = W.shape[0]
    bias = jnp.sum(b * b) / n
    var = sigma ** 2 * jnp.sum(WK * WK) / n
    return RiskTerms(bias, var, bias + var)


_expected_risk_jit = jit(_expected_risk, fast_cpu_compile=False)


def label_invariant_theory(X: Float[Array, "N d"], X_aug: Float[Array, "alpha N d"],
                           sigma: float, *, rtol: Optional[float] = None
                           ) -> LabelInvariantTheory:
    """Theorem B.1: DAC risk
    ``(d - d_aug) sigma^2 / N``, DA-ERM ``(d - d_aug + d') sigma^2 / N``.

    Args:
        X: ``(N, d)``; X_aug: ``(alpha, N, d)``; sigma: noise std; rtol: rank tolerance.

    Returns:
        :class:`rdr_jax.dac.linear.LabelInvariantTheory`.
    """
    sigma = check_nonneg("sigma", sigma)
    dims = dimensions(X, X_aug, rtol=rtol)
    N = X.shape[0]
    s2 = sigma ** 2 / N
    return LabelInvariantTheory(dims, (dims.d - dims.d_aug) * s2,
                                (dims.d - dims.d_aug + dims.d_prime) * s2)


@dataclasses.dataclass(frozen=True)
class _MCConfig:
    """Static settings of :func:`monte_carlo_risks` (hashable; one compilation each)."""

    num_draws: int
    risk: str
    hard: bool
    rtol: Optional[float]


@jit(static_argnames=("cfg",), fast_cpu_compile=False)
def _mc(key, X, X_aug, theta_star, sigma, lam, cfg: _MCConfig):
    num_draws, hard, rtol = cfg.num_draws, cfg.hard, cfg.rtol
    W = stack(X, X_aug) if cfg.risk == "augmented" else X
    f = X @ theta_star
    lam_ = None if hard else lam

    def one(k, Kd, Ke):
        y = f + sigma * jax.random.normal(k, f.shape, X.dtype)
        return (excess_risk(mm(Kd, y), theta_star, W), excess_risk(mm(Ke, y), theta_star, W))

    # The operators do not depend on the draw: built once, outside the vmapped function.
    Kd = _K(X, X_aug, lam_, rtol)
    Ke = erm_K(X, X_aug, rtol)
    keys = jax.random.split(key, num_draws)
    rd, re = jax.vmap(one, in_axes=(0, None, None))(keys, Kd, Ke)
    se = lambda r: jnp.std(r, ddof=1) / jnp.sqrt(num_draws)  # noqa: E731
    return MonteCarloRisks(MCEstimate(jnp.mean(rd), se(rd)), MCEstimate(jnp.mean(re), se(re)),
                           rd, re)


@dataclasses.dataclass(frozen=True)
class MonteCarloOptions:
    """What :func:`monte_carlo_risks` measures: ``risk`` ``"augmented"`` (``W = A~(X)``) or
    ``"original"`` (``W = X``), and ``rtol``, the rank tolerance of the augmentation subspace
    (None: ``default_rtol``; else a finite number >= 0)."""

    risk: str = "augmented"
    rtol: Optional[float] = None

    def __post_init__(self):
        if self.risk not in ("augmented", "original"):
            raise ValueError(f"risk must be 'augmented' or 'original'; got {self.risk!r}")
        _check_rtol(self.rtol)


def monte_carlo_risks(key: jax.Array, X: Float[Array, "N d"],
                      X_aug: Float[Array, "alpha N d"], theta_star: Float[Array, "d"],
                      sigma: float, num_draws: int = 2000, *, lam: Optional[float] = None,
                      options: MonteCarloOptions = MonteCarloOptions()) -> MonteCarloRisks:
    """Monte-Carlo excess risks of DAC and DA-ERM over ``num_draws``
    label-noise draws (fixed design, vmapped).

    Args:
        key: PRNG key. X: ``(N, d)``. X_aug: ``(alpha, N, d)``. theta_star: ``(d,)``.
        sigma: noise std. num_draws: static int ``>= 2``.
        lam: ``None`` (hard DAC) or soft lambda.
        options: :class:`MonteCarloOptions` (``risk``, ``rtol``).

    Returns:
        :class:`rdr_jax.dac.linear.MonteCarloRisks`.
    """
    key = V.check_key(key)
    X, X_aug = _check_design(X, X_aug)
    theta_star = _check_theta(theta_star, X.shape[1], X.dtype)
    sigma = check_nonneg("sigma", sigma)
    lam = check_nonneg("lam", lam, allow_none=True)
    num_draws = V.check_int("num_draws", num_draws, low=2)
    if not isinstance(options, MonteCarloOptions):
        raise TypeError(f"options must be a MonteCarloOptions; got {type(options).__name__}")
    risk, rtol = options.risk, options.rtol
    hard = lam is None
    return _mc(key, X, X_aug, theta_star, jnp.asarray(sigma, X.dtype),
               jnp.zeros((), X.dtype) if hard else jnp.asarray(lam, X.dtype),
               _MCConfig(num_draws, risk, hard, _check_rtol(rtol)))


# ======================================================================================
# misspecified augmentations: Theorem 4.2
# ======================================================================================
def _inv_sqrt_gram(Z, n, rtol):
    """``(Z^T Z / n)^{-1/2}`` (pseudo) from the SVD of Z, and ``(Z^T Z / n)^{1/2}``."""
    _, s, Vt = jnp.linalg.svd(Z, full_matrices=False)
    keep = s > rtol * s[0]
    root = s / jnp.sqrt(n)
    inv = jnp.where(keep, 1.0 / jnp.where(keep, root, 1.0), 0.0)
    return mm(Vt.T * inv, Vt), mm(Vt.T * root, Vt)


@jit(static_argnames=("rtol",), fast_cpu_compile=False)
def _soft_theory(X, X_aug, theta_star, sigma, rtol):
    N, d = X.shape
    alpha = X_aug.shape[0]
    m = (1 + alpha) * N
    A = stack(X, X_aug)
    r = rtol_or(rtol, m, d, X.dtype)
    D = (X_aug - X[None]).reshape(-1, d)
    s_d, Vt_d, nonzero, _ = delta_svd(X, X_aug, r)
    d_aug = jnp.sum(nonzero).astype(jnp.int32)
    rX = rtol_or(rtol, N, d, X.dtype)
    Xm12, X12 = _inv_sqrt_gram(X, N, rX)
    # generalized eigenvalues: Sigma_X^{-1/2} Sigma_aug Sigma_X^{-1/2} = Z^T Z / m
    Z = mm(D, Xm12)
    full = Z.shape[0] < d
    _, sz, Qt = jnp.linalg.svd(Z, full_matrices=full)
    if sz.shape[0] < d:
        sz = jnp.concatenate([sz, jnp.zeros((d - sz.shape[0],), sz.dtype)])
    # the same rank rule as d_aug (gamma_i > 0 exactly for the d_aug nonzero directions)
    gamma = jnp.where(jnp.arange(d) < d_aug, sz * sz / m, 0.0)
    sds = jnp.where(nonzero, s_d, 1.0)
    P_theta = mm(Vt_d.T * nonzero, mm(Vt_d, theta_star))          # P_Delta theta*
    vartheta = mm(Qt, mm(X12, P_theta))
    misspec = jnp.sum(mm(D, theta_star) ** 2) / m
    # tr(Sigma_X Sigma_aug^+) = sum_i m / s_i^2 * ||X v_i||^2 / N
    XV = mm(X, Vt_d.T)
    trace_term = jnp.sum(jnp.where(nonzero, m / (sds * sds) * jnp.sum(XV * XV, 0) / N, 0.0))
    s2N = sigma ** 2 / N
    lam_bound = jnp.where(misspec > 0, jnp.sqrt(s2N * trace_term / jnp.where(
        misspec > 0, misspec, 1.0)), jnp.inf)
    dac_upper = s2N * (d - d_aug) + jnp.sqrt(misspec) * jnp.sqrt(s2N * trace_term)
    # DA-ERM: Sigma_A <= c_X Sigma_X, Sigma_A <= c_S Sigma_S
    c_X = jnp.linalg.svd(mm(A, Xm12), compute_uv=False)[0] ** 2 / m
    S = (X + X_aug.sum(0)) / (1 + alpha)
    Sm12, _ = _inv_sqrt_gram(S, N, rX)
    c_S = jnp.linalg.svd(mm(A, Sm12), compute_uv=False)[0] ** 2 / m
    Ke = erm_K(X, X_aug, rtol)
    Pa = pinv(A, r)
    Dfull = A - jnp.tile(X, (1 + alpha, 1))
    t = mm(X, mm(Pa, mm(Dfull, theta_star)))
    misspec_tilde = jnp.sum(t * t) / N
    erm_lower = sigma ** 2 * d / (N * c_X * c_S) + misspec_tilde
    erm = _expected_risk(Ke, X, theta_star, sigma, X)
    hard = _expected_risk(dac_hard_K(X, X_aug, rtol), X, theta_star, sigma, X)
    return SoftDACTheory(gamma, vartheta, jnp.asarray(d, jnp.int32), d_aug,
                         jnp.asarray(N, jnp.int32), sigma, misspec, misspec_tilde, trace_term,
                         lam_bound, dac_upper, c_X, c_S, erm_lower, erm, hard)


def soft_dac_theory(X: Float[Array, "N d"], X_aug: Float[Array, "alpha N d"],
                    theta_star: Float[Array, "d"], sigma: float, *,
                    rtol: Optional[float] = None) -> SoftDACTheory:
    """Theorem 4.2 and the spectral quantities of
    its proof (needs ``rank(X) = d``; formulas in ``docs/training.md``).

    Args:
        X: ``(N, d)``; X_aug: ``(alpha, N, d)``; theta_star: ``(d,)``; sigma: noise std.
        rtol: relative rank tolerance.

    Returns:
        :class:`rdr_jax.dac.linear.SoftDACTheory`; :func:`soft_dac_risk` evaluates any lambda.
    """
    X, X_aug = _check_design(X, X_aug)
    theta_star = _check_theta(theta_star, X.shape[1], X.dtype)
    sigma = check_nonneg("sigma", sigma)
    return _soft_theory(X, X_aug, theta_star, jnp.asarray(sigma, X.dtype), _check_rtol(rtol))


def soft_dac_risk(theory: SoftDACTheory, lam) -> RiskTerms:
    """Exact expected excess risk of soft DAC at ``lam`` (``inf``: hard DAC) from
    the proof's spectral formula (Section B.1.2); vmap over ``lam``.
    """
    return _soft_risk_jit(theory, jnp.asarray(lam, theory.gamma.dtype))


@jit(fast_cpu_compile=False)
def _soft_risk_jit(theory, lam):
    g = theory.gamma
    pos = g > 0
    lg = jnp.where(jnp.isinf(lam), jnp.where(pos, jnp.inf, 0.0), lam * g)
    shrink = jnp.where(pos, 1.0 / (1.0 + lg), 0.0)            # 1/(1+lam g), -> 0 as lam -> inf
    frac = jnp.where(pos, jnp.where(jnp.isinf(lg), 1.0, lg / (1.0 + lg)), 0.0)
    s2N = theory.sigma ** 2 / theory.N
    var = s2N * (theory.d - theory.d_aug) + s2N * jnp.sum(shrink ** 2)
    bias = jnp.sum(theory.vartheta ** 2 * frac ** 2)
    return RiskTerms(bias, var, bias + var)


@jit(static_argnames=("rtol", "refine"), fast_cpu_compile=False)
def _opt_lam(X, X_aug, theta_star, sigma, lams, rtol, refine):
    def risk(lam):
        return _expected_risk(dac_soft_K(X, X_aug, lam, rtol), X, theta_star, sigma, X).total

    risks = jax.vmap(risk)(lams)
    i = jnp.argmin(risks)
    n = lams.shape[0]
    lo = jnp.log(lams[jnp.maximum(i - 1, 0)])
    hi = jnp.log(lams[jnp.minimum(i + 1, n - 1)])
    g = (math.sqrt(5.0) - 1.0) / 2.0

    def body(_, c):
        a, b = c
        x1, x2 = b - g * (b - a), a + g * (b - a)
        left = risk(jnp.exp(x1)) <= risk(jnp.exp(x2))
        return jnp.where(left, a, x1), jnp.where(left, x2, b)

    a, b = jax.lax.fori_loop(0, refine, body, (lo, hi))
    lam_r = jnp.exp(0.5 * (a + b))
    r_r = risk(lam_r)
    better = r_r < risks[i]
    lam_f = jnp.where(better, lam_r, lams[i])
    r_f = jnp.where(better, r_r, risks[i])
    hard = _expected_risk(dac_hard_K(X, X_aug, rtol), X, theta_star, sigma, X).total
    erm = _expected_risk(erm_K(X, X_aug, rtol), X, theta_star, sigma, X).total
    use_hard = hard <= r_f
    return OptimalLambda(jnp.where(use_hard, jnp.inf, lam_f), jnp.minimum(hard, r_f), lams,
                         risks, hard, erm)


def optimal_lambda(X: Float[Array, "N d"], X_aug: Float[Array, "alpha N d"],
                   theta_star: Float[Array, "d"], sigma: float, *, lams=None,
                   refine: int = 40, rtol: Optional[float] = None) -> OptimalLambda:
    """The soft-DAC lambda minimising the exact expected excess risk (the oracle
    lambda of Figure 4.2a): a log grid, golden-section refinement, and the hard
    constraint compared.

    Args:
        X: ``(N, d)``; X_aug: ``(alpha, N, d)``; theta_star: ``(d,)``; sigma: noise std.
        lams: increasing positive grid (default ``logspace(-4, 4, 81)``).
        refine: golden-section iterations. rtol: rank tolerance.

    Returns:
        :class:`rdr_jax.dac.linear.OptimalLambda`.
    """
    X, X_aug = _check_design(X, X_aug)
    theta_star = _check_theta(theta_star, X.shape[1], X.dtype)
    sigma = check_nonneg("sigma", sigma)
    refine = V.check_int("refine", refine, low=0)
    if lams is None:
        lams = np.logspace(-4, 4, 81)
    lams = np.asarray(lams, np.float64) if V.is_concrete(lams) else lams
    if V.is_concrete(lams):
        if lams.ndim != 1 or lams.size < 2 or not np.all(np.isfinite(lams)) \
                or np.any(lams <= 0) or np.any(np.diff(lams) <= 0):
            raise ValueError("lams must be an increasing 1-D grid of at least 2 finite "
                             f"positive values; got {lams!r}")
    return _opt_lam(X, X_aug, theta_star, jnp.asarray(sigma, X.dtype),
                    jnp.asarray(lams, X.dtype), _check_rtol(rtol), refine)


# ======================================================================================
# thesis examples
# ======================================================================================
def linear_regression_example(key: jax.Array, d_c1: int, d_e1: int, *, d: int = 30,
                              N: int = 50, d_theta: int = 5, dtype=None):
    """Example 2: ``x ~ N(0, I_d)``,
    ``theta* = [theta_c; 0]`` and one augmentation ``[x_c1; x_e1; x_e2] -> [x_c1; 2 x_e1; -x_e2]``.

    Args:
        key: PRNG key. d_c1: unchanged coordinates (``>= d_theta``). d_e1: doubled coordinates.
        d, N, d_theta: thesis values 30, 50, 5. dtype: default float.

    Returns:
        ``(X (N, d), X_aug (1, N, d), theta_star (d,))``.
    """
    key = V.check_key(key)
    d = V.check_int("d", d, low=1)
    N = V.check_int("N", N, low=1)
    d_theta = V.check_int("d_theta", d_theta, low=0, high=d)
    d_c1 = V.check_int("d_c1", d_c1, low=d_theta, high=d,
                       high_desc="d_c1 >= d_theta keeps theta* invariant")
    d_e1 = V.check_int("d_e1", d_e1, low=0, high=d - d_c1)
    dtype = V.default_float() if dtype is None else V.check_dtype("dtype", dtype,
                                                                  allow_complex=False)
    return _lr_example(key, d_c1, d_e1, d, N, d_theta, np.dtype(dtype))


@jit(static_argnums=(3, 4, 5, 6), fast_cpu_compile=False)
def _lr_example(key, d_c1, d_e1, d, N, d_theta, dtype):
    kx, kt = jax.random.split(key)
    X = jax.random.normal(kx, (N, d), dtype)
    theta = jnp.concatenate([jax.random.normal(kt, (d_theta,), dtype),
                             jnp.zeros((d - d_theta,), dtype)])
    i = jnp.arange(d)
    scale = jnp.where(i < d_c1, 1.0, jnp.where(i < d_c1 + d_e1, 2.0, -1.0)).astype(dtype)
    return X, (X * scale)[None], theta


def misspec_example(key: jax.Array, d_aug: int, *, alpha: int = 1, d: int = 30, N: int = 50,
                    d_c: int = 10, aug_std: float = 0.1, dtype=None):
    """Example 3: ``theta* = [theta_c; 0]``, ``theta_c`` random signs,
    and ``alpha`` augmentations adding ``N(0, aug_std^2)`` jitter to the last ``d_aug``
    coordinates (misspecified when ``d_aug > d - d_c``).

    Returns:
        ``(X (N, d), X_aug (alpha, N, d), theta_star (d,))``.
    """
    key = V.check_key(key)
    d = V.check_int("d", d, low=1)
    N = V.check_int("N", N, low=1)
    alpha = V.check_int("alpha", alpha, low=1)
    d_c = V.check_int("d_c", d_c, low=0, high=d)
    d_aug = V.check_int("d_aug", d_aug, low=0, high=d)
    aug_std = check_nonneg("aug_std", aug_std)
    dtype = V.default_float() if dtype is None else V.check_dtype("dtype", dtype,
                                                                  allow_complex=False)
    return _mis_example(key, d_aug, alpha, d, N, d_c, jnp.asarray(aug_std, dtype),
                        np.dtype(dtype))


@jit(static_argnums=(2, 3, 4, 5, 7), fast_cpu_compile=False)
def _mis_example(key, d_aug, alpha, d, N, d_c, aug_std, dtype):
    kx, kt, ka = jax.random.split(key, 3)
    X = jax.random.normal(kx, (N, d), dtype)
    signs = jnp.where(jax.random.bernoulli(kt, 0.5, (d_c,)), 1.0, -1.0).astype(dtype)
    theta = jnp.concatenate([signs, jnp.zeros((d - d_c,), dtype)])
    mask = (jnp.arange(d) >= d - d_aug).astype(dtype)
    noise = aug_std * jax.random.normal(ka, (alpha, N, d), dtype) * mask
    return X, X[None] + noise, theta
