"""Generic ID/CUR checks over the one method list (``tests/methods.py``): every pivot rule and
sketch, against numpy references, in float32 and float64, eager, under jit and under vmap.
A rule added to the list is checked here without a test of its own."""

import jax
import numpy as np
import pytest
import scipy.linalg

import rdr_jax as R
from tests.methods import METHODS, RANK, SHAPE

K = RANK


def _matrix(dtype, m=SHAPE[0], n=SHAPE[1]):
    """Singular values 2^-j (fast decay): every method reaches a small error at rank K."""
    rng = np.random.default_rng(11)
    U = np.linalg.qr(rng.standard_normal((m, n)))[0]
    V = np.linalg.qr(rng.standard_normal((n, n)))[0]
    return ((U * 2.0 ** -np.arange(n)) @ V.T).astype(dtype)


def _optimal(A, k):
    s = np.linalg.svd(A.astype(np.float64), compute_uv=False)
    return np.sqrt(np.sum(s[k:] ** 2))


@pytest.mark.parametrize("name", sorted(METHODS))
def test_column_id_under_jit(name, dtype):
    """C holds A's columns, W(:, cols) = I, exact coefficients are numpy's least squares, and
    the error is within a small factor of the best rank-K error (numpy's SVD)."""
    m = METHODS[name]
    A = _matrix(dtype)
    res = jax.jit(lambda key: R.interpolative(key, A, K, method=m))(jax.random.key(1))
    cols = np.asarray(res.cols)
    assert len(set(cols.tolist())) == K
    np.testing.assert_array_equal(np.asarray(res.C), A[:, cols])
    W = np.asarray(res.W, np.float64)
    np.testing.assert_allclose(W[:, cols], np.eye(K), atol=1e-6 if dtype == "float32" else 1e-12)
    if m.interp == "exact":
        ref = scipy.linalg.lstsq(A[:, cols].astype(np.float64), A.astype(np.float64))[0]
        np.testing.assert_allclose(W, ref, atol=2e-3 if dtype == "float32" else 1e-9)
    err = np.linalg.norm(A.astype(np.float64) - A[:, cols].astype(np.float64) @ W)
    assert err <= 30 * _optimal(A, K) + (1e-5 if dtype == "float32" else 1e-12)
    assert np.isfinite(float(res.eta)) and float(res.eta) >= 1 - 1e-6


@pytest.mark.parametrize("name", sorted(METHODS))
def test_cur_eager_same_key_same_bits(name):
    """C and R are A's columns and rows, U = C^+ A R^+ (numpy pseudo-inverses), and the same
    key gives bitwise the same CUR (float32; float64 and exact-rank reconstruction of every
    listed method: ``tests/test_cur.py::test_exact_rank_reconstruction``)."""
    m = METHODS[name]
    dtype = "float32"
    A = _matrix(dtype)
    key = jax.random.key(2)
    c = R.cur(key, A, K, method=m)
    again = R.cur(key, A, K, method=m)
    for a, b in zip(c, again):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    rows, cols = np.asarray(c.rows), np.asarray(c.cols)
    np.testing.assert_array_equal(np.asarray(c.C), A[:, cols])
    np.testing.assert_array_equal(np.asarray(c.R), A[rows])
    A64 = A.astype(np.float64)
    U = np.linalg.pinv(A64[:, cols]) @ A64 @ np.linalg.pinv(A64[rows])
    np.testing.assert_allclose(np.asarray(c.U, np.float64), U,
                               rtol=0, atol=(1e-2 if dtype == "float32" else 1e-7) * np.abs(U).max())


@pytest.mark.parametrize("name", sorted(METHODS))
def test_vmap_over_keys_is_the_per_key_result(name):
    """vmap over two keys gives each key's skeletons (float32)."""
    m = METHODS[name]
    A = _matrix(np.float32)
    f = jax.jit(lambda key: R.select_skeletons(key, A, K, method=m))
    keys = jax.random.split(jax.random.key(3), 2)
    batch = jax.vmap(f)(keys)
    for i in range(2):
        one = f(keys[i])
        np.testing.assert_array_equal(np.asarray(batch.cols[i]), np.asarray(one.cols))
        np.testing.assert_array_equal(np.asarray(batch.rows[i]), np.asarray(one.rows))
        np.testing.assert_allclose(np.asarray(batch.W_cols[i]), np.asarray(one.W_cols),
                                   rtol=1e-4, atol=1e-4)


def test_full_cpqr_is_scipys_pivoted_qr(dtype):
    """The deterministic baseline selects the columns of scipy's ``qr(A, pivoting=True)``
    (LAPACK geqp3), for every key, tall and wide, and rows by pivoted QR of C^H."""
    for A in (_matrix(dtype), _matrix(dtype).T):
        P = scipy.linalg.qr(A.astype(np.float64), pivoting=True)[2]
        for seed in (0, 1):
            c = R.cur(jax.random.key(seed), A, K, method=R.FullCPQR())
            np.testing.assert_array_equal(np.asarray(c.cols), P[:K])
            Pr = scipy.linalg.qr(A[:, P[:K]].T.astype(np.float64), pivoting=True)[2]
            np.testing.assert_array_equal(np.asarray(c.rows), Pr[:K])


def test_full_cpqr_bad_options():
    with pytest.raises(ValueError, match="power iterations do not apply"):
        R.Method(R.FullCPQR(), power_iters=1)
    with pytest.raises(ValueError, match="impl must be"):
        R.FullCPQR(impl="fast")
    assert R.Method("full_cpqr") == R.Method(R.FullCPQR())


def test_every_registered_rule_and_sketch_is_in_the_list():
    """A new PivotRule/Sketch subclass registers itself; this fails until it joins the list."""
    from rdr_jax.id_cur.selection import PIVOTS
    from rdr_jax.sketching import SKETCHES
    pivots = {type(m.pivot) for m in METHODS.values()}
    sketches = {type(m.sketch) for m in METHODS.values()}
    assert set(PIVOTS.values()) <= pivots
    assert set(SKETCHES.values()) <= sketches
