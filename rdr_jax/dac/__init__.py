"""Chapter 4: data augmentation consistency (DAC) regularization vs DA-ERM.

Submodules: ``linear`` (linear regression, Thm 4.1), ``domain_adaptation``, ``two_layer``
(two-layer ReLU), ``randaugment``, ``deep`` (deep classifiers on the shared loop
:func:`rdr_jax.training.fit`), ``configs``, ``data``.
"""

from rdr_jax.dac.linear import (augmented_design, da_erm_operator, dac_operator, dimensions,
                                excess_risk, expected_excess_risk, fit_da_erm, fit_dac,
                                label_invariant_theory, linear_regression_example,
                                misspec_example, monte_carlo_risks, MonteCarloOptions,
                                optimal_lambda,
                                soft_dac_risk, soft_dac_theory)

__all__ = ["augmented_design", "da_erm_operator", "dac_operator", "dimensions", "excess_risk",
           "expected_excess_risk", "fit_da_erm", "fit_dac", "label_invariant_theory",
           "linear_regression_example", "misspec_example", "monte_carlo_risks",
           "MonteCarloOptions",
           "optimal_lambda", "soft_dac_risk", "soft_dac_theory"]
