"""Segmentation metrics of Chapter 5: per-volume DSC and HD95 (thesis ``sec:experiments_adawac``).

The thesis reports, for every test volume and organ class ``k = 1..K-1``, on the 3-D masks
``P = {pred == k}`` and ``G = {label == k}``:

* the Dice similarity coefficient ``DSC = 2 |P n G| / (|P| + |G|)``;
* the 95th percentile Hausdorff distance ``HD95``: with the surfaces ``dP = P \\ erode(P)``
  and ``dG = G \\ erode(G)`` (binary erosion with the 6-neighbourhood, outside the array
  counting as background, as in medpy), the surface distances ``d(p, dG)`` for ``p in dP``
  and ``d(g, dP)`` for ``g in dG`` (Euclidean, voxel units) are pooled and HD95 is their 95th
  percentile (linear interpolation, ``np.percentile``), i.e. medpy's ``hd95`` with unit
  spacing;
* the empty-mask rules of the AdaWAC evaluation: both masks empty -> ``(DSC, HD95) = (1,
  0)``; exactly one empty -> ``(0, 0)``.

Scores are averaged over volumes per class, then over classes (:func:`aggregate_metrics`).
The thesis tables print DSC in percent; these functions return fractions in [0, 1].
Everything here runs on the host (numpy/scipy), outside ``jit``; :func:`predict_volume`
calls a (jitted) model slice batch by slice batch.

Example:
    >>> import numpy as np
    >>> from rdr_jax.adawac.metrics import volume_metrics
    >>> label = np.zeros((4, 8, 8), int); label[1:3, 2:6, 2:6] = 1
    >>> m = volume_metrics(label, label, num_classes=3)
    >>> m.dice.tolist(), m.hd95.tolist()
    ([1.0, 1.0], [0.0, 0.0])
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
    """Per-class scores of one volume (classes ``1..num_classes-1``, background excluded).

    Attributes:
        dice: float64 ``(num_classes - 1,)``, DSC in [0, 1].
        hd95: float64 ``(num_classes - 1,)``, HD95 in voxel units.
    """

    dice: np.ndarray
    hd95: np.ndarray


class MetricsSummary(NamedTuple):
    """Scores averaged over volumes (per class) and then over classes.

    Attributes:
        dice: mean DSC over classes of the per-class means (the thesis' "DSC" column).
        hd95: mean HD95 over classes (the thesis' "HD95" column).
        per_class_dice: ``(num_classes - 1,)`` mean DSC over volumes (the organ columns).
        per_class_hd95: ``(num_classes - 1,)`` mean HD95 over volumes.
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
    """DSC and HD95 of two boolean masks of equal shape, with the empty-mask rules.

    ``DSC = 2 |P n G| / (|P| + |G|)``; ``HD95 = percentile_95({d(p, dG): p in dP} u {d(g,
    dP): g in dG})`` (module docstring); ``(1, 0)`` if both are empty, ``(0, 0)`` if exactly
    one is. The distance transforms are computed on the bounding box of ``P u G`` grown by
    one voxel (clipped to the array), which leaves the erosion and all distances unchanged.

    Args:
        pred_mask, label_mask: boolean arrays of the same shape (any ndim >= 1).

    Returns:
        ``(dice, hd95)`` as Python floats.

    Example:
        >>> a = np.zeros((1, 5, 5), bool); a[0, 1:4, 1:4] = True
        >>> binary_dice_hd95(a, a)
        (1.0, 0.0)
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
    """Per-class DSC and HD95 of one predicted 3-D volume (thesis ``sec:experiments_adawac``).

    For ``k = 1..num_classes-1``: :func:`rdr_jax.adawac.metrics.binary_dice_hd95` of
    ``pred == k`` and ``label == k`` (DSC ``2|P n G|/(|P|+|G|)``, HD95 the 95th percentile
    of the pooled symmetric surface distances in voxel units as medpy's ``hd95``; both
    empty -> (1, 0), one empty -> (0, 0)).

    Args:
        pred: ``(slices, H, W)`` integer (or integer-valued float) class map.
        label: ground truth of the same shape.
        num_classes: Python int >= 2, including background.

    Returns:
        :class:`VolumeMetrics` with arrays of length ``num_classes - 1``.

    Raises:
        ValueError: shapes differ or are not 3-D, or values outside ``[0, num_classes)``.
        TypeError: non-numeric dtypes, or a non-int ``num_classes``.

    Example:
        >>> pred = np.zeros((2, 4, 4), int); label = pred.copy(); label[0, 0, 0] = 1
        >>> volume_metrics(pred, label, 2).dice.tolist()
        [0.0]
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
    """Average :class:`VolumeMetrics` over volumes (per class), then over classes.

    ``per_class = mean_v m_v[k]``; ``dice = mean_k per_class_dice[k]`` (same for HD95), the
    thesis' table convention.

    Args:
        metrics: non-empty sequence of :class:`VolumeMetrics` with equal lengths.

    Returns:
        :class:`MetricsSummary`.

    Example:
        >>> m1 = VolumeMetrics(np.array([1.0, 0.5]), np.array([0.0, 2.0]))
        >>> m2 = VolumeMetrics(np.array([0.0, 0.5]), np.array([4.0, 2.0]))
        >>> s = aggregate_metrics([m1, m2]); s.dice, s.hd95
        (0.5, 2.0)
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
    """Slice-by-slice prediction of a 3-D volume, as in the TransUNet/AdaWAC test loop.

    Each slice ``x`` of shape ``(H, W)`` is resized to ``input_size`` with
    ``scipy.ndimage.zoom(x, (h/H, w/W), order=image_order)`` (cubic by default, the
    reference's choice) when the sizes differ, the slices are fed to ``predict_fn`` in batches
    of ``batch_size`` (the last batch is zero-padded to ``batch_size`` so a jitted
    ``predict_fn`` compiles once), the per-pixel class is ``argmax`` over the last axis when
    ``predict_fn`` returns scores ``(b, h, w, C)`` (or taken as is for labels ``(b, h, w)``),
    and the label map is resized back to ``(H, W)`` with nearest-neighbour zoom (``order=0``).

    Args:
        predict_fn: maps a float32 batch ``(b, h, w)`` to scores ``(b, h, w, C)`` or integer
            labels ``(b, h, w)``; e.g. ``lambda x: model(x[..., None])`` for an NHWC model.
        volume: ``(slices, H, W)`` image volume.
        batch_size: Python int >= 1.
        input_size: model input ``h`` (square) or ``(h, w)``; ``None`` keeps ``(H, W)``.
        image_order: spline order for the image resize (0-5).

    Returns:
        int32 ``(slices, H, W)`` predicted class map (numpy).

    Example:
        >>> vol = np.random.default_rng(0).random((3, 10, 10))
        >>> pred = predict_volume(lambda x: (x > 0.5).astype(int), vol, 2)
        >>> bool((pred == (vol > 0.5)).all())
        True
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
