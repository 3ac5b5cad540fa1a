"""Segmentation metrics of Chapter 5: per-volume DSC and HD95 (thesis Section 5.5).

Per test volume and organ class: the Dice coefficient and medpy's ``hd95`` with unit spacing,
with the AdaWAC evaluation's empty-mask rules; averaged over volumes per class, then over
classes; fractions in [0, 1] (the tables print percent). Host numpy/scipy. Why: the thesis'
tables are in these two scores. Definitions: ``docs/training.md`` ("AdaWAC metrics").
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import scipy.ndimage

from rdr_jax._src.validation import check_int

__all__ = [
    "MetricsSummary",
    "VolumeMetrics",
    "aggregate_metrics",
    "binary_dice_hd95",
    "predict_volume",
    "volume_metrics",
]


class VolumeMetrics(NamedTuple):
    """Per-class scores of one volume (classes ``1..num_classes-1``):
    ``dice`` and ``hd95`` (voxel units), float64 ``(num_classes - 1,)``.
    """

    dice: np.ndarray
    hd95: np.ndarray


class MetricsSummary(NamedTuple):
    """Scores averaged over volumes per class, then over classes.

    Attributes:
        dice, hd95: the thesis' "DSC" and "HD95" columns.
        per_class_dice, per_class_hd95: ``(num_classes - 1,)`` per-class means over volumes.
    """

    dice: float
    hd95: float
    per_class_dice: np.ndarray
    per_class_hd95: np.ndarray


_STRUCTURE_CACHE: dict[int, np.ndarray] = {}


def _structure(ndim: int) -> np.ndarray:
    if ndim not in _STRUCTURE_CACHE:
        _STRUCTURE_CACHE[ndim] = scipy.ndimage.generate_binary_structure(ndim, 1)
    return _STRUCTURE_CACHE[ndim]


def _surface(mask: np.ndarray) -> np.ndarray:
    """``mask \\ erode(mask)`` with the 1-connectivity structure and a zero border."""
    return mask & ~scipy.ndimage.binary_erosion(mask, structure=_structure(mask.ndim),
                                                border_value=0)


def binary_dice_hd95(pred_mask: np.ndarray, label_mask: np.ndarray) -> tuple[float, float]:
    """DSC and HD95 of two boolean masks of equal shape; ``(1, 0)`` if both
    are empty, ``(0, 0)`` if one is.

    Returns:
        ``(dice, hd95)`` as floats.
    """
    p = np.asarray(pred_mask, dtype=bool)
    g = np.asarray(label_mask, dtype=bool)
    if p.shape != g.shape:
        raise ValueError(f"pred_mask and label_mask must have the same shape; got {p.shape} "
                         f"and {g.shape}")
    np_, ng = int(p.sum()), int(g.sum())
    if np_ == 0 and ng == 0:
        return 1.0, 0.0
    if np_ == 0 or ng == 0:
        return 0.0, 0.0
    dice = 2.0 * float(np.logical_and(p, g).sum()) / float(np_ + ng)
    both = p | g
    box = []
    for ax in range(both.ndim):
        other = tuple(i for i in range(both.ndim) if i != ax)
        idx = np.flatnonzero(both.any(axis=other))
        box.append(slice(max(int(idx[0]) - 1, 0), min(int(idx[-1]) + 2, both.shape[ax])))
    box = tuple(box)
    p, g = p[box], g[box]
    sp, sg = _surface(p), _surface(g)
    d_pg = scipy.ndimage.distance_transform_edt(~sg)[sp]
    d_gp = scipy.ndimage.distance_transform_edt(~sp)[sg]
    hd95 = float(np.percentile(np.concatenate([d_pg, d_gp]), 95))
    return dice, hd95


def _check_class_map(name: str, a: Any, num_classes: int) -> np.ndarray:
    arr = np.asarray(a)
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer)
                                 or np.issubdtype(arr.dtype, np.floating)):
        raise TypeError(f"{name} must be an integer class map; got dtype {arr.dtype}")
    if arr.ndim != 3:
        raise ValueError(f"{name} must be one 3-D volume (slices, H, W); got shape {arr.shape}")
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise ValueError(f"{name} must hold integer class ids; got non-integer values")
    if arr.size:
        lo, hi = arr.min(), arr.max()
        if lo < 0 or hi >= num_classes:
            raise ValueError(f"{name} values must lie in [0, num_classes - 1] = [0, "
                             f"{num_classes - 1}]; got range [{lo}, {hi}]")
    return arr.astype(np.int64, copy=False)


def volume_metrics(pred, label, num_classes: int) -> VolumeMetrics:
    """Per-class DSC and HD95 of one predicted 3-D volume
    (:func:`rdr_jax.adawac.metrics.binary_dice_hd95` of ``pred == k`` and ``label == k``).

    Args:
        pred, label: ``(slices, H, W)`` class maps. num_classes: int >= 2, with background.

    Returns:
        :class:`VolumeMetrics`.

    Raises:
        ValueError / TypeError: shapes differ or are not 3-D, values out of range, bad dtypes.
    """
    num_classes = check_int("num_classes", num_classes, low=2)
    pred = _check_class_map("pred", pred, num_classes)
    label = _check_class_map("label", label, num_classes)
    if pred.shape != label.shape:
        raise ValueError(f"pred and label must have the same shape; got {pred.shape} and "
                         f"{label.shape}")
    dice = np.zeros(num_classes - 1)
    hd95 = np.zeros(num_classes - 1)
    for k in range(1, num_classes):
        dice[k - 1], hd95[k - 1] = binary_dice_hd95(pred == k, label == k)
    return VolumeMetrics(dice, hd95)


def aggregate_metrics(metrics: Sequence[VolumeMetrics]) -> MetricsSummary:
    """Average :class:`VolumeMetrics` over volumes per class, then over
    classes (the thesis' convention).

    Returns:
        :class:`MetricsSummary`.
    """
    metrics = list(metrics)
    if not metrics:
        raise ValueError("metrics must hold at least one VolumeMetrics")
    for i, m in enumerate(metrics):
        if not isinstance(m, VolumeMetrics):
            raise TypeError(f"metrics[{i}] must be a VolumeMetrics; got {type(m).__name__}")
    lengths = {len(m.dice) for m in metrics} | {len(m.hd95) for m in metrics}
    if len(lengths) != 1:
        raise ValueError(f"all VolumeMetrics must have the same number of classes; got "
                         f"{sorted(lengths)}")
    dice = np.mean(np.stack([np.asarray(m.dice, np.float64) for m in metrics]), axis=0)
    hd95 = np.mean(np.stack([np.asarray(m.hd95, np.float64) for m in metrics]), axis=0)
    return MetricsSummary(float(dice.mean()), float(hd95.mean()), dice, hd95)


def predict_volume(predict_fn: Callable[[Any], Any], volume, batch_size: int, *,
                   input_size: int | tuple[int, int] | None = None,
                   image_order: int = 3) -> np.ndarray:
    """Slice-by-slice prediction of a volume, as the TransUNet / AdaWAC test
    loop: resize each slice to ``input_size`` (spline ``image_order``), predict in padded batches
    (one compilation), ``argmax`` the scores, resize the labels back (nearest).

    Args:
        predict_fn: float32 ``(b, h, w)`` -> scores ``(b, h, w, C)`` or labels ``(b, h, w)``.
        volume: ``(slices, H, W)``. batch_size: int >= 1.
        input_size: ``h`` or ``(h, w)``; None keeps the size. image_order: 0-5.

    Returns:
        int32 ``(slices, H, W)`` class map.
    """
    batch_size = check_int("batch_size", batch_size, low=1)
    image_order = check_int("image_order", image_order, low=0, high=5)
    vol = np.asarray(volume)
    if vol.ndim != 3:
        raise ValueError(f"volume must be 3-D (slices, H, W); got shape {vol.shape}")
    if not (np.issubdtype(vol.dtype, np.floating) or np.issubdtype(vol.dtype, np.integer)):
        raise TypeError(f"volume must be numeric; got dtype {vol.dtype}")
    s, h, w = vol.shape
    if s == 0 or h == 0 or w == 0:
        raise ValueError(f"volume must be non-empty; got shape {vol.shape}")
    if input_size is None:
        ih, iw = h, w
    elif isinstance(input_size, numbers.Integral):
        ih = iw = check_int("input_size", input_size, low=1)
    else:
        if len(input_size) != 2:
            raise ValueError(f"input_size must be an int or a pair (h, w); got {input_size!r}")
        ih = check_int("input_size[0]", input_size[0], low=1)
        iw = check_int("input_size[1]", input_size[1], low=1)
    resize = (ih, iw) != (h, w)
    slices = vol.astype(np.float32)
    if resize:
        slices = np.stack([scipy.ndimage.zoom(x, (ih / h, iw / w), order=image_order)
                           for x in slices]).astype(np.float32)
        if slices.shape[1:] != (ih, iw):
            raise ValueError(f"cannot resize {h} x {w} slices to {ih} x {iw} exactly")
    out = np.zeros((s, ih, iw), np.int32)
    for start in range(0, s, batch_size):
        batch = slices[start:start + batch_size]
        n = batch.shape[0]
        if n < batch_size:
            batch = np.concatenate([batch, np.zeros((batch_size - n, ih, iw), np.float32)])
        res = np.asarray(predict_fn(batch))
        if res.shape == (batch_size, ih, iw):
            lab = res
        elif res.ndim == 4 and res.shape[:3] == (batch_size, ih, iw):
            lab = np.argmax(res, axis=-1)
        else:
            raise ValueError(f"predict_fn must return scores (b, h, w, C) or labels (b, h, w) "
                             f"for a batch of shape {batch.shape}; got {res.shape}")
        out[start:start + n] = lab[:n]
    if resize:
        out = np.stack([scipy.ndimage.zoom(y, (h / ih, w / iw), order=0) for y in out])
        if out.shape[1:] != (h, w):
            raise ValueError(f"cannot resize {ih} x {iw} predictions back to {h} x {w} exactly")
    return out.astype(np.int32)
