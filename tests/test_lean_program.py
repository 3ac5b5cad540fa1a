"""The lean compiled program of the ID/CUR pipelines (issue 22): rank buckets, exact sizes
under jit and vmap, float32 as a first-class dtype. No library call, data-dependent conditional,
SVD or eigensolver in the default programs: ``tests/test_dense_kernels.py``
(``test_default_fixed_rank_programs_are_lean_on_cpu``).
"""

import warnings

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

import rdr_jax as R
from rdr_jax._src import linalg as L
from rdr_jax.id_cur import decompositions as D
from rdr_jax.id_cur import selection as SL


def test_rank_sweep_compiles_at_most_five_programs():
    """k = 10, 20, ..., 200 on one matrix: every k runs in the program of its rank bucket."""
    A = jnp.asarray(np.random.default_rng(1).standard_normal((260, 240)), jnp.float32)
    key = jax.random.key(0)
    before = D._interpolative._cache_size()
    for k in range(10, 201, 10):
        d = R.interpolative(key, A, k, on_rank_deficient="ignore")
        assert d.cols.shape == (k,) and d.W.shape == (k, 240) and d.C.shape == (260, k)
    assert D._interpolative._cache_size() - before <= 5
    assert {SL.rank_bucket(k, 240) for k in range(10, 201, 10)} == {16, 25, 50, 100, 200}


@pytest.mark.parametrize("entry", ["interpolative", "cur", "select_columns", "select_skeletons"])
def test_traced_calls_run_at_exact_sizes(entry, x64):
    """Under jit and vmap the enclosing program is traced for its k anyway: no rank bucket
    (k = 30 would pad to 50, l = 40 to 60), and the same skeletons as the eager call."""
    A = jnp.asarray(np.random.default_rng(4).standard_normal((260, 240)))
    f = {"interpolative": lambda key: R.interpolative(key, A, 30, on_rank_deficient="ignore"),
         "cur": lambda key: R.cur(key, A, 30, on_rank_deficient="ignore"),
         "select_columns": lambda key: R.select_columns(key, A, 30),
         "select_skeletons": lambda key: R.select_skeletons(key, A, 30)}[entry]
    key = jax.random.key(5)
    shapes, todo = set(), [jax.make_jaxpr(f)(key).jaxpr]
    while todo:
        for eqn in todo.pop().eqns:
            shapes |= {tuple(v.aval.shape) for v in eqn.outvars}
            todo.extend(jax.extend.core.jaxprs_in_params(eqn.params))
    assert shapes and not any(d in (50, 60) for s in shapes for d in s), sorted(shapes)
    eager, jitted = f(key), jax.jit(f)(key)
    batched = jax.vmap(f)(jax.random.split(key, 2))
    for name in ("cols", "rows"):
        if hasattr(eager, name):
            np.testing.assert_array_equal(np.asarray(getattr(jitted, name)),
                                          np.asarray(getattr(eager, name)))
            np.testing.assert_array_equal(np.asarray(getattr(batched, name)[0]),
                                          np.asarray(getattr(f(jax.random.split(key, 2)[0]),
                                                             name)))


@pytest.mark.parametrize("k,method", [(10, "lupp"), (30, "lupp"), (70, "lupp"), (130, "lupp"),
                                      (30, "cpqr")])
def test_rank_buckets_give_the_same_skeletons_and_factors(k, method, x64):
    """The padded program (rank bucket) and the exact-size program agree: same skeletons,
    factors to rounding."""
    rng = np.random.default_rng(k)
    U = np.linalg.qr(rng.standard_normal((300, 200)))[0]
    V = np.linalg.qr(rng.standard_normal((250, 200)))[0]
    A = jnp.asarray((U * np.exp(-np.arange(200) / 25)) @ V.T)
    op = R.as_operator(A)
    key = jax.random.key(3)
    m = SL.resolve_method(method)
    l = k + 10
    sz = SL.plan(m, k, l, op.shape)
    assert sz.kb > k                                       # the call is padded
    for side in ("column", "two_sided"):
        opts = D._Options(m, side)
        padded = SL.trim(D._interpolative(key, op, *sz, opts), k, D._TRIM[side])
        exact = D._interpolative(key, op, k, l, k, l, opts)
        np.testing.assert_array_equal(np.asarray(padded.cols), np.asarray(exact.cols))
        W = "W" if side == "column" else "W_cols"
        np.testing.assert_allclose(np.asarray(getattr(padded, W)),
                                   np.asarray(getattr(exact, W)), atol=1e-9)
        np.testing.assert_allclose(float(padded.eta), float(exact.eta), rtol=1e-9)
        if side == "two_sided":
            np.testing.assert_array_equal(np.asarray(padded.rows), np.asarray(exact.rows))
            np.testing.assert_allclose(np.asarray(padded.W_rows), np.asarray(exact.W_rows),
                                       atol=1e-9)
    opts = D._Options(m, "cur")
    padded = SL.trim(D._cur(key, op, *sz, opts), k, D._TRIM["cur"])
    exact = D._cur(key, op, k, l, k, l, opts)
    np.testing.assert_array_equal(np.asarray(padded.rows), np.asarray(exact.rows))
    np.testing.assert_allclose(np.asarray(padded.U), np.asarray(exact.U),
                               atol=1e-8 * float(jnp.abs(exact.U).max()))


def test_norm_bound_is_an_upper_bound_within_k_to_the_1_over_512(dtype):
    rng = np.random.default_rng(2)
    norm2_bound = jax.jit(L.norm2_bound)      # as the pipelines call it (one program a shape)
    for k, n in [(1, 5), (7, 40), (60, 300)]:
        T = (rng.standard_normal((k, n)) * np.logspace(0, -3, n)).astype(dtype)
        exact = np.linalg.norm(T.astype(np.float64), 2)
        bound = float(norm2_bound(T))
        assert exact * (1 - 1e-5) <= bound <= exact * k ** (1 / 512) * (1 + 1e-5)
        batch = norm2_bound(np.stack([T, 2 * T]))
        np.testing.assert_allclose(np.asarray(batch), [bound, 2 * bound], rtol=1e-5)
    assert float(norm2_bound(np.zeros((3, 4), dtype))) == 0.0


def _kernel(m, n, h=1.0):
    x = np.linspace(0, 1, m)[:, None]
    y = np.linspace(0, 1, n)[None, :]
    return np.exp(-np.abs(x - y) / h)


def test_float32_fixed_accuracy_meets_tol_on_smooth_kernels():
    """exp(-|x - y|), 2000 x 1000, float32, tol 1e-3: over 12 keys the returned ID meets the
    tolerance and its error_estimate is its true error (it describes the W returned)."""
    K = _kernel(2000, 1000).astype(np.float32)
    K64 = K.astype(np.float64)
    nK = np.linalg.norm(K64)
    ranks = []
    for s in range(12):
        d = R.interpolative_to_tolerance(jax.random.key(s), K, 1e-3).trim()
        err = np.linalg.norm(K64 - np.asarray(d.C, np.float64) @ np.asarray(d.W, np.float64))
        assert err / nK <= 1e-3
        assert float(d.error_estimate) == pytest.approx(err / nK, rel=1e-3)
        ranks.append(int(d.rank))
    with jax.enable_x64(True):     # float64 chooses about the same rank
        r64 = int(R.interpolative_to_tolerance(jax.random.key(0), K64, 1e-3).trim().rank)
    assert max(abs(r - r64) for r in ranks) <= 4


def test_float64_input_without_x64_warns_once_with_the_fix():
    A = np.random.default_rng(3).standard_normal((30, 20))
    with jax.enable_x64(False):
        with pytest.warns(UserWarning, match="jax_enable_x64"):
            R.as_operator(A)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            R.as_operator(A.astype(np.float32))                # float32: no warning
    with jax.enable_x64(True):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            R.as_operator(A)                                   # computed in float64


def test_rank_deficient_and_ill_conditioned_inputs(dtype):
    """Exact rank below k: finite factors, exact reconstruction, numerical rank reported; a
    skeleton of condition 1e6 (float64) / 1e3 (float32): W equals least squares."""
    rng = np.random.default_rng(4)
    A = (rng.standard_normal((200, 5)) @ rng.standard_normal((5, 120))).astype(dtype)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    for f in (lambda: R.interpolative(jax.random.key(0), A, 12, on_rank_deficient="ignore"),
              lambda: R.cur(jax.random.key(0), A, 12, on_rank_deficient="ignore")):
        d = f()
        assert int(d.numerical_rank) == 5
        err = np.linalg.norm(A - np.asarray(d.todense(), np.float64)) / np.linalg.norm(A)
        assert err < tol
        assert all(np.all(np.isfinite(np.asarray(x))) for x in d.factors() if x is not None)
    cond = 1e3 if dtype == np.float32 else 1e6
    U = np.linalg.qr(rng.standard_normal((300, 30)))[0]
    Vt = np.linalg.qr(rng.standard_normal((150, 30)))[0].T
    B = ((U * np.logspace(0, -np.log10(cond), 30)) @ Vt).astype(dtype)
    d = R.interpolative(jax.random.key(1), B, 30)
    C = np.asarray(d.C, np.float64)
    want = np.linalg.lstsq(C, B.astype(np.float64), rcond=None)[0]
    res = np.linalg.norm(B - C @ np.asarray(d.W, np.float64))
    res_want = np.linalg.norm(B - C @ want)
    assert res <= res_want * 1.01 + 50 * np.finfo(dtype).eps * np.linalg.norm(B)
