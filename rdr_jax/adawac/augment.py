"""Two-view augmentation of AdaWAC in JAX (thesis Section 5.5, Eq. (5.3)).

One draw is, with probability 1/2, ``rot90`` by ``k`` quarter turns then a flip, else a
rotation by an integer angle in ``[-20, 20)`` degrees (nearest neighbour, zero fill), as the
TransUNet / AdaWAC reference; the label map gets the same transform. Each transform is one
gather from a per-shape table that reproduces scipy bit for bit. Why: exact, jit-able views
for the consistency term. Conventions: ``docs/training.md`` ("AdaWAC augmentation").
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.special
from jaxtyping import Array, Bool, Float, Int

from rdr_jax._src.validation import check_int, check_key

__all__ = [
    "AugmentParams",
    "TwoViews",
    "apply_augmentation",
    "augment",
    "batch_two_views",
    "num_transforms",
    "rotation_source_index",
    "sample_augment_params",
    "two_views",
]

MAX_ANGLE = 20


class AugmentParams(NamedTuple):
    """One draw (scalars; batched along a leading axis under vmap).

    Attributes:
        rot_flip: True for the rot90 + flip branch, False for the small rotation.
        k: quarter turns in ``{0..3}``. axis: flip axis in ``{0, 1}``.
        angle: degrees in ``[-max_angle, max_angle)`` (scipy's sign).
    """

    rot_flip: Bool[Array, ""]
    k: Int[Array, ""]
    axis: Int[Array, ""]
    angle: Int[Array, ""]


class TwoViews(NamedTuple):
    """Two independently augmented views of the same slice(s) and their labels."""

    image1: Float[Array, "*b h w"]
    label1: Int[Array, "*b h w"]
    image2: Float[Array, "*b h w"]
    label2: Int[Array, "*b h w"]


def num_transforms(max_angle: int = MAX_ANGLE) -> int:
    """Number of distinct transforms in the table: 8 rot90/flip + ``2 max_angle`` angles."""
    return 8 + 2 * max_angle


def rotation_source_index(n_rows: int, n_cols: int, angle: float) -> np.ndarray:
    """Flat source index of every output pixel of
    ``scipy.ndimage.rotate(x, angle, order=0, reshape=False)`` (``-1``: fill), computed on the
    host in float64 with scipy's conventions.
    """
    c, s = scipy.special.cosdg(angle), scipy.special.sindg(angle)
    m = np.array([[c, s], [-s, c]])
    shape = np.array([n_rows, n_cols], dtype=np.float64)
    center = (shape - 1.0) / 2.0
    offset = center - m @ center
    r, q = np.meshgrid(np.arange(n_rows, dtype=np.float64), np.arange(n_cols, dtype=np.float64),
                       indexing="ij")
    x = m[0, 0] * r + m[0, 1] * q + offset[0]
    y = m[1, 0] * r + m[1, 1] * q + offset[1]
    inside = (x >= 0) & (x <= n_rows - 1) & (y >= 0) & (y <= n_cols - 1)
    xi = np.floor(x + 0.5).astype(np.int64)
    yi = np.floor(y + 0.5).astype(np.int64)
    return np.where(inside, xi * n_cols + yi, -1).astype(np.int32).ravel()


def _rot_flip_source_index(n: int, k: int, axis: int) -> np.ndarray:
    """Flat source index of ``np.flip(np.rot90(x, k), axis)``, ``n x n``."""
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    if axis == 0:
        i = n - 1 - i
    else:
        j = n - 1 - j
    src = {0: (i, j), 1: (j, n - 1 - i), 2: (n - 1 - i, n - 1 - j), 3: (n - 1 - j, i)}[k]
    return (src[0] * n + src[1]).astype(np.int32).ravel()


@functools.lru_cache(maxsize=8)
def _table(n: int, max_angle: int) -> np.ndarray:
    """``(8 + 2 max_angle, n * n)`` int32 source indices; row ``2k + axis`` for rot90/flip,
    row ``8 + angle + max_angle`` for the rotation by ``angle``."""
    rows = [_rot_flip_source_index(n, k, a) for k in range(4) for a in range(2)]
    rows += [rotation_source_index(n, n, float(t)) for t in range(-max_angle, max_angle)]
    table = np.stack(rows)
    table.setflags(write=False)
    return table


def _check_pair(image, label) -> tuple[int, int]:
    if not hasattr(image, "shape") or not hasattr(image, "dtype"):
        raise TypeError(f"image must be an array; got {type(image).__name__}")
    if not hasattr(label, "shape") or not hasattr(label, "dtype"):
        raise TypeError(f"label must be an array; got {type(label).__name__}")
    if not jnp.issubdtype(image.dtype, jnp.floating):
        raise TypeError(f"image must have a floating dtype; got {image.dtype}")
    if not jnp.issubdtype(label.dtype, jnp.integer):
        raise TypeError(f"label must have an integer dtype (class ids); got {label.dtype}")
    if image.ndim != 2:
        raise ValueError(f"image must be one 2-D slice (H, W); got shape {tuple(image.shape)} "
                         "(use batch_two_views or jax.vmap for a batch)")
    if tuple(label.shape) != tuple(image.shape):
        raise ValueError(f"label must have the image's shape {tuple(image.shape)}; got "
                         f"{tuple(label.shape)}")
    h, w = image.shape
    if h != w:
        raise ValueError(f"image must be square (H == W) because rot90 by an odd k would change "
                         f"its shape; got {h} x {w}; resize slices to a square size first")
    return h, w


def sample_augment_params(key, *, max_angle: int = MAX_ANGLE) -> AugmentParams:
    """Draw the branch, ``k``, ``axis`` and ``angle`` of one transform
    (one ``jax.random.bits`` call).

    Args:
        key: PRNG key. max_angle: static int >= 1 (20, the reference's).

    Returns:
        :class:`AugmentParams`.
    """
    key = check_key(key)
    max_angle = check_int("max_angle", max_angle, low=1, high=179)
    # One threefry call for the four draws (cheap to compile): the top bit for the branch and
    # the flip axis, the top two bits for k (all exactly uniform), and the top 24 bits modulo
    # 2 max_angle for the angle (relative bias < 2 max_angle / 2^24, about 2.4e-6 for 20).
    bits = jax.random.bits(key, (4,), jnp.uint32)
    n_angles = 2 * max_angle
    return AugmentParams(
        rot_flip=(bits[0] >> 31) == 1,
        k=(bits[1] >> 30).astype(jnp.int32),
        axis=(bits[2] >> 31).astype(jnp.int32),
        angle=((bits[3] >> 8) % jnp.uint32(n_angles)).astype(jnp.int32) - max_angle,
    )


def apply_augmentation(params: AugmentParams, image: Float[Array, "h w"],
                       label: Int[Array, "h w"], *, max_angle: int = MAX_ANGLE
                       ) -> tuple[Float[Array, "h w"], Int[Array, "h w"]]:
    """Apply one transform to a square slice and its label map (one
    gather; label fill 0). ``max_angle`` must match the one ``params`` were drawn with.

    Returns:
        ``(image_aug, label_aug)``.
    """
    n, _ = _check_pair(image, label)
    max_angle = check_int("max_angle", max_angle, low=1, high=179)
    table = jnp.asarray(_table(n, max_angle))
    row = jnp.where(params.rot_flip,
                    2 * params.k + params.axis,
                    8 + jnp.clip(params.angle, -max_angle, max_angle - 1) + max_angle)
    src = table[row]
    inside = src >= 0
    src = jnp.maximum(src, 0)
    img = jnp.where(inside, image.reshape(-1)[src], jnp.zeros((), image.dtype)).reshape(n, n)
    lab = jnp.where(inside, label.reshape(-1)[src], jnp.zeros((), label.dtype)).reshape(n, n)
    return img, lab


def augment(key, image: Float[Array, "h w"], label: Int[Array, "h w"], *,
            max_angle: int = MAX_ANGLE) -> tuple[Float[Array, "h w"], Int[Array, "h w"]]:
    """One random augmentation ``(A(x), A(y))`` of a square slice and its labels."""
    _check_pair(image, label)
    params = sample_augment_params(key, max_angle=max_angle)
    return apply_augmentation(params, image, label, max_angle=max_angle)


def two_views(key, image: Float[Array, "h w"], label: Int[Array, "h w"], *,
              max_angle: int = MAX_ANGLE) -> TwoViews:
    """Two i.i.d. augmentations ``(A_j(x), A_j(y))``, ``j = 1, 2`` (Eq. (5.3),
    Algorithm 6); one sub-key per view.

    Returns:
        :class:`TwoViews`.
    """
    key = check_key(key)
    k1, k2 = jax.random.split(key)
    x1, y1 = augment(k1, image, label, max_angle=max_angle)
    x2, y2 = augment(k2, image, label, max_angle=max_angle)
    return TwoViews(x1, y1, x2, y2)


def batch_two_views(key, images: Float[Array, "b h w"], labels: Int[Array, "b h w"], *,
                    max_angle: int = MAX_ANGLE) -> TwoViews:
    """:func:`two_views` for a batch ``(b, n, n)`` (vmap over
    ``jax.random.split(key, b)``).
    """
    key = check_key(key)
    if not hasattr(images, "ndim") or images.ndim != 3:
        raise ValueError(f"images must be a batch (b, H, W); got shape "
                         f"{getattr(images, 'shape', None)}")
    if not hasattr(labels, "shape") or tuple(labels.shape) != tuple(images.shape):
        raise ValueError(f"labels must have the images' shape {tuple(images.shape)}; got "
                         f"{getattr(labels, 'shape', None)}")
    _check_pair(images[0], labels[0])
    keys = jax.random.split(key, images.shape[0])
    return jax.vmap(lambda k, x, y: two_views(k, x, y, max_angle=max_angle))(keys, images, labels)
