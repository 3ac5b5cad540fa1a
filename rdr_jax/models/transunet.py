"""TransUNet (R50 + ViT-B/16 hybrid encoder, cascaded upsampler) in Flax NNX, NHWC.

The official ``R50-ViT-B_16`` configuration of Beckschen/TransUNet, which the thesis follows
(Section 5.5, Section C.4), layer for layer; ``__call__`` returns
``(logits, z)`` with ``z`` the transformer output on the token grid, the encoder output of
AdaWAC's consistency term. Why: the thesis' segmentation model. Architecture:
``docs/training.md`` ("Models").
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Float

from rdr_jax._src import validation as V
from rdr_jax.models._precision import at_least_float32, check_dtypes
from rdr_jax.models.resnet import (ConvOptions, batch_norm, check_int_tuple, check_nhwc_input,
                                   conv2d,
                                   torch_default_bias_init, torch_default_conv_init)

__all__ = ["TransUNet", "StdConv", "R50Unit", "ResNetV2", "ViTBlock", "DecoderCup",
           "upsample_bilinear_align_corners"]

_HI = jax.lax.Precision.HIGHEST
_xavier = jax.nn.initializers.variance_scaling(1.0, "fan_avg", "uniform")


def _float(name: str, value: Any, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a float; got {type(value).__name__}")
    if not low <= value < high:
        raise ValueError(f"{name} must be in [{low}, {high}); got {value}")
    return float(value)


def _interp_matrix(n: int, dtype: Any) -> np.ndarray:
    """``(2n, n)`` matrix of bilinear x2 interpolation with aligned corners."""
    m = np.zeros((2 * n, n), dtype=np.float64)
    if n == 1:
        m[:, 0] = 1.0
        return m.astype(dtype)
    src = np.arange(2 * n) * (n - 1) / (2 * n - 1)
    lo = np.minimum(np.floor(src).astype(int), n - 1)
    hi = np.minimum(lo + 1, n - 1)
    frac = src - lo
    np.add.at(m, (np.arange(2 * n), lo), 1.0 - frac)
    np.add.at(m, (np.arange(2 * n), hi), frac)
    return m.astype(dtype)


def upsample_bilinear_align_corners(x: Float[Array, "b h w c"]) -> Float[Array, "b 2h 2w c"]:
    """Bilinear x2 upsampling with aligned corners (PyTorch
    ``UpsamplingBilinear2d(2)``).
    """
    mh = jnp.asarray(_interp_matrix(x.shape[1], np.dtype(x.dtype)))
    mw = jnp.asarray(_interp_matrix(x.shape[2], np.dtype(x.dtype)))
    y = jnp.einsum("ih,bhwc->biwc", mh, x, precision=_HI)
    return jnp.einsum("jw,biwc->bijc", mw, y, precision=_HI)


class StdConv(nnx.Module):
    """Weight-standardised convolution (reference ``StdConv2d``), no bias, PyTorch
    padding; the standardisation runs in at least float32.
    """

    def __init__(self, cin: int, cout: int, k: int, stride: int = 1, *, padding: int = 0,
                 dtype: Optional[Any] = None, param_dtype: Any = jnp.float32,
                 rngs: nnx.Rngs):
        self.stride = stride
        self.padding = padding
        self.dtype = dtype
        self.kernel = nnx.Param(torch_default_conv_init(rngs.params(), (k, k, cin, cout),
                                                        param_dtype))

    def __call__(self, x: Float[Array, "b h w c"]) -> Float[Array, "b h2 w2 d"]:
        w = self.kernel[...]
        dt = (jnp.promote_types(x.dtype, w.dtype) if self.dtype is None
              else jnp.dtype(self.dtype))
        w = w.astype(jnp.promote_types(dt, w.dtype if self.dtype is None else jnp.float32))
        mean = jnp.mean(w, axis=(0, 1, 2), keepdims=True)
        var = jnp.mean(jnp.square(w - mean), axis=(0, 1, 2), keepdims=True)
        w = ((w - mean) / jnp.sqrt(var + 1e-5)).astype(dt)
        p = self.padding
        return jax.lax.conv_general_dilated(
            x.astype(dt), w, (self.stride, self.stride), ((p, p), (p, p)),
            dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=_HI)


def _gn(c: int, groups: int, eps: float, param_dtype: Any, rngs: nnx.Rngs,
        dtype: Optional[Any] = None) -> nnx.GroupNorm:
    return nnx.GroupNorm(c, num_groups=groups, epsilon=eps, use_fast_variance=False,
                         dtype=dtype, param_dtype=param_dtype, rngs=rngs)


class R50Unit(nnx.Module):
    """Bottleneck unit of TransUNet's R50 (see the module docstring for the formula)."""

    def __init__(self, cin: int, cout: int, cmid: int, stride: int = 1, *,
                 dtype: Optional[Any] = None, param_dtype: Any = jnp.float32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.conv1 = StdConv(cin, cmid, 1, **kw)
        self.gn1 = _gn(cmid, 32, 1e-6, param_dtype, rngs, dtype)
        self.conv2 = StdConv(cmid, cmid, 3, stride, padding=1, **kw)
        self.gn2 = _gn(cmid, 32, 1e-6, param_dtype, rngs, dtype)
        self.conv3 = StdConv(cmid, cout, 1, **kw)
        self.gn3 = _gn(cout, 32, 1e-6, param_dtype, rngs, dtype)
        has_proj = stride != 1 or cin != cout
        self.conv_proj = StdConv(cin, cout, 1, stride, **kw) if has_proj else None
        self.gn_proj = _gn(cout, cout, 1e-5, param_dtype, rngs, dtype) if has_proj else None

    def __call__(self, x: Float[Array, "b h w c"]) -> Float[Array, "b h2 w2 d"]:
        res = x if self.conv_proj is None else self.gn_proj(self.conv_proj(x))
        y = jax.nn.relu(self.gn1(self.conv1(x)))
        y = jax.nn.relu(self.gn2(self.conv2(y)))
        y = self.gn3(self.conv3(y))
        return jax.nn.relu(res + y)


class ResNetV2(nnx.Module):
    """TransUNet's R50 hybrid backbone: root + three stages; returns the ``block3`` map and
    the skip features ``[block2 (8w, H/8), block1 zero-padded (4w, H/4), root (w, H/2)]``."""

    def __init__(self, units: Sequence[int], width: int, in_channels: int = 3, *,
                 dtype: Optional[Any] = None, param_dtype: Any = jnp.float32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.width = width
        self.root_conv = StdConv(in_channels, width, 7, 2, padding=3, **kw)
        self.root_gn = _gn(width, 32, 1e-6, param_dtype, rngs, dtype)
        body = []
        cin = width
        for s, n in enumerate(units):
            cmid, cout = width * 2 ** s, width * 4 * 2 ** s
            blk = []
            for i in range(n):
                blk.append(R50Unit(cin, cout, cmid, (1 if s == 0 else 2) if i == 0 else 1,
                                   **kw))
                cin = cout
            body.append(nnx.List(blk))
        self.body = nnx.List(body)
        self.out_channels = cin

    def __call__(self, x: Float[Array, "b h w c"]) -> tuple[Array, list[Array]]:
        in_size = x.shape[1]
        x = jax.nn.relu(self.root_gn(self.root_conv(x)))
        feats = [x]
        x = nnx.max_pool(x, (3, 3), strides=(2, 2), padding="VALID")
        for i, stage in enumerate(self.body):
            for unit in stage:
                x = unit(x)
            if i == len(self.body) - 1:
                break
            right = int(in_size / 4 / (i + 1))
            pad = right - x.shape[1]
            if pad != 0:
                if not 0 < pad < 3:
                    raise ValueError(f"x: feature map of stage {i + 1} has {x.shape[1]} rows, "
                                     f"expected {right}; use img_size divisible by 16")
                x_skip = jnp.pad(x, ((0, 0), (0, pad), (0, right - x.shape[2]), (0, 0)))
            else:
                x_skip = x
            feats.append(x_skip)
        return x, feats[::-1]


class ViTAttention(nnx.Module):
    """Multi-head self-attention with separate ``query/key/value/out`` dense layers (computing
    in ``dtype``; the attention softmax runs in at least float32)."""

    def __init__(self, hidden: int, num_heads: int, attention_dropout_rate: float, *,
                 dtype: Optional[Any] = None, param_dtype: Any = jnp.float32, rngs: nnx.Rngs):
        self.num_heads = num_heads
        self.head_dim = hidden // num_heads

        def lin():
            return nnx.Linear(hidden, hidden, kernel_init=torch_default_conv_init,
                              bias_init=torch_default_bias_init(hidden), dtype=dtype,
                              param_dtype=param_dtype, precision=_HI, rngs=rngs)

        self.query, self.key, self.value, self.out = lin(), lin(), lin(), lin()
        self.attn_dropout = nnx.Dropout(attention_dropout_rate, rngs=rngs)
        self.proj_dropout = nnx.Dropout(attention_dropout_rate, rngs=rngs)

    def __call__(self, x: Float[Array, "b n d"]) -> Float[Array, "b n d"]:
        b, n, d = x.shape
        q = self.query(x).reshape(b, n, self.num_heads, self.head_dim)
        k = self.key(x).reshape(b, n, self.num_heads, self.head_dim)
        v = self.value(x).reshape(b, n, self.num_heads, self.head_dim)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k, precision=_HI) / math.sqrt(self.head_dim)
        p = jax.nn.softmax(at_least_float32(s), axis=-1).astype(v.dtype)
        p = self.attn_dropout(p)
        ctx = jnp.einsum("bhqk,bkhd->bqhd", p, v, precision=_HI).reshape(b, n, d)
        return self.proj_dropout(self.out(ctx))


class ViTMlp(nnx.Module):
    """``dropout(fc2(dropout(gelu(fc1(x)))))`` with exact GELU."""

    def __init__(self, hidden: int, mlp_dim: int, dropout_rate: float, *,
                 dtype: Optional[Any] = None, param_dtype: Any = jnp.float32, rngs: nnx.Rngs):
        bias = jax.nn.initializers.normal(1e-6)
        self.fc1 = nnx.Linear(hidden, mlp_dim, kernel_init=_xavier, bias_init=bias,
                              dtype=dtype, param_dtype=param_dtype, precision=_HI, rngs=rngs)
        self.fc2 = nnx.Linear(mlp_dim, hidden, kernel_init=_xavier, bias_init=bias,
                              dtype=dtype, param_dtype=param_dtype, precision=_HI, rngs=rngs)
        self.dropout = nnx.Dropout(dropout_rate, rngs=rngs)

    def __call__(self, x: Float[Array, "b n d"]) -> Float[Array, "b n d"]:
        x = self.dropout(jax.nn.gelu(self.fc1(x), approximate=False))
        return self.dropout(self.fc2(x))


class ViTBlock(nnx.Module):
    """Pre-LN transformer block ``x + Attn(LN(x))`` then ``x + MLP(LN(x))``."""

    def __init__(self, hidden: int, num_heads: int, mlp_dim: int, dropout_rate: float,
                 attention_dropout_rate: float, *, dtype: Optional[Any] = None,
                 param_dtype: Any = jnp.float32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.attention_norm = nnx.LayerNorm(hidden, epsilon=1e-6, use_fast_variance=False, **kw)
        self.attn = ViTAttention(hidden, num_heads, attention_dropout_rate, **kw)
        self.ffn_norm = nnx.LayerNorm(hidden, epsilon=1e-6, use_fast_variance=False, **kw)
        self.ffn = ViTMlp(hidden, mlp_dim, dropout_rate, **kw)

    def __call__(self, x: Float[Array, "b n d"]) -> Float[Array, "b n d"]:
        x = x + self.attn(self.attention_norm(x))
        return x + self.ffn(self.ffn_norm(x))


class _ConvBNReLU(nnx.Module):
    def __init__(self, cin: int, cout: int, *, dtype: Optional[Any], param_dtype: Any,
                 rngs: nnx.Rngs):
        self.conv = conv2d(cin, cout, 3, options=ConvOptions(kernel_init=torch_default_conv_init),
                           dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.bn = batch_norm(cout, dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, x):
        return jax.nn.relu(self.bn(self.conv(x)))


class _DecoderBlock(nnx.Module):
    def __init__(self, cin: int, cout: int, cskip: int, *, dtype: Optional[Any],
                 param_dtype: Any, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.conv1 = _ConvBNReLU(cin + cskip, cout, **kw)
        self.conv2 = _ConvBNReLU(cout, cout, **kw)

    def __call__(self, x, skip=None):
        x = upsample_bilinear_align_corners(x)
        if skip is not None:
            x = jnp.concatenate([x, skip], axis=-1)
        return self.conv2(self.conv1(x))


class DecoderCup(nnx.Module):
    """TransUNet's cascaded upsampler: ``conv_more`` then four upsampling blocks with skips."""

    def __init__(self, hidden: int, head_channels: int, decoder_channels: Sequence[int],
                 skip_channels: Sequence[int], n_skip: int, *, dtype: Optional[Any] = None,
                 param_dtype: Any = jnp.float32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.n_skip = n_skip
        self.conv_more = _ConvBNReLU(hidden, head_channels, **kw)
        ins = (head_channels,) + tuple(decoder_channels[:-1])
        skips = [c if i < n_skip else 0 for i, c in enumerate(skip_channels)]
        self.blocks = nnx.List([_DecoderBlock(ci, co, cs, **kw)
                                for ci, co, cs in zip(ins, decoder_channels, skips)])

    def __call__(self, z: Float[Array, "b g g d"], features: Sequence[Array]) -> Array:
        x = self.conv_more(z)
        for i, blk in enumerate(self.blocks):
            x = blk(x, features[i] if i < self.n_skip else None)
        return x


class TransUNet(nnx.Module):
    """TransUNet R50+ViT-B/16 (the reference ``VisionTransformer``).

    Args:
        num_classes: ``K >= 1`` (Synapse 9, ACDC 4). in_channels: 1 is repeated to 3.
        img_size: input side, divisible by 16 (224).
        hidden, num_layers, num_heads, mlp_dim: ViT sizes (768, 12, 12, 3072).
        resnet_units: R50 units per stage (``(3, 4, 9)``). width: R50 root width (64).
        decoder_channels: ``(256, 128, 64, 16)``. head_channels: 512. n_skip: 0..3 (3).
        dropout_rate, attention_dropout_rate: 0.1 and 0.0.
        dtype: computation dtype (None: inferred; logits and ``z`` in at least float32).
        param_dtype: parameter dtype. rngs: NNX random streams (``dropout`` stream).
    """

    def __init__(self, num_classes: int, *, in_channels: int = 1, img_size: int = 224,
                 hidden: int = 768, num_layers: int = 12, num_heads: int = 12,
                 mlp_dim: int = 3072, resnet_units: Sequence[int] = (3, 4, 9),
                 width: int = 64, decoder_channels: Sequence[int] = (256, 128, 64, 16),
                 head_channels: int = 512, n_skip: int = 3, dropout_rate: float = 0.1,
                 attention_dropout_rate: float = 0.0, dtype: Optional[Any] = None,
                 param_dtype: Any = jnp.float32, rngs: nnx.Rngs):
        num_classes = V.check_int("num_classes", num_classes, low=1)
        in_channels = V.check_int("in_channels", in_channels, low=1)
        img_size = V.check_int("img_size", img_size, low=16)
        if img_size % 16:
            raise ValueError(f"img_size must be divisible by 16 (R50 stride 16, patch size 1); "
                             f"got {img_size}")
        hidden = V.check_int("hidden", hidden, low=1)
        num_layers = V.check_int("num_layers", num_layers, low=0)
        num_heads = V.check_int("num_heads", num_heads, low=1)
        if hidden % num_heads:
            raise ValueError(f"num_heads must divide hidden; got hidden={hidden}, "
                             f"num_heads={num_heads}")
        mlp_dim = V.check_int("mlp_dim", mlp_dim, low=1)
        resnet_units = check_int_tuple("resnet_units", resnet_units, 3)
        width = V.check_int("width", width, low=32)
        if width % 32:
            raise ValueError(f"width must be divisible by 32 (GroupNorm with 32 groups); "
                             f"got {width}")
        decoder_channels = check_int_tuple("decoder_channels", decoder_channels, 4)
        head_channels = V.check_int("head_channels", head_channels, low=1)
        n_skip = V.check_int("n_skip", n_skip, low=0, high=3)
        dropout_rate = _float("dropout_rate", dropout_rate, 0.0, 1.0)
        attention_dropout_rate = _float("attention_dropout_rate", attention_dropout_rate,
                                        0.0, 1.0)
        if not isinstance(rngs, nnx.Rngs):
            raise TypeError(f"rngs must be an nnx.Rngs; got {type(rngs).__name__}")
        dtype, param_dtype = check_dtypes(dtype, param_dtype)
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)

        self.num_classes = num_classes
        self.in_channels = in_channels
        self.img_size = img_size
        self.hidden = hidden
        self.grid = img_size // 16
        self.dtype, self.param_dtype = dtype, param_dtype
        self.hybrid_model = ResNetV2(resnet_units, width, 3 if in_channels == 1 else in_channels,
                                     **kw)
        cin = self.hybrid_model.out_channels
        self.patch_embeddings = conv2d(cin, hidden, 1, options=ConvOptions(
            use_bias=True, kernel_init=torch_default_conv_init,
            bias_init=torch_default_bias_init(cin)), **kw)
        self.position_embeddings = nnx.Param(jnp.zeros((1, self.grid ** 2, hidden),
                                                       param_dtype))
        self.dropout = nnx.Dropout(dropout_rate, rngs=rngs)
        self.layer = nnx.List([ViTBlock(hidden, num_heads, mlp_dim, dropout_rate,
                                        attention_dropout_rate, **kw)
                               for _ in range(num_layers)])
        self.encoder_norm = nnx.LayerNorm(hidden, epsilon=1e-6, use_fast_variance=False, **kw)
        self.decoder = DecoderCup(hidden, head_channels, decoder_channels,
                                  (8 * width, 4 * width, width, 0), n_skip, **kw)
        cl = decoder_channels[-1]
        self.segmentation_head = conv2d(cl, num_classes, 3, options=ConvOptions(
            use_bias=True, kernel_init=torch_default_conv_init,
            bias_init=torch_default_bias_init(9 * cl)), **kw)

    @classmethod
    def small(cls, num_classes: int, *, in_channels: int = 1, img_size: int = 64,
              dtype: Optional[Any] = None, param_dtype: Any = jnp.float32,
              rngs: nnx.Rngs) -> "TransUNet":
        """A CPU-sized variant of the same topology (64 x 64 inputs by default)."""
        return cls(num_classes, in_channels=in_channels, img_size=img_size, hidden=64,
                   num_layers=2, num_heads=2, mlp_dim=128, resnet_units=(1, 1, 1), width=32,
                   decoder_channels=(32, 16, 16, 8), head_channels=64,
                   dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    def encode(self, x: Float[Array, "b h w c"]) -> tuple[Float[Array, "b g g d"], list[Array]]:
        """Hybrid encoder: ``(z, skips)`` with ``z`` the normed transformer output on the grid."""
        check_nhwc_input(x, self.in_channels)
        if x.shape[1] != self.img_size or x.shape[2] != self.img_size:
            raise ValueError(f"x must be {self.img_size} x {self.img_size} (img_size; the "
                             f"position embeddings fix the grid); got shape {tuple(x.shape)}")
        x = x.astype(self.dtype if self.dtype is not None
                     else jnp.promote_types(x.dtype, self.param_dtype))
        if self.in_channels == 1:
            x = jnp.repeat(x, 3, axis=-1)
        h, feats = self.hybrid_model(x)
        h = self.patch_embeddings(h)
        b, g1, g2, d = h.shape
        pos = self.position_embeddings[...]
        if self.dtype is not None:
            pos = pos.astype(self.dtype)
        t = h.reshape(b, g1 * g2, d) + pos
        t = self.dropout(t)
        for blk in self.layer:
            t = blk(t)
        t = self.encoder_norm(t)
        return t.reshape(b, g1, g2, d), feats

    def __call__(self, x: Float[Array, "b h w c"]
                 ) -> tuple[Float[Array, "b h w k"], Float[Array, "b g g d"]]:
        """Return ``(logits (B, H, W, K), encoder features (B, H/16, W/16, hidden))``, both in
        at least float32."""
        z, feats = self.encode(x)
        logits = self.segmentation_head(self.decoder(z, feats))
        return at_least_float32(logits), at_least_float32(z)
