"""Canonical angles of randomized subspace approximations (thesis Chapter 3, ``ch:svra``).

For ``A = U Sigma V^H`` (rank r, ``sigma_1 >= ... >= sigma_r > 0``) and a rank-l randomized SVD
``A_l = U_l S_l V_l^H`` with ``power_iters`` power iterations (q in the thesis,
``algo:rsvd_power_iterations``: ``U_l`` spans ``X = (A A^H)^q A Omega``, ``V_l`` spans
``A^H X = (A^H A)^(q+1) Omega``), this module computes, for the leading rank-k subspaces
(``k <= l``):

* exact sines of canonical angles -- :func:`canonical_angles`, :func:`true_angles`
  (``def:canonical-angles``);
* prior space-agnostic bounds -- :func:`space_agnostic_bound` (``thm:space_agnostic_bounds``),
  with the thesis' constants or calibrated ones (``constants="calibrated"``), and the
  constants in use -- :func:`space_agnostic_distortions`;
* unbiased Monte-Carlo estimates -- :func:`unbiased_estimate`
  (``prop:space_agnostic_estimation``, ``algo:unbiased_canonical_angle_estimators``);
* posterior residual bounds -- :func:`posterior_residuals`, then :func:`residual_bound`
  (Thm 3.3, ``thm:with_oversmp_computable_det``) and :func:`gap_bounds` (Thm 3.4, all forms,
  ``thm:separate_gap_bounds``);
* Saibaba (2018) Thm 1 with the oracle V -- :func:`saibaba_bound`
  (``eq:saibaba2018_thm1_left/right``), with :func:`rsvd_omega`;
* the approximate spectrum -- :func:`padded_spectrum` (``subsec:experiment_canonical_angle``);
* the (l, power_iters) budget planner -- :func:`phi_gamma`, :func:`plan_budget`
  (``eq:space_agnostic_example_rhs``);
* everything for one rSVD run (the chapter's experiments) -- :func:`angle_report`, with the
  dense reference SVD :func:`exact_svd`.

Conventions (all functions):

* Sines are returned in **ascending** order, ``sin(theta_1) <= ... <= sin(theta_k)``
  (``theta_i`` is the i-th smallest canonical angle, ``def:canonical-angles``).
* The left side (U) uses the exponent ``2q+1`` on Sigma, the right side (V) ``2q+2``: ``V_l``
  gets the extra half power iteration ``A^H X`` (``remark:compare_left_right``).
* ``power_iters`` is the library's one name for the number of power iterations (``q`` in
  the thesis and in the math below); the key, where there is one, is the first argument.
* ``k``, ``l``, ``power_iters``, ``num_trials`` are Python ints (``k``, ``l``, ``num_trials``
  set shapes and are static under ``jit``; ``power_iters`` and ``side`` only change an
  exponent, which is traced); spectra and matrices are traced, so repeated calls with the same
  shapes do not retrace.
* Invalid states are never silent: vacuous prior bounds are NaN, posterior bounds whose gap
  conditions fail are NaN and flagged ``valid = False``, and an estimate whose powers
  ``sigma^p`` cannot be represented in the working precision raises ``ValueError`` (concrete
  spectrum) or is NaN with ``Estimate.valid = False`` (inside ``jit``).
* Scale: every result depends only on ratios of singular values (and on subspaces), and is
  computed so: spectra enter through their logarithms (exact for subnormal values too) or
  through ratios ``<= 1``, bases are rescaled by powers of two (exact) first, and gaps are
  formed without squaring. Spectra and matrices scaled by anything from 1e-30 to 1e30 give
  the same results in float32 (and over the whole float64 range).

Example (the thesis' figures in four lines)::

    A = matrices.with_spectrum(jax.random.key(0), 500, 500, matrices.polynomial_decay(500))
    rep = angles.angle_report(jax.random.key(1), A, k=50, l=200, power_iters=1)
    rep.true.Uk_Ul                      # true sines, (50,)
    rep.sigma.left.prior_upper          # Thm 3.1 upper bound with the true spectrum
    rep.sigma_hat.right.estimate.mean   # Prop 3.2 estimate from the rSVD's own spectrum
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import solve_triangular
from jaxtyping import Array, Bool, Float

from rdr_jax._src import jit as _jit
from rdr_jax._src import fp as _fp
from rdr_jax._src import validation as V
from rdr_jax.norms import spectral_norm
from rdr_jax.operators import HIGHEST, LinearOperator, pytree_dataclass, as_operator
from rdr_jax.randomized_svd import RSVD, rsvd
from rdr_jax.sketching import as_sketch, make_sketch

__all__ = [
    "canonical_angles", "true_angles", "exact_svd", "rsvd_omega",
    "space_agnostic_bound", "space_agnostic_distortions", "unbiased_estimate",
    "padded_spectrum",
    "posterior_residuals", "residual_bound", "gap_bounds", "saibaba_bound",
    "phi_gamma", "plan_budget", "angle_report",
    "TrueAngles", "Estimate", "Residuals", "ResidualBound", "GapBound", "SeparateGapBounds",
    "BudgetPlan", "Distortions", "SideBounds", "SpectrumBounds", "AngleReport",
]

_SIDES = ("left", "right")

# Above this many entries (m n) the residual spectra are estimated instead of computed from a
# dense SVD when ``residual="auto"`` (2^22 entries = 32 MiB in float64, e.g. 2048 x 2048).
_EXACT_RESIDUAL_MAX_ENTRIES = 1 << 22


# ======================================================================================
# Result types
# ======================================================================================
class TrueAngles(NamedTuple):
    """Exact sines (ascending, k each) between the true and the computed subspaces.

    ``Uk_Ul = sin angle(U_k, U_hat_l)``, ``Vk_Vl = sin angle(V_k, V_hat_l)``,
    ``Uk_Uk = sin angle(U_k, U_hat_k)``, ``Vk_Vk = sin angle(V_k, V_hat_k)``.
    """

    Uk_Ul: Float[Array, " k"]
    Vk_Vl: Float[Array, " k"]
    Uk_Uk: Float[Array, " k"]
    Vk_Vk: Float[Array, " k"]


class Estimate(NamedTuple):
    """Monte-Carlo estimate of ``E[sin theta_i]`` (Prop. ``prop:space_agnostic_estimation``).

    ``mean``, ``min``, ``max`` are over the trials (the thesis' line and shaded band);
    ``trials`` holds the per-trial sines, shape (num_trials, k), each row ascending.
    ``valid`` is False when the powers of the spectrum the estimator needs cannot be
    represented in the working precision (see :func:`unbiased_estimate`); every other field
    is then NaN.
    """

    mean: Float[Array, " k"]
    min: Float[Array, " k"]
    max: Float[Array, " k"]
    trials: Float[Array, "N k"]
    valid: Bool[Array, ""]


class Residuals(NamedTuple):
    """Residual quantities of a rank-l approximation ``A ~ U_l S_l V_l^H`` (posterior bounds).

    With ``E_U = (I - U_l U_l^H) A``, ``E_V = A (I - V_l V_l^H)`` and the blocks
    ``[E31, E32] = U_perp^H A [V_k, V_{l\\k}]``, ``E33 = U_perp^H A V_perp``
    (``thm:separate_gap_bounds``):

    * ``s_hat`` (l,): the approximation's singular values ``s_hat_1 >= ... >= s_hat_l``;
    * ``left_svals``/``right_svals`` (k,): ``sigma_1..k(E_U)``, ``sigma_1..k(E_V)``
      (descending); NaN when the residuals were only estimated;
    * ``left_norm``/``right_norm``: ``||E_U||_2``, ``||E_V||_2``;
    * ``E3_2``, ``E3_F``: ``||[E31, E32]||_2`` and ``||[E31, E32]||_F`` (always exact: they
      are norms of the m x l matrix ``(I - U_l U_l^H) A V_l``);
    * ``E32_2``: ``||E32||_2`` (exact); ``E33_2``: ``||E33||_2``;
    * ``exact``: True when every quantity is exact, False when ``left_norm``, ``right_norm``
      and ``E33_2`` are power-method estimates (lower estimates of the true norms).
    """

    s_hat: Float[Array, " l"]
    left_svals: Float[Array, " k"]
    right_svals: Float[Array, " k"]
    left_norm: Float[Array, ""]
    right_norm: Float[Array, ""]
    E3_2: Float[Array, ""]
    E3_F: Float[Array, ""]
    E32_2: Float[Array, ""]
    E33_2: Float[Array, ""]
    exact: Bool[Array, ""]


class ResidualBound(NamedTuple):
    """Thm ``thm:with_oversmp_computable_det`` (Eqs. ``eq:residual_based_posterior_left/right``).

    ``bound = fmin(term1, term2)`` (ascending index i), with
    ``term1_i = sigma_{k-i+1}(E) / sigma_k`` (NaN when the residual spectrum was only
    estimated; ``bound`` is then ``term2``) and ``term2_i = ||E||_2 / sigma_i``.
    """

    bound: Float[Array, " k"]
    term1: Float[Array, " k"]
    term2: Float[Array, " k"]


class GapBound(NamedTuple):
    """One comparison of Thm ``thm:separate_gap_bounds``: the angle-wise bound (k,),
    ascending, and the bounds on ``||sin angle||_2`` (largest sine) and ``||sin angle||_F``.
    NaN where the theorem's gap conditions fail."""

    anglewise: Float[Array, " k"]
    spectral: Float[Array, ""]
    frobenius: Float[Array, ""]


class SeparateGapBounds(NamedTuple):
    """All forms of Thm ``thm:separate_gap_bounds`` (Eqs. ``eq:separate_gap_*``).

    ``valid_Gamma`` is ``sigma_k > ||E33||_2`` (needed by every form), ``valid_gamma`` is
    ``sigma_k > s_hat_{k+1}`` (needed by the ``Uk_Uk``/``Vk_Vk`` forms); ``valid`` is both.
    Forms whose conditions fail are NaN. ``gamma1, gamma2, Gamma1, Gamma2`` are the gaps.
    """

    Uk_Ul: GapBound
    Vk_Vl: GapBound
    Uk_Uk: GapBound
    Vk_Vk: GapBound
    gamma1: Float[Array, ""]
    gamma2: Float[Array, ""]
    Gamma1: Float[Array, ""]
    Gamma2: Float[Array, ""]
    valid_Gamma: Bool[Array, ""]
    valid_gamma: Bool[Array, ""]
    valid: Bool[Array, ""]


class BudgetPlan(NamedTuple):
    """Result of :func:`plan_budget`: the recommended ``(l, power_iters)`` and the whole table.

    ``power_iters_grid``/``l_grid`` are the admissible configurations, ``phi`` the criterion
    ``phi_gamma(q)`` for each (``q = power_iters``), ``bounds`` (len(power_iters_grid), k) the
    Thm 3.1 upper bounds behind it, ``log_phi`` = ``log(phi)`` computed in the log domain (the
    recommendation compares these, so it stays right where ``phi`` underflows to 0).
    """

    power_iters: int
    l: int
    power_iters_grid: np.ndarray
    l_grid: np.ndarray
    phi: np.ndarray
    bounds: np.ndarray
    log_phi: np.ndarray


class SideBounds(NamedTuple):
    """Every bound/estimate for one side (U: ``angle(U_k, U_hat_l)``, or V) and one spectrum.

    ``gap`` is the angle-wise Thm 3.4 bound for this side (``Uk_Ul`` or ``Vk_Vl``);
    the full Thm 3.4 result is :attr:`SpectrumBounds.gap`.
    """

    prior_upper: Float[Array, " k"]
    prior_lower: Float[Array, " k"]
    estimate: Estimate
    residual: ResidualBound
    gap: Float[Array, " k"]
    saibaba: Float[Array, " k"]


class SpectrumBounds(NamedTuple):
    """Left and right :class:`SideBounds` plus the full Thm 3.4 result for one spectrum."""

    left: SideBounds
    right: SideBounds
    gap: SeparateGapBounds


class AngleReport(NamedTuple):
    """Everything :func:`angle_report` computes for one rank-l rSVD of A.

    * ``svd``: the rank-l :class:`rdr_jax.RSVD` (U m x l, s (l,), Vt l x n);
    * ``spectrum`` (r,): the true singular values; ``approx_spectrum`` (r,): ``s_hat``
      padded with ``s_hat_l`` (:func:`padded_spectrum`);
    * ``true``: :class:`TrueAngles`; ``residuals``: :class:`Residuals`;
    * ``sigma`` / ``sigma_hat``: :class:`SpectrumBounds` evaluated with the true / the
      approximate spectrum (the thesis' lines / dashes).
    """

    svd: RSVD
    spectrum: Float[Array, " r"]
    approx_spectrum: Float[Array, " r"]
    true: TrueAngles
    residuals: Residuals
    sigma: SpectrumBounds
    sigma_hat: SpectrumBounds


# ======================================================================================
# Validation helpers
# ======================================================================================
def _check_side(side: Any) -> str:
    if side not in _SIDES:
        raise ValueError(f"side must be 'left' (U) or 'right' (V); got {side!r}")
    return side


def _to_float_array(name: str, x: Any, *, allow_complex: bool = False):
    arr = x if isinstance(x, jax.Array) else np.asarray(x)
    kind = np.dtype(arr.dtype).kind
    if kind in "biu":
        return jnp.asarray(arr, V.default_float())
    if kind == "c" and not allow_complex:
        raise TypeError(f"{name} must be real; got dtype {arr.dtype}")
    if kind not in "fc":
        raise TypeError(f"{name} must be a floating array; got dtype {arr.dtype}")
    return jnp.asarray(arr)


def _spectrum_values(name: str, a: np.ndarray, allow_zero: bool) -> None:
    """Finite, positive (or >= 0) and non-increasing; raises ValueError naming ``name``."""
    V.check_array_values(name, a)
    if np.any(a < 0) or (not allow_zero and np.any(a == 0)):
        what = "non-negative" if allow_zero else ("positive (the r = rank(A) nonzero "
                                                  "singular values; drop zeros)")
        raise ValueError(f"{name} must be {what}; got min {a.min()!r}")
    if a.size > 1 and np.any(np.diff(a) > 0):
        i = int(np.argmax(np.diff(a) > 0))
        raise ValueError(f"{name} must be non-increasing (singular values in descending "
                         f"order); got {name}[{i}] = {a[i]!r} < {name}[{i + 1}] = {a[i + 1]!r}")


def _check_spectrum(s: Any, *, name: str = "s", min_len: int = 1,
                    len_desc: str | None = None, allow_zero: bool = False) -> jax.Array:
    """1-D, real, finite, positive (or >= 0) and non-increasing (checked when concrete)."""
    s = _to_float_array(name, s)
    if s.ndim != 1:
        raise ValueError(f"{name} must be a 1-D spectrum (singular values); got shape {s.shape}")
    if s.shape[0] < min_len:
        why = f" ({len_desc})" if len_desc else ""
        raise ValueError(f"{name} must have at least {min_len} entries{why}; got {s.shape[0]}")
    if V.is_concrete(s):
        _spectrum_values(name, np.asarray(s), allow_zero)
    return s


def _check_positive_float(name: str, x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be a real number; got {x!r}") from e
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite positive number; got {x!r}")
    return v


def _check_matrix(name: str, X: Any) -> jax.Array:
    X = _to_float_array(name, X, allow_complex=True)
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix (a basis, one vector per column); "
                         f"got shape {X.shape}")
    if 0 in X.shape:
        raise ValueError(f"{name} is empty (shape {X.shape})")
    V.check_array_values(name, X)
    return X


def _check_sketch(sketch: Any):
    """The sketch choice object (:func:`rdr_jax.sketching.as_sketch`): a name or a choice."""
    return as_sketch(sketch)


def _svd_parts(name: str, svd: Any):
    """Accept an RSVD / (U, s, Vt) triple; return (U, s, Vt) as arrays."""
    try:
        U, s, Vt = svd
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be an RSVD (U, s, Vt) triple; got "
                        f"{type(svd).__name__}") from e
    U, Vt = jnp.asarray(U), jnp.asarray(Vt)
    s = jnp.asarray(s)
    if U.ndim != 2 or Vt.ndim != 2 or s.ndim != 1 or not (U.shape[1] == s.shape[0] == Vt.shape[0]):
        raise ValueError(f"{name} must hold U (m x l), s (l,), Vt (l x n); got shapes "
                         f"{U.shape}, {s.shape}, {Vt.shape}")
    return U, s, Vt


# ======================================================================================
# 1. Canonical angles
# ======================================================================================
def _mm(a, b):
    return jnp.matmul(a, b, precision=HIGHEST)


def _after(dep, x):
    """``x``, made data-dependent on ``dep`` (a true dependency, value unchanged).

    jaxlib's CPU LAPACK kernels (0.10) split a *batched* factorisation over XLA's intra-op
    thread pool and block until the pieces finish; two independent batched factorisations
    running at the same time can then occupy every pool thread and wait on each other forever
    (seen on 2 cores when these functions are ``vmap``-ped). Chaining independent
    QR/SVD/Cholesky calls through this helper makes XLA run them one after the other.
    ``optimization_barrier`` does not suffice: the CPU runtime orders thunks by buffer use.
    """
    d = jnp.real(jnp.ravel(dep)[0])
    zero = jnp.where(jnp.isfinite(d), d, 0) * 0
    return x + zero.astype(x.dtype)


def _sines_orthonormal(Q1, Q2, after=None):
    """Sines of the canonical angles between range(Q1), range(Q2) (orthonormal columns),
    ascending, min(p1, p2) of them: singular values of ``(I - P_big) Q_small``.

    The projection is applied twice (classical Gram-Schmidt with reorthogonalisation), so
    sines are accurate to O(eps) in absolute terms, including the tiny ones that
    ``sqrt(1 - cos^2)`` would lose entirely. ``after``: run the SVD after this value exists
    (see :func:`_after`).
    """
    if Q1.shape[1] < Q2.shape[1]:
        Q1, Q2 = Q2, Q1
    if after is not None:
        Q2 = _after(after, Q2)
    R = Q2 - _mm(Q1, _mm(Q1.conj().T, Q2))
    R = R - _mm(Q1, _mm(Q1.conj().T, R))
    return jnp.linalg.svd(R, compute_uv=False)[::-1]


def _orth_checked(X):
    """Orthonormal basis of range(X) via the SVD, and whether X has full column rank."""
    W, sv, _ = jnp.linalg.svd(X, full_matrices=False)
    tol = max(X.shape) * jnp.finfo(sv.dtype).eps * sv[0]
    return W, sv[-1] > tol


@_jit.jit
def _canonical_angles_jit(U, Vb):
    # exact power-of-two rescaling: angles are scale invariant, and subnormal bases (read as
    # 0 by XLA on CPU) or huge ones are brought to max-abs entry in [1, 2) first
    U, Vb = _fp.normalize(U)[0], _fp.normalize(Vb)[0]
    Qu, oku = _orth_checked(U)
    Qv, okv = _orth_checked(_after(Qu, Vb))
    sines = _sines_orthonormal(Qu, Qv)
    return jnp.where(oku & okv, sines, jnp.nan), oku, okv


def canonical_angles(U: Any, V_: Any) -> Float[Array, " p"]:
    """Sines of the canonical angles between ``range(U)`` and ``range(V)``, ascending.

    Definition ``def:canonical-angles`` (Golub & Van Loan; Bjorck & Golub 1973, Sec. 3):
    for orthonormal bases ``Q_U`` (d x p) and ``Q_V`` (d x p'), ``p >= p'``,
    ``sin theta_i = sigma_{p'-i+1}((I - Q_U Q_U^H) Q_V)``, i = 1..p'. The bases need not be
    orthonormal (they are orthonormalised by an SVD) and their dimensions may differ; the
    number of angles is ``min(p, p')``. Sines are computed from the orthogonal complement
    (with reorthogonalisation), never as ``sqrt(1 - cos^2)``, so angles far below
    ``sqrt(eps)`` keep full absolute accuracy.

    The result does not depend on the scale of either basis: each is rescaled by a power of
    two (exact) before it is orthonormalised, so bases with entries from 1e-30 to 1e30
    (float32), or subnormal ones, give the same sines.

    Args:
      U: (d, p) basis, float or complex, full column rank.
      V_: (d, p') basis of the same ambient dimension d.

    Returns:
      ``sin theta_1 <= ... <= sin theta_{min(p, p')}``, real dtype of the inputs.

    Raises:
      ValueError: non-2-D or empty input, different numbers of rows, more columns than rows,
        NaN/Inf entries, or a rank-deficient basis (numerical rank below the column count,
        tolerance ``max(d, p) eps sigma_1``). Inside a caller's ``jit``/``vmap`` the finiteness
        and rank checks cannot raise: a rank-deficient basis then gives all-NaN sines.

    Example:
      >>> U = jnp.eye(4)[:, :2]
      >>> V = jnp.array([[1.0, 0.0], [0.0, 1.0], [1e-10, 0.0], [0.0, 0.5]])
      >>> canonical_angles(U, V)          # ~[1e-10, sin(atan(0.5))] = [1e-10, 0.447]
    """
    U = _check_matrix("U", U)
    V_ = _check_matrix("V", V_)
    if U.shape[0] != V_.shape[0]:
        raise ValueError(f"U and V must have the same number of rows (ambient dimension); got "
                         f"U {U.shape} and V {V_.shape}")
    for name, X in (("U", U), ("V", V_)):
        if X.shape[1] > X.shape[0]:
            raise ValueError(f"{name} has more columns than rows ({X.shape}): its columns cannot "
                             "be a basis (rank-deficient)")
    dt = jnp.result_type(U.dtype, V_.dtype)
    sines, oku, okv = _canonical_angles_jit(U.astype(dt), V_.astype(dt))
    for name, ok in (("U", oku), ("V", okv)):
        if V.is_concrete(ok) and not bool(ok):
            raise ValueError(f"{name} is rank-deficient (numerically): its columns do not span a "
                             f"{(U if name == 'U' else V_).shape[1]}-dimensional subspace")
    return sines


@functools.partial(_jit.jit, static_argnames=("k",))
def _true_angles_jit(Ut, Vtt, Uh, Vth, k):
    Uk, Vk = Ut[:, :k], Vtt[:k].conj().T
    Vh = Vth.conj().T
    a = _sines_orthonormal(Uh, Uk)
    b = _sines_orthonormal(Vh, Vk, after=a)
    c = _sines_orthonormal(Uh[:, :k], Uk, after=b)
    d = _sines_orthonormal(Vh[:, :k], Vk, after=c)
    return TrueAngles(Uk_Ul=a, Vk_Vl=b, Uk_Uk=c, Vk_Vk=d)


def true_angles(true_svd: Any, svd: Any, k: int) -> TrueAngles:
    """Exact sines between the true leading subspaces and a computed rank-l SVD.

    ``sin angle(U_k, U_hat_l)``, ``sin angle(V_k, V_hat_l)``, ``sin angle(U_k, U_hat_k)``,
    ``sin angle(V_k, V_hat_k)`` (``def:canonical-angles``), all ascending; both SVDs must
    have orthonormal factors (as :func:`exact_svd` and :func:`rdr_jax.rsvd` return). Only
    the factors are used (the singular values are not, and no power of them is formed), so
    the scale of A plays no role.

    Args:
      true_svd: ``(U, s, Vt)`` of A with at least k columns, e.g. :func:`exact_svd` ``(A)``.
      svd: the computed rank-l ``(U_hat, s_hat, Vt_hat)``, e.g.
        ``rdr_jax.rsvd(key, A, l, l=l, power_iters=power_iters)`` (note ``k = l`` there: all
        l triplets).
      k: target rank (static), ``1 <= k <= l``.

    Example:
      >>> t = true_angles(exact_svd(A), rsvd(key, A, 200, l=200, power_iters=1), 50)
      >>> t.Uk_Ul.shape
      (50,)
    """
    Ut, st, Vtt = _svd_parts("true_svd", true_svd)
    Uh, sh, Vth = _svd_parts("svd", svd)
    l = Uh.shape[1]
    k = V.check_int("k", k, low=1, high=min(l, Ut.shape[1]),
                    high_desc="k <= l and k <= the number of true singular triplets")
    if Ut.shape[0] != Uh.shape[0] or Vtt.shape[1] != Vth.shape[1]:
        raise ValueError(f"true_svd and svd describe matrices of different shapes: "
                         f"{(Ut.shape[0], Vtt.shape[1])} vs {(Uh.shape[0], Vth.shape[1])}")
    dt = jnp.result_type(Ut.dtype, Uh.dtype)
    return _true_angles_jit(Ut.astype(dt), Vtt.astype(dt), Uh.astype(dt), Vth.astype(dt), k)


def exact_svd(A: Any, *, rank_tol: float | None = None) -> RSVD:
    """Dense SVD of a small matrix, truncated to its numerical rank r (the "true" SVD).

    Computed on the host in float64 (complex128) with numpy and returned in A's dtype:
    ``U`` (m x r), ``s`` (r,), ``Vt`` (r x n), keeping ``s_i > rank_tol * s_1`` (default
    ``max(m, n) * eps`` of A's dtype, as ``numpy.linalg.matrix_rank``). Densifies A: small
    problems only.
    """
    op = as_operator(A)
    wide = np.complex128 if np.dtype(op.dtype).kind == "c" else np.float64
    Ad = np.asarray(op.todense()).astype(wide)
    U, s, Vt = np.linalg.svd(Ad, full_matrices=False)
    tol = rank_tol if rank_tol is not None else max(Ad.shape) * np.finfo(op.dtype).eps
    r = int(np.sum(s > tol * s[0])) if s[0] > 0 else 0
    if r == 0:
        raise ValueError("A is zero: it has no singular subspaces")
    dt = op.dtype
    return RSVD(jnp.asarray(U[:, :r], dt), jnp.asarray(s[:r], V.real_dtype(dt)),
                jnp.asarray(Vt[:r], dt))


def rsvd_omega(key: Any, A: Any, l: int, *, sketch: Any = "gaussian") -> Float[Array, "n l"]:
    """The test matrix ``Omega`` (n x l) that ``rdr_jax.rsvd(key, A, ..., l=l)`` sketches with.

    :func:`rdr_jax.rsvd` forms ``X = A Omega`` with ``Omega = Gamma^H`` for the sketch
    ``Gamma = make_sketch(key, sketch, l, n)``; this returns that ``Omega`` (needed by the
    oracle bound :func:`saibaba_bound`). ``sketch``: a name (``"gaussian"``, ``"srtt"``,
    ``"sparse_sign"``) or a choice object (``rdr_jax.sketching.SparseSign(zeta=4)``), as for
    :func:`rdr_jax.rsvd`. ``tests/test_angles.py`` checks that
    ``range(A Omega) = range(rsvd(...).U)`` for ``power_iters = 0``.
    """
    key = V.check_key(key)
    op = as_operator(A)
    n = op.shape[1]
    l = V.check_int("l", l, low=1, high=n, high_desc="the number of columns of A")
    S = make_sketch(key, _check_sketch(sketch), l, n, dtype=op.dtype)
    return S.adjoint_dense(op.dtype)


# ======================================================================================
# 2. Prior space-agnostic bounds (Thm 3.1)
# ======================================================================================
def _log(xp, s):
    """``log s``; under jax exact for subnormal s too (XLA on CPU reads those as 0)."""
    return xp.log(s) if xp is np else _fp.log_abs(s)


#: Prior-bound constants (:func:`space_agnostic_bound`, :func:`plan_budget`).
_CONSTANTS = ("thesis", "calibrated")

#: 0.99 quantile of the Tracy-Widom law F1 (beta = 1, real Gaussian data); Tracy & Widom
#: (1996), tabulated e.g. in Johnstone (2001), Table 1 (0.95: 0.9793, 0.99: 2.0234).
_TW1_Q99 = 2.0234


def _check_constants(constants: Any) -> str:
    if not (isinstance(constants, str) and constants in _CONSTANTS):
        raise ValueError(f"constants must be 'thesis' (the thesis' eps1 = eps sqrt(k/l), "
                         f"eps2 = eps sqrt(l/(r - k))) or 'calibrated' (random-matrix "
                         f"quantiles, see space_agnostic_bound); got {constants!r}")
    return constants


def _log_wishart_quantile(k: int, l: int, upper: bool) -> float:
    """``log`` of the calibrated extreme eigenvalue of ``Omega_1 Omega_1^H``
    (``Omega_1`` k x l, i.i.d. ``N(0, 1/l)``): its 1% quantile (smallest eigenvalue,
    ``upper=False``) or 99% quantile (largest, ``upper=True``).

    Tracy-Widom approximation on the log scale (Johnstone 2001; Feldheim & Sodin 2010 for
    the smallest eigenvalue; Ma 2012 for the half-integer corrections and the log scale):
    with ``a = sqrt(l - 1/2)``, ``b = sqrt(k - 1/2)``, ``mu = (a -+ b)^2``,
    ``sigma = (a -+ b) (1/b -+ 1/a)^(1/3)``, ``lambda_min ~ mu exp(-sigma/mu TW1)`` and
    ``lambda_max ~ mu exp(+sigma/mu TW1)`` (``TW1`` Tracy-Widom, beta = 1). Python floats
    (k, l are static); ``k < l``.
    """
    a, b = math.sqrt(l - 0.5), math.sqrt(k - 0.5)
    d = a + b if upper else a - b
    sig = d * (1.0 / b + 1.0 / a if upper else 1.0 / b - 1.0 / a) ** (1.0 / 3.0)
    z = _TW1_Q99 * sig / (d * d)
    return 2.0 * math.log(d) - math.log(l) + (z if upper else -z)


def _sa_factors(xp, s, k: int, l: int, power, eps, lower: bool, constants: str):
    """``(log c, vacuous, eps1, eps2, log_tail, logs)`` of Thm 3.1: ``c`` the distortion
    factor ``(1 - eps1)/(1 + eps2)`` (upper) or ``(1 + eps1)/(1 - eps2)`` (lower), ``log_tail =
    log sum_{j>k} sigma_j^p`` (log-sum-exp, any scale), ``logs = log s``."""
    r = s.shape[0]
    logs = _log(xp, s)
    tail = power * logs[k:]
    tmax = xp.max(tail)
    log_tail = tmax + xp.log(xp.sum(xp.exp(tail - tmax)))
    if constants == "thesis":
        eps1 = eps * math.sqrt(k / l)
        eps2 = eps * math.sqrt(l / (r - k))
        if lower:  # factor (1 + eps1)/(1 - eps2): vacuous (<= 0 or infinite) when eps2 >= 1
            vacuous = eps2 >= 1
            c = (1 + eps1) / xp.where(vacuous, 1.0, 1 - eps2)
        else:      # factor (1 - eps1)/(1 + eps2): vacuous when eps1 >= 1
            vacuous = eps1 >= 1
            c = xp.where(vacuous, 1.0, 1 - eps1) / (1 + eps2)
        return xp.log(c), vacuous, eps1, eps2, log_tail, logs
    # calibrated: eps1 from the Tracy-Widom-corrected Marchenko-Pastur edge of
    # Omega_1 Omega_1^H, eps2 from the MP edge of W2^H W2 with the effective rank
    # eta = (sum_{j>k} sigma_j^p)^2 / sum_{j>k} sigma_j^{2p} (log domain: only ratios enter)
    t2max = 2 * tmax
    log_eta = 2 * log_tail - (t2max + xp.log(xp.sum(xp.exp(2 * tail - t2max))))
    rt = xp.exp(0.5 * (math.log(l) - log_eta))              # sqrt(l / eta)
    log_w = _log_wishart_quantile(k, l, upper=lower)        # log(1 -+ eps1), exact
    eps1 = math.expm1(log_w) if lower else -math.expm1(log_w)
    if lower:  # (1 + eps1)/(1 - eps2), 1 - eps2 = (1 - sqrt(l/eta))^2: vacuous when l >= eta
        vacuous = rt >= 1
        eps2 = rt * (2 - rt)
        log_c = log_w - 2 * xp.log(xp.where(vacuous, 0.5, 1 - rt))
    else:      # (1 - eps1)/(1 + eps2), 1 + eps2 = (1 + sqrt(l/eta))^2: never vacuous (k < l)
        vacuous = False
        eps2 = rt * (2 + rt)
        log_c = log_w - 2 * xp.log1p(rt)
    return log_c, vacuous, eps1, eps2, log_tail, logs


def _sa_log_bound(xp, s, k: int, l: int, power, eps, lower: bool, constants: str = "thesis"):
    """``(log bound, vacuous)`` of Thm 3.1, array namespace ``xp`` (numpy or jax.numpy).

    ``(1 + c l sigma_i^p / sum_{j>k} sigma_j^p)^(-1/2) = exp(-softplus(x)/2)`` with
    ``x = log c + log l + p log sigma_i - logsumexp_j(p log sigma_j)``: no overflow or
    underflow for any exponent or scale (e.g. p = 42 for q = 10); only ratios of singular
    values enter. ``power`` and ``eps`` may be traced; ``constants`` picks ``c``
    (:func:`space_agnostic_bound`).
    """
    log_c, vacuous, _, _, log_tail, logs = _sa_factors(xp, s, k, l, power, eps, lower,
                                                       constants)
    x = log_c + math.log(l) + power * logs[:k] - log_tail
    return -0.5 * xp.logaddexp(xp.zeros((), s.dtype), x), vacuous


def _sa_bound(xp, s, k: int, l: int, power, eps, lower: bool, constants: str = "thesis"):
    """Thm 3.1 bound (see :func:`_sa_log_bound`); NaN where vacuous."""
    log_b, vacuous = _sa_log_bound(xp, s, k, l, power, eps, lower, constants)
    return xp.where(vacuous, xp.nan, xp.exp(log_b)).astype(s.dtype)


@functools.partial(_jit.jit, static_argnames=("k", "l", "lower", "constants"))
def _sa_bound_jit(s, power, eps, k, l, lower, constants="thesis"):
    return _sa_bound(jnp, s, k, l, power.astype(s.dtype), eps.astype(s.dtype), lower,
                     constants)


def _check_sa_args(s, k, l, power_iters, side, eps, constants):
    side = _check_side(side)
    constants = _check_constants(constants)
    s = _check_spectrum(s)
    r = s.shape[0]
    k = V.check_int("k", k, low=1)
    l = V.check_int("l", l, low=1)
    if not k < l:
        raise ValueError(f"the bound needs k < l (oversampling); got k = {k}, l = {l}")
    if not l < r:
        raise ValueError(f"the bound needs l < r = len(s) = {r}; got l = {l}")
    q = V.check_int("power_iters", power_iters, low=0)
    eps = _check_positive_float("eps", eps)
    if constants == "calibrated" and eps != 1.0:
        raise ValueError(f"eps scales the thesis' constants only (constants='thesis'); the "
                         f"calibrated constants have no free factor, leave eps at 1.0; "
                         f"got eps = {eps!r}")
    return s, k, l, q, side, eps, constants


def space_agnostic_bound(s: Any, k: int, l: int, power_iters: int, *, side: str = "left",
                         eps: float = 1.0, lower: bool = False,
                         constants: str = "thesis") -> Float[Array, " k"]:
    r"""Prior space-agnostic bound on ``sin angle_i(U_k, U_hat_l)`` or ``(V_k, V_hat_l)``.

    Thm ``thm:space_agnostic_bounds`` (Eqs. ``eq:space_agnostic_left/right``): for a rank-l
    rSVD with a Gaussian embedding and ``power_iters`` (q in the thesis) power iterations,
    with high probability, for i <= k,

        sin angle_i <= (1 + (1 - eps1)/(1 + eps2) * l sigma_i^p / sum_{j=k+1}^r sigma_j^p)^(-1/2)

    with ``p = 4q + 2`` (left, U) or ``p = 4q + 4`` (right, V). ``lower=True`` gives the
    asymptotic lower bound (``eq:space_agnostic_lower_left/right``) with the factor
    ``(1 + eps1)/(1 - eps2)``. O(r) time. The theorem fixes ``eps1 = Theta(sqrt(k/l))`` and
    ``eps2 = Theta(sqrt(l/eta))`` only up to order; ``constants`` picks them:

    **constants="thesis"** (default; the thesis' experiments): ``eps1 = eps sqrt(k/l)``,
    ``eps2 = eps sqrt(l/(r - k))`` (the experiments use eps = 1 for the upper bound; the
    appendix ``subapx:sup_exp_upper_lower_space_agnostic`` evaluates the lower bound with
    ``eps = 2`` and ``l >= 4k``). These are order-of-magnitude constants, not quantiles: at
    the thesis' n = 500, k = 50, l = 80 = 1.6k, q = 0 the upper bound holds (for every i at
    once) in only 51% (slow decay) / 0.6% (fast decay) of 500 rSVDs on the left side
    (``experiments/fig_space_agnostic_bounds.py --trials``).

    **constants="calibrated"**: the constants are the quantiles the proof actually needs.
    In the proof (``eq:pf_sin_Uk_whUl``), with ``Omega_1 = V_k^H Omega`` (k x l) and
    ``W2 = Sigma_{r\k}^{p/2} V_{r\k}^H Omega`` (i.i.d. ``N(0, 1/l)`` Omega),

        sin^2 angle = eig((I + Sigma_k^{p/2} Omega_1 (W2^H W2)^-1 Omega_1^H Sigma_k^{p/2})^-1),

    and the upper bound follows from ``lambda_min(Omega_1 Omega_1^H) >= 1 - eps1`` and
    ``lambda_max(W2^H W2) <= (1 + eps2) tr(Sigma_{r\k}^p) / l`` (the lower bound from the
    reverse inequalities):

    * ``1 - eps1`` is the 1% quantile of ``lambda_min(Omega_1 Omega_1^H)``, a white Wishart
      matrix (k x k, l degrees of freedom, scaled by 1/l). Its Marchenko-Pastur edge is
      ``(1 - sqrt(k/l))^2`` (so ``eps1 = 2 sqrt(k/l) - k/l`` to leading order), but at finite
      k the edge is crossed in about 15% of the draws (Tracy-Widom fluctuations), and with
      the bare edge the bound failed in up to 8% (k = 5) / 4% (k = 10) of the trials at
      l in {1.2k, 1.6k, 2k}. The finite-sample correction uses the Tracy-Widom law of the
      smallest eigenvalue on the log scale (Feldheim & Sodin 2010; Ma 2012): with
      ``a = sqrt(l - 1/2)``, ``b = sqrt(k - 1/2)``, ``mu = (a - b)^2``,
      ``sigma = (a - b)(1/b - 1/a)^(1/3)`` and ``z = 2.0234`` (the 0.99 quantile of TW1),

          1 - eps1 = mu/l * exp(-z sigma/mu)

      (measured for (k, l) from (1, 2) to (100, 160): between 0.48x (l close to k:
      conservative) and 1.04x the empirical 1% quantile, with at most 1.2% of the draws below
      it). Always in (0, 1): never vacuous. (A Davidson-Szarek tail
      ``s_min >= sqrt(l) - sqrt(k) - sqrt(2 log(1/delta))`` would be rigorous but is vacuous
      at l = 1.6k for every k < 130 at delta = 1%.)
    * ``1 + eps2 = (1 + sqrt(l/eta))^2``, i.e. ``eps2 = 2 sqrt(l/eta) + l/eta``: the upper
      Marchenko-Pastur edge of the weighted Wishart ``W2^H W2`` with the effective rank
      ``eta = (sum_{j>k} sigma_j^p)^2 / sum_{j>k} sigma_j^{2p}`` (the theorem's eta, ``<= r - k``,
      ``= r - k`` for a flat tail) in place of ``r - k``: ``l W2^H W2 / tr(Sigma_{r\k}^p)`` has
      exactly the first two spectral moments (``1`` and ``1 + (l + 1)/eta``) of a white
      Wishart matrix with eta degrees of freedom, whose edge this is. It is *not* a 99% bound
      on ``lambda_max(W2^H W2)`` (the event held in 0-92% of the draws for these spectra),
      but the proof's step ``(W2^H W2)^-1 >= I / lambda_max`` is loose exactly there:
      ``Omega_1`` is independent of W2 and rotation invariant, so it sees the bulk of
      ``(W2^H W2)^-1`` rather than its smallest eigenvalue. This step is heuristic; what
      supports it is measurement: the calibrated upper bound held (every i at once) in 100%
      of 500 rSVDs in each of the 48 (spectrum, l, q, side) panels at the thesis' n = 500,
      k = 50, l in {60, 80, 100}, q in {0, 1}, for the thesis' slow/fast spectra and those of
      the authors' code (``tests/test_calibrated_bounds.py``: the same at n = 200, k = 20,
      l in {24, 32, 40}); in >= 99.6% of exact-distribution trials
      (``prop:space_agnostic_estimation``) at k = 5, 10. It is a 99% bound by design, not
      more: for a flat top and a long flat tail (eta >> l, so eps2 ~ 0 and the eps1 event is
      the only failure mode) the hold rate approaches 99% (measured 99.1%-99.7% for such
      adversarial spectra).
    * lower bound: ``1 + eps1 = mu_+/l exp(+z sigma_+/mu_+)`` (``mu_+ = (a + b)^2``,
      ``sigma_+ = (a + b)(1/b + 1/a)^(1/3)``: the 99% quantile of the largest eigenvalue)
      and ``1 - eps2 = (1 - sqrt(l/eta))^2`` (the lower MP edge), **vacuous (NaN) when
      l >= eta** -- the theorem's condition ``eta = Omega(l)`` made explicit.

    ``eps`` scales the thesis' constants only; with ``constants="calibrated"`` it must stay
    1.0. :func:`space_agnostic_distortions` returns the eps1, eps2 (and eta) in use.

    **Vacuous bounds are NaN**, never clamped: the upper bound when ``eps1 >= 1`` (its factor
    ``1 - eps1 <= 0``; thesis constants only), the lower bound when ``eps2 >= 1``.

    **Scale and precision.** Evaluated in the log domain from ``log sigma_j`` (exact for
    subnormal values too), so no power ``sigma^p`` is ever formed: the result depends only on
    ratios of singular values, for any scale of s and any q, and never overflows. A bound
    below the dtype's smallest normal number (about 1e-38 in float32) is returned as 0.

    Args:
      s: spectrum ``sigma_1 >= ... >= sigma_r > 0`` (true, or :func:`padded_spectrum` of an
        rSVD's values), length r.
      k: target rank (static), ``1 <= k < l``.
      l: sketch size (static), ``l < r``.
      power_iters: number of power iterations q (Python int), ``power_iters >= 0``.
      side: ``"left"`` (``U_k`` vs ``U_hat_l``) or ``"right"`` (``V_k`` vs ``V_hat_l``).
      eps: distortion constant of the thesis' constants (float > 0; traced, so changing it
        does not recompile).
      lower: return the lower bound instead of the upper bound.
      constants: ``"thesis"`` (default) or ``"calibrated"`` (static).

    Returns:
      (k,) bounds for i = 1..k, ascending like the sines (non-decreasing in i).

    Raises:
      ValueError: s not 1-D/finite/positive/non-increasing, ``k >= l``, ``l >= r``,
        ``power_iters < 0``, bad side, eps or constants. TypeError: non-int k, l, power_iters.

    Example:
      >>> s = matrices.polynomial_decay(500)
      >>> space_agnostic_bound(s, 50, 200, 1, side="right").shape
      (50,)
      >>> b = space_agnostic_bound(s, 50, 80, 0, constants="calibrated")
    """
    s, k, l, q, side, eps, constants = _check_sa_args(s, k, l, power_iters, side, eps,
                                                      constants)
    power = 4 * q + (2 if side == "left" else 4)
    return _sa_bound_jit(s, jnp.asarray(power, s.dtype), jnp.asarray(eps, s.dtype), k, l,
                         bool(lower), constants)


class Distortions(NamedTuple):
    """The distortion factors of one Thm 3.1 bound (:func:`space_agnostic_distortions`).

    ``eps1``, ``eps2``: the constants in ``(1 -+ eps1)/(1 +- eps2)``; ``eta``: the tail's
    effective rank ``(sum_{j>k} sigma_j^p)^2 / sum_{j>k} sigma_j^{2p}``; ``factor``: the
    factor itself (NaN when vacuous); ``vacuous``: the bound is NaN.
    """

    eps1: float
    eps2: float
    eta: float
    factor: float
    vacuous: bool


def space_agnostic_distortions(s: Any, k: int, l: int, power_iters: int, *,
                               side: str = "left", eps: float = 1.0, lower: bool = False,
                               constants: str = "thesis") -> Distortions:
    """The eps1, eps2 (and the tail's effective rank eta) behind
    :func:`space_agnostic_bound` with the same arguments; host-side numpy float64.

    Example:
      >>> d = space_agnostic_distortions(matrices.polynomial_decay(500), 50, 80, 0,
      ...                                constants="calibrated")
      >>> round(d.eps1, 3), d.vacuous
      (0.968, False)
    """
    s, k, l, q, side, eps, constants = _check_sa_args(s, k, l, power_iters, side, eps,
                                                      constants)
    s = np.asarray(s, np.float64)
    power = float(4 * q + (2 if side == "left" else 4))
    log_c, vacuous, eps1, eps2, _, logs = _sa_factors(np, s, k, l, power, eps, bool(lower),
                                                      constants)
    tail = power * (logs[k:] - logs[k])
    eta = float(np.sum(np.exp(tail)) ** 2 / np.sum(np.exp(2 * tail)))
    vacuous = bool(vacuous)
    return Distortions(float(eps1), float(eps2), eta,
                       math.nan if vacuous else float(np.exp(log_c)), vacuous)


def padded_spectrum(s_hat: Any, r: int) -> Float[Array, " r"]:
    """Approximate spectrum ``diag(s_hat_1, ..., s_hat_l, s_hat_l, ..., s_hat_l)`` of length r.

    Sec. ``subsec:experiment_canonical_angle``: when the true spectrum is unknown, every
    bound/estimate is evaluated with the l computed singular values padded with ``r - l``
    copies of the last one.

    Args:
      s_hat: (l,) computed singular values (descending, positive).
      r: target length (static), ``r >= l`` (the rank of A, or min(m, n)).
    """
    s_hat = _check_spectrum(s_hat, name="s_hat")
    l = s_hat.shape[0]
    r = V.check_int("r", r, low=l)
    return jnp.concatenate([s_hat, jnp.full((r - l,), s_hat[-1], s_hat.dtype)])


# ======================================================================================
# 3. Unbiased Monte-Carlo estimates (Prop 3.2 / Algorithm)
# ======================================================================================
# The Cholesky fast path is used only when its a-posteriori accuracy estimate
# eps sqrt(l) (max diag L / min diag L)^2 stays below this (see _estimate_jit).
_CHOL_TOL = 1e-8


def _weight_log_floor(dtype) -> float:
    """``log(tiny / eps)`` of ``dtype``: weights ``sigma^p`` (relative to the largest of their
    group) below this flush to 0 on CPU or lose the precision the estimator needs."""
    fi = np.finfo(dtype)
    return float(np.log(fi.tiny) - np.log(fi.eps))


def _weight_spans(xp, logs, power, k: int, l: int):
    """``log (sigma_1/sigma_k)^p`` (head) and ``log (sigma_{k+1}/sigma_{k+l})^p`` (tail): the
    dynamic ranges the estimator's two weight groups must represent."""
    return power * (logs[0] - logs[k - 1]), power * (logs[k] - logs[k + l - 1])


class _Trials(NamedTuple):
    """Static options of the estimator's Monte-Carlo trials (one hashable jit argument)."""

    num: int
    sketch: Any
    method: str
    sharding: Any = None      # the trials axis over devices (see unbiased_estimate's mesh)


@functools.partial(_jit.jit, static_argnames=("k", "l", "trials"))
def _estimate_jit(key, s, power, k, l, trials: _Trials):
    num_trials, sketch, method, trials_sharding = trials
    r = s.shape[0]
    dt = s.dtype
    # Scale invariance, exactly: W1 = Sigma_k^p Omega_1 and W2 = Sigma_{r\k}^p Omega_2 are
    # normalised separately, the head by sigma_1 and the tail by sigma_{k+1}, so every weight
    # is <= 1 (nothing overflows for any q); the gap (sigma_1/sigma_{k+1})^p multiplies nu in
    # the log domain. Logs are exact for subnormal sigma too.
    logs = _fp.log_abs(s)
    d = jnp.concatenate([jnp.exp(power * (logs[:k] - logs[0])),
                         jnp.exp(power * (logs[k:] - logs[k]))])
    log_gap = power * (logs[0] - logs[k])
    head, tail = _weight_spans(jnp, logs, power, k, l)
    floor = _weight_log_floor(dt)
    valid = (-head >= floor) & (-tail >= floor)

    def draw(kk):
        # Gamma (l x r) = Omega^T; drawn in float32 (Monte-Carlo inputs need no more than 24
        # bits), the linear algebra runs in the spectrum's dtype.
        G = make_sketch(kk, sketch, l, r, dtype=jnp.float32).todense()
        return G.astype(dt) * d[None, :]                      # [W1^T, W2^T] (normalised)

    def finish(Wt, L):
        # L lower triangular with L L^T = W2^T W2: nu = sv(W1 W2^+) = sv(W1 L^-T)
        Mt = solve_triangular(L, Wt[:, :k], lower=True)      # L^-1 W1^T  (l x k)
        nu = jnp.linalg.svd(Mt, compute_uv=False)              # descending
        # sin = (1 + nu^2)^(-1/2), nu = nu' (sigma_1/sigma_{k+1})^p, in the log domain
        log_nu = jnp.log(nu) + log_gap
        return jnp.exp(-0.5 * jnp.logaddexp(jnp.zeros((), dt), 2 * log_nu))  # ascending

    def qr_trial(kk, dep=None):
        Wt = draw(kk) if dep is None else _after(dep, draw(kk))
        R = jnp.linalg.qr(Wt[:, k:].T, mode="r")              # W2 = Q R, R (l x l)
        return finish(Wt, R.conj().T)

    def chol_trial(kk):
        Wt = draw(kk)
        W2t = Wt[:, k:]
        L = jnp.linalg.cholesky(jnp.matmul(W2t, W2t.T, precision=HIGHEST))
        dg = jnp.abs(jnp.diagonal(L))
        est = jnp.finfo(dt).eps * math.sqrt(l) * (jnp.max(dg) / jnp.min(dg)) ** 2
        bad = ~jnp.all(jnp.isfinite(L)) | ~(est <= _CHOL_TOL)
        return finish(Wt, L), bad

    keys = jax.random.split(key, num_trials)
    if trials_sharding is not None:   # the trials axis over the devices (vmap + sharding)
        keys = jax.lax.with_sharding_constraint(keys, trials_sharding)
    if method == "qr":
        trials = jax.vmap(qr_trial)(keys)
    else:
        fast, bad = jax.vmap(chol_trial)(keys)
        if method == "cholesky":
            trials = jnp.where(bad[:, None], jnp.nan, fast)
        else:  # auto: redo the whole batch with QR if any trial was ill-conditioned
            # (under an outer vmap the cond runs both branches: QR strictly after Cholesky)
            trials = jax.lax.cond(jnp.any(bad),
                                  lambda: jax.vmap(qr_trial)(keys, fast),
                                  lambda: fast)
    trials = jnp.where(valid, trials, jnp.nan)
    return Estimate(jnp.mean(trials, axis=0), jnp.min(trials, axis=0),
                    jnp.max(trials, axis=0), trials, valid)


def _check_estimate_range(s, power: int, k: int, l: int, side: str) -> None:
    """Raise ValueError when a concrete spectrum's powers cannot be represented (see
    :func:`unbiased_estimate`); traced spectra are flagged inside the jit instead."""
    if not V.is_concrete(s):
        return
    logs = np.log(np.asarray(s, np.float64))
    head, tail = _weight_spans(np, logs, float(power), k, l)
    floor = _weight_log_floor(s.dtype)
    for span, what in ((head, f"(sigma_1/sigma_k)^p, k = {k}"),
                       (tail, f"(sigma_(k+1)/sigma_(k+l))^p, k + l = {k + l}")):
        if -span < floor:
            raise ValueError(
                f"unbiased_estimate cannot represent the spectrum's powers in {s.dtype}: "
                f"{what}, p = {power} ({side} side) is 10^{span / math.log(10):.0f}, beyond "
                f"the dtype's usable range eps/tiny = 10^{-floor / math.log(10):.0f}, so the "
                f"smallest weights would flush to 0 and the estimate would degenerate; use "
                f"float64 (jax.enable_x64) or fewer power_iters")


def unbiased_estimate(key: Any, s: Any, k: int, l: int, power_iters: int, *,
                      side: str = "left", num_trials: int = 3, sketch: Any = "gaussian",
                      method: str = "auto", mesh: Any = None) -> Estimate:
    """Unbiased Monte-Carlo estimate of ``E[sin angle_i(U_k, U_hat_l)]`` (or V), i <= k.

    Prop. ``prop:space_agnostic_estimation`` / Algorithm
    ``algo:unbiased_canonical_angle_estimators``: for a Gaussian embedding, ``V^H Omega`` is
    again Gaussian, so the sines of a rank-l rSVD with ``power_iters`` (q in the thesis)
    power iterations have exactly the distribution of (one trial,
    ``Omega ~ N(0, 1/l)^{r x l}``)

        W1 = Sigma_k^p Omega(1:k, :),  W2 = Sigma_{r\\k}^p Omega(k+1:r, :),
        nu = sv(W1 W2^+) (descending),  sin theta_i = 1 / sqrt(1 + nu_i^2)  (ascending),

    with ``p = 2q + 1`` (left) or ``2q + 2`` (right). The N trials are a ``vmap`` over split
    keys inside one jit-compiled function, O(N r l^2).

    Implementation (exact reformulation of the algorithm's ``svd(W2)``): ``W1 W2^+`` has the
    singular values of ``W1 R^-1`` for any R with ``R^H R = W2^H W2``. ``method="qr"`` takes R
    from a QR of W2 (robust for any conditioning); ``"cholesky"`` from a Cholesky of the Gram
    matrix (about 2x faster, loses accuracy as ``cond(W2)^2``; trials whose Cholesky fails are
    NaN); ``"auto"`` (default) uses the Cholesky path in float64 when ``l <= (r - k)/2``
    and every trial passes the check ``eps sqrt(l) (max_i L_ii / min_i L_ii)^2 <= 1e-8``,
    and otherwise recomputes all trials with QR (so the result is always QR-accurate).
    Samples are drawn in float32 and promoted (a Monte-Carlo input needs no more than 24
    bits).

    **Scale and precision.** The sines depend only on ratios of singular values, and are
    computed so: W1 is normalised by ``sigma_1^p`` and W2 by ``sigma_{k+1}^p`` (all weights
    ``<= 1``: nothing overflows for any q or scale of s), and the gap
    ``(sigma_1/sigma_{k+1})^p`` enters through logarithms. What must still be representable
    are the two dynamic ranges ``(sigma_1/sigma_k)^p`` and ``(sigma_{k+1}/sigma_{k+l})^p``:
    each must stay below ``eps/tiny`` of the dtype (about 1e31 in float32, 1e292 in float64),
    otherwise the smallest weights flush to 0 and the estimator degenerates (sines of 1).
    A concrete spectrum that violates this raises ``ValueError``; inside ``jit``/``vmap``
    (traced s) the result is NaN with ``Estimate.valid = False``. Sines below the dtype's
    smallest normal number are returned as 0.

    Args:
      key: ``jax.random.key``.
      s: spectrum, length r (true, or :func:`padded_spectrum`).
      k: target rank (static), ``k >= 1``.
      l: sketch size (static), ``k <= l <= r - k`` (the thesis allows any ``l >= k``;
        ``l <= r - k`` keeps ``W2`` of full column rank, as the algorithm's ``Sigma_W2^-1``
        requires).
      power_iters: power iterations q (Python int), ``power_iters >= 0``.
      side: ``"left"`` or ``"right"``.
      num_trials: N (static), ``N >= 1``; the thesis uses N = 3.
      sketch: ``"gaussian"`` (the thesis; the estimate is then unbiased for every A with this
        spectrum) or ``"srtt"``/``"sparse_sign"``: Omega drawn from that family, i.e. the
        exact distribution for A whose right singular vectors are the coordinate axes
        (a model, not an unbiased estimate for general A); or a choice object
        (``rdr_jax.sketching.SparseSign(zeta=4)``). The Gaussian default draws with
        :func:`rdr_jax.sketching.hash_normal` (2-3x cheaper than threefry on CPU); pass
        ``Gaussian(generator="threefry")`` for ``jax.random.normal``.
      method: ``"auto"``, ``"qr"`` or ``"cholesky"`` (static).
      mesh: None, or a ``jax.sharding.Mesh``: the N trials are then split over all of the
        mesh's devices (``NamedSharding(mesh, P(mesh.axis_names))`` on the vmapped trials
        axis; N must be a multiple of ``mesh.size``). Each trial draws from its own key
        ``split(key, N)[i]`` whatever the device count, so the trials equal the
        one-device ones (the mean/min/max reductions are one small all-reduce).

    Returns:
      :class:`Estimate` ``(mean, min, max, trials, valid)``.

    Raises:
      ValueError: bad spectrum, ``l < k``, ``l > r - k``, ``power_iters < 0``,
        ``num_trials < 1``, bad side/sketch/method, a spectrum whose powers cannot be
        represented in its dtype (see above), or ``num_trials`` not a multiple of the
        mesh's device count.
      TypeError: ``mesh`` not a ``jax.sharding.Mesh``.

    Example:
      >>> est = unbiased_estimate(jax.random.key(0), matrices.polynomial_decay(500), 50, 200,
      ...                         1, side="left", num_trials=3)
      >>> est.mean.shape, est.trials.shape
      ((50,), (3, 50))
    """
    key = V.check_key(key)
    side = _check_side(side)
    s = _check_spectrum(s)
    r = s.shape[0]
    k = V.check_int("k", k, low=1)
    if r < 2 * k:
        raise ValueError(f"len(s) = r = {r} is too short for k = {k}: need r >= 2k so that "
                         f"k <= l <= r - k is possible")
    l = V.check_int("l", l, low=k, high=r - k,
                    high_desc=f"r - k = {r} - {k}, so that W2 has full column rank")
    q = V.check_int("power_iters", power_iters, low=0)
    num_trials = V.check_int("num_trials", num_trials, low=1)
    if method not in ("auto", "qr", "cholesky"):
        raise ValueError(f"method must be 'auto', 'qr' or 'cholesky'; got {method!r}")
    sk = _check_sketch(sketch)
    if method == "auto" and not (s.dtype == jnp.float64 and 2 * l <= r - k):
        method = "qr"
    p = 2 * q + (1 if side == "left" else 2)
    _check_estimate_range(s, p, k, l, side)
    return _estimate_jit(key, s, jnp.asarray(p, s.dtype), k, l,
                         _Trials(num_trials, sk, method, _trials_sharding(mesh, num_trials)))


def _trials_sharding(mesh: Any, num_trials: int):
    """``NamedSharding`` of the trials axis over all devices of ``mesh`` (None: no mesh)."""
    if mesh is None:
        return None
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    if not isinstance(mesh, Mesh):
        raise TypeError(f"mesh must be a jax.sharding.Mesh or None; got {type(mesh).__name__}")
    if num_trials % mesh.size:
        raise ValueError(f"num_trials = {num_trials} must be a multiple of the mesh's "
                         f"{mesh.size} devices to split the trials over them")
    return NamedSharding(mesh, PartitionSpec(tuple(mesh.axis_names)))


# ======================================================================================
# 4. Posterior residual-based bounds (Thm 3.3, Thm 3.4)
# ======================================================================================
@pytree_dataclass
class _ProjectedOperator(LinearOperator):
    """``(I - U U^H) A (I - V V^H)`` (U or V may be None: no projection on that side)."""

    A: LinearOperator
    U: Any
    V: Any

    @property
    def shape(self):
        return self.A.shape

    @property
    def dtype(self):
        return self.A.dtype

    @staticmethod
    def _proj(Q, X):
        return X if Q is None else X - _mm(Q, _mm(Q.conj().T, X))

    def matmat(self, X):
        return self._proj(self.U, self.A.matmat(self._proj(self.V, X)))

    def rmatmat(self, Y):
        return self._proj(self.V, self.A.rmatmat(self._proj(self.U, Y)))

    @property
    def H(self):
        return _ProjectedOperator(self.A.H, self.V, self.U)

    def rows(self, I):  # pragma: no cover - not used by the norm estimators
        return self.todense()[I]

    def cols(self, J):  # pragma: no cover
        return self.todense()[:, J]


@functools.partial(_jit.jit, static_argnames=("k", "exact", "norm_iters"))
def _residuals_jit(op, U, s_hat, Vt, key, k, exact, norm_iters):
    Vh = Vt.conj().T
    rdt = s_hat.dtype
    AV = op.matmat(Vh)                                        # m x l
    F = AV - _mm(U, _mm(U.conj().T, AV))                      # (I - U U^H) A V_l = [E31, E32]
    # the SVDs below are independent; _after chains them (see _after)
    svF = jnp.linalg.svd(F, compute_uv=False)
    E3_2 = svF[0]
    # ||F||_F = sigma_1 ||sv / sigma_1||_2: no overflow/underflow of the squares at any scale
    E3_F = E3_2 * jnp.sqrt(jnp.sum((svF / jnp.where(E3_2 > 0, E3_2, 1)) ** 2))
    l = Vh.shape[1]
    E32_2 = (jnp.linalg.svd(_after(svF, F[:, k:]), compute_uv=False)[0] if l > k
             else jnp.zeros((), rdt))
    if exact:
        Ad = op.todense()
        EU = Ad - _mm(U, _mm(U.conj().T, Ad))
        EV = Ad - _mm(_mm(Ad, Vh), Vt)
        E33 = EU - _mm(_mm(EU, Vh), Vt)
        svU = jnp.linalg.svd(_after(E32_2, EU), compute_uv=False)
        svV = jnp.linalg.svd(_after(svU, EV), compute_uv=False)
        kk = min(k, svU.shape[0])
        pad = jnp.zeros((k - kk,), rdt)
        left_svals = jnp.concatenate([svU[:kk], pad])
        right_svals = jnp.concatenate([svV[:kk], pad])
        left_norm, right_norm = svU[0], svV[0]
        E33_2 = jnp.linalg.svd(_after(svV, E33), compute_uv=False)[0]
    else:
        k1, k2, k3 = jax.random.split(key, 3)
        left_norm = spectral_norm(k1, _ProjectedOperator(op, U, None), iters=norm_iters)
        right_norm = spectral_norm(k2, _ProjectedOperator(op, None, Vh), iters=norm_iters)
        E33_2 = spectral_norm(k3, _ProjectedOperator(op, U, Vh), iters=norm_iters)
        left_svals = right_svals = jnp.full((k,), jnp.nan, rdt)
    f = lambda x: jnp.asarray(x).astype(rdt)  # noqa: E731
    return Residuals(s_hat, f(left_svals), f(right_svals), f(left_norm), f(right_norm),
                     f(E3_2), f(E3_F), f(E32_2), f(E33_2), jnp.asarray(exact))


def posterior_residuals(A: Any, svd: Any, k: int, *, residual: str = "auto",
                        key: Any = None, norm_iters: int = 50) -> Residuals:
    """Residual norms/spectra of a rank-l approximation, the inputs of Thms 3.3 and 3.4.

    For ``A ~ U_l S_l V_l^H`` (any projection-based SVD with ``U_l^H A = S_l V_l^H``, e.g.
    ``rdr_jax.rsvd(key, A, l, l=l, ...)``: note all l triplets) computes
    ``sigma_1..k((I - U_l U_l^H) A)``, ``sigma_1..k(A (I - V_l V_l^H))``, their norms,
    ``||[E31, E32]||_{2,F} = ||(I - U_l U_l^H) A V_l||_{2,F}``,
    ``||E32||_2 = ||(I - U_l U_l^H) A V_{l\\k}||_2`` and
    ``||E33||_2 = ||(I - U_l U_l^H) A (I - V_l V_l^H)||_2`` (thesis, after
    ``thm:separate_gap_bounds``). Evaluate bounds from the result with :func:`residual_bound`
    and :func:`gap_bounds` (cheap; e.g. once with the true and once with the approximate
    spectrum).

    ``residual="exact"`` forms the m x n residuals densely and takes their SVDs (small
    problems); ``"estimate"`` never densifies A: the three m x n residual norms are
    power-method estimates (:func:`rdr_jax.norms.spectral_norm`, ``norm_iters`` iterations on
    an implicit projected operator; lower estimates, so the bounds built from them are
    estimates too), the residual spectra are NaN (Thm 3.3 then uses only its second term, as
    the thesis suggests), and the m x l quantities stay exact. ``"auto"`` is exact when
    ``m n <= 2^22``.

    Args:
      A: matrix or operator (m x n).
      svd: ``(U, s, Vt)`` with U (m x l), s (l,), Vt (l x n).
      k: target rank (static), ``1 <= k <= l``.
      residual: ``"auto"``, ``"exact"`` or ``"estimate"``.
      key: ``jax.random.key``, required when the residuals are estimated.
      norm_iters: power iterations per norm estimate (static).

    Example:
      >>> res = posterior_residuals(A, rsvd(key, A, 80, l=80, power_iters=1), 50)
      >>> residual_bound(res, s, side="right").bound.shape
      (50,)
    """
    op = as_operator(A)
    U, s_hat, Vt = _svd_parts("svd", svd)
    m, n = op.shape
    l = U.shape[1]
    if U.shape[0] != m or Vt.shape[1] != n:
        raise ValueError(f"svd factors U {U.shape}, Vt {Vt.shape} do not match A of shape {(m, n)}")
    k = V.check_int("k", k, low=1, high=l, high_desc=f"l = {l}, the rank of the approximation")
    if residual not in ("auto", "exact", "estimate"):
        raise ValueError(f"residual must be 'auto', 'exact' or 'estimate'; got {residual!r}")
    exact = (m * n <= _EXACT_RESIDUAL_MAX_ENTRIES) if residual == "auto" else residual == "exact"
    norm_iters = V.check_int("norm_iters", norm_iters, low=1)
    if exact:
        key = jax.random.key(0)  # unused
    elif key is None:
        raise ValueError("key is required when the residual norms are estimated "
                         "(residual='estimate', or 'auto' with m n > 2^22)")
    else:
        key = V.check_key(key)
    s_hat = _check_spectrum(s_hat, name="svd.s", allow_zero=True)
    dt = jnp.result_type(op.dtype, U.dtype, Vt.dtype)
    return _residuals_jit(op, U.astype(dt), s_hat.astype(V.real_dtype(dt)), Vt.astype(dt),
                          key, k, bool(exact), norm_iters)


def _check_residuals(res: Any) -> Residuals:
    if not isinstance(res, Residuals):
        raise TypeError(f"res must be the Residuals returned by posterior_residuals; got "
                        f"{type(res).__name__}")
    return res


@functools.partial(_jit.jit, static_argnames=("side",))
def _residual_bound_jit(res, s, side):
    k = res.left_svals.shape[0]
    svals = res.left_svals if side == "left" else res.right_svals
    nrm = res.left_norm if side == "left" else res.right_norm
    sig = s[:k]
    term1 = svals[::-1] / sig[k - 1]        # sigma_{k-i+1}(E) / sigma_k
    term2 = nrm / sig                        # ||E||_2 / sigma_i
    return ResidualBound(jnp.fmin(term1, term2), term1, term2)


def residual_bound(res: Residuals, s: Any, *, side: str = "left") -> ResidualBound:
    """Posterior residual-based bound, Thm ``thm:with_oversmp_computable_det``.

    For orthonormal ``U_l``, ``V_l`` with ranges in the column/row space of A and i <= k
    (ascending i):

        sin angle_i(U_k, U_hat_l) <= min{ sigma_{k-i+1}(E_U) / sigma_k,  ||E_U||_2 / sigma_i },
        sin angle_i(V_k, V_hat_l) <= min{ sigma_{k-i+1}(E_V) / sigma_k,  ||E_V||_2 / sigma_i },

    ``E_U = (I - U_l U_l^H) A``, ``E_V = A (I - V_l V_l^H)``. Deterministic; with the
    approximate spectrum (:func:`padded_spectrum`) it is an estimate of the bound. When the
    residual spectra were only estimated the first term is NaN and ``bound`` is the second.

    Args:
      res: :func:`posterior_residuals` output.
      s: spectrum (at least k values; ``sigma_1..sigma_k`` are used).
      side: ``"left"`` or ``"right"``.
    """
    res = _check_residuals(res)
    side = _check_side(side)
    k = res.left_svals.shape[0]
    s = _check_spectrum(s, min_len=k, len_desc=f"sigma_1..sigma_k, k = {k}")
    return _residual_bound_jit(res, s.astype(res.s_hat.dtype), side)


@_jit.jit
def _gap_bounds_jit(res, s):
    k = res.left_svals.shape[0]
    sk = s[k - 1]
    sh = res.s_hat[k]
    e33, e32, X2, XF = res.E33_2, res.E32_2, res.E3_2, res.E3_F
    valid_Gamma = sk > e33
    valid_gamma = sk > sh
    # (sk^2 - x^2)/sk = (sk - x)(1 + x/sk) and (sk^2 - x^2)/x = (sk - x)(sk/x + 1): no squares,
    # so no overflow/underflow at any scale of A (and no cancellation of squares)
    gamma1, gamma2 = (sk - sh) * (1 + sh / sk), (sk - sh) * (sk / sh + 1)
    Gamma1, Gamma2 = (sk - e33) * (1 + e33 / sk), (sk - e33) * (sk / e33 + 1)
    # i-th smallest sine <-> i-th largest singular value in the proof: factor sigma_k / sigma_i
    ratio = sk / s[:k]
    nan = jnp.asarray(jnp.nan, s.dtype)

    def gb(aw, sp, fr, ok):
        return GapBound(jnp.where(ok, aw, nan), jnp.where(ok, sp, nan), jnp.where(ok, fr, nan))

    both = valid_Gamma & valid_gamma
    Uk_Ul = gb(ratio * X2 / Gamma1, X2 / Gamma1, XF / Gamma1, valid_Gamma)
    Vk_Vl = gb(ratio * X2 / Gamma2, X2 / Gamma2, XF / Gamma2, valid_Gamma)
    one = jnp.ones((), s.dtype)
    fU = jnp.hypot(one, e32 / gamma2)
    Uk_Uk = gb(X2 / Gamma1 * jnp.hypot(one, ratio * e32 / gamma2), X2 / Gamma1 * fU,
               XF / Gamma1 * fU, both)
    fV = jnp.hypot(e32 / gamma1, e33 / sk)
    Vk_Vk = gb(X2 / Gamma1 * jnp.hypot(ratio * e32 / gamma1, e33 / sk),
               X2 / Gamma1 * fV, XF / Gamma1 * fV, both)
    return SeparateGapBounds(Uk_Ul, Vk_Vl, Uk_Uk, Vk_Vk, gamma1, gamma2, Gamma1, Gamma2,
                             valid_Gamma, valid_gamma, both)


def gap_bounds(res: Residuals, s: Any) -> SeparateGapBounds:
    """All forms of Thm ``thm:separate_gap_bounds`` (after Nakatsukasa 2020, Thm 6.1).

    With ``sigma_k`` from ``s``, ``s_hat_{k+1}`` from the approximation and the residual
    blocks of :class:`Residuals`, assuming ``sigma_k > s_hat_{k+1}`` and
    ``sigma_k > ||E33||_2``, the gaps are
    ``gamma1 = (sigma_k^2 - s_hat_{k+1}^2)/sigma_k``, ``gamma2 = (...)/s_hat_{k+1}``,
    ``Gamma1 = (sigma_k^2 - ||E33||^2)/sigma_k``, ``Gamma2 = (...)/||E33||``, and for
    ``xi in {2, F}`` (norms of the vector of sines)

    * ``Uk_Ul``: ``||sin angle(U_k, U_l)||_xi <= ||[E31,E32]||_xi / Gamma1``
      (``eq:separate_gap_Uk_Ul``),
    * ``Vk_Vl``: ``... <= ||[E31,E32]||_xi / Gamma2`` (``eq:separate_gap_Vk_Vl``),
    * ``Uk_Uk``: ``... <= ||[E31,E32]||_xi / Gamma1 sqrt(1 + ||E32||^2/gamma2^2)``,
    * ``Vk_Vk``: ``... <= ||[E31,E32]||_xi / Gamma1
      sqrt(||E32||^2/gamma1^2 + ||E33||^2/sigma_k^2)``

    and the angle-wise forms (``eq:separate_gap_*_anglewise``), which this function returns
    for the **i-th smallest** sine (ascending, like every array in this module) as

    * ``Uk_Ul``: ``(sigma_k/sigma_i) ||[E31,E32]||_2 / Gamma1``, ``Vk_Vl``: ``... / Gamma2``,
    * ``Uk_Uk``: ``||[E31,E32]||_2/Gamma1 sqrt(1 + (sigma_k/sigma_i ||E32||_2/gamma2)^2)``,
    * ``Vk_Vk``: ``||[E31,E32]||_2/Gamma1
      sqrt((sigma_k/sigma_i ||E32||_2/gamma1)^2 + (||E33||_2/sigma_k)^2)``.

    (The thesis prints the factor as ``sigma_k/sigma_{k-i+1}``; its proof bounds the i-th
    *largest* singular value ``sigma_i(U~31) <= ||U~31 Sigma_k|| / sigma_{k-i+1}``, which in
    ascending order is the factor ``sigma_k/sigma_i`` used here. Read literally with ascending
    angles the printed factor would bound the largest angle by ``sigma_k/sigma_1`` times the
    norm bound, which is not implied by the proof.)

    Forms whose conditions fail are NaN and the flags say which condition failed; a valid
    bound above 1 is returned as is (trivially true), never clamped. The gaps are formed as
    ``(sigma_k - x)(1 + x/sigma_k)`` etc., never from squares, so the bounds are the same
    for A and ``c A`` at any scale c.

    Args:
      res: :func:`posterior_residuals` output (needs ``l > k``: ``s_hat_{k+1}``).
      s: spectrum (at least k values).
    """
    res = _check_residuals(res)
    k = res.left_svals.shape[0]
    if res.s_hat.shape[0] <= k:
        raise ValueError(f"Thm 3.4 needs s_hat_(k+1): the approximation has rank l = "
                         f"{res.s_hat.shape[0]} <= k = {k}; use l > k")
    s = _check_spectrum(s, min_len=k, len_desc=f"sigma_1..sigma_k, k = {k}")
    return _gap_bounds_jit(res, s.astype(res.s_hat.dtype))


# ======================================================================================
# 5. Saibaba (2018) Thm 1 with the oracle V
# ======================================================================================
@functools.partial(_jit.jit, static_argnames=("k",))
def _saibaba_jit(s, Vr, Omega, power, k):
    # rho is invariant to scaling V or Omega: rescale both by powers of two (exact) first
    Vr, Omega = _fp.normalize(Vr)[0], _fp.normalize(Omega)[0]
    X = _mm(Vr.conj().T, Omega)                       # V^H Omega (r x l)
    O1, O2 = X[:k], X[k:]
    P, S, Zh = jnp.linalg.svd(O1, full_matrices=False)  # O1^+ = Z diag(1/S) P^H
    rho = jnp.linalg.svd(_mm(O2, Zh.conj().T) / S[None, :], compute_uv=False)[0]
    logs = _fp.log_abs(s)
    x = power * (logs[:k] - logs[k]) - 2 * jnp.log(rho).astype(s.dtype)
    return jnp.exp(-0.5 * jnp.logaddexp(jnp.zeros((), s.dtype), x))


def saibaba_bound(s: Any, k: int, power_iters: int, V_: Any, Omega: Any, *,
                  side: str = "left") -> Float[Array, " k"]:
    """Saibaba (2018) Thm 1 with the oracle right singular vectors.

    Thesis ``remark:prior_bound_compare_exist``.

    With ``Omega_1 = V_k^H Omega``, ``Omega_2 = V_{r\\k}^H Omega`` (Omega the rSVD's own test
    matrix, :func:`rsvd_omega`),

        sin angle_i(U_k, U_hat_l)
            <= (1 + sigma_i^{4q+2} / (sigma_{k+1}^{4q+2} ||Omega_2 Omega_1^+||_2^2))^(-1/2)

    (``eq:saibaba2018_thm1_left``; right side ``4q+4``, ``eq:saibaba2018_thm1_right``;
    ``q = power_iters``). Uses ``sigma_{k+1}`` as in the paper (the authors' experiment code
    used ``sigma_{k+2}`` by an off-by-one). Evaluated in the log domain from
    ``log sigma_i - log sigma_{k+1}`` (exact for subnormal values too) with V and Omega rescaled
    by powers of two first, so it depends only on ratios and never overflows for any q or
    scale; a bound below the dtype's smallest normal number is returned as 0.

    Args:
      s: spectrum (length r, true or padded approximate).
      k: target rank (static), ``1 <= k < r``.
      power_iters: power iterations q (Python int), ``power_iters >= 0``.
      V_: (n, r) true right singular vectors (all r of them, matching ``s``).
      Omega: (n, l) test matrix, ``l >= k`` (``Omega_1`` must have full row rank).
      side: ``"left"`` or ``"right"``.
    """
    side = _check_side(side)
    s = _check_spectrum(s)
    r = s.shape[0]
    k = V.check_int("k", k, low=1, high=r - 1, high_desc=f"r - 1, r = len(s) = {r}")
    q = V.check_int("power_iters", power_iters, low=0)
    V_ = _check_matrix("V", V_)
    Omega = _check_matrix("Omega", Omega)
    if V_.shape[1] != r:
        raise ValueError(f"V must hold the r = len(s) = {r} right singular vectors as columns; "
                         f"got shape {V_.shape}")
    if Omega.shape[0] != V_.shape[0]:
        raise ValueError(f"Omega must have n = {V_.shape[0]} rows (like V); got {Omega.shape}")
    if Omega.shape[1] < k:
        raise ValueError(f"Omega must have l >= k = {k} columns; got {Omega.shape[1]}")
    dt = jnp.result_type(V_.dtype, Omega.dtype)
    rdt = V.real_dtype(dt)
    power = jnp.asarray(4 * q + (2 if side == "left" else 4), rdt)
    return _saibaba_jit(s.astype(rdt), V_.astype(dt), Omega.astype(dt), power, k)


# ======================================================================================
# 7. Budget planner (Sec. subsec:balance_oversampling_power_iterations_example)
# ======================================================================================
def _planner_spectrum(k: int, spectrum: Any, gap: Any, r: Any) -> np.ndarray:
    if (spectrum is None) == (gap is None):
        raise ValueError("give exactly one of spectrum (the singular values) or gap "
                         "(sigma_1/sigma_{k+1} of a step spectrum, with r)")
    if spectrum is not None:
        s = np.asarray(spectrum, np.float64)  # host-side, float64 regardless of jax_enable_x64
        if s.ndim != 1:
            raise ValueError(f"spectrum must be 1-D; got shape {s.shape}")
        _spectrum_values("spectrum", s, False)
        if r is not None and int(r) != s.shape[0]:
            raise ValueError(f"r = {r} does not match len(spectrum) = {s.shape[0]}")
    else:
        g = _check_positive_float("gap", gap)
        if g < 1:
            raise ValueError(f"gap = sigma_1/sigma_(k+1) must be >= 1; got {gap}")
        if r is None:
            raise ValueError("r (the size/rank of A) is required with gap")
        r = V.check_int("r", r, low=k + 2)
        s = np.where(np.arange(1, r + 1) <= k, 1.0, 1.0 / g)
    if s.shape[0] < k + 2:
        raise ValueError(f"the spectrum needs at least k + 2 = {k + 2} values; got {s.shape[0]}")
    return s


def _plan_table(k, num_matvecs, s, gamma, side, reduce, constants="thesis"):
    """``(qs, ls, phis, bounds, log_phis)`` over the admissible configurations; ``log_phis``
    is computed in the log domain (``log mean exp`` / ``max`` of the log bounds), so the
    comparison stays exact where the bounds underflow float64 (large gaps or q)."""
    r = s.shape[0]
    qs, ls, phis, bounds, log_phis = [], [], [], [], []
    q = 0
    while True:
        l = num_matvecs // (2 * q + 1)
        if l <= k or (2 * q + 1) * gamma ** 2 * k > num_matvecs:
            break
        if l >= gamma ** 2 * k and l < r:
            power = 4 * q + (2 if side == "left" else 4)
            log_b, vacuous = _sa_log_bound(np, s, k, l, float(power), gamma, False,
                                           constants)
            if vacuous:
                log_phi = math.nan
            elif reduce == "mean":
                m = float(np.max(log_b))
                log_phi = m + math.log(float(np.mean(np.exp(log_b - m))))
            else:
                log_phi = float(np.max(log_b))
            qs.append(q)
            ls.append(l)
            bounds.append(np.full(k, np.nan) if vacuous else np.exp(log_b))
            log_phis.append(log_phi)
            phis.append(math.exp(log_phi))
        q += 1
    return (np.array(qs, int), np.array(ls, int), np.array(phis),
            np.array(bounds).reshape(len(qs), k), np.array(log_phis))


def _check_planner_args(k, num_matvecs, gamma, side, reduce, constants):
    _check_constants(constants)
    k = V.check_int("k", k, low=1)
    num_matvecs = V.check_int("num_matvecs", num_matvecs, low=1)
    gamma = _check_positive_float("gamma", gamma)
    _check_side(side)
    if reduce not in ("mean", "max"):
        raise ValueError(f"reduce must be 'mean' or 'max'; got {reduce!r}")
    return k, num_matvecs, gamma


def phi_gamma(power_iters: int, k: int, num_matvecs: int, *, spectrum: Any = None,
              gap: Any = None, r: int | None = None, gamma: float = 1.0, side: str = "left",
              reduce: str = "mean", constants: str = "thesis") -> float:
    """The budget criterion ``phi_gamma(q)`` (Eq. ``eq:space_agnostic_example_rhs``),
    ``q = power_iters``.

    The Thm 3.1 upper bound for ``l = floor(N / (2q + 1))`` (a budget of
    ``N = num_matvecs = alpha k`` products with A) with ``eps1 = gamma sqrt(k/l)``,
    ``eps2 = gamma sqrt(l/(r - k))``. For the thesis' step spectrum (``gap`` and ``r``) it is

        phi_gamma(q) = (1 + (1 - eps1)/(1 + eps2) l/(r - k) gap^{4q+2})^(-1/2)

    (the same for every i <= k); for a general ``spectrum`` the k bounds are reduced by
    ``reduce`` (``"mean"`` or ``"max"``). With ``constants="calibrated"`` the Thm 3.1 bound
    uses the calibrated eps1, eps2 of :func:`space_agnostic_bound` instead (gamma then only
    sets the admissible q, see :func:`plan_budget`). Returns NaN for inadmissible q (see
    :func:`plan_budget`). Host-side numpy, float64, evaluated in the log domain (any gap and
    q); a criterion below float64's smallest normal number (~1e-308, e.g. gap 1e10 with
    q = 10) is returned as 0.0 -- :func:`plan_budget` compares ``log phi`` and is not affected.
    """
    k, num_matvecs, gamma = _check_planner_args(k, num_matvecs, gamma, side, reduce,
                                                constants)
    q = V.check_int("power_iters", power_iters, low=0)
    s = _planner_spectrum(k, spectrum, gap, r)
    qs, _, phis, _, _ = _plan_table(k, num_matvecs, s, gamma, side, reduce, constants)
    hit = np.nonzero(qs == q)[0]
    return float(phis[hit[0]]) if hit.size else float("nan")


def plan_budget(k: int, num_matvecs: int, *, spectrum: Any = None, gap: Any = None,
                r: int | None = None, gamma: float = 1.0, side: str = "left",
                reduce: str = "mean", constants: str = "thesis") -> BudgetPlan:
    """Recommend ``(l, power_iters)`` for a budget of ``N`` matrix-vector products (thesis
    Example in ``subsec:balance_oversampling_power_iterations_example``; ``q = power_iters``).

    Admissible configurations: ``l = floor(N / (2q + 1))`` with ``(2q + 1) <= N/(gamma^2 k)``,
    ``l >= gamma^2 k`` and ``k < l < r`` (Table ``tab:space_agnostic_example_parameter_summary``);
    the recommendation minimises :func:`phi_gamma` in the log domain (``BudgetPlan.log_phi``,
    so it is right even where ``phi`` underflows to 0; smallest q on ties). With a small gap
    (e.g. 1.01) oversampling wins (q = 0); with a large gap (e.g. 1.5) power iterations win
    (the largest admissible q).

    Args:
      k: target rank.
      num_matvecs: budget N (e.g. ``alpha * k``).
      spectrum: singular values (length r), or
      gap: ``sigma_1/sigma_{k+1}`` of the step spectrum, with ``r`` (``r = (1 + beta) k``).
      gamma: oversampling constant (``eps1 = gamma sqrt(k/l)``, ``eps2 = gamma sqrt(l/(r-k))``
        with the thesis' constants; with the calibrated ones it only sets the admissible
        configurations, ``l >= gamma^2 k`` and ``(2q + 1) gamma^2 k <= N``).
      side: ``"left"`` (exponent 4q+2) or ``"right"`` (4q+4).
      reduce: how the k bounds of a general spectrum are summarised.
      constants: ``"thesis"`` (default, the Example's ``phi_gamma``) or ``"calibrated"``
        (the calibrated eps1, eps2 of :func:`space_agnostic_bound`: a bound that holds in
        >= 99% of the draws, so the recommendation compares guaranteed rather than
        order-of-magnitude bounds).

    Returns:
      :class:`BudgetPlan` ``(power_iters, l, power_iters_grid, l_grid, phi, bounds,
      log_phi)``.

    Raises:
      ValueError: no admissible configuration (``N < gamma^2 k`` or ``l >= r`` for every q),
        bad spectrum/gap.

    Example:
      >>> plan_budget(10, 16 * 10, gap=1.5, r=330, gamma=1.05).power_iters
      6
    """
    k, num_matvecs, gamma = _check_planner_args(k, num_matvecs, gamma, side, reduce,
                                                constants)
    s = _planner_spectrum(k, spectrum, gap, r)
    qs, ls, phis, bounds, log_phis = _plan_table(k, num_matvecs, s, gamma, side, reduce,
                                                 constants)
    if qs.size == 0:
        raise ValueError(f"no admissible (l, power_iters) for num_matvecs = {num_matvecs}, k = {k}, "
                         f"gamma = {gamma}, r = {s.shape[0]}: need k < l = floor(N/(2q+1)) < r "
                         f"and l >= gamma^2 k")
    if np.all(np.isnan(log_phis)):  # only l = gamma^2 k admissible: eps1 = 1, vacuous bound
        raise ValueError(f"every admissible (l, power_iters) has a vacuous bound (eps1 = gamma sqrt(k/l) "
                         f">= 1) for num_matvecs = {num_matvecs}, k = {k}, gamma = {gamma}")
    i = int(np.nanargmin(log_phis))
    return BudgetPlan(int(qs[i]), int(ls[i]), qs, ls, phis, bounds, log_phis)


# ======================================================================================
# Everything for one rSVD run (the chapter's experiments)
# ======================================================================================
def angle_report(key: Any, A: Any, k: int, l: int, power_iters: int, *,
                 true_svd: Any = None, num_trials: int = 3, eps: float = 1.0,
                 lower_eps: float = 2.0, sketch: Any = "gaussian", stable: bool = True,
                 residual: str = "auto", estimate_options: dict | None = None,
                 constants: str = "thesis") -> AngleReport:
    """Run a rank-l rSVD of A with ``power_iters`` (q in the thesis) power iterations and
    compute every Chapter 3 quantity.

    For both sides (U: ``angle(U_k, U_hat_l)``, V: ``angle(V_k, V_hat_l)``) and both the true
    spectrum ``sigma`` and the approximate one ``sigma_hat`` (:func:`padded_spectrum` of the
    rSVD's l values; the thesis' lines and dashes): the Thm 3.1 upper bound (``eps``) and
    lower bound (``lower_eps``, the appendix's 2), the Prop 3.2 estimate (``num_trials``
    trials), the Thm 3.3 bound, the angle-wise Thm 3.4 bound (full Thm 3.4 in ``.gap``) and
    Saibaba's Thm 1 with the oracle V and the rSVD's own Omega; plus the true sines.

    Keys: ``key`` is split into (rSVD, estimate with sigma, estimate with sigma_hat, norm
    estimates); both sides of one estimate share their draws, as both sides of one rSVD share
    Omega.

    Args:
      key: ``jax.random.key``.
      A: matrix or operator (m x n); densified for the true SVD unless ``true_svd`` is given.
      k, l, power_iters: target rank, sketch size, power iterations (static),
        ``1 <= k < l < r`` and ``l <= r - k`` (the estimator's condition).
      true_svd: ``(U, s, Vt)`` of A truncated to its rank r (default :func:`exact_svd`).
      num_trials: estimator trials N (thesis: 3).
      eps, lower_eps: distortion constants of the Thm 3.1 upper and lower bounds.
      sketch, stable: passed to :func:`rdr_jax.rsvd` (``sketch``: a name or a choice object
        such as ``rdr_jax.sketching.SparseSign(zeta=4)``).
      residual: ``"auto"``/``"exact"``/``"estimate"``, see :func:`posterior_residuals`.
      estimate_options: extra keyword arguments for :func:`unbiased_estimate` (e.g.
        ``{"method": "qr"}``).
      constants: ``"thesis"`` (default) or ``"calibrated"``: the Thm 3.1 constants of both
        prior bounds (:func:`space_agnostic_bound`); with ``"calibrated"`` the quantiles fix
        the constants, so ``eps`` and ``lower_eps`` must be left at their defaults.

    Raises:
      ValueError: bad arguments (see the parts), or a spectrum whose powers the estimator
        cannot represent in A's dtype (:func:`unbiased_estimate`; use float64).

    Returns:
      :class:`AngleReport`.

    Example:
      >>> A = matrices.with_spectrum(jax.random.key(0), 500, 500,
      ...                            matrices.exponential_decay(500))
      >>> rep = angle_report(jax.random.key(1), A, 50, 200, 0)
      >>> bool(jnp.all(rep.sigma.left.residual.bound >= rep.true.Uk_Ul))
      True
    """
    key = V.check_key(key)
    op = as_operator(A)
    m, n = op.shape
    k = V.check_int("k", k, low=1)
    l = V.check_int("l", l, low=k + 1, high=min(m, n), high_desc=f"min(m, n) for A {(m, n)}")
    q = V.check_int("power_iters", power_iters, low=0)
    sk = _check_sketch(sketch)
    tsvd = exact_svd(op) if true_svd is None else true_svd
    Ut, s_true, Vtt = _svd_parts("true_svd", tsvd)
    if Ut.shape[0] != m or Vtt.shape[1] != n:
        raise ValueError(f"true_svd does not match A of shape {(m, n)}")
    s_true = _check_spectrum(s_true, name="true_svd.s")
    r = s_true.shape[0]
    if not l < r:
        raise ValueError(f"need l < r = rank(A) = {r}; got l = {l}")
    if l > r - k:
        raise ValueError(f"need l <= r - k = {r - k} (r = rank(A) = {r}) for the estimator")
    constants = _check_constants(constants)
    if constants == "calibrated":
        if (eps, lower_eps) != (1.0, 2.0):
            raise ValueError(f"eps and lower_eps scale the thesis' constants only; with "
                             f"constants='calibrated' leave them at 1.0 and 2.0, got "
                             f"eps = {eps!r}, lower_eps = {lower_eps!r}")
        eps = lower_eps = 1.0
    k_svd, k_est, k_est_hat, k_norm = jax.random.split(key, 4)
    svd = rsvd(k_svd, op, l, l=l, power_iters=q, sketch=sk, stable=stable)
    rdt = svd.s.dtype
    s_true = s_true.astype(rdt)
    s_hat = padded_spectrum(svd.s, r)
    true = true_angles(RSVD(Ut, s_true, Vtt), svd, k)
    res = posterior_residuals(op, svd, k, residual=residual, key=k_norm)
    Omega = rsvd_omega(k_svd, op, l, sketch=sk)
    Vr = Vtt.conj().T
    est_opts = dict(estimate_options or {})

    def spectrum_bounds(s, kest):
        gb = gap_bounds(res, s)
        sides = []
        for side in _SIDES:
            sides.append(SideBounds(
                prior_upper=space_agnostic_bound(s, k, l, q, side=side, eps=eps,
                                                 constants=constants),
                prior_lower=space_agnostic_bound(s, k, l, q, side=side, eps=lower_eps,
                                                 lower=True, constants=constants),
                estimate=unbiased_estimate(kest, s, k, l, q, side=side, num_trials=num_trials,
                                           **est_opts),
                residual=residual_bound(res, s, side=side),
                gap=(gb.Uk_Ul if side == "left" else gb.Vk_Vl).anglewise,
                saibaba=saibaba_bound(s, k, q, Vr, Omega, side=side),
            ))
        return SpectrumBounds(sides[0], sides[1], gb)

    return AngleReport(svd, s_true, s_hat, true, res, spectrum_bounds(s_true, k_est),
                       spectrum_bounds(s_hat, k_est_hat))
