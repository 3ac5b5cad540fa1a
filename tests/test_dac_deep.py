"""Deep DAC / DA-ERM training (rdr_jax.dac.deep, .data, .configs; experiments/train_dac.py).

Losses against numpy references (float32 and float64, under jit and vmap), the appendix
schedule and the optimizer against a PyTorch-SGD reference written in numpy, the CIFAR-100
loader on fixture files written in the official python-pickle format (plus missing / corrupt /
malicious files), the samplers, and kill-and-resume of the checkpointed training loop, which
must equal an uninterrupted run bitwise on CPU. Sizes are tiny (8x8 images, a 4-channel CNN, a
few steps); the training tests share one compilation through the loop's jit cache.
"""

from __future__ import annotations

import importlib.util
import math
import pickle
import tarfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from rdr_jax.dac import configs as C
from rdr_jax.dac import data as D
from rdr_jax.dac import deep
from rdr_jax import training

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"


def _tol(dtype):
    return 2e-5 if np.dtype(dtype) == np.float32 else 1e-12


# --------------------------------------------------------------------------------------
# numpy references
# --------------------------------------------------------------------------------------
def _np_softmax(z):
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def _np_ce(z, y):
    p = _np_softmax(z)
    return float(np.mean(-np.log(p[np.arange(len(y)), y])))


def _np_dac(lo, la, y, lam, on="probs", squared=False, reduction="mean"):
    u, v = (_np_softmax(lo), _np_softmax(la)) if on == "probs" else (lo, la)
    d = np.array([[np.sum((v[j, i] - u[i]) ** 2) for i in range(lo.shape[0])]
                  for j in range(la.shape[0])])
    d = d if squared else np.sqrt(d)
    reg = d.mean() * (la.shape[0] if reduction == "sum" else 1)
    return _np_ce(lo, y) + lam * reg, d.mean()


def _np_erm(lo, la, y):
    alls = np.concatenate([lo[None], la], 0).reshape(-1, lo.shape[1])
    return _np_ce(alls, np.tile(y, la.shape[0] + 1))


def _problem(rng, dtype, a=3, b=5, k=4, n=None):
    shape = () if n is None else (n,)
    lo = rng.standard_normal(shape + (b, k)).astype(dtype)
    la = (lo[..., None, :, :] if n is not None else lo[None]) + \
        0.7 * rng.standard_normal(shape + (a, b, k)).astype(dtype)
    y = rng.integers(0, k, shape + (b,)).astype(np.int32)
    return lo, la.astype(dtype), y


# --------------------------------------------------------------------------------------
# losses
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("on,squared,reduction", [("probs", False, "mean"),
                                                  ("logits", True, "sum")])
def test_dac_and_erm_losses_match_numpy_jit_vmap(dtype, rng, on, squared, reduction):
    lo, la, y = _problem(rng, dtype, n=3)
    lams = np.array([0.0, 1.0, 10.0], dtype)
    f = jax.jit(jax.vmap(lambda a, b, c, lm: deep.dac_loss(a, b, c, lm, on=on, squared=squared,
                                                           reduction=reduction)))
    got = f(lo, la, y, lams)
    erm = jax.jit(jax.vmap(deep.da_erm_loss))(lo, la, y)
    assert got.total.dtype == np.dtype(dtype)
    for i in range(3):
        ref, cons = _np_dac(lo[i].astype(np.float64), la[i].astype(np.float64), y[i],
                            float(lams[i]), on, squared, reduction)
        np.testing.assert_allclose(float(got.total[i]), ref, rtol=_tol(dtype))
        np.testing.assert_allclose(float(got.consistency[i]), cons, rtol=_tol(dtype))
        np.testing.assert_allclose(float(got.ce[i]), _np_ce(lo[i].astype(np.float64), y[i]),
                                   rtol=_tol(dtype))
        ref_erm = _np_erm(lo[i].astype(np.float64), la[i].astype(np.float64), y[i])
        np.testing.assert_allclose(float(erm.total[i]), ref_erm, rtol=_tol(dtype))


def test_dac_gradient_finite_where_predictions_agree(dtype, rng):
    """||u - v||_2 is not differentiable at u = v: the loss must give the CE gradient there
    (zero subgradient of the distance), not NaN (a plain sqrt gives 0 * inf)."""
    lo, _, y = _problem(rng, dtype)
    la = jnp.stack([jnp.asarray(lo)] * 2)     # augmentations predict exactly the originals

    def grads(z):
        g_l = jax.grad(lambda u: deep.dac_loss(u, jnp.stack([u] * 2), y, 10.0,
                                               on="logits").total)(z)
        g_p = jax.grad(lambda u: deep.dac_loss(u, la, y, 10.0).total)(z)
        return g_l, g_p, jax.grad(lambda u: deep.cross_entropy(u, y))(z)

    g_l, g_p, g_ce = jax.jit(grads)(jnp.asarray(lo))
    assert np.all(np.isfinite(np.asarray(g_l))) and np.all(np.isfinite(np.asarray(g_p)))
    # logits: u - v is exactly zero, so the gradient is exactly the CE gradient
    np.testing.assert_allclose(np.asarray(g_l), np.asarray(g_ce), rtol=_tol(dtype), atol=1e-12)


def test_dac_with_lambda_zero_is_ce_on_originals_and_erm_weights_all(rng):
    lo, la, y = _problem(rng, np.float32)
    t, same = jax.jit(lambda a, b, c: (deep.dac_loss(a, b, c, 0.0),
                                       deep.da_erm_loss(a, jnp.stack([a] * 3), c)))(lo, la, y)
    np.testing.assert_allclose(float(t.total), _np_ce(lo, y), rtol=2e-5)
    # DA-ERM with identical augmentations is the CE on the originals
    np.testing.assert_allclose(float(same.total), _np_ce(lo, y), rtol=2e-5)


def test_fixmatch_loss_matches_numpy(dtype, rng):
    zw = (4 * rng.standard_normal((9, 5))).astype(dtype)
    zs = rng.standard_normal((9, 5)).astype(dtype)
    lu, rate = jax.jit(deep.fixmatch_loss, static_argnums=(2, 3))(zw, zs, 0.9, 1.0)
    q = _np_softmax(zw.astype(np.float64))
    mask = q.max(-1) >= 0.9
    ps = _np_softmax(zs.astype(np.float64))
    ref = np.mean(-np.log(ps[np.arange(9), q.argmax(-1)]) * mask)
    np.testing.assert_allclose(float(lu), ref, rtol=_tol(dtype))
    assert float(rate) == pytest.approx(mask.mean())
    assert 0 < mask.sum() < 9     # both branches exercised


# --------------------------------------------------------------------------------------
# schedule and optimizer
# --------------------------------------------------------------------------------------
def test_cosine_schedule_is_the_appendix_formula():
    s = deep.cosine_schedule()
    for i in (0, 1, 1000, 2 ** 14, 2 ** 15 - 1, 2 ** 15):
        ref = 0.03 * math.cos(i * 7 * math.pi / (2 ** 15 * 16))
        assert float(s(i)) == pytest.approx(ref, rel=1e-6)
    assert float(s(2 ** 15)) == pytest.approx(0.03 * math.cos(7 * math.pi / 16), rel=1e-6)


def test_optimizer_equals_pytorch_nesterov_sgd_with_coupled_decay(rng):
    """torch.optim.SGD(lr_t, momentum=0.9, nesterov=True, weight_decay=wd) on kernels, no decay
    on biases (the reference code's parameter groups), written out in numpy."""
    params = {"kernel": rng.standard_normal((3, 2)), "bias": rng.standard_normal(2)}
    sched = deep.cosine_schedule(0.1, 10)
    tx = deep.make_optimizer(sched, weight_decay=0.01)
    p = jax.tree.map(jnp.asarray, params)
    st = tx.init(p)
    ref = {k: v.copy() for k, v in params.items()}
    buf = {k: np.zeros_like(v) for k, v in params.items()}
    for t in range(4):
        g = {k: rng.standard_normal(v.shape) for k, v in params.items()}
        upd, st = tx.update(jax.tree.map(jnp.asarray, g), st, p)
        p = optax.apply_updates(p, upd)
        lr = 0.1 * math.cos(math.pi * 7 / 16 * t / 10)
        for k in ref:
            d = g[k] + (0.01 * ref[k] if k == "kernel" else 0.0)
            buf[k] = 0.9 * buf[k] + d
            ref[k] = ref[k] - lr * (d + 0.9 * buf[k])
    for k in ref:
        np.testing.assert_allclose(np.asarray(p[k]), ref[k], rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------
# bad inputs
# --------------------------------------------------------------------------------------
def _tiny_cfg(**kw):
    cfg = {"method": "dac", "lam": 1.0, "alpha": 2, "total_steps": 6, "batch_size": 8,
           "seed": 0, "model": {"name": "small_cnn", "num_classes": 4, "in_channels": 1,
                                "width": 4},
           "augment": {"name": "shift_rotate"}, "checkpoint_every": 2, "log_every": 2,
           "eval_batch_size": 16}
    cfg.update(kw)
    return cfg


def test_bad_lambda_and_alpha_raise(rng):
    lo, la, y = _problem(rng, np.float32)
    for bad in (-1.0, -1e-9, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="lam"):
            deep.dac_loss(lo, la, y, bad)
    with pytest.raises(TypeError, match="lam"):
        deep.dac_loss(lo, la, y, "ten")
    with pytest.raises(ValueError, match="alpha"):
        deep.dac_loss(lo, la[:0], y, 1.0)
    with pytest.raises(ValueError, match="alpha"):
        deep.da_erm_loss(lo, la[:0], y)
    graph = None     # alpha is checked first
    with pytest.raises(ValueError, match="alpha"):
        deep.make_train_step(graph, deep.make_optimizer(), alpha=0,
                             augment=deep.random_shift_rotate)
    with pytest.raises(TypeError, match="alpha"):
        deep.make_train_step(graph, deep.make_optimizer(), alpha=2.0,
                             augment=deep.random_shift_rotate)
    x = np.zeros((16, 8, 8, 1), np.float32)
    yy = np.arange(16) % 4
    with pytest.raises(ValueError, match="lam"):
        deep.train(_tiny_cfg(lam=-0.5), (x, yy), progress=False)
    with pytest.raises(ValueError, match="alpha"):
        deep.train(_tiny_cfg(alpha=0), (x, yy), progress=False)
    with pytest.raises(ValueError, match="method"):
        deep.train(_tiny_cfg(method="erm"), (x, yy), progress=False)
    # 0.3: the arrays come as pairs, as for train_runs
    with pytest.raises(TypeError, match=r"data must be a pair \(images, labels\)"):
        deep.train(_tiny_cfg(), x, progress=False)
    with pytest.raises(TypeError, match="test must be a pair.*of length 3"):
        deep.train(_tiny_cfg(), (x, yy), test=(x, yy, yy), progress=False)
    with pytest.raises(ValueError, match="reduction"):
        deep.dac_loss(lo, la, y, 1.0, reduction="max")


# --------------------------------------------------------------------------------------
# CIFAR-100 loader on fixture files (official python-pickle format)
# --------------------------------------------------------------------------------------
def _write_cifar(root: Path, n_train=6, n_test=4, seed=0) -> dict:
    rng = np.random.default_rng(seed)
    d = root / "cifar-100-python"
    d.mkdir(parents=True)
    out = {}
    for split, n in (("train", n_train), ("test", n_test)):
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        fine = [int(x) for x in rng.integers(0, 100, n)]
        obj = {b"filenames": [f"img{i}.png".encode() for i in range(n)],
               b"batch_label": f"{split} batch".encode(), b"fine_labels": fine,
               b"coarse_labels": [f // 5 for f in fine], b"data": data}
        (d / split).write_bytes(pickle.dumps(obj, protocol=2))
        out[split] = (data, fine)
    meta = {b"fine_label_names": [f"class{i}".encode() for i in range(100)],
            b"coarse_label_names": [f"super{i}".encode() for i in range(20)]}
    (d / "meta").write_bytes(pickle.dumps(meta, protocol=2))
    return out


def test_cifar100_loader_reads_official_format(tmp_path, monkeypatch):
    ref = _write_cifar(tmp_path / "data")
    for root in (tmp_path / "data", tmp_path / "data" / "cifar-100-python"):
        ds = D.load_cifar100(root, "train")
        data, fine = ref["train"]
        assert ds.images.shape == (6, 32, 32, 3) and ds.images.dtype == np.uint8
        # pixel (r, c) of channel ch is data[ch * 1024 + 32 r + c]
        assert ds.images[2, 5, 7, 1] == data[2, 1024 + 5 * 32 + 7]
        assert ds.images[4, 31, 0, 2] == data[4, 2048 + 31 * 32]
        np.testing.assert_array_equal(ds.labels, fine)
        assert ds.label_names[3] == "class3"
    te = D.load_cifar100(tmp_path / "data", "test", label_mode="coarse")
    np.testing.assert_array_equal(te.labels, np.asarray(ref["test"][1]) // 5)
    # the archive form
    tgz = tmp_path / "arch" / "cifar-100-python.tar.gz"
    tgz.parent.mkdir()
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(tmp_path / "data" / "cifar-100-python", arcname="cifar-100-python")
    np.testing.assert_array_equal(D.load_cifar100(tgz, "test").images, te.images)
    np.testing.assert_array_equal(D.load_cifar100(tgz.parent, "test").images, te.images)
    # find_cifar100 follows the data-directory convention
    monkeypatch.setenv("RDR_JAX_DATA", str(tmp_path / "data"))
    assert D.find_cifar100() == tmp_path / "data" / "cifar-100-python"
    assert D.find_cifar100(tmp_path / "arch") == tgz
    assert D.find_cifar100(tmp_path / "nowhere") is None


def test_cifar100_loader_missing_and_corrupt_files(tmp_path):
    _write_cifar(tmp_path)
    d = tmp_path / "cifar-100-python"
    with pytest.raises(FileNotFoundError, match="nothere"):
        D.load_cifar100(tmp_path / "nothere", "train")
    (d / "meta").unlink()
    with pytest.raises(FileNotFoundError, match=r"cifar-100-python[/\\]meta"):
        D.load_cifar100(tmp_path, "train")
    _write_cifar(tmp_path / "b")
    d = tmp_path / "b" / "cifar-100-python"
    good = (d / "train").read_bytes()
    (d / "train").write_bytes(good[: len(good) // 2])                  # truncated
    with pytest.raises(ValueError, match=r"cifar-100-python[/\\]train.*corrupt"):
        D.load_cifar100(d, "train")
    (d / "train").write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8)}))
    with pytest.raises(ValueError, match="fine_labels"):
        D.load_cifar100(d, "train")
    (d / "train").write_bytes(pickle.dumps({b"data": np.zeros((2, 100), np.uint8),
                                            b"fine_labels": [0, 1]}))
    with pytest.raises(ValueError, match="3072"):
        D.load_cifar100(d, "train")
    (d / "train").write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8),
                                            b"fine_labels": [0, 100]}))
    with pytest.raises(ValueError, match="range"):
        D.load_cifar100(d, "train")

    class Evil:
        def __reduce__(self):
            import os
            return (os.getcwd, ())

    (d / "train").write_bytes(pickle.dumps(Evil()))
    with pytest.raises(ValueError, match="refusing"):
        D.load_cifar100(d, "train")
    (d / "test").write_bytes(b"\x00garbage")
    with pytest.raises(ValueError, match="test"):
        D.load_cifar100(d, "test")
    bad = tmp_path / "broken.tar.gz"
    bad.write_bytes(b"not a tar file at all")
    with pytest.raises(ValueError, match="broken.tar.gz"):
        D.load_cifar100(bad, "train")
    with pytest.raises(ValueError, match="split"):
        D.load_cifar100(d, "val")


# --------------------------------------------------------------------------------------
# samplers
# --------------------------------------------------------------------------------------
def test_labeled_subset_and_epoch_sampler():
    labels = np.repeat(np.arange(5), [7, 8, 9, 10, 11])
    lab, unl = D.sample_labeled_subset(labels, 3, seed=1, num_unlabeled=10)
    assert np.all(np.bincount(labels[lab]) == 3)
    assert unl.size == 10 and np.intersect1d(lab, unl).size == 0
    lab2, unl2 = D.sample_labeled_subset(labels, 3, seed=1, num_unlabeled=10)
    np.testing.assert_array_equal(lab, lab2)
    np.testing.assert_array_equal(unl, unl2)
    assert not np.array_equal(lab, D.sample_labeled_subset(labels, 3, seed=2)[0])
    with pytest.raises(ValueError, match="class 0 has only 7"):
        D.sample_labeled_subset(labels, 8)
    with pytest.raises(ValueError, match="num_unlabeled"):
        D.sample_labeled_subset(labels, 3, num_unlabeled=100)

    s = D.EpochSampler(10, 3, seed=4)
    first = [next(s) for _ in range(7)]          # 3 batches per epoch (last 1 dropped)
    for e in range(2):
        ep = np.concatenate(first[3 * e:3 * e + 3])
        assert np.unique(ep).size == 9
    assert not np.array_equal(first[0], first[3])
    saved = s.state_dict()
    cont = [next(s) for _ in range(4)]
    r = D.EpochSampler(10, 3, seed=4)
    r.load_state_dict(saved)
    for a, b in zip(cont, [next(r) for _ in range(4)]):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="batch_size"):
        D.EpochSampler(10, 11)
    with pytest.raises(ValueError, match="seed"):
        D.EpochSampler(10, 3, seed=5).load_state_dict(saved)


# --------------------------------------------------------------------------------------
# training: kill-and-resume equals an uninterrupted run, bitwise (CPU)
# --------------------------------------------------------------------------------------
def _digits_like(n=40, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 4
    x = rng.uniform(0, 0.3, (n, 8, 8, 1)).astype(np.float32)
    for i in range(n):                        # a class-dependent bright row: learnable
        x[i, 2 * y[i], :, 0] += 0.7
    return x, y


def _leaves_equal(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(
        np.array_equal(np.asarray(u), np.asarray(v)) for u, v in zip(la, lb))


def test_train_kill_and_resume_is_bitwise_identical(tmp_path, monkeypatch):
    # an empty step cache: with files spread over xdist workers, another file's run on this
    # worker may have cached steps first, and the one-compilation check below must look at
    # this test's step
    monkeypatch.setattr(deep, "_JIT_CACHE", {})
    x, y = _digits_like()
    cfg = _tiny_cfg()
    straight = deep.train(cfg, (x, y), test=(x, y), progress=False)
    n_cached = len(deep._JIT_CACHE)
    # run half-way and "kill": drop every object, keep only the checkpoint directory
    half = deep.train(cfg, (x, y), test=(x, y), workdir=tmp_path, stop_after=3, progress=False)
    assert int(half.state.step) == 3 and half.test is None and half.resumed_from is None
    del half
    resumed = deep.train(cfg, (x, y), test=(x, y), workdir=tmp_path, progress=False)
    assert resumed.resumed_from == 3 and int(resumed.state.step) == 6
    for f in ("params", "model_state", "opt_state"):
        assert _leaves_equal(getattr(straight.state, f), getattr(resumed.state, f)), f
    assert straight.test == resumed.test
    # the logged rows too (the row of step 4 spans the kill), also in the metrics file
    assert straight.history == resumed.history and [h["step"] for h in resumed.history] == \
        [2, 4, 6]
    np.testing.assert_array_equal(training.read_metrics(tmp_path / "metrics.jsonl")["loss"],
                                  [h["loss"] for h in straight.history])
    # BatchNorm statistics really moved away from their initial values
    init_graph, init_state = deep.init_train_state(deep.build_model(cfg["model"], seed=0),
                                                   deep.make_optimizer())
    assert not _leaves_equal(init_state.model_state, straight.state.model_state)
    # a finished run resumes to itself without training
    again = deep.train(cfg, (x, y), test=(x, y), workdir=tmp_path, progress=False)
    assert again.resumed_from == 6 and _leaves_equal(again.state.params, resumed.state.params)
    # one compilation served all of it, and DA-ERM / another lambda reuse it (traced flags)
    erm = deep.train(_tiny_cfg(method="da_erm", lam=0.0), (x, y), test=(x, y), progress=False)
    other = deep.train(_tiny_cfg(lam=7.0), (x, y), progress=False)
    assert len(deep._JIT_CACHE) == n_cached
    step = next(v[0] for v in deep._JIT_CACHE.values())
    layout = (x[:8], y[:8].astype(np.int32), np.float32(1.0), np.bool_(True))
    assert training.jit_train_step(step, training.make_mesh(), layout).fn._cache_size() == 1
    assert not _leaves_equal(erm.state.params, straight.state.params)
    assert not _leaves_equal(other.state.params, straight.state.params)
    assert all(np.isfinite(h["loss"]) for h in straight.history + erm.history)


def test_train_step_learns_and_eval_mode_uses_running_stats():
    """A few dozen DAC steps on a trivially learnable problem fit the training set."""
    x, y = _digits_like(seed=3)
    res = deep.train(_tiny_cfg(total_steps=40, log_every=10, lam=1.0), (x, y), test=(x, y),
                     progress=False)
    assert len(res.history) >= 2
    assert res.history[-1]["loss"] < res.history[0]["loss"]
    assert res.test["accuracy"] >= 0.9, res.test
    # evaluation uses the BatchNorm running averages: a single image gives the same logits
    model = nnx.merge(res.graph.eval, res.state.params, res.state.model_state)
    one = np.asarray(model(jnp.asarray(x[:1])))
    many = np.asarray(model(jnp.asarray(x[:8])))[:1]
    np.testing.assert_allclose(one, many, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------
# configs and the CIFAR script
# --------------------------------------------------------------------------------------
def test_configs_match_the_appendix():
    for name in C.CONFIGS:
        full, quick = C.get_config(name), C.get_config(name, quick=True)
        doc = C.CONFIGS[name].__doc__.strip()
        assert doc.startswith("python experiments/"), name
        assert quick.quick and not full.quick
        assert quick.total_steps < full.total_steps
    c = C.get_config("different_lambda")
    assert (c.batch_size, c.total_steps, c.base_lr, c.momentum, c.alpha) == (64, 2 ** 15, 0.03,
                                                                            0.9, 7)
    assert c.lr_cycles == pytest.approx(7 / 16) and c.labels_per_class == 100
    assert (c.model.depth, c.model.widen_factor) == (28, 2)
    assert (c.augment.num_ops, c.augment.magnitude) == (2, 10.0)
    assert [r.get("lam") for r in c.runs[1:]] == [0.0, 1.0, 5.0, 10.0, 20.0]
    assert C.get_config("misspecified_lambda").augment.num_ops == 100
    assert [r["alpha"] for r in C.get_config("different_number_of_aug").runs][::2] == \
        [1, 3, 7, 15]
    rc = C.run_config(c, 2, 4)
    assert (rc.method, rc.lam, rc.seed) == ("dac", 1.0, 4)
    with pytest.raises(ValueError, match="unknown config"):
        C.get_config("table9")


def _load_script(name):
    spec = importlib.util.spec_from_file_location(f"_rdr_exp_{name}", EXPERIMENTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_train_dac_script_exits_cleanly_without_cifar(tmp_path, capsys):
    mod = _load_script("train_dac")
    res = mod.main(["--config", "different_lambda", "--quick", "--data-dir", str(tmp_path),
                    "--out", str(tmp_path / "out")])
    assert "skipped" in res
    assert "CIFAR-100 not found" in capsys.readouterr().out
    assert not (tmp_path / "out").exists()


def test_augmentations_match_numpy():
    x = np.random.default_rng(0).uniform(size=(6, 8, 8, 2)).astype(np.float32)
    f = jax.jit(lambda k, a: (deep.random_shift_rotate(k, a, max_shift=0.0, max_angle=0.0),
                              deep.weak_augment(k, a),
                              deep.random_shift_rotate(k, a)))
    ident, weak, sr = (np.asarray(v) for v in f(jax.random.key(3), x))
    np.testing.assert_allclose(ident, x, atol=1e-6)       # no shift, no rotation
    assert not np.allclose(sr, x) and np.all(np.isfinite(sr))
    # weak: every image is a crop of the reflect-padded (possibly flipped) original
    p = 1                                                  # int(0.125 * 8)
    for i in range(6):
        cands = []
        for im in (x[i], x[i, :, ::-1]):
            pad = np.pad(im, ((p, p), (p, p), (0, 0)), mode="reflect")
            cands += [pad[r:r + 8, c:c + 8] for r in range(2 * p + 1) for c in range(2 * p + 1)]
        assert any(np.array_equal(weak[i], cnd) for cnd in cands), i


def test_train_dac_script_on_fixture_cifar(tmp_path, capsys):
    """Quick configs end to end on fixture CIFAR-100 files (a cheap augmentation instead of
    RandAugment): a DA-ERM and a DAC cell, a rerun that reads finished runs back, and one
    FixMatch + DAC cell."""
    rng = np.random.default_rng(0)
    d = tmp_path / "data" / "cifar-100-python"
    d.mkdir(parents=True)
    for split, n in (("train", 300), ("test", 60)):
        fine = [int(f) for f in np.arange(n) % 100]
        obj = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"fine_labels": fine,
               b"coarse_labels": [f // 5 for f in fine]}
        (d / split).write_bytes(pickle.dumps(obj, protocol=2))
    (d / "meta").write_bytes(pickle.dumps(
        {b"fine_label_names": [b"c%d" % i for i in range(100)],
         b"coarse_label_names": [b"s%d" % i for i in range(20)]}, protocol=2))
    mod = _load_script("train_dac")
    common = ["--quick", "--data-dir", str(tmp_path / "data"), "--no-progress",
              "--set", "augment.name='shift_rotate'", "--set", "model.width=4"]
    out = tmp_path / "out"
    res = mod.main(["--config", "different_lambda", "--run", "0", "--run", "2",
                    "--out", str(out)] + common)
    assert [r["cell"] for r in res["rows"]] == ["da_erm", "dac lam=1"]
    for r in res["rows"]:
        assert r["steps"] == 4 and r["labels"] == 200 and r["n_test"] == 60
        assert 0.0 <= r["test_accuracy"] <= 1.0
    for f in ("results.csv", "results.json", "config.json", "train_dac_different_lambda.png",
              "training_curves.png"):
        assert (out / f).stat().st_size > 0, f
    assert "dac_beats_da_erm" in res["claims"]
    again = mod.main(["--config", "different_lambda", "--run", "0", "--run", "2",
                      "--out", str(out)] + common)
    assert again["rows"] == res["rows"]
    assert "done before" in capsys.readouterr().out
    fm = mod.main(["--config", "fixmatch_dac", "--run", "1", "--out", str(tmp_path / "fm")]
                  + common)
    assert fm["rows"][0]["unlabeled"] == 40 and fm["rows"][0]["cell"] == \
        "fixmatch+dac lam=1 unl=40"


# --------------------------------------------------------------------------------------
# FixMatch baseline: weight EMA for evaluation, Cutout in the strong view
# --------------------------------------------------------------------------------------
def test_fixmatch_evaluates_the_weight_average():
    x, y = _digits_like(seed=5)
    cfg = _tiny_cfg(method="fixmatch_dac", total_steps=3, mu=2, ema_decay=0.9,
                    strong_cutout=0.5, weak_augment_originals=True)
    unl = np.ascontiguousarray(x[::-1])
    res = deep.train(cfg, (x, y), test=(x, y), unlabeled_images=unl, progress=False)
    st = res.state
    assert isinstance(st.opt_state, training.ParamEmaState)
    assert {"unlabeled_loss", "mask_rate", "lr"} <= set(res.history[-1])
    # the average after one step: 0.9 theta_0 + 0.1 theta_1 (reference ModelEMA, decay d)
    one = deep.train(cfg, (x, y), unlabeled_images=unl, stop_after=1, progress=False).state
    _, init = deep.init_train_state(deep.build_model(cfg["model"], seed=0),
                                    deep.make_optimizer())
    for e, p0, p1 in zip(*(jax.tree.leaves(t) for t in (one.ema_params, init.params,
                                                        one.params))):
        np.testing.assert_allclose(np.asarray(e), 0.9 * np.asarray(p0) + 0.1 * np.asarray(p1),
                                   rtol=1e-6, atol=1e-7)
    # the test metrics are those of the averaged weights (with the current BN statistics)

    def ce_acc(params):
        logits = np.asarray(nnx.merge(res.graph.eval, params, st.model_state)(jnp.asarray(x)),
                            np.float64)
        return _np_ce(logits, y), float(np.mean(logits.argmax(-1) == y))

    ce_ema, acc_ema = ce_acc(st.ema_params)
    ce_raw, _ = ce_acc(st.params)
    np.testing.assert_allclose(res.test["ce"], ce_ema, rtol=1e-5)
    assert res.test["accuracy"] == pytest.approx(acc_ema)
    assert abs(ce_raw - ce_ema) > 1e-3


def test_fixmatch_strong_view_ends_with_cutout():
    """strong = weak (flip + crop) -> configured augmentation (here weak again) -> Cutout: on
    zero images only the Cutout square (side 0.5 * 8 = 4, i.e. 5 px inside the image) is
    non-zero."""
    from rdr_jax.dac.randaugment import CUTOUT_FILL
    strong = deep._strong_augment({"augment": {"name": "weak"}, "strong_cutout": 0.5})
    out = np.asarray(jax.jit(strong)(jax.random.key(2), jnp.zeros((16, 8, 8, 1))))[..., 0]
    for img in out:
        m = img > 0
        r, c = np.flatnonzero(m.any(1)), np.flatnonzero(m.any(0))
        assert m.sum() == r.size * c.size and r.size == min(5, 8 - r[0])
        assert c.size == min(5, 8 - c[0])
        np.testing.assert_allclose(img[m], CUTOUT_FILL, rtol=1e-6)
    none = deep._strong_augment({"augment": {"name": "weak"}, "strong_cutout": 0.0})
    assert not np.asarray(none(jax.random.key(2), jnp.zeros((2, 8, 8, 1)))).any()
    with pytest.raises(ValueError, match="strong_cutout"):
        deep._strong_augment({"augment": {"name": "weak"}, "strong_cutout": 2.0})
