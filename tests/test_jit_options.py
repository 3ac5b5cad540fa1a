"""rdr_jax._src.jit: per-function XLA:CPU compile options (faster compiles, same results)."""

import jax
import jax.numpy as jnp
import numpy as np

import rdr_jax as R
from rdr_jax._src import jit as _jit
from rdr_jax.id_cur import decompositions as D


def test_options_in_effect_on_cpu_and_results_identical():
    assert jax.default_backend() == "cpu"
    assert _jit.cpu_compiler_options() == _jit.CPU_COMPILER_OPTIONS
    A = jnp.asarray(np.random.default_rng(0).standard_normal((60, 40)), jnp.float32)
    key = jax.random.key(0)
    op = R.as_operator(A)
    opts = D._Options(R.id_cur.selection.resolve_method("lupp"), "column")
    fast = D._interpolative._fast(key, op, 8, 18, 8, 18, opts)
    plain = D._interpolative._plain(key, op, 8, 18, 8, 18, opts)
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


def test_fast_cpu_compile_false_is_plain_jax_jit():
    """``fast_cpu_compile=False`` (the training code) is ``jax.jit`` with the caller's own
    options: the same compiled program as ``jax.jit``, in every spelling."""
    def f(x, n):
        return jnp.tanh(x) * n

    x = jnp.linspace(-2.0, 2.0, 7)
    plain = jax.jit(f, static_argnames="n")
    for g in (_jit.jit(f, static_argnames="n", fast_cpu_compile=False),
              _jit.jit(static_argnames="n", fast_cpu_compile=False)(f)):
        assert not isinstance(g, _jit._Jitted)
        assert g.lower(x, n=3).compile().as_text() == plain.lower(x, n=3).compile().as_text()
        np.testing.assert_array_equal(np.asarray(g(x, n=3)), np.asarray(plain(x, n=3)))
    fast = _jit.jit(f, static_argnames="n")
    assert isinstance(fast, _jit._Jitted)
    from rdr_jax.training.loop import step_options          # the train steps' options
    g = _jit.jit(f, static_argnames="n", compiler_options=step_options("cpu"),
                 fast_cpu_compile=False)
    np.testing.assert_array_equal(np.asarray(g(x, n=3)), np.asarray(plain(x, n=3)))


def test_disabled_by_environment(monkeypatch):
    _jit.cpu_compiler_options.cache_clear()
    try:
        monkeypatch.setenv("RDR_JAX_DEFAULT_COMPILER", "1")
        assert _jit.cpu_compiler_options() is None
    finally:
        monkeypatch.delenv("RDR_JAX_DEFAULT_COMPILER")
        _jit.cpu_compiler_options.cache_clear()
    assert _jit.cpu_compiler_options() is not None


_CHILD = r"""
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
import rdr_jax as R
from rdr_jax._src import jit as _jit
from rdr_jax.id_cur import decompositions as D
assert _jit.cpu_compiler_options() == _jit.CPU_COMPILER_OPTIONS
A = jnp.asarray(np.random.default_rng(0).standard_normal((300, 120)))
op, key = R.as_operator(A), jax.random.key(0)
opts = D._Options(R.id_cur.selection.resolve_method("lupp"), "column")
fast, plain = D._interpolative._fast, D._interpolative._plain
a, b = fast(key, op, 20, 30, 25, 35, opts), plain(key, op, 20, 30, 25, 35, opts)
np.testing.assert_array_equal(np.asarray(a.cols), np.asarray(b.cols))
np.testing.assert_allclose(np.asarray(a.W), np.asarray(b.W), rtol=0, atol=1e-12)
np.testing.assert_allclose(float(a.eta), float(b.eta), rtol=1e-12)
g1 = R.sketching.hash_normal(key, (30, 300), jnp.float64)          # fast (top level)
g2 = jax.jit(lambda k: R.sketching.hash_normal(k, (30, 300), jnp.float64))(key)  # plain
np.testing.assert_array_equal(np.asarray(g1), np.asarray(g2))
print("OK")
"""


def test_fast_and_plain_compiles_agree_without_the_suite_flags():
    """With the process's default XLA flags (the suite sets the LLVM-IR emitters globally, so
    in-process both variants compile alike), the per-function option changes no result: same
    skeletons, W and eta to 1e-12, bitwise-equal Gaussian sketch."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    r = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]
