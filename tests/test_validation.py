"""Every bad input named by the foundation issue raises a clear error naming the argument."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

import rdr_jax as R
from rdr_jax import sketching as S

KEY = jax.random.key(0)
A = np.random.default_rng(0).standard_normal((20, 12)).astype(np.float32)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_entries(bad):
    B = A.copy()
    B[3, 4] = bad
    for fn in (lambda X: R.rsvd(KEY, X, 3), lambda X: R.rangefinder(KEY, X, 3),
               lambda X: R.as_operator(X), lambda X: R.frobenius_norm(KEY, X)):
        with pytest.raises(ValueError, match="A contains 1 non-finite"):
            fn(B)
    with pytest.raises(ValueError, match="non-finite"):
        R.as_operator(sp.csr_matrix(B))


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4), ()])
def test_non_2d(shape):
    with pytest.raises(ValueError, match="A must be a 2-D matrix"):
        R.rsvd(KEY, np.ones(shape, np.float32), 1)


def test_sketch_size_bounds():
    with pytest.raises(ValueError, match=r"l must be >= 1; got 0"):
        R.rangefinder(KEY, A, 0)
    with pytest.raises(ValueError, match=r"l must be <= 12 \(min\(m, n\)"):
        R.rangefinder(KEY, A, 13)
    with pytest.raises(ValueError, match=r"oversample must be >= 0; got -1"):   # l < k
        R.rsvd(KEY, A, 5, oversample=-1)
    with pytest.raises(ValueError, match=r"k must be <= 12"):
        R.rsvd(KEY, A, 13)
    with pytest.raises(ValueError, match="l must be >= 1"):
        S.Gaussian().draw(KEY, 0, 10)
    with pytest.raises(ValueError, match="l must be <= 10"):
        S.SRTT().draw(KEY, 11, 10)
    with pytest.raises(TypeError, match="l must be a Python int"):
        R.rangefinder(KEY, A, 3.0)


def test_negative_power_iters():
    with pytest.raises(ValueError, match="power_iters must be >= 0; got -1"):
        R.rangefinder(KEY, A, 3, power_iters=-1)
    with pytest.raises(ValueError, match="power_iters must be >= 0"):
        R.rsvd(KEY, A, 3, power_iters=-2)


def test_unknown_sketch():
    with pytest.raises(ValueError, match=r"sketch must be one of \['gaussian', 'sparse_sign', 'srtt'\] or a sketch object .*; got 'srft'"):
        R.rsvd(KEY, A, 3, sketch="srft")
    with pytest.raises(ValueError, match="sketch must be one of"):
        S.make_sketch(KEY, "countsketch", 3, 10)
    with pytest.raises(ValueError, match="takes options"):
        S.make_sketch(KEY, "gaussian", 3, 10, zeta=3)
    with pytest.raises(ValueError, match="set them on the object"):
        S.as_sketch(S.SparseSign(), zeta=3)
    with pytest.raises(ValueError, match="generator must be one of"):
        S.Gaussian(generator="philox")
    with pytest.raises(ValueError, match="transform must be one of"):
        S.SRTT(transform="dft")
    with pytest.raises(ValueError, match="a sketch choice: draw the matrix first"):
        S.SparseSign().apply(A)


@pytest.mark.parametrize("zeta", [0, -1, 6])
def test_zeta_range(zeta):
    with pytest.raises(ValueError, match="zeta must be"):
        S.SparseSign(zeta).draw(KEY, 5, 10) if zeta < 1 else S._sparse_sign(KEY, 5, 10, zeta)
    if zeta < 1:
        with pytest.raises(ValueError, match="zeta must be"):
            R.rangefinder(KEY, A, 5, sketch=S.SparseSign(zeta=zeta))
    else:  # the choice object uses min(zeta, l) nonzeros per column (thesis: min(l, 8))
        assert R.rangefinder(KEY, A, 5, sketch=S.SparseSign(zeta=zeta)).shape == (A.shape[0], 5)


def test_unsupported_dtypes():   # integer and bool inputs: tests/test_interop.py
    with pytest.raises(TypeError, match="A has unsupported dtype float16"):
        R.as_operator(np.ones((5, 4), np.float16))
    with pytest.raises(TypeError, match="A has dtype <U1"):
        R.as_operator(np.full((5, 4), "a"))
    with pytest.raises(TypeError, match="A has dtype object"):
        R.as_operator(np.ones((5, 4), object))
    with pytest.raises(TypeError, match="dtype has unsupported dtype complex64"):
        S._sparse_sign(KEY, 4, 10, 2, dtype=np.complex64)
    with pytest.raises(TypeError, match="dtype has unsupported dtype int32"):
        S.Gaussian().draw(KEY, 4, 10, dtype=np.int32)


def test_user_operator_shape_mismatch():
    M = jnp.ones((6, 4))
    with pytest.raises(ValueError, match=r"matmat returned shape \(4, 2\).*expected \(6, 2\)"):
        R.implicit_operator(lambda X: M.T @ M @ X, lambda Y: M.T @ Y, (6, 4))
    with pytest.raises(ValueError, match="rmatmat failed on an input of shape"):
        R.implicit_operator(lambda X: M @ X, lambda Y: M @ Y, (6, 4))
    with pytest.raises(ValueError, match="rows returned shape"):
        R.implicit_operator(lambda X: M @ X, lambda Y: M.T @ Y, (6, 4), rows=lambda I: M[:, I])
    with pytest.raises(TypeError, match="matmat must be callable"):
        R.implicit_operator(M, lambda Y: M.T @ Y, (6, 4))
    with pytest.raises(ValueError, match="factor shapes do not match"):
        R.factored_operator(np.ones((5, 3)), np.ones(2), np.ones((4, 3)))
    with pytest.raises(ValueError, match="A has 10 rows but the sketch has m = 12"):
        S.Gaussian().draw(KEY, 3, 12).apply(np.ones((10, 2), np.float32))


def test_bad_keys_and_estimator_arguments():
    with pytest.raises(TypeError, match="key must be a JAX PRNG key"):
        R.rsvd(0, A, 2)
    with pytest.raises(ValueError, match="single key"):
        R.rsvd(jax.random.split(KEY, 2), A, 2)
    with pytest.raises(ValueError, match="method must be"):
        R.frobenius_norm(KEY, A, method="exact")
    with pytest.raises(ValueError, match="iters must be >= 1"):
        R.spectral_norm(KEY, A, iters=0)
    with pytest.raises(TypeError, match="A must be an array"):
        R.as_operator("not a matrix")


def test_legacy_uint32_key_accepted():
    np.testing.assert_allclose(np.asarray(R.rsvd(jax.random.PRNGKey(0), A, 2).s),
                               np.asarray(R.rsvd(jax.random.wrap_key_data(jax.random.PRNGKey(0)), A, 2).s))
