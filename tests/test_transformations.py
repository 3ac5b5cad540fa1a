"""Issue 12: every core entry point is pure under jax.jit (operands as jit arguments) and
jax.vmap over keys, rsvd/rangefinder are differentiable with every sketch, repeat calls do
not retrace, and degenerate inputs never give silent NaNs."""

import jax
import jax.experimental.sparse as jsparse
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

import rdr_jax as R
from rdr_jax.id_cur import decompositions as D
from rdr_jax import randomized_svd as RS
from rdr_jax.id_cur import selection as SL

KEYS = jax.random.split(jax.random.key(0), 3)


def low_rank(m, n, k, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.standard_normal((m, k)))[0]
    V = np.linalg.qr(rng.standard_normal((n, k)))[0]
    return ((U * np.geomspace(1, 0.1, k)) @ V.T).astype(dtype)


A = low_rank(40, 30, 5)
ENTRY_POINTS = {
    "rsvd": lambda key, A: R.rsvd(key, A, 5).s,
    "rangefinder": lambda key, A: R.rangefinder(key, A, 6),
    "interpolative": lambda key, A: R.interpolative(key, A, 5).W,
    "interpolative_to_tolerance": lambda key, A: R.interpolative_to_tolerance(
        key, A, 1e-3, max_rank=12).rank,
    "cur": lambda key, A: R.cur(key, A, 5).U,
    "select_columns": lambda key, A: R.select_columns(key, A, 5).cols,
    "select_rows": lambda key, A: R.select_rows(key, A, 5).rows,
    "select_skeletons": lambda key, A: R.select_skeletons(key, A, 5).rows,
    "streaming_skeletons": lambda key, A: R.streaming_skeletons(
        key, A.reshape(4, 10, 30), A.shape, 5).cols,
    "id_to_svd": lambda key, A: R.id_to_svd(R.interpolative(key, A, 5)).s,
    "lowrank_error": lambda key, A: R.lowrank_error(A, R.cur(key, A, 4)).fro,
    "eta_bound": lambda key, A: R.eta_bound(A, R.select_columns(key, A, 4)).fro,
}


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_jit_and_vmap_over_keys_match_eager(name):
    f = ENTRY_POINTS[name]
    eager = np.stack([np.asarray(f(k, A)) for k in KEYS])
    jitted = np.stack([np.asarray(jax.jit(f)(k, jnp.asarray(A))) for k in KEYS])
    batched = np.asarray(jax.vmap(f, in_axes=(0, None))(KEYS, jnp.asarray(A)))
    tol = dict(rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(jitted, eager, **tol)
    np.testing.assert_allclose(batched, eager, **tol)


@pytest.mark.parametrize("kind", ["bcoo", "scipy_operator"])
def test_sparse_inputs_as_jit_arguments(kind):
    Asp = sp.csr_matrix(np.where(np.abs(A) > 0.02, A, 0))
    ref = R.cur(KEYS[0], Asp, 5)
    arg = jsparse.BCOO.from_scipy_sparse(Asp) if kind == "bcoo" else R.as_operator(Asp)
    got = jax.jit(lambda key, B: R.cur(key, B, 5))(KEYS[0], arg)
    np.testing.assert_array_equal(np.asarray(got.cols), np.asarray(ref.cols))
    np.testing.assert_array_equal(np.asarray(got.rows), np.asarray(ref.rows))
    np.testing.assert_allclose(np.asarray(got.U), np.asarray(ref.U), rtol=1e-4, atol=1e-5)
    cid = jax.jit(lambda key, B: R.interpolative(key, B, 5, side="row"))(KEYS[0], arg)
    ref = R.interpolative(KEYS[0], Asp, 5, side="row")
    np.testing.assert_array_equal(np.asarray(cid.rows), np.asarray(ref.rows))
    np.testing.assert_allclose(np.asarray(cid.W), np.asarray(ref.W), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("sketch", ["gaussian", "srtt", "sparse_sign"])
def test_grad_through_rsvd_and_rangefinder(sketch):
    """d/dA sum(s_1..k) = U_k V_k^T for the exact SVD; the rSVD of an exactly rank-5 matrix
    with l > 5 recovers it, so its gradient must match the closed form."""
    B = jnp.asarray(A, jnp.float32)
    g = jax.grad(lambda X: jnp.sum(R.rsvd(KEYS[1], X, 5, sketch=sketch).s))(B)
    U, s, Vt = np.linalg.svd(A.astype(np.float64))
    np.testing.assert_allclose(np.asarray(g), U[:, :5] @ Vt[:5], atol=5e-3)
    # rangefinder: ||Q Q^T A||_F^2 is invariant to A's perturbations within its range;
    # compare with central finite differences along a random direction
    f = lambda X: jnp.sum(R.rangefinder(KEYS[1], X, 7, sketch=sketch) ** 2 @ jnp.ones((7,)))
    gd = jax.grad(f)(B)
    assert gd.shape == B.shape and bool(jnp.all(jnp.isfinite(gd)))


def test_no_retrace_on_repeat_calls():
    B = jnp.asarray(A)
    fns = (D._interpolative, D._cur, SL._select_columns, RS._rsvd_jit, RS._range_jit,
           D._interpolative_tol)
    calls = lambda X, key, tol: (R.interpolative(key, X, 4), R.cur(key, X, 4),
                                  R.select_columns(key, X, 4), R.rsvd(key, X, 4),
                                  R.rangefinder(key, X, 5),
                                  R.interpolative_to_tolerance(key, X, tol, max_rank=10))
    jax.block_until_ready(calls(B, KEYS[0], 1e-2))
    sizes = [f._cache_size() for f in fns]
    jax.block_until_ready(calls(B * 2.0 + 1.0, KEYS[1], 1e-3))  # new values, key and tol
    assert [f._cache_size() for f in fns] == sizes


# --------------------------------------------------------------------------------------
# no silent wrong answers
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("scale", [1e-30, 1e-18, 1.0, 1e20, 1e30])
def test_certificate_true_and_finite_at_any_float32_scale(scale):
    rng = np.random.default_rng(3)
    U = np.linalg.qr(rng.standard_normal((50, 30)))[0]
    V = np.linalg.qr(rng.standard_normal((30, 30)))[0]
    base = ((U * 0.7 ** np.arange(30)) @ V.T)
    As = (base * scale).astype(np.float32)
    for key in KEYS:
        c = R.cur(key, As, 6)
        i = R.interpolative(key, As, 6)
        # Thm 2.3 for the column selection both drew (the first of three subkeys), and
        # Eq. (2.26) for CUR: ||A - CUR||_F <= sqrt(1 + eta_rows^2) eta ||A - A W^+ W||_F
        k1 = jax.random.split(key, 3)[0]
        eb = R.eta_bound(As, R.select_columns(k1, As, 6))
        ref = R.eta_bound(base.astype(np.float32), R.select_columns(k1, base.astype(np.float32), 6))
        np.testing.assert_allclose(eb.fro / scale, ref.fro, rtol=1e-2)
        for d in (c, i):
            bound, eta = eb.fro, float(d.eta)
            if d is c:
                bound *= np.sqrt(1.0 + float(c.eta_rows) ** 2)
            assert np.isfinite(bound) and np.isfinite(eta) and eta >= 1.0
            true = np.linalg.norm(As.astype(np.float64) - np.asarray(d.todense(), np.float64))
            assert true <= bound * (1 + 1e-3), (scale, true, bound)


@pytest.mark.parametrize("value", [0.0, 1e-42])
def test_zero_and_subnormal_inputs_warn_and_stay_finite(value):
    Z = np.full((20, 15), value, np.float32)
    with pytest.warns(RuntimeWarning, match="numerically zero"):
        c = jax.block_until_ready(R.cur(KEYS[0], Z, 3))
    for leaf in jax.tree_util.tree_leaves(c):
        assert np.all(np.isfinite(np.asarray(leaf)))
    assert float(c.eta) == 1.0
    # Thm 2.3 stays finite and true (0 for the zero matrix)
    eb = R.eta_bound(Z, R.select_columns(jax.random.split(KEYS[0], 3)[0], Z, 3))
    assert np.isfinite(eb.fro) and eb.eta == 1.0
    assert eb.fro <= np.linalg.norm(Z.astype(np.float64)) * (1 + 1e-6)
    d = R.interpolative_to_tolerance(KEYS[0], Z, 1e-3, max_rank=10)
    assert bool(jnp.all(jnp.isfinite(d.W))) and bool(jnp.isfinite(d.error_estimate))
    if value == 0.0:  # fixed accuracy on a zero matrix: rank 0
        assert int(d.rank) == 0


def test_lowrank_error_and_eta_bound_say_when_approx_is_of_another_matrix():
    B = low_rank(40, 30, 5, seed=9)
    c = R.cur(KEYS[0], B, 5)
    with pytest.warns(RuntimeWarning, match="another matrix"):
        R.lowrank_error(A, c)
    with pytest.raises(ValueError, match="not a low-rank approximation of this A"):
        R.lowrank_error(A[:, :20], c)
    sel = R.select_columns(KEYS[0], B + 0.5 * low_rank(40, 30, 8, seed=4), 3)
    # Thm 2.1 holds for any interpolation matrix with W(:, cols) = I and eta = ||W||_2,
    # so a selection of another matrix still gives a true (if loose) bound ...
    cert = R.eta_bound(A, sel)
    C = A[:, np.asarray(sel.cols)].astype(np.float64)
    true = np.linalg.norm(A - C @ np.linalg.lstsq(C, A, rcond=None)[0])
    assert true <= cert.fro * (1 + 1e-5)
    # ... but a certificate that is not ||W||_2, or W without the identity block, is refused
    with pytest.raises(ValueError, match=r"not \|\|W\|\|_2"):
        R.eta_bound(A, sel._replace(eta=sel.eta * 0.5))
    with pytest.raises(ValueError, match="not the identity"):
        R.eta_bound(A, sel._replace(W=sel.W * 2))
    with pytest.raises(ValueError, match="does not fit"):
        R.eta_bound(A[:, :20], sel)


def test_nan_in_a_jax_array_warns_from_the_computation():
    """numpy inputs are checked at the boundary (ValueError, tests/test_cur.py); a jax array
    is checked inside the computation (no host pass over A): NaN results come with a word."""
    bad = jnp.asarray(A).at[3, 4].set(jnp.nan)
    for f in (lambda: R.cur(KEYS[0], bad, 4, on_rank_deficient="ignore"),
              lambda: R.interpolative(KEYS[0], bad, 4, on_rank_deficient="ignore"),
              lambda: R.select_columns(KEYS[0], bad, 4),
              lambda: R.rsvd(KEYS[0], bad, 4)):
        with pytest.warns(RuntimeWarning, match="NaN or Inf"):
            jax.block_until_ready(f())
    with pytest.raises(ValueError, match="non-finite"):
        R.cur(KEYS[0], np.asarray(bad), 4)
