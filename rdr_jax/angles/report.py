"""Every Chapter 3 quantity for one randomized SVD: the true sines and each prior/posterior
bound and estimate, with the true and the approximate spectrum (the chapter's figures)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
from jaxtyping import Array, Float

from rdr_jax._src import validation as V
from rdr_jax.angles._common import (SUBSPACES, check_sketch,
                                    check_spectrum, svd_parts)
from rdr_jax.angles.estimator import Estimate, padded_spectrum, unbiased_estimate
from rdr_jax.angles.exact import TrueAngles, exact_svd, true_angles
from rdr_jax.angles.options import ReportOptions
from rdr_jax.angles.posterior import (ResidualBound, Residuals, SeparateGapBounds, gap_bounds,
                                      posterior_residuals, residual_bound)
from rdr_jax.angles.prior import rsvd_omega, saibaba_bound, space_agnostic_bound
from rdr_jax.operators import as_operator
from rdr_jax.randomized_svd import RSVD, rsvd

__all__ = ["angle_report", "AngleReport", "SpectrumBounds", "SubspaceBounds"]


class SubspaceBounds(NamedTuple):
    """Every bound and estimate for one singular subspace (U: ``angle(U_k, U_hat_l)``, or
    V) and one spectrum; ``gap`` is the angle-wise Thm 3.4 bound (``Uk_Ul`` or ``Vk_Vl``)."""

    prior_upper: Float[Array, " k"]
    prior_lower: Float[Array, " k"]
    estimate: Estimate
    residual: ResidualBound
    gap: Float[Array, " k"]
    saibaba: Float[Array, " k"]


class SpectrumBounds(NamedTuple):
    """``left`` and ``right`` :class:`SubspaceBounds` and the full Thm 3.4 result ``gap``
    for one spectrum."""

    left: SubspaceBounds
    right: SubspaceBounds
    gap: SeparateGapBounds


class AngleReport(NamedTuple):
    """Everything :func:`angle_report` computes: the rank-l ``svd``, the true ``spectrum``
    (r,) and the ``approx_spectrum`` (r,, padded), the ``true`` sines, the ``residuals`` and
    the bounds with the true (``sigma``) and approximate (``sigma_hat``) spectrum."""

    svd: RSVD
    spectrum: Float[Array, " r"]
    approx_spectrum: Float[Array, " r"]
    true: TrueAngles
    residuals: Residuals
    sigma: SpectrumBounds
    sigma_hat: SpectrumBounds


def angle_report(key: Any, A: Any, k: int, l: int, power_iters: int, *,
                 true_svd: Any = None, num_trials: int = 3,
                 options: ReportOptions = ReportOptions()) -> AngleReport:
    """Run a rank-l rSVD of A and compute every Chapter 3 quantity for both subspaces and
    both spectra: Thm 3.1 upper (``eps``) and lower (``lower_eps``) bounds, the Prop 3.2
    estimate, Thms 3.3 and 3.4, Saibaba's Thm 1 with the rSVD's own Omega, and the true
    sines. One call per panel of the thesis' figures (Section 3.6.2).

    Args:
      key: ``jax.random.key``, split into (rSVD, estimate with sigma, estimate with
        sigma_hat, norm estimates).
      A: matrix or operator (m x n).
      k, l, power_iters: target rank, sketch size, power iterations;
        ``1 <= k < l < r`` and ``l <= r - k``.
      true_svd: ``(U, s, Vt)`` of A truncated to its rank r (default
        :func:`rdr_jax.angles.exact_svd`).
      num_trials: estimator trials N.
      options: :class:`rdr_jax.angles.options.ReportOptions`: ``eps``, ``lower_eps`` (the
        thesis' constants of the upper and lower Thm 3.1 bounds), ``sketch``, ``stable``
        (for :func:`rdr_jax.rsvd`), ``residual``, ``estimate`` (an
        :class:`~rdr_jax.angles.options.EstimateOptions`) and ``constants``.

    Returns:
      :class:`AngleReport`.
    """
    key = V.check_key(key)
    op = as_operator(A)
    m, n = op.shape
    k = V.check_int("k", k, low=1)
    l = V.check_int("l", l, low=k + 1, high=min(m, n), high_desc=f"min(m, n) for A {(m, n)}")
    q = V.check_int("power_iters", power_iters, low=0)
    if not isinstance(options, ReportOptions):
        raise TypeError(f"options must be a ReportOptions; got {type(options).__name__}")
    sk = check_sketch(options.sketch)
    tsvd = exact_svd(op) if true_svd is None else true_svd
    Ut, s_true, Vtt = svd_parts("true_svd", tsvd)
    if Ut.shape[0] != m or Vtt.shape[1] != n:
        raise ValueError(f"true_svd does not match A of shape {(m, n)}")
    s_true = check_spectrum(s_true, name="true_svd.s")
    r = s_true.shape[0]
    if not l < r:
        raise ValueError(f"need l < r = rank(A) = {r}; got l = {l}")
    if l > r - k:
        raise ValueError(f"need l <= r - k = {r - k} (r = rank(A) = {r}) for the estimator")
    eps, lower_eps, constants = options.eps, options.lower_eps, options.constants
    if constants == "calibrated":      # ReportOptions checked eps = 1.0, lower_eps = 2.0
        eps = lower_eps = 1.0
    k_svd, k_est, k_est_hat, k_norm = jax.random.split(key, 4)
    svd = rsvd(k_svd, op, l, oversample=0, power_iters=q, sketch=sk, stable=options.stable)
    rdt = svd.s.dtype
    s_true = s_true.astype(rdt)
    s_hat = padded_spectrum(svd.s, r)
    true = true_angles(RSVD(Ut, s_true, Vtt), svd, k)
    res = posterior_residuals(op, svd, k, residual=options.residual, key=k_norm)
    Omega = rsvd_omega(k_svd, op, l, sketch=sk)
    Vr = Vtt.conj().T

    def spectrum_bounds(s, kest):
        gb = gap_bounds(res, s)
        out = []
        for sub in SUBSPACES:
            out.append(SubspaceBounds(
                prior_upper=space_agnostic_bound(s, k, l, q, subspace=sub, eps=eps,
                                                 constants=constants),
                prior_lower=space_agnostic_bound(s, k, l, q, subspace=sub, eps=lower_eps,
                                                 lower=True, constants=constants),
                estimate=unbiased_estimate(kest, s, k, l, q, subspace=sub,
                                           num_trials=num_trials, options=options.estimate),
                residual=residual_bound(res, s, subspace=sub),
                gap=(gb.Uk_Ul if sub == "left" else gb.Vk_Vl).anglewise,
                saibaba=saibaba_bound(s, k, q, Vr, Omega, subspace=sub),
            ))
        return SpectrumBounds(out[0], out[1], gb)

    return AngleReport(svd, s_true, s_hat, true, res, spectrum_bounds(s_true, k_est),
                       spectrum_bounds(s_hat, k_est_hat))
