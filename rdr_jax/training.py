"""Functional training plumbing shared by the Ch. 4 (DAC) and Ch. 5 (AdaWAC) trainers.

An NNX model is split once into a static :class:`ModelGraph` (graph definitions with
BatchNorm in training and in evaluation mode) and pytrees of parameters and other variables;
train steps are pure functions of those pytrees (``rdr_jax.dac.deep.make_train_step``,
``rdr_jax.adawac.train.make_train_step``), so the caller jits them once, shards them with
``jax.sharding`` and checkpoints them with orbax. Resuming restores exactly what was saved
(bitwise on CPU), which is what makes kill-and-resume equal an uninterrupted run.

* :func:`split_model` -- ``model -> (ModelGraph, params, rest)``;
* :func:`merge_apply` -- ``nnx.merge(graphdef, params, rest)(x)`` inside a trace, returning
  the outputs and the updated non-parameter variables (BatchNorm statistics);
* :func:`save_checkpoint` / :func:`restore_checkpoint` -- an orbax ``CheckpointManager``
  holding a state pytree (typed PRNG keys stored as key data and re-wrapped on restore) and a
  JSON ``meta`` dict (data-loader position, history).

Example:
    >>> from flax import nnx
    >>> graph, params, rest = split_model(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    >>> merge_apply(graph.train, params, rest, jnp.ones((1, 2)))[0].shape
    (1, 3)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

__all__ = ["ModelGraph", "merge_apply", "restore_checkpoint", "save_checkpoint",
           "split_model"]


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


def _is_key(x: Any) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _to_saveable(tree: Any) -> Any:
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def _manager(directory: Path, max_to_keep: int = 2):
    import orbax.checkpoint as ocp
    opts = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep,
                                        enable_async_checkpointing=False)
    return ocp.CheckpointManager(Path(directory).resolve(), options=opts,
                                 item_names=("state", "meta"))


def save_checkpoint(directory: Path | str, state: Any, meta: dict, max_to_keep: int = 2
                    ) -> int:
    """Save the pytree ``state`` (it must have an integer ``state.step``; typed PRNG keys are
    stored as key data) and the JSON-serialisable ``meta`` under ``directory/<step>`` with an
    orbax ``CheckpointManager`` (synchronous, keeps the newest ``max_to_keep``); returns the
    step. A failed save leaves earlier checkpoints untouched (orbax writes to a temporary
    folder and renames it when complete)."""
    import orbax.checkpoint as ocp
    step = int(state.step)
    host = jax.device_get(_to_saveable(state))
    with _manager(Path(directory), max_to_keep) as mgr:
        mgr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(host),
                                               meta=ocp.args.JsonSave(meta)), force=True)
        mgr.wait_until_finished()
    return step


def restore_checkpoint(directory: Path | str, like: Any) -> Optional[tuple[Any, dict]]:
    """Restore the latest checkpoint in ``directory`` into the structure, dtypes and pytree
    types of ``like`` (None when there is none): ``(state, meta)``. Typed PRNG keys are
    re-wrapped with the key implementation of ``like``.

    Raises:
        ValueError: the checkpoint's tree does not match ``like`` (message names the folder).
    """
    import orbax.checkpoint as ocp
    directory = Path(directory)
    if not directory.exists():
        return None
    with _manager(directory) as mgr:
        step = mgr.latest_step()
        if step is None:
            return None
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype),
                                jax.device_get(_to_saveable(like)))
        try:
            out = mgr.restore(step, args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()))
        except (ValueError, KeyError) as e:
            raise ValueError(f"the checkpoint in {directory} (step {step}) does not match the "
                             f"state to restore into (another model, method or data set?): "
                             f"{e}") from e
    flat_like, treedef = jax.tree.flatten(like)
    flat_new = jax.tree.leaves(out.state)
    leaves = [jax.random.wrap_key_data(jnp.asarray(n), impl=jax.random.key_impl(o))
              if _is_key(o) else jnp.asarray(n, dtype=o.dtype)
              for o, n in zip(flat_like, flat_new)]
    return jax.tree.unflatten(treedef, leaves), dict(out.meta)
