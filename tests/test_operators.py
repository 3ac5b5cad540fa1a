"""The linear-operator protocol against numpy references, for every implementation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from jax.experimental import sparse as jsparse

import rdr_jax as R
from rdr_jax.operators import DenseOperator, FactoredOperator, ImplicitOperator, SparseOperator
from tests.conftest import rtol

M, N, RANK = 37, 23, 6


def _dense(rng, dtype):
    return rng.standard_normal((M, N)).astype(dtype)


def _make(kind, rng, dtype):
    """(operator, dense numpy reference) pairs for each operator kind."""
    if kind == "numpy":
        A = _dense(rng, dtype)
        return R.as_operator(A), A
    if kind == "jax":
        A = _dense(rng, dtype)
        return R.as_operator(jnp.asarray(A)), A
    if kind in ("csr", "coo_dup", "bcoo"):
        S = sp.random(M, N, density=0.2, format="coo", random_state=rng, dtype=np.float64)
        if kind == "coo_dup":  # duplicate entries must be summed
            S = sp.coo_matrix((np.r_[S.data, S.data[:5]], (np.r_[S.row, S.row[:5]],
                               np.r_[S.col, S.col[:5]])), shape=S.shape)
        S = S.astype(dtype)
        ref = S.toarray()
        if kind == "bcoo":
            B = jsparse.BCOO.fromdense(jnp.asarray(ref), nse=int((ref != 0).sum()) + 3)
            return R.as_operator(B), ref
        return R.as_operator(S.tocsr() if kind == "csr" else S), ref
    if kind == "implicit":
        A = _dense(rng, dtype)
        Aj = jnp.asarray(A)
        op = R.implicit_operator(lambda X: Aj @ X, lambda Y: Aj.T @ Y, A.shape, dtype)
        return op, A
    if kind == "factored_sparse":
        L = sp.random(M, RANK, density=0.4, random_state=rng, dtype=np.float64).astype(dtype)
        Rf = sp.random(N, RANK, density=0.4, random_state=rng, dtype=np.float64).astype(dtype)
        d = rng.random(RANK).astype(dtype) + 0.5
        return R.factored_operator(L, d, Rf), L.toarray() @ np.diag(d) @ Rf.toarray().T
    if kind == "factored_dense":
        L = rng.standard_normal((M, RANK)).astype(dtype)
        Rf = rng.standard_normal((N, RANK)).astype(dtype)
        d = rng.random(RANK).astype(dtype)
        return R.factored_operator(L, d, Rf), L @ np.diag(d) @ Rf.T
    raise AssertionError(kind)


KINDS = ["numpy", "jax", "csr", "coo_dup", "bcoo", "implicit", "factored_sparse",
         "factored_dense"]


@pytest.mark.parametrize("kind", KINDS)
def test_protocol_matches_dense_reference(kind, dtype, rng):
    op, ref = _make(kind, rng, dtype)
    ref64 = ref.astype(np.float64)
    tol = rtol(dtype) * 10
    assert op.shape == (M, N)
    assert np.dtype(op.dtype) == dtype
    X = rng.standard_normal((N, 4)).astype(dtype)
    Y = rng.standard_normal((M, 3)).astype(dtype)
    I = np.array([3, 0, 36, 7, 3])
    J = np.array([22, 1, 5])
    scale = np.abs(ref64).max() * max(M, N)
    checks = {
        "matmat": (op.matmat(jnp.asarray(X)), ref64 @ X),
        "rmatmat": (op.rmatmat(jnp.asarray(Y)), ref64.T @ Y),
        "rows": (op.rows(jnp.asarray(I)), ref64[I]),
        "cols": (op.cols(jnp.asarray(J)), ref64[:, J]),
        "submatrix": (op.submatrix(jnp.asarray(I), jnp.asarray(J)), ref64[np.ix_(I, J)]),
        "todense": (op.todense(), ref64),
        "H.matmat": (op.H.matmat(jnp.asarray(Y)), ref64.T @ Y),
        "H.rows": (op.H.rows(jnp.asarray(J)), ref64.T[J]),
        "H.H.todense": (op.H.H.todense(), ref64),
    }
    for name, (got, want) in checks.items():
        got = np.asarray(got)
        assert got.shape == want.shape, name
        np.testing.assert_allclose(got, want, atol=tol * scale, err_msg=name)


@pytest.mark.parametrize("kind", KINDS)
def test_operators_are_pytrees_through_jit_and_vmap(kind, rng):
    op, ref = _make(kind, rng, np.float32)
    leaves, treedef = jax.tree_util.tree_flatten(op)
    op2 = jax.tree_util.tree_unflatten(treedef, leaves)
    X = jnp.asarray(rng.standard_normal((5, N, 2)).astype(np.float32))

    @jax.jit
    def f(o, X):
        return o.matmat(X)

    got = jax.vmap(f, in_axes=(None, 0))(op2, X)
    want = np.einsum("mn,bnk->bmk", ref, np.asarray(X))
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-3 * np.abs(ref).max() * N)
    # same structure and shapes: no retrace
    f(op2, X[0])
    size = f._cache_size()
    f(op, X[1])
    assert f._cache_size() == size


def test_bcoo_padding_and_dense_types(rng):
    A = rng.standard_normal((6, 4))
    A[A < 0.3] = 0
    B = jsparse.BCOO.fromdense(jnp.asarray(A, jnp.float32), nse=20)  # padded
    op = R.as_operator(B)
    assert isinstance(op, SparseOperator) and op.nnz == int((A != 0).sum())
    np.testing.assert_allclose(np.asarray(op.todense()), A, rtol=1e-6)
    assert isinstance(R.as_operator(np.ones((2, 3))), DenseOperator)
    assert R.as_operator(op) is op


def test_complex_adjoint(rng):
    with jax.enable_x64(True):
        A = rng.standard_normal((8, 5)) + 1j * rng.standard_normal((8, 5))
        Y = rng.standard_normal((8, 2)) + 1j * rng.standard_normal((8, 2))
        for op in (R.as_operator(A), R.as_operator(sp.csr_matrix(A))):
            np.testing.assert_allclose(np.asarray(op.rmatmat(jnp.asarray(Y))), A.conj().T @ Y,
                                       rtol=1e-12)
            np.testing.assert_allclose(np.asarray(op.H.todense()), A.conj().T, rtol=1e-12)


def test_factored_apply_sketch_never_touches_dense(rng):
    """Sketching a factored operator goes through the left factor only."""
    op, ref = _make("factored_sparse", rng, np.float32)
    S = R.SparseSign(3).draw(jax.random.key(3), 8, M)
    np.testing.assert_allclose(np.asarray(S.apply(op)), np.asarray(S.todense()) @ ref,
                               atol=1e-4 * np.abs(ref).max() * M)


def test_exact_singular_values_factored_and_dense(rng):
    with jax.enable_x64(True):
        op, ref = _make("factored_sparse", rng, np.float64)
        sv = R.exact_singular_values(op)
        want = np.linalg.svd(ref, compute_uv=False)
        np.testing.assert_allclose(sv[:RANK], want[:RANK], rtol=1e-10)
        np.testing.assert_allclose(R.exact_singular_values(ref), want, rtol=1e-12)


def test_implicit_with_gather_callbacks_and_adjoint(rng):
    A = rng.standard_normal((M, N)).astype(np.float32)
    Aj = jnp.asarray(A)
    op = R.implicit_operator(lambda X: Aj @ X, lambda Y: Aj.T @ Y, A.shape, np.float32,
                             rows=lambda I: Aj[I], cols=lambda J: Aj[:, J])
    assert isinstance(op, ImplicitOperator)
    np.testing.assert_allclose(np.asarray(op.H.rows(jnp.array([1, 2]))), A.T[[1, 2]], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(op.H.cols(jnp.array([4]))), A.T[:, [4]], rtol=1e-6)
    assert isinstance(op.H.H, ImplicitOperator)


def test_factored_operator_type():
    op = R.factored_operator(np.ones((4, 2)), np.ones(2), np.ones((3, 2)))
    assert isinstance(op, FactoredOperator) and op.shape == (4, 3)


def test_large_sparse_product_is_chunked(monkeypatch, rng):
    """The XLA formula (GPU/TPU lowering) runs products whose (nnz x b) intermediate exceeds
    the budget in column blocks."""
    import rdr_jax.operators as ops
    monkeypatch.setattr(ops, "_SPARSE_CHUNK_ELEMS", 64)
    S = sp.random(30, 20, density=0.3, random_state=rng)
    op = R.as_operator(S.astype(np.float32))
    X = rng.standard_normal((20, 7)).astype(np.float32)
    for got in (ops._spmm_xla(jnp.asarray(X), op, False), op.matmat(jnp.asarray(X))):
        np.testing.assert_allclose(np.asarray(got), S @ X, rtol=1e-4, atol=1e-5)
    hlo = jax.jit(lambda X: ops._spmm_xla(X, op, False)).lower(jnp.asarray(X)).as_text()
    assert hlo.count("concatenate") >= 1


@pytest.mark.parametrize("acc, small", [(1 << 22, 1 << 16), (0, 1 << 16), (0, 0)])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_sparse_products_jit_eager_vmap_grad_match_dense(acc, small, dt, rng, monkeypatch):
    """S @ X and X @ S (each X @ S strategy in turn) eager, in jit and under vmap agree with
    the dense reference; grad/jvp/vjp and second order go through the same kernels."""
    import rdr_jax._src.kernels as K
    monkeypatch.setattr(K, "_LEFT_ACC_ELEMS", acc)
    monkeypatch.setattr(K, "_SMALL_DIM", small)
    monkeypatch.setattr(K, "_PARALLEL_WORK", 0)  # small products on several threads too
    assert K._left_method(5, 40, 300, 600) == {(1 << 22, 1 << 16): "acc", (0, 1 << 16): "csc",
                                          (0, 0): "csr_t"}[(acc, small)]
    tol = 50 * rtol(dt)
    with jax.enable_x64(dt == np.float64):
        S = sp.random(40, 300, density=0.05, random_state=rng).astype(dt)
        op = R.as_operator(S)
        D = S.toarray().astype(np.float64)
        X = jnp.asarray(rng.standard_normal((300, 3)).astype(dt))
        Y = jnp.asarray(rng.standard_normal((5, 40)).astype(dt))
        W = jnp.asarray(rng.standard_normal((2, 300)).astype(dt))
        for got in (op.matmat(X), jax.jit(op.matmat)(X), jax.vmap(op.matmat)(X[None])[0]):
            assert got.dtype == dt
            np.testing.assert_allclose(np.asarray(got), D @ np.asarray(X), atol=tol)
        # left products X @ S through the chosen host strategy
        for S2, Z, D2 in ((op, Y, D), (op.H, W, D.T)):
            want = np.asarray(Z, np.float64) @ D2
            for got in (S2.lmatmat(Z), jax.jit(S2.lmatmat)(Z),
                        jax.vmap(S2.lmatmat)(Z[:, None])[:, 0]):
                np.testing.assert_allclose(np.asarray(got), want, atol=tol)
        Xn = np.asarray(X, np.float64)
        g = jax.grad(lambda X: 0.5 * jnp.sum(jax.jit(op.matmat)(X) ** 2))(X)
        np.testing.assert_allclose(np.asarray(g), D.T @ (D @ Xn), atol=tol)
        gl = jax.jit(jax.grad(lambda Z: 0.5 * jnp.sum(op.H.lmatmat(Z) ** 2)))(W)
        np.testing.assert_allclose(np.asarray(gl), (np.asarray(W, np.float64) @ D.T) @ D,
                                   atol=tol)
        t = jax.jvp(op.matmat, (X,), (X,))[1]
        np.testing.assert_allclose(np.asarray(t), D @ Xn, atol=tol)
        _, vjp = jax.vjp(op.lmatmat, Y)
        C = jnp.concatenate([W, W, W[:1]])  # a (5, 300) cotangent
        np.testing.assert_allclose(np.asarray(vjp(C)[0]), np.asarray(C, np.float64) @ D.T,
                                   atol=tol)
        hvp = jax.jvp(jax.grad(lambda X: 0.5 * jnp.sum(op.matmat(X) ** 2)), (X,), (X,))[1]
        np.testing.assert_allclose(np.asarray(hvp), D.T @ (D @ Xn), atol=tol)


def test_sparse_product_grad_in_values_and_batched_operators(rng):
    """Derivatives w.r.t. the nonzero values (XLA formula) and vmap over operators."""
    import dataclasses
    S = sp.random(12, 9, density=0.3, random_state=rng).astype(np.float32)
    op = R.as_operator(S)
    X = jnp.asarray(rng.standard_normal((9, 2)).astype(np.float32))
    G = jnp.asarray(rng.standard_normal((12, 2)).astype(np.float32))
    g = jax.grad(lambda d: jnp.sum(G * dataclasses.replace(op, data_r=d).matmat(X)))(op.data_r)
    rows = np.repeat(np.arange(12), np.diff(S.tocsr().indptr))
    want = np.einsum("pc,pc->p", np.asarray(G)[rows], np.asarray(X)[np.asarray(op.col_r)])
    np.testing.assert_allclose(np.asarray(g), want, rtol=1e-4, atol=1e-5)
    ops2 = jax.tree_util.tree_map(lambda a, b: jnp.stack([a, b]), op,
                                  dataclasses.replace(op, data_r=2 * op.data_r,
                                                      data_c=2 * op.data_c))
    got = jax.vmap(lambda o: o.matmat(X))(ops2)
    np.testing.assert_allclose(np.asarray(got[1]), 2 * S.toarray() @ np.asarray(X),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("s_complex", [False, True])
def test_complex_sparse_products_use_real_kernels(s_complex, rng):
    with jax.enable_x64(True):
        S = sp.random(20, 15, density=0.3, random_state=rng).astype(np.complex128)
        if s_complex:
            S = S + 1j * sp.random(20, 15, density=0.3, random_state=rng)
        op = R.as_operator(S)
        D = S.toarray()
        X = rng.standard_normal((15, 3)) + 1j * rng.standard_normal((15, 3))
        Y = rng.standard_normal((4, 20)) + 1j * rng.standard_normal((4, 20))
        Xr = rng.standard_normal((15, 3))
        for got, want in ((op.matmat(jnp.asarray(X)), D @ X),
                          (jax.jit(op.matmat)(jnp.asarray(Xr)), D @ Xr),
                          (op.lmatmat(jnp.asarray(Y)), Y @ D),
                          (op.rmatmat(jnp.asarray(Y.T)), D.conj().T @ Y.T)):
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)
        hlo = jax.jit(op.matmat).trace(jnp.asarray(X)).lower(
            lowering_platforms=("cpu",)).as_text()
        assert "custom_call @rdr_jax_csr_dense" in hlo
        t = jax.jvp(op.matmat, (jnp.asarray(X),), (jnp.asarray(1j * X),))[1]
        np.testing.assert_allclose(np.asarray(t), 1j * D @ X, rtol=1e-12, atol=1e-12)


def test_sparse_product_lowering_ffi_on_cpu_xla_on_gpu_tpu(rng):
    op = R.as_operator(sp.random(30, 20, density=0.2, random_state=rng).astype(np.float32))
    X = jnp.ones((20, 2), jnp.float32)
    f = jax.jit(lambda o, X: o.matmat(X) + o.lmatmat(X.T[:, :30]).sum())
    hlo = f.trace(op, X).lower(lowering_platforms=("cpu",)).as_text()
    assert "custom_call @rdr_jax_csr_dense" in hlo and "callback" not in hlo
    for platform in ("cuda", "tpu"):
        hlo = f.trace(op, X).lower(lowering_platforms=(platform,)).as_text()
        assert "custom_call @rdr_jax" not in hlo


EXPLICIT = {"numpy": True, "jax": True, "csr": True, "coo_dup": True, "bcoo": True,
            "implicit": False, "factored_sparse": False, "factored_dense": False}


@pytest.mark.parametrize("kind", KINDS)
def test_explicit_entry_methods(kind, dtype, rng):
    """explicit, max_exponent, ldexp, fro_norm_sq, residual_fro, shards, to_numpy."""
    op, ref = _make(kind, rng, dtype)
    ref64 = ref.astype(np.float64)
    host = op.to_numpy()
    assert host.dtype == np.float64
    np.testing.assert_allclose(host, ref64, rtol=10 * rtol(dtype), atol=1e-6)
    assert op.shards(0) == op.shards(1) == 1
    Q = jnp.asarray(np.linalg.qr(rng.standard_normal((N, 4)))[0].astype(dtype))
    if not EXPLICIT[kind]:
        assert not op.explicit
        for got in (op.max_exponent(), op.ldexp(3), op.fro_norm_sq(),
                    op.residual_fro(op.matmat(Q), Q)):
            assert got is None
        return
    assert op.explicit and type(op.ldexp(0)) is type(op)
    assert int(op.max_exponent()) == int(np.floor(np.log2(np.abs(ref64).max())))
    np.testing.assert_array_equal(np.asarray(op.ldexp(-3).todense()), np.asarray(ref) / 8)
    np.testing.assert_allclose(float(op.fro_norm_sq()), np.sum(ref64 ** 2), rtol=rtol(dtype))
    Qn = np.asarray(Q, np.float64)
    want = np.linalg.norm(ref64 - ref64 @ Qn @ Qn.T)
    got = float(op.residual_fro(op.matmat(Q), Q))
    np.testing.assert_allclose(got, want, rtol=100 * rtol(dtype))
    # no overflow or underflow at extreme scales (power-of-two scalings are exact)
    for k in (100, -100) if dtype == np.float32 else (1000, -1000):
        big = op.ldexp(k)
        r = float(big.residual_fro(big.matmat(Q), Q))
        assert np.isfinite(r) and r > 0
        np.testing.assert_allclose(np.log2(r) - k, np.log2(want), atol=1e-3)
        assert int(big.max_exponent()) == int(op.max_exponent()) + k


def test_explicit_methods_under_jit(rng):
    A = rng.standard_normal((M, N)).astype(np.float32)
    for op in (R.as_operator(A), R.as_operator(sp.csr_matrix(A))):
        e, f2, scaled = jax.jit(lambda o, k: (o.max_exponent(), o.fro_norm_sq(),
                                              o.ldexp(k).todense()))(op, 2)
        assert e.dtype == jnp.int32 and int(e) == int(np.floor(np.log2(np.abs(A).max())))
        np.testing.assert_allclose(float(f2), np.sum(A.astype(np.float64) ** 2), rtol=1e-5)
        np.testing.assert_array_equal(np.asarray(scaled), 4 * A)


def test_shards_of_sharded_dense_and_factored(rng):
    ndev = jax.device_count()
    mesh = jax.make_mesh((ndev,), ("x",))
    A = R.shard(rng.standard_normal((4 * ndev, 6)).astype(np.float32), mesh,
                jax.sharding.PartitionSpec("x", None))
    op = R.as_operator(A)
    assert op.shards(0) == R.distributed.row_shards(op) == R.distributed.row_shards(A) == ndev
    assert op.shards(1) == R.distributed.col_shards(op) == 1
    f = R.factored_operator(A, np.ones(6, np.float32), np.ones((5, 6), np.float32))
    assert f.shards(0) == ndev and f.shards(1) == 1
    assert R.distributed.row_shards(object()) == 1
