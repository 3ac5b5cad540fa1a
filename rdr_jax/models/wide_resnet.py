"""WideResNet-28-2 in Flax NNX (NHWC), as the deep DAC experiments of Chapter 4 use it.

The FixMatch PyTorch port the thesis adapted (Section B.6), layer for layer,
including its initialisation, BatchNorm momentum convention and one quirk (the first block
of groups 2 and 3 feeds the raw input to ``conv1``). Why: parameter counts and activations
match the reference. Details: ``docs/training.md`` ("Models").
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Float

from rdr_jax._src import validation as V
from rdr_jax._src.jit import jit
from rdr_jax.models._precision import at_least_float32, check_dtypes, keep_stats_precise

__all__ = ["WideResNet", "BasicBlock", "conv_init", "linear_init"]

_CHUNK = 1 << 14


@jit(static_argnames=("dtype",), fast_cpu_compile=False)
def _normal_chunk(key, i, dtype):
    return jax.random.normal(jax.random.fold_in(key, i), (_CHUNK,), dtype)


def _normal_init(scale: float, mode: str) -> Callable[..., Array]:
    """Untruncated ``N(0, scale / fan)`` initializer, drawn in fixed-size chunks so
    that one compiled sampler serves every kernel shape.
    """
    def init(key, shape, dtype=jnp.float32):
        shape = tuple(int(d) for d in shape)
        receptive = math.prod(shape[:-2])
        fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
        fan = fan_out if mode == "fan_out" else (fan_in + fan_out) / 2
        n = math.prod(shape)
        z = jnp.concatenate([_normal_chunk(key, i, np.dtype(dtype))
                             for i in range(-(-n // _CHUNK))])
        return (math.sqrt(scale / fan) * z[:n]).reshape(shape).astype(dtype)
    return init


#: Reference conv init: ``kaiming_normal_(mode='fan_out', nonlinearity='leaky_relu')`` with
#: PyTorch's default slope ``a = 0`` (gain^2 = 2), i.e. ``N(0, 2 / (k_h k_w C_out))``.
conv_init = _normal_init(2.0, "fan_out")
#: Reference linear init: ``xavier_normal_``, i.e. ``N(0, 2 / (fan_in + fan_out))``.
linear_init = _normal_init(1.0, "fan_avg")

_PAD1 = ((1, 1), (1, 1))  # PyTorch padding=1 (symmetric), also for stride 2


def _bn(num_features: int, momentum: float, param_dtype: Any, rngs: nnx.Rngs,
        dtype: Optional[Any] = None) -> nnx.BatchNorm:
    bn = nnx.BatchNorm(num_features, momentum=1.0 - momentum, epsilon=1e-5,
                       use_fast_variance=False, dtype=dtype, param_dtype=param_dtype,
                       rngs=rngs)
    # Flax creates the running statistics in float32 whatever param_dtype is; keep them in
    # float64 for float64 models (float32 for float32 and half-precision parameters).
    return keep_stats_precise(bn, param_dtype)


def _conv(cin: int, cout: int, k: int, stride: int, param_dtype: Any,
          rngs: nnx.Rngs, dtype: Optional[Any] = None) -> nnx.Conv:
    return nnx.Conv(cin, cout, (k, k), strides=stride, padding=_PAD1 if k == 3 else "VALID",
                    use_bias=False, kernel_init=conv_init, dtype=dtype,
                    param_dtype=param_dtype, precision=jax.lax.Precision.HIGHEST, rngs=rngs)


class BasicBlock(nnx.Module):
    """Pre-activation WRN basic block of the FixMatch reference.

    Args:
        in_planes, out_planes: channels (a 1x1 shortcut iff they differ). stride: of ``conv1``.
        activate_before_residual: feed ``act(bn1(x))`` to the shortcut too.
        bn_momentum: PyTorch-convention momentum. leaky_slope: LeakyReLU slope.
        dropout: rate before ``conv2``. dtype, param_dtype, rngs: as :class:`WideResNet`.
    """

    def __init__(self, in_planes: int, out_planes: int, stride: int, *,
                 activate_before_residual: bool = False, bn_momentum: float = 0.001,
                 leaky_slope: float = 0.1, dropout: float = 0.0, dtype: Optional[Any] = None,
                 param_dtype: Any = jnp.float32, rngs: nnx.Rngs):
        self.equal_in_out = in_planes == out_planes
        self.activate_before_residual = bool(activate_before_residual)
        self.leaky_slope = float(leaky_slope)
        self.bn1 = _bn(in_planes, bn_momentum, param_dtype, rngs, dtype)
        self.conv1 = _conv(in_planes, out_planes, 3, stride, param_dtype, rngs, dtype)
        self.bn2 = _bn(out_planes, bn_momentum, param_dtype, rngs, dtype)
        self.conv2 = _conv(out_planes, out_planes, 3, 1, param_dtype, rngs, dtype)
        self.conv_shortcut = (None if self.equal_in_out
                              else _conv(in_planes, out_planes, 1, stride, param_dtype, rngs,
                                         dtype))
        self.dropout = nnx.Dropout(dropout, rngs=rngs) if dropout > 0 else None

    def _act(self, x):
        return jax.nn.leaky_relu(x, negative_slope=self.leaky_slope)

    def __call__(self, x: Float[Array, "b h w c"]) -> Float[Array, "b h2 w2 d"]:
        if self.equal_in_out:
            out = self.conv1(self._act(self.bn1(x)))
            shortcut = x
        else:
            if self.activate_before_residual:
                x = self._act(self.bn1(x))
            else:
                # Reference quirk: bn1 is evaluated (running statistics update in training
                # mode) but its output is unused; conv1 and the shortcut see the raw input.
                self.bn1(x)
            out = self.conv1(x)
            shortcut = self.conv_shortcut(x)
        out = self._act(self.bn2(out))
        if self.dropout is not None:
            out = self.dropout(out)
        return shortcut + self.conv2(out)


class WideResNet(nnx.Module):
    """WideResNet-``depth``-``widen_factor`` of the FixMatch code (WRN-28-2 for
    CIFAR-100, Section 4.7).

    Args:
        num_classes: logits. depth: ``(depth - 4) % 6 == 0``, >= 10 (28).
        widen_factor: channel multiplier (2). in_channels: 3 for CIFAR.
        bn_momentum: PyTorch convention (0.001). leaky_slope: 0.1. dropout: in [0, 1).
        dtype: computation dtype (None: inferred; outputs in at least float32).
        param_dtype: parameter dtype. rngs: NNX random streams.
    """

    def __init__(self, num_classes: int, depth: int = 28, widen_factor: int = 2, *,
                 in_channels: int = 3, bn_momentum: float = 0.001, leaky_slope: float = 0.1,
                 dropout: float = 0.0, dtype: Optional[Any] = None,
                 param_dtype: Any = jnp.float32, rngs: nnx.Rngs):
        num_classes = V.check_int("num_classes", num_classes, low=1)
        depth = V.check_int("depth", depth, low=10)
        if (depth - 4) % 6 != 0:
            raise ValueError(f"depth must satisfy (depth - 4) % 6 == 0 (e.g. 10, 16, 22, 28); "
                             f"got {depth}")
        widen_factor = V.check_int("widen_factor", widen_factor, low=1)
        in_channels = V.check_int("in_channels", in_channels, low=1)
        if not isinstance(rngs, nnx.Rngs):
            raise TypeError(f"rngs must be an nnx.Rngs; got {type(rngs).__name__}")
        for name, val, lo, hi, lo_open, hi_open in (
                ("bn_momentum", bn_momentum, 0.0, 1.0, True, True),
                ("dropout", dropout, 0.0, 1.0, False, True)):
            if not isinstance(val, (int, float, np.floating, np.integer)) or isinstance(val, bool):
                raise TypeError(f"{name} must be a float; got {type(val).__name__}")
            if not ((val > lo if lo_open else val >= lo) and (val < hi if hi_open else val <= hi)):
                lb, rb = "(" if lo_open else "[", ")" if hi_open else "]"
                raise ValueError(f"{name} must be in {lb}{lo}, {hi}{rb}; got {val}")
        if not isinstance(leaky_slope, (int, float, np.floating)) or leaky_slope < 0:
            raise ValueError(f"leaky_slope must be a float >= 0; got {leaky_slope!r}")
        dtype, param_dtype = check_dtypes(dtype, param_dtype)

        self.dtype, self.param_dtype = dtype, param_dtype
        self.num_classes = num_classes
        self.depth = depth
        self.widen_factor = widen_factor
        self.in_channels = in_channels
        self.leaky_slope = float(leaky_slope)
        channels = [16, 16 * widen_factor, 32 * widen_factor, 64 * widen_factor]
        self.num_features = channels[3]
        n = (depth - 4) // 6
        kw = dict(bn_momentum=float(bn_momentum), leaky_slope=float(leaky_slope),
                  dropout=float(dropout), dtype=dtype, param_dtype=param_dtype, rngs=rngs)

        self.conv1 = _conv(in_channels, channels[0], 3, 1, param_dtype, rngs, dtype)

        def group(cin, cout, stride, abr):
            return nnx.List([BasicBlock(cin if i == 0 else cout, cout, stride if i == 0 else 1,
                                        activate_before_residual=abr, **kw)
                             for i in range(n)])

        self.block1 = group(channels[0], channels[1], 1, True)
        self.block2 = group(channels[1], channels[2], 2, False)
        self.block3 = group(channels[2], channels[3], 2, False)
        self.bn1 = _bn(channels[3], float(bn_momentum), param_dtype, rngs, dtype)
        self.fc = nnx.Linear(channels[3], num_classes, kernel_init=linear_init,
                             bias_init=jax.nn.initializers.zeros, dtype=dtype,
                             param_dtype=param_dtype, precision=jax.lax.Precision.HIGHEST,
                             rngs=rngs)

    def _check_input(self, x) -> None:
        if not hasattr(x, "shape") or not hasattr(x, "dtype"):
            raise TypeError(f"x must be an array of shape (B, H, W, {self.in_channels}); "
                            f"got {type(x).__name__}")
        if x.ndim != 4:
            raise ValueError(f"x must have rank 4 (B, H, W, C) in NHWC layout; got shape "
                             f"{tuple(x.shape)}")
        if x.shape[-1] != self.in_channels:
            raise ValueError(f"x must have {self.in_channels} channels (last axis, NHWC); got "
                             f"shape {tuple(x.shape)}")
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise TypeError(f"x must be a floating array; got dtype {x.dtype}")

    def features(self, x: Float[Array, "b h w c"]) -> Float[Array, "b f"]:
        """Pooled penultimate features ``(B, 64 widen_factor)``, in at least
        float32.
        """
        self._check_input(x)
        out = self.conv1(x)
        for blk in (*self.block1, *self.block2, *self.block3):
            out = blk(out)
        out = jax.nn.leaky_relu(self.bn1(out), negative_slope=self.leaky_slope)
        return at_least_float32(jnp.mean(out, axis=(1, 2)))

    def __call__(self, x: Float[Array, "b h w c"]) -> Float[Array, "b k"]:
        """Logits ``fc(features(x))`` of shape ``(B, num_classes)``, in at least float32."""
        return at_least_float32(self.fc(self.features(x)))
