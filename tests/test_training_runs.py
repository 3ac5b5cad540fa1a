"""Several runs as one program (issue 31, item 2): ``rdr_jax.training.fit_runs`` and the
chapters' ``train_runs``.

Every run of a vmapped cell gives what its separate ``train`` gives, to float tolerance (vmap
changes how XLA groups the convolutions, so not bitwise); the sequential batching gives it
bitwise; the same seeds give bitwise the same cell; a diverging run is reported and leaves the
others alone; bad settings raise.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rdr_jax.adawac import configs as adawac_configs
from rdr_jax.adawac import train as adawac
from rdr_jax.adawac.data import SliceDataset
from rdr_jax.dac import deep
from rdr_jax.training import (LoopConfig, TrainState, fit, fit_runs, resolve_batching,
                              stack_runs, unstack_runs)

STEPS = 3


def _close(a, b, rtol=1e-4):
    """Every leaf of ``b`` equals ``a``'s to ``rtol`` of the largest entry of the tree
    (the biases in front of a BatchNorm have no gradient: they hold rounding noise only)."""
    la, lb = jax.tree.leaves(jax.device_get(a)), jax.tree.leaves(jax.device_get(b))
    scale = max(float(np.max(np.abs(np.asarray(x)))) for x in la)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        np.testing.assert_allclose(np.asarray(y, np.float64), np.asarray(x, np.float64),
                                   rtol=rtol, atol=rtol * scale)


def _bitwise(a, b) -> bool:
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in
               zip(jax.tree.leaves(jax.device_get(a)), jax.tree.leaves(jax.device_get(b))))


# ------------------------------------------------------------------------------ DAC


def _dac_data():
    rng = np.random.default_rng(0)
    y = (np.arange(48) % 4).astype(np.int32)
    x = rng.uniform(0, 0.3, (48, 8, 8, 1)).astype(np.float32)
    x[np.arange(48), 2 * y, :, 0] += 0.7
    return x, y


DAC_CFG = {"lam": 1.0, "alpha": 2, "total_steps": STEPS, "batch_size": 8, "seed": 0,
           "augment": {"name": "shift_rotate"}, "log_every": 1,
           "model": {"name": "small_cnn", "num_classes": 4, "in_channels": 1, "width": 4}}
DAC_RUNS = [{"seed": 0, "lam": 1.0, "method": "dac"}, {"seed": 1, "lam": 1.0, "method": "dac"},
            {"seed": 0, "lam": 0.0, "method": "da_erm"}, {"seed": 2, "lam": 5.0}]


@pytest.fixture(scope="module")
def dac_separate():
    x, y = _dac_data()
    return [deep.train({**DAC_CFG, **r}, (x, y), test=(x[:16], y[:16]), progress=False)
            for r in DAC_RUNS]


@pytest.mark.parametrize("batching", ["vmap", "sequential"])
def test_dac_runs_match_separate_runs(dac_separate, batching):
    x, y = _dac_data()
    cell = deep.train_runs(DAC_CFG, DAC_RUNS, (x, y), test=(x[:16], y[:16]), batching=batching)
    assert cell.batching == batching and cell.diverged == (None,) * len(DAC_RUNS)
    for sep, got in zip(dac_separate, cell.runs):
        if batching == "sequential":      # the same program as train's: the same bytes
            assert _bitwise(sep.state, got.state)
        else:
            _close(sep.state.params, got.state.params)
            _close(sep.state.opt_state, got.state.opt_state)
        assert [h["step"] for h in got.history] == [h["step"] for h in sep.history]
        np.testing.assert_allclose([h["loss"] for h in got.history],
                                   [h["loss"] for h in sep.history], rtol=1e-5)
        assert got.test["accuracy"] == pytest.approx(sep.test["accuracy"], abs=1 / 16 + 1e-9)


def test_dac_runs_same_seed_bitwise():
    x, y = _dac_data()
    a = deep.train_runs(DAC_CFG, DAC_RUNS[:2], (x, y), batching="vmap")
    b = deep.train_runs(DAC_CFG, DAC_RUNS[:2], (x, y), batching="vmap")
    for ra, rb in zip(a.runs, b.runs):
        assert _bitwise(ra.state, rb.state)
    assert not _bitwise(a.runs[0].state.params, a.runs[1].state.params)   # seeds differ


@pytest.mark.parametrize("runs, match", [
    ([], "at least one run"),
    ([{"seed": 0, "alpha": 3}], "keys among"),
    ([{"seed": 0, "method": "dac"}, {"seed": 1, "method": "fixmatch_dac"}], "differs from run 0"),
    (["seed=0"], "keys among"),
])
def test_dac_runs_bad_runs(runs, match):
    x, y = _dac_data()
    with pytest.raises(ValueError, match=match):
        deep.train_runs(DAC_CFG, runs, (x, y))


def test_dac_runs_bad_batching():
    x, y = _dac_data()
    with pytest.raises(ValueError, match="batching must be one of"):
        deep.train_runs(DAC_CFG, DAC_RUNS[:1], (x, y), batching="pmap")


# ------------------------------------------------------------------------------ AdaWAC


def _slices():
    rng = np.random.default_rng(0)
    n, size = 16, 12
    images = rng.random((n, size, size)).astype(np.float32)
    labels = (rng.random((n, size, size)) * 3).astype(np.uint8)
    labels[::4] = 0
    return SliceDataset(images, labels, np.zeros(n, np.int32), np.arange(n, dtype=np.int32),
                        ("case0",), tuple(f"s{i}" for i in range(n)))


def _adawac_cfg(method):
    c = adawac_configs.get_config("phantom_quick")
    c.method, c.lam, c.batch_size, c.num_steps, c.log_every = method, 0.5, 8, STEPS, 1
    c.model.width, c.model.depth = 16, 2
    return c


@pytest.mark.parametrize("method", ["adawac", "trim-train+acr"])
def test_adawac_seeds_match_separate_runs(method):
    data, seeds = _slices(), [0, 3]
    c = _adawac_cfg(method)
    sep = []
    for s in seeds:
        cs = c.copy_and_resolve_references()
        cs.seed = s
        sep.append(adawac.train(cs, data, num_classes=3, history_every=1))
    for batching in ("vmap", "sequential"):
        res = adawac.train_runs(c, data, seeds, num_classes=3, history_every=1,
                                batching=batching)
        assert res.diverged == (None, None)
        for a, b in zip(sep, res.runs):
            if batching == "sequential":
                assert _bitwise(a.state, b.state)
            else:
                _close(a.state.params, b.state.params)
                _close(a.state.extra, b.state.extra)
            assert b.history["step"] == a.history["step"] == list(range(1, STEPS + 1))
            np.testing.assert_allclose(b.history["beta"], a.history["beta"], rtol=1e-5)
            np.testing.assert_allclose(b.losses, a.losses, rtol=1e-5)


def test_adawac_seeds_bad_input():
    data = _slices()
    with pytest.raises(ValueError, match="distinct"):
        adawac.train_runs(_adawac_cfg("adawac"), data, [1, 1], num_classes=3)
    with pytest.raises(ValueError, match="seed"):
        adawac.train_runs(_adawac_cfg("adawac"), data, [-1], num_classes=3)


# ------------------------------------------------------------------------------ fit_runs


class _Rows:
    def __init__(self, rows):
        self.rows, self.t = rows, 0

    def next_batch(self):
        r = self.rows[self.t % len(self.rows)]
        self.t += 1
        return r

    def state_dict(self):
        return {"t": self.t}

    def load_state_dict(self, d):
        self.t = d["t"]


def _toy_step(state, key, x, y):
    """Least squares by SGD with a random row mask from ``fold_in(key, step)``."""
    mask = jax.random.bernoulli(jax.random.fold_in(key, state.step), 0.75, y.shape)

    def loss(w):
        r = jnp.where(mask, x @ w - y, 0)
        return jnp.mean(r ** 2)
    val, g = jax.value_and_grad(loss)(state.params)
    return TrainState(state.step + 1, state.params - 0.05 * g, None, None), {"loss": val}


def _toy(dtype, runs=3, bad=None):
    rng = np.random.default_rng(1)
    states, sources = [], []
    for r in range(runs):
        w = jnp.asarray(rng.standard_normal(4), dtype)
        states.append(TrainState(jnp.zeros((), jnp.int32), w, None, None))
        rows = [(rng.standard_normal((6, 4)).astype(dtype), rng.standard_normal(6).astype(dtype))
                for _ in range(3)]
        if r == bad:
            rows[1] = (rows[1][0], np.full(6, np.inf, dtype))
        sources.append(_Rows(rows))
    return states, sources, [jax.random.key(r) for r in range(runs)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batching", ["vmap", "sequential"])
def test_fit_runs_matches_fit(dtype, batching):
    with jax.enable_x64(dtype == np.float64):
        states, sources, keys = _toy(dtype)
        res = fit_runs(_toy_step, states, sources, keys=keys, batching=batching,
                       loop=LoopConfig(num_steps=7, log_every=3))
        _, sources2, _ = _toy(dtype)
        for r in range(3):
            one = fit(_toy_step, states[r], sources2[r], key=keys[r],
                      loop=LoopConfig(num_steps=7, log_every=3))
            assert res.states[r].params.dtype == dtype
            np.testing.assert_allclose(np.asarray(res.states[r].params),
                                       np.asarray(one.state.params),
                                       rtol=1e-6 if dtype == np.float32 else 1e-13)
            np.testing.assert_allclose(res.losses[:, r], one.losses,
                                       rtol=1e-6 if dtype == np.float32 else 1e-13)
            assert [h["step"] for h in res.history[r]] == [3, 6, 7]
        assert res.losses.shape == (7, 3) and res.diverged == (None, None, None)


@pytest.mark.parametrize("batching", ["vmap", "sequential"])
def test_fit_runs_reports_a_diverged_run_and_keeps_the_others(batching):
    states, sources, keys = _toy(np.float32, bad=1)
    res = fit_runs(_toy_step, states, sources, keys=keys, batching=batching,
                   loop=LoopConfig(num_steps=5, log_every=5))
    assert res.diverged == (None, 2, None)
    assert np.all(np.isfinite(np.asarray(res.states[0].params)))
    assert np.all(np.isfinite(np.asarray(res.states[2].params)))
    assert not np.all(np.isfinite(np.asarray(res.states[1].params)))


def test_fit_runs_does_not_consume_the_callers_states():
    states, sources, keys = _toy(np.float32)
    before = [np.asarray(s.params).copy() for s in states]
    fit_runs(_toy_step, states, sources, keys=keys, batching="vmap",
             loop=LoopConfig(num_steps=2))
    for s, b in zip(states, before):
        np.testing.assert_array_equal(np.asarray(s.params), b)


@pytest.mark.parametrize("loop, match", [
    (LoopConfig(num_steps=2, workdir="x"), "does not checkpoint"),
    (LoopConfig(num_steps=2, stop_after=1), "does not checkpoint"),
    (LoopConfig(num_steps=2, eval_every=1), "eval_every"),
    (LoopConfig(num_steps=0), "num_steps"),
])
def test_fit_runs_bad_loop(loop, match):
    states, sources, keys = _toy(np.float32)
    with pytest.raises(ValueError, match=match):
        fit_runs(_toy_step, states, sources, keys=keys, loop=loop)


def test_fit_runs_bad_runs():
    states, sources, keys = _toy(np.float32)
    with pytest.raises(ValueError, match="one state, batch source and key per run"):
        fit_runs(_toy_step, states, sources[:2], keys=keys, loop=LoopConfig(num_steps=2))
    with pytest.raises(ValueError, match="at least one run"):
        fit_runs(_toy_step, [], [], keys=[], loop=LoopConfig(num_steps=2))
    sources[2].rows = [(r[0][:5], r[1][:5]) for r in sources[2].rows]
    with pytest.raises(ValueError, match="run 2's batch differs"):
        fit_runs(_toy_step, states, sources, keys=keys, loop=LoopConfig(num_steps=2))


def test_batching_and_stacking():
    assert resolve_batching("auto", "cpu") == "sequential"
    assert resolve_batching("auto", "gpu") == "vmap"
    assert resolve_batching("vmap", "cpu") == "vmap"
    with pytest.raises(ValueError, match="batching must be one of"):
        resolve_batching("threads", "cpu")
    trees = [{"a": jnp.arange(3) + i, "k": jax.random.key(i)} for i in range(4)]
    st = stack_runs(trees)
    assert st["a"].shape == (4, 3)
    back = unstack_runs(st)
    assert len(back) == 4 and all(np.array_equal(b["a"], t["a"]) for b, t in zip(back, trees))
    assert np.array_equal(jax.random.key_data(back[2]["k"]), jax.random.key_data(trees[2]["k"]))
    with pytest.raises(ValueError):
        stack_runs([])
