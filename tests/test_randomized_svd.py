"""Randomized rangefinder / rSVD: the expected-error bound, accuracy, stability, jit/vmap."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

import rdr_jax as R
from rdr_jax import matrices as M
from rdr_jax import randomized_svd as RF

SPECTRA = {
    "polynomial": lambda r: M.polynomial_decay(r, r1=5),
    "exponential": lambda r: M.exponential_decay(r, r1=5, base=0.9),
    "step": lambda r: M.step_spectrum(r, 10, 3.0),
    "flat_tail": lambda r: np.r_[np.linspace(10, 5, 8), np.full(r - 8, 1.0)],
}


@pytest.mark.parametrize("spectrum", sorted(SPECTRA))
def test_expected_error_bound_gaussian(spectrum, dtype):
    """mean_keys ||A - QQ^T A||_F^2 <= (l-1)/(l-k-1) ||A - A_k||_F^2 (eq:rand_rangefinder_error_bound)."""
    m, n, k, l = 90, 70, 10, 14
    s = SPECTRA[spectrum](n)
    A = M.with_spectrum(jax.random.key(1), m, n, s, dtype=dtype)
    tail = float(np.sum(np.sort(s)[::-1][k:] ** 2))
    bound = (l - 1) / (l - k - 1) * tail
    keys = jax.random.split(jax.random.key(2), 400)
    Qs = jax.vmap(lambda kk: R.rangefinder(kk, A, l))(keys)
    resid = A[None] - jnp.einsum("bmi,bin->bmn", Qs, jnp.einsum("bmi,mn->bin", Qs, A))
    errs = np.asarray(jnp.sum(resid.astype(jnp.float64 if dtype == np.float64 else jnp.float32)
                              ** 2, axis=(1, 2)), np.float64)
    assert errs.mean() <= bound, (errs.mean(), bound)
    # the bound is an expectation statement, not vacuous: errors are at least optimal
    opt_l = float(np.sum(np.sort(s)[::-1][l:] ** 2))
    assert errs.min() >= opt_l * (1 - 1e-3)


@pytest.mark.parametrize("sketch", ["gaussian", "srtt", "sparse_sign"])
def test_rsvd_singular_values_with_gap(sketch, dtype):
    m, n, k = 120, 80, 8
    s = np.r_[np.geomspace(10, 1, k), np.full(n - k, 1e-3)]
    A = M.with_spectrum(jax.random.key(0), m, n, s, dtype=dtype)
    res = R.rsvd(jax.random.key(3), A, k, oversample=10, power_iters=1, sketch=sketch)
    assert isinstance(res, R.RSVD)
    assert res.U.shape == (m, k) and res.s.shape == (k,) and res.Vt.shape == (k, n)
    assert res.s.dtype == dtype
    want = np.linalg.svd(np.asarray(A, np.float64), compute_uv=False)[:k]
    tol = 1e-4 if dtype == np.float32 else 1e-9
    np.testing.assert_allclose(np.asarray(res.s, np.float64), want, rtol=tol)
    # orthonormal factors and a near-optimal reconstruction
    np.testing.assert_allclose(np.asarray(res.U.T @ res.U), np.eye(k), atol=10 * tol)
    rec = np.asarray((res.U * res.s) @ res.Vt, np.float64)
    err = np.linalg.norm(np.asarray(A, np.float64) - rec)
    assert err <= 1.01 * np.sqrt(np.sum(s[k:] ** 2)) + 10 * tol


def test_stable_power_iteration_beats_plain_on_ill_conditioned():
    """q = 3 on a matrix with singular values 1 .. 1e-14: the plain iteration (A A^T)^q A Omega
    squeezes every column onto the top singular vectors and loses the rest of the range."""
    with jax.enable_x64(True):
        n, l = 80, 30
        s = np.geomspace(1, 1e-14, n)
        A = M.with_spectrum(jax.random.key(0), n, n, s, dtype=np.float64)
        opt = np.sqrt(np.sum(s[l:] ** 2))
        err = {}
        for stable in (True, False):
            Q = R.rangefinder(jax.random.key(1), A, l, power_iters=3, stable=stable)
            err[stable] = float(jnp.linalg.norm(A - Q @ (Q.T @ A))) / opt
        assert err[True] < 10, err
        assert err[False] > 100 * err[True], err  # measured: ~700x


def test_range_sketch_plain_matches_numpy_formula(rng):
    with jax.enable_x64(True):
        A = rng.standard_normal((30, 20))
        key = jax.random.key(5)
        Y = R.range_sketch(key, A, 6, power_iters=2, stable=False)
        Om = np.asarray(R.Gaussian().draw(key, 6, 20, dtype=np.float64).todense())
        want = np.linalg.matrix_power(A @ A.T, 2) @ A @ Om.T
        np.testing.assert_allclose(np.asarray(Y), want, rtol=1e-9)


@pytest.mark.parametrize("kind", ["scipy", "bcoo", "implicit", "factored"])
def test_rsvd_same_result_for_every_operator_kind(kind, rng):
    """The same key gives the same sketch, so every representation gives the same rSVD."""
    with jax.enable_x64(True):
        Lf = sp.random(60, 5, density=0.5, random_state=rng)
        Rf = sp.random(40, 5, density=0.5, random_state=rng)
        d = np.array([5.0, 4, 3, 2, 1])
        dense = (Lf @ sp.diags(d) @ Rf.T).toarray()
        if kind == "scipy":
            A = sp.csr_matrix(dense)
        elif kind == "bcoo":
            A = jax.experimental.sparse.BCOO.fromdense(jnp.asarray(dense))
        elif kind == "implicit":
            Aj = jnp.asarray(dense)
            A = R.implicit_operator(lambda X: Aj @ X, lambda Y: Aj.T @ Y, dense.shape,
                                    np.float64)
        else:
            A = R.factored_operator(Lf, d, Rf)
        ref = R.rsvd(jax.random.key(0), dense, 4, oversample=1, power_iters=1)
        got = R.rsvd(jax.random.key(0), A, 4, oversample=1, power_iters=1)
        np.testing.assert_allclose(np.asarray(got.s), np.asarray(ref.s), rtol=1e-9)
        np.testing.assert_allclose(np.asarray(got.s),
                                   np.linalg.svd(dense, compute_uv=False)[:4], rtol=1e-9)


def test_vmap_over_keys_and_no_retrace():
    A = M.with_spectrum(jax.random.key(0), 50, 40, np.geomspace(1, 1e-3, 40),
                        dtype=np.float32)
    keys = jax.random.split(jax.random.key(1), 5)
    batched = jax.vmap(lambda k: R.rsvd(k, A, 5).s)(keys)
    for i in range(5):
        np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(R.rsvd(keys[i], A, 5).s),
                                   rtol=1e-5)
    # library-level cache: same shapes/statics -> no new compilation
    R.rsvd(keys[0], A, 5)
    size = RF._rsvd_jit._cache_size()
    R.rsvd(keys[1], A + 1.0, 5)
    assert RF._rsvd_jit._cache_size() == size
    # a user jit around rsvd traces once for repeated calls with the same shapes
    @jax.jit
    @chex.assert_max_traces(n=1)
    def f(key, A):
        return R.rangefinder(key, A, 6, power_iters=1)

    f(keys[0], A)
    f(keys[1], A * 2)
    f(keys[2], A - 1)


def test_srtt_and_sparse_sign_rangefinders_are_accurate():
    A = M.with_spectrum(jax.random.key(0), 256, 100, np.r_[np.ones(10), np.full(90, 1e-4)],
                        dtype=np.float32)
    for sketch in ("srtt", R.SparseSign(zeta=4), R.Gaussian("threefry"), "gaussian"):
        Q = R.rangefinder(jax.random.key(1), A, 20, sketch=sketch)
        err = float(jnp.linalg.norm(A - Q @ (Q.T @ A)))
        assert err < 1e-4 * np.sqrt(90) * 3, (sketch, err)


def test_complex_rsvd():
    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        U = np.linalg.qr(rng.standard_normal((40, 6)) + 1j * rng.standard_normal((40, 6)))[0]
        Vm = np.linalg.qr(rng.standard_normal((30, 6)) + 1j * rng.standard_normal((30, 6)))[0]
        s = np.array([6.0, 5, 4, 3, 2, 1])
        A = (U * s) @ Vm.conj().T
        for sketch in ("gaussian", "srtt", "sparse_sign"):
            res = R.rsvd(jax.random.key(0), A, 6, oversample=2, sketch=sketch)
            np.testing.assert_allclose(np.asarray(res.s), s, rtol=1e-10)
            np.testing.assert_allclose(np.asarray((res.U * res.s) @ res.Vt), A, atol=1e-10)


def test_power_iters_auto_is_scikit_learns_rule():
    """``power_iters="auto"``: 7 when k < 0.1 min(m, n), else 4 (sklearn's n_iter="auto")."""
    A = M.with_spectrum(jax.random.key(0), 120, 90, M.polynomial_decay(90, r1=5),
                        dtype=np.float32)
    for k, q in [(8, 7), (9, 4)]:
        auto = R.rsvd(jax.random.key(1), A, k, power_iters="auto")
        ref = R.rsvd(jax.random.key(1), A, k, power_iters=q)
        for a, b in zip(auto, ref):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match="'auto'"):
        R.rsvd(jax.random.key(1), A, 8, power_iters="fast")


@pytest.mark.parametrize("fn", ["rsvd", "rangefinder", "range_sketch"])
def test_method_carries_the_sketch_options(fn, dtype, rng):
    """``method=Method(...)`` gives bitwise the result of the same options as keywords; a
    keyword overrides the method's field; a non-Method is a clear TypeError."""
    A = jnp.asarray(rng.standard_normal((40, 30)), dtype)
    key = jax.random.key(3)
    f = getattr(R, fn)
    m = R.Method(sketch="srtt", power_iters=2, stable=False)
    via_method = f(key, A, 6, method=m)
    flat = f(key, A, 6, sketch="srtt", power_iters=2, stable=False)
    for a, b in zip(jax.tree.leaves(via_method), jax.tree.leaves(flat)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    default = f(key, A, 6)
    np.testing.assert_array_equal(np.asarray(jax.tree.leaves(f(key, A, 6, method=R.Method()))[0]),
                                  np.asarray(jax.tree.leaves(default)[0]))
    over = f(key, A, 6, method=m, power_iters=0, sketch="gaussian", stable=True)
    np.testing.assert_array_equal(np.asarray(jax.tree.leaves(over)[0]),
                                  np.asarray(jax.tree.leaves(default)[0]))
    with pytest.raises(TypeError, match="method must be a rdr_jax.Method"):
        f(key, A, 6, method="srtt")
    with pytest.raises(TypeError, match="stable must be a bool"):
        f(key, A, 6, stable="yes")


def test_rsvd_takes_oversample_from_the_method_and_works_in_jit_and_vmap(rng):
    A = jnp.asarray(rng.standard_normal((50, 40)), jnp.float32)
    keys = jax.random.split(jax.random.key(0), 3)
    m = R.Method(oversample=4, power_iters=1)
    one = R.rsvd(keys[0], A, 5, method=m)
    ref = R.rsvd(keys[0], A, 5, oversample=4, power_iters=1)
    np.testing.assert_array_equal(np.asarray(one.s), np.asarray(ref.s))
    jitted = jax.jit(lambda k: R.rsvd(k, A, 5, method=m).s)(keys[0])
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(one.s), rtol=1e-5)
    batch = jax.vmap(lambda k: R.rsvd(k, A, 5, method=m).s)(keys)
    np.testing.assert_allclose(np.asarray(batch[0]), np.asarray(one.s), rtol=1e-5)
    s_true = np.linalg.svd(np.asarray(A, np.float64), compute_uv=False)[:5]
    np.testing.assert_allclose(np.asarray(one.s), s_true, rtol=0.15)


def test_streaming_sketches_take_the_sketch_of_a_method(rng):
    A = rng.standard_normal((24, 10))
    blocks = [A[:10], A[10:]]
    key = jax.random.key(1)
    a = R.id_cur.streaming.streaming_sketches(key, blocks, A.shape, 4,
                                              method=R.Method(sketch="sparse_sign"))
    b = R.id_cur.streaming.streaming_sketches(key, blocks, A.shape, 4, sketch="sparse_sign")
    np.testing.assert_array_equal(np.asarray(a.X), np.asarray(b.X))
    with pytest.raises(ValueError, match="SRTT"):
        R.id_cur.streaming.streaming_sketches(key, blocks, A.shape, 4,
                                              method=R.Method(sketch="srtt"))
