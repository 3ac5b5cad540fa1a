"""Sketching operators: isotropy, apply == todense @ A for every operator kind, keys, jit, vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.stats
from jax.experimental import sparse as jsparse

import rdr_jax as R
from rdr_jax import sketching as S
from tests.conftest import rtol

L, MM = 8, 24

MAKERS = {
    "gaussian": lambda k, l, m, dt: S.gaussian(k, l, m, dtype=dt),
    "gaussian_hash": lambda k, l, m, dt: S.gaussian(k, l, m, dtype=dt, generator="hash"),
    "srtt_dct": lambda k, l, m, dt: S.srtt(k, l, m, dtype=dt),
    "srtt_hartley": lambda k, l, m, dt: S.srtt(k, l, m, dtype=dt, transform="hartley"),
    "srtt_nopermute": lambda k, l, m, dt: S.srtt(k, l, m, dtype=dt, permute=False),
    "sparse_sign": lambda k, l, m, dt: S.sparse_sign(k, l, m, 3, dtype=dt),
    "sparse_sign_z1": lambda k, l, m, dt: S.sparse_sign(k, l, m, 1, dtype=dt),
}


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_isotropy_monte_carlo(name, dtype):
    """E[Gamma^T Gamma] = I_m: mean over 4000 keys within 6 standard errors per entry."""
    n_keys = 4000
    keys = jax.random.split(jax.random.key(0), n_keys)
    G = jax.vmap(lambda k: MAKERS[name](k, L, MM, dtype).todense())(keys)
    GtG = np.asarray(jnp.einsum("bij,bik->bjk", G, G), dtype=np.float64)
    mean = GtG.mean(0)
    se = GtG.std(0) / np.sqrt(n_keys)
    err = np.abs(mean - np.eye(MM))
    assert np.all(err <= 6 * se + 1e-5), (err.max(), se.max())
    # and the Monte-Carlo error actually shrinks the estimate towards I
    assert np.abs(mean - np.eye(MM)).max() < 0.2


@pytest.mark.parametrize("name", ["gaussian", "srtt"])
def test_complex_isotropy(name):
    with jax.enable_x64(True):
        keys = jax.random.split(jax.random.key(1), 3000)
        mk = S.gaussian if name == "gaussian" else S.srtt
        G = np.asarray(jax.vmap(lambda k: mk(k, L, MM, dtype=np.complex128).todense())(keys))
        GhG = np.einsum("bij,bik->bjk", G.conj(), G)
        se = np.sqrt((np.abs(GhG - GhG.mean(0)) ** 2).mean(0) / len(keys))
        assert np.all(np.abs(GhG.mean(0) - np.eye(MM)) <= 6 * se + 1e-9)


def _operand(kind, rng, dtype, m=MM, n=7):
    A = rng.standard_normal((m, n)).astype(dtype)
    if kind == "dense":
        return A, A
    if kind in ("scipy", "bcoo"):
        Sp = sp.random(m, n, density=0.3, random_state=rng).astype(dtype)
        if kind == "bcoo":
            return jsparse.BCOO.fromdense(jnp.asarray(Sp.toarray())), Sp.toarray()
        return Sp, Sp.toarray()
    if kind == "implicit":
        Aj = jnp.asarray(A)
        return R.implicit_operator(lambda X: Aj @ X, lambda Y: Aj.T @ Y, A.shape, dtype), A
    if kind == "factored":
        Lf = sp.random(m, 4, density=0.5, random_state=rng).astype(dtype)
        Rf = rng.standard_normal((n, 4)).astype(dtype)
        d = np.arange(4, 0, -1).astype(dtype)
        return R.factored_operator(Lf, d, Rf), Lf.toarray() @ np.diag(d) @ Rf.T
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["dense", "scipy", "bcoo", "implicit", "factored"])
@pytest.mark.parametrize("name", sorted(MAKERS))
def test_apply_equals_todense_matmul(name, kind, dtype, rng):
    A, ref = _operand(kind, rng, dtype)
    sk = MAKERS[name](jax.random.key(7), L, MM, dtype)
    G = np.asarray(sk.todense(), np.float64)
    got = np.asarray(sk.apply(A))
    assert got.shape == (L, ref.shape[1])
    assert got.dtype == dtype
    want = G @ ref.astype(np.float64)
    np.testing.assert_allclose(got, want, atol=20 * rtol(dtype) * np.abs(ref).max() * MM)
    np.testing.assert_allclose(np.asarray(sk.adjoint_dense(), np.float64), G.T,
                               atol=10 * rtol(dtype))


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_same_key_same_sketch_with_and_without_jit(name, dtype, rng):
    key = jax.random.key(42)
    A = jnp.asarray(rng.standard_normal((MM, 5)).astype(dtype))
    eager = MAKERS[name](key, L, MM, dtype)
    jitted = jax.jit(lambda k: MAKERS[name](k, L, MM, dtype))(key)
    for a, b in zip(jax.tree_util.tree_leaves(eager), jax.tree_util.tree_leaves(jitted)):
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_allclose(np.asarray(eager.todense()),
                               np.asarray(jax.jit(lambda s: s.todense())(jitted)),
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(eager.apply(A)),
                               np.asarray(jax.jit(lambda k, A: MAKERS[name](k, L, MM, dtype)
                                                  .apply(A))(key, A)),
                               rtol=1e-5, atol=1e-6)
    # a different key gives a different sketch
    other = MAKERS[name](jax.random.key(43), L, MM, dtype)
    assert not np.allclose(np.asarray(other.todense()), np.asarray(eager.todense()))


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_vmap_over_keys(name, rng):
    A = jnp.asarray(rng.standard_normal((MM, 5)).astype(np.float32))
    keys = jax.random.split(jax.random.key(0), 6)
    batched = jax.vmap(lambda k: MAKERS[name](k, L, MM, np.float32).apply(A))(keys)
    for i in range(6):
        one = MAKERS[name](keys[i], L, MM, np.float32)
        np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(one.todense() @ A),
                                   rtol=1e-4, atol=1e-5)


def test_sparse_sign_structure_and_impls(rng):
    m, l, zeta = 500, 16, 5
    sk = S.sparse_sign(jax.random.key(3), l, m, zeta, dtype=np.float64)
    rows = np.asarray(sk.rows)
    assert rows.shape == (m, zeta) and rows.min() >= 0 and rows.max() < l
    assert all(len(set(r)) == zeta for r in rows), "rows within a column must be distinct"
    G = np.asarray(sk.todense())
    np.testing.assert_array_equal((G != 0).sum(0), zeta)
    np.testing.assert_allclose(np.abs(G[G != 0]), 1 / np.sqrt(zeta))
    # rows used uniformly: chi-square goodness of fit over all (column, slot) picks
    counts = np.bincount(rows.ravel(), minlength=l)
    assert scipy.stats.chisquare(counts).pvalue > 1e-4
    # the numba CPU kernel and XLA's scatter agree
    A = jnp.asarray(rng.standard_normal((m, 9)).astype(np.float32))
    sk32 = S.sparse_sign(jax.random.key(3), l, m, zeta, dtype=np.float32)
    np.testing.assert_allclose(np.asarray(sk32.apply_dense(A)),
                               np.asarray(sk32.apply_dense(A, impl="xla")), rtol=1e-5, atol=1e-5)
    # complex data through a real sketch
    Ac = np.asarray(A) + 1j * np.asarray(A[::-1])
    np.testing.assert_allclose(np.asarray(sk32.apply(Ac)), np.asarray(sk32.todense()) @ Ac,
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_hash_generator_is_standard_normal(dt):
    with jax.enable_x64(dt == np.float64):
        x = np.asarray(S.hash_normal(jax.random.key(5), (200, 1000), dt), np.float64)
    assert x.dtype == np.float64 and np.all(np.isfinite(x))
    flat = x.ravel()
    n = flat.size
    assert abs(flat.mean()) < 5 / np.sqrt(n)
    assert abs(flat.var() - 1) < 5 * np.sqrt(2 / n)
    assert abs(scipy.stats.kurtosis(flat, fisher=False) - 3) < 5 * np.sqrt(24 / n)
    assert scipy.stats.kstest(flat[:50000], "norm").pvalue > 1e-3
    # no correlation between neighbours along either axis, nor between rows
    for a, b in ((x[:, 1:], x[:, :-1]), (x[1:], x[:-1])):
        assert abs(np.corrcoef(a.ravel(), b.ravel())[0, 1]) < 5 / np.sqrt(n)
    # different keys give independent draws
    with jax.enable_x64(dt == np.float64):
        y = np.asarray(S.hash_normal(jax.random.key(6), (200, 1000), dt), np.float64)
    assert abs(np.corrcoef(flat, y.ravel())[0, 1]) < 5 / np.sqrt(n)


def test_srtt_matches_explicit_formula():
    """Gamma = sqrt(m/l) P T Phi Pi with T the orthonormal DCT-II, built by hand."""
    with jax.enable_x64(True):
        m, l = 16, 5
        sk = S.srtt(jax.random.key(9), l, m, dtype=np.float64)
        T = scipy.fft.dct(np.eye(m), type=2, norm="ortho", axis=0)
        Pi = np.eye(m)[np.asarray(sk.perm)]
        Phi = np.diag(np.asarray(sk.signs))
        P = np.eye(m)[np.asarray(sk.rows)]
        want = np.sqrt(m / l) * P @ T @ Phi @ Pi
        np.testing.assert_allclose(np.asarray(sk.todense()), want, atol=1e-12)
        assert len(set(np.asarray(sk.rows).tolist())) == l


def test_make_sketch_and_matmul_operator(rng):
    sk = S.make_sketch("sparse_sign", jax.random.key(0), 4, MM, zeta=2)
    A = rng.standard_normal((MM, 3)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(sk @ A), np.asarray(sk.todense()) @ A, rtol=1e-5,
                               atol=1e-6)
    assert sk.shape == (4, MM) and "SparseSign" in repr(sk)
