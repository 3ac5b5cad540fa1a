"""experiments/bench_fortran_id.py (rdr_jax against scipy 1.14.1's Fortran interp_decomp): the
helpers that need no side venv. The error and optimal-error helpers on tiny matrices, the
child's timing of the installed scipy's interp_decomp, the speed-up/retake/target
bookkeeping and the table on made-up rows, the matrix builders at small sizes, and the
--no-create message. Nothing here creates a venv or times rdr_jax."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def bf():
    from tests.conftest import load_experiment
    return load_experiment("bench_fortran_id")


@pytest.fixture(scope="module")
def child():
    from tests.conftest import load_experiment
    return load_experiment("_fortran_child")


def test_errors_against_the_svd(child):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((40, 6)) @ rng.standard_normal((6, 30))
    cols = [0, 3, 7, 11, 20, 29]
    W = np.linalg.lstsq(A[:, cols], A, rcond=None)[0]          # exact: rank 6
    assert child.rel_error(A, cols, W) < 1e-12
    B = rng.standard_normal((30, 20))
    s = np.linalg.svd(B, compute_uv=False)
    U, s2, Vt = np.linalg.svd(B, full_matrices=False)
    best = np.linalg.norm(B - (U[:, :5] * s2[:5]) @ Vt[:5]) / np.linalg.norm(B)
    assert child.optimal_rel_error(s, 5) == pytest.approx(best, rel=1e-12)
    # any column ID is no better than the optimum
    cols = list(range(5))
    W = np.linalg.lstsq(B[:, cols], B, rcond=None)[0]
    assert child.rel_error(B, cols, W) >= child.optimal_rel_error(s, 5)


def test_installed_interp_decomp_timing(child):
    rng = np.random.default_rng(1)
    A = rng.standard_normal((50, 8)) @ rng.standard_normal((8, 40)) \
        + 1e-3 * rng.standard_normal((50, 40))
    r = child.time_interp_decomp(A, 8, rand=True, repeats=2)
    assert len(r["times_s"]) == 2 and r["min_s"] <= r["median_s"]
    assert len(r["cols"]) == 8 and len(set(r["cols"])) == 8
    assert r["rel_err"] == pytest.approx(r["rel_err_check"], rel=1e-8)
    s = np.linalg.svd(A, compute_uv=False)
    assert 1.0 - 1e-9 <= r["rel_err"] / child.optimal_rel_error(s, 8) < 10
    info = child.blas_info()
    assert info["scipy"] and info["numpy"]


def _row(mat, k, meth, t, err, load=0.5, ref=None):
    return {"matrix": mat, "label": f"{mat} 10x8", "k": k, "method": meth, "median_s": t,
            "rel_err": err, "loadavg": load, "ref": ref}


def test_ratios_targets_and_table(bf):
    rows = [_row("m", 5, "Fortran 1.14.1", 0.030, 0.20, ref="fortran"),
            _row("m", 5, "scipy 1.17.1", 0.600, 0.12, ref="scipy"),
            _row("m", 5, "rdr_jax default", 0.010, 0.13),
            _row("m", 5, "rdr_jax interp=sketch", 0.005, 0.22, load=3.0)]
    bf.add_ratios(rows, {("m", 5): 0.1}, ncpu=2)
    d = {r["method"]: r for r in rows}
    assert d["rdr_jax default"]["speedup_vs_fortran"] == pytest.approx(3.0)
    assert d["rdr_jax default"]["speedup_vs_scipy"] == pytest.approx(60.0)
    assert d["Fortran 1.14.1"]["err_over_opt"] == pytest.approx(2.0)
    assert d["rdr_jax interp=sketch"]["retake"] and not d["rdr_jax default"]["retake"]
    checks = {c["method"]: c for c in bf.check_targets(rows)}
    assert checks["rdr_jax default"]["held"]                 # 3.0x, 1.3 <= 2.0
    sk = checks["rdr_jax interp=sketch"]                     # 6x, 2.2 > 1.05 * 2.0
    assert sk["speed_held"] and not sk["error_held"] and not sk["held"] and sk["retake"]
    table = bf.format_table(rows)
    assert "retake" in table and "60.00x" in table and "m 10x8" in table
    assert "NOT HELD" in bf.format_targets(bf.check_targets(rows))


def test_matrix_builders(bf):
    A = bf.image_patches(12, 30)
    assert A.shape == (12, 30) and 0.0 <= A.min() and A.max() <= 1.0
    assert np.linalg.matrix_rank(A) > 5                       # real, distinct patches
    assert bf._patch_shape(2000) == (40, 50) and bf._patch_shape(600) == (24, 25)
    S = bf.sparse_zipf(200, 100, density=0.05)
    assert S.shape == (200, 100) and S.nnz == 1000 and S.data.min() > 0


def test_no_create_names_the_fix(bf, tmp_path, monkeypatch):
    monkeypatch.setenv("RDR_JAX_FORTRAN_VENV", str(tmp_path / "venv"))
    with pytest.raises(SystemExit, match="pip install 'scipy==1.14.1'"):
        bf.find_or_create_venv(create=False)
    assert not (tmp_path / "venv").exists()
