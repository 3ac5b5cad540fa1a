"""Randomized block Krylov iteration (RBKI): a rangefinder and a truncated SVD that keep every
iterate of the power method (beyond the thesis; Musco and Musco, NeurIPS 2015; Tropp and
Webber, "Randomized algorithms for low-rank matrix approximation", arXiv 2306.12418).

With a test matrix ``Omega`` of b columns and depth q, the Krylov space is

    K_q = range [A Omega, (A A^H) A Omega, ..., (A A^H)^q A Omega]      (dimension b (q + 1)),

built block by block: each new block is orthogonalised against the blocks before it by block
Gram-Schmidt followed by a Householder QR, twice ("twice is enough"; the second pass also
cleans the directions that the first QR normalised up from rounding when the new block is
numerically dependent on the space so far). Its products with ``A^H`` are
kept, so ``B = Q^H A`` costs one more product with b columns: ``b (2q + 2)`` matrix-vector
products in all, the cost of subspace iteration with q power iterations on b columns
(:func:`rdr_jax.rsvd`). The truncated SVD is the Rayleigh-Ritz one, ``Q [Q^H A]_k``.

Why: the subspace iteration's space ``range (A A^H)^q A Omega`` is a subspace of ``K_q``, so
for the same test matrix and the same matvecs the Krylov space's canonical angles to any
fixed subspace are no larger, and ``||A - Q [Q^H A]_k||_F`` (the best rank-k approximation
with columns in the space) is no larger either. The gain is largest for slowly decaying
spectra. Derivation and measurements: ``docs/krylov.md``.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from rdr_jax._src import jit as _jit
from rdr_jax._src import validation as V
from rdr_jax._src.dense import mm as _mm
from rdr_jax._src.tallqr import Householder
from rdr_jax.operators import LinearOperator, as_operator
from rdr_jax.randomized_svd import RSVD, orth
from rdr_jax.sketching import as_sketch

__all__ = ["krylov_range", "block_krylov_svd", "krylov_basis"]

_HOUSEHOLDER = Householder()



def krylov_basis(key, op: LinearOperator, block_size: int, depth: int, sketch):
    """Traceable core (no validation; ``block_size``, ``depth`` static, ``sketch`` a choice
    object): ``(Q, AhQ)`` with Q (m x b (q + 1)) an orthonormal basis of ``K_q`` and
    ``AhQ = A^H Q`` (n x b (q + 1)). The test matrix is drawn as in
    :func:`rdr_jax.randomized_svd.power_range` (the same ``Omega`` for the same key and
    sketch)."""
    m, n = op.shape
    b, q = block_size, depth
    S = sketch.draw(key, b, n, dtype=op.dtype)
    Q0 = orth(op.H.apply_sketch(S).conj().T, _HOUSEHOLDER)         # orth(A Omega^H)
    Qs = jax.lax.dynamic_update_slice(jnp.zeros((m, b * (q + 1)), op.dtype), Q0, (0, 0))
    Hs = jnp.zeros((n, b * (q + 1)), op.dtype)

    def step(i, carry):
        Qs, Hs = carry
        Qi = jax.lax.dynamic_slice(Qs, (0, i * b), (m, b))
        Zi = op.rmatmat(Qi)                                         # A^H Q_i
        Hs = jax.lax.dynamic_update_slice(Hs, Zi, (0, i * b))
        Y = op.matmat(Zi)
        # block Gram-Schmidt then QR, twice (the unfilled blocks are zero): the second pass
        # also cleans what the first QR normalised up from rounding, where the new block is
        # (numerically) dependent on the space so far (an exact-rank A, a deep iteration)
        for _ in range(2):
            Y = orth(Y - _mm(Qs, _mm(Qs.conj().T, Y)), _HOUSEHOLDER)
        return jax.lax.dynamic_update_slice(Qs, Y, (0, (i + 1) * b)), Hs

    Qs, Hs = jax.lax.fori_loop(0, q, step, (Qs, Hs))
    last = jax.lax.dynamic_slice(Qs, (0, q * b), (m, b))
    Hs = jax.lax.dynamic_update_slice(Hs, op.rmatmat(last), (0, q * b))
    return Qs, Hs


@functools.partial(_jit.jit, static_argnames=("block_size", "depth", "sketch"))
def _range_jit(key, op, block_size, depth, sketch):
    return krylov_basis(key, op, block_size, depth, sketch)[0]


@functools.partial(_jit.jit, static_argnames=("k", "block_size", "depth", "sketch"))
def _svd_jit(key, op, k, block_size, depth, sketch):
    Q, AhQ = krylov_basis(key, op, block_size, depth, sketch)
    Ut, s, Vt = jnp.linalg.svd(AhQ.conj().T, full_matrices=False)  # Q^H A = Ut S Vt
    return RSVD(_mm(Q, Ut[:, :k]), s[:k], Vt[:k])


def _check(key, A, block_size, depth, sketch):
    key = V.check_key(key)
    op = as_operator(A)
    m, n = op.shape
    b = V.check_int("block_size", block_size, low=1)
    q = V.check_int("depth", depth, low=0)
    if b * (q + 1) > min(m, n):
        raise ValueError(
            f"the Krylov space has dimension block_size * (depth + 1) = {b} * {q + 1} = "
            f"{b * (q + 1)}, more than min(m, n) = {min(m, n)} for A of shape {(m, n)}; use "
            "a smaller block_size or depth")
    return key, op, b, q, as_sketch(sketch)


def krylov_range(key, A: Any, block_size: int, depth: int, *,
                 sketch: Any = "gaussian") -> jax.Array:
    """Orthonormal basis of the block Krylov space ``K_q = range [A Omega, (A A^H) A Omega,
    ..., (A A^H)^q A Omega]`` (RBKI; Musco and Musco 2015; Tropp and Webber 2023, Sec. 5).

    It contains the range of :func:`rdr_jax.rangefinder` ``(key, A, block_size,
    power_iters=depth)`` (the same ``Omega``), so the thesis' canonical-angle bounds for
    ``(l, q) = (block_size, depth)`` (Theorem 3.1, :mod:`rdr_jax.angles`) bound its angles
    too. Why: more accuracy for the same ``block_size (2 depth + 1)`` products with A.

    Args:
      key: ``jax.random.key``.
      A: m x n matrix or operator.
      block_size: b, columns of the test matrix (static).
      depth: q >= 0, Krylov steps (static); ``b (q + 1) <= min(m, n)``.
      sketch: the test matrix's distribution, as :func:`rdr_jax.rangefinder`.

    Returns:
      ``Q`` (m x b (q + 1)) with orthonormal columns.
    """
    key, op, b, q, sk = _check(key, A, block_size, depth, sketch)
    return _range_jit(key, op, b, q, sk)


def block_krylov_svd(key, A: Any, k: int, *, block_size: int | None = None, depth: int = 2,
                     sketch: Any = "gaussian") -> RSVD:
    """Rank-k truncated SVD by randomized block Krylov iteration: ``Q`` from
    :func:`krylov_range`, then ``Q [Q^H A]_k`` (Rayleigh-Ritz; Tropp and Webber 2023,
    Algorithm "RBKI"), with ``b (2q + 2)`` products with A or ``A^H``.

    Why: for slowly decaying spectra it is more accurate than :func:`rdr_jax.rsvd` with the
    same number of products (``docs/krylov.md`` has the measurements); use ``rsvd`` for fast
    decay, where one pass is enough.

    Args:
      key: ``jax.random.key``.
      A: m x n matrix or operator.
      k: target rank (static), ``k <= b (q + 1)``.
      block_size: b (static); default ``k``.
      depth: q >= 0 Krylov steps (static; default 2).
      sketch: as :func:`rdr_jax.rangefinder`.

    Returns:
      :class:`rdr_jax.RSVD` ``(U, s, Vt)``: U (m x k), s (k,), Vt (k x n).
    """
    op = as_operator(A)
    k = V.check_int("k", k, low=1, high=min(op.shape),
                    high_desc=f"min(m, n) for A of shape {op.shape}")
    b = k if block_size is None else block_size
    key, op, b, q, sk = _check(key, op, b, depth, sketch)
    if k > b * (q + 1):
        raise ValueError(f"k = {k} exceeds the Krylov space's dimension block_size * "
                         f"(depth + 1) = {b * (q + 1)}")
    return _svd_jit(key, op, k, b, q, sk)
