"""The XLA factorisations that replace OpenBLAS calls on CPU (issue 30): against numpy/scipy and
jaxlib's LAPACK kernels, float32/float64 (and complex), under jit and vmap, with LAPACK's pivot
and tie rules; and no LAPACK call left in the default fixed-rank programs."""

import re
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sl

import rdr_jax as R
from rdr_jax._src import dense as D


def _rand(rng, shape, dt):
    x = rng.standard_normal(shape)
    if np.issubdtype(dt, np.complexfloating):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dt)


def _tol(dt):
    return 1e-4 if np.finfo(dt).bits <= 32 or np.dtype(dt) == np.complex64 else 1e-11


def _xla(f):
    """The CPU (XLA) branch, jitted."""
    return jax.jit(f)


@pytest.mark.parametrize("shape", [(300, 64), (40, 40), (33, 33), (7, 3), (1, 1), (64, 200),
                                   (97, 70)])
def test_lu_matches_lapack_pivots_and_factors(shape, dtype, rng):
    A = _rand(rng, shape, dtype)
    lu, piv, perm = _xla(D._lu_xla)(A)
    P, Lr, U = sl.lu(A.astype(np.float64))                   # independent reference
    perm_ref = np.argmax(P, axis=0)                           # rows in pivot order
    np.testing.assert_array_equal(np.asarray(perm), perm_ref)
    lu0, piv0, _ = jax.lax.linalg.lu(A)
    np.testing.assert_array_equal(np.asarray(piv), np.asarray(piv0))
    k = min(shape)
    L = np.tril(np.asarray(lu), -1)[:, :k] + np.eye(shape[0], k)
    Uf = np.triu(np.asarray(lu))[:k]
    np.testing.assert_allclose(L @ Uf, A[np.asarray(perm)], atol=_tol(dtype) * 10)


def test_lu_tie_rule_and_zero_columns(x64):
    """LAPACK's rule: the first largest |x| in the current row order after the swaps; an
    all-zero Schur complement keeps the row at position t."""
    A = np.array([[1.0, 2, 0], [-1, 2, 0], [1, -2, 0], [0, 0, 0]])
    for M in (A, np.zeros((5, 3)), np.ones((4, 4)), np.vstack([np.zeros((2, 3)), np.eye(3)])):
        lu, piv, perm = _xla(D._lu_xla)(M)
        lu0, piv0, perm0 = jax.lax.linalg.lu(M)
        np.testing.assert_array_equal(np.asarray(perm), np.asarray(perm0))
        np.testing.assert_array_equal(np.asarray(piv), np.asarray(piv0))
        np.testing.assert_allclose(np.asarray(lu), np.asarray(lu0), atol=1e-15)


def test_lu_complex_uses_blas_magnitude(x64, rng):
    """i?amax compares |Re| + |Im| (not the modulus): the pivots of zgetrf."""
    A = _rand(rng, (120, 40), np.complex128)
    perm = _xla(D._lu_xla)(A)[2]
    np.testing.assert_array_equal(np.asarray(perm), np.asarray(jax.lax.linalg.lu(A)[2]))


def test_lu_vmap_matches_loop(dtype, rng):
    A = _rand(rng, (3, 90, 35), dtype)
    batched = jax.vmap(D._lu_xla)(A)
    for i in range(3):
        one = D._lu_xla(A[i])
        for b, o in zip(batched, one):
            np.testing.assert_array_equal(np.asarray(b[i]), np.asarray(o))


@pytest.mark.parametrize("k", [1, 5, 32, 50, 100])
def test_cholesky_against_numpy(k, dtype, rng):
    X = _rand(rng, (k + 5, k), dtype)
    G = X.conj().T @ X
    L = _xla(D._batched(D._cholesky_xla_one, 2))(G)
    ref = np.linalg.cholesky(G.astype(np.float64))
    np.testing.assert_allclose(np.asarray(L), ref, rtol=0, atol=_tol(dtype) * np.abs(ref).max() * 10)


def test_cholesky_not_positive_definite_gives_nan(x64):
    G = np.diag([4.0, -1.0, 2.0] + [1.0] * 40)
    L = np.asarray(D._batched(D._cholesky_xla_one, 2)(G))
    assert not np.all(np.isfinite(np.diagonal(L)))


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("k", [3, 32, 70])
def test_triangular_solve_all_cases(left, lower, trans, k, dtype, rng):
    T = np.triu(_rand(rng, (k, k), dtype)) + np.asarray(3 * np.eye(k), dtype)
    T = T.T.copy() if lower else T
    B = _rand(rng, (k, 45) if left else (45, k), dtype)
    X = jax.jit(lambda a, b: D._triangular_solve_xla(a, b, left, lower, trans, trans, False))(T, B)
    Tm = T.conj().T if trans else T
    ref = sl.solve_triangular(Tm.astype(np.float64), (B if left else B.T).astype(np.float64),
                              lower=(lower != trans)) if left else \
        sl.solve_triangular(Tm.T.astype(np.float64), B.T.astype(np.float64),
                            lower=not (lower != trans)).T
    np.testing.assert_allclose(np.asarray(X), ref, rtol=0, atol=_tol(dtype) * np.abs(ref).max())


def test_triangular_solve_unit_and_batched(x64, rng):
    T = np.tril(rng.standard_normal((4, 40, 40))) * 0.1
    B = rng.standard_normal((4, 40, 7))
    X = D._triangular_solve_xla(T, B, True, True, False, False, True)
    for i in range(4):
        Tu = np.tril(T[i], -1) + np.eye(40)
        np.testing.assert_allclose(np.asarray(X[i]), np.linalg.solve(Tu, B[i]), atol=1e-12)


@pytest.mark.parametrize("shape,f", [((42, 74), 32), ((50, 50), 50), ((150, 55), 50),
                                     ((15, 20), 5), ((110, 210), 100)])
def test_qr_r_against_numpy(shape, f, dtype, rng):
    A = _rand(rng, shape, dtype)
    R_ = jax.jit(lambda a: D._qr_r_xla_one(a, f))(A)
    ref = np.linalg.qr(A.astype(np.complex128 if np.iscomplexobj(A) else np.float64),
                       mode="r")[:f]
    np.testing.assert_allclose(np.asarray(R_), ref, rtol=0, atol=_tol(dtype) * np.abs(ref).max())


def test_qr_r_complex_and_zero_columns(x64, rng):
    A = _rand(rng, (60, 45), np.complex128)
    A[:, 3] = 0
    R_ = D._qr_r_xla_one(A, 40)
    ref = np.linalg.qr(A, mode="r")[:40]
    np.testing.assert_allclose(np.asarray(R_), ref, atol=1e-12)


@pytest.mark.parametrize("shape", [(60, 16), (32, 32), (40, 7), (7, 3), (1, 1)])
def test_one_panel_programs_give_the_blocked_programs_bits(shape, dtype, rng):
    """A single panel without trailing columns (k <= 32 sketches and skeleton blocks) runs
    the panel loop alone: bitwise the factors of the panel-and-update loop (NaN and Inf
    included), in a smaller program."""
    A = _rand(rng, shape, dtype)
    bad = A.copy()
    bad[1 % shape[0], 0], bad[-1, -1] = np.nan, np.inf
    c = shape[1]
    for fast, slow in ((lambda a: D._lu_xla_one(a), lambda a: D._lu_xla_one(a, True)),
                       (lambda a: D._qr_r_xla_one(a, c), lambda a: D._qr_r_xla_one(a, c, True))):
        fast, slow = jax.jit(fast), jax.jit(slow)       # one program each for both inputs
        for X in (A, bad):
            for x, y in zip(jax.tree.leaves(fast(X)), jax.tree.leaves(slow(X))):
                np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        size = [len(f.lower(A).as_text()) for f in (fast, slow)]
        assert size[0] < size[1], size


def _compiled(f, *args) -> str:
    """The text of ``jax.jit(f)(*args)``'s compiled program."""
    return jax.jit(f).lower(*args).compile().as_text()


def _lapack(txt: str) -> Counter:
    """The LAPACK custom calls in a compiled program's text."""
    return Counter(c for c in re.findall(r'custom_call_target="([^"]+)"', txt)
                   if c.startswith("lapack_"))


@pytest.mark.parametrize("entry", ["interpolative", "two_sided", "cur", "select_columns",
                                   "select_skeletons"])
def test_default_fixed_rank_programs_are_lean_on_cpu(entry, dtype):
    """The default fixed-rank programs on CPU: no OpenBLAS call at all (issue 30; so no SVD or
    eigensolver either) and no data-dependent conditional (issue 22's lean program)."""
    A = jnp.asarray(np.random.default_rng(0).standard_normal((300, 200)), dtype)
    f = {"interpolative": lambda k, A: R.interpolative(k, A, 60, on_rank_deficient="ignore"),
         "two_sided": lambda k, A: R.interpolative(k, A, 60, side="two_sided",
                                                   on_rank_deficient="ignore"),
         "cur": lambda k, A: R.cur(k, A, 60, on_rank_deficient="ignore"),
         "select_columns": lambda k, A: R.select_columns(k, A, 60),
         "select_skeletons": lambda k, A: R.select_skeletons(k, A, 60)}[entry]
    txt = _compiled(f, jax.random.key(0), A)
    assert _lapack(txt) == Counter()
    assert not re.findall(r"\bconditional\(", txt)


def test_platform_branch_on_cpu_is_the_xla_one(x64, rng):
    """The public wrappers pick the XLA kernels on CPU: identical bits to the private ones."""
    A = rng.standard_normal((80, 30))
    np.testing.assert_array_equal(np.asarray(jax.jit(D.lu)(A)[0]),
                                  np.asarray(jax.jit(D._lu_xla)(A)[0]))


def test_large_lu_goes_to_lapack_with_the_same_pivots(x64, rng):
    """Above LU_LAPACK_ENTRIES the CPU LU is getrf (its own time dwarfs a thread fight; the
    XLA panel loop was seconds at 10^6 x 200): one LAPACK call, the same pivots and perm as
    the XLA kernel on the same matrix, and at or below the limit no LAPACK call."""
    cols = 16
    big = D.LU_LAPACK_ENTRIES // cols + 1
    A = jnp.asarray(rng.standard_normal((big, cols)))
    calls = _lapack(_compiled(D.lu, A))
    assert sum(calls.values()) == 1 and next(iter(calls)).startswith("lapack_") \
        and "getrf" in next(iter(calls))
    assert _lapack(_compiled(D.lu, A[:D.LU_LAPACK_ENTRIES // cols])) == Counter()
    lu, piv, perm = jax.jit(D.lu)(A)
    lu_x, piv_x, perm_x = jax.jit(D._lu_xla)(A)
    np.testing.assert_array_equal(np.asarray(piv), np.asarray(piv_x))
    np.testing.assert_array_equal(np.asarray(perm), np.asarray(perm_x))
    np.testing.assert_allclose(np.asarray(lu), np.asarray(lu_x), rtol=1e-10, atol=1e-12)
