"""XLA options for the few test programs that run longer than they compile.

``tests/conftest.py`` turns LLVM's backend optimisations off for the whole suite
(``--xla_backend_optimization_level=0`` in ``XLA_FLAGS``): almost every test program compiles
for far longer than it runs. A test whose outermost ``jax.jit`` runs long (a Monte-Carlo
check over hundreds of keys, a training run) passes :data:`OPTIMIZED` as that jit's
``compiler_options``, which gives it XLA's default level back, as in a user's process. Measured
per test in ``docs/development.md``; for a program that runs briefly the longer compile
costs more than it saves.
"""

#: ``compiler_options`` of a test's outermost ``jax.jit``: XLA's default backend optimisation
OPTIMIZED = {"xla_backend_optimization_level": 2}
