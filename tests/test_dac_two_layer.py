"""Tests for rdr_jax.dac.two_layer (thesis Sec. sec:example_2relu, App. apx:pf_case_2layer_relu).

References are independent: numpy float64 losses, scipy's null_space for the augmentation
subspace, a bisection l1-ball projection. Training tests share one small configuration so
that the few XLA compilations (one per dtype and method) are reused.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.linalg

from rdr_jax.dac import two_layer as T

# one shared small problem (every test uses these shapes, so the XLA compilations are reused)
CFG = dict(n=50, d=12, q=2, d_causal=3, alpha=2, d_aug=9, sigma=0.5, n_test=200)
FIT = dict(width=4, steps=150, learning_rate=2e-2, c_w=2.0)
TWO = T.FitOptions(steps=2)


def _make_data(key, *, n, d, q, d_causal, alpha, n_test, **kw):
    """make_data with the sizes spelled as keywords (0.3: the sizes are a DataShape)."""
    return T.make_data(key, T.DataShape(n, d, q, d_causal, alpha, n_test), **kw)


def _tol(dtype):
    return 2e-5 if np.dtype(dtype) == np.float32 else 1e-11


def _np_predict(B, w, X):
    return np.maximum(X @ B, 0) @ w


def _np(x):
    return np.asarray(x, np.float64)


# --------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------
def test_make_data_shapes_dtypes_and_label_invariance(dtype):
    data = _make_data(jax.random.key(0), **CFG)
    n, d, a = CFG["n"], CFG["d"], CFG["alpha"]
    assert data.X.shape == (n, d) and data.y.shape == (n,) and data.f_X.shape == (n,)
    assert data.X_aug.shape == (a, n, d)
    assert data.X_test.shape == (CFG["n_test"], d) and data.f_test.shape == (CFG["n_test"],)
    for x in (data.X, data.y, data.X_aug, data.f_X, data.X_test, data.f_test, *data.teacher):
        assert x.dtype == dtype
    B, w = _np(data.teacher.B), _np(data.teacher.w)
    # teacher: unit columns supported on the causal coordinates, w* = +-1
    np.testing.assert_allclose(np.linalg.norm(B, axis=0), 1.0, rtol=_tol(dtype) * 10)
    assert np.all(B[CFG["d_causal"]:] == 0)
    np.testing.assert_array_equal(np.abs(w), 1.0)
    np.testing.assert_allclose(_np(data.f_X), _np_predict(B, w, _np(data.X)),
                               rtol=1e-4, atol=_tol(dtype) * 10)
    # augmentations change exactly the last d_aug coordinates -> labels invariant
    diff = _np(data.X_aug) - _np(data.X)[None]
    kept = d - CFG["d_aug"]
    assert np.abs(diff[..., :kept]).max() <= 1e-6 * np.abs(_np(data.X)).max()
    assert np.all(np.abs(diff[..., kept:]) > 0)
    np.testing.assert_allclose(_np_predict(B, w, _np(data.X_aug)),
                               np.broadcast_to(_np(data.f_X), (CFG["alpha"], n)),
                               rtol=1e-4, atol=1e-5)
    # the noise: y - h*(X) has roughly sigma std (N = 50: loose)
    assert 0.3 < np.std(_np(data.y - data.f_X)) < 0.7


def test_augment_traced_d_aug_under_vmap():
    X = jnp.asarray(np.random.default_rng(1).standard_normal((8, 6)), jnp.float32)
    Xa = jax.jit(jax.vmap(lambda k, da: T.augment(k, X, 3, da), in_axes=(None, 0)))(
        jax.random.key(2), jnp.arange(4))
    assert Xa.shape == (4, 3, 8, 6)
    for da in range(4):
        changed = np.any(np.asarray(Xa[da] != X[None]), axis=(0, 1))
        np.testing.assert_array_equal(changed, np.arange(6) >= 6 - da)


# --------------------------------------------------------------------------------------
# objectives vs numpy
# --------------------------------------------------------------------------------------
def test_losses_match_numpy_under_jit_and_vmap(dtype):
    data = _make_data(jax.random.key(3), **CFG)
    X, y, Xa = _np(data.X), _np(data.y), _np(data.X_aug)
    keys = jax.random.split(jax.random.key(4), 3)
    params = jax.vmap(lambda k: T.init_params(k, CFG["d"], 5))(keys)
    lam = 0.7
    funcs = jax.jit(jax.vmap(lambda p: jnp.stack([
        T.da_erm_loss(p, data.X, data.y, data.X_aug),
        T.consistency_penalty(p, data.X, data.X_aug),
        T.dac_loss(p, data.X, data.y, data.X_aug, lam),
        T.excess_risk(p, data.X_test, data.f_test)])))
    got = funcs(params)
    assert got.dtype == dtype
    got = _np(got)
    for b in range(3):
        B, w = _np(params.B[b]), _np(params.w[b])
        r_all = np.concatenate([_np_predict(B, w, X) - y]
                               + [_np_predict(B, w, Xa[j]) - y for j in range(Xa.shape[0])])
        erm = 0.5 * np.mean(r_all ** 2)
        phi = np.maximum(X @ B, 0)
        cons = np.mean([np.sum((np.maximum(Xa[j] @ B, 0) - phi) ** 2, axis=1)
                        for j in range(Xa.shape[0])])
        dac = 0.5 * np.mean((_np_predict(B, w, X) - y) ** 2) + lam * cons
        ex = np.mean((_np_predict(B, w, _np(data.X_test)) - _np(data.f_test)) ** 2)
        np.testing.assert_allclose(got[b], [erm, cons, dac, ex], rtol=50 * _tol(dtype))


def test_project_l1_ball_matches_bisection(dtype):
    rng = np.random.default_rng(0)

    def ref(v, r):
        if np.abs(v).sum() <= r:
            return v
        lo, hi = 0.0, np.abs(v).max()
        for _ in range(200):
            t = 0.5 * (lo + hi)
            lo, hi = (t, hi) if np.maximum(np.abs(v) - t, 0).sum() > r else (lo, t)
        return np.sign(v) * np.maximum(np.abs(v) - 0.5 * (lo + hi), 0)

    V = rng.standard_normal((20, 7)) * rng.uniform(0.1, 3, (20, 1))
    radii = rng.uniform(0.2, 6, 20)
    got = jax.jit(jax.vmap(T.project_l1_ball))(jnp.asarray(V, dtype), jnp.asarray(radii, dtype))
    for v, r, g in zip(V, radii, _np(got)):
        np.testing.assert_allclose(g, ref(v, r), atol=20 * _tol(dtype))
        assert np.abs(g).sum() <= r * (1 + 10 * _tol(dtype))


def test_project_params_unit_columns_in_null_space(dtype):
    data = _make_data(jax.random.key(5), **CFG)
    sub = T.augmentation_subspace(data.X, data.X_aug)
    p = T.TwoLayerParams(
        jnp.asarray(np.random.default_rng(6).standard_normal((CFG["d"], 6)), dtype),
        jnp.asarray([3.0, -2.0, 1.0, 0.5, 0.0, -1.0], dtype))
    proj = jax.jit(T.project_params)
    q = proj(p, P_null=sub.P_null, c_w=2.0)
    B = _np(q.B)
    np.testing.assert_allclose(np.linalg.norm(B, axis=0), 1.0, rtol=10 * _tol(dtype))
    assert np.abs(B[CFG["d"] - CFG["d_aug"]:]).max() < 1e3 * _tol(dtype)
    assert np.abs(_np(q.w)).sum() <= 2.0 * (1 + 10 * _tol(dtype))
    # no null space at all -> NaN (infeasible constraint is never silent)
    bad = proj(p, P_null=jnp.zeros((CFG["d"], CFG["d"]), dtype), c_w=2.0)
    assert np.all(np.isnan(_np(bad.B)))


# --------------------------------------------------------------------------------------
# augmentation subspace vs scipy
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("d_aug", [9, 0, 4])
def test_augmentation_subspace_matches_scipy(dtype, d_aug):
    cfg = dict(CFG, d_aug=d_aug)
    data = _make_data(jax.random.key(7), **cfg)
    sub = jax.jit(T.augmentation_subspace)(data.X, data.X_aug)
    D = (_np(data.X_aug) - _np(data.X)[None]).reshape(-1, CFG["d"])
    Nl = scipy.linalg.null_space(D, rcond=1e-5)
    assert int(sub.rank) == d_aug == CFG["d"] - Nl.shape[1]
    np.testing.assert_allclose(_np(sub.P_null), Nl @ Nl.T, atol=1e3 * _tol(dtype))
    np.testing.assert_allclose(_np(sub.P_null + sub.P_range), np.eye(CFG["d"]),
                               atol=10 * _tol(dtype))
    # C_null^2 = mean ||P_null x||^2 = mean of the squared causal+untouched coordinates here
    kept = CFG["d"] - d_aug
    np.testing.assert_allclose(float(T.c_null(data.X, sub.P_null)) ** 2,
                               np.mean(np.sum(_np(data.X)[:, :kept] ** 2, axis=1)),
                               rtol=1e3 * _tol(dtype))


def test_augmentation_subspace_rank_is_measured_not_assumed():
    """3 perturbed rows of Delta (in all 9 environment coordinates): rank(Delta) = 3 < 9."""
    data = _make_data(jax.random.key(8), **CFG)
    Xa = np.repeat(_np(data.X)[None], CFG["alpha"], axis=0)
    Xa[0, :3, 3:] += np.random.default_rng(1).standard_normal((3, 9))
    sub = T.augmentation_subspace(data.X, jnp.asarray(Xa, data.X.dtype))
    assert int(sub.rank) == 3


# --------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("method,lam", [("da_erm", None), ("dac", None), ("dac", 0.5)])
def test_one_jitted_step_decreases_loss(dtype, method, lam):
    data = _make_data(jax.random.key(10), **CFG)
    sub = T.augmentation_subspace(data.X, data.X_aug)
    hard = method == "dac" and lam is None
    p0 = T.init_params(jax.random.key(11), CFG["d"], 4, P_null=sub.P_null if hard else None,
                       c_w=2.0)
    opt = optax.sgd(1e-2)
    step = jax.jit(T.make_train_step(opt, method, lam=lam, c_w=2.0))
    args = (data.X, data.y, data.X_aug, sub.P_null if hard else None)
    p1, s1, l0 = step(p0, opt.init(p0), *args)
    _, _, l1 = step(p1, s1, *args)
    assert p1.B.dtype == dtype and l0.dtype == dtype
    assert float(l1) < float(l0)
    # the step stays feasible
    np.testing.assert_allclose(np.linalg.norm(_np(p1.B), axis=0), 1.0, rtol=10 * _tol(dtype))
    assert np.abs(_np(p1.w)).sum() <= 2.0 * (1 + 10 * _tol(dtype))
    if hard:
        assert np.abs(_np(sub.P_range @ p1.B)).max() < 1e3 * _tol(dtype)


def test_fit_dac_first_layer_is_invariant(dtype):
    """Lemma lemma:2layer-relu-input-consistency-exclude-spurious: hard DAC learns B with
    P_range B = 0, so phi(A(x)) = phi(x) for every x, checked against scipy's null space."""
    data = _make_data(jax.random.key(12), **CFG)
    res = T.fit_dac(jax.random.key(13), data.X, data.y, data.X_aug, options=T.FitOptions(**FIT))
    erm = T.fit_da_erm(jax.random.key(13), data.X, data.y, data.X_aug, options=T.FitOptions(**FIT))
    assert res.losses.shape == (FIT["steps"],) and res.losses.dtype == dtype
    assert float(res.losses[-1]) < float(res.losses[0])
    B = _np(res.params.B)
    D = (_np(data.X_aug) - _np(data.X)[None]).reshape(-1, CFG["d"])
    R = scipy.linalg.orth(D.T)                       # range(Delta^T), closed form
    assert R.shape[1] == CFG["d_aug"]
    assert np.abs(R.T @ B).max() < 1e3 * _tol(dtype)
    assert np.abs(D @ B).max() < 1e4 * _tol(dtype)
    # invariant representation on the training augmentations and on fresh perturbations
    phi = lambda Z: np.maximum(Z @ B, 0)  # noqa: E731
    np.testing.assert_allclose(phi(_np(data.X_aug)), np.broadcast_to(phi(_np(data.X)),
                               data.X_aug.shape[:2] + (4,)), atol=1e4 * _tol(dtype))
    Xt = _np(data.X_test)
    Xp = Xt + np.concatenate([np.zeros((len(Xt), CFG["d"] - CFG["d_aug"])),
                              5 * np.random.default_rng(0).standard_normal(
                                  (len(Xt), CFG["d_aug"]))], axis=1)
    np.testing.assert_allclose(phi(Xp), phi(Xt), atol=1e4 * _tol(dtype))
    # DA-ERM does not learn the invariance
    assert np.abs(R.T @ _np(erm.params.B)).max() > 0.05


def test_fit_soft_dac_large_lam_approaches_invariance():
    data = _make_data(jax.random.key(14), **CFG)
    sub = T.augmentation_subspace(data.X, data.X_aug)
    soft = T.fit_dac(jax.random.key(15), data.X, data.y, data.X_aug, lam=100.0, options=T.FitOptions(**FIT))
    zero = T.fit_dac(jax.random.key(15), data.X, data.y, data.X_aug, lam=0.0, options=T.FitOptions(**FIT))
    leak = lambda p: float(jnp.linalg.norm(sub.P_range @ p.B))  # noqa: E731
    pen = lambda p: float(T.consistency_penalty(p, data.X, data.X_aug))  # noqa: E731
    assert pen(soft.params) < 0.05 * pen(zero.params)
    assert leak(soft.params) < 0.5 * leak(zero.params)


def test_d_aug_zero_dac_equals_da_erm(dtype):
    """With d_aug = 0 the augmentations are copies: DA-ERM, hard DAC and soft DAC all reduce
    to ERM on the originals and train to the same network from the same key."""
    data = _make_data(jax.random.key(16), **dict(CFG, d_aug=0))
    fits = [T.fit_da_erm(jax.random.key(17), data.X, data.y, data.X_aug, options=T.FitOptions(**FIT)),
            T.fit_dac(jax.random.key(17), data.X, data.y, data.X_aug, options=T.FitOptions(**FIT)),
            T.fit_dac(jax.random.key(17), data.X, data.y, data.X_aug, lam=3.0, options=T.FitOptions(**FIT))]
    tol = 1e-3 if dtype == np.float32 else 1e-8
    for f in fits[1:]:
        np.testing.assert_allclose(_np(f.params.B), _np(fits[0].params.B), atol=tol)
        np.testing.assert_allclose(_np(f.losses), _np(fits[0].losses), rtol=tol)


def test_fit_does_not_retrace():
    data = _make_data(jax.random.key(18), **CFG)
    T.fit_dac(jax.random.key(0), data.X, data.y, data.X_aug, options=T.FitOptions(**FIT))
    n = T._fit._cache_size()
    y2 = np.asarray(data.y) + np.float32(0.1)
    T.fit_dac(jax.random.key(1), data.X, y2, data.X_aug, options=T.FitOptions(**FIT))
    Xa2 = np.array(data.X_aug)                     # other values, same shapes
    Xa2[..., -4:] += np.random.default_rng(2).standard_normal(Xa2[..., -4:].shape)
    T.fit_dac(jax.random.key(1), data.X, y2, Xa2.astype(np.float32), options=T.FitOptions(**FIT))
    assert T._fit._cache_size() == n


def test_dac_beats_da_erm_over_seeds():
    """Statistical check of Sec. sec:example_2relu on a small fixed configuration: over 16
    seeds (teacher, data, augmentations and initialisation all redrawn, trained under one
    jit(vmap)), hard DAC has a lower test excess risk than DA-ERM in >= 12 of 16 seeds (a sign
    test at level 0.04) and clearly on average (d_aug = 9 of d = 12, alpha = 2)."""

    def one(key):
        kd, ki = jax.random.split(key)
        data = _make_data(kd, **CFG)
        e = T.fit_da_erm(ki, data.X, data.y, data.X_aug, options=T.FitOptions(**FIT))
        c = T.fit_dac(ki, data.X, data.y, data.X_aug, options=T.FitOptions(**FIT))
        return (T.excess_risk(e.params, data.X_test, data.f_test),
                T.excess_risk(c.params, data.X_test, data.f_test), c.params.B)

    keys = jax.random.split(jax.random.key(19), 16)
    erm, dac, B = map(np.asarray, jax.jit(jax.vmap(one))(keys))
    assert np.all(np.isfinite(erm)) and np.all(np.isfinite(dac))
    assert np.sum(dac < erm) >= 12, (erm, dac)
    assert np.mean(dac) < 0.75 * np.mean(erm), (erm.mean(), dac.mean())
    # vmap over seeds trains each seed as an unbatched call would
    kd, ki = jax.random.split(keys[3])
    data = _make_data(kd, **CFG)
    one_B = T.fit_dac(ki, data.X, data.y, data.X_aug, options=T.FitOptions(**FIT)).params.B
    np.testing.assert_allclose(B[3], np.asarray(one_B), atol=2e-3)


# --------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small():
    X = jax.random.normal(jax.random.key(20), (6, 4))
    y = jnp.ones(6)
    Xa = T.augment(jax.random.key(21), X, 2, 2)
    return X, y, Xa


@pytest.mark.parametrize("fit", [T.fit_da_erm, T.fit_dac])
@pytest.mark.parametrize("bad,match", [
    (lambda X, Xa: Xa[0], r"X_aug must be 3-D \(alpha, N, d\)"),
    (lambda X, Xa: Xa[:, :5], r"X_aug must have shape \(alpha, N, d\) = \(alpha, 6, 4\)"),
    (lambda X, Xa: Xa[..., :3], r"X_aug must have shape \(alpha, N, d\)"),
    (lambda X, Xa: Xa[:0], r"alpha .* must be >= 1"),
    (lambda X, Xa: Xa.at[0, 0, 0].set(jnp.nan), r"X_aug contains 1 non-finite"),
])
def test_bad_X_aug(small, fit, bad, match):
    X, y, Xa = small
    with pytest.raises(ValueError, match=match):
        fit(jax.random.key(0), X, y, bad(X, Xa), options=TWO)


@pytest.mark.parametrize("lam", [-1.0, -1e-9, float("nan"), float("inf")])
def test_bad_lam(small, lam):
    X, y, Xa = small
    with pytest.raises(ValueError, match="lam must be a finite number >= 0"):
        T.fit_dac(jax.random.key(0), X, y, Xa, lam=lam, options=TWO)
    with pytest.raises(ValueError, match="lam must be a finite number >= 0"):
        T.make_train_step(optax.sgd(0.1), "dac", lam=lam)


@pytest.mark.parametrize("fit", [T.fit_da_erm, T.fit_dac])
def test_bad_width_and_other_sizes(small, fit):
    X, y, Xa = small
    with pytest.raises(ValueError, match="width must be >= 1"):
        T.FitOptions(width=0, steps=2)
    with pytest.raises(TypeError, match="width must be a Python int"):
        T.FitOptions(width=2.0, steps=2)
    with pytest.raises(ValueError, match="steps must be >= 1"):
        T.FitOptions(steps=0)
    with pytest.raises(ValueError, match=r"y must have shape \(N,\) = \(6,\)"):
        fit(jax.random.key(0), X, y[:5], Xa, options=TWO)
    with pytest.raises(ValueError, match=r"X must be 2-D"):
        fit(jax.random.key(0), X[0], y, Xa, options=TWO)
    with pytest.raises(TypeError, match="X must be a float32/float64 array"):
        fit(jax.random.key(0), np.ones((6, 4), np.int32), y, Xa, options=TWO)
    with pytest.raises(ValueError, match="c_w must be a finite number > 0"):
        T.FitOptions(c_w=-1.0, steps=2)
    with pytest.raises(TypeError, match="PRNG key"):
        fit(0, X, y, Xa, options=TWO)
    with pytest.raises(ValueError, match="width must be >= 1"):
        T.init_params(jax.random.key(0), 4, 0)


def test_bad_augment_and_data_args(small):
    X = small[0]
    with pytest.raises(ValueError, match="alpha must be >= 1"):
        T.augment(jax.random.key(0), X, 0, 2)
    with pytest.raises(ValueError, match=r"d_aug must be in \[0, d\] = \[0, 4\]"):
        T.augment(jax.random.key(0), X, 1, 5)
    with pytest.raises(ValueError, match=r"d_aug must be in \[0, d - d_causal\] = \[0, 2\]"):
        _make_data(jax.random.key(0), n=5, d=4, q=1, d_causal=2, alpha=1, d_aug=3, sigma=0.1,
                    n_test=3)
    with pytest.raises(ValueError, match="alpha must be >= 1"):
        _make_data(jax.random.key(0), n=5, d=4, q=1, d_causal=2, alpha=0, d_aug=1, sigma=0.1,
                    n_test=3)
    with pytest.raises(ValueError, match="sigma must be a finite number >= 0"):
        _make_data(jax.random.key(0), n=5, d=4, q=1, d_causal=2, alpha=1, d_aug=1,
                    sigma=-0.1, n_test=3)
    with pytest.raises(ValueError, match="method must be one of"):
        T.make_train_step(optax.sgd(0.1), "erm")
    with pytest.raises(ValueError, match="lam is a DAC setting"):
        T.make_train_step(optax.sgd(0.1), "da_erm", lam=1.0)


def test_hard_dac_infeasible_when_all_directions_perturbed():
    data = _make_data(jax.random.key(22), **CFG)
    Xa = T.augment(jax.random.key(0), data.X, CFG["alpha"], CFG["d"])   # rank(Delta) = d
    with pytest.raises(ValueError, match="perturb all d = 12 directions"):
        T.fit_dac(jax.random.key(0), data.X, data.y, Xa, options=T.FitOptions(**FIT))
    # the soft penalty is still fine
    res = T.fit_dac(jax.random.key(0), data.X, data.y, Xa, lam=3.0, options=T.FitOptions(**FIT))
    assert np.all(np.isfinite(np.asarray(res.params.B)))


@pytest.mark.parametrize("build, err, msg", [
    (lambda: T.DataShape(5, 4, 1, 5, 1, 3), ValueError, "d_causal must be <= 4"),
    (lambda: T.DataShape(0, 4, 1, 2, 1, 3), ValueError, "n must be >= 1"),
    (lambda: T.DataShape(5, 4, 0, 2, 1, 3), ValueError, "q must be >= 1"),
    (lambda: T.DataShape(5, 4, 1, 2, 1, 3.0), TypeError, "n_test must be a Python int"),
    (lambda: T.FitOptions(learning_rate=0.0), ValueError, "learning_rate must be a finite"),
    (lambda: T.FitOptions(optimizer="adam"), TypeError, "optimizer must be an optax"),
    (lambda: T.make_data(jax.random.key(0), dict(n=5), d_aug=1, sigma=0.1), TypeError,
     "shape must be a DataShape"),
    (lambda: T.fit_dac(jax.random.key(0), jnp.ones((6, 4)), jnp.ones(6), jnp.ones((1, 6, 4)),
                       options={"steps": 2}), TypeError, "options must be a FitOptions"),
])
def test_two_layer_option_objects_reject_bad_values(build, err, msg):
    """0.3: the sizes of make_data are a DataShape, the training settings a FitOptions; a bad
    value fails where the object is built."""
    with pytest.raises(err, match=msg):
        build()


def test_fit_options_with_an_optimizer_skip_the_learning_rate():
    opt = optax.sgd(0.1)
    assert T.FitOptions(learning_rate=-1.0, optimizer=opt).optimizer is opt
    assert T.FitOptions() == T.FitOptions(8, 2000, 1e-2, None, None)
