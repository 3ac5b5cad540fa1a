"""Test matrices of the thesis: sparse non-negative SNN matrices (Section 2.5.3),
matrices with a prescribed spectrum (Section 3.6.1), the Kahan matrix.

Generators draw on the host from a seed taken from the JAX key (the same key gives the same
matrix); call them outside ``jit``.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from rdr_jax._src import validation as V
from rdr_jax.operators import FactoredOperator, SparseOperator, DenseOperator

__all__ = ["snn", "snn_spectrum", "SNNWeights", "snn1e3", "snn1e6", "with_spectrum",
           "polynomial_decay",
           "exponential_decay", "step_spectrum", "kahan"]


def _host_rng(key) -> np.random.Generator:
    key = V.check_key(key)
    seed = np.asarray(jax.random.bits(key, (4,), jnp.uint32)).astype(np.uint64)
    return np.random.default_rng([int(s) for s in seed])


def _dtype(dtype):
    return V.check_dtype("dtype", dtype if dtype is not None else V.default_float(),
                         allow_complex=False)


# --------------------------------------------------------------------------------------
def snn_spectrum(r: int, *, a: float = 2.0, r1: int = 100) -> np.ndarray:
    """SNN weights ``d_i = a / i`` for ``i <= r1``, ``1 / i`` after (float64), thesis Eq. (3.23)."""
    r = V.check_int("r", r, low=1)
    r1 = V.check_int("r1", r1, low=0)
    i = np.arange(1, r + 1, dtype=np.float64)
    return np.where(i <= r1, a / i, 1.0 / i)


def _sparse_uniform(rng, rows: int, cols: int, density: float) -> sp.csc_matrix:
    nnz = int(round(density * rows * cols))
    if nnz == 0:
        return sp.csc_matrix((rows, cols))
    flat = rng.choice(rows * cols, size=nnz, replace=False) if rows * cols < 2**31 else \
        np.unique(rng.integers(0, rows * cols, size=nnz, dtype=np.int64))
    return sp.coo_matrix((rng.random(flat.shape[0]), (flat % rows, flat // rows)),
                         shape=(rows, cols)).tocsc()


@dataclasses.dataclass(frozen=True)
class SNNWeights:
    """The thesis' SNN weights ``d_i = a / i`` for ``i <= r1``, ``1 / i`` after
    (:func:`snn_spectrum`, Eq. (3.23)): ``a`` a finite number > 0, ``r1`` an int >= 0."""

    a: float = 2.0
    r1: int = 100

    def __post_init__(self):
        if isinstance(self.a, bool) or not isinstance(self.a, numbers.Real) or not (
                math.isfinite(self.a) and self.a > 0):
            raise ValueError(f"a must be a finite number > 0; got {self.a!r}")
        V.check_int("r1", self.r1, low=0)


def snn(key, m: int, n: int, *, r: int | None = None, density: float = 1e-3,
        spectrum: Any = SNNWeights(), factored: bool = False, dtype=None):
    """Sparse non-negative ``A = X diag(d) Y^T``, thesis Eqs. (2.20)/(3.23).

    Args:
      key: ``jax.random.key``.
      m, n: matrix size.
      r: number of terms (default ``min(m, n)``).
      density: fraction of nonzeros (i.i.d. U(0, 1) at random positions) in X and Y.
      spectrum: the weights ``d``: :class:`SNNWeights` (``a``, ``r1``; default ``a = 2``,
        ``r1 = 100``) or explicit non-negative weights (length r).
      factored: return a :class:`~rdr_jax.operators.FactoredOperator` with sparse factors.
      dtype: float32/float64.

    Returns:
      A dense m x n ``jax.Array`` or a ``FactoredOperator``. Its singular values are not
      ``d`` (the factors are not orthonormal).
    """
    m = V.check_int("m", m, low=1)
    n = V.check_int("n", n, low=1)
    r = V.check_int("r", r if r is not None else min(m, n), low=1)
    if not (0 < float(density) <= 1):
        raise ValueError(f"density must be in (0, 1]; got {density}")
    dt = _dtype(dtype)
    if isinstance(spectrum, SNNWeights):
        d = snn_spectrum(r, a=spectrum.a, r1=spectrum.r1)
    elif spectrum is None:
        raise TypeError("spectrum must be SNNWeights(a, r1) or an array of r weights; got None")
    else:
        d = np.asarray(spectrum, dtype=np.float64)
        if d.shape != (r,):
            raise ValueError(f"spectrum must have shape ({r},) (one weight per term); "
                             f"got {d.shape}")
        if not np.all(np.isfinite(d)) or np.any(d < 0):
            raise ValueError("spectrum must be finite and non-negative")
    if not factored and m * n > 2**28:
        raise ValueError(f"a dense {m} x {n} SNN matrix is too large; pass factored=True")
    rng = _host_rng(key)
    X = _sparse_uniform(rng, m, r, density)
    Y = _sparse_uniform(rng, n, r, density)
    if factored:
        return FactoredOperator(SparseOperator.from_scipy(X, dt), jnp.asarray(d, dt),
                                SparseOperator.from_scipy(Y, dt))
    A = (X @ sp.diags(d) @ Y.T).toarray()
    return jnp.asarray(A.astype(dt))


def snn1e3(key, *, dtype=None):
    """``SNN1e3``: 1000 x 1000, r = 1000, a = 2, r1 = 100, density 1e-3 (Section 2.5.3)."""
    return snn(key, 1000, 1000, r=1000, density=1e-3, spectrum=SNNWeights(2.0, 100), dtype=dtype)


def snn1e6(key, *, m: int = 10**6, n: int = 10**6, r: int = 400, dtype=None):
    """``SNN1e6``: 10^6 x 10^6 factored, r = 400, a = 2, r1 = 100, density 2/r."""
    return snn(key, m, n, r=r, density=2.0 / r, spectrum=SNNWeights(2.0, 100), factored=True,
               dtype=dtype)


# --------------------------------------------------------------------------------------
def polynomial_decay(r: int, *, r1: int = 20, power: float = 0.5) -> np.ndarray:
    """``sigma_i = 1`` for ``i <= r1``, ``(i - r1 + 1)^-power`` after (Section 3.6.1)."""
    r = V.check_int("r", r, low=1)
    i = np.arange(1, r + 1, dtype=np.float64)
    return np.where(i <= r1, 1.0, np.maximum(i - r1 + 1, 1.0) ** (-power))


def exponential_decay(r: int, *, r1: int = 20, base: float = 0.99,
                      floor: float = 1e-3) -> np.ndarray:
    """``sigma_i = 1`` for ``i <= r1``, ``max(base^(i - r1), floor)`` after
    (Section 3.6.1)."""
    r = V.check_int("r", r, low=1)
    i = np.arange(1, r + 1, dtype=np.float64)
    return np.where(i <= r1, 1.0, np.maximum(base ** (i - r1), floor))


def step_spectrum(r: int, k: int, gap: float, *, sigma1: float = 1.0) -> np.ndarray:
    """``sigma_i = sigma1`` for ``i <= k``, ``sigma1 / gap`` after (the budget example,
    Section 3.6.3)."""
    r = V.check_int("r", r, low=1)
    k = V.check_int("k", k, low=1, high=r)
    if not gap >= 1:
        raise ValueError(f"gap must be >= 1; got {gap}")
    return np.where(np.arange(1, r + 1) <= k, sigma1, sigma1 / gap).astype(np.float64)


def with_spectrum(key, m: int, n: int, spectrum: Any, *, dtype=None, factored: bool = False):
    """``A = U diag(s) V^T`` with Haar-random orthonormal U, V (Section 3.6.1).

    Args:
      key: ``jax.random.key``.
      m, n: matrix size.
      spectrum: the singular values s (non-negative, ``len <= min(m, n)``).
      dtype: float32/float64.
      factored: return ``FactoredOperator(U, s, V)`` instead of the dense product.
    """
    m = V.check_int("m", m, low=1)
    n = V.check_int("n", n, low=1)
    s = np.sort(np.asarray(spectrum, np.float64))[::-1]
    if s.ndim != 1 or s.size < 1 or s.size > min(m, n):
        raise ValueError(f"spectrum must be 1-D with 1 <= len <= min(m, n) = {min(m, n)}; "
                         f"got shape {s.shape}")
    if not np.all(np.isfinite(s)) or s[-1] < 0:
        raise ValueError("spectrum must be finite and non-negative")
    dt = _dtype(dtype)
    rng = _host_rng(key)
    U = np.linalg.qr(rng.standard_normal((m, s.size)))[0]
    Vm = np.linalg.qr(rng.standard_normal((n, s.size)))[0]
    if factored:
        return FactoredOperator(DenseOperator(jnp.asarray(U, dt)), jnp.asarray(s, dt),
                                DenseOperator(jnp.asarray(Vm, dt)))
    return jnp.asarray(((U * s) @ Vm.T).astype(dt))


def kahan(n: int, *, theta: float = 1.2, perturb: float = 25.0, dtype=None) -> jax.Array:
    """Kahan matrix ``diag(1, s, ..., s^(n-1)) (I - c U)`` (``c = cos theta``, ``s = sin
    theta``, U strictly upper ones) plus ``perturb * eps * diag(n, ..., 1)``, as MATLAB's
    ``gallery('kahan')``. Why: CPQR does not pivot on it, yet ``R_11`` does not reveal the
    rank (thesis Section 2.2.5)."""
    n = V.check_int("n", n, low=1)
    dt = _dtype(dtype)
    c, s = np.cos(theta), np.sin(theta)
    K = np.diag(s ** np.arange(n)) @ (np.eye(n) - c * np.triu(np.ones((n, n)), 1))
    K = K + perturb * np.finfo(np.dtype(dt)).eps * np.diag(np.arange(n, 0, -1))
    return jnp.asarray(K.astype(dt))
