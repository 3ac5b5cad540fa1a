"""Linear-regression theory of data augmentation consistency (thesis Chapter 4, ``ch:dac``).

Setting (``sec:general``, ``sec:linear_regression_label_invariant``): ``N`` samples
``X in R^{N x d}``, labels ``y = X theta* + eps`` with ``E[eps eps^T] = sigma^2 I_N``, and
``alpha`` augmentations per sample, passed as ``X_aug`` of shape ``(alpha, N, d)``
(``X_aug[j, i] = x_{i, j+1}``). The thesis' augmented design and label-stacking matrix are

    A~(X) = [X; X_aug[0]; ...; X_aug[alpha-1]]      ((1+alpha) N x d)
    M~    = [I_N; ...; I_N]                          ((1+alpha) N x N)
    Delta = A~(X) - M~ X,   d_aug = rank(Delta)      (first N rows of Delta are zero)

and the two estimators compared in the chapter are

* DA-ERM (``eq:plain_erm``): least squares on the augmented set, ``theta = A~^+ M~ y``;
* DAC (``eq:dac_hard``, ``lam=None``): least squares on the originals restricted to
  ``null(Delta)``; soft DAC (``eq:dac_soft_reg``, ``lam >= 0``):
  ``argmin 1/N ||X theta - y||^2 + lam / ((1+alpha) N) ||Delta theta||^2``.

Both are linear in ``y``: :func:`dac_operator` / :func:`da_erm_operator` return the ``d x N``
matrix ``K`` with ``theta = K y``; :func:`fit_dac` / :func:`fit_da_erm` apply it. Under
``jax.vmap`` over ``y`` only (label-noise draws), the SVDs do not depend on the batched
argument and are computed once.

Theory:

* :func:`label_invariant_theory` -- Thm ``thm:formal_linear_regression``: DAC excess risk
  ``(d - d_aug) sigma^2 / N``, DA-ERM ``(d - d_aug + d') sigma^2 / N`` with
  ``d' = tr(M~^T (P_A~ - P_S) M~) / (1+alpha)``, excess risk measured on the augmented design,
  ``L(theta) = ||A~ (theta - theta*)||^2 / ((1+alpha) N)``;
* :func:`soft_dac_theory`, :func:`soft_dac_risk` -- Thm ``thm:formal_linear_regression_soft``
  and its proof (App. ``apx:finite_lambda``): exact bias/variance of soft DAC through the
  generalized eigenvalues ``gamma_i``, the upper bound at the proof's lambda, the DA-ERM lower
  bound, with ``L(theta) = ||X (theta - theta*)||^2 / N``;
* :func:`expected_excess_risk` -- exact bias/variance of any linear estimator ``K``;
* :func:`monte_carlo_risks` -- Monte-Carlo excess risks over label-noise draws (vmapped);
* :func:`optimal_lambda` -- the soft-DAC lambda minimising the exact expected excess risk.

Examples of the thesis: :func:`linear_regression_example` (``example:linear_regression``) and
:func:`misspec_example` (``example:misspec``).

Rank decisions (``rtol``): a singular value ``s`` counts as nonzero when
``s > rtol * scale``; the default ``rtol`` is ``max(rows, cols) * eps(dtype)`` (numpy's
``matrix_rank`` convention). For ``d_aug = rank(Delta)`` and ``null(Delta)`` the scale is
``||A~(X)||_F`` (not ``||Delta||_2``; the Frobenius norm is within ``sqrt(d)`` of the spectral
norm and needs no extra SVD): rounding in ``X_aug - X`` is relative to the data, so a tiny
but real perturbation still counts while cancellation noise does not. Pseudo-inverses
(``A~^+``, the restricted least squares, the soft-DAC stacked least squares) use SVDs with the
same rule relative to their own largest singular value; no normal equations are formed.

Example::

    X, X_aug, theta = linear_regression_example(jax.random.key(0), d_c1=10, d_e1=10)
    th = label_invariant_theory(X, X_aug, sigma=1.0)       # d_aug = 20, d' in [0, 20]
    mc = monte_carlo_risks(jax.random.key(1), X, X_aug, theta, 1.0, num_draws=2000)
    mc.dac.mean, th.dac_risk                              # agree within MC error
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from rdr_jax._src import validation as V
from rdr_jax.operators import HIGHEST

__all__ = [
    "AugmentedDesign", "Dimensions", "LabelInvariantTheory", "RiskTerms", "MCEstimate",
    "MonteCarloRisks", "SoftDACTheory", "OptimalLambda",
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
    """The augmented design of ``sec:general``.

    Attributes:
        A: ``A~(X)``, ``((1+alpha) N, d)``: originals, then augmentation 1 of every sample, ...
        M: ``M~``, ``((1+alpha) N, N)``: ``1+alpha`` stacked identities (labels repeated).
        Delta: ``A~(X) - M~ X``, ``((1+alpha) N, d)`` (its first N rows are zero).
    """
    A: Float[Array, "m d"]
    M: Float[Array, "m n"]
    Delta: Float[Array, "m d"]


class Dimensions(NamedTuple):
    """Dimensions of Thm ``thm:formal_linear_regression`` (integers as 0-d arrays).

    Attributes:
        d: the feature dimension.
        d_aug: ``rank(Delta)``, the number of directions perturbed by the augmentations.
        d_prime: ``tr(M~^T (P_A~ - P_S) M~) / (1+alpha)`` (float), in ``[0, d_aug]``.
        rank_A: ``rank(A~(X))`` (``d`` when A~ has full column rank, as the theorem assumes).
        rank_dac: ``rank(X V_0)`` with ``V_0`` a basis of ``null(Delta)``; ``d - d_aug`` when
            the restricted problem is well posed (e.g. ``N >= d - d_aug`` for generic X).
    """
    d: Any
    d_aug: Any
    d_prime: Any
    rank_A: Any
    rank_dac: Any


class LabelInvariantTheory(NamedTuple):
    """Thm ``thm:formal_linear_regression``: expected excess risks on the augmented design.

    Attributes:
        dims: :class:`Dimensions`.
        dac_risk: ``(d - d_aug) sigma^2 / N``.
        da_erm_risk: ``(d - d_aug + d') sigma^2 / N``.
    """
    dims: Dimensions
    dac_risk: Any
    da_erm_risk: Any


class RiskTerms(NamedTuple):
    """Expected excess risk of an estimator split as in App. ``apx:finite_lambda``.

    Attributes:
        bias: ``||E[theta] - theta*||_W^2`` (squared, normalised like the risk).
        variance: ``E ||theta - E theta||_W^2``.
        total: ``bias + variance``.
    """
    bias: Any
    variance: Any
    total: Any


class MCEstimate(NamedTuple):
    """A Monte-Carlo mean over label-noise draws and its standard error."""
    mean: Any
    stderr: Any


class MonteCarloRisks(NamedTuple):
    """Monte-Carlo excess risks of DAC and DA-ERM over ``num_draws`` label-noise draws.

    Attributes:
        dac: :class:`MCEstimate` for DAC (hard if ``lam`` was None, else soft).
        da_erm: :class:`MCEstimate` for DA-ERM.
        dac_draws, da_erm_draws: the per-draw excess risks, ``(num_draws,)``.
    """
    dac: MCEstimate
    da_erm: MCEstimate
    dac_draws: Any
    da_erm_draws: Any


class SoftDACTheory(NamedTuple):
    """Quantities of Thm ``thm:formal_linear_regression_soft`` (risk ``||X(.)||^2 / N``).

    Attributes:
        gamma: eigenvalues of ``Sigma_X^{-1/2} Sigma_aug Sigma_X^{-1/2}``, descending, ``(d,)``
            (exact zeros beyond ``d_aug``).
        vartheta: ``Q^T Sigma_X^{1/2} P_Delta theta*`` in the eigenbasis, ``(d,)``.
        d, d_aug, N, sigma: problem sizes and the noise level.
        misspec: ``||P_Delta theta*||^2_{Sigma_aug} = ||Delta theta*||^2 / ((1+alpha) N)``
            (the thesis' ``C_mis^2``; 0 for label-invariant augmentations).
        misspec_tilde: ``||P_Delta theta*||^2_{Sigma~_aug}``, the DA-ERM bias.
        trace_term: ``tr(Sigma_X Sigma_aug^+)``.
        lam_bound: the proof's lambda ``sqrt(sigma^2 tr(Sigma_X Sigma_aug^+) / (N misspec))``
            (``inf`` when misspec = 0: then the hard constraint is optimal).
        dac_upper_bound: ``sigma^2 (d - d_aug) / N + sqrt(misspec) sqrt(sigma^2 / N *
            trace_term)``, the bound of the theorem (the displayed statement lost the ``+``;
            the proof adds the two terms).
        c_X, c_S: the minimal constants with ``Sigma_A~ <= c_X Sigma_X``,
            ``Sigma_A~ <= c_S Sigma_S``.
        erm_lower_bound: ``sigma^2 d / (N c_X c_S) + misspec_tilde``.
        erm: exact :class:`RiskTerms` of DA-ERM (``>= erm_lower_bound``).
        hard: exact :class:`RiskTerms` of hard DAC (``lam -> inf``).
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
    """The soft-DAC lambda with the smallest exact expected excess risk.

    Attributes:
        lam: the minimiser (``inf`` when the hard constraint is at least as good as every
            finite lambda searched).
        risk: the excess risk at ``lam``.
        lams, risks: the searched grid and its risks.
        hard_risk: excess risk of hard DAC (``lam = inf``).
        erm_risk: excess risk of DA-ERM (same risk definition).
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


def _check_nonneg(name: str, v: Any, *, allow_none: bool = False):
    if v is None:
        if allow_none:
            return None
        raise TypeError(f"{name} must be a float >= 0; got None")
    if isinstance(v, bool):
        raise TypeError(f"{name} must be a float >= 0; got bool {v}")
    if isinstance(v, numbers.Real):
        if not math.isfinite(float(v)) or float(v) < 0:
            raise ValueError(f"{name} must be a finite float >= 0; got {v}")
        return float(v)
    arr = v
    if not hasattr(arr, "shape"):
        raise TypeError(f"{name} must be a float >= 0; got {type(v).__name__}")
    if arr.shape != ():
        raise ValueError(f"{name} must be a scalar; got shape {arr.shape} (vmap over it for "
                         "several values)")
    if V.is_concrete(arr):
        f = float(np.asarray(arr))
        if not math.isfinite(f) or f < 0:
            raise ValueError(f"{name} must be a finite float >= 0; got {f}")
    return arr


def _check_rtol(rtol: Any):
    if rtol is None:
        return None
    return _check_nonneg("rtol", rtol)


def default_rtol(rows: int, cols: int, dtype) -> float:
    """Default relative rank tolerance ``max(rows, cols) * eps(dtype)``."""
    return float(max(rows, cols) * jnp.finfo(dtype).eps)


# ======================================================================================
# linear-algebra kernels (traced; shapes static)
# ======================================================================================
def _mm(a, b):
    return jnp.matmul(a, b, precision=HIGHEST)


def _stack(X, X_aug):
    return jnp.concatenate([X, X_aug.reshape(-1, X.shape[1])], axis=0)


def _rtol_or(rtol, rows, cols, dtype):
    return default_rtol(rows, cols, dtype) if rtol is None else rtol


def _pinv(a, rtol):
    """Moore-Penrose pseudo-inverse by SVD; singular values <= rtol * s_max are dropped."""
    U, s, Vt = jnp.linalg.svd(a, full_matrices=False)
    keep = s > rtol * s[0]
    sinv = jnp.where(keep, 1.0 / jnp.where(keep, s, 1.0), 0.0)
    return _mm(Vt.T * sinv, U.T)


def _delta_svd(X, X_aug, rtol):
    """``(s, Vt, nonzero, scale)`` for the compact ``Delta_c = X_aug - X`` (``alpha N x d``):
    ``s`` padded with zeros to length d, ``Vt`` a full d x d orthogonal matrix, ``nonzero`` the
    mask ``s > rtol * ||A~||_F``."""
    N, d = X.shape
    D = (X_aug - X[None]).reshape(-1, d)
    full = D.shape[0] < d
    _, s, Vt = jnp.linalg.svd(D, full_matrices=full)
    if s.shape[0] < d:
        s = jnp.concatenate([s, jnp.zeros((d - s.shape[0],), s.dtype)])
    scale = jnp.sqrt(jnp.sum(X * X) + jnp.sum(X_aug * X_aug))     # ||A~||_F
    nonzero = s > rtol * scale
    return s, Vt, nonzero, scale


def _dac_hard_K(X, X_aug, rtol):
    N, d = X.shape
    alpha = X_aug.shape[0]
    r = _rtol_or(rtol, (1 + alpha) * N, d, X.dtype)
    _, Vt, nonzero, _ = _delta_svd(X, X_aug, r)
    V0 = Vt.T * (~nonzero)                    # null(Delta) basis columns, others zeroed
    B = _mm(X, V0)                            # N x d, zero columns outside null(Delta)
    rb = _rtol_or(rtol, N, d, X.dtype)
    return _mm(V0, _pinv(B, rb))


def _dac_soft_K(X, X_aug, lam, rtol):
    N, d = X.shape
    alpha = X_aug.shape[0]
    D = (X_aug - X[None]).reshape(-1, d)
    G = jnp.concatenate([X, jnp.sqrt(lam / (1.0 + alpha)).astype(X.dtype) * D], axis=0)
    r = _rtol_or(rtol, G.shape[0], d, X.dtype)
    return _pinv(G, r)[:, :N]


def _erm_K(X, X_aug, rtol):
    N, d = X.shape
    alpha = X_aug.shape[0]
    A = _stack(X, X_aug)
    r = _rtol_or(rtol, A.shape[0], d, X.dtype)
    P = _pinv(A, r)                           # d x (1+alpha) N
    return P.reshape(d, 1 + alpha, N).sum(axis=1)   # A~^+ M~


def _K(X, X_aug, lam, rtol):
    if lam is None:
        return _dac_hard_K(X, X_aug, rtol)
    return _dac_soft_K(X, X_aug, lam, rtol)


def _dims(X, X_aug, rtol):
    N, d = X.shape
    alpha = X_aug.shape[0]
    A = _stack(X, X_aug)
    r = _rtol_or(rtol, A.shape[0], d, X.dtype)
    _, Vt, nonzero, _ = _delta_svd(X, X_aug, r)
    d_aug = jnp.sum(nonzero).astype(jnp.int32)
    U, s, _ = jnp.linalg.svd(A, full_matrices=False)
    keepA = s > r * s[0]
    rank_A = jnp.sum(keepA).astype(jnp.int32)
    # tr(M~^T P_A M~) = ||U_r^T M~||_F^2; U^T M~ sums the row blocks of U.
    UM = (U * keepA).reshape(1 + alpha, N, -1).sum(axis=0)
    tr_A = jnp.sum(UM * UM)
    # S = col(M~ X V_0): tr(M~^T P_S M~) = (1+alpha) rank(X V_0).
    rb = _rtol_or(rtol, N, d, X.dtype)
    B = _mm(X, Vt.T * (~nonzero))
    sb = jnp.linalg.svd(B, compute_uv=False)
    rank_dac = jnp.sum(sb > rb * jnp.maximum(sb[0], jnp.finfo(X.dtype).tiny)).astype(jnp.int32)
    d_prime = tr_A / (1 + alpha) - rank_dac
    return Dimensions(jnp.asarray(d, jnp.int32), d_aug, d_prime, rank_A, rank_dac)


# ======================================================================================
# public API: design, dimensions, estimators
# ======================================================================================
def augmented_design(X: Float[Array, "N d"], X_aug: Float[Array, "alpha N d"]) -> AugmentedDesign:
    """The augmented design ``(A~(X), M~, Delta)`` of ``sec:general``.

    ``A~(X) = [x_1; ...; x_N; x_{1,1}; ...; x_{N,1}; ...; x_{N,alpha}]``,
    ``M~ = [I_N; ...; I_N]`` (``1+alpha`` blocks, so ``M~ y`` repeats the labels) and
    ``Delta = A~(X) - M~ X`` (``sec:linear_regression_label_invariant``).

    Args:
        X: original samples, ``(N, d)``.
        X_aug: augmentations, ``(alpha, N, d)`` with ``X_aug[j, i] = x_{i, j+1}``.

    Returns:
        :class:`rdr_jax.dac.linear.AugmentedDesign` ``(A, M, Delta)``.

    Example::

        des = augmented_design(X, X_aug)        # des.A.shape == ((1+alpha) N, d)
    """
    X, X_aug = _check_design(X, X_aug)
    N, _ = X.shape
    alpha = X_aug.shape[0]
    A = _stack(X, X_aug)
    M = jnp.tile(jnp.eye(N, dtype=X.dtype), (1 + alpha, 1))
    return AugmentedDesign(A, M, A - jnp.tile(X, (1 + alpha, 1)))


@functools.partial(jax.jit, static_argnames=("rtol",))
def _dims_jit(X, X_aug, rtol):
    return _dims(X, X_aug, rtol)


def dimensions(X: Float[Array, "N d"], X_aug: Float[Array, "alpha N d"], *,
               rtol: Optional[float] = None) -> Dimensions:
    """``d``, ``d_aug = rank(Delta)`` and ``d'`` of Thm ``thm:formal_linear_regression``.

    ``d' = tr(M~^T (P_A~ - P_S) M~) / (1+alpha)`` with ``P_A~ = A~ A~^+`` and ``P_S`` the
    projector onto ``S = {M~ X theta : Delta theta = 0}``. Computed from SVDs:
    ``tr(M~^T P_A~ M~) = ||U_A~^T M~||_F^2`` and ``tr(M~^T P_S M~) = (1+alpha) rank(X V_0)``
    (``V_0`` an orthonormal basis of ``null(Delta)``; ``S = col(M~ X V_0)`` and
    ``M~^T M~ = (1+alpha) I``).

    Args:
        X: ``(N, d)``; X_aug: ``(alpha, N, d)``.
        rtol: relative rank tolerance (module docstring); default ``max(rows, cols) eps``.

    Returns:
        :class:`rdr_jax.dac.linear.Dimensions` (0-d arrays).

    Example::

        dims = dimensions(X, X_aug)     # dims.d_aug, dims.d_prime
    """
    X, X_aug = _check_design(X, X_aug)
    return _dims_jit(X, X_aug, _check_rtol(rtol))


@functools.partial(jax.jit, static_argnames=("rtol", "hard"))
def _dac_K_jit(X, X_aug, lam, rtol, hard):
    return _K(X, X_aug, None if hard else lam, rtol)


@functools.partial(jax.jit, static_argnames=("rtol",))
def _erm_K_jit(X, X_aug, rtol):
    return _erm_K(X, X_aug, rtol)


def dac_operator(X: Float[Array, "N d"], X_aug: Float[Array, "alpha N d"],
                 lam: Optional[float] = None, *, rtol: Optional[float] = None
                 ) -> Float[Array, "d N"]:
    """The ``d x N`` matrix ``K`` with ``theta^dac = K y`` (DAC is linear in the labels).

    * ``lam=None`` (``eq:dac_hard``): ``K = V_0 (X V_0)^+`` -- least squares on the originals
      over ``null(Delta)`` (min-norm if ``X V_0`` is rank deficient).
    * ``lam >= 0`` (``eq:dac_soft_reg``): the minimiser of
      ``1/N ||X theta - y||^2 + lam / ((1+alpha) N) ||Delta theta||^2``, i.e. least squares on
      ``[X; sqrt(lam / (1+alpha)) Delta] theta ~ [y; 0]``: ``K`` = the first N columns of the
      stacked matrix's pseudo-inverse (equal to ``(Sigma_X + lam Sigma_aug)^+ X^T / N``,
      App. ``apx:finite_lambda``, without forming it). ``lam`` may be traced (vmap over it).

    Args:
        X: ``(N, d)``; X_aug: ``(alpha, N, d)``.
        lam: ``None`` (hard constraint) or a float ``>= 0``.
        rtol: relative rank tolerance (module docstring).

    Returns:
        ``K``, ``(d, N)``.

    Example::

        K = dac_operator(X, X_aug)           # theta = K @ y for every label vector y
    """
    X, X_aug = _check_design(X, X_aug)
    lam = _check_nonneg("lam", lam, allow_none=True)
    rtol = _check_rtol(rtol)
    hard = lam is None
    return _dac_K_jit(X, X_aug, jnp.zeros((), X.dtype) if hard else jnp.asarray(lam, X.dtype),
                      rtol, hard)


def da_erm_operator(X: Float[Array, "N d"], X_aug: Float[Array, "alpha N d"], *,
                    rtol: Optional[float] = None) -> Float[Array, "d N"]:
    """The ``d x N`` matrix ``K = A~(X)^+ M~`` with ``theta^da-erm = K y`` (``eq:plain_erm``).

    Args:
        X: ``(N, d)``; X_aug: ``(alpha, N, d)``.
        rtol: relative rank tolerance for ``A~^+`` (module docstring).

    Returns:
        ``K``, ``(d, N)``.

    Example::

        theta = da_erm_operator(X, X_aug) @ y
    """
    X, X_aug = _check_design(X, X_aug)
    return _erm_K_jit(X, X_aug, _check_rtol(rtol))


def fit_dac(X: Float[Array, "N d"], y: Float[Array, "N"], X_aug: Float[Array, "alpha N d"],
            lam: Optional[float] = None, *, rtol: Optional[float] = None) -> Float[Array, "d"]:
    """DAC regression (``eq:dac_hard`` for ``lam=None``, ``eq:dac_soft_reg`` for ``lam >= 0``).

    Hard: ``argmin_theta ||X theta - y||^2`` subject to ``Delta theta = 0``, i.e.
    ``x_i^T theta = x_{i,j}^T theta`` for all i, j. Soft:
    ``argmin 1/N ||X theta - y||^2 + lam / ((1+alpha) N) ||(A~(X) - M~ X) theta||^2``.
    Min-norm solutions when not unique. Pure and jit/vmap friendly: ``jax.vmap(fit_dac,
    in_axes=(None, 0, None))`` over label draws computes the SVDs once.

    Args:
        X: originals ``(N, d)``; y: labels ``(N,)``; X_aug: ``(alpha, N, d)``.
        lam: ``None`` or a float ``>= 0``.
        rtol: relative rank tolerance (module docstring).

    Returns:
        ``theta^dac``, ``(d,)``.

    Raises:
        ValueError/TypeError naming the argument for bad shapes, alpha = 0, lam < 0,
        non-finite inputs.

    Example::

        theta = fit_dac(X, y, X_aug)              # hard constraint
        theta_soft = fit_dac(X, y, X_aug, lam=3.2)
    """
    X, X_aug = _check_design(X, X_aug)
    y = _check_y(y, X.shape[0], X.dtype)
    return _mm(dac_operator(X, X_aug, lam, rtol=rtol), y)


def fit_da_erm(X: Float[Array, "N d"], y: Float[Array, "N"], X_aug: Float[Array, "alpha N d"],
               *, rtol: Optional[float] = None) -> Float[Array, "d"]:
    """DA-ERM regression (``eq:plain_erm``): least squares on the augmented set.

    ``theta = argmin ||A~(X) theta - M~ y||^2 = A~(X)^+ M~ y`` (originals plus the alpha
    augmentations of every sample, labels repeated; min-norm if A~ is rank deficient).

    Args:
        X: originals ``(N, d)``; y: labels ``(N,)``; X_aug: ``(alpha, N, d)``.
        rtol: relative rank tolerance (module docstring).

    Returns:
        ``theta^da-erm``, ``(d,)``.

    Example::

        theta = fit_da_erm(X, y, X_aug)
    """
    X, X_aug = _check_design(X, X_aug)
    y = _check_y(y, X.shape[0], X.dtype)
    return _mm(da_erm_operator(X, X_aug, rtol=rtol), y)


# ======================================================================================
# risks
# ======================================================================================
def excess_risk(theta: Float[Array, "d"], theta_star: Float[Array, "d"],
                W: Float[Array, "n d"]) -> jax.Array:
    """Fixed-design excess risk ``||W (theta - theta*)||^2 / n``.

    ``W = A~(X)`` gives ``L`` of Thm ``thm:formal_linear_regression``; ``W = X`` that of
    Thm ``thm:formal_linear_regression_soft``. Traced (no validation: used inside vmaps).

    Example::

        excess_risk(fit_dac(X, y, X_aug), theta_star, augmented_design(X, X_aug).A)
    """
    r = _mm(W, theta - theta_star)
    return jnp.sum(r * r) / W.shape[0]


def expected_excess_risk(K: Float[Array, "d N"], X: Float[Array, "N d"],
                         theta_star: Float[Array, "d"], sigma: float,
                         W: Optional[Float[Array, "n d"]] = None) -> RiskTerms:
    """Exact ``E_eps ||W (K y - theta*)||^2 / n`` for ``y = X theta* + eps``, ``Cov = sigma^2 I``.

    Bias ``||W (K X theta* - theta*)||^2 / n``, variance ``sigma^2 ||W K||_F^2 / n``
    (the decomposition of App. ``apx:finite_lambda``). ``W`` defaults to ``X``. Jitted, no
    argument validation (it is meant for use inside vmaps over lambda or designs).

    Args:
        K: ``(d, N)`` linear estimator (:func:`dac_operator`, :func:`da_erm_operator`).
        X: ``(N, d)``; theta_star: ``(d,)``; sigma: noise level (std).
        W: ``(n, d)`` risk design (``A~(X)`` for the label-invariant risk).

    Returns:
        :class:`rdr_jax.dac.linear.RiskTerms`.

    Example::

        expected_excess_risk(dac_operator(X, X_aug), X, theta_star, 1.0).total
    """
    return _expected_risk_jit(K, X, theta_star, sigma, X if W is None else W)


def _expected_risk(K, X, theta_star, sigma, W):
    b = _mm(W, _mm(K, _mm(X, theta_star)) - theta_star)
    WK = _mm(W, K)
    n = W.shape[0]
    bias = jnp.sum(b * b) / n
    var = sigma ** 2 * jnp.sum(WK * WK) / n
    return RiskTerms(bias, var, bias + var)


_expected_risk_jit = jax.jit(_expected_risk)


def label_invariant_theory(X: Float[Array, "N d"], X_aug: Float[Array, "alpha N d"],
                           sigma: float, *, rtol: Optional[float] = None
                           ) -> LabelInvariantTheory:
    """Thm ``thm:formal_linear_regression`` (informal: ``thm:informal_linear_regression``).

    For label-invariant augmentations (``Delta theta* = 0``) and full-column-rank ``A~(X)``,
    with ``L(theta) = ||A~(X)(theta - theta*)||^2 / ((1+alpha) N)``::

        E[L(theta^dac)   - L(theta*)] = (d - d_aug)      sigma^2 / N
        E[L(theta^da-erm) - L(theta*)] = (d - d_aug + d') sigma^2 / N,   d' in [0, d_aug].

    Args:
        X: ``(N, d)``; X_aug: ``(alpha, N, d)``; sigma: noise std (``>= 0``).
        rtol: relative rank tolerance (module docstring).

    Returns:
        :class:`rdr_jax.dac.linear.LabelInvariantTheory` ``(dims, dac_risk, da_erm_risk)``.

    Example::

        th = label_invariant_theory(X, X_aug, 1.0)
        th.da_erm_risk - th.dac_risk          # = d' sigma^2 / N >= 0
    """
    sigma = _check_nonneg("sigma", sigma)
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


@functools.partial(jax.jit, static_argnames=("cfg",))
def _mc(key, X, X_aug, theta_star, sigma, lam, cfg: _MCConfig):
    num_draws, hard, rtol = cfg.num_draws, cfg.hard, cfg.rtol
    W = _stack(X, X_aug) if cfg.risk == "augmented" else X
    f = X @ theta_star
    lam_ = None if hard else lam

    def one(k, Kd, Ke):
        y = f + sigma * jax.random.normal(k, f.shape, X.dtype)
        return (excess_risk(_mm(Kd, y), theta_star, W), excess_risk(_mm(Ke, y), theta_star, W))

    # The operators do not depend on the draw: built once, outside the vmapped function.
    Kd = _K(X, X_aug, lam_, rtol)
    Ke = _erm_K(X, X_aug, rtol)
    keys = jax.random.split(key, num_draws)
    rd, re = jax.vmap(one, in_axes=(0, None, None))(keys, Kd, Ke)
    se = lambda r: jnp.std(r, ddof=1) / jnp.sqrt(num_draws)  # noqa: E731
    return MonteCarloRisks(MCEstimate(jnp.mean(rd), se(rd)), MCEstimate(jnp.mean(re), se(re)),
                           rd, re)


def monte_carlo_risks(key: jax.Array, X: Float[Array, "N d"],
                      X_aug: Float[Array, "alpha N d"], theta_star: Float[Array, "d"],
                      sigma: float, num_draws: int = 2000, *, lam: Optional[float] = None,
                      risk: str = "augmented", rtol: Optional[float] = None) -> MonteCarloRisks:
    """Monte-Carlo excess risks of DAC and DA-ERM over label-noise draws (fixed design).

    Draws ``y_k = X theta* + sigma eps_k``, ``eps_k ~ N(0, I_N)`` for ``k < num_draws``
    (``jax.vmap`` over split keys), fits both estimators and averages
    ``||W (theta_k - theta*)||^2 / n`` with ``W = A~(X)`` (``risk="augmented"``, the ``L`` of
    Thm ``thm:formal_linear_regression``) or ``W = X`` (``risk="original"``, the ``L`` of
    Thm ``thm:formal_linear_regression_soft``).

    Args:
        key: PRNG key. X: ``(N, d)``; X_aug: ``(alpha, N, d)``; theta_star: ``(d,)``.
        sigma: noise std. num_draws: number of noise draws (Python int, static).
        lam: ``None`` (hard DAC) or soft-DAC lambda ``>= 0``.
        risk: ``"augmented"`` or ``"original"``. rtol: rank tolerance.

    Returns:
        :class:`rdr_jax.dac.linear.MonteCarloRisks`.

    Example::

        mc = monte_carlo_risks(jax.random.key(0), X, X_aug, theta, 1.0, 2000)
        mc.dac.mean, mc.da_erm.mean
    """
    key = V.check_key(key)
    X, X_aug = _check_design(X, X_aug)
    theta_star = _check_theta(theta_star, X.shape[1], X.dtype)
    sigma = _check_nonneg("sigma", sigma)
    lam = _check_nonneg("lam", lam, allow_none=True)
    num_draws = V.check_int("num_draws", num_draws, low=2)
    if risk not in ("augmented", "original"):
        raise ValueError(f"risk must be 'augmented' or 'original'; got {risk!r}")
    hard = lam is None
    return _mc(key, X, X_aug, theta_star, jnp.asarray(sigma, X.dtype),
               jnp.zeros((), X.dtype) if hard else jnp.asarray(lam, X.dtype),
               _MCConfig(num_draws, risk, hard, _check_rtol(rtol)))


# ======================================================================================
# misspecified augmentations: Thm thm:formal_linear_regression_soft
# ======================================================================================
def _inv_sqrt_gram(Z, n, rtol):
    """``(Z^T Z / n)^{-1/2}`` (pseudo) from the SVD of Z, and ``(Z^T Z / n)^{1/2}``."""
    _, s, Vt = jnp.linalg.svd(Z, full_matrices=False)
    keep = s > rtol * s[0]
    root = s / jnp.sqrt(n)
    inv = jnp.where(keep, 1.0 / jnp.where(keep, root, 1.0), 0.0)
    return _mm(Vt.T * inv, Vt), _mm(Vt.T * root, Vt)


@functools.partial(jax.jit, static_argnames=("rtol",))
def _soft_theory(X, X_aug, theta_star, sigma, rtol):
    N, d = X.shape
    alpha = X_aug.shape[0]
    m = (1 + alpha) * N
    A = _stack(X, X_aug)
    r = _rtol_or(rtol, m, d, X.dtype)
    D = (X_aug - X[None]).reshape(-1, d)
    s_d, Vt_d, nonzero, _ = _delta_svd(X, X_aug, r)
    d_aug = jnp.sum(nonzero).astype(jnp.int32)
    rX = _rtol_or(rtol, N, d, X.dtype)
    Xm12, X12 = _inv_sqrt_gram(X, N, rX)
    # generalized eigenvalues: Sigma_X^{-1/2} Sigma_aug Sigma_X^{-1/2} = Z^T Z / m
    Z = _mm(D, Xm12)
    full = Z.shape[0] < d
    _, sz, Qt = jnp.linalg.svd(Z, full_matrices=full)
    if sz.shape[0] < d:
        sz = jnp.concatenate([sz, jnp.zeros((d - sz.shape[0],), sz.dtype)])
    # the same rank rule as d_aug (gamma_i > 0 exactly for the d_aug nonzero directions)
    gamma = jnp.where(jnp.arange(d) < d_aug, sz * sz / m, 0.0)
    sds = jnp.where(nonzero, s_d, 1.0)
    P_theta = _mm(Vt_d.T * nonzero, _mm(Vt_d, theta_star))          # P_Delta theta*
    vartheta = _mm(Qt, _mm(X12, P_theta))
    misspec = jnp.sum(_mm(D, theta_star) ** 2) / m
    # tr(Sigma_X Sigma_aug^+) = sum_i m / s_i^2 * ||X v_i||^2 / N
    XV = _mm(X, Vt_d.T)
    trace_term = jnp.sum(jnp.where(nonzero, m / (sds * sds) * jnp.sum(XV * XV, 0) / N, 0.0))
    s2N = sigma ** 2 / N
    lam_bound = jnp.where(misspec > 0, jnp.sqrt(s2N * trace_term / jnp.where(
        misspec > 0, misspec, 1.0)), jnp.inf)
    dac_upper = s2N * (d - d_aug) + jnp.sqrt(misspec) * jnp.sqrt(s2N * trace_term)
    # DA-ERM: Sigma_A <= c_X Sigma_X, Sigma_A <= c_S Sigma_S
    c_X = jnp.linalg.svd(_mm(A, Xm12), compute_uv=False)[0] ** 2 / m
    S = (X + X_aug.sum(0)) / (1 + alpha)
    Sm12, _ = _inv_sqrt_gram(S, N, rX)
    c_S = jnp.linalg.svd(_mm(A, Sm12), compute_uv=False)[0] ** 2 / m
    Ke = _erm_K(X, X_aug, rtol)
    Pa = _pinv(A, r)
    Dfull = A - jnp.tile(X, (1 + alpha, 1))
    t = _mm(X, _mm(Pa, _mm(Dfull, theta_star)))
    misspec_tilde = jnp.sum(t * t) / N
    erm_lower = sigma ** 2 * d / (N * c_X * c_S) + misspec_tilde
    erm = _expected_risk(Ke, X, theta_star, sigma, X)
    hard = _expected_risk(_dac_hard_K(X, X_aug, rtol), X, theta_star, sigma, X)
    return SoftDACTheory(gamma, vartheta, jnp.asarray(d, jnp.int32), d_aug,
                         jnp.asarray(N, jnp.int32), sigma, misspec, misspec_tilde, trace_term,
                         lam_bound, dac_upper, c_X, c_S, erm_lower, erm, hard)


def soft_dac_theory(X: Float[Array, "N d"], X_aug: Float[Array, "alpha N d"],
                    theta_star: Float[Array, "d"], sigma: float, *,
                    rtol: Optional[float] = None) -> SoftDACTheory:
    """Thm ``thm:formal_linear_regression_soft`` and the spectral quantities of its proof.

    With ``Sigma_X = X^T X / N``, ``Sigma_aug = Delta^T Delta / ((1+alpha) N)``,
    ``Sigma_X^{-1/2} Sigma_aug Sigma_X^{-1/2} = Q Gamma Q^T`` and
    ``vartheta = Q^T Sigma_X^{1/2} P_Delta theta*`` (App. ``apx:finite_lambda``)::

        Var(lam)  = sigma^2 (d - d_aug) / N + sigma^2 / N sum_i 1 / (1 + lam gamma_i)^2
        Bias(lam) = sum_i vartheta_i^2 (lam gamma_i / (1 + lam gamma_i))^2
        E[L(theta^dac)]    <= sigma^2 (d - d_aug) / N
                              + ||P_Delta theta*||_{Sigma_aug}
                                * sqrt(sigma^2 / N tr(Sigma_X Sigma_aug^+))
        E[L(theta^da-erm)] >= sigma^2 d / (N c_X c_S) + ||P_Delta theta*||^2_{Sigma~_aug}

    for ``L(theta) = ||X (theta - theta*)||^2 / N``. Requires ``rank(X) = d`` (``N >= d``):
    ``Sigma_X^{-1/2}`` is a pseudo-inverse square root otherwise and the formulas lose meaning.

    Args:
        X: ``(N, d)``; X_aug: ``(alpha, N, d)``; theta_star: ``(d,)``; sigma: noise std.
        rtol: relative rank tolerance (module docstring).

    Returns:
        :class:`rdr_jax.dac.linear.SoftDACTheory`; evaluate the exact risk at any lambda with
        :func:`soft_dac_risk`.

    Example::

        th = soft_dac_theory(X, X_aug, theta_star, 0.1)
        soft_dac_risk(th, th.lam_bound).total <= th.dac_upper_bound
    """
    X, X_aug = _check_design(X, X_aug)
    theta_star = _check_theta(theta_star, X.shape[1], X.dtype)
    sigma = _check_nonneg("sigma", sigma)
    return _soft_theory(X, X_aug, theta_star, jnp.asarray(sigma, X.dtype), _check_rtol(rtol))


def soft_dac_risk(theory: SoftDACTheory, lam) -> RiskTerms:
    """Exact expected excess risk of soft DAC at ``lam`` from the proof's spectral formula.

    ``Var = sigma^2 (d - d_aug) / N + sigma^2 / N sum_{i <= d_aug} (1 + lam gamma_i)^{-2}``,
    ``Bias = sum_i vartheta_i^2 (lam gamma_i / (1 + lam gamma_i))^2``
    (App. ``apx:finite_lambda``). ``lam`` may be traced or ``inf`` (hard DAC); vmap over it.

    Example::

        jax.vmap(lambda l: soft_dac_risk(th, l).total)(jnp.logspace(-3, 3, 61))
    """
    return _soft_risk_jit(theory, jnp.asarray(lam, theory.gamma.dtype))


@jax.jit
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


@functools.partial(jax.jit, static_argnames=("rtol", "refine"))
def _opt_lam(X, X_aug, theta_star, sigma, lams, rtol, refine):
    def risk(lam):
        return _expected_risk(_dac_soft_K(X, X_aug, lam, rtol), X, theta_star, sigma, X).total

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
    hard = _expected_risk(_dac_hard_K(X, X_aug, rtol), X, theta_star, sigma, X).total
    erm = _expected_risk(_erm_K(X, X_aug, rtol), X, theta_star, sigma, X).total
    use_hard = hard <= r_f
    return OptimalLambda(jnp.where(use_hard, jnp.inf, lam_f), jnp.minimum(hard, r_f), lams,
                         risks, hard, erm)


def optimal_lambda(X: Float[Array, "N d"], X_aug: Float[Array, "alpha N d"],
                   theta_star: Float[Array, "d"], sigma: float, *, lams=None,
                   refine: int = 40, rtol: Optional[float] = None) -> OptimalLambda:
    """The soft-DAC lambda (``eq:dac_soft_reg``) minimising the exact expected excess risk.

    The risk ``E_eps ||X (theta^dac(lam) - theta*)||^2 / N`` is computed exactly
    (:func:`expected_excess_risk` of :func:`dac_operator`) on a log grid (vmapped), refined
    by golden-section search in ``log lam`` between the grid neighbours of the best point, and
    compared with the hard constraint (``lam = inf``). This is the oracle lambda of
    ``fig:misspec_lambda`` / ``fig:misspec_daug`` (it uses theta*; in practice one would
    validate).

    Args:
        X: ``(N, d)``; X_aug: ``(alpha, N, d)``; theta_star: ``(d,)``; sigma: noise std.
        lams: increasing positive grid; default ``logspace(-4, 4, 81)``.
        refine: golden-section iterations (Python int).
        rtol: relative rank tolerance.

    Returns:
        :class:`rdr_jax.dac.linear.OptimalLambda`.

    Example::

        opt = optimal_lambda(X, X_aug, theta_star, 0.1)
        opt.lam, opt.risk, opt.erm_risk
    """
    X, X_aug = _check_design(X, X_aug)
    theta_star = _check_theta(theta_star, X.shape[1], X.dtype)
    sigma = _check_nonneg("sigma", sigma)
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
    """``example:linear_regression``: ``x ~ N(0, I_d)``, ``theta* = [theta_c; 0]``,
    ``theta_c ~ N(0, I_{d_theta})``, one augmentation
    ``A([x_c1; x_e1; x_e2]) = [x_c1; 2 x_e1; -x_e2]`` (so ``d_aug = d - d_c1``; varying
    ``d_e1`` at fixed ``d_aug`` varies ``d'``).

    Args:
        key: PRNG key. d_c1: unchanged coordinates (``>= d_theta`` for label invariance).
        d_e1: coordinates doubled (``d_e2 = d - d_c1 - d_e1`` are negated).
        d, N, d_theta: thesis values 30, 50, 5. dtype: default float (float64 under x64).

    Returns:
        ``(X (N, d), X_aug (1, N, d), theta_star (d,))``.

    Example::

        X, X_aug, theta = linear_regression_example(jax.random.key(0), d_c1=10, d_e1=5)
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


@functools.partial(jax.jit, static_argnums=(3, 4, 5, 6))
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
    """``example:misspec``: ``x ~ N(0, I_d)``, ``theta* = [theta_c; 0]``,
    ``theta_c in {-1, +1}^{d_c}`` uniformly, and ``alpha`` augmentations adding i.i.d.
    ``N(0, aug_std^2)`` noise to the last ``d_aug`` coordinates ("color jitter"); the
    coordinates ``d - d_aug + 1, ..., d_c`` of theta* are misspecified (none when
    ``d_aug <= d - d_c``).

    The thesis writes the jitter as ``N(0, 0.1)``; ``aug_std = 0.1`` reads it as a standard
    deviation (pass ``aug_std = sqrt(0.1)`` for the variance reading).

    Returns:
        ``(X (N, d), X_aug (alpha, N, d), theta_star (d,))``.

    Example::

        X, X_aug, theta = misspec_example(jax.random.key(0), d_aug=24)
    """
    key = V.check_key(key)
    d = V.check_int("d", d, low=1)
    N = V.check_int("N", N, low=1)
    alpha = V.check_int("alpha", alpha, low=1)
    d_c = V.check_int("d_c", d_c, low=0, high=d)
    d_aug = V.check_int("d_aug", d_aug, low=0, high=d)
    aug_std = _check_nonneg("aug_std", aug_std)
    dtype = V.default_float() if dtype is None else V.check_dtype("dtype", dtype,
                                                                  allow_complex=False)
    return _mis_example(key, d_aug, alpha, d, N, d_c, jnp.asarray(aug_std, dtype),
                        np.dtype(dtype))


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5, 7))
def _mis_example(key, d_aug, alpha, d, N, d_c, aug_std, dtype):
    kx, kt, ka = jax.random.split(key, 3)
    X = jax.random.normal(kx, (N, d), dtype)
    signs = jnp.where(jax.random.bernoulli(kt, 0.5, (d_c,)), 1.0, -1.0).astype(dtype)
    theta = jnp.concatenate([signs, jnp.zeros((d - d_c,), dtype)])
    mask = (jnp.arange(d) >= d - d_aug).astype(dtype)
    noise = aug_std * jax.random.normal(ka, (alpha, N, d), dtype) * mask
    return X, X[None] + noise, theta
