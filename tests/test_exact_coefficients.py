"""The exact interpolation matrix W = C^+ A: normal-equations route for well-conditioned
64-bit skeletons, QR route otherwise (rdr_jax.decompositions._exact_col_interp)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rdr_jax import decompositions as D
from rdr_jax.operators import as_operator


def _matrix(rng, m, n, cond_c):
    """A (m x n) whose first k = 20 columns C have condition number ``cond_c``."""
    k = 20
    U = np.linalg.qr(rng.standard_normal((m, k)))[0]
    V = np.linalg.qr(rng.standard_normal((k, k)))[0]
    C = (U * np.logspace(0, -np.log10(cond_c), k)) @ V
    rest = C @ rng.standard_normal((k, n - k)) + 1e-3 * rng.standard_normal((m, n - k))
    return np.hstack([C, rest]), k


@pytest.mark.parametrize("cond_c", [10.0, 1e6, 1e9])
def test_w_equals_lstsq_on_both_routes(x64, rng, cond_c):
    A, k = _matrix(rng, 300, 120, cond_c)
    J = jnp.arange(k)
    C = jnp.asarray(A[:, :k])
    G = C.T @ C
    est = float(D._gram_cond2(G, jnp.linalg.cholesky(G))) * np.finfo(np.float64).eps * k
    true = np.linalg.cond(A[:, :k]) ** 2 * np.finfo(np.float64).eps * k
    if cond_c < 1e8:                                # else the Cholesky of G fails: NaN
        assert true / 5 <= est <= true * k * 5      # trace(G) overestimates by <= k
    normal = bool(est <= D._NORMAL_EQ_TOL)
    assert normal == (cond_c == 10.0)               # well-conditioned: normal equations
    W, nr, _ = jax.jit(lambda A, C, J: D._exact_col_interp(as_operator(A), C, J))(
        jnp.asarray(A), C, J)
    W = np.asarray(W)
    want = np.linalg.lstsq(A[:, :k], A, rcond=None)[0]
    np.testing.assert_array_equal(W[:, :k], np.eye(k))
    # residuals agree to rounding; coefficients to u cond(C)^2 (normal) / u cond(C) (QR)
    res = np.linalg.norm(A - A[:, :k] @ W)
    res_want = np.linalg.norm(A - A[:, :k] @ want)
    assert res <= res_want * (1 + 1e-8) + 1e-12 * np.linalg.norm(A)
    if normal:
        np.testing.assert_allclose(W, want, rtol=0, atol=1e-10 * np.abs(want).max())
    assert int(nr) == k


def test_rank_deficient_skeleton_takes_the_qr_route(x64, rng):
    A = rng.standard_normal((200, 5)) @ rng.standard_normal((5, 60))
    J = jnp.arange(10)                               # 10 columns of a rank-5 matrix
    W, nr, _ = D._exact_col_interp(as_operator(jnp.asarray(A)), jnp.asarray(A[:, :10]), J)
    assert np.all(np.isfinite(np.asarray(W))) and int(nr) == 5
    np.testing.assert_allclose(A[:, :10] @ np.asarray(W), A, atol=1e-9 * np.abs(A).max())
