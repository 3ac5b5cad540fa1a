"""experiments/fig_adawac.py: the AdaWAC figures (thesis ``fig:synapse-weights``,
``fig:synapse``, ``fig:vis_synapse_half_slice_sparse``, ``fig:acdc``).

The claim statistics and the slice picking are checked on hand-made inputs with known
answers; the figure protocol of ``--figure all`` (files, claims, one training per (config,
method, subset)) runs with ``train`` replaced by a stub whose histories and test scores are
known; real few-step training on a shrunken quick config (``--set``) covers ``weights`` and
``synapse`` end to end (each new training costs ~10-30 s of XLA compilation on 2 CPU cores, so
the other figures, which differ only in data and subset, run with the stub).
"""

import csv
import json
import math
import sys
import types

import jax
import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from rdr_jax.adawac.data import VolumeDataset, has_foreground
from rdr_jax.adawac.phantom import phantom_cases

TINY = ["--set", "model.width=4", "--set", "model.depth=2", "--set", "data.size=16",
        "--set", "data.num_cases=4", "--set", "data.num_slices=8",
        "--set", "data.num_test_cases=2"]
FIGURE_FILES = {"weights": ["weights.png", "weights.json", "weights.csv"],
                "synapse": ["synapse.png", "synapse.json", "synapse.csv"],
                "half_sparse": ["half_sparse.png", "half_sparse.json", "half_sparse.csv",
                                "half_sparse_legend.png"],
                "acdc": ["acdc.png", "acdc.json", "acdc.csv"]}


@pytest.fixture
def fig(script):
    return script("fig_adawac")


def _check_outputs(out, figures):
    for f in figures:
        for name in FIGURE_FILES[f]:
            assert (out / name).is_file() and (out / name).stat().st_size > 0, name
        saved = json.loads((out / f"{f}.json").read_text())
        assert saved["figure"] == f and saved["claims"]
        for c in saved["claims"].values():
            assert isinstance(c["held"], bool) and c["detail"]
        assert "method" in saved["config"] and saved["args"]["figure"]
    summary = json.loads((out / "results.json").read_text())
    expected = {f"{f}/{c}" for f in figures
                for c in json.loads((out / f"{f}.json").read_text())["claims"]}
    assert set(summary["claims"]) == expected
    assert (out / "config.json").is_file()
    return summary


# ------------------------------------------------------------------------ statistics


def test_figures_to_run_and_bad_figure(fig, tmp_path):
    assert fig.figures_to_run("all") == ["weights", "synapse", "half_sparse", "acdc"]
    assert fig.figures_to_run("half-sparse") == ["half_sparse"]
    with pytest.raises(ValueError, match="--figure must be one of"):
        fig.figures_to_run("tables")
    with pytest.raises(SystemExit):
        fig.main(["--figure", "tables", "--out", str(tmp_path)])
    args = fig.parse_args(["--figure", "weights", "--out", str(tmp_path)])
    args.figure = "nope"
    with pytest.raises(ValueError, match="--figure"):
        fig.run(args)
    args.figure, args.steps = "weights", 0
    with pytest.raises(ValueError, match="--steps"):
        fig.run(args)


def test_apply_overrides(fig):
    from rdr_jax.adawac import configs
    base = configs.get_config("synapse_transunet", quick=True)
    c = fig.apply_overrides(base, ["model.width=4", "eta=8", "data.subset=half-vol"])
    assert (c.model.width, c.eta, c.data.subset) == (4, 8.0, "half-vol")
    assert base.model.width == 16  # a copy is changed
    for bad, msg in (("model.nope=1", "no field"), ("width", "field.path=value"),
                     ("nope.x=1", "no field")):
        with pytest.raises(ValueError, match=msg):
            fig.apply_overrides(base, [bad])


def test_group_means_and_roc_auc(fig):
    t = np.array([[1.0, 3.0, np.nan, 2.0], [np.nan, np.nan, 5.0, 7.0]])
    d, s = fig.group_means(t, np.array([True, True, False, False]))
    np.testing.assert_allclose(d, [2.0, np.nan])
    np.testing.assert_allclose(s, [2.0, 6.0])
    with pytest.raises(ValueError, match="dense"):
        fig.group_means(t, np.ones(3, bool))
    assert fig.roc_auc([0, 1, 1, 0], [0.1, 0.8, 0.7, np.nan]) == 1.0
    assert fig.roc_auc([0, 1, 0], [0.9, 0.1, 0.8]) == 0.0
    assert math.isnan(fig.roc_auc([1, 1], [0.2, 0.3]))


def _history(ce, cons, beta):
    e = len(ce)
    return {"step": list(range(1, e + 1)), "epoch": list(range(e)), "ce": ce, "cons": cons,
            "beta": beta}


def test_separation_stats_and_claims(fig):
    fg = np.array([True, True, False, False])
    ce = [[1.0, 1.2, 1.0, 0.8], [0.8, 1.0, 0.1, 0.1]]   # dense/sparse 1.22 -> 9.0
    cons = [[0.3, 0.2, 0.2, 0.3], [0.1, 0.2, 0.1, 0.2]]  # 1.0 -> 1.0
    beta = [[0.6, 0.6, 0.4, 0.4], [0.9, 0.8, 0.2, 0.3]]
    stats = fig.separation_stats(_history(ce, cons, beta), fg, np.array([1, 0, 0, 0], bool))
    assert [r["epoch"] for r in stats] == [0, 1]
    assert stats[0]["ce_ratio"] == pytest.approx(1.1 / 0.9)
    assert stats[1]["ce_ratio"] == pytest.approx(9.0)
    assert stats[1]["cons_ratio"] == pytest.approx(1.0)
    assert stats[1]["auc_beta"] == 1.0 and stats[1]["auc_beta_dense1pct"] == 1.0
    claims = fig.weight_claims(stats)
    assert set(claims) == {"a_ce_separates", "b_consistency_mixed", "c_beta_separates",
                           "c2_beta_separates_label_dense"}
    assert all(c["held"] is True for c in claims.values())
    # the opposite: CE ratio shrinks, consistency separates more than CE, beta mixed
    stats = fig.separation_stats(_history(ce[::-1], [[1.0, 1.0, 0.1, 0.1]] * 2,
                                          [[0.2, 0.9, 0.5, 0.6]] * 2), fg, fg)
    claims = fig.weight_claims(stats)
    assert not any(c["held"] for c in claims.values())
    # a group never seen (NaN) is not a separation
    nan = [[np.nan, np.nan, 1.0, 1.0], [np.nan, np.nan, 1.0, 1.0]]
    claims = fig.weight_claims(fig.separation_stats(_history(nan, nan, beta), fg, fg))
    assert claims["a_ce_separates"]["held"] is False
    assert claims["b_consistency_mixed"]["held"] is False
    with pytest.raises(ValueError, match="no snapshots"):
        fig.separation_stats(_history([], [], []), fg, fg)


def test_pick_slices_spreads_and_skips_neighbours(fig):
    lab = np.zeros((2, 6, 4, 4), np.uint8)
    lab[0, 2, 0, 0], lab[0, 2, 1, 1], lab[0, 2, 2, 2] = 1, 2, 3   # 3 classes
    lab[0, 3, 0, :2], lab[0, 3, 1, 0] = 1, 2                       # 2 classes, neighbour of 2
    lab[0, 5, 0, 0] = 4                                            # 1 class
    lab[1, 1, :2, :2] = 5                                          # 1 class, large
    lab[1, 4, 0, 0] = 6                                            # 1 class, small
    vols = VolumeDataset(tuple(np.zeros_like(lab, np.float32)), tuple(lab), ("a", "b"))
    assert fig.pick_slices(vols, 2) == [(0, 2), (1, 1)]
    assert fig.pick_slices(vols, 4) == [(0, 2), (0, 5), (1, 1), (1, 4)]
    assert fig.pick_slices(vols, 6) == [(0, 2), (0, 5), (1, 1), (1, 4)]  # no more eligible
    with pytest.raises(ValueError, match="k must be"):
        fig.pick_slices(vols, 0)
    empty = VolumeDataset((np.zeros((2, 4, 4)),), (np.zeros((2, 4, 4), np.uint8),), ("e",))
    with pytest.raises(ValueError, match="no test slice has foreground"):
        fig.pick_slices(empty, 6)


def test_slice_dice(fig):
    lab = np.zeros((4, 4), int)
    lab[:2, :2] = 1
    pred = lab.copy()
    pred[0, 0] = 0
    pred[3, 3] = 2     # a false class: DSC 0 for class 2
    assert fig.slice_dice(lab, lab, 4) == 1.0
    assert fig.slice_dice(pred, lab, 4) == pytest.approx((2 * 3 / 7 + 0.0) / 2)
    assert math.isnan(fig.slice_dice(np.zeros((4, 4), int), np.zeros((4, 4), int), 4))


# ------------------------------------------------------------------------ protocol (stub)


def _stub(calls):
    """A ``train`` stand-in: known histories (CE separates, consistency does not, beta does)
    and test DSC 0.6 for AdaWAC, 0.5 for ERM."""
    from rdr_jax.adawac.train import TrainResult

    def train(cfg, ds, *, test=None, num_classes=9, progress=False, **kw):
        calls.append((cfg.method, cfg.data.subset, len(ds.names), num_classes,
                      cfg.num_steps))
        fg = has_foreground(ds)
        col = fg[None, :]
        ce = np.where(col, [[1.0], [2.0], [4.0]], [[1.0], [0.5], [0.25]])
        cons = np.full(ce.shape, 0.3) + 0.01 * (np.arange(len(fg)) % 3)
        beta = np.where(col, [[0.5], [0.7], [0.9]], [[0.5], [0.3], [0.1]])
        hist = {"step": [2, 4, 6], "epoch": [0, 1, 2], "ce": ce.tolist(),
                "cons": cons.tolist(), "beta": beta.tolist()}
        dice = 0.6 if cfg.method == "adawac" else 0.5
        state = types.SimpleNamespace(beta=beta[-1], step=np.int32(6))
        return TrainResult(state, None, [1.0], hist,
                           {"dice": dice, "hd95": 3.0, "per_class_dice": [dice] * 8},
                           None, 0.01)
    return train


def test_all_figures_protocol_with_stub(fig, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(fig, "train", _stub(calls))
    monkeypatch.setattr(fig, "predict_slices",
                        lambda res, images, size, batch: np.zeros(images.shape, np.int32))
    res = fig.main(["--figure", "all", "--quick", "--steps", "6", "--out", str(tmp_path)])
    _check_outputs(tmp_path, list(FIGURE_FILES))
    # one training per (config, method, subset): the AdaWAC full run is shared by weights
    # and synapse; half-sparse has half the slices; acdc has 4 classes
    n_acdc = json.loads((tmp_path / "acdc.json").read_text())["num_train_slices"]
    assert sorted(calls) == sorted([("adawac", "full", 128, 9, 6), ("erm", "full", 128, 9, 6),
                                    ("adawac", "half-sparse", 64, 9, 6),
                                    ("erm", "half-sparse", 64, 9, 6),
                                    ("adawac", "full", n_acdc, 4, 6),
                                    ("erm", "full", n_acdc, 4, 6)])
    assert [t["num_slices"] for t in res["trainings"]] == [c[2] for c in calls]
    assert len(res["trainings"]) == 6 and not res["skipped"]
    assert set(res["claims"]) == {"weights/a_ce_separates", "weights/b_consistency_mixed",
                                  "weights/c_beta_separates",
                                  "weights/c2_beta_separates_label_dense",
                                  "synapse/adawac_beats_erm",
                                  "half_sparse/adawac_beats_erm", "acdc/adawac_beats_erm"}
    # the stub's known answer: its beta follows "has foreground" exactly, so every claim
    # holds except possibly (c2), where the phantom's label-sparse foreground slices share
    # the dense slices' beta: its AUC is that of the has-foreground indicator, computed here
    c2 = res["claims"].pop("weights/c2_beta_separates_label_dense")
    d = phantom_cases(jax.random.key(0), 8, 16, 32, num_test_cases=0).train
    frac = (d.labels > 0).reshape(len(d.labels), -1).mean(1)
    auc1 = roc_auc_score(frac >= 0.01, has_foreground(d))
    assert 0.8 < auc1 < 1.0 and f"= {auc1:.3f}" in c2["detail"]
    assert c2["held"] is bool(auc1 >= 0.9) and "foreground >= 1%" in c2["detail"]
    assert all(c["held"] is True for c in res["claims"].values())
    w = json.loads((tmp_path / "weights.json").read_text())
    assert len(w["per_epoch"]) == 3 and w["num_slices"] == 128 and w["num_cases"] == 8
    assert w["per_epoch"][-1]["ce_ratio"] == pytest.approx(16.0)
    with open(tmp_path / "weights.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 3
    for f in ("synapse", "half_sparse", "acdc"):
        saved = json.loads((tmp_path / f"{f}.json").read_text())
        assert len(saved["slices"]) == 6 and saved["test"]["adawac"]["dice"] == 0.6
        # an all-background prediction scores 0 on every slice with foreground
        assert all(r["dice_adawac"] == 0.0 and r["num_classes"] >= 1 for r in saved["slices"])
        with open(tmp_path / f"{f}.csv", newline="") as fh:
            assert len(list(csv.DictReader(fh))) == 6
    assert json.loads((tmp_path / "acdc.json").read_text())["source"] == "cardiac phantom"


def test_acdc_skipped_without_cardiac_phantom(fig, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(fig, "train", _stub(calls))
    monkeypatch.setitem(sys.modules, "rdr_jax.adawac.cardiac_phantom", None)  # ImportError
    res = fig.main(["--figure", "acdc", "--quick", "--out", str(tmp_path)])
    assert "cardiac phantom is unavailable" in res["skipped"]["acdc"]
    assert not calls and not res["claims"] and not (tmp_path / "acdc.png").exists()
    assert json.loads((tmp_path / "results.json").read_text())["skipped"]["acdc"]


# ------------------------------------------------------------------------ real training


def test_weights_and_synapse_real_training(fig, tmp_path):
    res = fig.main(["--figure", "weights", "--quick", "--steps", "2", "--out", str(tmp_path),
                    *TINY])
    _check_outputs(tmp_path, ["weights"])
    w = res["figures"]["weights"]
    assert w["num_slices"] == 32 and len(w["per_epoch"]) == 1
    assert len(w["final_beta"]) == 32 and all(0 < b < 1 for b in w["final_beta"])
    assert all(isinstance(c["held"], bool) for c in res["claims"].values())
    # one snapshot: the CE separation cannot grow from the first to the last epoch
    assert res["claims"]["weights/a_ce_separates"]["held"] is False
    res = fig.main(["--figure", "synapse", "--quick", "--steps", "2", "--out", str(tmp_path),
                    *TINY])
    _check_outputs(tmp_path, ["synapse"])
    assert [(t["method"], t["steps"]) for t in res["trainings"]] == [("adawac", 2), ("erm", 2)]
    s = res["figures"]["synapse"]
    assert 1 <= len(s["slices"]) <= 6
    for r in s["slices"]:
        assert 0.0 <= r["dice_adawac"] <= 1.0 and 0.0 <= r["dice_erm"] <= 1.0
    for m in ("adawac", "erm"):
        assert 0.0 <= s["test"][m]["dice"] <= 1.0
