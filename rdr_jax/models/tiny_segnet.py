"""A tiny U-Net-style segmentation CNN (the Ch. 5 CPU test model)."""

from __future__ import annotations

from typing import Any, Optional

import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float

from rdr_jax._src.validation import check_int
from rdr_jax.models._precision import at_least_float32, check_dtypes, keep_stats_precise

__all__ = ["TinySegNet"]


class TinySegNet(nnx.Module):
    """A tiny U-Net-style CNN with the segmentation-model interface:
    ``x (B, H, W, C) -> (logits (B, H, W, K), z)``, ``z`` the encoder output at ``H / 2^depth``.

    Each of ``depth`` stride-2 levels doubles the receptive field (what lets it tell an empty
    end-of-stack slice from an organ slice on 32 x 32 inputs); ``H``, ``W`` divisible by
    ``2^depth``.

    Args:
        num_classes: K >= 2. in_channels: input channels. width: base width. depth: levels >= 1.
        dtype: computation dtype (None: inferred; outputs in at least float32).
        param_dtype: parameter dtype. rngs: ``nnx.Rngs``.
    """

    def __init__(self, num_classes: int, *, in_channels: int = 1, width: int = 8,
                 depth: int = 2, dtype: Optional[Any] = None, param_dtype: Any = jnp.float32,
                 rngs: nnx.Rngs):
        num_classes = check_int("num_classes", num_classes, low=2)
        self.in_channels = check_int("in_channels", in_channels, low=1)
        w = check_int("width", width, low=1)
        self.depth = check_int("depth", depth, low=1)
        dtype, param_dtype = check_dtypes(dtype, param_dtype)
        self.dtype, self.param_dtype = dtype, param_dtype
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        ch = [w] + [w * 2 ** min(i, self.depth - 1) for i in range(1, self.depth + 1)]

        def conv(cin, cout, stride=1):
            return nnx.Conv(cin, cout, (3, 3), strides=(stride, stride), padding="SAME",
                            use_bias=False, **kw)

        def bn(c):
            return keep_stats_precise(nnx.BatchNorm(c, momentum=0.9, epsilon=1e-5, **kw),
                                      param_dtype)

        enc = [(self.in_channels, ch[0], 1)] + [(ch[i - 1], ch[i], 2)
                                                for i in range(1, self.depth + 1)]
        dec = [((ch[i + 1] if i == self.depth - 1 else ch[i]) + ch[i], ch[i - 1])
               for i in range(self.depth - 1, 0, -1)]
        self.enc_conv = nnx.List([conv(a, b, st) for a, b, st in enc])
        self.enc_bn = nnx.List([bn(b) for _, b, _ in enc])
        self.dec_conv = nnx.List([conv(a, b) for a, b in dec])
        self.dec_bn = nnx.List([bn(b) for _, b in dec])
        self.head = nnx.Conv(2 * ch[0], num_classes, (1, 1), **kw)

    @classmethod
    def small(cls, num_classes: int, *, in_channels: int = 1, dtype: Optional[Any] = None,
              param_dtype: Any = jnp.float32, rngs: nnx.Rngs) -> "TinySegNet":
        """The default CPU size (``width=8``, ``depth=2``)."""
        return cls(num_classes, in_channels=in_channels, width=8, dtype=dtype,
                   param_dtype=param_dtype, rngs=rngs)

    def __call__(self, x: Float[Array, "b h w c"]
                 ) -> tuple[Float[Array, "b h w k"], Float[Array, "b hd wd e"]]:
        if x.ndim != 4 or x.shape[-1] != self.in_channels:
            raise ValueError(f"x must be NHWC with {self.in_channels} channel(s); got shape "
                             f"{tuple(x.shape)}")
        f = 2 ** self.depth
        if x.shape[1] % f or x.shape[2] % f:
            raise ValueError(f"x height and width must be divisible by 2^depth = {f}; got "
                             f"{tuple(x.shape)}")

        def up(t):
            return jnp.repeat(jnp.repeat(t, 2, axis=1), 2, axis=2)

        skips = []
        h = x
        for conv, bn in zip(self.enc_conv, self.enc_bn):
            h = nnx.relu(bn(conv(h)))
            skips.append(h)
        z = d = skips[-1]
        for conv, bn, skip in zip(self.dec_conv, self.dec_bn, skips[-2:0:-1]):
            d = nnx.relu(bn(conv(jnp.concatenate([up(d), skip], axis=-1))))
        logits = self.head(jnp.concatenate([up(d), skips[0]], axis=-1))
        return at_least_float32(logits), at_least_float32(z)
