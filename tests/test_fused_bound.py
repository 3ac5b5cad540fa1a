"""The error bound fused into a decomposition's last pass (``cur_with_bound`` and
``interpolative_with_bound``; issue 30): the same numbers as a numpy recomputation from the same test
vectors, the same factors as the call without a bound, a bound that holds over many keys,
jit/vmap, float32/float64, bad inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rdr_jax as R
from rdr_jax import certify as CE
from tests.methods import RANK, SHAPE


def _matrix(m, n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    r = min(m, n)
    U = np.linalg.qr(rng.standard_normal((m, r)))[0]
    V = np.linalg.qr(rng.standard_normal((n, r)))[0]
    return ((U / np.arange(1, r + 1) ** 0.75) @ V.T).astype(dtype)


def _call(kind, key, A, k, **kw):
    """The plain call, or the bounded one when ``failure_prob`` is given."""
    bounded = "failure_prob" in kw
    if kind == "cur":
        return (R.cur_with_bound if bounded else R.cur)(key, A, k, **kw)
    return (R.interpolative_with_bound if bounded else R.interpolative)(key, A, k, side=kind,
                                                                           **kw)


KINDS = ("cur", "column", "row", "two_sided")
#: the suite's shared shape and rank (``tests/methods.py``): a bounded program (one per kind,
#: dtype and failure_prob, which is static) serves both float64 tests at failure_prob 0.01,
#: and the plain float64 calls reuse ``tests/test_cur.py``'s programs
M, N = SHAPE


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bound_matches_numpy_from_same_test_vectors(kind, dtype):
    """fro_estimate, both bounds and norm_estimate recomputed in numpy from the test vectors
    of the certificate stream: right ones for CUR (its pass is A Q_R) and the row ID (the
    column ID of A^H), left ones (E^H Omega) for the column and two-sided IDs (their pass is
    A^H Q)."""
    with jax.enable_x64(dtype == np.float64):
        A = _matrix(M, N, dtype)
        key = jax.random.key(3)
        res, b = _call(kind, key, jnp.asarray(A), RANK, failure_prob=0.05)
        assert isinstance(b, R.ErrorBound)
        s = CE.DEFAULT_NUM_VECTORS
        adjoint = kind in ("column", "two_sided")
        rows = A.shape[0] if adjoint else A.shape[1]
        Om = np.asarray(CE.gaussian_test_vectors(jax.random.fold_in(key, CE.CERT_STREAM),
                                                 rows, s, dtype), np.float64)
        Ad = A.astype(np.float64)
        E = Ad - np.asarray(res.todense(), np.float64)
        Y = E.T @ Om if adjoint else E @ Om
        AOm = Ad.T @ Om if adjoint else Ad @ Om
        fro_est = np.linalg.norm(Y) / np.sqrt(s)
        tol = 2e-3 if dtype == np.float32 else 1e-9
        np.testing.assert_allclose(float(b.fro_estimate), fro_est, rtol=tol)
        np.testing.assert_allclose(float(b.fro), fro_est / np.sqrt(CE.fro_factor(s, 0.05)),
                                   rtol=tol)
        np.testing.assert_allclose(float(b.spectral),
                                   np.linalg.norm(Y) / np.sqrt(CE.spec_quantile(s, 0.05)),
                                   rtol=tol)
        np.testing.assert_allclose(float(b.norm_estimate), np.linalg.norm(AOm) / np.sqrt(s),
                                   rtol=tol)
        assert float(b.failure_prob) == pytest.approx(0.05)
        assert b.fro.dtype == dtype


@pytest.mark.parametrize("kind", KINDS)
def test_factors_as_without_bound(kind):
    """Asking for a bound leaves the skeletons bitwise as they were and the factors equal to
    rounding (the fused product has more columns, so its rounding may differ)."""
    with jax.enable_x64(True):
        A = jnp.asarray(_matrix(M, N, np.float64, seed=1))
        key = jax.random.key(11)
        plain = _call(kind, key, A, RANK)
        res, _ = _call(kind, key, A, RANK, failure_prob=0.01)
        assert type(res) is type(plain)
        for f in plain._fields:
            a, b = np.asarray(getattr(plain, f)), np.asarray(getattr(res, f))
            if a.dtype.kind in "iub":
                np.testing.assert_array_equal(a, b)
            else:
                np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["cur", "column"])
def test_bound_holds_over_many_keys(kind):
    """Statistical: over 60 keys the Frobenius and spectral bounds (failure_prob = 0.01) are
    above the true errors every time (a failure has probability <= 0.01 per key and per bound,
    and the bounds sit ~1.8x above the truth), and the unbiased estimate's mean square is
    within 15% of the mean true square error."""
    with jax.enable_x64(True):
        A = _matrix(M, N, np.float64, seed=2)
        Aj = jnp.asarray(A)
        keys = jax.random.split(jax.random.key(5), 60)
        fro_ok = spec_ok = 0
        est2, true2 = [], []
        for key in keys:
            res, b = _call(kind, key, Aj, RANK, failure_prob=0.01)
            E = A - np.asarray(res.todense())
            tf, ts = np.linalg.norm(E), np.linalg.norm(E, 2)
            fro_ok += float(b.fro) >= tf
            spec_ok += float(b.spectral) >= ts
            est2.append(float(b.fro_estimate) ** 2)
            true2.append(tf ** 2)
        assert fro_ok == len(keys) and spec_ok == len(keys)
        assert abs(np.mean(est2) / np.mean(true2) - 1) < 0.15


@pytest.mark.parametrize("kind", KINDS)
def test_jit_vmap_and_same_seed(kind):
    A = jnp.asarray(_matrix(80, 60, np.float32, seed=4))
    f = jax.jit(lambda key: _call(kind, key, A, 8, failure_prob=0.01))
    keys = jax.random.split(jax.random.key(0), 3)
    res_v, b_v = jax.vmap(f)(keys)
    for i in range(3):
        res_i, b_i = f(keys[i])
        np.testing.assert_allclose(np.asarray(b_v.fro[i]), np.asarray(b_i.fro), rtol=1e-5)
        assert b_v.fro.shape == (3,)
    again = f(keys[0])
    for x, y in zip(jax.tree_util.tree_leaves(f(keys[0])), jax.tree_util.tree_leaves(again)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))   # bitwise, same seed


def test_unfused_paths_agree_in_distribution():
    """interp="sketch" (no pass over A after the sketch: the bound takes a product of its
    own) still bounds the error it reports."""
    with jax.enable_x64(True):
        A = _matrix(120, 90, np.float64, seed=6)
        res, b = R.interpolative_with_bound(jax.random.key(2), jnp.asarray(A), 10,
                                            method=R.Method(interp="sketch"))
        assert float(b.fro) >= np.linalg.norm(A - np.asarray(res.todense()))


@pytest.mark.parametrize("bad, exc", [(0.0, ValueError), (1.0, ValueError), (-0.1, ValueError),
                                      (float("nan"), ValueError), ("0.01", TypeError),
                                      (True, TypeError)])
@pytest.mark.parametrize("kind", ["cur", "column"])
def test_bad_failure_prob(kind, bad, exc):
    A = _matrix(30, 20, np.float32)
    with pytest.raises(exc, match="failure_prob"):
        _call(kind, jax.random.key(0), A, 3, failure_prob=bad)


def test_defaults_and_tolerance_refused():
    """failure_prob defaults to 0.01; a float k (a tolerance) is refused with the fix."""
    A = _matrix(40, 30, np.float32)
    _, b = R.cur_with_bound(jax.random.key(0), A, 5)
    assert float(b.failure_prob) == pytest.approx(0.01)
    with pytest.raises(TypeError, match="interpolative_to_tolerance"):
        R.interpolative_with_bound(jax.random.key(0), A, 0.1)
    with pytest.raises(TypeError, match="interpolative_to_tolerance"):
        R.cur_with_bound(jax.random.key(0), A, 0.1)
