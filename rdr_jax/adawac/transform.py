"""The AdaWAC weight update: entropic mirror ascent on per-sample weights beta (thesis
Ch. 5, Algorithm 6).

:func:`beta_mirror_ascent` is an optax transform with
``optax.apply_updates(beta, updates) == sigmoid(logit(beta) + learning_rate * g)``;
:func:`beta_gradient` builds ``g_i = ce_i - cons_i`` from a batch; :func:`init_beta` is the
``1/2`` start. Why: AdaWAC's beta step then composes with optax (clip, schedules,
``inject_hyperparams``). Derivation and floating-point contract: ``docs/training.md``
("AdaWAC's beta step").
"""

from __future__ import annotations

import numbers
import warnings
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, Int

from rdr_jax._src import validation as V
from rdr_jax._src.jit import jit

__all__ = ["BetaMirrorAscentState", "beta_mirror_ascent", "beta_gradient", "init_beta"]

_BETA_DTYPES = (np.dtype(np.float16), np.dtype(jnp.bfloat16), np.dtype(np.float32),
                np.dtype(np.float64))


class BetaMirrorAscentState(NamedTuple):
    """State of :func:`beta_mirror_ascent` (int32 scalars of fixed shape, so it flows through
    ``lax.cond`` / ``lax.scan``).

    Attributes:
        count: updates applied so far (indexes the learning-rate schedule).
        notfinite_count: entries of ``g`` skipped so far for being NaN or infinite (those
            rows kept their beta), as ``optax.apply_if_finite``'s ``total_notfinite``.
    """

    count: Int[Array, ""]
    notfinite_count: Int[Array, ""]


def _check_beta_dtype(name: str, dtype: Any) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"{name} must have a floating dtype; got {dtype!r}") from e
    if dt not in _BETA_DTYPES:
        raise TypeError(f"{name} must have dtype float16, bfloat16, float32 or float64; got {dt}")
    return dt


def _check_learning_rate(learning_rate: Any, num_steps: Any) -> None:
    """Validate a constant learning rate, or a schedule at step 0 and over ``num_steps``."""
    if callable(learning_rate):
        if num_steps is not None:
            from rdr_jax.training.state import check_schedule
            check_schedule(learning_rate, num_steps)
            return
        try:
            value0 = learning_rate(0)
        except Exception:  # a schedule that cannot be probed outside jit: checked by the user
            return
        _check_learning_rate_value("learning_rate(0)", value0)
        return
    _check_learning_rate_value("learning_rate", learning_rate)


def _check_learning_rate_value(name: str, value: Any) -> None:
    if isinstance(value, bool) or isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a non-negative real number or an optax schedule; "
                        f"got {type(value).__name__} {value!r}")
    if isinstance(value, numbers.Real):
        value = float(value)
    elif hasattr(value, "dtype") and hasattr(value, "shape"):
        if np.shape(value) != ():
            raise ValueError(f"{name} must be a scalar; got shape {np.shape(value)}")
        if not (jnp.issubdtype(value.dtype, jnp.floating)
                or jnp.issubdtype(value.dtype, jnp.integer)):
            raise TypeError(f"{name} must be a real number; got dtype {value.dtype}")
        if not V.is_concrete(value):
            return  # traced (e.g. inside optax.inject_hyperparams under jit): unchecked
        value = float(np.asarray(value, dtype=np.float64))
    else:
        raise TypeError(f"{name} must be a non-negative real number or an optax schedule; "
                        f"got {type(value).__name__}")
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0 (mirror *ascent* step size); "
                         f"got {value}")


def _bounds(dtype: np.dtype) -> tuple[Array, Array]:
    """The interval ``[lo, hi]`` the table stays in: ``hi = 1 - epsneg``,
    ``lo = smallest_normal / eps`` (float16: its smallest normal), so no difference the update
    forms is subnormal.
    """
    fi = jnp.finfo(dtype)
    lo = fi.smallest_normal if np.dtype(dtype) == np.float16 else fi.smallest_normal / fi.eps
    lo = jnp.asarray(lo, dtype)
    hi = jnp.nextafter(jnp.asarray(1, dtype), jnp.asarray(0, dtype))
    return lo, hi


@jit(fast_cpu_compile=False)
def _mirror_step(p: Array, g: Array, lr: Array) -> Array:
    """Update ``u`` (dtype of ``p``) with ``p + u ~= sigmoid(logit(p) + lr g)`` in (0, 1)."""
    dt = p.dtype
    ct = jnp.promote_types(dt, jnp.float32)  # compute in at least float32
    lo, hi = _bounds(dt)
    lr = jnp.asarray(lr).astype(ct)
    # skipped: g == 0, a non-finite g (NaN never reaches beta), lr == 0, or a bad lr
    frozen = (g == 0) | ~jnp.isfinite(g) | ~(lr > 0)
    s = jnp.where(frozen, jnp.zeros((), ct), lr * g.astype(ct))
    pp = p.astype(ct)
    x = jnp.clip(p, lo, hi).astype(ct)
    xc = 1 - x  # exact for x >= 1/2 (Sterbenz), relative error <= eps below
    # delta = sigmoid(logit(x) + s) - x without cancellation or overflow, with q = e^{-|s|}:
    #   s >= 0: x (1-x) (1 - q) / (x + (1-x) q);   s < 0: -x (1-x) (1 - q) / ((1-x) + x q)
    # (divide b_1 e^{eta ce} / (b_1 e^{eta ce} + b_2 e^{eta cons}) - b_1 by the larger exponential)
    a = jnp.abs(s)
    one_minus_q = -jnp.expm1(-a)
    q = jnp.exp(-a)
    neg = s < 0
    den = jnp.where(neg, xc + x * q, x + xc * q)  # >= min(x, 1 - x) > 0
    delta = jnp.where(neg, -1, 1).astype(ct) * (x * xc * one_minus_q / den)
    u = (x - pp) + delta  # x - pp == 0 for tables inside [lo, hi]
    # saturate the target at [lo, hi] (sigmoid of a huge step would round to 0 or 1)
    tgt = pp + u
    u = jnp.where(tgt > hi, hi.astype(ct) - pp, jnp.where(tgt < lo, lo.astype(ct) - pp, u))
    u = u.astype(dt)
    # apply_updates computes fl(p + u) in p's dtype, and u was rounded too, so the sum can land
    # outside [lo, hi], even on 0 or 1 (p = 0.5, target lo: fl(lo - 0.5) = -0.5). Move u by one
    # ulp at a time towards the interior; the rounding errors are below one ulp of p, so one or
    # two moves suffice; the third is a margin.
    for _ in range(3):
        r = p + u
        u = jnp.where(r > hi, jnp.nextafter(u, jnp.asarray(-jnp.inf, dt)), u)
        u = jnp.where(r < lo, jnp.nextafter(u, jnp.asarray(jnp.inf, dt)), u)
    r = p + u
    outside = ~((r > 0) & (r < 1)) & ~jnp.isnan(r)  # last resort: keep p (never 0 or 1)
    against = (u > 0) & neg | (u < 0) & ~neg  # never move against the gradient (p < lo, rounding)
    keep = frozen | outside | against  # rows with g == 0: bitwise unchanged
    return jnp.where(keep, jnp.zeros((), dt), u)


def beta_mirror_ascent(learning_rate: optax.ScalarOrSchedule, *,
                       num_steps: Optional[int] = None) -> optax.GradientTransformation:
    """Entropic mirror ascent on per-sample weights ``beta in (0, 1)^n``
    (Algorithm 6): ``beta' = sigmoid(logit(beta) + eta_t g)``, computed without cancellation,
    never reaching 0 or 1, and bitwise unchanged where ``g_i == 0``.

    It *ascends* ``g`` (pass the gradient of the WAC objective in beta, not its negative) and
    should be the last transform on the table. A NaN or infinite ``g_i`` skips row ``i`` (it
    keeps its beta), counted in ``state.notfinite_count`` and warned about when called eagerly:
    like ``optax.apply_if_finite``, but per row, since one bad sample should not freeze the others.

    Args:
      learning_rate: ``eta_beta >= 0``: a float, a scalar array or an optax schedule (thesis:
        2.0 TransUNet, 8.0 UNet); works under ``optax.inject_hyperparams``.
      num_steps: with a schedule, check it is finite and ``>= 0`` over these steps now. A
        negative scheduled value raises when met eagerly; under jit that step is skipped.

    Returns:
      An ``optax.GradientTransformation`` (state :class:`BetaMirrorAscentState`;
      ``update(g, state, params=beta)``).

    Raises:
      ValueError / TypeError: a negative, non-finite or non-scalar learning rate; at ``init``,
      a table outside (0, 1) or not floating; at ``update``, no ``params`` or a shape mismatch.
    """
    _check_learning_rate(learning_rate, num_steps)

    def init_fn(params):
        def check(path, p):
            name = "beta" + jax.tree_util.keystr(path)
            if not hasattr(p, "dtype"):
                raise TypeError(f"{name} must be an array; got {type(p).__name__}")
            _check_beta_dtype(name, p.dtype)
            if V.is_concrete(p):
                a = np.asarray(p, dtype=np.float64)
                bad = ~((a > 0) & (a < 1))  # also catches NaN
                if np.any(bad):
                    first = a[bad].ravel()[0]
                    raise ValueError(
                        f"{name} must lie strictly inside (0, 1) (a weight on the simplex "
                        f"[beta, 1 - beta] with a finite logit); {int(bad.sum())} entries do "
                        f"not, e.g. {first!r} (in {np.dtype(p.dtype)}, values within half an "
                        f"ulp of 1 round to 1)")

        jax.tree_util.tree_map_with_path(check, params)
        return BetaMirrorAscentState(count=jnp.zeros([], jnp.int32),
                                     notfinite_count=jnp.zeros([], jnp.int32))

    def update_fn(updates, state, params=None):
        if params is None:
            raise ValueError("beta_mirror_ascent needs the current table: call "
                             "update(g, state, params=beta)")
        g_leaves, g_def = jax.tree_util.tree_flatten(updates)
        p_leaves, p_def = jax.tree_util.tree_flatten(params)
        if g_def != p_def:
            raise ValueError(f"g and beta must have the same tree structure; got {g_def} and "
                             f"{p_def}")
        for i, (g, p) in enumerate(zip(g_leaves, p_leaves)):
            if np.shape(g) != np.shape(p):
                raise ValueError(f"g must have the shape of beta (leaf {i}): got "
                                 f"{np.shape(g)} for beta of shape {np.shape(p)}")
        lr = learning_rate(state.count) if callable(learning_rate) else learning_rate
        # eager: a bad scheduled step size raises (under jit, _mirror_step skips the step)
        if callable(learning_rate) and V.is_concrete(lr) and V.is_concrete(state.count):
            _check_learning_rate_value(f"learning_rate({int(state.count)})", lr)
        bad = [jnp.sum(~jnp.isfinite(jnp.asarray(g))) for g in g_leaves]
        _warn_nonfinite(bad)
        new = [_mirror_step(jnp.asarray(p), jnp.asarray(g), lr)
               for g, p in zip(g_leaves, p_leaves)]
        count = optax.safe_int32_increment(state.count)
        skipped = state.notfinite_count + sum(bad, jnp.zeros([], jnp.int32)).astype(jnp.int32)
        return (jax.tree_util.tree_unflatten(p_def, new),
                BetaMirrorAscentState(count=count, notfinite_count=skipped))

    return optax.GradientTransformation(init_fn, update_fn)


def _warn_nonfinite(bad: list) -> None:
    """Eager updates warn about skipped non-finite entries (under jit they are only counted)."""
    if bad and all(V.is_concrete(b) for b in bad):
        n = int(sum(int(b) for b in bad))
        if n:
            warnings.warn(f"beta_mirror_ascent skipped {n} non-finite (NaN/inf) entries of g: "
                          "those rows keep their beta", RuntimeWarning, stacklevel=4)


def beta_gradient(ce: Float[Array, " B"], cons: Float[Array, " B"], idx: Int[Array, " B"],
                  n: int) -> Float[Array, " n"]:
    """The ascent direction ``g = sum_b (ce_b - cons_b) e_{idx_b}`` of one batch
    (0 on the other rows; losses taken with ``stop_gradient``; repeated rows add up).

    Args:
      ce, cons: per-sample cross-entropies and consistency terms (lambda included), ``(B,)``.
      idx: rows of the batch in the table, in ``[0, n)`` (checked when concrete; under jit,
        out-of-range rows are dropped).
      n: table size (static).

    Returns:
      ``g``, ``(n,)``.
    """
    n = V.check_int("n", n, low=1)
    for name, a in (("ce", ce), ("cons", cons), ("idx", idx)):
        if not hasattr(a, "shape"):
            raise TypeError(f"{name} must be an array; got {type(a).__name__}")
        if np.ndim(a) != 1:
            raise ValueError(f"{name} must have shape (B,); got shape {np.shape(a)}")
    if not (np.shape(ce) == np.shape(cons) == np.shape(idx)):
        raise ValueError(f"ce, cons and idx must have the same shape (B,); got {np.shape(ce)}, "
                         f"{np.shape(cons)} and {np.shape(idx)}")
    if not jnp.issubdtype(jnp.asarray(idx).dtype, jnp.integer):
        raise TypeError(f"idx must be an integer array; got dtype {jnp.asarray(idx).dtype}")
    for name, a in (("ce", ce), ("cons", cons)):
        if not jnp.issubdtype(jnp.asarray(a).dtype, jnp.floating):
            raise TypeError(f"{name} must be a floating array; got dtype {jnp.asarray(a).dtype}")
    if V.is_concrete(idx):
        ia = np.asarray(idx)
        if ia.size and (ia.min() < 0 or ia.max() >= n):
            raise ValueError(f"idx values must lie in [0, n) = [0, {n}); got range "
                             f"[{ia.min()}, {ia.max()}]")
    diff = jax.lax.stop_gradient(jnp.asarray(ce) - jnp.asarray(cons))
    return jnp.zeros((n,), diff.dtype).at[jnp.asarray(idx)].add(
        diff, mode="drop", wrap_negative_indices=False)


def init_beta(n: int, dtype: Any = None) -> Float[Array, " n"]:
    """The initial table ``beta_0 = 1/2`` (Algorithm 6), shape ``(n,)``; ``dtype``
    float16/bfloat16/float32/float64 (default: float64 under x64, else float32).
    """
    n = V.check_int("n", n, low=1)
    dt = V.default_float() if dtype is None else _check_beta_dtype("dtype", dtype)
    dt = np.dtype(jax.dtypes.canonicalize_dtype(dt))
    return jnp.full((n,), 0.5, dt)
