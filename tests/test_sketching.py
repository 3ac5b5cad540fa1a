"""Sketching operators: isotropy, apply == todense @ A for every operator kind, keys, jit, vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.fft
import scipy.sparse as sp
import scipy.stats
from jax.experimental import sparse as jsparse

import rdr_jax as R
from rdr_jax import sketching as S
from tests.conftest import rtol

L, MM = 8, 24

MAKERS = {
    "gaussian": lambda k, l, m, dt: S.Gaussian("threefry").draw(k, l, m, dtype=dt),
    "gaussian_hash": lambda k, l, m, dt: S.Gaussian().draw(k, l, m, dtype=dt),
    "srtt_dct": lambda k, l, m, dt: S.SRTT().draw(k, l, m, dtype=dt),
    "srtt_hartley": lambda k, l, m, dt: S.SRTT("hartley").draw(k, l, m, dtype=dt),
    "srtt_nopermute": lambda k, l, m, dt: S.SRTT(permute=False).draw(k, l, m, dtype=dt),
    "sparse_sign": lambda k, l, m, dt: S.SparseSign(3).draw(k, l, m, dtype=dt),
    "sparse_sign_z1": lambda k, l, m, dt: S.SparseSign(1).draw(k, l, m, dtype=dt),
}


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_isotropy_monte_carlo(name, dtype):
    """E[Gamma^T Gamma] = I_m: mean over 4000 keys within 6 standard errors per entry."""
    n_keys = 4000
    keys = jax.random.split(jax.random.key(0), n_keys)
    G = jax.vmap(lambda k: MAKERS[name](k, L, MM, dtype).todense())(keys)
    GtG = np.asarray(jnp.einsum("bij,bik->bjk", G, G), dtype=np.float64)
    mean = GtG.mean(0)
    se = GtG.std(0) / np.sqrt(n_keys)
    err = np.abs(mean - np.eye(MM))
    assert np.all(err <= 6 * se + 1e-5), (err.max(), se.max())
    # and the Monte-Carlo error actually shrinks the estimate towards I
    assert np.abs(mean - np.eye(MM)).max() < 0.2


@pytest.mark.parametrize("name", ["gaussian", "srtt"])
def test_complex_isotropy(name):
    with jax.enable_x64(True):
        keys = jax.random.split(jax.random.key(1), 3000)
        mk = S.Gaussian("threefry") if name == "gaussian" else S.SRTT()
        G = np.asarray(jax.vmap(lambda k: mk.draw(k, L, MM, dtype=np.complex128).todense())(keys))
        GhG = np.einsum("bij,bik->bjk", G.conj(), G)
        se = np.sqrt((np.abs(GhG - GhG.mean(0)) ** 2).mean(0) / len(keys))
        assert np.all(np.abs(GhG.mean(0) - np.eye(MM)) <= 6 * se + 1e-9)


def _operand(kind, rng, dtype, m=MM, n=7):
    A = rng.standard_normal((m, n)).astype(dtype)
    if kind == "dense":
        return A, A
    if kind in ("scipy", "bcoo"):
        Sp = sp.random(m, n, density=0.3, random_state=rng).astype(dtype)
        if kind == "bcoo":
            return jsparse.BCOO.fromdense(jnp.asarray(Sp.toarray())), Sp.toarray()
        return Sp, Sp.toarray()
    if kind == "implicit":
        Aj = jnp.asarray(A)
        return R.implicit_operator(lambda X: Aj @ X, lambda Y: Aj.T @ Y, A.shape, dtype), A
    if kind == "factored":
        Lf = sp.random(m, 4, density=0.5, random_state=rng).astype(dtype)
        Rf = rng.standard_normal((n, 4)).astype(dtype)
        d = np.arange(4, 0, -1).astype(dtype)
        return R.factored_operator(Lf, d, Rf), Lf.toarray() @ np.diag(d) @ Rf.T
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["dense", "scipy", "bcoo", "implicit", "factored"])
@pytest.mark.parametrize("name", sorted(MAKERS))
def test_apply_equals_todense_matmul(name, kind, dtype, rng):
    A, ref = _operand(kind, rng, dtype)
    sk = MAKERS[name](jax.random.key(7), L, MM, dtype)
    G = np.asarray(sk.todense(), np.float64)
    got = np.asarray(sk.apply(A))
    assert got.shape == (L, ref.shape[1])
    assert got.dtype == dtype
    want = G @ ref.astype(np.float64)
    np.testing.assert_allclose(got, want, atol=20 * rtol(dtype) * np.abs(ref).max() * MM)
    np.testing.assert_allclose(np.asarray(sk.adjoint_dense(), np.float64), G.T,
                               atol=10 * rtol(dtype))


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_same_key_same_sketch_with_and_without_jit(name, dtype, rng):
    key = jax.random.key(42)
    A = jnp.asarray(rng.standard_normal((MM, 5)).astype(dtype))
    eager = MAKERS[name](key, L, MM, dtype)
    jitted = jax.jit(lambda k: MAKERS[name](k, L, MM, dtype))(key)
    for a, b in zip(jax.tree_util.tree_leaves(eager), jax.tree_util.tree_leaves(jitted)):
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_allclose(np.asarray(eager.todense()),
                               np.asarray(jax.jit(lambda s: s.todense())(jitted)),
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(eager.apply(A)),
                               np.asarray(jax.jit(lambda k, A: MAKERS[name](k, L, MM, dtype)
                                                  .apply(A))(key, A)),
                               rtol=1e-5, atol=1e-6)
    # a different key gives a different sketch
    other = MAKERS[name](jax.random.key(43), L, MM, dtype)
    assert not np.allclose(np.asarray(other.todense()), np.asarray(eager.todense()))


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_vmap_over_keys(name, rng):
    A = jnp.asarray(rng.standard_normal((MM, 5)).astype(np.float32))
    keys = jax.random.split(jax.random.key(0), 6)
    batched = jax.vmap(lambda k: MAKERS[name](k, L, MM, np.float32).apply(A))(keys)
    for i in range(6):
        one = MAKERS[name](keys[i], L, MM, np.float32)
        np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(one.todense() @ A),
                                   rtol=1e-4, atol=1e-5)


def test_sparse_sign_structure_and_impls(rng):
    m, l, zeta = 500, 16, 5
    sk = S.SparseSign(zeta).draw(jax.random.key(3), l, m, dtype=np.float64)
    rows = np.asarray(sk.rows)
    assert rows.shape == (m, zeta) and rows.min() >= 0 and rows.max() < l
    assert all(len(set(r)) == zeta for r in rows), "rows within a column must be distinct"
    G = np.asarray(sk.todense())
    np.testing.assert_array_equal((G != 0).sum(0), zeta)
    np.testing.assert_allclose(np.abs(G[G != 0]), 1 / np.sqrt(zeta))
    # rows used uniformly: chi-square goodness of fit over all (column, slot) picks
    counts = np.bincount(rows.ravel(), minlength=l)
    assert scipy.stats.chisquare(counts).pvalue > 1e-4
    # the CPU kernel (default) and XLA's scatter-add agree
    A = jnp.asarray(rng.standard_normal((m, 9)).astype(np.float32))
    sk32 = S.SparseSign(zeta).draw(jax.random.key(3), l, m, dtype=np.float32)
    np.testing.assert_allclose(np.asarray(sk32.apply_dense(A)),
                               np.asarray(sk32.apply_dense(A, impl="xla")), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="impl"):
        sk32.apply_dense(A, impl="numba")


# ---- sparse sign products: jit == eager == dense reference, autodiff, vmap, complex ------
SS_M, SS_N, SS_L, SS_Z = 300, 7, 16, 4


def _x64(dt):
    return jax.enable_x64(np.dtype(dt) == np.float64)


def _sparse_sign_case(dt, seed=0, m=SS_M, n=SS_N):
    """A sparse sign sketch, a dense A and the float64 dense reference Gamma (l x m)."""
    rng = np.random.default_rng(seed)
    sk = S.SparseSign(SS_Z).draw(jax.random.key(seed), SS_L, m, dtype=dt)
    A = jnp.asarray(rng.standard_normal((m, n)).astype(dt))
    return sk, A, np.asarray(sk.todense(), np.float64)


@pytest.mark.parametrize("threads", ["serial", "parallel"])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_sparse_sign_jit_eager_and_xla_match_dense_reference(dt, threads, monkeypatch):
    from rdr_jax._src import kernels as _kernels
    monkeypatch.setattr(_kernels, "_PARALLEL_WORK", 0 if threads == "parallel" else 1 << 62)
    with _x64(dt):
        sk, A, G = _sparse_sign_case(dt)
        want = G @ np.asarray(A, np.float64)
        tol = 20 * rtol(dt) * np.abs(want).max()
        got = {"eager": sk.apply(A),
               "jit": jax.jit(lambda s, A: s.apply(A))(sk, A),
               "jit draw+apply": jax.jit(lambda k, A: S.SparseSign(SS_Z).draw(k, SS_L, SS_M, dtype=dt)
                                         .apply(A))(jax.random.key(0), A),
               "xla": jax.jit(lambda s, A: s.apply_dense(A, impl="xla"))(sk, A)}
        for name, out in got.items():
            assert out.dtype == dt and out.shape == (SS_L, SS_N), name
            np.testing.assert_allclose(np.asarray(out, np.float64), want, atol=tol, err_msg=name)


def test_sparse_sign_lowering_ffi_on_cpu_xla_on_gpu_tpu():
    """On CPU the jitted product is the typed-FFI kernel (no host callback, no scatter); for
    GPU/TPU the same primitives lower to XLA's scatter/gather (checked by lowering only)."""
    sk, A, _ = _sparse_sign_case(np.float32)
    fwd = jax.jit(lambda s, A: s.apply(A))
    bwd = jax.jit(jax.grad(lambda A, s: jnp.sum(s.apply(A) ** 2)))
    hlo = fwd.trace(sk, A).lower(lowering_platforms=("cpu",)).as_text()
    assert "custom_call @rdr_jax_sparse_sign" in hlo
    assert "callback" not in hlo and "scatter" not in hlo
    for platform in ("cuda", "tpu"):
        for f, args in ((fwd, (sk, A)), (bwd, (A, sk))):
            hlo = f.trace(*args).lower(lowering_platforms=(platform,)).as_text()
            assert "custom_call @rdr_jax" not in hlo and ("scatter" in hlo or "gather" in hlo)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_sparse_sign_grad_jvp_vjp_match_dense_reference(dt):
    """Gamma A is linear in A: jvp = Gamma dA, vjp = Gamma^T G (a gather), on the fast path."""
    with _x64(dt):
        sk, A, G = _sparse_sign_case(dt)
        rng = np.random.default_rng(1)
        W = jnp.asarray(rng.standard_normal((SS_L, SS_N)).astype(dt))
        dA = jnp.asarray(rng.standard_normal(A.shape).astype(dt))
        tol = 50 * rtol(dt)
        f = jax.jit(lambda A: sk.apply(A))
        # grad of <W, Gamma A> is Gamma^T W
        g = jax.grad(lambda A: jnp.sum(W * f(A)))(A)
        np.testing.assert_allclose(np.asarray(g), G.T @ np.asarray(W, np.float64), atol=tol)
        # grad of ||Gamma A||^2 / 2 is Gamma^T Gamma A, under jit of the whole gradient
        g2 = jax.jit(jax.grad(lambda A: 0.5 * jnp.sum(sk.apply(A) ** 2)))(A)
        np.testing.assert_allclose(np.asarray(g2), G.T @ (G @ np.asarray(A, np.float64)),
                                   atol=tol * 10)
        out, tan = jax.jvp(f, (A,), (dA,))
        np.testing.assert_allclose(np.asarray(tan), G @ np.asarray(dA, np.float64), atol=tol)
        out, vjp = jax.vjp(f, A)
        np.testing.assert_allclose(np.asarray(vjp(W)[0]), G.T @ np.asarray(W, np.float64),
                                   atol=tol)
        # second order (the transpose of the transpose is the forward kernel again)
        hvp = jax.jvp(jax.grad(lambda A: 0.5 * jnp.sum(f(A) ** 2)), (A,), (dA,))[1]
        np.testing.assert_allclose(np.asarray(hvp), G.T @ (G @ np.asarray(dA, np.float64)),
                                   atol=tol * 10)
        # and w.r.t. the signs (d<W, Gamma A>/d signs[j, t] = <W[rows[j, t]], A[j]>)
        gs = jax.grad(lambda s: jnp.sum(W * S.SparseSign(
            sk.zeta, sk.rows, s, sk.l, sk.m, sk.dtype_).apply(A)))(sk.signs)
        rows = np.asarray(sk.rows)
        want = np.einsum("jtc,jc->jt", np.asarray(W, np.float64)[rows], np.asarray(A, np.float64))
        np.testing.assert_allclose(np.asarray(gs), want, atol=tol * 10)


def test_sparse_sign_vmap_over_keys_and_matrices():
    sk, A, _ = _sparse_sign_case(np.float32)
    keys = jax.random.split(jax.random.key(5), 4)
    As = jnp.stack([A, 2 * A, -A, A[::-1]])
    draw = lambda k: S.SparseSign(SS_Z).draw(k, SS_L, SS_M, dtype=np.float32)  # noqa: E731
    refs = [np.asarray(draw(k).todense(), np.float64) for k in keys]
    cases = {
        "keys, shared A": (jax.jit(jax.vmap(lambda k: draw(k).apply(A)))(keys),
                           [G @ np.asarray(A) for G in refs]),
        "shared sketch, batch of A": (jax.vmap(sk.apply)(As),
                                      [np.asarray(sk.todense()) @ np.asarray(X) for X in As]),
        "keys and A": (jax.vmap(lambda k, X: draw(k).apply(X))(keys, As),
                       [G @ np.asarray(X) for G, X in zip(refs, As)]),
        "grad per key": (jax.vmap(lambda k: jax.grad(
            lambda A: 0.5 * jnp.sum(draw(k).apply(A) ** 2))(A))(keys),
            [G.T @ (G @ np.asarray(A)) for G in refs]),
    }
    for name, (got, want) in cases.items():
        np.testing.assert_allclose(np.asarray(got), np.stack(want), rtol=1e-4, atol=1e-4,
                                   err_msg=name)


@pytest.mark.parametrize("dt", [np.complex64, np.complex128])
def test_sparse_sign_complex_input(dt):
    rdt = np.float32 if dt == np.complex64 else np.float64
    with _x64(rdt):
        sk, Ar, G = _sparse_sign_case(rdt)
        A = Ar + 1j * Ar[::-1]
        want = G @ np.asarray(A, np.complex128)
        tol = 20 * rtol(rdt) * np.abs(want).max()
        for out in (sk.apply(A), jax.jit(lambda s, A: s.apply(A))(sk, A)):
            assert out.dtype == dt
            np.testing.assert_allclose(np.asarray(out), want, atol=tol)
        tan = jax.jvp(jax.jit(sk.apply), (A,), (1j * A,))[1]
        np.testing.assert_allclose(np.asarray(tan), 1j * want, atol=tol)
        # a real loss of complex A: grad is the conjugate-free cotangent Gamma^T (2 Gamma A)
        g = jax.grad(lambda A: jnp.sum(jnp.abs(sk.apply(A)) ** 2))(A)
        np.testing.assert_allclose(np.asarray(g), 2 * G.T @ want.conj(), atol=tol * 10)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_sparse_sign_times_sparse_matches_dense_reference(dt, monkeypatch):
    """Gamma @ S for a sparse S (CSC kernel): jit, eager, grad in S's values, vmap over keys."""
    from rdr_jax._src import kernels as _kernels
    if dt == np.float64:  # the parallel kernel (float32 takes the serial one: small product)
        monkeypatch.setattr(_kernels, "_PARALLEL_WORK", 0)
    with _x64(dt):
        rng = np.random.default_rng(2)
        Sp = sp.random(SS_M, 9, density=0.05, random_state=rng).astype(dt)
        op = R.as_operator(Sp)
        sk = S.SparseSign(SS_Z).draw(jax.random.key(4), SS_L, SS_M, dtype=dt)
        G = np.asarray(sk.todense(), np.float64)
        want = G @ Sp.toarray()
        tol = 20 * rtol(dt) * max(1.0, np.abs(want).max())
        for out in (sk.apply(op), jax.jit(lambda s, o: s.apply(o))(sk, op)):
            assert out.dtype == dt
            np.testing.assert_allclose(np.asarray(out), want, atol=tol)
        # d/d values of 0.5 ||Gamma S||^2 = (Gamma^T Gamma S) at the nonzeros (CSC order)
        import dataclasses
        g = jax.grad(lambda d: 0.5 * jnp.sum(
            sk.apply(dataclasses.replace(op, data_c=d)) ** 2))(op.data_c)
        csc = Sp.tocsc()
        cols = np.repeat(np.arange(9), np.diff(csc.indptr))
        np.testing.assert_allclose(np.asarray(g), (G.T @ want)[csc.indices, cols], atol=tol)
        keys = jax.random.split(jax.random.key(6), 3)
        got = jax.vmap(lambda k: S.SparseSign(SS_Z).draw(k, SS_L, SS_M, dtype=dt).apply(op))(keys)
        for k, out in zip(keys, got):
            ref = np.asarray(S.SparseSign(SS_Z).draw(k, SS_L, SS_M, dtype=dt).todense()) @ Sp.toarray()
            np.testing.assert_allclose(np.asarray(out), ref, atol=tol)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_hash_generator_is_standard_normal(dt):
    with jax.enable_x64(dt == np.float64):
        x = np.asarray(S.hash_normal(jax.random.key(5), (200, 1000), dt), np.float64)
    assert x.dtype == np.float64 and np.all(np.isfinite(x))
    flat = x.ravel()
    n = flat.size
    assert abs(flat.mean()) < 5 / np.sqrt(n)
    assert abs(flat.var() - 1) < 5 * np.sqrt(2 / n)
    assert abs(scipy.stats.kurtosis(flat, fisher=False) - 3) < 5 * np.sqrt(24 / n)
    assert scipy.stats.kstest(flat[:50000], "norm").pvalue > 1e-3
    # no correlation between neighbours along either axis, nor between rows
    for a, b in ((x[:, 1:], x[:, :-1]), (x[1:], x[:-1])):
        assert abs(np.corrcoef(a.ravel(), b.ravel())[0, 1]) < 5 / np.sqrt(n)
    # different keys give independent draws
    with jax.enable_x64(dt == np.float64):
        y = np.asarray(S.hash_normal(jax.random.key(6), (200, 1000), dt), np.float64)
    assert abs(np.corrcoef(flat, y.ravel())[0, 1]) < 5 / np.sqrt(n)


def test_srtt_matches_explicit_formula():
    """Gamma = sqrt(m/l) P T Phi Pi with T the orthonormal DCT-II, built by hand."""
    with jax.enable_x64(True):
        m, l = 16, 5
        sk = S.SRTT().draw(jax.random.key(9), l, m, dtype=np.float64)
        T = scipy.fft.dct(np.eye(m), type=2, norm="ortho", axis=0)
        Pi = np.eye(m)[np.asarray(sk.perm)]
        Phi = np.diag(np.asarray(sk.signs))
        P = np.eye(m)[np.asarray(sk.rows)]
        want = np.sqrt(m / l) * P @ T @ Phi @ Pi
        np.testing.assert_allclose(np.asarray(sk.todense()), want, atol=1e-12)
        assert len(set(np.asarray(sk.rows).tolist())) == l


def _srtt_reference(sk, A):
    """``sqrt(m/l) P T Phi Pi A`` with scipy's transforms in float64/complex128 (the formula
    of the previous implementation: the whole transform along axis 0, then the rows)."""
    m, l = sk.m, sk.l
    X = np.asarray(A, np.complex128 if np.iscomplexobj(A) or sk.transform == "fft"
                   else np.float64)
    if sk.permute:
        X = X[np.asarray(sk.perm)]
    X = X * np.asarray(sk.signs).astype(X.dtype)[:, None]
    if sk.transform == "dct":
        T = scipy.fft.dct(X.real, type=2, norm="ortho", axis=0)
        if np.iscomplexobj(X):
            T = T + 1j * scipy.fft.dct(X.imag, type=2, norm="ortho", axis=0)
    elif sk.transform == "hartley":
        F = scipy.fft.fft(X, axis=0, norm="ortho")
        T = F.real - F.imag
    else:
        T = scipy.fft.fft(X, axis=0, norm="ortho")
    return np.sqrt(m / l) * T[np.asarray(sk.rows)]


SRTT_CASES = ([("dct", np.float64, m) for m in (1, 2, 3, 97, 600, 1024)]
              + [("dct", np.float32, m) for m in (3, 1024)]
              + [("hartley", np.float64, m) for m in (3, 600)]
              + [("fft", np.complex128, m) for m in (2, 600)])


@pytest.mark.parametrize("transform,dt,m", SRTT_CASES)
def test_srtt_fft_and_dense_match_scipy(transform, dt, m):
    """Both algorithms of ``apply_dense`` (FFTs over row groups, explicit matrix) and
    ``todense``/``adjoint_dense`` equal scipy's whole-matrix transform, even/odd/prime/small m."""
    with jax.enable_x64(True):
        rng = np.random.default_rng(m)
        A = rng.standard_normal((m, 7))
        if np.dtype(dt).kind == "c":
            A = A + 1j * rng.standard_normal((m, 7))
        A = A.astype(dt)
        tol = 1e-12 if np.finfo(dt).bits > 32 else 2e-5
        for l in sorted({1, min(m, 40)}):
            sk = S.SRTT(transform).draw(jax.random.key(m + 31 * l), l, m, dtype=dt)
            want = _srtt_reference(sk, A)
            scale = np.abs(want).max()
            for impl in ("fft", "dense", "auto"):
                got = jax.jit(lambda s, A, impl=impl: s.apply_dense(A, impl=impl))(sk, A)
                assert got.dtype == dt and got.shape == (l, 7)
                np.testing.assert_allclose(np.asarray(got), want, atol=tol * scale)
            G = np.asarray(sk.todense(), np.complex128)
            np.testing.assert_allclose(G @ A, want, atol=10 * tol * scale)
            np.testing.assert_allclose(np.asarray(sk.adjoint_dense()), G.conj().T, atol=0)


def test_srtt_fft_tilings_agree():
    """The CPU loop (one group of q rows per step, column chunks whose last one overlaps)
    and the single-step layout (all groups at once, the GPU/TPU branch) give the same rows."""
    with jax.enable_x64(True):
        m, n, l = 1024, 37, 40
        A = jnp.asarray(np.random.default_rng(0).standard_normal((m, n)))
        for transform, dt in (("dct", np.float64), ("hartley", np.float64),
                              ("fft", np.complex128)):
            sk = S.SRTT(transform).draw(jax.random.key(3), l, m, dtype=dt)
            X = A.astype(dt)
            want = _srtt_reference(sk, np.asarray(A))
            for q in (4, 256, 1024):
                for tile in (None, 10 ** 6, 8 * q):      # all at once, one chunk, 5 chunks
                    got = jax.jit(S._srtt_fft, static_argnums=(2, 3))(sk, X, q, tile)
                    np.testing.assert_allclose(np.asarray(got), want, atol=1e-12 * n)


def test_srtt_fft_vmap_grad_and_complex_data(rng):
    """impl="fft" under vmap over keys, its gradient (Gamma^T), and complex data with a real
    transform (real and imaginary parts sketched together)."""
    m, l = 512, 48
    A = jnp.asarray(rng.standard_normal((m, 6)).astype(np.float32))
    keys = jax.random.split(jax.random.key(5), 3)
    fn = jax.jit(jax.vmap(lambda k: S.SRTT().draw(k, l, m, dtype=np.float32)
                          .apply_dense(A, impl="fft")))
    batched = fn(keys)
    for i in range(3):
        sk = S.SRTT().draw(keys[i], l, m, dtype=np.float32)
        np.testing.assert_allclose(np.asarray(batched[i]), _srtt_reference(sk, np.asarray(A)),
                                   atol=2e-5 * np.abs(np.asarray(batched[i])).max())
    W = jnp.asarray(rng.standard_normal((l, 6)).astype(np.float32))
    grad = jax.jit(jax.grad(lambda A: jnp.sum(W * sk.apply_dense(A, impl="fft"))))(A)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(sk.adjoint_dense() @ W),
                               rtol=1e-4, atol=1e-4)
    Z = A + 1j * jnp.asarray(rng.standard_normal((m, 6)).astype(np.float32))
    got = jax.jit(lambda Z: sk.apply_dense(Z, impl="fft"))(Z)
    assert got.dtype == np.complex64
    np.testing.assert_allclose(np.asarray(got), _srtt_reference(sk, np.asarray(Z)),
                               atol=2e-5 * np.abs(np.asarray(got)).max())
    with pytest.raises(ValueError, match="impl must be"):
        sk.apply_dense(A, impl="dct")


def test_make_sketch_and_matmul_operator(rng):
    sk = S.make_sketch(jax.random.key(0), "sparse_sign", 4, MM, zeta=2)
    A = rng.standard_normal((MM, 3)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(sk @ A), np.asarray(sk.todense()) @ A, rtol=1e-5,
                               atol=1e-6)
    assert sk.shape == (4, MM) and "SparseSign" in repr(sk)


def test_one_name_per_sketch():
    """``Gaussian``/``SRTT``/``SparseSign`` are both the choice and the drawn sketch (the 0.1
    names ``GaussianSketch``, ``gaussian()``, ... are gone since 0.3: test_deprecations.py)."""
    key = jax.random.key(2)
    for cls, old_cls, old_fn, args in ((S.Gaussian, "GaussianSketch", "gaussian", ()),
                                       (S.SRTT, "SRTTSketch", "srtt", ()),
                                       (S.SparseSign, "SparseSignSketch", "sparse_sign", (3,))):
        drawn = cls(*args).draw(key, 4, 12)
        assert isinstance(drawn, cls) and drawn.shape == (4, 12)
        choice = S.as_sketch(drawn)          # a drawn sketch gives its configuration
        assert type(choice) is cls and choice.l is None and hash(choice) == hash(choice)
        assert S.as_sketch(cls.name) == cls()
        np.testing.assert_array_equal(np.asarray(S.make_sketch(key, cls.name, 4, 12,
                                                               **dict(zip(("zeta",), args)))
                                                 .todense()), np.asarray(drawn.todense()))
        assert not hasattr(S, old_cls) and not hasattr(S, old_fn)
    assert hash(S.Gaussian()) == hash(S.Gaussian()) and "GaussianSketch" not in S.__all__
    with pytest.raises(AttributeError):
        S.gaussian_sketch  # noqa: B018
