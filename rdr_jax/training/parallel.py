"""Data parallelism over a 1-D ``jax.sharding`` mesh ``("data",)`` (no pmap): batch arrays
split along axis 0, state, key and scalars replicated; XLA inserts the all-reduces, so 1 and
8 devices agree up to the order of floating-point sums.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

__all__ = ["DATA_AXIS", "batch_sharding", "make_mesh", "replicated", "shard_batch",
           "state_mesh"]

DATA_AXIS = "data"


def make_mesh(devices: Optional[Sequence[Any]] = None) -> Mesh:
    """A 1-D mesh ``('data',)`` over ``devices`` (default: all local devices)."""
    devs = list(jax.local_devices() if devices is None else devices)
    if not devs:
        raise ValueError("devices must be non-empty")
    return Mesh(np.array(devs), (DATA_AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
    """``NamedSharding(mesh, P())``: a full copy on every device."""
    return NamedSharding(mesh, P())


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """``NamedSharding(mesh, P("data"))``: axis 0 split evenly over the mesh."""
    return NamedSharding(mesh, P(DATA_AXIS))


def batch_layout(batch: Any) -> Any:
    """The static layout of a batch pytree: its tree structure and, per leaf, whether it is
    split over the mesh (``ndim >= 1``) or replicated (scalars)."""
    leaves, treedef = jax.tree.flatten(batch)
    return treedef, tuple(np.ndim(x) >= 1 for x in leaves)


def layout_shardings(mesh: Mesh, layout: Any) -> Any:
    """The pytree of shardings of a :func:`batch_layout`."""
    treedef, split = layout
    return jax.tree.unflatten(treedef, [batch_sharding(mesh) if s else replicated(mesh)
                                        for s in split])


def shard_batch(mesh: Mesh, batch: Any) -> Any:
    """Place a host batch pytree on ``mesh``: arrays split along axis 0, scalars
    replicated; ValueError if a leading size does not divide.
    """
    leaves, treedef = jax.tree.flatten(batch)
    n = mesh.size
    for i, x in enumerate(leaves):
        if np.ndim(x) >= 1 and np.shape(x)[0] % n:
            raise ValueError(f"batch entry {i} has leading size {np.shape(x)[0]}, not "
                             f"divisible by the {n} devices of the mesh (data parallelism "
                             f"splits the batch axis evenly)")
    return jax.device_put(batch, layout_shardings(mesh, (treedef, tuple(
        np.ndim(x) >= 1 for x in leaves))))


def state_mesh(tree: Any) -> Optional[Mesh]:
    """The mesh a pytree's first array is laid out on (None for host arrays or a single
    device without a mesh)."""
    for x in jax.tree.leaves(tree):
        s = getattr(x, "sharding", None)
        if isinstance(s, NamedSharding):
            return s.mesh
        if s is not None:
            return None
    return None
