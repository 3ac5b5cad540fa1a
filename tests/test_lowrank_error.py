"""``lowrank_error(..., spectral=)``: the Frobenius norm without an SVD, the exact spectral
norm on request or when cheap, NaN when not computed."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

import rdr_jax as R
from rdr_jax import diagnostics

KEY = jax.random.key(0)


def _problem(m, n, k=10, dtype=np.float32):
    A = R.matrices.with_spectrum(KEY, m, n, R.matrices.polynomial_decay(min(m, n)))
    A = jnp.asarray(A, dtype)
    return A, R.rsvd(KEY, A, k)


def _residual64(A, res):
    """``A - F H^H`` in float64 from the factors lowrank_error itself uses (F = U diag(s))."""
    F, G, H = (None if x is None else np.asarray(x, np.float64)
               for x in diagnostics.low_rank_factors(res, A.shape))
    return np.asarray(A, np.float64) - F @ H.T


def test_frobenius_only_is_numpys_norm_of_the_float64_residual():
    A, res = _problem(300, 120)
    e = R.lowrank_error(A, res, spectral=False)
    E = _residual64(A, res)
    np.testing.assert_allclose(e.fro, np.linalg.norm(E), rtol=1e-12)
    np.testing.assert_allclose(e.relative_fro, np.linalg.norm(E) / np.linalg.norm(
        np.asarray(A, np.float64)), rtol=1e-12)
    assert np.isnan(e.spectral) and e.exact is True


def test_frobenius_summed_over_many_row_blocks(monkeypatch):
    A, res = _problem(301, 120)
    monkeypatch.setattr(diagnostics, "_BLOCK_ENTRIES", 7 * 120 + 5)   # 7 rows per block
    e = R.lowrank_error(A, res, spectral=False)
    np.testing.assert_allclose(e.fro, np.linalg.norm(_residual64(A, res)), rtol=1e-12)


def test_spectral_true_is_numpys_two_norm():
    A, res = _problem(300, 120)
    e = R.lowrank_error(A, res, spectral=True)
    E = _residual64(A, res)
    np.testing.assert_allclose(e.spectral, np.linalg.norm(E, 2), rtol=1e-10)
    np.testing.assert_allclose(e.fro, np.linalg.norm(E), rtol=1e-10)
    assert R.lowrank_error(A, res) == e          # small: the default computes it too


def _no_svd(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("lowrank_error computed an SVD")
    monkeypatch.setattr(np.linalg, "svd", refuse)


def test_default_skips_the_svd_on_a_large_input_and_not_on_a_small_one(monkeypatch):
    m, n = 2100, 1100                          # m n min(m, n) = 2.5e9 > 2**31
    assert m * n * min(m, n) > diagnostics.SPECTRAL_WORK_LIMIT
    A = jax.random.normal(KEY, (m, n), jnp.float32)
    res = R.rsvd(KEY, A, 5)
    with monkeypatch.context() as mp:
        _no_svd(mp)
        e = R.lowrank_error(A, res)
    assert np.isnan(e.spectral) and np.isfinite(e.fro)
    np.testing.assert_allclose(e.fro, np.linalg.norm(_residual64(A, res)), rtol=1e-10)
    small, res_small = _problem(200, 100)
    with monkeypatch.context() as mp:
        _no_svd(mp)
        with pytest.raises(AssertionError, match="computed an SVD"):
            R.lowrank_error(small, res_small)
    assert np.isfinite(R.lowrank_error(small, res_small).spectral)


def test_the_limit_counts_the_svds_work(monkeypatch):
    A, res = _problem(300, 120)                # 300 * 120 * 120 = 4.3e6
    monkeypatch.setattr(diagnostics, "SPECTRAL_WORK_LIMIT", 300 * 120 * 120 - 1)
    assert np.isnan(R.lowrank_error(A, res).spectral)
    monkeypatch.setattr(diagnostics, "SPECTRAL_WORK_LIMIT", 300 * 120 * 120)
    assert np.isfinite(R.lowrank_error(A, res).spectral)


def test_sparse_and_factored_inputs():
    S = sp.random(400, 300, density=0.05, format="csr", random_state=0, dtype=np.float32)
    c = R.cur(KEY, S, 10)
    dense = R.lowrank_error(S.toarray(), c, spectral=True)
    fro = R.lowrank_error(S, c, spectral=False)
    np.testing.assert_allclose(fro.fro, dense.fro, rtol=1e-6)
    assert np.isnan(fro.spectral)
    F = R.matrices.snn(KEY, 3000, 2000, r=20, factored=True)
    c = R.cur(KEY, F, 10)
    full, fro_only = R.lowrank_error(F, c), R.lowrank_error(F, c, spectral=False)
    assert np.isfinite(full.spectral) and np.isnan(fro_only.spectral)   # r x r core: cheap
    np.testing.assert_allclose(fro_only.fro, full.fro, rtol=1e-12)


def test_inside_jit():
    A, res = _problem(120, 60)
    f = jax.jit(lambda A, res: R.lowrank_error(A, res, spectral=False))
    e = f(A, res)
    assert np.isnan(e.spectral)
    np.testing.assert_allclose(float(e.fro), np.linalg.norm(_residual64(A, res)), rtol=1e-5)
    e2 = jax.jit(lambda A, res: R.lowrank_error(A, res))(A, res)
    np.testing.assert_allclose(float(e2.spectral), np.linalg.norm(_residual64(A, res), 2),
                               rtol=1e-4)


@pytest.mark.parametrize("bad", ["yes", 1, 0.0])
def test_spectral_must_be_none_or_bool(bad):
    A, res = _problem(50, 30, k=5)
    with pytest.raises(TypeError, match="spectral must be None"):
        R.lowrank_error(A, res, spectral=bad)
