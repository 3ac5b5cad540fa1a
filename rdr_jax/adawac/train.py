"""AdaWAC and baseline training for segmentation (thesis ``ch:adawac``, ``alg:srw_dac``).

One jitted step per method trains a segmentation network ``x -> (logits, encoder features)``
on two independently augmented views of every slice of a mini-batch (``batch_two_views``).
With per-sample cross-entropy ``ce_i`` (supervised view, pixel-averaged), consistency
``cons_i = lambda * mean((phi(A_1 x_i) - phi(A_2 x_i))^2)`` and the batch dice loss, every
method minimises (thesis ``eq:objective_wac_dice`` with the reference weights 0.5/0.5)::

    L = 0.5 dice + 0.5 * 1/B sum_i [a_i ce_i + c_i cons_i]

with per-method row weights ``(a_i, c_i)`` (``sec:experiments_adawac``, ``tab:trim``,
``tab:ablation``):

=================  ===========================================  =========================
method             ``a_i``                                      ``c_i``
=================  ===========================================  =========================
``erm``            1 (TransUNet baseline: 0.5 ce + 0.5 dice)     0
``adawac``         ``beta_i`` (table, mirror ascent, eta > 0)    ``1 - beta_i``
``reweight-only``  ``beta_i`` (as adawac with lambda = 0)        ``1 - beta_i`` (cons = 0)
``acr-only``       ``beta_i = 1/2`` (as adawac with eta = 0)     ``1/2``
``pseudo-adawac``  ``1{slice has foreground}``                   ``1 - a_i``
``trim-train``     ``1{slice has foreground}``                   0
``trim-train+acr`` ``1{slice has foreground}``                   1
``trim-ratio``     1 for the ``B - floor(B (1 - r))`` largest     0
                   ``ce`` of the batch, else 0 (``r = 1280/2211``)
``trim-ratio+acr`` as trim-ratio                                 1
=================  ===========================================  =========================

**The beta step comes first** (``alg:srw_dac`` lines 5-9, implementation notes "Chapter 5"):
one forward pass at the current parameters gives ``(dice, ce, cons)`` and its VJP
(``jax.vjp``); the rows ``idx`` of the table move by entropic mirror ascent
``logit(beta_i) += eta (ce_i - cons_i)`` (:func:`rdr_jax.adawac.transform.beta_mirror_ascent`
on :func:`~rdr_jax.adawac.transform.beta_gradient`); then the cotangents
``(0.5, 0.5 a / B, 0.5 c / B)`` built from the *new* weights are pulled back through the VJP
to the parameter gradient. SGD (lr 0.01, momentum 0.9, weight decay 1e-4, optional poly
decay ``(1 - t/T)^0.9`` of the TransUNet trainer) updates the parameters.

Training-loop services come from the loop both chapters share (:func:`rdr_jax.training.fit`):
:func:`train` supplies the step, a two-view pair loader with an explicit position ``(epoch,
seed, offset)`` (:class:`PairLoader`; the permutation of epoch ``e`` is a function of ``(seed,
e)``) and a hook that snapshots the beta / CE / consistency tables once per epoch; ``fit``
jits the step once, shards the batch axis over a 1-D ``jax.sharding`` mesh (parameters,
optimizer state and the beta table replicated; no pmap), fetches the metrics once per
``log_every`` steps (no per-step host sync; ``workdir/metrics.jsonl``), checkpoints
everything that changes with orbax (parameters, BatchNorm statistics, optimizer and beta
states, the table, the last per-slice ``ce``/``cons``, step, loader position, the table
history), so that a killed and resumed run equals an uninterrupted one bit for bit on CPU,
and evaluates on test volumes at the end (:func:`evaluate`, DSC / HD95 via
:mod:`rdr_jax.adawac.metrics`).

Example:
    >>> import jax
    >>> from rdr_jax.adawac import configs, phantom_cases
    >>> from rdr_jax.adawac.train import train
    >>> cfg = configs.get_config("phantom_quick", quick=True)
    >>> data = phantom_cases(jax.random.key(0), 4, 8, 32)
    >>> res = train(cfg, data.train)                     # doctest: +SKIP
    >>> res.state.beta.shape                              # doctest: +SKIP
    (32,)
"""

from __future__ import annotations

import functools
import json
import math
import numbers
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jaxtyping import Array

from rdr_jax import models
from rdr_jax._src.validation import check_int
from rdr_jax.adawac.augment import batch_two_views
from rdr_jax.adawac.configs import TRIM_KEEP_RATIO
from rdr_jax.adawac.data import SliceDataset, VolumeDataset, has_foreground
from rdr_jax.adawac.losses import consistency, cross_entropy, dice_loss
from rdr_jax.adawac.metrics import aggregate_metrics, predict_volume, volume_metrics
from rdr_jax.adawac.transform import beta_gradient, beta_mirror_ascent, init_beta
from rdr_jax.models.tiny_segnet import TinySegNet
from rdr_jax.training import (LoopConfig, ModelGraph, TrainState, apply_gradients,
                              compute_dtype, eval_params, fit, init_train_state, make_mesh,
                              merge_apply, restore_checkpoint, save_checkpoint, sgd)

__all__ = ["METHODS", "MethodSpec", "TRIM_KEEP_RATIO", "TinySegNet", "PairLoader",
           "TrainState", "ModelGraph", "StepMetrics", "TrainResult", "method_spec",
           "validate_config", "build_model", "make_optimizer", "make_mesh", "init_state",
           "row_weights", "make_train_step", "settings_optimizer", "settings_step", "evaluate",
           "save_checkpoint", "restore_checkpoint", "train", "save_history", "history_json"]


class MethodSpec(NamedTuple):
    """How a method weighs ``ce`` and ``cons`` (see the module table).

    Attributes:
        name: canonical method name.
        ce_rows: ``"beta"`` (table rows), ``"one"``, ``"foreground"`` or ``"trim-ratio"``.
        cons_rows: ``"one-minus-beta"``, ``"zero"``, ``"one"`` or ``"background"``.
        update_beta: whether the table moves (mirror ascent with ``eta``).
        force_eta: eta fixed by the method (acr-only: 0) or None (from the config).
        force_lam: lambda fixed by the method (reweight-only: 0) or None.
    """

    name: str
    ce_rows: str
    cons_rows: str
    update_beta: bool
    force_eta: Optional[float] = None
    force_lam: Optional[float] = None

    @property
    def uses_consistency(self) -> bool:
        """Whether the encoder features of the second view are needed (second forward view)."""
        return self.cons_rows != "zero"


METHODS: dict[str, MethodSpec] = {
    "erm": MethodSpec("erm", "one", "zero", False),
    "adawac": MethodSpec("adawac", "beta", "one-minus-beta", True),
    "reweight-only": MethodSpec("reweight-only", "beta", "one-minus-beta", True, force_lam=0.0),
    "acr-only": MethodSpec("acr-only", "beta", "one-minus-beta", False, force_eta=0.0),
    "pseudo-adawac": MethodSpec("pseudo-adawac", "foreground", "background", False),
    "trim-train": MethodSpec("trim-train", "foreground", "zero", False),
    "trim-train+acr": MethodSpec("trim-train+acr", "foreground", "one", False),
    "trim-ratio": MethodSpec("trim-ratio", "trim-ratio", "zero", False),
    "trim-ratio+acr": MethodSpec("trim-ratio+acr", "trim-ratio", "one", False),
}
_ALIASES = {"baseline": "erm", "transunet": "erm", "ada-wac": "adawac",
            "pseudo": "pseudo-adawac", "reweight": "reweight-only", "acr": "acr-only"}


def method_spec(method: str) -> MethodSpec:
    """The :class:`MethodSpec` of ``method`` (case-insensitive, ``_`` for ``-`` accepted).

    Raises:
        ValueError: unknown method (the known ones are listed).

    Example:
        >>> method_spec("trim_train").cons_rows
        'zero'
    """
    if not isinstance(method, str):
        raise TypeError(f"method must be a string, one of {sorted(METHODS)}; got "
                        f"{type(method).__name__}")
    m = method.strip().lower().replace("_", "-")
    m = _ALIASES.get(m, m)
    if m not in METHODS:
        raise ValueError(f"unknown method {method!r}; known methods: {sorted(METHODS)}")
    return METHODS[m]


# ============================================================================ configuration


def _get(cfg: Any, path: str, default: Any = None) -> Any:
    """``cfg.a.b`` for ``path = "a.b"`` (ConfigDict, dict or object); ``default`` if absent."""
    cur = cfg
    for part in path.split("."):
        if isinstance(cur, dict):
            cur = cur.get(part)
        else:
            try:
                cur = getattr(cur, part)
            except (AttributeError, KeyError):
                cur = None
        if cur is None:
            return default
    return cur


def _real(name: str, value: Any, *, low: float = 0.0, strict: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number; got {type(value).__name__} {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < low or (strict and v == low):
        rel = ">" if strict else ">="
        raise ValueError(f"{name} must be a finite number {rel} {low}; got {value!r}")
    return v


class _Settings(NamedTuple):
    spec: MethodSpec
    eta: float
    lam: float
    batch_size: int
    lr: float
    momentum: float
    weight_decay: float
    schedule: str
    dice_weight: float
    wac_weight: float
    keep_ratio: float
    num_steps: int
    seed: int
    dtype: np.dtype = np.dtype(np.float32)


def validate_config(config: Any, *, num_examples: Optional[int] = None,
                    num_devices: int = 1) -> _Settings:
    """Check a training config (see :mod:`rdr_jax.adawac.configs`) and return its settings.

    Checks: ``method`` known; ``eta >= 0``; ``lam >= 0``; ``batch_size >= 1`` and divisible by
    ``num_devices`` (the batch axis is split evenly over the mesh); ``lr > 0``, ``momentum in
    [0, 1)``, ``weight_decay >= 0``; ``schedule in {"constant", "poly"}``; ``keep_ratio in (0,
    1]``; ``num_steps >= 1`` or ``epochs >= 1``; ``batch_size <= num_examples``; ``dtype``
    (the model's computation dtype) ``"float32"`` or ``"bfloat16"``.

    Raises:
        ValueError / TypeError: naming the offending field.

    Example:
        >>> from rdr_jax.adawac.configs import get_config
        >>> validate_config(get_config("phantom_quick"), num_examples=128).spec.name
        'adawac'
    """
    spec = method_spec(_get(config, "method", "adawac"))
    eta = _real("eta", _get(config, "eta", 0.0))
    lam = _real("lam", _get(config, "lam", 0.0))
    if spec.force_eta is not None:
        eta = spec.force_eta
    if spec.force_lam is not None:
        lam = spec.force_lam
    batch_size = check_int("batch_size", _get(config, "batch_size"), low=1)
    num_devices = check_int("num_devices", num_devices, low=1)
    if batch_size % num_devices:
        raise ValueError(f"batch_size ({batch_size}) must be divisible by the number of devices "
                         f"({num_devices}) for data parallelism over the batch axis")
    lr = _real("optim.lr", _get(config, "optim.lr", 0.01), strict=True)
    momentum = _real("optim.momentum", _get(config, "optim.momentum", 0.9))
    if momentum >= 1:
        raise ValueError(f"optim.momentum must lie in [0, 1); got {momentum}")
    wd = _real("optim.weight_decay", _get(config, "optim.weight_decay", 1e-4))
    schedule = _get(config, "optim.schedule", "constant")
    if schedule not in ("constant", "poly"):
        raise ValueError(f"optim.schedule must be 'constant' or 'poly'; got {schedule!r}")
    dice_w = _real("dice_weight", _get(config, "dice_weight", 0.5))
    wac_w = _real("wac_weight", _get(config, "wac_weight", 0.5))
    keep = _real("keep_ratio", _get(config, "keep_ratio", TRIM_KEEP_RATIO), strict=True)
    if keep > 1:
        raise ValueError(f"keep_ratio must lie in (0, 1]; got {keep}")
    seed = check_int("seed", _get(config, "seed", 0), low=0)
    dtype = compute_dtype(_get(config, "dtype", "float32"))
    num_steps = _get(config, "num_steps", 0)
    if num_steps:
        num_steps = check_int("num_steps", num_steps, low=1)
    else:
        epochs = check_int("epochs", _get(config, "epochs", 0), low=1)
        if num_examples is None:
            raise ValueError("config sets epochs but not num_steps: num_examples is needed")
        num_steps = epochs * (num_examples // batch_size)
    if num_examples is not None:
        num_examples = check_int("num_examples", num_examples, low=1)
        if batch_size > num_examples:
            raise ValueError(f"batch_size ({batch_size}) exceeds the number of training slices "
                             f"({num_examples})")
    return _Settings(spec, eta, lam, batch_size, lr, momentum, wd, schedule, dice_w, wac_w,
                     keep, num_steps, seed, dtype)


# ============================================================================ models


_MODELS = ("tiny", "unet", "transunet")


def settings_optimizer(st: "_Settings") -> optax.GradientTransformation:
    """The parameter optimizer of validated settings (:func:`validate_config`): SGD with the
    config's lr, momentum, weight decay and schedule over ``st.num_steps``."""
    return make_optimizer(st.lr, momentum=st.momentum, weight_decay=st.weight_decay,
                          schedule=st.schedule, num_steps=st.num_steps)


def build_model(config: Any, num_classes: int, *, image_size: int, seed: int = 0) -> nnx.Module:
    """The network named by ``config.model.name`` (``tiny``, ``unet``, ``transunet``), built
    by the model registry :func:`rdr_jax.models.build_model`; ``config.model.small`` picks
    the CPU-sized UNet / TransUNet (``.small``), ``model.width`` / ``model.depth`` size the
    tiny net. Parameters from ``nnx.Rngs(params=seed, dropout=seed + 1)``, in float32;
    ``config.dtype`` (``"float32"`` default, or ``"bfloat16"``) is the computation dtype
    (:func:`rdr_jax.training.compute_dtype`; the model returns float32 logits and features).

    Example:
        >>> from rdr_jax.adawac.configs import get_config
        >>> m = build_model(get_config("phantom_quick"), 9, image_size=32)
    """
    name = _get(config, "model.name", "tiny")
    if name not in _MODELS:
        raise ValueError(f"model.name must be one of {_MODELS}; got {name!r}")
    spec: dict = {"name": name, "num_classes": num_classes,
                  "dtype": compute_dtype(_get(config, "dtype", "float32"))}
    if name == "tiny":
        spec.update(width=int(_get(config, "model.width", 8)),
                    depth=int(_get(config, "model.depth", 2)))
    else:
        spec["small"] = bool(_get(config, "model.small", True))
        if name == "transunet":
            spec["img_size"] = image_size
    return models.build_model(spec, rngs=nnx.Rngs(params=seed, dropout=seed + 1))


def make_optimizer(lr: float = 0.01, *, momentum: float = 0.9, weight_decay: float = 1e-4,
                   schedule: str = "constant", num_steps: int = 1
                   ) -> optax.GradientTransformation:
    """SGD with momentum and coupled weight decay, as ``torch.optim.SGD`` (``app:imp``;
    :func:`rdr_jax.training.sgd`).

    ``g <- g + wd * theta`` then heavy-ball momentum; ``schedule="poly"`` gives the TransUNet
    trainer's ``lr (1 - t / T)^0.9``.

    Example:
        >>> tx = make_optimizer(0.01, schedule="poly", num_steps=100)
    """
    if schedule == "poly":
        T = max(1, int(num_steps))
        lr_fn = optax.polynomial_schedule(lr, 0.0, 0.9, T)
    else:
        lr_fn = lr
    return sgd(lr_fn, momentum=momentum, weight_decay=weight_decay)


# ============================================================================ data


class PairLoader:
    """Mini-batches of row indices with an explicit, checkpointable position.

    Epoch ``e`` visits the rows in the order ``default_rng([seed, e]).permutation(n)`` in
    consecutive chunks of ``batch_size``; an incomplete last chunk is dropped (fixed shapes,
    one compilation). The position is ``(epoch, offset)``; :meth:`state_dict` /
    :meth:`load_state_dict` save and restore it, so a resumed run sees the same batches.
    The two augmented views of each slice are drawn inside the train step from
    ``fold_in(key, step)``.

    Example:
        >>> ld = PairLoader(10, 4, seed=0)
        >>> len(ld.next_indices()), ld.state_dict()
        (4, {'epoch': 0, 'offset': 4, 'seed': 0})
    """

    def __init__(self, num_examples: int, batch_size: int, *, seed: int = 0, epoch: int = 0,
                 offset: int = 0):
        self.n = check_int("num_examples", num_examples, low=1)
        self.batch_size = check_int("batch_size", batch_size, low=1, high=self.n)
        self.seed = check_int("seed", seed, low=0)
        self.epoch = check_int("epoch", epoch, low=0)
        self.offset = check_int("offset", offset, low=0)

    @property
    def steps_per_epoch(self) -> int:
        return self.n // self.batch_size

    def permutation(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(self.n)

    def next_indices(self) -> np.ndarray:
        """The next batch's row indices (int32, ``(batch_size,)``); advances the position."""
        if self.offset + self.batch_size > self.n:
            self.epoch, self.offset = self.epoch + 1, 0
        idx = self.permutation(self.epoch)[self.offset:self.offset + self.batch_size]
        self.offset += self.batch_size
        return idx.astype(np.int32)

    def state_dict(self) -> dict:
        return {"epoch": int(self.epoch), "offset": int(self.offset), "seed": int(self.seed)}

    def load_state_dict(self, d: dict) -> None:
        if int(d["seed"]) != self.seed:
            raise ValueError(f"checkpointed loader seed {d['seed']} differs from {self.seed}")
        self.epoch, self.offset = int(d["epoch"]), int(d["offset"])


# ============================================================================ state and step


class StepMetrics(NamedTuple):
    """Per-step outputs: ``loss``, ``dice``, mean ``ce`` and ``cons`` (scalars); per-row
    ``ce_rows``, ``cons_rows``, weights ``a_rows`` (on ``ce``), ``c_rows`` (on ``cons``)."""

    loss: Array
    dice: Array
    ce: Array
    cons: Array
    ce_rows: Array
    cons_rows: Array
    a_rows: Array
    c_rows: Array


def init_state(model: nnx.Module, tx: optax.GradientTransformation, beta0: Array
               ) -> tuple[ModelGraph, TrainState]:
    """Split ``model`` into a :class:`ModelGraph` and an initial
    :class:`rdr_jax.training.TrainState` whose ``extra`` holds AdaWAC's tables (read as
    attributes, ``state.beta``):

    * ``beta``: ``(n,)`` weight table (adawac-family: in (0, 1), init 1/2; pseudo-adawac:
      ``1{foreground}``; other methods: 1/2, unused);
    * ``beta_state``: state of :func:`~rdr_jax.adawac.transform.beta_mirror_ascent`;
    * ``last_ce``, ``last_cons``: ``(n,)`` the per-slice ``ce``/``cons`` when each row was
      last in a batch (NaN before), for the beta/loss heatmaps.

    Example:
        >>> g, s = init_state(TinySegNet(3, rngs=nnx.Rngs(0)), make_optimizer(), init_beta(5))
        >>> s.beta.shape
        (5,)
    """
    beta0 = jnp.asarray(beta0)
    nan = jnp.full(beta0.shape, jnp.nan, jnp.result_type(beta0, jnp.float32))
    extra = {"beta": beta0,
             "beta_state": beta_mirror_ascent(0.0).init(jnp.full(beta0.shape, 0.5,
                                                                 beta0.dtype)),
             "last_ce": nan, "last_cons": jnp.array(nan, copy=True)}
    return init_train_state(model, tx, extra=extra)


def row_weights(spec: MethodSpec, beta_rows: Array, ce: Array, fg: Array,
                keep_ratio: float = TRIM_KEEP_RATIO) -> tuple[Array, Array]:
    """The per-row weights ``(a, c)`` on ``ce`` and ``cons`` of a method (module table).

    ``trim-ratio`` keeps the ``B - floor(B (1 - keep_ratio))`` rows with the largest ``ce``
    (ties broken by position) and zeroes the rest.

    Example:
        >>> a, c = row_weights(method_spec("trim-train"), jnp.full(2, .5), jnp.ones(2),
        ...                    jnp.array([True, False]))
        >>> a.tolist(), c.tolist()
        ([1.0, 0.0], [0.0, 0.0])
    """
    dt = jnp.result_type(ce, jnp.float32)
    b = ce.shape[0]
    fgf = fg.astype(dt)
    if spec.ce_rows == "beta":
        a = beta_rows.astype(dt)
    elif spec.ce_rows == "one":
        a = jnp.ones((b,), dt)
    elif spec.ce_rows == "foreground":
        a = fgf
    else:  # trim-ratio
        n_drop = int(math.floor(b * (1.0 - keep_ratio)))
        order = jnp.argsort(jax.lax.stop_gradient(ce), stable=True)  # ascending
        a = jnp.ones((b,), dt).at[order[:n_drop]].set(0.0)
    if spec.cons_rows == "one-minus-beta":
        c = 1 - beta_rows.astype(dt)
    elif spec.cons_rows == "zero":
        c = jnp.zeros((b,), dt)
    elif spec.cons_rows == "one":
        c = jnp.ones((b,), dt)
    else:  # background
        c = 1 - fgf
    return a, c


def make_train_step(graph: ModelGraph, tx: optax.GradientTransformation, spec: MethodSpec, *,
                    eta: float, lam: float, dice_weight: float = 0.5, wac_weight: float = 0.5,
                    keep_ratio: float = TRIM_KEEP_RATIO) -> Callable:
    """The pure train step of a method (``alg:srw_dac`` for the adawac family).

    ``step(state, key, images (B,H,W), labels (B,H,W), idx (B,), fg (B,)) -> (state,
    StepMetrics)``:

    1. ``k = fold_in(key, state.step)``; two views ``batch_two_views(k, images, labels)``;
    2. one forward pass (BatchNorm in training mode) over ``[view1; view2]`` (view 1 only when
       the method has no consistency term), ``(dice, ce, cons), vjp = jax.vjp(...)`` at the
       current parameters; ``ce`` and dice on view 1, ``cons = lam mean((z1 - z2)^2)``;
    3. (adawac family with ``eta > 0``) beta step on rows ``idx``: ``g = beta_gradient(ce,
       cons, idx, n)``, ``beta <- beta_mirror_ascent(eta)`` -- before the parameter step;
    4. weights ``(a, c) = row_weights(...)`` from the *new* table rows; cotangents
       ``(dice_weight, wac_weight a / B, wac_weight c / B)`` pulled back through ``vjp``;
       optax update of the parameters.

    Not jitted; :func:`rdr_jax.training.fit` jits it once with shardings.

    Example:
        >>> g, s = init_state(TinySegNet(9, rngs=nnx.Rngs(0)), make_optimizer(), init_beta(8))
        >>> step = jax.jit(make_train_step(g, make_optimizer(), method_spec("adawac"),
        ...                                eta=8.0, lam=2.0))
    """
    beta_tx = beta_mirror_ascent(float(eta))
    update_beta = spec.update_beta and eta > 0
    two = spec.uses_consistency

    def step(state: TrainState, key, images, labels, idx, fg):
        b = images.shape[0]
        k = jax.random.fold_in(key, state.step)
        views = batch_two_views(k, images, labels.astype(jnp.int32))
        x = (jnp.concatenate([views.image1, views.image2], 0) if two else views.image1)
        x = x[..., None]
        y = views.label1

        def terms(params):
            (logits, z), new_rest = merge_apply(graph.train, params, state.model_state, x)
            lg = logits[:b]
            dice = dice_loss(lg, y)
            ce = cross_entropy(lg, y)
            if two:
                cons = consistency(z[:b], z[b:], lam=lam)
            else:
                cons = jnp.zeros_like(ce)
            return (dice, ce, cons), new_rest

        (dice, ce, cons), vjp_fn, new_rest = jax.vjp(terms, state.params, has_aux=True)
        beta, beta_state = state.beta, state.beta_state
        if update_beta:
            g = beta_gradient(ce, cons, idx, beta.shape[0])
            upd, beta_state = beta_tx.update(g.astype(beta.dtype), beta_state, beta)
            beta = optax.apply_updates(beta, upd)
        a, c = row_weights(spec, beta[idx], ce, fg, keep_ratio)
        dt = ce.dtype
        dw = jnp.asarray(dice_weight, dt)
        ww = jnp.asarray(wac_weight, dt)
        loss = dw * dice + ww * jnp.mean(a * ce + c * cons)
        (grads,) = vjp_fn((jnp.ones_like(dice) * dw, ww * a / b, ww * c / b))
        extra = {"beta": beta, "beta_state": beta_state,
                 "last_ce": state.last_ce.at[idx].set(ce.astype(state.last_ce.dtype)),
                 "last_cons": state.last_cons.at[idx].set(cons.astype(state.last_cons.dtype))}
        new = apply_gradients(state, tx, grads, new_rest, extra)
        return new, StepMetrics(loss, dice, jnp.mean(ce), jnp.mean(cons), ce, cons, a, c)

    return step


# ============================================================================ evaluation


def evaluate(graph: ModelGraph, state: TrainState, volumes: VolumeDataset, num_classes: int,
             *, image_size: int, batch_size: int = 24,
             predict: Optional[Callable] = None) -> dict:
    """Mean DSC / HD95 over test volumes (``sec:experiments_adawac``; metrics module).

    Slices are resized to ``image_size`` (cubic), predicted in batches with BatchNorm in
    evaluation mode, resized back (nearest), scored per class on the 3-D mask, averaged over
    volumes then classes.

    Returns:
        ``{"dice", "hd95", "per_class_dice", "per_class_hd95", "per_volume_dice"}``.
    """
    if predict is None:
        predict = _jitted_predict(graph.eval)
    mets = []
    for vol, lab in zip(volumes.images, volumes.labels):
        pred = predict_volume(lambda xb: predict(state, jnp.asarray(xb)), vol, batch_size,
                              input_size=image_size)
        mets.append(volume_metrics(pred, lab, num_classes))
    s = aggregate_metrics(mets)
    return {"dice": s.dice, "hd95": s.hd95, "per_class_dice": s.per_class_dice.tolist(),
            "per_class_hd95": s.per_class_hd95.tolist(),
            "per_volume_dice": [float(np.mean(m.dice)) for m in mets]}


# ============================================================================ loop


class TrainResult(NamedTuple):
    """What :func:`train` returns.

    Attributes:
        state: final :class:`TrainState` (host-replicated arrays).
        graph: :class:`ModelGraph`.
        losses: per-step total losses of the steps run in this call (floats).
        history: per-epoch snapshots ``{"step", "epoch", "beta", "ce", "cons"}`` (lists over
            all rows of the table) plus the run's metadata, restored across resumes.
        test: test metrics of :func:`evaluate` or None.
        resumed_from: the step restored from a checkpoint (None for a fresh run).
        seconds_per_step: mean wall time of a step after the first (compilation) one,
            checkpoints and evaluation excluded.
    """

    state: TrainState
    graph: ModelGraph
    losses: list
    history: dict
    test: Optional[dict]
    resumed_from: Optional[int]
    seconds_per_step: float


@functools.lru_cache(maxsize=32)
def settings_step(graph: ModelGraph, st: _Settings) -> Callable:
    """The pure train step of validated settings (:func:`make_train_step` with
    :func:`settings_optimizer`); cached, so repeated :func:`train` calls with the same
    architecture and settings (resume, seeds: the key is an argument) share one function and
    :func:`rdr_jax.training.fit` compiles it once."""
    return make_train_step(graph, settings_optimizer(st), st.spec, eta=st.eta, lam=st.lam,
                           dice_weight=st.dice_weight, wac_weight=st.wac_weight,
                           keep_ratio=st.keep_ratio)


@functools.lru_cache(maxsize=8)
def _jitted_predict(graph_eval: Any) -> Callable:
    return jax.jit(lambda st, xb: nnx.merge(graph_eval, eval_params(st), st.model_state)(
        xb[..., None])[0])


def _initial_beta(spec: MethodSpec, fg: np.ndarray, dtype) -> Array:
    if spec.ce_rows == "foreground" and spec.cons_rows == "background":
        return jnp.asarray(fg, dtype)
    return init_beta(len(fg), dtype)


class _SliceBatches:
    """Batch source of :func:`train`: ``(images[idx], labels[idx], idx, fg[idx])`` for the
    rows ``idx`` of a :class:`PairLoader`, whose position is checkpointed."""

    def __init__(self, loader: PairLoader, images: np.ndarray, labels: np.ndarray,
                 fg: np.ndarray):
        self.loader, self.images, self.labels, self.fg = loader, images, labels, fg

    def next_batch(self) -> tuple:
        idx = self.loader.next_indices()
        return self.images[idx], self.labels[idx], idx, self.fg[idx]

    def state_dict(self) -> dict:
        return self.loader.state_dict()

    def load_state_dict(self, d: dict) -> None:
        self.loader.load_state_dict(d)


class _TableHistory:
    """``fit`` hook: snapshots of the beta / CE / consistency tables every ``every`` steps
    and at the last step. A snapshot is a device copy enqueued after the step (no host
    sync); the copies are fetched together when the history is read (checkpoints, end)."""

    def __init__(self, history: dict, loader: PairLoader, every: int, last: int):
        self.history, self.loader, self.every, self.last = history, loader, every, last
        self.queue: list = []

    def after_step(self, step: int, state: TrainState) -> None:
        if step % self.every == 0 or step == self.last:
            self.queue.append((step, int(self.loader.epoch),
                               jnp.stack([state.beta, state.last_ce, state.last_cons])))

    def state_dict(self) -> dict:
        if self.queue:
            tables = jax.device_get([q[2] for q in self.queue])
            for (step, epoch, _), tab in zip(self.queue, tables):
                tab = np.asarray(tab, np.float64)
                self.history["step"].append(step)
                self.history["epoch"].append(epoch)
                for name, row in zip(("beta", "ce", "cons"), tab):
                    self.history[name].append(row.tolist())
            self.queue = []
        return self.history

    def load_state_dict(self, d: dict) -> None:
        self.history.clear()
        self.history.update(d)
        self.queue = []


def _check_data(data: SliceDataset, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    images = np.asarray(data.images, np.float32)
    labels = np.asarray(data.labels).astype(np.int32)
    if images.ndim != 3 or images.shape[1] != images.shape[2]:
        raise ValueError(f"data.images must be (N, H, H) square slices; got {images.shape}")
    if labels.shape != images.shape:
        raise ValueError(f"data.labels must have the images' shape {images.shape}; got "
                         f"{labels.shape}")
    if not np.all(np.isfinite(images)):
        bad = np.flatnonzero(~np.isfinite(images).reshape(len(images), -1).all(axis=1))
        raise ValueError(f"data.images has non-finite values in {len(bad)} slice(s), e.g. "
                         f"{data.names[bad[0]] if len(data.names) else bad[0]}")
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"data.labels must lie in [0, num_classes) = [0, {num_classes}); got "
                         f"values in [{labels.min()}, {labels.max()}]")
    return images, labels


def train(config: Any, data: SliceDataset, *, test: Optional[VolumeDataset] = None,
          num_classes: int = 9, workdir: Optional[Path | str] = None,
          stop_after: Optional[int] = None, devices: Optional[Sequence[Any]] = None,
          progress: bool = False, history_every: Optional[int] = None) -> TrainResult:
    """Train ``config.method`` on ``data`` (``alg:srw_dac`` for AdaWAC; baselines otherwise).

    A thin wrapper of the shared loop :func:`rdr_jax.training.fit`: the step is
    :func:`settings_step`, batches come from a :class:`PairLoader`, the table history from a
    hook. With ``workdir`` the run checkpoints every ``config.checkpoint_every`` steps and
    at the end (orbax ``CheckpointManager`` in ``workdir/checkpoints``), writes its metrics
    every ``config.log_every`` steps to ``workdir/metrics.jsonl`` and resumes from the latest
    checkpoint found there; ``stop_after`` stops after that many total steps (simulating a
    kill), saving a checkpoint. Training data are placed on a 1-D mesh over ``devices`` with
    the batch axis sharded; the state is replicated.

    Args:
        config: a ConfigDict of :mod:`rdr_jax.adawac.configs`.
        data: training slices; images ``(N, H, W)`` with ``H = W`` divisible by 4 (or by the
            model's stride).
        test: optional test volumes evaluated at the end.
        num_classes: classes including background.
        workdir: checkpoint folder or None.
        stop_after: stop after this many total steps (< ``num_steps``).
        devices: devices of the mesh (default: all local devices).
        progress: show a tqdm progress bar.
        history_every: snapshot the table every this many steps (default: once per epoch).

    Returns:
        :class:`TrainResult`.

    Raises:
        ValueError / TypeError: invalid config (see :func:`validate_config`) or data (images
            not square, labels of another shape or outside ``[0, num_classes)``, non-finite
            images).
        FloatingPointError: a non-finite loss; training stops before that state is saved,
            so the last checkpoint in ``workdir`` stays the last good one (the message names
            its step).
    """
    mesh = make_mesh(devices)
    n = len(data.images)
    st = validate_config(config, num_examples=n, num_devices=mesh.size)
    images, labels = _check_data(data, num_classes)
    fg = has_foreground(data)
    size = images.shape[1]
    model = build_model(config, num_classes, image_size=size, seed=st.seed)
    graph, state = init_state(model, settings_optimizer(st),
                              _initial_beta(st.spec, fg, jnp.float32))
    loader = PairLoader(n, st.batch_size, seed=st.seed)
    history = {"step": [], "epoch": [], "beta": [], "ce": [], "cons": [],
               "has_foreground": fg.astype(int).tolist(), "names": list(data.names),
               "method": st.spec.name, "eta": st.eta, "lam": st.lam}
    every = check_int("history_every", history_every or loader.steps_per_epoch, low=1)
    tables = _TableHistory(history, loader, every, st.num_steps)
    if stop_after is not None:
        stop_after = check_int("stop_after", stop_after, low=0)
    loop = LoopConfig(num_steps=st.num_steps,
                      log_every=int(_get(config, "log_every", 0) or loader.steps_per_epoch),
                      checkpoint_every=int(_get(config, "checkpoint_every", 0) or 0),
                      workdir=workdir, stop_after=stop_after, progress=progress,
                      desc=f"{st.spec.name} (lr {st.lr:g})")
    evaluate_fn = None
    if test is not None:
        eval_bs = int(_get(config, "eval_batch_size", 8))

        def evaluate_fn(s):
            return evaluate(graph, s, test, num_classes, image_size=size, batch_size=eval_bs)
    res = fit(settings_step(graph, st._replace(seed=0)), state,
              _SliceBatches(loader, images, labels, fg), key=jax.random.key(st.seed),
              loop=loop, mesh=mesh, evaluate=evaluate_fn, hooks=(tables,))
    return TrainResult(jax.device_get(res.state), graph, res.losses, tables.state_dict(),
                       res.eval, res.resumed_from, res.seconds_per_step)


def save_history(path: Path | str, history: dict) -> Path:
    """Write the per-epoch ``beta``/``ce``/``cons`` tables (``(snapshots, n)``) and the
    per-slice ``has_foreground`` to ``path`` (``.npz``) for heatmaps."""
    path = Path(path)
    np.savez_compressed(path, step=np.asarray(history["step"]),
                        epoch=np.asarray(history["epoch"]),
                        beta=np.asarray(history["beta"], np.float64),
                        ce=np.asarray(history["ce"], np.float64),
                        cons=np.asarray(history["cons"], np.float64),
                        has_foreground=np.asarray(history["has_foreground"], bool),
                        names=np.asarray(history["names"]))
    return path


def history_json(history: dict) -> str:
    """The history as a JSON string (NaN written as null)."""
    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, list):
            return [clean(u) for u in v]
        return v
    return json.dumps({k: clean(v) for k, v in history.items()})
