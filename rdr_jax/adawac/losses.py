"""Segmentation losses of AdaWAC: cross-entropy, dice, encoder consistency, the WAC objective.

With logits ``f(x) in R^{d x K}`` (``d`` pixels, ``K`` classes, softmax ``p``), labels
``y in [K]^d`` and an encoder ``phi``:

* per-sample averaged cross-entropy (thesis ``eq:cross_entropy_loss``)::

      ce(x, y) = -1/d sum_j log p_{j, y_j};

* dice loss (``eq:dice_loss`` as implemented by TransUNet and the AdaWAC reference): over the
  whole batch, per class ``k`` *including background*, with squared denominators and
  ``s = 1e-5``::

      dice = 1/K sum_k [1 - (2 sum p_k g_k + s) / (sum p_k^2 + sum g_k^2 + s)],
      g_k = 1{y = k}

  (the thesis writes ``||p||_1 + ||q||_1`` in the dice coefficient; for the one-hot ``g``,
  ``sum g^2 = ||g||_1``, while ``sum p^2 <= ||p||_1``: we follow the implementation);

* encoder consistency (``eq:dac`` with ``varrho`` the mean squared difference)::

      cons(x) = lambda * mean((phi(A_1 x) - phi(A_2 x))^2)

  between the encoder outputs of two independently augmented views of the same sample (the
  features are not inverse-transformed; lambda = 2.0 in the experiments);

* the WAC objective with dice (``eq:objective_wac_dice``) as trained by the reference code::

      L = w_dice * dice + w_wac * 1/B sum_i [beta_i ce_i + (1 - beta_i) cons_i],

  ``w_dice = w_wac = 0.5`` (the thesis' display has weights 1 and 1; the implementation, and
  the implementation notes, use 0.5 and 0.5, which only rescales the objective and hence the
  model's learning rate). The thesis' settings (``app:imp``, implementation notes): lambda =
  2.0, SGD lr 0.01 with momentum 0.9 and weight decay 1e-4, batch 24 of 224 x 224 slices.

Logits are ``(B, *spatial, C)`` (channels last; ``(B, H, W, C)`` for images) and labels
``(B, *spatial)`` integers. Everything is pure ``jax.numpy``, computed in at least float32,
jit/vmap/grad friendly; inside jit, a label outside ``[0, C)`` makes the affected loss NaN
rather than silently wrong.
"""

from __future__ import annotations

import numbers
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from rdr_jax._src import validation as V

__all__ = ["WACAux", "cross_entropy", "dice_loss", "consistency", "wac_objective",
           "wac_dice_loss"]


class WACAux(NamedTuple):
    """Auxiliary outputs of :func:`wac_dice_loss` (all evaluated at the current parameters).

    Attributes:
      ce: per-sample averaged cross-entropies, shape ``(B,)`` (feed to ``beta_gradient``).
      cons: per-sample consistency terms, lambda included, shape ``(B,)``.
      dice: the batch dice loss (scalar).
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


@jax.jit
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
    """Per-sample pixel-averaged cross-entropy (thesis ``eq:cross_entropy_loss``).

    ``ce_b = -1/d sum_j log softmax(logits_b)_{j, y_{b,j}}`` over the ``d`` pixels of sample
    ``b`` (``log_softmax`` in at least float32, so large logits do not overflow).

    Args:
      logits: ``(B, *spatial, C)`` class scores, channels last.
      labels: ``(B, *spatial)`` integer class ids in ``[0, C)`` (checked when concrete; a
        traced out-of-range label makes its sample's loss NaN).

    Returns:
      ``(B,)`` per-sample losses, dtype ``promote(logits.dtype, float32)``.

    Example:
      >>> logits = jnp.zeros((2, 4, 4, 3)); labels = jnp.zeros((2, 4, 4), jnp.int32)
      >>> cross_entropy(logits, labels)      # [log 3, log 3]
    """
    _check_logits_labels(logits, labels)
    return _cross_entropy(jnp.asarray(logits), jnp.asarray(labels))


@jax.jit
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
    """Soft dice loss over the batch, averaged over all classes (thesis ``eq:dice_loss``).

    With ``p = softmax(logits)`` and ``g_k = 1{labels = k}``, sums over every pixel of every
    sample of the batch::

        dice = 1/C sum_{k=0}^{C-1} [1 - (2 sum p_k g_k + smooth) / (sum p_k^2 + sum g_k^2 + smooth)]

    as in TransUNet's ``DiceLoss`` (background included, squared denominators, smoothing
    ``1e-5``). A class absent from both prediction and labels contributes ~0.

    Args:
      logits: ``(B, *spatial, C)`` class scores, channels last.
      labels: ``(B, *spatial)`` integer class ids in ``[0, C)``.
      smooth: smoothing term ``>= 0`` added to numerator and denominator.

    Returns:
      Scalar loss in ``[0, 1]``; NaN if a traced label lies outside ``[0, C)``.

    Example:
      >>> labels = jnp.array([[[0, 1], [1, 0]]])
      >>> dice_loss(100.0 * jax.nn.one_hot(labels, 2), labels)   # ~0 (perfect prediction)
    """
    _check_logits_labels(logits, labels)
    _check_nonneg("smooth", smooth)
    return _dice(jnp.asarray(logits), jnp.asarray(labels), smooth)


@jax.jit
def _consistency(z1, z2, lam):
    ct = _compute_dtype(jnp.promote_types(z1.dtype, z2.dtype))
    d = (z1.astype(ct) - z2.astype(ct)).reshape(z1.shape[0], -1)
    return jnp.asarray(lam, ct) * jnp.mean(d * d, axis=1)


def consistency(z1: Float[Array, "B *F"], z2: Float[Array, "B *F"], *,
                lam: float = 1.0) -> Float[Array, " B"]:
    """Per-sample encoder consistency ``lam * mean((z1_b - z2_b)^2)`` (thesis ``eq:dac``).

    ``z1``, ``z2`` are the encoder outputs ``phi(A_1 x)``, ``phi(A_2 x)`` of two independently
    augmented views of the same samples (TransUNet: the transformer output ``(B, 196, 768)``;
    UNet: the deepest ResNet stage); the mean is over all non-batch axes. The result is per
    sample so that it can be weighted by ``1 - beta_i``.

    Args:
      z1, z2: encoder outputs of the same shape ``(B, ...)``.
      lam: the scale ``lambda_c >= 0`` (2.0 in the thesis experiments).

    Returns:
      ``(B,)`` consistency terms, lambda included.

    Example:
      >>> consistency(jnp.ones((2, 3)), jnp.zeros((2, 3)), lam=2.0)   # [2., 2.]
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
    """Combine precomputed terms into the WAC objective with dice (``eq:objective_wac_dice``).

    ``L = dice_weight * dice + wac_weight * 1/B sum_i [beta_i ce_i + (1 - beta_i) cons_i]``.

    Use this when the per-sample terms come from one forward pass and ``beta`` is updated in
    between (``alg:srw_dac``: the table step uses the losses at the current parameters and
    the parameter step the *new* weights): e.g. ``(dice, ce, cons), vjp = jax.vjp(terms,
    params)``, update beta from ``ce, cons``, then pull back the cotangents of this linear
    combination through ``vjp``.

    Args:
      dice: scalar dice loss.
      ce: ``(B,)`` per-sample cross-entropies.
      cons: ``(B,)`` per-sample consistency terms (lambda included).
      beta: ``(B,)`` weights of the batch rows, in ``[0, 1]``.
      dice_weight, wac_weight: the weights of the two parts (``>= 0``; 0.5 and 0.5 as in the
        reference implementation).

    Returns:
      The scalar objective.

    Example:
      >>> wac_objective(jnp.array(0.2), jnp.array([1.0, 3.0]), jnp.array([0.0, 1.0]),
      ...               jnp.array([0.5, 1.0]))     # 0.5*0.2 + 0.5*(0.5 + 3)/2 = 0.975
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


@jax.jit
def _wac(dice, ce, cons, beta, dice_weight, wac_weight):
    ct = jnp.result_type(dice, ce, cons, jnp.float32)
    beta = jnp.asarray(beta).astype(ct)
    weighted = beta * ce.astype(ct) + (1 - beta) * cons.astype(ct)
    return (jnp.asarray(dice_weight, ct) * jnp.asarray(dice, ct)
            + jnp.asarray(wac_weight, ct) * jnp.mean(weighted))


def wac_dice_loss(logits: Float[Array, "B *S C"], labels: Int[Array, "B *S"],
                  z1: Float[Array, "B *F"], z2: Float[Array, "B *F"], beta: Float[Array, " B"],
                  *, lam: float = 1.0, dice_weight: float = 0.5, wac_weight: float = 0.5,
                  smooth: float = 1e-5) -> tuple[Float[Array, ""], WACAux]:
    """The AdaWAC training objective with dice (thesis ``eq:objective_wac_dice``).

    ::

        L = dice_weight * dice(logits, labels)
            + wac_weight * 1/B sum_i [beta_i ce_i + (1 - beta_i) cons_i],
        ce_i = cross_entropy(logits, labels)_i,  cons_i = lam * mean((z1_i - z2_i)^2).

    ``logits``/``labels`` are the model's output on the supervised view and its (identically
    transformed) labels; ``z1``, ``z2`` the encoder outputs of the two views. ``beta`` is the
    batch's rows of the weight table (gather ``table[idx]``), treated as a constant of the
    parameter step; it is not stopped here, so ``d L / d beta_i = wac_weight (ce_i - cons_i) /
    B``. The per-sample ``ce``/``cons`` are returned as aux for the beta step
    (:func:`rdr_jax.adawac.transform.beta_gradient`), so the function plugs into
    ``jax.value_and_grad(..., has_aux=True)``.

    Args:
      logits: ``(B, *spatial, C)`` class scores (channels last).
      labels: ``(B, *spatial)`` integer class ids in ``[0, C)``.
      z1, z2: encoder outputs ``(B, ...)`` of the two views.
      beta: ``(B,)`` weights in ``[0, 1]``.
      lam: consistency scale ``lambda_c >= 0`` (2.0 in the experiments).
      dice_weight, wac_weight: weights of dice and of the weighted CE/consistency part
        (default 0.5 and 0.5 as in the reference implementation; 1 and 1 in the thesis'
        display).
      smooth: dice smoothing.

    Returns:
      ``(loss, WACAux(ce, cons, dice))``.

    Example:
      >>> loss, aux = wac_dice_loss(logits, labels, z1, z2, table[idx], lam=2.0)
      >>> g = beta_gradient(aux.ce, aux.cons, idx, table.shape[0])
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
    for name, v in (("lam", lam), ("dice_weight", dice_weight), ("wac_weight", wac_weight),
                    ("smooth", smooth)):
        _check_nonneg(name, v)
    logits, labels = jnp.asarray(logits), jnp.asarray(labels)
    ce = _cross_entropy(logits, labels)
    cons = _consistency(jnp.asarray(z1), jnp.asarray(z2), lam)
    dice = _dice(logits, labels, smooth)
    loss = _wac(dice, ce, cons, beta, dice_weight, wac_weight)
    return loss, WACAux(ce=ce, cons=cons, dice=dice)
