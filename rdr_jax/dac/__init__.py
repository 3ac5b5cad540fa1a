"""Chapter 4: data augmentation consistency (DAC) regularization vs DA-ERM.

Submodules: ``linear`` (the linear-regression theory toolkit, Thm 4.1 and the soft-penalty
bounds), ``domain_adaptation`` (App. ``apx:case_ood``), ``two_layer`` (two-layer ReLU,
Sec. ``sec:example_2relu``), ``randaugment`` (the 14-op RandAugment of App.
``apdx:exp_detail``) and ``deep`` (DA-ERM / DAC training of deep classifiers, a thin wrapper
of the loop both chapters share, :func:`rdr_jax.training.fit`); ``configs`` holds the
experiment configs (leaves: they import no trainer).
"""

from rdr_jax.dac.linear import (augmented_design, da_erm_operator, dac_operator, dimensions,
                                excess_risk, expected_excess_risk, fit_da_erm, fit_dac,
                                label_invariant_theory, linear_regression_example,
                                misspec_example, monte_carlo_risks, optimal_lambda,
                                soft_dac_risk, soft_dac_theory)

__all__ = ["augmented_design", "da_erm_operator", "dac_operator", "dimensions", "excess_risk",
           "expected_excess_risk", "fit_da_erm", "fit_dac", "label_invariant_theory",
           "linear_regression_example", "misspec_example", "monte_carlo_risks",
           "optimal_lambda", "soft_dac_risk", "soft_dac_theory"]
