"""Training is bitwise reproducible: every AdaWAC method (``rdr_jax.adawac.train.METHODS``) and
every DAC training method (deep: ``dac``, ``da_erm``, ``fixmatch_dac``; two-layer:
``rdr_jax.dac.two_layer.METHODS``, DAC hard and soft) gives the same bytes of the trained
state for the same config and seed, twice in this process and once in a fresh one.

The AdaWAC network is sized so that the consistency term's encoder output is ``(16, 6, 6,
64)``: the shape at which jaxlib 0.10.2's YNNPACK fusions miscompiled its gradient (trim + ACR
runs diverged; ``docs/xla_cpu_ynn_pad_repro.py``). The child process inherits the suite's
XLA_FLAGS (tests/conftest.py), so both processes compile the same programs. The last two
tests check the workaround itself: a CPU train step has no YNNPACK fusion, and the pattern
that was miscompiled gives the numpy answer.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rdr_jax.adawac import configs
from rdr_jax.adawac import train as adawac
from rdr_jax.adawac.data import SliceDataset
from rdr_jax.dac import deep, two_layer
from rdr_jax.training import jit_train_step, make_mesh, shard_batch

ROOT = Path(__file__).resolve().parent.parent
ADAWAC = tuple(f"adawac:{m}" for m in adawac.METHODS)
DEEP_DAC = ("deep:dac", "deep:da_erm", "deep:fixmatch_dac")
TWO_LAYER = tuple(f"two_layer:{m}" for m in two_layer.METHODS) + ("two_layer:dac_hard",)
RUNS = ADAWAC + DEEP_DAC + TWO_LAYER
STEPS = 3


def _digest(tree) -> str:
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(jax.device_get(tree)):
        a = np.asarray(leaf)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _finite(tree) -> bool:
    return all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(jax.device_get(tree)))


def _adawac_state(method: str):
    rng = np.random.default_rng(0)
    n, size = 16, 12
    images = rng.random((n, size, size)).astype(np.float32)
    labels = (rng.random((n, size, size)) * 3).astype(np.uint8)
    labels[::4] = 0                                      # empty slices for the trim methods
    data = SliceDataset(images, labels, np.zeros(n, np.int32), np.arange(n, dtype=np.int32),
                        ("case0",), tuple(f"s{i}" for i in range(n)))
    c = configs.get_config("phantom_quick")
    c.method, c.lam, c.batch_size, c.num_steps, c.log_every = method, 0.5, 8, STEPS, 1
    c.model.width, c.model.depth = 64, 1                 # encoder output (16, 6, 6, 64)
    st = adawac.train(c, data, num_classes=3).state
    return st.params, (st.params, st.model_state, st.opt_state, st.extra)


def _deep_state(method: str):
    rng = np.random.default_rng(0)
    y = np.arange(32) % 4
    x = rng.uniform(0, 0.3, (32, 8, 8, 1)).astype(np.float32)
    x[np.arange(32), 2 * y, :, 0] += 0.7
    cfg = {"method": method, "lam": 1.0, "alpha": 2, "total_steps": STEPS, "batch_size": 8,
           "seed": 0, "augment": {"name": "shift_rotate"}, "log_every": 1,
           "model": {"name": "small_cnn", "num_classes": 4, "in_channels": 1, "width": 4}}
    kw = {}
    if method == "fixmatch_dac":
        cfg.update(mu=2, ema_decay=0.9)
        kw["unlabeled_images"] = np.ascontiguousarray(x[::-1])
    st = deep.train(cfg, (x, y), progress=False, **kw).state
    return st.params, (st.params, st.model_state, st.opt_state)


def _two_layer_state(method: str):
    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.standard_normal((32, 6)), jnp.float32)
    y = jnp.asarray(rng.standard_normal(32), jnp.float32)
    X_aug = X[None] + jnp.asarray(rng.standard_normal((2, 32, 6)) * [1, 1, 0, 0, 0, 0],
                                  jnp.float32)
    key = jax.random.key(0)
    if method == "da_erm":
        res = two_layer.fit_da_erm(key, X, y, X_aug, options=two_layer.FitOptions(steps=STEPS))
    else:
        res = two_layer.fit_dac(key, X, y, X_aug, None if method == "dac_hard" else 1.0,
                                options=two_layer.FitOptions(steps=STEPS))
    return res.params, (res.params, res.losses)


def run_once(name: str) -> str:
    """The digest of the state ``name`` trains (``"<chapter>:<method>"``), or the error."""
    chapter, method = name.split(":")
    fn = {"adawac": _adawac_state, "deep": _deep_state, "two_layer": _two_layer_state}[chapter]
    try:
        params, state = fn(method)
    except FloatingPointError as e:                      # a diverged run: never equal
        return f"FloatingPointError: {e}"
    if not _finite(params):
        return "non-finite parameters"
    return _digest(state)


def run_all() -> dict:
    """``{name: digest}`` over :data:`RUNS` (what the child process prints)."""
    return {name: run_once(name) for name in RUNS}


@pytest.fixture(scope="module")
def child_process():
    """A fresh process running :func:`run_all`, then :func:`pad_vjp_wrong_entries` (last: on
    jaxlib 0.10.2 without the workaround it can segfault). Started first, so that it runs
    while this process trains."""
    code = (f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); "
            "from tests.test_training_determinism import run_all, pad_vjp_wrong_entries; "
            "print('DIGESTS ' + json.dumps(run_all()), flush=True); "
            "print('WRONG', pad_vjp_wrong_entries(), flush=True)")
    # compiles its own programs: not from the session's compilation cache (tests/conftest.py)
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


@pytest.fixture(scope="module")
def here(child_process):
    """Two runs of every method in this process: ``{name: (first, second)}``."""
    with jax.enable_x64(False):
        return {name: (run_once(name), run_once(name)) for name in RUNS}


@pytest.fixture(scope="module")
def child(child_process):
    """``(returncode, stdout, stderr)`` of :func:`child_process`."""
    out, err = child_process.communicate(timeout=600)
    return child_process.returncode, out, err


def _child_digests(child) -> dict:
    rc, out, err = child
    lines = [ln for ln in out.splitlines() if ln.startswith("DIGESTS ")]
    assert lines, f"child failed ({rc}): {err[-2000:]}"
    return json.loads(lines[-1][len("DIGESTS "):])


@pytest.mark.parametrize("name", RUNS)
def test_same_seed_same_bytes_in_one_process(here, name):
    first, second = here[name]
    assert len(first) == 64, f"{name}: {first}"
    assert first == second, f"{name}: two runs of one seed differ"


@pytest.mark.parametrize("name", RUNS)
def test_same_seed_same_bytes_across_processes(here, child, name):
    there = _child_digests(child)[name]
    assert len(there) == 64, f"{name} in a fresh process: {there}"
    assert here[name][0] == there, f"{name}: this process and a fresh one differ"


def _pad_vjp_step(state, key, z, g):
    """The gradient pattern of ``docs/xla_cpu_ynn_pad_repro.py``: the VJP of ``mean((z[:8] -
    z[8:])**2)`` plus a reduction, as a train step."""
    _, vjp = jax.vjp(lambda z: ((z[:8] - z[8:]) ** 2).reshape(8, -1).mean(1), z)
    out = vjp(jnp.full((8,), 0.0625, jnp.float32))[0] + g.reshape(16, 6, 2, 6, 2, -1).sum((2, 4))
    return {"out": out}, {"loss": jnp.sum(z[:1])}


def pad_vjp_wrong_entries() -> list:
    """Wrong entries of :func:`_pad_vjp_step` (compiled as ``fit`` compiles a step) in 3 calls."""
    rng = np.random.default_rng(0)
    z = rng.standard_normal((16, 6, 6, 64)).astype(np.float32)
    g = rng.standard_normal((16, 12, 12, 64)).astype(np.float32)
    d = 0.0625 * 2 * (z[:8] - z[8:]) / (6 * 6 * 64)
    want = np.concatenate([d, -d]) + g.reshape(16, 6, 2, 6, 2, 64).sum((2, 4))
    mesh = make_mesh(jax.devices()[:1])
    batch = shard_batch(mesh, (z, g))
    fn = jit_train_step(_pad_vjp_step, mesh, batch).fn
    outs = [fn({"out": jnp.zeros_like(want)}, jax.random.key(0), batch)[0]["out"]
            for _ in range(3)]
    return [int((~np.isclose(np.asarray(o), want, rtol=1e-4, atol=1e-5)).sum()) for o in outs]


def test_cpu_train_steps_compile_without_ynnpack_fusions():
    """Compile only (the miscompiled program segfaults some runs): no ``__ynn_fusion``."""
    mesh = make_mesh(jax.devices()[:1])
    batch = shard_batch(mesh, (np.zeros((16, 6, 6, 64), np.float32),
                               np.zeros((16, 12, 12, 64), np.float32)))
    with jax.enable_x64(False):
        text = jit_train_step(_pad_vjp_step, mesh, batch).fn.lower(
            {"out": jnp.zeros((16, 6, 6, 64))}, jax.random.key(0), batch).compile().as_text()
    if jax.devices()[0].platform == "cpu":
        assert '"__ynn_fusion"' not in text


def test_pad_vjp_step_is_right_in_a_fresh_process(child):
    rc, out, err = child
    assert rc == 0, f"child died ({rc}): {err[-2000:]}"
    assert "WRONG [0, 0, 0]" in out, out[-2000:]
