"""The functional train state shared by the Ch. 4 (DAC) and Ch. 5 (AdaWAC) trainers.

An NNX model is split once into a static :class:`ModelGraph` (graph definitions with
BatchNorm in training and in evaluation mode) and pytrees of parameters and other variables;
train steps are pure functions of one :class:`TrainState` pytree, so the caller jits them
once, shards them with ``jax.sharding`` and checkpoints them with orbax.

* :func:`split_model` -- ``model -> (ModelGraph, params, rest)``;
* :func:`merge_apply` -- ``nnx.merge(graphdef, params, rest)(x)`` inside a trace, returning
  the outputs and the updated non-parameter variables (BatchNorm statistics);
* :class:`TrainState` / :func:`init_train_state` -- step, parameters, model variables,
  optimizer state and a dict of chapter-specific arrays (AdaWAC's beta table);
* :func:`apply_gradients` -- the optax update every chapter step ends with;
* :func:`sgd` -- SGD with momentum and coupled weight decay (``torch.optim.SGD``), optionally
  wrapped in :func:`param_ema`, the exponential moving average of the weights that FixMatch
  evaluates (Sohn et al. 2020; decay 0.999 in the reference code);
* :func:`eval_params` -- the parameters evaluation uses (the EMA when there is one);
* :func:`compute_dtype` -- the model computation dtype a config's ``dtype`` field names
  (``"float32"`` or ``"bfloat16"``; parameters stay float32 either way).

Example:
    >>> from flax import nnx
    >>> graph, params, rest = split_model(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    >>> merge_apply(graph.train, params, rest, jnp.ones((1, 2)))[0].shape
    (1, 3)
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jaxtyping import Array, Int

__all__ = ["COMPUTE_DTYPES", "ModelGraph", "ParamEmaState", "TrainState", "apply_gradients",
           "compute_dtype", "eval_params", "init_train_state", "merge_apply", "param_ema", "sgd",
           "split_model"]

#: the values a training config's ``dtype`` field (the models' computation dtype) may take
COMPUTE_DTYPES = ("float32", "bfloat16")


def compute_dtype(value: Any = "float32", name: str = "dtype") -> np.dtype:
    """The computation dtype named by a training config's ``dtype`` field.

    ``"float32"`` (default; ``None`` means the same) or ``"bfloat16"`` (or the dtypes
    themselves). The trainers pass it to the model as Flax's ``dtype``: parameters, BatchNorm
    statistics, softmax and the losses stay in float32.

    Raises:
        ValueError: any other value (the message names the allowed ones).

    Example:
        >>> compute_dtype("bfloat16")
        dtype(bfloat16)
    """
    if value is None:
        value = "float32"
    try:
        label = value if isinstance(value, str) else jnp.dtype(value).name
    except (TypeError, ValueError):
        label = None
    if label not in COMPUTE_DTYPES:
        raise ValueError(f"{name} must be one of {COMPUTE_DTYPES} (the models' computation "
                         f"dtype); got {value!r}")
    return np.dtype(jnp.dtype(label))


class ModelGraph(NamedTuple):
    """Static NNX graph definitions of one model: BatchNorm in training / evaluation mode."""

    train: Any
    eval: Any


def split_model(model: nnx.Module) -> tuple[ModelGraph, Any, Any]:
    """``(ModelGraph(train, eval), params, rest)``: the model's graph definitions in both
    modes, its ``nnx.Param`` state and every other variable (BatchNorm statistics, RNG
    counters). The model is left in training mode."""
    model.train()
    g_train, params, rest = nnx.split(model, nnx.Param, ...)
    model.eval()
    g_eval, _, _ = nnx.split(model, nnx.Param, ...)
    model.train()
    return ModelGraph(g_train, g_eval), params, rest


def merge_apply(graphdef: Any, params: Any, rest: Any, *args: Any) -> tuple[Any, Any]:
    """``(model(*args), new_rest)`` for ``model = nnx.merge(graphdef, params, rest)``.

    The variables are copied into fresh objects first: NNX refuses to mutate BatchNorm
    statistics created under another trace (e.g. state closed over from outside
    ``jax.grad``/``jax.vjp``). ``new_rest`` carries the updated statistics in training mode.
    """
    params, rest = jax.tree.map(lambda v: v, (params, rest))
    model = nnx.merge(graphdef, params, rest)
    out = model(*args)
    _, _, new_rest = nnx.split(model, nnx.Param, ...)
    return out, new_rest


# ------------------------------------------------------------------------ weight EMA


class ParamEmaState(NamedTuple):
    """State of :func:`param_ema`: the wrapped optimizer's state and the averaged weights."""

    inner: Any
    ema: Any


def _check_decay(decay: Any) -> float:
    if isinstance(decay, bool) or not isinstance(decay, numbers.Real):
        raise TypeError(f"ema_decay must be a real number in [0, 1); got "
                        f"{type(decay).__name__} {decay!r}")
    d = float(decay)
    if not (math.isfinite(d) and 0.0 <= d < 1.0):
        raise ValueError(f"ema_decay must lie in [0, 1) (0 disables the average); got {decay!r}")
    return d


def param_ema(tx: optax.GradientTransformation, decay: float = 0.999
              ) -> optax.GradientTransformation:
    """Wrap ``tx`` so that its state also tracks an exponential moving average of the weights.

    With ``theta_t`` the weights after update ``t`` (``theta_t = theta_{t-1} + u_t``, as
    ``optax.apply_updates`` computes them) and ``bar theta_0 = theta_0``::

        bar theta_t = decay * bar theta_{t-1} + (1 - decay) * theta_t
                    = decay^t theta_0 + (1 - decay) sum_{s=1}^t decay^(t-s) theta_s

    which is FixMatch's ``ModelEMA`` (kekmodel/FixMatch-pytorch, decay 0.999; BatchNorm
    statistics are not averaged there but copied, so evaluation pairs the averaged weights
    with the current statistics, see :func:`eval_params`). The updates are those of ``tx``
    unchanged: training is not affected, only the state grows by one copy of the weights.

    Args:
        tx: the optimizer.
        decay: in [0, 1).

    Returns:
        An ``optax.GradientTransformation`` with state :class:`ParamEmaState`.

    Example:
        >>> tx = param_ema(optax.sgd(0.1), 0.5)
        >>> p = jnp.zeros(2); s = tx.init(p)
        >>> u, s = tx.update(jnp.ones(2), s, p)
        >>> s.ema.tolist()                    # 0.5 * 0 + 0.5 * (0 - 0.1)
        [-0.05000000074505806, -0.05000000074505806]
    """
    decay = _check_decay(decay)

    def init(params):
        return ParamEmaState(tx.init(params), jax.tree.map(jnp.array, params))

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("param_ema needs the current params in update()")
        updates, inner = tx.update(updates, state.inner, params)
        new = optax.apply_updates(params, updates)
        ema = optax.incremental_update(new, state.ema, 1.0 - decay)
        return updates, ParamEmaState(inner, ema)

    return optax.GradientTransformation(init, update)


def sgd(learning_rate: Any, *, momentum: float = 0.9, nesterov: bool = False,
        weight_decay: float = 0.0, decay_mask: Optional[Callable] = None,
        ema_decay: float = 0.0) -> optax.GradientTransformation:
    """SGD with momentum and coupled weight decay, as ``torch.optim.SGD``, both chapters'
    optimizer.

    ``g <- g + wd * theta`` (on the leaves ``decay_mask`` selects; all by default), then
    ``m <- momentum * m + g`` and the update ``-lr * m`` (Nesterov: ``-lr * (g + momentum
    m)``); ``momentum = 0`` is plain SGD. ``ema_decay > 0`` wraps the chain in
    :func:`param_ema`.

    Args:
        learning_rate: a float or an optax schedule.
        momentum: in [0, 1).
        nesterov: Nesterov momentum.
        weight_decay: coupled L2 coefficient >= 0 (0 leaves it out of the chain).
        decay_mask: optax mask (pytree of bools or a function of the params).
        ema_decay: decay of the weight average in [0, 1) (0: none).

    Example:
        >>> tx = sgd(0.01, weight_decay=1e-4, ema_decay=0.999)
    """
    if isinstance(weight_decay, bool) or not isinstance(weight_decay, numbers.Real) or \
            not math.isfinite(weight_decay) or weight_decay < 0:
        raise ValueError(f"weight_decay must be a finite number >= 0; got {weight_decay!r}")
    if isinstance(momentum, bool) or not isinstance(momentum, numbers.Real) or \
            not 0 <= momentum < 1:
        raise ValueError(f"momentum must lie in [0, 1); got {momentum!r}")
    parts = []
    if weight_decay > 0:
        parts.append(optax.add_decayed_weights(weight_decay, mask=decay_mask))
    parts.append(optax.sgd(learning_rate, momentum=momentum if momentum > 0 else None,
                           nesterov=bool(nesterov)))
    tx = optax.chain(*parts)
    return param_ema(tx, ema_decay) if _check_decay(ema_decay) > 0 else tx


# ------------------------------------------------------------------------ train state


class TrainState(NamedTuple):
    """Everything that changes during training (a pytree; checkpointed by orbax).

    Attributes:
        step: int32 scalar, number of optimizer steps taken.
        params: the ``nnx.Param`` state.
        model_state: all other model variables (BatchNorm running statistics, ...).
        opt_state: the optax state (a :class:`rdr_jax.training.state.ParamEmaState` when the
            optimizer averages the weights, see ``ema_params``).
        extra: a dict of chapter-specific arrays (AdaWAC: ``beta``, ``beta_state``,
            ``last_ce``, ``last_cons``) or None; its entries read as attributes
            (``state.beta``).
    """

    step: Int[Array, ""]
    params: Any
    model_state: Any
    opt_state: Any
    extra: Any = None

    def __getattr__(self, name: str) -> Any:
        extra = self.extra
        if isinstance(extra, dict) and name in extra:
            return extra[name]
        raise AttributeError(f"{type(self).__name__} has no field or extra entry {name!r}")

    @property
    def ema_params(self) -> Any:
        """The weight average of :func:`rdr_jax.training.state.param_ema` (None when the
        optimizer keeps none)."""
        return self.opt_state.ema if isinstance(self.opt_state, ParamEmaState) else None


def init_train_state(model: nnx.Module, tx: optax.GradientTransformation, *,
                     extra: Optional[dict] = None) -> tuple[ModelGraph, TrainState]:
    """Split an NNX model into its static :class:`ModelGraph` and a :class:`TrainState`
    (step 0, ``tx.init(params)``, ``extra`` as given).

    Example:
        >>> graph, state = init_train_state(nnx.Linear(2, 3, rngs=nnx.Rngs(0)), optax.sgd(.1))
        >>> int(state.step)
        0
    """
    graph, params, rest = split_model(model)
    return graph, TrainState(jnp.zeros((), jnp.int32), params, rest, tx.init(params), extra)


def apply_gradients(state: TrainState, tx: optax.GradientTransformation, grads: Any,
                    model_state: Any, extra: Any = None) -> TrainState:
    """One optimizer step: ``updates, opt_state = tx.update(grads, opt_state, params)``,
    ``params + updates``, the new model variables, ``step + 1`` and ``extra`` (kept when
    None)."""
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    return TrainState(state.step + 1, params, model_state, opt_state,
                      state.extra if extra is None else extra)


def eval_params(state: TrainState) -> Any:
    """The parameters to evaluate: the weight average when the optimizer keeps one
    (:func:`param_ema`; FixMatch evaluates its EMA model), else ``state.params``."""
    ema = state.ema_params
    return state.params if ema is None else ema
