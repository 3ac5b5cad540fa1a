"""Shared fixtures: run tests in float32 (x64 off) and float64 (x64 on)."""

import jax
import numpy as np
import pytest


@pytest.fixture(params=["float32", "float64"])
def dtype(request):
    """The test's working dtype; float64 runs with ``jax_enable_x64`` on.

    The global flag (not the thread-local ``jax.enable_x64`` context) is used because host
    callbacks (the CPU sparse-sign kernel) run on other threads, which do not see a
    thread-local context.
    """
    prev = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", request.param == "float64")
    try:
        yield np.dtype(request.param)
    finally:
        jax.config.update("jax_enable_x64", prev)


def rtol(dtype) -> float:
    """Relative tolerance for products/reconstructions in ``dtype``."""
    return 2e-4 if np.dtype(dtype) == np.float32 else 1e-10


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
