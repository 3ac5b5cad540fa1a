"""Chapter 5 figures: AdaWAC weight heatmaps and segmentation overlays.

:func:`weight_heatmaps` (Figure 5.3), :func:`segmentation_overlay`
(Figure 5.2, C.1), :func:`legend_figure` and the colour tables. Functions build a
:class:`matplotlib.figure.Figure` without ``pyplot`` (nothing global to close), return it and
write a PNG when ``path`` is given. Why: the thesis' figures from a run's history. Layout
details: ``docs/training.md`` ("AdaWAC figures").
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping, Optional, Sequence, Union

import matplotlib as mpl
import numpy as np
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from rdr_jax.adawac.data import ACDC_CLASSES, SYNAPSE_CLASSES

__all__ = ["ACDC_COLORS", "HEATMAP_CMAPS", "HEATMAP_FIELDS", "SYNAPSE_COLORS",
           "HeatmapStyle", "OverlayStyle", "default_colors", "legend_figure",
           "segmentation_overlay", "weight_heatmaps"]

PathLike = Union[str, "os.PathLike[str]"]


def _table(hexes: Sequence[str]) -> np.ndarray:
    t = np.array([to_rgb(h) for h in hexes], dtype=np.float64)
    t.setflags(write=False)
    return t


#: Synapse colour table, RGB in [0, 1], row = class id of :data:`SYNAPSE_CLASSES`
#: (0 background -- never painted, 1 aorta blue, 2 gallbladder green, 3 left kidney red,
#: 4 right kidney cyan, 5 liver magenta, 6 pancreas yellow, 7 spleen purple, 8 stomach
#: orange).
SYNAPSE_COLORS = _table(["#000000", "#0000ff", "#00c000", "#ff0000", "#00ffff", "#ff00ff",
                         "#ffff00", "#8000ff", "#ff8000"])
#: ACDC colour table, RGB in [0, 1], row = class id of :data:`ACDC_CLASSES`
#: (0 background -- never painted, 1 RV blue, 2 Myo green, 3 LV red).
ACDC_COLORS = _table(["#000000", "#0000ff", "#00c000", "#ff0000"])

#: Panel order of :func:`weight_heatmaps` (top to bottom, as in Figure 5.3).
HEATMAP_FIELDS = ("ce", "beta", "cons")
#: Colormap per panel (NaN -- slice not seen in that epoch -- is drawn light grey).
HEATMAP_CMAPS = {"ce": "YlOrRd", "beta": "YlGnBu", "cons": "YlOrRd"}
_HEATMAP_LABELS = {"ce": r"$\ell_{CE}(\theta_t; (x_i, y_i))$", "beta": r"CE weight $\beta_t$",
                   "cons": r"$R_{AC}(\theta_t; x_i, A_{i,1}, A_{i,2})$"}
_CASE_LINE = {"color": "black", "linewidth": 0.9}
_FG_LINE = {"color": "#9400d3", "linewidth": 0.6}


# ----------------------------------------------------------------------------- validation

def _get_field(history: Any, name: str) -> Any:
    if isinstance(history, Mapping):
        if name not in history:
            raise ValueError(f"history is missing {name!r}; it needs 'ce', 'cons' and 'beta' "
                             f"(got keys {sorted(map(str, history.keys()))})")
        return history[name]
    if not hasattr(history, name):
        raise TypeError(f"history must be a dict or NamedTuple with fields 'ce', 'cons', 'beta'"
                        f"; got {type(history).__name__} without {name!r}")
    return getattr(history, name)


def _float_2d(name: str, a: Any) -> np.ndarray:
    try:
        arr = np.asarray(a)
    except Exception as e:  # ragged lists etc.
        raise TypeError(f"{name} must be an array of shape (epochs, num_slices); "
                        f"got {type(a).__name__} ({e})") from e
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.floating)
                                 or np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"{name} must be a real numeric array; got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"{name} must have shape (epochs, num_slices); got shape {arr.shape}")
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"{name} must have at least one epoch and one slice; got shape "
                         f"{arr.shape}")
    arr = arr.astype(np.float64)
    if np.isinf(arr).any():
        raise ValueError(f"{name} contains +/-inf; use NaN for slices not seen in an epoch")
    return arr


def _int_vector(name: str, a: Any, n: int) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of length num_slices={n}; got shape "
                         f"{arr.shape}")
    if arr.shape[0] != n:
        raise ValueError(f"{name} has length {arr.shape[0]} but the history has num_slices={n}"
                         f" columns; they must match")
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integers; got dtype {arr.dtype}")
    return arr.astype(np.int64)


def _boundaries(keys: np.ndarray) -> np.ndarray:
    """x positions (between columns) where ``keys`` changes along the columns."""
    return np.flatnonzero(keys[1:] != keys[:-1]) + 0.5


# ----------------------------------------------------------------------------- heatmaps

def _check_dpi(dpi: Any) -> int:
    if isinstance(dpi, bool) or not isinstance(dpi, (int, np.integer)) or dpi < 1:
        raise ValueError(f"dpi must be an int >= 1; got {dpi!r}")
    return int(dpi)


@dataclasses.dataclass(frozen=True)
class HeatmapStyle:
    """How :func:`weight_heatmaps` draws: ``robust`` clips the CE / consistency colours to
    the 1st-99th percentiles; ``dpi`` of the saved PNG (int >= 1)."""

    robust: bool = True
    dpi: int = 150

    def __post_init__(self):
        if not isinstance(self.robust, (bool, np.bool_)):
            raise TypeError(f"robust must be a bool; got {self.robust!r}")
        _check_dpi(self.dpi)


def weight_heatmaps(history: Any, case_index: Any, *, slice_order: Optional[Any] = None,
                    slice_index: Optional[Any] = None, foreground: Optional[Any] = None,
                    title: Optional[str] = None, path: Optional[PathLike] = None,
                    style: HeatmapStyle = HeatmapStyle()) -> Figure:
    """Heatmaps of per-slice CE, CE weight beta and consistency over training
    (Figure 5.3): ``epochs x slices`` images, slices ordered by case then slice
    number, case boundaries in black, foreground changes in purple; NaN (not seen) in grey.

    Args:
        history: ``ce``, ``cons``, ``beta`` arrays ``(epochs, num_slices)``.
        case_index: ``(num_slices,)``, the case of each slice
            (:attr:`rdr_jax.adawac.data.SliceDataset.case_index`).
        slice_order: optional column permutation. slice_index: slice numbers for the default
            order. foreground: optional bool ``(num_slices,)``.
        title, path: figure title, PNG path. style: :class:`HeatmapStyle` (``robust``,
            ``dpi``).

    Returns:
        :class:`matplotlib.figure.Figure` with 3 heatmaps (labels ``"ce"``, ``"beta"``,
        ``"cons"``) and their colour bars.

    Raises:
        ValueError / TypeError: missing fields, mismatched shapes, infinite values.
    """
    if not isinstance(style, HeatmapStyle):
        raise TypeError(f"style must be a HeatmapStyle; got {type(style).__name__}")
    robust = style.robust
    arrays = {f: _float_2d(f"history.{f}", _get_field(history, f)) for f in HEATMAP_FIELDS}
    shapes = {f: a.shape for f, a in arrays.items()}
    if len(set(shapes.values())) != 1:
        raise ValueError(f"history.ce, history.cons and history.beta must have the same shape "
                         f"(epochs, num_slices); got {shapes}")
    epochs, n = arrays["ce"].shape
    case = _int_vector("case_index", case_index, n)
    if slice_index is not None:
        sidx = _int_vector("slice_index", slice_index, n)
    else:
        sidx = np.zeros(n, np.int64)
    if slice_order is None:
        order = np.lexsort((np.arange(n), sidx, case))
    else:
        order = _int_vector("slice_order", slice_order, n)
        if not np.array_equal(np.sort(order), np.arange(n)):
            raise ValueError(f"slice_order must be a permutation of range({n})")
    fg = None
    if foreground is not None:
        fg = np.asarray(foreground)
        if fg.ndim != 1 or fg.shape[0] != n:
            raise ValueError(f"foreground must be a 1-D array of length num_slices={n}; got "
                             f"shape {fg.shape}")
        if fg.dtype != bool:
            raise TypeError(f"foreground must be a bool array; got dtype {fg.dtype}")
    if title is not None and not isinstance(title, str):
        raise TypeError(f"title must be a string or None; got {type(title).__name__}")
    dpi = int(style.dpi)

    case_o = case[order]
    case_lines = _boundaries(case_o)
    fg_lines = np.zeros(0)
    if fg is not None:
        fg_o = fg[order]
        change = (fg_o[1:] != fg_o[:-1]) & (case_o[1:] == case_o[:-1])
        fg_lines = np.flatnonzero(change) + 0.5

    fig = Figure(figsize=(min(16.0, 6.0 + n / 150.0), 2.2 * 3 + 0.6), layout="constrained")
    axes = fig.subplots(3, 1, sharex=True)
    for ax, f in zip(axes, HEATMAP_FIELDS):
        data = np.ma.masked_invalid(arrays[f][:, order])
        finite = data.compressed()
        if f == "beta":
            vmin, vmax = 0.0, 1.0
        elif finite.size == 0:
            vmin, vmax = 0.0, 1.0
        elif robust:
            vmin, vmax = (float(v) for v in np.percentile(finite, [1.0, 99.0]))
        else:
            vmin, vmax = float(finite.min()), float(finite.max())
        if vmax <= vmin:
            vmin, vmax = vmin - 0.5, vmax + 0.5
        cmap = mpl.colormaps[HEATMAP_CMAPS[f]].with_extremes(bad="#d9d9d9")
        im = ax.imshow(data, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto",
                       interpolation="nearest", origin="upper")
        ax.set_label(f)
        for x in case_lines:
            ax.axvline(x, gid="case-boundary", **_CASE_LINE)
        for x in fg_lines:
            ax.axvline(x, gid="foreground-boundary", **_FG_LINE)
        ax.set_ylabel("epoch")
        ax.set_title(_HEATMAP_LABELS[f], fontsize=10)
        fig.colorbar(im, ax=ax, pad=0.01, fraction=0.03)
    axes[-1].set_xlabel(f"slice (ordered by case, then slice number; {n} slices, "
                        f"{len(np.unique(case))} cases)")
    if title is not None:
        fig.suptitle(title)
    if path is not None:
        fig.savefig(os.fspath(path), dpi=dpi)
    return fig


# ----------------------------------------------------------------------------- colours

def default_colors(class_names: Sequence[str]) -> np.ndarray:
    """The colour table ``(num_classes, 3)`` for ``class_names``:
    :data:`SYNAPSE_COLORS`, :data:`ACDC_COLORS` or a generic palette (row 0 black).
    """
    names = _check_class_names(class_names)
    if names == tuple(SYNAPSE_CLASSES):
        return SYNAPSE_COLORS
    if names == tuple(ACDC_CLASSES):
        return ACDC_COLORS
    k = len(names) - 1
    if k <= 10:
        fg = np.asarray(mpl.colormaps["tab10"].colors)[:k, :3]
    elif k <= 20:
        fg = np.asarray(mpl.colormaps["tab20"].colors)[:k, :3]
    else:
        fg = mpl.colormaps["hsv"](np.arange(k) / k)[:, :3]
    table = np.vstack([np.zeros((1, 3)), fg])
    table.setflags(write=False)
    return table


def _check_class_names(class_names: Any) -> tuple[str, ...]:
    if isinstance(class_names, str) or not isinstance(class_names, Sequence):
        raise TypeError(f"class_names must be a sequence of strings (index = class id); got "
                        f"{type(class_names).__name__}")
    names = tuple(class_names)
    if not all(isinstance(c, str) for c in names):
        raise TypeError("class_names must contain only strings")
    if len(names) < 2:
        raise ValueError(f"class_names needs the background and at least one class; got "
                         f"{len(names)} name(s)")
    return names


def _check_colors(colors: Any, num_classes: int) -> np.ndarray:
    try:
        c = np.asarray(colors, dtype=np.float64)
    except Exception as e:
        raise TypeError(f"colors must be an array of RGB rows; got {type(colors).__name__} "
                        f"({e})") from e
    if c.ndim != 2 or c.shape[1] != 3:
        raise ValueError(f"colors must have shape (num_classes, 3); got {c.shape}")
    if c.shape[0] < num_classes:
        raise ValueError(f"colors has {c.shape[0]} rows but class_names has {num_classes} "
                         f"classes; the table needs one row per class id")
    if not np.all(np.isfinite(c)) or c.min() < 0.0 or c.max() > 1.0:
        raise ValueError("colors must be RGB values in [0, 1]")
    return c


def _legend_handles(class_names: Sequence[str], colors: np.ndarray) -> list:
    return [Patch(facecolor=colors[i], edgecolor="none", label=class_names[i])
            for i in range(1, len(class_names))]


def _legend_columns(labels: Sequence[str], width: float) -> int:
    """How many legend entries of ``labels`` fit side by side in ``width`` inches (8 pt text:
    about 0.07 in per character plus 0.45 in for the patch and spacing)."""
    entry = max(0.45 + 0.07 * len(t) for t in labels)
    return int(max(1, min(len(labels), width // entry)))


def legend_figure(class_names: Sequence[str], colors: Optional[Any] = None, *,
                  path: Optional[PathLike] = None, dpi: int = 150) -> Figure:
    """A stand-alone legend strip of the class colours
    (Figure C.2; background gets no entry).
    """
    names = _check_class_names(class_names)
    table = default_colors(names) if colors is None else _check_colors(colors, len(names))
    k = len(names) - 1
    fig = Figure(figsize=(max(3.0, 1.3 * k), 0.45))
    fig.legend(handles=_legend_handles(names, table), loc="center", ncol=k, frameon=False,
               fontsize=9, handlelength=1.2, columnspacing=1.0)
    if path is not None:
        fig.savefig(os.fspath(path), dpi=int(dpi))
    return fig


# ----------------------------------------------------------------------------- overlays

def _label_batch(name: str, a: Any, shape: tuple[int, ...], num_classes: int) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim == 2:
        arr = arr[None]
    if arr.shape != shape:
        raise ValueError(f"{name} must have the shape of image {shape} (or {shape[1:]} for one "
                         f"example); got {np.asarray(a).shape}")
    if arr.dtype == bool:
        arr = arr.astype(np.int64)
    elif np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise TypeError(f"{name} must hold integer class ids; got non-integer floats")
        arr = arr.astype(np.int64)
    elif not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integer class ids; got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.size and (arr.min() < 0 or arr.max() >= num_classes):
        bad = sorted({int(v) for v in np.unique(arr) if v < 0 or v >= num_classes})
        raise ValueError(f"{name} holds class ids {bad[:10]} outside [0, {num_classes}): the "
                         f"colour table / class_names cover {num_classes} classes")
    return arr


def _gray(image: np.ndarray) -> np.ndarray:
    """Per-example min-max scaling to [0, 1] (a constant image maps to 0)."""
    lo = image.min(axis=(1, 2), keepdims=True)
    hi = image.max(axis=(1, 2), keepdims=True)
    span = np.where(hi > lo, hi - lo, 1.0)
    return (image - lo) / span


def _blend(gray: np.ndarray, label: np.ndarray, table: np.ndarray, alpha: float) -> np.ndarray:
    rgb = np.repeat(gray[..., None], 3, axis=-1)
    fg = label > 0
    rgb[fg] = (1.0 - alpha) * rgb[fg] + alpha * table[label[fg]]
    return rgb


@dataclasses.dataclass(frozen=True)
class OverlayStyle:
    """How :func:`segmentation_overlay` draws.

    Attributes:
        colors: RGB table in [0, 1], one row per class id (default :func:`default_colors`);
            kept as a tuple of rows. alpha: blending weight in [0, 1].
        layout: ``"rows"`` (one row per example) or ``"columns"`` (the thesis' layout).
        gt_title: the ground-truth panel's title. legend: draw the class legend.
        dpi: of the saved PNG (int >= 1).
    """

    colors: Optional[Any] = None
    alpha: float = 0.5
    layout: str = "rows"
    gt_title: str = "ground truth"
    legend: bool = True
    dpi: int = 150

    def __post_init__(self):
        if self.colors is not None:
            rows = _check_colors(self.colors, 0)
            object.__setattr__(self, "colors", tuple(tuple(r) for r in rows.tolist()))
        a = self.alpha
        if isinstance(a, bool) or not np.isscalar(a) or not 0.0 <= float(a) <= 1.0:
            raise ValueError(f"alpha must be a number in [0, 1]; got {a!r}")
        if self.layout not in ("rows", "columns"):
            raise ValueError(f"layout must be 'rows' or 'columns'; got {self.layout!r}")
        if not isinstance(self.gt_title, str):
            raise TypeError(f"gt_title must be a string; got {type(self.gt_title).__name__}")
        if not isinstance(self.legend, (bool, np.bool_)):
            raise TypeError(f"legend must be a bool; got {self.legend!r}")
        _check_dpi(self.dpi)


def segmentation_overlay(image: Any, label: Any, predictions: Mapping[str, Any], *,
                         class_names: Sequence[str],
                         example_names: Optional[Sequence[str]] = None,
                         title: Optional[str] = None,
                         style: OverlayStyle = OverlayStyle(),
                         path: Optional[PathLike] = None) -> Figure:
    """Ground truth and predictions of several methods blended over the grey
    image (Figure 5.2, C.1, C.2).

    Args:
        image: ``(H, W)`` or ``(B, H, W)``. label: class ids of the same shape.
        predictions: ``method name -> class ids`` (may be empty).
        class_names: names, background first. example_names, title: labels.
        style: :class:`OverlayStyle` (colours, alpha, layout, ground-truth title, legend,
            dpi). path: PNG to save.

    Returns:
        :class:`matplotlib.figure.Figure` with ``B * (1 + len(predictions))`` image axes.

    Raises:
        ValueError / TypeError: bad shapes, non-finite images, class ids outside the table.
    """
    if not isinstance(style, OverlayStyle):
        raise TypeError(f"style must be an OverlayStyle; got {type(style).__name__}")
    colors, alpha, layout, gt_title = style.colors, style.alpha, style.layout, style.gt_title
    legend, dpi = style.legend, style.dpi
    names = _check_class_names(class_names)
    k = len(names)
    table = default_colors(names) if colors is None else _check_colors(colors, k)
    img = np.asarray(image)
    if img.ndim not in (2, 3):
        raise ValueError(f"image must have shape (H, W) or (B, H, W); got {img.shape}")
    if not (np.issubdtype(img.dtype, np.floating) or np.issubdtype(img.dtype, np.integer)):
        raise TypeError(f"image must be a real numeric array; got dtype {img.dtype}")
    img = img.astype(np.float64)
    if img.ndim == 2:
        img = img[None]
    if img.shape[0] < 1 or img.shape[1] < 1 or img.shape[2] < 1:
        raise ValueError(f"image must be non-empty; got shape {img.shape}")
    if not np.all(np.isfinite(img)):
        raise ValueError("image contains NaN or Inf")
    if not isinstance(predictions, Mapping):
        raise TypeError(f"predictions must be a dict method name -> class ids; got "
                        f"{type(predictions).__name__}")
    lab = _label_batch("label", label, img.shape, k)
    preds = {}
    for m, p in predictions.items():
        if not isinstance(m, str):
            raise TypeError(f"predictions keys must be method names (str); got {m!r}")
        preds[m] = _label_batch(f"predictions[{m!r}]", p, img.shape, k)
    if isinstance(alpha, bool) or not np.isscalar(alpha) or not 0.0 <= float(alpha) <= 1.0:
        raise ValueError(f"alpha must be a number in [0, 1]; got {alpha!r}")
    alpha = float(alpha)
    if layout not in ("rows", "columns"):
        raise ValueError(f"layout must be 'rows' or 'columns'; got {layout!r}")
    b = img.shape[0]
    if example_names is not None:
        example_names = tuple(example_names)
        if len(example_names) != b or not all(isinstance(e, str) for e in example_names):
            raise ValueError(f"example_names must be {b} strings (one per example); got "
                             f"{example_names!r}")

    gray = _gray(img)
    panels = [(gt_title, lab)] + list(preds.items())
    p = len(panels)
    h, w = img.shape[1:]
    cell = 2.0
    if layout == "rows":
        nrows, ncols = b, p
    else:
        nrows, ncols = p, b
    fig = Figure(figsize=(cell * ncols * max(w / h, 0.3), cell * nrows + (0.5 if legend else 0)
                          + (0.3 if title else 0)), layout="constrained")
    axes = np.asarray(fig.subplots(nrows, ncols, squeeze=False))
    for e in range(b):
        for j, (pname, lab_j) in enumerate(panels):
            ax = axes[e, j] if layout == "rows" else axes[j, e]
            ax.imshow(_blend(gray[e], lab_j[e], table, alpha), interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            for s in ax.spines.values():
                s.set_visible(False)
            ename = example_names[e] if example_names is not None else None
            if layout == "rows":
                if e == 0:
                    ax.set_title(pname, fontsize=10)
                if j == 0 and ename is not None:
                    ax.set_ylabel(ename, fontsize=9)
            else:
                if e == 0:
                    ax.set_ylabel(pname, fontsize=10)
                if j == 0 and ename is not None:
                    ax.set_title(ename, fontsize=9)
    if legend:
        fig.legend(handles=_legend_handles(names, table), loc="outside lower center",
                   ncol=_legend_columns(names[1:], fig.get_figwidth()), frameon=False,
                   fontsize=8, handlelength=1.2, columnspacing=1.0)
    if title is not None:
        fig.suptitle(title)
    if path is not None:
        fig.savefig(os.fspath(path), dpi=int(dpi))
    return fig
