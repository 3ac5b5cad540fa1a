"""Randomized rangefinder and randomized SVD (thesis Sec. ``subsec:rsvd``, Algorithm
``algo:rsvd_power_iterations``).

With an embedding ``Omega`` (l x n) the range sketch with q power iterations is

* plain (thesis Eq. ``eq:def_power_iter``):  ``Y = (A A^H)^q A Omega^H``;
* stable (Eq. ``eq:ortho_power_iter`` / ``eq:stable_power_iter``):
  ``Y_0 = orth(A Omega^H)``, ``Y_i = orth(A orth(A^H Y_{i-1}))`` for i = 1..q,

and ``Q = orth(Y)`` is an orthonormal basis approximating the leading left singular
subspace. The plain form loses accuracy for ill-conditioned A when q > 1 (the columns of Y
align with the top singular vector in floating point); the stable form re-orthonormalises
after every half iteration at O(q (m + n) l^2) extra cost.

The randomized SVD (Eq. ``eq:rsvd_procedures``) then takes the SVD of the small
``Q^H A`` (l x n): ``Q^H A = U_t S V^H``, ``U = Q U_t``.

For the *row* space (Chapter 2's row basis approximators, e.g. ``X = Gamma A`` or the
"1piter" ``X = Gamma A A^H A``) use the adjoint operator:
``range_sketch(key, as_operator(A).H, l, ...)`` returns ``X^H`` (n x l).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rdr_jax._src import jit as _jit
from rdr_jax._src import validation as V
from rdr_jax._src.tallqr import CholeskyQR2, Householder, as_orthonormalizer, cholesky_qr2
from rdr_jax.operators import HIGHEST, LinearOperator, as_operator
from rdr_jax.sketching import as_sketch

__all__ = ["rangefinder", "range_sketch", "rsvd", "RSVD", "power_range", "orth",
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

    ``Y = (A A^H)^q A Omega^H`` (plain, Eq. ``eq:def_power_iter``) or, with ``stable``, the
    same subspace re-orthonormalised after every half iteration (Eq. ``eq:ortho_power_iter``)
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


@functools.partial(_jit.jit, static_argnames=("l", "sketch", "power_iters", "stable",
                                             "final", "ortho"))
def _range_jit(key, op, l, sketch, power_iters, stable, final, ortho):
    Y = power_range(key, op, l, sketch, power_iters, stable, ortho)
    return orth(Y, ortho) if final else Y


def _check_common(key, A, l, power_iters, sketch, orthonormalize="auto"):
    key = V.check_key(key)
    op = as_operator(A)
    m, n = op.shape
    l = V.check_int("l", l, low=1, high=min(m, n), high_desc=f"min(m, n) for A of shape {(m, n)}")
    q = V.check_int("power_iters", power_iters, low=0)
    return key, op, l, q, as_sketch(sketch), as_orthonormalizer(orthonormalize, op)


def range_sketch(key, A: Any, l: int, *, power_iters: int = 0, sketch: Any = "gaussian",
                 stable: bool = True, orthonormalize: Any = "auto") -> jax.Array:
    """Range sketch ``Y`` (m x l) with q power iterations, not orthonormalised at the end
    when ``stable=False`` (Eq. ``eq:def_power_iter``: ``Y = (A A^H)^q A Omega^H``).

    Chapter 2's plain "1piter" row basis approximator ``X = Gamma A A^H A`` (l x n) is
    ``range_sketch(key, as_operator(A).H, l, power_iters=1, stable=False).conj().T``.
    Arguments as :func:`rangefinder`.
    """
    key, op, l, q, sk, ortho = _check_common(key, A, l, power_iters, sketch, orthonormalize)
    return _range_jit(key, op, l, sk, q, bool(stable), False, ortho)


def rangefinder(key, A: Any, l: int, *, power_iters: int = 0, sketch: Any = "gaussian",
                stable: bool = True, orthonormalize: Any = "auto") -> jax.Array:
    """Orthonormal basis ``Q`` (m x l) of a randomized range sketch of ``A``.

    Implements thesis Eqs. ``eq:def_power_iter`` (``stable=False``) and
    ``eq:ortho_power_iter`` (``stable=True``). For a Gaussian sketch and ``l >= k + 2``,

        ``E ||A - Q Q^H A||_F^2 <= (l - 1) / (l - k - 1) ||A - A_k||_F^2``

    (Eq. ``eq:rand_rangefinder_error_bound``, Halko et al. 2011 Thm 10.5).

    Args:
      key: ``jax.random.key``.
      A: matrix or operator (dense, scipy.sparse, BCOO, implicit, factored), m x n.
      l: sketch size, ``1 <= l <= min(m, n)`` (static).
      power_iters: q >= 0 (static).
      sketch: ``"gaussian"``, ``"srtt"``, ``"sparse_sign"`` or a choice object
        (:class:`rdr_jax.sketching.Gaussian`, ``SRTT``, ``SparseSign(zeta=4)``).
      stable: re-orthonormalise every half iteration (default everywhere in rdr_jax);
        ``False`` is the plain power iteration of Eq. ``eq:def_power_iter``.
      orthonormalize: how the tall bases are orthonormalised: ``"householder"`` (thin
        Householder QR), ``"cholesky_qr2"`` (adaptive shifted CholeskyQR3,
        :func:`cholesky_qr2`: for a row-sharded A one all-reduce of the l x l Gram per
        pass instead of gathering the m x l basis; needs ``cond(Y) <~ 1/u``), a choice
        object (``Householder()``, ``CholeskyQR2(blocks=8)``), or ``"auto"`` (default):
        CholeskyQR2 when A is a concrete jax array (or factored operator) whose rows are
        sharded over several devices, Householder otherwise.

    Returns:
      ``Q`` (m x l) with orthonormal columns, dtype of A. Differentiable (``jax.grad``)
      with every sketch; one compiled function per shape/dtype/choice.

    Raises:
      ValueError/TypeError: bad ``A`` (non-2-D, NaN/Inf, integer dtype), ``l`` outside
        ``[1, min(m, n)]``, negative ``power_iters``, unknown ``sketch`` or
        ``orthonormalize``.

    Example:
      >>> Q = rangefinder(jax.random.key(0), A, 20, power_iters=1)
      >>> err = jnp.linalg.norm(A - Q @ (Q.T @ A))
    """
    key, op, l, q, sk, ortho = _check_common(key, A, l, power_iters, sketch, orthonormalize)
    return _range_jit(key, op, l, sk, q, bool(stable), True, ortho)


@functools.partial(_jit.jit, static_argnames=("k", "l", "sketch", "power_iters", "stable",
                                             "ortho"))
def _rsvd_jit(key, op, k, l, sketch, power_iters, stable, ortho=_HOUSEHOLDER):
    Q = orth(power_range(key, op, l, sketch, power_iters, stable, ortho), ortho)
    B = op.rmatmat(Q).conj().T                                   # Q^H A  (l x n)
    Ut, s, Vt = jnp.linalg.svd(B, full_matrices=False)
    U = jnp.matmul(Q, Ut, precision=HIGHEST)
    return RSVD(U[:, :k], s[:k], Vt[:k])


class _RangeOptions(NamedTuple):
    """Static range-finder options of :func:`rsvd` (one hashable jit argument)."""

    sketch: Any
    power_iters: int
    stable: bool
    ortho: Any


@functools.partial(_jit.jit, static_argnames=("k", "l", "opts", "delta"))
def _rsvd_certified_jit(key, op, k, l, opts: _RangeOptions, delta):
    from rdr_jax import certify as CE
    res = _rsvd_jit(key, op, k, l, *opts)
    factors = (res.U * res.s[None, :], None, res.Vt.conj().T)
    return res, CE.certify_result(key, op, factors, delta)


def rsvd(key, A: Any, k: int, *, oversample: int = 10, l: int | None = None,
         power_iters: int = 0, sketch: Any = "gaussian", stable: bool = True,
         confidence: float | None = None, orthonormalize: Any = "auto"):
    """Randomized truncated SVD (thesis Algorithm ``algo:rsvd_power_iterations``,
    Eq. ``eq:rsvd_procedures``).

    ``Q = rangefinder(key, A, l, ...)``; ``[U_t, S, V] = svd(Q^H A)``; return the leading k
    triplets of ``(Q U_t, S, V^H)``.

    Args:
      key: ``jax.random.key``.
      A: matrix or operator, m x n.
      k: target rank (static), ``1 <= k <= l``.
      oversample: ``l = min(k + oversample, min(m, n))`` when ``l`` is not given.
      l: explicit sketch size (overrides ``oversample``), ``k <= l <= min(m, n)``.
      power_iters, sketch, stable, orthonormalize: as :func:`rangefinder`.
      confidence: None, or a probability in (0, 1): then also return an
        :class:`rdr_jax.ErrorCertificate` of ``A - U diag(s) Vt`` (bounds on the Frobenius
        and spectral errors that hold with probability >= confidence; 20 more Gaussian test
        vectors, drawn from a stream the SVD never uses).

    Returns:
      :class:`RSVD` ``(U, s, Vt)`` with U (m x k), s (k,), Vt (k x n); with ``confidence``
      the pair ``(RSVD, ErrorCertificate)``.

    Example:
      >>> U, s, Vt = rsvd(jax.random.key(0), A, 10, power_iters=2)
    """
    op = as_operator(A)
    m, n = op.shape
    k = V.check_int("k", k, low=1, high=min(m, n), high_desc=f"min(m, n) for A of shape {(m, n)}")
    if l is None:
        p = V.check_int("oversample", oversample, low=0)
        l = min(k + p, m, n)
    else:
        l = V.check_int("l", l, low=1, high=min(m, n),
                        high_desc=f"min(m, n) for A of shape {(m, n)}")
        if k > l:
            raise ValueError(f"k must be <= l; got k = {k} > l = {l}")
    key, op, l, q, sk, ortho = _check_common(key, op, l, power_iters, sketch, orthonormalize)
    if confidence is not None:
        from rdr_jax.certify import check_delta
        delta = 1.0 - check_delta(confidence, "confidence")
        res, cert = _rsvd_certified_jit(key, op, k, l,
                                        _RangeOptions(sk, q, bool(stable), ortho), delta)
        V.warn_if_nonfinite(res.s[0], "the largest singular value estimate")
        return res, cert
    res = _rsvd_jit(key, op, k, l, sk, q, bool(stable), ortho)
    V.warn_if_nonfinite(res.s[0], "the largest singular value estimate")
    return res
