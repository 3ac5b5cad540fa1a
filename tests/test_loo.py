"""Leave-one-out error estimates and jackknife variance estimates (rdr_jax.loo; Epperly and
Tropp, arXiv 2207.06342) against a direct numpy computation: drop each column of Omega,
recompute the approximation, its error on the left-out vector, and the replicates' spread."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rdr_jax import certify as CE
from rdr_jax import loo


def _matrix(m, n, sv, seed, dtype=np.float64, complex_=False):
    rng = np.random.default_rng(seed)

    def haar(p, r):
        X = rng.standard_normal((p, r))
        if complex_:
            X = X + 1j * rng.standard_normal((p, r))
        return np.linalg.qr(X)[0]
    U, V = haar(m, len(sv)), haar(n, len(sv))
    A = (U * sv) @ V.conj().T
    return A.astype(np.complex128 if complex_ else dtype)


def _omega(key, n, s, dtype):
    return np.asarray(CE.gaussian_test_vectors(key, n, s, dtype))


def _numpy_rsvd_loo(A, Om, q):
    """Leave-one-out by brute force: error terms and jackknife over the s replicates."""
    s = Om.shape[1]
    Z = A @ Om
    Y = Z.copy()
    for _ in range(q):
        Y = A @ (A.conj().T @ Y)
    terms, reps = [], []
    for i in range(s):
        Qi = np.linalg.qr(np.delete(Y, i, axis=1))[0]
        Ai = Qi @ (Qi.conj().T @ A)
        reps.append(Ai)
        terms.append(np.linalg.norm((A - Ai) @ Om[:, i]) ** 2)
    reps = np.array(reps)
    return np.sqrt(np.mean(terms)), np.sqrt(np.sum(np.abs(reps - reps.mean(0)) ** 2)), terms


@pytest.mark.parametrize("q", [0, 1])
@pytest.mark.parametrize("complex_", [False, True])
def test_rsvd_loo_matches_brute_force(q, complex_, x64):
    A = _matrix(50, 35, 0.85 ** np.arange(35), seed=1, complex_=complex_)
    key = jax.random.key(3)
    r = loo.rsvd_loo(key, A, 8, power_iters=q)
    Om = _omega(key, 35, 8, A.dtype)
    err, jack, terms = _numpy_rsvd_loo(A, Om, q)
    np.testing.assert_allclose(float(r.error), err, rtol=1e-9)
    np.testing.assert_allclose(float(r.jackknife), jack, rtol=1e-8)
    np.testing.assert_allclose(np.asarray(r.terms), terms, rtol=1e-8)
    # the approximation is Q Q^H A with Q = orth((A A^H)^q A Omega)
    Y = A @ Om
    for _ in range(q):
        Y = A @ (A.conj().T @ Y)
    Q = np.linalg.qr(Y)[0]
    Ah = (np.asarray(r.svd.U) * np.asarray(r.svd.s)) @ np.asarray(r.svd.Vt)
    np.testing.assert_allclose(Ah, Q @ (Q.conj().T @ A), atol=1e-12)
    assert r.error.dtype == np.float64 and r.svd.U.shape == (50, 8)


def test_rsvd_loo_float32_matches_brute_force():
    A = _matrix(50, 35, 1.0 / np.arange(1, 36), seed=2)
    key = jax.random.key(4)
    r = loo.rsvd_loo(key, A.astype(np.float32), 10)
    err, jack, _ = _numpy_rsvd_loo(A, _omega(key, 35, 10, np.float32).astype(np.float64), 0)
    assert r.error.dtype == np.float32
    np.testing.assert_allclose(float(r.error), err, rtol=2e-4)
    np.testing.assert_allclose(float(r.jackknife), jack, rtol=2e-3)


def test_nystrom_loo_matches_brute_force(x64):
    B = _matrix(40, 40, 0.8 ** np.arange(40), seed=3)
    P = B @ B.T
    key = jax.random.key(5)
    r = loo.nystrom_loo(key, P, 7)
    Om = _omega(key, 40, 7, np.float64)
    terms = []
    for i in range(7):
        O = np.delete(Om, i, axis=1)
        Y = P @ O
        Ai = Y @ np.linalg.pinv(O.T @ Y) @ Y.T
        terms.append(np.linalg.norm((P - Ai) @ Om[:, i]) ** 2)
    np.testing.assert_allclose(float(r.error), np.sqrt(np.mean(terms)), rtol=1e-7)
    Y = P @ Om
    Ah = Y @ np.linalg.pinv(Om.T @ Y) @ Y.T
    np.testing.assert_allclose((np.asarray(r.V) * np.asarray(r.eigvals)) @ np.asarray(r.V).T,
                               Ah, atol=1e-10)


def test_estimate_is_unbiased_over_keys(x64):
    """E error^2 = E ||A - A_hat_{s-1}||_F^2 (q = 0 and 1): the mean over 400 keys of the
    estimate against the mean true error of the (s-1)-vector method on independent keys,
    in one jitted program (``lax.map`` over the keys: unbatched LAPACK calls, see
    tests/test_certify_spectral.py); plus the ratio to the rank-s error and its spread."""
    A = _matrix(60, 45, 1.0 / np.arange(1, 46) ** 0.8, seed=6)
    Aj = jnp.asarray(A)
    s, n_keys = 10, 400

    def true_err(r):
        return jnp.linalg.norm(Aj - (r.svd.U * r.svd.s) @ r.svd.Vt)

    def one(k, q):
        k1, k2 = jax.random.split(k)
        r = loo.rsvd_loo(k1, Aj, s, power_iters=q)
        r_small = loo.rsvd_loo(k2, Aj, s - 1, power_iters=q)
        return r.error, true_err(r), true_err(r_small)

    keys = jax.random.split(jax.random.key(0), n_keys)
    for q in (0, 1):
        out = jax.jit(lambda ks: jax.lax.map(lambda k: one(k, q), ks))(keys)
        est, err_s, err_s1 = (np.asarray(x) for x in out)
        m_est, m_true = np.mean(est ** 2), np.mean(err_s1 ** 2)
        se = np.sqrt(np.var(est ** 2) / n_keys + np.var(err_s1 ** 2) / n_keys)
        assert abs(m_est - m_true) < 4 * se, (q, m_est, m_true, se)
        ratio = est / err_s
        assert 0.95 < np.median(ratio) < 1.4, (q, np.median(ratio))   # one vector fewer
        assert np.quantile(ratio, 0.9) / np.quantile(ratio, 0.1) < 2.0


def test_jit_vmap_eager_agree_and_same_key_same_bits(dtype):
    A = _matrix(40, 30, 0.9 ** np.arange(30), seed=7, dtype=dtype)
    a = loo.rsvd_loo(jax.random.key(1), A, 6)
    b = loo.rsvd_loo(jax.random.key(1), A, 6)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()
    j = jax.jit(lambda k, A: loo.rsvd_loo(k, A, 6))(jax.random.key(1), A)
    v = jax.vmap(lambda k: loo.rsvd_loo(k, A, 6))(jnp.stack([jax.random.key(1),
                                                              jax.random.key(2)]))
    rt = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(j.error, a.error, rtol=rt)
    np.testing.assert_allclose(v.error[0], a.error, rtol=rt)
    np.testing.assert_allclose(v.jackknife[0], a.jackknife, rtol=rt * 10)
    P = (A @ A.T).astype(dtype)
    n1 = loo.nystrom_loo(jax.random.key(1), P, 6)
    n2 = jax.jit(lambda k: loo.nystrom_loo(k, P, 6))(jax.random.key(1))
    np.testing.assert_allclose(n1.error, n2.error, rtol=rt * 10)
    assert n1.error.dtype == dtype


def test_exact_for_low_rank(x64):
    """A of rank < s - 1: every leave-one-out replicate is exact, so the estimate is ~0."""
    A = _matrix(30, 20, np.ones(4), seed=8)
    r = loo.rsvd_loo(jax.random.key(0), A, 8)
    assert float(r.error) < 1e-10 and float(r.jackknife) < 1e-10


@pytest.mark.parametrize("call, err, match", [
    (lambda A: loo.rsvd_loo(jax.random.key(0), A, 1), ValueError, "s must be >= 2"),
    (lambda A: loo.rsvd_loo(jax.random.key(0), A, 31), ValueError, "s must be <="),
    (lambda A: loo.rsvd_loo(jax.random.key(0), A, 4.0), TypeError, "s must be"),
    (lambda A: loo.rsvd_loo(jax.random.key(0), A, 4, power_iters=-1), ValueError,
     "power_iters"),
    (lambda A: loo.rsvd_loo(jax.random.key(0), A, 4, power_iters=1.5), TypeError,
     "power_iters"),
    (lambda A: loo.rsvd_loo(0, A, 4), TypeError, "key"),
    (lambda A: loo.nystrom_loo(jax.random.key(0), A, 4), ValueError, "square"),
    (lambda A: loo.rsvd_loo(jax.random.key(0), "A", 4), TypeError, "must be an array"),
])
def test_bad_inputs(call, err, match):
    A = np.ones((40, 30), np.float32)
    with pytest.raises(err, match=match):
        call(A)
