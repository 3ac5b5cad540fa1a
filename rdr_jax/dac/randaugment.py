"""RandAugment with the 14 operations of the thesis' deep DAC experiments, in JAX (Section B.6).

Each op matches PIL on images with values ``i / 255`` (floats in ``[0, 1]``, shape
``(H, W, C)``, ``C`` in {1, 3}; PIL's uint8 rounding aside); :data:`OPS` holds the value ranges
of the reference code (kekmodel/FixMatch-pytorch), which the thesis does not state. Why: the
augmentation of Section 4.7 has to be jit/vmap-able to run inside the train
step. Ranges, PIL details and the dm-pix choices: ``docs/training.md`` ("RandAugment").
"""

from __future__ import annotations

import functools
import numbers
from typing import Any, Callable

import dm_pix
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from rdr_jax._src import validation as V
from rdr_jax._src.jit import jit

__all__ = ["identity", "auto_contrast", "equalize", "rotate", "solarize", "color", "posterize",
           "contrast", "brightness", "sharpness", "shear_x", "shear_y", "translate_x",
           "translate_y", "OPS", "SIGNED_OPS", "op_value", "apply_op", "rand_augment",
           "rand_augment_batch", "CUTOUT_FILL", "cutout", "cutout_batch"]

_LUMA = (0.299, 0.587, 0.114)  # ITU-R 601-2, PIL's convert("L")


# --------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------
def _check_image(image: Any, name: str = "image", batched: bool = False) -> None:
    shape = "(B, H, W, C)" if batched else "(H, W, C)"
    if not hasattr(image, "shape") or not hasattr(image, "dtype"):
        raise TypeError(f"{name} must be a float array of shape {shape}; got "
                        f"{type(image).__name__}")
    if image.ndim != (4 if batched else 3):
        raise ValueError(f"{name} must have rank {4 if batched else 3} {shape}"
                         f"{'; use rand_augment_batch for batches' if image.ndim == 4 else ''}"
                         f"; got shape {tuple(image.shape)}")
    if image.shape[-1] not in (1, 3):
        raise ValueError(f"{name} must have 1 or 3 channels on the last axis (HWC layout); got "
                         f"shape {tuple(image.shape)}")
    if np.dtype(image.dtype) not in V.REAL_DTYPES:
        raise TypeError(f"{name} must be float32 or float64 with values in [0, 1] (convert uint8 "
                        f"images with x / 255); got dtype {image.dtype}")
    if V.is_concrete(image):
        arr = np.asarray(image)
        if arr.size and not (np.all(np.isfinite(arr)) and arr.min() >= 0 and arr.max() <= 1):
            raise ValueError(f"{name} values must be finite and in [0, 1]; got range "
                             f"[{np.nanmin(arr)}, {np.nanmax(arr)}]")


def _check_scalar(name: str, value: Any, low: float | None = None,
                  high: float | None = None) -> None:
    if isinstance(value, bool) or not (isinstance(value, numbers.Real)
                                       or (hasattr(value, "shape") and value.shape == ())):
        raise TypeError(f"{name} must be a real scalar; got {type(value).__name__} {value!r}")
    if V.is_concrete(value):
        v = float(np.asarray(value))
        if not np.isfinite(v) or (low is not None and v < low) or (high is not None and v > high):
            raise ValueError(f"{name} must be in [{low}, {high}]; got {v}")


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------
def _gray(image):
    """PIL ``convert('L')`` luma ``0.299 R + 0.587 G + 0.114 B`` (identity for 1 channel)."""
    if image.shape[-1] == 1:
        return image
    w = jnp.asarray(_LUMA, image.dtype)
    return jnp.sum(image * w, axis=-1, keepdims=True)


def _blend(degenerate, image, factor):
    """PIL ``Image.blend(degenerate, image, factor)``, clipped to [0, 1]."""
    f = jnp.asarray(factor, image.dtype)
    return jnp.clip(degenerate + f * (image - degenerate), 0.0, 1.0).astype(image.dtype)


def _quantize(image):
    """uint8 levels ``round(255 x)`` as int32 (exact for images ``i / 255``)."""
    return jnp.round(jnp.clip(image, 0.0, 1.0) * 255).astype(jnp.int32)


_TIE_NUDGE = 1e-4  # pixels; see _affine


def _affine(image, a, b, c, d, e, f, fill):
    """PIL ``Image.transform(AFFINE, (a..f), NEAREST, fillcolor=fill)`` via
    ``dm_pix.affine_transform(order=0)``; a ``1e-4`` px nudge resolves exact pixel-boundary ties
    as PIL's ``floor`` does.
    """
    dt = image.dtype
    one, zero = jnp.ones((), dt), jnp.zeros((), dt)
    a, b, c, d, e, f = (jnp.asarray(t, dt) for t in (a, b, c, d, e, f))
    matrix = jnp.stack([jnp.stack([e, d, zero]), jnp.stack([b, a, zero]),
                        jnp.stack([zero, zero, one])])
    offset = jnp.stack([(d + e) / 2 + f - 0.5 + _TIE_NUDGE, (a + b) / 2 + c - 0.5 + _TIE_NUDGE,
                        zero])
    return dm_pix.affine_transform(image, matrix, offset=offset, order=0, mode="constant",
                                   cval=float(fill)).astype(dt)


# --------------------------------------------------------------------------------------
# the 14 operations (implementations, no validation)
# --------------------------------------------------------------------------------------
def _jit_op(fn):
    """jit an op implementation ``fn(image, value, fill)`` (``fill`` static): one compilation
    per shape/dtype instead of one per primitive when ops are called eagerly."""
    return jit(fn, static_argnames=("fill",), fast_cpu_compile=False)


@_jit_op
def _identity(image, v=None, fill=None):
    return image


@_jit_op
def _auto_contrast(image, v=None, fill=None):
    lo = jnp.min(image, axis=(0, 1), keepdims=True)
    hi = jnp.max(image, axis=(0, 1), keepdims=True)
    span = hi - lo
    scaled = (image - lo) / jnp.where(span > 0, span, 1.0)
    return jnp.where(span > 0, jnp.clip(scaled, 0.0, 1.0), image).astype(image.dtype)


def _equalize_channel(q):
    """PIL ImageOps.equalize lookup table for one channel of uint8 levels ``q`` (flat)."""
    hist = jnp.bincount(q, length=256)
    top = jnp.max(q)                       # highest non-empty bin
    step = (q.size - hist[top]) // 255
    n_levels = jnp.sum(hist > 0)
    safe = jnp.maximum(step, 1)
    cum = jnp.cumsum(hist) - hist          # pixels strictly below each level
    lut = jnp.minimum((step // 2 + cum) // safe, 255)
    out = jnp.where((n_levels <= 1) | (step == 0), q, lut[q])
    return out


@_jit_op
def _equalize(image, v=None, fill=None):
    h, w, ch = image.shape
    q = _quantize(image).reshape(h * w, ch)
    out = jax.vmap(_equalize_channel, in_axes=1, out_axes=1)(q)
    return (out.reshape(h, w, ch) / 255).astype(image.dtype)


@_jit_op
def _rotate(image, degrees, fill=0.5):
    """PIL ``Image.rotate``: the affine map of angle ``-theta`` about ``(W/2, H/2)``."""
    h, w, _ = image.shape
    t = -jnp.deg2rad(jnp.asarray(degrees, image.dtype))
    cos, sin = jnp.cos(t), jnp.sin(t)
    cx, cy = w / 2, h / 2
    return _affine(image, cos, sin, cx - cos * cx - sin * cy,
                   -sin, cos, cy + sin * cx - cos * cy, fill)


@_jit_op
def _solarize(image, threshold, fill=None):
    return dm_pix.solarize(image, jnp.asarray(threshold, image.dtype)).astype(image.dtype)


@_jit_op
def _color(image, factor, fill=None):
    return _blend(jnp.broadcast_to(_gray(image), image.shape), image, factor)


@_jit_op
def _posterize(image, bits, fill=None):
    b = jnp.clip(jnp.floor(jnp.asarray(bits, image.dtype)), 1, 8)
    step = jnp.exp2(8 - b)
    q = _quantize(image).astype(image.dtype)
    return (jnp.floor(q / step) * step / 255).astype(image.dtype)


@_jit_op
def _contrast(image, factor, fill=None):
    return _blend(jnp.mean(_gray(image)), image, factor)


def _smooth(image):
    """PIL ``ImageFilter.SMOOTH``: 3x3 kernel [[1,1,1],[1,5,1],[1,1,1]] / 13 on the interior;
    the one-pixel border is copied unchanged."""
    h, w, _ = image.shape
    p = jnp.pad(image, ((1, 1), (1, 1), (0, 0)))
    acc = 4 * image
    for di in range(3):
        for dj in range(3):
            acc = acc + p[di:di + h, dj:dj + w]
    blurred = acc / 13
    rows = jnp.arange(h)[:, None, None]
    cols = jnp.arange(w)[None, :, None]
    border = (rows == 0) | (rows == h - 1) | (cols == 0) | (cols == w - 1)
    return jnp.where(border, image, blurred)


@_jit_op
def _brightness(image, factor, fill=None):
    return _blend(jnp.zeros((), image.dtype), image, factor)


@_jit_op
def _sharpness(image, factor, fill=None):
    return _blend(_smooth(image), image, factor)


@_jit_op
def _shear_x(image, shear, fill=0.5):
    return _affine(image, 1.0, shear, 0.0, 0.0, 1.0, 0.0, fill)


@_jit_op
def _shear_y(image, shear, fill=0.5):
    return _affine(image, 1.0, 0.0, 0.0, shear, 1.0, 0.0, fill)


@_jit_op
def _translate_x(image, fraction, fill=0.5):
    px = jnp.trunc(jnp.asarray(fraction, image.dtype) * image.shape[1])
    return _affine(image, 1.0, 0.0, px, 0.0, 1.0, 0.0, fill)


@_jit_op
def _translate_y(image, fraction, fill=0.5):
    px = jnp.trunc(jnp.asarray(fraction, image.dtype) * image.shape[0])
    return _affine(image, 1.0, 0.0, 0.0, 0.0, 1.0, px, fill)


# --------------------------------------------------------------------------------------
# public operations
# --------------------------------------------------------------------------------------
def identity(image: Float[Array, "h w c"]) -> Float[Array, "h w c"]:
    """The identity op."""
    _check_image(image)
    return image


def auto_contrast(image: Float[Array, "h w c"]) -> Float[Array, "h w c"]:
    """PIL ``ImageOps.autocontrast``: per channel ``(x - min) / (max - min)``."""
    _check_image(image)
    return _auto_contrast(image)


def equalize(image: Float[Array, "h w c"]) -> Float[Array, "h w c"]:
    """PIL ``ImageOps.equalize`` per channel on the uint8 levels ``round(255 x)``."""
    _check_image(image)
    return _equalize(image)


def rotate(image: Float[Array, "h w c"], degrees: float, *,
           fill: float = 0.5) -> Float[Array, "h w c"]:
    """Counter-clockwise rotation by ``degrees`` about the centre, nearest neighbour,
    ``fill`` outside (PIL ``img.rotate``).
    """
    _check_image(image)
    _check_scalar("degrees", degrees)
    _check_fill(fill)
    return _rotate(image, degrees, fill)


def solarize(image: Float[Array, "h w c"], threshold: float) -> Float[Array, "h w c"]:
    """Invert pixels at or above ``threshold`` (``dm_pix.solarize``, PIL
    ``ImageOps.solarize``).
    """
    _check_image(image)
    _check_scalar("threshold", threshold)
    return _solarize(image, threshold)


def color(image: Float[Array, "h w c"], factor: float) -> Float[Array, "h w c"]:
    """PIL ``ImageEnhance.Color``: blend with the luma by ``factor`` (1: identity)."""
    _check_image(image)
    _check_scalar("factor", factor, 0.0)
    return _color(image, factor)


def posterize(image: Float[Array, "h w c"], bits: float) -> Float[Array, "h w c"]:
    """PIL ``ImageOps.posterize``: keep the top ``floor(bits)`` bits (8: identity)."""
    _check_image(image)
    _check_scalar("bits", bits, 1.0, 8.0)
    return _posterize(image, bits)


def contrast(image: Float[Array, "h w c"], factor: float) -> Float[Array, "h w c"]:
    """PIL ``ImageEnhance.Contrast``: blend with the mean luma by ``factor``."""
    _check_image(image)
    _check_scalar("factor", factor, 0.0)
    return _contrast(image, factor)


def brightness(image: Float[Array, "h w c"], factor: float) -> Float[Array, "h w c"]:
    """PIL ``ImageEnhance.Brightness``: ``clip(factor x)``."""
    _check_image(image)
    _check_scalar("factor", factor, 0.0)
    return _brightness(image, factor)


def sharpness(image: Float[Array, "h w c"], factor: float) -> Float[Array, "h w c"]:
    """PIL ``ImageEnhance.Sharpness``: blend with PIL's ``SMOOTH`` filter by ``factor``."""
    _check_image(image)
    _check_scalar("factor", factor, 0.0)
    return _sharpness(image, factor)


def shear_x(image: Float[Array, "h w c"], shear: float, *,
            fill: float = 0.5) -> Float[Array, "h w c"]:
    """Horizontal shear: output ``(x, y)`` reads input ``(x + s y, y)`` (PIL affine)."""
    _check_image(image)
    _check_scalar("shear", shear)
    _check_fill(fill)
    return _shear_x(image, shear, fill)


def shear_y(image: Float[Array, "h w c"], shear: float, *,
            fill: float = 0.5) -> Float[Array, "h w c"]:
    """Vertical shear: output ``(x, y)`` reads input ``(x, y + s x)`` (PIL affine)."""
    _check_image(image)
    _check_scalar("shear", shear)
    _check_fill(fill)
    return _shear_y(image, shear, fill)


def translate_x(image: Float[Array, "h w c"], fraction: float, *,
                fill: float = 0.5) -> Float[Array, "h w c"]:
    """Horizontal shift: output ``(x, y)`` reads input ``(x + trunc(fraction W), y)``."""
    _check_image(image)
    _check_scalar("fraction", fraction)
    _check_fill(fill)
    return _translate_x(image, fraction, fill)


def translate_y(image: Float[Array, "h w c"], fraction: float, *,
                fill: float = 0.5) -> Float[Array, "h w c"]:
    """Vertical shift: output ``(x, y)`` reads input ``(x, y + trunc(fraction H))``."""
    _check_image(image)
    _check_scalar("fraction", fraction)
    _check_fill(fill)
    return _translate_y(image, fraction, fill)


#: name -> (public op, parameter at magnitude 0, parameter at magnitude ``max_magnitude``),
#: in the thesis' order (Section B.6); ranges of the reference
#: ``fixmatch_augment_pool``. ``None`` for the three parameter-free ops.
OPS: dict[str, tuple[Callable[..., Any], float | None, float | None]] = {
    "identity": (identity, None, None),
    "auto_contrast": (auto_contrast, None, None),
    "equalize": (equalize, None, None),
    "rotate": (rotate, 0.0, 30.0),
    "solarize": (solarize, 256.0 / 255.0, 0.0),
    "color": (color, 0.05, 0.95),
    "posterize": (posterize, 4.0, 8.0),
    "contrast": (contrast, 0.05, 0.95),
    "brightness": (brightness, 0.05, 0.95),
    "sharpness": (sharpness, 0.05, 0.95),
    "shear_x": (shear_x, 0.0, 0.3),
    "shear_y": (shear_y, 0.0, 0.3),
    "translate_x": (translate_x, 0.0, 0.3),
    "translate_y": (translate_y, 0.0, 0.3),
}

#: Ops whose parameter gets a random sign (probability 1/2 each), as in the reference.
SIGNED_OPS = frozenset({"rotate", "shear_x", "shear_y", "translate_x", "translate_y"})

_IMPL = {"identity": _identity, "auto_contrast": _auto_contrast, "equalize": _equalize,
         "rotate": _rotate, "solarize": _solarize, "color": _color, "posterize": _posterize,
         "contrast": _contrast, "brightness": _brightness, "sharpness": _sharpness,
         "shear_x": _shear_x, "shear_y": _shear_y, "translate_x": _translate_x,
         "translate_y": _translate_y}
_NAMES = tuple(OPS)
_LO = np.array([0.0 if OPS[n][1] is None else OPS[n][1] for n in _NAMES])
_HI = np.array([0.0 if OPS[n][2] is None else OPS[n][2] for n in _NAMES])
_SIGNED = np.array([n in SIGNED_OPS for n in _NAMES])


def _check_fill(fill: Any) -> float:
    """``fill`` is static (dm-pix passes it to ``map_coordinates`` as a static ``cval``)."""
    if isinstance(fill, bool) or not isinstance(fill, numbers.Real):
        raise TypeError(f"fill must be a Python float in [0, 1] (it is static under jit); got "
                        f"{type(fill).__name__}")
    if not 0.0 <= float(fill) <= 1.0:
        raise ValueError(f"fill must be in [0, 1]; got {fill}")
    return float(fill)


def _check_magnitude(magnitude, max_magnitude) -> float:
    if isinstance(max_magnitude, bool) or not isinstance(max_magnitude, numbers.Real):
        raise TypeError(f"max_magnitude must be a positive Python float; got "
                        f"{type(max_magnitude).__name__}")
    if not (np.isfinite(max_magnitude) and max_magnitude > 0):
        raise ValueError(f"max_magnitude must be > 0; got {max_magnitude}")
    _check_scalar("magnitude", magnitude, 0.0, float(max_magnitude))
    return float(max_magnitude)


def op_value(name: str, magnitude: float, max_magnitude: float = 10.0) -> Any:
    """The parameter of op ``name`` at ``magnitude``:
    ``v_0 + (v_max - v_0) magnitude / max_magnitude`` (``None`` for parameter-free ops).
    """
    if name not in OPS:
        raise ValueError(f"name must be one of {list(OPS)}; got {name!r}")
    max_magnitude = _check_magnitude(magnitude, max_magnitude)
    _, lo, hi = OPS[name]
    if lo is None:
        return None
    return lo + (hi - lo) * magnitude / max_magnitude


def apply_op(name: str, image: Float[Array, "h w c"], magnitude: float, *, sign: int = 1,
             max_magnitude: float = 10.0, fill: float = 0.5) -> Float[Array, "h w c"]:
    """Apply op ``name`` at ``magnitude`` (``sign`` flips the signed ops' parameter)."""
    if name not in OPS:
        raise ValueError(f"name must be one of {list(OPS)}; got {name!r}")
    if sign not in (1, -1):
        raise ValueError(f"sign must be +1 or -1; got {sign!r}")
    _check_image(image)
    _check_fill(fill)
    v = op_value(name, magnitude, max_magnitude)
    if v is not None and name in SIGNED_OPS:
        v = sign * v
    return _IMPL[name](image, v, fill)


# --------------------------------------------------------------------------------------
# RandAugment
# --------------------------------------------------------------------------------------
@jit(static_argnames=("fill", "num_ops", "max_magnitude"), fast_cpu_compile=False)
def _rand_augment(key, image, magnitude, fill, *, num_ops, max_magnitude):
    dt = image.dtype
    frac = jnp.asarray(magnitude, dt) / max_magnitude
    lo, hi, signed = jnp.asarray(_LO, dt), jnp.asarray(_HI, dt), jnp.asarray(_SIGNED)
    branches = [functools.partial(lambda f, x, v: f(x, v, fill), _IMPL[n]) for n in _NAMES]
    for k in jax.random.split(key, num_ops):
        k_op, k_sign = jax.random.split(k)
        idx = jax.random.randint(k_op, (), 0, len(_NAMES))
        v = lo[idx] + (hi[idx] - lo[idx]) * frac
        v = jnp.where(signed[idx] & jax.random.bernoulli(k_sign), -v, v)
        image = jax.lax.switch(idx, branches, image, v)
    return image


def rand_augment(key: jax.Array, image: Float[Array, "h w c"], num_ops: int = 2,
                 magnitude: float = 10.0, *, max_magnitude: float = 10.0,
                 fill: float = 0.5) -> Float[Array, "h w c"]:
    """RandAugment: ``num_ops`` ops drawn uniformly with replacement from the 14 of
    :data:`OPS`, applied in sequence at strength ``magnitude`` (signed ops get a random sign).

    Args:
        key: PRNG key (one key, one draw). image: ``(H, W, C)`` in [0, 1].
        num_ops: static ``n >= 0`` (2 in the thesis). magnitude: in ``[0, max_magnitude]`` (10).
        max_magnitude: the strength scale (10). fill: value of uncovered pixels.

    Returns:
        The augmented image, same shape and dtype.
    """
    key = V.check_key(key)
    _check_image(image)
    num_ops = V.check_int("num_ops", num_ops, low=0)
    max_magnitude = _check_magnitude(magnitude, max_magnitude)
    _check_fill(fill)
    if num_ops == 0:
        return image
    return _rand_augment(key, image, magnitude, fill, num_ops=num_ops,
                         max_magnitude=max_magnitude)


def rand_augment_batch(key: jax.Array, images: Float[Array, "b h w c"], num_ops: int = 2,
                       magnitude: float = 10.0, *, max_magnitude: float = 10.0,
                       fill: float = 0.5) -> Float[Array, "b h w c"]:
    """:func:`rand_augment` on each image with the keys
    ``jax.random.split(key, B)``.
    """
    key = V.check_key(key)
    _check_image(images, "images", batched=True)
    num_ops = V.check_int("num_ops", num_ops, low=0)
    max_magnitude = _check_magnitude(magnitude, max_magnitude)
    _check_fill(fill)
    if num_ops == 0:
        return images
    keys = jax.random.split(key, images.shape[0])
    return jax.vmap(lambda k, x: _rand_augment(k, x, magnitude, fill, num_ops=num_ops,
                                               max_magnitude=max_magnitude))(keys, images)


# --------------------------------------------------------------------------------------
# Cutout (the reference RandAugmentMC's last op)
# --------------------------------------------------------------------------------------
#: the reference's Cutout colour, gray ``(127, 127, 127)`` of 255
CUTOUT_FILL = 127 / 255


def _check_cutout(size: Any, fill: Any) -> tuple[float, float]:
    if isinstance(size, bool) or not isinstance(size, numbers.Real):
        raise TypeError(f"size must be a Python float in (0, 1] (the square's side as a "
                        f"fraction of the image side; static under jit); got "
                        f"{type(size).__name__}")
    if not 0.0 < float(size) <= 1.0:
        raise ValueError(f"size must lie in (0, 1] (fraction of the image side); got {size}")
    return float(size), _check_fill(fill)


@jit(static_argnames=("side", "fill"), fast_cpu_compile=False)
def _cutout(key, image, side, fill):
    h, w = image.shape[:2]
    u = jax.random.uniform(key, (2,), dtype=image.dtype)
    x0 = jnp.floor(jnp.maximum(0.0, u[0] * w - side / 2)).astype(jnp.int32)
    y0 = jnp.floor(jnp.maximum(0.0, u[1] * h - side / 2)).astype(jnp.int32)
    x1, y1 = jnp.minimum(w, x0 + side), jnp.minimum(h, y0 + side)
    xs, ys = jnp.arange(w), jnp.arange(h)
    mask = ((ys >= y0) & (ys <= y1))[:, None] & ((xs >= x0) & (xs <= x1))[None, :]
    return jnp.where(mask[..., None], jnp.asarray(fill, image.dtype), image)


def cutout(key: jax.Array, image: Float[Array, "h w c"], size: float = 0.5, *,
           fill: float = CUTOUT_FILL) -> Float[Array, "h w c"]:
    """FixMatch's Cutout (``CutoutAbs``): one gray square of side
    ``int(size * min(H, W)) + 1`` px at a uniform centre, clipped by the border.

    Args:
        key: PRNG key. image: ``(H, W, C)`` in [0, 1]. size: side fraction in (0, 1] (static).
        fill: the patch value (the reference's 127/255).

    Returns:
        The image with the patch.
    """
    key = V.check_key(key)
    _check_image(image)
    size, fill = _check_cutout(size, fill)
    return _cutout(key, image, int(size * min(image.shape[:2])), fill)


def cutout_batch(key: jax.Array, images: Float[Array, "b h w c"], size: float = 0.5, *,
                 fill: float = CUTOUT_FILL) -> Float[Array, "b h w c"]:
    """:func:`cutout` on each image with the keys ``jax.random.split(key, B)``."""
    key = V.check_key(key)
    _check_image(images, "images", batched=True)
    size, fill = _check_cutout(size, fill)
    side = int(size * min(images.shape[1:3]))
    keys = jax.random.split(key, images.shape[0])
    return jax.vmap(lambda k, x: _cutout(k, x, side, fill))(keys, images)
