"""Prior bounds on the canonical angles of a randomized SVD (thesis Ch. 3): the
space-agnostic bounds of Thm 3.1 with the thesis' or calibrated constants, and Saibaba
(2018) Thm 1 with the oracle V. Derivations: ``docs/angles.md``."""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from rdr_jax._src import fp as _fp
from rdr_jax._src import jit as _jit
from rdr_jax._src import validation as V
from rdr_jax.angles._common import (check_constants, check_matrix,
                                    check_positive_float, check_sketch, check_spectrum,
                                    check_subspace, mm, thm31_bound, thm31_factors)
from rdr_jax.operators import as_operator
from rdr_jax.sketching import make_sketch

__all__ = ["space_agnostic_bound", "space_agnostic_distortions", "saibaba_bound",
           "rsvd_omega", "Distortions"]


class Distortions(NamedTuple):
    """One Thm 3.1 bound's ``eps1``, ``eps2`` (factor ``(1 -+ eps1)/(1 +- eps2)``), the tail's
    effective rank ``eta``, the ``factor`` (NaN when vacuous) and ``vacuous``."""

    eps1: float
    eps2: float
    eta: float
    factor: float
    vacuous: bool


@functools.partial(_jit.jit, static_argnames=("k", "l", "lower", "constants"))
def _sa_bound_jit(s, exponent, eps, k, l, lower, constants="thesis"):
    return thm31_bound(jnp, s, k, l, exponent.astype(s.dtype), eps.astype(s.dtype), lower,
                       constants)


def _check_sa_args(s, k, l, power_iters, subspace, eps, constants):
    subspace = check_subspace(subspace)
    constants = check_constants(constants)
    s = check_spectrum(s)
    r = s.shape[0]
    k = V.check_int("k", k, low=1)
    l = V.check_int("l", l, low=1)
    if not k < l:
        raise ValueError(f"the bound needs k < l (oversampling); got k = {k}, l = {l}")
    if not l < r:
        raise ValueError(f"the bound needs l < r = len(s) = {r}; got l = {l}")
    q = V.check_int("power_iters", power_iters, low=0)
    eps = check_positive_float("eps", eps)
    if constants == "calibrated" and eps != 1.0:
        raise ValueError(f"eps scales the thesis' constants only (constants='thesis'); the "
                         f"calibrated constants have no free factor, leave eps at 1.0; "
                         f"got eps = {eps!r}")
    return s, k, l, q, subspace, eps, constants


def space_agnostic_bound(s: Any, k: int, l: int, power_iters: int, *, subspace: str = "left",
                         eps: float = 1.0, lower: bool = False,
                         constants: str = "thesis") -> Float[Array, " k"]:
    """Prior bound on ``sin angle_i(U_k, U_hat_l)`` (or V) from the spectrum alone.

    ``sin angle_i <= (1 + c l sigma_i^p / sum_{j>k} sigma_j^p)^(-1/2)``, ``p = 4q + 2``
    (left) or ``4q + 4`` (right), ``c = (1 - eps1)/(1 + eps2)`` (upper) or
    ``(1 + eps1)/(1 - eps2)`` (lower). Thesis Thm 3.1 (Theorem 3.1,
    Eqs. ``eq:space_agnostic_left/right``). O(r), in the log domain: any scale, any q.

    Args:
      s: spectrum ``sigma_1 >= ... >= sigma_r > 0`` (true, or
        :func:`rdr_jax.angles.padded_spectrum`).
      k: target rank (static), ``1 <= k < l``.
      l: sketch size (static), ``l < r``.
      power_iters: power iterations (q in the thesis), ``>= 0``.
      subspace: ``"left"`` (U) or ``"right"`` (V).
      eps: scales the thesis' constants ``eps1 = eps sqrt(k/l)``, ``eps2 = eps sqrt(l/(r-k))``.
      lower: the lower bound (``eq:space_agnostic_lower_left/right``) instead.
      constants: ``"thesis"`` or ``"calibrated"`` (random-matrix quantiles: a bound that held
        in >= 99% of the draws measured; ``docs/angles.md``).

    Returns:
      (k,) bounds, ascending like the sines; NaN where the bound is vacuous.
    """
    s, k, l, q, subspace, eps, constants = _check_sa_args(s, k, l, power_iters, subspace, eps,
                                                          constants)
    exponent = 4 * q + (2 if subspace == "left" else 4)
    return _sa_bound_jit(s, jnp.asarray(exponent, s.dtype), jnp.asarray(eps, s.dtype), k, l,
                         bool(lower), constants)


def space_agnostic_distortions(s: Any, k: int, l: int, power_iters: int, *,
                               subspace: str = "left", eps: float = 1.0, lower: bool = False,
                               constants: str = "thesis") -> Distortions:
    """The eps1, eps2 and eta behind :func:`space_agnostic_bound` with the same arguments
    (host-side, float64). Thesis Thm 3.1; to see which constant makes a bound vacuous.

    Returns:
      :class:`Distortions`.
    """
    s, k, l, q, subspace, eps, constants = _check_sa_args(s, k, l, power_iters, subspace, eps,
                                                          constants)
    s = np.asarray(s, np.float64)
    exponent = float(4 * q + (2 if subspace == "left" else 4))
    log_c, vacuous, eps1, eps2, _, logs = thm31_factors(np, s, k, l, exponent, eps,
                                                        bool(lower), constants)
    tail = exponent * (logs[k:] - logs[k])
    eta = float(np.sum(np.exp(tail)) ** 2 / np.sum(np.exp(2 * tail)))
    vacuous = bool(vacuous)
    return Distortions(float(eps1), float(eps2), eta,
                       math.nan if vacuous else float(np.exp(log_c)), vacuous)


def rsvd_omega(key: Any, A: Any, l: int, *, sketch: Any = "gaussian") -> Float[Array, "n l"]:
    """The test matrix ``Omega`` (n x l) that ``rdr_jax.rsvd(key, A, k, oversample=l - k)`` sketches
    with (``Omega = Gamma^H``, ``Gamma = make_sketch(key, sketch, l, n)``); the input of
    :func:`saibaba_bound`.

    Args:
      key: the key given to :func:`rdr_jax.rsvd`.
      A: matrix or operator (m x n).
      l: sketch size.
      sketch: as for :func:`rdr_jax.rsvd`.

    Returns:
      (n, l) array in A's dtype.
    """
    key = V.check_key(key)
    op = as_operator(A)
    n = op.shape[1]
    l = V.check_int("l", l, low=1, high=n, high_desc="the number of columns of A")
    S = make_sketch(key, check_sketch(sketch), l, n, dtype=op.dtype)
    return S.adjoint_dense(op.dtype)


@functools.partial(_jit.jit, static_argnames=("k",))
def _saibaba_jit(s, Vr, Omega, exponent, k):
    # rho is invariant to scaling V or Omega: rescale both by powers of two (exact) first
    Vr, Omega = _fp.normalize(Vr)[0], _fp.normalize(Omega)[0]
    X = mm(Vr.conj().T, Omega)                       # V^H Omega (r x l)
    O1, O2 = X[:k], X[k:]
    P, S, Zh = jnp.linalg.svd(O1, full_matrices=False)  # O1^+ = Z diag(1/S) P^H
    rho = jnp.linalg.svd(mm(O2, Zh.conj().T) / S[None, :], compute_uv=False)[0]
    logs = _fp.log_abs(s)
    x = exponent * (logs[:k] - logs[k]) - 2 * jnp.log(rho).astype(s.dtype)
    return jnp.exp(-0.5 * jnp.logaddexp(jnp.zeros((), s.dtype), x))


def saibaba_bound(s: Any, k: int, power_iters: int, V_: Any, Omega: Any, *,
                  subspace: str = "left") -> Float[Array, " k"]:
    """Saibaba (2018) Thm 1 with the oracle right singular vectors, the prior bound the
    chapter compares against (thesis Remark 3.1).

    ``sin angle_i <= (1 + sigma_i^p / (sigma_{k+1}^p ||Omega_2 Omega_1^+||_2^2))^(-1/2)``,
    ``Omega_1 = V_k^H Omega``, ``Omega_2 = V_{r\\k}^H Omega``, ``p = 4q + 2`` (left) or
    ``4q + 4`` (right); Eqs. ``eq:saibaba2018_thm1_left/right``.

    Args:
      s: spectrum, length r.
      k: target rank (static), ``1 <= k < r``.
      power_iters: power iterations (q), ``>= 0``.
      V_: (n, r) true right singular vectors.
      Omega: (n, l) test matrix, ``l >= k`` (:func:`rsvd_omega`).
      subspace: ``"left"`` or ``"right"``.

    Returns:
      (k,) bounds, ascending.
    """
    subspace = check_subspace(subspace)
    s = check_spectrum(s)
    r = s.shape[0]
    k = V.check_int("k", k, low=1, high=r - 1, high_desc=f"r - 1, r = len(s) = {r}")
    q = V.check_int("power_iters", power_iters, low=0)
    V_ = check_matrix("V", V_)
    Omega = check_matrix("Omega", Omega)
    if V_.shape[1] != r:
        raise ValueError(f"V must hold the r = len(s) = {r} right singular vectors as columns; "
                         f"got shape {V_.shape}")
    if Omega.shape[0] != V_.shape[0]:
        raise ValueError(f"Omega must have n = {V_.shape[0]} rows (like V); got {Omega.shape}")
    if Omega.shape[1] < k:
        raise ValueError(f"Omega must have l >= k = {k} columns; got {Omega.shape[1]}")
    dt = jnp.result_type(V_.dtype, Omega.dtype)
    rdt = V.real_dtype(dt)
    exponent = jnp.asarray(4 * q + (2 if subspace == "left" else 4), rdt)
    return _saibaba_jit(s.astype(rdt), V_.astype(dt), Omega.astype(dt), exponent, k)
