"""UNet with a ResNet-34 encoder (segmentation_models_pytorch ``Unet('resnet34')``) in Flax NNX.

Thesis App. ``subsec:exp_unet`` (Chapter 5, ``ch:adawac``): "a UNet with a ResNet-34 encoder
initialized with ImageNet pre-trained weights ... via the PyTorch API for segmentation models".
This module re-implements that network (written from its description, no code copied), NHWC:

* **encoder** -- torchvision ResNet-34 without pooling/classifier
  (:class:`rdr_jax.models.resnet.ResNet`), giving five maps
  ``f1 = relu(bn1(conv1(x)))`` (``H/2``, 64), ``f2 = layer1`` (``H/4``, 64), ``f3 = layer2``
  (``H/8``, 128), ``f4 = layer3`` (``H/16``, 256), ``f5 = layer4`` (``H/32``, 512);
* **decoder** -- five blocks with ``decoder_channels`` ``(256, 128, 64, 32, 16)``; block ``i``
  upsamples its input by 2 (nearest neighbour), concatenates the skip map (``f4, f3, f2, f1``,
  none for the last block) on the channel axis, and applies twice ``conv3x3 (no bias) - BN -
  ReLU``; the first block's input is ``f5`` (no centre block);
* **segmentation head** -- ``conv3x3`` (with bias) to ``num_classes`` logits, no activation.

Initialisation as the reference: encoder as torchvision; decoder convolutions
``kaiming_uniform_(mode='fan_in', nonlinearity='relu')`` (``U(+-sqrt(6 / fan_in))``), BatchNorm
scale 1 / bias 0; head ``xavier_uniform_`` with zero bias.

**Single-channel input.** With ``in_channels=1`` the input is repeated to 3 channels (as the
TransUNet reference does, ``x.repeat(1, 3, 1, 1)``) and the stem has 3 input channels, so
ImageNet weights load unchanged. For a fixed stem kernel ``W`` this equals
segmentation_models_pytorch's own ``in_channels=1`` adaptation, which replaces ``W`` by its
sum over input channels: ``conv(repeat(x), W) = conv(x, sum_c W[..., c, :])``.

**Consistency features.** ``__call__`` returns ``(logits, f5)``: AdaWAC's consistency
regulariser (thesis Eq. ``eq:objective_dac_encoder_weighted_adawac``) compares the *encoder
output* ``phi_theta(x)`` of two augmented views, and for this UNet the encoder output is the
deepest ResNet stage ``f5`` of shape ``(B, H/32, W/32, 512)``.

Parameter count: ``21,284,672`` (encoder) + ``3,151,552`` (decoder) + ``9 * 16 * K + K``
(head), i.e. 24,436,369 for ``K = 1`` (the figure segmentation_models_pytorch reports) and
24,437,529 for Synapse's ``K = 9``.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float

from rdr_jax._src import validation as V
from rdr_jax.models._precision import at_least_float32, check_dtypes
from rdr_jax.models.resnet import (ResNet, batch_norm, check_int_tuple, check_nhwc_input,
                                   conv2d)

__all__ = ["UNetResNet34", "UNetDecoderBlock"]

#: smp decoder conv init: ``kaiming_uniform_(mode='fan_in', nonlinearity='relu')``.
_decoder_init = jax.nn.initializers.variance_scaling(2.0, "fan_in", "uniform")
#: smp head init: ``xavier_uniform_``.
_head_init = jax.nn.initializers.variance_scaling(1.0, "fan_avg", "uniform")


class UNetDecoderBlock(nnx.Module):
    """``x -> up2_nearest(x) -> concat(., skip) -> [conv3x3 - BN - ReLU] x 2``.

    Args:
        cin: channels of the block input. cskip: channels of the skip map (0: no skip).
        cout: output channels. dtype: computation dtype (``None``: inferred). param_dtype:
        parameter dtype. rngs: NNX random streams.
    """

    def __init__(self, cin: int, cskip: int, cout: int, *, dtype: Optional[Any] = None,
                 param_dtype: Any = jnp.float32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.cskip = cskip
        self.conv1 = conv2d(cin + cskip, cout, 3, kernel_init=_decoder_init, **kw)
        self.bn1 = batch_norm(cout, **kw)
        self.conv2 = conv2d(cout, cout, 3, kernel_init=_decoder_init, **kw)
        self.bn2 = batch_norm(cout, **kw)

    def __call__(self, x: Float[Array, "b h w c"], skip: Array | None = None
                 ) -> Float[Array, "b h2 w2 d"]:
        x = jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)  # F.interpolate(nearest, x2)
        if skip is not None:
            x = jnp.concatenate([x, skip], axis=-1)
        x = jax.nn.relu(self.bn1(self.conv1(x)))
        return jax.nn.relu(self.bn2(self.conv2(x)))


class UNetResNet34(nnx.Module):
    """UNet with a (ResNet-34) encoder, as segmentation_models_pytorch ``Unet('resnet34')``.

    ``logits = head(decoder(encoder(x)))``; see the module docstring for the layers.

    Args:
        num_classes: number of output classes ``K >= 1`` (Synapse 9, ACDC 4).
        in_channels: input channels, 1 (repeated to 3, see the module docstring) or any
            ``C >= 2`` (used as is by the stem).
        widths: encoder stage widths (default ``(64, 128, 256, 512)``).
        depths: encoder blocks per stage (default ResNet-34 ``(3, 4, 6, 3)``).
        decoder_channels: five decoder widths (default ``(256, 128, 64, 32, 16)``).
        dtype: computation dtype of every layer, e.g. ``jnp.bfloat16`` for mixed precision
            (``None``, default: the wider of the input and parameter dtypes). The logits and
            encoder features are returned in at least float32 and the BatchNorm running
            statistics are kept in at least float32.
        param_dtype: parameter dtype (float32 default; float64 needs ``jax_enable_x64``).
        rngs: NNX random streams (keyword-only).

    Inputs must have ``H`` and ``W`` divisible by 32 (five stride-2 stages), as the reference
    requires.

    Example:
        >>> from flax import nnx
        >>> model = UNetResNet34.small(9, rngs=nnx.Rngs(0))
        >>> logits, feats = model(jnp.zeros((2, 64, 64, 1)))
        >>> logits.shape, feats.shape
        ((2, 64, 64, 9), (2, 2, 2, 64))
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
        self.segmentation_head = conv2d(decoder_channels[-1], num_classes, 3, use_bias=True,
                                        kernel_init=_head_init, dtype=dtype,
                                        param_dtype=param_dtype, rngs=rngs)
        #: channels of the encoder features returned by ``__call__``.
        self.encoder_channels = enc[4]

    @classmethod
    def small(cls, num_classes: int, *, in_channels: int = 1, dtype: Optional[Any] = None,
              param_dtype: Any = jnp.float32, rngs: nnx.Rngs) -> "UNetResNet34":
        """A CPU/CI-sized variant (same topology, one block per stage, widths
        ``(8, 16, 32, 64)``, decoder ``(32, 16, 16, 8, 8)``): forward+backward on 64 x 64
        inputs in well under a second."""
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
