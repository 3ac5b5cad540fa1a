"""Two-view augmentation of AdaWAC in JAX (thesis ``sec:experiments_adawac``, ``eq:dac``).

The consistency term ``eq:dac`` compares the encoder outputs of two independently augmented
views ``A_1(x), A_2(x)`` of the same slice. Following the TransUNet / AdaWAC reference
pipeline (implementation notes, "Chapter 5"), one draw ``A ~ \\mathcal{A}`` is

* with probability 1/2: ``rot90`` by ``k ~ U{0,1,2,3}``
  quarter turns (``np.rot90(x, k)``, counter-clockwise in the array plane) followed by a flip
  along ``axis ~ U{0, 1}`` (``np.flip(., axis)``), the reference's ``random_rot_flip``;
* otherwise: a rotation by an integer angle ``theta ~ U{-20, ..., 19}`` degrees about the
  image centre, nearest-neighbour interpolation, zero fill, same shape, i.e. exactly
  ``scipy.ndimage.rotate(x, theta, order=0, reshape=False, cval=0)`` (``random_rotate``).

The label map undergoes the same transform (nearest neighbour, fill 0 = background), so
image and label stay aligned. (The reference draws ``angle`` with ``np.random.randint(-20,
20)``, hence the half-open range.)

Every one of the ``8 + 2 * max_angle`` possible transforms is a fixed map ``out[p] =
in[src(p)]`` (or 0 where ``src(p)`` falls outside the image), so the augmentation is one
gather from a per-shape table of source indices. The rotation table is computed on the host
in float64 with scipy's conventions (output pixel ``o`` reads input coordinate ``R (o - c) +
c`` with ``R = [[cos, sin], [-sin, cos]]``, ``c = (n - 1) / 2``; a coordinate is inside iff
``0 <= x <= n - 1``; nearest neighbour is ``floor(x + 1/2)``), which reproduces scipy bit
for bit in float32 and float64 alike (a float32 on-device coordinate computation would flip
the rounding of near-tie pixels). Images must be square (``rot90`` by an odd ``k`` would
change the shape); the loaders resize slices to a square model size first (the reference
augments the full-size slice and then resizes; for the square Synapse slices both orders
commute up to interpolation).

Public API: :func:`sample_augment_params`, :func:`apply_augmentation`, :func:`augment`,
:func:`two_views` (one slice; ``jax.vmap`` over keys for a batch) and
:func:`batch_two_views` (the vmapped batch version used by the training step).

Example:
    >>> import jax, jax.numpy as jnp
    >>> from rdr_jax.adawac.augment import batch_two_views
    >>> x = jnp.zeros((4, 32, 32)); y = jnp.zeros((4, 32, 32), jnp.int32)
    >>> v = jax.jit(batch_two_views)(jax.random.key(0), x, y)
    >>> v.image1.shape, v.label2.dtype
    ((4, 32, 32), dtype('int32'))
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
    """One draw ``A ~ \\mathcal{A}`` (scalars; batched along a leading axis under vmap).

    Attributes:
        rot_flip: bool, True for the rot90 + flip branch, False for the small rotation.
        k: int32 in ``{0, 1, 2, 3}``, the number of counter-clockwise quarter turns.
        axis: int32 in ``{0, 1}``, the flip axis (applied after the rot90).
        angle: int32 in ``[-max_angle, max_angle)``, rotation in degrees (scipy's sign).
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
    """Flat source index of every output pixel of ``scipy.ndimage.rotate(order=0, reshape=False)``.

    For output pixel ``o = (r, q)`` the input coordinate is ``x = R (o - c) + c`` with ``R =
    [[cos t, sin t], [-sin t, cos t]]`` (degrees, ``scipy.special.cosdg``/``sindg``) and ``c
    = ((n_rows - 1) / 2, (n_cols - 1) / 2)``; it reads input pixel ``floor(x + 1/2)`` when
    ``0 <= x <= n - 1`` in both coordinates and the fill value otherwise (scipy's ``mode=
    'constant'`` rule for ``order=0``).

    Args:
        n_rows, n_cols: image shape (any, not necessarily square).
        angle: rotation in degrees.

    Returns:
        int32 array ``(n_rows * n_cols,)``; ``-1`` marks fill pixels.

    Example:
        >>> rotation_source_index(3, 3, 0.0).tolist()
        [0, 1, 2, 3, 4, 5, 6, 7, 8]
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
    """Flat source index of ``np.flip(np.rot90(x, k), axis)`` for an ``n x n`` image.

    ``np.rot90(x, 1)[i, j] = x[j, n-1-i]``, ``k = 2``: ``x[n-1-i, n-1-j]``, ``k = 3``:
    ``x[n-1-j, i]``; the flip then reads row ``n-1-i`` (``axis=0``) or column ``n-1-j``.
    """
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
    """Draw ``A ~ \\mathcal{A}``: the branch, ``k``, ``axis`` and ``angle`` (thesis ``eq:dac``).

    ``rot_flip ~ Bernoulli(1/2)`` (the reference's ``random.random() > 0.5``), ``k ~
    U{0..3}``, ``axis ~ U{0, 1}``, ``angle ~ U{-max_angle .. max_angle - 1}`` (the reference's
    ``np.random.randint(-20, 20)``); all four are drawn from one ``jax.random.bits`` call and
    the branch decides which are used.

    Args:
        key: a JAX PRNG key.
        max_angle: static Python int >= 1 (default 20, the reference's setting).

    Returns:
        :class:`AugmentParams` of scalars.

    Example:
        >>> p = sample_augment_params(jax.random.key(0))
        >>> bool(0 <= int(p.k) < 4)
        True
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
    """Apply one transform ``A`` to a slice and its label map (same map, nearest neighbour).

    ``A(x) = flip(rot90(x, k), axis)`` if ``params.rot_flip`` else
    ``scipy.ndimage.rotate(x, angle, order=0, reshape=False, cval=0)``; the label gets the
    identical index map with fill 0 (background). Implemented as one gather from a cached
    per-shape table of source indices (see the module docstring), so it is exact, jit-able
    and vmap-able over ``params``/``image``/``label``.

    Args:
        params: :class:`AugmentParams` (traced scalars are fine).
        image: ``(n, n)`` floating slice.
        label: ``(n, n)`` integer class map.
        max_angle: static, must match the value used to draw ``params``.

    Returns:
        ``(image_aug, label_aug)`` with the input shapes and dtypes.

    Example:
        >>> p = AugmentParams(jnp.array(True), jnp.array(1), jnp.array(0), jnp.array(0))
        >>> x = jnp.arange(4.0).reshape(2, 2)
        >>> apply_augmentation(p, x, jnp.zeros((2, 2), jnp.int32))[0].tolist()
        [[0.0, 2.0], [1.0, 3.0]]
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
    """One random augmentation ``A(x), A(y)`` with ``A ~ \\mathcal{A}`` (module docstring).

    Args:
        key: a JAX PRNG key.
        image: ``(n, n)`` floating slice.
        label: ``(n, n)`` integer class map.
        max_angle: static Python int (default 20).

    Returns:
        ``(image_aug, label_aug)``.

    Example:
        >>> xa, ya = augment(jax.random.key(1), jnp.ones((8, 8)), jnp.ones((8, 8), jnp.int32))
        >>> xa.shape
        (8, 8)
    """
    _check_pair(image, label)
    params = sample_augment_params(key, max_angle=max_angle)
    return apply_augmentation(params, image, label, max_angle=max_angle)


def two_views(key, image: Float[Array, "h w"], label: Int[Array, "h w"], *,
              max_angle: int = MAX_ANGLE) -> TwoViews:
    """Two i.i.d. augmentations ``(A_j(x), A_j(y))``, ``j = 1, 2``, ``A_j ~ \\mathcal{A}``.

    The pair feeds the consistency regulariser ``eq:dac`` (``lambda rho(phi(A_1 x), phi(A_2
    x))``) and the two supervised terms of AdaWAC (``alg:srw_dac``). ``key`` is split in two,
    one sub-key per view.

    Args:
        key: a JAX PRNG key.
        image: ``(n, n)`` floating slice.
        label: ``(n, n)`` integer class map.
        max_angle: static Python int (default 20).

    Returns:
        :class:`TwoViews`.

    Example:
        >>> v = two_views(jax.random.key(0), jnp.ones((8, 8)), jnp.ones((8, 8), jnp.int32))
        >>> v.image1.shape == v.image2.shape == (8, 8)
        True
    """
    key = check_key(key)
    k1, k2 = jax.random.split(key)
    x1, y1 = augment(k1, image, label, max_angle=max_angle)
    x2, y2 = augment(k2, image, label, max_angle=max_angle)
    return TwoViews(x1, y1, x2, y2)


def batch_two_views(key, images: Float[Array, "b h w"], labels: Int[Array, "b h w"], *,
                    max_angle: int = MAX_ANGLE) -> TwoViews:
    """:func:`two_views` for a batch: ``jax.vmap`` over ``jax.random.split(key, b)``.

    Args:
        key: a JAX PRNG key.
        images: ``(b, n, n)`` floating slices.
        labels: ``(b, n, n)`` integer class maps.
        max_angle: static Python int (default 20).

    Returns:
        :class:`TwoViews` with a leading batch axis.

    Example:
        >>> v = batch_two_views(jax.random.key(0), jnp.ones((2, 8, 8)),
        ...                     jnp.ones((2, 8, 8), jnp.int32))
        >>> v.label1.shape
        (2, 8, 8)
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
