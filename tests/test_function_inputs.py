"""A function as a matrix (issue 29): scipy LinearOperators without an adjoint and bare
callables are refused at the boundary with the fix in the message; implicit operators take
their data as pytree leaves (``jax.tree_util.Partial``), which keeps them out of the compiled
program's constants, and a closure over a large array is warned about once."""

import functools
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse.linalg as spla
from jax.tree_util import Partial

import rdr_jax as R
from rdr_jax import operators
from rdr_jax.operators import ImplicitOperator
from tests.conftest import rtol

KEY = jax.random.key(0)
#: the smallest captured array the warning is about (operators._BIG_CAPTURE elements)
BIG = (400, 250)


def _decaying(rng, m=60, n=40, dtype=np.float64):
    """A matrix with singular values 2^-i: well separated, so pivots are not near ties."""
    U, _ = np.linalg.qr(rng.standard_normal((m, n)))
    V, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return ((U * 2.0 ** -np.arange(n)) @ V.T).astype(dtype)


def _mm(A, X):
    return A @ X


def _rmm(A, Y):
    return A.conj().T @ Y


def _partial_op(A):
    Aj = jnp.asarray(A)
    return R.implicit_operator(Partial(_mm, Aj), Partial(_rmm, Aj), Aj.shape)


def _entry_points():
    return {
        "interpolative": lambda A: R.interpolative(KEY, A, 5),
        "rsvd": lambda A: R.rsvd(KEY, A, 5),
        "interpolative_to_tolerance": lambda A: R.interpolative_to_tolerance(KEY, A, 1e-2),
        "cur": lambda A: R.cur(KEY, A, 5),
    }


# --------------------------------------------------------------------------------------
# scipy LinearOperator without an adjoint
# --------------------------------------------------------------------------------------
class _OnlyMatvec(spla.LinearOperator):
    """A subclass that defines A x only (scipy's ``_rmatvec`` raises NotImplementedError)."""

    def __init__(self, A):
        super().__init__(A.dtype, A.shape)
        self.M = A

    def _matvec(self, x):
        return self.M @ x


def _no_adjoint(kind, A):
    L = spla.LinearOperator(A.shape, matvec=lambda x: A @ x, dtype=A.dtype)
    if kind == "matvec_only":
        return L
    if kind == "subclass":
        return _OnlyMatvec(A)
    if kind == "product":                 # scipy composes lazily: the product lacks A^H too
        return spla.aslinearoperator(np.eye(A.shape[0], dtype=A.dtype)) @ L
    if kind == "scaled_sum":
        return A.dtype.type(2) * L + L
    raise AssertionError(kind)


ADJOINT_MISSING = r"scipy LinearOperator without the product A\^H Y \(no rmatvec/rmatmat.*" \
                  r"needs both A X and A\^H Y.*rdr_jax\.implicit_operator\(matmat, rmatmat, shape\)"


@pytest.mark.parametrize("kind", ["matvec_only", "subclass", "product", "scaled_sum"])
def test_scipy_operator_without_rmatvec_is_refused_at_the_boundary(kind, rng):
    A = rng.standard_normal((30, 20)).astype(np.float32)
    L = _no_adjoint(kind, A)
    with pytest.raises(TypeError, match=ADJOINT_MISSING):
        R.as_operator(L)
    for name, call in _entry_points().items():
        with pytest.raises(TypeError, match=ADJOINT_MISSING) as info:
            call(L)
        # raised by rdr_jax's boundary check, not by a host callback inside a compiled program
        assert "pure_callback" not in str(info.value) and "XlaRuntimeError" not in repr(info.value)
        assert info.value.__cause__ is None, name


def test_scipy_adjoint_of_a_matvec_only_operator_lacks_the_forward_product(rng):
    A = rng.standard_normal((30, 20)).astype(np.float32)
    L = spla.LinearOperator(A.shape, matvec=lambda x: A @ x, dtype=A.dtype)
    with pytest.raises(TypeError, match=r"without the product A X \(no matvec/matmat"):
        R.rsvd(KEY, L.H, 3)


def test_scipy_operator_whose_products_fail_or_misbehave(rng):
    A = rng.standard_normal((30, 20)).astype(np.float32)

    def broken(y):
        raise ValueError("solver diverged")

    L = spla.LinearOperator(A.shape, matvec=lambda x: A @ x, rmatvec=broken, dtype=A.dtype)
    with pytest.raises(ValueError, match=r"A\.rmatmat .*failed on a zero block of shape "
                                         r"\(30, 1\): ValueError: solver diverged"):
        R.interpolative(KEY, L, 3)
    W = spla.LinearOperator(A.shape, matvec=lambda x: A @ x, rmatvec=lambda y: A.T @ y,
                            rmatmat=lambda Y: A.T @ Y[:, :0], dtype=A.dtype)
    with pytest.raises(ValueError, match=r"A\.rmatmat returned shape \(20, 0\) .*expected "
                                         r"\(20, 1\)"):
        R.rsvd(KEY, W, 3)


def _id_error(A, res):
    A = A.astype(np.float64)
    return np.linalg.norm(A - A[:, np.asarray(res.cols)] @ np.asarray(res.W, np.float64))


def test_scipy_operator_with_rmatvec_matches_the_dense_matrix(dtype, rng):
    """A LinearOperator with rmatvec works (its products run on the host through a
    callback, in float64 too under the thread-local ``jax.enable_x64``): the same key picks
    the same skeletons as the dense matrix, and the same numbers as the same matrix given as
    an implicit operator (the dense path sketches A directly, an implicit one through A^H, so
    W agrees with the dense W to the sketch's rounding, not bitwise)."""
    A = _decaying(rng, dtype=dtype)
    L = spla.LinearOperator(A.shape, matvec=lambda x: A @ x, rmatvec=lambda y: A.T @ y,
                            dtype=dtype)
    tol = 100 * rtol(dtype)
    got, dense, implicit = (R.interpolative(KEY, X, 5) for X in (L, A, _partial_op(A)))
    for ref in (dense, implicit):
        np.testing.assert_array_equal(np.asarray(got.cols), np.asarray(ref.cols))
    np.testing.assert_allclose(np.asarray(got.W), np.asarray(implicit.W), rtol=tol, atol=tol)
    np.testing.assert_allclose(_id_error(A, got), _id_error(A, dense), rtol=1e-3)
    np.testing.assert_allclose(np.asarray(R.rsvd(KEY, L, 5).s), np.asarray(R.rsvd(KEY, A, 5).s),
                               rtol=tol)
    t_got = R.interpolative_to_tolerance(KEY, L, 1e-3)
    t_ref = R.interpolative_to_tolerance(KEY, A, 1e-3)
    np.testing.assert_array_equal(np.asarray(t_got.cols), np.asarray(t_ref.cols))


# --------------------------------------------------------------------------------------
# a bare function as A
# --------------------------------------------------------------------------------------
def _named_matmat(X):
    return X


@pytest.mark.parametrize("f,shown", [
    (_named_matmat, r"implicit_operator\(_named_matmat, _named_matmat_adjoint, \(m, n\)\)"),
    (lambda X: X, r"implicit_operator\(matmat, matmat_adjoint, \(m, n\)\)"),
    (functools.partial(jnp.matmul, jnp.ones((3, 3))), r"implicit_operator\(matmat, "),
    (Partial(_mm, jnp.ones((3, 3))), r"implicit_operator\(matmat, "),
])
def test_bare_callable_names_implicit_operator_and_the_fix(f, shown):
    pattern = r"A is a callable .*needs both products A @ X and A\^H @ Y.*rdr_jax\." + shown
    with pytest.raises(TypeError, match=pattern):
        R.as_operator(f)
    for call in _entry_points().values():
        with pytest.raises(TypeError, match=pattern):
            call(f)


# --------------------------------------------------------------------------------------
# implicit_operator with its data as pytree leaves
# --------------------------------------------------------------------------------------
def _largest_constant(hlo: str) -> int:
    """Number of elements of the largest constant in a lowered (StableHLO) program."""
    sizes = [int(np.prod([int(d) for d in m.group(1).split("x") if d] or [1]))
             for m in re.finditer(r"stablehlo\.constant .*: tensor<((?:\d+x)*)\w+>", hlo)]
    return max(sizes, default=0)


def test_partial_keeps_the_data_out_of_the_compiled_program(rng):
    A = jnp.asarray(rng.standard_normal(BIG).astype(np.float32))
    X = jnp.ones((BIG[1], 3), jnp.float32)
    apply = jax.jit(lambda op, X: op.matmat(X))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)       # the closure warning, tested below
        closure = R.implicit_operator(lambda X: A @ X, lambda Y: A.T @ Y, A.shape)
    # the check can decide: the closure's array is a constant of its program
    assert _largest_constant(apply.lower(closure, X).as_text()) == A.size
    op = _partial_op(A)
    assert isinstance(op, ImplicitOperator)
    assert any(leaf is A for leaf in jax.tree_util.tree_leaves(op))   # A is a pytree leaf
    assert _largest_constant(apply.lower(op, X).as_text()) < 1000
    assert _largest_constant(apply.lower(op.H, A @ X).as_text()) < 1000
    # a whole decomposition inside the caller's jit: still no copy of A among the constants
    lowered = jax.jit(lambda key, op: R.rsvd(key, op, 5)).lower(KEY, op).as_text()
    assert _largest_constant(lowered) < 1000
    # a new Partial of the same function over another array of the same shape: no recompile
    apply(op, X)
    apply(_partial_op(2 * A), X)
    assert apply._cache_size() == 1


def test_partial_gathers_and_adjoint_are_traced_too(rng):
    A = jnp.asarray(rng.standard_normal(BIG).astype(np.float32))
    op = R.implicit_operator(Partial(_mm, A), Partial(_rmm, A), A.shape,
                             rows=Partial(lambda A, I: A[I], A),
                             cols=Partial(lambda A, J: A[:, J], A))
    I = jnp.array([3, 0, 7])
    for f in (lambda op, I: op.rows(I), lambda op, I: op.H.rows(I), lambda op, I: op.H.cols(I)):
        assert _largest_constant(jax.jit(f).lower(op, I).as_text()) < 1000
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda op, I: op.H.rows(I))(op, I)),
                                  np.asarray(A.T[I]))
    np.testing.assert_array_equal(np.asarray(op.H.H.cols(I)), np.asarray(A[:, I]))


def test_partial_operator_gives_the_dense_decompositions(dtype, rng):
    A = _decaying(rng, dtype=dtype)
    op = _partial_op(A)
    assert op.dtype == dtype
    tol = 100 * rtol(dtype)
    np.testing.assert_allclose(np.asarray(R.rsvd(KEY, op, 5).s), np.asarray(R.rsvd(KEY, A, 5).s),
                               rtol=tol)
    # against the exact SVD: rsvd's error here is about (sigma_16 / sigma_5)^2 = 2^-22
    np.testing.assert_allclose(np.asarray(R.rsvd(KEY, op, 5).s),
                               np.linalg.svd(A.astype(np.float64), compute_uv=False)[:5],
                               rtol=max(tol, 1e-5))
    got, ref = R.interpolative(KEY, op, 5), R.interpolative(KEY, A, 5)
    np.testing.assert_array_equal(np.asarray(got.cols), np.asarray(ref.cols))
    np.testing.assert_allclose(np.asarray(got.W), np.asarray(ref.W), rtol=tol, atol=tol)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda o: o.todense())(op)), A, rtol=tol)


def test_a_partial_with_non_array_arguments_stays_static(rng):
    """Only Partials whose leaves are JAX values travel as leaves; others keep working as
    static callables (as before)."""
    A = jnp.asarray(rng.standard_normal((6, 4)).astype(np.float32))

    def mm(A, how, X):
        return A @ X if how == "plain" else None

    op = R.implicit_operator(Partial(mm, A, "plain"), Partial(_rmm, A), A.shape)
    leaves = jax.tree_util.tree_leaves(op)
    assert len(leaves) == 1 and leaves[0] is A                     # rmatmat's A only
    np.testing.assert_allclose(np.asarray(jax.jit(lambda o: o.todense())(op)), np.asarray(A),
                               rtol=1e-6)


# --------------------------------------------------------------------------------------
# the warning about a closure over a large array
# --------------------------------------------------------------------------------------
CAPTURE = r"matmat captures a float32 array of shape \(400, 250\).*jax\.tree_util\.Partial"
BIG_GLOBAL = None


@pytest.fixture
def fresh_warning(monkeypatch):
    """The warning is shown once per process: reset its flag for each test."""
    monkeypatch.setattr(operators, "_capture_warned", False)


def _quiet(f):
    """Run ``f`` with every warning an error (the cases that must not warn)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return f()


def test_closure_over_a_large_array_warns_once(fresh_warning, rng):
    A = jnp.asarray(rng.standard_normal(BIG).astype(np.float32))
    with pytest.warns(UserWarning, match=CAPTURE) as record:
        R.implicit_operator(lambda X: A @ X, lambda Y: A.T @ Y, A.shape)
    assert record[0].filename == __file__               # points at the user's line
    _quiet(lambda: R.implicit_operator(lambda X: A @ X, lambda Y: A.T @ Y, A.shape))  # once


@pytest.mark.parametrize("how", ["numpy_closure", "functools_partial", "global",
                                 "nested_function", "bound_method", "operator_closure"])
def test_other_captures_of_a_large_array_warn(how, fresh_warning, rng, monkeypatch):
    A = rng.standard_normal(BIG).astype(np.float32)
    Aj = jnp.asarray(A)
    rmm = Partial(_rmm, Aj)

    class Op:
        def __init__(self, M):
            self.M = M

        def matmat(self, X):
            return self.M @ X

    def inner(X):
        return Aj @ X

    monkeypatch.setitem(globals(), "BIG_GLOBAL", Aj)
    matmat = {
        "numpy_closure": lambda X: A @ X,
        "functools_partial": functools.partial(_mm, Aj),
        "global": lambda X: BIG_GLOBAL @ X,
        "nested_function": lambda X: inner(X),
        "bound_method": Op(Aj).matmat,
        "operator_closure": (lambda op: (lambda X: op.matmat(X)))(R.as_operator(Aj)),
    }[how]
    with pytest.warns(UserWarning, match=CAPTURE):
        R.implicit_operator(matmat, rmm, A.shape)


def test_partial_and_small_closures_do_not_warn(fresh_warning, rng):
    A = jnp.asarray(rng.standard_normal(BIG).astype(np.float32))
    _quiet(lambda: _partial_op(A))
    small = jnp.asarray(rng.standard_normal((300, 300)).astype(np.float32))   # 9e4 < 1e5
    _quiet(lambda: R.implicit_operator(lambda X: small @ X, lambda Y: small.T @ Y, small.shape))
    assert not operators._capture_warned


def test_closures_inside_rdr_jax_do_not_warn(fresh_warning, rng):
    """lowrank_error's randomized branch builds an implicit operator over the user's A:
    that is rdr_jax's closure, not the user's, so no warning."""
    A = rng.standard_normal(BIG).astype(np.float32)
    c = R.interpolative(KEY, A, 5)
    _quiet(lambda: R.lowrank_error(A, c, key=jax.random.key(1), dense_limit=0))
    assert not operators._capture_warned


def test_closure_over_a_traced_array_inside_jit_does_not_warn(fresh_warning, rng):
    """Inside the caller's jit a closed-over array is a tracer: lifted into an argument, no
    constant, so no warning."""
    A = jnp.asarray(rng.standard_normal(BIG).astype(np.float32))

    @jax.jit
    def apply(A, X):
        op = R.implicit_operator(lambda X: A @ X, lambda Y: A.T @ Y, A.shape)
        return op.matmat(X)

    X = jnp.ones((BIG[1], 2), jnp.float32)
    np.testing.assert_allclose(np.asarray(_quiet(lambda: apply(A, X))), np.asarray(A @ X),
                               rtol=1e-5)
    assert not operators._capture_warned
