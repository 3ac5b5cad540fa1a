"""rdr_jax.dac.linear and rdr_jax.dac.domain_adaptation: the Chapter 4 linear-regression theory.

References: numpy/scipy least squares and explicit projectors (float32 and float64, jit, vmap);
Thm ``thm:formal_linear_regression`` checked by Monte Carlo (4000 label-noise draws, vmapped)
on every configuration of ``fig:linear_regression``; ``example:misspec`` (optimal lambda, DAC
vs DA-ERM, the spectral risk formula and the bounds of ``thm:formal_linear_regression_soft``);
``apx:case_ood`` (DAC's exact target risk, the DA-ERM lower bound). Sizes are small and every
statistical check reuses one compiled function.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from rdr_jax.dac import domain_adaptation as DA
from rdr_jax.dac import linear as L


def _tol(dtype):
    return 2e-4 if np.dtype(dtype) == np.float32 else 1e-9


def _problem(dtype, N=40, d=12, alpha=2, k_aug=5, seed=0):
    """X (N, d), y, X_aug (alpha, N, d) perturbing only the last k_aug coordinates."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, d))
    y = rng.standard_normal(N)
    P = np.zeros((alpha, N, d))
    P[:, :, d - k_aug:] = rng.standard_normal((alpha, N, k_aug))
    X_aug = X[None] + P
    return (jnp.asarray(X, dtype), jnp.asarray(y, dtype), jnp.asarray(X_aug, dtype),
            X, y, X_aug)


def _refs(X, y, X_aug, lam):
    """numpy float64 references for DA-ERM, hard DAC, soft DAC."""
    alpha, N, d = X_aug.shape
    A = np.concatenate([X, X_aug.reshape(-1, d)])
    My = np.tile(y, 1 + alpha)
    erm = np.linalg.lstsq(A, My, rcond=None)[0]
    D = (X_aug - X[None]).reshape(-1, d)
    V0 = scipy.linalg.null_space(D)
    hard = V0 @ np.linalg.lstsq(X @ V0, y, rcond=None)[0]
    # normal equations of eq:dac_soft_reg (a well-conditioned small reference)
    H = X.T @ X / N + lam / ((1 + alpha) * N) * D.T @ D
    soft = np.linalg.solve(H, X.T @ y / N)
    return erm, hard, soft


# --------------------------------------------------------------------------------------
# design and estimators vs numpy
# --------------------------------------------------------------------------------------
def test_augmented_design(dtype):
    Xj, _, Xaj, X, _, X_aug = _problem(dtype)
    des = L.augmented_design(Xj, Xaj)
    alpha, N, d = X_aug.shape
    assert des.A.dtype == dtype and des.A.shape == ((1 + alpha) * N, d)
    np.testing.assert_allclose(des.A[:N], X, rtol=1e-6)
    np.testing.assert_allclose(des.A[N:2 * N], X_aug[0], rtol=1e-6)
    M = np.vstack([np.eye(N)] * (1 + alpha))
    np.testing.assert_array_equal(np.asarray(des.M), M)
    np.testing.assert_allclose(des.Delta, des.A - M @ np.asarray(des.A[:N]), atol=1e-6)
    assert np.all(np.asarray(des.Delta[:N]) == 0)


def test_fits_match_numpy_lstsq_jit_vmap(dtype):
    Xj, yj, Xaj, X, y, X_aug = _problem(dtype)
    lam = 0.7
    erm, hard, soft = _refs(X, y, X_aug, lam)
    tol = _tol(dtype)
    th_erm = L.fit_da_erm(Xj, yj, Xaj)
    th_hard = L.fit_dac(Xj, yj, Xaj)
    th_soft = L.fit_dac(Xj, yj, Xaj, lam)
    assert th_erm.dtype == dtype and th_hard.shape == (12,)
    np.testing.assert_allclose(th_erm, erm, rtol=tol, atol=tol)
    np.testing.assert_allclose(th_hard, hard, rtol=tol, atol=tol)
    np.testing.assert_allclose(th_soft, soft, rtol=tol, atol=tol)
    # the hard constraint holds: Delta theta = 0 (consistency on every augmentation)
    D = (X_aug - X[None]).reshape(-1, 12)
    assert np.linalg.norm(D @ np.asarray(th_hard, np.float64)) < 50 * tol * np.linalg.norm(D)
    # lam = 0 is OLS on the originals; large lam approaches the hard constraint
    np.testing.assert_allclose(L.fit_dac(Xj, yj, Xaj, 0.0), np.linalg.lstsq(X, y, rcond=None)[0],
                               rtol=tol, atol=tol)
    far = L.fit_dac(Xj, yj, Xaj, 1e6 if dtype == np.float64 else 1e4)
    assert np.linalg.norm(far - hard) < (1e-4 if dtype == np.float64 else 2e-2) * \
        np.linalg.norm(hard)
    # jit (the caller's) and vmap over label draws / over lambda
    np.testing.assert_allclose(jax.jit(L.fit_dac)(Xj, yj, Xaj), th_hard, rtol=tol, atol=tol)
    np.testing.assert_allclose(jax.jit(L.fit_da_erm)(Xj, yj, Xaj), th_erm, rtol=tol, atol=tol)
    Y = np.random.default_rng(3).standard_normal((5, 40))
    Tb = jax.vmap(L.fit_dac, in_axes=(None, 0, None))(Xj, jnp.asarray(Y, dtype), Xaj)
    Te = jax.vmap(L.fit_da_erm, in_axes=(None, 0, None))(Xj, jnp.asarray(Y, dtype), Xaj)
    for b in range(5):
        e_b, h_b, _ = _refs(X, Y[b], X_aug, lam)
        np.testing.assert_allclose(Tb[b], h_b, rtol=tol, atol=tol)
        np.testing.assert_allclose(Te[b], e_b, rtol=tol, atol=tol)
    lams = np.array([0.1, 1.0, 10.0])
    Tl = jax.vmap(lambda l: L.fit_dac(Xj, yj, Xaj, l))(jnp.asarray(lams, dtype))
    for i, lm in enumerate(lams):
        np.testing.assert_allclose(Tl[i], _refs(X, y, X_aug, lm)[2], rtol=tol, atol=tol)


def test_no_retrace_same_shapes():
    Xj, yj, Xaj, *_ = _problem(np.float32)
    L.fit_dac(Xj, yj, Xaj, 0.5)
    n = L._dac_K_jit._cache_size()
    L.fit_dac(Xj * 2, yj, Xaj * 2, 1.5)
    assert L._dac_K_jit._cache_size() == n


def test_dimensions_vs_explicit_projectors(dtype):
    # the thesis' sizes (d = 30, N = 50): shares compilations with the Monte-Carlo test
    X, X_aug, _ = L.linear_regression_example(jax.random.key(3), d_c1=10, d_e1=8, dtype=dtype)
    dims = L.dimensions(X, X_aug)
    assert int(dims.d) == 30 and int(dims.d_aug) == 20 and int(dims.rank_A) == 30
    assert int(dims.rank_dac) == 10
    # d' = tr(M^T (P_A - P_S) M) / (1 + alpha) with explicit float64 projectors
    Xn, Xa = np.asarray(X, np.float64), np.asarray(X_aug, np.float64)
    A = np.concatenate([Xn, Xa[0]])
    M = np.vstack([np.eye(50)] * 2)
    P_A = A @ np.linalg.pinv(A)
    V0 = scipy.linalg.null_space(Xa[0] - Xn)
    Q = scipy.linalg.orth(M @ Xn @ V0)
    P_S = Q @ Q.T
    dp = np.trace(M.T @ (P_A - P_S) @ M) / 2
    np.testing.assert_allclose(float(dims.d_prime), dp, rtol=1e-4 if dtype == np.float32 else 1e-9)
    assert 0 <= dp <= 20
    # only negated coordinates (d_e1 = 0): d' = 0; the theorem's formula matches the exact risk
    X0, Xa0, th0 = L.linear_regression_example(jax.random.key(4), d_c1=10, d_e1=0, dtype=dtype)
    assert abs(float(L.dimensions(X0, Xa0).d_prime)) < 1e-3
    T = L.label_invariant_theory(X, X_aug, 1.3)
    A_j = L.augmented_design(X, X_aug).A
    for K, want in ((L.dac_operator(X, X_aug), T.dac_risk),
                    (L.da_erm_operator(X, X_aug), T.da_erm_risk)):
        r = L.expected_excess_risk(K, X, jnp.zeros(30, dtype), 1.3, A_j)
        np.testing.assert_allclose(float(r.total), float(want), rtol=2e-4)


def test_rank_tolerance_counts_small_real_perturbations_only():
    """d_aug: a 1e-6 relative perturbation of one coordinate counts in float64; rounding-level
    differences (x * (1 + eps)) do not."""
    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        X = rng.standard_normal((30, 8))
        Xa = X.copy()
        Xa[:, 0] += 1e-6 * rng.standard_normal(30)
        Xa[:, 1:] *= 1 + 2 * np.finfo(np.float64).eps
        assert int(L.dimensions(jnp.asarray(X), jnp.asarray(Xa[None])).d_aug) == 1
        assert int(L.dimensions(jnp.asarray(X), jnp.asarray(Xa[None]), rtol=1e-3).d_aug) == 0


# --------------------------------------------------------------------------------------
# Thm thm:formal_linear_regression on example:linear_regression (fig:linear_regression)
# --------------------------------------------------------------------------------------
FIG_CONFIGS = [(20, e1) for e1 in (0, 5, 10, 15, 20)] + [(25, e1) for e1 in (0, 5, 10, 15, 20, 25)]


def test_example_linear_regression_monte_carlo():
    with jax.enable_x64(True):
        dprimes = {20: [], 25: []}
        for i, (d_aug, d_e1) in enumerate(FIG_CONFIGS):
            X, Xa, th = L.linear_regression_example(jax.random.key(10 + i), d_c1=30 - d_aug,
                                                    d_e1=d_e1)
            T = L.label_invariant_theory(X, Xa, 1.0)
            assert int(T.dims.d_aug) == d_aug
            np.testing.assert_allclose(float(T.dac_risk), (30 - d_aug) / 50)
            dp = float(T.dims.d_prime)
            assert -1e-9 <= dp <= d_aug + 1e-9
            dprimes[d_aug].append(dp)
            mc = L.monte_carlo_risks(jax.random.key(100 + i), X, Xa, th, 1.0, 4000)
            assert abs(float(mc.dac.mean) / float(T.dac_risk) - 1) < 0.05, (d_aug, d_e1)
            assert abs(float(mc.da_erm.mean) / float(T.da_erm_risk) - 1) < 0.05, (d_aug, d_e1)
            # and within 4 standard errors (the 5% tolerance is not hiding a bias)
            assert abs(float(mc.dac.mean - T.dac_risk)) < 4 * float(mc.dac.stderr)
            assert abs(float(mc.da_erm.mean - T.da_erm_risk)) < 4 * float(mc.da_erm.stderr)
        for v in dprimes.values():          # d' spans [0, d_aug) as d_e1 grows
            assert v[0] < 1e-6 and np.all(np.diff(v) > 2)


# --------------------------------------------------------------------------------------
# misspecified augmentations: example:misspec, thm:formal_linear_regression_soft
# --------------------------------------------------------------------------------------
SIGMA_MIS = math.sqrt(0.1)     # thesis "sigma = 0.1" read as the noise variance (see docs)


def test_soft_theory_spectral_formula_and_bounds():
    """float64 (the float32 numerics of the same kernels are covered by the lstsq tests)."""
    dtype = np.float64
    with jax.enable_x64(True):
        X, Xa, th = L.misspec_example(jax.random.key(1), d_aug=24, dtype=dtype)
        T = L.soft_dac_theory(X, Xa, th, SIGMA_MIS)
        assert int(T.d_aug) == 24 and int(jnp.sum(T.gamma > 0)) == 24
        rt = 1e-3 if dtype == np.float32 else 1e-9
        for lam in (0.01, 1.0, 50.0):
            gen = L.expected_excess_risk(L.dac_operator(X, Xa, lam), X, th, SIGMA_MIS)
            spec = L.soft_dac_risk(T, lam)
            np.testing.assert_allclose([spec.bias, spec.variance], [gen.bias, gen.variance],
                                       rtol=rt, atol=1e-6 if dtype == np.float32 else 1e-12)
        hard = L.soft_dac_risk(T, jnp.inf)
        np.testing.assert_allclose(float(hard.total), float(T.hard.total), rtol=rt * 10)
        # the theorem: DAC at the proof's lambda <= upper bound; DA-ERM >= lower bound
        assert float(L.soft_dac_risk(T, T.lam_bound).total) <= float(T.dac_upper_bound)
        assert float(T.erm.total) >= float(T.erm_lower_bound) * (1 - rt)
        np.testing.assert_allclose(float(T.erm.bias), float(T.misspec_tilde), rtol=rt * 10)
        # misspecification constant C_mis^2 = ||Delta theta*||^2 / ((1+alpha) N)
        D = np.asarray(Xa[0] - X, np.float64)
        np.testing.assert_allclose(float(T.misspec),
                                   np.sum((D @ np.asarray(th, np.float64)) ** 2) / 100,
                                   rtol=rt * 10)


def test_example_misspec_optimal_lambda_stable_and_beats_erm():
    with jax.enable_x64(True):
        lams = []
        for seed in range(4):
            X, Xa, th = L.misspec_example(jax.random.key(seed), d_aug=24)
            opt = L.optimal_lambda(X, Xa, th, SIGMA_MIS)
            lam = float(opt.lam)
            assert math.isfinite(lam)
            assert float(opt.risk) <= float(jnp.min(opt.risks)) + 1e-15
            lams.append(lam)
            mc = L.monte_carlo_risks(jax.random.key(50 + seed), X, Xa, th, SIGMA_MIS, 2000,
                                     lam=lam, options=L.MonteCarloOptions(risk="original"))
            # Monte Carlo agrees with the exact risk, and DAC at its best lambda beats DA-ERM
            assert abs(float(mc.dac.mean) / float(opt.risk) - 1) < 0.05
            assert abs(float(mc.da_erm.mean) / float(opt.erm_risk) - 1) < 0.05
            diff = np.asarray(mc.da_erm_draws - mc.dac_draws)
            assert diff.mean() > 4 * diff.std(ddof=1) / math.sqrt(diff.size)
        lams = np.array(lams)
        med = np.median(lams)
        assert np.all(lams / med < 3) and np.all(med / lams < 3), lams
        assert 0.5 < med < 10      # thesis fig:misspec_lambda: lambda_opt = 3.2
        # label-invariant augmentations (d_aug = 20 <= d - d_c): the hard constraint is optimal
        X, Xa, th = L.misspec_example(jax.random.key(0), d_aug=20)
        opt = L.optimal_lambda(X, Xa, th, SIGMA_MIS)
        assert math.isinf(float(opt.lam))
        np.testing.assert_allclose(float(opt.risk), 10 * 0.1 / 50, rtol=1e-8)


# --------------------------------------------------------------------------------------
# domain adaptation (apx:case_ood)
# --------------------------------------------------------------------------------------
def test_domain_adaptation_model_and_theory():
    with jax.enable_x64(True):
        m = DA.make_ood_model(jax.random.key(0), d=12, d_iv=4, d_e=8, alpha=1, sigma=1.0)
        S = np.asarray(jnp.concatenate([m.S_iv, m.S_e], 1))
        np.testing.assert_allclose(S.T @ S, np.eye(12), atol=1e-12)
        assert np.linalg.norm(np.asarray(m.S_e).T @ np.asarray(m.theta_star)) < 1e-12
        X, y = DA.sample_domain(jax.random.key(1), m, 50)
        Xa = DA.augment(m, X)
        # augmentations keep the invariant feature (eq:def_envi_data_aug) and change the other
        np.testing.assert_allclose(Xa[0] @ m.S_iv, X @ m.S_iv, atol=1e-12)
        assert float(jnp.min(jnp.linalg.norm((Xa[0] - X) @ m.S_e, axis=1))) > 0
        th = L.fit_dac(X, y, Xa)
        assert np.linalg.norm(np.asarray(m.S_e).T @ np.asarray(th)) < 1e-10   # S_e^T theta = 0
        dl = np.asarray(th - m.theta_star)
        Siv, Se = np.asarray(m.S_iv), np.asarray(m.S_e)
        Sig = Siv @ Siv.T + 9 * Se @ Se.T
        np.testing.assert_allclose(float(DA.target_excess_risk(m, th, 3.0)), 0.5 * dl @ Sig @ dl,
                                   rtol=1e-10)
        N = 60
        mc = DA.ood_monte_carlo(jax.random.key(2), m, N, 2000)
        assert int(mc.d_aug) == 8           # d_aug = d_e (ass:case_ood_sample)
        theory = DA.ood_theory(m, N, 2.0)
        r1, r2 = DA.ood_target_risks(mc, 1.0), DA.ood_target_risks(mc, 2.0)
        # DAC: sigma^2 d_iv / (2 (N - d_iv - 1)), independent of sigma_t
        assert abs(float(r2.dac.mean) / theory.dac_exact - 1) < 0.05
        assert abs(float(r2.dac.mean) - theory.dac_exact) < 4 * float(r2.dac.stderr)
        np.testing.assert_allclose(float(r1.dac.mean), float(r2.dac.mean))
        # DA-ERM >= DAC + sigma_t^2 EER_e (thm:domain-adaption-plain-data-aug), gap ~ sigma_t^2
        for r in (r1, r2):
            assert float(r.margin.mean) > -3 * float(r.margin.stderr)
            assert float(r.da_erm.mean) > float(r.dac.mean)
        assert float(r2.da_erm.mean - r2.dac.mean) > 3 * float(r1.da_erm.mean - r1.dac.mean)
        assert float(r2.erm_minus_dac_bound) >= theory.separation > 0


# --------------------------------------------------------------------------------------
# bad inputs
# --------------------------------------------------------------------------------------
def test_bad_inputs():
    X = jnp.ones((6, 3)) + jnp.arange(18.0).reshape(6, 3) ** 1.5
    y = jnp.arange(6.0)
    Xa = X[None] * 2
    with pytest.raises(ValueError, match="X_aug must be 3-D"):
        L.fit_dac(X, y, Xa[0])
    with pytest.raises(ValueError, match="X_aug must have shape"):
        L.fit_dac(X, y, Xa[:, :5])
    with pytest.raises(ValueError, match="X_aug must have shape"):
        L.fit_da_erm(X, y, Xa[:, :, :2])
    with pytest.raises(ValueError, match="alpha = 0"):
        L.fit_dac(X, y, Xa[:0])
    with pytest.raises(ValueError, match="alpha = 0"):
        L.fit_da_erm(X, y, Xa[:0])
    with pytest.raises(ValueError, match="y must have length"):
        L.fit_dac(X, y[:5], Xa)
    with pytest.raises(ValueError, match="y must have length"):
        L.fit_da_erm(X, y[:5], Xa)
    with pytest.raises(ValueError, match="y must be 1-D"):
        L.fit_dac(X, y[:, None], Xa)
    with pytest.raises(ValueError, match="X must be 2-D"):
        L.fit_dac(X[0], y, Xa)
    with pytest.raises(ValueError, match="lam must be a finite float >= 0"):
        L.fit_dac(X, y, Xa, -0.1)
    with pytest.raises(ValueError, match="lam must be a finite float >= 0"):
        L.fit_dac(X, y, Xa, jnp.asarray(-1.0))
    with pytest.raises(ValueError, match="lam must be a finite float >= 0"):
        L.fit_dac(X, y, Xa, float("nan"))
    with pytest.raises(TypeError, match="lam"):
        L.fit_dac(X, y, Xa, "1")
    for name, args in (("X", (X.at[0, 0].set(jnp.nan), y, Xa)),
                       ("y", (X, y.at[2].set(jnp.inf), Xa)),
                       ("X_aug", (X, y, Xa.at[0, 1, 1].set(jnp.nan)))):
        with pytest.raises(ValueError, match=f"{name} contains 1 non-finite"):
            L.fit_dac(*args)
        with pytest.raises(ValueError, match=f"{name} contains 1 non-finite"):
            L.fit_da_erm(*args)
    with pytest.raises(TypeError, match="X must hold real floats"):
        L.fit_dac(X.astype(jnp.complex64), y, Xa)
    with pytest.raises(ValueError, match="sigma must be a finite float >= 0"):
        L.label_invariant_theory(X, Xa, -1.0)
    with pytest.raises(ValueError, match="theta_star must have length"):
        L.monte_carlo_risks(jax.random.key(0), X, Xa, jnp.ones(4), 1.0, 10)
    with pytest.raises(ValueError, match="num_draws must be >= 2"):
        L.monte_carlo_risks(jax.random.key(0), X, Xa, jnp.ones(3), 1.0, 1)
    with pytest.raises(ValueError, match="risk must be"):
        L.MonteCarloOptions(risk="test")
    with pytest.raises(ValueError, match="rtol must be"):
        L.MonteCarloOptions(rtol=-1.0)
    with pytest.raises(TypeError, match="options must be a MonteCarloOptions"):
        L.monte_carlo_risks(jax.random.key(0), X, Xa, jnp.ones(3), 1.0, 10, options="original")
    with pytest.raises(ValueError, match="lams must be an increasing"):
        L.optimal_lambda(X, Xa, jnp.ones(3), 1.0, lams=[1.0, 0.5])
    with pytest.raises(ValueError, match="d_c1 must be >= 5"):
        L.linear_regression_example(jax.random.key(0), d_c1=3, d_e1=0)
    with pytest.raises(ValueError, match="d_e must be <= 20"):
        DA.make_ood_model(jax.random.key(0), d=30, d_iv=10, d_e=25)
    with pytest.raises(TypeError, match="model must be an OODModel"):
        DA.ood_monte_carlo(jax.random.key(0), (1, 2), 10)


# --------------------------------------------------------------------------------------
# the experiment scripts (tiny settings; shapes shared with the tests above, so few compiles)
# --------------------------------------------------------------------------------------
def _load_script(name):
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "experiments" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_rdr_exp_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name,argv,pngs", [
    ("fig_linear_regression", ["--step", "10", "--draws", "2000"], ["fig_linear_regression.png"]),
    ("fig_domain_adaptation", ["--d", "12", "--d-iv", "4", "--d-e", "8", "--Ns", "60",
                               "--draws", "2000"], ["fig_domain_adaptation.png"]),
])
def test_experiment_scripts_quick(name, argv, pngs, tmp_path):
    import csv
    import json
    prev = jax.config.jax_enable_x64
    try:
        res = _load_script(name).main(["--quick", *argv, "--out", str(tmp_path)])
    finally:
        jax.config.update("jax_enable_x64", prev)
    for f in ["results.json", "results.csv", "config.json", *pngs]:
        assert (tmp_path / f).is_file() and (tmp_path / f).stat().st_size > 0, f
    assert json.loads((tmp_path / "config.json").read_text())["quick"] is True
    with open(tmp_path / "results.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) > 0
    assert res["claims"] and all(isinstance(c["held"], bool) and c["detail"]
                                 for c in res["claims"])
    # the settings are small but the claims are robust: they must hold here too
    assert all(c["held"] for c in res["claims"]), [c for c in res["claims"] if not c["held"]]
