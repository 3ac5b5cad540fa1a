"""Randomized block Krylov iteration (rdr_jax.krylov) against numpy: the space, the SVD, its
inclusion of the subspace iteration's range, jit/vmap, determinism, bad input."""

import jax
import numpy as np
import pytest

import rdr_jax as R
from rdr_jax import krylov as K

M, N, B = 80, 60, 6


def slow_decay(rng, dtype, r=N):
    U = np.linalg.qr(rng.standard_normal((M, r)))[0]
    Vm = np.linalg.qr(rng.standard_normal((N, r)))[0]
    s = 1.0 / np.sqrt(np.arange(1, r + 1))
    return ((U * s) @ Vm.T).astype(dtype), s


def tol(dtype):
    return 1e-4 if np.dtype(dtype) == np.float32 else 1e-10


def test_space_and_svd_match_numpy(dtype, rng):
    """Q spans numpy's [Y, (A A^T) Y, (A A^T)^2 Y] for the same Y = A Omega^H (the sketch of
    rdr_jax.range_sketch with the same key); s and the factors equal numpy's Rayleigh-Ritz."""
    A, _ = slow_decay(rng, dtype)
    key, q, k = jax.random.key(1), 2, 5
    Y = np.asarray(R.range_sketch(key, A, B, power_iters=0, stable=False), np.float64)
    A64 = A.astype(np.float64)
    blocks = [Y]
    for _ in range(q):
        blocks.append(A64 @ (A64.T @ blocks[-1]))
    Qn = np.linalg.qr(np.hstack(blocks))[0]
    Q = np.asarray(K.krylov_range(key, A, B, q), np.float64)
    assert Q.shape == (M, B * (q + 1))
    assert np.abs(Q.T @ Q - np.eye(Q.shape[1])).max() < 10 * tol(dtype)
    assert np.linalg.norm(Q @ Q.T - Qn @ Qn.T, 2) < 100 * tol(dtype)
    svd = K.block_krylov_svd(key, A, k, block_size=B, depth=q)
    Ut, s, Vt = np.linalg.svd(Qn.T @ A64, full_matrices=False)
    np.testing.assert_allclose(np.asarray(svd.s, np.float64), s[:k], rtol=100 * tol(dtype))
    Ak = (Qn @ Ut[:, :k]) * s[:k] @ Vt[:k]
    got = (np.asarray(svd.U, np.float64) * np.asarray(svd.s, np.float64)) @ np.asarray(
        svd.Vt, np.float64)
    assert np.linalg.norm(got - Ak) < 100 * tol(dtype) * np.linalg.norm(Ak)


def test_contains_the_subspace_iteration_range(dtype, rng):
    """Same key, same Omega: range((A A^H)^q A Omega) is in K_q, so the angles to the top-k
    singular subspace are no larger, and the rank-k Frobenius error is no larger than
    rsvd's with q power iterations and l = b (the same b (2q + 2) products)."""
    A, s = slow_decay(rng, dtype)
    key, q, k = jax.random.key(2), 2, 4
    Uk = np.linalg.svd(A.astype(np.float64))[0][:, :k]
    Qk = K.krylov_range(key, A, B, q)
    Qs = R.rangefinder(key, A, B, power_iters=q)
    slack = 100 * tol(dtype)
    Qs64 = np.asarray(Qs, np.float64)
    assert np.linalg.norm(Qs64 - np.asarray(Qk, np.float64) @ (np.asarray(Qk, np.float64).T
                                                                @ Qs64)) < slack
    ak = np.asarray(R.angles.canonical_angles(Uk.astype(dtype), Qk), np.float64)
    asi = np.asarray(R.angles.canonical_angles(Uk.astype(dtype), Qs), np.float64)
    assert np.all(ak <= asi + slack), (ak, asi)
    kr = K.block_krylov_svd(key, A, k, block_size=B, depth=q)
    rs = R.rsvd(key, A, k, oversample=B - k, power_iters=q)
    err = [np.linalg.norm(A - (np.asarray(r.U) * np.asarray(r.s)) @ np.asarray(r.Vt))
           for r in (kr, rs)]
    assert err[0] <= err[1] * (1 + slack)
    assert err[0] >= np.sqrt(np.sum(s[k:] ** 2)) * (1 - slack)       # never below optimal


def test_exact_at_exact_rank(dtype, rng):
    A, s = slow_decay(rng, dtype, r=10)
    r = K.block_krylov_svd(jax.random.key(0), A, 10, block_size=4, depth=2)
    np.testing.assert_allclose(np.asarray(r.s, np.float64), s, rtol=100 * tol(dtype))


def test_jit_vmap_and_same_key_same_bytes(rng):
    A, _ = slow_decay(rng, np.float32)
    keys = jax.random.split(jax.random.key(3), 3)
    f = jax.jit(lambda kk: K.block_krylov_svd(kk, A, 4, block_size=B, depth=1).s)
    batched = jax.vmap(f)(keys)
    for i in range(3):
        np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(f(keys[i])), rtol=1e-5)
    a = K.block_krylov_svd(keys[0], A, 4, block_size=B, depth=1)
    b = K.block_krylov_svd(keys[0], A, 4, block_size=B, depth=1)
    for x, y in zip(a, b):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()


def test_bad_inputs(rng):
    A, _ = slow_decay(rng, np.float32)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="dimension block_size"):
        K.krylov_range(key, A, 20, 3)                # 80 > min(m, n) = 60
    with pytest.raises(ValueError, match="exceeds the Krylov space"):
        K.block_krylov_svd(key, A, 10, block_size=2, depth=1)
    with pytest.raises(ValueError, match="depth"):
        K.krylov_range(key, A, 4, -1)
    with pytest.raises((TypeError, ValueError), match="block_size"):
        K.krylov_range(key, A, 2.5, 1)
    with pytest.raises(ValueError, match="k"):
        K.block_krylov_svd(key, A, 0)
