"""Inputs as scipy and scikit-learn users pass them: scipy LinearOperators, integer and bool
matrices, and implicit operators whose dtype comes from their callables."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from jax.experimental import sparse as jsparse

import rdr_jax as R
from rdr_jax.operators import DenseOperator, ImplicitOperator, SparseOperator

KEY = jax.random.key(0)


def _lowrank(rng, m=40, n=30, r=5, complex_=False):
    A = rng.standard_normal((m, r)) @ rng.standard_normal((r, n))
    if complex_:
        A = A + 1j * (rng.standard_normal((m, r)) @ rng.standard_normal((r, n)))
    return A


# --------------------------------------------------------------------------------------
# scipy LinearOperator
# --------------------------------------------------------------------------------------
def test_matrix_linear_operator_is_unwrapped(rng):
    """aslinearoperator(M) is a MatrixLinearOperator: rdr_jax computes on M itself, so the
    results are those of M (same key, same numbers)."""
    with jax.enable_x64(True):
        A = _lowrank(rng)
        op = R.as_operator(spla.aslinearoperator(A))
        assert isinstance(op, DenseOperator) and op.dtype == np.float64
        np.testing.assert_array_equal(np.asarray(op.todense()), A)
        assert isinstance(R.as_operator(spla.aslinearoperator(sp.csr_matrix(A))), SparseOperator)
        np.testing.assert_array_equal(np.asarray(R.rsvd(KEY, spla.aslinearoperator(A), 4).s),
                                      np.asarray(R.rsvd(KEY, A, 4).s))
        Ah = R.as_operator(spla.aslinearoperator(A).H)          # the adjoint keeps its matrix
        np.testing.assert_array_equal(np.asarray(Ah.todense()), A.T)


def test_custom_scipy_linear_operator_runs_through_a_host_callback(rng):
    with jax.enable_x64(True):
        A = _lowrank(rng)
        calls = []

        def matvec(x):
            calls.append(1)
            return A @ x

        L = spla.LinearOperator(A.shape, matvec=matvec, rmatvec=lambda y: A.T @ y,
                                matmat=lambda X: A @ X, rmatmat=lambda Y: A.T @ Y,
                                dtype=np.float64)
        op = R.as_operator(L)
        assert isinstance(op, ImplicitOperator) and op.dtype == np.float64
        X = rng.standard_normal((30, 3))
        Y = rng.standard_normal((40, 2))
        np.testing.assert_allclose(np.asarray(op.matmat(jnp.asarray(X))), A @ X, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(jax.jit(op.rmatmat)(jnp.asarray(Y))), A.T @ Y,
                                   rtol=1e-12)
        batched = jax.vmap(op.matmat)(jnp.stack([jnp.asarray(X), 2 * jnp.asarray(X)]))
        np.testing.assert_allclose(np.asarray(batched[1]), 2 * A @ X, rtol=1e-12)
        s = np.asarray(R.rsvd(KEY, L, 4, power_iters=2).s)
        np.testing.assert_allclose(s, np.linalg.svd(A, compute_uv=False)[:4], rtol=1e-8)
        np.testing.assert_allclose(float(R.spectral_norm(KEY, L, iters=50)),
                                   np.linalg.norm(A, 2), rtol=1e-8)
        # the same scipy object gives the same static callables: no recompilation
        assert R.as_operator(L).matmat_fn == op.matmat_fn


def test_scipy_linear_operator_integer_and_complex_dtypes(rng):
    with jax.enable_x64(True):
        M = rng.integers(-3, 4, (6, 5))
        L = spla.LinearOperator(M.shape, matvec=lambda x: M @ x, rmatvec=lambda y: M.T @ y,
                                dtype=M.dtype)
        op = R.as_operator(L)
        assert op.dtype == np.float64
        np.testing.assert_array_equal(np.asarray(op.todense()), M.astype(np.float64))
        C = _lowrank(rng, 8, 6, 2, complex_=True)
        Lc = spla.LinearOperator(C.shape, matvec=lambda x: C @ x,
                                 rmatvec=lambda y: C.conj().T @ y, dtype=C.dtype)
        opc = R.as_operator(Lc)
        assert opc.dtype == np.complex128
        np.testing.assert_allclose(np.asarray(opc.H.todense()), C.conj().T, rtol=1e-12)
    with pytest.raises(ValueError, match="A.shape\\[0\\] must be >= 1"):
        R.as_operator(spla.LinearOperator((0, 3), matvec=lambda x: x[:0], dtype=np.float32))


# --------------------------------------------------------------------------------------
# integer and bool input
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", [np.int64, np.int32, np.uint8, np.bool_])
def test_integer_and_bool_input_becomes_float64(dt, rng):
    M = rng.integers(0, 2 if dt == np.bool_ else 5, (12, 9)).astype(dt)
    want = M.astype(np.float64)
    with jax.enable_x64(True), warnings.catch_warnings():
        warnings.simplefilter("error")
        for A in (M, jnp.asarray(M), sp.csr_matrix(M), jsparse.BCOO.fromdense(jnp.asarray(M))):
            op = R.as_operator(A)
            assert op.dtype == np.float64, type(A)
            np.testing.assert_array_equal(op.to_numpy(), want)
        ref = R.rsvd(KEY, want, 3)
        np.testing.assert_array_equal(np.asarray(R.rsvd(KEY, M, 3).s), np.asarray(ref.s))


def test_integer_input_without_x64_is_float32_with_the_downcast_warning(rng):
    M = rng.integers(0, 5, (12, 9))
    with jax.enable_x64(False):
        with pytest.warns(UserWarning, match="A is int64 .*computed as float64.* float32"):
            op = R.as_operator(M)
        assert op.dtype == np.float32
        with pytest.warns(UserWarning, match="jax_enable_x64 is off"):
            R.as_operator(sp.csr_matrix(M))


def test_float32_stays_float32(rng):
    A = rng.standard_normal((8, 6)).astype(np.float32)
    with jax.enable_x64(True), warnings.catch_warnings():
        warnings.simplefilter("error")
        for X in (A, jnp.asarray(A), sp.csr_matrix(A)):
            assert R.as_operator(X).dtype == np.float32
        assert R.rsvd(KEY, A, 2).s.dtype == np.float32


# --------------------------------------------------------------------------------------
# implicit_operator infers its dtype
# --------------------------------------------------------------------------------------
def _implicit(A, dtype=None):
    Aj = jnp.asarray(A)
    return R.implicit_operator(lambda X: Aj @ X, lambda Y: Aj.conj().T @ Y, A.shape, dtype)


def test_implicit_operator_infers_dtype_from_callables(rng):
    A = _lowrank(rng)
    with jax.enable_x64(True):
        assert _implicit(A).dtype == np.float64
        assert _implicit(A.astype(np.complex64)).dtype == np.complex128   # promoted, complex
        assert _implicit(A + 0j).dtype == np.complex128
        assert _implicit(A.astype(np.float32), np.float32).dtype == np.float32
    with jax.enable_x64(False):
        assert _implicit(A.astype(np.float32)).dtype == np.float32
        assert _implicit(A.astype(np.complex64)).dtype == np.complex64


def test_implicit_operator_refuses_a_dtype_mismatch(rng):
    with jax.enable_x64(True):
        C = _lowrank(rng, complex_=True)
        with pytest.raises(TypeError, match="matmat returns complex128 for an input of dtype "
                                            "float64.*pass dtype=complex128"):
            _implicit(C, np.float64)
        with pytest.raises(TypeError, match="matmat returns float64 .* dtype is float32"):
            _implicit(_lowrank(rng), np.float32)
        Aj = jnp.asarray(_lowrank(rng))
        with pytest.raises(TypeError, match="rows returns float32"):
            R.implicit_operator(lambda X: Aj @ X, lambda Y: Aj.T @ Y, Aj.shape,
                                rows=lambda I: Aj[I].astype(jnp.float32))


def test_complex_implicit_operator_norms_and_decompositions(rng):
    """The issue's silent wrong answer: complex callables without a dtype were taken as
    float64, so interpolative dropped the imaginary part and spectral_norm failed."""
    with jax.enable_x64(True):
        C = _lowrank(rng, 60, 50, 8, complex_=True)
        op = _implicit(C)
        assert op.dtype == np.complex128
        np.testing.assert_allclose(float(R.spectral_norm(KEY, op, iters=100)),
                                   np.linalg.norm(C, 2), rtol=1e-5)
        np.testing.assert_allclose(float(R.frobenius_norm(KEY, op, num_vectors=60)),
                                   np.linalg.norm(C), rtol=1e-8)   # exact: rank 16 <= 60/3
        rel = lambda Ah: np.linalg.norm(C - Ah) / np.linalg.norm(C)  # noqa: E731
        idr = R.interpolative(KEY, op, 16)           # C has rank 16
        Cs = C[:, np.asarray(idr.cols)]
        assert rel(Cs @ np.asarray(idr.W)) < 1e-8
        tol = R.interpolative_to_tolerance(KEY, op, 1e-8)
        assert rel(C[:, np.asarray(tol.cols)] @ np.asarray(tol.W)) < 1e-6
