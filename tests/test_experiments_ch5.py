"""experiments/adawac_tables.py: the five AdaWAC tables (thesis ``tab:synapse_sample_eff``,
``tab:trim``, ``tab:acdc``, ``tab:ablation``, ``tab:synapse_sample_eff_unet``).

Real (few-step) training for the ``synapse_sample_eff`` and ``acdc`` tables; the other three
tables run the same code path with other rows, checked for their protocol (rows, methods,
overrides, subsets, claims, outputs) with ``train`` replaced by a fast stub, and with real
training under the ``slow`` marker (each compiles 4-5 more train steps, ~10 s of CPU each).
"""

import csv
import json
import types

import numpy as np
import pytest

ORGANS = ["aorta", "gallbladder", "kidney_left", "kidney_right", "liver", "pancreas", "spleen",
          "stomach"]
EXPECTED_ROWS = {
    "synapse_sample_eff": [(s, m) for s in ("full", "half-slice", "half-vol", "half-sparse")
                           for m in ("baseline", "AdaWAC")],
    "synapse_sample_eff_unet": [(s, m) for s in ("full", "half-slice", "half-vol", "half-sparse")
                                for m in ("baseline", "AdaWAC")],
    "trim": [("full", m) for m in ("baseline", "trim-train", "trim-train+ACR", "trim-ratio",
                                   "trim-ratio+ACR", "pseudo-AdaWAC", "AdaWAC")],
    "acdc": [("full", "TransUNet"), ("full", "AdaWAC")],
    "ablation": [("full", m) for m in ("baseline", "reweight-only", "ACR-only", "AdaWAC-0.01",
                                       "AdaWAC-1.0")],
}
EXPECTED_CLAIMS = {
    "synapse_sample_eff": {"a_adawac_beats_baseline_full", "a_adawac_beats_baseline_half-slice",
                           "a_adawac_beats_baseline_half-vol",
                           "a_adawac_beats_baseline_half-sparse", "b_sample_efficiency"},
    "trim": {"adawac_best_dsc", "acr_improves_trim_train", "acr_improves_trim_ratio"},
    "acdc": {"adawac_dsc_beats_baseline", "adawac_hd95_below_baseline"},
    "ablation": {"adawac_1.0_best_dsc", "acr_only_beats_baseline", "reweight_only_within_noise"},
}
EXPECTED_CLAIMS["synapse_sample_eff_unet"] = EXPECTED_CLAIMS["synapse_sample_eff"]
# (table, first row label, thesis DSC mean of that row, thesis HD95 of the last row)
THESIS_SPOTS = {"synapse_sample_eff": (76.66, 59.04), "synapse_sample_eff_unet": (74.04, 62.40),
                "trim": (76.66, 27.39), "acdc": (89.40, 1.45), "ablation": (76.66, 27.39)}


def _check_table(out, name, summary, *, seeds=(0,)):
    """Files, rows, methods, claims and thesis numbers of one table's outputs."""
    for f in ("results.csv", "summary.csv", "summary.json", f"{name}.png"):
        assert (out / f).is_file(), f
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["table"] == name and on_disk["quick"] is True
    assert "phantom" in on_disk["source"] and "NOT comparable" in on_disk["note"]
    assert {"jax", "backend"} <= set(on_disk["env"]) and "method" in on_disk["config"]
    rows = [(r["subset"], r["row"]) for r in on_disk["rows"]]
    assert rows == EXPECTED_ROWS[name]
    assert [(r["subset"], r["row"]) for r in summary["rows"]] == rows
    assert set(on_disk["claims"]) == EXPECTED_CLAIMS[name]
    for c in on_disk["claims"].values():
        assert isinstance(c["held"], bool) and c["detail"]
    first, last = on_disk["rows"][0], on_disk["rows"][-1]
    assert (first["thesis_dsc"], last["thesis_hd95"]) == THESIS_SPOTS[name]
    classes = ["RV", "Myo", "LV"] if name == "acdc" else ORGANS
    if name != "trim":
        assert list(first["thesis_per_class_dsc"]) == classes
    with open(out / "results.csv") as f:
        res = list(csv.DictReader(f))
    assert len(res) == len(rows) * len(seeds)
    assert [(r["subset"], r["row"]) for r in res] == [r for r in rows for _ in seeds]
    for r in res:
        assert 0.0 <= float(r["dsc"]) <= 100.0 and float(r["hd95"]) >= 0.0
        assert float(r["seconds"]) >= 0.0
        assert all(0.0 <= float(r[f"dsc_{c}"]) <= 100.0 for c in classes)
    with open(out / "summary.csv") as f:
        summ = list(csv.DictReader(f))
    assert [(r["subset"], r["row"]) for r in summ] == rows
    assert float(summ[0]["thesis_dsc"]) == THESIS_SPOTS[name][0]
    return on_disk


@pytest.fixture
def tables(script):
    return script("adawac_tables")


def _stub_train(calls):
    def stub(cfg, data, *, test=None, num_classes=9, progress=False, **kwargs):
        assert test is not None and progress
        calls.append({"method": cfg.method, "eta": cfg.eta, "lam": cfg.lam, "seed": cfg.seed,
                      "n": len(data.names), "names": tuple(data.names),
                      "keep_ratio": cfg.keep_ratio, "num_steps": cfg.num_steps,
                      "num_classes": num_classes, "quick": cfg.quick,
                      "fg": float((data.labels.reshape(len(data.labels), -1) > 0)
                                  .any(axis=1).mean())})
        rng = np.random.default_rng(len(calls))
        dice = {"erm": 0.5, "adawac": 0.7}.get(cfg.method, 0.6) + 0.01 * rng.uniform()
        res = {"dice": dice, "hd95": 3.0 - dice, "per_class_dice":
               np.full(num_classes - 1, dice).tolist()}
        return types.SimpleNamespace(test=res, losses=[1.0] * cfg.num_steps,
                                     seconds_per_step=0.0)
    return stub


def test_all_dispatches_to_every_table_with_thesis_protocols(tables, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(tables, "train", _stub_train(calls))
    res = tables.main(["--table", "all", "--quick", "--steps", "2", "--out", str(tmp_path)])
    assert list(res) == list(EXPECTED_ROWS)
    for name in EXPECTED_ROWS:
        _check_table(tmp_path / name, name, res[name])
    # 8 + 8 + 7 + 2 + 5 rows; the full-set baseline and AdaWAC of synapse_sample_eff are
    # shared with trim (both) and ablation (baseline) in one invocation.
    assert len(calls) == 30 - 3
    trim = list(csv.DictReader(open(tmp_path / "trim" / "results.csv")))
    assert [r["reused"] for r in trim] == ["True", "False", "False", "False", "False", "False",
                                           "True"]
    assert all(c["num_steps"] == 2 and c["quick"] and c["seed"] == 0 for c in calls)
    # subsets: half-slice / half-vol / half-sparse have half the slices of full, and differ
    sub = [c for c in calls[:8] if c["method"] == "erm"]
    assert [c["n"] for c in sub] == [128, 64, 64, 64]
    assert len({c["names"] for c in sub}) == 4
    # configs: TransUNet eta 2, UNet eta 8, the ablation's eta = 0.01 / 1.0, forced lambda/eta
    # are the library's (method_spec), the ACDC table is 4-class
    assert {c["eta"] for c in calls[:8]} == {2.0} and {c["eta"] for c in calls[8:16]} == {8.0}
    ab = calls[-4:]
    assert [(c["method"], c["eta"]) for c in ab] == [("reweight-only", 2.0), ("acr-only", 2.0),
                                                    ("adawac", 0.01), ("adawac", 1.0)]
    acdc = [c for c in calls if c["num_classes"] == 4]
    assert [c["method"] for c in acdc] == ["erm", "adawac"] and acdc[0]["n"] == 14 * 10
    # trim-ratio keeps the fraction of training slices with foreground (1280/2211 on Synapse)
    for c in calls:
        if c["method"].startswith("trim-ratio"):
            assert c["keep_ratio"] == pytest.approx(c["fg"])
    # the stub's AdaWAC (0.7) beats ERM (0.5) everywhere: these claims hold
    claims = res["synapse_sample_eff"]["claims"]
    assert all(c["held"] for c in claims.values())
    assert res["acdc"]["claims"]["adawac_hd95_below_baseline"]["held"]
    # reweight-only (0.6..0.61) is 10 points above the baseline: outside the 2-point tolerance
    rw = res["ablation"]["claims"]["reweight_only_within_noise"]
    assert rw["held"] is False and "tolerance 2.00" in rw["detail"]


def test_claims_logic_directions(tables):
    """Claims follow the measured means: flip the numbers and the verdicts flip."""
    def summ(name, dsc, hd=None):
        rows = []
        for (subset, label), d in zip(EXPECTED_ROWS[name], dsc):
            rows.append({"subset": subset, "row": label, "dsc_mean": d, "dsc_std": 1.0,
                         "n_seeds": 3, "hd95_mean": (hd or {}).get(label, 5.0),
                         "hd95_std": 0.1, "thesis_dsc": 0.0})
        return rows
    # synapse: AdaWAC better on every subset, half-slice AdaWAC (70) >= full baseline (70)
    c = tables.claims_for("synapse_sample_eff", summ("synapse_sample_eff",
                                                     [70, 80, 60, 70, 50, 55, 30, 40]))
    assert all(v["held"] for v in c.values())
    c = tables.claims_for("synapse_sample_eff", summ("synapse_sample_eff",
                                                     [71, 80, 60, 70, 56, 55, 30, 40]))
    assert not c["b_sample_efficiency"]["held"]
    assert not c["a_adawac_beats_baseline_half-vol"]["held"]
    c = tables.claims_for("trim", summ("trim", [70, 71, 72, 70, 69, 71, 73]))
    assert c["adawac_best_dsc"]["held"] and c["acr_improves_trim_train"]["held"]
    assert not c["acr_improves_trim_ratio"]["held"]
    c = tables.claims_for("acdc", summ("acdc", [80, 81], {"TransUNet": 2.0, "AdaWAC": 2.5}))
    assert c["adawac_dsc_beats_baseline"]["held"] and not c["adawac_hd95_below_baseline"]["held"]
    # ablation: seed std 1 over 3 seeds -> 2 SE of the gap = 2 sqrt(2/3) = 1.63 < 2-point floor
    c = tables.claims_for("ablation", summ("ablation", [70, 71.9, 72, 71, 75]))
    assert all(v["held"] for v in c.values())
    c = tables.claims_for("ablation", summ("ablation", [70, 67.5, 69, 76, 75]))
    assert not any(v["held"] for v in c.values())
    nan = summ("acdc", [float("nan"), float("nan")])
    assert not any(v["held"] for v in tables.claims_for("acdc", nan).values())


@pytest.mark.parametrize("argv,match", [
    (["--table", "nope"], "--table must be one of"),
    (["--table", "trim", "--seeds", ","], "--seeds must name at least one seed"),
    (["--table", "trim", "--seeds", "0,0"], "--seeds must be distinct"),
    (["--table", "acdc", "--steps", "0"], "--steps must be an integer >= 1"),
    (["--table", "ablation", "--host-threads", "-1"], "--host-threads must be >= 0"),
])
def test_bad_arguments(tables, tmp_path, monkeypatch, argv, match):
    monkeypatch.setattr(tables, "train", lambda *a, **k: pytest.fail("trained despite bad args"))
    with pytest.raises(ValueError, match=match):
        tables.main(argv + ["--quick", "--out", str(tmp_path)])


@pytest.fixture
def fast_compile():
    """XLA without most optimizations: the few-step runs below are dominated by compiling the
    two-view train step (~2x less CPU time this way); the flag is restored afterwards."""
    import jax
    prev = jax.config.values["jax_disable_most_optimizations"]
    jax.config.update("jax_disable_most_optimizations", True)
    try:
        yield
    finally:
        jax.config.update("jax_disable_most_optimizations", prev)


@pytest.mark.parametrize("name", [
    "synapse_sample_eff", "acdc",
    pytest.param("trim", marks=pytest.mark.slow),
    pytest.param("ablation", marks=pytest.mark.slow),
    # synapse_sample_eff_unet trains the same tiny CNN as synapse_sample_eff in quick mode
    # (only eta differs); its dispatch is checked by test_all_dispatches_to_every_table...
])
def test_table_quick_real_training(tables, tmp_path, name, fast_compile):
    res = tables.main(["--table", name, "--quick", "--steps", "2", "--seeds", "0",
                       "--out", str(tmp_path)])
    summary = _check_table(tmp_path, name, res[name])
    assert summary["seeds"] == [0] and summary["steps"] == 2
    rows = list(csv.DictReader(open(tmp_path / "results.csv")))
    assert all(int(r["steps"]) == 2 for r in rows)
    if name == "acdc":
        assert summary["source"] == "cardiac_phantom"
        assert int(rows[0]["train_slices"]) == 140
        # Two steps are far too few for the thesis' ACDC claims: both verdicts were False for
        # every data seed (0-2) and training seed (0-1) tried, so a flip is worth a look. (The
        # Synapse verdicts after two steps flip with the seed: only their type is checked.)
        assert {k: c["held"] for k, c in summary["claims"].items()} == {
            "adawac_dsc_beats_baseline": False, "adawac_hd95_below_baseline": False}
