"""``interpolative_to_tolerance`` never claims what is false (issue 29).

Over many keys (``jax.vmap``), for dense, CSR, implicit (data as ``Partial`` leaves) and scipy
``LinearOperator`` inputs, in float32 and float64, on a smooth Gaussian kernel, a Hilbert
matrix and a real image (scikit-image's camera, downsampled), against the float64 error of the
returned factors computed here on the host:

* converged -> the true error is within ``tol`` (certified: within the bound, which is within
  ``tol``, in >= 1 - failure_prob of the keys);
* not converged -> ``stop_reason`` says why, and the warning gives advice that can help;
* the estimate is within 2x of the truth; the same key gives bitwise the same result; dense,
  sparse and implicit inputs of one matrix reach ranks within a few of each other.

Compilation (one program per shape, dtype, input kind and mode) dominates the run time, so
every matrix here is N x N and the batch programs are shared between the tests.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sl
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from jax.tree_util import Partial

import rdr_jax as R
from rdr_jax import StopReason

KEYS = jax.random.split(jax.random.key(29), 16)
N = 128


def _mm(A, X):
    return A @ X


def _rmm(A, Y):
    return A.conj().T @ Y


def gaussian_kernel(m, n, h=0.09, seed=0):
    rng = np.random.default_rng(seed)
    X, Y = rng.random((m, 2)), rng.random((n, 2))
    return np.exp(-((X[:, None, :] - Y[None, :, :]) ** 2).sum(-1) / h)


def camera():
    from skimage import data
    return data.camera()[::4, ::4].astype(np.float64) / 255.0      # N x N, a real image


def as_input(A, kind):
    if kind == "dense":
        return jnp.asarray(A)
    if kind == "sparse":
        return sp.csr_matrix(A)
    if kind == "implicit":
        Aj = jnp.asarray(A)
        return R.implicit_operator(Partial(_mm, Aj), Partial(_rmm, Aj), A.shape)
    if kind == "linop":          # a scipy LinearOperator run on the host (pure_callback)
        return spla.LinearOperator(A.shape, matvec=lambda x: A @ x, rmatvec=lambda y: A.T @ y,
                                   matmat=lambda X: A @ X, rmatmat=lambda Y: A.T @ Y,
                                   dtype=A.dtype)
    raise ValueError(kind)


def true_errors(A, res):
    """Float64 relative Frobenius error of each key's returned column ID (padded factors)."""
    A64 = A.astype(np.float64)
    C, W = np.asarray(res.C, np.float64), np.asarray(res.W, np.float64)
    return np.linalg.norm(A64[None] - C @ W, axis=(1, 2)) / np.linalg.norm(A64)


def over_keys(A, kind, tol, failure_prob=None, **kw):
    op = as_input(A, kind)
    res = jax.vmap(lambda k: R.interpolative_to_tolerance(k, op, tol, failure_prob=failure_prob,
                                                          **kw))(KEYS)
    return jax.tree.map(np.asarray, res), true_errors(A, res)


def check_honest(res, errs, tol, *, certified, exact):
    """The claims of a batch of results against their true errors."""
    conv, est = res.converged, res.error_estimate
    reason = res.stop_reason
    assert np.all((reason == StopReason.TOLERANCE) == conv)
    assert np.all(np.isin(reason, [StopReason.TOLERANCE, StopReason.PRECISION_FLOOR,
                                   StopReason.MAX_RANK]))
    assert np.all(est[conv] <= tol) and np.all(est[~conv] > tol)
    if certified:                   # a bound: above the truth in >= 1 - failure_prob of keys
        assert np.mean(errs <= est * (1 + 1e-3)) >= 0.95
        assert np.mean(errs[conv] <= tol) >= 0.95 if conv.any() else True
    elif exact:                     # dense: the error of the factors, computed exactly
        assert np.all(errs[conv] <= tol * (1 + 1e-3))
    elif conv.any():                # an estimate: the truth within tol but for rare draws
        assert np.mean(errs[conv] <= tol) >= 0.95 and np.all(errs[conv] <= 1.15 * tol)
    if not certified:               # within 2x of the truth (down to the rounding level)
        eps = np.finfo(est.dtype).eps
        assert np.all(est >= errs / 2) and np.all(est <= 2 * errs + 64 * eps)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind", ["dense", "sparse", "implicit", "linop"])
def test_kernel_over_keys_every_input_kind(dtype, kind):
    """The issue's Gaussian kernel, small: float32 meets 1e-3 and reports its floor for 1e-7
    (never an estimate of 0); float64 meets both."""
    with jax.enable_x64(dtype == "float64"):
        A = gaussian_kernel(N, N).astype(dtype)
        for tol in (1e-3, 1e-7):
            res, errs = over_keys(A, kind, tol)
            check_honest(res, errs, tol, certified=False, exact=kind == "dense")
            assert np.all(res.error_estimate > 0)
            if dtype == "float64":
                assert res.converged.all()
            elif tol == 1e-7:       # below float32's floor on this matrix: said so
                assert np.all(res.stop_reason == StopReason.PRECISION_FLOOR)
            else:
                assert res.converged.all()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_certified_implicit_kernel_and_hilbert(dtype):
    """The issue's failing case (float32, implicit, failure_prob = 0.01), small; and a
    certified Hilbert matrix, whose bound was 8e-14 against a true 3e-8 before."""
    with jax.enable_x64(dtype == "float64"):
        A = gaussian_kernel(N, N).astype(dtype)
        for tol in (1e-3, 1e-7):
            res, errs = over_keys(A, "implicit", tol, failure_prob=0.01)
            check_honest(res, errs, tol, certified=True, exact=False)
            if dtype == "float32" and tol == 1e-7:
                assert not res.converged.any()
        H = sl.hilbert(N).astype(dtype)
        tol = 1e-9 if dtype == "float64" else 1e-4
        res, errs = over_keys(H, "implicit", tol, failure_prob=0.01)
        check_honest(res, errs, tol, certified=True, exact=False)
        assert res.converged.all()


def test_real_image_dense_float32_and_sparse_certified_float64():
    A = camera()
    with jax.enable_x64(True):
        res, errs = over_keys(A, "sparse", 1e-2, failure_prob=0.05)
        check_honest(res, errs, 1e-2, certified=True, exact=False)
        assert res.converged.all()
    A32 = A.astype(np.float32)
    for tol in (1e-2, 1e-8):
        res, errs = over_keys(A32, "dense", tol)
        check_honest(res, errs, tol, certified=False, exact=True)


def test_dense_sparse_implicit_and_operator_ranks_agree():
    """One rank for one matrix: the same key and tol give ranks within a few (and the
    estimates agree with the truth) for every input kind of a real image."""
    A = camera().astype(np.float32)
    for tol in (1e-1, 1e-2):
        ranks = {}
        for kind in ("dense", "sparse", "implicit", "linop"):
            res, errs = over_keys(A, kind, tol)
            check_honest(res, errs, tol, certified=False, exact=kind == "dense")
            ranks[kind] = res.rank
        spread = np.max(list(ranks.values()), axis=0) - np.min(list(ranks.values()), axis=0)
        assert np.all(spread <= 3), (tol, ranks)


def test_scipy_linear_operator_rank_test():
    """scipy's own ``test_rank_estimates_lin_op``: hilbert(300), tol 1e-9, within 4 of the
    numerical rank (the last block is truncated to the tolerance, not kept whole)."""
    with jax.enable_x64(True):
        B = np.array([[1, 1, 0], [0, 0, 1], [0, 0, 1]], dtype=np.float64)
        for M in (sl.hilbert(300), B):
            rank_np = np.linalg.matrix_rank(M, np.linalg.norm(M, 2) * 1e-9)
            d = R.interpolative_to_tolerance(jax.random.key(0), spla.aslinearoperator(M), 1e-9,
                                             block_size=16)
            assert abs(int(d.rank) - rank_np) <= 4, (int(d.rank), rank_np)
            assert bool(d.converged)
            op = as_input(M, "linop")           # a LinearOperator that is not a matrix
            d2 = R.interpolative_to_tolerance(jax.random.key(0), op, 1e-9, block_size=16)
            assert abs(int(d2.rank) - rank_np) <= 4 and bool(d2.converged)


def test_warnings_name_the_reason_and_a_fix_that_helps():
    A = gaussian_kernel(N, N).astype(np.float32)
    key = jax.random.key(0)
    with pytest.warns(RuntimeWarning, match=r"float32 cannot reach tol = 1e-07 on this matrix: "
                      r"its floor here is about .*use float64") as rec:
        d = R.interpolative_to_tolerance(key, A, 1e-7)
    assert not any("max_rank" in str(w.message) for w in rec)
    assert d.reason() == "precision floor reached" and not bool(d.converged)
    # max_rank below min(m, n): raising it helps, and the message says how far
    with pytest.warns(RuntimeWarning, match=r"not reached at max_rank = 20 .*raise max_rank "
                      r"\(at most min\(m, n\) = 128\)"):
        d = R.interpolative_to_tolerance(key, A, 1e-5, max_rank=20)
    assert int(d.stop_reason) == StopReason.MAX_RANK and d.reason() == "max_rank reached"
    # max_rank = min(m, n) on a matrix of full numerical rank: the whole matrix is the
    # skeleton, an exact (permuted identity) decomposition, not a miss
    G = np.random.default_rng(0).standard_normal((60, 40)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = R.interpolative_to_tolerance(key, G, 1e-9).trim()
    assert int(d.rank) == 40 and bool(d.converged) and float(d.error_estimate) == 0
    np.testing.assert_array_equal(np.asarray(d.C @ d.W), G)
    # a fixed-rank result says so
    f = R.interpolative(key, A, 10)
    assert bool(f.converged) and f.reason() == "fixed rank" and np.isnan(float(f.error_estimate))


@pytest.mark.parametrize("side", ["column", "row", "two_sided"])
def test_same_key_same_bits_and_vmap_equals_eager(side):
    A = gaussian_kernel(N, N).astype(np.float32)
    op = as_input(A, "implicit")
    one = R.interpolative_to_tolerance(KEYS[0], op, 1e-4, side=side, failure_prob=0.01)
    again = R.interpolative_to_tolerance(KEYS[0], op, 1e-4, side=side, failure_prob=0.01)
    for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(again)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    d = one.trim()
    err = np.linalg.norm(A - np.asarray(d.todense(), np.float64)) / np.linalg.norm(A)
    assert bool(d.converged) and err <= float(d.error_estimate) * (1 + 1e-3) <= 1e-4 * 1.001
    if side != "column":         # (the batch program is the certified kernel test's)
        return
    batch = jax.vmap(lambda k: R.interpolative_to_tolerance(k, op, 1e-4, failure_prob=0.01))(
        KEYS)
    for i in range(3):
        e = R.interpolative_to_tolerance(KEYS[i], op, 1e-4, side=side, failure_prob=0.01)
        assert int(batch.rank[i]) == int(e.rank)
        assert bool(batch.converged[i]) == bool(e.converged)
        np.testing.assert_allclose(float(batch.error_estimate[i]), float(e.error_estimate),
                                   rtol=1e-4)
