"""Orbax checkpoints of a train-state pytree and a JSON ``meta`` dict; a restore is
bitwise what was saved, so kill-and-resume equals an uninterrupted run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["restore_checkpoint", "save_checkpoint"]


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
    """Save ``state`` (with an integer ``state.step``) and ``meta`` under
    ``directory/<step>`` (keeps the newest ``max_to_keep``; a failed save leaves earlier ones
    intact); returns the step.
    """
    import orbax.checkpoint as ocp
    step = int(jax.device_get(state.step))
    host = jax.device_get(_to_saveable(state))
    with _manager(Path(directory), max_to_keep) as mgr:
        mgr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(host),
                                               meta=ocp.args.JsonSave(meta)), force=True)
        mgr.wait_until_finished()
    return step


def restore_checkpoint(directory: Path | str, like: Any) -> Optional[tuple[Any, dict]]:
    """Restore the latest checkpoint into the structure of ``like``:
    ``(state, meta)``, or None when there is none.

    Raises:
        ValueError: the checkpoint's tree does not match ``like``.
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
    if len(flat_new) != len(flat_like):
        raise ValueError(f"the checkpoint in {directory} (step {step}) does not match the "
                         f"state to restore into: {len(flat_new)} arrays saved, "
                         f"{len(flat_like)} expected")
    leaves = [jax.random.wrap_key_data(jnp.asarray(n), impl=jax.random.key_impl(o))
              if _is_key(o) else jnp.asarray(n, dtype=o.dtype)
              for o, n in zip(flat_like, flat_new)]
    return jax.tree.unflatten(treedef, leaves), dict(out.meta)
