"""rdr_jax._jit tiered compilation: a signature's first top-level call runs an executable
compiled at XLA optimisation level 0, its second and later calls the optimised one.

The test suite itself runs with ``--xla_backend_optimization_level=0`` in ``XLA_FLAGS``
(tests/conftest.py), where tiering is off; the in-process tests switch it on with
``tiered_compile_enabled`` patched, the subprocess test runs the real default."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rdr_jax import _jit


@pytest.fixture
def tiered(monkeypatch):
    """Tiering on in this process; records the compiler options of every tier compile."""
    monkeypatch.setattr(_jit, "tiered_compile_enabled", lambda: True)
    _jit.cpu_compiler_options()         # its one-time probe compile is not a tier's
    seen = []
    orig = jax.stages.Lowered.compile

    def compile_spy(self, compiler_options=None, **kw):
        seen.append(dict(compiler_options or {}))
        return orig(self, compiler_options=compiler_options, **kw)

    monkeypatch.setattr(jax.stages.Lowered, "compile", compile_spy)
    return seen


def _toy(quick_first=lambda a: a["x"].size, **kw):
    @_jit.jit(static_argnames=("k",), quick_first=quick_first, **kw)
    def f(x, y, k, scale=1.0):
        return jnp.sort(x * scale)[:k] + y

    return f


def test_first_call_quick_then_optimised(tiered):
    f = _toy()
    x, y = jnp.arange(10.0)[::-1], jnp.ones(3)
    want = np.sort(np.arange(10.0))[:3] + 1
    out1 = f(x, y, 3)
    assert len(tiered) == 1 and tiered[0]["xla_backend_optimization_level"] == 0
    (tier,) = f._tiers.values()
    assert not tier.optimised
    out2 = f(x, y, k=3)        # static argument by keyword: the same signature, 2nd call
    assert len(f._tiers) == 1 and tier.optimised
    assert len(tiered) == 2 and "xla_backend_optimization_level" not in tiered[-1]
    assert tiered[-1] == _jit.cpu_compiler_options()
    out3 = f(x, y, 3)          # third call: nothing compiled
    assert len(tiered) == 2
    out4 = f(x, y=y, k=3)      # a dynamic argument by keyword: another executable
    assert len(f._tiers) == 2 and len(tiered) == 3
    for out in (out1, out2, out3, out4):
        np.testing.assert_array_equal(np.asarray(out), want)
    assert f._cache_size() == 2


def test_new_shape_dtype_or_static_is_a_new_signature(tiered):
    f = _toy()
    y = jnp.ones(2)
    f(jnp.arange(6.0), y, 2)
    f(jnp.arange(7.0), y, 2)
    f(jnp.arange(6, dtype=jnp.int32), y, 2)
    f(jnp.arange(6.0), jnp.ones(3), 3)
    f(jnp.arange(6.0), y, 2, 2.0)       # a Python scalar: same signature whatever its value
    f(jnp.arange(6.0), y, 2, 3.0)
    assert len(f._tiers) == 5
    np.testing.assert_array_equal(np.asarray(f(jnp.arange(6.0), y, 2, 3.0)), [1.0, 4.0])


def test_large_work_skips_the_quick_tier(tiered, monkeypatch):
    monkeypatch.setattr(_jit, "QUICK_MAX_WORK", 8)
    f = _toy()
    out = f(jnp.arange(20.0), jnp.zeros(2), 2)        # 20 elements > 8: plain jit path
    np.testing.assert_array_equal(np.asarray(out), [0.0, 1.0])
    assert not f._tiers and not tiered
    f(jnp.arange(5.0), jnp.zeros(2), 2)               # small: tiered
    assert len(f._tiers) == 1


def test_lru_bound(tiered, monkeypatch):
    monkeypatch.setattr(_jit, "_MAX_TIERS", 2)
    f = _toy()
    for n in (4, 5, 6):
        f(jnp.arange(float(n)), jnp.zeros(1), 1)
    assert len(f._tiers) == 2


def test_not_tiered_inside_transformations(tiered):
    f = _toy()
    xs = jnp.stack([jnp.arange(4.0), jnp.arange(4.0)[::-1]])
    jax.jit(lambda x: f(x, jnp.zeros(1), 2))(xs[0])
    jax.vmap(lambda x: f(x, jnp.zeros(1), 2))(xs)
    jax.grad(lambda x: f(x, jnp.zeros(1), 2).sum())(xs[0])
    assert not f._tiers and not tiered


def test_bad_calls_raise_as_jax_jit_does(tiered):
    f = _toy()
    with pytest.raises(TypeError):
        f(jnp.arange(3.0))                  # missing arguments
    with pytest.raises(ValueError, match="hashable|static"):
        f(jnp.arange(3.0), jnp.zeros(1), [1])   # unhashable static argument
    assert not f._tiers


def test_switches(monkeypatch):
    monkeypatch.delenv("RDR_JAX_TIERED_COMPILE", raising=False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
    assert _jit.tiered_compile_enabled()
    for off in ("0", "false", "off"):
        monkeypatch.setenv("RDR_JAX_TIERED_COMPILE", off)
        assert not _jit.tiered_compile_enabled()
    monkeypatch.delenv("RDR_JAX_TIERED_COMPILE")
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_fusion_emitters=false "
                                    "--xla_backend_optimization_level=0")
    assert not _jit.tiered_compile_enabled()          # already compiling at level 0
    monkeypatch.setenv("XLA_FLAGS", "")
    with jax.disable_jit():
        assert not _jit.tiered_compile_enabled()


def test_sketch_work_estimate():
    class Op:
        shape = (4000, 2000)
        dtype = np.dtype(np.float64)

    assert _jit.sketch_work({"op": Op(), "l": 60}) == 60 * 6000
    assert _jit.sketch_work({"op": Op(), "l": 60}) <= _jit.QUICK_MAX_WORK     # bench size
    Op.shape = (10 ** 6, 10 ** 6)
    assert _jit.sketch_work({"op": Op(), "l": 210}) > _jit.QUICK_MAX_WORK     # SNN1e6
    Op.shape, Op.dtype = (400, 300), np.dtype(np.float32)
    assert _jit.sketch_work({"op": Op(), "l": 30}) is None        # 32-bit: never tiered
    Op.dtype = np.dtype(np.complex64)
    assert _jit.sketch_work({"op": Op(), "l": 30}) is None


_CHILD = r"""
import os, warnings
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
import rdr_jax as R
from rdr_jax import _jit, decompositions as D, randomized_svd as RS


def untiered(f):
    os.environ["RDR_JAX_TIERED_COMPILE"] = "0"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return f()
    finally:
        os.environ.pop("RDR_JAX_TIERED_COMPILE")


def bitwise(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


assert _jit.tiered_compile_enabled()
rng = np.random.default_rng(0)
A32 = jnp.asarray(rng.standard_normal((400, 300)), jnp.float32)
R.interpolative(jax.random.key(0), A32, 20)
assert not D._interpolative._tiers            # 32-bit data: never tiered
for dt in (np.float64, np.complex128):
    A = jnp.asarray((rng.standard_normal((400, 40)) @ rng.standard_normal((40, 300))
                     + 1e-3 * rng.standard_normal((400, 300))).astype(dt))
    key = jax.random.key(3)
    calls = [R.interpolative(key, A, 30)]     # the speculative quick tier
    (tier,) = D._interpolative._tiers.values()
    assert not tier.optimised                 # the speculation held
    calls += [R.interpolative(key, A, 30) for _ in range(2)]
    assert tier.optimised
    ref = untiered(lambda: R.interpolative(key, A, 30))
    for i, c in enumerate(calls):
        np.testing.assert_array_equal(np.asarray(c.cols), np.asarray(ref.cols))
        np.testing.assert_allclose(np.asarray(c.W), np.asarray(ref.W), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(float(c.eta), float(ref.eta), rtol=1e-12)
        if i > 0:      # the optimised executable: bitwise the untiered result
            bitwise(c, ref)
    D._interpolative._tiers.clear()
    # exactly rank 40 and k = 60: C is numerically singular, so the speculative first call
    # is rerun in full (the QR + pinv route; the full program) at once
    B = jnp.asarray((rng.standard_normal((400, 40)) @ rng.standard_normal((40, 300))).astype(dt))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = R.interpolative(jax.random.key(5), B, 60)
    (tier,) = D._interpolative._tiers.values()
    assert tier.optimised, "speculation should have failed on a singular skeleton"
    assert int(first.numerical_rank) == 40
    bitwise(first, untiered(lambda: R.interpolative(jax.random.key(5), B, 60)))
    D._interpolative._tiers.clear()
    cur = [R.cur(key, A, 25) for _ in range(2)]
    np.testing.assert_array_equal(np.asarray(cur[0].rows), np.asarray(cur[1].rows))
    assert [t.optimised for t in D._cur._tiers.values()] == [True]
    bitwise(cur[1], untiered(lambda: R.cur(key, A, 25)))
    s = [R.rsvd(key, A, 10).s for _ in range(2)]
    np.testing.assert_allclose(np.asarray(s[0]), np.asarray(s[1]), rtol=1e-12)
    assert RS._rsvd_jit._tiers and all(t.optimised for t in RS._rsvd_jit._tiers.values())
    D._cur._tiers.clear()
    RS._rsvd_jit._tiers.clear()
print("OK")
"""


def test_default_process_tiers_real_pipelines():
    """A process with default settings: interpolative/cur/rsvd first calls run the quick
    tier (same skeletons, factors to rounding), later calls are bitwise the untiered
    result (float64, complex128); a speculation that fails is rerun in full at once;
    float32 data are not tiered."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("XLA_FLAGS", "RDR_JAX_TIERED_COMPILE")}
    r = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]


def test_configuration_is_part_of_the_signature(tiered):
    """A call under another jax configuration (here the default matmul precision) is
    another executable, as for jax.jit."""
    f = _toy()
    x = jnp.arange(4.0)
    f(x, jnp.zeros(1), 1)
    with jax.default_matmul_precision("float32"):
        f(x, jnp.zeros(1), 1)
    assert len(f._tiers) == 2


def _spec_toy():
    """sqrt with a fast route valid for x > 0 and a fallback (-sqrt|x|) otherwise."""
    @_jit.jit(static_argnames=("spec",), quick_first=lambda a: 0,
              speculative={"spec": lambda s: True})
    def g(x, spec=False):
        ok = jnp.all(x > 0)
        if spec:
            return jnp.sqrt(x), ok
        return jax.lax.cond(ok, lambda: jnp.sqrt(x), lambda: -jnp.sqrt(jnp.abs(x)))

    return g


def test_speculative_first_call(tiered):
    g = _spec_toy()
    np.testing.assert_allclose(np.asarray(g(jnp.array([4.0, 9.0]))), [2.0, 3.0])
    (tier,) = g._tiers.values()
    assert not tier.optimised and len(tiered) == 1      # the speculative program only
    np.testing.assert_allclose(np.asarray(g(jnp.array([1.0, 16.0]))), [1.0, 4.0])
    assert tier.optimised and len(tiered) == 2           # second call: full, optimised
    np.testing.assert_allclose(np.asarray(g(jnp.array([-4.0, 9.0]))), [-2.0, -3.0])


def test_speculation_that_fails_runs_the_full_program_at_once(tiered):
    g = _spec_toy()
    np.testing.assert_allclose(np.asarray(g(jnp.array([-4.0, 9.0]))), [-2.0, -3.0])
    (tier,) = g._tiers.values()
    assert tier.optimised and len(tiered) == 2
    assert tiered[0]["xla_backend_optimization_level"] == 0
    assert tiered[1] == _jit.cpu_compiler_options()
    np.testing.assert_allclose(np.asarray(g(jnp.array([4.0, 9.0]))), [2.0, 3.0])
    assert len(tiered) == 2


def test_eta_from_gram_fast_is_eta_from_gram_or_nan(dtype):
    """The speculative eta: bitwise eta_from_gram where its fast route applies (X scaled to
    max in [1, 2), full-rank pivot block), NaN otherwise, under jit."""
    from rdr_jax import _fp, pivoting as P
    rng = np.random.default_rng(3)
    fast = jax.jit(P.eta_from_gram_fast)
    for trial in range(5):
        X = _fp.normalize(jnp.asarray(rng.standard_normal((12, 40)) * 10.0 ** trial,
                                      dtype))[0]
        J = P.lupp(X, 8)
        np.testing.assert_array_equal(np.asarray(fast(X, J)),
                                      np.asarray(P.eta_from_gram(X, J)))
        assert np.isnan(float(fast(3.0 * X, J)))                # not scaled to [1, 2)
    X = jnp.asarray(np.outer(rng.standard_normal(12), rng.standard_normal(40)), dtype)
    X = _fp.normalize(X)[0]                                      # rank 1: singular block
    J = jnp.arange(8)
    assert np.isnan(float(fast(X, J)))
    assert np.isfinite(float(P.eta_from_gram(X, J)))
