"""AdaWAC and baseline training for segmentation (thesis Ch. 5, Algorithm 6).

Every method minimises ``0.5 dice + 0.5 * 1/B sum_i [a_i ce_i + c_i cons_i]`` on two augmented
views per slice, with per-method row weights ``(a_i, c_i)`` (:data:`METHODS`; AdaWAC:
``beta_i`` and ``1 - beta_i``, updated by mirror ascent *before* the parameter step). The step
runs on the loop both chapters share, :func:`rdr_jax.training.fit` (one compilation,
data-parallel, checkpoint/resume bitwise on CPU). Why: AdaWAC and the baselines of
Table 5.2 / 5.4 on one code path. Method table and step order:
``docs/training.md`` ("AdaWAC training").
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

from rdr_jax._src.jit import jit
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
           "save_checkpoint", "restore_checkpoint", "train", "train_runs", "SeedsResult",
           "save_history", "history_json"]


class MethodSpec(NamedTuple):
    """How a method weighs ``ce`` and ``cons``.

    Attributes:
        name: canonical name. ce_rows: ``"beta"``, ``"one"``, ``"foreground"``, ``"trim-ratio"``.
        cons_rows: ``"one-minus-beta"``, ``"zero"``, ``"one"`` or ``"background"``.
        update_beta: whether the table moves. force_eta, force_lam: values fixed by the method.
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
    """The :class:`MethodSpec` of ``method`` (case-insensitive, ``_`` for ``-``,
    aliases such as ``baseline``); ValueError for an unknown one.
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
    """Check a training config (:mod:`rdr_jax.adawac.configs`) and return its
    settings; ``batch_size`` must divide over ``num_devices`` and fit ``num_examples``.

    Raises:
        ValueError / TypeError: naming the offending field.
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
    """The parameter optimizer of validated settings (SGD, schedule over
    ``num_steps``).
    """
    return make_optimizer(st.lr, momentum=st.momentum, weight_decay=st.weight_decay,
                          schedule=st.schedule, num_steps=st.num_steps)


def build_model(config: Any, num_classes: int, *, image_size: int, seed: int = 0) -> nnx.Module:
    """The network ``config.model.name`` names (``tiny``, ``unet``, ``transunet``;
    ``model.small``: the CPU-sized variant), in the config's computation dtype.
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
    """SGD with momentum and coupled weight decay, as ``torch.optim.SGD``
    (Section C.4); ``schedule="poly"``: the TransUNet trainer's ``lr (1 - t/T)^0.9``.
    """
    if schedule == "poly":
        T = max(1, int(num_steps))
        lr_fn = optax.polynomial_schedule(lr, 0.0, 0.9, T)
    else:
        lr_fn = lr
    return sgd(lr_fn, momentum=momentum, weight_decay=weight_decay)


# ============================================================================ data


class PairLoader:
    """Mini-batches of row indices with a checkpointable position ``(epoch,
    offset)``; epoch ``e`` permutes the rows with ``default_rng([seed, e])`` and drops the last
    incomplete batch.
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
    """Per-step outputs: ``loss``, ``dice``, mean ``ce`` and ``cons``, and the rows'
    ``ce_rows``, ``cons_rows`` and weights ``a_rows``, ``c_rows``.
    """

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
    """Split ``model`` into a :class:`ModelGraph` and a
    :class:`rdr_jax.training.TrainState` whose ``extra`` holds AdaWAC's ``beta`` table, its
    ``beta_state`` and the last per-slice ``last_ce`` / ``last_cons`` (NaN until seen).
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
    """The per-row weights ``(a, c)`` of a method (``trim-ratio`` keeps the rows
    with the largest ``ce``).
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
    """The pure train step ``step(state, key, images, labels, idx, fg) ->
    (state, StepMetrics)`` of a method: two views, one forward pass and its VJP, the beta step on
    rows ``idx`` (adawac family, ``eta > 0``), then the parameter update with the *new* weights.

    Args:
        graph, tx: from :func:`init_state` and the optimizer. spec: :class:`MethodSpec`.
        eta, lam: beta step size and consistency scale.
        dice_weight, wac_weight, keep_ratio: objective weights and the trim-ratio fraction.

    Returns:
        The step (not jitted).
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
    """Mean DSC / HD95 over test volumes (:mod:`rdr_jax.adawac.metrics`).

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
        state: final TrainState. graph: ModelGraph. losses: per-step losses of this call.
        history: per-epoch ``beta`` / ``ce`` / ``cons`` snapshots and run metadata.
        test: metrics of :func:`evaluate` or None. resumed_from: restored step or None.
        seconds_per_step: mean step time after the first.
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
    """The train step of validated settings, cached so repeated :func:`train`
    calls share one compilation.
    """
    return make_train_step(graph, settings_optimizer(st), st.spec, eta=st.eta, lam=st.lam,
                           dice_weight=st.dice_weight, wac_weight=st.wac_weight,
                           keep_ratio=st.keep_ratio)


@functools.lru_cache(maxsize=8)
def _jitted_predict(graph_eval: Any) -> Callable:
    return jit(lambda st, xb: nnx.merge(graph_eval, eval_params(st), st.model_state)(
        xb[..., None])[0], fast_cpu_compile=False)


def _initial_beta(spec: MethodSpec, fg: np.ndarray, dtype) -> Array:
    if spec.ce_rows == "foreground" and spec.cons_rows == "background":
        return jnp.asarray(fg, dtype)
    return init_beta(len(fg), dtype)


class _SliceBatches:
    """Batch source of :func:`train`: ``(images, labels, idx, fg)`` of a
    :class:`PairLoader` batch.
    """

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
    """``fit`` hook: device snapshots of the beta / CE / consistency tables,
    fetched when the history is read.
    """

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


class _Setup(NamedTuple):
    st: _Settings
    images: np.ndarray
    labels: np.ndarray
    fg: np.ndarray
    history_every: Optional[int]


def _setup(config: Any, data: SliceDataset, num_classes: int, num_devices: int,
           history_every: Optional[int]) -> _Setup:
    st = validate_config(config, num_examples=len(data.images), num_devices=num_devices)
    images, labels = _check_data(data, num_classes)
    if history_every:   # None or 0: once per epoch
        history_every = check_int("history_every", history_every, low=1)
    return _Setup(st, images, labels, has_foreground(data), history_every)


def _seed_run(config: Any, setup: _Setup, data: SliceDataset, num_classes: int,
              seed: int) -> tuple:
    """``(graph, state, loader, tables hook)`` of one seed (model, data order and history)."""
    st = setup.st
    model = build_model(config, num_classes, image_size=setup.images.shape[1], seed=seed)
    graph, state = init_state(model, settings_optimizer(st),
                              _initial_beta(st.spec, setup.fg, jnp.float32))
    loader = PairLoader(len(setup.images), st.batch_size, seed=seed)
    history = {"step": [], "epoch": [], "beta": [], "ce": [], "cons": [],
               "has_foreground": setup.fg.astype(int).tolist(), "names": list(data.names),
               "method": st.spec.name, "eta": st.eta, "lam": st.lam}
    tables = _TableHistory(history, loader, setup.history_every or loader.steps_per_epoch,
                           st.num_steps)
    return graph, state, loader, tables


def _test_evaluator(config: Any, graph: ModelGraph, test: Optional[VolumeDataset],
                    num_classes: int, size: int) -> Optional[Callable]:
    if test is None:
        return None
    eval_bs = int(_get(config, "eval_batch_size", 8))
    return lambda s: evaluate(graph, s, test, num_classes, image_size=size, batch_size=eval_bs)


def _config_devices(config: Any) -> Optional[list]:
    """The first ``config.num_devices`` local devices (0 or absent: all), as in
    :mod:`rdr_jax.dac.configs`."""
    n = _get(config, "num_devices", 0) or 0
    n = check_int("num_devices", n, low=0, high=len(jax.local_devices()),
                  high_desc="the number of local devices")
    return jax.local_devices()[:n] if n else None


def train(config: Any, data: SliceDataset, *, test: Optional[VolumeDataset] = None,
          num_classes: int = 9, workdir: Optional[Path | str] = None,
          stop_after: Optional[int] = None, progress: bool = False,
          history_every: Optional[int] = None) -> TrainResult:
    """Train ``config.method`` on ``data`` (Algorithm 6 for AdaWAC) with
    :func:`rdr_jax.training.fit`.

    Args:
        config: a config of :mod:`rdr_jax.adawac.configs`; ``config.num_devices`` (0 or
            absent: all local devices) sets the data-parallel mesh, as for DAC.
        data: training slices ``(N, H, H)``. test: volumes evaluated at the end.
        num_classes: with background. workdir: checkpoints and metrics (a later call resumes).
        stop_after: stop (and save) after this many steps.
        progress: tqdm bar. history_every: snapshot period (default: once per epoch).

    Returns:
        :class:`TrainResult`.

    Raises:
        ValueError / TypeError: invalid config or data.
        FloatingPointError: a non-finite loss (the last checkpoint stays the last good one).
    """
    mesh = make_mesh(_config_devices(config))
    setup = _setup(config, data, num_classes, mesh.size, history_every)
    st = setup.st
    graph, state, loader, tables = _seed_run(config, setup, data, num_classes, st.seed)
    if stop_after is not None:
        stop_after = check_int("stop_after", stop_after, low=0)
    loop = LoopConfig(num_steps=st.num_steps,
                      log_every=int(_get(config, "log_every", 0) or loader.steps_per_epoch),
                      checkpoint_every=int(_get(config, "checkpoint_every", 0) or 0),
                      workdir=workdir, stop_after=stop_after, progress=progress,
                      desc=f"{st.spec.name} (lr {st.lr:g})")
    res = fit(settings_step(graph, st._replace(seed=0)), state,
              _SliceBatches(loader, setup.images, setup.labels, setup.fg),
              key=jax.random.key(st.seed), loop=loop, mesh=mesh,
              evaluate=_test_evaluator(config, graph, test, num_classes, setup.images.shape[1]),
              hooks=(tables,))
    return TrainResult(jax.device_get(res.state), graph, res.losses, tables.state_dict(),
                       res.eval, res.resumed_from, res.seconds_per_step)


class _EachRun:
    """``fit_runs`` hook: run ``r``'s state to ``hooks[r].after_step``."""

    def __init__(self, hooks: Sequence[Any]):
        self.hooks = list(hooks)

    def after_step(self, step: int, states: Any) -> None:
        for r, h in enumerate(self.hooks):
            h.after_step(step, states.view(r))     # slices only the fields it reads


class SeedsResult(NamedTuple):
    """What :func:`train_runs` returns.

    Attributes:
        runs: one :class:`TrainResult` per seed (``resumed_from`` None). diverged: per seed,
            the first step with a non-finite loss or None. batching: ``"vmap"`` /
            ``"sequential"``. first_step_seconds: compilation included. seconds_per_step:
            the other steps (all seeds).
    """

    runs: list
    diverged: tuple
    batching: str
    first_step_seconds: float
    seconds_per_step: float


def train_runs(config: Any, data: SliceDataset, seeds: Sequence[int], *,
               test: Optional[VolumeDataset] = None, num_classes: int = 9,
               progress: bool = False, history_every: Optional[int] = None,
               batching: str = "auto") -> SeedsResult:
    """Train ``config`` for every seed of ``seeds`` as one program
    (:func:`rdr_jax.training.fit_runs`): parameters, optimizer state, beta and data order carry
    a leading seed axis; seed ``s`` computes what :func:`train` computes with ``seed = s``, up to
    the order of floating-point sums.

    Args:
        config, data, test, num_classes, progress, history_every: as for :func:`train`.
        seeds: distinct ints >= 0. batching: ``"auto"`` / ``"vmap"`` / ``"sequential"``.

    Returns:
        :class:`SeedsResult` (a diverged seed is not evaluated: its ``test`` is None). No
        checkpoints: a long run that must resume uses :func:`train`.
    """
    from rdr_jax.training import fit_runs

    seeds = [check_int("seed", s, low=0) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be a non-empty list of distinct ints; got {seeds}")
    setup = _setup(config, data, num_classes, 1, history_every)
    st = setup.st
    built = [_seed_run(config, setup, data, num_classes, s) for s in seeds]
    graph = built[0][0]
    loop = LoopConfig(num_steps=st.num_steps,
                      log_every=int(_get(config, "log_every", 0) or built[0][2].steps_per_epoch),
                      progress=progress, desc=f"{st.spec.name} x {len(seeds)} seeds")
    res = fit_runs(settings_step(graph, st._replace(seed=0)), [b[1] for b in built],
                   [_SliceBatches(b[2], setup.images, setup.labels, setup.fg) for b in built],
                   keys=[jax.random.key(s) for s in seeds], loop=loop, batching=batching,
                   hooks=(_EachRun([b[3] for b in built]),))
    ev = _test_evaluator(config, graph, test, num_classes, setup.images.shape[1])
    out = [TrainResult(jax.device_get(s), graph, res.losses[:, r].tolist(),
                       b[3].state_dict(),
                       None if ev is None or res.diverged[r] is not None else ev(s), None,
                       res.seconds_per_step)
           for r, (s, b) in enumerate(zip(res.states, built))]
    return SeedsResult(out, res.diverged, res.batching, res.first_step_seconds,
                       res.seconds_per_step)


def save_history(path: Path | str, history: dict) -> Path:
    """Write the history tables and ``has_foreground`` to ``path`` (``.npz``)."""
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
