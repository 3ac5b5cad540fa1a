"""Randomized norm estimators for operators (used by the posterior bounds of Chapters 2-3).

* :func:`spectral_norm` -- power method on ``A^H A`` from a Gaussian start: a lower
  estimate of ``||A||_2`` that converges like ``(sigma_2/sigma_1)^(2 iters)``.
* :func:`spectral_norm_upper` -- the a-posteriori bound of Halko, Martinsson & Tropp (2011,
  Lemma 4.1): with probability at least ``1 - 10^(-p)``,
  ``||A||_2 <= 10 sqrt(2/pi) max_{i<=p} ||A w_i||_2`` for standard Gaussian ``w_i``.
* :func:`frobenius_norm` -- ``||A||_F = sqrt(tr(A^H A))`` by Hutchinson's estimator
  (``||A G||_F^2 / s``, G Rademacher, unbiased) or Hutch++ (Meyer, Musco, Musco & Woodruff
  2021: exact trace on a rank-s/3 sketch of the range plus Hutchinson on the deflated rest;
  relative error O(1/s) instead of O(1/sqrt s)).

All take ``key`` first, accept any operator, are jit-compiled with static sample counts and
vmap over keys.
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
    """Power-method estimate of ``||A||_2`` (never above the true value, up to rounding).

    ``v_0 ~ N(0, I)``, ``v_{t+1} = A^H A v_t / ||A^H A v_t||``; returns ``||A v_iters||``.
    Costs ``2 iters + 1`` products with A or A^H.

    Args:
      key: ``jax.random.key``.
      A: matrix or operator.
      iters: number of power iterations (static, >= 1).
    """
    key = V.check_key(key)
    iters = V.check_int("iters", iters, low=1)
    return _spectral(key, as_operator(A), iters)


@functools.partial(_jit.jit, static_argnames=("num_samples",))
def _spectral_upper(key, op, num_samples):
    W = _gauss(key, (op.shape[1], num_samples), op.dtype)
    return 10.0 * math.sqrt(2.0 / math.pi) * jnp.max(jnp.linalg.norm(op.matmat(W), axis=0))


def spectral_norm_upper(key, A: Any, *, num_samples: int = 10) -> jax.Array:
    """Probabilistic upper bound on ``||A||_2``: holds with probability >= 1 - 10^-num_samples.

    ``10 sqrt(2/pi) max_i ||A w_i||_2`` with i.i.d. standard Gaussian ``w_i`` (Halko et al.
    2011, Lemma 4.1 / Eq. (4.3)). Costs one product with an (n x num_samples) block.
    """
    key = V.check_key(key)
    num_samples = V.check_int("num_samples", num_samples, low=1)
    return _spectral_upper(key, as_operator(A), num_samples)


@functools.partial(_jit.jit, static_argnames=("num_matvecs", "method"))
def _frobenius(key, op, num_matvecs, method):
    n = op.shape[1]
    dt = op.dtype
    if method == "hutchinson":
        G = jax.random.rademacher(key, (n, num_matvecs), V.real_dtype(dt)).astype(dt)
        AG = op.matmat(G)
        return jnp.sqrt(jnp.sum(jnp.abs(AG) ** 2) / num_matvecs)
    # Hutch++ with s = num_matvecs products with B = A^H A split in thirds.
    s3 = max(1, num_matvecs // 3)
    k1, k2 = jax.random.split(key)
    S = jax.random.rademacher(k1, (n, s3), V.real_dtype(dt)).astype(dt)
    G = jax.random.rademacher(k2, (n, s3), V.real_dtype(dt)).astype(dt)
    Q = jnp.linalg.qr(op.rmatmat(op.matmat(S)), mode="reduced")[0]
    top = jnp.sum(jnp.abs(op.matmat(Q)) ** 2)
    Gp = G - jnp.matmul(Q, jnp.matmul(Q.conj().T, G, precision=HIGHEST), precision=HIGHEST)
    rest = jnp.sum(jnp.abs(op.matmat(Gp)) ** 2) / s3
    return jnp.sqrt(top + rest)


def frobenius_norm(key, A: Any, *, num_matvecs: int = 30, method: str = "hutch++") -> jax.Array:
    """Randomized estimate of ``||A||_F`` from products with A only.

    * ``"hutchinson"``: ``||A||_F^2 ~ ||A G||_F^2 / s`` with G (n x s) Rademacher; unbiased
      for ``||A||_F^2``, relative standard deviation <= sqrt(2/s).
    * ``"hutch++"``: ``tr(Q^H B Q) + (3/s) tr(G^H (I-QQ^H) B (I-QQ^H) G)`` for
      ``B = A^H A``, ``Q = orth(B S)``; unbiased for ``||A||_F^2`` and exact when
      ``rank(A) <= s/3``.

    Args:
      key: ``jax.random.key``.
      A: matrix or operator.
      num_matvecs: s, number of random vectors (static, >= 1; >= 3 for Hutch++).
      method: ``"hutch++"`` (default) or ``"hutchinson"``.
    """
    key = V.check_key(key)
    if method not in ("hutch++", "hutchinson"):
        raise ValueError(f"method must be 'hutch++' or 'hutchinson'; got {method!r}")
    num_matvecs = V.check_int("num_matvecs", num_matvecs, low=3 if method == "hutch++" else 1)
    return _frobenius(key, as_operator(A), num_matvecs, method)
