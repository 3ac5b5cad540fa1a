"""Randomized norm estimators for operators (the posterior bounds of Chapters 2-3).

:func:`spectral_norm` (power method, a lower estimate), :func:`spectral_norm_upper` (Halko,
Martinsson & Tropp 2011, Lemma 4.1, a probabilistic upper bound) and :func:`frobenius_norm`
(Hutchinson or Hutch++). All take ``key`` first, accept any operator and vmap over keys.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rdr_jax._src import jit as _jit
from rdr_jax._src import validation as V
from rdr_jax.operators import HIGHEST, as_operator

__all__ = ["spectral_norm", "spectral_norm_upper", "frobenius_norm"]


def _gauss(key, shape, dtype):
    dt = np.dtype(dtype)
    if dt.kind == "c":
        kr, ki = jax.random.split(key)
        rdt = V.real_dtype(dt)
        return ((jax.random.normal(kr, shape, rdt) + 1j * jax.random.normal(ki, shape, rdt))
                / np.sqrt(2)).astype(dt)
    return jax.random.normal(key, shape, dt)


@functools.partial(_jit.jit, static_argnames=("iters",))
def _spectral(key, op, iters):
    v = _gauss(key, (op.shape[1], 1), op.dtype)
    v = v / jnp.linalg.norm(v)

    def body(_, v):
        w = op.rmatmat(op.matmat(v))
        return w / jnp.maximum(jnp.linalg.norm(w), jnp.finfo(w.dtype).tiny)

    v = jax.lax.fori_loop(0, iters, body, v)
    return jnp.linalg.norm(op.matmat(v))


def spectral_norm(key, A: Any, *, iters: int = 20) -> jax.Array:
    """Power-method estimate of ``||A||_2``, never above the true value (up to rounding).

    Args:
      key: ``jax.random.key``.
      A: matrix or operator (real or complex).
      iters: power iterations on ``A^H A`` from a Gaussian start (static, >= 1).

    Returns:
      ``||A v||`` for the last unit iterate ``v``; costs ``2 iters + 1`` products.
    """
    key = V.check_key(key)
    iters = V.check_int("iters", iters, low=1)
    return _spectral(key, as_operator(A), iters)


@functools.partial(_jit.jit, static_argnames=("num_vectors",))
def _spectral_upper(key, op, num_vectors):
    W = _gauss(key, (op.shape[1], num_vectors), op.dtype)
    return 10.0 * math.sqrt(2.0 / math.pi) * jnp.max(jnp.linalg.norm(op.matmat(W), axis=0))


def spectral_norm_upper(key, A: Any, *, num_vectors: int = 10) -> jax.Array:
    """Upper bound on ``||A||_2`` that holds with probability >= ``1 - 10^-num_vectors``.

    Args:
      key: ``jax.random.key``.
      A: matrix or operator.
      num_vectors: number p of Gaussian test vectors (static).

    Returns:
      ``10 sqrt(2/pi) max_i ||A w_i||_2`` (Halko et al. 2011, Lemma 4.1); one product.
    """
    key = V.check_key(key)
    num_vectors = V.check_int("num_vectors", num_vectors, low=1)
    return _spectral_upper(key, as_operator(A), num_vectors)


@functools.partial(_jit.jit, static_argnames=("num_vectors", "method"))
def _frobenius(key, op, num_vectors, method):
    n = op.shape[1]
    dt = op.dtype
    if method == "hutchinson":
        G = jax.random.rademacher(key, (n, num_vectors), V.real_dtype(dt)).astype(dt)
        AG = op.matmat(G)
        return jnp.sqrt(jnp.sum(jnp.abs(AG) ** 2) / num_vectors)
    # Hutch++: s = num_vectors products with B = A^H A split in thirds
    s3 = max(1, num_vectors // 3)
    k1, k2 = jax.random.split(key)
    S = jax.random.rademacher(k1, (n, s3), V.real_dtype(dt)).astype(dt)
    G = jax.random.rademacher(k2, (n, s3), V.real_dtype(dt)).astype(dt)
    Q = jnp.linalg.qr(op.rmatmat(op.matmat(S)), mode="reduced")[0]
    top = jnp.sum(jnp.abs(op.matmat(Q)) ** 2)
    Gp = G - jnp.matmul(Q, jnp.matmul(Q.conj().T, G, precision=HIGHEST), precision=HIGHEST)
    rest = jnp.sum(jnp.abs(op.matmat(Gp)) ** 2) / s3
    return jnp.sqrt(top + rest)


def frobenius_norm(key, A: Any, *, num_vectors: int = 30, method: str = "hutch++"
                   ) -> jax.Array:
    """Randomized estimate of ``||A||_F`` from products with A only.

    Args:
      key: ``jax.random.key``.
      A: matrix or operator.
      num_vectors: s, the number of random test vectors (static, >= 1; >= 3 for Hutch++).
      method: ``"hutch++"`` (Meyer et al. 2021: exact when ``rank(A) <= s/3``, relative
        error O(1/s)) or ``"hutchinson"`` (``||A G||_F^2 / s``, G Rademacher).

    Returns:
      The estimate, whose square is unbiased for ``||A||_F^2``.
    """
    key = V.check_key(key)
    if method not in ("hutch++", "hutchinson"):
        raise ValueError(f"method must be 'hutch++' or 'hutchinson'; got {method!r}")
    num_vectors = V.check_int("num_vectors", num_vectors, low=3 if method == "hutch++" else 1)
    return _frobenius(key, as_operator(A), num_vectors, method)
