"""The AdaWAC weight update: entropic mirror ascent on per-sample weights beta (``alg:srw_dac``).

AdaWAC (thesis Ch. ``ch:adawac``, Sec. ``sec:ada_wac``) solves the min-max problem
``eq:objective_dac_encoder_weighted_adawac`` (with the dice term of ``eq:objective_wac_dice``)

    min_theta max_{beta in [0,1]^n} 1/n sum_i beta_i ce_i(theta) + (1 - beta_i) cons_i(theta)

where ``ce_i`` is the pixel-averaged cross-entropy of training sample ``i`` and ``cons_i`` its
(lambda-scaled) encoder consistency. The weights ``beta`` form a table with one entry per
training sample, initialised at ``1/2``. Algorithm ``alg:srw_dac`` updates the row ``i`` of a
sampled index by *multiplicative weights on the 2-simplex* ``b = [beta_i, 1 - beta_i]``::

    b_1 <- b_1 exp(eta ce_i),   b_2 <- b_2 exp(eta cons_i),   beta_i <- b_1 / (b_1 + b_2).

Dividing numerator and denominator by ``b_2`` shows this is an additive step in logit space::

    beta_i' = beta_i e^{eta ce_i} / (beta_i e^{eta ce_i} + (1 - beta_i) e^{eta cons_i})
            = sigmoid(logit(beta_i) + eta (ce_i - cons_i)),

i.e. entropic mirror *ascent* (the mirror map of the negative entropy on the simplex is the
logit) along ``g_i = ce_i - cons_i = d/d beta_i [beta_i ce_i + (1 - beta_i) cons_i]``. Rows not
in the mini-batch have ``g_i = 0`` and are left unchanged. The losses are evaluated at the
current parameters with no gradient through them, and the table is updated *before* the
parameter step, which then uses the new weights (``alg:srw_dac`` line 9); ``cons_i`` already
includes lambda (implementation notes, Chapter 5). The step size is ``eta_beta`` of
``prop:convergence_srw_dac``: for convex losses, ``eta_theta = eta_beta = 2 / sqrt(5 T
(gamma^2 C_theta^2 + 2 n C_beta^2))`` gives an ``O(1/sqrt(T))`` duality gap of the averaged
iterates; the experiments use a constant ``eta_beta`` (2.0 TransUNet, 8.0 UNet), and any optax
schedule can be passed.

:func:`beta_mirror_ascent` packages this as an :class:`optax.GradientTransformation` acting on
the table ``beta`` (any pytree of tables), so that

    optax.apply_updates(beta, updates) == sigmoid(logit(beta) + learning_rate * g)

(see :func:`beta_mirror_ascent` for the floating-point contract). :func:`beta_gradient`
builds ``g`` from the per-sample losses of a batch and its row indices; :func:`init_beta` is
the ``1/2`` initialisation.
"""

from __future__ import annotations

import numbers
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, Int

from rdr_jax._src import validation as V

__all__ = ["BetaMirrorAscentState", "beta_mirror_ascent", "beta_gradient", "init_beta"]

_BETA_DTYPES = (np.dtype(np.float16), np.dtype(jnp.bfloat16), np.dtype(np.float32),
                np.dtype(np.float64))


class BetaMirrorAscentState(NamedTuple):
    """State of :func:`beta_mirror_ascent`: the number of updates applied so far.

    ``count`` is an int32 scalar (it indexes the learning-rate schedule, if any). Its shape and
    dtype never change, so the state can flow through ``lax.cond`` / ``lax.scan``.
    """

    count: Int[Array, ""]


def _check_beta_dtype(name: str, dtype: Any) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"{name} must have a floating dtype; got {dtype!r}") from e
    if dt not in _BETA_DTYPES:
        raise TypeError(f"{name} must have dtype float16, bfloat16, float32 or float64; got {dt}")
    return dt


def _check_learning_rate(learning_rate: Any) -> None:
    """Validate a constant learning rate or a schedule wherever the value is concrete."""
    if callable(learning_rate):
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
    """The interval ``[lo, hi]`` the update keeps the table in (see :func:`beta_mirror_ascent`).

    ``hi = 1 - epsneg`` is the largest value below 1. ``lo = smallest_normal / eps`` (float32:
    ``2^-103 ~ 9.9e-32``; bfloat16: ``2^-119``; float64: ``2^-970``): two distinct values
    ``>= lo`` differ by at least ``smallest_normal``, so no difference or sum the update forms
    is subnormal and none is lost to flush-to-zero (XLA flushes float32/float64 subnormals on
    CPU and GPU). float16 (computed through float32, where its subnormals are normal) uses its
    smallest normal, ``2^-14``.
    """
    fi = jnp.finfo(dtype)
    lo = fi.smallest_normal if np.dtype(dtype) == np.float16 else fi.smallest_normal / fi.eps
    lo = jnp.asarray(lo, dtype)
    hi = jnp.nextafter(jnp.asarray(1, dtype), jnp.asarray(0, dtype))
    return lo, hi


@jax.jit
def _mirror_step(p: Array, g: Array, lr: Array) -> Array:
    """Update ``u`` (dtype of ``p``) with ``p + u ~= sigmoid(logit(p) + lr g)`` in (0, 1)."""
    dt = p.dtype
    ct = jnp.promote_types(dt, jnp.float32)  # compute in at least float32
    lo, hi = _bounds(dt)
    lr = jnp.asarray(lr).astype(ct)
    frozen = (g == 0) | (lr == 0)
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


def beta_mirror_ascent(learning_rate: optax.ScalarOrSchedule) -> optax.GradientTransformation:
    """Entropic mirror ascent on per-sample weights ``beta in (0,1)^n`` (thesis ``alg:srw_dac``).

    Each entry ``beta_i`` is the first coordinate of a point ``[beta_i, 1 - beta_i]`` on the
    2-simplex. The update maps the incoming "gradient" ``g`` (the gradient of the objective
    with respect to beta, ``g_i = ce_i - cons_i`` for the rows of the mini-batch and 0 elsewhere;
    see :func:`beta_gradient`) to ``updates`` such that::

        optax.apply_updates(beta, updates) = sigmoid(logit(beta) + eta_t * g),

    ``eta_t = learning_rate`` (or ``learning_rate(count)`` for a schedule). This is one step
    of the multiplicative-weights update of ``alg:srw_dac`` followed by normalisation::

        beta' = beta e^{eta ce} / (beta e^{eta ce} + (1 - beta) e^{eta cons}).

    Note the direction: this transform *ascends* ``g`` (beta maximises the WAC objective), so
    pass the gradient itself, not its negative, and do not chain a sign flip after it. It
    should be the last transform acting on the table (e.g. ``optax.chain(optax.clip(c), tx)``
    clips ``g`` first; ``optax.multi_transform`` can give the table its own transform next to
    the model's optimizer). ``jax.grad`` of the batch-mean objective gives ``g / B`` (times
    the WAC weight), i.e. a rescaled learning rate; :func:`beta_gradient` gives the reference
    ``g`` (``logit(beta_i) += eta (ce_i - cons_i)``).

    Floating-point contract (float16, bfloat16, float32, float64 tables):

    * rows with ``g_i == 0`` (and every row when ``eta_t == 0``) get an update of exactly 0,
      so ``apply_updates`` leaves them bitwise unchanged;
    * the increment is computed directly, in at least float32, without cancellation or
      overflow: with ``s = eta g`` and ``q = exp(-|s|)``,
      ``beta' - beta = +-beta (1 - beta) (1 - q) / den`` (``-expm1(-|s|)`` for ``1 - q``;
      ``den = beta + (1 - beta) q`` for ``s >= 0``, ``(1 - beta) + beta q`` for ``s < 0``),
      which is the closed form divided by its larger exponential. So a small step is not lost
      in a ``logit``/``sigmoid`` round trip, and the update never moves a row against the sign
      of ``g``;
    * the new value saturates in ``[lo, hi]``: ``hi = 1 - epsneg`` (the largest value below 1)
      and ``lo = smallest_normal / eps`` (float32 ``~9.9e-32``, bfloat16 ``~1.5e-36``, float64
      ``~1e-292``; float16 ``2^-14``), below which differences would be subnormal and lost to
      flush-to-zero. A huge step lands next to 0 or 1, never on it. (An entry already below
      ``lo`` may only move up.)
    * ``apply_updates`` adds in the table's dtype, and ``fl(beta + u)`` is not always the
      target (from ``beta = 0.5`` the smallest float32 value one addition can reach is
      ``2^-25``, not ``1e-30``). The update is corrected ulp by ulp so that the sum stays in
      the interval; hence ``beta`` never becomes 0 or 1 (its logit stays finite and it can
      always move back), for any finite ``g`` (e.g. losses of +-1e4) in every supported dtype.
      Relative to the exact closed form (saturated at ``[lo, hi]``) the result is off by at
      most about two ulps of ``max(beta, beta')``;
    * a NaN in ``g`` gives a NaN entry (it is not hidden); the table's own values are checked
      (finite, in (0, 1)) by ``init`` when concrete.

    Args:
      learning_rate: ``eta_beta >= 0``: a float, a scalar array, or an optax schedule
        ``count -> eta`` (the count lives in the state). The thesis/reference use 2.0
        (TransUNet) and 8.0 (UNet). Compatible with ``optax.inject_hyperparams`` (the value in
        ``state.hyperparams['learning_rate']`` is used; note that inject_hyperparams casts it
        to the table's dtype unless ``hyperparam_dtype=jnp.float32`` is given).

    Returns:
      An ``optax.GradientTransformation``; ``init(beta)`` returns
      :class:`BetaMirrorAscentState` and ``update(g, state, beta)`` requires ``params=beta``.

    Raises:
      ValueError / TypeError: a negative, non-finite or non-scalar learning rate (or a schedule
      whose value at 0 is such); at ``init``: a table with entries outside (0, 1) or a
      non-floating dtype; at ``update``: no ``params`` or ``g`` of a different shape.

    Example:
      >>> import jax.numpy as jnp, optax
      >>> from rdr_jax.adawac.transform import beta_mirror_ascent, beta_gradient, init_beta
      >>> beta = init_beta(4)
      >>> tx = beta_mirror_ascent(2.0)
      >>> state = tx.init(beta)
      >>> g = beta_gradient(jnp.array([0.3, 0.1]), jnp.array([0.1, 0.3]), jnp.array([0, 2]), 4)
      >>> updates, state = tx.update(g, state, beta)
      >>> beta = optax.apply_updates(beta, updates)   # sigmoid(+-0.4) on rows 0, 2
    """
    _check_learning_rate(learning_rate)

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
        return BetaMirrorAscentState(count=jnp.zeros([], jnp.int32))

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
        new = [_mirror_step(jnp.asarray(p), jnp.asarray(g), lr)
               for g, p in zip(g_leaves, p_leaves)]
        count = optax.safe_int32_increment(state.count)
        return jax.tree_util.tree_unflatten(p_def, new), BetaMirrorAscentState(count=count)

    return optax.GradientTransformation(init_fn, update_fn)


def beta_gradient(ce: Float[Array, " B"], cons: Float[Array, " B"], idx: Int[Array, " B"],
                  n: int) -> Float[Array, " n"]:
    """The ascent direction ``g in R^n`` for :func:`beta_mirror_ascent` from one mini-batch.

    ``g = sum_b (ce_b - cons_b) e_{idx_b}``: the partial derivative of
    ``beta_i ce_i + (1 - beta_i) cons_i`` in ``beta_i`` for the rows ``i = idx_b`` of the batch,
    0 for the other rows (``alg:srw_dac``; the reference update
    ``logit(beta_i) += eta (ce_i - cons_i)``). The losses are taken with
    ``lax.stop_gradient``. A row that appears twice in ``idx`` receives the sum of its terms,
    which equals two consecutive multiplicative-weights steps with losses at the same
    parameters.

    Args:
      ce: per-sample cross-entropies of the batch, shape ``(B,)``.
      cons: per-sample consistency terms (lambda included), shape ``(B,)``.
      idx: integer row indices of the batch in the table, shape ``(B,)``, values in
        ``[0, n)`` (checked when concrete; inside jit out-of-range rows are dropped).
      n: size of the table (static Python int).

    Returns:
      ``g`` of shape ``(n,)`` in the promoted dtype of ``ce`` and ``cons``.

    Example:
      >>> g = beta_gradient(jnp.array([2.0]), jnp.array([0.5]), jnp.array([3]), 5)
      >>> # g == [0, 0, 0, 1.5, 0]
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
    """The initial weight table ``beta_0 = 1/2`` (``alg:srw_dac``, input line 2).

    Args:
      n: number of training samples (static Python int >= 1).
      dtype: float16, bfloat16, float32 or float64; default float64 when ``jax_enable_x64``
        is on, else float32.

    Returns:
      ``jnp.full((n,), 0.5, dtype)``.

    Example:
      >>> init_beta(3)          # Array([0.5, 0.5, 0.5], dtype=float32)
    """
    n = V.check_int("n", n, low=1)
    dt = V.default_float() if dtype is None else _check_beta_dtype("dtype", dtype)
    dt = np.dtype(jax.dtypes.canonicalize_dtype(dt))
    return jnp.full((n,), 0.5, dt)
