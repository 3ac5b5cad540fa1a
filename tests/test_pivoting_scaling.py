"""Scale robustness of rdr_jax.id_cur.pivoting (issue 12, "no silent wrong answers").

``eta = sqrt(1 + ||X_1^+ X_2||_2^2)``, the interpolation matrix T and the pivots are invariant
to scaling X; the Gram products behind them are not. Every function must return the scale-1
answer for X scaled by 1e-30 ... 1e30 (float32; the float64 range too), for subnormal X
(which XLA on CPU reads as 0) and for an all-zero X, under jit and vmap, and the pivots of
normal inputs must be exactly those of the plain algorithms.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rdr_jax._src import fp as _fp
from rdr_jax.id_cur import pivoting as P

SCALES32 = (1e-30, 1e-18, 1.0, 1e20, 1e30)
SCALES64 = (1e-300, 1e-150, 1e-18, 1.0, 1e20, 1e150, 1e300)


def _X(dtype, l=12, n=60, seed=0):
    return np.random.default_rng(seed).standard_normal((l, n)).astype(dtype)


def _C(dtype, m=70, k=8, seed=1):
    return np.random.default_rng(seed).standard_normal((m, k)).astype(dtype)


def _all_etas(X, J, C, I):
    """Every eta the module computes, for one scaled X (and C)."""
    X, C = jnp.asarray(X), jnp.asarray(C)
    gram_C = jnp.matmul(C.T, C, precision=jax.lax.Precision.HIGHEST)   # in the caller's dtype
    return {
        "interpolation": P.eta_from_interpolation(P.interpolation(X, J)),
        "gram_none": P.eta_from_gram(X, J),
        "gram_given": P.eta_from_gram(X, J, jnp.matmul(X, X.T, precision="highest")),
        "rows_with_C": P.eta_rows_from_gram(gram_C, C[I], C=C),
        "rows_gram_only": P.eta_rows_from_gram(gram_C, C[I]),
    }


def _scales(dtype):
    return SCALES32 if dtype == np.float32 else SCALES64


def test_eta_is_scale_invariant(dtype):
    rtol = 1e-4 if dtype == np.float32 else 1e-10
    X, C = _X(dtype), _C(dtype)
    J = P.lupp(jnp.asarray(X), 8)
    I = P.lupp(jnp.asarray(C.T), 8)
    ref = {k: float(v) for k, v in _all_etas(X, J, C, I).items()}
    assert all(np.isfinite(v) and v > 1 for v in ref.values())
    assert ref["interpolation"] == pytest.approx(ref["gram_none"], rel=rtol)
    for c in _scales(dtype):
        got = _all_etas(X * dtype.type(c), J, C * dtype.type(c), I)
        for name, v in got.items():
            v = float(v)
            if name == "rows_gram_only" and np.isnan(v):
                # C^H C over/underflowed in the caller's precision and C was not passed: the
                # certificate is flagged (NaN), never a wrong finite number
                assert c != 1.0
                continue
            assert v == pytest.approx(ref[name], rel=rtol), (name, c, v, ref[name])
        # the T matrix itself is scale invariant too
        np.testing.assert_allclose(np.asarray(P.interpolation(jnp.asarray(X * dtype.type(c)), J)),
                                   np.asarray(P.interpolation(jnp.asarray(X), J)),
                                   rtol=rtol, atol=rtol)


def test_rows_certificate_flags_an_unusable_gram():
    """float32 C scaled by 1e20 overflows C^H C; by 1e-18 its products underflow: without C
    the certificate is NaN (it used to be NaN / 3e-5 too small), with C it is right."""
    C = _C(np.float32)
    I = P.lupp(jnp.asarray(C.T), 8)
    ref = float(P.eta_rows_from_gram(jnp.asarray(C.T @ C), jnp.asarray(C[I])))
    for c in (1e20, 1e-18):
        Cc = jnp.asarray(C * np.float32(c))
        g = jnp.matmul(Cc.T, Cc, precision="highest")
        assert np.isnan(float(P.eta_rows_from_gram(g, Cc[I])))
        assert float(P.eta_rows_from_gram(g, Cc[I], C=Cc)) == pytest.approx(ref, rel=1e-4)


def test_eta_gram_of_another_scale_is_not_used():
    """A Gram of a differently scaled X (a caller's mistake) is detected and recomputed."""
    X = jnp.asarray(_X(np.float32))
    J = P.lupp(X, 8)
    ref = float(P.eta_from_gram(X, J))
    assert float(P.eta_from_gram(X, J, 4.0 * (X @ X.T))) == pytest.approx(ref, rel=1e-5)


def test_pivots_scale_invariant_and_unchanged(dtype):
    """Same input -> the same pivots as the plain LAPACK/XLA algorithms (no rescaling), and
    the same pivots for every scale (power-of-two rescaling is exact)."""
    for seed in range(5):
        X = _X(dtype, seed=seed) * dtype.type(3.7)          # max entry not a power of two
        Xj = jnp.asarray(X)
        k = 8
        plain_lu = np.asarray(jax.lax.linalg.lu(Xj[:k].T)[2][:k])
        plain_qr = np.asarray(jax.lax.linalg.qr(Xj, pivoting=True, full_matrices=False)[2][:k])
        plain_xla = np.asarray(P._cpqr_xla(Xj, k))
        np.testing.assert_array_equal(np.asarray(P.lupp(Xj, k)), plain_lu)
        np.testing.assert_array_equal(np.asarray(P.cpqr(Xj, k)), plain_qr)
        np.testing.assert_array_equal(np.asarray(P.cpqr(Xj, k, impl="xla")), plain_xla)
        p_plain = jnp.sum(Xj ** 2, 0) / jnp.sum(Xj ** 2)
        np.testing.assert_array_equal(np.asarray(P.leverage(None, Xj, k, mode="topk")),
                                      np.asarray(jax.lax.top_k(p_plain, k)[1]))
        for c in _scales(dtype):
            Xc = jnp.asarray(X * dtype.type(c))
            np.testing.assert_array_equal(np.asarray(P.lupp(Xc, k)), plain_lu)
            np.testing.assert_array_equal(np.asarray(P.cpqr(Xc, k)), plain_qr)
            np.testing.assert_array_equal(np.asarray(P.cpqr(Xc, k, impl="xla")), plain_xla)
            np.testing.assert_allclose(np.asarray(P.leverage_scores(Xc)),
                                       np.asarray(P.leverage_scores(Xj)), rtol=1e-5)
        key = jax.random.key(seed)
        np.testing.assert_array_equal(np.asarray(P.leverage(key, jnp.asarray(X * dtype.type(1e20)), k)),
                                      np.asarray(P.leverage(key, Xj, k)))


def test_subnormal_inputs(dtype):
    """Subnormal X (flushed to 0 by XLA on CPU): recovered exactly by the bit-level rescaling;
    the only loss is the inputs' own reduced precision."""
    tiny_scale = 1e-41 if dtype == np.float32 else 1e-312
    X, C = _X(dtype), _C(dtype)
    J = P.lupp(jnp.asarray(X), 8)
    I = P.lupp(jnp.asarray(C.T), 8)
    Xs, Cs = X * dtype.type(tiny_scale), C * dtype.type(tiny_scale)
    assert np.all(np.abs(Xs) < np.finfo(dtype).tiny) and np.count_nonzero(Xs) > 0.9 * Xs.size
    np.testing.assert_array_equal(np.asarray(P.lupp(jnp.asarray(Xs), 8)), np.asarray(J))
    ref = _all_etas(X, J, C, I)
    got = _all_etas(Xs, J, Cs, I)
    for name, v in got.items():
        v = float(v)
        if name == "rows_gram_only":
            assert np.isnan(v)          # C^H C of subnormal C is 0: flagged, not wrong
            continue
        assert np.isfinite(v) and v == pytest.approx(float(ref[name]), rel=1e-2), name
    T = np.asarray(P.interpolation(jnp.asarray(Xs), J))
    assert np.all(np.isfinite(T))


def test_all_zero_inputs(dtype):
    """X = 0: eta = 1 and T = [I at J, 0 elsewhere]; never NaN."""
    l, n, k = 10, 30, 6
    Z = jnp.zeros((l, n), dtype)
    J = P.lupp(Z, k)
    assert len(set(np.asarray(J).tolist())) == k
    T = np.asarray(P.interpolation(Z, J))
    want = np.zeros((k, n))
    want[np.arange(k), np.asarray(J)] = 1.0
    np.testing.assert_array_equal(T, want)
    assert float(P.eta_from_interpolation(jnp.asarray(T))) == 1.0
    assert float(P.eta_from_gram(Z, J)) == 1.0
    assert float(P.eta_from_gram(Z, J, jnp.zeros((l, l), dtype))) == 1.0
    assert float(P.eta_rows_from_gram(jnp.zeros((k, k), dtype), jnp.zeros((k, k), dtype))) == 1.0
    assert float(P.eta_rows_from_gram(jnp.zeros((k, k), dtype), jnp.zeros((k, k), dtype),
                                      C=jnp.zeros((n, k), dtype))) == 1.0
    np.testing.assert_allclose(np.asarray(P.leverage_scores(Z)), np.full(n, 1 / n))
    assert len(set(np.asarray(P.leverage(jax.random.key(0), Z, k)).tolist())) == k
    assert len(set(np.asarray(P.cpqr(Z, k)).tolist())) == k
    assert len(set(np.asarray(P.cpqr(Z, k, impl="xla")).tolist())) == k


def test_rank_deficient_pivot_block_gives_a_true_bound():
    """X = Gamma A with rank(A) = 3 < k = 5: the pivot block is singular, X_1^+ is the
    pseudo-inverse, T stays finite with T(:, J) = I, and Thm 2.1 holds: A = A(:, J) T (the
    right-hand side eta ||A - A X^+ X|| is 0)."""
    rng = np.random.default_rng(0)
    with jax.enable_x64(True):
        A = rng.standard_normal((40, 3)) @ rng.standard_normal((3, 50))
        X = jnp.asarray(rng.standard_normal((8, 40)) @ A)
        J = P.lupp(X, 5)
        T = P.interpolation(X, J)
        assert np.all(np.isfinite(np.asarray(T)))
        np.testing.assert_allclose(np.asarray(T[:, J]), np.eye(5))
        np.testing.assert_allclose(A[:, np.asarray(J)] @ np.asarray(T), A, atol=1e-10)
        eta = float(P.eta_from_interpolation(T))
        assert np.isfinite(eta) and eta >= 1
        assert float(P.eta_from_gram(X, J)) == pytest.approx(eta, rel=1e-10)


def test_jit_and_vmap_over_scales():
    X = jnp.asarray(_X(np.float32))
    C = jnp.asarray(_C(np.float32))
    J = P.lupp(X, 8)
    I = P.lupp(C.T, 8)
    cs = jnp.asarray([1e-30, 1e-18, 1.0, 1e20, 1e30], jnp.float32)

    @jax.jit
    def all_eta(c):
        Xc, Cc = X * c, C * c
        Jc = P.lupp(Xc, 8)
        return (Jc, P.eta_from_interpolation(P.interpolation(Xc, J)), P.eta_from_gram(Xc, J),
                P.eta_from_gram(Xc, J, Xc @ Xc.T),
                P.eta_rows_from_gram(Cc.T @ Cc, Cc[I], C=Cc))

    Js, *etas = jax.vmap(all_eta)(cs)
    ref = all_eta(jnp.float32(1.0))
    np.testing.assert_array_equal(np.asarray(Js), np.tile(np.asarray(J), (5, 1)))
    for e, r in zip(etas, ref[1:]):
        np.testing.assert_allclose(np.asarray(e), np.full(5, float(r)), rtol=1e-4)
    # the zero matrix inside jit and vmap
    z = jax.vmap(lambda c: P.eta_from_gram(X * c, J))(jnp.asarray([0.0, 1.0], jnp.float32))
    assert float(z[0]) == 1.0 and float(z[1]) == pytest.approx(float(ref[2]), rel=1e-5)


def test_fp_helpers_exact():
    x = np.array([1e-40, -3e-41, 1.5e-39, 0.0, 3.0, -1e30], np.float32)
    e = int(_fp.max_exponent(jnp.asarray(x)))
    assert e == int(np.floor(np.log2(1e30)))
    y, e2 = _fp.normalize(jnp.asarray(x[:4]))        # subnormal only
    np.testing.assert_array_equal(np.asarray(y, np.float64),
                                  x[:4].astype(np.float64) * 2.0 ** (-int(e2)))
    assert 1 <= np.max(np.abs(np.asarray(y))) < 2
    np.testing.assert_allclose(np.asarray(_fp.log_abs(jnp.asarray(x[:3]))),
                               np.log(np.abs(x[:3].astype(np.float64))), rtol=1e-6)
    assert float(_fp.ldexp(jnp.float32(3.0), 200)) == np.inf
    assert float(_fp.ldexp(jnp.float32(3.0), -200)) == 0.0
    zz, ez = _fp.normalize(jnp.zeros(3))
    assert int(ez) == _fp.ZERO_EXPONENT and not np.any(np.asarray(zz))
