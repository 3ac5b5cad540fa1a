"""rdr_jax._jit: per-function XLA:CPU compile options (faster compiles, same results)."""

import jax
import jax.numpy as jnp
import numpy as np

import rdr_jax as R
from rdr_jax import _jit
from rdr_jax import decompositions as D


def test_options_in_effect_on_cpu_and_results_identical():
    assert jax.default_backend() == "cpu"
    assert _jit.cpu_compiler_options() == _jit.CPU_COMPILER_OPTIONS
    A = jnp.asarray(np.random.default_rng(0).standard_normal((60, 40)), jnp.float32)
    key = jax.random.key(0)
    op = R.as_operator(A)
    opts = D._Options(R.selection.resolve_method("lupp"), "column", False, None)
    fast = D._interpolative._fast(key, op, 8, 18, opts)
    plain = D._interpolative._plain(key, op, 8, 18, opts)
    np.testing.assert_array_equal(np.asarray(fast.cols), np.asarray(plain.cols))
    np.testing.assert_allclose(np.asarray(fast.W), np.asarray(plain.W), rtol=1e-6, atol=1e-6)


def test_nested_vmapped_and_attributes():
    """Inside the caller's jit/vmap the plain variant runs (jax takes compiler options only
    on the outermost jit); attributes forward to the top-level variant."""
    A = jnp.asarray(np.random.default_rng(1).standard_normal((30, 20)), jnp.float32)
    keys = jax.random.split(jax.random.key(2), 3)
    eager = [np.asarray(R.interpolative(k, A, 5).cols) for k in keys]
    jitted = jax.jit(lambda kk: R.interpolative(kk, A, 5).cols)(keys[0])
    vmapped = jax.vmap(lambda kk: R.interpolative(kk, A, 5).cols)(keys)
    np.testing.assert_array_equal(np.asarray(jitted), eager[0])
    np.testing.assert_array_equal(np.asarray(vmapped), np.stack(eager))
    assert D._interpolative._cache_size() >= 1
    assert D._interpolative.__name__ == "_interpolative"


def test_disabled_by_environment(monkeypatch):
    _jit.cpu_compiler_options.cache_clear()
    try:
        monkeypatch.setenv("RDR_JAX_DEFAULT_COMPILER", "1")
        assert _jit.cpu_compiler_options() is None
    finally:
        monkeypatch.delenv("RDR_JAX_DEFAULT_COMPILER")
        _jit.cpu_compiler_options.cache_clear()
    assert _jit.cpu_compiler_options() is not None
