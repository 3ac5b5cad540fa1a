"""Orthonormalisation of tall bases: thin Householder QR, or (shifted) CholeskyQR for
bases whose rows are sharded over devices (one all-reduce of the small Gram per pass instead of
a gather). Derivation and stability conditions: ``docs/id-cur.md`` ("CholeskyQR").
"""

from __future__ import annotations

import dataclasses
from typing import Any, Union

import jax
import jax.numpy as jnp
import numpy as np

from rdr_jax._src import validation as V
from rdr_jax._src.dense import HIGHEST

__all__ = ["Householder", "CholeskyQR2", "cholesky_qr2", "householder_qr", "as_orthonormalizer",
           "ORTHONORMALIZERS"]



def householder_qr(Y):
    """Thin Householder QR ``Y = Q R`` (``jnp.linalg.qr``, LAPACK geqrf on CPU)."""
    return jnp.linalg.qr(Y, mode="reduced")


def _right_solve(Y, L, blocks: int):
    """``Y L^{-H}`` for a lower-triangular ``L``, as ``blocks`` independent row blocks (a
    batched ``triangular_solve``: the SPMD partitioner keeps a batch dimension local)."""
    m, n = Y.shape
    b = blocks if (blocks > 1 and m % blocks == 0) else 1
    Yb = Y.reshape(b, m // b, n)
    Lb = jnp.broadcast_to(L, (b, n, n))
    X = jax.lax.linalg.triangular_solve(Lb, Yb, left_side=False, lower=True, transpose_a=True,
                                        conjugate_a=True)
    return X.reshape(m, n)


def _gram(Q):
    G = jnp.matmul(Q.conj().T, Q, precision=HIGHEST)
    return 0.5 * (G + G.conj().T)  # exactly Hermitian (the all-reduced sums may differ)


def _shift(G, m: int, n: int):
    """Fukaya et al.'s shift ``s = 11 (m n + n (n + 1)) u ||Y||_2^2`` with ``||Y||_2^2 =
    lambda_max(G)`` (the small Gram's largest eigenvalue, replicated; the Frobenius bound
    would over-shift by up to n and stall float32)."""
    u = np.finfo(V.real_dtype(G.dtype)).eps / 2
    lam = jnp.linalg.eigvalsh(G)[-1]
    return jnp.where(lam > 0, 11.0 * (m * n + n * (n + 1)) * u * lam, 1.0)  # Y = 0: R = I


def _pass(Q, G, shift, blocks: int):
    """One CholeskyQR pass on ``Q`` with Gram ``G``: ``(Q R^{-1}, R)``. ``shift``: True
    (always shifted), or "guard": unshifted unless the plain Cholesky fails or is too
    ill-conditioned to be accurate (``(max L_ii / min L_ii)^2 > 0.1 / (n u)``)."""
    m, n = Q.shape
    eye = jnp.eye(n, dtype=G.dtype)
    Ls = jnp.linalg.cholesky(G + _shift(G, m, n).astype(G.dtype) * eye)
    if shift is True:
        L = Ls
    else:
        u = np.finfo(V.real_dtype(G.dtype)).eps / 2
        L0 = jnp.linalg.cholesky(G)
        dg = jnp.abs(jnp.diagonal(L0))
        bad = ~jnp.all(jnp.isfinite(L0)) | ~((jnp.max(dg) / jnp.min(dg)) ** 2 <= 0.1 / (n * u))
        L = jnp.where(bad, Ls, L0)
    return _right_solve(Q, L, blocks), L.conj().T


def cholesky_qr2(Y, *, blocks: int = 1, max_passes: int = 5, shift: bool = True):
    """Thin QR ``Y = Q R`` of a tall Y (m x n, m >= n) by adaptive shifted CholeskyQR3.

    Passes (see the module docstring; Fukaya et al. 2020, Algorithm 4.2 "shiftedCholeskyQR3"):

    1. ``G = Y^H Y``; ``R_1 = chol(G + s I)^H`` with ``s = 11 (m n + n(n+1)) u ||Y||_F^2``;
       ``Q_1 = Y R_1^{-1}`` (``shift=False``: plain CholeskyQR, needs ``cond(Y) < u^{-1/2}``);
    2. ``G = Q_1^H Q_1``; CholeskyQR of Q_1, unshifted unless ``chol(G)`` fails or
       ``cond(G) > 0.1 / (n u)`` (then shifted); stop after the pass whose G had
       ``||G - I||_F <= 1/2``; at most ``max_passes`` passes in all.

    ``R = R_p ... R_2 R_1`` (upper triangular, positive real diagonal). For
    ``cond(Y) <= ~u^{-1}``: ``||Q^H Q - I||_2 = O(u)`` and ``||Y - Q R||_F = O(u ||Y||_F)``.
    Each pass communicates one all-reduce of the n x n Gram when Y is row-sharded; the
    Cholesky factor is replicated; the triangular solve is local (``blocks`` row blocks,
    set it to the number of row shards). Traceable, differentiable, vmappable.

    Args:
      Y: m x n array, m >= n (float32/float64/complex).
      blocks: number of row blocks of the triangular solve (static); ignored when it does
        not divide m. Results do not depend on it (the rows are independent).
      max_passes: at most this many passes (static, >= 2).
      shift: shift the first pass (default; ``False`` gives plain CholeskyQR2).

    Returns:
      ``(Q, R)``: Q (m x n), R (n x n) upper triangular.

    Raises:
      ValueError: Y not 2-D or wider than tall, ``max_passes < 2``, ``blocks < 1``.

    Example:
      >>> Q, R = cholesky_qr2(Y)
      >>> jnp.linalg.norm(Q.T @ Q - jnp.eye(Y.shape[1]), 2)     # ~ 1e-15 in float64
    """
    if Y.ndim != 2 or Y.shape[0] < Y.shape[1]:
        raise ValueError(f"cholesky_qr2 needs a tall 2-D Y (m >= n); got shape {Y.shape}")
    blocks = V.check_int("blocks", blocks, low=1)
    max_passes = V.check_int("max_passes", max_passes, low=2)
    n = Y.shape[1]
    eye = jnp.eye(n, dtype=Y.dtype)
    Q, R = _pass(Y, _gram(Y), True if shift else "guard", blocks)

    def step(Q, R, done):
        def run(args):
            Q, R, _ = args
            G = _gram(Q)
            near = jnp.linalg.norm(G - eye) <= 0.5
            Q, Rp = _pass(Q, G, "guard", blocks)
            return Q, jnp.matmul(Rp, R, precision=HIGHEST), near
        return jax.lax.cond(done, lambda a: a, run, (Q, R, done))

    done = jnp.asarray(False)
    for _ in range(max_passes - 1):
        Q, R, done = step(Q, R, done)
    return Q, R


# --------------------------------------------------------------------------------------
# choice objects (static, hashable; strings are the friendly spelling)
# --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Householder:
    """Thin Householder QR (LAPACK geqrf / XLA QR). Gathers a row-sharded basis."""

    def qr(self, Y):
        return householder_qr(Y)


@dataclasses.dataclass(frozen=True)
class CholeskyQR2:
    """Adaptive shifted CholeskyQR3 (:func:`cholesky_qr2`): one all-reduce of the small Gram
    per pass, no gather of the tall basis. ``blocks``: row blocks of the triangular solve
    (the number of row shards of the input; set automatically by ``orthonormalize="auto"``)."""

    blocks: int = 1
    max_passes: int = 5

    def __post_init__(self):
        V.check_int("blocks", self.blocks, low=1)
        V.check_int("max_passes", self.max_passes, low=2)

    def qr(self, Y):
        return cholesky_qr2(Y, blocks=self.blocks, max_passes=self.max_passes)


Orthonormalizer = Union[Householder, CholeskyQR2]
#: friendly spelling of the orthonormalisation choices ("auto" is resolved from the input)
ORTHONORMALIZERS = {"householder": Householder, "cholesky_qr2": CholeskyQR2}


def as_orthonormalizer(choice: Any = "auto", op: Any = None, adjoint: bool = False):
    """The choice object for ``"householder"``, ``"cholesky_qr2"``, ``"auto"`` or an object.

    ``"auto"`` picks ``CholeskyQR2(blocks=c)`` when the operator ``op`` is a dense array
    (or a factored operator whose left factor is one) with its rows split into ``c > 1``
    shards (read from the concrete array's ``.sharding``), and :class:`Householder`
    otherwise (unsharded inputs, traced inputs, sparse and implicit operators).
    ``adjoint=True`` resolves for ``op^H`` (whose rows are op's columns) without forming it.
    """
    if isinstance(choice, (Householder, CholeskyQR2)):
        return choice
    if not isinstance(choice, str):
        raise TypeError(f"orthonormalize must be 'auto', 'householder', 'cholesky_qr2' or "
                        f"Householder()/CholeskyQR2(); got {type(choice).__name__}")
    name = choice.strip().lower()
    if name in ("auto", "cholesky_qr2"):
        from rdr_jax.distributed import col_shards, row_shards
        c = (col_shards if adjoint else row_shards)(op) if op is not None else 1
        if name == "cholesky_qr2":
            return CholeskyQR2(blocks=max(c, 1))
        return CholeskyQR2(blocks=c) if c > 1 else Householder()
    if name == "householder":
        return Householder()
    raise ValueError(f"orthonormalize must be 'auto', 'householder' or 'cholesky_qr2'; got "
                     f"{choice!r}")
