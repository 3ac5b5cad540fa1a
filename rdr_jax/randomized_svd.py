"""Randomized rangefinder and randomized SVD (thesis Section 2.2.4, Algorithm 4) with plain
or stable power iterations. Details: ``docs/id-cur.md`` ("Rangefinder and rSVD").
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rdr_jax._src import jit as _jit
from rdr_jax._src import validation as V
from rdr_jax._src.tallqr import CholeskyQR2, Householder, as_orthonormalizer, cholesky_qr2
from rdr_jax.operators import HIGHEST, LinearOperator, as_operator
from rdr_jax.sketching import as_sketch

__all__ = ["rangefinder", "range_sketch", "rsvd", "RSVD", "power_range", "orth", "sketch_options",
           "cholesky_qr2", "Householder", "CholeskyQR2", "as_orthonormalizer"]

_HOUSEHOLDER = Householder()


class RSVD(NamedTuple):
    """Truncated SVD ``A ~ U diag(s) Vt``: U (m x k), s (k,) descending, Vt (k x n)."""

    U: jax.Array
    s: jax.Array
    Vt: jax.Array


def orth(Y, orthonormalize: Householder | CholeskyQR2 = _HOUSEHOLDER):
    """Orthonormal basis of the columns of ``Y``: thin Householder QR (default) or, with
    ``CholeskyQR2()``, adaptive shifted CholeskyQR3 (:func:`cholesky_qr2`; one all-reduce of
    the small Gram per pass for a row-sharded Y instead of a gather of Y)."""
    return orthonormalize.qr(Y)[0]


def power_range(key, op: LinearOperator, l: int, sketch, power_iters: int, stable: bool,
                orthonormalize: Householder | CholeskyQR2 = _HOUSEHOLDER):
    """Traceable core of :func:`range_sketch` (no validation; ``sketch`` a choice object).

    ``Y = (A A^H)^q A Omega^H`` (plain, Eq. (2.14)) or, with ``stable``, the
    same subspace re-orthonormalised after every half iteration (Eq. (2.15))
    by ``orthonormalize`` (the m x l bases use it; the n x l ones of ``A^H Y`` too, with
    their row blocks).
    """
    n = op.shape[1]
    S = sketch.draw(key, l, n, dtype=op.dtype)
    # A Omega^H = (Omega A^H)^H : the sketch meets A^H through the operator's fast path
    Y = op.H.apply_sketch(S).conj().T
    if stable:
        Y = orth(Y, orthonormalize)
    for _ in range(power_iters):
        Z = op.rmatmat(Y)
        if stable:
            Z = orth(Z, orthonormalize)
        Y = op.matmat(Z)
        if stable:
            Y = orth(Y, orthonormalize)
    return Y


@functools.partial(_jit.jit, static_argnames=("l", "power_iters", "sketch", "stable",
                                             "ortho", "final"))
def _range_jit(key, op, l, power_iters, sketch, stable, ortho, final):
    Y = power_range(key, op, l, sketch, power_iters, stable, ortho)
    return orth(Y, ortho) if final else Y


#: the fields of a :class:`rdr_jax.Method` that the sketch-based entry points read (its pivot
#: rule is for skeleton selection and is not used here)
SKETCH_FIELDS = ("sketch", "power_iters", "stable", "oversample", "orthonormalize")
_SKETCH_DEFAULTS = {"sketch": "gaussian", "power_iters": 0, "stable": True, "oversample": None,
                    "orthonormalize": "auto"}


def sketch_options(method: Any = None, *, sketch: Any = None, power_iters: Any = None,
                   stable: Any = None, oversample: Any = None, orthonormalize: Any = None) -> dict:
    """The sketch options ``{sketch, power_iters, stable, oversample, orthonormalize}`` of
    ``method`` (a :class:`rdr_jax.Method`, or None for the defaults), each replaced by the
    keyword of the same name when that is not None. Why: ``Method`` is the one carrier of
    method options; the keywords are shorthands that override it."""
    opts = dict(_SKETCH_DEFAULTS)
    if method is not None:
        if isinstance(method, (str, bytes)) or not all(hasattr(method, f) for f in SKETCH_FIELDS):
            raise TypeError("method must be a rdr_jax.Method (for example Method(sketch='srtt', "
                            f"power_iters=2)) or None; got {method!r}")
        opts.update({f: getattr(method, f) for f in SKETCH_FIELDS})
    flat = {"sketch": sketch, "power_iters": power_iters, "stable": stable,
            "oversample": oversample, "orthonormalize": orthonormalize}
    opts.update({f: v for f, v in flat.items() if v is not None})
    return opts


def _check_common(key, A, l, o: dict):
    """Validated ``(key, op, l, q, sketch, stable, orthonormalizer)`` for the sketch options
    ``o`` of :func:`sketch_options`."""
    key = V.check_key(key)
    op = as_operator(A)
    m, n = op.shape
    l = V.check_int("l", l, low=1, high=min(m, n), high_desc=f"min(m, n) for A of shape {(m, n)}")
    q = V.check_int("power_iters", o["power_iters"], low=0)
    return (key, op, l, q, as_sketch(o["sketch"]), V.check_bool("stable", o["stable"]),
            as_orthonormalizer(o["orthonormalize"], op))


def range_sketch(key, A: Any, l: int, *, method: Any = None, power_iters: int | None = None,
                 sketch: Any = None, stable: bool | None = None,
                 orthonormalize: Any = None) -> jax.Array:
    """Range sketch ``Y`` (m x l) with q power iterations, not orthonormalised at the end
    when ``stable=False`` (Eq. (2.14): ``Y = (A A^H)^q A Omega^H``).

    Chapter 2's plain "1piter" row basis approximator ``X = Gamma A A^H A`` (l x n) is
    ``range_sketch(key, as_operator(A).H, l, power_iters=1, stable=False).conj().T``.
    Arguments as :func:`rangefinder`.
    """
    o = sketch_options(method, power_iters=power_iters, sketch=sketch, stable=stable,
                       orthonormalize=orthonormalize)
    return _range_jit(*_check_common(key, A, l, o), final=False)


def rangefinder(key, A: Any, l: int, *, method: Any = None, power_iters: int | None = None,
                sketch: Any = None, stable: bool | None = None,
                orthonormalize: Any = None) -> jax.Array:
    """Orthonormal basis ``Q`` (m x l) of a randomized range sketch of ``A`` (thesis Eqs.
    (2.14)-(2.15)); for a Gaussian sketch ``E ||A - Q Q^H A||_F^2 <= (l - 1)/(l - k - 1)
    ||A - A_k||_F^2`` (Halko et al. 2011, Thm 10.5). Why: the basis every randomized
    low-rank method starts from.

    Args:
      key: ``jax.random.key``.
      A: m x n matrix or operator.
      l: sketch size, ``1 <= l <= min(m, n)`` (static).
      method: a :class:`rdr_jax.Method`, the carrier of the options below (its sketch,
        power_iters, stable and orthonormalize; its pivot rule is not used). Default: the
        defaults below. A keyword given here (not None) overrides the method's field.
      power_iters: q >= 0 (static; default 0).
      sketch: ``"gaussian"`` (default), ``"srtt"``, ``"sparse_sign"`` or ``Gaussian()``,
        ``SRTT()``, ``SparseSign(zeta)``.
      stable: re-orthonormalise every half iteration (default True); ``False`` is the plain
        power iteration.
      orthonormalize: ``"auto"`` (default: CholeskyQR2 for row-sharded A, else Householder),
        ``"householder"``, ``"cholesky_qr2"`` or an object (``CholeskyQR2(blocks=8)``).

    Returns:
      ``Q`` (m x l) with orthonormal columns; differentiable with every sketch.
    """
    o = sketch_options(method, power_iters=power_iters, sketch=sketch, stable=stable,
                       orthonormalize=orthonormalize)
    return _range_jit(*_check_common(key, A, l, o), final=True)


@functools.partial(_jit.jit, static_argnames=("k", "l", "sketch", "power_iters", "stable",
                                             "ortho"))
def _rsvd_jit(key, op, k, l, sketch, power_iters, stable, ortho=_HOUSEHOLDER):
    Q = orth(power_range(key, op, l, sketch, power_iters, stable, ortho), ortho)
    B = op.rmatmat(Q).conj().T                                   # Q^H A  (l x n)
    Ut, s, Vt = jnp.linalg.svd(B, full_matrices=False)
    U = jnp.matmul(Q, Ut, precision=HIGHEST)
    return RSVD(U[:, :k], s[:k], Vt[:k])


def auto_power_iters(k: int, shape) -> int:
    """scikit-learn's ``n_iter="auto"`` rule: 7 when ``k < 0.1 min(m, n)``, else 4."""
    return 7 if k < 0.1 * min(shape) else 4


def rsvd(key, A: Any, k: int, *, method: Any = None, oversample: int | None = None,
         power_iters: int | str | None = None, sketch: Any = None,
         stable: bool | None = None) -> RSVD:
    """Randomized truncated SVD (thesis Algorithm 4, Eq. (2.16)).

    ``Q = rangefinder(key, A, l)`` with ``l = min(k + oversample, m, n)``, then the SVD of
    the small ``Q^H A``; the leading k triplets of ``(Q U_t, S, V^H)``. Why: two passes over A
    (plus two per power iteration) instead of a full SVD.

    Args:
      key: ``jax.random.key``.
      A: m x n matrix or operator.
      k: target rank, an int (static); for a tolerance use
        :func:`rdr_jax.interpolative_to_tolerance` and :func:`rdr_jax.id_to_svd`.
      method: a :class:`rdr_jax.Method`, the carrier of the options below and of
        ``orthonormalize`` (as :func:`rangefinder`; its pivot rule is not used), e.g.
        ``Method(sketch="srtt", power_iters=2)``. A keyword given here (not None) overrides
        the method's field.
      oversample: ``l - k`` (default: the method's, else 10).
      power_iters: q (static), or ``"auto"``: scikit-learn's rule (7 if ``k < 0.1 min(m,
        n)`` else 4). The default 0 is the thesis' setting and the cheapest; use ``"auto"``
        or 1-2 on noisy, slowly decaying spectra (``docs/choosing-a-method.md``).
      sketch, stable: as :func:`rangefinder`.

    Returns:
      :class:`RSVD` ``(U, s, Vt)``: U (m x k), s (k,), Vt (k x n). Bound its error with
      :func:`rdr_jax.error_bound`.
    """
    if isinstance(k, (float, np.floating)) and not isinstance(k, bool):
        raise TypeError(f"rsvd() takes an integer rank k; got {k!r}. For a tolerance, use "
                        "rdr_jax.id_to_svd(rdr_jax.interpolative_to_tolerance(key, A, tol)"
                        ".trim())")
    o = sketch_options(method, oversample=oversample, power_iters=power_iters, sketch=sketch,
                       stable=stable)
    op = as_operator(A)
    m, n = op.shape
    k = V.check_int("k", k, low=1, high=min(m, n), high_desc=f"min(m, n) for A of shape {(m, n)}")
    p = V.check_int("oversample", 10 if o["oversample"] is None else o["oversample"], low=0)
    l = min(k + p, m, n)
    if isinstance(o["power_iters"], str):
        if o["power_iters"] != "auto":
            raise ValueError(f"power_iters must be an int >= 0 or 'auto'; got "
                             f"{o['power_iters']!r}")
        o["power_iters"] = auto_power_iters(k, op.shape)
    key, op, l, q, sk, stable, ortho = _check_common(key, op, l, o)
    res = _rsvd_jit(key, op, k, l, sk, q, stable, ortho)
    if V.is_concrete(res.s):
        s0 = float(res.s[0])
        V.warn_if_nonfinite(s0, "the largest singular value estimate")
        if s0 == 0.0:
            _warn_if_subnormal(op)
    return res


def _warn_if_subnormal(op) -> None:
    """XLA flushes subnormal numbers to zero: a nonzero A of subnormal entries gives s = 0."""
    if not op.dense:                    # checked for dense input only: never densify
        return
    x = op.todense()
    if not V.is_concrete(x):
        return
    amax = float(np.max(np.abs(np.asarray(x))))        # on the host: no flush to zero
    if 0.0 < amax < float(jnp.finfo(x.dtype).tiny):
        warnings.warn(f"A's entries are subnormal (max |a_ij| = {amax:.3g} < the smallest normal "
                      f"{x.dtype} number); XLA flushes them to zero, so the SVD is 0. Rescale A "
                      "(e.g. by 2**100) or use float64.", RuntimeWarning, stacklevel=V.user_stacklevel())
