"""Leave-one-out error estimates and jackknife variance estimates for the randomized SVD and
the randomized Nystrom approximation (beyond the thesis).

Epperly and Tropp, "Efficient error and variance estimation for randomized matrix
computations", SIAM J. Sci. Comput. 46(1), 2024 (arXiv 2207.06342). The estimates come from
the small triangular factors the algorithms compute anyway: no extra products with A.
Derivation, measurements and the unstable cases: ``docs/error-bounds.md``, "Leave-one-out".
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl

from rdr_jax._src import jit as _jit
from rdr_jax._src import validation as V
from rdr_jax._src.dense import mm
from rdr_jax.certify import gaussian_test_vectors
from rdr_jax.operators import as_operator
from rdr_jax.randomized_svd import RSVD

__all__ = ["LOOEstimate", "NystromEstimate", "rsvd_loo", "nystrom_loo"]


class LOOEstimate(NamedTuple):
    """A randomized SVD with its leave-one-out error estimate.

    Attributes:
      svd: the rank-s approximation ``A_hat = Q Q^H A`` as an :class:`~rdr_jax.RSVD`
        (untruncated: all s triplets).
      error: the leave-one-out estimate of ``||A - A_hat||_F``; its square is unbiased for
        ``E ||A - A_hat_{s-1}||_F^2``, the error of the same method with s - 1 vectors.
      jackknife: the jackknife estimate of the standard deviation of ``A_hat``,
        ``(sum_i ||A_hat_(i) - mean_j A_hat_(j)||_F^2)^(1/2)``.
      terms: the s leave-one-out terms ``||(A - A_hat_(i)) omega_i||^2`` (their mean is
        ``error^2``; their spread, ``std(terms) / sqrt(s)``, a standard error of it).
    """

    svd: RSVD
    error: jax.Array
    jackknife: jax.Array
    terms: jax.Array


class NystromEstimate(NamedTuple):
    """A randomized Nystrom approximation ``A_hat = V diag(eigvals) V^H`` of a PSD matrix with
    its leave-one-out error estimate (``error``, ``terms``: as :class:`LOOEstimate`)."""

    V: jax.Array
    eigvals: jax.Array
    error: jax.Array
    terms: jax.Array


def _r_inv_h(R):
    """``R^{-H}`` for an upper-triangular R (a lower-triangular solve)."""
    eye = jnp.eye(R.shape[0], dtype=R.dtype)
    return jsl.solve_triangular(R.conj().T, eye, lower=True)


@functools.partial(_jit.jit, static_argnames=("s", "power_iters"))
def _rsvd_loo_jit(key, op, s: int, power_iters: int):
    rdt = V.real_dtype(op.dtype)
    Om = gaussian_test_vectors(key, op.shape[1], s, op.dtype)
    Z = op.matmat(Om)                                        # A Omega
    Y = Z
    for _ in range(power_iters):                             # plain subspace iteration
        Y = op.matmat(op.rmatmat(Y))
    Q, R = jnp.linalg.qr(Y, mode="reduced")
    B = op.rmatmat(Q).conj().T                               # Q^H A
    W, S, Vt = jnp.linalg.svd(B, full_matrices=False)
    T = _r_inv_h(R)
    c = jnp.linalg.norm(T, axis=0)                           # ||R^{-H} e_i||
    Tn = T / c
    if power_iters == 0:     # (A - A_hat_(i)) omega_i = z_i / ||z_i||^2, z_i = Q R^{-H} e_i
        terms = 1.0 / c ** 2
    else:                    # ||(I - Q Q^H) A w_i||^2 + |t_i^H Q^H A w_i|^2, t_i = Tn e_i
        QZ = mm(Q.conj().T, Z)
        D = Z - mm(Q, QZ)
        terms = (jnp.sum(jnp.abs(D) ** 2, axis=0)
                 + jnp.abs(jnp.sum(Tn.conj() * QZ, axis=0)) ** 2)
    # jackknife: A_hat_(i) = Q (I - t_i t_i^H) Q^H A and Q^H A = W S V^H, so
    # sum_i ||A_hat_(i) - mean||_F^2 = ||S W^H Tn||_F^2 - ||S W^H Tn Tn^H||_F^2 / s
    X = S[:, None].astype(op.dtype) * mm(W.conj().T, Tn)
    jack2 = jnp.sum(jnp.abs(X) ** 2) - jnp.sum(jnp.abs(mm(X, Tn.conj().T)) ** 2) / s
    svd = RSVD(mm(Q, W), S.astype(rdt), Vt)
    return LOOEstimate(svd, jnp.sqrt(jnp.mean(terms)).astype(rdt),
                       jnp.sqrt(jnp.maximum(jack2, 0.0)).astype(rdt), terms.astype(rdt))


def _check(key, A, s, power_iters):
    key = V.check_key(key)
    op = as_operator(A)
    m, n = op.shape
    s = V.check_int("s", s, low=2, high=min(m, n),
                    high_desc=f"min(m, n) for A of shape {(m, n)}")
    q = V.check_int("power_iters", power_iters, low=0)
    return key, op, s, q


def rsvd_loo(key, A: Any, s: int, *, power_iters: int = 0) -> LOOEstimate:
    """Randomized SVD of rank s with Epperly and Tropp's leave-one-out error estimate and
    jackknife variance estimate (arXiv 2207.06342, Secs. 2-3; no extra products with A).

    ``Y = (A A^H)^q A Omega`` for an n x s Gaussian ``Omega``, ``Y = Q R``,
    ``A_hat = Q Q^H A``. Leaving out column i, ``(A - A_hat_(i)) omega_i`` follows from
    ``R^{-H} e_i`` (and, for q > 0, from ``A Omega`` kept from the first pass), so
    ``error^2 = (1/s) sum_i ||(A - A_hat_(i)) omega_i||^2``. Why: a Frobenius error estimate
    for free, and a variance estimate that says whether s is large enough.

    Args:
      key: ``jax.random.key``.
      A: m x n matrix or operator (float32/float64/complex).
      s: sketch size = rank of ``A_hat``, an int in ``[2, min(m, n)]`` (static).
      power_iters: q (static), plain subspace iteration (no re-orthonormalisation: the
        estimate needs R of ``(A A^H)^q A Omega`` itself, of condition ``~(s_1/s_s)^(2q+1)``;
        E&T warn it can be unstable for fast decay). Any q: trust the estimate above
        ``~1e3 eps ||A||_F``, below it is rounding noise (``docs/error-bounds.md``).

    Returns:
      :class:`LOOEstimate` ``(svd, error, jackknife, terms)``; jit- and vmap-able.
    """
    key, op, s, q = _check(key, A, s, power_iters)
    return _rsvd_loo_jit(key, op, s, q)


@functools.partial(_jit.jit, static_argnames=("s",))
def _nystrom_loo_jit(key, op, s: int):
    rdt = V.real_dtype(op.dtype)
    Om = gaussian_test_vectors(key, op.shape[1], s, op.dtype)
    Y = op.matmat(Om)
    nu = jnp.finfo(rdt).eps * jnp.linalg.norm(Y)             # stabilising shift
    Y = Y + nu.astype(op.dtype) * Om
    Q, R = jnp.linalg.qr(Y, mode="reduced")
    H = mm(Om.conj().T, Y)
    H = 0.5 * (H + H.conj().T)
    C = jnp.linalg.cholesky(H).conj().T                      # H = C^H C, C upper
    F = jsl.solve_triangular(C, R.conj().T, lower=False, trans="C").conj().T   # R C^{-1}
    U, sig, _ = jnp.linalg.svd(F, full_matrices=False)
    lam = jnp.maximum(sig ** 2 - nu, 0.0)
    # (A - A_hat_(i)) omega_i = Y H^{-1} e_i / (H^{-1})_ii, and ||Y x|| = ||R x||
    Hinv = jsl.cho_solve((C, False), jnp.eye(s, dtype=op.dtype))
    G = mm(R, Hinv) / jnp.real(jnp.diagonal(Hinv))[None, :]
    terms = jnp.sum(jnp.abs(G) ** 2, axis=0)
    return NystromEstimate(mm(Q, U), lam.astype(rdt), jnp.sqrt(jnp.mean(terms)).astype(rdt),
                           terms.astype(rdt))


def nystrom_loo(key, A: Any, s: int) -> NystromEstimate:
    """Randomized Nystrom approximation ``A Omega (Omega^H A Omega)^+ (A Omega)^H`` of a PSD
    matrix, with the leave-one-out error estimate of Epperly and Tropp (arXiv 2207.06342,
    Sec. 2; the shifted, stable Nystrom of Tropp et al. 2017).

    ``error^2 = (1/s) sum_i ||Y H^{-1} e_i||^2 / (H^{-1})_ii^2`` with ``Y = A Omega``,
    ``H = Omega^H Y``: from the small factors, no extra products with A. A is not checked
    for being PSD (a Cholesky failure gives NaN).

    Args:
      key: ``jax.random.key``.
      A: n x n PSD matrix or operator.
      s: sketch size = rank, an int in ``[2, n]`` (static).

    Returns:
      :class:`NystromEstimate` ``(V, eigvals, error, terms)``; jit- and vmap-able.
    """
    key, op, s, _ = _check(key, A, s, 0)
    if op.shape[0] != op.shape[1]:
        raise ValueError(f"A must be square (a PSD matrix) for a Nystrom approximation; got "
                         f"shape {op.shape}")
    return _nystrom_loo_jit(key, op, s)
