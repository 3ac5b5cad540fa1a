"""The functional train state shared by the Ch. 4 (DAC) and Ch. 5 (AdaWAC) trainers.

An NNX model is split once into a static :class:`ModelGraph` and pytrees; steps are pure
functions of one :class:`TrainState`, jitted once, sharded and checkpointed. Also the
optimizer :func:`sgd` (``torch.optim.SGD``), the weight average :func:`param_ema` (FixMatch's
EMA), :func:`check_schedule` and :func:`compute_dtype`. Why: both chapters' steps share it.
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
           "check_schedule", "compute_dtype", "eval_params", "init_train_state", "merge_apply",
           "param_ema", "sgd", "split_model"]

#: the values a training config's ``dtype`` field (the models' computation dtype) may take
COMPUTE_DTYPES = ("float32", "bfloat16")


def compute_dtype(value: Any = "float32", name: str = "dtype") -> np.dtype:
    """The computation dtype a config's ``dtype`` field names: ``"float32"``
    (default, also for None) or ``"bfloat16"``; ValueError otherwise.
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
    """``(ModelGraph(train, eval), params, rest)`` of an NNX model (left in
    training mode).
    """
    model.train()
    g_train, params, rest = nnx.split(model, nnx.Param, ...)
    model.eval()
    g_eval, _, _ = nnx.split(model, nnx.Param, ...)
    model.train()
    return ModelGraph(g_train, g_eval), params, rest


def merge_apply(graphdef: Any, params: Any, rest: Any, *args: Any) -> tuple[Any, Any]:
    """``(model(*args), new_rest)`` for ``model = nnx.merge(graphdef, params,
    rest)``, on fresh copies of the variables (NNX refuses to mutate state of another trace).
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
    """Wrap ``tx`` so that its state also tracks the exponential moving average
    ``bar theta_t = decay bar theta_{t-1} + (1 - decay) theta_t`` of the weights (FixMatch's
    ``ModelEMA``); the updates are unchanged.

    Args:
        tx: the optimizer. decay: in [0, 1).

    Returns:
        An ``optax.GradientTransformation`` with state :class:`ParamEmaState`.
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


def check_schedule(schedule: Callable, num_steps: int, name: str = "learning_rate") -> None:
    """Raise ValueError if ``schedule(i)`` is negative or non-finite for a step
    ``0 <= i < num_steps`` (a negative step would silently ascend); one vmapped evaluation.
    """
    if isinstance(num_steps, bool) or not isinstance(num_steps, numbers.Integral) or \
            num_steps < 1:
        raise ValueError(f"num_steps must be an int >= 1; got {num_steps!r}")
    values = np.asarray(jax.vmap(schedule)(jnp.arange(int(num_steps))), np.float64)
    bad = np.flatnonzero(~(np.isfinite(values) & (values >= 0)))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{name} schedule must be finite and >= 0 over the planned {num_steps} "
                         f"steps; {name}({i}) = {float(values.reshape(-1)[i])}")


def sgd(learning_rate: Any, *, momentum: float = 0.9, nesterov: bool = False,
        weight_decay: float = 0.0, decay_mask: Optional[Callable] = None,
        ema_decay: float = 0.0, num_steps: Optional[int] = None
        ) -> optax.GradientTransformation:
    """SGD with momentum and coupled weight decay, as ``torch.optim.SGD``.

    Args:
        learning_rate: a float or an optax schedule. momentum: in [0, 1). nesterov: Nesterov.
        weight_decay: coupled L2 >= 0 on the leaves ``decay_mask`` selects (default all).
        ema_decay: weight average in [0, 1) (0: none).
        num_steps: with a schedule, check it over these steps (:func:`check_schedule`).
    """
    if isinstance(weight_decay, bool) or not isinstance(weight_decay, numbers.Real) or \
            not math.isfinite(weight_decay) or weight_decay < 0:
        raise ValueError(f"weight_decay must be a finite number >= 0; got {weight_decay!r}")
    if isinstance(momentum, bool) or not isinstance(momentum, numbers.Real) or \
            not 0 <= momentum < 1:
        raise ValueError(f"momentum must lie in [0, 1); got {momentum!r}")
    if callable(learning_rate) and num_steps is not None:
        check_schedule(learning_rate, num_steps)
    parts = []
    if weight_decay > 0:
        parts.append(optax.add_decayed_weights(weight_decay, mask=decay_mask))
    parts.append(optax.sgd(learning_rate, momentum=momentum if momentum > 0 else None,
                           nesterov=bool(nesterov)))
    tx = optax.chain(*parts)
    return param_ema(tx, ema_decay) if _check_decay(ema_decay) > 0 else tx


# ------------------------------------------------------------------------ train state


class TrainState(NamedTuple):
    """Everything that changes during training (a pytree, checkpointed).

    Attributes:
        step: int32 steps taken. params: ``nnx.Param`` state. model_state: other variables.
        opt_state: the optax state (:class:`rdr_jax.training.state.ParamEmaState` with a
            weight average).
        extra: dict of chapter arrays (AdaWAC's ``beta`` ...), read as attributes, or None.
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
        """The weight average of :func:`rdr_jax.training.state.param_ema`, or None."""
        return self.opt_state.ema if isinstance(self.opt_state, ParamEmaState) else None


def init_train_state(model: nnx.Module, tx: optax.GradientTransformation, *,
                     extra: Optional[dict] = None) -> tuple[ModelGraph, TrainState]:
    """Split a model into its :class:`ModelGraph` and a :class:`TrainState`
    (step 0, ``tx.init(params)``, ``extra``).
    """
    graph, params, rest = split_model(model)
    return graph, TrainState(jnp.zeros((), jnp.int32), params, rest, tx.init(params), extra)


def apply_gradients(state: TrainState, tx: optax.GradientTransformation, grads: Any,
                    model_state: Any, extra: Any = None) -> TrainState:
    """One optimizer step: the updates, the new model variables, ``step + 1``
    and ``extra`` (kept when None).
    """
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    return TrainState(state.step + 1, params, model_state, opt_state,
                      state.extra if extra is None else extra)


def eval_params(state: TrainState) -> Any:
    """The parameters to evaluate: the weight average when kept, else
    ``state.params``.
    """
    ema = state.ema_params
    return state.params if ema is None else ema
