"""A small BatchNorm CNN classifier for tiny images (the Ch. 4 digits demo, tests)."""

from __future__ import annotations

from typing import Any, Optional

import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float

from rdr_jax._src.validation import check_int
from rdr_jax.models._precision import at_least_float32, check_dtypes, keep_stats_precise

__all__ = ["SmallCNN"]


class SmallCNN(nnx.Module):
    """Three conv-BN-ReLU layers (one stride 2), global average pool
    (:meth:`features`, the representation ``phi_h`` of Section 4.3), a linear head.

    Args:
        num_classes: >= 2. in_channels: input channels. width: base width.
        dtype: computation dtype (None: inferred; outputs in at least float32).
        param_dtype: parameter dtype. rngs: ``nnx.Rngs``.
    """

    def __init__(self, num_classes: int, *, in_channels: int = 1, width: int = 16,
                 dtype: Optional[Any] = None, param_dtype: Any = jnp.float32,
                 rngs: nnx.Rngs):
        check_int("num_classes", num_classes, low=2)
        check_int("in_channels", in_channels, low=1)
        check_int("width", width, low=1)
        dtype, param_dtype = check_dtypes(dtype, param_dtype)
        self.dtype, self.param_dtype = dtype, param_dtype
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)

        def bn(c):
            return keep_stats_precise(nnx.BatchNorm(c, momentum=0.9, **kw), param_dtype)

        w = width
        self.conv1 = nnx.Conv(in_channels, w, (3, 3), **kw)
        self.bn1 = bn(w)
        self.conv2 = nnx.Conv(w, 2 * w, (3, 3), strides=(2, 2), **kw)
        self.bn2 = bn(2 * w)
        self.conv3 = nnx.Conv(2 * w, 2 * w, (3, 3), **kw)
        self.bn3 = bn(2 * w)
        self.head = nnx.Linear(2 * w, num_classes, **kw)

    def features(self, x: Float[Array, "b h w c"]) -> Float[Array, "b f"]:
        """Pooled features ``phi_h(x)`` (at least float32)."""
        h = nnx.relu(self.bn1(self.conv1(x)))
        h = nnx.relu(self.bn2(self.conv2(h)))
        h = nnx.relu(self.bn3(self.conv3(h)))
        return at_least_float32(jnp.mean(h, axis=(1, 2)))

    def __call__(self, x: Float[Array, "b h w c"]) -> Float[Array, "b k"]:
        """Logits ``f_h(phi_h(x))`` (at least float32)."""
        return at_least_float32(self.head(self.features(x)))
