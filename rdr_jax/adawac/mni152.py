"""MNI152 T1 slices with grey / white matter labels: a real-MRI substitute for Synapse (Ch. 5).

The data are nilearn's copy of the ICBM 2009a *symmetric* non-linear MNI152 template
(``nilearn.datasets.load_mni152_template``, ``load_mni152_gm_template``,
``load_mni152_wm_template``): three NIfTI files shipped inside the nilearn package
(``nilearn/datasets/data/mni_icbm152_*_tal_nlin_sym_09a_converted.nii.gz``), read locally;
nothing is downloaded (:func:`mni152_source_files` lists the files). Why: a real MR image with
real tissue maps for the AdaWAC tables when Synapse is not available. It is ONE brain, an
average of 152 subjects, so it is a substitute, not a second data set of patients.

Construction (:func:`load_mni152`):

* Volume: the native 1 mm files (``resolution=1``: 197 x 233 x 189 voxels, skull-stripped T1
  in [0, 1]); resampled (``scipy.ndimage.zoom``, linear) to ``slice_mm`` (default 2 mm, 94
  slices) along the head-foot axis; every axial slice is kept (``z`` from inferior to
  superior; the slices above the vertex and the lowest ones are empty, as the
  end-of-stack slices of a CT volume).
* In-plane: the bounding box of the non-zero T1 voxels over the whole volume, plus a margin
  of ``2 * slice_mm`` mm, zero-padded to a square and resampled (same linear zoom) to
  ``size x size`` (default 64: about 3.0 mm pixels; 48: about 3.9 mm). The T1 image and
  the two probability maps are resampled alike; the labels are computed AFTER resampling,
  from the resampled maps:

  - ``1`` grey matter where ``p_gm >= 0.5`` and ``p_gm >= p_wm``;
  - ``2`` white matter where ``p_wm >= 0.5`` and ``p_wm > p_gm``;
  - ``0`` background everywhere else (outside the brain, CSF, deep voxels with neither
    probability reaching 0.5).

  So the label map is exactly the thresholded maps (:func:`tissue_labels`); tests check it.
* Split, by axial slice blocks (one brain, so no split can be between patients): the slices
  are grouped in cycles of 12 consecutive slices (24 mm): 7 training slices, 1 dropped gap
  slice, 3 held-out slices, 1 dropped gap slice; the held-out blocks alternate between
  *validation* and *test*. Every held-out slice is at least 2 slices (4 mm) from any
  training slice, and the validation and test blocks are interleaved along the whole
  head-foot axis, so both hold label-sparse edge slices and label-dense middle slices. A
  left / right hemisphere split was rejected: the template is symmetric (the right half is
  the mirror image of the left one to machine precision), so a mirrored test hemisphere
  would be a copy of the training one. Leakage that remains: neighbouring blocks of one
  smooth brain are alike; absolute numbers are optimistic compared with new patients.
* Sizes (default settings): 94 slices; 56 training, 12 validation, 11 test, 15 gap.
* Cases (for the Table 5.1 subsets of :func:`rdr_jax.adawac.data.make_subset`): the
  training slices are two pseudo-cases, ``inferior`` (``z < 47``, slice number = distance
  ``z`` from the inferior end) and ``superior`` (``z >= 47``, slice number ``93 - z`` =
  distance from the superior end). Hence ``half-slice`` keeps the even slice numbers and
  ``half-sparse`` ("the first half slices in each case, most of which tend to be
  label-sparse", thesis Section 5.5) keeps the half of each case next to its end of the
  head: the label-sparse edge slices (6% labelled pixels on average against 42% in the
  dropped middle half, at 48 or 64 pixels). ``half-vol`` (half of the cases) would
  keep only the inferior half of the brain; it is not used with this data.
* Test / validation volumes: the test (validation) slices stacked in ``z`` order as one
  volume each (non-contiguous stacks: HD95 is computed over that stack as given).

Intensities are the template's (no further normalisation). float32 images, uint8 labels.
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from typing import NamedTuple

import numpy as np
import scipy.ndimage

from rdr_jax._src.validation import check_int
from rdr_jax.adawac.data import SegmentationData, SliceDataset, VolumeDataset

__all__ = ["CYCLE", "MNI152_CLASSES", "MNI152Volume", "label_fraction", "load_mni152",
           "mni152_source_files", "mni152_volume", "split_roles", "tissue_labels"]

MNI152_CLASSES = ("background", "grey_matter", "white_matter")

#: the split cycle (in slices): training, gap, held-out, gap.
CYCLE = (7, 1, 3, 1)
_INSTALL_HINT = ("the MNI152 data need nilearn (the template ships inside the package; nothing "
                 "is downloaded): pip install nilearn")


class MNI152Volume(NamedTuple):
    """The resampled volume, axial slices first.

    Attributes:
        image: float32 ``(Z, S, S)`` T1. p_gm, p_wm: float32 ``(Z, S, S)`` probability maps.
        labels: uint8 ``(Z, S, S)`` (:func:`tissue_labels`). role: ``(Z,)`` strings
            ``train`` / ``val`` / ``test`` / ``gap``. voxel_mm: in-plane pixel size (mm) after
            resampling.
    """

    image: np.ndarray
    p_gm: np.ndarray
    p_wm: np.ndarray
    labels: np.ndarray
    role: np.ndarray
    voxel_mm: float


def _datasets():
    try:
        return importlib.import_module("nilearn.datasets")
    except ImportError as e:  # ModuleNotFoundError included
        raise ImportError(f"{_INSTALL_HINT} ({e})") from e


def mni152_source_files() -> list[Path]:
    """The template files nilearn reads (inside its package data folder)."""
    ds = _datasets()
    folder = Path(ds.__file__).resolve().parent / "data"
    return sorted(folder.glob("mni_icbm152_*_tal_nlin_sym_09a_converted.nii.gz"))


def tissue_labels(p_gm: np.ndarray, p_wm: np.ndarray) -> np.ndarray:
    """``0`` background, ``1`` grey matter (``p_gm >= 0.5`` and ``p_gm >= p_wm``), ``2``
    white matter (``p_wm >= 0.5`` and ``p_wm > p_gm``); uint8, the shape of the maps."""
    p_gm, p_wm = np.asarray(p_gm), np.asarray(p_wm)
    lab = np.zeros(p_gm.shape, np.uint8)
    lab[(p_gm >= 0.5) & (p_gm >= p_wm)] = 1
    lab[(p_wm >= 0.5) & (p_wm > p_gm)] = 2
    return lab


def split_roles(num_slices: int, cycle: tuple[int, int, int, int] = CYCLE) -> np.ndarray:
    """The role of every axial slice: cycles of ``train, gap, held-out, gap`` slices; the
    held-out blocks alternate ``val``, ``test``, ``val``, ... (strings, shape ``(num_slices,)``).
    """
    n_tr, g1, n_ho, g2 = (int(c) for c in cycle)
    role = []
    k = 0
    while len(role) < num_slices:
        held = "val" if k % 2 == 0 else "test"
        role += ["train"] * n_tr + ["gap"] * g1 + [held] * n_ho + ["gap"] * g2
        k += 1
    return np.array(role[:num_slices])


@functools.lru_cache(maxsize=4)
def mni152_volume(size: int = 64, slice_mm: int = 2) -> MNI152Volume:
    """The template cut and resampled as described in the module docstring (cached: the
    returned arrays are shared, do not modify them)."""
    size = check_int("size", size, low=8)
    slice_mm = check_int("slice_mm", slice_mm, low=1)
    ds = _datasets()
    # the native 1 mm files (resolution=1: nilearn returns them without resampling)
    t1 = np.asarray(ds.load_mni152_template(resolution=1).get_fdata(), np.float32)
    gm = np.asarray(ds.load_mni152_gm_template(resolution=1).get_fdata(), np.float32)
    wm = np.asarray(ds.load_mni152_wm_template(resolution=1).get_fdata(), np.float32)
    if not (t1.shape == gm.shape == wm.shape) or t1.ndim != 3:
        raise ValueError(f"MNI152 template shapes differ: T1 {t1.shape}, GM {gm.shape}, WM "
                         f"{wm.shape}")
    # (x, y, z) -> (z, y, x): axial slices first, rows anterior-posterior, columns left-right
    t1, gm, wm = (np.transpose(v, (2, 1, 0)) for v in (t1, gm, wm))
    nz = np.nonzero(t1 > 0)
    margin = 2 * slice_mm
    lo = [max(int(a.min()) - margin, 0) for a in nz[1:]]
    hi = [min(int(a.max()) + margin + 1, s) for a, s in zip(nz[1:], t1.shape[1:])]
    crop = (slice(None), slice(lo[0], hi[0]), slice(lo[1], hi[1]))
    side = max(hi[0] - lo[0], hi[1] - lo[1])

    def square(v):
        v = v[crop]
        ph, pw = side - v.shape[1], side - v.shape[2]
        return np.pad(v, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2)))

    nz_out = int(round(t1.shape[0] / slice_mm))
    zoom = (nz_out / t1.shape[0], size / side, size / side)
    out = [np.clip(scipy.ndimage.zoom(square(v), zoom, order=1), 0.0, 1.0).astype(np.float32)
           for v in (t1, gm, wm)]
    t1r, gmr, wmr = out
    labels = tissue_labels(gmr, wmr)
    for a in (t1r, gmr, wmr, labels):
        a.setflags(write=False)
    return MNI152Volume(t1r, gmr, wmr, labels, split_roles(len(t1r)), float(side / size))


def load_mni152(size: int = 64, slice_mm: int = 2) -> SegmentationData:
    """Training slices (two pseudo-cases), a test volume and a validation volume of the MNI152
    template (module docstring); 3 classes :data:`rdr_jax.adawac.mni152.MNI152_CLASSES`.

    Raises:
        ImportError: nilearn is not installed (the message says ``pip install nilearn``).
    """
    vol = mni152_volume(size, slice_mm)
    z = np.arange(len(vol.image))
    mid = len(z) // 2
    tr = np.flatnonzero(vol.role == "train")
    inferior = tr[tr < mid]
    superior = tr[tr >= mid][::-1]  # from the superior end downwards
    rows = np.concatenate([inferior, superior])
    case_index = np.concatenate([np.zeros(len(inferior), np.int32),
                                 np.ones(len(superior), np.int32)])
    slice_index = np.concatenate([inferior, len(z) - 1 - superior]).astype(np.int32)
    names = tuple(f"{'inferior' if c == 0 else 'superior'}_slice{j:03d}"
                  for c, j in zip(case_index, slice_index))
    train = SliceDataset(images=vol.image[rows], labels=vol.labels[rows],
                         case_index=case_index, slice_index=slice_index,
                         case_names=("inferior", "superior"), names=names)

    def volume(role):
        idx = np.flatnonzero(vol.role == role)
        return VolumeDataset(images=(vol.image[idx],), labels=(vol.labels[idx],),
                             names=(f"mni152_{role}_z" + "-".join(map(str, idx[[0, -1]])),))

    return SegmentationData(train=train, test=volume("test"), val=volume("val"),
                            num_classes=len(MNI152_CLASSES), class_names=MNI152_CLASSES)


def label_fraction(labels: np.ndarray) -> np.ndarray:
    """Fraction of labelled (non-background) pixels per slice of ``(N, H, W)`` labels."""
    lab = np.asarray(labels)
    return (lab.reshape(len(lab), -1) > 0).mean(axis=1)

