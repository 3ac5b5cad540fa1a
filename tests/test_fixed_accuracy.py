"""Fixed-accuracy ID (rdr_jax.id_cur.fixed_accuracy): accuracy vs tol over many keys, exact rank,
zero matrix, scaling, jit/vmap purity, no retrace per tol, input validation, sparse/factored/
implicit operators, the exact-coefficient prefix, and agreement with the former host loop.

Compilation dominates the run time, so most tests share one shape (M x N) and block size B.
"""


import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

import rdr_jax
from rdr_jax.id_cur import fixed_accuracy as FA

DTYPES = ["float32", "float64"]
M, N, B = 60, 40, 4


def x64(dtype_name):
    """float64 tests run inside the thread-local ``jax.enable_x64`` context (the global flag
    is never flipped)."""
    return jax.enable_x64(dtype_name == "float64")


def decaying(rng, m, n, rate, dtype):
    k = min(m, n)
    U, _ = np.linalg.qr(rng.standard_normal((m, k)))
    V, _ = np.linalg.qr(rng.standard_normal((n, k)))
    s = np.exp(-rate * np.arange(k) / k)
    return ((U * s) @ V.T).astype(dtype), s


def low_rank(rng, m, n, r, dtype):
    return (rng.standard_normal((m, r)) @ rng.standard_normal((r, n))).astype(dtype)


def optimal_rank(s, tol):
    """Smallest k with sqrt(sum_{i>k} s_i^2) <= tol ||s|| (Eckart-Young)."""
    tail = np.append(np.sqrt(np.cumsum(s[::-1] ** 2)[::-1] / np.sum(s ** 2)), 0.0)
    return int(np.argmax(tail <= tol))


def _np(A):
    A = np.asarray(A)
    return A.astype(np.complex128 if np.iscomplexobj(A) else np.float64)


def row_error(A, res):
    k = int(res.rank)
    W, rows, A = _np(res.W), np.asarray(res.rows), _np(A)
    return np.linalg.norm(A - W[:, :k] @ A[rows[:k]]) / np.linalg.norm(A)


def col_error(A, res):
    k = int(res.rank)
    W, cols, A = _np(res.W), np.asarray(res.cols), _np(A)
    return np.linalg.norm(A - A[:, cols[:k]] @ W[:k]) / np.linalg.norm(A)


def take(batch, i):
    """Trial i of a vmapped result (numpy leaves: cheap host indexing)."""
    return jax.tree.map(lambda x: np.asarray(x)[i], batch)


def check_padding_rows(res, m):
    k = int(res.rank)
    W, rows = np.asarray(res.W), np.asarray(res.rows)
    assert W.shape[0] == m and rows.shape == (W.shape[1],)
    assert np.all(W[:, k:] == 0) and np.all(rows[k:] == 0)
    assert len(set(rows[:k].tolist())) == k
    np.testing.assert_allclose(W[rows[:k], :k], np.eye(k), atol=1e-5)


def check_padding_cols(res, n):
    k = int(res.rank)
    W, cols = np.asarray(res.W), np.asarray(res.cols)
    assert W.shape[1] == n and cols.shape == (W.shape[0],)
    assert np.all(W[k:] == 0) and np.all(cols[k:] == 0)
    np.testing.assert_allclose(W[:k, cols[:k]], np.eye(k), atol=1e-5)


# --------------------------------------------------------------------------------------
# accuracy (statistical, many keys through vmap)
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype_name", DTYPES)
def test_error_meets_tol_over_keys_and_rank_near_optimal(dtype_name):
    with x64(dtype_name):
        A, s = decaying(np.random.default_rng(1), M, N, 10.0, dtype_name)
        keys = jax.random.split(jax.random.key(0), 50)
        for tol in (1e-1, 1e-3):
            kopt = optimal_rank(s, tol)
            rows = jax.vmap(lambda k, t=tol: FA.adaptive_row_skeletons(k, A, t, block_size=B))(keys)
            checks = [(jax.tree.map(np.asarray, rows), row_error)]
            if dtype_name == "float32":      # (columns = rows of A^H: one dtype is enough)
                cols = jax.vmap(lambda k, t=tol: FA.adaptive_column_skeletons(
                    k, A, t, block_size=B))(keys)
                checks.append((jax.tree.map(np.asarray, cols), col_error))
            for res, err in checks:
                errs = np.array([err(A, take(res, i)) for i in range(50)])
                ranks = np.asarray(res.rank)
                assert np.asarray(res.converged).all()
                assert np.all(np.asarray(res.error_estimate) <= tol)
                # the squared estimate is unbiased: the true error is near tol, not far above
                assert np.mean(errs <= 1.5 * tol) >= 0.9, errs / tol
                assert kopt <= np.median(ranks) <= kopt + 3 * B, (kopt, ranks)
            # ||A||_F^2 estimate: unbiased
            np.testing.assert_allclose(np.mean(np.asarray(rows.norm_estimate) ** 2),
                                       np.sum(s ** 2), rtol=0.1)


# --------------------------------------------------------------------------------------
# exact rank, zero matrix, max_rank, scaling, non-finite, complex
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype_name", DTYPES)
def test_exact_rank_matrix_stops_at_rank(dtype_name):
    with x64(dtype_name):
        A = low_rank(np.random.default_rng(3), M, N, 7, dtype_name)
        tol = 1e-5 if dtype_name == "float32" else 1e-12
        atol = 1e-4 if dtype_name == "float32" else 1e-10
        # blocks of 4: the second block has 3 nonzero pivots, the 4th is dropped
        res = FA.adaptive_row_skeletons(jax.random.key(0), A, tol, block_size=B)
        assert int(res.rank) == 7 and bool(res.converged)
        check_padding_rows(res, M)
        assert row_error(A, res) < atol
        c = FA.adaptive_column_skeletons(jax.random.key(0), A, tol, block_size=B)
        assert int(c.rank) == 7 and bool(c.converged)
        check_padding_cols(c, N)
        assert col_error(A, c) < atol


@pytest.mark.parametrize("dtype_name", DTYPES)
def test_zero_matrix(dtype_name):
    with x64(dtype_name):
        Z = np.zeros((M, N), dtype_name)
        for fn in (FA.adaptive_row_skeletons, FA.adaptive_column_skeletons):
            res = fn(jax.random.key(0), Z, 0.1, block_size=B)
            assert int(res.rank) == 0 and bool(res.converged)
            assert float(res.error_estimate) == 0 and float(res.norm_estimate) == 0
            assert np.all(np.asarray(res.W) == 0)          # no NaN
        pre = FA.exact_prefix(jax.random.key(0), Z, res.cols, Z[:, np.asarray(res.cols)],
                              res.rank, 0.1)
        assert int(pre.rank) == 0 and float(pre.error) == 0 and bool(pre.met)
        assert np.all(np.asarray(pre.W) == 0)


def test_max_rank_reached_is_flagged():
    A, _ = decaying(np.random.default_rng(4), M, N, 3.0, np.float32)
    res = FA.adaptive_row_skeletons(jax.random.key(0), A, 1e-4, max_rank=10, block_size=B)
    assert int(res.rank) == 10 and not bool(res.converged)
    assert int(res.stop_reason) == FA.StopReason.MAX_RANK
    assert float(res.error_estimate) > 1e-4
    assert res.W.shape == (M, 10) and res.rows.shape == (10,)
    check_padding_rows(res, M)


def test_default_max_rank_and_clipping():
    key = jax.random.key(0)
    cfg = FA._prepare(key, np.ones((M, N), np.float32), 0.1, 16, 8, None, None, adjoint=False)[3]
    assert (cfg.max_rank, cfg.block_size, cfg.oversample) == (N, 16, 8)
    # block size clipped to the rank cap, oversampling to the sketched dimension
    cfg = FA._prepare(key, np.ones((M, N), np.float32), 0.1, 64, 8, 10, None, adjoint=False)[3]
    assert (cfg.max_rank, cfg.block_size, cfg.oversample) == (10, 10, 8)
    cfg = FA._prepare(key, np.ones((M, N), np.float32), 0.1, 64, 99, None, None, adjoint=True)[3]
    assert (cfg.block_size, cfg.oversample) == (N, M - N)
    big = jax.ShapeDtypeStruct((3000, 2000), jnp.float32)
    out = jax.eval_shape(lambda A: FA.adaptive_row_skeletons(key, A, 0.1), big)
    assert out.W.shape == (3000, FA.DEFAULT_MAX_RANK) == (3000, 1024)


def test_scale_invariance_float32():
    A, _ = decaying(np.random.default_rng(5), M, N, 10.0, np.float32)
    key, tol = jax.random.key(2), 1e-2
    ref = FA.adaptive_row_skeletons(key, A, tol, block_size=B)
    # power-of-two scalings are exact: identical skeletons (2^-140: subnormal entries,
    # which XLA would otherwise flush to zero)
    for e in (-140, -100, 100):
        As = np.ldexp(A, e).astype(np.float32)
        res = FA.adaptive_row_skeletons(key, As, tol, block_size=B)
        assert bool(res.converged) and np.isfinite(float(res.error_estimate))
        if e == -140:
            # the stored input itself lost digits, and it is rescaled by the largest safe
            # power 2^120: compare with that matrix. ||A||_F is subnormal: flushed to 0.
            ref_e = FA.adaptive_row_skeletons(key, np.ldexp(As, 120).astype(np.float32),
                                              tol, block_size=B)
            np.testing.assert_array_equal(np.asarray(res.rows), np.asarray(ref_e.rows))
            continue
        np.testing.assert_array_equal(np.asarray(res.rows), np.asarray(ref.rows))
        np.testing.assert_allclose(float(res.norm_estimate) * 2.0 ** -e,
                                   float(ref.norm_estimate), rtol=1e-6)
    # squared norms of these under/overflow float32
    for scale in (1e-30, 1e30):
        As = A * np.float32(scale)
        res = FA.adaptive_row_skeletons(key, As, tol, block_size=B)
        assert int(res.rank) == int(ref.rank) and bool(res.converged)
        assert not np.any(np.isnan(np.asarray(res.W)))
        np.testing.assert_allclose(float(res.norm_estimate) / scale, float(ref.norm_estimate),
                                   rtol=1e-4)
        assert row_error(As, res) < 2 * tol
    # the exact prefix too (its squared norms are taken of the rescaled A and C)
    c = FA.adaptive_column_skeletons(key, A, 0.1, block_size=B)
    cols = np.asarray(c.cols)
    j0, W0, rel0 = FA.exact_prefix(key, A, c.cols, A[:, cols], c.rank, 0.1)[:3]
    for As in (A * np.float32(1e30), A * np.float32(1e-30), np.ldexp(A, -100)):
        As = As.astype(np.float32)
        j, W, rel = FA.exact_prefix(key, As, c.cols, As[:, cols], c.rank, 0.1)[:3]
        assert int(j) == int(j0) and np.isfinite(float(rel))
        np.testing.assert_allclose(float(rel), float(rel0), rtol=1e-3)
        np.testing.assert_allclose(np.asarray(W), np.asarray(W0), atol=1e-3)
    # an operator without an exact max |a_ij|: scaled from the first sketch
    U, d, Vt = np.linalg.svd(A.astype(np.float64), full_matrices=False)
    f = rdr_jax.factored_operator(U.astype(np.float32), (d * 1e-30).astype(np.float32),
                                  Vt.T.astype(np.float32))
    res = FA.adaptive_row_skeletons(key, f, tol, block_size=B)
    assert abs(int(res.rank) - int(ref.rank)) <= B and bool(res.converged)
    assert row_error(A, res) < 2 * tol
    np.testing.assert_allclose(float(res.norm_estimate) / 1e-30, float(ref.norm_estimate),
                               rtol=0.3)


def test_complex_input():
    rng = np.random.default_rng(7)
    A = (low_rank(rng, M, N, 5, np.float32) + 1j * low_rank(rng, M, N, 5, np.float32)
         ).astype(np.complex64)
    res = FA.adaptive_row_skeletons(jax.random.key(0), A, 1e-4)   # block 16 > rank 10
    assert int(res.rank) == 10 and bool(res.converged)
    assert res.error_estimate.dtype == np.float32 and res.W.dtype == np.complex64
    check_padding_rows(res, M)
    assert row_error(A, res) < 1e-4


# --------------------------------------------------------------------------------------
# purity: jit, vmap, no retrace per tol
# --------------------------------------------------------------------------------------
_jit_rows = jax.jit(FA.adaptive_row_skeletons, static_argnames=("block_size", "oversample",
                                                                 "max_rank"))


@pytest.mark.parametrize("dtype_name", DTYPES)
def test_jit_with_matrix_argument_and_vmap_over_keys(dtype_name):
    with x64(dtype_name):
        A, _ = decaying(np.random.default_rng(8), M, N, 10.0, dtype_name)
        key, tol = jax.random.key(3), 1e-2
        eager = FA.adaptive_row_skeletons(key, A, tol, block_size=B)
        res = _jit_rows(key, jnp.asarray(A), tol, block_size=B)
        assert int(res.rank) == int(eager.rank)
        np.testing.assert_array_equal(np.asarray(res.rows), np.asarray(eager.rows))
        np.testing.assert_allclose(np.asarray(res.W), np.asarray(eager.W), atol=1e-4)
        keys = jax.random.split(jax.random.key(4), 6)
        batch = jax.jit(jax.vmap(lambda k, A: FA.adaptive_column_skeletons(k, A, tol,
                                                                           block_size=B),
                                 in_axes=(0, None)))(keys, A)
        assert batch.W.shape == (6, N, N) and batch.rank.shape == (6,)
        for i in range(6):
            one = FA.adaptive_column_skeletons(keys[i], A, tol, block_size=B)
            assert int(batch.rank[i]) == int(one.rank)
            np.testing.assert_array_equal(np.asarray(batch.cols[i]), np.asarray(one.cols))
        if dtype_name == "float32":
            # inside jit a non-finite A cannot raise: it is flagged
            A[3, 4] = np.nan
            bad = _jit_rows(key, jnp.asarray(A), tol, block_size=B)
            assert not bool(bad.converged) and np.isnan(float(bad.error_estimate))
            with pytest.raises(ValueError, match="non-finite"):   # eagerly: a clear error
                FA.adaptive_row_skeletons(key, A, tol, block_size=B)


def test_no_retrace_for_a_new_tol():
    A, _ = decaying(np.random.default_rng(9), M, N, 8.0, np.float32)
    key = jax.random.key(0)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def f(key, A, tol):
        return FA.adaptive_row_skeletons(key, A, tol, block_size=B)

    r1 = f(key, A, 1e-1)
    r2 = f(key, A, 1e-3)                                   # traced tol: same trace
    assert int(r2.rank) > int(r1.rank)
    # eager calls: tol is an array argument of the jitted core, not a static one
    FA.adaptive_row_skeletons(key, A, 0.3, block_size=B)
    n0 = FA._adaptive_rows._cache_size()
    for tol in (0.2, np.float32(0.05), jnp.asarray(0.01), np.float64(0.02)):
        FA.adaptive_row_skeletons(key, A, tol, block_size=B)
    assert FA._adaptive_rows._cache_size() == n0


def test_vmap_over_tol():
    A, _ = decaying(np.random.default_rng(10), M, N, 8.0, np.float32)
    tols = jnp.asarray([0.3, 0.1, 0.01])
    res = jax.vmap(lambda t: FA.adaptive_row_skeletons(jax.random.key(0), A, t,
                                                       block_size=B))(tols)
    assert np.all(np.diff(np.asarray(res.rank)) >= 0)
    assert np.all(np.asarray(res.error_estimate) <= np.asarray(tols))


# --------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------
def test_bad_inputs_raise_clear_errors():
    A = np.ones((20, 10), np.float32)
    key = jax.random.key(0)
    for tol in (0.0, 1.0, 1.5, -0.1, float("nan"), float("inf"), jnp.asarray(2.0)):
        with pytest.raises(ValueError, match=r"tol must be in \(0, 1\)"):
            FA.adaptive_row_skeletons(key, A, tol)
    for tol in ("0.1", 1, 0, True, None, jnp.asarray([0.1, 0.2]), jnp.asarray(1)):
        with pytest.raises(TypeError, match="tol must be a"):
            FA.adaptive_column_skeletons(key, A, tol)
    with pytest.raises(ValueError, match="block_size must be >= 1"):
        FA.adaptive_row_skeletons(key, A, 0.1, block_size=0)
    with pytest.raises(TypeError, match="block_size must be a Python int"):
        FA.adaptive_row_skeletons(key, A, 0.1, block_size=4.0)
    with pytest.raises(ValueError, match="oversample must be >= 0"):
        FA.adaptive_row_skeletons(key, A, 0.1, oversample=-1)
    with pytest.raises(ValueError, match=r"max_rank must be <= 10 \(min\(m, n\)"):
        FA.adaptive_row_skeletons(key, A, 0.1, max_rank=11)
    with pytest.raises(ValueError, match="max_rank must be >= 1"):
        FA.adaptive_column_skeletons(key, A, 0.1, max_rank=0)
    with pytest.raises(TypeError, match="key must be a JAX PRNG key"):
        FA.adaptive_row_skeletons(0, A, 0.1)
    with pytest.raises(TypeError, match="unsupported dtype"):   # integers: tests/test_interop.py
        FA.adaptive_row_skeletons(key, np.ones((5, 4), np.float16), 0.1)
    with pytest.raises(ValueError, match="2-D"):
        FA.adaptive_row_skeletons(key, np.ones(5, np.float32), 0.1)
    with pytest.raises(ValueError, match="C must be"):
        FA.exact_prefix(key, A, jnp.zeros(3, jnp.int32), A[:5, :3], 3, 0.1)
    with pytest.raises(ValueError, match="cols must be"):
        FA.exact_prefix(key, A, jnp.zeros(4, jnp.int32), A[:, :3], 3, 0.1)
    with pytest.raises(ValueError, match="tol must be in"):
        FA.exact_prefix(key, A, jnp.zeros(3, jnp.int32), A[:, :3], 3, 0.0)
    with pytest.raises(ValueError, match="rank must be <= 3"):
        FA.exact_prefix(key, A, jnp.zeros(3, jnp.int32), A[:, :3], 4, 0.1)


# --------------------------------------------------------------------------------------
# operators: sparse, factored, implicit
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype_name", DTYPES)
def test_sparse_input(dtype_name):
    with x64(dtype_name):
        rng = np.random.default_rng(11)
        X = sp.random(M, 6, density=0.4, random_state=rng)
        Y = sp.random(6, N, density=0.4, random_state=rng)
        S = sp.csr_matrix(X @ Y).astype(dtype_name)
        dense = S.toarray()
        r = np.linalg.matrix_rank(dense)
        tol = 1e-5 if dtype_name == "float32" else 1e-12
        res = FA.adaptive_row_skeletons(jax.random.key(0), S, tol, block_size=B)
        assert int(res.rank) == r and bool(res.converged)
        assert row_error(dense, res) < 1e-4
        op = rdr_jax.as_operator(S)
        if dtype_name == "float32":           # a SparseOperator passed through jit
            c = jax.jit(lambda k, op: FA.adaptive_column_skeletons(k, op, tol, block_size=B))(
                jax.random.key(1), op)
            assert int(c.rank) == r and col_error(dense, c) < 1e-4
        else:                                 # (any column skeleton will do below)
            c = FA.adaptive_column_skeletons(jax.random.key(1), dense, tol, block_size=B)
        cols, rank = c.cols, c.rank
        # the prefix on the sparse path: ||A||_F and the tails exact, ||A - Q B||_F estimated
        j, W, rel = FA.exact_prefix(jax.random.key(2), op, cols, op.cols(cols), rank, 0.3)[:3]
        j = int(j)
        true = np.linalg.norm(dense - dense[:, np.asarray(cols[:j])] @ np.asarray(W[:j]))
        true = true / np.linalg.norm(dense)
        assert 1 <= j <= r and float(rel) <= 0.3 and true <= 0.3
        assert true / 2 <= float(rel) <= 2 * true


def test_factored_and_implicit_inputs():
    A, _ = decaying(np.random.default_rng(12), M, N, 10.0, np.float32)
    U, d, Vt = np.linalg.svd(A.astype(np.float64), full_matrices=False)
    f = rdr_jax.factored_operator(U.astype(np.float32), d.astype(np.float32),
                                  Vt.T.astype(np.float32))
    Aj = jnp.asarray(A)
    imp = rdr_jax.implicit_operator(lambda X: Aj @ X, lambda Y: Aj.T @ Y, (M, N), np.float32)
    tol = 1e-2
    ref = FA.adaptive_row_skeletons(jax.random.key(5), A, tol, block_size=B)
    for op in (f, imp):
        res = FA.adaptive_row_skeletons(jax.random.key(5), op, tol, block_size=B)
        assert bool(res.converged) and abs(int(res.rank) - int(ref.rank)) <= B
        assert row_error(A, res) < 2 * tol
    # no exact ||A||_F: ||A - Q B||_F and ||A||_F estimated from fresh vectors, the tails
    # exact; W = C_j^+ A for the shortest prefix; the error within 2x of the truth
    c = FA.adaptive_column_skeletons(jax.random.key(5), A, tol, block_size=B)
    for op in (f, imp):
        pre = FA.exact_prefix(jax.random.key(6), op, c.cols, op.cols(c.cols), c.rank, tol)
        true = col_error(A, c._replace(W=pre.W, rank=pre.rank))
        assert int(pre.rank) <= int(c.rank) and bool(pre.met) and true <= tol
        assert true / 2 <= float(pre.error) <= 2 * true


# --------------------------------------------------------------------------------------
# exact-coefficient prefix
# --------------------------------------------------------------------------------------
def test_exact_prefix_is_shortest_and_exact():
    with jax.enable_x64(True):
        A, s = decaying(np.random.default_rng(13), M, N, 12.0, np.float64)
        nA = np.linalg.norm(A)
        prefix = jax.jit(FA.exact_prefix)
        for tol in (1e-1, 1e-3, 1e-6):
            c = FA.adaptive_column_skeletons(jax.random.key(0), A, tol, block_size=B)
            C = A[:, np.asarray(c.cols)]
            j, W, rel, bound, met = prefix(jax.random.key(1), A, c.cols, C, c.rank, tol)
            j, W, cols = int(j), np.asarray(W), np.asarray(c.cols)
            assert optimal_rank(s, tol) <= j <= int(c.rank) and bool(met)
            assert np.all(W[j:] == 0) and np.isnan(float(bound))
            np.testing.assert_allclose(W[:j, cols[:j]], np.eye(j), atol=1e-12)
            true = np.linalg.norm(A - A[:, cols[:j]] @ W[:j]) / nA
            assert true <= tol * (1 + 1e-8)
            np.testing.assert_allclose(float(rel), true, rtol=1e-6, atol=1e-14)
            # shortest: the (j-1)-column prefix with its best coefficients misses tol
            Cj = A[:, cols[:j - 1]]
            worse = np.linalg.norm(A - Cj @ np.linalg.lstsq(Cj, A, rcond=None)[0]) / nA
            assert worse > tol


def test_exact_prefix_sparse_dense_and_implicit_agree_in_float32():
    """float32, tol^2 = 2.5e-5: the sparse and implicit prefixes (||A - Q B||_F from fresh
    vectors; no ||A||^2 - ||Q^H A||^2 cancellation) land within one of the dense prefix,
    whose error is exact; the error describes the returned W in every case."""
    A, _ = decaying(np.random.default_rng(14), M, N, 8.0, np.float32)
    Aj = jnp.asarray(A)
    imp = rdr_jax.implicit_operator(jax.tree_util.Partial(jnp.matmul, Aj),
                                    jax.tree_util.Partial(lambda A, Y: A.T @ Y, Aj), (M, N))
    key = jax.random.key(0)
    c = FA.adaptive_column_skeletons(key, A, 5e-3, block_size=B)
    C = A[:, np.asarray(c.cols)]
    dense = FA.exact_prefix(key, A, c.cols, C, c.rank, 5e-3)
    true = col_error(A, c._replace(W=dense.W, rank=dense.rank))
    assert bool(dense.met) and true <= 5e-3
    assert float(dense.error) == pytest.approx(true, rel=1e-3)
    for op in (sp.csr_matrix(A), imp):
        pre = FA.exact_prefix(key, op, c.cols, C, c.rank, 5e-3)
        true = col_error(A, c._replace(W=pre.W, rank=pre.rank))
        assert abs(int(pre.rank) - int(dense.rank)) <= 1 and true <= 5e-3
        assert true / 2 <= float(pre.error) <= 2 * true
