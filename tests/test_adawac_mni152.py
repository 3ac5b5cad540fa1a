"""rdr_jax.adawac.mni152 (nilearn's MNI152 T1 slices) and ``adawac_tables.py --data mni152``."""

from __future__ import annotations

import json
import math
import sys
import types

import numpy as np
import pytest

from rdr_jax.adawac import mni152 as M
from rdr_jax.adawac.data import has_foreground, make_subset

pytest.importorskip("nilearn")

SIZE = 32  # the quick-mode size: shared (lru_cache) with the end-to-end run below


@pytest.fixture(scope="module")
def vol():
    return M.mni152_volume(SIZE)


@pytest.fixture(scope="module")
def data():
    return M.load_mni152(size=SIZE)


@pytest.fixture
def tables(script):
    return script("adawac_tables")


def test_files_ship_inside_nilearn():
    import nilearn

    files = M.mni152_source_files()
    names = sorted(p.name for p in files)
    assert names == [f"mni_icbm152_{k}_tal_nlin_sym_09a_converted.nii.gz"
                     for k in ("gm", "t1", "wm")]
    pkg = str(__import__("pathlib").Path(nilearn.__file__).resolve().parent)
    assert all(str(p).startswith(pkg) and p.is_file() for p in files)


def test_loading_opens_no_network_connection(monkeypatch):
    import socket

    def refuse(*args, **kwargs):
        raise AssertionError("the MNI152 loader tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    v = M.mni152_volume.__wrapped__(16)  # uncached: really reads the files
    assert v.image.shape[1:] == (16, 16) and v.labels.max() == 2


def test_volume_shapes_and_labels_follow_thresholds(vol):
    z = len(vol.image)
    assert vol.image.shape == vol.p_gm.shape == vol.p_wm.shape == vol.labels.shape
    assert vol.image.shape[1:] == (SIZE, SIZE) and 90 <= z <= 98
    assert vol.image.dtype == np.float32 and vol.labels.dtype == np.uint8
    assert set(np.unique(vol.labels)) == {0, 1, 2}
    gm, wm, lab = vol.p_gm, vol.p_wm, vol.labels
    np.testing.assert_array_equal(lab == 1, (gm >= 0.5) & (gm >= wm))
    np.testing.assert_array_equal(lab == 2, (wm >= 0.5) & (wm > gm))
    np.testing.assert_array_equal(lab == 0, ~(((gm >= 0.5) & (gm >= wm))
                                              | ((wm >= 0.5) & (wm > gm))))
    # labelled tissue only where the T1 image has signal
    assert np.all(vol.image[lab > 0] > 0)


def test_edge_slices_sparser_than_middle(vol):
    frac = M.label_fraction(vol.labels)
    lab = np.flatnonzero(frac > 0)
    lo, hi = lab.min(), lab.max()
    k = (hi - lo) // 8
    edges = np.concatenate([frac[lo:lo + k], frac[hi - k + 1:hi + 1]])
    mid = frac[(lo + hi) // 2 - k // 2:(lo + hi) // 2 + k // 2 + 1]
    assert edges.mean() < 0.3 * mid.mean()
    assert edges.max() < mid.min()


def test_split_disjoint_gapped_and_covering(vol, data):
    role = vol.role
    assert set(role) == {"train", "val", "test", "gap"}
    z = {r: np.flatnonzero(role == r) for r in ("train", "val", "test")}
    assert not (set(z["train"]) & set(z["val"]) or set(z["train"]) & set(z["test"])
                or set(z["val"]) & set(z["test"]))
    held = np.concatenate([z["val"], z["test"]])
    # every held-out slice is >= 2 slices from every training slice
    assert np.abs(held[:, None] - z["train"][None, :]).min() >= 2
    frac = M.label_fraction(vol.labels)
    for r in ("val", "test"):  # both hold label-sparse and label-dense slices
        assert frac[z[r]].min() < 0.1 and frac[z[r]].max() > 0.3
    np.testing.assert_array_equal(M.split_roles(12), ["train"] * 7 + ["gap"] + ["val"] * 3
                                  + ["gap"])
    assert list(M.split_roles(24)[19:24]) == ["gap", "test", "test", "test", "gap"]
    # the data set: the training slices are exactly the "train" slices
    tr = data.train
    assert len(tr.names) == len(z["train"])
    assert tr.case_names == ("inferior", "superior")
    zs = np.where(tr.case_index == 0, tr.slice_index, len(role) - 1 - tr.slice_index)
    np.testing.assert_array_equal(np.sort(zs), z["train"])
    np.testing.assert_array_equal(tr.labels, vol.labels[zs])
    assert data.test.images[0].shape == (len(z["test"]), SIZE, SIZE)
    np.testing.assert_array_equal(data.val.labels[0], vol.labels[z["val"]])
    assert data.num_classes == 3 and data.class_names == M.MNI152_CLASSES


def test_half_sparse_is_the_edge_half_of_each_case(data):
    tr = data.train
    hs = make_subset(tr, "half-sparse")
    for c in range(2):
        idx = np.sort(tr.slice_index[tr.case_index == c])
        kept = np.sort(hs.slice_index[hs.case_index == c])
        np.testing.assert_array_equal(kept, idx[:(len(idx) + 1) // 2])
    rest = np.setdiff1d(np.arange(len(tr.names)),
                        [tr.names.index(n) for n in hs.names])
    f_hs, f_rest = M.label_fraction(hs.labels).mean(), M.label_fraction(tr.labels[rest]).mean()
    assert f_hs < 0.3 * f_rest
    assert has_foreground(hs).mean() < has_foreground(tr).mean()
    hsl = make_subset(tr, "half-slice")
    assert np.all(hsl.slice_index % 2 == 0)


def test_paired_verdict_arithmetic(tables):
    rng = np.random.default_rng(3)
    a = {s: float(v) for s, v in enumerate(rng.normal(80, 2, 5))}
    b = {s: float(v) for s, v in enumerate(rng.normal(78, 2, 5))}
    b[7] = 1.0  # a seed only one side has: ignored
    p = tables.paired_stats(a, b)
    d = np.array([a[s] - b[s] for s in range(5)])
    assert p["n"] == 5 and p["seeds"] == list(range(5))
    assert math.isclose(p["mean"], d.mean(), rel_tol=1e-12)
    assert math.isclose(p["se"], d.std(ddof=1) / np.sqrt(5), rel_tol=1e-12)
    assert tables.gain_held(p) == bool(d.mean() > 2 * d.std(ddof=1) / np.sqrt(5))
    assert tables.gain_held({"mean": 1.0, "se": 0.49, "n": 3})
    assert not tables.gain_held({"mean": 1.0, "se": 0.5, "n": 3})
    assert not tables.gain_held({"mean": -1.0, "se": 0.1, "n": 3})
    assert not tables.gain_held(tables.paired_stats({0: 5.0}, {0: 1.0}))  # one seed
    c = tables._gain_claim("x", "x", "tab:trim", {0: 1.0, 1: 2.0, 2: 3.0}, {0: 1.0, 1: 2.0,
                                                                           2: 3.5})
    assert c["held"] is False and "not positive" in c["reason"]
    c = tables._gain_claim("x", "x", "tab:trim", {0: 2.0, 1: 3.1, 2: 4.0}, {0: 1.0, 1: 2.0,
                                                                           2: 3.0})
    assert c["held"] is True and "reason" not in c


def test_args_per_data(tables):
    args = tables.parse_args(["--data", "mni152", "--table", "all"])
    assert tables.validate_args(args) == list(tables.MNI_TABLES)
    with pytest.raises(ValueError, match="sweep"):
        tables.validate_args(tables.parse_args(["--data", "mni152", "--table", "acdc"]))
    assert tables.validate_args(tables.parse_args(["--table", "all"])) == list(tables.TABLES)


def test_quick_end_to_end_sample_eff(tables, tmp_path, data):
    out = tmp_path / "se"
    res = tables.main(["--data", "mni152", "--table", "sample_eff", "--quick",
                       "--lambdas", "2", "--seeds", "0,1", "--out", str(out)])
    r = res["sample_eff"]
    on_disk = json.loads((out / "summary.json").read_text())
    assert (out / "sample_eff.png").stat().st_size > 0
    assert on_disk["quick"] is True and on_disk["chosen_lambda"] == 2.0
    assert on_disk["wall_s"] > 0 and on_disk["script_wall_s"] >= on_disk["wall_s"]
    assert set(on_disk["table_wall_s"]) == {"sweep", "sample_eff"}
    assert "MNI152" in on_disk["source"]
    rows = {(s["subset"], s["row"]): s for s in r["rows"]}
    assert set(rows) == {(sub, m) for sub in ("full", "half-slice", "half-sparse")
                         for m in ("baseline", "AdaWAC")}
    assert all(s["n_seeds"] == 2 and 0 <= s["dsc_mean"] <= 100 for s in rows.values())
    # the AdaWAC-on-full runs of the sweep are reused, not retrained
    assert r["runs_reused"] == 2 and r["runs_trained"] == 10
    ids = [c["id"] for c in r["claims"]]
    assert ids == ["adawac_beats_erm_full", "adawac_beats_erm_half-slice",
                   "adawac_beats_erm_half-sparse", "sample_efficiency_half_slice"]
    for c in on_disk["claims"]:
        assert c["wording"] == "ours" and c["thesis_label"] == "tab:synapse_sample_eff_unet"
        assert c["held"] or c["reason"]
        p = c["paired"]
        assert math.isclose(p["mean"], float(np.mean(p["diffs"])), abs_tol=1e-9)
    # fig:synapse-weights on MNI152 from the AdaWAC-on-full runs of both seeds
    w = json.loads((out / "weights" / "summary.json").read_text())
    assert (out / "weights" / "weights.png").stat().st_size > 0
    assert w["seeds"] == [0, 1] and w["lambda"] == 2.0 and len(w["auc_beta_has_foreground"]) == 2
    assert all(0.0 <= a <= 1.0 for a in w["auc_beta_has_foreground"])
    assert {c["id"] for c in w["claims"]} >= {"weights_c_beta_separates"}
    assert all(c["thesis_label"] == "fig:synapse-weights" for c in w["claims"])
    assert "one template brain" in w["substitute_limits"] and "80%" in w["substitute_limits"]


def test_ablation_eta_chosen_on_validation_not_test(tables):
    rows = []
    for seed in (0, 1, 2):
        for label, val, test in (("AdaWAC-0.01", 70.0, 90.0), ("AdaWAC-1.0", 75.0, 60.0),
                                 ("AdaWAC", 72.0 + seed, 61.0)):
            rows.append({"row": label, "subset": "full", "seed": seed, "val_dsc": val,
                         "dsc": test})
    best, val = tables._best_eta_row(rows)
    assert best == "AdaWAC-1.0" and val == {"AdaWAC-0.01": 70.0, "AdaWAC-1.0": 75.0,
                                            "AdaWAC": 73.0}
    rows = [dict(r, val_dsc=float("nan")) if r["row"] == "AdaWAC-1.0" else r for r in rows]
    assert tables._best_eta_row(rows)[0] == "AdaWAC"      # a diverged row never wins


def test_missing_nilearn_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "nilearn.datasets", None)
    monkeypatch.setitem(sys.modules, "nilearn", types.ModuleType("nilearn"))
    with pytest.raises(ImportError, match="pip install nilearn"):
        M.load_mni152(size=24)  # a size not cached: the loader imports nilearn
    with pytest.raises(ImportError, match="pip install nilearn"):
        M.mni152_source_files()
