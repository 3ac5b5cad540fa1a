"""Synapse / ACDC data for AdaWAC (thesis ``sec:experiments_adawac``, ``app:imp``).

Formats (the TransUNet preprocessing, implementation notes "Chapter 5"); nothing is ever
downloaded, all loaders read local files:

* **Synapse** (multi-organ CT, 9 classes: 0 background, 1 aorta, 2 gallbladder, 3 left
  kidney, 4 right kidney, 5 liver, 6 pancreas, 7 spleen, 8 stomach). Training slices
  ``train_npz/caseXXXX_sliceYYY.npz`` with arrays ``image`` (float, HU clipped to [-125, 275]
  and scaled to [0, 1]) and ``label`` (H, W); test volumes ``test_vol_h5/caseXXXX.npy.h5``
  (HDF5) with datasets ``image``, ``label`` of shape (slices, H, W). Lists
  ``lists_Synapse/train.txt`` (slice names) and ``test_vol.txt`` (volume names) fix the order
  when present; otherwise the files are discovered and sorted by case and slice number.
  18 training cases (2211 slices), 12 test volumes.
* **ACDC** (cine-MRI, 4 classes: 0 background, 1 RV, 2 Myo, 3 LV). Training slices
  ``ACDC_training_slices/patientXXX_frameYY_slice_Z.h5`` and volumes
  ``ACDC_training_volumes/patientXXX_frameYY.h5``, both with ``image`` and ``label``; lists
  ``lists_ACDC/{train,val,test}.txt`` (the AdaWAC layout; ``data/slices`` + ``data`` of the
  SSL4MIS layout are found too).

A missing file raises ``FileNotFoundError`` naming it; an unreadable/corrupt file, a missing
``image``/``label`` entry, mismatched shapes, the wrong number of dimensions, non-finite
images or label values outside ``[0, num_classes)`` raise ``ValueError`` naming the file.

Containers: :class:`SliceDataset` (stacked training slices + per-slice case index and slice
number, what a training loop indexes; the AdaWAC weight table ``beta`` has one entry per row),
:class:`VolumeDataset` (test/validation volumes, kept at their native size) and
:class:`SegmentationData` (both, plus the class names). Labels are stored as ``uint8`` to
keep the 2211 x 224 x 224 training set small; cast with ``.astype(np.int32)`` where needed.

Subsets (:func:`make_subset`, thesis ``tab:synapse_sample_eff``): ``full``; ``half-slice``
(even slice numbers of every case); ``half-vol`` (half of the cases: by default the first
``n_cases // 2`` in dataset order, or the cases you name, e.g. :data:`SYNAPSE_HALF_VOL_CASES`,
the 9 cases of the authors' list); ``half-sparse`` (the first half of the slices of every
case, mostly label-sparse).

Example:
    >>> from rdr_jax.adawac.data import load_synapse, make_subset  # doctest: +SKIP
    >>> data = load_synapse("data/Synapse", size=224)  # doctest: +SKIP
    >>> half = make_subset(data.train, "half-slice")  # doctest: +SKIP
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, NamedTuple, Optional, Sequence, Union

import numpy as np
import scipy.ndimage

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
        images: float32 ``(N, H, W)``.
        labels: uint8 ``(N, H, W)`` class ids.
        case_index: int32 ``(N,)``, index into ``case_names``.
        slice_index: int32 ``(N,)``, the slice number within its case.
        case_names: the distinct cases in order of first appearance, e.g. ``"case0005"``.
        names: per-slice sample names, e.g. ``"case0005_slice012"``.
    """

    images: np.ndarray
    labels: np.ndarray
    case_index: np.ndarray
    slice_index: np.ndarray
    case_names: tuple[str, ...]
    names: tuple[str, ...]


class VolumeDataset(NamedTuple):
    """Evaluation volumes (native sizes, possibly different per volume).

    Attributes:
        images: tuple of float32 ``(S_v, H_v, W_v)``.
        labels: tuple of uint8 ``(S_v, H_v, W_v)``.
        names: volume names, e.g. ``"case0001"``.
    """

    images: tuple[np.ndarray, ...]
    labels: tuple[np.ndarray, ...]
    names: tuple[str, ...]


class SegmentationData(NamedTuple):
    """A segmentation data set: training slices and evaluation volumes.

    Attributes:
        train: :class:`SliceDataset`.
        test: :class:`VolumeDataset` or None (not requested / no list).
        val: :class:`VolumeDataset` or None (ACDC only).
        num_classes: number of classes including background.
        class_names: names of the classes, index = class id.
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
    import h5py

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
        raise ValueError(f"{path}: not a readable HDF5 file ({type(e).__name__}: {e})") from e


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
    """Load Synapse training slices ``<train_dir>/caseXXXX_sliceYYY.npz`` (``app:imp``).

    Args:
        train_dir: folder of the ``.npz`` slices (``image``, ``label``; 2-D).
        list_file: text file of slice names without suffix (``lists_Synapse/train.txt``);
            ``None`` discovers all ``*.npz`` and sorts them by case and slice number.
        size: ``None`` (keep; all slices must share a shape), an int ``n`` (``n x n``) or
            ``(H, W)``: resize with ``scipy.ndimage.zoom`` (``image_order`` for images,
            nearest for labels), as the reference pipeline does before the model.
        image_order: spline order of the image resize (default 3, the reference's).

    Returns:
        :class:`SliceDataset` (labels uint8 in 0..8).

    Raises:
        FileNotFoundError: the folder, the list or a listed slice is missing (named).
        ValueError: a corrupt slice or invalid contents (the file is named).

    Example:
        >>> ds = load_synapse_train("data/Synapse/train_npz", size=224)  # doctest: +SKIP
        >>> ds.images.shape  # doctest: +SKIP
        (2211, 224, 224)
    """
    names = None if list_file is None else _read_list(Path(list_file))
    return _load_slices(train_dir, names, ".npz", _read_npz, len(SYNAPSE_CLASSES), size,
                        image_order, "Synapse training")


def load_synapse_test(test_dir: PathLike, *, list_file: Optional[PathLike] = None
                      ) -> VolumeDataset:
    """Load Synapse test volumes ``<test_dir>/caseXXXX.npy.h5`` (``image``, ``label``: 3-D).

    Args:
        test_dir: folder of the HDF5 volumes.
        list_file: ``lists_Synapse/test_vol.txt`` (names without ``.npy.h5``) or ``None`` to
            discover and sort them.

    Returns:
        :class:`VolumeDataset` at native resolution.

    Example:
        >>> vols = load_synapse_test("data/Synapse/test_vol_h5")  # doctest: +SKIP
    """
    names = None if list_file is None else _read_list(Path(list_file))
    return _load_volumes(test_dir, names, ".npy.h5", len(SYNAPSE_CLASSES), "Synapse test")


def load_synapse(root: PathLike, *, list_dir: Optional[PathLike] = None, size: Any = None,
                 image_order: int = 3, load_test: bool = True) -> SegmentationData:
    """Load the Synapse training slices and test volumes from ``root``.

    Layout: ``root/train_npz/*.npz`` and ``root/test_vol_h5/*.npy.h5``. Lists are read from
    ``list_dir`` (``train.txt``, ``test_vol.txt``), defaulting to ``root/lists_Synapse`` when
    it exists; without lists the files are discovered.

    Args:
        root: the Synapse folder.
        list_dir: folder with ``train.txt`` / ``test_vol.txt`` or None.
        size, image_order: see :func:`rdr_jax.adawac.data.load_synapse_train`.
        load_test: also load the test volumes.

    Returns:
        :class:`SegmentationData` with ``num_classes = 9`` and ``val = None``.

    Example:
        >>> data = load_synapse("data/Synapse", size=224)  # doctest: +SKIP
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
    """Load ACDC training slices ``<slices_dir>/patientXXX_frameYY_slice_Z.h5``.

    Args:
        slices_dir: folder of the 2-D HDF5 slices (``image``, ``label`` in 0..3).
        list_file: ``lists_ACDC/train.txt`` or None to discover.
        size: None / int / ``(H, W)``; ACDC slices differ in size, so a size is needed to
            stack them (the reference trains at 224).
        image_order: spline order of the image resize (default 0, the ACDC reference's).

    Returns:
        :class:`SliceDataset`; the case of a slice is ``patientXXX_frameYY``.

    Example:
        >>> ds = load_acdc_slices("ACDC/ACDC_training_slices", size=224)  # doctest: +SKIP
    """
    names = None if list_file is None else _read_list(Path(list_file))
    return _load_slices(slices_dir, names, ".h5", lambda p: _read_h5(p, "ACDC slice"),
                        len(ACDC_CLASSES), size, image_order, "ACDC training")


def load_acdc_volumes(volumes_dir: PathLike, *, list_file: Optional[PathLike] = None
                      ) -> VolumeDataset:
    """Load ACDC volumes ``<volumes_dir>/patientXXX_frameYY.h5`` (3-D ``image``, ``label``).

    Args:
        volumes_dir: folder of the HDF5 volumes.
        list_file: e.g. ``lists_ACDC/val.txt`` or ``test.txt``; None discovers all ``*.h5``.

    Returns:
        :class:`VolumeDataset`.

    Example:
        >>> val = load_acdc_volumes("ACDC/ACDC_training_volumes",
        ...                         list_file="lists_ACDC/val.txt")  # doctest: +SKIP
    """
    names = None if list_file is None else _read_list(Path(list_file))
    return _load_volumes(volumes_dir, names, ".h5", len(ACDC_CLASSES), "ACDC volume")


def load_acdc(root: PathLike, *, list_dir: Optional[PathLike] = None, size: Any = None,
              image_order: int = 0) -> SegmentationData:
    """Load ACDC: training slices and the validation / test volumes named by the lists.

    Layout: slices in ``root/ACDC_training_slices`` (or ``root/data/slices``), volumes in
    ``root/ACDC_training_volumes`` (or ``root/data``); lists ``train.txt``, ``val.txt``,
    ``test.txt`` in ``list_dir`` (default ``root/lists_ACDC`` when it exists). Without a list
    folder all slices are used for training and ``val`` / ``test`` are None (a split cannot be
    guessed). A missing ``val.txt`` / ``test.txt`` gives None for that split.

    Returns:
        :class:`SegmentationData` with ``num_classes = 4``.

    Example:
        >>> data = load_acdc("data/ACDC", size=224)  # doctest: +SKIP
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
    """Cut volumes ``(S_v, H, W)`` into a :class:`SliceDataset` (slice ``j`` of case ``v``
    gets ``slice_index = j`` and the name ``"<case>_slice<jjj>"``).

    Example:
        >>> ds = slices_from_volumes([np.zeros((2, 4, 4))], [np.zeros((2, 4, 4), int)], ["c0"])
        >>> ds.names
        ('c0_slice000', 'c0_slice001')
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
    """Rows ``indices`` of ``ds`` (case names pruned to the cases kept, order preserved).

    Example:
        >>> ds = slices_from_volumes([np.zeros((3, 2, 2))], [np.zeros((3, 2, 2), int)], ["c"])
        >>> select_slices(ds, [0, 2]).slice_index.tolist()
        [0, 2]
    """
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
    """Boolean ``(N,)``: slice has at least one non-background pixel (label-dense proxy used by
    trim-train and pseudo-AdaWAC, thesis ``tab:trim``).

    Example:
        >>> lab = np.zeros((2, 2, 2), int); lab[1, 0, 0] = 3
        >>> has_foreground(slices_from_volumes([np.zeros((2, 2, 2))], [lab], ["c"])).tolist()
        [False, True]
    """
    return np.asarray(ds.labels).reshape(len(ds.labels), -1).max(axis=1) > 0


def make_subset(ds: SliceDataset, kind: str, *,
                cases: Optional[Sequence[str]] = None) -> SliceDataset:
    """The training subsets of thesis ``tab:synapse_sample_eff`` (``sec:experiments_adawac``).

    * ``full``: everything;
    * ``half-slice``: slices with an even slice number in every case (halving the scanning
      frequency);
    * ``half-vol``: the slices of half of the cases: ``cases`` if given (e.g.
      :data:`rdr_jax.adawac.data.SYNAPSE_HALF_VOL_CASES`, the authors' 9 of 18), otherwise the first
      ``n_cases // 2`` cases in dataset order;
    * ``half-sparse``: in every case the first ``ceil(n_c / 2)`` slices by slice number (the
      same count as ``half-slice``), mostly label-sparse.

    Row order of ``ds`` is preserved.

    Args:
        ds: a :class:`SliceDataset`.
        kind: one of :data:`rdr_jax.adawac.data.SUBSETS` (``_`` accepted for ``-``).
        cases: only for ``half-vol``: the case names to keep.

    Returns:
        :class:`SliceDataset`.

    Example:
        >>> ds = slices_from_volumes([np.zeros((4, 2, 2))] * 2, [np.zeros((4, 2, 2), int)] * 2,
        ...                          ["a", "b"])
        >>> make_subset(ds, "half-sparse").names
        ('a_slice000', 'a_slice001', 'b_slice000', 'b_slice001')
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
