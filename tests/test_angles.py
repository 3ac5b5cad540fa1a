"""Chapter 3: canonical angles, prior bounds, unbiased estimates, posterior bounds, planner.

References are independent of the module: ``scipy.linalg.subspace_angles``, numpy SVDs,
closed forms, a literal numpy transcription of ``algo:unbiased_canonical_angle_estimators``,
and true sines of randomized SVDs. Statistical claims run over many keys via ``vmap``.
"""

import functools
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

import rdr_jax as R
from rdr_jax import angles as AN
from rdr_jax.angles import estimator, exact, posterior, prior
from rdr_jax.angles._common import sines_orthonormal
from rdr_jax import matrices as M
from rdr_jax.sketching import SparseSign, make_sketch
from tests._compile import OPTIMIZED

# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------
N_STAT = 200  # matrix size of the statistical tests (r = 200)


def _np(x):
    return np.asarray(x, np.float64)


@functools.partial(jax.jit, static_argnames=("k", "l", "q"),
                   compiler_options=OPTIMIZED)     # runs 500 rSVDs a call: tests/_compile.py
def _true_sines_batch(A, Ut, Vtt, keys, k, l, q):
    """sin angle(U_k, U_hat_l), sin angle(V_k, V_hat_l) of rank-l rSVDs (one per key).

    range(U_hat_l) = range(Q) for the rSVD's rangefinder Q, and range(V_hat_l) = range(A^T Q),
    so no SVD is needed. A is traced: matrices of the same shape share one compilation."""
    def one(kk):
        Q = R.rangefinder(kk, A, l, power_iters=q)
        Vh = jnp.linalg.qr(jnp.matmul(A.T, Q, precision=jax.lax.Precision.HIGHEST))[0]
        left = sines_orthonormal(Q, Ut[:, :k])
        # chained after `left`: two independent batched SVDs can deadlock jaxlib's CPU
        # LAPACK kernels on a 2-thread pool (see rdr_jax.angles._common.run_after)
        return left, sines_orthonormal(Vh, Vtt[:k].T, after=left)
    return jax.vmap(one)(keys)


def _true_sines(A, tsvd, k, l, q, n_keys, seed=5):
    keys = jax.random.split(jax.random.key(seed), n_keys)
    left, right = _true_sines_batch(A, tsvd.U, tsvd.Vt, keys, k, l, q)
    return _np(left), _np(right)


@functools.lru_cache(maxsize=None)
def _stat_matrix(kind, dtype_name="float64"):
    n = N_STAT
    spec = {"poly": M.polynomial_decay(n, r1=8),                 # thesis "slow decay" shape
            "exp": M.exponential_decay(n, r1=8, base=0.95)}[kind]  # exponential decay
    with jax.enable_x64(dtype_name == "float64"):
        A = M.with_spectrum(jax.random.key(0), n, n, spec, dtype=np.dtype(dtype_name))
        return A, AN.exact_svd(A)


def _numpy_range(rng, A, l, q):
    """Orthonormal basis of range(U_hat_l) of a plain numpy rSVD with re-orthonormalised
    power iterations (independent reference): U_hat_l = Q U_t spans range(Q)."""
    Q = np.linalg.qr(A @ rng.standard_normal((A.shape[1], l)))[0]
    for _ in range(q):
        Q = np.linalg.qr(A @ np.linalg.qr(A.T @ Q)[0])[0]
    return Q


def _numpy_estimator_trial(Omega, s, k, p):
    """Literal transcription of algo:unbiased_canonical_angle_estimators (one trial)."""
    W1 = (s[:k] ** p)[:, None] * Omega[:k]
    W2 = (s[k:] ** p)[:, None] * Omega[k:]
    U2, S2, V2t = np.linalg.svd(W2, full_matrices=False)
    nu = np.linalg.svd(W1 @ V2t.T @ np.diag(1 / S2) @ U2.T, compute_uv=False)
    return 1 / np.sqrt(1 + nu ** 2)


# ======================================================================================
# 1. canonical_angles
# ======================================================================================
def _bases_with_angles(rng, d, p, thetas):
    """U (d x p) and V (d x len(thetas)) with prescribed canonical angles, then scrambled by
    random invertible right factors (so neither basis is orthonormal)."""
    q = len(thetas)
    Q = np.linalg.qr(rng.standard_normal((d, p + q)))[0]
    U = Q[:, :p]
    V = Q[:, :q] * np.cos(thetas) + Q[:, p:p + q] * np.sin(thetas)
    return U @ rng.standard_normal((p, p)), V @ rng.standard_normal((q, q))


def test_canonical_angles_matches_scipy_float64_tiny_and_unequal_dims():
    """Bases of unequal dimension (11 vs 8), non-orthonormal (random invertible mixing), with
    angles from 1e-13 to pi/2. scipy 1.17's ``subspace_angles`` is accurate for small angles
    only through its arcsin branch, which it applies where ``cos^2 >= 1/2`` -- but it pairs that
    mask (ascending angles) with the angle array in descending order, so in a *mixed* set the
    smallest angles go through ``arccos`` and carry ~1e-8 errors. We therefore compare to scipy
    at 1e-12 on an all-small set (arcsin everywhere) and on the large angles of the mixed set,
    and everywhere to the construction (absolute error ~ eps)."""
    rng = np.random.default_rng(0)
    small = np.array([1e-13, 3e-11, 1e-9, 5e-8, 1e-4, 0.3, 0.7])
    mixed = np.array([1e-13, 3e-11, 1e-9, 5e-8, 1e-4, 0.3, 1.2, np.pi / 2])
    with jax.enable_x64(True):
        for thetas in (small, mixed):
            U, Vb = _bases_with_angles(rng, 40, 11, thetas)
            got = _np(AN.canonical_angles(U, Vb))
            assert got.shape == (thetas.size,) and np.all(np.diff(got) >= 0)
            # against the construction: absolute accuracy ~ eps, incl. angles below 1e-8
            np.testing.assert_allclose(got, np.sin(thetas), rtol=0, atol=2e-15)
            assert abs(got[2] / 1e-9 - 1) < 1e-5 and abs(got[1] / 3e-11 - 1) < 1e-3
            want_scipy = np.sort(np.sin(scipy.linalg.subspace_angles(U, Vb)))
            use = slice(None) if thetas is small else thetas >= 0.3
            np.testing.assert_allclose(got[use], want_scipy[use], rtol=1e-12, atol=1e-12)
            # symmetric in its arguments
            np.testing.assert_allclose(_np(AN.canonical_angles(Vb, U)), got, atol=1e-15)
        # the naive sqrt(1 - cos^2) loses the angles below ~1e-8 entirely
        Qu, Qv = np.linalg.qr(U)[0], np.linalg.qr(Vb)[0]
        cos = np.linalg.svd(Qu.T @ Qv, compute_uv=False)
        naive = np.sort(np.sqrt(np.clip(1 - cos ** 2, 0, None)))
        assert abs(naive[2] - 1e-9) > 0.5e-9 and abs(got[2] - 1e-9) < 1e-14


def test_canonical_angles_dtype_and_complex(dtype):
    rng = np.random.default_rng(1)
    U = rng.standard_normal((30, 6)).astype(dtype)
    Vb = rng.standard_normal((30, 4)).astype(dtype)
    got = AN.canonical_angles(U, Vb)
    assert got.dtype == dtype and got.shape == (4,)
    want = np.sort(np.sin(scipy.linalg.subspace_angles(U.astype(np.float64),
                                                        Vb.astype(np.float64))))
    np.testing.assert_allclose(_np(got), want, atol=1e-5 if dtype == np.float32 else 1e-13)
    assert np.all(np.diff(_np(got)) >= 0)
    # complex bases: the angle between span(e1) and span(e1 + i t e2) is atan(t)
    cdt = np.complex64 if dtype == np.float32 else np.complex128
    Uc = np.eye(3, 1, dtype=cdt)
    Vc = np.array([[1.0], [0.5j], [0.0]], dtype=cdt)
    np.testing.assert_allclose(_np(AN.canonical_angles(Uc, Vc)), [np.sin(np.arctan(0.5))],
                               rtol=1e-5 if dtype == np.float32 else 1e-13)


def test_canonical_angles_jit_vmap_no_retrace():
    rng = np.random.default_rng(2)
    U = jnp.asarray(rng.standard_normal((20, 5)), jnp.float32)
    Vs = jnp.asarray(rng.standard_normal((7, 20, 3)), jnp.float32)
    batched = jax.vmap(lambda Vb: AN.canonical_angles(U, Vb))(Vs)
    for i in range(7):
        np.testing.assert_allclose(_np(batched[i]), _np(AN.canonical_angles(U, Vs[i])),
                                   atol=1e-6)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def f(U, Vb):
        return AN.canonical_angles(U, Vb)

    f(U, Vs[0])
    f(U * 2, Vs[1])
    size = exact._canonical_angles_jit._cache_size()
    AN.canonical_angles(U + 1, Vs[2])
    assert exact._canonical_angles_jit._cache_size() == size
    # inside jit the length is static: a rank-deficient basis gives its angles, then NaN
    bad = jnp.concatenate([Vs[0][:, :2], Vs[0][:, :1]], axis=1)
    got = _np(f(U, bad))
    assert got.shape == (3,) and np.isnan(got[2])
    np.testing.assert_allclose(got[:2], _np(AN.canonical_angles(U, bad)), atol=1e-6)


@pytest.mark.parametrize("case", ["nan", "rows", "1d", "string"])
def test_canonical_angles_bad_input(case):
    rng = np.random.default_rng(3)
    U = rng.standard_normal((10, 3))
    Vb = rng.standard_normal((10, 2))
    err = ValueError
    if case == "nan":
        Vb[0, 0] = np.nan
        msg = "V contains 1 non-finite"
    elif case == "rows":
        Vb = Vb[:9]
        msg = "same number of rows"
    elif case == "1d":
        U = U[:, 0]
        msg = "U must be a 2-D matrix"
    else:
        U = np.array([["a", "b"]])
        err, msg = TypeError, "U must be a floating array"
    with pytest.raises(err, match=msg):
        AN.canonical_angles(U, Vb)


# -- the scipy interface: empty, rank-deficient and wide bases, radians, integers ---------
def _scipy_ascending(X, Y, dtype=np.float64):
    """scipy's angles, ascending; computed in ``dtype`` (scipy's rank tolerance uses its eps)."""
    return np.sort(scipy.linalg.subspace_angles(np.asarray(X, dtype), np.asarray(Y, dtype)))


@pytest.mark.parametrize("shapes", [((10, 0), (10, 2)), ((10, 3), (10, 0)), ((0, 3), (0, 2))])
def test_canonical_angles_empty_input_gives_empty_array_as_scipy(shapes, dtype):
    U, Vb = np.ones(shapes[0], dtype), np.ones(shapes[1], dtype)
    for radians in (False, True):
        got = AN.canonical_angles(U, Vb, radians=radians)
        assert got.shape == (0,) and got.dtype == dtype
    assert _scipy_ascending(U, Vb).shape == (0,)
    # a zero basis spans {0}: no angles either
    z = AN.canonical_angles(np.zeros((10, 3), dtype), np.ones((10, 2), dtype))
    assert z.shape == (0,) and _scipy_ascending(np.zeros((10, 3)), np.ones((10, 2))).size == 0


def _rank_deficient_cases(rng):
    U = rng.standard_normal((12, 5))
    U[:, 3] = U[:, 0] - 2 * U[:, 1]
    U[:, 4] = U[:, 2]                                             # rank 3
    Vb = rng.standard_normal((12, 4))
    V1 = np.repeat(Vb[:, :1], 3, axis=1)                          # rank 1
    wide = rng.standard_normal((4, 7))                            # more columns than rows
    return [(U, Vb), (Vb, U), (U, V1), (V1, U), (U, U[:, :2]), (wide, rng.standard_normal((4, 2))),
            (rng.standard_normal((4, 3)), wide)]


def test_canonical_angles_rank_deficient_and_wide_match_scipy(dtype):
    """scipy orthonormalises with ``orth`` (dropping dependent columns): same number of
    angles, same values; sines and radians."""
    rng = np.random.default_rng(5)
    tol = 1e-5 if dtype == np.float32 else 1e-13
    for X, Y in _rank_deficient_cases(rng):
        X, Y = X.astype(dtype), Y.astype(dtype)
        want = _scipy_ascending(X, Y, dtype)
        got = _np(AN.canonical_angles(X, Y, radians=True))
        assert got.shape == want.shape, (X.shape, Y.shape)
        np.testing.assert_allclose(got, want, atol=10 * tol)
        np.testing.assert_allclose(_np(AN.canonical_angles(X, Y)), np.sin(want), atol=tol)


def test_canonical_angles_rank_deficient_under_jit_and_vmap_pads_with_nan():
    rng = np.random.default_rng(6)
    with jax.enable_x64(True):
        for X, Y in _rank_deficient_cases(rng):
            want = _scipy_ascending(X, Y)
            got = _np(jax.jit(lambda a, b: AN.canonical_angles(a, b, radians=True))(X, Y))
            assert got.shape == (min(X.shape[1], Y.shape[1], X.shape[0]),)
            np.testing.assert_allclose(got[:want.size], want, atol=1e-13)
            assert np.all(np.isnan(got[want.size:]))
        U, Vb = _rank_deficient_cases(rng)[0]
        batch = jax.vmap(lambda v: AN.canonical_angles(U, v))(np.stack([Vb, Vb * 3]))
        np.testing.assert_allclose(_np(batch[1]), _np(batch[0]), atol=1e-14)
        want = np.sin(_scipy_ascending(U, Vb))                  # rank 3: 3 angles, then NaN
        np.testing.assert_allclose(_np(batch[0])[:3], want, atol=1e-13)
        assert want.size == 3 and np.isnan(_np(batch[0])[3])


def _bases_near_right_angle(rng, d, dtype):
    """Orthonormal U, V (d x 4) with angles pi/2 - delta, delta from 1e-12 to 1e-3."""
    delta = np.array([1e-12, 1e-9, 1e-6, 1e-3])
    Q = np.linalg.qr(rng.standard_normal((d, 8)))[0]
    theta = np.pi / 2 - delta
    V = Q[:, :4] * np.cos(theta) + Q[:, 4:] * np.sin(theta)
    return Q[:, :4].astype(dtype), V.astype(dtype), np.sort(theta)


def test_canonical_angles_radians_accurate_near_right_angle_float64():
    """arctan2(sin, cos) keeps angles near pi/2 to ~1e-15 (arcsin of the sines: ~1e-8)."""
    rng = np.random.default_rng(7)
    with jax.enable_x64(True):
        U, Vb, theta = _bases_near_right_angle(rng, 30, np.float64)
        want = _scipy_ascending(U, Vb)
        np.testing.assert_allclose(want, theta, rtol=0, atol=1e-15)     # scipy is accurate here
        eager = _np(AN.canonical_angles(U, Vb, radians=True))
        jitted = _np(jax.jit(lambda a, b: AN.canonical_angles(a, b, radians=True))(U, Vb))
        vmapped = _np(jax.vmap(lambda v: AN.canonical_angles(U, v, radians=True))(
            np.stack([Vb, 2 * Vb])))
        for got in (eager, jitted, vmapped[0], vmapped[1]):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)
        # the test can fail: the sines alone lose half the digits near pi/2
        sines = _np(AN.canonical_angles(U, Vb))
        assert np.all(sines <= 1)        # a rounded singular value above 1 is clipped
        via_sines = np.arcsin(sines)
        assert np.max(np.abs(via_sines - want)) > 1e-9
        # and small angles stay accurate in radians too (the sine branch)
        small = _np(AN.canonical_angles(U, U + 1e-10 * Vb, radians=True))
        np.testing.assert_allclose(small, _np(AN.canonical_angles(U, U + 1e-10 * Vb)),
                                   rtol=1e-12)


def test_canonical_angles_radians_near_right_angle_float32():
    rng = np.random.default_rng(8)
    U, Vb, _ = _bases_near_right_angle(rng, 30, np.float32)
    want = _scipy_ascending(U, Vb)                  # scipy in float64 on the float32 input
    eager = AN.canonical_angles(U, Vb, radians=True)
    assert eager.dtype == np.float32
    eager = _np(eager)
    jitted = _np(jax.jit(lambda a, b: AN.canonical_angles(a, b, radians=True))(U, Vb))
    vmapped = _np(jax.vmap(lambda v: AN.canonical_angles(U, v, radians=True))(Vb[None]))[0]
    for got in (eager, jitted, vmapped):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    via_sines = np.arcsin(np.clip(_np(AN.canonical_angles(U, Vb)), 0, 1))   # sines can be 1+eps
    assert np.max(np.abs(via_sines - want)) > 1e-5


def test_canonical_angles_integer_input():
    U = np.array([[1, 0], [0, 1], [0, 0]])
    Vb = np.array([[1], [1], [0]])
    with jax.enable_x64(True):
        got = AN.canonical_angles(U, Vb, radians=True)
        assert got.dtype == np.float64
        np.testing.assert_allclose(_np(got), [0.0], atol=1e-15)
        got = AN.canonical_angles(np.eye(3, 1, dtype=int), Vb, radians=True)
        np.testing.assert_allclose(_np(got), [np.pi / 4], rtol=1e-15)
    assert AN.canonical_angles(U, Vb).dtype == np.float32             # x64 off
    assert AN.canonical_angles(U.astype(np.float32), Vb).dtype == np.float32


def test_true_angles_match_canonical_angles():
    with jax.enable_x64(True):
        A, tsvd = _stat_matrix("poly")
        svd = R.rsvd(jax.random.key(1), A, 30, oversample=0, power_iters=1)
        t = AN.true_angles(tsvd, svd, 12)
        Vt, Vh = tsvd.Vt.T, svd.Vt.T
        for got, (X, Y) in ((t.Uk_Ul, (tsvd.U[:, :12], svd.U)), (t.Vk_Vl, (Vt[:, :12], Vh)),
                            (t.Uk_Uk, (tsvd.U[:, :12], svd.U[:, :12])),
                            (t.Vk_Vk, (Vt[:, :12], Vh[:, :12]))):
            want = np.sort(np.sin(scipy.linalg.subspace_angles(_np(X), _np(Y))))
            np.testing.assert_allclose(_np(got), want, atol=1e-13)
        with pytest.raises(ValueError, match="k must be <= 30"):
            AN.true_angles(tsvd, svd, 31)


# ======================================================================================
# 2. Thm 3.1 space-agnostic bounds
# ======================================================================================
def _sa_reference(s, k, l, q, side, eps, lower):
    s = _np(s)
    r = s.size
    p = 4 * q + (2 if side == "left" else 4)
    e1, e2 = eps * math.sqrt(k / l), eps * math.sqrt(l / (r - k))
    c = (1 + e1) / (1 - e2) if lower else (1 - e1) / (1 + e2)
    return (1 + c * l * s[:k] ** p / np.sum(s[k:] ** p)) ** -0.5


@pytest.mark.parametrize("side", ["left", "right"])
def test_space_agnostic_bound_closed_form(side, dtype):
    s = M.polynomial_decay(120, r1=5)
    for q in (0, 1, 2):
        got = AN.space_agnostic_bound(s.astype(dtype), 10, 30, q, subspace=side)
        assert got.dtype == dtype and got.shape == (10,)
        np.testing.assert_allclose(_np(got), _sa_reference(s, 10, 30, q, side, 1.0, False),
                                   rtol=1e-5 if dtype == np.float32 else 1e-12)
        lo = AN.space_agnostic_bound(s.astype(dtype), 10, 30, q, subspace=side, eps=0.5, lower=True)
        np.testing.assert_allclose(_np(lo), _sa_reference(s, 10, 30, q, side, 0.5, True),
                                   rtol=1e-5 if dtype == np.float32 else 1e-12)
        assert np.all(_np(lo) <= _np(got))
    # the right side is the left side with half a power iteration more (exponent 4q+4)
    with jax.enable_x64(True):
        sr = AN.space_agnostic_bound(s, 10, 30, 1, subspace="right")
        manual = _sa_reference(s, 10, 30, 1, "left", 1.0, False)
        assert np.all(_np(sr) < manual)


def test_space_agnostic_bound_large_q_no_overflow():
    """q = 10 means sigma^42: the log-domain evaluation stays finite and accurate in float32."""
    s = M.exponential_decay(300, r1=20)
    with jax.enable_x64(True):
        ref = _np(AN.space_agnostic_bound(s, 50, 80, 10, subspace="right"))
    got = _np(AN.space_agnostic_bound(s.astype(np.float32), 50, 80, 10, subspace="right"))
    assert np.all(np.isfinite(got)) and np.all(ref > 0)
    np.testing.assert_allclose(got[ref > 1e-30], ref[ref > 1e-30], rtol=1e-3)


def test_space_agnostic_bound_vacuous_is_nan():
    s = M.polynomial_decay(100)
    # upper: eps1 = eps sqrt(k/l) >= 1
    assert np.all(np.isnan(_np(AN.space_agnostic_bound(s, 10, 20, 0, eps=1.5))))
    # lower: eps2 = 2 sqrt(l/(r-k)) = 2 sqrt(40/90) > 1 (thesis' appendix constants)
    assert np.all(np.isnan(_np(AN.space_agnostic_bound(s, 10, 40, 0, eps=2.0, lower=True))))
    # ... and finite just inside the admissible range
    assert np.all(np.isfinite(_np(AN.space_agnostic_bound(s, 10, 20, 0, eps=2.0, lower=True))))


def test_space_agnostic_bound_jit_vmap_no_retrace():
    s = jnp.asarray(M.polynomial_decay(60), jnp.float32)
    batch = jnp.stack([s, s * 3, s ** 2])
    out = jax.vmap(lambda x: AN.space_agnostic_bound(x, 5, 15, 1))(batch)
    np.testing.assert_allclose(_np(out[1]), _np(out[0]), rtol=1e-5)  # scale invariant

    @jax.jit
    @chex.assert_max_traces(n=1)
    def f(x):
        return AN.space_agnostic_bound(x, 5, 15, 1, subspace="right")

    f(s)
    f(s * 2)
    AN.space_agnostic_bound(s, 5, 15, 1)
    size = prior._sa_bound_jit._cache_size()
    # new values, q, side and eps are traced: no new compilation
    AN.space_agnostic_bound(s * 5, 5, 15, 1, subspace="left")
    AN.space_agnostic_bound(s * 7, 5, 15, 3, subspace="right", eps=0.5)
    assert prior._sa_bound_jit._cache_size() == size


# configurations where the thesis' "l >= 1.6k is usually sufficient" holds at this scale
# (n = 200, k = 20): q = 1 from l = 1.6k on, q = 0 from l = 4k on (see the next test).
@pytest.mark.parametrize("l,q", [(32, 1), (80, 0)])
def test_space_agnostic_upper_bound_holds_in_95_percent(l, q):
    k = 20
    with jax.enable_x64(True):
        for kind in ("poly", "exp"):
            A, tsvd = _stat_matrix(kind)
            left, right = _true_sines(A, tsvd, k, l, q, 200)
            for side, tr in (("left", left), ("right", right)):
                b = _np(AN.space_agnostic_bound(tsvd.s, k, l, q, subspace=side))
                frac = np.mean(np.all(tr <= b, axis=1))
                assert frac >= 0.95, (kind, l, q, side, frac)
                assert np.all(b < 1)  # informative, not the trivial sin <= 1


def test_space_agnostic_upper_bound_at_16k_without_power_iterations():
    """Known limitation (reported): at l = 1.6k and q = 0 the left bound is *not* >= the
    true sines in 95% of trials (measured: 68% (poly) and 79% (exp) here; 43% at the
    thesis' own 500 x 500, k = 50, l = 80). The shortfall is confined to the largest angles
    and small: the bound holds for i <= k/2 in every trial and undershoots by <= 15%."""
    k, l = 20, 32
    with jax.enable_x64(True):
        for kind in ("poly", "exp"):
            A, tsvd = _stat_matrix(kind)
            left, _ = _true_sines(A, tsvd, k, l, 0, 200)
            b = _np(AN.space_agnostic_bound(tsvd.s, k, l, 0, subspace="left"))
            assert np.mean(np.all(left <= b, axis=1)) < 0.95
            assert np.all(left[:, :k // 2] <= b[:k // 2])
            assert np.max(left / b) < 1.15


@pytest.mark.parametrize("case", ["increasing", "negative", "zero", "nan", "2d", "k_ge_l",
                                  "l_ge_r", "q_neg", "q_float", "side", "eps"])
def test_space_agnostic_bound_bad_input(case):
    s = M.polynomial_decay(50)
    args = dict(s=s, k=5, l=10, q=0)
    kw = {}
    msg, err = None, ValueError
    if case == "increasing":
        args["s"] = s[::-1].copy()
        msg = "non-increasing"
    elif case == "negative":
        args["s"] = np.r_[s[:-1], -1e-3]
        msg = "must be positive"
    elif case == "zero":
        args["s"] = np.r_[s[:-1], 0.0]
        msg = "must be positive"
    elif case == "nan":
        args["s"] = np.r_[np.nan, s[1:]]
        msg = "non-finite"
    elif case == "2d":
        args["s"] = np.diag(s)
        msg = "1-D spectrum"
    elif case == "k_ge_l":
        args["l"] = 5
        msg = "k < l"
    elif case == "l_ge_r":
        args["l"] = 50
        msg = "l < r"
    elif case == "q_neg":
        args["q"] = -1
        msg = "power_iters must be >= 0"
    elif case == "q_float":
        args["q"] = 1.0
        err, msg = TypeError, "power_iters must be a Python int"
    elif case == "side":
        kw["subspace"] = "up"
        msg = "subspace must be"
    else:
        kw["eps"] = -1.0
        msg = "eps must be"
    with pytest.raises(err, match=msg):
        AN.space_agnostic_bound(args["s"], args["k"], args["l"], args["q"], **kw)


def test_padded_spectrum():
    s_hat = np.array([5.0, 3.0, 2.0])
    np.testing.assert_array_equal(_np(AN.padded_spectrum(s_hat, 6)), [5, 3, 2, 2, 2, 2])
    np.testing.assert_array_equal(_np(AN.padded_spectrum(s_hat, 3)), s_hat)
    with pytest.raises(ValueError, match="r must be >= 3"):
        AN.padded_spectrum(s_hat, 2)
    with pytest.raises(ValueError, match="non-increasing"):
        AN.padded_spectrum(s_hat[::-1].copy(), 5)


# ======================================================================================
# 3. Unbiased estimates
# ======================================================================================
@pytest.mark.parametrize("method", ["auto", "qr", "cholesky"])
def test_estimator_matches_literal_numpy_algorithm(method):
    """Same Omega, the algorithm transcribed literally (SVD of W2) vs the library."""
    s = M.polynomial_decay(90, r1=5)
    k, l, N = 8, 20, 4
    with jax.enable_x64(True):
        key = jax.random.key(3)
        for side, p in (("left", 3), ("right", 4)):          # q = 1: 2q+1, 2q+2
            est = AN.unbiased_estimate(key, s, k, l, 1, subspace=side, num_trials=N,
                                       options=AN.EstimateOptions(method=method))
            keys = jax.random.split(key, N)
            for j in range(N):
                G = make_sketch(keys[j], "gaussian", l, 90, dtype=jnp.float32).todense()
                want = _numpy_estimator_trial(_np(G).T, s, k, p)
                # Omega is float32: under the suite's XLA flags (backend optimisation level
                # 0, LLVM-IR emitters; see conftest.py) XLA:CPU's float32 erf_inv can differ
                # by a few ulps between the eager draw here and the one fused into the
                # estimator (with default flags they agree bitwise and rtol=1e-9 holds):
                # 1e-6 is ~10 float32 ulps, far below any algorithmic error.
                np.testing.assert_allclose(_np(est.trials[j]), np.sort(want), rtol=1e-6)
            tr = _np(est.trials)
            np.testing.assert_allclose(_np(est.mean), tr.mean(0), rtol=1e-12)
            np.testing.assert_array_equal(_np(est.min), tr.min(0))
            np.testing.assert_array_equal(_np(est.max), tr.max(0))


def test_estimator_auto_falls_back_to_qr_when_ill_conditioned():
    """q = 5 on a decaying tail makes W2^T W2 hopeless for Cholesky; auto must equal QR."""
    s = M.exponential_decay(200, r1=10, base=0.9, floor=1e-6)
    with jax.enable_x64(True):
        key = jax.random.key(0)
        qr, auto, chol = (AN.unbiased_estimate(key, s, 10, 40, 5, num_trials=5,
                                               options=AN.EstimateOptions(method=m))
                          for m in ("qr", "auto", "cholesky"))
        np.testing.assert_allclose(_np(auto.trials), _np(qr.trials), rtol=1e-12)
        assert np.all(np.isfinite(_np(qr.trials)))
        # the raw Cholesky path is flagged (NaN) or visibly wrong there
        c = _np(chol.trials)
        assert np.any(np.isnan(c)) or np.max(np.abs(c / _np(qr.trials) - 1)) > 1e-6


def test_estimator_dtype_and_right_side_smaller(dtype):
    s = M.polynomial_decay(100, r1=5).astype(dtype)
    key = jax.random.key(1)
    left = AN.unbiased_estimate(key, s, 10, 25, 0, subspace="left", num_trials=64)
    right = AN.unbiased_estimate(key, s, 10, 25, 0, subspace="right", num_trials=64)
    assert left.mean.dtype == dtype and left.trials.shape == (64, 10)
    L, Rr = _np(left.trials), _np(right.trials)
    assert np.all((L > 0) & (L <= 1)) and np.all(np.diff(L, axis=1) >= 0)
    assert np.all(_np(right.mean) < _np(left.mean))  # the extra half power iteration
    assert np.all(_np(left.min) <= _np(left.mean)) and np.all(_np(left.mean) <= _np(left.max))
    if dtype == np.float32:  # float32 agrees with float64 on the same draws
        with jax.enable_x64(True):
            ref = AN.unbiased_estimate(key, s.astype(np.float64), 10, 25, 0, num_trials=64)
        np.testing.assert_allclose(L, _np(ref.trials), rtol=1e-3)
    assert Rr.shape == L.shape


def _estimator_vs_truth_setup(q):
    A, tsvd = _stat_matrix("poly")
    left, right = _true_sines(A, tsvd, 10, 20, q, 500, seed=11)
    return tsvd.s, left, right


@pytest.mark.parametrize("q", [0, 1])
def test_estimator_converges_to_mean_true_sines(q):
    """500 estimator trials vs 500 rSVDs: relative error < 5% where the mean sine > 1e-6."""
    k, l = 10, 20
    with jax.enable_x64(True):
        s, left, right = _estimator_vs_truth_setup(q)
        for side, tr in (("left", left), ("right", right)):
            est = AN.unbiased_estimate(jax.random.key(9 + q), s, k, l, q, subspace=side,
                                       num_trials=500)
            m = tr.mean(0)
            keep = m > 1e-6
            rel = np.abs(_np(est.mean)[keep] / m[keep] - 1)
            assert keep.sum() == k and rel.max() < 0.05, (side, rel.max())
        # the test can fail: with the left exponent the right-side sines are badly missed
        wrong = AN.unbiased_estimate(jax.random.key(9), s, k, l, q, subspace="left",
                                     num_trials=500)
        assert np.max(np.abs(_np(wrong.mean) / right.mean(0) - 1)) > 0.5


def test_estimator_n3_band_contains_truth_at_the_exchangeable_rate():
    """With N = 3 the band [min, max] contains an independent draw of the true sines with
    probability exactly (N-1)/(N+1) = 1/2 per index (the estimator and the truth have the
    same distribution, so the four values are exchangeable). Measured over 500 rSVDs x 10
    indices; the thesis' "the band contains the true angles" holds in this sense, and the
    truth is within the band widened by 25% for >= 85% of the indices."""
    k, l, q = 10, 20, 1
    with jax.enable_x64(True):
        s, left, right = _estimator_vs_truth_setup(q)
        keys = jax.random.split(jax.random.key(21), 500)
        for side, tr in (("left", left), ("right", right)):
            est = jax.vmap(lambda kk: AN.unbiased_estimate(kk, s, k, l, q, subspace=side,
                                                           num_trials=3))(keys)
            lo, hi = _np(est.min), _np(est.max)
            inside = np.mean((lo <= tr) & (tr <= hi))
            assert abs(inside - 0.5) < 0.05, (side, inside)
            assert np.mean((lo / 1.25 <= tr) & (tr <= hi * 1.25)) >= 0.85
        # a mismatched model is far from exchangeable
        est = jax.vmap(lambda kk: AN.unbiased_estimate(kk, s, k, l, q, subspace="left",
                                                       num_trials=3))(keys)
        assert np.mean((_np(est.min) <= right) & (right <= _np(est.max))) < 0.25


def test_estimator_jit_vmap_no_retrace_and_other_sketches():
    s = jnp.asarray(M.polynomial_decay(80, r1=5), jnp.float32)
    keys = jax.random.split(jax.random.key(0), 4)
    batched = jax.vmap(lambda kk: AN.unbiased_estimate(kk, s, 6, 12, 1).mean)(keys)
    for i in range(4):
        np.testing.assert_allclose(_np(batched[i]),
                                   _np(AN.unbiased_estimate(keys[i], s, 6, 12, 1).mean),
                                   rtol=1e-5)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def f(key, s):
        return AN.unbiased_estimate(key, s, 6, 12, 1, num_trials=3).mean

    f(keys[0], s)
    f(keys[1], s * 2)
    size = estimator._estimate_jit._cache_size()
    # new keys, values, q and side are traced: no new compilation
    AN.unbiased_estimate(keys[2], s * 3, 6, 12, 1)
    AN.unbiased_estimate(keys[3], s * 4, 6, 12, 2, subspace="right")
    assert estimator._estimate_jit._cache_size() == size
    # non-Gaussian sketch families (a model with V = I): valid sines, close to Gaussian's
    g = _np(AN.unbiased_estimate(keys[0], s, 6, 12, 1, num_trials=100).mean)
    for sketch in (SparseSign(zeta=4),):
        e = _np(AN.unbiased_estimate(keys[0], s, 6, 12, 1, num_trials=100,
                                     options=AN.EstimateOptions(sketch=sketch)).mean)
        assert np.all((e > 0) & (e < 1)) and np.all(np.abs(e / g - 1) < 0.3), sketch


@pytest.mark.parametrize("case", ["increasing", "negative", "l_lt_k", "l_gt_r_minus_k",
                                  "q_neg", "trials0", "trials_float", "side", "sketch",
                                  "method", "options", "key"])
def test_estimator_bad_input(case):
    s = M.polynomial_decay(40)
    kw = dict(subspace="left", num_trials=3)
    args = [jax.random.key(0), s, 5, 10, 0]
    err, msg = ValueError, None
    if case == "increasing":
        args[1] = s[::-1].copy()
        msg = "non-increasing"
    elif case == "negative":
        args[1] = -s
        msg = "positive"
    elif case == "l_lt_k":
        args[3] = 4
        msg = "l must be >= 5"
    elif case == "l_gt_r_minus_k":
        args[3] = 36
        msg = "l must be <= 35"
    elif case == "q_neg":
        args[4] = -2
        msg = "power_iters must be >= 0"
    elif case == "trials0":
        kw["num_trials"] = 0
        msg = "num_trials must be >= 1"
    elif case == "trials_float":
        kw["num_trials"] = 3.0
        err, msg = TypeError, "num_trials must be a Python int"
    elif case == "side":
        kw["subspace"] = "both"
        msg = "subspace must be"
    elif case == "sketch":
        kw["options"] = lambda: AN.EstimateOptions(sketch="uniform")
        msg = "sketch must be one of"
    elif case == "method":
        kw["options"] = lambda: AN.EstimateOptions(method="svd")
        msg = "method must be"
    elif case == "options":
        kw["options"] = {"method": "qr"}
        err, msg = TypeError, "options must be an EstimateOptions"
    else:
        args[0] = 0
        err, msg = TypeError, "key must be a JAX PRNG key"
    with pytest.raises(err, match=msg):
        if callable(kw.get("options")):          # a bad option fails where it is built
            kw["options"] = kw["options"]()
        AN.unbiased_estimate(*args, **kw)


@pytest.mark.parametrize("build, err, msg", [
    (lambda: AN.EstimateOptions(method="lu"), ValueError, "method must be"),
    (lambda: AN.EstimateOptions(sketch="uniform"), ValueError, "sketch must be one of"),
    (lambda: AN.EstimateOptions(mesh="cpu"), TypeError, "mesh must be a jax.sharding.Mesh"),
    (lambda: AN.PlanOptions(subspace="column"), ValueError, "subspace must be"),
    (lambda: AN.PlanOptions(reduce="min"), ValueError, "reduce must be 'mean' or 'max'"),
    (lambda: AN.PlanOptions(constants="tight"), ValueError, "constants must be"),
    (lambda: AN.ReportOptions(eps=0.0), ValueError, "eps must be a finite positive"),
    (lambda: AN.ReportOptions(lower_eps=-1.0), ValueError, "lower_eps must be a finite"),
    (lambda: AN.ReportOptions(stable="yes"), TypeError, "stable must be a bool"),
    (lambda: AN.ReportOptions(residual="norm"), ValueError, "residual must be"),
    (lambda: AN.ReportOptions(estimate={"method": "qr"}), TypeError,
     "estimate must be an EstimateOptions"),
    (lambda: AN.plan_budget(10, 160, gap=1.5, r=330, options="left"), TypeError,
     "options must be a PlanOptions"),
    (lambda: AN.angle_report(jax.random.key(0), np.eye(20), 2, 5, 0, options={}), TypeError,
     "options must be a ReportOptions"),
])
def test_angle_option_objects_reject_bad_values(build, err, msg):
    """0.3 moved the keywords of unbiased_estimate, plan_budget/phi_gamma and angle_report
    onto frozen option objects; a bad value fails where the object is built."""
    with pytest.raises(err, match=msg):
        build()


def test_angle_option_objects_are_hashable_and_default_to_the_old_keywords():
    assert AN.EstimateOptions() == AN.EstimateOptions("gaussian", "auto", None)
    assert AN.ReportOptions().estimate == AN.EstimateOptions()
    assert len({AN.PlanOptions(), AN.PlanOptions(), AN.ReportOptions()}) == 2


# ======================================================================================
# 4. Posterior bounds (Thm 3.3, Thm 3.4)
# ======================================================================================
POST_SPECTRA = {
    "poly": lambda n: M.polynomial_decay(n, r1=5),
    "exp": lambda n: M.exponential_decay(n, r1=5, base=0.9),
    "step": lambda n: M.step_spectrum(n, 10, 3.0),
}


def _posterior_one(A, tsvd, key, k, l, q):
    svd = R.rsvd(key, A, l, oversample=0, power_iters=q)
    res = AN.posterior_residuals(A, svd, k, residual="exact")
    return (AN.true_angles(tsvd, svd, k), AN.residual_bound(res, tsvd.s, subspace="left"),
            AN.residual_bound(res, tsvd.s, subspace="right"), AN.gap_bounds(res, tsvd.s))


def _posterior(A, tsvd, k, l, q, n_keys=10):
    """The public functions called eagerly, one rSVD per key (compilations are shared with
    every other test of the same shapes); results stacked over keys, as numpy."""
    outs = [_posterior_one(A, tsvd, kk, k, l, q)
            for kk in jax.random.split(jax.random.key(3), n_keys)]
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *outs)


def _holds(bound, true, atol):
    bound, true = np.asarray(bound, np.float64), np.asarray(true, np.float64)
    return np.all(np.isnan(bound) | (bound >= true - atol))


def test_posterior_bounds_hold_whenever_valid(dtype):
    n, k = 100, 10
    atol = 1e-4 if dtype == np.float32 else 1e-12
    configs = ((12, 0), (16, 1)) if dtype == np.float64 else ((16, 1),)
    n_valid = n_invalid = 0
    for spectrum in sorted(POST_SPECTRA):
        A = M.with_spectrum(jax.random.key(0), n, n, POST_SPECTRA[spectrum](n), dtype=dtype)
        tsvd = AN.exact_svd(A)
        for l, q in configs:
            t, b3l, b3r, g = _posterior(A, tsvd, k, l, q)
            assert not np.any(np.isnan(b3l.bound)) and not np.any(np.isnan(b3r.bound))
            assert _holds(b3l.bound, t.Uk_Ul, atol) and _holds(b3r.bound, t.Vk_Vl, atol)
            assert _holds(b3l.term1, t.Uk_Ul, atol) and _holds(b3l.term2, t.Uk_Ul, atol)
            for form, true in ((g.Uk_Ul, t.Uk_Ul), (g.Vk_Vl, t.Vk_Vl), (g.Uk_Uk, t.Uk_Uk),
                               (g.Vk_Vk, t.Vk_Vk)):
                true = np.asarray(true, np.float64)
                assert _holds(form.anglewise, true, atol)
                assert _holds(form.spectral, true.max(1), atol)
                assert _holds(form.frobenius, np.linalg.norm(true, axis=1), atol)
            # NaN exactly where the gap conditions fail
            assert np.array_equal(np.isnan(g.Uk_Ul.spectral), ~g.valid_Gamma)
            assert np.array_equal(np.isnan(g.Vk_Vk.anglewise).any(1), ~g.valid)
            n_valid += int(g.valid.sum())
            n_invalid += int((~g.valid).sum())
    assert n_valid > 0  # the test is not vacuous
    if dtype == np.float64:
        assert n_invalid > 0  # and the flagging is exercised (poly, l = 12, q = 0)


def test_posterior_functions_jit_vmap():
    with jax.enable_x64(True):
        n, k, l = 100, 10, 16
        A = M.with_spectrum(jax.random.key(0), n, n, POST_SPECTRA["poly"](n))
        s = AN.exact_svd(A).s
        keys = jax.random.split(jax.random.key(3), 3)

        def f(kk):
            res = AN.posterior_residuals(A, R.rsvd(kk, A, l, oversample=0, power_iters=1), k)
            return AN.residual_bound(res, s, subspace="right").bound, AN.gap_bounds(res, s)

        b, g = jax.jit(jax.vmap(f))(keys)
        for i in range(3):
            bi, gi = f(keys[i])
            np.testing.assert_allclose(_np(b[i]), _np(bi), rtol=1e-9)
            np.testing.assert_allclose(_np(g.Vk_Vk.anglewise[i]), _np(gi.Vk_Vk.anglewise),
                                       rtol=1e-9)
        size = posterior._residuals_jit._cache_size()
        f(keys[0])
        f(keys[1])
        assert posterior._residuals_jit._cache_size() == size


def test_posterior_bounds_are_tight_on_step_spectrum_and_flag_invalid_gaps():
    with jax.enable_x64(True):
        n, k = 100, 10
        A = M.with_spectrum(jax.random.key(0), n, n, M.step_spectrum(n, k, 3.0))
        tsvd = AN.exact_svd(A)
        t, _, _, g = _posterior(A, tsvd, k, 16, 1)
        assert np.all(g.valid)
        assert np.max(t.Uk_Ul / g.Uk_Ul.anglewise) > 0.9   # Thm 3.4 is nearly attained
        # a flat spectrum with l barely above k: sigma_k <= ||E33|| -> invalid, NaN, flagged
        Af = M.with_spectrum(jax.random.key(1), n, n, M.polynomial_decay(n, r1=1, power=0.05))
        res = AN.posterior_residuals(Af, R.rsvd(jax.random.key(2), Af, 11, oversample=0), k)
        gb = AN.gap_bounds(res, AN.exact_svd(Af).s)
        assert not bool(gb.valid_Gamma) and not bool(gb.valid)
        assert all(np.all(np.isnan(_np(x))) for x in gb.Uk_Ul + gb.Vk_Vl + gb.Uk_Uk + gb.Vk_Vk)


def test_thesis_literal_anglewise_indexing_would_fail():
    """The printed factor sigma_k/sigma_{k-i+1} applied to the i-th *smallest* angle is
    violated on real runs; the proof's ordering (factor sigma_k/sigma_i) is what we return."""
    with jax.enable_x64(True):
        n, k = 100, 10
        A = M.with_spectrum(jax.random.key(0), n, n, POST_SPECTRA["poly"](n))
        tsvd = AN.exact_svd(A)
        t, _, _, g = _posterior(A, tsvd, k, 16, 1)
        s = _np(tsvd.s)[:k]
        true = np.asarray(t.Uk_Ul, np.float64)
        literal = (s[k - 1] / s[::-1])[None, :] * np.asarray(g.Uk_Ul.spectral)[:, None]
        assert np.any(literal < true * (1 - 1e-9))
        assert np.all(np.asarray(g.Uk_Ul.anglewise) >= true * (1 - 1e-9))


def test_posterior_residuals_exact_against_numpy():
    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        A = rng.standard_normal((50, 40)) * np.geomspace(1, 1e-2, 40)
        svd = R.rsvd(jax.random.key(0), A, 15, oversample=0, power_iters=1)
        U, sh, Vt = map(_np, svd)
        res = AN.posterior_residuals(A, svd, 6)
        EU = A - U @ (U.T @ A)
        EV = A - (A @ Vt.T) @ Vt
        F = EU @ Vt.T
        E33 = EU - (EU @ Vt.T) @ Vt
        sv = lambda X: np.linalg.svd(X, compute_uv=False)  # noqa: E731
        np.testing.assert_allclose(_np(res.left_svals), sv(EU)[:6], rtol=1e-10)
        np.testing.assert_allclose(_np(res.right_svals), sv(EV)[:6], rtol=1e-10)
        np.testing.assert_allclose([float(res.E3_2), float(res.E3_F), float(res.E32_2),
                                    float(res.E33_2)],
                                   [sv(F)[0], np.linalg.norm(F), sv(F[:, 6:])[0], sv(E33)[0]],
                                   rtol=1e-10)
        assert bool(res.exact)
        # Thm 3.3 from these numbers, closed form
        s = np.linalg.svd(A, compute_uv=False)
        b = AN.residual_bound(res, s, subspace="left")
        want = np.minimum(sv(EU)[:6][::-1] / s[5], sv(EU)[0] / s[:6])
        np.testing.assert_allclose(_np(b.bound), want, rtol=1e-10)
        # Thm 3.4 gaps, closed form
        gb = AN.gap_bounds(res, s)
        e33 = sv(E33)[0]
        np.testing.assert_allclose(float(gb.Gamma1), (s[5] ** 2 - e33 ** 2) / s[5], rtol=1e-10)
        np.testing.assert_allclose(float(gb.gamma2), (s[5] ** 2 - sh[6] ** 2) / sh[6],
                                   rtol=1e-10)


def test_posterior_estimate_mode_never_densifies_and_is_close(monkeypatch):
    """Factored (implicit) A: residual norms by the power method; Thm 3.3 uses term2."""
    with jax.enable_x64(True):
        s = M.polynomial_decay(150, r1=5)
        F = M.with_spectrum(jax.random.key(0), 200, 150, s, factored=True)
        svd = R.rsvd(jax.random.key(1), F, 30, oversample=0, power_iters=1)
        with monkeypatch.context() as mp:
            def no_densify(self):
                raise AssertionError("estimate mode densified the operator")
            mp.setattr(type(F), "todense", no_densify)
            jax.clear_caches()              # trace afresh, so a todense call would be seen
            est = AN.posterior_residuals(F, svd, 10, residual="estimate",
                                         key=jax.random.key(2), norm_iters=100)
        ex = AN.posterior_residuals(F, svd, 10, residual="exact")
        assert not bool(est.exact) and np.all(np.isnan(_np(est.left_svals)))
        for name in ("left_norm", "right_norm", "E33_2"):
            e, x = float(getattr(est, name)), float(getattr(ex, name))
            assert x * 0.98 <= e <= x * (1 + 1e-9), (name, e, x)
        for name in ("E3_2", "E3_F", "E32_2"):
            np.testing.assert_allclose(float(getattr(est, name)), float(getattr(ex, name)),
                                       rtol=1e-10)
        b = AN.residual_bound(est, s, subspace="right")
        assert np.all(np.isnan(_np(b.term1)))
        np.testing.assert_array_equal(_np(b.bound), _np(b.term2))
        with pytest.raises(ValueError, match="key is required"):
            AN.posterior_residuals(F, svd, 10, residual="estimate")


@pytest.mark.parametrize("case", ["svd_shape", "k_gt_l", "residual", "not_residuals",
                                  "short_s", "l_eq_k_gap"])
def test_posterior_bad_input(case):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((30, 20))
    svd = R.rsvd(jax.random.key(0), A, 8, oversample=0)
    s = np.linalg.svd(A, compute_uv=False)
    if case == "svd_shape":
        with pytest.raises(ValueError, match="do not match A"):
            AN.posterior_residuals(A.T, svd, 4)
    elif case == "k_gt_l":
        with pytest.raises(ValueError, match="k must be <= 8"):
            AN.posterior_residuals(A, svd, 9)
    elif case == "residual":
        with pytest.raises(ValueError, match="residual must be"):
            AN.posterior_residuals(A, svd, 4, residual="dense")
    elif case == "not_residuals":
        with pytest.raises(TypeError, match="Residuals returned by posterior_residuals"):
            AN.residual_bound((1, 2), s)
    elif case == "short_s":
        res = AN.posterior_residuals(A, svd, 4)
        with pytest.raises(ValueError, match="at least 4 entries"):
            AN.residual_bound(res, s[:3])
    else:
        res = AN.posterior_residuals(A, svd, 8)
        with pytest.raises(ValueError, match="use l > k"):
            AN.gap_bounds(res, s)


# ======================================================================================
# 5. Saibaba (2018) Thm 1 with the oracle V
# ======================================================================================
def test_rsvd_omega_is_the_rsvd_test_matrix():
    with jax.enable_x64(True):
        A, tsvd = _stat_matrix("poly")
        key = jax.random.key(4)
        Om = AN.rsvd_omega(key, A, 25)
        svd = R.rsvd(key, A, 25, oversample=0)
        sines = _np(AN.canonical_angles(A @ Om, svd.U))
        assert sines.max() < 1e-10


def test_saibaba_bound_closed_form_and_holds(dtype):
    n, k, l = 100, 10, 16
    A = M.with_spectrum(jax.random.key(0), n, n, M.polynomial_decay(n, r1=5), dtype=dtype)
    tsvd = AN.exact_svd(A)
    s, Vr = tsvd.s, tsvd.Vt.T
    for q in (0, 1):
        key = jax.random.key(10 + q)
        Om = AN.rsvd_omega(key, A, l)
        svd = R.rsvd(key, A, l, oversample=0, power_iters=q)
        t = AN.true_angles(tsvd, svd, k)
        X = _np(Vr).T @ _np(Om)
        rho = np.linalg.norm(X[k:] @ np.linalg.pinv(X[:k]), 2)
        for side, true in (("left", t.Uk_Ul), ("right", t.Vk_Vl)):
            p = 4 * q + (2 if side == "left" else 4)
            want = (1 + _np(s)[:k] ** p / (_np(s)[k] ** p * rho ** 2)) ** -0.5  # sigma_{k+1}
            got = _np(AN.saibaba_bound(s, k, q, Vr, Om, subspace=side))
            np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == np.float32 else 1e-9)
            assert np.all(got >= _np(true) - (1e-5 if dtype == np.float32 else 1e-12))
    with pytest.raises(ValueError, match="r = len\\(s\\)"):
        AN.saibaba_bound(s, k, 0, Vr[:, :50], Om)
    with pytest.raises(ValueError, match="l >= k"):
        AN.saibaba_bound(s, k, 0, Vr, Om[:, :5])


# ======================================================================================
# 7. Budget planner
# ======================================================================================
SETTINGS = [(16, 32, 1.05), (32, 64, 2.0)]  # (alpha, beta, gamma), k = 10


@pytest.mark.parametrize("alpha,beta,gamma", SETTINGS)
def test_planner_thesis_settings_closed_form(alpha, beta, gamma):
    k = 10
    r, N = (1 + beta) * k, alpha * k
    q_max = int((alpha / gamma ** 2 - 1) // 2)
    for gap, q_want in ((1.01, 0), (1.5, q_max)):
        plan = AN.plan_budget(k, N, gap=gap, r=r, gamma=gamma)
        assert plan.power_iters == q_want and plan.l == N // (2 * q_want + 1)
        np.testing.assert_array_equal(plan.power_iters_grid, np.arange(q_max + 1))
        np.testing.assert_array_equal(plan.l_grid, N // (2 * plan.power_iters_grid + 1))
        np.testing.assert_allclose(plan.log_phi, np.log(plan.phi), rtol=1e-12)
        for q, l, phi in zip(plan.power_iters_grid, plan.l_grid, plan.phi):  # Eq. ..._rhs
            e1, e2 = gamma * math.sqrt(k / l), gamma * math.sqrt(l / (r - k))
            want = (1 + (1 - e1) / (1 + e2) * l / (r - k) * gap ** (4 * q + 2)) ** -0.5
            np.testing.assert_allclose(phi, want, rtol=1e-12)
            assert AN.phi_gamma(int(q), k, N, gap=gap, r=r, gamma=gamma) == pytest.approx(phi)
    assert math.isnan(AN.phi_gamma(q_max + 1, k, N, gap=1.5, r=r, gamma=gamma))


@pytest.mark.parametrize("alpha,beta,gamma", SETTINGS)
def test_planner_matches_empirical_best_configuration(alpha, beta, gamma):
    """Sweep every admissible (l, q) with 3 numpy rSVDs each (the thesis used 5) on a
    step-spectrum matrix with random singular subspaces; the empirically best q (mean true
    sine) is the planner's. The margins are wide: measured mean sines 0.71 vs 0.91 (gap 1.01,
    q = 0 vs 1) and 0.05 vs 0.08 / 0.23 vs 0.39 (gap 1.5, q_max vs q_max - 1)."""
    k = 10
    r, N = (1 + beta) * k, alpha * k
    rng = np.random.default_rng(0)
    Uq = np.linalg.qr(rng.standard_normal((r, r)))[0]
    Vq = np.linalg.qr(rng.standard_normal((r, r)))[0]
    for gap in (1.01, 1.5):
        plan = AN.plan_budget(k, N, gap=gap, r=r, gamma=gamma)
        A = (Uq * M.step_spectrum(r, k, gap)) @ Vq.T
        mean_sines = []
        for q, l in zip(plan.power_iters_grid, plan.l_grid):
            sines = []
            for _ in range(3):
                Q = _numpy_range(rng, A, int(l), int(q))
                sines.append(np.linalg.svd(Uq[:, :k] - Q @ (Q.T @ Uq[:, :k]), compute_uv=False))
            mean_sines.append(np.mean(sines))
        assert plan.power_iters_grid[int(np.argmin(mean_sines))] == plan.power_iters, \
            (gap, mean_sines, plan.phi)


def test_planner_general_spectrum_and_bad_input():
    s = M.polynomial_decay(300, r1=5)
    plan = AN.plan_budget(10, 200, spectrum=s,
                          options=AN.PlanOptions(subspace="right", reduce="max"))
    assert plan.bounds.shape == (plan.power_iters_grid.size, 10)
    np.testing.assert_allclose(plan.phi, plan.bounds.max(1))
    i = list(plan.power_iters_grid).index(1)
    np.testing.assert_allclose(plan.bounds[i], _np(AN.space_agnostic_bound(
        s.astype(np.float32), 10, int(plan.l_grid[i]), 1, subspace="right")), rtol=1e-4)
    with pytest.raises(ValueError, match="exactly one of spectrum"):
        AN.plan_budget(10, 200)
    with pytest.raises(ValueError, match="exactly one of spectrum"):
        AN.plan_budget(10, 200, spectrum=s, gap=1.5)
    with pytest.raises(ValueError, match="r .* is required"):
        AN.plan_budget(10, 200, gap=1.5)
    with pytest.raises(ValueError, match="no admissible"):
        AN.plan_budget(10, 10, gap=1.5, r=100)
    with pytest.raises(ValueError, match="gap .* must be >= 1"):
        AN.plan_budget(10, 200, gap=0.5, r=100)
    with pytest.raises(ValueError, match="non-increasing"):
        AN.plan_budget(10, 200, spectrum=s[::-1].copy())
    with pytest.raises(ValueError, match="matvec_budget must be >= 1"):
        AN.plan_budget(10, 0, gap=1.5, r=100)


# ======================================================================================
# angle_report
# ======================================================================================
def test_angle_report_consistent_with_the_parts():
    with jax.enable_x64(True):
        n, k, l, q = 100, 10, 16, 1
        A = M.with_spectrum(jax.random.key(0), n, n, M.exponential_decay(n, r1=5, base=0.95))
        rep = AN.angle_report(jax.random.key(1), A, k, l, q)
        tsvd = AN.exact_svd(A)
        np.testing.assert_allclose(_np(rep.spectrum), _np(tsvd.s), rtol=1e-12)
        assert rep.svd.U.shape == (n, l) and rep.approx_spectrum.shape == (n,)
        np.testing.assert_allclose(_np(rep.approx_spectrum),
                                   _np(AN.padded_spectrum(rep.svd.s, n)))
        k_svd = jax.random.split(jax.random.key(1), 4)[0]
        svd = R.rsvd(k_svd, A, l, oversample=0, power_iters=q)
        np.testing.assert_allclose(_np(rep.svd.s), _np(svd.s), rtol=1e-12)
        t = AN.true_angles(tsvd, svd, k)
        np.testing.assert_allclose(_np(rep.true.Vk_Vl), _np(t.Vk_Vl), atol=1e-13)
        for spec, sb in ((rep.spectrum, rep.sigma), (rep.approx_spectrum, rep.sigma_hat)):
            for side in ("left", "right"):
                b = getattr(sb, side)
                np.testing.assert_allclose(
                    _np(b.prior_upper), _np(AN.space_agnostic_bound(spec, k, l, q, subspace=side)))
                assert b.estimate.trials.shape == (3, k)
                assert b.saibaba.shape == b.gap.shape == b.residual.bound.shape == (k,)
        # with the true spectrum the deterministic bounds hold
        for side, true in (("left", rep.true.Uk_Ul), ("right", rep.true.Vk_Vl)):
            b = getattr(rep.sigma, side)
            for bound in (b.residual.bound, b.saibaba, b.gap):
                assert np.all(_np(bound) >= _np(true) * (1 - 1e-9))
        with pytest.raises(ValueError, match="l <= r - k"):
            AN.angle_report(jax.random.key(1), A, 10, 95, 0)
        # calibrated constants: both prior bounds switch, the rest of the report does not
        cal = AN.angle_report(jax.random.key(1), A, k, l, q,
                              options=AN.ReportOptions(constants="calibrated"))
        np.testing.assert_allclose(_np(cal.true.Uk_Ul), _np(rep.true.Uk_Ul))
        for side in ("left", "right"):
            b = getattr(cal.sigma, side)
            for lower, got in ((False, b.prior_upper), (True, b.prior_lower)):
                np.testing.assert_allclose(_np(got), _np(AN.space_agnostic_bound(
                    rep.spectrum, k, l, q, subspace=side, lower=lower, constants="calibrated")))
        with pytest.raises(ValueError, match="leave them at 1.0 and 2.0"):
            AN.ReportOptions(eps=2.0, constants="calibrated")
        with pytest.raises(ValueError, match="constants must be"):
            AN.ReportOptions(constants="tight")


# ======================================================================================
# Scale, overflow and underflow (issue 12: no silent wrong answers) and the one vocabulary
# ======================================================================================
SCALES32 = (1e-30, 1e-18, 1e20, 1e30)


def test_public_functions_say_power_iters_and_key_first():
    import inspect
    for f in (AN.space_agnostic_bound, AN.unbiased_estimate, AN.saibaba_bound, AN.phi_gamma,
              AN.angle_report):
        params = list(inspect.signature(f).parameters)
        assert "power_iters" in params and "q" not in params, f.__name__
    for f in (AN.unbiased_estimate, AN.angle_report, AN.rsvd_omega):
        assert list(inspect.signature(f).parameters)[0] == "key", f.__name__
    assert AN.BudgetPlan._fields[:4] == ("power_iters", "l", "power_iters_grid", "l_grid")
    s = M.polynomial_decay(60, r1=5)
    a = AN.unbiased_estimate(jax.random.key(0), s, 5, 12, power_iters=1)
    b = AN.unbiased_estimate(jax.random.key(0), s, 5, 12, 1)
    np.testing.assert_array_equal(_np(a.trials), _np(b.trials))
    assert bool(a.valid)


def test_estimator_scale_invariant_and_subnormal_float32():
    """Only ratios of singular values enter: s scaled by 1e-30..1e30 or pushed into the
    subnormal range (which XLA on CPU reads as 0) gives the same trials in float32."""
    s = M.polynomial_decay(80, r1=5).astype(np.float32)
    key = jax.random.key(2)
    for side, q in (("left", 1), ("right", 3)):
        ref = _np(AN.unbiased_estimate(key, s, 6, 12, q, subspace=side).trials)
        for c in SCALES32:
            got = AN.unbiased_estimate(key, s * np.float32(c), 6, 12, q, subspace=side)
            assert bool(got.valid)
            np.testing.assert_allclose(_np(got.trials), ref, rtol=1e-4, err_msg=str(c))
        sub = s * np.float32(1e-41)
        assert np.all(sub < np.finfo(np.float32).tiny) and np.all(sub > 0)
        got = _np(AN.unbiased_estimate(key, sub, 6, 12, q, subspace=side).trials)
        np.testing.assert_allclose(got, ref, rtol=2e-2)


def test_estimator_large_gap_no_overflow():
    """gap^p = 1e39 > float32 max: the old head normalisation by sigma_(k+1) overflowed to
    Inf and returned NaN; the sines (~1e-39, below float32's smallest normal) are now 0 in
    float32 and agree with float64 where float32 can represent them."""
    s = M.step_spectrum(60, 10, 1e3)
    key = jax.random.key(3)
    with jax.enable_x64(True):
        ref6 = _np(AN.unbiased_estimate(key, s, 10, 20, 6).trials)
        ref2 = _np(AN.unbiased_estimate(key, s, 10, 20, 2).trials)
    e6 = AN.unbiased_estimate(key, s.astype(np.float32), 10, 20, 6)
    assert bool(e6.valid) and np.all(np.isfinite(_np(e6.trials)))
    assert np.all(_np(e6.trials) <= np.finfo(np.float32).tiny) and np.all(ref6 < 1e-36)
    e2 = _np(AN.unbiased_estimate(key, s.astype(np.float32), 10, 20, 2).trials)
    np.testing.assert_allclose(e2, ref2, rtol=1e-4)


def test_estimator_unrepresentable_powers_raise_or_flag():
    """s_i = 2^-i, k = 10, l = 20, q = 3: (sigma_11/sigma_30)^7 = 2^133 exceeds float32's
    eps/tiny = 2^103, so the tail weights would flush to 0 and the estimator degenerate."""
    s = (0.5 ** np.arange(60.0)).astype(np.float32)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match=r"cannot represent the spectrum's powers in float32.*"
                                         r"sigma_\(k\+1\)/sigma_\(k\+l\)"):
        AN.unbiased_estimate(key, s, 10, 20, 3)
    with pytest.raises(ValueError, match="cannot represent"):
        AN.unbiased_estimate(key, s, 10, 20, 3, subspace="right", num_trials=2)
    # inside jit the spectrum is traced: NaN, flagged
    est = jax.jit(lambda x: AN.unbiased_estimate(key, x, 10, 20, 3))(s)
    assert not bool(est.valid) and np.all(np.isnan(_np(est.trials)))
    assert np.all(np.isnan(_np(est.mean)))
    # ... per batch element under vmap; the representable q = 0 is valid
    ok = jax.jit(lambda x: AN.unbiased_estimate(key, x, 10, 20, 0))(s)
    assert bool(ok.valid) and np.all(np.isfinite(_np(ok.trials)))
    batch = jax.vmap(lambda x: AN.unbiased_estimate(key, x, 10, 20, 3))(
        np.stack([s, np.ones(60, np.float32) * np.float32(0.9) ** np.arange(60)]))
    np.testing.assert_array_equal(_np(batch.valid), [0, 1])
    assert np.all(np.isfinite(_np(batch.trials[1])))
    # float64 represents it
    with jax.enable_x64(True):
        est64 = AN.unbiased_estimate(key, s.astype(np.float64), 10, 20, 3)
        assert bool(est64.valid) and np.all(np.isfinite(_np(est64.trials)))


def test_prior_and_saibaba_bounds_scale_invariant_and_subnormal_float32():
    s = M.polynomial_decay(100, r1=5)
    A = M.with_spectrum(jax.random.key(0), 100, 100, s, dtype=np.float32)
    tsvd = AN.exact_svd(A)
    sv, Vr = np.asarray(tsvd.s), np.asarray(tsvd.Vt).T     # scaled on the host (numpy keeps
    Om = np.asarray(AN.rsvd_omega(jax.random.key(1), A, 16))  # subnormals, XLA flushes them)
    s32 = s.astype(np.float32)
    for side in ("left", "right"):
        ref = _np(AN.space_agnostic_bound(s32, 10, 30, 2, subspace=side))
        ref_sb = _np(AN.saibaba_bound(sv, 10, 2, Vr, Om, subspace=side))
        for c in SCALES32 + (1e-41,):
            tol = 2e-2 if c == 1e-41 else 1e-4
            got = _np(AN.space_agnostic_bound(s32 * np.float32(c), 10, 30, 2, subspace=side))
            np.testing.assert_allclose(got, ref, rtol=tol, err_msg=str(c))
            sb = _np(AN.saibaba_bound(sv * np.float32(c), 10, 2, Vr * np.float32(c),
                                      Om * np.float32(c), subspace=side))
            np.testing.assert_allclose(sb, ref_sb, rtol=tol, err_msg=str(c))


def test_canonical_angles_scale_invariant_float32():
    rng = np.random.default_rng(4)
    U = rng.standard_normal((30, 6)).astype(np.float32)
    Vb = rng.standard_normal((30, 4)).astype(np.float32)
    ref = _np(AN.canonical_angles(U, Vb))
    for cu, cv in ((1e-30, 1e30), (1e20, 1e-18), (1e-41, 1.0), (1e-41, 1e-41)):
        got = _np(AN.canonical_angles(U * np.float32(cu), Vb * np.float32(cv)))
        np.testing.assert_allclose(got, ref, atol=1e-3 if 1e-41 in (cu, cv) else 2e-6)


def test_posterior_bounds_scale_invariant_float32():
    """Thm 3.4's gaps were formed from squares: at scale 1e20 sigma_k^2 overflowed float32 and
    every bound silently became 0; now they are the same at every scale."""
    n, k, l = 60, 8, 14
    A = M.with_spectrum(jax.random.key(0), n, n, M.polynomial_decay(n, r1=3), dtype=np.float32)
    s = AN.exact_svd(A).s
    res = AN.posterior_residuals(A, R.rsvd(jax.random.key(1), A, l, oversample=0, power_iters=1), k)
    ref_g, ref_r = AN.gap_bounds(res, s), AN.residual_bound(res, s, subspace="left")
    assert bool(ref_g.valid)
    for c in SCALES32:
        f = np.float32(c)
        res_c = res._replace(**{name: getattr(res, name) * f for name in Residuals_scaled})
        g = AN.gap_bounds(res_c, s * f)
        assert bool(g.valid)
        for a, b in zip(jax.tree.leaves(g.Uk_Ul + g.Vk_Vl + g.Uk_Uk + g.Vk_Vk),
                        jax.tree.leaves(ref_g.Uk_Ul + ref_g.Vk_Vl + ref_g.Uk_Uk + ref_g.Vk_Vk)):
            np.testing.assert_allclose(_np(a), _np(b), rtol=1e-5, err_msg=str(c))
        np.testing.assert_allclose(_np(AN.residual_bound(res_c, s * f, subspace="left").bound),
                                   _np(ref_r.bound), rtol=1e-5)
    # the residual norms themselves at scale 1e20 (||F||_F no longer squares the scale)
    Ac = A * np.float32(1e20)
    svd20 = R.rsvd(jax.random.key(1), Ac, l, oversample=0, power_iters=1)
    res20 = AN.posterior_residuals(Ac, svd20, k)
    for name in ("E3_2", "E3_F", "E32_2", "E33_2", "left_norm"):
        assert float(getattr(res20, name)) == pytest.approx(float(getattr(res, name)) * 1e20,
                                                            rel=1e-3), name


Residuals_scaled = ("s_hat", "left_svals", "right_svals", "left_norm", "right_norm", "E3_2",
                    "E3_F", "E32_2", "E33_2")


def test_planner_compares_in_the_log_domain():
    """gap 1e30: phi_gamma(q) ~ 1e-30(2q+1) underflows float64 to 0 for q >= 5; the old
    argmin over phi picked the first 0 (q = 5), the log-domain one picks q = 6."""
    k, N, r, gamma = 10, 160, 330, 1.05
    plan = AN.plan_budget(k, N, gap=1e30, r=r, gamma=gamma)
    assert plan.power_iters == plan.power_iters_grid.max() == 6
    assert plan.phi[-1] == 0.0 and plan.phi[-2] == 0.0
    assert np.all(np.diff(plan.log_phi) < 0) and np.all(np.isfinite(plan.log_phi))
    assert AN.phi_gamma(6, k, N, gap=1e30, r=r, gamma=gamma) == 0.0
    # agrees with the closed form where phi is representable
    e1, e2 = gamma * math.sqrt(k / plan.l_grid[1]), gamma * math.sqrt(plan.l_grid[1] / (r - k))
    want = (-0.5 * math.log((1 - e1) / (1 + e2) * plan.l_grid[1] / (r - k))
            - 0.5 * 6 * math.log(1e30))
    assert plan.log_phi[1] == pytest.approx(want, rel=1e-9)


# ======================================================================================
# 0.2 vocabulary: subspace=, power_iters=, matvec_budget= (the 0.1 names are gone since 0.3:
# tests/test_deprecations.py)
# ======================================================================================
def test_new_keywords_raise_no_deprecation_warning():
    import warnings
    s = M.polynomial_decay(50, r1=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        AN.space_agnostic_bound(s, 5, 10, power_iters=1, subspace="right")
        AN.plan_budget(10, matvec_budget=160, gap=1.5, r=330,
                       options=AN.PlanOptions(subspace="right"))
        AN.canonical_angles(np.eye(3)[:, :2], np.eye(3)[:, 1:], radians=True)


_NEGATIVE_POWER_ITERS = {
    "space_agnostic_bound": lambda s, **kw: AN.space_agnostic_bound(s, 5, 10, **kw),
    "space_agnostic_distortions": lambda s, **kw: AN.space_agnostic_distortions(s, 5, 10, **kw),
    "unbiased_estimate": lambda s, **kw: AN.unbiased_estimate(jax.random.key(0), s, 5, 10, **kw),
    "saibaba_bound": lambda s, **kw: AN.saibaba_bound(s, 5, V_=np.eye(50), Omega=np.eye(50)[:, :8],
                                                      **kw),
    "phi_gamma": lambda s, **kw: AN.phi_gamma(k=5, matvec_budget=100, spectrum=s, **kw),
}


@pytest.mark.parametrize("name", sorted(_NEGATIVE_POWER_ITERS))
def test_negative_power_iters_names_the_argument_passed(name):
    s = M.polynomial_decay(50, r1=5)
    f = _NEGATIVE_POWER_ITERS[name]
    with pytest.raises(ValueError, match=r"^power_iters must be >= 0; got -1$"):
        f(s, power_iters=-1)
    with pytest.raises(TypeError, match=r"^power_iters must be a Python int"):
        f(s, power_iters=1.5)
    for old in ("q", "power", "iters"):
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{old}'"):
            f(s, **{old: 1})


def test_angle_report_negative_power_iters():
    A = M.with_spectrum(jax.random.key(0), 40, 40, M.polynomial_decay(40))
    with pytest.raises(ValueError, match=r"^power_iters must be >= 0; got -1$"):
        AN.angle_report(jax.random.key(1), A, 5, 10, -1)


def test_bad_subspace_and_budget_name_the_argument_passed():
    s = M.polynomial_decay(50, r1=5)
    with pytest.raises(ValueError, match=r"^subspace must be 'left' \(U\) or 'right' \(V\); "
                                         r"got 'column'"):
        AN.space_agnostic_bound(s, 5, 10, 0, subspace="column")
    with pytest.raises(TypeError, match="unexpected keyword argument 'side'"):
        AN.unbiased_estimate(jax.random.key(0), s, 5, 10, 0, side="row")
    with pytest.raises(ValueError, match=r"^matvec_budget must be >= 1; got 0"):
        AN.plan_budget(10, 0, gap=1.5, r=100)
    with pytest.raises(TypeError, match="unexpected keyword argument 'num_matvecs'"):
        AN.plan_budget(10, num_matvecs=0, gap=1.5, r=100)
