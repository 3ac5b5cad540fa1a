"""Segmentation losses of AdaWAC: cross-entropy, dice, encoder consistency and the WAC
objective with dice (thesis Ch. 5, Eq. (C.9)).

Logits are ``(B, *spatial, C)`` (channels last), labels ``(B, *spatial)`` integers; everything
is computed in at least float32 and is jit/vmap/grad friendly (a traced label outside
``[0, C)`` gives NaN). Why: per-sample terms, so the beta table can weigh them. Formulas and
the reference weights 0.5/0.5: ``docs/training.md`` ("AdaWAC losses").
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from rdr_jax._src import validation as V
from rdr_jax._src.jit import jit

__all__ = ["WACAux", "cross_entropy", "dice_loss", "consistency", "wac_objective",
           "wac_dice_loss", "WACLossOptions"]


class WACAux(NamedTuple):
    """Auxiliary outputs of :func:`wac_dice_loss`: per-sample ``ce`` and ``cons``
    (lambda included), ``(B,)``, and the batch ``dice``.
    """

    ce: Float[Array, " B"]
    cons: Float[Array, " B"]
    dice: Float[Array, ""]


# ---------------------------------------------------------------------------- validation


def _check_float_array(name: str, a: Any, *, min_ndim: int) -> None:
    if not hasattr(a, "shape") or not hasattr(a, "dtype"):
        raise TypeError(f"{name} must be an array; got {type(a).__name__}")
    if not jnp.issubdtype(a.dtype, jnp.floating):
        raise TypeError(f"{name} must have a floating dtype; got {a.dtype}")
    if a.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimensions; got shape {a.shape}")


def _check_logits_labels(logits: Any, labels: Any) -> None:
    _check_float_array("logits", logits, min_ndim=2)
    if not hasattr(labels, "shape") or not hasattr(labels, "dtype"):
        raise TypeError(f"labels must be an integer array; got {type(labels).__name__}")
    if not jnp.issubdtype(labels.dtype, jnp.integer):
        raise TypeError(f"labels must have an integer dtype (class ids); got {labels.dtype}")
    if tuple(labels.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"labels must have shape logits.shape[:-1] = {tuple(logits.shape[:-1])} "
                         f"(logits are (B, *spatial, C), channels last); got {tuple(labels.shape)}")
    if logits.shape[0] == 0 or 0 in logits.shape[1:-1]:
        raise ValueError(f"logits must hold at least one sample with at least one pixel (an empty "
                         f"batch has no mean loss); got shape {tuple(logits.shape)}")
    num_classes = logits.shape[-1]
    if num_classes < 2:
        raise ValueError(f"logits must have at least 2 classes on the last axis; got "
                         f"{num_classes}")
    if V.is_concrete(labels):
        lab = np.asarray(labels)
        if lab.size and (lab.min() < 0 or lab.max() >= num_classes):
            raise ValueError(f"labels must lie in [0, C) = [0, {num_classes}); got range "
                             f"[{lab.min()}, {lab.max()}]")
    V.check_array_values("logits", logits)


def _check_nonneg(name: str, value: Any) -> None:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a real number; got bool")
    if isinstance(value, numbers.Real):
        value = float(value)
    elif hasattr(value, "shape") and np.shape(value) == () and V.is_concrete(value):
        value = float(np.asarray(value))
    elif hasattr(value, "shape") and np.shape(value) == ():
        return  # traced scalar: the caller's responsibility
    else:
        raise TypeError(f"{name} must be a real scalar; got {type(value).__name__}")
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0; got {value}")


def _compute_dtype(dtype) -> np.dtype:
    return np.dtype(jnp.promote_types(dtype, jnp.float32))


# ---------------------------------------------------------------------------- losses


@jit(fast_cpu_compile=False)
def _cross_entropy(logits, labels):
    ct = _compute_dtype(logits.dtype)
    logp = jax.nn.log_softmax(logits.astype(ct), axis=-1)
    num_classes = logits.shape[-1]
    valid = (labels >= 0) & (labels < num_classes)
    safe = jnp.where(valid, labels, 0)
    nll = -jnp.take_along_axis(logp, safe[..., None], axis=-1)[..., 0]
    nll = jnp.where(valid, nll, jnp.nan)
    return jnp.mean(nll.reshape(nll.shape[0], -1), axis=1)


def cross_entropy(logits: Float[Array, "B *S C"], labels: Int[Array, "B *S"]) -> Float[Array, " B"]:
    """Per-sample pixel-averaged cross-entropy (Eq. (5.2)).

    Args:
      logits: ``(B, *spatial, C)``. labels: ``(B, *spatial)`` in ``[0, C)``.

    Returns:
      ``(B,)`` losses.

    Raises:
      ValueError: an empty batch, labels out of range or non-finite logits.
    """
    _check_logits_labels(logits, labels)
    return _cross_entropy(jnp.asarray(logits), jnp.asarray(labels))


@jit(fast_cpu_compile=False)
def _dice(logits, labels, smooth):
    ct = _compute_dtype(logits.dtype)
    num_classes = logits.shape[-1]
    p = jax.nn.softmax(logits.astype(ct), axis=-1).reshape(-1, num_classes)
    lab = labels.reshape(-1)
    g = jax.nn.one_hot(lab, num_classes, dtype=ct)
    intersect = jnp.sum(p * g, axis=0)
    z_sum = jnp.sum(p * p, axis=0)
    y_sum = jnp.sum(g * g, axis=0)
    smooth = jnp.asarray(smooth, ct)
    loss = jnp.mean(1.0 - (2.0 * intersect + smooth) / (z_sum + y_sum + smooth))
    valid = jnp.all((lab >= 0) & (lab < num_classes))
    return jnp.where(valid, loss, jnp.nan)


def dice_loss(logits: Float[Array, "B *S C"], labels: Int[Array, "B *S"], *,
              smooth: float = 1e-5) -> Float[Array, ""]:
    """Soft dice loss over the batch, averaged over all classes, background
    included (Eq. (C.8) as TransUNet implements it: squared denominators).

    Args:
      logits: ``(B, *spatial, C)``. labels: ``(B, *spatial)``. smooth: ``>= 0``.

    Returns:
      Scalar in ``[0, 1]``.
    """
    _check_logits_labels(logits, labels)
    _check_nonneg("smooth", smooth)
    return _dice(jnp.asarray(logits), jnp.asarray(labels), smooth)


@jit(fast_cpu_compile=False)
def _consistency(z1, z2, lam):
    ct = _compute_dtype(jnp.promote_types(z1.dtype, z2.dtype))
    d = (z1.astype(ct) - z2.astype(ct)).reshape(z1.shape[0], -1)
    return jnp.asarray(lam, ct) * jnp.mean(d * d, axis=1)


def consistency(z1: Float[Array, "B *F"], z2: Float[Array, "B *F"], *,
                lam: float = 1.0) -> Float[Array, " B"]:
    """Per-sample encoder consistency ``lam * mean((z1_b - z2_b)^2)`` (Eq. (5.3))
    between the encoder outputs of two augmented views.

    Returns:
      ``(B,)`` terms, lambda included.
    """
    _check_float_array("z1", z1, min_ndim=1)
    _check_float_array("z2", z2, min_ndim=1)
    if tuple(z1.shape) != tuple(z2.shape):
        raise ValueError(f"z1 and z2 must have the same shape (encoder outputs of two views); "
                         f"got {tuple(z1.shape)} and {tuple(z2.shape)}")
    _check_nonneg("lam", lam)
    return _consistency(jnp.asarray(z1), jnp.asarray(z2), lam)


def _check_beta_batch(beta: Any, batch: int) -> None:
    _check_float_array("beta", beta, min_ndim=1)
    if tuple(beta.shape) != (batch,):
        raise ValueError(f"beta must hold the weights of the batch rows, shape ({batch},); got "
                         f"{tuple(beta.shape)}")
    if V.is_concrete(beta):
        b = np.asarray(beta, dtype=np.float64)
        if np.any(~((b >= 0) & (b <= 1))):
            raise ValueError(f"beta must lie in [0, 1]; got range [{np.nanmin(b)}, "
                             f"{np.nanmax(b)}] (or NaN)")


def wac_objective(dice: Float[Array, ""], ce: Float[Array, " B"], cons: Float[Array, " B"],
                  beta: Float[Array, " B"], *, dice_weight: float = 0.5,
                  wac_weight: float = 0.5) -> Float[Array, ""]:
    """``dice_weight * dice + wac_weight * 1/B sum_i [beta_i ce_i + (1 - beta_i)
    cons_i]`` from precomputed terms (Eq. (C.9)), for a step that updates beta
    between the forward pass and the parameter gradient.

    Args:
      dice: scalar. ce, cons: ``(B,)``. beta: ``(B,)`` in ``[0, 1]``.
      dice_weight, wac_weight: ``>= 0`` (0.5 and 0.5 as the reference).

    Returns:
      The scalar objective.
    """
    for name, a in (("ce", ce), ("cons", cons)):
        _check_float_array(name, a, min_ndim=1)
        if a.ndim != 1:
            raise ValueError(f"{name} must have shape (B,); got {tuple(a.shape)}")
    if tuple(ce.shape) != tuple(cons.shape):
        raise ValueError(f"ce and cons must have the same shape (B,); got {tuple(ce.shape)} "
                         f"and {tuple(cons.shape)}")
    if np.shape(dice) != ():
        raise ValueError(f"dice must be a scalar; got shape {np.shape(dice)}")
    _check_beta_batch(beta, ce.shape[0])
    _check_nonneg("dice_weight", dice_weight)
    _check_nonneg("wac_weight", wac_weight)
    return _wac(dice, ce, cons, beta, dice_weight, wac_weight)


@jit(fast_cpu_compile=False)
def _wac(dice, ce, cons, beta, dice_weight, wac_weight):
    ct = jnp.result_type(dice, ce, cons, jnp.float32)
    beta = jnp.asarray(beta).astype(ct)
    weighted = beta * ce.astype(ct) + (1 - beta) * cons.astype(ct)
    return (jnp.asarray(dice_weight, ct) * jnp.asarray(dice, ct)
            + jnp.asarray(wac_weight, ct) * jnp.mean(weighted))


@dataclasses.dataclass(frozen=True)
class WACLossOptions:
    """The weights of :func:`wac_dice_loss` (Eq. (C.9)): consistency scale ``lam`` (2.0 in
    the thesis; default 1.0), ``dice_weight`` and ``wac_weight`` (0.5 and 0.5) and the dice
    ``smooth``ing; each a finite number >= 0 (a traced scalar is left to the caller, so the
    weights may vary under ``jit``)."""

    lam: Any = 1.0
    dice_weight: Any = 0.5
    wac_weight: Any = 0.5
    smooth: Any = 1e-5

    def __post_init__(self):
        for name in ("lam", "dice_weight", "wac_weight", "smooth"):
            _check_nonneg(name, getattr(self, name))


def wac_dice_loss(logits: Float[Array, "B *S C"], labels: Int[Array, "B *S"],
                  z1: Float[Array, "B *F"], z2: Float[Array, "B *F"], beta: Float[Array, " B"],
                  *, options: WACLossOptions = WACLossOptions()
                  ) -> tuple[Float[Array, ""], WACAux]:
    """The AdaWAC training objective with dice (Eq. (C.9)):
    :func:`wac_objective` of :func:`dice_loss`, :func:`cross_entropy` and :func:`consistency`.

    Args:
      logits: ``(B, *spatial, C)`` on the supervised view. labels: ``(B, *spatial)``.
      z1, z2: encoder outputs ``(B, ...)`` of the two views. beta: ``(B,)`` in ``[0, 1]``.
      options: :class:`WACLossOptions` (``lam``, ``dice_weight``, ``wac_weight``,
        ``smooth``).

    Returns:
      ``(loss, WACAux(ce, cons, dice))``.

    Raises:
      ValueError: an empty batch, mismatched shapes, beta outside [0, 1], negative weights.
    """
    _check_logits_labels(logits, labels)
    batch = logits.shape[0]
    _check_float_array("z1", z1, min_ndim=1)
    _check_float_array("z2", z2, min_ndim=1)
    if tuple(z1.shape) != tuple(z2.shape):
        raise ValueError(f"z1 and z2 must have the same shape (encoder outputs of two views); "
                         f"got {tuple(z1.shape)} and {tuple(z2.shape)}")
    if z1.shape[0] != batch:
        raise ValueError(f"z1/z2 must have the batch size of logits ({batch}) on axis 0; got "
                         f"{tuple(z1.shape)}")
    _check_beta_batch(beta, batch)
    if not isinstance(options, WACLossOptions):
        raise TypeError(f"options must be a WACLossOptions; got {type(options).__name__}")
    lam, dice_weight, wac_weight = options.lam, options.dice_weight, options.wac_weight
    smooth = options.smooth
    logits, labels = jnp.asarray(logits), jnp.asarray(labels)
    ce = _cross_entropy(logits, labels)
    cons = _consistency(jnp.asarray(z1), jnp.asarray(z2), lam)
    dice = _dice(logits, labels, smooth)
    loss = _wac(dice, ce, cons, beta, dice_weight, wac_weight)
    return loss, WACAux(ce=ce, cons=cons, dice=dice)
