"""The CPU kernels' fallback (rdr_jax._src.kernels): forcing the XLA formulas (``RDR_JAX_CPU_KERNELS=0``,
a numba or FFI version outside the supported range, a kernel that fails to build) gives the
kernels' results to rounding, with one clear warning where the user did not ask for it; the
GPU/TPU formulas (sorted segment sums) run on CPU under jit, vmap and grad."""

import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from jax.experimental import sparse as jsparse

import rdr_jax as R
from rdr_jax._src import kernels as K
from rdr_jax import sketching as S
from tests.conftest import EXPERIMENTS, rtol

M, N, L, Z = 300, 7, 16, 4
ROUTES = ("kernel", "fallback", "accelerator")


@pytest.fixture
def route(monkeypatch):
    """``route(name)`` makes the next lowerings take the numba kernels (``"kernel"``), the CPU
    fallback (``"fallback"``: ``RDR_JAX_CPU_KERNELS=0``) or the GPU/TPU formulas on CPU
    (``"accelerator"``), clearing compiled functions so that the choice is made again; the
    lowering decisions are recorded in the returned list."""
    decisions = []
    real = K._use_kernels

    def spy(target, *avals):
        used = real(target, *avals)
        decisions.append((target, used))
        return used

    monkeypatch.setattr(K, "_use_kernels", spy)

    def set_route(name):
        jax.clear_caches()
        decisions.clear()
        if name == "kernel":
            monkeypatch.delenv(K.KERNELS_ENV, raising=False)
            if K._unsupported() is not None:
                pytest.skip(f"the CPU kernels are unavailable here: {K._unsupported()}")
        else:
            monkeypatch.setenv(K.KERNELS_ENV, "0")
        monkeypatch.setattr(K, "_CPU_FALLBACK_AS_ACCELERATOR", name == "accelerator")
        return decisions

    yield set_route
    jax.clear_caches()  # no compiled function keeps a forced route


@pytest.fixture
def fresh_state(monkeypatch):
    """A copy of the kernels' process state (compiled kernels kept; no warnings given, no
    failure recorded) that is restored afterwards."""
    state = {k: v for k, v in K._STATE.items() if k not in ("warned", "broken")}
    monkeypatch.setattr(K, "_STATE", state)
    monkeypatch.delenv(K.KERNELS_ENV, raising=False)
    jax.clear_caches()
    yield state
    jax.clear_caches()


def _x64(dt):
    return jax.enable_x64(np.dtype(dt) == np.float64)


def _case(dt, seed=0):
    rng = np.random.default_rng(seed)
    sk = S.SparseSign(Z).draw(jax.random.key(seed), L, M, dtype=dt)
    A = jnp.asarray(rng.standard_normal((M, N)).astype(dt))
    Y = jnp.asarray(rng.standard_normal((L, N)).astype(dt))
    Sp = sp.random(M, 9, density=0.05, random_state=rng).astype(dt)
    return sk, A, Y, Sp, np.asarray(sk.todense(), np.float64)


def _products(sk, A, Y, op):
    """The four primitives (sparse_matmul both ways), eager and under jit."""
    X = A[:9]                                     # (9, N): S (M x 9) @ X
    W = A[:, :5].T                                # (5, M): W @ S
    fns = {
        "sparse_sign_matmul": lambda: K.sparse_sign_matmul(A, sk.rows, sk.signs, L),
        "sparse_sign_rmatmul": lambda: K.sparse_sign_rmatmul(Y, sk.rows, sk.signs),
        "sparse_sign_sparse_matmul": lambda: K.sparse_sign_sparse_matmul(
            op.data_c, sk.rows, sk.signs, op.row_c, op.col_c, op.indptr_c, L, op.shape[1]),
        "sparse_matmul S@X": lambda: op.matmat(X),
        "sparse_matmul X@S": lambda: op.lmatmat(W),
    }
    out = {}
    for name, f in fns.items():
        out[name] = f()
        out[name + " (jit)"] = jax.jit(f)()
    return out, X, W


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_primitives_equal_kernels_on_every_route(dt, route):
    with _x64(dt):
        sk, A, Y, Sp, G = _case(dt)
        op = R.as_operator(Sp)
        results = {}
        for name in ROUTES:
            decisions = route(name)
            results[name], X, W = _products(sk, A, Y, op)
            used = {u for _, u in decisions}
            assert used == ({True} if name == "kernel" else {False}), (name, decisions)
        D = Sp.toarray().astype(np.float64)
        want = {"sparse_sign_matmul": G @ np.asarray(A, np.float64),
                "sparse_sign_rmatmul": G.T @ np.asarray(Y, np.float64),
                "sparse_sign_sparse_matmul": G @ D,
                "sparse_matmul S@X": D @ np.asarray(X, np.float64),
                "sparse_matmul X@S": np.asarray(W, np.float64) @ D}
        for key, kern in results["kernel"].items():
            ref = want[key.replace(" (jit)", "")]
            tol = 20 * rtol(dt) * max(1.0, np.abs(ref).max())
            np.testing.assert_allclose(np.asarray(kern, np.float64), ref, atol=tol, err_msg=key)
            for name in ROUTES[1:]:
                got = results[name][key]
                assert got.dtype == dt and got.shape == kern.shape, (name, key)
                np.testing.assert_allclose(np.asarray(got, np.float64),
                                           np.asarray(kern, np.float64), atol=tol,
                                           err_msg=f"{name}: {key}")


def test_routes_lower_as_documented(route):
    """Kernel route: FFI custom calls. CPU fallback: no rdr_jax custom call (jaxlib's CSR
    kernel for Gamma @ A and S @ X). GPU/TPU: a sort and a sorted scatter, no custom call."""
    sk, A, _, Sp, _ = _case(np.float32)
    op = R.as_operator(Sp)
    fwd = jax.jit(lambda s, A: s.apply(A))
    sparse = jax.jit(lambda s, o: s.apply(o))
    route("kernel")
    assert "custom_call @rdr_jax_sparse_sign" in fwd.lower(sk, A).as_text()
    route("fallback")
    for f, args in ((fwd, (sk, A)), (sparse, (sk, op)), (jax.jit(op.matmat), (A[:9],))):
        hlo = f.lower(*args).as_text()
        assert "custom_call @rdr_jax" not in hlo
    # where this jaxlib lowers a BCSR product to its CPU CSR kernel, the fallback uses it
    G = jsparse.BCSR.fromdense(jnp.eye(3))
    if "cpu_csr_sparse_dense" in jax.jit(lambda x: G @ x).lower(jnp.ones((3, 2))).as_text():
        assert "cpu_csr_sparse_dense" in fwd.lower(sk, A).as_text()
    for platform in ("cuda", "tpu"):
        for f, args in ((fwd, (sk, A)), (sparse, (sk, op))):
            hlo = f.trace(*args).lower(lowering_platforms=(platform,)).as_text()
            assert "custom_call" not in hlo, platform
            assert "stablehlo.sort" in hlo and "indices_are_sorted = true" in hlo, platform
        hlo = jax.jit(lambda s, A: s.apply_dense(A, impl="xla")).trace(sk, A).lower(
            lowering_platforms=(platform,)).as_text()
        assert "indices_are_sorted = true" in hlo and "custom_call" not in hlo


def test_eager_calls_follow_the_route(route):
    """Eager primitive calls are compiled per shape too: clearing the caches re-decides."""
    sk, A, *_ = _case(np.float32)
    for name in ("fallback", "kernel"):
        decisions = route(name)
        sk.apply(A)
        assert decisions and all(u == (name == "kernel") for _, u in decisions)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_xla_formulas_jit_vmap_grad_match_dense(dt, route):
    """The GPU/TPU formulation (sort by row once, sorted segment sum), forced on CPU through
    the primitive, and the ``impl="xla"`` reference: jit, vmap over keys with a shared A,
    vmap over A, grad."""
    route("accelerator")
    with _x64(dt):
        sk, A, _, _, G = _case(dt)
        An = np.asarray(A, np.float64)
        tol = 50 * rtol(dt) * max(1.0, np.abs(G @ An).max())
        draw = lambda k: S.SparseSign(Z).draw(k, L, M, dtype=dt)  # noqa: E731
        keys = jax.random.split(jax.random.key(5), 3)
        refs = [np.asarray(draw(k).todense(), np.float64) for k in keys]
        As = jnp.stack([A, -2 * A, A[::-1]])
        W = jnp.asarray(np.random.default_rng(3).standard_normal((L, N)).astype(dt))
        for impl in ("auto", "xla"):
            apply = lambda s, X: s.apply_dense(X, impl=impl)  # noqa: E731,B023
            cases = {
                "jit": lambda: (jax.jit(apply)(sk, A), G @ An),
                "vmap keys, shared A": lambda: (
                    jax.jit(jax.vmap(lambda k: apply(draw(k), A)))(keys),
                    np.stack([Gk @ An for Gk in refs])),
                "grad": lambda: (jax.jit(jax.grad(lambda X: jnp.sum(W * apply(sk, X))))(A),
                                 G.T @ np.asarray(W, np.float64)),
            }
            if impl == "auto":   # the primitive's batching and transpose rules
                cases["vmap over A"] = lambda: (
                    jax.jit(jax.vmap(lambda X: apply(sk, X)))(As),
                    np.stack([G @ np.asarray(X, np.float64) for X in As]))
                cases["grad of the square, per key"] = lambda: (
                    jax.jit(jax.vmap(lambda k: jax.grad(
                        lambda X: 0.5 * jnp.sum(apply(draw(k), X) ** 2))(A)))(keys),
                    np.stack([Gk.T @ (Gk @ An) for Gk in refs]))
            for name, case in cases.items():
                got, want = case()
                assert got.dtype == dt, (impl, name)
                np.testing.assert_allclose(np.asarray(got, np.float64), want,
                                           atol=tol * 10, err_msg=f"{impl}: {name}")
        # the two formulas themselves, differentiated in the signs by JAX
        rows = np.asarray(sk.rows)
        want_s = np.einsum("jtc,jc->jt", np.asarray(W, np.float64)[rows], An)
        for f in (K.sparse_sign_segment_sum, K.sparse_sign_csr):
            got = jax.jit(lambda X: f(X, sk.rows, sk.signs, L))(A)  # noqa: B023
            np.testing.assert_allclose(np.asarray(got, np.float64), G @ An, atol=tol)
            g = jax.grad(lambda s: jnp.sum(W * f(A, sk.rows, s, L)))(sk.signs)  # noqa: B023
            np.testing.assert_allclose(np.asarray(g, np.float64), want_s, atol=tol * 10)


def test_sort_keys_packed_or_key_value(monkeypatch):
    """Both layouts of the row sort give the same CSR order (row, then column)."""
    sk, A, *_ = _case(np.float32)
    packed = K._csr_order(sk.rows, sk.signs, L)
    monkeypatch.setattr(K, "_PACKED_KEYS", 0)
    pairs = K._csr_order(sk.rows, sk.signs, L)
    r, c, v = (np.asarray(x) for x in packed)
    for x, y in zip(packed, pairs):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert np.all(np.diff(r) >= 0) and np.all((np.diff(r) > 0) | (np.diff(c) > 0))
    G = np.zeros((L, M))
    G[r, c] = v
    np.testing.assert_array_equal(G, np.asarray(sk.todense()))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_sparse_sign_times_sparse_sorted_formula(dt, route):
    """Gamma @ S by the GPU/TPU formula (sort the nnz * zeta products by output position,
    sorted segment sum) forced on CPU: jit, grad in S's values, vmap over keys."""
    import dataclasses
    route("accelerator")
    with _x64(dt):
        sk, _, _, Sp, G = _case(dt, seed=2)
        op = R.as_operator(Sp)
        D = Sp.toarray().astype(np.float64)
        want = G @ D
        tol = 20 * rtol(dt) * max(1.0, np.abs(want).max())
        np.testing.assert_allclose(np.asarray(jax.jit(lambda s, o: s.apply(o))(sk, op)), want,
                                   atol=tol)
        g = jax.grad(lambda d: 0.5 * jnp.sum(
            sk.apply(dataclasses.replace(op, data_c=d)) ** 2))(op.data_c)
        csc = Sp.tocsc()
        cols = np.repeat(np.arange(Sp.shape[1]), np.diff(csc.indptr))
        np.testing.assert_allclose(np.asarray(g), (G.T @ want)[csc.indices, cols], atol=tol)
        keys = jax.random.split(jax.random.key(6), 3)
        got = jax.vmap(lambda k: S.SparseSign(Z).draw(k, L, M, dtype=dt).apply(op))(keys)
        for k, out in zip(keys, got):
            ref = np.asarray(S.SparseSign(Z).draw(k, L, M, dtype=dt).todense(), np.float64) @ D
            np.testing.assert_allclose(np.asarray(out), ref, atol=tol)


def _low_rank(rng, m, n, dt):
    U = np.linalg.qr(rng.standard_normal((m, 12)))[0]
    V = np.linalg.qr(rng.standard_normal((n, 12)))[0]
    return ((U * np.geomspace(1, 1e-2, 12)) @ V.T).astype(dt)


@pytest.mark.parametrize("kind", ["dense", "scipy.sparse"])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_rsvd_and_cur_fallback_equal_kernels(dt, kind, route):
    rng = np.random.default_rng(0)
    with _x64(dt):
        if kind == "dense":
            A = _low_rank(rng, 400, 60, dt)
        else:
            A = sp.random(400, 60, density=0.1, random_state=rng, format="csr").astype(dt)
        key, k = jax.random.key(1), 6
        out = {}
        for name in ("kernel", "fallback"):
            decisions = route(name)
            out[name] = (R.rsvd(key, A, k, sketch="sparse_sign", power_iters=1),
                         R.cur(key, A, k, method=R.Method(sketch="sparse_sign")))
            assert decisions and all(u == (name == "kernel") for _, u in decisions), decisions
        tol = 1e-3 if dt == np.float32 else 1e-9
        (s1, c1), (s2, c2) = out["kernel"], out["fallback"]
        np.testing.assert_allclose(np.asarray(s2.s), np.asarray(s1.s), rtol=tol)
        recon = [np.asarray((s.U * s.s) @ s.Vt, np.float64) for s in (s1, s2)]
        scale = np.abs(recon[0]).max()
        np.testing.assert_allclose(recon[1], recon[0], atol=tol * scale)
        np.testing.assert_array_equal(np.asarray(c2.rows), np.asarray(c1.rows))
        np.testing.assert_array_equal(np.asarray(c2.cols), np.asarray(c1.cols))
        cur = [np.asarray(c.C @ c.U @ c.R, np.float64) for c in (c1, c2)]
        np.testing.assert_allclose(cur[1], cur[0], atol=tol * np.abs(cur[0]).max())


# ---- the checks: one warning, never a crash ---------------------------------------------
def _apply_checked(dt=np.float32):
    sk, A, _, _, G = _case(dt)
    got = jax.jit(lambda s, A: s.apply(A))(sk, A)
    np.testing.assert_allclose(np.asarray(got, np.float64), G @ np.asarray(A, np.float64),
                               atol=1e-4 * np.abs(G @ np.asarray(A)).max())
    Sp = sp.random(M, 9, density=0.05, random_state=0).astype(dt)
    op = R.as_operator(Sp)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda s, o: s.apply(o))(sk, op)),
                               G @ Sp.toarray(), atol=1e-4)


def test_env_zero_is_quiet(fresh_state, monkeypatch):
    monkeypatch.setenv(K.KERNELS_ENV, "0")
    assert K.cpu_kernels_status() == (False, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", K.KernelFallbackWarning)
        _apply_checked()


def test_numba_outside_tested_range_falls_back_with_one_warning(fresh_state, monkeypatch):
    monkeypatch.setattr(K, "NUMBA_VERSIONS", ((0, 1), (0, 2)))
    used, reason = K.cpu_kernels_status()
    assert not used and "outside the tested range" in reason and K.KERNELS_ENV in reason
    with pytest.warns(K.KernelFallbackWarning, match="outside the tested range") as rec:
        _apply_checked()
        _apply_checked(np.float32)
    assert len([w for w in rec if issubclass(w.category, K.KernelFallbackWarning)]) == 1
    monkeypatch.setenv(K.KERNELS_ENV, "1")          # the documented opt-in tries them anyway
    assert K.cpu_kernels_status() == (True, None)


def test_foreign_ffi_api_falls_back_even_when_forced(fresh_state, monkeypatch):
    monkeypatch.setattr(K, "_ffi_api_version", lambda: (1, 0))
    monkeypatch.setenv(K.KERNELS_ENV, "1")
    used, reason = K.cpu_kernels_status()
    assert not used and "FFI API 1.0" in reason
    with pytest.warns(K.KernelFallbackWarning, match="FFI API"):
        _apply_checked()
    monkeypatch.setattr(K, "_ffi_api_version", lambda: (0, 0))   # older than the layout
    fresh_state.pop("warned", None)
    assert not K.cpu_kernels_status()[0]


def test_ffi_api_version_is_read_from_jaxlib_headers():
    api = K._ffi_api_version()
    assert api is None or (api[0] == K.FFI_API_VERSION[0] and api[1] >= K.FFI_API_VERSION[1])


def test_kernel_build_failure_falls_back_with_one_warning(fresh_state, monkeypatch):
    def broken(target):
        raise RuntimeError("cfunc compilation failed (simulated)")

    monkeypatch.setattr(K, "_register", broken)
    with pytest.warns(K.KernelFallbackWarning, match="simulated") as rec:
        _apply_checked()
        _apply_checked(np.float32)
    assert len([w for w in rec if issubclass(w.category, K.KernelFallbackWarning)]) == 1
    assert "simulated" in fresh_state["broken"]      # not retried on every lowering


def test_numba_import_failure_falls_back(fresh_state, monkeypatch):
    monkeypatch.setattr(K, "_NUMBA_ERROR", "numba cannot be imported (ImportError: simulated)")
    with pytest.warns(K.KernelFallbackWarning, match="cannot be imported"):
        _apply_checked()


# ---- the GPU benchmark runs (tiny) on CPU -------------------------------------------------
def test_bench_sparse_vs_gaussian_runs_on_cpu():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "sparse_sign_bench", EXPERIMENTS / "gpu" / "sparse_sign_bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    res = mod.bench_sparse_vs_gaussian(m=256, n=8, l=16, zeta=4, repeats=2)
    assert res["backend"] == jax.default_backend() == "cpu"
    assert set(res["median_s"]) == set(mod.METHODS) and all(
        t > 0 for t in res["median_s"].values())
    assert set(res["ratios"]) == {"gaussian / sparse_sign", "gaussian_highest / sparse_sign",
                                  "sparse_sign / floor", "sparse_sign_xla / sparse_sign"}
    assert res["max_rel_diff_xla"] < 1e-5
    assert "sparse sign vs Gaussian" in mod.format_table(res)
    before = os.environ.get(K.KERNELS_ENV)
    routes = mod.bench_cpu_routes(m=256, n=8, l=16, zeta=4, repeats=1)
    assert set(routes["median_s"]) == set(mod.CPU_ROUTES)
    assert max(routes["max_rel_diff"].values()) < 1e-5
    assert os.environ.get(K.KERNELS_ENV) == before and not K._CPU_FALLBACK_AS_ACCELERATOR
