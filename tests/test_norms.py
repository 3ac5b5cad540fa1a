"""Randomized norm estimators against exact norms, statistically over many keys."""

import jax
import numpy as np
import pytest
import scipy.sparse as sp

import rdr_jax as R
from rdr_jax import matrices as M


def test_spectral_norm_power_method(dtype):
    s = np.r_[5.0, 2.0, np.geomspace(1, 1e-3, 38)]
    A = M.with_spectrum(jax.random.key(0), 60, 40, s, dtype=dtype)
    est = jax.vmap(lambda k: R.spectral_norm(k, A, iters=20))(jax.random.split(jax.random.key(1), 50))
    est = np.asarray(est, np.float64)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    assert np.all(est <= 5 * (1 + tol))
    np.testing.assert_allclose(np.median(est), 5.0, rtol=tol * 10)


def test_spectral_norm_upper_bound_holds():
    A = M.with_spectrum(jax.random.key(0), 50, 30, np.geomspace(3, 0.1, 30), dtype=np.float32)
    ub = np.asarray(jax.vmap(lambda k: R.spectral_norm_upper(k, A, num_vectors=3))(
        jax.random.split(jax.random.key(2), 200)))
    assert np.all(ub >= 3.0)  # fails with probability <= 1e-3 per key; never seen at this size
    assert np.median(ub) < 60  # and it is not absurdly loose (10 sqrt(2/pi) ~ 8)


@pytest.mark.parametrize("method", ["hutchinson", "hutch++"])
def test_frobenius_estimators_unbiased(method, dtype):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((40, 30)).astype(dtype) * np.geomspace(1, 0.01, 30).astype(dtype)
    true_sq = float(np.sum(np.asarray(A, np.float64) ** 2))
    keys = jax.random.split(jax.random.key(3), 2000)
    est = np.asarray(jax.vmap(lambda k: R.frobenius_norm(k, A, num_vectors=9, method=method))(keys),
                     np.float64)
    sq = est ** 2
    se = sq.std() / np.sqrt(len(sq))
    assert abs(sq.mean() - true_sq) <= 5 * se + 1e-4 * true_sq, (sq.mean(), true_sq, se)


def test_hutchpp_is_more_accurate_and_exact_for_low_rank():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((50, 40)) * np.geomspace(1, 1e-3, 40)
    keys = jax.random.split(jax.random.key(4), 300)
    with jax.enable_x64(True):
        true = np.linalg.norm(A)
        h = np.asarray(jax.vmap(lambda k: R.frobenius_norm(k, A, num_vectors=30,
                                                           method="hutchinson"))(keys))
        hpp = np.asarray(jax.vmap(lambda k: R.frobenius_norm(k, A, num_vectors=30))(keys))
        assert np.std(hpp - true) < 0.5 * np.std(h - true)
        low = rng.standard_normal((50, 3)) @ rng.standard_normal((3, 40))
        np.testing.assert_allclose(float(R.frobenius_norm(keys[0], low, num_vectors=9)),
                                   np.linalg.norm(low), rtol=1e-10)


def test_norms_on_sparse_and_factored_operators():
    F = M.snn(jax.random.key(0), 3000, 2000, r=50, density=0.01, factored=True)
    sv = R.exact_singular_values(F)
    np.testing.assert_allclose(float(R.spectral_norm(jax.random.key(1), F, iters=30)), sv[0],
                               rtol=1e-4)
    S = sp.random(300, 200, density=0.05, random_state=0)
    np.testing.assert_allclose(float(R.frobenius_norm(jax.random.key(2), S, num_vectors=600,
                                                      method="hutch++")),
                               sp.linalg.norm(S), rtol=0.05)


def test_unknown_keywords_are_type_errors():
    A = np.random.default_rng(2).standard_normal((20, 10)).astype(np.float32)
    key = jax.random.key(5)
    with pytest.raises(TypeError, match="unexpected keyword argument 'iters'"):
        R.frobenius_norm(key, A, iters=3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'num_samples'"):
        R.spectral_norm_upper(key, A, num_samples=4)
