"""Fixed-accuracy interpolative decompositions: blocked randomized LUPP with an unbiased
residual estimate, as one traceable ``jax.lax.while_loop`` (beyond the thesis: it extends
Algorithm 2; Pearce, Chen, Dong and Martinsson 2023), then the shortest skeleton prefix whose
least-squares coefficients meet the tolerance (:func:`exact_prefix`). The rank is chosen so
that ``||A - A_hat||_F <= tol ||A||_F``; the result says whether it was met and why not
(:class:`StopReason`); with ``failure_prob`` the stop is certified. Algorithm, the precision
floor, certified stopping and scaling: ``docs/id-cur.md`` ("Fixed accuracy").
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import numbers
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Inexact, Int

from rdr_jax._src import dense
from rdr_jax._src import jit as _jit
from rdr_jax._src import fp as _fp
from rdr_jax import certify as CE
from rdr_jax._src import validation as V
from rdr_jax.operators import HIGHEST, LinearOperator, as_operator

__all__ = ["DEFAULT_MAX_RANK", "AdaptiveColumns", "AdaptiveRows", "Prefix", "StopReason",
           "adaptive_column_skeletons", "adaptive_row_skeletons", "exact_prefix"]

#: default cap on the rank: ``min(m, n, DEFAULT_MAX_RANK)``. The work arrays are
#: ``m x (max_rank + block_size)``; pass a larger ``max_rank`` explicitly if you need it.
DEFAULT_MAX_RANK = 1024

#: the precision floor of the residual sketch ``S = Y - W Y(I, :)``, in units of the working
#: precision's eps: a pivot below ``FLOOR_ULPS eps`` times the norm of its own row of ``Y``
#: and ``W Y(I, :)`` is rounding noise and is not taken, and the loop stops once
#: ``||S||_F <= FLOOR_ULPS eps ||Y||_F`` (measured noise: up to ~45 eps, ``docs/id-cur.md``)
FLOOR_ULPS = 64
#: blocks still added once the residual sketch is at that floor: the least-squares
#: coefficients of the final stage resolve errors a few times below the loop's own floor
FLOOR_BLOCKS = 2


class StopReason(enum.IntEnum):
    """Why a fixed-accuracy decomposition stopped (the ``stop_reason`` field, an int32).

    TOLERANCE: the tolerance was met (certified at ``1 - failure_prob`` when asked);
    ``converged`` is True only for this reason. PRECISION_FLOOR: the working precision's
    floor on this matrix was reached above the tolerance (the residual is rounding noise, or
    the rank reached ``min(m, n)``). MAX_RANK: ``max_rank < min(m, n)`` was reached first.
    NOT_FINITE: a sketch of A was not finite (NaN/Inf in A). RESAMPLE: the loop's estimate
    met the tolerance but the final check of the returned factors did not (an unlucky draw:
    another key will do). FIXED_RANK: not a fixed-accuracy result (the rank was given).
    """

    TOLERANCE = 0
    PRECISION_FLOOR = 1
    MAX_RANK = 2
    NOT_FINITE = 3
    RESAMPLE = 4
    FIXED_RANK = 5


def describe(stop_reason) -> str:
    """The :class:`StopReason` of a (concrete) ``stop_reason`` in words."""
    r = StopReason(int(stop_reason))
    return {StopReason.TOLERANCE: "tolerance met",
            StopReason.PRECISION_FLOOR: "precision floor reached",
            StopReason.MAX_RANK: "max_rank reached",
            StopReason.NOT_FINITE: "A is not finite",
            StopReason.RESAMPLE: "final check missed the tolerance (resample)",
            StopReason.FIXED_RANK: "fixed rank"}[r]


class AdaptiveRows(NamedTuple):
    """Fixed-accuracy row ID ``A ~ W A(rows, :)``, padded to ``max_rank``.

    Attributes:
      rows: (max_rank,) int32 skeleton row indices; ``rows[:rank]`` are valid, the rest 0.
      W: (m, max_rank) interpolation matrix; columns past ``rank`` are exactly 0 and
        ``W[rows[:rank], :rank] = I``.
      rank: int32 scalar.
      error_estimate: estimated ``||A - W A(rows, :)||_F / ||A||_F`` at ``rank`` from a
        sketch the pivots never saw (the squared numerator is unbiased; at the precision
        floor, the rounding level it measured, never 0 unless the residual is exactly 0); NaN
        if a sketch was not finite.
      norm_estimate: estimated ``||A||_F`` (root of the mean of ``||A Omega||_F^2`` over all
        sketches drawn).
      converged: bool scalar, ``error_estimate <= tol`` (with ``failure_prob``: the
        certified bound met ``tol``); ``stop_reason`` says why when False.
      error_bound: with ``failure_prob`` only (else NaN): relative Frobenius bound
        ``>= ||A - W A(rows, :)||_F / ||A||_F`` with probability >= ``1 - failure_prob`` (see
        "Certified stopping" in ``docs/id-cur.md``); NaN when no certification passed.
      stop_reason: int32 :class:`StopReason` (TOLERANCE, PRECISION_FLOOR, MAX_RANK or
        NOT_FINITE).
    """

    rows: Int[Array, " r"]
    W: Inexact[Array, "m r"]
    rank: Int[Array, ""]
    error_estimate: Float[Array, ""]
    norm_estimate: Float[Array, ""]
    converged: Bool[Array, ""]
    error_bound: Float[Array, ""]
    stop_reason: Int[Array, ""]


class AdaptiveColumns(NamedTuple):
    """Fixed-accuracy column ID ``A ~ A(:, cols) W``, padded to ``max_rank``.

    Attributes:
      cols: (max_rank,) int32 skeleton column indices; ``cols[:rank]`` are valid, the rest 0.
      W: (max_rank, n); rows past ``rank`` are exactly 0 and ``W[:rank, cols[:rank]] = I``.
      rank, error_estimate, norm_estimate, converged, error_bound, stop_reason: as in
        :class:`AdaptiveRows`.
    """

    cols: Int[Array, " r"]
    W: Inexact[Array, "r n"]
    rank: Int[Array, ""]
    error_estimate: Float[Array, ""]
    norm_estimate: Float[Array, ""]
    converged: Bool[Array, ""]
    error_bound: Float[Array, ""]
    stop_reason: Int[Array, ""]


@dataclasses.dataclass(frozen=True)
class _Config:
    """Static settings of the jitted core (hashable; one compilation per value)."""

    block_size: int   # b: rows added per step (<= max_rank)
    oversample: int   # p: extra sketch columns (b + p <= number of columns of the op)
    max_rank: int     # static cap on the rank; arrays are padded to it
    delta: Optional[float] = None   # certified stopping: failure probability (1 - confidence)
    cert_vectors: int = 24          # fresh Gaussian test vectors per certification
    margin: float = 1.0             # stop on the estimate at margin * tol (not certified)


class _State(NamedTuple):
    W: jax.Array          # m x (max_rank + b); columns past s are zero
    I: jax.Array          # (max_rank + b,) int32
    s: jax.Array          # current rank
    step: jax.Array       # sketches drawn so far
    norm2_sum: jax.Array  # sum of ||Y'||_F^2 (scaled units)
    e2: jax.Array         # last ||S||_F^2 (scaled units)
    done: jax.Array
    converged: jax.Array
    reason: jax.Array     # StopReason once done
    at_floor: jax.Array   # steps whose residual sketch was at the precision floor
    k: jax.Array          # exponent of the power-of-two scaling 2^k of A
    checks: jax.Array     # certifications done (confidence mode)
    bound2: jax.Array     # last certified relative bound, squared (confidence mode)


# --------------------------------------------------------------------------------------
# the jitted core
# --------------------------------------------------------------------------------------
def _gaussian(op, key, step, l):
    n = op.shape[1]
    return jax.random.normal(jax.random.fold_in(key, step), (n, l), dtype=op.dtype) / math.sqrt(l)


def _shift(e, rdt):
    """Exponent k of the power-of-two scaling ``2^k`` for data whose largest magnitude is
    ``2^e``: 0 (no scaling, bit-identical results) unless ``|e| > maxexp / 4`` -- where squared
    norms would under/overflow -- then ``k = -e`` (clipped to a safe range)."""
    fi = jnp.finfo(rdt)
    K = fi.maxexp - 8
    far = (jnp.abs(e) > fi.maxexp // 4) & (e != _fp.ZERO_EXPONENT)
    return jnp.where(far, jnp.clip(-e, -K, K), 0).astype(jnp.int32)


def _sketcher(op, key, l, rdt):
    """``(k0, sketch)``: ``sketch(t, k) -> (Y', k)`` with ``Y' = 2^k A Omega_t``, an exact
    power-of-two scaling that keeps ``|Y'| ~ 1`` (squared norms then neither underflow nor
    overflow), and ``k0`` the initial exponent.

    * dense: ``k`` from the largest ``|a_ij|``, decoded from the bits (:mod:`rdr_jax._src.fp`,
      immune to XLA's flush-to-zero); when ``k != 0`` each sketch multiplies the exactly
      rescaled copy ``2^k A``, so subnormal inputs work too (the branch depends on A only:
      it is not batched under vmap over keys);
    * sparse: ``k`` from the largest stored entry, the entries rescaled once (O(nnz));
    * other operators: ``k`` from the first sketch ``A Omega_0`` (rescaled exactly), then
      ``2^k A Omega = 2^{min(k,0)} A (2^{max(k,0)} Omega)``.

    One call site for the Gaussian generator and one for the product (compile time).
    """
    dt = np.dtype(op.dtype)
    e = op.max_exponent()
    if e is not None and op.dense:            # dense: rescale only when needed
        k0 = _shift(e, rdt)

        def sketch(t, k):
            Om = _gaussian(op, key, t, l)
            Y = jax.lax.cond(k != 0, lambda: op.ldexp(k).matmat(Om), lambda: op.matmat(Om))
            return Y.astype(dt), k
        return k0, sketch
    if e is not None:                         # sparse: rescale the stored entries once
        k0 = _shift(e, rdt)
        ops = op.ldexp(k0)
        return k0, lambda t, k: (ops.matmat(_gaussian(op, key, t, l)).astype(dt), k)

    one = jnp.ones((), rdt)

    def sketch(t, k):                          # k = 0 until the first sketch has set it
        Om = _gaussian(op, key, t, l) * _fp.ldexp(one, jnp.maximum(k, 0))
        Y = op.matmat(Om).astype(dt) * _fp.ldexp(one, jnp.minimum(k, 0))
        first = t == 0
        k = jnp.where(first, _shift(_fp.max_exponent(Y), rdt), k)
        return jnp.where(first, _fp.ldexp(Y, k), Y).astype(dt), k
    return jnp.zeros((), jnp.int32), sketch


def _extend(W, I, s, S, rs, limit, b):
    """LUPP on the block picks b rows ``I'``; ``w = S S(I', :)^+``; ``W <- [W - w W(I', :), w]``,
    ``I <- [I, I']``; pivots that are numerically zero are dropped (at most ``limit`` rows
    kept)."""
    m, bp = S.shape
    eps = jnp.finfo(W.dtype).eps
    lu, _, perm = dense.lu(S)
    piv = jnp.abs(jnp.diagonal(lu[:b, :b]))
    # numerically zero pivots: relative to the block's largest, or at the rounding level of
    # their own row (rs: row norms of Y and W Y(I, :), whose difference S is)
    good = ((piv > eps * max(m, bp) * jnp.max(piv)) & (piv > FLOOR_ULPS * eps * rs[perm[:b]])
            & (piv > 0))
    g = jnp.sum(jnp.cumprod(good.astype(jnp.int32)))          # leading nonzero pivots
    g = jnp.minimum(g, limit).astype(s.dtype)                # never exceed max_rank
    keep = jnp.arange(b) < g
    Inew = perm[:b].astype(I.dtype)
    Snew = jnp.where(keep[:, None], S[Inew], 0.0)            # b x (b + p), junk rows zeroed
    w = jnp.matmul(S, jnp.linalg.pinv(Snew), precision=HIGHEST)   # m x b
    w = jnp.where(keep[None, :], w, 0.0)
    W = W - jnp.matmul(w, W[Inew], precision=HIGHEST)
    W = jax.lax.dynamic_update_slice(W, w, (jnp.zeros((), s.dtype), s))
    I = jax.lax.dynamic_update_slice(I, jnp.where(keep, Inew, 0), (s,))
    return W, I, s + g


#: at most this many certifications per call (the j-th spends delta / 2^(j+1))
MAX_CHECKS = 30


def _exact_norm2(op, k0):
    """``||2^k0 A||_F^2`` for dense and sparse inputs (exact), else None."""
    return op.ldexp(k0).fro_norm_sq() if op.explicit else None


def _certifier(op, key, cfg: _Config, rdt, k0):
    """``certify(st, taken, k) -> (ok, bound^2)``: the certified stopping test of the
    module docstring, on ``cfg.cert_vectors`` fresh Gaussian vectors (stream
    ``fold_in(key', j + 1)`` for the j-th certification)."""
    s_c = cfg.cert_vectors
    _, sketch_c = _sketcher(op, jax.random.fold_in(key, CE.CERT_STREAM), s_c, rdt)
    a2_exact = _exact_norm2(op, k0)
    cplx = np.dtype(op.dtype).kind == "c"
    dof = 2 if cplx else 1
    share = 1.0 if a2_exact is not None else 0.5    # delta_j split between E and ||A||
    l = cfg.block_size + cfg.oversample

    def certify(st, taken, k, tol2):
        Yc, _ = sketch_c(st.checks + 1, k)                 # 2^k A Omega_c, N(0, 1/s_c)
        Sc = Yc - jnp.matmul(st.W, Yc[st.I], precision=HIGHEST)
        Sc = jnp.where(taken[:, None], 0.0, Sc)
        e2c = jnp.sum(jnp.abs(Sc) ** 2).astype(rdt)      # mean_i ||E omega_i||^2
        log_d = (math.log(cfg.delta * share)
                 - (st.checks + 1).astype(rdt) * math.log(2.0))
        tau = CE.chernoff_root(dof * s_c, log_d, upper=False)
        if a2_exact is not None:
            a2 = a2_exact.astype(rdt)
        else:   # ||A||_F^2 >= (mean over every vector drawn so far) / tau'
            n_vec = st.step * l + s_c
            mean = (st.norm2_sum * l + jnp.sum(jnp.abs(Yc) ** 2) * s_c) / n_vec.astype(rdt)
            a2 = mean / CE.chernoff_root(dof * n_vec, log_d, upper=True)
        b2 = e2c / tau / jnp.where(a2 > 0, a2, 1)
        b2 = jnp.where(a2 > 0, b2, jnp.where(e2c > 0, jnp.inf, 0.0)).astype(rdt)
        ok = jnp.isfinite(b2) & (b2 <= tol2) & (st.checks < MAX_CHECKS)
        return ok, b2
    # candidate stops: where the estimate leaves room for the first certification to pass
    tau0 = CE.fro_factor(s_c, cfg.delta * share / 2, cplx)
    return certify, tau0


def _rows_impl(key, op: LinearOperator, tol, cfg: _Config) -> AdaptiveRows:
    m, n = op.shape
    b, p, cap = cfg.block_size, cfg.oversample, cfg.max_rank
    l = b + p
    dt = np.dtype(op.dtype)
    rdt = V.real_dtype(dt)
    eps = float(jnp.finfo(rdt).eps)
    tol2 = jnp.square(jnp.asarray(tol, rdt))
    stop2 = tol2 * cfg.margin ** 2
    floor2 = (FLOOR_ULPS * eps) ** 2
    # reaching rank min(m, n) without meeting tol: the residual is rounding, not rank
    full = StopReason.PRECISION_FLOOR if cap >= min(m, n) else StopReason.MAX_RANK

    # exact power-of-two scaling so that squared norms neither underflow nor overflow
    k0, sketch = _sketcher(op, key, l, rdt)
    certified = cfg.delta is not None
    if certified:
        certify, tau0 = _certifier(op, key, cfg, rdt, k0)

    def body(st: _State) -> _State:
        Y, k = sketch(st.step, st.k)                         # Y' = 2^k A Omega_step
        valid = (jnp.arange(cap + b) < st.s).astype(jnp.int32)
        taken = jnp.zeros((m,), jnp.int32).at[st.I].max(valid) > 0
        WY = jnp.matmul(st.W, Y[st.I], precision=HIGHEST)     # unused W columns are zero
        S = Y - WY
        rs = jnp.sqrt(jnp.sum(jnp.abs(Y) ** 2, axis=1) + jnp.sum(jnp.abs(WY) ** 2, axis=1))
        S = jnp.where(taken[:, None], 0.0, S)                 # exact zeros on the skeleton
        e2 = jnp.sum(jnp.abs(S) ** 2)
        norm2_sum = st.norm2_sum + jnp.sum(jnp.abs(Y) ** 2)
        step = st.step + 1
        norm2 = norm2_sum / step.astype(rdt)
        finite = jnp.isfinite(e2) & jnp.isfinite(norm2_sum)
        checks, bound2 = st.checks, st.bound2
        if certified:
            cand = finite & (e2 <= tau0 * tol2 * norm2)
            conv, bound2 = jax.lax.cond(
                cand, lambda: certify(st._replace(norm2_sum=norm2_sum, step=step), taken, k,
                                      tol2),
                lambda: (jnp.zeros((), bool), st.bound2))
            checks = checks + cand.astype(checks.dtype)
            conv = conv | (finite & (e2 == 0))       # an exactly zero residual is certain
            bound2 = jnp.where(finite & (e2 == 0), 0.0, bound2)
        else:
            conv = finite & (e2 <= stop2 * norm2)
        low = finite & ~conv & (e2 <= floor2 * norm2)     # the residual is rounding noise
        at_floor = st.at_floor + low.astype(jnp.int32)
        floor = low & (at_floor > FLOOR_BLOCKS)
        capped = st.s >= cap
        stop = conv | capped | ~finite | floor
        W, I, s = jax.lax.cond(
            stop, lambda: (st.W, st.I, st.s),
            lambda: _extend(st.W, I=st.I, s=st.s, S=S, rs=rs, limit=cap - st.s, b=b))
        stuck = ~stop & (s == st.s)            # no pivot survived: nothing more to resolve
        reason = jnp.select(
            [conv, ~finite, floor | stuck, capped],
            [StopReason.TOLERANCE, StopReason.NOT_FINITE, StopReason.PRECISION_FLOOR, full],
            -1).astype(jnp.int32)
        e2 = jnp.where(finite, e2, jnp.nan).astype(rdt)
        return _State(W, I, s, step, norm2_sum, e2, stop | stuck, conv, reason, at_floor, k,
                      checks, bound2.astype(rdt))

    st = _State(W=jnp.zeros((m, cap + b), dt), I=jnp.zeros((cap + b,), jnp.int32),
                s=jnp.zeros((), jnp.int32), step=jnp.zeros((), jnp.int32),
                norm2_sum=jnp.zeros((), rdt), e2=jnp.zeros((), rdt),
                done=jnp.zeros((), bool), converged=jnp.zeros((), bool),
                reason=jnp.full((), -1, jnp.int32), at_floor=jnp.zeros((), jnp.int32), k=k0,
                checks=jnp.zeros((), jnp.int32), bound2=jnp.full((), jnp.nan, rdt))
    st = jax.lax.while_loop(lambda st: ~st.done, body, st)

    norm2 = st.norm2_sum / st.step.astype(rdt)
    err = jnp.where(norm2 > 0, jnp.sqrt(st.e2 / jnp.where(norm2 > 0, norm2, 1)), 0.0)
    err = jnp.where(jnp.isnan(st.e2), jnp.nan, err)
    norm = _fp.ldexp(jnp.sqrt(norm2), -st.k)
    bound = jnp.sqrt(st.bound2).astype(rdt)       # NaN unless certified
    return AdaptiveRows(st.I[:cap], st.W[:, :cap], st.s, err.astype(rdt), norm.astype(rdt),
                        st.converged, bound, st.reason)


@functools.partial(_jit.jit, static_argnames=("cfg",))
def _adaptive_rows(key, op, tol, cfg: _Config) -> AdaptiveRows:
    return _rows_impl(key, op, tol, cfg)


@functools.partial(_jit.jit, static_argnames=("cfg",))
def _adaptive_cols(key, op, tol, cfg: _Config) -> AdaptiveColumns:
    r = _rows_impl(key, op.H, tol, cfg)
    return AdaptiveColumns(r.rows, r.W.conj().T, r.rank, r.error_estimate, r.norm_estimate,
                           r.converged, r.error_bound, r.stop_reason)


# --------------------------------------------------------------------------------------
# boundary
# --------------------------------------------------------------------------------------
def _check_tol(tol, rdt) -> jax.Array:
    """``tol``: a real float in (0, 1) (Python/NumPy float or a 0-d floating jax array;
    traced values are accepted unchecked). Returned as a 0-d array of ``rdt`` so that every
    value hits the same compiled function."""
    if isinstance(tol, jax.core.Tracer):
        if tol.shape != () or not jnp.issubdtype(tol.dtype, jnp.floating):
            raise TypeError(f"tol must be a real float scalar; got a traced {tol.dtype} "
                            f"array of shape {tol.shape}")
        return tol.astype(rdt)
    if isinstance(tol, (bool, np.bool_, numbers.Integral)):
        raise TypeError(f"tol must be a float in (0, 1) (a relative Frobenius error); got "
                        f"{type(tol).__name__} {tol!r} (an integer would be a rank)")
    if isinstance(tol, (jax.Array, np.ndarray)):
        if tol.shape != () or not jnp.issubdtype(tol.dtype, jnp.floating):
            raise TypeError(f"tol must be a real float scalar; got an array of dtype "
                            f"{tol.dtype} and shape {tol.shape}")
        value = float(tol)
    elif isinstance(tol, (float, np.floating)):
        value = float(tol)
    else:
        raise TypeError(f"tol must be a float in (0, 1); got {type(tol).__name__} {tol!r}")
    if not (math.isfinite(value) and 0.0 < value < 1.0):
        raise ValueError(f"tol must be in (0, 1) (a relative Frobenius error); got {value}")
    return jnp.asarray(value, rdt)


def check_failure_prob(failure_prob) -> Optional[float]:
    """``failure_prob`` None or a float in (0, 1)."""
    if failure_prob is None:
        return None
    return CE.check_failure_prob(failure_prob)


def _prepare(key, A, tol, block_size, oversample, max_rank, failure_prob, *, adjoint: bool):
    key = V.check_key(key)
    op = as_operator(A)
    m, n = op.shape
    tol = _check_tol(tol, V.real_dtype(op.dtype))
    b = V.check_int("block_size", block_size, low=1)
    p = V.check_int("oversample", oversample, low=0)
    mn = min(m, n)
    if max_rank is None:
        cap = min(mn, DEFAULT_MAX_RANK)
    else:
        cap = V.check_int("max_rank", max_rank, low=1, high=mn, high_desc="min(m, n) of A")
    b = min(b, cap)
    ncols = m if adjoint else n                     # columns of the operator that is sketched
    p = min(p, ncols - b)
    return key, op, tol, _Config(block_size=b, oversample=p, max_rank=cap,
                                 delta=check_failure_prob(failure_prob))


def adaptive_row_skeletons(key, A: Any, tol, *, block_size: int = 16, oversample: int = 8,
                           max_rank: int | None = None,
                           failure_prob: float | None = None) -> AdaptiveRows:
    """Fixed-accuracy row ID ``A ~ W A(rows, :)`` by blocked randomized LUPP.

    See the module docstring for the algorithm (Pearce, Chen, Dong, Martinsson 2023;
    implementation notes, Chapter 2, fixed accuracy). Sketch ``t`` is the Gaussian
    ``N(0, 1/(b + p))`` matrix drawn from ``jax.random.fold_in(key, t)``; stop when the
    unbiased estimate ``||(A - W A(I, :)) Omega'||_F^2`` falls below
    ``tol^2 * mean_t ||A Omega_t||_F^2``.

    Pure and traceable: works eagerly, under ``jax.jit`` (``A``, ``key`` and ``tol`` may be
    traced; changing ``tol`` does not recompile) and under ``jax.vmap`` over keys. When
    ``tol`` is not met by ``max_rank`` the result has ``converged=False`` (no warning can be
    raised inside jit: the caller checks ``converged``).

    Args:
      key: ``jax.random.key``.
      A: m x n matrix or operator (dense, scipy.sparse, BCOO, implicit, factored; anything
        :func:`rdr_jax.operators.as_operator` accepts).
      tol: relative Frobenius tolerance, a float in (0, 1) (Python float or a traced scalar).
      block_size: b, at most b rows are added per step (static; clipped to ``max_rank``).
      oversample: p extra sketch columns per step (static; clipped to ``n - b``; p = 0 is the
        plain blocked LUPP, whose sketch-based coefficients are noticeably worse).
      max_rank: static cap on the rank, ``1 <= max_rank <= min(m, n)``. Default
        ``min(m, n, 1024)`` (:data:`DEFAULT_MAX_RANK`): the outputs and work arrays are
        padded to it (``W`` is m x max_rank), so a larger cap is the caller's choice.
      failure_prob: None (stop on the unbiased estimate: the tolerance is met on average), or
        in (0, 1): stop only when a certified bound is below ``tol``, so
        ``||A - W A(rows, :)||_F <= tol ||A||_F`` holds with probability >= 1 - failure_prob
        when ``converged`` ("Certified stopping" in the module docstring).

    Returns:
      :class:`AdaptiveRows` ``(rows, W, rank, error_estimate, norm_estimate, converged,
      error_bound)``, padded to ``max_rank`` (entries past ``rank`` are zero).

    Raises:
      TypeError / ValueError: bad key, tol (not a float in (0, 1)), block_size < 1,
        oversample < 0, max_rank outside [1, min(m, n)], or a bad ``A``.

    Example:
      >>> res = adaptive_row_skeletons(jax.random.key(0), A, 1e-3)
      >>> k = int(res.rank)
      >>> A_hat = res.W[:, :k] @ A[res.rows[:k]]
      >>> batch = jax.vmap(lambda key: adaptive_row_skeletons(key, A, 1e-3))(
      ...     jax.random.split(jax.random.key(0), 8))
    """
    key, op, tol, cfg = _prepare(key, A, tol, block_size, oversample, max_rank, failure_prob,
                                 adjoint=False)
    return _adaptive_rows(key, op, tol, cfg)


def adaptive_column_skeletons(key, A: Any, tol, *, block_size: int = 16, oversample: int = 8,
                              max_rank: int | None = None,
                              failure_prob: float | None = None) -> AdaptiveColumns:
    """Fixed-accuracy column ID ``A ~ A(:, cols) W``: :func:`adaptive_row_skeletons` on
    ``A^H`` (same key usage), with ``W`` conjugate-transposed back to (max_rank x n).

    Args and behaviour as :func:`adaptive_row_skeletons` (``oversample`` is clipped to
    ``m - b`` here).

    Returns:
      :class:`AdaptiveColumns` ``(cols, W, rank, error_estimate, norm_estimate, converged)``.

    Example:
      >>> res = adaptive_column_skeletons(jax.random.key(0), A, 1e-3)
      >>> k = int(res.rank)
      >>> A_hat = A[:, res.cols[:k]] @ res.W[:k]
    """
    key, op, tol, cfg = _prepare(key, A, tol, block_size, oversample, max_rank, failure_prob,
                                 adjoint=True)
    return _adaptive_cols(key, op, tol, cfg)


# --------------------------------------------------------------------------------------
# the final stage: exact coefficients, the shortest prefix, the error of what is returned
# --------------------------------------------------------------------------------------
#: the final check draws its test vectors from ``fold_in(key, FINAL_STREAM)``: independent of
#: the loop's sketches (``fold_in(key, t)``, small t) and of its certifications
FINAL_STREAM = 0xF17A1
#: test vectors of the final check of a non-dense operator (a chi^2 with >= 24 degrees of
#: freedom: the estimate is within 2x of the truth except with probability < 1e-3)
FINAL_VECTORS = 24


class Prefix(NamedTuple):
    """The result of :func:`exact_prefix`: ``rank`` (int32), ``W`` (max_rank x n, rows past
    ``rank`` zero, ``W[:rank, cols[:rank]] = I``), ``error`` (relative Frobenius error of
    ``C[:, :rank] @ W[:rank]``: exact for dense A, else an unbiased estimate of its square),
    ``bound`` (with ``failure_prob``: ``>= error`` with probability ``>= 1 - failure_prob``;
    exact for dense A; else NaN) and ``met`` (``error``, or ``bound`` when asked, ``<= tol``)."""

    rank: Int[Array, ""]
    W: Inexact[Array, "r n"]
    error: Float[Array, ""]
    bound: Float[Array, ""]
    met: Bool[Array, ""]


def _sq(x, k):
    """``||2^k x||_F^2`` (an exact power-of-two rescaling before squaring)."""
    return jnp.sum(jnp.abs(_fp.ldexp(x, k)) ** 2)


def _prefix_impl(key, op, cols, C, rank, tol, delta, with_factor=False):
    """Shortest prefix ``j <= rank`` of the skeleton ``C`` (m x r) whose least-squares
    coefficients meet ``tol``, and the error of the returned factors.

    With ``C_rank = Q R`` (nested: ``range Q_j = range C_j``) and ``B = Q^H A``,
    ``||A - Q_j B_j||_F^2 = x + sum_{i > j} ||B(i, :)||^2`` with ``x = ||A - Q B||_F^2``:
    the tail sums are exact, ``x`` is exact for dense A and otherwise estimated from
    fresh Gaussian vectors, ``||(A - Q B) Omega||_F^2`` (a chi^2 upper bound with
    ``delta``). ``||A||_F^2`` is exact for dense and sparse A, else ``x + ||B||_F^2``. The
    returned ``W_j = R_j^{-1} B_j`` (a backward-stable triangular solve, never floored) adds
    ``||B_j - R_j W_j||_F^2`` to the error (Pythagoras: ``C_j W_j - Q_j B_j`` lies in
    ``range Q_j``), so the error describes ``C_j W_j`` itself."""
    m, n = op.shape
    r = C.shape[1]
    rdt = V.real_dtype(C.dtype)
    rank = jnp.clip(jnp.asarray(rank, jnp.int32), 0, r)
    tol2 = jnp.square(jnp.asarray(tol, rdt))
    ar = jnp.arange(r)
    valid = ar < rank
    C = jnp.where(valid[None, :], C, 0)
    Q, Rc = jnp.linalg.qr(C, mode="reduced")                                  # m x r, r x r
    Q = jnp.where(valid[None, :], Q, 0)
    B = op.rmatmat(Q.astype(op.dtype)).conj().T.astype(C.dtype)             # Q^H A, r x n
    B = jnp.where(valid[:, None], B, 0)
    # squared norms on 2^k A (exact rescaling): they neither underflow nor overflow
    e = op.max_exponent()
    if e is None:
        e = jnp.maximum(_fp.max_exponent(B), _fp.max_exponent(Rc))
    k = _shift(e, rdt)
    rowsq = jnp.sum(jnp.abs(_fp.ldexp(B, k)) ** 2, axis=1).astype(rdt)
    tail = jnp.concatenate([jnp.cumsum(rowsq[::-1])[::-1], jnp.zeros((1,), rdt)])
    if op.dense:              # x exactly: ||A - Q B||_F (a GEMM), no cancellation
        x = _sq(op.todense() - jnp.matmul(Q, B, precision=HIGHEST), k).astype(rdt)
        xb = x
    else:                     # x from fresh vectors, independent of the skeleton
        s_f = FINAL_VECTORS
        Om = jax.random.normal(jax.random.fold_in(key, FINAL_STREAM), (n, s_f), op.dtype)
        Om = Om / math.sqrt(s_f)
        Z = op.matmat(Om) - jnp.matmul(Q, jnp.matmul(B, Om, precision=HIGHEST),
                                       precision=HIGHEST)
        x = _sq(Z.astype(C.dtype), k).astype(rdt)
        if delta is None:
            xb = jnp.full((), jnp.nan, rdt)
        else:
            cplx = np.dtype(op.dtype).kind == "c"
            xb = (x / CE.fro_factor(s_f, delta, cplx)).astype(rdt)
    a2x = op.ldexp(k).fro_norm_sq() if op.explicit else None
    a2 = (a2x if a2x is not None else x + tail[0]).astype(rdt)
    a2b = (a2x if a2x is not None else xb + tail[0]).astype(rdt)   # (x+t_j)/(x+t_0) grows in x
    if delta is not None:
        crit = (xb + tail) / jnp.where(a2b > 0, a2b, 1)
    else:     # estimated x: choose with 2x it (the estimate itself stays unbiased), so that a
        # low draw of x rarely picks a prefix above tol
        xs = x if op.dense else 2 * x
        a2s = a2 if a2x is not None else xs + tail[0]
        crit = (xs + tail) / jnp.where(a2s > 0, a2s, 1)
    upto = jnp.arange(r + 1) <= rank
    # tol met: the shortest prefix that meets it; else the shortest within 10% of the best
    # (past the floor more columns only add rounding)
    best = jnp.min(jnp.where(upto, crit, jnp.inf))
    ok = upto & (crit <= jnp.where(best <= tol2, tol2, 1.21 * best))
    j = jnp.where(jnp.any(ok), jnp.argmax(ok), rank).astype(jnp.int32)
    keep = ar < j
    # W_j = R_j^{-1} B_j, the padding block the identity; only an exactly zero diagonal
    # entry (a zero column) is replaced, so that no Inf/NaN appears
    diag = jnp.diagonal(Rc)
    tiny = jnp.asarray(jnp.finfo(rdt).tiny, Rc.dtype)
    new_diag = jnp.where(keep, jnp.where(diag == 0, tiny, diag), 1.0).astype(Rc.dtype)
    Rj = jnp.where(keep[:, None] & keep[None, :], Rc, 0)
    Rj = Rj - jnp.diag(jnp.diagonal(Rj)) + jnp.diag(new_diag)
    Bj = jnp.where(keep[:, None], B, 0)
    W = dense.triangular_solve(Rj, Bj, left_side=True, lower=False)
    W = jnp.where(keep[:, None], W, 0)
    rho = _sq(Bj - jnp.matmul(jnp.where(keep[:, None] & keep[None, :], Rc, 0), W,
                              precision=HIGHEST), k).astype(rdt)
    safe = jnp.where(a2 > 0, a2, 1)
    err = jnp.where(a2 > 0, jnp.sqrt(jnp.maximum(x + tail[j] + rho, 0) / safe), 0.0)
    every = j >= n                    # every column a skeleton: W is a permutation, exact
    err = jnp.where(every, 0.0, err)
    if delta is None:
        bound = jnp.full((), jnp.nan, rdt)
        met = jnp.isfinite(err) & (err ** 2 <= tol2)
    else:
        safeb = jnp.where(a2b > 0, a2b, 1)
        bound = jnp.where(a2b > 0, jnp.sqrt(jnp.maximum(xb + tail[j] + rho, 0) / safeb), 0.0)
        bound = jnp.where(every, 0.0, bound)
        met = jnp.isfinite(bound) & (bound ** 2 <= tol2)
    idx = jnp.where(keep, cols, n)                          # out of range: dropped
    eye = jnp.where(keep[:, None] & keep[None, :], jnp.eye(r, dtype=W.dtype), 0)
    W = W.at[:, idx].set(eye, mode="drop")
    W = jnp.where(keep[:, None], W, 0)
    res = Prefix(j, W, err.astype(rdt), bound.astype(rdt), met)
    return (res, Rc) if with_factor else res


def column_skeletons_core(key, op, tol, *, block_size: int, max_rank: int,
                          delta: Optional[float], margin: float = 1.0) -> AdaptiveColumns:
    """:func:`adaptive_column_skeletons` without the boundary checks, for a caller's traced
    program (``block_size <= max_rank``; the loop stops on its estimate at ``margin * tol``
    unless certified)."""
    b = min(block_size, max_rank)
    cfg = _Config(block_size=b, oversample=min(8, op.shape[0] - b), max_rank=max_rank,
                  delta=delta, margin=margin)
    return _adaptive_cols(key, op, tol, cfg)


def shortest_prefix(key, op, cols, C, rank, tol, delta: Optional[float]):
    """:func:`exact_prefix` without the boundary checks, for a caller's traced program:
    ``(Prefix, R)`` with ``R`` the triangular factor of the skeleton ``C``."""
    return _prefix_impl(key, op, cols, C, rank, tol, delta, with_factor=True)


@functools.partial(_jit.jit, static_argnames=("delta",))
def _exact_prefix_jit(key, op, cols, C, rank, tol, delta):
    return _prefix_impl(key, op, cols, C, rank, tol, delta)


def exact_prefix(key, op: Any, cols, C, rank, tol, *,
                 failure_prob: float | None = None) -> Prefix:
    """Shortest prefix of a column skeleton whose least-squares column ID meets ``tol``, and
    the error of the factors it returns (jittable).

    For a padded column skeleton ``C = A(:, cols)`` (m x max_rank, the first ``rank``
    columns valid; e.g. from :func:`adaptive_column_skeletons`) find the smallest
    ``j <= rank`` with ``||A - C_j W_j||_F <= tol ||A||_F``, ``W_j = C_j^+ A``: one QR of C
    and one pass ``B = Q^H A`` give every prefix's error (``docs/id-cur.md``, "Fixed
    accuracy"). Exact for a dense A; otherwise ``||A - Q B||_F`` is estimated from
    ``FINAL_VECTORS`` fresh Gaussian vectors drawn from ``key`` (bounded with
    ``failure_prob``). Why: the loop's sketch-based rank overshoots by up to a block.

    Args:
      key: ``jax.random.key`` (not used for a dense A).
      op: the matrix A (anything :func:`rdr_jax.operators.as_operator` accepts).
      cols: (max_rank,) int skeleton column indices (entries past ``rank`` ignored).
      C: (m, max_rank) ``A(:, cols)`` (columns past ``rank`` ignored).
      rank: int scalar (may be traced), number of valid columns.
      tol: relative Frobenius tolerance in (0, 1) (may be traced).
      failure_prob: None, or in (0, 1): choose the prefix by an upper bound that holds with
        probability ``>= 1 - failure_prob``.

    Returns:
      :class:`Prefix` ``(rank, W, error, bound, met)``; ``A ~ C[:, :rank] @ W[:rank]``.
    """
    key = V.check_key(key)
    op = as_operator(op)
    C = jnp.asarray(C)
    cols = jnp.asarray(cols)
    m, n = op.shape
    if C.ndim != 2 or C.shape[0] != m or not 1 <= C.shape[1] <= min(m, n):
        raise ValueError(f"C must be (m, max_rank) with m = {m} and 1 <= max_rank <= "
                         f"{min(m, n)}; got shape {C.shape}")
    if cols.shape != (C.shape[1],) or not jnp.issubdtype(cols.dtype, jnp.integer):
        raise ValueError(f"cols must be an integer array of shape ({C.shape[1]},); got "
                         f"{cols.dtype} {cols.shape}")
    tol = _check_tol(tol, V.real_dtype(C.dtype))
    if not isinstance(rank, jax.core.Tracer) and not (
            isinstance(rank, (jax.Array, np.ndarray)) and rank.shape == ()
            and jnp.issubdtype(rank.dtype, jnp.integer)):
        V.check_int("rank", rank, low=0, high=C.shape[1], high_desc="max_rank = C.shape[1]")
    return _exact_prefix_jit(key, op, cols, C.astype(op.dtype), rank, tol,
                             check_failure_prob(failure_prob))
