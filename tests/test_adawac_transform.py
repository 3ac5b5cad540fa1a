"""Tests for rdr_jax.adawac.transform: the beta mirror-ascent optax transform (alg:srw_dac)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rdr_jax.adawac.transform import (BetaMirrorAscentState, beta_gradient, beta_mirror_ascent,
                                      init_beta)

N, B = 40, 16


def _srw_dac_numpy(beta, idx, ce, cons, eta):
    """alg:srw_dac, one index at a time: multiplicative weights on [b_i, 1 - b_i] + normalise."""
    beta = np.array(beta, dtype=np.float64)
    for i, c, r in zip(idx, ce, cons):
        b = np.array([beta[i], 1.0 - beta[i]])
        b[0] *= np.exp(eta * c)
        b[1] *= np.exp(eta * r)
        beta[i] = b[0] / np.sum(b)
    return beta


def _closed_form(beta, g, eta):
    beta = np.asarray(beta, np.float64)
    z = np.log(beta) - np.log1p(-beta) + eta * np.asarray(g, np.float64)
    return 1.0 / (1.0 + np.exp(-z))


def _problem(seed, dtype):
    rng = np.random.default_rng(seed)
    beta = rng.uniform(0.02, 0.98, N).astype(dtype)
    idx = rng.choice(N, B, replace=False).astype(np.int32)
    ce = rng.uniform(0.0, 3.0, B).astype(dtype)
    cons = rng.uniform(0.0, 3.0, B).astype(dtype)
    return beta, idx, ce, cons


def _lo(dt):
    """The documented floor of the table: smallest_normal / eps (float16: smallest normal)."""
    fi = jnp.finfo(dt)
    return float(fi.smallest_normal if dt == jnp.float16 else fi.smallest_normal / fi.eps)


def _tol(dtype):
    # one rounding of the logit/sigmoid in the compute dtype plus one of the additive update
    return 8 * float(jnp.finfo(dtype).eps)


@pytest.fixture(scope="module")
def jitted_step():
    def step(beta, g, lr):
        tx = beta_mirror_ascent(lr)
        state = tx.init(beta)
        updates, state = tx.update(g, state, beta)
        return optax.apply_updates(beta, updates), updates, state
    return jax.jit(step)


def test_closed_form_and_srw_dac(dtype, jitted_step):
    eta = 0.7
    beta, idx, ce, cons = _problem(0, dtype)
    g = beta_gradient(jnp.asarray(ce), jnp.asarray(cons), jnp.asarray(idx), N)
    assert g.shape == (N,) and g.dtype == dtype
    new, updates, state = jitted_step(jnp.asarray(beta), g, eta)
    assert new.dtype == dtype and updates.dtype == dtype
    assert isinstance(state, BetaMirrorAscentState) and int(state.count) == 1
    new = np.asarray(new)
    g64 = np.zeros(N)
    g64[idx] = ce.astype(np.float64) - cons
    ref_closed = _closed_form(beta, g64, eta)
    ref_alg = _srw_dac_numpy(beta, idx, ce.astype(np.float64), cons.astype(np.float64), eta)
    np.testing.assert_allclose(ref_closed, ref_alg, rtol=0, atol=1e-12)
    np.testing.assert_allclose(new, ref_alg, rtol=0, atol=_tol(dtype))
    # rows not in the batch: bitwise untouched, update exactly 0
    rest = np.setdiff1d(np.arange(N), idx)
    assert np.array_equal(new[rest], beta[rest])
    assert np.all(np.asarray(updates)[rest] == 0)
    # rows in the batch moved in the direction of ce - cons
    moved = np.sign(new[idx] - beta[idx])
    assert np.array_equal(moved, np.sign(ce - cons))


def test_zero_gradient_rows_bitwise_untouched_extreme_table(jitted_step):
    beta = jnp.array([1e-30, 3e-8, 0.1, 0.5, 1 - 2 ** -23, 0.7], jnp.float32)
    g = jnp.array([0.0, 0.0, 5.0, 0.0, 0.0, -5.0], jnp.float32)
    new, updates, _ = jitted_step(beta, g, 1.0)
    zero = np.asarray(g) == 0
    assert np.array_equal(np.asarray(new)[zero], np.asarray(beta)[zero])
    assert np.all(np.asarray(updates)[zero] == 0)
    np.testing.assert_allclose(np.asarray(new)[~zero],
                               _closed_form(np.asarray(beta), np.asarray(g), 1.0)[~zero],
                               atol=_tol(np.float32))


@pytest.mark.parametrize("dt", [jnp.float32, jnp.bfloat16, jnp.float16])
def test_stays_inside_unit_interval_for_extreme_losses(dt):
    """Losses of +-1e4: beta saturates next to 0 / 1 but never reaches them, and can come back."""
    small = 1e-30 if dt != jnp.float16 else 1e-7  # float16 has no 1e-30
    beta = jnp.array([0.5, small, 0.3, 0.9, float(jnp.nextafter(dt(1), dt(0))), 0.5], dt)
    rng = np.random.default_rng(3)
    tx = beta_mirror_ascent(1.0)
    step = jax.jit(lambda b, g, s: tx.update(g, s, b))
    state = tx.init(beta)
    hi = float(jnp.nextafter(dt(1), dt(0)))
    for t in range(12):
        ce = rng.choice([1e4, -1e4], beta.shape[0])
        g = jnp.asarray(ce - (-ce), jnp.float32)  # ce - cons with cons = -ce
        updates, state = step(beta, g, state)
        new = optax.apply_updates(beta, updates)
        a, b0 = np.asarray(new, np.float64), np.asarray(beta, np.float64)
        assert new.dtype == dt and np.all(np.isfinite(a))
        assert np.all((a > 0) & (a < 1)), (t, a)
        up = np.asarray(g) > 0
        # an upward step lands on the largest value below 1 unless it was already there
        assert np.all(a[up] >= np.minimum(b0[up], hi) - 1e-12)
        assert np.all(a[up] >= 0.99)
        lo = _lo(dt)
        assert np.all((a[~up] < b0[~up]) | (a[~up] == lo)) and np.all(a[~up] < 1e-2)
        beta = new
    assert int(state.count) == 12


@pytest.mark.parametrize("dt", [jnp.float32, jnp.bfloat16, jnp.float16])
def test_random_tables_all_scales(dt):
    """Log-uniform tables down to the floor and next to 1, steps from 1e-8 to 1e5."""
    rng = np.random.default_rng(7)
    n = 20000
    lo, hi = _lo(dt), float(jnp.nextafter(dt(1), dt(0)))
    e = np.exp(rng.uniform(np.log(lo), 0, n))
    beta = jnp.asarray(np.where(rng.random(n) < 0.5, e, 1 - e), dt)
    beta = jnp.where((beta >= lo) & (beta < 1), beta, jnp.asarray(0.5, dt))
    g = jnp.asarray(rng.normal(size=n) * 10.0 ** rng.uniform(-8, 5, n), jnp.float32)
    tx = beta_mirror_ascent(1.0)
    new = jax.jit(lambda b, g: optax.apply_updates(b, tx.update(g, tx.init(b), b)[0]))(beta, g)
    p, a = np.asarray(beta, np.float64), np.asarray(new, np.float64)
    assert np.all((a >= lo) & (a <= hi))
    # never against the direction of g
    assert not np.any(np.sign(a - p) * np.sign(np.asarray(g)) < 0)
    with np.errstate(over="ignore"):
        ref = np.clip(_closed_form(p, np.asarray(g, np.float64), 1.0), lo, hi)
    err = np.abs(a - ref) / (float(jnp.finfo(dt).eps) * np.maximum(p, ref))
    assert err.max() <= 2.0, err.max()


@pytest.mark.parametrize("dtype", ["float64"], indirect=True)
def test_float64_near_one_and_tiny(dtype, jitted_step):
    """1 - 1e-8 is representable only in float64 (in float32 it is 1.0: see the init test)."""
    beta = jnp.array([1 - 1e-8, 1e-30, 1 - 1e-8], jnp.float64)
    g = jnp.array([-3.0, 40.0, 1e4])
    new = np.asarray(jitted_step(beta, g, 1.0)[0])
    ref = _closed_form(np.asarray(beta), np.asarray(g), 1.0)
    np.testing.assert_allclose(new[:2], ref[:2], rtol=1e-12, atol=1e-15)
    assert 1 - 2e-16 < new[2] < 1.0


def test_init_beta_and_bad_tables():
    b = init_beta(5)
    assert b.shape == (5,) and np.all(np.asarray(b) == 0.5)
    assert init_beta(3, jnp.bfloat16).dtype == jnp.bfloat16
    tx = beta_mirror_ascent(1.0)
    with pytest.raises(ValueError, match="strictly inside"):
        tx.init(jnp.array([0.5, 0.0]))
    with pytest.raises(ValueError, match="strictly inside"):
        tx.init(jnp.array([0.5, 1.0]))
    with pytest.raises(ValueError, match="strictly inside"):
        tx.init({"a": jnp.array([0.5, 1.5])})
    with pytest.raises(ValueError, match="strictly inside"):
        tx.init(jnp.array([0.5, np.nan]))
    with pytest.raises(ValueError, match="round to 1"):
        tx.init(jnp.array([1 - 1e-8], jnp.float32))  # rounds to 1.0 in float32
    with pytest.raises(TypeError, match="dtype"):
        tx.init(jnp.array([0, 1], jnp.int32))
    with pytest.raises(ValueError, match="n must be >= 1"):
        init_beta(0)
    with pytest.raises(TypeError, match="dtype"):
        init_beta(3, jnp.int32)


@pytest.mark.parametrize("lr, exc", [(-0.1, ValueError), (float("nan"), ValueError),
                                     (float("inf"), ValueError), (True, TypeError),
                                     ("0.1", TypeError), (np.array([0.1, 0.2]), ValueError),
                                     (lambda c: -1.0, ValueError)])
def test_bad_learning_rate(lr, exc):
    with pytest.raises(exc, match="learning_rate"):
        beta_mirror_ascent(lr)


def test_bad_learning_rate_under_inject_hyperparams():
    with pytest.raises(ValueError, match="learning_rate"):
        optax.inject_hyperparams(beta_mirror_ascent)(learning_rate=-1.0).init(init_beta(3))


def test_bad_update_arguments():
    beta = init_beta(4)
    tx = beta_mirror_ascent(1.0)
    state = tx.init(beta)
    with pytest.raises(ValueError, match="params"):
        tx.update(jnp.zeros(4), state)
    with pytest.raises(ValueError, match="shape"):
        tx.update(jnp.zeros(3), state, beta)


def test_chain_clip_then_ascent():
    beta, idx, ce, cons = _problem(1, np.float32)
    g = beta_gradient(jnp.asarray(5 * ce), jnp.asarray(cons), jnp.asarray(idx), N)
    tx = optax.chain(optax.clip(2.0), beta_mirror_ascent(0.5))
    updates, state = jax.jit(tx.update)(g, tx.init(jnp.asarray(beta)), jnp.asarray(beta))
    new = np.asarray(optax.apply_updates(jnp.asarray(beta), updates))
    ref = _closed_form(beta, np.clip(np.asarray(g), -2.0, 2.0), 0.5)
    assert np.any(np.abs(np.asarray(g)) > 2.0)  # the clip matters
    np.testing.assert_allclose(new, ref, atol=_tol(np.float32))
    assert int(state[1].count) == 1


def test_inject_hyperparams_lr_change_takes_effect():
    beta, idx, ce, cons = _problem(2, np.float32)
    beta = jnp.asarray(beta)
    g = beta_gradient(jnp.asarray(ce), jnp.asarray(cons), jnp.asarray(idx), N)
    tx = optax.inject_hyperparams(beta_mirror_ascent, hyperparam_dtype=jnp.float32)(
        learning_rate=0.5)
    step = jax.jit(tx.update)
    state = tx.init(beta)
    u1, state = step(g, state, beta)
    b1 = optax.apply_updates(beta, u1)
    np.testing.assert_allclose(np.asarray(b1), _closed_form(np.asarray(beta), g, 0.5),
                               atol=_tol(np.float32))
    state.hyperparams["learning_rate"] = jnp.asarray(2.0, jnp.float32)
    u2, state = step(g, state, b1)
    b2 = optax.apply_updates(b1, u2)
    np.testing.assert_allclose(np.asarray(b2), _closed_form(np.asarray(b1), g, 2.0),
                               atol=_tol(np.float32))
    state.hyperparams["learning_rate"] = jnp.asarray(0.0, jnp.float32)
    u3, _ = step(g, state, b2)
    assert np.array_equal(np.asarray(optax.apply_updates(b2, u3)), np.asarray(b2))


def test_schedule_uses_count():
    sched = optax.linear_schedule(1.0, 0.25, transition_steps=3)
    beta, idx, ce, cons = _problem(4, np.float32)
    beta = jnp.asarray(beta)
    g = beta_gradient(jnp.asarray(ce), jnp.asarray(cons), jnp.asarray(idx), N)
    tx = beta_mirror_ascent(sched)
    state = tx.init(beta)
    step = jax.jit(tx.update)
    ref = np.asarray(beta, np.float64)
    for k in range(4):
        updates, state = step(g, state, beta)
        beta = optax.apply_updates(beta, updates)
        ref = _closed_form(ref, g, float(sched(k)))
        np.testing.assert_allclose(np.asarray(beta), ref, atol=4 * _tol(np.float32))
    assert int(state.count) == 4


def test_state_stable_under_cond_and_no_retrace():
    beta = init_beta(N, jnp.bfloat16)
    g = beta_gradient(jnp.ones(B), jnp.zeros(B), jnp.arange(B), N)
    for tx in (beta_mirror_ascent(0.3),
               optax.inject_hyperparams(beta_mirror_ascent)(learning_rate=0.3),
               beta_mirror_ascent(optax.constant_schedule(0.3))):
        state = tx.init(beta)
        chex.clear_trace_counter()

        @jax.jit
        @chex.assert_max_traces(n=1)
        def maybe_step(pred, state, beta, tx=tx):
            def yes(s):
                u, s = tx.update(g, s, beta)
                return optax.apply_updates(beta, u), s
            return jax.lax.cond(pred, yes, lambda s: (beta, s), state)

        b1, s1 = maybe_step(True, state, beta)
        b2, s2 = maybe_step(False, s1, b1)
        chex.assert_trees_all_equal_shapes_and_dtypes(state, s1, s2)
        assert b1.dtype == jnp.bfloat16
        assert np.array_equal(np.asarray(b1, np.float32), np.asarray(b2, np.float32))
        assert float(b1[0]) == pytest.approx(1 / (1 + np.exp(-0.3)), abs=4e-3)
        assert float(b1[-1]) == 0.5
        count = s2.count
        assert int(count) == 1


def test_vmap_over_tables_and_pytree():
    rng = np.random.default_rng(5)
    betas = jnp.asarray(rng.uniform(0.05, 0.95, (3, 7)), jnp.float32)
    gs = jnp.asarray(rng.normal(size=(3, 7)) * 3, jnp.float32)
    tx = beta_mirror_ascent(0.4)

    def one(b, g):
        return optax.apply_updates(b, tx.update(g, tx.init(b), b)[0])

    out = jax.jit(jax.vmap(one))(betas, gs)
    np.testing.assert_allclose(np.asarray(out), _closed_form(betas, gs, 0.4),
                               atol=_tol(np.float32))
    tree = {"synapse": betas[0], "acdc": betas[1, :4]}
    gtree = {"synapse": gs[0], "acdc": gs[1, :4]}
    new = jax.jit(one)(tree, gtree)
    np.testing.assert_allclose(np.asarray(new["acdc"]), np.asarray(out[1, :4]), atol=0)


def test_beta_gradient_scatter(dtype):
    rng = np.random.default_rng(6)
    ce = rng.uniform(0, 2, 6).astype(dtype)
    cons = rng.uniform(0, 2, 6).astype(dtype)
    idx = np.array([4, 0, 9, 4, 2, 7], np.int32)  # row 4 twice: terms are summed
    ref = np.zeros(10)
    np.add.at(ref, idx, ce.astype(np.float64) - cons)
    g = beta_gradient(jnp.asarray(ce), jnp.asarray(cons), jnp.asarray(idx), 10)
    np.testing.assert_allclose(np.asarray(g), ref, rtol=1e-6 if dtype == np.float32 else 1e-14)
    # no gradient flows through the losses
    dce = jax.grad(lambda c: jnp.sum(beta_gradient(c, jnp.asarray(cons), jnp.asarray(idx), 10)))(
        jnp.asarray(ce))
    assert np.all(np.asarray(dce) == 0)
    # inside jit out-of-range rows (including negative ones) are dropped, not wrapped
    gj = jax.jit(beta_gradient, static_argnums=3)(jnp.asarray(ce), jnp.asarray(cons),
                                                  jnp.array([0, 1, 2, 3, -1, 10]), 10)
    ref2 = np.zeros(10)
    ref2[:4] = ce[:4].astype(np.float64) - cons[:4]
    np.testing.assert_allclose(np.asarray(gj), ref2, rtol=1e-6 if dtype == np.float32 else 1e-14)


def test_beta_gradient_bad_inputs():
    ce, cons, idx = jnp.ones(3), jnp.zeros(3), jnp.array([0, 1, 2])
    with pytest.raises(ValueError, match=r"idx values must lie in \[0, n\)"):
        beta_gradient(ce, cons, jnp.array([0, 1, 3]), 3)
    with pytest.raises(ValueError, match=r"idx values"):
        beta_gradient(ce, cons, jnp.array([0, -1, 2]), 3)
    with pytest.raises(TypeError, match="idx must be an integer"):
        beta_gradient(ce, cons, jnp.array([0.0, 1.0, 2.0]), 3)
    with pytest.raises(ValueError, match="same shape"):
        beta_gradient(ce, jnp.zeros(2), idx, 3)
    with pytest.raises(ValueError, match=r"shape \(B,\)"):
        beta_gradient(jnp.ones((3, 1)), cons, idx, 3)
    with pytest.raises(TypeError, match="n must be a Python int"):
        beta_gradient(ce, cons, idx, 3.0)
