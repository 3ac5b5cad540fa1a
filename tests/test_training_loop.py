"""Tests for the training loop both chapters share (rdr_jax.training.fit), the weight EMA,
the metrics file and data parallelism over 8 virtual devices (DAC and AdaWAC, in a
subprocess).

The loop is exercised with a toy step whose losses have a closed form (a quadratic pulled
towards deterministic batches), so every logged row is checked against an independent numpy
simulation; the chapters' own kill-and-resume tests (tests/test_dac_deep.py,
tests/test_adawac_train.py) cover the real steps.
"""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rdr_jax import training
from rdr_jax.training import LoopConfig, TrainState, fit, param_ema, read_metrics
from rdr_jax.training import loop as loop_module

ROOT = Path(__file__).resolve().parent.parent
LR = 0.25


# ------------------------------------------------------------------------ toy problem


def _batch(t: int, dtype) -> np.ndarray:
    return np.random.default_rng([7, t]).standard_normal((4, 2)).astype(dtype)


class _Source:
    """Batch ``t`` is a function of the position ``t`` (checkpointed)."""

    def __init__(self, dtype):
        self.t, self.dtype = 0, dtype

    def next_batch(self):
        x = _batch(self.t, self.dtype)
        self.t += 1
        return x, np.asarray(2.0, self.dtype)          # an array (split) and a scalar

    def state_dict(self):
        return {"t": self.t}

    def load_state_dict(self, d):
        self.t = int(d["t"])


def _step(state, key, x, c):
    """loss = c * mean_i ||w - x_i||^2, one gradient step; ``shift`` uses the key."""
    def loss_fn(w):
        return c * jnp.mean(jnp.sum((w - x) ** 2, -1))
    loss, g = jax.value_and_grad(loss_fn)(state.params)
    noise = jax.random.normal(jax.random.fold_in(key, state.step), (), state.params.dtype)
    new = state._replace(step=state.step + 1, params=state.params - LR * g)
    return new, {"loss": loss, "xmean": jnp.mean(x), "noise": noise, "rows": x[:, 0]}


def _state(dtype):
    return TrainState(jnp.zeros((), jnp.int32), jnp.asarray([1.0, -1.0], dtype), {}, ())


def _reference(n: int, dtype):
    """Per-step losses and batch means of the toy problem, in float64."""
    w = np.array([1.0, -1.0])
    losses, means = [], []
    for t in range(n):
        x = _batch(t, dtype).astype(np.float64)
        losses.append(2.0 * np.mean(np.sum((w - x) ** 2, -1)))
        means.append(x.mean())
        w = w - LR * 2.0 * 2.0 * (w - x).mean(0)
    return np.asarray(losses), np.asarray(means), w


def _rtol(dtype):
    return 1e-5 if np.dtype(dtype) == np.float32 else 1e-12


# ------------------------------------------------------------------------ logging


def test_fit_logs_interval_means_with_one_fetch_per_interval(dtype, monkeypatch, tmp_path):
    fetches = []
    real = loop_module._fetch
    monkeypatch.setattr(loop_module, "_fetch", lambda x: fetches.append(1) or real(x))
    path = tmp_path / "m.jsonl"
    res = fit(_step, _state(dtype), _Source(dtype), key=jax.random.key(0),
              loop=LoopConfig(10, log_every=4, metrics_path=path, progress=True))
    assert len(fetches) == 3                       # steps 4, 8 and the last (10): no per-step sync
    losses, means, w = _reference(10, dtype)
    assert [r["step"] for r in res.history] == [4, 8, 10]
    for row, (a, b) in zip(res.history, [(0, 4), (4, 8), (8, 10)]):
        assert set(row) == {"step", "loss", "xmean", "noise"}     # the (4,) "rows" are not logged
        np.testing.assert_allclose(row["loss"], losses[a:b].mean(), rtol=_rtol(dtype))
        np.testing.assert_allclose(row["xmean"], means[a:b].mean(), rtol=_rtol(dtype), atol=1e-7)
    np.testing.assert_allclose(res.losses, losses, rtol=_rtol(dtype))
    np.testing.assert_allclose(np.asarray(res.state.params), w, rtol=_rtol(dtype))
    assert res.state.params.dtype == dtype and int(res.state.step) == 10
    # the metrics file holds the same rows; read_metrics gives columns for plots
    cols = read_metrics(path)
    np.testing.assert_array_equal(cols["step"], [4, 8, 10])
    np.testing.assert_allclose(cols["loss"], [r["loss"] for r in res.history], rtol=1e-15)
    assert res.metrics_path == path and res.eval is None and res.resumed_from is None


def test_metrics_file_reader_and_plot(tmp_path):
    p = tmp_path / "metrics.jsonl"
    f = training.MetricsFile(p, [{"step": 1, "loss": 3.0}])
    f.write({"step": 2, "loss": float("nan"), "ce": 1.0})
    f.write({"kind": "eval", "step": 2, "dice": 0.5, "per_class": [0.1, 0.9]})
    cols = read_metrics(p)
    np.testing.assert_array_equal(cols["step"], [1, 2])
    assert cols["loss"][0] == 3.0 and np.isnan(cols["loss"][1])
    assert np.isnan(cols["ce"][0]) and cols["ce"][1] == 1.0
    ev = read_metrics(p, "eval")
    assert list(ev) == ["step", "dice"] and ev["dice"].tolist() == [0.5]
    fig = training.plot_metrics({"run": p}, ("loss", "ce"), tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 0 and len(fig.axes) == 2
    with open(p, "a") as fh:
        fh.write("not json\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl:4 is not a JSON object"):
        read_metrics(p)
    with pytest.raises(FileNotFoundError, match="no metrics file"):
        read_metrics(tmp_path / "missing.jsonl")


# ------------------------------------------------------------------------ resume


def _run(workdir, stop_after=None, dtype=np.float32):
    def evaluate(s):
        return {"w0": float(jax.device_get(s.params)[0])}
    return fit(_step, _state(dtype), _Source(dtype), key=jax.random.key(1),
               loop=LoopConfig(10, log_every=4, checkpoint_every=3, eval_every=5,
                               workdir=workdir, stop_after=stop_after),
               evaluate=evaluate)


def test_fit_kill_and_resume_equals_straight_run_rows_included(tmp_path):
    straight = _run(tmp_path / "a")
    killed = _run(tmp_path / "b", stop_after=5)    # mid-interval: steps 5 is fetched, not logged
    assert int(killed.state.step) == 5 and killed.eval is None
    assert [r["step"] for r in killed.history] == [4]
    # a crash after the checkpoint could have logged more: the resume rewrites the file
    with open(tmp_path / "b" / "metrics.jsonl", "a") as fh:
        fh.write(json.dumps({"kind": "train", "step": 8, "loss": -1.0}) + "\n")
    resumed = _run(tmp_path / "b")
    assert resumed.resumed_from == 5 and int(resumed.state.step) == 10
    np.testing.assert_array_equal(np.asarray(resumed.state.params),
                                  np.asarray(straight.state.params))
    assert resumed.history == straight.history      # the row of step 8 spans the kill
    assert resumed.evals == straight.evals and [r["step"] for r in straight.evals] == [5, 10]
    assert resumed.eval == straight.eval
    assert resumed.losses == straight.losses[5:]
    assert (tmp_path / "a" / "metrics.jsonl").read_text() == \
        (tmp_path / "b" / "metrics.jsonl").read_text()
    # a finished run resumes to itself and only evaluates
    again = _run(tmp_path / "a")
    assert again.resumed_from == 10 and again.losses == [] and again.eval == straight.eval


def test_fit_stops_at_a_non_finite_loss_keeping_the_last_good_checkpoint(tmp_path):
    def step(state, key, x, c):
        new, m = _step(state, key, x, c)
        return new, {**m, "loss": jnp.where(state.step >= 2, jnp.nan, m["loss"])}

    with pytest.raises(FloatingPointError, match=r"non-finite training loss nan at step 3 "
                                                 r"\(toy\).*last good checkpoint \(step 2\)"):
        fit(step, _state(np.float32), _Source(np.float32), key=jax.random.key(0),
            loop=LoopConfig(6, log_every=6, checkpoint_every=2, workdir=tmp_path, desc="toy"))
    state, meta = training.restore_checkpoint(tmp_path / "checkpoints", _state(np.float32))
    assert int(state.step) == 2 and meta["data"] == {"t": 2}
    assert [r[0] for r in meta["pending"]] == [1, 2]   # the unlogged interval is saved too


def test_fit_bad_inputs():
    src, st, key = _Source(np.float32), _state(np.float32), jax.random.key(0)
    for bad in (LoopConfig(0), LoopConfig(3, log_every=0), LoopConfig(3, stop_after=-1),
                LoopConfig(3, checkpoint_every=1.5)):
        with pytest.raises(ValueError, match=r"loop\.\w+ must be an int"):
            fit(_step, st, src, key=key, loop=bad)
    with pytest.raises(TypeError, match="LoopConfig"):
        fit(_step, st, src, key=key, loop={"num_steps": 3})
    with pytest.raises(ValueError, match="scalar 'loss'"):
        fit(lambda s, k, x, c: (s, {"ce": jnp.mean(x)}), st, src, key=key, loop=LoopConfig(2))


# ------------------------------------------------------------------------ weight EMA


def test_param_ema_is_the_closed_form_recursion(dtype, rng):
    """bar theta_T = d^T theta_0 + (1 - d) sum_t d^(T-t) theta_t, the updates unchanged."""
    d, T = 0.9, 6
    inner = optax.sgd(0.1, momentum=0.9)
    tx = param_ema(inner, d)
    p = {"w": rng.standard_normal((3, 2)).astype(dtype), "b": rng.standard_normal(2).astype(dtype)}
    s, s_in, traj = tx.init(p), inner.init(p), [p]
    for _ in range(T):
        g = jax.tree.map(lambda a: rng.standard_normal(a.shape).astype(dtype), p)
        u, s = jax.jit(tx.update)(g, s, p)
        u_in, s_in = inner.update(g, s_in, p)
        for k in p:
            np.testing.assert_array_equal(np.asarray(u[k]), np.asarray(u_in[k]))
        p = optax.apply_updates(p, u)
        traj.append(p)
    for k in p:
        closed = d ** T * np.asarray(traj[0][k], np.float64) + (1 - d) * sum(
            d ** (T - t) * np.asarray(traj[t][k], np.float64) for t in range(1, T + 1))
        assert s.ema[k].dtype == dtype
        np.testing.assert_allclose(np.asarray(s.ema[k]), closed, rtol=10 * _rtol(dtype))
    # a TrainState evaluates the average; without one, the parameters
    st = TrainState(jnp.asarray(T), p, {}, s)
    assert st.ema_params is s.ema and training.eval_params(st) is s.ema
    assert training.eval_params(st._replace(opt_state=s.inner)) is p


def test_sgd_and_param_ema_validate():
    for bad in (1.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="ema_decay must lie in"):
            param_ema(optax.sgd(0.1), bad)
    with pytest.raises(TypeError, match="ema_decay"):
        training.sgd(0.1, ema_decay="0.9")
    with pytest.raises(ValueError, match="weight_decay"):
        training.sgd(0.1, weight_decay=-1e-4)
    with pytest.raises(ValueError, match="momentum"):
        training.sgd(0.1, momentum=1.0)
    assert isinstance(training.sgd(0.1, ema_decay=0.999).init({"w": jnp.ones(2)}),
                      training.ParamEmaState)


# ------------------------------------------------------------------------ configs are leaves


@pytest.mark.parametrize("path", ["rdr_jax/dac/configs.py", "rdr_jax/adawac/configs.py"])
def test_configs_import_no_trainer(path):
    tree = ast.parse((ROOT / path).read_text())
    mods = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    mods += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert mods and all(not m.startswith("rdr_jax") for m in mods if m != "__future__"), mods


def test_models_live_in_the_registry():
    from rdr_jax import models
    from rdr_jax.adawac import train as ada
    from rdr_jax.dac import deep
    from rdr_jax.models.small_cnn import SmallCNN
    from rdr_jax.models.tiny_segnet import TinySegNet
    assert deep.SmallCNN is SmallCNN and ada.TinySegNet is TinySegNet
    assert type(models.build_model({"name": "tiny", "num_classes": 3, "width": 4})) is TinySegNet
    with pytest.raises(ValueError, match="unknown model 'resnet9'"):
        models.build_model({"name": "resnet9", "num_classes": 3})
    with pytest.raises(ValueError, match="needs 'num_classes'"):
        models.build_model({"name": "small_cnn"})
    with pytest.raises(ValueError, match="no small variant"):
        models.build_model({"name": "small_cnn", "num_classes": 3, "small": True})


# ------------------------------------------------------------------------ data parallel


_DP_SCRIPT = textwrap.dedent("""
    import json, jax, numpy as np
    assert jax.device_count() == 8, jax.devices()
    from rdr_jax.adawac import configs
    from rdr_jax.adawac.phantom import phantom_cases
    from rdr_jax.adawac.train import train as ada_train
    from rdr_jax.dac import deep
    from rdr_jax.training import make_mesh, shard_batch
    out = {}
    d = phantom_cases(jax.random.key(3), 4, 8, 16, num_test_cases=0)
    c = configs.get_config("phantom_quick")
    c.batch_size = 8; c.num_steps = 4; c.model.width = 4
    c.num_devices = 1
    one = ada_train(c, d.train)
    c.num_devices = 0
    eight = ada_train(c, d.train)
    out["ada"] = {"one": one.losses, "eight": eight.losses,
                  "beta1": np.asarray(one.state.beta).tolist(),
                  "beta8": np.asarray(eight.state.beta).tolist()}
    rng = np.random.default_rng(0)
    y = np.arange(32) % 4
    x = rng.uniform(0, 0.3, (32, 8, 8, 1)).astype(np.float32)
    x[np.arange(32), 2 * y] += 0.7
    cfg = {"method": "dac", "lam": 1.0, "alpha": 2, "total_steps": 4, "batch_size": 8,
           "seed": 0, "model": {"name": "small_cnn", "num_classes": 4, "in_channels": 1,
                                "width": 4},
           "augment": {"name": "shift_rotate"}, "log_every": 1, "eval_batch_size": 12}
    r1 = deep.train({**cfg, "num_devices": 1}, (x, y), test=(x, y), progress=False)
    r8 = deep.train(cfg, (x, y), test=(x, y), progress=False)
    flat = lambda r: np.concatenate([np.ravel(v) for v in jax.tree.leaves(r.state.params)])
    out["dac"] = {"one": [h["loss"] for h in r1.history], "eight": [h["loss"] for h in r8.history],
                  "p1": flat(r1).tolist(), "p8": flat(r8).tolist(),
                  "test1": r1.test, "test8": r8.test,
                  "devices8": len(r8.state.step.sharding.device_set),
                  "devices1": len(r1.state.step.sharding.device_set)}
    try:
        shard_batch(make_mesh(), (np.zeros((6, 2)),))
    except ValueError as e:
        out["split_error"] = str(e)
    try:
        deep.train({**cfg, "batch_size": 6}, (x, y), progress=False)
    except ValueError as e:
        out["dac_error"] = str(e)
    print(json.dumps(out))
""")


def data_parallel_job(workdir):
    """:data:`_DP_SCRIPT`'s ``out`` (a job of ``tests/_multidevice.py``, the suite's one
    8-device subprocess)."""
    namespace = {}
    exec(compile(_DP_SCRIPT, "<_DP_SCRIPT>", "exec"), namespace)
    return namespace["out"]


def test_data_parallel_8_devices_matches_1_device(multidevice):
    """Both trainers on a 1-device and an 8-device mesh (batch axis split, state
    replicated): the same losses, tables and parameters up to float32 summation order."""
    from tests import _multidevice
    out = _multidevice.job(multidevice, "data_parallel")
    ada, dac = out["ada"], out["dac"]
    assert len(ada["one"]) == len(ada["eight"]) == 4
    np.testing.assert_allclose(ada["eight"], ada["one"], rtol=2e-4, atol=1e-6)
    np.testing.assert_allclose(ada["beta8"], ada["beta1"], rtol=1e-3, atol=1e-6)
    assert (dac["devices1"], dac["devices8"]) == (1, 8)
    assert len(dac["one"]) == len(dac["eight"]) == 4
    np.testing.assert_allclose(dac["eight"], dac["one"], rtol=2e-4, atol=1e-6)
    np.testing.assert_allclose(dac["p8"], dac["p1"], rtol=1e-3, atol=1e-5)
    assert dac["test8"]["n"] == dac["test1"]["n"] == 32
    assert dac["test8"]["accuracy"] == pytest.approx(dac["test1"]["accuracy"], abs=1 / 32)
    np.testing.assert_allclose(dac["test8"]["ce"], dac["test1"]["ce"], rtol=1e-3)
    assert "leading size 6, not divisible by the 8 devices" in out["split_error"]
    assert "batch_size (6) must be divisible by the number of devices (8)" in out["dac_error"]
