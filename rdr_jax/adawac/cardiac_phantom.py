"""Synthetic short-axis cardiac cine-MRI phantom: the offline stand-in for ACDC (thesis
Table 5.3).

Stacks of short-axis slices labelled RV, Myo, LV; the heart spans only part of the stack, so
end slices are label-sparse or empty, with unlabelled surroundings (lungs, liver, atria),
bSSFP-like intensities and Rician noise; host numpy seeded from the JAX key. Why: the ACDC
table runs without the real data. The model: ``docs/training.md`` ("Phantoms").
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
import scipy.ndimage

from rdr_jax.adawac.data import ACDC_CLASSES, SegmentationData
from rdr_jax.adawac._common import (check_case_args, check_nonneg, interp_matrix,
                                   phantom_dataset)

__all__ = ["CARDIAC_INTENSITY", "CardiacPhantomOptions", "cardiac_phantom_cases",
           "cardiac_phantom_volume"]

# Tissue intensities of the cine (bSSFP-like) phantom before gain, bias field, blur and noise.
CARDIAC_INTENSITY = {
    "air": 0.02, "lung": 0.08, "fat": 0.7, "muscle": 0.3, "soft": 0.45, "liver": 0.4,
    "lv_blood": 0.85, "rv_blood": 0.8, "atrium": 0.8, "myocardium": 0.35, "rv_wall": 0.35,
}
_RV, _MYO, _LV = 1, 2, 3


def _smooth_fields(rng: np.random.Generator, channels: int, shape: tuple[int, int, int],
                   coarse: tuple[int, int, int]) -> np.ndarray:
    """``channels`` float32 smooth fields (trilinear upsampling of coarse noise)."""
    noise = rng.standard_normal((channels,) + coarse).astype(np.float32)
    mz, my, mx = (interp_matrix(s, c).astype(np.float32) for s, c in zip(shape, coarse))
    plane = np.matmul(my, noise @ mx.T)                              # (c, cz, Y, X)
    return np.einsum("Zz,czYX->cZYX", mz, plane)


def cardiac_phantom_volume(rng: np.random.Generator, num_slices: int, size: int, *,
                           noise: float = 0.04, deform: float = 0.08, texture: float = 0.04,
                           heart_extent: tuple[float, float] = (0.55, 0.9),
                           dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """One cardiac case ``(image, label)`` of shape
    ``(num_slices, size, size)`` (slice 0 = base side; ``rng`` is consumed).

    Args:
        rng: ``np.random.Generator``. num_slices, size: volume shape.
        noise: Rician noise level. deform: shape deformation (< 0.4). texture: texture amplitude.
        heart_extent: range of the fraction of the stack the heart spans. dtype: image dtype.

    Returns:
        ``(image, label)``: image in [0, 1], uint8 label in 0..3 (bg, RV, Myo, LV).
    """
    s_shape = (num_slices, size, size)
    z = ((np.arange(num_slices) + 0.5) / num_slices).astype(np.float32)
    yx = ((np.arange(size) + 0.5) / size * 2.0 - 1.0).astype(np.float32)
    yy, xx = yx[None, :, None], yx[None, None, :]
    fields = _smooth_fields(rng, 5, s_shape, (3, 6, 6))    # F_1..F_3 shape, F_4, F_6
    tex = _smooth_fields(rng, 1, s_shape, (4, 12, 12))[0]    # F_5
    shape_f = np.clip(fields[:3], -2.5, 2.5)

    # Case parameters.
    length = rng.uniform(*heart_extent)
    z_base = rng.uniform(0.0, 1.0 - length)
    t = ((z - z_base) / length)[:, None, None]                        # (S, 1, 1)
    cy, cx = 0.05 + rng.uniform(-0.12, 0.12), 0.08 + rng.uniform(-0.12, 0.12)
    phi = np.pi + rng.uniform(-0.6, 0.6)                             # u axis: towards the RV
    ell = rng.uniform(0.85, 1.0)
    r_lv, t_cav, wall = rng.uniform(0.18, 0.28), rng.uniform(0.8, 0.92), rng.uniform(0.09, 0.14)
    s_rv, b_rv = rng.uniform(0.3, 0.6), rng.uniform(1.0, 1.3)
    w_rv, t_rv = rng.uniform(0.12, 0.22), rng.uniform(0.55, 0.8)
    gain = rng.uniform(0.9, 1.05)
    by, bx = rng.uniform(0.8, 0.92), rng.uniform(0.9, 0.98)

    # Heart frame and radii per slice.
    dy, dx = yy - cy, xx - cx
    u = np.cos(phi) * dx + np.sin(phi) * dy
    v = -np.sin(phi) * dx + np.cos(phi) * dy
    rho = np.sqrt(u ** 2 + (v / ell) ** 2) * (1.0 + deform * shape_f[0])
    in_heart = (t >= 0.0) & (t <= 1.0)
    r_in = r_lv * np.sqrt(np.clip(1.0 - t / t_cav, 0.0, 1.0))
    thick = wall * (1.0 + 0.15 * shape_f[1])
    cap = np.sqrt(np.clip((1.0 - t) / (1.0 - t_cav), 0.0, 1.0))
    r_out = np.where(t <= t_cav, r_in + thick, thick * cap)
    lv = in_heart & (rho < r_in)
    epi = in_heart & (rho < r_out)
    rv_w = w_rv * np.sqrt(np.clip(1.0 - t / t_rv, 0.0, 1.0))
    r_ref = r_in + wall                                         # r_e, undeformed epicardium
    a_rv = (1.0 - s_rv) * r_ref + rv_w
    b_rvv = b_rv * (r_ref + rv_w)
    rv_f = (((u - s_rv * r_ref) / np.maximum(a_rv, 1e-6)) ** 2
            + (v / np.maximum(b_rvv, 1e-6)) ** 2) * (1.0 + deform * shape_f[2])
    rv_present = in_heart & (rv_w > 0.0)
    rv = rv_present & (rv_f < 1.0) & ~epi
    # RV free wall: ~0.05 thick outside the crescent (sqrt(rv_f) is the normalised radius).
    rv_rim = (rv_present & ~epi & ~rv
              & (np.sqrt(rv_f) < 1.0 + 0.05 / np.maximum(np.minimum(a_rv, b_rvv), 1e-6)))

    label = np.zeros(s_shape, np.uint8)
    label[epi] = _MYO
    label[lv] = _LV
    label[rv] = _RV

    # Surroundings.
    ci = CARDIAC_INTENSITY
    body_r = (yy / by) ** 2 + (xx / bx) ** 2 + 0.04 * fields[3]
    img = np.full(s_shape, ci["air"])
    img = np.where(body_r < 1.0, ci["fat"], img)
    img = np.where(body_r < 0.85, ci["muscle"], img)
    img = np.where(body_r < 0.75, ci["soft"], img)
    lungs = np.zeros(s_shape, bool)
    for side in (-1.0, 1.0):
        ly, lx = -0.05 + 0.05 * side, 0.5 * side
        lungs |= ((yy - ly) / 0.55) ** 2 + ((xx - lx) / 0.3) ** 2 + 0.1 * fields[3] < 1.0
    img = np.where(lungs & (body_r < 0.75), ci["lung"], img)
    # Liver: lower left of the image (patient right), growing towards the apex side of the stack.
    liver_r = 0.25 + 0.35 * np.clip(z[:, None, None], 0.0, 1.0)
    liver = ((yy - 0.55) / liver_r) ** 2 + ((xx + 0.45) / (1.3 * liver_r)) ** 2 < 1.0
    img = np.where(liver & (body_r < 0.75), ci["liver"], img)
    # Atria above the base: unlabelled bright blood shrinking away from the valve plane.
    atr = np.clip(1.0 + t / 0.3, 0.0, 1.0) * (t < 0.0)
    img = np.where(rho < 0.9 * r_lv * np.sqrt(atr), ci["atrium"], img)
    img = np.where((u - 0.9 * r_lv) ** 2 + v ** 2 < (0.7 * r_lv) ** 2 * atr, ci["atrium"], img)
    # Heart.
    img = np.where(epi | rv_rim, ci["myocardium"], img)
    img = np.where(lv, ci["lv_blood"], img)
    img = np.where(rv, ci["rv_blood"], img)

    body = body_r < 1.0
    img = img + body * texture * tex
    img = img * gain * (1.0 + 0.1 * fields[4])
    img = scipy.ndimage.gaussian_filter(img, sigma=(0.0, 0.6, 0.6))
    re = img + noise * rng.standard_normal(s_shape, dtype=np.float32)
    im = noise * rng.standard_normal(s_shape, dtype=np.float32)
    img = np.clip(np.sqrt(re ** 2 + im ** 2), 0.0, 1.0).astype(dtype)
    return img, label


@dataclasses.dataclass(frozen=True)
class CardiacPhantomOptions:
    """How an ACDC-like phantom case looks (:func:`cardiac_phantom_cases`; the fields are the
    keywords of :func:`rdr_jax.adawac.cardiac_phantom.cardiac_phantom_volume`): ``noise``,
    ``texture`` (>= 0), ``deform`` (in [0, 0.4): the deformed radius stays positive) and
    ``heart_extent`` ``(low, high)``, ``0 < low <= high <= 1``."""

    noise: float = 0.04
    deform: float = 0.08
    texture: float = 0.04
    heart_extent: tuple[float, float] = (0.55, 0.9)

    def __post_init__(self):
        for name in ("noise", "deform", "texture"):
            object.__setattr__(self, name, check_nonneg(name, getattr(self, name)))
        try:
            lo, hi = (float(h) for h in self.heart_extent)
        except (TypeError, ValueError) as e:
            raise TypeError(f"heart_extent must be a pair of numbers; got "
                            f"{self.heart_extent!r}") from e
        if not (0.0 < lo <= hi <= 1.0):
            raise ValueError(f"heart_extent must satisfy 0 < low <= high <= 1; got "
                             f"{self.heart_extent}")
        object.__setattr__(self, "heart_extent", (lo, hi))
        if self.deform >= 0.4:
            raise ValueError(f"deform must be < 0.4 (the deformed radius must stay positive); "
                             f"got {self.deform}")


def cardiac_phantom_cases(key, num_cases: int, num_slices: int, size: int, *,
                          num_test_cases: Optional[int] = None,
                          options: CardiacPhantomOptions = CardiacPhantomOptions()
                          ) -> SegmentationData:
    """Synthetic ACDC-like data: ``num_cases`` training cases cut into
    slices and ``num_test_cases`` test volumes (same key, same data).

    Args:
        key: JAX PRNG key. num_cases: >= 1. num_slices: >= 4. size: >= 8.
        num_test_cases: default ``max(1, 2 num_cases // 7)`` (ACDC's 70 : 20).
        options: :class:`CardiacPhantomOptions`.

    Returns:
        :class:`rdr_jax.adawac.data.SegmentationData` with 4 classes.
    """
    key, num_cases, num_slices, size, num_test_cases = check_case_args(
        key, num_cases, num_slices, size, num_test_cases, test_per_train=(2, 7))
    if not isinstance(options, CardiacPhantomOptions):
        raise TypeError(f"options must be a CardiacPhantomOptions; got "
                        f"{type(options).__name__}")
    o = options
    return phantom_dataset(
        key, num_cases, num_test_cases, "patient", ACDC_CLASSES,
        lambda rng: cardiac_phantom_volume(rng, num_slices, size, noise=o.noise, deform=o.deform,
                                           texture=o.texture, heart_extent=o.heart_extent))
