"""Canonical angles of randomized subspace approximations (thesis Chapter 3).

For ``A = U Sigma V^H`` and a rank-l randomized SVD with ``power_iters`` (q) power
iterations, the sines of the canonical angles between the leading rank-k singular subspaces
(``subspace="left"``: U, ``"right"``: V) and the computed ones:

* :mod:`rdr_jax.angles.exact` -- exact angles: :func:`canonical_angles` (scipy-compatible,
  sines or radians), :func:`true_angles`, :func:`exact_svd`;
* :mod:`rdr_jax.angles.prior` -- prior bounds from the spectrum: :func:`space_agnostic_bound`
  (Thm 3.1), :func:`space_agnostic_distortions`, :func:`saibaba_bound`, :func:`rsvd_omega`;
* :mod:`rdr_jax.angles.estimator` -- :func:`unbiased_estimate` (Prop 3.2),
  :func:`padded_spectrum`;
* :mod:`rdr_jax.angles.posterior` -- :func:`posterior_residuals`, then
  :func:`residual_bound` (Thm 3.3) and :func:`gap_bounds` (Thm 3.4);
* :mod:`rdr_jax.angles.planner` -- :func:`phi_gamma`, :func:`plan_budget`;
* :mod:`rdr_jax.angles.report` -- :func:`angle_report`: everything for one rSVD.

Sines are ascending; results depend only on ratios of singular values (any scale); vacuous
or invalid bounds are NaN, never clamped. Derivations and measurements: ``docs/angles.md``.
"""

from rdr_jax.angles.estimator import Estimate, padded_spectrum, unbiased_estimate
from rdr_jax.angles.exact import TrueAngles, canonical_angles, exact_svd, true_angles
from rdr_jax.angles.planner import BudgetPlan, phi_gamma, plan_budget
from rdr_jax.angles.options import EstimateOptions, PlanOptions, ReportOptions  # noqa: F401
from rdr_jax.angles.posterior import (GapBound, ResidualBound, Residuals, SeparateGapBounds,
                                      gap_bounds, posterior_residuals, residual_bound)
from rdr_jax.angles.prior import (Distortions, rsvd_omega, saibaba_bound, space_agnostic_bound,
                                  space_agnostic_distortions)
from rdr_jax.angles.report import AngleReport, SpectrumBounds, SubspaceBounds, angle_report

__all__ = [
    "canonical_angles", "true_angles", "exact_svd", "rsvd_omega",
    "space_agnostic_bound", "space_agnostic_distortions", "unbiased_estimate",
    "padded_spectrum",
    "posterior_residuals", "residual_bound", "gap_bounds", "saibaba_bound",
    "phi_gamma", "plan_budget", "angle_report",
    "TrueAngles", "Estimate", "Residuals", "ResidualBound", "GapBound", "SeparateGapBounds",
    "BudgetPlan", "Distortions", "SubspaceBounds", "SpectrumBounds", "AngleReport",
]
