"""Helpers shared by the Chapter 4 linear-regression modules (private): argument checks and
the traced kernels behind DAC / DA-ERM (rank rule: ``docs/training.md``)."""

from __future__ import annotations

import math
import numbers
from typing import Any

import jax.numpy as jnp
import numpy as np

from rdr_jax._src import validation as V
from rdr_jax._src.linalg import mm

__all__ = ["check_nonneg", "dac_hard_K", "dac_soft_K", "default_rtol", "delta_svd", "erm_K",
           "mm", "pinv", "rtol_or", "stack"]


def check_nonneg(name: str, v: Any, *, allow_none: bool = False):
    """``v`` as a finite float >= 0 (a traced scalar passes unchecked; None if allowed)."""
    if v is None:
        if allow_none:
            return None
        raise TypeError(f"{name} must be a float >= 0; got None")
    if isinstance(v, bool):
        raise TypeError(f"{name} must be a float >= 0; got bool {v}")
    if isinstance(v, numbers.Real):
        if not math.isfinite(float(v)) or float(v) < 0:
            raise ValueError(f"{name} must be a finite float >= 0; got {v}")
        return float(v)
    arr = v
    if not hasattr(arr, "shape"):
        raise TypeError(f"{name} must be a float >= 0; got {type(v).__name__}")
    if arr.shape != ():
        raise ValueError(f"{name} must be a scalar; got shape {arr.shape} (vmap over it for "
                         "several values)")
    if V.is_concrete(arr):
        f = float(np.asarray(arr))
        if not math.isfinite(f) or f < 0:
            raise ValueError(f"{name} must be a finite float >= 0; got {f}")
    return arr


def default_rtol(rows: int, cols: int, dtype) -> float:
    """Default relative rank tolerance ``max(rows, cols) * eps(dtype)``."""
    return float(max(rows, cols) * jnp.finfo(dtype).eps)


def rtol_or(rtol, rows, cols, dtype):
    return default_rtol(rows, cols, dtype) if rtol is None else rtol


def stack(X, X_aug):
    """``A~(X)``: the originals, then every augmentation, as rows."""
    return jnp.concatenate([X, X_aug.reshape(-1, X.shape[1])], axis=0)


def pinv(a, rtol):
    """Moore-Penrose pseudo-inverse by SVD; singular values <= rtol * s_max are dropped."""
    U, s, Vt = jnp.linalg.svd(a, full_matrices=False)
    keep = s > rtol * s[0]
    sinv = jnp.where(keep, 1.0 / jnp.where(keep, s, 1.0), 0.0)
    return mm(Vt.T * sinv, U.T)


def delta_svd(X, X_aug, rtol):
    """``(s, Vt, nonzero, scale)`` of ``Delta_c = X_aug - X`` (``alpha N x d``): ``s`` padded
    to length d, ``Vt`` d x d orthogonal, ``nonzero = s > rtol * ||A~||_F``."""
    N, d = X.shape
    D = (X_aug - X[None]).reshape(-1, d)
    full = D.shape[0] < d
    _, s, Vt = jnp.linalg.svd(D, full_matrices=full)
    if s.shape[0] < d:
        s = jnp.concatenate([s, jnp.zeros((d - s.shape[0],), s.dtype)])
    scale = jnp.sqrt(jnp.sum(X * X) + jnp.sum(X_aug * X_aug))     # ||A~||_F
    nonzero = s > rtol * scale
    return s, Vt, nonzero, scale


def dac_hard_K(X, X_aug, rtol):
    """``K = V_0 (X V_0)^+`` of hard DAC."""
    N, d = X.shape
    alpha = X_aug.shape[0]
    r = rtol_or(rtol, (1 + alpha) * N, d, X.dtype)
    _, Vt, nonzero, _ = delta_svd(X, X_aug, r)
    V0 = Vt.T * (~nonzero)                    # null(Delta) basis columns, others zeroed
    B = mm(X, V0)                             # N x d, zero columns outside null(Delta)
    rb = rtol_or(rtol, N, d, X.dtype)
    return mm(V0, pinv(B, rb))


def dac_soft_K(X, X_aug, lam, rtol):
    """``K`` of soft DAC: the first N columns of ``[X; sqrt(lam/(1+alpha)) Delta]^+``."""
    N, d = X.shape
    alpha = X_aug.shape[0]
    D = (X_aug - X[None]).reshape(-1, d)
    G = jnp.concatenate([X, jnp.sqrt(lam / (1.0 + alpha)).astype(X.dtype) * D], axis=0)
    r = rtol_or(rtol, G.shape[0], d, X.dtype)
    return pinv(G, r)[:, :N]


def erm_K(X, X_aug, rtol):
    """``K = A~^+ M~`` of DA-ERM."""
    N, d = X.shape
    alpha = X_aug.shape[0]
    A = stack(X, X_aug)
    r = rtol_or(rtol, A.shape[0], d, X.dtype)
    P = pinv(A, r)                            # d x (1+alpha) N
    return P.reshape(d, 1 + alpha, N).sum(axis=1)   # A~^+ M~
