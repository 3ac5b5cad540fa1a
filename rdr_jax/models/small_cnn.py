"""A small BatchNorm CNN classifier for tiny images (Ch. 4 digits demo, tests).

Example:
    >>> from flax import nnx
    >>> m = SmallCNN(10, in_channels=1, rngs=nnx.Rngs(0))
    >>> m(jnp.zeros((2, 8, 8, 1))).shape
    (2, 10)
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float

from rdr_jax._validation import check_int

__all__ = ["SmallCNN"]


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
