"""Test matrices: SNN, prescribed spectra, Kahan."""

import jax
import numpy as np
import pytest
import scipy.linalg

import rdr_jax as R
from rdr_jax import matrices as M


def test_spectra_helpers_match_thesis_formulas():
    i = np.arange(1, 501)
    np.testing.assert_allclose(M.polynomial_decay(500, r1=20),
                               np.where(i <= 20, 1, 1 / np.sqrt(np.maximum(i - 19, 1))))
    np.testing.assert_allclose(M.exponential_decay(500, r1=20),
                               np.where(i <= 20, 1, np.maximum(0.99 ** (i - 20), 1e-3)))
    j = np.arange(1, 1001)
    np.testing.assert_allclose(M.snn_spectrum(1000, a=2, r1=100), np.where(j <= 100, 2 / j, 1 / j))
    st = M.step_spectrum(30, 10, 1.5)
    assert st[0] / st[10] == pytest.approx(1.5) and np.all(st[:10] == 1)


def test_with_spectrum_exact_singular_values(dtype):
    s = M.exponential_decay(60, r1=5, base=0.8)
    A = M.with_spectrum(jax.random.key(0), 80, 60, s, dtype=dtype)
    assert A.dtype == dtype and A.shape == (80, 60)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(np.linalg.svd(np.asarray(A, np.float64), compute_uv=False), s,
                               atol=tol)
    F = M.with_spectrum(jax.random.key(0), 80, 60, s, dtype=dtype, factored=True)
    np.testing.assert_allclose(np.asarray(F.todense()), np.asarray(A), atol=tol)
    # same key same matrix; different key different matrix
    np.testing.assert_array_equal(np.asarray(M.with_spectrum(jax.random.key(0), 80, 60, s,
                                                             dtype=dtype)), np.asarray(A))
    assert not np.allclose(np.asarray(M.with_spectrum(jax.random.key(1), 80, 60, s,
                                                      dtype=dtype)), np.asarray(A))


def test_snn_dense_and_factored_agree(dtype):
    key = jax.random.key(3)
    A = np.asarray(M.snn(key, 300, 200, r=150, density=0.02, dtype=dtype))
    F = M.snn(key, 300, 200, r=150, density=0.02, dtype=dtype, factored=True)
    assert A.shape == (300, 200) and A.dtype == dtype and np.all(A >= 0)
    np.testing.assert_allclose(np.asarray(F.todense()), A, rtol=1e-5, atol=1e-6)
    L = F.L.to_scipy()
    assert L.nnz == round(0.02 * 300 * 150) and L.data.min() >= 0 and L.data.max() <= 1
    np.testing.assert_allclose(np.asarray(F.d), M.snn_spectrum(150), rtol=1e-6)
    np.testing.assert_allclose(R.exact_singular_values(F)[:150],
                               np.linalg.svd(A.astype(np.float64), compute_uv=False)[:150],
                               rtol=1e-4 if dtype == np.float32 else 1e-9,
                               atol=(1e-6 if dtype == np.float32 else 1e-12) * np.abs(A).sum())


def test_snn1e3_shape_and_density():
    A = np.asarray(M.snn1e3(jax.random.key(0), dtype=np.float32))
    assert A.shape == (1000, 1000) and np.all(A >= 0)
    assert 0 < np.count_nonzero(A) < 5000  # density 1e-3 factors: a very sparse product


def test_snn1e6_factored_scales():
    F = M.snn1e6(jax.random.key(0), m=10**6, n=10**6)
    assert F.shape == (10**6, 10**6)
    assert F.L.nnz == round(2 / 400 * 10**6 * 400)
    sv = R.exact_singular_values(F)
    assert sv.shape == (400,) and np.all(np.diff(sv) <= 1e-9 * sv[0])
    est = float(R.spectral_norm(jax.random.key(1), F, iters=15))
    np.testing.assert_allclose(est, sv[0], rtol=1e-3)
    rows = F.rows(np.array([0, 999_999]))
    assert rows.shape == (2, 10**6)


def test_kahan_matrix():
    n = 30
    K = np.asarray(M.kahan(n, theta=1.2, perturb=0.0, dtype=np.float32), np.float64)
    c, s = np.cos(1.2), np.sin(1.2)
    want = np.diag(s ** np.arange(n)) @ (np.eye(n) - c * np.triu(np.ones((n, n)), 1))
    np.testing.assert_allclose(K, want, rtol=1e-6, atol=1e-7)
    with jax.enable_x64(True):
        Kp = np.asarray(M.kahan(n))
    # column-pivoted QR keeps the natural order on the (perturbed) Kahan matrix ...
    _, Rq, piv = scipy.linalg.qr(Kp, pivoting=True)
    np.testing.assert_array_equal(piv, np.arange(n))
    # ... although R_11^-1 R_12 grows exponentially (the adversarial case of thesis Sec. 2.2.3)
    k = n - 1
    growth = np.abs(np.linalg.solve(Rq[:k, :k], Rq[:k, k:])).max()
    assert growth > 2 ** (k / 4)


def test_bad_generator_inputs():
    with pytest.raises(ValueError, match="density"):
        M.snn(jax.random.key(0), 10, 10, density=0.0)
    with pytest.raises(ValueError, match="spectrum"):
        M.snn(jax.random.key(0), 10, 10, r=5, spectrum=np.ones(4))
    with pytest.raises(ValueError, match="spectrum"):
        M.with_spectrum(jax.random.key(0), 5, 4, np.ones(5))
    with pytest.raises(ValueError, match="factored=True"):
        M.snn(jax.random.key(0), 10**5, 10**5, r=10)
    # 0.3: a and r1 of the SNN weights live on SNNWeights
    with pytest.raises(ValueError, match="a must be a finite number > 0"):
        M.SNNWeights(a=0.0)
    with pytest.raises(ValueError, match="r1 must be >= 0"):
        M.SNNWeights(r1=-1)
    with pytest.raises(TypeError, match="r1 must be a Python int"):
        M.SNNWeights(r1=2.5)
    with pytest.raises(TypeError, match="spectrum must be SNNWeights"):
        M.snn(jax.random.key(0), 10, 10, spectrum=None)
    np.testing.assert_array_equal(np.asarray(M.snn(jax.random.key(0), 10, 10, density=0.5)),
                                  np.asarray(M.snn(jax.random.key(0), 10, 10, density=0.5,
                                                   spectrum=M.SNNWeights(2.0, 100))))
    with pytest.raises(ValueError, match="gap"):
        M.step_spectrum(10, 3, 0.5)
    with pytest.raises(TypeError, match="dtype"):
        M.kahan(4, dtype=np.int32)
