"""Synthetic multi-organ CT phantom: the offline stand-in for Synapse (thesis Ch. 5).

Cases are stacks of axial slices with the 8 Synapse organs (deformed ellipsoids of a jittered
template abdomen) in the upper part of the stack, so the slices near the ends are
label-sparse or empty and cases differ in their share of label-dense slices: the structure
AdaWAC exploits (Section 5.2.1). CT-like intensities, host numpy seeded
from the JAX key. Why: experiments and CI run without the real data. The model and its
measured properties: ``docs/training.md`` ("Phantoms").
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np
import scipy.ndimage

from rdr_jax.adawac._common import (check_case_args, check_nonneg, interp_matrix,
                                   phantom_dataset)
from rdr_jax.adawac.data import SYNAPSE_CLASSES, SegmentationData

__all__ = ["ORGAN_TEMPLATE", "PhantomOptions", "hu_to_unit", "phantom_cases", "phantom_volume"]

# name: (class id, centre (z, y, x), radii (z, y, x), HU). z in [0, 1] from the inferior end of
# the organ block (0) to the superior end (1, liver dome), y in [-1, 1] (anterior = -1), x in
# [-1, 1] (image left = patient right).
ORGAN_TEMPLATE = {
    "aorta": (1, (0.52, 0.22, 0.06), (0.38, 0.09, 0.09), 200.0),
    "gallbladder": (2, (0.54, -0.12, -0.32), (0.09, 0.12, 0.10), 10.0),
    "kidney_left": (3, (0.44, 0.30, 0.42), (0.15, 0.20, 0.14), 150.0),
    "kidney_right": (4, (0.40, 0.30, -0.38), (0.15, 0.20, 0.14), 150.0),
    "liver": (5, (0.68, -0.02, -0.40), (0.22, 0.42, 0.36), 60.0),
    "pancreas": (6, (0.48, 0.08, 0.05), (0.09, 0.10, 0.36), 40.0),
    "spleen": (7, (0.65, 0.22, 0.52), (0.14, 0.20, 0.15), 50.0),
    "stomach": (8, (0.64, -0.20, 0.30), (0.16, 0.24, 0.22), 20.0),
}
_HU_AIR, _HU_FAT, _HU_BODY, _HU_BONE, _HU_BOWEL = -1000.0, -100.0, 40.0, 400.0, 30.0
_HU_LUNG = -850.0


def hu_to_unit(hu):
    """TransUNet intensity preprocessing: ``(clip(HU, -125, 275) + 125) / 400``."""
    return (np.clip(hu, -125.0, 275.0) + 125.0) / 400.0


def _span(grid: np.ndarray, lo: float, hi: float) -> slice:
    """The index range of the sorted ``grid`` within ``[lo, hi]`` (possibly empty)."""
    return slice(int(np.searchsorted(grid, lo, "left")), int(np.searchsorted(grid, hi, "right")))


def _smooth_field(rng: np.random.Generator, channels: int, shape: tuple[int, int, int],
                  coarse: tuple[int, int, int] = (4, 5, 5)) -> np.ndarray:
    """``channels`` smooth fields: trilinear upsampling of coarse N(0, 1) noise."""
    noise = rng.standard_normal((channels,) + coarse)
    mz, my, mx = (interp_matrix(s, c) for s, c in zip(shape, coarse))
    return np.einsum("czyx,Zz,Yy,Xx->cZYX", noise, mz, my, mx, optimize=True)


@dataclasses.dataclass(frozen=True)
class PhantomOptions:
    """How a Synapse-like phantom case looks (:func:`rdr_jax.adawac.phantom.phantom_volume`,
    :func:`rdr_jax.adawac.phantom.phantom_cases`).

    Attributes:
        deform: amplitude of the shape deformation (>= 0). z_scale: ``(low, high)``,
            ``0 < low <= high <= 1``, range of the per-case scale of the organ block along the
            stack. block_center: its centre in (0, 1) (0 = first slice).
        noise, texture: Gaussian noise std and texture amplitude (>= 0). bowel_threshold: the
            level that cuts bowel loops out of a smooth field (finite; higher: less bowel).
    """

    deform: float = 0.35
    z_scale: tuple[float, float] = (0.55, 0.95)
    block_center: float = 0.6
    noise: float = 0.03
    texture: float = 0.03
    bowel_threshold: float = 0.3

    def __post_init__(self):
        for name in ("deform", "noise", "texture"):
            object.__setattr__(self, name, check_nonneg(name, getattr(self, name)))
        try:
            lo, hi = (float(z) for z in self.z_scale)
        except (TypeError, ValueError) as e:
            raise TypeError(f"z_scale must be a pair of numbers; got {self.z_scale!r}") from e
        if not (0.0 < lo <= hi <= 1.0):
            raise ValueError(f"z_scale must satisfy 0 < low <= high <= 1; got {self.z_scale}")
        object.__setattr__(self, "z_scale", tuple(self.z_scale))
        if not (0.0 < self.block_center < 1.0):
            raise ValueError(f"block_center must lie in (0, 1); got {self.block_center}")
        if not math.isfinite(self.bowel_threshold):
            raise ValueError(f"bowel_threshold must be finite; got {self.bowel_threshold}")


def phantom_volume(rng: np.random.Generator, num_slices: int, size: int, *,
                   options: PhantomOptions = PhantomOptions(),
                   dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """One phantom case ``(image, label)`` of shape ``(num_slices, size, size)``
    (``rng`` is consumed).

    Args:
        rng: ``np.random.Generator``. num_slices, size: volume shape.
        options: :class:`PhantomOptions` (deformation, organ-block placement, noise, texture,
            bowel). dtype: image dtype.

    Returns:
        ``(image, label)``: image in [0, 1], uint8 label in 0..8.
    """
    if not isinstance(options, PhantomOptions):
        raise TypeError(f"options must be a PhantomOptions; got {type(options).__name__}")
    deform, z_scale, block_center = options.deform, options.z_scale, options.block_center
    noise, texture, bowel_threshold = options.noise, options.texture, options.bowel_threshold
    s_shape = (num_slices, size, size)
    z = (np.arange(num_slices) + 0.5) / num_slices
    yx = (np.arange(size) + 0.5) / size * 2.0 - 1.0
    zz, yy, xx = np.meshgrid(z, yx, yx, indexing="ij", sparse=True)

    zscale = rng.uniform(*z_scale)
    zshift = rng.uniform(-0.5, 0.5) * (1.0 - zscale) * 0.6
    fields = _smooth_field(rng, len(ORGAN_TEMPLATE) + 2, s_shape)

    # Body: elliptic cylinder with a subcutaneous fat layer and a muscular wall around the
    # abdominal cavity; the cavity is visceral fat with bowel loops (a finer smooth field
    # thresholded into blobs), as in abdominal CT; vertebra posterior.
    by, bx = rng.uniform(0.78, 0.9), rng.uniform(0.88, 0.97)
    body_r = (yy / by) ** 2 + (xx / bx) ** 2 + 0.05 * fields[-1]
    bowel = _smooth_field(rng, 1, s_shape, coarse=(6, 9, 9))[0] > bowel_threshold
    body, inside_wall, cavity = body_r < 1.0, body_r < 0.86, body_r < 0.72
    hu = np.full(s_shape, _HU_AIR)
    hu = np.where(body, _HU_FAT, hu)
    hu = np.where(inside_wall, _HU_BODY, hu)
    hu = np.where(cavity, np.where(bowel, _HU_BOWEL, _HU_FAT), hu)
    spine = ((yy - 0.55) / 0.14) ** 2 + (xx / 0.13) ** 2 < 1.0
    hu = np.where(spine & body, _HU_BONE, hu)
    # Unlabelled anatomy beyond the organ block, in organ-block coordinates u (0 = inferior
    # end, 1 = liver dome): lung bases above the diaphragm and the iliac wings of the pelvis
    # below the kidneys, both growing away from the block. Organs drawn next overwrite them.
    u = (zz - block_center - zshift) / zscale + 0.5
    for side in (-1.0, 1.0):
        lung = (((yy - 0.1) / 0.5) ** 2 + ((xx - side * 0.4) / 0.32) ** 2
                < np.clip((u - 0.78) / 0.2, 0.0, 1.0))
        ilium = (((yy - 0.3) / 0.12) ** 2 + ((xx - side * 0.55) / 0.22) ** 2
                 < np.clip((0.2 - u) / 0.15, 0.0, 1.0))
        hu = np.where(lung & cavity, _HU_LUNG, hu)
        hu = np.where(ilium & inside_wall, _HU_BONE, hu)

    best = np.full(s_shape, np.inf)
    label = np.zeros(s_shape, np.uint8)
    for o, (name, (cls, c, r, organ_hu)) in enumerate(ORGAN_TEMPLATE.items()):
        cz = block_center + zshift + zscale * (c[0] - 0.5 + rng.uniform(-0.03, 0.03))
        rz = zscale * r[0] * rng.uniform(0.85, 1.15)
        cy = c[1] + rng.uniform(-0.04, 0.04)
        cx = c[2] + rng.uniform(-0.04, 0.04)
        ry = r[1] * rng.uniform(0.85, 1.15)
        rx = r[2] * rng.uniform(0.85, 1.15)
        # f < 1 needs the ellipsoid term below 1 + deform * max(-F): work in that box only.
        reach = np.sqrt(1.0 + deform * max(0.0, -float(fields[o].min())))
        box = tuple(_span(grid, cen - reach * rad, cen + reach * rad)
                    for grid, cen, rad in ((z, cz, rz), (yx, cy, ry), (yx, cx, rx)))
        f = (((zz[box[0]] - cz) / rz) ** 2 + ((yy[:, box[1]] - cy) / ry) ** 2
             + ((xx[:, :, box[2]] - cx) / rx) ** 2) + deform * fields[o][box]
        inside = (f < 1.0) & (f < best[box])
        best[box] = np.where(inside, f, best[box])
        label[box] = np.where(inside, np.uint8(cls), label[box])
        hu[box] = np.where(inside, organ_hu, hu[box])

    img = hu_to_unit(hu)
    img = scipy.ndimage.gaussian_filter(img, sigma=(0.0, 0.6, 0.6))
    img = img + body * texture * fields[-2]
    img = img + noise * rng.standard_normal(s_shape)
    img = np.clip(img, 0.0, 1.0).astype(dtype)
    return img, label


def phantom_cases(key, num_cases: int, num_slices: int, size: int, *,
                  num_test_cases: Optional[int] = None,
                  options: PhantomOptions = PhantomOptions()) -> SegmentationData:
    """Synthetic Synapse-like data: ``num_cases`` training cases cut into slices
    and ``num_test_cases`` test volumes (same key, same data).

    Args:
        key: JAX PRNG key. num_cases: >= 1. num_slices: >= 4. size: >= 8.
        num_test_cases: default ``max(1, 2 num_cases // 3)`` (Synapse's 18 : 12).
        options: :class:`PhantomOptions`.

    Returns:
        :class:`rdr_jax.adawac.data.SegmentationData` with 9 classes.
    """
    key, num_cases, num_slices, size, num_test_cases = check_case_args(
        key, num_cases, num_slices, size, num_test_cases, test_per_train=(2, 3))
    if not isinstance(options, PhantomOptions):
        raise TypeError(f"options must be a PhantomOptions; got {type(options).__name__}")
    return phantom_dataset(
        key, num_cases, num_test_cases, "case", SYNAPSE_CLASSES,
        lambda rng: phantom_volume(rng, num_slices, size, options=options))
