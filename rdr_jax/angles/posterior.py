"""Posterior (residual-based) bounds on the canonical angles of a computed low-rank SVD
(thesis Ch. 3, Thms 3.3 and 3.4). Derivations: ``docs/angles.md``."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from rdr_jax._src import jit as _jit
from rdr_jax._src import validation as V
from rdr_jax.angles._common import (check_spectrum, check_subspace, mm,
                                    run_after, svd_parts)
from rdr_jax.norms import spectral_norm
from rdr_jax.operators import LinearOperator, as_operator, pytree_dataclass

__all__ = ["posterior_residuals", "residual_bound", "gap_bounds", "Residuals",
           "ResidualBound", "GapBound", "SeparateGapBounds"]

# Above this many entries (m n) residual="auto" estimates the residual norms instead of
# forming the residuals (2^22 entries = 32 MiB in float64, e.g. 2048 x 2048).
_EXACT_RESIDUAL_MAX_ENTRIES = 1 << 22


class Residuals(NamedTuple):
    """Residuals of ``A ~ U_l S_l V_l^H``, the inputs of Thms 3.3 and 3.4.

    ``s_hat`` (l,); ``left_svals``/``right_svals`` (k,): ``sigma_1..k`` of
    ``E_U = (I - U_l U_l^H) A`` and ``E_V = A (I - V_l V_l^H)`` (NaN when estimated);
    ``left_norm``/``right_norm``: their 2-norms; ``E3_2``, ``E3_F``: ``||[E31, E32]||_{2,F}``
    with ``[E31, E32] = (I - U_l U_l^H) A V_l``; ``E32_2``, ``E33_2``: 2-norms of ``E32`` and
    ``E33 = (I - U_l U_l^H) A (I - V_l V_l^H)``; ``exact``: False when ``left_norm``,
    ``right_norm`` and ``E33_2`` are power-method (lower) estimates.
    """

    s_hat: Float[Array, " l"]
    left_svals: Float[Array, " k"]
    right_svals: Float[Array, " k"]
    left_norm: Float[Array, ""]
    right_norm: Float[Array, ""]
    E3_2: Float[Array, ""]
    E3_F: Float[Array, ""]
    E32_2: Float[Array, ""]
    E33_2: Float[Array, ""]
    exact: Bool[Array, ""]


class ResidualBound(NamedTuple):
    """Thm 3.3: ``bound = fmin(term1, term2)``, ``term1_i = sigma_{k-i+1}(E) / sigma_k``
    (NaN when the residual spectrum was estimated), ``term2_i = ||E||_2 / sigma_i``."""

    bound: Float[Array, " k"]
    term1: Float[Array, " k"]
    term2: Float[Array, " k"]


class GapBound(NamedTuple):
    """One form of Thm 3.4: angle-wise bounds (k,) and bounds on the 2- and F-norms."""

    anglewise: Float[Array, " k"]
    spectral: Float[Array, ""]
    frobenius: Float[Array, ""]


class SeparateGapBounds(NamedTuple):
    """All forms of Thm 3.4 with the gaps ``gamma1, gamma2, Gamma1, Gamma2`` and the
    conditions ``valid_Gamma`` (``sigma_k > ||E33||_2``, every form), ``valid_gamma``
    (``sigma_k > s_hat_{k+1}``, the ``Uk_Uk``/``Vk_Vk`` forms) and ``valid`` (both)."""

    Uk_Ul: GapBound
    Vk_Vl: GapBound
    Uk_Uk: GapBound
    Vk_Vk: GapBound
    gamma1: Float[Array, ""]
    gamma2: Float[Array, ""]
    Gamma1: Float[Array, ""]
    Gamma2: Float[Array, ""]
    valid_Gamma: Bool[Array, ""]
    valid_gamma: Bool[Array, ""]
    valid: Bool[Array, ""]


@pytree_dataclass
class _ProjectedOperator(LinearOperator):
    """``(I - U U^H) A (I - V V^H)`` (U or V may be None: no projection on that side)."""

    A: LinearOperator
    U: Any
    V: Any

    @property
    def shape(self):
        return self.A.shape

    @property
    def dtype(self):
        return self.A.dtype

    @staticmethod
    def _proj(Q, X):
        return X if Q is None else X - mm(Q, mm(Q.conj().T, X))

    def matmat(self, X):
        return self._proj(self.U, self.A.matmat(self._proj(self.V, X)))

    def rmatmat(self, Y):
        return self._proj(self.V, self.A.rmatmat(self._proj(self.U, Y)))

    @property
    def H(self):
        return _ProjectedOperator(self.A.H, self.V, self.U)

    def rows(self, I):  # pragma: no cover - not used by the norm estimators
        return self.todense()[I]

    def cols(self, J):  # pragma: no cover
        return self.todense()[:, J]


@functools.partial(_jit.jit, static_argnames=("k", "exact", "norm_iters"))
def _residuals_jit(op, U, s_hat, Vt, key, k, exact, norm_iters):
    Vh = Vt.conj().T
    rdt = s_hat.dtype
    AV = op.matmat(Vh)                                        # m x l
    F = AV - mm(U, mm(U.conj().T, AV))                        # (I - U U^H) A V_l = [E31, E32]
    # the SVDs below are independent; run_after chains them
    svF = jnp.linalg.svd(F, compute_uv=False)
    E3_2 = svF[0]
    # ||F||_F = sigma_1 ||sv / sigma_1||_2: no overflow/underflow of the squares at any scale
    E3_F = E3_2 * jnp.sqrt(jnp.sum((svF / jnp.where(E3_2 > 0, E3_2, 1)) ** 2))
    l = Vh.shape[1]
    E32_2 = (jnp.linalg.svd(run_after(svF, F[:, k:]), compute_uv=False)[0] if l > k
             else jnp.zeros((), rdt))
    if exact:
        Ad = op.todense()
        EU = Ad - mm(U, mm(U.conj().T, Ad))
        EV = Ad - mm(mm(Ad, Vh), Vt)
        E33 = EU - mm(mm(EU, Vh), Vt)
        svU = jnp.linalg.svd(run_after(E32_2, EU), compute_uv=False)
        svV = jnp.linalg.svd(run_after(svU, EV), compute_uv=False)
        kk = min(k, svU.shape[0])
        pad = jnp.zeros((k - kk,), rdt)
        left_svals = jnp.concatenate([svU[:kk], pad])
        right_svals = jnp.concatenate([svV[:kk], pad])
        left_norm, right_norm = svU[0], svV[0]
        E33_2 = jnp.linalg.svd(run_after(svV, E33), compute_uv=False)[0]
    else:
        k1, k2, k3 = jax.random.split(key, 3)
        left_norm = spectral_norm(k1, _ProjectedOperator(op, U, None), iters=norm_iters)
        right_norm = spectral_norm(k2, _ProjectedOperator(op, None, Vh), iters=norm_iters)
        E33_2 = spectral_norm(k3, _ProjectedOperator(op, U, Vh), iters=norm_iters)
        left_svals = right_svals = jnp.full((k,), jnp.nan, rdt)
    f = lambda x: jnp.asarray(x).astype(rdt)  # noqa: E731
    return Residuals(s_hat, f(left_svals), f(right_svals), f(left_norm), f(right_norm),
                     f(E3_2), f(E3_F), f(E32_2), f(E33_2), jnp.asarray(exact))


def posterior_residuals(A: Any, svd: Any, k: int, *, residual: str = "auto",
                        key: Any = None, norm_iters: int = 50) -> Residuals:
    """The residual norms and spectra of a rank-l approximation that Thms 3.3 and 3.4 need;
    computed once, then evaluated cheaply with any spectrum by :func:`residual_bound` and
    :func:`gap_bounds`. Thesis Ch. 3, after Theorem 3.4.

    Args:
      A: matrix or operator (m x n).
      svd: ``(U, s, Vt)`` with all l triplets of a projection-based SVD
        (``U_l^H A = S_l V_l^H``), e.g. ``rdr_jax.rsvd(key, A, l, oversample=0)``.
      k: target rank (static), ``1 <= k <= l``.
      residual: ``"exact"`` (dense residual SVDs), ``"estimate"`` (never densifies A: the
        m x n residual norms by the power method, residual spectra NaN) or ``"auto"``
        (exact when ``m n <= 2^22``).
      key: ``jax.random.key``, required when the residuals are estimated.
      norm_iters: power-method iterations per norm estimate (static).

    Returns:
      :class:`Residuals`.
    """
    op = as_operator(A)
    U, s_hat, Vt = svd_parts("svd", svd)
    m, n = op.shape
    l = U.shape[1]
    if U.shape[0] != m or Vt.shape[1] != n:
        raise ValueError(f"svd factors U {U.shape}, Vt {Vt.shape} do not match A of shape {(m, n)}")
    k = V.check_int("k", k, low=1, high=l, high_desc=f"l = {l}, the rank of the approximation")
    if residual not in ("auto", "exact", "estimate"):
        raise ValueError(f"residual must be 'auto', 'exact' or 'estimate'; got {residual!r}")
    exact = (m * n <= _EXACT_RESIDUAL_MAX_ENTRIES) if residual == "auto" else residual == "exact"
    norm_iters = V.check_int("norm_iters", norm_iters, low=1)
    if exact:
        key = jax.random.key(0)  # unused
    elif key is None:
        raise ValueError("key is required when the residual norms are estimated "
                         "(residual='estimate', or 'auto' with m n > 2^22)")
    else:
        key = V.check_key(key)
    s_hat = check_spectrum(s_hat, name="svd.s", allow_zero=True)
    dt = jnp.result_type(op.dtype, U.dtype, Vt.dtype)
    return _residuals_jit(op, U.astype(dt), s_hat.astype(V.real_dtype(dt)), Vt.astype(dt),
                          key, k, bool(exact), norm_iters)


def _check_residuals(res: Any) -> Residuals:
    if not isinstance(res, Residuals):
        raise TypeError(f"res must be the Residuals returned by posterior_residuals; got "
                        f"{type(res).__name__}")
    return res


@functools.partial(_jit.jit, static_argnames=("subspace",))
def _residual_bound_jit(res, s, subspace):
    k = res.left_svals.shape[0]
    svals = res.left_svals if subspace == "left" else res.right_svals
    nrm = res.left_norm if subspace == "left" else res.right_norm
    sig = s[:k]
    term1 = svals[::-1] / sig[k - 1]        # sigma_{k-i+1}(E) / sigma_k
    term2 = nrm / sig                        # ||E||_2 / sigma_i
    return ResidualBound(jnp.fmin(term1, term2), term1, term2)


def residual_bound(res: Residuals, s: Any, *, subspace: str = "left") -> ResidualBound:
    """Posterior residual-based bound, deterministic:
    ``sin angle_i <= min(sigma_{k-i+1}(E) / sigma_k, ||E||_2 / sigma_i)`` with
    ``E = E_U`` (left) or ``E_V`` (right). Thesis Thm 3.3
    (Theorem 3.3); with :func:`rdr_jax.angles.padded_spectrum` it
    is an estimate of the bound.

    Args:
      res: :func:`posterior_residuals` output.
      s: spectrum (at least k values).
      subspace: ``"left"`` (U) or ``"right"`` (V).

    Returns:
      :class:`ResidualBound`.
    """
    res = _check_residuals(res)
    subspace = check_subspace(subspace)
    k = res.left_svals.shape[0]
    s = check_spectrum(s, min_len=k, len_desc=f"sigma_1..sigma_k, k = {k}")
    return _residual_bound_jit(res, s.astype(res.s_hat.dtype), subspace)


@_jit.jit
def _gap_bounds_jit(res, s):
    k = res.left_svals.shape[0]
    sk = s[k - 1]
    sh = res.s_hat[k]
    e33, e32, X2, XF = res.E33_2, res.E32_2, res.E3_2, res.E3_F
    valid_Gamma = sk > e33
    valid_gamma = sk > sh
    # (sk^2 - x^2)/sk = (sk - x)(1 + x/sk) and (sk^2 - x^2)/x = (sk - x)(sk/x + 1): no squares,
    # so no overflow/underflow at any scale of A (and no cancellation of squares)
    gamma1, gamma2 = (sk - sh) * (1 + sh / sk), (sk - sh) * (sk / sh + 1)
    Gamma1, Gamma2 = (sk - e33) * (1 + e33 / sk), (sk - e33) * (sk / e33 + 1)
    # i-th smallest sine <-> i-th largest singular value in the proof: factor sigma_k / sigma_i
    ratio = sk / s[:k]
    nan = jnp.asarray(jnp.nan, s.dtype)

    def gb(aw, sp, fr, ok):
        return GapBound(jnp.where(ok, aw, nan), jnp.where(ok, sp, nan), jnp.where(ok, fr, nan))

    both = valid_Gamma & valid_gamma
    Uk_Ul = gb(ratio * X2 / Gamma1, X2 / Gamma1, XF / Gamma1, valid_Gamma)
    Vk_Vl = gb(ratio * X2 / Gamma2, X2 / Gamma2, XF / Gamma2, valid_Gamma)
    one = jnp.ones((), s.dtype)
    fU = jnp.hypot(one, e32 / gamma2)
    Uk_Uk = gb(X2 / Gamma1 * jnp.hypot(one, ratio * e32 / gamma2), X2 / Gamma1 * fU,
               XF / Gamma1 * fU, both)
    fV = jnp.hypot(e32 / gamma1, e33 / sk)
    Vk_Vk = gb(X2 / Gamma1 * jnp.hypot(ratio * e32 / gamma1, e33 / sk),
               X2 / Gamma1 * fV, XF / Gamma1 * fV, both)
    return SeparateGapBounds(Uk_Ul, Vk_Vl, Uk_Uk, Vk_Vk, gamma1, gamma2, Gamma1, Gamma2,
                             valid_Gamma, valid_gamma, both)


def gap_bounds(res: Residuals, s: Any) -> SeparateGapBounds:
    """All forms of the separate-gap bound (after Nakatsukasa 2020, Thm 6.1): e.g.
    ``||sin angle(U_k, U_l)||_xi <= ||[E31, E32]||_xi / Gamma1``,
    ``Gamma1 = (sigma_k^2 - ||E33||_2^2) / sigma_k``, and the angle-wise forms. Thesis
    Thm 3.4 (Theorem 3.4, Eqs. ``eq:separate_gap_*``); the angle-wise factor
    is ``sigma_k/sigma_i`` for the i-th smallest angle (``docs/angles.md``).

    Args:
      res: :func:`posterior_residuals` output with ``l > k``.
      s: spectrum (at least k values).

    Returns:
      :class:`SeparateGapBounds`; forms whose gap conditions fail are NaN, flagged.
    """
    res = _check_residuals(res)
    k = res.left_svals.shape[0]
    if res.s_hat.shape[0] <= k:
        raise ValueError(f"Thm 3.4 needs s_hat_(k+1): the approximation has rank l = "
                         f"{res.s_hat.shape[0]} <= k = {k}; use l > k")
    s = check_spectrum(s, min_len=k, len_desc=f"sigma_1..sigma_k, k = {k}")
    return _gap_bounds_jit(res, s.astype(res.s_hat.dtype))
