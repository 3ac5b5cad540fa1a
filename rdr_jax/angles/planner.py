"""The (l, power_iters) budget planner (thesis Ch. 3,
Section 3.6.3): how to spend a budget of
products with A on oversampling or on power iterations. Host-side numpy, float64."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from rdr_jax._src import validation as V
from rdr_jax.angles._common import (check_positive_float,
                                    spectrum_values, thm31_log_bound)
from rdr_jax.angles.options import PlanOptions

__all__ = ["phi_gamma", "plan_budget", "BudgetPlan"]


class BudgetPlan(NamedTuple):
    """The recommended ``(power_iters, l)`` and the table behind it: the admissible
    ``power_iters_grid``/``l_grid``, the criterion ``phi`` for each, the Thm 3.1 ``bounds``
    (len(grid), k) and ``log_phi`` (the log-domain values the recommendation compares)."""

    power_iters: int
    l: int
    power_iters_grid: np.ndarray
    l_grid: np.ndarray
    phi: np.ndarray
    bounds: np.ndarray
    log_phi: np.ndarray


def _planner_spectrum(k: int, spectrum: Any, gap: Any, r: Any) -> np.ndarray:
    if (spectrum is None) == (gap is None):
        raise ValueError("give exactly one of spectrum (the singular values) or gap "
                         "(sigma_1/sigma_{k+1} of a step spectrum, with r)")
    if spectrum is not None:
        s = np.asarray(spectrum, np.float64)  # host-side, float64 regardless of jax_enable_x64
        if s.ndim != 1:
            raise ValueError(f"spectrum must be 1-D; got shape {s.shape}")
        spectrum_values("spectrum", s, False)
        if r is not None and int(r) != s.shape[0]:
            raise ValueError(f"r = {r} does not match len(spectrum) = {s.shape[0]}")
    else:
        g = check_positive_float("gap", gap)
        if g < 1:
            raise ValueError(f"gap = sigma_1/sigma_(k+1) must be >= 1; got {gap}")
        if r is None:
            raise ValueError("r (the size/rank of A) is required with gap")
        r = V.check_int("r", r, low=k + 2)
        s = np.where(np.arange(1, r + 1) <= k, 1.0, 1.0 / g)
    if s.shape[0] < k + 2:
        raise ValueError(f"the spectrum needs at least k + 2 = {k + 2} values; got {s.shape[0]}")
    return s


def _plan_table(k, budget, s, gamma, subspace, reduce, constants="thesis"):
    """``(qs, ls, phis, bounds, log_phis)`` over the admissible configurations."""
    r = s.shape[0]
    qs, ls, phis, bounds, log_phis = [], [], [], [], []
    q = 0
    while True:
        l = budget // (2 * q + 1)
        if l <= k or (2 * q + 1) * gamma ** 2 * k > budget:
            break
        if l >= gamma ** 2 * k and l < r:
            exponent = 4 * q + (2 if subspace == "left" else 4)
            log_b, vacuous = thm31_log_bound(np, s, k, l, float(exponent), gamma, False,
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


def _check_planner_args(k, budget, gamma, options):
    if not isinstance(options, PlanOptions):
        raise TypeError(f"options must be a PlanOptions; got {type(options).__name__}")
    k = V.check_int("k", k, low=1)
    budget = V.check_int("matvec_budget", budget, low=1)
    gamma = check_positive_float("gamma", gamma)
    return k, budget, gamma, options.subspace, options.reduce, options.constants


def phi_gamma(power_iters: int, k: int, matvec_budget: int, *, spectrum: Any = None,
              gap: Any = None, r: int | None = None, gamma: float = 1.0,
              options: PlanOptions = PlanOptions()) -> float:
    """The planner's criterion ``phi_gamma(q)``: the Thm 3.1 upper bound at
    ``l = floor(N / (2q + 1))`` with ``eps1 = gamma sqrt(k/l)``, ``eps2 = gamma sqrt(l/(r-k))``,
    reduced over i by ``reduce``. Thesis Eq. (3.24).

    Args:
      power_iters: q, ``>= 0``.
      k, matvec_budget, spectrum, gap, r, gamma, options: as for :func:`plan_budget`.

    Returns:
      The criterion (float; NaN for an inadmissible q, 0.0 below float64's range).
    """
    k, matvec_budget, gamma, subspace, reduce, constants = _check_planner_args(
        k, matvec_budget, gamma, options)
    q = V.check_int("power_iters", power_iters, low=0)
    s = _planner_spectrum(k, spectrum, gap, r)
    qs, _, phis, _, _ = _plan_table(k, matvec_budget, s, gamma, subspace, reduce, constants)
    hit = np.nonzero(qs == q)[0]
    return float(phis[hit[0]]) if hit.size else float("nan")


def plan_budget(k: int, matvec_budget: int, *, spectrum: Any = None, gap: Any = None,
                r: int | None = None, gamma: float = 1.0,
                options: PlanOptions = PlanOptions()) -> BudgetPlan:
    """Recommend ``(l, power_iters)`` for a budget of N products with A: the admissible
    ``l = floor(N / (2q + 1))`` (``gamma^2 k <= l``, ``k < l < r``) that minimises
    :func:`phi_gamma`. With a small gap oversampling wins, with a large one power
    iterations. Thesis Example in Section 3.6.3.

    Args:
      k: target rank.
      matvec_budget: N, the number of matrix-vector products with A to spend (``alpha k``
        in the thesis; formerly ``num_matvecs``). Not the number of test vectors: a
        configuration uses ``l = N / (2q + 1)`` of them.
      spectrum: the singular values (length r), or
      gap: ``sigma_1/sigma_{k+1}`` of a step spectrum, with ``r``.
      gamma: oversampling constant of ``eps1``, ``eps2`` and of the admissible l.
      options: :class:`rdr_jax.angles.options.PlanOptions` (``subspace``, ``reduce``,
        ``constants``; default ``"left"``, ``"mean"``, ``"thesis"``).

    Returns:
      :class:`BudgetPlan`.

    Raises:
      ValueError: no admissible configuration, or a bad spectrum/gap.

    Example:
      >>> plan_budget(10, 16 * 10, gap=1.5, r=330, gamma=1.05).power_iters
      6
    """
    k, matvec_budget, gamma, subspace, reduce, constants = _check_planner_args(
        k, matvec_budget, gamma, options)
    s = _planner_spectrum(k, spectrum, gap, r)
    qs, ls, phis, bounds, log_phis = _plan_table(k, matvec_budget, s, gamma, subspace, reduce,
                                                 constants)
    if qs.size == 0:
        raise ValueError(f"no admissible (l, power_iters) for matvec_budget = {matvec_budget}, "
                         f"k = {k}, gamma = {gamma}, r = {s.shape[0]}: need "
                         f"k < l = floor(N/(2q+1)) < r and l >= gamma^2 k")
    if np.all(np.isnan(log_phis)):  # only l = gamma^2 k admissible: eps1 = 1, vacuous bound
        raise ValueError(f"every admissible (l, power_iters) has a vacuous bound (eps1 = "
                         f"gamma sqrt(k/l) >= 1) for matvec_budget = {matvec_budget}, k = {k}, "
                         f"gamma = {gamma}")
    i = int(np.nanargmin(log_phis))
    return BudgetPlan(int(qs[i]), int(ls[i]), qs, ls, phis, bounds, log_phis)
