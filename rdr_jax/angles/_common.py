"""Helpers shared by the :mod:`rdr_jax.angles` modules (private): argument checks, the sines
of orthonormal bases, the log-domain core of Thm 3.1.
Derivations: ``docs/angles.md``."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rdr_jax._src import fp as _fp
from rdr_jax._src import validation as V
from rdr_jax._src.linalg import mm
from rdr_jax.sketching import as_sketch

__all__ = [
    "SUBSPACES", "CONSTANTS", "TW1_Q99", "check_constants",
    "check_matrix", "check_positive_float", "check_sketch", "check_spectrum", "check_subspace",
    "log_wishart_quantile", "mm", "run_after", "sines_orthonormal", "spectrum_values",
    "svd_parts", "thm31_bound", "thm31_factors", "thm31_log_bound", "to_float_array",
]

SUBSPACES = ("left", "right")

#: Prior-bound constants (``space_agnostic_bound``, ``plan_budget``).
CONSTANTS = ("thesis", "calibrated")

#: 0.99 quantile of the Tracy-Widom law F1 (beta = 1): Johnstone (2001), Table 1.
TW1_Q99 = 2.0234


# -------------------------------------------------------------------------------- checks
def check_subspace(subspace: Any, name: str = "subspace") -> str:
    if subspace not in SUBSPACES:
        raise ValueError(f"{name} must be 'left' (U) or 'right' (V); got {subspace!r}")
    return subspace


def to_float_array(name: str, x: Any, *, allow_complex: bool = False):
    """``x`` as a jax array; integers become the default float (float64 under x64)."""
    arr = x if isinstance(x, jax.Array) else np.asarray(x)
    kind = np.dtype(arr.dtype).kind
    if kind in "biu":
        return jnp.asarray(arr, V.default_float())
    if kind == "c" and not allow_complex:
        raise TypeError(f"{name} must be real; got dtype {arr.dtype}")
    if kind not in "fc":
        raise TypeError(f"{name} must be a floating array; got dtype {arr.dtype}")
    return jnp.asarray(arr)


def spectrum_values(name: str, a: np.ndarray, allow_zero: bool) -> None:
    """Finite, positive (or >= 0) and non-increasing; raises ValueError naming ``name``."""
    V.check_array_values(name, a)
    if np.any(a < 0) or (not allow_zero and np.any(a == 0)):
        what = "non-negative" if allow_zero else ("positive (the r = rank(A) nonzero "
                                                  "singular values; drop zeros)")
        raise ValueError(f"{name} must be {what}; got min {a.min()!r}")
    if a.size > 1 and np.any(np.diff(a) > 0):
        i = int(np.argmax(np.diff(a) > 0))
        raise ValueError(f"{name} must be non-increasing (singular values in descending "
                         f"order); got {name}[{i}] = {a[i]!r} < {name}[{i + 1}] = {a[i + 1]!r}")


def check_spectrum(s: Any, *, name: str = "s", min_len: int = 1,
                   len_desc: str | None = None, allow_zero: bool = False) -> jax.Array:
    """1-D, real, finite, positive (or >= 0) and non-increasing (checked when concrete)."""
    s = to_float_array(name, s)
    if s.ndim != 1:
        raise ValueError(f"{name} must be a 1-D spectrum (singular values); got shape {s.shape}")
    if s.shape[0] < min_len:
        why = f" ({len_desc})" if len_desc else ""
        raise ValueError(f"{name} must have at least {min_len} entries{why}; got {s.shape[0]}")
    if V.is_concrete(s):
        spectrum_values(name, np.asarray(s), allow_zero)
    return s


def check_positive_float(name: str, x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be a real number; got {x!r}") from e
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite positive number; got {x!r}")
    return v


def check_matrix(name: str, X: Any, *, allow_empty: bool = False) -> jax.Array:
    X = to_float_array(name, X, allow_complex=True)
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix (a basis, one vector per column); "
                         f"got shape {X.shape}")
    if 0 in X.shape and not allow_empty:
        raise ValueError(f"{name} is empty (shape {X.shape})")
    V.check_array_values(name, X)
    return X


def check_sketch(sketch: Any):
    """The sketch choice object (:func:`rdr_jax.sketching.as_sketch`): a name or a choice."""
    return as_sketch(sketch)


def svd_parts(name: str, svd: Any):
    """Accept an RSVD / (U, s, Vt) triple; return (U, s, Vt) as arrays."""
    try:
        U, s, Vt = svd
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be an RSVD (U, s, Vt) triple; got "
                        f"{type(svd).__name__}") from e
    U, Vt = jnp.asarray(U), jnp.asarray(Vt)
    s = jnp.asarray(s)
    if U.ndim != 2 or Vt.ndim != 2 or s.ndim != 1 or not (U.shape[1] == s.shape[0] == Vt.shape[0]):
        raise ValueError(f"{name} must hold U (m x l), s (l,), Vt (l x n); got shapes "
                         f"{U.shape}, {s.shape}, {Vt.shape}")
    return U, s, Vt


def check_constants(constants: Any) -> str:
    if not (isinstance(constants, str) and constants in CONSTANTS):
        raise ValueError(f"constants must be 'thesis' (the thesis' eps1 = eps sqrt(k/l), "
                         f"eps2 = eps sqrt(l/(r - k))) or 'calibrated' (random-matrix "
                         f"quantiles, see space_agnostic_bound); got {constants!r}")
    return constants


# ---------------------------------------------------------------------- linear algebra
def run_after(dep, x):
    """``x``, made data-dependent on ``dep`` (value unchanged): XLA then runs the two
    factorisations one after the other (jaxlib's CPU LAPACK kernels can deadlock when two
    batched ones run at once; ``docs/angles.md``)."""
    d = jnp.real(jnp.ravel(dep)[0])
    zero = jnp.where(jnp.isfinite(d), d, 0) * 0
    return x + zero.astype(x.dtype)


def sines_orthonormal(Q1, Q2, after=None):
    """Sines between range(Q1) and range(Q2) (orthonormal columns), ascending,
    ``min(p1, p2)`` of them: singular values of ``(I - P_big) Q_small``, projected twice
    (O(eps) absolute accuracy, tiny angles included). ``after``: see :func:`run_after`."""
    if Q1.shape[1] < Q2.shape[1]:
        Q1, Q2 = Q2, Q1
    if after is not None:
        Q2 = run_after(after, Q2)
    R = Q2 - mm(Q1, mm(Q1.conj().T, Q2))
    R = R - mm(Q1, mm(Q1.conj().T, R))
    return jnp.linalg.svd(R, compute_uv=False)[::-1]


# ------------------------------------------------------------ Thm 3.1, in the log domain
def _log(xp, s):
    """``log s``; under jax exact for subnormal s too (XLA on CPU reads those as 0)."""
    return xp.log(s) if xp is np else _fp.log_abs(s)


def log_wishart_quantile(k: int, l: int, upper: bool) -> float:
    """``log`` of the 1% quantile of ``lambda_min`` (``upper=False``) or the 99% quantile of
    ``lambda_max`` (``upper=True``) of ``Omega_1 Omega_1^H``, ``Omega_1`` k x l i.i.d.
    ``N(0, 1/l)``, ``k < l``: Tracy-Widom on the log scale (``docs/angles.md``)."""
    a, b = math.sqrt(l - 0.5), math.sqrt(k - 0.5)
    d = a + b if upper else a - b
    sig = d * (1.0 / b + 1.0 / a if upper else 1.0 / b - 1.0 / a) ** (1.0 / 3.0)
    z = TW1_Q99 * sig / (d * d)
    return 2.0 * math.log(d) - math.log(l) + (z if upper else -z)


def thm31_factors(xp, s, k: int, l: int, power, eps, lower: bool, constants: str):
    """``(log c, vacuous, eps1, eps2, log_tail, logs)`` of Thm 3.1 (``c`` the distortion
    factor, ``log_tail = log sum_{j>k} sigma_j^p``, ``logs = log s``); ``xp`` is numpy or
    jax.numpy."""
    r = s.shape[0]
    logs = _log(xp, s)
    tail = power * logs[k:]
    tmax = xp.max(tail)
    log_tail = tmax + xp.log(xp.sum(xp.exp(tail - tmax)))
    if constants == "thesis":
        eps1 = eps * math.sqrt(k / l)
        eps2 = eps * math.sqrt(l / (r - k))
        if lower:  # factor (1 + eps1)/(1 - eps2): vacuous (<= 0 or infinite) when eps2 >= 1
            vacuous = eps2 >= 1
            c = (1 + eps1) / xp.where(vacuous, 1.0, 1 - eps2)
        else:      # factor (1 - eps1)/(1 + eps2): vacuous when eps1 >= 1
            vacuous = eps1 >= 1
            c = xp.where(vacuous, 1.0, 1 - eps1) / (1 + eps2)
        return xp.log(c), vacuous, eps1, eps2, log_tail, logs
    # calibrated: eps1 from the Tracy-Widom-corrected Marchenko-Pastur edge, eps2 from the MP
    # edge with the tail's effective rank eta (docs/angles.md)
    t2max = 2 * tmax
    log_eta = 2 * log_tail - (t2max + xp.log(xp.sum(xp.exp(2 * tail - t2max))))
    rt = xp.exp(0.5 * (math.log(l) - log_eta))              # sqrt(l / eta)
    log_w = log_wishart_quantile(k, l, upper=lower)         # log(1 -+ eps1), exact
    eps1 = math.expm1(log_w) if lower else -math.expm1(log_w)
    if lower:  # (1 + eps1)/(1 - eps2), 1 - eps2 = (1 - sqrt(l/eta))^2: vacuous when l >= eta
        vacuous = rt >= 1
        eps2 = rt * (2 - rt)
        log_c = log_w - 2 * xp.log(xp.where(vacuous, 0.5, 1 - rt))
    else:      # (1 - eps1)/(1 + eps2), 1 + eps2 = (1 + sqrt(l/eta))^2: never vacuous (k < l)
        vacuous = False
        eps2 = rt * (2 + rt)
        log_c = log_w - 2 * xp.log1p(rt)
    return log_c, vacuous, eps1, eps2, log_tail, logs


def thm31_log_bound(xp, s, k: int, l: int, power, eps, lower: bool,
                    constants: str = "thesis"):
    """``(log bound, vacuous)`` of Thm 3.1: ``-softplus(x)/2`` with
    ``x = log c + log l + p log sigma_i - logsumexp_j(p log sigma_j)`` (no overflow)."""
    log_c, vacuous, _, _, log_tail, logs = thm31_factors(xp, s, k, l, power, eps, lower,
                                                         constants)
    x = log_c + math.log(l) + power * logs[:k] - log_tail
    return -0.5 * xp.logaddexp(xp.zeros((), s.dtype), x), vacuous


def thm31_bound(xp, s, k: int, l: int, power, eps, lower: bool, constants: str = "thesis"):
    """Thm 3.1 bound (see :func:`thm31_log_bound`); NaN where vacuous."""
    log_b, vacuous = thm31_log_bound(xp, s, k, l, power, eps, lower, constants)
    return xp.where(vacuous, xp.nan, xp.exp(log_b)).astype(s.dtype)
