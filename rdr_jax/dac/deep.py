"""Deep DAC vs DA-ERM training (thesis Section 4.7, Section B.6).

The losses (:func:`dac_loss`, :func:`da_erm_loss`, FixMatch's :func:`fixmatch_loss`), the
optimizer and schedule of the thesis, the augmentations, and a pure train step that
:func:`train` hands to the loop both chapters share, :func:`rdr_jax.training.fit`. Why: the
deep experiments compare the two objectives on one code path (``lam`` and the method are
traced: one compilation). Objectives and training details: ``docs/training.md`` ("Deep DAC").
"""

from __future__ import annotations

import functools
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

from rdr_jax._src.jit import jit
from rdr_jax import models
from rdr_jax._src.validation import check_int, check_key
from rdr_jax.dac.configs import BASE_LR, CIFAR100_MEAN, CIFAR100_STD, LR_CYCLES
from rdr_jax.models.small_cnn import SmallCNN
from rdr_jax.training import (LoopConfig, ModelGraph, TrainState, apply_gradients,
                              compute_dtype, eval_params, fit, init_train_state, make_mesh,
                              merge_apply, restore_checkpoint, save_checkpoint, sgd,
                              shard_batch, state_mesh)

__all__ = [
    "CIFAR100_MEAN",
    "CIFAR100_STD",
    "FixMatchSettings",
    "LossTerms",
    "ModelGraph",
    "SmallCNN",
    "StepInputs",
    "CellResult",
    "RUN_FIELDS",
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
    "train_runs",
    "weak_augment",
]

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
# losses (computed in at least float32, whatever the model's computation dtype)
# --------------------------------------------------------------------------------------
def _f32(x: Array) -> Array:
    """``x`` in at least float32 (bfloat16/float16 logits are upcast; float64 is kept)."""
    x = jnp.asarray(x)
    return x.astype(jnp.promote_types(x.dtype, jnp.float32))


class LossTerms(NamedTuple):
    """A training objective and its parts (scalars).

    Attributes:
        total: the differentiated objective.
        ce: mean cross-entropy over the samples the objective fits.
        consistency: mean ``rho(h(x_i), h(x_{i,j}))`` (in ``total`` for DAC only).
    """

    total: Float[Array, ""]
    ce: Float[Array, ""]
    consistency: Float[Array, ""]


def cross_entropy(logits: Float[Array, "b k"], labels: Int[Array, " b"]) -> Float[Array, ""]:
    """Mean cross-entropy ``-1/B sum_i log softmax(z_i)[y_i]`` (at least float32)."""
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(_f32(logits), labels))


def _safe_norm(sq: Array) -> Array:
    """sqrt with a zero (not NaN) gradient at 0."""
    pos = sq > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0)


def consistency_distances(logits_orig: Float[Array, "b k"], logits_aug: Float[Array, "a b k"],
                          *, on: str = "probs", squared: bool = False) -> Float[Array, "a b"]:
    """``rho(h(x_i), h(x_{i,j}))`` for every augmentation j and sample i
    (Eq. (4.1)): the l2 distance (``squared``: its square) of the softmax
    probabilities (``on="probs"``) or the logits.

    Args:
        logits_orig: ``(B, K)``; logits_aug: ``(alpha, B, K)`` (``[j, i]`` is ``x_{i,j}``).
        on: ``"probs"`` or ``"logits"``. squared: use the squared distance.

    Returns:
        ``(alpha, B)`` distances (zero gradient at distance 0).
    """
    _check_choice("on", on, _CONSISTENCY_ON)
    logits_orig, logits_aug = _f32(logits_orig), _f32(logits_aug)
    if on == "probs":
        u, v = jax.nn.softmax(logits_orig, -1), jax.nn.softmax(logits_aug, -1)
    else:
        u, v = logits_orig, logits_aug
    sq = jnp.sum((v - u[None]) ** 2, axis=-1)
    return sq if squared else _safe_norm(sq)


def da_erm_loss(logits_orig: Float[Array, "b k"], logits_aug: Float[Array, "a b k"],
                labels: Int[Array, " b"], *, on: str = "probs",
                squared: bool = False) -> LossTerms:
    """DA-ERM: mean cross-entropy over the originals and their ``alpha``
    augmentations (Section 4.3); the consistency is only monitored.

    Args:
        logits_orig: ``(B, K)``; logits_aug: ``(alpha, B, K)``; labels: ``(B,)``.
        on, squared: the monitored consistency (:func:`consistency_distances`).

    Returns:
        :class:`LossTerms` with ``total == ce``.
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
    """DAC: cross-entropy on the originals plus ``lam`` times the consistency
    (Eq. (4.1); ``reduction="mean"`` averages over the augmentations, ``"sum"`` sums).

    Args:
        logits_orig: ``(B, K)``; logits_aug: ``(alpha, B, K)``; labels: ``(B,)``.
        lam: lambda >= 0 (may be traced). on, squared: see :func:`consistency_distances`.
        reduction: ``"mean"`` or ``"sum"``.

    Returns:
        :class:`LossTerms`.

    Raises:
        ValueError: ``lam`` negative or non-finite, ``alpha = 0``, bad shapes or options.
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
    """FixMatch settings (Sohn et al. 2020): ``mu`` unlabeled batches per
    labeled batch, confidence ``threshold``, ``temperature``, weight ``lambda_u``.
    """

    mu: int = 7
    threshold: float = 0.95
    temperature: float = 1.0
    lambda_u: float = 1.0


def fixmatch_loss(logits_weak: Float[Array, "u k"], logits_strong: Float[Array, "u k"],
                  threshold: float = 0.95, temperature: float = 1.0
                  ) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """FixMatch's unlabeled loss (Table 4.5): cross-entropy of the
    strong view against confident pseudo-labels of the weak view.

    Args:
        logits_weak, logits_strong: ``(U, K)``. threshold: in (0, 1]. temperature: ``> 0``.

    Returns:
        ``(L_u, mask_rate)``, the fraction of pseudo-labels kept.
    """
    if logits_weak.shape != logits_strong.shape or logits_weak.ndim != 2:
        raise ValueError("logits_weak and logits_strong must both have shape (U, K); got "
                         f"{logits_weak.shape} and {logits_strong.shape}")
    logits_weak, logits_strong = _f32(logits_weak), _f32(logits_strong)
    q = jax.nn.softmax(jax.lax.stop_gradient(logits_weak) / temperature, -1)
    mask = (jnp.max(q, -1) >= threshold).astype(logits_strong.dtype)
    pseudo = jnp.argmax(q, -1)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits_strong, pseudo)
    return jnp.mean(ce * mask), jnp.mean(mask)


# --------------------------------------------------------------------------------------
# schedule and optimizer
# --------------------------------------------------------------------------------------
def cosine_schedule(base_lr: float = BASE_LR, total_steps: int = 2 ** 15,
                    num_cycles: float = LR_CYCLES) -> optax.Schedule:
    """``lr(i) = base_lr cos(pi num_cycles i / total_steps)`` (Section B.6: ``0.03 cos(7 pi i / (16 2^15))``).

    Raises:
        ValueError: ``base_lr <= 0``, or ``num_cycles`` outside ``[0, 1/2]`` (the rate would turn
            negative before the last step).
    """
    check_int("total_steps", total_steps, low=1)
    if not (isinstance(base_lr, numbers.Real) and base_lr > 0 and math.isfinite(base_lr)):
        raise ValueError(f"base_lr must be a finite number > 0; got {base_lr!r}")
    if not (isinstance(num_cycles, numbers.Real) and 0 <= num_cycles <= 0.5):
        raise ValueError("num_cycles must lie in [0, 1/2]: cos(pi * num_cycles * i / total_steps)"
                         f" turns negative before the last step otherwise; got {num_cycles!r}")

    def schedule(count):
        return base_lr * jnp.cos(jnp.pi * num_cycles * count / total_steps)

    return schedule


def _decay_mask(params):
    """Weight decay on kernels (ndim > 1) only: no decay on biases and BatchNorm scale/bias."""
    return jax.tree.map(lambda p: p.ndim > 1, params)


def make_optimizer(learning_rate: Any = None, *, momentum: float = 0.9, nesterov: bool = True,
                   weight_decay: float = 5e-4, ema_decay: float = 0.0
                   ) -> optax.GradientTransformation:
    """SGD with Nesterov momentum and coupled weight decay on the kernels, as the
    reference code (Section B.6; :func:`rdr_jax.training.sgd`).

    Args:
        learning_rate: a float or an optax schedule (default :func:`cosine_schedule`).
        momentum, nesterov, weight_decay: the SGD settings.
        ema_decay: keep a weight average for evaluation (FixMatch: 0.999; 0: none).
    """
    if learning_rate is None:
        learning_rate = cosine_schedule()
    return sgd(learning_rate, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay,
               decay_mask=_decay_mask, ema_decay=ema_decay)


# --------------------------------------------------------------------------------------
# models (rdr_jax.models)
# --------------------------------------------------------------------------------------
def build_model(model_cfg: Any, *, seed: int = 0, dtype: Any = None) -> nnx.Module:
    """The classifier a config names (``"wide_resnet"`` or ``"small_cnn"``), built by
    :func:`rdr_jax.models.build_model`; ``dtype`` is the computation dtype.
    """
    name = dict(model_cfg).get("name")
    if name not in ("small_cnn", "wide_resnet"):
        raise ValueError(f"model name must be 'small_cnn' or 'wide_resnet'; got {name!r}")
    if dtype is None:
        return models.build_model(model_cfg, seed=seed)
    spec = dict(model_cfg.to_dict() if hasattr(model_cfg, "to_dict") else model_cfg)
    return models.build_model({**spec, "dtype": compute_dtype(dtype)}, seed=seed)


# --------------------------------------------------------------------------------------
# augmentations (batched, JAX)
# --------------------------------------------------------------------------------------
def random_shift_rotate(key: jax.Array, images: Float[Array, "b h w c"], *,
                        max_shift: float = 1.0, max_angle: float = 15.0
                        ) -> Float[Array, "b h w c"]:
    """Random rotations (``U(-max_angle, max_angle)`` degrees) and shifts
    (``U(-max_shift, max_shift)`` pixels), bilinear with zero fill (label-preserving for
    digits).
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
    """FixMatch's weak augmentation: random horizontal flip and a random crop after
    reflect padding by ``int(pad_frac * H)`` pixels.
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
    """The batched augmentation ``(key, images) -> images`` a config names:
    ``"randaugment"``, ``"shift_rotate"``, ``"weak"`` or ``"weak+randaugment"``.
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
# the train step (state: rdr_jax.training.TrainState)
# --------------------------------------------------------------------------------------
def apply_model(graphdef: Any, params: Any, model_state: Any, x: Array) -> tuple[Array, Any]:
    """``(logits, new_model_state)`` of ``nnx.merge(graphdef, params, model_state)``
    on ``x`` (BatchNorm statistics updated in training mode).
    """
    return merge_apply(graphdef, params, model_state, x)


def _identity(x):
    return x


class StepInputs(NamedTuple):
    """How a DAC step prepares the model's inputs.

    Attributes:
        normalize: applied to every image batch (default: identity).
        originals_augment: optional augmentation of the labeled originals.
        fixmatch: :class:`FixMatchSettings` to add the FixMatch loss (needs ``weak``, ``strong``
            and ``mu * B`` unlabeled images).
        weak, strong: FixMatch's batched augmentations.
    """

    normalize: Callable[[Array], Array] = _identity
    originals_augment: Optional[Callable[[jax.Array, Array], Array]] = None
    fixmatch: Optional[FixMatchSettings] = None
    weak: Optional[Callable[[jax.Array, Array], Array]] = None
    strong: Optional[Callable[[jax.Array, Array], Array]] = None


def make_train_step(graph: ModelGraph, tx: optax.GradientTransformation, *, alpha: int,
                    augment: Callable[[jax.Array, Array], Array],
                    consistency_on: str = "probs", squared: bool = False,
                    reduction: str = "mean", inputs: StepInputs = StepInputs()) -> Callable:
    """The pure train step ``step(state, key, images, labels, lam, dac,
    unlabeled=None) -> (state, metrics)`` of DAC / DA-ERM (optionally + FixMatch).

    ``alpha`` augmentations of the batch, one forward pass over originals and augmentations,
    :func:`dac_loss` if ``dac`` else :func:`da_erm_loss` (both traced), an optax update.

    Args:
        graph: from :func:`rdr_jax.training.init_train_state`. tx: the optimizer.
        alpha: augmentations per sample (static). augment: ``(key, images) -> images``.
        consistency_on, squared, reduction: see :func:`dac_loss`.
        inputs: :class:`StepInputs`.

    Returns:
        The step (not jitted).
    """
    alpha = check_alpha(alpha)
    _check_choice("consistency_on", consistency_on, _CONSISTENCY_ON)
    _check_choice("reduction", reduction, _REDUCTIONS)
    fixmatch, normalize = inputs.fixmatch, inputs.normalize
    if fixmatch is not None and (inputs.weak is None or inputs.strong is None):
        raise ValueError("fixmatch needs the weak and strong augmentations")

    def step(state: TrainState, key, images, labels, lam, dac, unlabeled=None):
        if fixmatch is not None and unlabeled is None:
            raise ValueError("unlabeled images are required with FixMatch")
        k = jax.random.fold_in(key, state.step)
        k_orig, k_aug, k_w, k_s = jax.random.split(k, 4)
        b = images.shape[0]
        x = images if inputs.originals_augment is None else inputs.originals_augment(k_orig,
                                                                                     images)
        aug = jax.vmap(augment, in_axes=(0, None))(jax.random.split(k_aug, alpha), x)
        parts = [x[None], aug]
        if fixmatch is not None:
            parts += [inputs.weak(k_w, unlabeled)[None], inputs.strong(k_s, unlabeled)[None]]
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
        return apply_gradients(state, tx, grads, new_rest), metrics

    return step


def make_eval_step(graph: ModelGraph, normalize: Callable[[Array], Array] = _identity
                   ) -> Callable:
    """``eval_step(state, images, labels, mask) -> (correct, ce_sum, class_counts)`` with
    BatchNorm in evaluation mode and :func:`rdr_jax.training.eval_params`; ``mask`` drops
    padded rows; ``class_counts[k]`` counts the unmasked rows predicted as class ``k``.
    """

    def eval_step(state: TrainState, images, labels, mask):
        model = nnx.merge(graph.eval, eval_params(state), state.model_state)
        logits = _f32(model(normalize(images)))
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
        pred = jnp.argmax(logits, -1)
        correct = (pred == labels) & mask
        counts = jnp.sum(jax.nn.one_hot(pred, logits.shape[-1], dtype=jnp.int32)
                         * mask[:, None].astype(jnp.int32), axis=0)
        return jnp.sum(correct), jnp.sum(jnp.where(mask, ce, 0.0)), counts

    return eval_step


def evaluate(eval_step: Callable, state: TrainState, images: np.ndarray, labels: np.ndarray,
             batch_size: int = 500, to_float: Callable[[np.ndarray], np.ndarray] = None
             ) -> dict:
    """Test accuracy and mean cross-entropy over host arrays, in fixed-size batches
    (the last padded, so ``eval_step`` compiles once; split over the state's mesh).

    ``top_class_fraction`` is the share of the predictions that fall in the most frequently
    predicted class: 1 / K for balanced predictions, 1 for a model that predicts one class
    for every input (a collapsed run; non-finite logits also give 1, as argmax returns the
    first NaN).

    Returns:
        ``{"accuracy", "ce", "n", "top_class_fraction"}``.
    """
    n = len(labels)
    check_int("batch_size", batch_size, low=1)
    mesh = state_mesh(state)
    bs = min(batch_size, n)
    if mesh is not None:
        bs = -(-bs // mesh.size) * mesh.size
    sums = []
    for s in range(0, n, bs):
        idx = np.arange(s, s + bs)
        mask = idx < n
        idx = np.minimum(idx, n - 1)
        x = images[idx]
        x = to_float(x) if to_float is not None else x
        batch = (x, np.asarray(labels[idx]), mask)
        batch = shard_batch(mesh, batch) if mesh is not None else jax.tree.map(jnp.asarray,
                                                                               batch)
        sums.append(eval_step(state, *batch))
    sums = jax.device_get(sums)                    # one fetch; summed on the host in float64
    correct = sum(int(c) for c, _, _ in sums)
    ce = sum(float(l) for _, l, _ in sums)
    counts = np.sum([np.asarray(k, np.int64) for _, _, k in sums], axis=0)
    return {"accuracy": correct / n, "ce": ce / n, "n": n,
            "top_class_fraction": float(counts.max()) / n}


# --------------------------------------------------------------------------------------
# training: a thin wrapper of rdr_jax.training.fit
# --------------------------------------------------------------------------------------
class TrainResult(NamedTuple):
    """What :func:`train` returns.

    Attributes:
        state: the final :class:`~rdr_jax.training.TrainState`. graph: its ModelGraph.
        history: the logged metric rows. test: final test metrics or None.
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
              "weight_decay", "ema_decay", "augment", "weak_augment_originals",
              "normalize_mean", "normalize_std", "consistency_on", "squared", "reduction",
              "strong_cutout")
_JIT_CACHE: dict = {}


def _plain(v):
    if hasattr(v, "to_dict"):
        v = v.to_dict()
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _config_schedule(cfg: Any, total_steps: int) -> optax.Schedule:
    """The cosine schedule of a config (``base_lr``, ``lr_cycles``; unset: the thesis')."""
    base_lr, cycles = _cfg_get(cfg, "base_lr"), _cfg_get(cfg, "lr_cycles")
    return cosine_schedule(BASE_LR if base_lr is None else float(base_lr), total_steps,
                           LR_CYCLES if cycles is None else float(cycles))


def _weak_augment(cfg: dict) -> Callable[[jax.Array, Array], Array]:
    """FixMatch's weak view (also used for the originals): :func:`weak_augment`, without the
    horizontal flip when the config says ``weak_flip = False`` (digits change under a flip)."""
    return functools.partial(weak_augment, flip=bool(cfg.get("weak_flip", True)))


def _strong_augment(cfg: dict) -> Callable[[jax.Array, Array], Array]:
    """FixMatch's strong view: weak, the configured augmentation, Cutout."""
    from rdr_jax.dac.randaugment import cutout_batch
    base = build_augment(cfg["augment"])
    weak = _weak_augment(cfg)
    size = 0.5 if cfg["strong_cutout"] is None else float(cfg["strong_cutout"])
    if not 0.0 <= size <= 1.0:
        raise ValueError(f"strong_cutout must lie in [0, 1] (0: no Cutout); got {size}")

    def strong(k, x):
        k1, k2, k3 = jax.random.split(k, 3)
        y = base(k2, weak(k1, x))
        return cutout_batch(k3, y, size) if size > 0 else y
    return strong


def _build_step(graph: ModelGraph, tx, alpha: int, cfg: dict, fm) -> tuple:
    """``(step, jitted eval step)``; ``step`` adds the learning rate to the metrics."""
    mean, std = cfg["normalize_mean"], cfg["normalize_std"]
    norm = _identity
    if mean:
        mean_t, std_t = tuple(mean), tuple(std)
        norm = functools.partial(normalize_images, mean=mean_t, std=std_t)
    weak = _weak_augment(cfg)
    inputs = StepInputs(normalize=norm,
                        originals_augment=weak if cfg["weak_augment_originals"] else None,
                        fixmatch=fm, weak=weak if fm else None,
                        strong=_strong_augment(cfg) if fm else None)
    base = make_train_step(graph, tx, alpha=alpha, augment=build_augment(cfg["augment"]),
                           consistency_on=cfg["consistency_on"] or "probs",
                           squared=bool(cfg["squared"]), reduction=cfg["reduction"] or "mean",
                           inputs=inputs)
    schedule = _config_schedule(cfg, int(cfg["total_steps"]))

    def step(state, key, *batch):
        new, metrics = base(state, key, *batch)
        return new, {**metrics, "lr": schedule(state.step)}

    return step, jit(make_eval_step(graph, norm), fast_cpu_compile=False)


class _DacBatches:
    """Batch source of :func:`train`: ``(images, labels, lam, dac[, unlabeled])``."""

    def __init__(self, labeled, unlabeled, to_float, lam: float, dac: bool):
        self.labeled, self.unlabeled, self.to_float = labeled, unlabeled, to_float
        self.consts = (np.float32(lam), np.bool_(dac))

    def next_batch(self) -> tuple:
        xb, yb = next(self.labeled)
        out = (self.to_float(xb), np.asarray(yb, np.int32)) + self.consts
        if self.unlabeled is not None:
            out += (self.to_float(next(self.unlabeled)[0]),)
        return out

    def state_dict(self) -> dict:
        d = {"labeled": self.labeled.state_dict()}
        if self.unlabeled is not None:
            d["unlabeled"] = self.unlabeled.state_dict()
        return d

    def load_state_dict(self, d: dict) -> None:
        self.labeled.load_state_dict(d["labeled"])
        if self.unlabeled is not None:
            self.unlabeled.load_state_dict(d["unlabeled"])


def _settings(config: Any) -> dict:
    """Validated run settings of a config."""
    method = _cfg_get(config, "method", "dac")
    _check_choice("method", method, ("dac", "da_erm", "fixmatch_dac"))
    num_devices = check_int("num_devices", int(_cfg_get(config, "num_devices", 0) or 0),
                            low=0, high=len(jax.local_devices()),
                            high_desc="the number of local devices")
    fm = None
    if method == "fixmatch_dac":
        fm = FixMatchSettings(int(_cfg_get(config, "mu", 7)),
                              float(_cfg_get(config, "threshold", 0.95)),
                              float(_cfg_get(config, "temperature", 1.0)),
                              float(_cfg_get(config, "lambda_u", 1.0)))
    return {"method": method, "lam": float(check_lam(_cfg_get(config, "lam", 0.0))),
            "alpha": check_alpha(_cfg_get(config, "alpha")),
            "total_steps": check_int("total_steps", _cfg_get(config, "total_steps"), low=1),
            "batch_size": check_int("batch_size", _cfg_get(config, "batch_size"), low=1),
            "seed": int(_cfg_get(config, "seed", 0)),
            "ema_decay": float(_cfg_get(config, "ema_decay", 0.0) or 0.0),
            "dtype": compute_dtype(_cfg_get(config, "dtype", "float32")),
            "devices": jax.local_devices()[:num_devices] if num_devices else None, "fm": fm}


def _check_train_arrays(train_images, train_labels) -> tuple[np.ndarray, np.ndarray]:
    train_images = np.asarray(train_images)
    train_labels = np.asarray(train_labels)
    if train_images.ndim != 4 or len(train_images) != len(train_labels):
        raise ValueError("train_images must have shape (N, H, W, C) and train_labels (N,); got "
                         f"{train_images.shape} and {train_labels.shape}")
    return train_images, train_labels


def _default_to_float(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, np.float32)


def _optimizer(config: Any, st: dict) -> optax.GradientTransformation:
    return make_optimizer(_config_schedule(config, st["total_steps"]),
                          momentum=float(_cfg_get(config, "momentum", 0.9)),
                          nesterov=bool(_cfg_get(config, "nesterov", True)),
                          weight_decay=float(_cfg_get(config, "weight_decay", 5e-4)),
                          ema_decay=st["ema_decay"])


def _model_state(config: Any, st: dict, tx) -> tuple[ModelGraph, TrainState]:
    model = build_model(config.model if hasattr(config, "model") else config["model"],
                        seed=st["seed"], dtype=st["dtype"])
    return init_train_state(model, tx)


def _cached_step(config: Any, graph: ModelGraph, tx, st: dict) -> tuple:
    """The step and jitted eval step of a config: they depend on the graph and the step
    settings only (seed, lam and DAC/DA-ERM are runtime values), so runs in one process (seeds,
    lambda sweeps, resumes) share them and compile them once."""
    step_cfg = {k: _plain(_cfg_get(config, k)) for k in _STEP_KEYS}
    cache_key = (graph, json.dumps(step_cfg, sort_keys=True, default=str), st["fm"])
    if cache_key not in _JIT_CACHE:
        _JIT_CACHE[cache_key] = _build_step(graph, tx, st["alpha"], step_cfg, st["fm"])
    return _JIT_CACHE[cache_key]


def _batch_source(st: dict, images: np.ndarray, labels: np.ndarray, unlabeled_images,
                  to_float) -> "_DacBatches":
    from rdr_jax.dac.data import ArrayLoader
    fm, seed, bs = st["fm"], st["seed"], st["batch_size"]
    unl = None if fm is None else ArrayLoader(
        unlabeled_images, np.zeros(len(unlabeled_images), np.int32), fm.mu * bs,
        seed=seed + 1_000_003)
    return _DacBatches(ArrayLoader(images, labels, bs, seed=seed), unl, to_float, st["lam"],
                       st["method"] != "da_erm")


def _run_key(st: dict) -> jax.Array:
    return jax.random.fold_in(jax.random.key(st["seed"]), 1)


def _evaluator(config: Any, jeval: Callable, test: Optional[tuple], to_float) -> Optional[
        Callable]:
    if test is None or test[0] is None:
        return None
    test_x, test_y = np.asarray(test[0]), np.asarray(test[1])
    eval_bs = int(_cfg_get(config, "eval_batch_size", 500))
    return lambda s: evaluate(jeval, s, test_x, test_y, eval_bs, to_float)


def train(config: Any, data: tuple, *, test: Optional[tuple] = None,
          unlabeled_images: Optional[np.ndarray] = None, workdir: Optional[Path | str] = None,
          stop_after: Optional[int] = None, progress: bool = True,
          to_float: Optional[Callable[[np.ndarray], np.ndarray]] = None) -> TrainResult:
    """Train one DAC / DA-ERM / FixMatch + DAC model with checkpoint/resume: builds the
    model, optimizer and :func:`make_train_step` from ``config`` and runs
    :func:`rdr_jax.training.fit`.

    Args:
        config: a config of :mod:`rdr_jax.dac.configs` (or a mapping with its fields).
        data: ``(train_images, train_labels)``, host arrays ``(N, H, W, C)`` and ``(N,)``
            (as for :func:`train_runs`). test: ``(test_images, test_labels)`` or None.
            unlabeled_images: FixMatch's pool.
        workdir: checkpoints and ``metrics.jsonl`` (a later call resumes). stop_after: stop
            (and save) after this step. progress: tqdm bar. to_float: host batch -> [0, 1].

    Returns:
        :class:`TrainResult` (a resumed run is bitwise equal to an uninterrupted one on CPU).
    """
    st = _settings(config)
    to_float = _default_to_float if to_float is None else to_float
    train_images, train_labels = _check_train_arrays(*_pair("data", data))
    test = None if test is None else _pair("test", test)
    if st["fm"] is not None and unlabeled_images is None:
        raise ValueError("method 'fixmatch_dac' needs unlabeled_images")
    mesh = make_mesh(st["devices"])
    if st["batch_size"] % mesh.size:
        raise ValueError(f"batch_size ({st['batch_size']}) must be divisible by the number of "
                         f"devices ({mesh.size}) for data parallelism over the batch axis "
                         f"(set num_devices)")
    tx = _optimizer(config, st)
    graph, state = _model_state(config, st, tx)
    step, jeval = _cached_step(config, graph, tx, st)
    batches = _batch_source(st, train_images, train_labels, unlabeled_images, to_float)
    loop = LoopConfig(num_steps=st["total_steps"],
                      log_every=max(1, int(_cfg_get(config, "log_every", 100) or 100)),
                      checkpoint_every=int(_cfg_get(config, "checkpoint_every", 0) or 0),
                      workdir=workdir, stop_after=stop_after, progress=progress,
                      desc=_run_desc(st))
    res = fit(step, state, batches, key=_run_key(st), loop=loop, mesh=mesh,
              evaluate=_evaluator(config, jeval, test, to_float))
    return TrainResult(res.state, graph, res.history, res.eval, res.resumed_from)


def _pair(name: str, value: Any) -> tuple:
    """``(images, labels)`` from a 2-sequence; a clear TypeError otherwise."""
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return tuple(value)
    raise TypeError(f"{name} must be a pair (images, labels); got {type(value).__name__}"
                    + (f" of length {len(value)}" if isinstance(value, (tuple, list)) else ""))


def _run_desc(st: dict) -> str:
    return f"{st['method']} lam={st['lam']:g} alpha={st['alpha']} seed={st['seed']}"


class CellResult(NamedTuple):
    """What :func:`train_runs` returns.

    Attributes:
        runs: one :class:`TrainResult` per run (``resumed_from`` None). diverged: per run, the
            first step with a non-finite loss or None. batching: ``"vmap"`` / ``"sequential"``.
        first_step_seconds: first step, compilation included. seconds_per_step: the others.
    """

    runs: list
    diverged: tuple
    batching: str
    first_step_seconds: float
    seconds_per_step: float


#: the settings a run of :func:`train_runs` may change; the others shape the shared step
RUN_FIELDS = ("seed", "lam", "method")


def _run_config(config: Any, run: Any) -> dict:
    if not isinstance(run, dict) or not set(run) <= set(RUN_FIELDS):
        raise ValueError(f"each run must be a dict with keys among {RUN_FIELDS}; got {run!r}")
    cfg = _plain(config) if not isinstance(config, dict) else dict(config)
    cfg.update(run)
    return cfg


def train_runs(config: Any, runs: Any, data: tuple, *, test: Optional[tuple] = None,
               unlabeled_images: Optional[np.ndarray] = None, progress: bool = False,
               batching: str = "auto",
               to_float: Optional[Callable[[np.ndarray], np.ndarray]] = None) -> CellResult:
    """Train the runs of one table cell (seeds, and a lambda grid: DAC and DA-ERM share the
    step) as one program with :func:`rdr_jax.training.fit_runs`; run ``r`` computes what
    :func:`train` computes for ``config`` updated with ``runs[r]``, up to the order of sums.

    Args:
        config: as for :func:`train`. runs: dicts of :data:`RUN_FIELDS` (``seed``, ``lam``,
            ``method``: ``dac`` / ``da_erm``; FixMatch runs are all ``fixmatch_dac``).
        data: ``(train_images, train_labels)``. test: ``(test_images, test_labels)`` or None.
        unlabeled_images: FixMatch's pool. progress: tqdm bar. to_float: host batch -> [0, 1].
        batching: ``"auto"`` / ``"vmap"`` / ``"sequential"`` (:func:`rdr_jax.training.fit_runs`).

    Returns:
        :class:`CellResult` (a diverged run is not evaluated: its ``test`` is None). No
        checkpoints: a long run that must resume uses :func:`train`.
    """
    from rdr_jax.training import fit_runs

    runs = list(runs)
    if not runs:
        raise ValueError("runs must name at least one run")
    cfgs = [_run_config(config, r) for r in runs]
    sts = [_settings(c) for c in cfgs]
    shared = ("alpha", "total_steps", "batch_size", "ema_decay", "dtype", "fm")
    for r, st in enumerate(sts[1:], 1):
        diff = [k for k in shared if st[k] != sts[0][k]] + (
            ["method"] if (st["fm"] is None) != (sts[0]["fm"] is None) else [])
        if diff:
            raise ValueError(f"run {r} differs from run 0 in {diff}; the runs of one cell "
                             f"share the step (only {RUN_FIELDS} may differ)")
    if sts[0]["fm"] is not None and unlabeled_images is None:
        raise ValueError("method 'fixmatch_dac' needs unlabeled_images")
    to_float = _default_to_float if to_float is None else to_float
    images, labels = _check_train_arrays(*data)
    tx = _optimizer(config, sts[0])
    built = [_model_state(c, st, tx) for c, st in zip(cfgs, sts)]
    graph = built[0][0]
    step, jeval = _cached_step(cfgs[0], graph, tx, sts[0])
    loop = LoopConfig(num_steps=sts[0]["total_steps"],
                      log_every=max(1, int(_cfg_get(config, "log_every", 100) or 100)),
                      progress=progress, desc=f"{len(runs)} runs ({_run_desc(sts[0])}, ...)")
    res = fit_runs(step, [b[1] for b in built],
                   [_batch_source(st, images, labels, unlabeled_images, to_float)
                    for st in sts], keys=[_run_key(st) for st in sts], loop=loop,
                   batching=batching)
    ev = _evaluator(config, jeval, test, to_float)
    out = [TrainResult(s, graph, h, None if ev is None or bad is not None else ev(s), None)
           for s, h, bad in zip(res.states, res.history, res.diverged)]
    return CellResult(out, res.diverged, res.batching, res.first_step_seconds,
                      res.seconds_per_step)
