"""Adaptive randomized pivoting (ARP): a pivot rule with an expected-error guarantee.

Cortinovis and Kressner, "Adaptive randomized pivoting for column subset selection, DEIM, and
low-rank approximation" (arXiv:2412.13992), and Epperly, "Adaptive randomized pivoting and
volume sampling" (arXiv:2510.02513). ARP is randomly pivoted QR on ``V^H``, where V (n x k)
has orthonormal columns. Step i samples a column of ``V^H`` with probability proportional to
its squared norm after projecting out the columns already picked. The k columns J drawn this
way satisfy, for every A,

    E ||A - A(:, J) (V^H(:, J))^{-1} V^H||_F^2 = (k + 1) ||A - A V V^H||_F^2

(an equality: J is distributed as volume sampling, ``P(J) = |det V^H(:, J)|^2``; Epperly,
arXiv:2510.02513). The orthogonal projection ``Pi_J = C C^+`` does at least as well:
``E ||A - Pi_J A||_F^2 <= (k + 1) ||A - A V V^H||_F^2`` (Cortinovis and Kressner's theorem).
It costs O(n k^2) once V is known. Math and choices: ``docs/arp.md``.

As a pivot rule, :class:`ARP` pivots on the rSVD's ``V_k^H`` for the columns
(:class:`rdr_jax.id_cur.selection.RSVDBasisRule`, as DEIM and leverage scores do) and on an
orthonormal basis of the skeleton block ``C = A(:, J)`` for the rows. It is one class in its
own file; the pipeline is unchanged. The core is :func:`arp_select`, usable on its own.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from rdr_jax._src import fp as _fp
from rdr_jax._src import jit as _jit
from rdr_jax._src import validation as V
from rdr_jax._src.tallqr import householder_qr
from rdr_jax.id_cur.selection import RSVDBasisRule
from rdr_jax.operators import HIGHEST

__all__ = ["ARP", "arp_select", "arp_pivots"]


def _step_noise(key, i, n: int, dtype):
    """The Gumbel noise of step i: ``jax.random.gumbel(fold_in(key, i), (n,))``. Adding it to
    the log-probabilities and taking the argmax draws from the categorical distribution
    exactly (the Gumbel-max trick). The tests draw the same noise to replay the procedure in
    numpy."""
    return jax.random.gumbel(jax.random.fold_in(key, i), (n,), dtype=dtype)


@functools.partial(_jit.jit, static_argnames=("k",))
def arp_pivots(key, Vh: jax.Array, k: int) -> jax.Array:
    """The kernel of :func:`arp_select`, without input checks (for use inside the pipeline).

    Randomly pivoted QR on ``Vh`` (r x n, ``k <= r``), by Householder reflections:

    * ``R = Vh / 2^e``: a power-of-two rescaling (exact), so the pivots of ``Vh`` and
      ``c Vh`` have the same distribution for every ``c > 0``.
    * Step i = 0, ..., k-1: ``d_j = ||R(:, j)||^2``, the squared norm of column j of
      ``Vh`` after the columns picked so far are projected out. Draw
      ``j_i = argmax_j (log d_j + G_ij)``, with Gumbel noise
      ``G_i = jax.random.gumbel(jax.random.fold_in(key, i), (n,))``: the probability of j
      is ``d_j / sum d`` (the Gumbel-max trick). A column already picked is excluded. If
      every ``d_j`` is 0 (rank(Vh) < k), j_i is uniform over the columns not yet picked.
    * Reflect ``R <- (I - 2 u u^H / u^H u) R`` with the Householder vector u of
      ``R(:, j_i)``, which maps that column onto a multiple of ``e_i``; then set row i to
      zero. The rows of R stay the residual of the columns of ``Vh``.

    Cost: k steps of three passes over the r x n matrix (O(n r k) flops); a ``fori_loop``
    with static k, so one program for any key, under jit and vmap.

    Returns:
      ``J`` (k,) int32: distinct column indices, in the order drawn.
    """
    X = _fp.normalize(jnp.asarray(Vh))[0]
    r, n = X.shape
    if not 1 <= k <= min(r, n):
        raise ValueError(f"k must be in [1, min(r, n)] for Vh of shape {X.shape}; got {k}")
    rdt = jnp.finfo(X.dtype).dtype

    def body(i, carry):
        R, J, taken = carry
        d = jnp.sum(jnp.real(R * R.conj()), axis=0).astype(rdt)
        live = (d > 0) & ~taken
        logits = jnp.where(live, jnp.log(jnp.where(live, d, 1)), -jnp.inf)
        # no residual left (rank(Vh) < k): uniform over the columns not picked yet
        logits = jnp.where(jnp.any(live), logits, jnp.where(taken, -jnp.inf, 0.0))
        j = jnp.argmax(logits + _step_noise(key, i, n, rdt)).astype(jnp.int32)
        c = R[:, j]
        nrm = jnp.sqrt(jnp.sum(jnp.real(c * c.conj())))
        ci = c[i]
        aci = jnp.abs(ci)
        phase = jnp.where(aci > 0, ci / jnp.where(aci > 0, aci, 1), 1).astype(X.dtype)
        u = c.at[i].add(phase * nrm)       # rows < i of c are already zero
        uu = 2 * nrm * (nrm + aci)         # u^H u
        scale = jnp.where(uu > 0, 2 / jnp.where(uu > 0, uu, 1), 0).astype(X.dtype)
        R = R - jnp.outer(u * scale, jnp.matmul(u.conj(), R, precision=HIGHEST))
        R = R.at[i].set(0)
        return R, J.at[i].set(j), taken.at[j].set(True)

    init = (X, jnp.zeros((k,), jnp.int32), jnp.zeros((n,), bool))
    return jax.lax.fori_loop(0, k, body, init)[1]


def _orthonormality_tol(dtype, n: int) -> float:
    """Default tolerance on ``max |Vh Vh^H - I|``: what an orthonormalisation in ``dtype``
    leaves (a few hundred ulps, growing slowly with n), far below a non-orthonormal input."""
    return float(200 * np.sqrt(max(n, 1)) * np.finfo(dtype).eps)


def arp_select(key, Vh: Any, k: int, *, check: bool = True, atol: float | None = None
               ) -> jax.Array:
    """k column indices of ``Vh`` (r x n, orthonormal rows) by adaptive randomized pivoting.

    Column subset selection with a guarantee (Cortinovis and Kressner, arXiv:2412.13992;
    Epperly, arXiv:2510.02513): for ``Vh = V^H`` with V (n x k) orthonormal and any matrix A
    with n columns, the returned J satisfy

        E ||A - A(:, J) (Vh(:, J))^{-1} Vh||_F^2 = (k + 1) ||A - A V V^H||_F^2,

    and so ``E ||A - C C^+ A||_F^2 <= (k + 1) ||A - A V V^H||_F^2`` for ``C = A(:, J)``. J is
    distributed as volume sampling: ``P(J as a set) = |det Vh(:, J)|^2``. The first index is
    column j with probability ``||Vh(:, j)||^2 / k``. With ``r > k`` rows the k indices are the
    first k steps of the same procedure (the guarantee is stated for ``r = k``). To select
    rows of A, pass ``U^H`` for a U (m x k) with orthonormal columns.

    Args:
      key: ``jax.random.key``; the indices are a function of the key (same key, same bits).
      Vh: r x n array (real or complex) with orthonormal rows, ``r <= n``.
      k: number of indices (static), ``1 <= k <= r``.
      check: test ``max |Vh Vh^H - I| <= atol`` when Vh holds values (skipped for a traced
        Vh under jit/vmap/grad, where nothing can be checked).
      atol: the tolerance of that test; default ``200 sqrt(n) eps`` of Vh's dtype.

    Returns:
      ``J`` (k,) int32: distinct column indices, in the order drawn.

    Raises:
      TypeError: k not an int, Vh not a numeric array, key not a PRNG key.
      ValueError: Vh not 2-D, wider than tall in the wrong way (``r > n``), not finite, rows
        not orthonormal, or k outside ``[1, r]``.

    Example:
      >>> V = np.linalg.svd(A, full_matrices=False)[2][:10]      # top-10 right sing. vectors
      >>> cols = arp_select(jax.random.key(0), V, 10)
    """
    key = V.check_key(key)
    if isinstance(Vh, (jax.Array, np.ndarray, list, tuple)) or hasattr(Vh, "__array__"):
        Vh = jnp.asarray(Vh)
    else:
        raise TypeError(f"Vh must be an array (r x n with orthonormal rows); got "
                        f"{type(Vh).__name__}")
    if Vh.ndim != 2:
        raise ValueError(f"Vh must be a 2-D array (r x n with orthonormal rows); got shape "
                         f"{Vh.shape}")
    if not jnp.issubdtype(Vh.dtype, jnp.inexact):
        if jnp.issubdtype(Vh.dtype, jnp.bool_) or not jnp.issubdtype(Vh.dtype, jnp.number):
            raise TypeError(f"Vh must be a real or complex floating array; got dtype {Vh.dtype}")
        Vh = Vh.astype(jnp.result_type(float))
    r, n = Vh.shape
    if r == 0 or n == 0:
        raise ValueError(f"Vh must be non-empty; got shape {Vh.shape}")
    if r > n:
        raise ValueError(
            f"Vh must be r x n with r <= n (orthonormal rows); got shape {Vh.shape}. For an "
            f"n x k matrix V with orthonormal columns pass Vh = V.conj().T")
    k = V.check_int("k", k, low=1, high=r,
                    high_desc=f"the number of rows of Vh, its rank; Vh has shape {Vh.shape}")
    if check and V.is_concrete(Vh):
        G = np.asarray(Vh, dtype=np.complex128 if jnp.iscomplexobj(Vh) else np.float64)
        if not np.all(np.isfinite(G)):
            raise ValueError("Vh has non-finite entries (nan or inf)")
        err = float(np.max(np.abs(G @ G.conj().T - np.eye(r))))
        tol = _orthonormality_tol(Vh.dtype, n) if atol is None else float(atol)
        if not err <= tol:
            raise ValueError(
                f"Vh must have orthonormal rows (Vh Vh^H = I); max |Vh Vh^H - I| = {err:.3g} > "
                f"{tol:.3g}. Orthonormalise it first, e.g. Vh = jnp.linalg.qr(Vh.conj().T)[0]"
                ".conj().T (same row space), or pass check=False (the (k+1) guarantee then "
                "does not apply)")
    return arp_pivots(key, Vh, k)


@dataclasses.dataclass(frozen=True)
class ARP(RSVDBasisRule):
    """Adaptive randomized pivoting (Cortinovis and Kressner, arXiv:2412.13992): columns by
    ARP on the rSVD's ``V_k^H``, rows by ARP on an orthonormal basis of ``C = A(:, J)``.

    Lines 1-2 are the rank-k rSVD of :class:`~rdr_jax.id_cur.selection.RSVDBasisRule`
    (sketch size ``l = k + 5`` by default, ``power_iters`` stable power iterations). Line 3
    is :func:`rdr_jax.id_cur.arp.arp_pivots` on ``X = V_k^H``. Line 4 is :func:`rdr_jax.id_cur.arp.arp_pivots` on ``Q_C^H``, where
    ``C = Q_C R_C`` (Householder QR, m x k). The draws use independent keys.

    Guarantees (expectations over the pivot draws, for the rSVD drawn):

    * columns: ``E ||A - C C^+ A||_F^2 <= (k + 1) ||A - A V_k V_k^H||_F^2``, and the right side
      is at most (k + 1) times the squared rSVD error: ``A V_k V_k^H`` is the best
      approximation with row space ``V_k``, and the rSVD's is another;
    * rows, given C: ``E ||A - A R^+ R||_F^2 <= (k + 1) ||A - C C^+ A||_F^2``;
    * CUR (``U = C^+ A R^+``): ``||A - CUR||_F^2 <= ||A - C C^+ A||_F^2 + ||A - A R^+ R||_F^2``,
      so ``E ||A - CUR||_F^2 <= (k + 2)(k + 1) ||A - A V_k V_k^H||_F^2``.

    Rows on C rather than on the rSVD's ``U_k``: ``U_k`` comes from the single pass
    ``A Omega`` and is a poorer basis than ``V_k`` (which has one more product with A). On
    SNN1e3 (k = 10, 50) ARP on ``U_k`` gave row errors 1.36x and 1.93x the best rank-k error,
    and ARP on C 1.06x and 1.20x. On the other test matrices the two were within 5%
    (``docs/arp.md``). With ``interp="sketch"``, ``W = X_1^+ X = V_k^H(:, J)^{-1} V_k^H`` is
    the papers' oblique interpolation, with expected squared error exactly (k + 1) times
    ``||A - A V_k V_k^H||_F^2``.

    Randomized: the skeletons depend on the key. Not greedy: its pivots are drawn on the
    whole basis, and the rSVD's basis depends on l. So there are no rank buckets. Not
    streamable.
    """

    name: ClassVar[str] = "arp"

    def select(self, key, X, k):
        return arp_pivots(key, X, k)

    def select_rows(self, key, C, Uk, k):
        Q = householder_qr(C)[0]                # m x k, orthonormal even for a singular C
        return arp_pivots(key, Q.conj().T, k)
