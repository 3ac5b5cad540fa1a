"""Chapter 2: pivoting schemes, skeleton selection, ID/CUR, certificates, streaming, fixed
accuracy -- against numpy/scipy references and the thesis' error bound."""


import chex
import jax
import jax.numpy as jnp
import jax.experimental.sparse as jsparse
import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp

import rdr_jax as R
from rdr_jax import matrices as M
from rdr_jax.id_cur import pivoting as P
from rdr_jax.id_cur import decompositions as D
from rdr_jax.id_cur import selection as SL
from rdr_jax.id_cur import streaming as ST

from tests.methods import METHODS, RANK, SHAPE

ALL_METHODS = sorted(METHODS)          # the one method list (tests/methods.py)


def low_rank(rng, m, n, k, dtype, cond=10.0):
    U = np.linalg.qr(rng.standard_normal((m, k)))[0]
    V = np.linalg.qr(rng.standard_normal((n, k)))[0]
    s = np.geomspace(1.0, 1.0 / cond, k)
    return ((U * s) @ V.T).astype(dtype)


def decaying(rng, m, n, rate=10.0):
    r = min(m, n)
    U = np.linalg.qr(rng.standard_normal((m, r)))[0]
    V = np.linalg.qr(rng.standard_normal((n, r)))[0]
    s = np.exp(-np.arange(r) / rate) + 1e-3 / (1 + np.arange(r))
    return (U * s) @ V.T, s


def rel(A, B):
    A = np.asarray(A, np.float64)
    return np.linalg.norm(A - np.asarray(B, np.float64)) / np.linalg.norm(A)


def tolerance(dtype):
    return 1e-4 if np.dtype(dtype) == np.float32 else 1e-10


#: the shape and rank most tests below use (``tests/methods.py``): a decomposition's program
#: depends on the shape, dtype, rank bucket (k = 9..16 share one) and method, so tests on the
#: same signature reuse the program an earlier test compiled instead of compiling their own
(M_, N_), K_ = SHAPE, RANK


# --------------------------------------------------------------------------------------
# pivoting schemes against references
# --------------------------------------------------------------------------------------
def np_partial_pivoting(X, k):
    """Textbook Gaussian elimination with partial pivoting on X^T (numpy reference)."""
    A = np.array(X, dtype=np.float64).T.copy()
    perm = np.arange(A.shape[0])
    for t in range(k):
        p = t + int(np.argmax(np.abs(A[t:, t])))
        A[[t, p]] = A[[p, t]]
        perm[[t, p]] = perm[[p, t]]
        A[t + 1:, t] /= A[t, t]
        A[t + 1:, t + 1:] -= np.outer(A[t + 1:, t], A[t, t + 1:])
    return perm[:k]


@pytest.mark.parametrize("shape", [(8, 50), (20, 300)])
def test_lupp_matches_textbook(shape, dtype, rng):
    X = rng.standard_normal(shape).astype(dtype)
    k = shape[0]
    J = np.asarray(jax.jit(P.lupp, static_argnums=1)(jnp.asarray(X), k))
    np.testing.assert_array_equal(J, np_partial_pivoting(X, k))
    # oversampling does not change the first k pivots (implementation notes)
    np.testing.assert_array_equal(np.asarray(P.lupp(jnp.asarray(X), k // 2)), J[:k // 2])


@pytest.mark.parametrize("impl", ["lapack", "xla"])
def test_cpqr_matches_scipy(impl, dtype, rng):
    X = rng.standard_normal((12, 200)).astype(dtype)
    _, _, piv = scipy.linalg.qr(X.astype(np.float64), pivoting=True, mode="economic")
    J = np.asarray(jax.jit(lambda X: P.cpqr(X, 10, impl=impl))(jnp.asarray(X)))
    np.testing.assert_array_equal(J, piv[:10])


def test_leverage_sampling_distribution():
    """Gumbel-top-k: the first draw is categorical(p); all k draws are distinct."""
    rng = np.random.default_rng(0)
    V = np.linalg.qr(rng.standard_normal((30, 3)))[0].T  # 3 x 30, orthonormal rows
    p = np.asarray(P.leverage_scores(jnp.asarray(V)))
    np.testing.assert_allclose(p.sum(), 1.0, rtol=1e-6)
    keys = jax.random.split(jax.random.key(0), 20000)
    J = np.asarray(jax.vmap(lambda kk: P.leverage(kk, jnp.asarray(V), 3))(keys))
    assert all(len(set(row)) == 3 for row in J[:500])
    freq = np.bincount(J[:, 0], minlength=30) / len(J)
    se = np.sqrt(p * (1 - p) / len(J))
    assert np.all(np.abs(freq - p) < 5 * se + 1e-3)
    top = np.asarray(P.leverage(None, jnp.asarray(V), 3, mode="topk"))
    np.testing.assert_array_equal(np.sort(top), np.sort(np.argsort(-p)[:3]))


def test_interpolation_and_eta(dtype, rng):
    X = rng.standard_normal((14, 80)).astype(dtype)
    J = P.lupp(jnp.asarray(X), 10)
    T = np.asarray(P.interpolation(jnp.asarray(X), J), np.float64)
    X64 = X.astype(np.float64)
    ref = np.linalg.lstsq(X64[:, np.asarray(J)], X64, rcond=None)[0]
    np.testing.assert_allclose(T, ref, atol=50 * tolerance(dtype))
    rest = np.setdiff1d(np.arange(80), np.asarray(J))
    eta_ref = np.sqrt(1 + np.linalg.norm(ref[:, rest], 2) ** 2)
    for eta in (P.eta_from_interpolation(jnp.asarray(T, dtype)),
                P.eta_from_gram(jnp.asarray(X), J)):
        np.testing.assert_allclose(float(eta), eta_ref, rtol=1e-3 if dtype == np.float32
                                   else 1e-9)


def test_maxvol_refine_bounds_coefficients(rng):
    X = jnp.asarray(rng.standard_normal((6, 60)))
    J0 = jnp.arange(6, dtype=jnp.int32)  # a poor start
    T0 = P.interpolation(X, J0)
    J, T, nsw = P.maxvol_refine(T0, J0, g=1.05)
    assert int(nsw) > 0 and float(jnp.max(jnp.abs(T))) <= 1.05 + 1e-6
    vol = lambda J: abs(np.linalg.det(np.asarray(X)[:, np.asarray(J)]))
    assert vol(J) > vol(J0) * 1.05 ** int(nsw) * (1 - 1e-8)


# --------------------------------------------------------------------------------------
# exact-rank reconstruction: every method, every decomposition
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ALL_METHODS)
def test_exact_rank_reconstruction(method, dtype, rng):
    m, n, k = M_, N_, K_
    A = low_rank(rng, m, n, k, dtype)
    key = jax.random.key(3)
    tol = tolerance(dtype)
    # every side for Rand-LUPP; the column ID (the others are transposes / rows of C,
    # covered there and in test_core_reference) for the other methods
    sides = ("column", "row", "two_sided") if method == "Rand-LUPP" else ("column",)
    for side in sides:
        d = R.interpolative(key, A, k, side=side, method=METHODS[method])
        assert rel(A, d.todense()) < tol, (side, rel(A, d.todense()))
    c = R.cur(key, A, k, method=METHODS[method])
    assert rel(A, c.todense()) < tol
    assert c.C.shape == (m, k) and c.U.shape == (k, k) and c.R.shape == (k, n)
    np.testing.assert_array_equal(np.asarray(c.C), A[:, np.asarray(c.cols)])
    np.testing.assert_array_equal(np.asarray(c.R), A[np.asarray(c.rows)])
    svd = R.id_to_svd(c)
    np.testing.assert_allclose(np.asarray(svd.s, np.float64),
                               np.linalg.svd(A.astype(np.float64), compute_uv=False)[:k],
                               rtol=50 * tol)


@pytest.mark.parametrize("kind", ["scipy", "bcoo", "factored"])
def test_exact_rank_operator_inputs(kind, dtype, rng):
    m, n, k = 120, 90, 8
    Ls = sp.random(m, k, density=0.3, random_state=1, format="csr") + sp.eye(m, k)
    Rs = sp.random(n, k, density=0.3, random_state=2, format="csr") + sp.eye(n, k)
    d = np.geomspace(1.0, 0.1, k)
    Asp = (Ls @ sp.diags(d) @ Rs.T).tocsr().astype(dtype)
    dense = Asp.toarray()
    if kind == "scipy":
        A = Asp
    elif kind == "bcoo":
        A = jsparse.BCOO.from_scipy_sparse(Asp)
    else:
        A = R.factored_operator(Ls.astype(dtype), d.astype(dtype), Rs.astype(dtype))
    key = jax.random.key(0)
    for method in ("Rand-LUPP", "Rand-CPQR-1piter", "RSVD-DEIM"):
        c = R.cur(key, A, k, method=method)
        assert rel(dense, c.todense()) < tolerance(dtype)
        err = R.lowrank_error(A, c)
        assert err.exact and err.fro <= tolerance(dtype) * np.linalg.norm(dense) * 10
    cid = R.interpolative(key, A, k)
    assert rel(dense, cid.todense()) < tolerance(dtype)


@pytest.mark.parametrize("method", ["Rand-LUPP", "SRCUR"])
def test_cross_core_is_the_pseudo_inverse_of_the_intersection(method, dtype, rng):
    """``core="cross"``: the same skeletons and certificates as the stable core, ``U =
    A(I, J)^+`` (numpy's pinv), exact on an exact-rank matrix, never better than the stable
    core's ``C^+ A R^+`` (the Frobenius-optimal U for these C and R); jit/vmap; its bound."""
    m, n, k = M_, N_, K_
    A = low_rank(rng, m, n, k, dtype)
    key = jax.random.key(3)
    tol = tolerance(dtype)
    x = R.cur(key, A, k, method=method, core="cross")
    s = R.cur(key, A, k, method=method)
    for f in ("rows", "cols", "C", "R", "eta", "eta_rows", "numerical_rank"):
        np.testing.assert_array_equal(np.asarray(getattr(x, f)), np.asarray(getattr(s, f)), f)
    x2 = R.cur(key, A, k, method=method, core="cross")      # same key: bitwise the same U
    np.testing.assert_array_equal(np.asarray(x2.U), np.asarray(x.U))
    A64 = A.astype(np.float64)
    I, J = np.asarray(x.rows), np.asarray(x.cols)
    ref = np.linalg.pinv(A64[np.ix_(I, J)])
    assert rel(ref, x.U) < 1e3 * tol
    assert rel(A, x.todense()) < 10 * tol
    # k below the numerical rank: the cross core is at best the stable one
    B = decaying(rng, m, n)[0].astype(dtype)
    xb, sb = (R.cur(key, B, k, method=method, core=c) for c in ("cross", "stable"))
    assert rel(B, xb.todense()) >= rel(B, sb.todense()) * (1 - 10 * tol)
    U1 = np.linalg.pinv(B.astype(np.float64)[np.ix_(np.asarray(xb.rows), np.asarray(xb.cols))])
    assert rel(U1, xb.U) < (1e-2 if np.dtype(dtype) == np.float32 else 1e-8)
    keys = jax.random.split(key, 3)
    Us = jax.vmap(jax.jit(lambda kk: R.cur(kk, B, k, method=method, core="cross").U))(keys)
    for i in range(3):    # batched kernels round differently; U = S^+ amplifies it by cond(S)
        assert rel(R.cur(keys[i], B, k, method=method, core="cross").U, Us[i]) < 1e3 * tol
    xc, bound = R.cur_with_bound(jax.random.key(4), B, k, method=method, core="cross")
    true = np.linalg.norm(B.astype(np.float64) - np.asarray(xc.todense(), np.float64))
    assert true <= float(bound.fro) <= 10 * true
    with pytest.raises(ValueError, match="core must be one of"):
        R.cur(key, B, k, core="pinv")


def test_tolerance_mode_finds_exact_rank(dtype, rng):
    A = low_rank(rng, 80, 60, 11, dtype)
    tol = 1e-3 if dtype == np.float32 else 1e-9
    for side in ("column", "row", "two_sided"):
        d = R.interpolative_to_tolerance(jax.random.key(1), A, tol, side=side, max_rank=40)
        assert int(d.rank) == 11
        assert rel(A, d.todense()) < tolerance(dtype)
        assert d.error_estimate is not None and d.error_estimate < tol


# --------------------------------------------------------------------------------------
# the certificate (thm:pivoting_on_rangeapprox_error_bound)
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["lupp", "cpqr", "deim", "leverage", "srcur"])
@pytest.mark.parametrize("oversample", [0, 6])
def test_certificate_bound_every_trial(method, oversample):
    rng = np.random.default_rng(5)
    A, _ = decaying(rng, 60, 50, rate=6.0)
    k = 10
    A64 = A
    for t in range(25):
        sel = R.select_columns(jax.random.key(t), A, k,
                               method=R.Method(method, oversample=oversample))
        C = A64[:, np.asarray(sel.cols)]
        E = A64 - C @ np.linalg.lstsq(C, A64, rcond=None)[0]
        T = np.asarray(sel.W, np.float64)
        Q = np.linalg.qr(T.T)[0]
        Ex = A64 - (A64 @ Q) @ Q.T
        eta = float(sel.eta)
        assert eta >= 1.0
        assert np.linalg.norm(E) <= eta * np.linalg.norm(Ex) * (1 + 1e-10)
        assert np.linalg.norm(E, 2) <= eta * np.linalg.norm(Ex, 2) * (1 + 1e-10)
        if oversample == 0 and method in ("lupp", "cpqr"):
            # l = k: T has the row space of the sketch X itself
            X = np.asarray(SL.row_basis(jax.random.split(jax.random.key(t))[0],
                                        R.as_operator(A), SL.Sizes(k, k, k, k),
                                        SL.resolve_method(method)).X)
            Qx = np.linalg.qr(X.T)[0]
            np.testing.assert_allclose(Qx @ Qx.T, Q @ Q.T, atol=1e-4)
        cert = R.eta_bound(A, sel)
        assert np.linalg.norm(E) <= cert.fro * (1 + 1e-10)
        assert np.linalg.norm(E, 2) <= cert.spectral * (1 + 1e-10)


def test_decomposition_bounds_hold():
    rng = np.random.default_rng(2)
    A, _ = decaying(rng, M_, N_, rate=8.0)
    for t in range(10):
        key = jax.random.key(t)
        cid = R.interpolative(key, A, K_)
        c = R.cur(key, A, K_)
        # Thm 2.3 for the decompositions' column selection (both draw it with the first of
        # three subkeys): ||A - C C^+ A||_F <= eta ||A - A W^+ W||_F, and for CUR
        # (Eq. (2.26)) ||A - CUR||_F <= sqrt(1 + eta_rows^2) eta ||A - A W^+ W||_F
        sel = R.select_columns(jax.random.split(key, 3)[0], A, K_)
        np.testing.assert_array_equal(sel.cols, cid.cols)
        np.testing.assert_array_equal(sel.cols, c.cols)
        bound = R.eta_bound(A, sel)
        assert bound.eta == pytest.approx(float(cid.eta), rel=1e-6)
        assert np.linalg.norm(A - np.asarray(cid.todense())) <= bound.fro * (1 + 1e-9)
        cur_bound = np.sqrt(1.0 + float(c.eta_rows) ** 2) * bound.fro
        assert np.linalg.norm(A - np.asarray(c.todense())) <= cur_bound * (1 + 1e-9)
        # eq:id_cur_suboptimality: column ID error <= CUR error
        assert (np.linalg.norm(A - np.asarray(cid.todense()))
                <= np.linalg.norm(A - np.asarray(c.todense())) * (1 + 1e-9))


# --------------------------------------------------------------------------------------
# accuracy claims of sec:cur_experiments
# --------------------------------------------------------------------------------------
def _mean_err(A, k, method, keys):
    errs = []
    for key in keys:
        c = R.cur(key, A, k, method=method)
        errs.append(R.lowrank_error(A, c).fro)
    return float(np.mean(errs))


@pytest.mark.parametrize("matrix", ["polynomial", "exponential"])
def test_pivoting_methods_agree_and_power_iteration_helps(matrix):
    # (experiments/fig_rand_err_rank.py reports the same claims on SNN1e3; too slow for CI)
    key = jax.random.key(0)
    if matrix == "polynomial":
        A = M.with_spectrum(key, 300, 200, M.polynomial_decay(200, r1=5, power=1.0))
        ks = (30,)
    else:
        A = M.with_spectrum(key, 300, 200, M.exponential_decay(200, r1=5, base=0.95))
        ks = (30,)
    keys = list(jax.random.split(jax.random.key(1), 4))
    for k in ks:
        e = {m: _mean_err(A, k, m, keys) for m in ("Rand-LUPP", "Rand-CPQR", "RSVD-DEIM",
                                                      "Rand-LUPP-1piter", "Rand-CPQR-1piter")}
        base = [e["Rand-LUPP"], e["Rand-CPQR"], e["RSVD-DEIM"]]
        assert max(base) <= 1.15 * min(base), e
        assert e["Rand-LUPP-1piter"] < e["Rand-LUPP"], e
        assert e["Rand-CPQR-1piter"] < e["Rand-CPQR"], e


# --------------------------------------------------------------------------------------
# determinism, jit, vmap, retracing
# --------------------------------------------------------------------------------------
def test_same_key_same_skeletons_jit_vmap(rng):
    A = jnp.asarray(decaying(rng, M_, N_)[0])
    key = jax.random.key(7)
    c1 = R.cur(key, A, K_)
    c2 = jax.jit(lambda kk: R.cur(kk, A, K_))(key)
    for c in (c2,):
        np.testing.assert_array_equal(np.asarray(c.cols), np.asarray(c1.cols))
        np.testing.assert_array_equal(np.asarray(c.rows), np.asarray(c1.rows))
    keys = jax.random.split(key, 4)
    cols = jax.vmap(lambda kk: R.cur(kk, A, K_).cols)(keys)
    for i in range(4):
        np.testing.assert_array_equal(np.asarray(cols[i]),
                                      np.asarray(R.cur(keys[i], A, K_).cols))
    ids = jax.vmap(lambda kk: R.interpolative(kk, A, K_, side="two_sided").rows)(keys)
    assert ids.shape == (4, K_)


def test_no_retrace_on_equal_shapes(rng):
    A = jnp.asarray(decaying(rng, M_, N_)[0])
    R.cur(jax.random.key(0), A, K_)
    R.interpolative(jax.random.key(0), A, K_)
    n_cur, n_id = D._cur._cache_size(), D._interpolative._cache_size()
    B = A + 1.0
    R.cur(jax.random.key(1), B, K_)
    R.interpolative(jax.random.key(2), B, K_ - 1)         # same rank bucket
    assert D._cur._cache_size() == n_cur and D._interpolative._cache_size() == n_id
    counted = chex.assert_max_traces(n=1)(lambda X: P.lupp(X, 3))
    f = jax.jit(counted)
    f(A[:5])
    f(A[:5] * 2)


# --------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------
def test_bad_inputs(rng, monkeypatch):
    A = decaying(rng, 30, 20)[0]
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="k must be >= 1"):
        R.cur(key, A, 0)
    with pytest.raises(ValueError, match="min\\(m, n\\)"):
        R.interpolative(key, A, 21)
    with pytest.raises(TypeError, match="k must be"):
        R.select_columns(key, A, 3.0)
    for tol in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="tol must be in \\(0, 1\\)"):
            R.interpolative_to_tolerance(key, A, tol)
    with pytest.raises(ValueError, match="unknown method"):
        R.cur(key, A, 3, method="magic")
    with pytest.raises(ValueError, match="side"):
        R.interpolative(key, A, 3, side="left")
    with pytest.raises(ValueError, match="oversample must be"):
        R.cur(key, A, 5, method=R.Method(oversample=-2))
    bad = A.copy()
    bad[2, 3] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        R.cur(key, bad, 3)
    bad[2, 3] = np.inf
    with pytest.raises(ValueError, match="non-finite"):
        R.interpolative(key, bad, 3)
    monkeypatch.setattr(P, "cpqr_available", lambda platform=None: False)
    with pytest.raises(P.BackendError, match="no lowering"):
        R.cur(key, A, 3, method="Rand-CPQR")
    with pytest.raises(P.BackendError):
        P.cpqr(jnp.asarray(A), 3)
    # the portable implementation still works there
    c = R.cur(key, A, 3, method=R.CPQR(impl="xla"))
    assert c.cols.shape == (3,)


def test_k_above_numerical_rank_warns_or_raises(rng, dtype):
    A = low_rank(rng, M_, N_, 4, dtype)
    key = jax.random.key(0)
    with pytest.warns(RuntimeWarning, match="numerical rank"):
        c = jax.block_until_ready(R.cur(key, A, K_))
    assert int(c.numerical_rank) == 4 and int(c.rank) == K_
    assert np.all(np.isfinite(np.asarray(c.U)))
    with pytest.raises(ValueError, match="numerical rank"):
        R.interpolative(key, A, K_, on_rank_deficient="raise")
    # the tolerance mode picks the rank instead
    d = R.interpolative_to_tolerance(key, A, 1e-3 if dtype == np.float32 else 1e-8, max_rank=30)
    assert int(d.rank) == 4 and d.trim().C.shape == (M_, 4)


# --------------------------------------------------------------------------------------
# streaming and fixed accuracy
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("sketch", ["gaussian", "sparse_sign"])
def test_streaming_exact_rank(axis, sketch, dtype, rng):
    m, n, k = 96, 70, 9
    A = low_rank(rng, m, n, k, dtype)
    size = m if axis == 0 else n
    blocks = lambda: ((A[i:i + 25] if axis == 0 else A[:, i:i + 25])
                      for i in range(0, size, 25))
    st = ST.streaming_skeletons(jax.random.key(0), blocks(), (m, n), k, axis=axis,
                                method=R.Method(sketch=sketch, oversample=4))
    C, S, Rr = ST.retrieve_skeletons(blocks(), (m, n), st.rows, st.cols, axis=axis)
    np.testing.assert_array_equal(np.asarray(C), A[:, np.asarray(st.cols)])
    np.testing.assert_array_equal(np.asarray(Rr), A[np.asarray(st.rows)])
    tol = 1e-3 if dtype == np.float32 else 1e-9
    assert rel(A, ST.cur_from_skeletons(C, S, Rr).todense()) < tol
    assert rel(A, np.asarray(C) @ np.asarray(st.W_cols)) < tol        # C^+ A ~ X1^+ X
    assert rel(A, np.asarray(st.W_rows) @ np.asarray(Rr)) < tol       # A R^+ ~ Y Y1^+
    assert float(st.eta) >= 1 and float(st.eta_rows) >= 1


def test_streaming_bad_blocks(rng):
    A = rng.standard_normal((20, 10))
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="cover"):
        ST.streaming_skeletons(key, [A[:10]], (20, 10), 3)
    with pytest.raises(ValueError, match="expected"):
        ST.streaming_skeletons(key, [A[:, :5]], (20, 10), 3)
    with pytest.raises(ValueError, match="SRTT"):
        ST.streaming_sketches(key, [A], (20, 10), 4, sketch="srtt")
    with pytest.raises(ValueError, match="lupp"):
        ST.streaming_skeletons(key, [A], (20, 10), 3, method="deim")


def test_fixed_accuracy_meets_tolerance():
    rng = np.random.default_rng(4)
    A, s = decaying(rng, 200, 150, rate=8.0)
    for tol in (1e-2, 1e-4):
        # exact coefficients: the returned rank is the shortest pivot prefix meeting tol
        d = R.interpolative_to_tolerance(jax.random.key(0), A, tol)
        assert rel(A, d.todense()) <= tol * (1 + 1e-8)
        opt = np.sqrt(np.cumsum(s[::-1] ** 2)[::-1] / np.sum(s ** 2))
        kopt = int(np.argmax(opt <= tol))
        assert kopt <= int(d.rank) <= min(A.shape)
        # sketch coefficients: the (unbiased) estimate keeps the true error near tol
        ok = 0
        for t in range(20):
            ds = R.interpolative_to_tolerance(jax.random.key(t), A, tol,
                                              method=R.Method(interp="sketch"))
            ok += rel(A, ds.todense()) <= 2 * tol
            assert float(ds.error_estimate) <= tol
        assert ok >= 18


def test_fixed_accuracy_max_rank_warns(rng):
    A, _ = decaying(rng, 60, 50, rate=30.0)
    with pytest.warns(RuntimeWarning, match="not reached"):
        d = jax.block_until_ready(R.interpolative_to_tolerance(
            jax.random.key(0), A, 1e-9, max_rank=20, block_size=8))
    assert int(d.rank) <= 20 and d.C.shape == (60, 20)


# --------------------------------------------------------------------------------------
# errors and the factored 10^6-class path
# --------------------------------------------------------------------------------------
def test_lowrank_error_factored_matches_dense():
    key = jax.random.key(0)
    A = M.snn(key, 400, 300, r=60, density=0.2, spectrum=M.SNNWeights(a=2.0, r1=10),
              factored=True)
    dense = np.asarray(A.todense(), np.float64)
    c = R.cur(jax.random.key(1), A, 20)
    e = R.lowrank_error(A, c)
    E = dense - np.asarray(c.todense(), np.float64)
    np.testing.assert_allclose(e.fro, np.linalg.norm(E), rtol=1e-6)
    np.testing.assert_allclose(e.spectral, np.linalg.norm(E, 2), rtol=1e-6)
    est = R.lowrank_error(R.implicit_operator(A.matmat, A.rmatmat, A.shape, A.dtype), c,
                          key=jax.random.key(2), dense_limit=0)
    assert not est.exact and abs(est.fro / e.fro - 1) < 0.3


def test_id_to_svd_matches_dense(rng, dtype):
    A, _ = decaying(rng, M_, N_)
    A = A.astype(dtype)
    d = R.interpolative(jax.random.key(0), A, 10, side="two_sided")
    svd = R.id_to_svd(d)
    Ah = np.asarray(d.todense())
    U, s, Vt = np.linalg.svd(Ah)
    tol = tolerance(dtype)
    np.testing.assert_allclose(np.asarray(svd.s), s[:10], rtol=100 * tol)
    np.testing.assert_allclose(np.asarray(svd.U * svd.s @ svd.Vt), Ah, atol=100 * tol)
