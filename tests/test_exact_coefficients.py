"""The exact interpolation matrix W = C^+ A by sketch-preconditioned CholeskyQR
(rdr_jax.id_cur.decompositions._exact_coefficients, rdr_jax._src.linalg.precond_qr): equal to least
squares on well-conditioned, ill-conditioned and rank-deficient skeleton blocks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rdr_jax._src import linalg as L
from rdr_jax.id_cur import decompositions as D
from rdr_jax.id_cur import selection as SL
from rdr_jax.operators import as_operator


def _matrix(rng, m, n, cond_c):
    """A (m x n) whose first k = 20 columns C have condition number ``cond_c``."""
    k = 20
    U = np.linalg.qr(rng.standard_normal((m, k)))[0]
    V = np.linalg.qr(rng.standard_normal((k, k)))[0]
    C = (U * np.logspace(0, -np.log10(cond_c), k)) @ V
    rest = C @ rng.standard_normal((k, n - k)) + 1e-3 * rng.standard_normal((m, n - k))
    return np.hstack([C, rest]), k


def _coefficients(A, k, key=0):
    """W for the skeleton ``cols = 0..k-1`` with the preconditioner of a Gaussian sketch of C
    (what the pipeline uses)."""
    op = as_operator(jnp.asarray(A))
    sz = SL.Sizes(k, k + 10, k, k + 10)
    J = jnp.arange(k)
    C = op.cols(J)
    P, keep = D._c_preconditioner(jax.random.key(key), C, None, sz)
    return jax.jit(lambda C, P, keep: D._exact_coefficients(op, C, J, P, keep, sz)[:2])(C, P, keep)


@pytest.mark.parametrize("cond_c", [10.0, 1e6, 1e9])
def test_w_equals_lstsq(x64, rng, cond_c):
    A, k = _matrix(rng, 300, 120, cond_c)
    W, nr = _coefficients(A, k)
    W = np.asarray(W)
    want = np.linalg.lstsq(A[:, :k], A, rcond=None)[0]
    np.testing.assert_array_equal(W[:, :k], np.eye(k))
    # residuals agree to rounding; coefficients to ~u cond(C)
    res = np.linalg.norm(A - A[:, :k] @ W)
    res_want = np.linalg.norm(A - A[:, :k] @ want)
    assert res <= res_want * (1 + 1e-8) + 1e-12 * np.linalg.norm(A)
    np.testing.assert_allclose(W, want, rtol=0,
                               atol=1e-12 * cond_c * np.abs(want).max())
    assert int(nr) == k


def test_rank_deficient_skeleton(x64, rng):
    A = rng.standard_normal((200, 5)) @ rng.standard_normal((5, 60))
    W, nr = _coefficients(A, 10)                       # 10 columns of a rank-5 matrix
    W = np.asarray(W)
    assert np.all(np.isfinite(W)) and int(nr) == 5
    np.testing.assert_allclose(A[:, :10] @ W, A, atol=1e-12 * np.abs(A).max())
    assert np.abs(W).max() < 10                        # no amplified rounding noise


def test_precond_qr_is_a_qr_on_the_numerical_rank(x64, rng):
    """Y = Q R, Q^H Q Z = I on the kept block, R upper triangular; padding columns stay out;
    a zero block has rank 0."""
    Y = rng.standard_normal((100, 8)) @ np.diag(np.logspace(0, -8, 8))
    Y = np.concatenate([Y, np.zeros((100, 4))], axis=1)
    valid = np.arange(12) < 8
    P = np.linalg.qr(Y[:20], mode="r") + np.diag((~valid).astype(Y.dtype))
    precond_qr = jax.jit(L.precond_qr)        # as the pipelines call it (one program a shape)
    Q, R, Z, nr = (np.asarray(x) for x in precond_qr(Y, P, valid))
    assert int(nr) == 8
    np.testing.assert_allclose((Q @ R)[:, :8], Y[:, :8], atol=1e-13 * np.abs(Y).max())
    np.testing.assert_allclose((Z @ (Q.T @ Q))[:8, :8], np.eye(8), atol=1e-12)
    assert np.all(Q[:, 8:] == 0)
    np.testing.assert_array_equal(np.tril(R, -1), 0)
    Q0, R0, Z0, nr0 = precond_qr(np.zeros((50, 4)), np.eye(4), np.ones(4, bool))
    assert int(nr0) == 0 and float(np.abs(np.asarray(Q0)).max()) == 0.0
