"""RPCholesky (arXiv 2207.06503), accelerated RPCholesky (arXiv 2410.03969), greedy and
uniform pivoting: against a plain numpy re-implementation of the papers' pseudo-code fed the
same uniform draws, against the Nystrom formula, LAPACK's pstrf, closed-form pivot
distributions and the paper's trace-error bound."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from rdr_jax.pivoted_cholesky import (PSDEntries, kernel_entries, rpcholesky)

METHODS = ("rpc", "accelerated", "greedy", "uniform")


# --------------------------------------------------------------------------------------
# test matrices and the numpy reference (the papers' pseudo-code, written out)
# --------------------------------------------------------------------------------------
def gaussian_kernel(X, h):
    D2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    return np.exp(-D2 / (2 * h * h))


def points(rng, n, d=2):
    return rng.standard_normal((n, d))


def np_sample(d, u):
    """First i with cumsum(d)_i > u sum(d) (inverse CDF), never a zero-weight index."""
    s = int(np.searchsorted(np.cumsum(d), u * d.sum(), side="right"))
    return min(s, int(np.nonzero(d > 0)[0][-1]))


def np_rpcholesky(A, U):
    """Algorithm 1 of arXiv 2207.06503 with the draws U (one uniform per pivot)."""
    n, k = A.shape[0], len(U)
    G, d, piv = np.zeros((k, n)), np.clip(np.diag(A).copy(), 0, None), []
    for i in range(k):
        s = np_sample(d, U[i])
        g = (A[s] - G[:, s] @ G) / np.sqrt(d[s])
        G[i], d = g, np.clip(d - g * g, 0, None)
        d[s] = 0
        piv.append(s)
    return np.array(piv), G.T, d.sum()


def np_accelerated(A, k, b, draws):
    """arXiv 2410.03969: propose b pivots from d, accept j w.p. H_jj / d_{s_j} (H Schur-
    complemented on the accepted ones), one block Cholesky step on the accepted rows."""
    n = A.shape[0]
    G, d, piv = np.zeros((0, n)), np.clip(np.diag(A).copy(), 0, None), []
    for U1, U2 in draws:
        if len(piv) == k:
            break
        idx = np.array([np_sample(d, u) for u in U1])
        H = A[np.ix_(idx, idx)] - G[:, idx].T @ G[:, idx]
        acc = []
        for j in range(b):
            hjj = max(H[j, j], 0.0)
            if (U2[j] * d[idx[j]] < hjj and idx[j] not in idx[acc]
                    and len(acc) < k - len(piv)):
                acc.append(j)
                col = np.where(np.arange(b) > j, H[:, j] / np.sqrt(hjj), 0)
                H = H - np.outer(col, col)
        S = idx[acc]
        R = A[S] - G[:, S].T @ G
        L = np.linalg.cholesky(R[:, S])
        Gn = scipy.linalg.solve_triangular(L, R, lower=True)
        G, d = np.vstack([G, Gn]), np.clip(d - (Gn * Gn).sum(0), 0, None)
        d[S] = 0
        piv.extend(S.tolist())
    return np.array(piv), G.T, d.sum()


def accelerated_draws(key, b, rounds, dtype):
    out = []
    for r in range(rounds):
        k1, k2 = jax.random.split(jax.random.fold_in(key, r))
        out.append((np.asarray(jax.random.uniform(k1, (b,), dtype), np.float64),
                    np.asarray(jax.random.uniform(k2, (b,), dtype), np.float64)))
    return out


def nystrom(A, S):
    C = A[:, S]
    return C @ np.linalg.pinv(A[np.ix_(S, S)], rcond=1e-13, hermitian=True) @ C.T


# --------------------------------------------------------------------------------------
# exact agreement with the reference
# --------------------------------------------------------------------------------------
def test_rpc_matches_numpy_reference(x64, rng):
    A = gaussian_kernel(points(rng, 150), 0.7)
    key = jax.random.key(3)
    r = rpcholesky(key, A, 25)
    U = np.asarray(jax.random.uniform(key, (25,), np.float64))
    piv, F, te = np_rpcholesky(A, U)
    np.testing.assert_array_equal(np.asarray(r.pivots), piv)
    np.testing.assert_allclose(np.asarray(r.F), F, atol=1e-10)
    np.testing.assert_allclose(float(r.trace_error), te, rtol=1e-9)
    assert int(r.entries_evaluated) == 26 * 150


@pytest.mark.parametrize("b", [4, 10])
def test_accelerated_matches_numpy_reference(x64, rng, b):
    A = gaussian_kernel(points(rng, 120), 0.7)
    key = jax.random.key(5)
    r = rpcholesky(key, A, 30, method="accelerated", block_size=b)
    piv, F, te = np_accelerated(A, 30, b, accelerated_draws(key, b, 200, np.float64))
    np.testing.assert_array_equal(np.asarray(r.pivots), piv)
    np.testing.assert_allclose(np.asarray(r.F), F, atol=1e-9)
    np.testing.assert_allclose(float(r.trace_error), te, rtol=1e-8)


def test_greedy_matches_lapack_pstrf(x64, rng):
    """Greedy pivoting is LAPACK's pivoted Cholesky (dpstrf) stopped after k steps."""
    X = points(rng, 80)
    w = rng.uniform(0.5, 2.0, 80)               # distinct diagonal: no ties
    A = w[:, None] * gaussian_kernel(X, 1.0) * w[None, :]
    c, piv, _, _ = scipy.linalg.lapack.dpstrf(A, lower=1)
    L = np.tril(c)
    r = rpcholesky(jax.random.key(0), A, 12, method="greedy")
    np.testing.assert_array_equal(np.asarray(r.pivots), piv[:12] - 1)
    Lk = np.zeros_like(A)
    Lk[piv - 1] = L                             # rows back in A's order
    np.testing.assert_allclose(np.asarray(r.F), Lk[:, :12], atol=1e-10)


def test_first_pick_and_pair_frequencies():
    """Over 20000 keys (one vmapped program per method), the first pivot of RPCholesky and of
    accelerated RPCholesky is drawn with probability diag(A)/tr(A), and the ordered pair
    (s1, s2) with P(s1) P(s2 | s1) = d_s1/tr(A) * r_s2/tr(R), R = A - a a^T / a_ss."""
    rng = np.random.default_rng(7)
    B = rng.standard_normal((5, 5))
    A = B @ B.T + 0.5 * np.diag(rng.uniform(0, 3, 5))
    d = np.diag(A)
    p1 = d / d.sum()
    joint = np.zeros((5, 5))
    for s in range(5):
        R = A - np.outer(A[:, s], A[s]) / A[s, s]
        joint[s] = p1[s] * np.diag(R) / np.trace(R)
    keys = jax.random.split(jax.random.key(11), 20000)
    Aj = jnp.asarray(A, jnp.float32)
    for method, b in (("rpc", None), ("accelerated", 3)):
        piv = np.asarray(jax.jit(jax.vmap(lambda key: rpcholesky(
            key, Aj, 2, method=method, block_size=b).pivots))(keys))
        counts = np.zeros((5, 5))
        np.add.at(counts, (piv[:, 0], piv[:, 1]), 1)
        for obs, p in ((counts.sum(1), p1), (counts.ravel(), joint.ravel())):
            mask = p > 0
            chi2 = (((obs - len(keys) * p) ** 2)[mask] / (len(keys) * p[mask])).sum()
            dof = mask.sum() - 1
            # chi-square upper 1e-4 quantile ~ dof + 4.3 sqrt(2 dof) + 14 (generous)
            assert chi2 < dof + 4.3 * np.sqrt(2 * dof) + 14, (method, chi2, dof)
        assert np.all(counts[np.arange(5), np.arange(5)] == 0)   # no pivot twice


# --------------------------------------------------------------------------------------
# Nystrom identity, exactness, oracle = dense, counts
# --------------------------------------------------------------------------------------
N, K_PIV = 60, 8       # one shape for the tests below: their calls share compiled programs


def kernel60(dtype):
    A = gaussian_kernel(points(np.random.default_rng(1), N), 0.8)
    return A, jnp.asarray(A, dtype)


@pytest.mark.parametrize("method", METHODS)
def test_nystrom_identity_and_exact_low_rank(method, dtype, rng):
    """F F^H is the Nystrom approximation A[:, S] A[S, S]^+ A[S, :] of the returned pivots
    (numpy, float64); trace_error is tr(A - F F^H); a rank-4 matrix is recovered exactly."""
    A64, A = kernel60(dtype)
    r = rpcholesky(jax.random.key(1), A, K_PIV, method=method)
    again = rpcholesky(jax.random.key(1), A, K_PIV, method=method)
    for x, y in zip(r, again):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))          # bitwise
    assert r.F.dtype == dtype and r.F.shape == (N, K_PIV) and r.pivots.shape == (K_PIV,)
    S = np.asarray(r.pivots)
    assert len(set(S.tolist())) == K_PIV
    F = np.asarray(r.F, np.float64)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(F @ F.T, nystrom(A64, S), atol=tol)
    assert abs(float(r.trace_error) - np.trace(A64 - F @ F.T)) <= tol * np.trace(A64)

    B = rng.standard_normal((N, 4))
    L = B @ B.T
    r = rpcholesky(jax.random.key(2), jnp.asarray(L, dtype), K_PIV, method=method)
    F = np.asarray(r.F, np.float64)
    tol = 2e-5 if dtype == np.float32 else 1e-11
    assert np.abs(L - F @ F.T).max() <= tol * np.abs(L).max()
    assert float(r.trace_error) <= tol * np.trace(L)
    assert len(set(np.asarray(r.pivots).tolist())) == K_PIV


def test_uniform_pivots_distinct_and_uniform():
    A = jnp.eye(6, dtype=jnp.float32) + 1.0
    keys = jax.random.split(jax.random.key(4), 3000)
    piv = np.asarray(jax.jit(jax.vmap(lambda key: rpcholesky(
        key, A, 6, method="uniform").pivots))(keys))
    assert all(len(set(p)) == 6 for p in piv.tolist())
    first = np.bincount(piv[:, 0], minlength=6) / len(keys)
    np.testing.assert_allclose(first, 1 / 6, atol=0.03)


@pytest.mark.parametrize("method", METHODS)
def test_oracle_equals_dense_and_counts(method):
    """A PSDEntries over A's entries gives bitwise the dense result; the count of entries
    the oracle was asked for (counted at run time by a callback) is entries_evaluated:
    (k+1)N for rpc, greedy and uniform (arXiv 2207.06503); for accelerated N, b^2 per round
    and the rows of the accepted pivots, read in chunks of ceil(b/4)."""
    _, A = kernel60(np.float32)
    seen = []

    def count(r, c):
        seen.append(int(r) * int(c))

    def entries(rows, cols):
        jax.debug.callback(count, rows.shape[0], cols.shape[0], ordered=True)
        return A[rows][:, cols]

    def diag():
        jax.debug.callback(count, 1, A.shape[0], ordered=True)
        return jnp.diagonal(A)

    key = jax.random.key(1)
    dense = rpcholesky(key, A, K_PIV, method=method)
    orac = rpcholesky(key, PSDEntries(entries, diag, N, np.float32), K_PIV, method=method)
    jax.effects_barrier()
    np.testing.assert_array_equal(np.asarray(orac.pivots), np.asarray(dense.pivots))
    np.testing.assert_array_equal(np.asarray(orac.F), np.asarray(dense.F))
    assert sum(seen) == int(orac.entries_evaluated) == int(dense.entries_evaluated)
    if method != "accelerated":
        assert sum(seen) == (K_PIV + 1) * N
    else:   # b = 8, chunks of 2 rows: at most one wasted row per round
        rounds = [s for s in seen if s == 64]
        assert (K_PIV + 1) * N + 64 * len(rounds) <= sum(seen)
        assert sum(seen) <= (K_PIV + 1) * N + (64 + N) * len(rounds)


@pytest.mark.parametrize("kernel", ["gaussian", "laplace"])
def test_kernel_entries_matches_dense_kernel(kernel, x64, rng):
    X = points(rng, 70, 3)
    dense = (gaussian_kernel(X, 1.3) if kernel == "gaussian" else
             np.exp(-np.abs(X[:, None] - X[None]).sum(-1) / 1.3))
    K = kernel_entries(X, kernel, 1.3)
    np.testing.assert_allclose(np.asarray(K.entries(jnp.arange(70), jnp.arange(70))), dense,
                               rtol=1e-13)
    a = rpcholesky(jax.random.key(0), K, 10)
    b = rpcholesky(jax.random.key(0), dense, 10)
    np.testing.assert_array_equal(np.asarray(a.pivots), np.asarray(b.pivots))
    np.testing.assert_allclose(np.asarray(a.F), np.asarray(b.F), atol=1e-10)


# --------------------------------------------------------------------------------------
# jit, vmap, determinism
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", METHODS)
def test_jit_vmap_over_keys(method):
    """jit(vmap(rpcholesky)) over keys gives each key's own result (float32)."""
    _, A = kernel60(np.float32)
    keys = jax.random.split(jax.random.key(12), 3)
    batched = jax.jit(jax.vmap(lambda key: rpcholesky(key, A, K_PIV, method=method)))(keys)
    for i in range(3):
        one = rpcholesky(keys[i], A, K_PIV, method=method)
        np.testing.assert_array_equal(np.asarray(batched.pivots[i]), np.asarray(one.pivots))
        np.testing.assert_allclose(np.asarray(batched.F[i]), np.asarray(one.F), atol=1e-5)
        np.testing.assert_allclose(float(batched.trace_error[i]), float(one.trace_error),
                                   rtol=1e-4)
        assert int(batched.entries_evaluated[i]) == int(one.entries_evaluated)


# --------------------------------------------------------------------------------------
# the paper's bound, statistically
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["rpc", "accelerated"])
def test_mean_trace_error_within_the_papers_bound(method, x64):
    """arXiv 2207.06503's main bound: E tr(A - F F^H) <= (1 + eps) tr(A - [[A]]_r) when
    k >= r / eps + r log(1 / (eps eta)), eta = tr(A - [[A]]_r) / tr(A). Mean over 300
    keys (one vmapped program) minus 3 standard errors, on a Gaussian kernel matrix."""
    rng = np.random.default_rng(0)
    A = gaussian_kernel(rng.uniform(-3, 3, (150, 2)), 1.0)
    lam = np.sort(np.linalg.eigvalsh(A))[::-1]
    r, eps = 4, 1.0
    best = lam[r:].sum()
    eta = best / lam.sum()
    k = int(np.ceil(r / eps + r * np.log(1 / (eps * eta))))
    assert k < 150
    keys = jax.random.split(jax.random.key(0), 300)
    b = 5 if method == "accelerated" else None
    te = np.asarray(jax.jit(jax.vmap(lambda key: rpcholesky(
        key, A, k, method=method, block_size=b).trace_error))(keys))
    mean, se = te.mean(), te.std(ddof=1) / np.sqrt(len(te))
    assert mean - 3 * se <= (1 + eps) * best, (k, mean, se, best)


# --------------------------------------------------------------------------------------
# bad inputs
# --------------------------------------------------------------------------------------
def test_bad_inputs(rng):
    A = gaussian_kernel(points(rng, 20), 1.0)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="square"):
        rpcholesky(key, A[:, :10], 3)
    with pytest.raises(ValueError, match="square"):
        rpcholesky(key, A[0], 3)
    with pytest.raises(ValueError, match="k must be >= 1"):
        rpcholesky(key, A, 0)
    with pytest.raises(ValueError, match="k must be <= 20"):
        rpcholesky(key, A, 21)
    with pytest.raises(TypeError, match="k must be a Python int"):
        rpcholesky(key, A, 3.0)
    neg = A.copy()
    neg[3, 3] = -0.1
    with pytest.raises(ValueError, match="negative diagonal"):
        rpcholesky(key, neg, 3)
    asym = A.copy()
    asym[0, 1] += 0.5
    with pytest.raises(ValueError, match="not symmetric"):
        rpcholesky(key, asym, 3)
    nan = A.copy()
    nan[2, 5] = nan[5, 2] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        rpcholesky(key, nan, 3)
    with pytest.raises(TypeError, match="real"):
        rpcholesky(key, A.astype(np.complex128), 3)
    with pytest.raises(TypeError, match="dtype"):
        rpcholesky(key, A.astype(np.int32), 3)
    with pytest.raises(ValueError, match="method must be one of"):
        rpcholesky(key, A, 3, method="magic")
    with pytest.raises(ValueError, match="block_size applies"):
        rpcholesky(key, A, 3, block_size=4)
    with pytest.raises(ValueError, match="block_size must be >= 1"):
        rpcholesky(key, A, 3, method="accelerated", block_size=0)
    with pytest.raises(ValueError, match="block_size must be <= 20"):
        rpcholesky(key, A, 3, method="accelerated", block_size=50)
    with pytest.raises(TypeError, match="PRNG key"):
        rpcholesky(0, A, 3)
    with pytest.raises(TypeError, match="dense PSD array"):
        rpcholesky(key, [[1.0]], 1)
    ent = lambda r, c: jnp.asarray(A)[r][:, c]   # noqa: E731
    with pytest.raises(ValueError, match="A.diag must have shape"):
        rpcholesky(key, PSDEntries(ent, np.ones(5), 20), 3)
    with pytest.raises(ValueError, match="A.diag has negative"):
        rpcholesky(key, PSDEntries(ent, -np.ones(20), 20), 3)
    with pytest.raises(TypeError, match="A.entries must be callable"):
        rpcholesky(key, PSDEntries(None, np.ones(20), 20), 3)
    with pytest.raises(TypeError, match="A.n must be a Python int"):
        rpcholesky(key, PSDEntries(ent, np.ones(20), 20.0), 3)
    with pytest.raises(TypeError, match="A.dtype"):
        rpcholesky(key, PSDEntries(ent, np.ones(20), 20, np.int32), 3)
    with pytest.raises(ValueError, match="k must be <= 20"):
        rpcholesky(key, PSDEntries(ent, np.ones(20), 20), 30)
    with pytest.raises(ValueError, match="kernel must be one of"):
        kernel_entries(np.ones((5, 2)), "cosine")
    with pytest.raises(ValueError, match="bandwidth must be"):
        kernel_entries(np.ones((5, 2)), "gaussian", 0.0)
    with pytest.raises(ValueError, match="2-D"):
        kernel_entries(np.ones(5))
    with pytest.raises(TypeError, match="dtype"):
        kernel_entries(np.ones((5, 2), np.int64))


# --------------------------------------------------------------------------------------
# the experiment script, quick mode
# --------------------------------------------------------------------------------------
def test_experiment_quick(script, tmp_path):
    mod = script("beyond_rpcholesky")
    mod.main(["--quick", "--out", str(tmp_path)])
    res = json.loads((tmp_path / "beyond_rpcholesky.json").read_text())
    assert res["section"] == "Beyond the thesis" and res["mode"] == "quick"
    assert {"item", "paper", "command", "versions", "claims"} <= set(res)
    assert res["claims"] and all(
        {"claim", "published", "measured", "held", "setting"} <= set(c)
        and isinstance(c["held"], bool) for c in res["claims"])
    assert (tmp_path / "beyond_rpcholesky.png").exists()
    assert (tmp_path / "beyond_rpcholesky.csv").exists()
