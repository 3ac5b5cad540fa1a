"""The Krylov spectral certificate (error_bound(..., spectral="krylov")): Kuczynski and
Wozniakowski's (1992) Lanczos bound on the residual's Gram matrix.

Statistical claims over 1000 keys (one jitted program per matrix: ``lax.map`` over the keys,
whose body makes unbatched LAPACK calls -- jaxlib's batched CPU kernels, which a ``vmap`` over
keys creates, wait on the intra-op pool and can deadlock on 2 cores), against numpy's exact
spectral norm of the dense residual; the estimate against a plain numpy block Krylov
re-implementation."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

import rdr_jax as R
from rdr_jax import certify as CE

N_KEYS = 1000
K = 10


def _spectral_matrix(m, n, s, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.standard_normal((m, len(s))))[0]
    V = np.linalg.qr(rng.standard_normal((n, len(s))))[0]
    return ((U * s) @ V.T).astype(dtype)


# fast and slow decay, and a residual with a flat, gap-free top (a cluster of 30 nearly
# equal singular values after the first k = 10: the hard case of the power method)
SPECTRA = {
    "fast": 0.7 ** np.arange(80),
    "slow": 1.0 / np.arange(1, 81),
    "flat_top": np.r_[np.ones(K), 0.3 * (1 - 1e-3 * np.arange(30)), 0.3 * 0.8 ** np.arange(1, 41)],
}


def _decompositions(A):
    key = jax.random.key(0)
    return {"id": R.interpolative(key, A, K), "cur": R.cur(key, A, K), "rsvd": R.rsvd(key, A, K)}


def _true_spectral(A, d):
    wide = np.complex128 if np.iscomplexobj(A) else np.float64
    F, G, H = (None if x is None else np.asarray(x, wide)
               for x in R.diagnostics.low_rank_factors(d, A.shape))
    Ah = F @ (np.eye(F.shape[1]) if G is None else G) @ H.conj().T
    return np.linalg.norm(np.asarray(A, wide) - Ah, 2)


def _miss_ceiling(p, n, alpha=1e-4):
    """Largest miss count not rejected at level alpha when the miss rate is <= p."""
    return scipy.stats.binom.ppf(1 - alpha, n, p)


def test_depth_is_the_smallest_that_meets_the_kw_bound():
    for delta in (0.1, 0.01, 1e-6):
        for L in (1.2, 2.0, 3.0):
            for N in (10, 1000, 10**6):
                for b in (1, 4):
                    k = CE.krylov_depth(delta, L, N, b)
                    eps = 1 - 1 / L ** 2

                    def fail(k):
                        return min(1.0, 1.648 * math.sqrt(N) * math.exp(
                            -math.sqrt(eps) * (2 * k - 1))) ** b
                    assert fail(k) <= delta
                    assert k == 1 or fail(k - 1) > delta
    assert [CE.krylov_depth(0.01, 2.0, N) for N in (200, 1000, 10**6)] == [5, 6, 8]


def _numpy_krylov(E, Om, depth):
    """sigma_max(E Q) for Q an orthonormal basis of span{Om, M Om, ..., M^{depth-1} Om},
    M = E^H E, by numpy (explicit Krylov matrix, then an SVD-based basis)."""
    blocks, X = [], Om
    for _ in range(depth):
        blocks.append(X / np.linalg.norm(X, axis=0))
        X = E.conj().T @ (E @ blocks[-1])
    Kr = np.concatenate(blocks, axis=1)
    u, s, _ = np.linalg.svd(Kr, full_matrices=False)
    Q = u[:, s > s[0] * 1e-10]
    return np.linalg.norm(E @ Q, 2)


@pytest.mark.parametrize("shape, block_size", [((70, 50), 1), ((50, 70), 3)])
def test_estimate_matches_numpy_block_krylov(shape, block_size, x64):
    m, n = shape
    A = _spectral_matrix(m, n, SPECTRA["slow"][:50], seed=2)
    d = R.cur(jax.random.key(0), A, 6)
    key = jax.random.key(5)
    b = R.error_bound(key, A, d, spectral=CE.KrylovCertificate(2.0, block_size))
    N = min(m, n)
    depth = CE.krylov_depth(0.01, 2.0, N, block_size)
    F, G, H = (np.asarray(x) for x in R.diagnostics.low_rank_factors(d, A.shape))
    E = A - F @ G @ H.T
    E = E.T if m < n else E                  # the smaller Gram matrix
    Om = np.asarray(CE.gaussian_test_vectors(jax.random.fold_in(key, CE.KRYLOV_STREAM), N,
                                             block_size, np.float64))
    ref = _numpy_krylov(E, Om, depth)
    np.testing.assert_allclose(float(b.spectral_estimate), ref, rtol=1e-9)
    np.testing.assert_allclose(float(b.spectral), 2.0 * ref, rtol=1e-9)
    assert float(b.spectral_estimate) <= np.linalg.norm(E, 2) * (1 + 1e-12)


def _bounds_over_keys(A, ds, failure_prob, spectral="krylov"):
    keys = jax.random.split(jax.random.key(7), N_KEYS)

    def one(kk):
        return {name: R.error_bound(kk, A, d, failure_prob=failure_prob, spectral=spectral)
                for name, d in ds.items()}
    return jax.jit(lambda ks: jax.lax.map(one, ks))(keys)


@pytest.mark.parametrize("name", list(SPECTRA))
def test_certificate_holds_and_is_within_3x_over_1000_keys(name, x64):
    A = _spectral_matrix(120, 90, SPECTRA[name], seed=len(name))
    ds = _decompositions(A)
    out = _bounds_over_keys(A, ds, 0.01)
    for meth, d in ds.items():
        true = _true_spectral(A, d)
        sb = np.asarray(out[meth].spectral)
        est = np.asarray(out[meth].spectral_estimate)
        misses = int(np.sum(sb < true))
        assert misses <= _miss_ceiling(0.01, N_KEYS), (name, meth, misses)
        assert np.median(sb) / true <= 3.0, (name, meth, np.median(sb) / true)
        assert np.all(sb <= 2.0 * true * (1 + 1e-9)), (name, meth)     # L = 2, always
        assert np.all(est <= true * (1 + 1e-9)), (name, meth)          # a lower bound


def test_float32_certificate_over_1000_keys():
    A = _spectral_matrix(120, 90, SPECTRA["slow"], seed=4, dtype=np.float32)
    ds = _decompositions(A)
    out = _bounds_over_keys(A, ds, 0.01)
    for meth, d in ds.items():
        true = _true_spectral(A, d)
        sb = np.asarray(out[meth].spectral)
        assert sb.dtype == np.float32
        assert np.sum(sb < true) <= _miss_ceiling(0.01, N_KEYS), meth
        assert np.median(sb) / true <= 3.0
        assert np.all(sb <= 2.0 * true * (1 + 1e-4))


def test_a_too_shallow_krylov_space_fails_often(x64):
    """Power of the tests above: with depth 1 (est = ||E omega|| / ||omega||) the same
    'L * est' misses the true norm of a slowly decaying residual in most trials."""
    A = _spectral_matrix(120, 90, SPECTRA["slow"], seed=4)
    d = R.rsvd(jax.random.key(0), A, K)
    F, G, H = R.diagnostics.low_rank_factors(d, A.shape)
    op = R.as_operator(A)
    keys = jax.random.split(jax.random.key(3), 400)
    est = jax.jit(lambda ks: jax.lax.map(
        lambda kk: CE.residual_spectral(kk, op, F, G, H, 1, 1), ks))(keys)
    assert np.mean(2.0 * np.asarray(est) < _true_spectral(A, d)) > 0.2


def test_complex_certificate(x64):
    rng = np.random.default_rng(8)
    m, n = 60, 40
    U = np.linalg.qr(rng.standard_normal((m, n)) + 1j * rng.standard_normal((m, n)))[0]
    V = np.linalg.qr(rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n)))[0]
    A = (U * (1.0 / np.arange(1, n + 1))) @ V.conj().T
    d = R.rsvd(jax.random.key(0), A, 5)
    true = _true_spectral(A, d)
    keys = jax.random.split(jax.random.key(2), 300)
    out = jax.jit(lambda ks: jax.lax.map(
        lambda kk: R.error_bound(kk, A, d, spectral="krylov"), ks))(keys)
    sb = np.asarray(out.spectral)
    assert sb.dtype == np.float64
    assert np.sum(sb < true) <= _miss_ceiling(0.01, 300)
    assert np.all(np.asarray(out.spectral_estimate) <= true * (1 + 1e-9))
    assert np.median(sb) / true <= 3.0


def test_operator_inputs_never_densified(x64):
    A = _spectral_matrix(80, 60, SPECTRA["slow"][:60], seed=1)
    M = jnp.asarray(A)
    op = R.implicit_operator(lambda X: M @ X, lambda Y: M.T @ Y, A.shape, np.float64)
    d = R.rsvd(jax.random.key(0), A, 5)
    a = R.error_bound(jax.random.key(1), op, d, spectral="krylov")
    b = R.error_bound(jax.random.key(1), A, d, spectral="krylov")
    np.testing.assert_allclose(float(a.spectral), float(b.spectral), rtol=1e-10)


def test_jit_vmap_eager_agree_and_same_key_same_bits(dtype):
    A = _spectral_matrix(60, 40, SPECTRA["slow"][:40], seed=1, dtype=dtype)
    d = R.interpolative(jax.random.key(0), A, 5)
    spec = CE.KrylovCertificate(looseness=2.5, block_size=2)
    eager = R.error_bound(jax.random.key(3), A, d, spectral=spec)
    again = R.error_bound(jax.random.key(3), A, d, spectral=spec)
    jitted = jax.jit(lambda kk, A: R.error_bound(kk, A, d, spectral=spec))(jax.random.key(3), A)
    batched = jax.vmap(lambda kk: R.error_bound(kk, A, d, spectral=spec))(
        jnp.stack([jax.random.key(3), jax.random.key(4)]))
    rt = 1e-5 if dtype == np.float32 else 1e-12
    for a, b, c, e in zip(eager, again, jitted, batched):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
        np.testing.assert_allclose(a, c, rtol=rt)
        np.testing.assert_allclose(a, e[0], rtol=rt)
    assert float(eager.spectral) == pytest.approx(2.5 * float(eager.spectral_estimate), rel=1e-6)


def test_sample_mode_is_unchanged(x64):
    A = _spectral_matrix(60, 40, SPECTRA["fast"][:40], seed=3)
    d = R.cur(jax.random.key(0), A, 5)
    a = R.error_bound(jax.random.key(9), A, d)
    b = R.error_bound(jax.random.key(9), A, d, spectral="sample")
    for x, y in zip(a, b):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()
    # the Krylov mode keeps the Frobenius fields (same key, same test vectors)
    c = R.error_bound(jax.random.key(9), A, d, spectral="krylov")
    for f in ("fro", "fro_estimate", "norm_estimate", "failure_prob"):
        np.testing.assert_allclose(getattr(c, f), getattr(a, f), rtol=1e-13)


@pytest.mark.parametrize("spectral, err", [
    ("power", ValueError), (3, TypeError), (None, TypeError)])
def test_bad_spectral_option(spectral, err):
    A = np.eye(6, 5, dtype=np.float32)
    d = R.rsvd(jax.random.key(0), A, 2)
    with pytest.raises(err, match="spectral"):
        R.error_bound(jax.random.key(1), A, d, spectral=spectral)


@pytest.mark.parametrize("kwargs, err, match", [
    ({"looseness": 1.0}, ValueError, "looseness"),
    ({"looseness": float("inf")}, ValueError, "looseness"),
    ({"looseness": "2"}, TypeError, "looseness"),
    ({"looseness": True}, TypeError, "looseness"),
    ({"block_size": 0}, ValueError, "block_size"),
    ({"block_size": 1.5}, TypeError, "block_size"),
])
def test_bad_krylov_options(kwargs, err, match):
    with pytest.raises(err, match=match):
        CE.KrylovCertificate(**kwargs)


def test_power_iters_with_krylov_raises():
    A = np.eye(6, 5, dtype=np.float32)
    d = R.rsvd(jax.random.key(0), A, 2)
    with pytest.raises(ValueError, match="power_iters"):
        R.error_bound(jax.random.key(1), A, d, power_iters=2, spectral="krylov")


def test_experiment_quick(script, tmp_path):
    mod = script("beyond_certificate")
    mod.main(["--quick", "--keys", "20", "--loo-keys", "20", "--repeats", "1",
              "--out", str(tmp_path)])
    data = json.loads((tmp_path / "beyond_certificate.json").read_text())
    assert data["section"] == "Beyond the thesis" and data["mode"] == "quick"
    assert set(data["versions"]) == {"jax", "numpy", "scipy"}
    assert data["claims"] and all(isinstance(c["held"], bool) and c["measured"]
                                  for c in data["claims"])
    for c in data["claims"]:
        assert set(c) == {"claim", "published", "measured", "held", "setting"}
    assert (tmp_path / "beyond_certificate.png").exists()
    assert (tmp_path / "beyond_certificate.csv").exists()
