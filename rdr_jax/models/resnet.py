"""torchvision-faithful ResNet backbones (ResNet-34, ResNet-50) in Flax NNX, NHWC.

The UNet of Chapter 5 uses a ResNet-34 encoder with ImageNet weights (Section C.5.1); parameter names, shapes, initialisation and the forward pass follow
torchvision so its weights load one-to-one. Why: the thesis' encoder without torch. Layer
details and parameter counts: ``docs/training.md`` ("Models").
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float

from rdr_jax._src import validation as V
from rdr_jax.models._precision import at_least_float32, check_dtypes, keep_stats_precise

__all__ = ["ResNet", "BasicBlock", "Bottleneck", "resnet34", "resnet50", "torch_conv_init",
           "torch_default_conv_init", "torch_default_bias_init", "check_nhwc_input",
           "check_int_tuple", "batch_norm", "conv2d", "ConvOptions"]

#: torchvision conv init ``kaiming_normal_(mode='fan_out', nonlinearity='relu')``.
torch_conv_init = jax.nn.initializers.variance_scaling(2.0, "fan_out", "normal")
#: PyTorch's default ``Conv2d``/``Linear`` weight init ``kaiming_uniform_(a=sqrt(5))``, i.e.
#: ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``.
torch_default_conv_init = jax.nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")


def torch_default_bias_init(fan_in: int):
    """PyTorch's default bias init ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` as a JAX initializer."""
    bound = 1.0 / math.sqrt(fan_in)

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


_HI = jax.lax.Precision.HIGHEST


@dataclasses.dataclass(frozen=True)
class ConvOptions:
    """The layer options of :func:`conv2d`: PyTorch's symmetric ``padding`` (None: ``k // 2``;
    else an int >= 0), ``use_bias``, and the ``kernel_init`` / ``bias_init`` initializers
    (default torchvision's :data:`torch_conv_init`; bias zeros)."""

    padding: Optional[int] = None
    use_bias: bool = False
    kernel_init: Any = torch_conv_init
    bias_init: Any = None

    def __post_init__(self):
        if self.padding is not None:
            V.check_int("padding", self.padding, low=0)
        if not isinstance(self.use_bias, bool):
            raise TypeError(f"use_bias must be a bool; got {self.use_bias!r}")
        if not callable(self.kernel_init):
            raise TypeError(f"kernel_init must be an initializer (callable); got "
                            f"{type(self.kernel_init).__name__}")
        if self.bias_init is not None and not callable(self.bias_init):
            raise TypeError(f"bias_init must be an initializer (callable) or None; got "
                            f"{type(self.bias_init).__name__}")


def conv2d(cin: int, cout: int, k: int, stride: int = 1, *,
           options: ConvOptions = ConvOptions(), dtype: Optional[Any] = None,
           param_dtype: Any = jnp.float32, rngs: nnx.Rngs) -> nnx.Conv:
    """A ``k x k`` convolution (``options``: :class:`ConvOptions`, padding, bias and
    initializers), computing in ``dtype`` (``None``: inferred) with parameters in
    ``param_dtype``; torchvision's layer, so its weights load one-to-one."""
    if not isinstance(options, ConvOptions):
        raise TypeError(f"options must be a ConvOptions; got {type(options).__name__}")
    use_bias, bias_init = options.use_bias, options.bias_init
    p = k // 2 if options.padding is None else options.padding
    kw = {}
    if use_bias:
        kw["bias_init"] = bias_init if bias_init is not None else jax.nn.initializers.zeros
    return nnx.Conv(cin, cout, (k, k), strides=stride, padding=((p, p), (p, p)),
                    use_bias=use_bias, kernel_init=options.kernel_init, dtype=dtype,
                    param_dtype=param_dtype, precision=_HI, rngs=rngs, **kw)


def batch_norm(c: int, *, dtype: Optional[Any] = None, param_dtype: Any = jnp.float32,
               rngs: nnx.Rngs) -> nnx.BatchNorm:
    """PyTorch ``BatchNorm2d`` defaults (eps 1e-5, momentum 0.1), running statistics
    in at least float32.
    """
    bn = nnx.BatchNorm(c, momentum=0.9, epsilon=1e-5, use_fast_variance=False, dtype=dtype,
                       param_dtype=param_dtype, rngs=rngs)
    return keep_stats_precise(bn, param_dtype)


def check_int_tuple(name: str, value: Any, length: int | None = None, low: int = 1
                    ) -> tuple[int, ...]:
    """Check a sequence of ints (each ``>= low``; ``length`` entries if given)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a sequence of ints; got {type(value).__name__}")
    out = tuple(V.check_int(f"{name}[{i}]", v, low=low) for i, v in enumerate(value))
    if length is not None and len(out) != length:
        raise ValueError(f"{name} must have {length} entries; got {len(out)}: {out}")
    if not out:
        raise ValueError(f"{name} must not be empty")
    return out


def check_nhwc_input(x: Any, channels: int | tuple[int, ...], name: str = "x") -> None:
    """Check a rank-4 NHWC floating array whose channel count is in ``channels``."""
    chans = (channels,) if isinstance(channels, int) else tuple(channels)
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise TypeError(f"{name} must be an array of shape (B, H, W, C) (NHWC); "
                        f"got {type(x).__name__}")
    if x.ndim != 4:
        raise ValueError(f"{name} must have rank 4 (B, H, W, C) in NHWC layout; got shape "
                         f"{tuple(x.shape)}")
    if x.shape[-1] not in chans:
        want = " or ".join(str(c) for c in chans)
        raise ValueError(f"{name} must have {want} channels (last axis, NHWC); got shape "
                         f"{tuple(x.shape)}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"{name} must be a floating array; got dtype {x.dtype}")


class BasicBlock(nnx.Module):
    """torchvision ``BasicBlock``: ``relu(bn2(conv2(relu(bn1(conv1(x))))) + sc(x))``
    (shortcut ``downsample`` iff ``stride != 1`` or ``cin != planes``).
    """

    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int = 1, *,
                 dtype: Optional[Any] = None, param_dtype: Any = jnp.float32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.conv1 = conv2d(cin, planes, 3, stride, **kw)
        self.bn1 = batch_norm(planes, **kw)
        self.conv2 = conv2d(planes, planes, 3, 1, **kw)
        self.bn2 = batch_norm(planes, **kw)
        self.downsample = (nnx.List([conv2d(cin, planes, 1, stride, **kw),
                                     batch_norm(planes, **kw)])
                           if stride != 1 or cin != planes else None)

    def __call__(self, x: Float[Array, "b h w c"]) -> Float[Array, "b h2 w2 d"]:
        out = jax.nn.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        sc = x if self.downsample is None else self.downsample[1](self.downsample[0](x))
        return jax.nn.relu(out + sc)


class Bottleneck(nnx.Module):
    """torchvision ``Bottleneck`` (v1.5: stride on the 3x3 ``conv2``), expansion 4."""

    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int = 1, *,
                 dtype: Optional[Any] = None, param_dtype: Any = jnp.float32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        cout = planes * self.expansion
        self.conv1 = conv2d(cin, planes, 1, 1, **kw)
        self.bn1 = batch_norm(planes, **kw)
        self.conv2 = conv2d(planes, planes, 3, stride, **kw)
        self.bn2 = batch_norm(planes, **kw)
        self.conv3 = conv2d(planes, cout, 1, 1, **kw)
        self.bn3 = batch_norm(cout, **kw)
        self.downsample = (nnx.List([conv2d(cin, cout, 1, stride, **kw),
                                     batch_norm(cout, **kw)])
                           if stride != 1 or cin != cout else None)

    def __call__(self, x: Float[Array, "b h w c"]) -> Float[Array, "b h2 w2 d"]:
        out = jax.nn.relu(self.bn1(self.conv1(x)))
        out = jax.nn.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        sc = x if self.downsample is None else self.downsample[1](self.downsample[0](x))
        return jax.nn.relu(out + sc)


_BLOCKS = {"basic": BasicBlock, "bottleneck": Bottleneck}


class ResNet(nnx.Module):
    """torchvision ``ResNet`` (NHWC), optionally without the classifier.

    ``features(x)``: the five maps at ``H/2 .. H/32`` a UNet encoder uses; ``__call__``:
    ``fc(mean layer4)`` or, without ``num_classes``, the ``layer4`` map.

    Args:
        block: ``"basic"`` or ``"bottleneck"``. depths: blocks per stage.
        widths: stage widths (``(64, 128, 256, 512)``). in_channels: of ``conv1``.
        num_classes: ``fc`` size or None. dtype: computation dtype (None: inferred).
        param_dtype: parameter dtype. rngs: NNX random streams.
    """

    def __init__(self, block: str, depths: Sequence[int],
                 widths: Sequence[int] = (64, 128, 256, 512), *, in_channels: int = 3,
                 num_classes: int | None = None, dtype: Optional[Any] = None,
                 param_dtype: Any = jnp.float32, rngs: nnx.Rngs):
        if block not in _BLOCKS:
            raise ValueError(f"block must be 'basic' or 'bottleneck'; got {block!r}")
        depths = check_int_tuple("depths", depths, 4)
        widths = check_int_tuple("widths", widths, 4)
        in_channels = V.check_int("in_channels", in_channels, low=1)
        if num_classes is not None:
            num_classes = V.check_int("num_classes", num_classes, low=1)
        if not isinstance(rngs, nnx.Rngs):
            raise TypeError(f"rngs must be an nnx.Rngs; got {type(rngs).__name__}")
        dtype, param_dtype = check_dtypes(dtype, param_dtype)
        cls = _BLOCKS[block]
        self.block = block
        self.depths, self.widths = depths, widths
        self.in_channels = in_channels
        self.num_classes = num_classes
        self.dtype, self.param_dtype = dtype, param_dtype
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.conv1 = conv2d(in_channels, widths[0], 7, 2, options=ConvOptions(padding=3), **kw)
        self.bn1 = batch_norm(widths[0], **kw)
        cin = widths[0]
        stages = []
        for s, (n, w) in enumerate(zip(depths, widths)):
            blocks = []
            for i in range(n):
                blocks.append(cls(cin, w, (1 if s == 0 else 2) if i == 0 else 1, **kw))
                cin = w * cls.expansion
            stages.append(nnx.List(blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        #: channels of the five ``features`` maps.
        self.feature_channels = (widths[0],) + tuple(w * cls.expansion for w in widths)
        self.fc = (nnx.Linear(cin, num_classes, kernel_init=torch_default_conv_init,
                              bias_init=torch_default_bias_init(cin), dtype=dtype,
                              param_dtype=param_dtype, precision=_HI, rngs=rngs)
                   if num_classes is not None else None)

    def features(self, x: Float[Array, "b h w c"]) -> tuple[Array, ...]:
        """The stem output and the four stage outputs (see the class docstring)."""
        check_nhwc_input(x, self.in_channels)
        x = x.astype(self.dtype if self.dtype is not None
                     else jnp.promote_types(x.dtype, self.param_dtype))
        f0 = jax.nn.relu(self.bn1(self.conv1(x)))
        h = nnx.max_pool(f0, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
        feats = [f0]
        for stage in (self.layer1, self.layer2, self.layer3, self.layer4):
            for blk in stage:
                h = blk(h)
            feats.append(h)
        return tuple(feats)

    def __call__(self, x: Float[Array, "b h w c"]) -> Array:
        """Logits ``(B, num_classes)`` if the model has ``fc``, else the ``layer4`` map."""
        h = self.features(x)[-1]
        if self.fc is None:
            return at_least_float32(h)
        return at_least_float32(self.fc(jnp.mean(h, axis=(1, 2))))


def resnet34(*, in_channels: int = 3, num_classes: int | None = None,
             widths: Sequence[int] = (64, 128, 256, 512),
             depths: Sequence[int] = (3, 4, 6, 3), dtype: Optional[Any] = None,
             param_dtype: Any = jnp.float32, rngs: nnx.Rngs) -> ResNet:
    """torchvision ``resnet34`` (basic blocks, depths ``(3, 4, 6, 3)``); ``num_classes=None``
    drops ``fc`` (21,284,672 parameters). ``dtype``/``param_dtype``: see :class:`ResNet`."""
    return ResNet("basic", depths, widths, in_channels=in_channels, num_classes=num_classes,
                  dtype=dtype, param_dtype=param_dtype, rngs=rngs)


def resnet50(*, in_channels: int = 3, num_classes: int | None = None,
             widths: Sequence[int] = (64, 128, 256, 512),
             depths: Sequence[int] = (3, 4, 6, 3), dtype: Optional[Any] = None,
             param_dtype: Any = jnp.float32, rngs: nnx.Rngs) -> ResNet:
    """torchvision ``resnet50`` (bottlenecks, depths ``(3, 4, 6, 3)``); ``num_classes=None``
    drops ``fc`` (23,508,032 parameters). ``dtype``/``param_dtype``: see :class:`ResNet`."""
    return ResNet("bottleneck", depths, widths, in_channels=in_channels,
                  num_classes=num_classes, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
