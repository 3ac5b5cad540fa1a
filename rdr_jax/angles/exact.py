"""Exact canonical angles (thesis Ch. 3, Definition 3.1): between two bases, and
between a matrix's true singular subspaces and a computed SVD's. Sines are ascending."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from rdr_jax._src import fp as _fp
from rdr_jax._src import jit as _jit
from rdr_jax._src import validation as V
from rdr_jax.angles._common import check_matrix, mm, run_after, sines_orthonormal, svd_parts
from rdr_jax.operators import as_operator
from rdr_jax.randomized_svd import RSVD

__all__ = ["canonical_angles", "true_angles", "exact_svd", "TrueAngles"]


class TrueAngles(NamedTuple):
    """Exact sines (ascending, k each): ``Uk_Ul = sin angle(U_k, U_hat_l)``, ``Vk_Vl``,
    ``Uk_Uk = sin angle(U_k, U_hat_k)``, ``Vk_Vk``."""

    Uk_Ul: Float[Array, " k"]
    Vk_Vl: Float[Array, " k"]
    Uk_Uk: Float[Array, " k"]
    Vk_Vk: Float[Array, " k"]


def _orth(X):
    """(basis of range(X), rank) as ``scipy.linalg.orth``; dropped columns are zero."""
    W, sv, _ = jnp.linalg.svd(X, full_matrices=False)
    keep = sv > max(X.shape) * jnp.finfo(sv.dtype).eps * sv[0]
    return jnp.where(keep[None, :], W, 0), jnp.sum(keep)


@functools.partial(_jit.jit, static_argnames=("radians",))
def _canonical_angles_jit(U, Vb, radians=False):
    # power-of-two rescaling (exact): angles are scale invariant, subnormal bases survive
    U, Vb = _fp.normalize(U)[0], _fp.normalize(Vb)[0]
    Qu, ru = _orth(U)
    Qv, rv = _orth(run_after(Qu, Vb))
    (Qb, rb), (Qs, rs) = ((Qv, rv), (Qu, ru)) if Qu.shape[1] < Qv.shape[1] else \
        ((Qu, ru), (Qv, rv))
    sv = sines_orthonormal(Qb, Qs)                 # ascending, Qs.shape[1] values
    p = Qs.shape[1]
    i = jnp.arange(p)
    n = jnp.minimum(rs, rb)                        # the number of angles
    # skip the zeros of Qs's dropped columns; past n the values are padding (NaN)
    sines = sv[jnp.minimum(i + p - rs, p - 1)]
    if radians:                                    # cosines descending: the same order
        cos = jnp.linalg.svd(run_after(sv, mm(Qb.conj().T, Qs)), compute_uv=False)
        sines = jnp.arctan2(sines, cos)
    else:                       # a singular value of the complement can round above 1
        sines = jnp.minimum(sines, 1)
    return jnp.where(i < n, sines, jnp.nan), n


def canonical_angles(U: Any, V_: Any, *, radians: bool = False) -> Float[Array, " p"]:
    """Canonical angles between ``range(U)`` and ``range(V)``, ascending: sines by default,
    radians with ``radians=True``.

    Like ``scipy.linalg.subspace_angles`` (which returns radians, descending): each basis is
    orthonormalised as ``scipy.linalg.orth`` does, dropping dependent columns, and there are
    ``min(rank U, rank V)`` angles (none for an empty or zero basis). Sines come from the
    orthogonal complement and radians from ``arctan2(sin, cos)``, so angles near 0 and near
    pi/2 keep full accuracy. Thesis Ch. 3, Definition 3.1.

    Args:
      U: (d, p) basis, float or complex (integers become float64; float32 under
        ``jax_enable_x64=False``); scale does not matter.
      V_: (d, p') basis with the same d.
      radians: return the angles ``theta_i`` instead of ``sin theta_i``.

    Returns:
      ``min(rank U, rank V)`` values, real dtype of the inputs. Inside a caller's
      ``jit``/``vmap`` the length must be static: ``min(p, p', d)`` values, NaN past the
      number of angles.

    Raises:
      ValueError: non-2-D input, different row counts, NaN/Inf entries.
    """
    U = check_matrix("U", U, allow_empty=True)
    V_ = check_matrix("V", V_, allow_empty=True)
    if U.shape[0] != V_.shape[0]:
        raise ValueError(f"U and V must have the same number of rows (ambient dimension); got "
                         f"U {U.shape} and V {V_.shape}")
    dt = jnp.result_type(U.dtype, V_.dtype)
    if 0 in U.shape or 0 in V_.shape:
        return jnp.zeros((0,), V.real_dtype(dt))
    out, n = _canonical_angles_jit(U.astype(dt), V_.astype(dt), bool(radians))
    return out[:int(n)] if V.is_concrete(n) else out


@functools.partial(_jit.jit, static_argnames=("k",))
def _true_angles_jit(Ut, Vtt, Uh, Vth, k):
    Uk, Vk = Ut[:, :k], Vtt[:k].conj().T
    Vh = Vth.conj().T
    a = sines_orthonormal(Uh, Uk)
    b = sines_orthonormal(Vh, Vk, after=a)
    c = sines_orthonormal(Uh[:, :k], Uk, after=b)
    d = sines_orthonormal(Vh[:, :k], Vk, after=c)
    return TrueAngles(Uk_Ul=a, Vk_Vl=b, Uk_Uk=c, Vk_Vk=d)


def true_angles(true_svd: Any, svd: Any, k: int) -> TrueAngles:
    """Exact sines between the true leading rank-k subspaces and a computed rank-l SVD
    (the chapter's "true" sines; thesis Ch. 3, Definition 3.1), from the
    orthonormal factors only, so the scale of A plays no role.

    Args:
      true_svd: ``(U, s, Vt)`` of A with at least k columns, e.g. :func:`exact_svd`.
      svd: the computed ``(U_hat, s_hat, Vt_hat)`` with all l triplets, e.g.
        ``rdr_jax.rsvd(key, A, l, oversample=0, power_iters=power_iters)``.
      k: target rank (static), ``1 <= k <= l``.

    Returns:
      :class:`TrueAngles`.
    """
    Ut, st, Vtt = svd_parts("true_svd", true_svd)
    Uh, sh, Vth = svd_parts("svd", svd)
    l = Uh.shape[1]
    k = V.check_int("k", k, low=1, high=min(l, Ut.shape[1]),
                    high_desc="k <= l and k <= the number of true singular triplets")
    if Ut.shape[0] != Uh.shape[0] or Vtt.shape[1] != Vth.shape[1]:
        raise ValueError(f"true_svd and svd describe matrices of different shapes: "
                         f"{(Ut.shape[0], Vtt.shape[1])} vs {(Uh.shape[0], Vth.shape[1])}")
    dt = jnp.result_type(Ut.dtype, Uh.dtype)
    return _true_angles_jit(Ut.astype(dt), Vtt.astype(dt), Uh.astype(dt), Vth.astype(dt), k)


def exact_svd(A: Any, *, rank_tol: float | None = None) -> RSVD:
    """Dense SVD of a small matrix truncated to its numerical rank r (the "true" SVD of
    the chapter's experiments), computed on the host in float64 and returned in A's dtype.

    Args:
      A: matrix or operator (densified).
      rank_tol: keep ``s_i > rank_tol * s_1`` (default ``max(m, n) eps`` of A's dtype, as
        ``numpy.linalg.matrix_rank``).

    Returns:
      :class:`rdr_jax.RSVD` ``(U (m x r), s (r,), Vt (r x n))``.
    """
    op = as_operator(A)
    wide = np.complex128 if np.dtype(op.dtype).kind == "c" else np.float64
    Ad = np.asarray(op.todense()).astype(wide)
    U, s, Vt = np.linalg.svd(Ad, full_matrices=False)
    tol = rank_tol if rank_tol is not None else max(Ad.shape) * np.finfo(op.dtype).eps
    r = int(np.sum(s > tol * s[0])) if s[0] > 0 else 0
    if r == 0:
        raise ValueError("A is zero: it has no singular subspaces")
    dt = op.dtype
    return RSVD(jnp.asarray(U[:, :r], dt), jnp.asarray(s[:r], V.real_dtype(dt)),
                jnp.asarray(Vt[:r], dt))
