"""Synthetic multi-organ CT phantom: the offline stand-in for Synapse (thesis ``ch:adawac``).

The AdaWAC experiments rely on one structural property of abdominal CT stacks
(``subsec:pixel-wise-classification``): a case is a stack of axial slices, the organs occupy
only part of the stack, so the slices near both ends are label-sparse or empty, and cases
differ in their share of label-dense slices (the ``xi`` of the mixture ``P_xi``). The
phantom reproduces that structure with 8 organ classes in the Synapse numbering (1 aorta, 2
gallbladder, 3 left kidney, 4 right kidney, 5 liver, 6 pancreas, 7 spleen, 8 stomach) plus
background:

* geometry: coordinates ``z in [0, 1]`` along the stack and ``(y, x) in [-1, 1]^2`` in plane
  (image left = patient right, as in radiological display). Each organ is a deformed
  ellipsoid ``{p : |(p - c) / r|^2 + a * F(p) < 1}`` where ``F`` is a smooth random field
  (trilinearly upsampled Gaussian noise) making it blob-like; centres and radii of a template
  abdomen are jittered per case, and the whole organ block is scaled and shifted along ``z``
  per case (``z -> z0 + s (z - 1/2)``, ``z0 = block_center`` + a small shift, ``s ~
  U[s_min, s_max]``), so the fraction of slices with foreground differs from case to case
  and the empty slices sit at both ends. Slice 0 is the inferior end: the stack runs from
  below the kidneys (aorta only, then nothing) up to the liver dome, and ``block_center =
  0.6`` puts the organ block in the upper part, so the first half of every case is mostly
  label-sparse -- the property of Synapse behind the thesis' ``half-sparse`` subset ("the
  first half slices in each case, most of which tend to be label-sparse"; measured on 8 x 16
  slices of 32 x 32: 19% of the half-sparse slices have >= 1% foreground against 47% of all
  slices, and 0.8% vs 4.5% foreground pixels). The aorta ends (bifurcation) just below the
  kidneys' lower poles, so only a few slices per case are aorta-only. Where
  organs overlap the one with the smallest normalised radius wins. A body cross-section
  (ellipse: subcutaneous fat, a muscular wall, and inside it the abdominal cavity of
  visceral fat with bowel loops -- a finer smooth field thresholded into blobs) and a
  vertebra (bright, unlabelled) surround them. Beyond the organ block the stack shows the
  unlabelled anatomy a CT scan of the abdomen also covers: the iliac wings of the pelvis
  (bone) below and the lung bases (air) above the diaphragm, growing away from the block.
  (Earlier versions filled the cavity with uniform 40 HU soft tissue -- pancreas and liver
  were then nearly invisible -- and had plain body cross-sections in the empty end slices,
  so organ slices had the *more* varied content and a larger augmentation consistency loss,
  the opposite of real CT; AdaWAC's beta then ranked slices with foreground above empty
  ones with ROC AUC 0.82-0.88 over seeds, against 0.92-0.98 now.)
* intensity: CT-like Hounsfield values per tissue (fat -100, muscle 40, bowel 30, liver 60,
  spleen 50, kidneys 150 and aorta 200 with contrast, gallbladder 10, pancreas 40, stomach
  20, bone 400, air -1000) mapped by the TransUNet preprocessing ``(clip(HU, -125, 275) + 125)
  / 400`` to [0, 1], plus a smooth texture field, mild in-plane blur (partial volume) and
  Gaussian noise, then clipped to [0, 1].

Everything is host numpy seeded from the JAX key (``jax.random.key_data``), so a key fixes
the data set; 12 training + 8 test cases of 32 x 64 x 64 take about 0.5 s of CPU time.

Example:
    >>> import jax
    >>> from rdr_jax.adawac.phantom import phantom_cases
    >>> data = phantom_cases(jax.random.key(0), 4, 16, 32)
    >>> data.train.images.shape, data.num_classes
    ((64, 32, 32), 9)
"""

from __future__ import annotations

import numbers
from typing import Optional

import jax
import numpy as np
import scipy.ndimage

from rdr_jax._src.validation import check_int, check_key
from rdr_jax.adawac.data import (SYNAPSE_CLASSES, SegmentationData, VolumeDataset,
                                 slices_from_volumes)

__all__ = ["ORGAN_TEMPLATE", "hu_to_unit", "phantom_cases", "phantom_volume"]

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
    """TransUNet intensity preprocessing: ``(clip(HU, -125, 275) + 125) / 400`` in [0, 1].

    Example:
        >>> float(hu_to_unit(75.0))
        0.5
    """
    return (np.clip(hu, -125.0, 275.0) + 125.0) / 400.0


def _interp_matrix(n_out: int, n_in: int) -> np.ndarray:
    """``(n_out, n_in)`` linear-interpolation weights from ``n_in`` cell centres to ``n_out``."""
    pos = np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0.0, n_in - 1.0)
    lo = np.minimum(np.floor(pos).astype(int), n_in - 2) if n_in > 1 else np.zeros(n_out, int)
    frac = pos - lo
    m = np.zeros((n_out, n_in))
    m[np.arange(n_out), lo] = 1.0 - frac
    if n_in > 1:
        m[np.arange(n_out), lo + 1] += frac
    return m


def _span(grid: np.ndarray, lo: float, hi: float) -> slice:
    """The index range of the sorted ``grid`` within ``[lo, hi]`` (possibly empty)."""
    return slice(int(np.searchsorted(grid, lo, "left")), int(np.searchsorted(grid, hi, "right")))


def _smooth_field(rng: np.random.Generator, channels: int, shape: tuple[int, int, int],
                  coarse: tuple[int, int, int] = (4, 5, 5)) -> np.ndarray:
    """``channels`` smooth fields of ``shape``: trilinear upsampling of coarse N(0, 1) noise
    (separable interpolation matrices, one einsum)."""
    noise = rng.standard_normal((channels,) + coarse)
    mz, my, mx = (_interp_matrix(s, c) for s, c in zip(shape, coarse))
    return np.einsum("czyx,Zz,Yy,Xx->cZYX", noise, mz, my, mx, optimize=True)


def phantom_volume(rng: np.random.Generator, num_slices: int, size: int, *,
                   deform: float = 0.35, z_scale: tuple[float, float] = (0.55, 0.95),
                   block_center: float = 0.6,
                   noise: float = 0.03, texture: float = 0.03, bowel_threshold: float = 0.3,
                   dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """One phantom case ``(image, label)`` of shape ``(num_slices, size, size)``.

    See the module docstring for the model. ``rng`` is consumed (host numpy generator).

    Args:
        rng: ``np.random.Generator``.
        num_slices, size: volume shape.
        deform: amplitude ``a`` of the shape deformation field.
        bowel_threshold: bowel occupies the cavity where a smooth N(0, 1)-marginal field
            exceeds this (0.3: about 30% bowel, 70% visceral fat).
        z_scale: range of the per-case scale ``s`` of the organ block along ``z``.
        block_center: centre ``z0`` of the organ block along the stack (0 = first slice).
        noise: standard deviation of the Gaussian noise (in [0, 1] intensity units).
        texture: amplitude of the smooth intensity texture.
        dtype: image dtype.

    Returns:
        ``(image, label)``: image in [0, 1], uint8 label in 0..8.

    Example:
        >>> img, lab = phantom_volume(np.random.default_rng(0), 8, 16)
        >>> img.shape, int(lab.max()) <= 8
        ((8, 16, 16), True)
    """
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
                  num_test_cases: Optional[int] = None, deform: float = 0.35,
                  z_scale: tuple[float, float] = (0.55, 0.95), noise: float = 0.03,
                  texture: float = 0.03, block_center: float = 0.6) -> SegmentationData:
    """Synthetic Synapse-like data set: ``num_cases`` training cases cut into slices and
    ``num_test_cases`` test volumes (thesis ``ch:adawac``, ``subsec:pixel-wise-classification``).

    Every case is a :func:`rdr_jax.adawac.phantom.phantom_volume`; training cases are named
    ``case0000..`` and test cases continue the numbering. The host generator is
    ``np.random.default_rng`` seeded with ``jax.random.key_data(key)``, so the same key gives
    the same data and different keys give different data.

    Args:
        key: a JAX PRNG key.
        num_cases: Python int >= 1, training cases.
        num_slices: Python int >= 4, slices per case.
        size: Python int >= 8, in-plane size (square).
        num_test_cases: Python int >= 0; default ``max(1, 2 * num_cases // 3)`` (the
            Synapse 18 : 12 ratio).
        deform, z_scale, noise, texture, block_center: see
            :func:`rdr_jax.adawac.phantom.phantom_volume`.

    Returns:
        :class:`rdr_jax.adawac.data.SegmentationData` (``train`` slices, ``test`` volumes or
        None when ``num_test_cases = 0``, ``num_classes = 9``, Synapse class names).

    Example:
        >>> d = phantom_cases(jax.random.key(1), 2, 8, 16, num_test_cases=1)
        >>> len(d.train.names), len(d.test.names)
        (16, 1)
    """
    key, num_cases, num_slices, size, num_test_cases = _check_case_args(
        key, num_cases, num_slices, size, num_test_cases, test_per_train=(2, 3))
    deform, noise, texture = (_check_nonneg(n, v) for n, v in
                              (("deform", deform), ("noise", noise), ("texture", texture)))
    lo, hi = z_scale
    if not (0.0 < lo <= hi <= 1.0):
        raise ValueError(f"z_scale must satisfy 0 < low <= high <= 1; got {z_scale}")
    if not (0.0 < block_center < 1.0):
        raise ValueError(f"block_center must lie in (0, 1); got {block_center}")
    return _phantom_dataset(
        key, num_cases, num_test_cases, "case", SYNAPSE_CLASSES,
        lambda rng: phantom_volume(rng, num_slices, size, deform=deform, z_scale=z_scale,
                                   noise=noise, texture=texture, block_center=block_center))


def _check_nonneg(name: str, value) -> float:
    """``value`` as a float; TypeError unless a real number, ValueError unless finite >= 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number; got {type(value).__name__} {value!r}")
    value = float(value)
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0; got {value}")
    return value


def _check_case_args(key, num_cases, num_slices, size, num_test_cases,
                     test_per_train: tuple[int, int]):
    """Validated ``(key, num_cases, num_slices, size, num_test_cases)`` of a phantom data set;
    ``num_test_cases=None`` becomes ``max(1, a * num_cases // b)`` for ``test_per_train =
    (a, b)`` (Synapse 12 : 18 -> (2, 3); ACDC 20 : 70 -> (2, 7))."""
    key = check_key(key)
    num_cases = check_int("num_cases", num_cases, low=1)
    num_slices = check_int("num_slices", num_slices, low=4)
    size = check_int("size", size, low=8)
    if num_test_cases is None:
        a, b = test_per_train
        num_test_cases = max(1, (a * num_cases) // b)
    num_test_cases = check_int("num_test_cases", num_test_cases, low=0)
    return key, num_cases, num_slices, size, num_test_cases


def _phantom_dataset(key, num_cases: int, num_test_cases: int, prefix: str,
                     class_names: tuple[str, ...], make_volume) -> SegmentationData:
    """Draw ``num_cases + num_test_cases`` volumes ``make_volume(rng) -> (image, label)``
    from the host generator seeded with ``jax.random.key_data(key)``; the first
    ``num_cases`` (named ``<prefix>0000..``) become training slices, the rest test volumes
    (None when there are none). Shared by the CT and the cine-MRI phantoms."""
    seed = np.asarray(jax.random.key_data(key)).astype(np.uint64).ravel().tolist()
    rng = np.random.default_rng(seed)
    vols = [make_volume(rng) for _ in range(num_cases + num_test_cases)]
    names = [f"{prefix}{i:04d}" for i in range(num_cases + num_test_cases)]
    train = slices_from_volumes([v[0] for v in vols[:num_cases]],
                                [v[1] for v in vols[:num_cases]], names[:num_cases])
    test = None
    if num_test_cases:
        test = VolumeDataset(tuple(v[0] for v in vols[num_cases:]),
                             tuple(v[1] for v in vols[num_cases:]), tuple(names[num_cases:]))
    return SegmentationData(train, test, None, len(class_names), class_names)
