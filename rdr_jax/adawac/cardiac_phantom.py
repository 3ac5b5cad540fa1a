"""Synthetic short-axis cardiac cine-MRI phantom: the offline stand-in for ACDC (thesis
``tab:acdc``, ``fig:acdc``, ``sec:experiments_adawac``).

ACDC cases are stacks of about 10 short-axis (SAX) slices from the base of the heart to the
apex, labelled 0 background, 1 RV (right-ventricular blood pool), 2 Myo (left-ventricular
myocardium), 3 LV (left-ventricular blood pool) (:data:`rdr_jax.adawac.data.ACDC_CLASSES`).
As in the abdominal phantom (:mod:`rdr_jax.adawac.phantom`), the property AdaWAC relies on is
that the heart occupies only part of the stack, so the slices at the ends are label-sparse or
empty, and cases differ in their share of label-dense slices. The model:

* geometry: ``z in [0, 1]`` along the stack (0 = base side, 1 = apex side) and
  ``(y, x) in [-1, 1]^2`` in plane. The heart occupies ``z in [z_b, z_b + L]``,
  ``L ~ U[heart_extent]`` and ``z_b ~ U[0, 1 - L]`` per case; ``t = (z - z_b) / L`` is the
  base-to-apex coordinate of the heart. In-plane the heart has a random centre
  ``c ~ (0.05, 0.08) + U[-0.12, 0.12]^2`` and rotation ``pi + U[-0.6, 0.6]`` (around the
  usual SAX view, RV on the image left); ``(u, v)`` are the rotated heart coordinates (``u`` points
  from the LV to the RV) and ``rho = sqrt(u^2 + (v / e)^2)`` is an elliptical radius with
  ellipticity ``e ~ U[0.85, 1]``, deformed as ``rho_d = rho (1 + a F_1)`` by a smooth random
  field ``F_1`` (trilinearly upsampled Gaussian noise clipped to [-2.5, 2.5]; ``a`` =
  ``deform``).
* LV blood pool: ``rho_d < r_in(t) = R sqrt(clip(1 - t / t_c, 0, 1))``, a disc shrinking
  towards the apex (``R ~ U[0.18, 0.28]``, cavity end ``t_c ~ U[0.8, 0.92]``: the last
  slices before the apex are myocardium only).
* Myo: the annulus ``r_in(t) <= rho_d < r_out(t)`` with ``r_out = r_in + w (1 + 0.15 F_2)``
  for ``t <= t_c`` and ``r_out = w (1 + 0.15 F_2) sqrt((1 - t) / (1 - t_c))`` beyond (the
  apical cap), thickness ``w ~ U[0.09, 0.14]``; since both boundaries use the same deformed
  radius, the myocardium always surrounds the LV.
* RV: a crescent on the ``+u`` side, ``(((u - s r_e) / A)^2 + (v / B)^2) (1 + a F_3) < 1``
  outside the epicardium ``rho_d < r_out``, with ``r_e = r_in + w`` (undeformed epicardium),
  ``s ~ U[0.3, 0.6]``, ``A = (1 - s) r_e + W(t)``, ``B = b (r_e + W(t))``,
  ``b ~ U[1.0, 1.3]`` and width ``W(t) = W_0 sqrt(clip(1 - t / t_rv, 0, 1))``,
  ``W_0 ~ U[0.12, 0.22]``, ``t_rv ~ U[0.55, 0.8]``: it lies against the septum (touches the
  Myo) and ends before the apex. A thin unlabelled dark rim (the RV free wall) surrounds it.
* surroundings (unlabelled): a body ellipse with a subcutaneous fat ring, a chest-wall muscle
  ring, mediastinal soft tissue, two lungs (dark) lateral to the heart (body and lung
  boundaries wobbled by a smooth field ``F_4``), a liver in the lower left of the image
  (patient right) growing towards the apex side, and above the base (``-0.3 < t < 0``) the
  atria as unlabelled bright blood, so empty slices are not trivially empty.
* intensity (cine bSSFP-like, in [0, 1]): LV blood 0.85, RV / atrial blood 0.8, myocardium
  and RV wall 0.35, fat 0.7, muscle 0.3, soft tissue 0.45, liver 0.4, lung 0.08, air 0.02;
  plus a smooth texture ``texture * F_5`` (a finer field) inside the body, a smooth
  multiplicative coil-sensitivity field ``1 + 0.1 F_6`` and a per-case gain ``U[0.9, 1.05]``;
  a mild in-plane Gaussian blur (sigma 0.6 px, partial volume) and Rician noise
  ``|x + noise (n_1 + i n_2)|`` (``n_1, n_2 ~ N(0, 1)``, the magnitude of complex Gaussian
  k-space noise), then clipped to [0, 1].

Everything is host numpy seeded from the JAX key (``jax.random.key_data``), so a key fixes
the data set; 20 cases of 10 x 64 x 64 take about 0.15 s of CPU time.

Example:
    >>> import jax
    >>> from rdr_jax.adawac.cardiac_phantom import cardiac_phantom_cases
    >>> data = cardiac_phantom_cases(jax.random.key(0), 4, 10, 32)
    >>> data.train.images.shape, data.num_classes, data.class_names[1:]
    ((40, 32, 32), 4, ('RV', 'Myo', 'LV'))
"""

from __future__ import annotations

from typing import Optional

import jax  # noqa: F401  (the doctests use it)
import numpy as np
import scipy.ndimage

from rdr_jax.adawac.data import ACDC_CLASSES, SegmentationData
from rdr_jax.adawac.phantom import (_check_case_args, _check_nonneg, _interp_matrix,
                                    _phantom_dataset)

__all__ = ["CARDIAC_INTENSITY", "cardiac_phantom_cases", "cardiac_phantom_volume"]

# Tissue intensities of the cine (bSSFP-like) phantom before gain, bias field, blur and noise.
CARDIAC_INTENSITY = {
    "air": 0.02, "lung": 0.08, "fat": 0.7, "muscle": 0.3, "soft": 0.45, "liver": 0.4,
    "lv_blood": 0.85, "rv_blood": 0.8, "atrium": 0.8, "myocardium": 0.35, "rv_wall": 0.35,
}
_RV, _MYO, _LV = 1, 2, 3


def _smooth_fields(rng: np.random.Generator, channels: int, shape: tuple[int, int, int],
                   coarse: tuple[int, int, int]) -> np.ndarray:
    """``channels`` float32 smooth fields of ``shape``: trilinear upsampling of coarse
    ``N(0, 1)`` noise by separable interpolation matrices (as ``phantom._smooth_field``, in
    float32 with plain matrix products, which is several times faster)."""
    noise = rng.standard_normal((channels,) + coarse).astype(np.float32)
    mz, my, mx = (_interp_matrix(s, c).astype(np.float32) for s, c in zip(shape, coarse))
    plane = np.matmul(my, noise @ mx.T)                              # (c, cz, Y, X)
    return np.einsum("Zz,czYX->cZYX", mz, plane)


def cardiac_phantom_volume(rng: np.random.Generator, num_slices: int, size: int, *,
                           noise: float = 0.04, deform: float = 0.08, texture: float = 0.04,
                           heart_extent: tuple[float, float] = (0.55, 0.9),
                           dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """One cardiac phantom case ``(image, label)`` of shape ``(num_slices, size, size)``.

    See the module docstring for the model. ``rng`` is consumed (host numpy generator).

    Args:
        rng: ``np.random.Generator``.
        num_slices, size: volume shape (slice 0 = base side, last slice = apex side).
        noise: Rician noise level (standard deviation of each complex component).
        deform: relative amplitude ``a`` of the smooth shape deformation (``< 0.4``, so the
            deformed radius stays positive).
        texture: amplitude of the smooth intensity texture.
        heart_extent: range of the per-case fraction ``L`` of the stack the heart spans.
        dtype: image dtype.

    Returns:
        ``(image, label)``: image in [0, 1], uint8 label in 0..3 (bg, RV, Myo, LV).

    Example:
        >>> img, lab = cardiac_phantom_volume(np.random.default_rng(0), 10, 32)
        >>> img.shape, lab.dtype, int(lab.max()) <= 3
        ((10, 32, 32), dtype('uint8'), True)
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


def cardiac_phantom_cases(key, num_cases: int, num_slices: int, size: int, *,
                          num_test_cases: Optional[int] = None, noise: float = 0.04,
                          deform: float = 0.08, texture: float = 0.04,
                          heart_extent: tuple[float, float] = (0.55, 0.9)
                          ) -> SegmentationData:
    """Synthetic ACDC-like data set: ``num_cases`` training cases cut into slices and
    ``num_test_cases`` test volumes (thesis ``tab:acdc``, ``sec:experiments_adawac``).

    Every case is a :func:`rdr_jax.adawac.cardiac_phantom.cardiac_phantom_volume`; training
    cases are named ``patient0000..`` and test cases continue the numbering. The host generator is
    ``np.random.default_rng`` seeded with ``jax.random.key_data(key)``, so the same key gives
    the same data and different keys give different data.

    Args:
        key: a JAX PRNG key.
        num_cases: Python int >= 1, training cases.
        num_slices: Python int >= 4, slices per case.
        size: Python int >= 8, in-plane size (square).
        num_test_cases: Python int >= 0; default ``max(1, 2 * num_cases // 7)`` (ACDC's
            70 : 20 split).
        noise, deform, texture, heart_extent: see
            :func:`rdr_jax.adawac.cardiac_phantom.cardiac_phantom_volume`.

    Returns:
        :class:`rdr_jax.adawac.data.SegmentationData` (``train`` slices, ``test`` volumes or
        None when ``num_test_cases = 0``, ``val = None``, ``num_classes = 4``, ACDC class names).

    Example:
        >>> d = cardiac_phantom_cases(jax.random.key(1), 2, 8, 16, num_test_cases=1)
        >>> len(d.train.names), len(d.test.names)
        (16, 1)
    """
    key, num_cases, num_slices, size, num_test_cases = _check_case_args(
        key, num_cases, num_slices, size, num_test_cases, test_per_train=(2, 7))
    noise = _check_nonneg("noise", noise)
    deform = _check_nonneg("deform", deform)
    texture = _check_nonneg("texture", texture)
    try:
        lo, hi = (float(h) for h in heart_extent)
    except (TypeError, ValueError) as e:
        raise TypeError(f"heart_extent must be a pair of numbers; got {heart_extent!r}") from e
    if not (0.0 < lo <= hi <= 1.0):
        raise ValueError(f"heart_extent must satisfy 0 < low <= high <= 1; got {heart_extent}")
    if deform >= 0.4:
        raise ValueError(f"deform must be < 0.4 (the deformed radius must stay positive); "
                         f"got {deform}")
    return _phantom_dataset(
        key, num_cases, num_test_cases, "patient", ACDC_CLASSES,
        lambda rng: cardiac_phantom_volume(rng, num_slices, size, noise=noise, deform=deform,
                                           texture=texture, heart_extent=(lo, hi)))
