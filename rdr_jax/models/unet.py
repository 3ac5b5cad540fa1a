"""UNet with a ResNet-34 encoder (segmentation_models_pytorch ``Unet('resnet34')``) in Flax
NNX, NHWC.

The UNet of Section C.5.1; ``__call__`` returns ``(logits, f5)``, ``f5`` the deepest
encoder stage, the encoder output of AdaWAC's consistency term. Why: the thesis' second
segmentation model. Layers, initialisation and parameter counts: ``docs/training.md``
("Models").
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float

from rdr_jax._src import validation as V
from rdr_jax.models._precision import at_least_float32, check_dtypes
from rdr_jax.models.resnet import (ConvOptions, ResNet, batch_norm, check_int_tuple,
                                   check_nhwc_input, conv2d)

__all__ = ["UNetResNet34", "UNetDecoderBlock"]

#: smp decoder conv init: ``kaiming_uniform_(mode='fan_in', nonlinearity='relu')``.
_decoder_init = jax.nn.initializers.variance_scaling(2.0, "fan_in", "uniform")
#: smp head init: ``xavier_uniform_``.
_head_init = jax.nn.initializers.variance_scaling(1.0, "fan_avg", "uniform")
_DECODER_CONV = ConvOptions(kernel_init=_decoder_init)


class UNetDecoderBlock(nnx.Module):
    """``x -> up2_nearest(x) -> concat(., skip) -> [conv3x3 - BN - ReLU] x 2``."""

    def __init__(self, cin: int, cskip: int, cout: int, *, dtype: Optional[Any] = None,
                 param_dtype: Any = jnp.float32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.cskip = cskip
        self.conv1 = conv2d(cin + cskip, cout, 3, options=_DECODER_CONV, **kw)
        self.bn1 = batch_norm(cout, **kw)
        self.conv2 = conv2d(cout, cout, 3, options=_DECODER_CONV, **kw)
        self.bn2 = batch_norm(cout, **kw)

    def __call__(self, x: Float[Array, "b h w c"], skip: Array | None = None
                 ) -> Float[Array, "b h2 w2 d"]:
        x = jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)  # F.interpolate(nearest, x2)
        if skip is not None:
            x = jnp.concatenate([x, skip], axis=-1)
        x = jax.nn.relu(self.bn1(self.conv1(x)))
        return jax.nn.relu(self.bn2(self.conv2(x)))


class UNetResNet34(nnx.Module):
    """UNet with a ResNet-34 encoder (inputs with ``H``, ``W`` divisible by 32).

    Args:
        num_classes: ``K >= 1``. in_channels: 1 (repeated to 3) or ``C >= 2``.
        widths, depths: encoder stages (ResNet-34). decoder_channels: five widths.
        dtype: computation dtype (None: inferred; outputs in at least float32).
        param_dtype: parameter dtype. rngs: NNX random streams.
    """

    def __init__(self, num_classes: int, *, in_channels: int = 1,
                 widths: Sequence[int] = (64, 128, 256, 512),
                 depths: Sequence[int] = (3, 4, 6, 3),
                 decoder_channels: Sequence[int] = (256, 128, 64, 32, 16),
                 dtype: Optional[Any] = None, param_dtype: Any = jnp.float32,
                 rngs: nnx.Rngs):
        num_classes = V.check_int("num_classes", num_classes, low=1)
        in_channels = V.check_int("in_channels", in_channels, low=1)
        widths = check_int_tuple("widths", widths, 4)
        depths = check_int_tuple("depths", depths, 4)
        decoder_channels = check_int_tuple("decoder_channels", decoder_channels, 5)
        if not isinstance(rngs, nnx.Rngs):
            raise TypeError(f"rngs must be an nnx.Rngs; got {type(rngs).__name__}")
        dtype, param_dtype = check_dtypes(dtype, param_dtype)
        self.num_classes = num_classes
        self.in_channels = in_channels
        self.dtype, self.param_dtype = dtype, param_dtype
        self.decoder_channels = decoder_channels
        stem_in = 3 if in_channels == 1 else in_channels
        self.encoder = ResNet("basic", depths, widths, in_channels=stem_in, num_classes=None,
                              dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        enc = self.encoder.feature_channels  # (c1, c2, c3, c4, c5)
        ins = (enc[4],) + decoder_channels[:-1]
        skips = (enc[3], enc[2], enc[1], enc[0], 0)
        self.decoder = nnx.List([
            UNetDecoderBlock(ci, cs, co, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
            for ci, cs, co in zip(ins, skips, decoder_channels)])
        self.segmentation_head = conv2d(decoder_channels[-1], num_classes, 3,
                                        options=ConvOptions(use_bias=True,
                                                            kernel_init=_head_init),
                                        dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        #: channels of the encoder features returned by ``__call__``.
        self.encoder_channels = enc[4]

    @classmethod
    def small(cls, num_classes: int, *, in_channels: int = 1, dtype: Optional[Any] = None,
              param_dtype: Any = jnp.float32, rngs: nnx.Rngs) -> "UNetResNet34":
        """A CPU-sized variant of the same topology."""
        return cls(num_classes, in_channels=in_channels, widths=(8, 16, 32, 64),
                   depths=(1, 1, 1, 1), decoder_channels=(32, 16, 16, 8, 8),
                   dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, x: Float[Array, "b h w c"]
                 ) -> tuple[Float[Array, "b h w k"], Float[Array, "b h32 w32 e"]]:
        """Return ``(logits (B, H, W, K), encoder features (B, H/32, W/32, widths[-1]))``, both
        in at least float32."""
        check_nhwc_input(x, self.in_channels)
        if x.shape[1] % 32 or x.shape[2] % 32:
            raise ValueError(f"x must have height and width divisible by 32 (five stride-2 "
                             f"encoder stages); got shape {tuple(x.shape)}")
        if self.in_channels == 1:
            x = jnp.repeat(x, 3, axis=-1)
        f1, f2, f3, f4, f5 = self.encoder.features(x)
        h = f5
        for blk, skip in zip(self.decoder, (f4, f3, f2, f1, None)):
            h = blk(h, skip)
        return at_least_float32(self.segmentation_head(h)), at_least_float32(f5)
