"""Synapse / ACDC data for AdaWAC (thesis Section 5.5, C.4).

Loaders of the TransUNet-preprocessed files (Synapse ``.npz`` slices and ``.npy.h5`` volumes,
ACDC ``.h5``), read locally (nothing is downloaded); missing files raise
``FileNotFoundError``, corrupt or invalid ones ``ValueError``, each naming the file. Containers
:class:`SliceDataset` (training rows, one beta per row), :class:`VolumeDataset`,
:class:`SegmentationData`, and the subsets of Table 5.1. Why: the thesis'
data in arrays a jitted step indexes. Layouts: ``docs/training.md`` ("AdaWAC data").
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, NamedTuple, Optional, Sequence, Union

import numpy as np
import scipy.ndimage

from rdr_jax._src.optional import require
from rdr_jax._src.validation import check_int

__all__ = [
    "ACDC_CLASSES",
    "SUBSETS",
    "SYNAPSE_CLASSES",
    "SYNAPSE_HALF_VOL_CASES",
    "SegmentationData",
    "SliceDataset",
    "VolumeDataset",
    "has_foreground",
    "load_acdc",
    "load_acdc_slices",
    "load_acdc_volumes",
    "load_synapse",
    "load_synapse_test",
    "load_synapse_train",
    "make_subset",
    "select_slices",
    "slices_from_volumes",
]

PathLike = Union[str, "os.PathLike[str]"]

SYNAPSE_CLASSES = ("background", "aorta", "gallbladder", "kidney_left", "kidney_right",
                   "liver", "pancreas", "spleen", "stomach")
ACDC_CLASSES = ("background", "RV", "Myo", "LV")
SYNAPSE_HALF_VOL_CASES = ("case0005", "case0007", "case0009", "case0010", "case0026",
                          "case0027", "case0033", "case0034", "case0039")
SUBSETS = ("full", "half-slice", "half-vol", "half-sparse")

_SLICE_RE = re.compile(r"^(?P<case>.+?)_slice_?(?P<idx>\d+)$")
_HINT = (" rdr_jax never downloads data: get the TransUNet-preprocessed data (see "
         "https://github.com/Beckschen/TransUNet) and point the loader at its folder.")


class SliceDataset(NamedTuple):
    """Training slices, stacked.

    Attributes:
        images: float32 ``(N, H, W)``. labels: uint8 ``(N, H, W)``.
        case_index: int32 ``(N,)`` into ``case_names``. slice_index: int32 ``(N,)``.
        case_names: the cases in order of first appearance. names: per-slice names.
    """

    images: np.ndarray
    labels: np.ndarray
    case_index: np.ndarray
    slice_index: np.ndarray
    case_names: tuple[str, ...]
    names: tuple[str, ...]


class VolumeDataset(NamedTuple):
    """Evaluation volumes at native size: tuples of float32 ``images``, uint8
    ``labels`` ``(S_v, H_v, W_v)`` and ``names``.
    """

    images: tuple[np.ndarray, ...]
    labels: tuple[np.ndarray, ...]
    names: tuple[str, ...]


class SegmentationData(NamedTuple):
    """A data set: ``train`` (:class:`SliceDataset`), ``test`` / ``val``
    (:class:`VolumeDataset` or None), ``num_classes`` and ``class_names``.
    """

    train: SliceDataset
    test: Optional[VolumeDataset]
    val: Optional[VolumeDataset]
    num_classes: int
    class_names: tuple[str, ...]


# ----------------------------------------------------------------------------- file reading

def _require(path: Path, what: str) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path}." + _HINT)
    return path


def _read_npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    _require(path, "Synapse training slice")
    try:
        with np.load(path, allow_pickle=False) as data:
            keys = set(data.files)
            missing = {"image", "label"} - keys
            if missing:
                raise ValueError(f"{path}: missing array(s) {sorted(missing)}; found "
                                 f"{sorted(keys)} (expected 'image' and 'label')")
            return np.asarray(data["image"]), np.asarray(data["label"])
    except ValueError as e:
        if str(path) in str(e):
            raise
        raise ValueError(f"{path}: not a readable .npz file ({e})") from e
    except Exception as e:  # zipfile.BadZipFile, EOFError, OSError, ...
        raise ValueError(f"{path}: not a readable .npz file ({type(e).__name__}: {e})") from e


def _read_h5(path: Path, what: str) -> tuple[np.ndarray, np.ndarray]:
    h5py = require("h5py", f"reading the {what} file {str(path)!r}")

    _require(path, what)
    try:
        with h5py.File(path, "r") as f:
            keys = set(f.keys())
            missing = {"image", "label"} - keys
            if missing:
                raise ValueError(f"{path}: missing dataset(s) {sorted(missing)}; found "
                                 f"{sorted(keys)} (expected 'image' and 'label')")
            return np.asarray(f["image"][()]), np.asarray(f["label"][()])
    except ValueError as e:
        if str(path) in str(e):
            raise
        raise ValueError(f"{path}: not a readable HDF5 file ({e})") from e
    except Exception as e:  # OSError for a corrupt file, KeyError, ...
        raise ValueError(f"{path}: not a readable HDF5 file, it looks truncated or corrupt "
                         f"({type(e).__name__}: {e})") from e


def _validate(path: Any, image: np.ndarray, label: np.ndarray, ndim: int,
              num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    kind = "slice (H, W)" if ndim == 2 else "volume (slices, H, W)"
    if image.ndim != ndim:
        raise ValueError(f"{path}: 'image' must be a {ndim}-D {kind}; got shape {image.shape}")
    if label.shape != image.shape:
        raise ValueError(f"{path}: 'label' shape {label.shape} differs from 'image' shape "
                         f"{image.shape}")
    if image.size == 0:
        raise ValueError(f"{path}: 'image' is empty (shape {image.shape})")
    if not (np.issubdtype(image.dtype, np.floating) or np.issubdtype(image.dtype, np.integer)):
        raise ValueError(f"{path}: 'image' must be numeric; got dtype {image.dtype}")
    if not np.all(np.isfinite(image)):
        raise ValueError(f"{path}: 'image' contains non-finite values")
    if not (np.issubdtype(label.dtype, np.floating) or np.issubdtype(label.dtype, np.integer)
            or label.dtype == bool):
        raise ValueError(f"{path}: 'label' must be numeric; got dtype {label.dtype}")
    if np.issubdtype(label.dtype, np.floating):
        if not np.all(np.isfinite(label)) or not np.all(label == np.round(label)):
            raise ValueError(f"{path}: 'label' must hold integer class ids")
    lo, hi = label.min(), label.max()
    if lo < 0 or hi >= num_classes:
        raise ValueError(f"{path}: 'label' values must lie in [0, {num_classes - 1}] "
                         f"({num_classes} classes); got range [{lo}, {hi}]")
    return image.astype(np.float32), label.astype(np.uint8)


def _resize(image: np.ndarray, label: np.ndarray, size: Optional[tuple[int, int]],
            image_order: int) -> tuple[np.ndarray, np.ndarray]:
    if size is None or image.shape == size:
        return image, label
    h, w = image.shape
    zoom = (size[0] / h, size[1] / w)
    img = scipy.ndimage.zoom(image, zoom, order=image_order).astype(np.float32)
    lab = scipy.ndimage.zoom(label, zoom, order=0).astype(np.uint8)
    return img, lab


def _read_list(path: Path) -> list[str]:
    _require(path, "list file")
    try:
        lines = path.read_text().splitlines()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: list file is not text ({e})") from e
    names = [ln.strip() for ln in lines if ln.strip()]
    if not names:
        raise ValueError(f"{path}: list file is empty")
    return names


def _split_name(name: str) -> tuple[str, int]:
    m = _SLICE_RE.match(name)
    if m is None:
        raise ValueError(f"slice name {name!r} does not end in '_slice<number>' (expected e.g. "
                         "'case0005_slice012' or 'patient001_frame01_slice_3')")
    return m.group("case"), int(m.group("idx"))


def _discover(directory: Path, suffix: str, what: str) -> list[str]:
    if not directory.is_dir():
        raise FileNotFoundError(f"{what} directory not found: {directory}." + _HINT)
    names = [p.name[: -len(suffix)] for p in directory.iterdir()
             if p.is_file() and p.name.endswith(suffix)]
    if not names:
        raise FileNotFoundError(f"no {what} files '*{suffix}' in {directory}." + _HINT)
    return names


def _natural_key(name: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def _size(size: Any) -> Optional[tuple[int, int]]:
    if size is None:
        return None
    if isinstance(size, (tuple, list)):
        if len(size) != 2:
            raise ValueError(f"size must be an int or a pair (H, W); got {size!r}")
        return (check_int("size[0]", size[0], low=1), check_int("size[1]", size[1], low=1))
    s = check_int("size", size, low=1)
    return (s, s)


def _load_slices(directory: PathLike, names: Optional[Sequence[str]], suffix: str,
                 reader, num_classes: int, size: Any, image_order: int,
                 what: str) -> SliceDataset:
    directory = Path(directory)
    size = _size(size)
    image_order = check_int("image_order", image_order, low=0, high=5)
    discovered = names is None
    if discovered:
        names = _discover(directory, suffix, what)
    parsed = []
    for n in names:
        try:
            parsed.append(_split_name(n))
        except ValueError as e:
            raise ValueError(f"{directory / (n + suffix)}: {e}") from None
    if discovered:   # sort by case (natural order) and slice number
        order = sorted(range(len(names)),
                       key=lambda i: (_natural_key(parsed[i][0]), parsed[i][1]))
        names = [names[i] for i in order]
        parsed = [parsed[i] for i in order]
    images, labels = [], []
    for name in names:
        path = directory / (name + suffix)
        img, lab = reader(path)
        img, lab = _validate(path, img, lab, 2, num_classes)
        img, lab = _resize(img, lab, size, image_order)
        images.append(img)
        labels.append(lab)
    shapes = {im.shape for im in images}
    if len(shapes) > 1:
        raise ValueError(f"{what} slices in {directory} have different shapes {sorted(shapes)}; "
                         "pass size=(H, W) (e.g. size=224) to resize them to a common shape")
    case_names: list[str] = []
    lookup: dict[str, int] = {}
    for case, _ in parsed:
        if case not in lookup:
            lookup[case] = len(case_names)
            case_names.append(case)
    return SliceDataset(
        images=np.stack(images),
        labels=np.stack(labels),
        case_index=np.array([lookup[c] for c, _ in parsed], dtype=np.int32),
        slice_index=np.array([i for _, i in parsed], dtype=np.int32),
        case_names=tuple(case_names),
        names=tuple(names),
    )


def _load_volumes(directory: PathLike, names: Optional[Sequence[str]], suffix: str,
                  num_classes: int, what: str) -> VolumeDataset:
    directory = Path(directory)
    if names is None:
        names = sorted(_discover(directory, suffix, what), key=_natural_key)
    images, labels = [], []
    for name in names:
        path = directory / (name + suffix)
        img, lab = _read_h5(path, what)
        img, lab = _validate(path, img, lab, 3, num_classes)
        images.append(img)
        labels.append(lab)
    return VolumeDataset(tuple(images), tuple(labels), tuple(names))


# ----------------------------------------------------------------------------- Synapse

def load_synapse_train(train_dir: PathLike, *, list_file: Optional[PathLike] = None,
                       size: Any = None, image_order: int = 3) -> SliceDataset:
    """Load Synapse training slices ``<train_dir>/caseXXXX_sliceYYY.npz``.

    Args:
        train_dir: folder of the slices. list_file: ``train.txt`` or None (discover and sort).
        size: None, ``n`` or ``(H, W)``: resize (``image_order`` for images, nearest for labels).
        image_order: spline order (3, the reference's).

    Returns:
        :class:`SliceDataset`.

    Raises:
        FileNotFoundError: missing folder, list or slice. ValueError: corrupt or invalid slice.
    """
    names = None if list_file is None else _read_list(Path(list_file))
    return _load_slices(train_dir, names, ".npz", _read_npz, len(SYNAPSE_CLASSES), size,
                        image_order, "Synapse training")


def load_synapse_test(test_dir: PathLike, *, list_file: Optional[PathLike] = None
                      ) -> VolumeDataset:
    """Load Synapse test volumes ``<test_dir>/caseXXXX.npy.h5`` (list file or
    discovery), at native resolution.
    """
    names = None if list_file is None else _read_list(Path(list_file))
    return _load_volumes(test_dir, names, ".npy.h5", len(SYNAPSE_CLASSES), "Synapse test")


def load_synapse(root: PathLike, *, list_dir: Optional[PathLike] = None, size: Any = None,
                 image_order: int = 3, load_test: bool = True) -> SegmentationData:
    """Load Synapse from ``root`` (``train_npz/``, ``test_vol_h5/``, lists in
    ``list_dir`` or ``root/lists_Synapse``).

    Returns:
        :class:`SegmentationData` with 9 classes.
    """
    root = Path(root)
    if list_dir is None and (root / "lists_Synapse").is_dir():
        list_dir = root / "lists_Synapse"
    lists = None if list_dir is None else Path(list_dir)
    train = load_synapse_train(root / "train_npz",
                               list_file=None if lists is None else lists / "train.txt",
                               size=size, image_order=image_order)
    test = None
    if load_test:
        test_list = None
        if lists is not None and (lists / "test_vol.txt").is_file():
            test_list = lists / "test_vol.txt"
        test = load_synapse_test(root / "test_vol_h5", list_file=test_list)
    return SegmentationData(train, test, None, len(SYNAPSE_CLASSES), SYNAPSE_CLASSES)


# ----------------------------------------------------------------------------- ACDC

def load_acdc_slices(slices_dir: PathLike, *, list_file: Optional[PathLike] = None,
                     size: Any = None, image_order: int = 0) -> SliceDataset:
    """Load ACDC training slices ``patientXXX_frameYY_slice_Z.h5`` (``size``
    needed to stack them; ``image_order`` 0, the reference's).
    """
    names = None if list_file is None else _read_list(Path(list_file))
    return _load_slices(slices_dir, names, ".h5", lambda p: _read_h5(p, "ACDC slice"),
                        len(ACDC_CLASSES), size, image_order, "ACDC training")


def load_acdc_volumes(volumes_dir: PathLike, *, list_file: Optional[PathLike] = None
                      ) -> VolumeDataset:
    """Load ACDC volumes ``patientXXX_frameYY.h5`` (list file or discovery)."""
    names = None if list_file is None else _read_list(Path(list_file))
    return _load_volumes(volumes_dir, names, ".h5", len(ACDC_CLASSES), "ACDC volume")


def load_acdc(root: PathLike, *, list_dir: Optional[PathLike] = None, size: Any = None,
              image_order: int = 0) -> SegmentationData:
    """Load ACDC: training slices and the validation / test volumes its lists name
    (no list folder: all slices, ``val = test = None``).

    Returns:
        :class:`SegmentationData` with 4 classes.
    """
    root = Path(root)
    slices_dir = root / "ACDC_training_slices"
    volumes_dir = root / "ACDC_training_volumes"
    if not slices_dir.is_dir() and (root / "data" / "slices").is_dir():
        slices_dir, volumes_dir = root / "data" / "slices", root / "data"
    if list_dir is None and (root / "lists_ACDC").is_dir():
        list_dir = root / "lists_ACDC"
    lists = None if list_dir is None else Path(list_dir)
    train = load_acdc_slices(slices_dir, size=size, image_order=image_order,
                             list_file=None if lists is None else lists / "train.txt")
    splits = {}
    for split in ("val", "test"):
        f = None if lists is None else lists / f"{split}.txt"
        splits[split] = (load_acdc_volumes(volumes_dir, list_file=f)
                         if f is not None and f.is_file() else None)
    return SegmentationData(train, splits["test"], splits["val"], len(ACDC_CLASSES),
                            ACDC_CLASSES)


# ----------------------------------------------------------------------------- subsets

def slices_from_volumes(images: Sequence[np.ndarray], labels: Sequence[np.ndarray],
                        case_names: Sequence[str]) -> SliceDataset:
    """Cut volumes ``(S_v, H, W)`` into a :class:`SliceDataset` (names
    ``<case>_slice<jjj>``).
    """
    if not (len(images) == len(labels) == len(case_names)) or len(images) == 0:
        raise ValueError(f"images, labels and case_names must be non-empty and of equal length; "
                         f"got {len(images)}, {len(labels)}, {len(case_names)}")
    if len(set(case_names)) != len(case_names):
        raise ValueError("case_names must be distinct")
    shapes = {np.shape(v)[1:] for v in images} | {np.shape(v)[1:] for v in labels}
    if len(shapes) != 1 or any(np.ndim(v) != 3 for v in list(images) + list(labels)):
        raise ValueError(f"all volumes must be 3-D with one common slice shape; got slice "
                         f"shapes {sorted(shapes)}")
    for v, (im, lab) in enumerate(zip(images, labels)):
        if np.shape(im) != np.shape(lab):
            raise ValueError(f"images[{v}] and labels[{v}] differ in shape: {np.shape(im)} vs "
                             f"{np.shape(lab)}")
    case_index = np.concatenate([np.full(np.shape(im)[0], v, np.int32)
                                 for v, im in enumerate(images)])
    slice_index = np.concatenate([np.arange(np.shape(im)[0], dtype=np.int32) for im in images])
    names = tuple(f"{case_names[c]}_slice{j:03d}" for c, j in zip(case_index, slice_index))
    return SliceDataset(
        images=np.concatenate([np.asarray(im, np.float32) for im in images]),
        labels=np.concatenate([np.asarray(lab).astype(np.uint8) for lab in labels]),
        case_index=case_index, slice_index=slice_index,
        case_names=tuple(case_names), names=names)


def select_slices(ds: SliceDataset, indices) -> SliceDataset:
    """Rows ``indices`` (ints or a mask) of ``ds``, case names pruned, order kept."""
    idx = np.asarray(indices)
    if idx.dtype == bool:
        if idx.shape != (len(ds.names),):
            raise ValueError(f"boolean indices must have shape ({len(ds.names)},); got "
                             f"{idx.shape}")
        idx = np.flatnonzero(idx)
    idx = idx.astype(np.int64).ravel()
    if idx.size and (idx.min() < 0 or idx.max() >= len(ds.names)):
        raise ValueError(f"indices must lie in [0, {len(ds.names) - 1}]")
    kept = sorted(set(ds.case_index[idx].tolist()), key=lambda c: c)
    remap = {c: i for i, c in enumerate(kept)}
    return SliceDataset(
        images=ds.images[idx], labels=ds.labels[idx],
        case_index=np.array([remap[c] for c in ds.case_index[idx].tolist()], np.int32),
        slice_index=ds.slice_index[idx],
        case_names=tuple(ds.case_names[c] for c in kept),
        names=tuple(ds.names[i] for i in idx.tolist()))


def has_foreground(ds: SliceDataset) -> np.ndarray:
    """Boolean ``(N,)``: the slice has a non-background pixel (Table 5.2)."""
    return np.asarray(ds.labels).reshape(len(ds.labels), -1).max(axis=1) > 0


def make_subset(ds: SliceDataset, kind: str, *,
                cases: Optional[Sequence[str]] = None) -> SliceDataset:
    """The training subsets of Table 5.1: ``full``, ``half-slice``
    (even slice numbers), ``half-vol`` (half of the cases, or ``cases``), ``half-sparse`` (the
    first half of every case's slices).

    Args:
        ds: :class:`SliceDataset`. kind: one of :data:`rdr_jax.adawac.data.SUBSETS`.
        cases: for ``half-vol`` only.

    Returns:
        :class:`SliceDataset` (row order kept).
    """
    if not isinstance(kind, str):
        raise TypeError(f"kind must be a string, one of {SUBSETS}; got {type(kind).__name__}")
    k = kind.replace("_", "-").lower()
    if k not in SUBSETS:
        raise ValueError(f"kind must be one of {SUBSETS}; got {kind!r}")
    if cases is not None and k != "half-vol":
        raise ValueError(f"cases is only used by kind='half-vol'; got kind={kind!r}")
    n = len(ds.names)
    if k == "full":
        return select_slices(ds, np.arange(n))
    if k == "half-slice":
        return select_slices(ds, ds.slice_index % 2 == 0)
    if k == "half-vol":
        if cases is None:
            keep = set(range(len(ds.case_names) // 2))
            if not keep:
                raise ValueError("half-vol needs at least 2 cases")
        else:
            if isinstance(cases, str):
                raise TypeError("cases must be a sequence of case names, not a string")
            missing = [c for c in cases if c not in ds.case_names]
            if missing:
                raise ValueError(f"cases {missing} are not in the dataset (cases: "
                                 f"{list(ds.case_names)})")
            keep = {ds.case_names.index(c) for c in cases}
        return select_slices(ds, np.isin(ds.case_index, sorted(keep)))
    mask = np.zeros(n, bool)
    for c in range(len(ds.case_names)):
        rows = np.flatnonzero(ds.case_index == c)
        order = rows[np.argsort(ds.slice_index[rows], kind="stable")]
        mask[order[: (len(order) + 1) // 2]] = True
    return select_slices(ds, mask)
