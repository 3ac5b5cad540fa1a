"""Deep DAC vs DA-ERM training (thesis Sec. ``sec:dac_experiments``, App. ``apdx:exp_detail``).

Given a labeled batch ``x_1..x_B`` with labels ``y_i`` and ``alpha`` augmentations
``x_{i,j} = A_j(x_i)`` per sample, the two objectives compared in the thesis are

* **DA-ERM** (ERM on the augmented data set ``\\tilde A(X)`` of ``sec:general``)::

      L_erm = 1/((1+alpha) B) * sum_i [ l(h(x_i), y_i) + sum_j l(h(x_{i,j}), y_i) ]

* **DAC** (thesis Eq. ``eq:dac_soft`` with a finite lambda, ``subsec:finite_lambda``)::

      L_dac = 1/B sum_i l(h(x_i), y_i) + lambda * 1/(alpha B) sum_{i,j} rho(h(x_i), h(x_{i,j}))

  where ``l`` is the cross-entropy and ``rho`` the l2 distance between the model's
  *predictions* (Sec. ``sec:dac_experiments``: "the l2 distance of the model's predictions on
  the original and augmented samples"); for a classifier we read "predictions" as the softmax
  probabilities (``consistency_on="probs"``, default; ``"logits"`` is offered as an option).
  The average over the ``alpha`` augmentations (``reduction="mean"``) equals Eq.
  ``eq:dac_soft`` (which sums over ``j``) with ``lambda / alpha``; ``reduction="sum"`` is the
  literal sum. ``squared=True`` uses ``||.||_2^2`` instead of ``||.||_2``.

Training follows App. ``apdx:exp_detail``: batch 64, ``2^15`` SGD steps with momentum 0.9 and
learning rate ``0.03 cos(7 pi i / (16 * 2^15))`` (:func:`cosine_schedule`). The reference
code the authors adapted (kekmodel/FixMatch-pytorch) uses Nesterov momentum and a coupled
(PyTorch-style, added to the gradient) weight decay 5e-4 on the convolution/linear kernels
only (not biases or BatchNorm): :func:`make_optimizer` defaults to the same.

Everything here is functional: a Flax NNX model is split once into a static graph
(:class:`ModelGraph`, one for BatchNorm in training mode and one for evaluation mode) and a
pytree :class:`TrainState` (step, parameters, BatchNorm statistics, optimizer state); the
train step :func:`make_train_step` is a pure function ``(state, key, batch...) -> (state,
metrics)`` that the caller jits once (``lam`` and the method flag are traced, so lambda
sweeps and DAC/DA-ERM share one compilation and can be vmapped). Per-step keys are
``jax.random.fold_in(key, state.step)``, so a resumed run draws the same augmentations.
:func:`train` is the checkpointed loop (orbax ``CheckpointManager``: parameters, BatchNorm
statistics, optimizer state, step and data-loader positions), used by
``experiments/train_dac.py``; on CPU a killed-and-resumed run is bitwise equal to an
uninterrupted one.

The FixMatch + DAC variant of ``table:combining_with_SSL`` (:func:`fixmatch_loss`) adds the
FixMatch unlabeled loss (pseudo-labels from weakly augmented unlabeled images where the
confidence exceeds a threshold, cross-entropy on the strongly augmented ones) to the DAC loss
on the labeled batch.
"""

from __future__ import annotations

import json
import math
import numbers
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jaxtyping import Array, Float, Int

from rdr_jax._validation import check_int, check_key
from rdr_jax.training import (ModelGraph, merge_apply, restore_checkpoint, save_checkpoint,
                              split_model)

__all__ = [
    "FixMatchSettings",
    "LossTerms",
    "ModelGraph",
    "SmallCNN",
    "TrainResult",
    "TrainState",
    "apply_model",
    "build_augment",
    "build_model",
    "consistency_distances",
    "cosine_schedule",
    "cross_entropy",
    "da_erm_loss",
    "dac_loss",
    "evaluate",
    "fixmatch_loss",
    "init_train_state",
    "make_eval_step",
    "make_optimizer",
    "make_train_step",
    "normalize_images",
    "random_shift_rotate",
    "restore_checkpoint",
    "save_checkpoint",
    "train",
    "weak_augment",
]

CIFAR100_MEAN = (0.5071, 0.4867, 0.4408)
CIFAR100_STD = (0.2675, 0.2565, 0.2761)
_CONSISTENCY_ON = ("probs", "logits")
_REDUCTIONS = ("mean", "sum")


# --------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------
def check_lam(lam: Any, name: str = "lam") -> Any:
    """``lam`` must be a finite number >= 0 (a traced value is passed through unchecked)."""
    if isinstance(lam, jax.core.Tracer):
        return lam
    if isinstance(lam, bool):
        raise TypeError(f"{name} must be a real number >= 0; got bool {lam!r}")
    arr = np.asarray(lam)
    if arr.dtype.kind not in "fiu":
        raise TypeError(f"{name} must be a real number >= 0; got {type(lam).__name__} {lam!r}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} (the DAC regularization coefficient lambda) must be finite "
                         f"and >= 0; got {lam!r}")
    return lam


def check_alpha(alpha: Any) -> int:
    """``alpha`` (augmentations per sample) must be a Python int >= 1."""
    return check_int("alpha (number of augmentations per sample)", alpha, low=1)


def _check_choice(name: str, value: str, allowed: tuple) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}; got {value!r}")
    return value


def _check_logits(logits_orig, logits_aug, labels):
    if logits_orig.ndim != 2:
        raise ValueError(f"logits_orig must have shape (B, K); got {logits_orig.shape}")
    if logits_aug.ndim != 3 or logits_aug.shape[1:] != logits_orig.shape:
        raise ValueError(f"logits_aug must have shape (alpha, B, K) = (alpha, "
                         f"{logits_orig.shape[0]}, {logits_orig.shape[1]}); got "
                         f"{logits_aug.shape}")
    if logits_aug.shape[0] < 1:
        raise ValueError("logits_aug must hold alpha >= 1 augmentations; got alpha = 0")
    if labels.shape != logits_orig.shape[:1]:
        raise ValueError(f"labels must have shape (B,) = ({logits_orig.shape[0]},); got "
                         f"{labels.shape}")


# --------------------------------------------------------------------------------------
# losses
# --------------------------------------------------------------------------------------
class LossTerms(NamedTuple):
    """A training objective and its parts (scalars).

    Attributes:
        total: the objective that is differentiated.
        ce: mean cross-entropy over the samples the objective fits (originals for DAC;
            originals and augmentations for DA-ERM).
        consistency: mean over (i, j) of ``rho(h(x_i), h(x_{i,j}))`` (reported by both
            objectives; only DAC includes it in ``total``).
    """

    total: Float[Array, ""]
    ce: Float[Array, ""]
    consistency: Float[Array, ""]


def cross_entropy(logits: Float[Array, "b k"], labels: Int[Array, " b"]) -> Float[Array, ""]:
    """Mean cross-entropy ``-1/B sum_i log softmax(z_i)[y_i]``.

    Example:
        >>> float(cross_entropy(jnp.zeros((2, 4)), jnp.array([0, 3])))  # log 4
        1.386...
    """
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, labels))


def _safe_norm(sq: Array) -> Array:
    """sqrt with a zero (not NaN) gradient at 0."""
    pos = sq > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0)


def consistency_distances(logits_orig: Float[Array, "b k"], logits_aug: Float[Array, "a b k"],
                          *, on: str = "probs", squared: bool = False) -> Float[Array, "a b"]:
    """``rho(h(x_i), h(x_{i,j}))`` for every augmentation j and sample i (Eq. ``eq:dac_soft``).

    ``rho(u, v) = ||u - v||_2`` (``squared=True``: ``||u - v||_2^2``) with ``u, v`` the softmax
    probabilities (``on="probs"``) or the logits (``on="logits"``). The square root has a zero
    gradient where the distance is exactly zero.

    Args:
        logits_orig: (B, K) logits on the original samples.
        logits_aug: (alpha, B, K) logits on the augmentations (``[j, i]`` is ``x_{i,j}``).
        on: ``"probs"`` or ``"logits"``.
        squared: use the squared distance.

    Returns:
        (alpha, B) distances.

    Example:
        >>> z = jnp.array([[0.0, 0.0]])
        >>> consistency_distances(z, jnp.array([[[0.0, 0.0]]]))
        Array([[0.]], dtype=float32)
    """
    _check_choice("on", on, _CONSISTENCY_ON)
    if on == "probs":
        u, v = jax.nn.softmax(logits_orig, -1), jax.nn.softmax(logits_aug, -1)
    else:
        u, v = logits_orig, logits_aug
    sq = jnp.sum((v - u[None]) ** 2, axis=-1)
    return sq if squared else _safe_norm(sq)


def da_erm_loss(logits_orig: Float[Array, "b k"], logits_aug: Float[Array, "a b k"],
                labels: Int[Array, " b"], *, on: str = "probs",
                squared: bool = False) -> LossTerms:
    """DA-ERM: mean cross-entropy over the originals and their ``alpha`` augmentations.

    ``L = 1/((1+alpha) B) sum_i [ l(h(x_i), y_i) + sum_{j=1}^alpha l(h(x_{i,j}), y_i) ]``, the
    ERM on the augmented data set ``\\tilde A(X)`` with labels ``\\tilde M y`` (thesis
    ``sec:general``). ``consistency`` is reported for monitoring (not in ``total``).

    Args:
        logits_orig: (B, K) logits on the originals.
        logits_aug: (alpha, B, K) logits on the augmentations, alpha >= 1.
        labels: (B,) integer labels.
        on, squared: the monitored consistency (see :func:`consistency_distances`).

    Returns:
        :class:`LossTerms` with ``total == ce``.

    Example:
        >>> t = da_erm_loss(jnp.zeros((2, 4)), jnp.zeros((3, 2, 4)), jnp.array([0, 1]))
        >>> round(float(t.total), 4)
        1.3863
    """
    _check_logits(logits_orig, logits_aug, labels)
    a, b, k = logits_aug.shape
    all_logits = jnp.concatenate([logits_orig[None], logits_aug], 0).reshape(-1, k)
    ce = cross_entropy(all_logits, jnp.tile(labels, a + 1))
    cons = jnp.mean(consistency_distances(logits_orig, logits_aug, on=on, squared=squared))
    return LossTerms(ce, ce, jax.lax.stop_gradient(cons))


def dac_loss(logits_orig: Float[Array, "b k"], logits_aug: Float[Array, "a b k"],
             labels: Int[Array, " b"], lam: Any, *, on: str = "probs", squared: bool = False,
             reduction: str = "mean") -> LossTerms:
    """DAC: cross-entropy on the originals plus ``lam`` times the consistency (``eq:dac_soft``).

    ``L = 1/B sum_i l(h(x_i), y_i) + lam * R``, with
    ``R = 1/(alpha B) sum_{i,j} rho(h(x_i), h(x_{i,j}))`` (``reduction="mean"``) or
    ``R = 1/B sum_{i,j} rho(...)`` (``reduction="sum"``, Eq. ``eq:dac_soft`` divided by B).
    ``rho`` is the l2 distance between softmax predictions by default
    (:func:`consistency_distances`). ``lam = 0`` trains on the originals only (the "no
    augmentation" column of ``table:misspecified_lambda``).

    Args:
        logits_orig: (B, K) logits on the originals.
        logits_aug: (alpha, B, K) logits on the augmentations, alpha >= 1.
        labels: (B,) integer labels.
        lam: lambda >= 0 (a Python float, or a traced scalar inside jit/vmap).
        on: ``"probs"`` (default) or ``"logits"``.
        squared: squared l2 distance instead of the l2 distance.
        reduction: ``"mean"`` or ``"sum"`` over the alpha augmentations.

    Returns:
        :class:`LossTerms` (``consistency`` is ``R`` with the mean over j).

    Raises:
        ValueError: ``lam < 0`` or non-finite; alpha = 0; bad shapes or options.

    Example:
        >>> t = dac_loss(jnp.zeros((2, 4)), jnp.ones((3, 2, 4)), jnp.array([0, 1]), 10.0)
        >>> round(float(t.total), 4), float(t.consistency)
        (1.3863, 0.0)
    """
    check_lam(lam)
    _check_choice("reduction", reduction, _REDUCTIONS)
    _check_logits(logits_orig, logits_aug, labels)
    ce = cross_entropy(logits_orig, labels)
    d = consistency_distances(logits_orig, logits_aug, on=on, squared=squared)
    cons = jnp.mean(d)
    reg = cons * (d.shape[0] if reduction == "sum" else 1)
    return LossTerms(ce + lam * reg, ce, cons)


class FixMatchSettings(NamedTuple):
    """FixMatch (Sohn et al. 2020) settings of the reference code: ``mu`` unlabeled batches
    per labeled batch, confidence ``threshold``, sharpening ``temperature``, weight
    ``lambda_u`` of the unlabeled loss."""

    mu: int = 7
    threshold: float = 0.95
    temperature: float = 1.0
    lambda_u: float = 1.0


def fixmatch_loss(logits_weak: Float[Array, "u k"], logits_strong: Float[Array, "u k"],
                  threshold: float = 0.95, temperature: float = 1.0
                  ) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """FixMatch unlabeled loss (``table:combining_with_SSL`` baseline).

    ``q_i = softmax(z^w_i / T)`` (no gradient), ``m_i = [max_k q_ik >= tau]``,
    ``L_u = 1/U sum_i m_i * l(z^s_i, argmax_k q_ik)``.

    Args:
        logits_weak: (U, K) logits on weakly augmented unlabeled images.
        logits_strong: (U, K) logits on strongly augmented versions of the same images.
        threshold: confidence threshold tau in (0, 1].
        temperature: T > 0.

    Returns:
        ``(L_u, mask_rate)`` where ``mask_rate`` is the fraction of pseudo-labels kept.

    Example:
        >>> zw = jnp.array([[10.0, 0.0], [0.0, 0.0]])
        >>> lu, rate = fixmatch_loss(zw, jnp.zeros((2, 2)))
        >>> round(float(lu), 4), float(rate)
        (0.3466, 0.5)
    """
    if logits_weak.shape != logits_strong.shape or logits_weak.ndim != 2:
        raise ValueError("logits_weak and logits_strong must both have shape (U, K); got "
                         f"{logits_weak.shape} and {logits_strong.shape}")
    q = jax.nn.softmax(jax.lax.stop_gradient(logits_weak) / temperature, -1)
    mask = (jnp.max(q, -1) >= threshold).astype(logits_strong.dtype)
    pseudo = jnp.argmax(q, -1)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits_strong, pseudo)
    return jnp.mean(ce * mask), jnp.mean(mask)


# --------------------------------------------------------------------------------------
# schedule and optimizer
# --------------------------------------------------------------------------------------
def cosine_schedule(base_lr: float = 0.03, total_steps: int = 2 ** 15,
                    num_cycles: float = 7 / 16) -> optax.Schedule:
    """``lr(i) = base_lr * cos(pi * num_cycles * i / total_steps)`` (App. ``apdx:exp_detail``).

    With the defaults, ``lr(i) = 0.03 cos(7 pi i / (16 * 2^15))``: it decays from 0.03 to
    ``0.03 cos(7 pi / 16) ~ 0.0059`` at the last step (no warm-up).

    Example:
        >>> s = cosine_schedule()
        >>> float(s(0)), round(float(s(2 ** 15)), 6)
        (0.03, 0.005853)
    """
    check_int("total_steps", total_steps, low=1)
    if not (isinstance(base_lr, numbers.Real) and base_lr > 0 and math.isfinite(base_lr)):
        raise ValueError(f"base_lr must be a finite number > 0; got {base_lr!r}")

    def schedule(count):
        return base_lr * jnp.cos(jnp.pi * num_cycles * count / total_steps)

    return schedule


def _decay_mask(params):
    """Weight decay on kernels (ndim > 1) only: no decay on biases and BatchNorm scale/bias."""
    return jax.tree.map(lambda p: p.ndim > 1, params)


def make_optimizer(learning_rate: Any = None, *, momentum: float = 0.9, nesterov: bool = True,
                   weight_decay: float = 5e-4) -> optax.GradientTransformation:
    """SGD with momentum and coupled weight decay, as the reference code (App. ``apdx:exp_detail``).

    ``g <- g + wd * theta`` (kernels only), ``m <- momentum * m + g``, update
    ``-lr * (g + momentum * m)`` (Nesterov; plain momentum uses ``-lr * m``): PyTorch's
    ``SGD(momentum=0.9, nesterov=True, weight_decay=wd)`` with the reference's no-decay group
    for biases and BatchNorm parameters.

    Args:
        learning_rate: a float or an optax schedule (default :func:`cosine_schedule`).
        momentum: momentum coefficient.
        nesterov: Nesterov momentum.
        weight_decay: coupled L2 coefficient (0 disables it).

    Example:
        >>> tx = make_optimizer(cosine_schedule(total_steps=100))
    """
    if learning_rate is None:
        learning_rate = cosine_schedule()
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0; got {weight_decay}")
    parts = []
    if weight_decay > 0:
        parts.append(optax.add_decayed_weights(weight_decay, mask=_decay_mask))
    parts.append(optax.sgd(learning_rate, momentum=momentum, nesterov=nesterov))
    return optax.chain(*parts)


# --------------------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------------------
class SmallCNN(nnx.Module):
    """A small BatchNorm CNN for tiny images (the digits demo, tests).

    ``conv3x3(c -> w) - BN - ReLU - conv3x3(w -> 2w, stride 2) - BN - ReLU -
    conv3x3(2w -> 2w) - BN - ReLU - global average pool`` (:meth:`features`, the
    representation ``phi_h`` of ``sec:general``) then a linear head (``f_h``).

    Example:
        >>> m = SmallCNN(10, in_channels=1, rngs=nnx.Rngs(0))
        >>> m(jnp.zeros((2, 8, 8, 1))).shape
        (2, 10)
    """

    def __init__(self, num_classes: int, *, in_channels: int = 1, width: int = 16,
                 rngs: nnx.Rngs):
        check_int("num_classes", num_classes, low=2)
        check_int("in_channels", in_channels, low=1)
        check_int("width", width, low=1)
        w = width
        self.conv1 = nnx.Conv(in_channels, w, (3, 3), rngs=rngs)
        self.bn1 = nnx.BatchNorm(w, momentum=0.9, rngs=rngs)
        self.conv2 = nnx.Conv(w, 2 * w, (3, 3), strides=(2, 2), rngs=rngs)
        self.bn2 = nnx.BatchNorm(2 * w, momentum=0.9, rngs=rngs)
        self.conv3 = nnx.Conv(2 * w, 2 * w, (3, 3), rngs=rngs)
        self.bn3 = nnx.BatchNorm(2 * w, momentum=0.9, rngs=rngs)
        self.head = nnx.Linear(2 * w, num_classes, rngs=rngs)

    def features(self, x: Float[Array, "b h w c"]) -> Float[Array, "b f"]:
        h = nnx.relu(self.bn1(self.conv1(x)))
        h = nnx.relu(self.bn2(self.conv2(h)))
        h = nnx.relu(self.bn3(self.conv3(h)))
        return jnp.mean(h, axis=(1, 2))

    def __call__(self, x: Float[Array, "b h w c"]) -> Float[Array, "b k"]:
        return self.head(self.features(x))


def build_model(model_cfg: Any, *, seed: int = 0) -> nnx.Module:
    """Build the model named by a config (``name``: ``"wide_resnet"`` or ``"small_cnn"``).

    ``wide_resnet`` uses :class:`rdr_jax.models.wide_resnet.WideResNet` (``num_classes``,
    ``depth``, ``widen_factor``, ``in_channels``); ``small_cnn`` uses :class:`SmallCNN`
    (``num_classes``, ``in_channels``, ``width``). Parameters are initialised from ``seed``.

    Example:
        >>> m = build_model({"name": "small_cnn", "num_classes": 10, "in_channels": 1})
    """
    cfg = dict(model_cfg)
    name = cfg.pop("name")
    rngs = nnx.Rngs(seed)
    if name == "small_cnn":
        return SmallCNN(cfg.pop("num_classes"), rngs=rngs, **cfg)
    if name == "wide_resnet":
        from rdr_jax.models.wide_resnet import WideResNet
        return WideResNet(cfg.pop("num_classes"), rngs=rngs, **cfg)
    raise ValueError(f"model name must be 'small_cnn' or 'wide_resnet'; got {name!r}")


# --------------------------------------------------------------------------------------
# augmentations (batched, JAX)
# --------------------------------------------------------------------------------------
def random_shift_rotate(key: jax.Array, images: Float[Array, "b h w c"], *,
                        max_shift: float = 1.0, max_angle: float = 15.0
                        ) -> Float[Array, "b h w c"]:
    """Small random rotations and translations (label-preserving for digits).

    Each image is rotated about its centre by ``U(-max_angle, max_angle)`` degrees and shifted
    by ``U(-max_shift, max_shift)`` pixels per axis, with bilinear interpolation and zero fill
    (``jax.scipy.ndimage.map_coordinates``). Output pixel ``p`` reads input ``R^T (p - c - t)
    + c``.

    Example:
        >>> x = jnp.zeros((4, 8, 8, 1))
        >>> random_shift_rotate(jax.random.key(0), x).shape
        (4, 8, 8, 1)
    """
    key = check_key(key)
    b, h, w, c = images.shape
    ka, ks = jax.random.split(key)
    ang = jnp.deg2rad(jax.random.uniform(ka, (b,), minval=-max_angle, maxval=max_angle))
    shift = jax.random.uniform(ks, (b, 2), minval=-max_shift, maxval=max_shift)
    yy, xx = jnp.meshgrid(jnp.arange(h, dtype=images.dtype), jnp.arange(w, dtype=images.dtype),
                          indexing="ij")
    cy, cx = (h - 1) / 2.0, (w - 1) / 2.0

    def one(img, a, t):
        dy, dx = yy - cy - t[0], xx - cx - t[1]
        ca, sa = jnp.cos(a), jnp.sin(a)
        sy, sx = ca * dy + sa * dx + cy, -sa * dy + ca * dx + cx
        chans = [jax.scipy.ndimage.map_coordinates(img[..., ch], [sy, sx], order=1, cval=0.0)
                 for ch in range(c)]
        return jnp.stack(chans, -1)

    return jax.vmap(one)(images, ang.astype(images.dtype), shift.astype(images.dtype))


def weak_augment(key: jax.Array, images: Float[Array, "b h w c"], *, pad_frac: float = 0.125,
                 flip: bool = True) -> Float[Array, "b h w c"]:
    """FixMatch's weak augmentation: random horizontal flip and a random crop after reflect
    padding by ``int(pad_frac * H)`` pixels (the reference code's ``RandomCrop(32, 4,
    'reflect')``).

    Example:
        >>> weak_augment(jax.random.key(0), jnp.zeros((2, 32, 32, 3))).shape
        (2, 32, 32, 3)
    """
    key = check_key(key)
    b, h, w, c = images.shape
    p = int(pad_frac * h)
    kf, kc = jax.random.split(key)
    x = images
    if flip:
        fl = jax.random.bernoulli(kf, 0.5, (b,))
        x = jnp.where(fl[:, None, None, None], x[:, :, ::-1], x)
    if p > 0:
        xp = jnp.pad(x, ((0, 0), (p, p), (p, p), (0, 0)), mode="reflect")
        off = jax.random.randint(kc, (b, 2), 0, 2 * p + 1)
        x = jax.vmap(lambda im, o: jax.lax.dynamic_slice(im, (o[0], o[1], 0), (h, w, c)))(xp, off)
    return x


def build_augment(aug_cfg: Any) -> Callable[[jax.Array, Array], Array]:
    """The batched augmentation ``(key, images) -> images`` named by a config.

    ``name``: ``"randaugment"`` (:func:`rdr_jax.dac.randaugment.rand_augment_batch` with
    ``num_ops``, ``magnitude``), ``"shift_rotate"`` (:func:`random_shift_rotate` with
    ``max_shift``, ``max_angle``), ``"weak"`` (:func:`weak_augment`) or ``"weak+randaugment"``
    (weak then RandAugment, FixMatch's strong augmentation without Cutout). Fields that belong
    to another augmentation are ignored.
    """
    cfg = dict(aug_cfg)
    name = cfg.pop("name")

    def pick(*keys):   # fields of other augmentations (e.g. num_ops) are ignored
        return {k: cfg[k] for k in keys if k in cfg}

    if name == "shift_rotate":
        kw = pick("max_shift", "max_angle")
        return lambda k, x: random_shift_rotate(k, x, **kw)
    if name == "weak":
        kw = pick("pad_frac", "flip")
        return lambda k, x: weak_augment(k, x, **kw)
    if name in ("randaugment", "weak+randaugment"):
        from rdr_jax.dac.randaugment import rand_augment_batch
        num_ops, magnitude = int(cfg.get("num_ops", 2)), float(cfg.get("magnitude", 10.0))
        if name == "randaugment":
            return lambda k, x: rand_augment_batch(k, x, num_ops=num_ops, magnitude=magnitude)

        def strong(k, x):
            k1, k2 = jax.random.split(k)
            return rand_augment_batch(k2, weak_augment(k1, x), num_ops=num_ops,
                                      magnitude=magnitude)
        return strong
    raise ValueError("augment name must be one of 'randaugment', 'shift_rotate', 'weak', "
                     f"'weak+randaugment'; got {name!r}")


def normalize_images(images: Array, mean: Optional[tuple] = None,
                     std: Optional[tuple] = None) -> Array:
    """``(x - mean) / std`` per channel (identity when ``mean``/``std`` are None)."""
    if mean is None or std is None:
        return images
    m = jnp.asarray(mean, images.dtype)
    s = jnp.asarray(std, images.dtype)
    return (images - m) / s


# --------------------------------------------------------------------------------------
# functional train state
# --------------------------------------------------------------------------------------
class TrainState(NamedTuple):
    """Everything that changes during training (a pytree; checkpointed by orbax).

    Attributes:
        step: int32 scalar, number of optimizer steps taken.
        params: the ``nnx.Param`` state.
        model_state: all other model variables (BatchNorm running statistics, ...).
        opt_state: the optax state.
    """

    step: Int[Array, ""]
    params: Any
    model_state: Any
    opt_state: Any


def init_train_state(model: nnx.Module, tx: optax.GradientTransformation
                     ) -> tuple[ModelGraph, TrainState]:
    """Split an NNX model into its static :class:`ModelGraph` and a :class:`TrainState`.

    Example:
        >>> graph, state = init_train_state(SmallCNN(10, rngs=nnx.Rngs(0)), make_optimizer())
        >>> int(state.step)
        0
    """
    graph, params, rest = split_model(model)
    return graph, TrainState(jnp.zeros((), jnp.int32), params, rest, tx.init(params))


def apply_model(graphdef: Any, params: Any, model_state: Any, x: Array) -> tuple[Array, Any]:
    """Run the model ``nnx.merge(graphdef, params, model_state)`` on ``x``.

    Returns ``(logits, new_model_state)`` (BatchNorm statistics updated in training mode).
    """
    return merge_apply(graphdef, params, model_state, x)


def make_train_step(graph: ModelGraph, tx: optax.GradientTransformation, *, alpha: int,
                    augment: Callable[[jax.Array, Array], Array],
                    originals_augment: Optional[Callable[[jax.Array, Array], Array]] = None,
                    normalize: Callable[[Array], Array] = lambda x: x,
                    consistency_on: str = "probs", squared: bool = False,
                    reduction: str = "mean",
                    fixmatch: Optional[FixMatchSettings] = None,
                    weak: Optional[Callable[[jax.Array, Array], Array]] = None,
                    strong: Optional[Callable[[jax.Array, Array], Array]] = None) -> Callable:
    """Build the pure train step for DAC / DA-ERM (optionally + FixMatch).

    The returned ``step(state, key, images, labels, lam, dac, unlabeled=None) -> (state,
    metrics)``:

    1. ``k = fold_in(key, state.step)``; ``alpha`` augmentations of the labeled batch,
       ``x_{i,j} = augment(k_j, x)`` (originals optionally pass ``originals_augment``, e.g.
       flip + crop);
    2. one forward pass over ``[x; x_{.,1}; ...; x_{.,alpha}]`` (and, with FixMatch, the weak
       and strong views of the unlabeled batch) with BatchNorm in training mode;
    3. the objective :func:`dac_loss` when ``dac`` is true, else :func:`da_erm_loss` (``dac``
       and ``lam`` are traced: one compilation serves both methods and every lambda), plus
       ``lambda_u * L_u`` of :func:`fixmatch_loss` with FixMatch;
    4. an optax update of the parameters; BatchNorm statistics and ``step`` advance.

    Args:
        graph: from :func:`init_train_state`.
        tx: the optax optimizer.
        alpha: augmentations per sample (static, >= 1).
        augment: batched augmentation ``(key, images) -> images`` on [0, 1] images.
        originals_augment: optional augmentation of the originals (default: none).
        normalize: applied to every image batch before the model.
        consistency_on, squared, reduction: see :func:`dac_loss`.
        fixmatch: :class:`FixMatchSettings` to add the FixMatch loss (then ``unlabeled`` is
            required, with ``mu * B`` images, and ``weak``/``strong`` augmentations).

    Returns:
        The step function (not jitted; jit it once, e.g. ``jax.jit(step)``).

    Example:
        >>> graph, st = init_train_state(SmallCNN(10, rngs=nnx.Rngs(0)), make_optimizer())
        >>> step = jax.jit(make_train_step(graph, make_optimizer(), alpha=2,
        ...                                augment=random_shift_rotate))
        >>> st, m = step(st, jax.random.key(0), jnp.zeros((4, 8, 8, 1)),
        ...              jnp.zeros(4, jnp.int32), 1.0, True)
    """
    alpha = check_alpha(alpha)
    _check_choice("consistency_on", consistency_on, _CONSISTENCY_ON)
    _check_choice("reduction", reduction, _REDUCTIONS)
    if fixmatch is not None and (weak is None or strong is None):
        raise ValueError("fixmatch needs the weak and strong augmentations")

    def step(state: TrainState, key, images, labels, lam, dac, unlabeled=None):
        if fixmatch is not None and unlabeled is None:
            raise ValueError("unlabeled images are required with FixMatch")
        k = jax.random.fold_in(key, state.step)
        k_orig, k_aug, k_w, k_s = jax.random.split(k, 4)
        b = images.shape[0]
        x = images if originals_augment is None else originals_augment(k_orig, images)
        aug = jax.vmap(augment, in_axes=(0, None))(jax.random.split(k_aug, alpha), x)
        parts = [x[None], aug]
        if fixmatch is not None:
            parts += [weak(k_w, unlabeled)[None], strong(k_s, unlabeled)[None]]
            u = unlabeled.shape[0]
        batch = jnp.concatenate([p.reshape((-1,) + images.shape[1:]) for p in parts], 0)
        batch = normalize(batch)

        def loss_fn(params, model_state):
            logits, new_rest = apply_model(graph.train, params, model_state, batch)
            lo = logits[:b]
            la = logits[b:(1 + alpha) * b].reshape(alpha, b, -1)
            t_dac = dac_loss(lo, la, labels, lam, on=consistency_on, squared=squared,
                             reduction=reduction)
            t_erm = da_erm_loss(lo, la, labels, on=consistency_on, squared=squared)
            total = jnp.where(dac, t_dac.total, t_erm.total)
            aux = {"ce": jnp.where(dac, t_dac.ce, t_erm.ce), "consistency": t_dac.consistency,
                   "accuracy": jnp.mean(jnp.argmax(lo, -1) == labels)}
            if fixmatch is not None:
                off = (1 + alpha) * b
                lu, rate = fixmatch_loss(logits[off:off + u], logits[off + u:off + 2 * u],
                                         fixmatch.threshold, fixmatch.temperature)
                total = total + fixmatch.lambda_u * lu
                aux.update(unlabeled_loss=lu, mask_rate=rate)
            aux["loss"] = total
            return total, (new_rest, aux)

        grads, (new_rest, metrics) = jax.grad(loss_fn, has_aux=True)(state.params,
                                                                      state.model_state)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        return TrainState(state.step + 1, params, new_rest, opt_state), metrics

    return step


def make_eval_step(graph: ModelGraph, normalize: Callable[[Array], Array] = lambda x: x
                   ) -> Callable:
    """``eval_step(state, images, labels, mask) -> (correct, ce_sum)`` with BatchNorm in
    evaluation mode (running statistics); ``mask`` (bool, (B,)) drops padded rows."""

    def eval_step(state: TrainState, images, labels, mask):
        model = nnx.merge(graph.eval, state.params, state.model_state)
        logits = model(normalize(images))
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
        correct = (jnp.argmax(logits, -1) == labels) & mask
        return jnp.sum(correct), jnp.sum(jnp.where(mask, ce, 0.0))

    return eval_step


def evaluate(eval_step: Callable, state: TrainState, images: np.ndarray, labels: np.ndarray,
             batch_size: int = 500, to_float: Callable[[np.ndarray], np.ndarray] = None
             ) -> dict:
    """Test accuracy and mean cross-entropy over a whole (host) data set, in fixed-size
    batches (the last one padded and masked, so ``eval_step`` compiles once).

    ``to_float`` converts a host batch (e.g. uint8 CIFAR) to float images in [0, 1].
    """
    n = len(labels)
    check_int("batch_size", batch_size, low=1)
    bs = min(batch_size, n)
    correct, ce = 0, 0.0
    for s in range(0, n, bs):
        idx = np.arange(s, s + bs)
        mask = idx < n
        idx = np.minimum(idx, n - 1)
        x = images[idx]
        x = to_float(x) if to_float is not None else x
        c, l = eval_step(state, jnp.asarray(x), jnp.asarray(labels[idx]), jnp.asarray(mask))
        correct += int(c)
        ce += float(l)
    return {"accuracy": correct / n, "ce": ce / n, "n": n}


# --------------------------------------------------------------------------------------
# training loop
# --------------------------------------------------------------------------------------
class TrainResult(NamedTuple):
    """What :func:`train` returns.

    Attributes:
        state: the final :class:`TrainState`.
        graph: the :class:`ModelGraph` (``nnx.merge(graph.eval, state.params,
            state.model_state)`` gives the evaluation model).
        history: list of per-``log_every`` metric dicts (step, loss, ce, consistency, ...).
        test: final test metrics (accuracy, ce, n) or None without test data.
        resumed_from: the step a checkpoint was restored from (None for a fresh run).
    """

    state: TrainState
    graph: ModelGraph
    history: list
    test: Optional[dict]
    resumed_from: Optional[int]


def _cfg_get(cfg, name, default=None):
    try:
        return cfg[name]
    except (KeyError, AttributeError):
        return default


_STEP_KEYS = ("alpha", "base_lr", "lr_cycles", "total_steps", "momentum", "nesterov",
              "weight_decay", "augment", "weak_augment_originals", "normalize_mean",
              "normalize_std", "consistency_on", "squared", "reduction")
_JIT_CACHE: dict = {}


def _plain(v):
    if hasattr(v, "to_dict"):
        v = v.to_dict()
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _build_jitted(graph: ModelGraph, tx, alpha: int, cfg: dict, fm) -> tuple:
    mean, std = cfg["normalize_mean"], cfg["normalize_std"]
    if mean:
        mean_t, std_t = tuple(mean), tuple(std)
        norm = lambda x: normalize_images(x, mean_t, std_t)  # noqa: E731
    else:
        norm = lambda x: x  # noqa: E731
    orig_aug = weak_augment if cfg["weak_augment_originals"] else None
    strong = None
    if fm is not None:      # FixMatch's strong view: weak, then the configured augmentation
        base = build_augment(cfg["augment"])

        def weak_then_base(k, x):
            k1, k2 = jax.random.split(k)
            return base(k2, weak_augment(k1, x))
        strong = weak_then_base
    step_fn = make_train_step(
        graph, tx, alpha=alpha, augment=build_augment(cfg["augment"]),
        originals_augment=orig_aug, normalize=norm,
        consistency_on=cfg["consistency_on"] or "probs", squared=bool(cfg["squared"]),
        reduction=cfg["reduction"] or "mean", fixmatch=fm,
        weak=weak_augment if fm else None, strong=strong)
    # buffer donation saves memory on GPU/TPU; the CPU backend ignores it with a warning
    donate = (0,) if jax.default_backend() != "cpu" else ()
    return (jax.jit(step_fn, donate_argnums=donate), jax.jit(make_eval_step(graph, norm)),
            norm)


def train(config: Any, train_images: np.ndarray, train_labels: np.ndarray,
          test_images: Optional[np.ndarray] = None, test_labels: Optional[np.ndarray] = None,
          *, unlabeled_images: Optional[np.ndarray] = None, workdir: Optional[Path | str] = None,
          stop_after: Optional[int] = None, progress: bool = True,
          to_float: Optional[Callable[[np.ndarray], np.ndarray]] = None) -> TrainResult:
    """Train one DAC / DA-ERM (/ FixMatch + DAC) model with checkpoint/resume.

    The config (an ``ml_collections.ConfigDict`` from :mod:`rdr_jax.dac.configs`, or any
    mapping with the same fields) sets ``method`` (``"dac"``, ``"da_erm"``,
    ``"fixmatch_dac"``), ``lam``, ``alpha``, ``batch_size``, ``total_steps``, ``base_lr``,
    ``lr_cycles``, ``momentum``, ``nesterov``, ``weight_decay``, ``seed``, ``model`` (see
    :func:`build_model`), ``augment`` (see :func:`build_augment`), ``weak_augment_originals``,
    ``normalize_mean``/``normalize_std``, ``consistency_on``, ``squared``, ``reduction``,
    ``checkpoint_every``, ``log_every``, ``eval_batch_size`` and, for FixMatch, ``mu``,
    ``threshold``, ``temperature``, ``lambda_u``.

    Data: host arrays, labeled ``train_images`` (N, H, W, C) (float in [0, 1], or anything
    ``to_float`` maps there, e.g. uint8), ``train_labels`` (N,), optional test arrays and
    ``unlabeled_images``. Batches come from :class:`rdr_jax.dac.data.ArrayLoader` (epoch
    permutations from ``seed``), whose positions are checkpointed.

    Checkpoints (``workdir`` given): every ``checkpoint_every`` steps and at the end (or at
    ``stop_after``), orbax ``CheckpointManager`` in ``workdir/checkpoints`` saves the
    :class:`TrainState` and the loader positions and history; a later call with the same
    ``workdir`` resumes from the latest one. With ``stop_after = s`` the loop stops (and
    saves) after step ``s``, as if killed there. On CPU, resuming reproduces the
    uninterrupted run bitwise (the step is one jitted function of (state, key, batch) and
    the per-step key is ``fold_in(key, step)``).

    Returns:
        :class:`TrainResult`.
    """
    from tqdm import tqdm

    from rdr_jax.dac.data import ArrayLoader

    method = _cfg_get(config, "method", "dac")
    _check_choice("method", method, ("dac", "da_erm", "fixmatch_dac"))
    lam = float(check_lam(_cfg_get(config, "lam", 0.0)))
    alpha = check_alpha(_cfg_get(config, "alpha"))
    total_steps = check_int("total_steps", _cfg_get(config, "total_steps"), low=1)
    batch_size = check_int("batch_size", _cfg_get(config, "batch_size"), low=1)
    seed = int(_cfg_get(config, "seed", 0))
    if to_float is None:
        to_float = lambda a: np.asarray(a, np.float32)  # noqa: E731
    train_images = np.asarray(train_images)
    train_labels = np.asarray(train_labels)
    if train_images.ndim != 4 or len(train_images) != len(train_labels):
        raise ValueError("train_images must have shape (N, H, W, C) and train_labels (N,); got "
                         f"{train_images.shape} and {train_labels.shape}")

    schedule = cosine_schedule(float(_cfg_get(config, "base_lr", 0.03)), total_steps,
                               float(_cfg_get(config, "lr_cycles", 7 / 16)))
    tx = make_optimizer(schedule, momentum=float(_cfg_get(config, "momentum", 0.9)),
                        nesterov=bool(_cfg_get(config, "nesterov", True)),
                        weight_decay=float(_cfg_get(config, "weight_decay", 5e-4)))
    model = build_model(config.model if hasattr(config, "model") else config["model"],
                        seed=seed)
    graph, state = init_train_state(model, tx)
    del model

    fm = None
    if method == "fixmatch_dac":
        if unlabeled_images is None:
            raise ValueError("method 'fixmatch_dac' needs unlabeled_images")
        fm = FixMatchSettings(int(_cfg_get(config, "mu", 7)),
                              float(_cfg_get(config, "threshold", 0.95)),
                              float(_cfg_get(config, "temperature", 1.0)),
                              float(_cfg_get(config, "lambda_u", 1.0)))
    # The jitted step depends on the graph and these settings only (seed, lam and DAC/DA-ERM
    # are runtime values): runs in one process (seeds, lambda sweeps, resumes) share it.
    step_cfg = {k: _plain(_cfg_get(config, k)) for k in _STEP_KEYS}
    cache_key = (graph, json.dumps(step_cfg, sort_keys=True, default=str), fm)
    if cache_key not in _JIT_CACHE:
        _JIT_CACHE[cache_key] = _build_jitted(graph, tx, alpha, step_cfg, fm)
    jstep, jeval, norm = _JIT_CACHE[cache_key]
    key = jax.random.key(seed)
    step_key = jax.random.fold_in(key, 1)
    # commit the state to a device as restored checkpoints and step outputs are, so every
    # call of the jitted step sees the same argument signature (one compilation)
    device = jax.devices()[0]
    state = jax.device_put(state, device)

    labeled = ArrayLoader(train_images, train_labels, batch_size, seed=seed)
    unl = None
    if fm is not None:
        unl = ArrayLoader(unlabeled_images, np.zeros(len(unlabeled_images), np.int32),
                          fm.mu * batch_size, seed=seed + 1_000_003)

    history: list = []
    resumed_from = None
    ckpt_dir = Path(workdir) / "checkpoints" if workdir is not None else None
    if ckpt_dir is not None:
        got = restore_checkpoint(ckpt_dir, state)
        if got is not None:
            state, meta = got
            state = jax.device_put(state, device)
            labeled.load_state_dict(meta["loader"]["labeled"])
            if unl is not None:
                unl.load_state_dict(meta["loader"]["unlabeled"])
            history = list(meta.get("history", []))
            resumed_from = int(state.step)

    def meta_now():
        m = {"loader": {"labeled": labeled.state_dict()}, "history": history,
             "method": method, "lam": lam, "alpha": alpha}
        if unl is not None:
            m["loader"]["unlabeled"] = unl.state_dict()
        return m

    end = total_steps if stop_after is None else min(int(stop_after), total_steps)
    ckpt_every = int(_cfg_get(config, "checkpoint_every", 0) or 0)
    log_every = max(1, int(_cfg_get(config, "log_every", 100) or 100))
    lam_arr = jnp.asarray(lam, jnp.float32)
    dac_flag = jnp.asarray(method != "da_erm")
    start = int(state.step)
    bar = tqdm(total=end, initial=start, disable=not progress,
               desc=f"{method} lam={lam:g} alpha={alpha} seed={seed}")
    acc: dict = {}
    n_acc = 0
    for s in range(start, end):
        xb, yb = next(labeled)
        args = (state, step_key, jnp.asarray(to_float(xb)), jnp.asarray(yb, jnp.int32),
                lam_arr, dac_flag)
        if unl is not None:
            ub, _ = next(unl)
            args = args + (jnp.asarray(to_float(ub)),)
        state, metrics = jstep(*args)
        for k_, v in metrics.items():
            acc[k_] = acc.get(k_, 0.0) + v
        n_acc += 1
        if (s + 1) % log_every == 0 or s + 1 == end:
            row = {"step": s + 1, "lr": float(schedule(s))}
            row.update({k_: float(v) / n_acc for k_, v in acc.items()})
            history.append(row)
            acc, n_acc = {}, 0
            bar.set_postfix(loss=f"{row['loss']:.3f}", acc=f"{row['accuracy']:.2f}")
        if ckpt_dir is not None and ckpt_every and (s + 1) % ckpt_every == 0 and s + 1 < end:
            save_checkpoint(ckpt_dir, state, meta_now())
        bar.update(1)
    bar.close()
    if ckpt_dir is not None and end > start:
        save_checkpoint(ckpt_dir, state, meta_now())

    test = None
    if test_images is not None and int(state.step) == total_steps:
        test = evaluate(jeval, state, np.asarray(test_images), np.asarray(test_labels),
                        int(_cfg_get(config, "eval_batch_size", 500)), to_float)
    return TrainResult(state, graph, history, test, resumed_from)

