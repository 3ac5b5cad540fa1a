"""Option objects of the Chapter 3 entry points (frozen, hashable, validated on construction):
:class:`EstimateOptions` (:func:`rdr_jax.angles.unbiased_estimate`), :class:`PlanOptions`
(:func:`rdr_jax.angles.plan_budget`, :func:`rdr_jax.angles.phi_gamma`) and
:class:`ReportOptions` (:func:`rdr_jax.angles.angle_report`). Release 0.3 moved these
keywords off the calls so that no public function takes more than 8 parameters."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional


from rdr_jax._src import validation as V
from rdr_jax.angles._common import check_constants, check_positive_float, check_sketch

__all__ = ["EstimateOptions", "PlanOptions", "ReportOptions"]

_ESTIMATE_METHODS = ("auto", "qr", "cholesky")


@dataclasses.dataclass(frozen=True)
class EstimateOptions:
    """How :func:`rdr_jax.angles.unbiased_estimate` runs its trials (Prop 3.2).

    Attributes:
      sketch: ``"gaussian"`` (unbiased for every A with the spectrum) or another sketch (a
        model with V = I); a name or a sketch object.
      method: ``"auto"`` (QR-accurate), ``"qr"`` or ``"cholesky"``: how ``W2^+`` is applied.
      mesh: a ``jax.sharding.Mesh`` to split the trials over (N a multiple of its size).
    """

    sketch: Any = "gaussian"
    method: str = "auto"
    mesh: Any = None

    def __post_init__(self):
        check_sketch(self.sketch)
        if self.method not in _ESTIMATE_METHODS:
            raise ValueError(f"method must be 'auto', 'qr' or 'cholesky'; got {self.method!r}")
        if self.mesh is not None:
            from jax.sharding import Mesh
            if not isinstance(self.mesh, Mesh):
                raise TypeError(f"mesh must be a jax.sharding.Mesh or None; got "
                                f"{type(self.mesh).__name__}")


@dataclasses.dataclass(frozen=True)
class PlanOptions:
    """The budget planner's criterion (thesis Eq. (3.24)).

    Attributes:
      subspace: ``"left"`` (U, exponent 4q+2) or ``"right"`` (V, 4q+4).
      reduce: ``"mean"`` or ``"max"`` over the k bounds of a general spectrum.
      constants: ``"thesis"`` or ``"calibrated"`` (see
        :func:`rdr_jax.angles.space_agnostic_bound`).
    """

    subspace: str = "left"
    reduce: str = "mean"
    constants: str = "thesis"

    def __post_init__(self):
        if self.subspace not in ("left", "right"):
            raise ValueError(f"subspace must be 'left' (U) or 'right' (V); got "
                             f"{self.subspace!r}")
        if self.reduce not in ("mean", "max"):
            raise ValueError(f"reduce must be 'mean' or 'max'; got {self.reduce!r}")
        check_constants(self.constants)


@dataclasses.dataclass(frozen=True)
class ReportOptions:
    """Everything :func:`rdr_jax.angles.angle_report` passes on besides the sizes.

    Attributes:
      eps, lower_eps: the thesis' constants of the upper and lower Thm 3.1 bounds (leave
        them at 1.0 and 2.0 with ``constants="calibrated"``).
      sketch, stable: passed to :func:`rdr_jax.rsvd`.
      residual: see :func:`rdr_jax.angles.posterior_residuals`.
      estimate: :class:`EstimateOptions` of the Prop 3.2 estimates (default: Gaussian).
      constants: ``"thesis"`` or ``"calibrated"``.
    """

    eps: float = 1.0
    lower_eps: float = 2.0
    sketch: Any = "gaussian"
    stable: bool = True
    residual: str = "auto"
    estimate: Optional[EstimateOptions] = None
    constants: str = "thesis"

    def __post_init__(self):
        check_positive_float("eps", self.eps)
        check_positive_float("lower_eps", self.lower_eps)
        check_sketch(self.sketch)
        V.check_bool("stable", self.stable)
        if self.residual not in ("auto", "exact", "estimate"):
            raise ValueError(f"residual must be 'auto', 'exact' or 'estimate'; got "
                             f"{self.residual!r}")
        if self.estimate is None:
            object.__setattr__(self, "estimate", EstimateOptions())
        elif not isinstance(self.estimate, EstimateOptions):
            raise TypeError(f"estimate must be an EstimateOptions; got "
                            f"{type(self.estimate).__name__}")
        if check_constants(self.constants) == "calibrated" and (
                (self.eps, self.lower_eps) != (1.0, 2.0)):
            raise ValueError(f"eps and lower_eps scale the thesis' constants only; with "
                             f"constants='calibrated' leave them at 1.0 and 2.0, got "
                             f"eps = {self.eps!r}, lower_eps = {self.lower_eps!r}")
