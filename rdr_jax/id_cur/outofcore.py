"""Out-of-core matrices: a matrix on disk (HDF5, ``.npy`` or raw binary) streamed through
the one-pass skeleton selection (thesis Algorithm 3) within a memory budget.
Details: ``docs/id-cur.md`` ("Out of core").
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import numpy as np

from rdr_jax._src import validation as V
from rdr_jax._src.optional import progress_bar, require
from rdr_jax.id_cur import streaming as ST
from rdr_jax.id_cur.decompositions import CUR

__all__ = ["DiskMatrix", "DEFAULT_MEMORY_BUDGET", "BLOCKS_IN_FLIGHT", "streaming_cur"]

#: Default memory budget for the blocks in flight: 256 MiB.
DEFAULT_MEMORY_BUDGET = 256 * 2 ** 20

#: Block-sized buffers the budget provides for: the block JAX is consuming (its device
#: copy), the next block being read, and one transient (the NumPy block while JAX copies
#: it, a transposed copy, or a staging buffer). The block size is
#: ``budget // (BLOCKS_IN_FLIGHT * line bytes)``.
BLOCKS_IN_FLIGHT = 3

#: Reads across the storage order go through a staging buffer of about 1 / _STAGE_PIECES of a
#: block (at least one stored line).
_STAGE_PIECES = 4

_HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5", ".mat")


class _Layout(NamedTuple):
    kind: str              # "hdf5", "npy" or "raw"
    offset: int            # byte offset of the data (npy/raw)
    fortran: bool          # column-major storage (npy/raw)


class DiskMatrix:
    """A 2-D floating-point matrix stored on disk, read in blocks within a memory budget.

    Build it with :meth:`open`; it holds only metadata (path, shape, dtype, layout), so it
    is cheap to keep and safe to pickle. Every call to :meth:`blocks` opens the file,
    yields consecutive blocks, and closes it.

    Block size rule: a row block has ``b = max(1, memory_budget // (3 * n * itemsize))``
    rows (a column block ``max(1, memory_budget // (3 * m * itemsize))`` columns), i.e.
    :data:`rdr_jax.id_cur.outofcore.BLOCKS_IN_FLIGHT` = 3 blocks fit in ``memory_budget`` bytes: the block JAX is
    consuming (its device copy), the next block being read, and one transient (the NumPy
    block while JAX copies it, a transposed copy, or the quarter-block staging buffer of a
    read across the storage order). A single line larger than the budget still makes a block of
    one line. Measured (``tests/test_outofcore.py``, ``experiments/bench_outofcore.py``):
    the peak RSS of :func:`streaming_cur` stays within ``memory_budget`` plus the sketches
    and a runtime constant of a few tens of MiB.

    Attributes:
      path: the file.
      dataset: the HDF5 dataset name (``None`` for ``.npy``/raw files).
      shape: ``(m, n)``.
      dtype: the stored NumPy dtype (float32, float64, complex64 or complex128).
      memory_budget: bytes for the blocks in flight (positive int).
    """

    def __init__(self, path, dataset, shape, dtype, memory_budget, layout: _Layout):
        self.path = Path(path)
        self.dataset = dataset
        self.shape = (int(shape[0]), int(shape[1]))
        self.dtype = np.dtype(dtype)
        self.memory_budget = int(memory_budget)
        self._layout = layout

    def __repr__(self) -> str:
        ds = f", dataset={self.dataset!r}" if self.dataset is not None else ""
        return (f"DiskMatrix({str(self.path)!r}{ds}, shape={self.shape}, dtype={self.dtype}, "
                f"memory_budget={self.memory_budget}, format={self._layout.kind!r})")

    @property
    def nbytes(self) -> int:
        """Size of the stored matrix in bytes, ``m n itemsize``."""
        return self.shape[0] * self.shape[1] * self.dtype.itemsize

    @property
    def format(self) -> str:
        """``"hdf5"``, ``"npy"`` or ``"raw"``."""
        return self._layout.kind

    @classmethod
    def open(cls, path, *, dataset: str | None = None, shape=None, dtype=None,
             memory_budget: int = DEFAULT_MEMORY_BUDGET, offset: int = 0,
             order: str = "C") -> "DiskMatrix":
        """Describe the matrix stored at ``path`` and check it against what the caller
        expects.

        Formats: HDF5 (suffix ``.h5``/``.hdf5``/``.hdf``/``.he5``/``.mat`` v7.3, or any file
        with the HDF5 signature; MATLAB v7.3 stores a matrix transposed, so its dataset is
        ``A^T``), ``.npy`` (any file with the NumPy magic), and raw
        binary (anything else: the bytes of a C- or Fortran-ordered array such as an
        ``np.memmap`` file, for which ``shape`` and ``dtype`` are required).

        Args:
          path: file path (str or ``os.PathLike``), or an ``np.memmap`` (its file, offset,
            shape, dtype and order are used).
          dataset: HDF5 dataset name (e.g. ``"A"`` or ``"group/A"``); may be omitted when
            the file holds exactly one dataset. Not allowed for other formats.
          shape: expected ``(m, n)``; a stored shape that differs is an error. Required for
            raw files.
          dtype: expected dtype; a stored dtype that differs is an error. Required for raw
            files.
          memory_budget: bytes allowed for the blocks in flight (positive int); sets the
            block size (see the class docstring).
          offset: raw files only: byte offset of the data.
          order: raw files only: ``"C"`` (row-major) or ``"F"`` (column-major).

        Returns:
          A :class:`DiskMatrix`.

        Raises:
          FileNotFoundError: no such file.
          ValueError: a stored shape or dtype other than the expected one, a missing HDF5
            dataset, a dataset or array that is not 2-D or not floating point, a raw file
            whose size does not match ``shape``/``dtype``, a non-positive budget, or an
            argument that does not apply to the format.

        Example::

            A = DiskMatrix.open("big.h5", dataset="A", memory_budget=64 * 2**20)
            cur = streaming_cur(jax.random.key(0), A, k=50)
        """
        if isinstance(path, np.memmap):
            return cls._from_memmap(path, shape, dtype, memory_budget)
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str, os.PathLike or np.memmap; got "
                            f"{type(path).__name__}")
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no such file: {str(path)!r}")
        memory_budget = _check_budget(memory_budget)
        exp_shape = _check_shape(shape)
        exp_dtype = None if dtype is None else np.dtype(dtype)
        kind = _sniff(path)
        if kind != "raw" and (offset != 0 or order != "C"):
            raise ValueError(f"offset and order apply to raw binary files only; {str(path)!r}"
                             f" is a {kind} file whose header gives them")
        if kind == "hdf5":
            dataset, st_shape, st_dtype = _hdf5_meta(path, dataset)
            layout = _Layout("hdf5", 0, False)
        else:
            if dataset is not None:
                raise ValueError(f"dataset={dataset!r} applies to HDF5 files only; "
                                 f"{str(path)!r} is a {kind} file")
            if kind == "npy":
                st_shape, st_dtype, off, fortran = _npy_meta(path)
            else:
                st_shape, st_dtype, off, fortran = _raw_meta(path, exp_shape, exp_dtype,
                                                             offset, order)
            layout = _Layout(kind, off, fortran)
            _check_size(path, off, st_shape, st_dtype)
        where = f"{str(path)!r}" + (f" dataset {dataset!r}" if dataset else "")
        if len(st_shape) != 2:
            raise ValueError(f"{where} holds a {len(st_shape)}-D array of shape "
                             f"{tuple(st_shape)}; a matrix must be 2-D")
        if st_dtype.kind not in "fc":
            raise ValueError(f"{where} holds dtype {st_dtype}; a matrix must be floating "
                             "point (float32, float64, complex64 or complex128)")
        if exp_shape is not None and tuple(st_shape) != exp_shape:
            raise ValueError(f"{where} holds shape {tuple(st_shape)}; expected shape "
                             f"{exp_shape}")
        if exp_dtype is not None and st_dtype != exp_dtype:
            raise ValueError(f"{where} holds dtype {st_dtype}; expected dtype {exp_dtype}")
        if min(st_shape) < 1:
            raise ValueError(f"{where} holds an empty matrix of shape {tuple(st_shape)}")
        return cls(path, dataset, st_shape, st_dtype, memory_budget, layout)

    @classmethod
    def _from_memmap(cls, mm: np.memmap, shape, dtype, memory_budget) -> "DiskMatrix":
        if mm.filename is None or mm.ndim != 2:
            raise ValueError(f"a np.memmap passed as path must map a file and be 2-D; got "
                             f"{mm.ndim}-D map of {mm.filename!r}")
        if _sniff(Path(mm.filename)) == "npy":  # e.g. np.load(..., mmap_mode="r")
            D = cls.open(mm.filename, memory_budget=memory_budget)
        else:
            fortran = bool(mm.flags.f_contiguous and not mm.flags.c_contiguous)
            D = cls.open(mm.filename, shape=mm.shape, dtype=mm.dtype, offset=mm.offset,
                         order="F" if fortran else "C", memory_budget=memory_budget)
        exp_shape = _check_shape(shape)
        if exp_shape is not None and D.shape != exp_shape:
            raise ValueError(f"the np.memmap of {mm.filename!r} has shape {D.shape}; expected "
                             f"shape {exp_shape}")
        if dtype is not None and D.dtype != np.dtype(dtype):
            raise ValueError(f"the np.memmap of {mm.filename!r} has dtype {D.dtype}; expected "
                             f"dtype {np.dtype(dtype)}")
        return D

    # ------------------------------------------------------------------ blocking
    def block_size(self, axis: int = 0) -> int:
        """Lines per block along ``axis``: ``max(1, budget // (3 * line bytes))`` where a
        line (a row for ``axis=0``, a column for ``axis=1``) has ``n`` (resp. ``m``)
        entries; capped at the matrix size."""
        axis = _check_axis(axis)
        line = self.shape[1 - axis] * self.dtype.itemsize
        return int(min(self.shape[axis], max(1, self.memory_budget // (BLOCKS_IN_FLIGHT * line))))

    def num_blocks(self, axis: int = 0) -> int:
        """Number of blocks :meth:`blocks` yields along ``axis``."""
        b = self.block_size(axis)
        return -(-self.shape[axis] // b)

    def blocks(self, axis: int = 0, *, adjoint: bool = False) -> Iterator[np.ndarray]:
        """Yield consecutive row blocks ``A(i0:i1, :)`` (``axis=0``) or column blocks
        ``A(:, j0:j1)`` (``axis=1``) of :meth:`block_size` lines (the last may be shorter),
        each a fresh C-contiguous NumPy array read once from disk; with ``adjoint=True``,
        their conjugate transposes ``A(i0:i1, :)^H`` / ``A(:, j0:j1)^H`` (the row blocks of
        ``A^H``), assembled while reading.

        The generator keeps no reference to a block after yielding it, so a consumer that
        drops it (or hands it to JAX) holds at most the current and the next block. Each
        block lives in its own anonymous memory map, returned to the OS when the block is
        dropped. A fresh array per block, not one reused buffer, is required: JAX may alias
        a NumPy array or copy it asynchronously, so overwriting a buffer could change a
        block that JAX has not consumed yet. Reading across the storage order (column
        blocks of a row-major file) stages about a quarter of a block's bytes of stored
        lines (at least one line) in a buffer reused within the pass.
        """
        axis = _check_axis(axis)
        b = self.block_size(axis)
        if self._layout.kind == "hdf5":
            yield from self._hdf5_blocks(axis, b, bool(adjoint))
        else:
            yield from self._raw_blocks(axis, b, bool(adjoint))

    def _hdf5_blocks(self, axis, b, adjoint):
        import h5py
        m, n = self.shape
        total = self.shape[axis]
        with h5py.File(self.path, "r") as f:
            ds = f[self.dataset]
            if adjoint and axis == 1:  # A(:, j0:j1)^H through a staging buffer of row pieces
                rs = max(1, -(-m // _STAGE_PIECES))  # rows per staged piece
                stage = _fresh((rs, b), self.dtype)
                for j0 in range(0, total, b):
                    j1 = min(total, j0 + b)
                    out = _fresh((j1 - j0, m), self.dtype)
                    for r0 in range(0, m, rs):
                        r1 = min(m, r0 + rs)
                        piece = stage[:r1 - r0, :j1 - j0]
                        ds.read_direct(stage, source_sel=np.s_[r0:r1, j0:j1],
                                       dest_sel=np.s_[:r1 - r0, :j1 - j0])
                        _put(out[:, r0:r1], piece.T, conj=True)
                    yield out
                    del out
                return
            for i0 in range(0, total, b):
                i1 = min(total, i0 + b)
                shp = (i1 - i0, n) if axis == 0 else (m, i1 - i0)
                out = _fresh(shp, self.dtype)
                ds.read_direct(out, source_sel=np.s_[i0:i1, :] if axis == 0 else
                               np.s_[:, i0:i1])
                if adjoint:
                    out = _transposed(out, conj=True)
                yield out
                del out

    def _raw_blocks(self, axis, b, adjoint):
        # stored as a C-ordered (n_major, n_minor) array: A itself, or A^T when Fortran
        fortran = self._layout.fortran
        major = 1 if fortran else 0
        n_major, n_minor = self.shape[major], self.shape[1 - major]
        total = self.shape[axis]
        line = n_minor * self.dtype.itemsize
        same = fortran == adjoint  # the yielded block has the stored orientation
        conj = adjoint
        with open(self.path, "rb", buffering=0) as f:
            if axis == major:  # contiguous slabs of stored lines
                for i0 in range(0, total, b):
                    i1 = min(total, i0 + b)
                    out = _fresh((i1 - i0, n_minor), self.dtype)
                    _read_into(f, self._layout.offset + i0 * line, out, self.path)
                    if not same:
                        out = _transposed(out, conj=conj)
                    elif conj:
                        _put(out, out, conj=True)
                    yield out
                    del out
                return
            # across the storage order: stage about 1/_STAGE_PIECES of a block's bytes
            stage_lines = max(1, min(n_major, (b * n_major) // (_STAGE_PIECES * n_minor)))
            stage = _fresh((stage_lines, n_minor), self.dtype)
            for j0 in range(0, total, b):
                j1 = min(total, j0 + b)
                shp = (n_major, j1 - j0) if same else (j1 - j0, n_major)
                out = _fresh(shp, self.dtype)
                view = out if same else out.T  # the block in the stored orientation
                for r0 in range(0, n_major, stage_lines):
                    r1 = min(n_major, r0 + stage_lines)
                    _read_into(f, self._layout.offset + r0 * line, stage[:r1 - r0], self.path)
                    _put(view[r0:r1], stage[:r1 - r0, j0:j1], conj=conj)
                del view
                yield out
                del out


def _put(dst: np.ndarray, src: np.ndarray, *, conj: bool) -> None:
    if conj and dst.dtype.kind == "c":
        np.conjugate(src, out=dst)
    else:
        dst[...] = src


def _transposed(buf: np.ndarray, *, conj: bool = False) -> np.ndarray:
    out = _fresh(buf.shape[::-1], buf.dtype)
    _put(out, buf.T, conj=conj)
    return out


def _fresh(shape, dtype) -> np.ndarray:
    """An uninitialised C-ordered array in its own anonymous memory map, returned to the OS
    (munmap) as soon as the last reference -- ours, the caller's, or a JAX array aliasing it
    -- goes. malloc'ed block buffers would raise glibc's dynamic mmap threshold and then be
    recycled through the heap, whose fragmentation grew the RSS by several blocks in our
    measurements."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    return np.frombuffer(mmap.mmap(-1, max(nbytes, 1)), dtype, int(np.prod(shape))).reshape(shape)


def _read_into(f, pos: int, buf: np.ndarray, path) -> None:
    mv = memoryview(buf).cast("B")
    f.seek(pos)
    got = 0
    while got < mv.nbytes:
        n = f.readinto(mv[got:])
        if not n:
            raise ValueError(f"{str(path)!r} ended after {pos + got} bytes while reading "
                             f"{mv.nbytes} bytes at offset {pos}; the file is truncated")
        got += n


# ---------------------------------------------------------------------- validation helpers
def _check_budget(budget) -> int:
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)):
        raise ValueError(f"memory_budget must be a positive int (bytes); got {budget!r}")
    if budget <= 0:
        raise ValueError(f"memory_budget must be a positive number of bytes; got {budget}")
    return int(budget)


def _check_shape(shape):
    if shape is None:
        return None
    if not isinstance(shape, (tuple, list)) or len(shape) != 2:
        raise ValueError(f"shape must be (m, n); got {shape!r}")
    return (V.check_int("shape[0]", shape[0], low=1), V.check_int("shape[1]", shape[1], low=1))


def _check_axis(axis) -> int:
    if isinstance(axis, bool) or axis not in (0, 1):
        raise ValueError(f"axis must be 0 (row blocks) or 1 (column blocks); got {axis!r}")
    return int(axis)


def _sniff(path: Path) -> str:
    with open(path, "rb") as f:
        head = f.read(8)
    if head == b"\x89HDF\r\n\x1a\n" or path.suffix.lower() in _HDF5_SUFFIXES:
        h5py = require("h5py", f"reading the HDF5 file {str(path)!r}")
        if not h5py.is_hdf5(path):
            raise ValueError(f"{str(path)!r} has an HDF5 suffix but is not an HDF5 file (a "
                             "MATLAB .mat file must be saved with -v7.3)")
        return "hdf5"
    if head[:6] == b"\x93NUMPY":
        return "npy"
    if path.suffix.lower() == ".npy":
        raise ValueError(f"{str(path)!r} has suffix .npy but no NumPy header")
    return "raw"


def _hdf5_meta(path: Path, dataset):
    import h5py
    with h5py.File(path, "r") as f:
        names: list[str] = []
        f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset)
                     else None)
        if dataset is None:
            if len(names) != 1:
                raise ValueError(f"{str(path)!r} holds {len(names)} datasets {names}; pass "
                                 "dataset= to choose one")
            dataset = names[0]
        if not isinstance(dataset, str):
            raise ValueError(f"dataset must be a str; got {dataset!r}")
        obj = f.get(dataset)
        if not isinstance(obj, h5py.Dataset):
            what = "no object" if obj is None else "a group"
            raise ValueError(f"{str(path)!r} has {what} named {dataset!r}; its datasets are "
                             f"{names}")
        return obj.name.lstrip("/"), tuple(obj.shape), np.dtype(obj.dtype)


def _npy_meta(path: Path):
    # the header via a read-only map that is dropped at once (no page of data is touched)
    try:
        mm = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as e:
        raise ValueError(f"{str(path)!r} is not a readable .npy array: {e}") from None
    shape, dtype, offset = mm.shape, mm.dtype, mm.offset
    fortran = bool(mm.ndim > 1 and mm.flags.f_contiguous and not mm.flags.c_contiguous)
    del mm
    return tuple(shape), np.dtype(dtype), int(offset), fortran


def _raw_meta(path: Path, shape, dtype, offset, order):
    if shape is None or dtype is None:
        raise ValueError(f"{str(path)!r} is a raw binary file (not HDF5 or .npy): pass "
                         "shape=(m, n) and dtype= to read it")
    offset = V.check_int("offset", offset, low=0)
    if order not in ("C", "F"):
        raise ValueError(f"order must be 'C' or 'F'; got {order!r}")
    return shape, dtype, offset, order == "F"


def _check_size(path: Path, offset: int, shape, dtype) -> None:
    if len(shape) != 2 or dtype.kind not in "fc":
        return  # reported by the caller with a clearer message
    need = offset + int(np.prod(shape)) * dtype.itemsize
    have = path.stat().st_size
    if have != need:
        raise ValueError(f"{str(path)!r} has {have} bytes; shape {tuple(shape)} and dtype "
                         f"{dtype} at offset {offset} need {need}: wrong shape or dtype")


# ---------------------------------------------------------------------- the two passes
def streaming_cur(key, A: DiskMatrix, k: int, *, method: Any = "lupp", axis: int = 0,
                  progress: bool = True) -> CUR:
    """Streaming CUR of a matrix on disk in two passes
    (Algorithm 3).

    Pass 1 (:func:`rdr_jax.id_cur.streaming.streaming_skeletons` over ``A.blocks(axis)``): ``X =
    Gamma A`` (l x n) and ``Y = A Omega^H`` (m x l) in one read of A, then ``k`` columns by
    LUPP on ``X^T`` and ``k`` rows by LUPP on ``Y`` (CPQR with ``method="cpqr"``). Pass 2
    (:func:`rdr_jax.id_cur.streaming.retrieve_skeletons`): ``C = A(:, J)``, ``R = A(I, :)``,
    ``S = A(I, J)``, and ``A ~ C S^+ R`` (:func:`rdr_jax.id_cur.streaming.cur_from_skeletons`),
    with the certificates ``eta``/``eta_rows`` of the two pivotings. The error obeys
    ``||A - C S^+ R|| <~ eta ||A - A X^+ X|| + eta_rows ||A - Y Y^+ A||``.

    Memory: ``(m + n) l`` entries for the sketches (plus ``(m + n) k`` for ``C``, ``R``)
    and the blocks in flight, at most ``A.memory_budget`` bytes (see :class:`DiskMatrix`);
    never the whole matrix. The result equals the in-memory
    ``streaming_skeletons(key, blocks, A.shape, k, method=method)`` on the same blocks (Gamma's
    realisation depends on the blocking, i.e. on ``A.block_size(axis)``). The working dtype
    is the file's, canonicalised as ``jnp.asarray`` does: a float64 file is computed in
    float32 unless ``jax_enable_x64`` is on. Column blocks (``axis=1``) are read as the row
    blocks of ``A^H`` and streamed as such; the skeletons are those of
    ``streaming_skeletons(..., axis=1)`` (pivoting on magnitudes does not see the ``conj``).

    Args:
      key: ``jax.random.key``.
      A: a :class:`DiskMatrix`.
      k: number of skeletons (static).
      method: ``"lupp"`` (default), ``"cpqr"`` or a :class:`~rdr_jax.Method` with one of
        them (its sketch, ``"gaussian"`` or ``"sparse_sign"``, and oversampling are used).
      axis: 0 streams row blocks, 1 column blocks.
      progress: show a tqdm progress bar over the blocks of each pass (none without tqdm).

    Returns:
      :class:`rdr_jax.id_cur.decompositions.CUR` with ``rows``, ``cols``, ``C``, ``U = S^+``, ``R``,
      ``eta``, ``eta_rows``.

    Example::

        A = DiskMatrix.open("big.h5", dataset="A", memory_budget=256 * 2**20)
        cur = streaming_cur(jax.random.key(0), A, 50)
    """
    if not isinstance(A, DiskMatrix):
        raise TypeError(f"A must be a DiskMatrix (DiskMatrix.open(path, ...)); got "
                        f"{type(A).__name__}")
    axis = _check_axis(axis)
    nb = A.num_blocks(axis)
    bar = dict(total=nb, disable=not progress, unit="block", leave=False)
    m, n = A.shape
    # Column blocks are streamed as the row blocks of A^H, assembled while reading, which is
    # what streaming_skeletons(axis=1) does internally after a transposed copy of each block;
    # the pivots are the same (LUPP/CPQR pivot on magnitudes, and conj does not change them).
    shape = (m, n) if axis == 0 else (n, m)
    what = "row blocks" if axis == 0 else "column blocks"
    skel = ST.streaming_skeletons(
        key, progress_bar(A.blocks(axis, adjoint=axis == 1), desc=f"pass 1/2: sketch ({what})",
                          **bar),
        shape, k, method=method, axis=0)
    rows, cols = np.asarray(skel.rows), np.asarray(skel.cols)
    eta, eta_rows = skel.eta, skel.eta_rows
    del skel  # free the sketches X, Y before the second pass
    C, S, R = ST.retrieve_skeletons(
        progress_bar(A.blocks(axis, adjoint=axis == 1),
                     desc=f"pass 2/2: collect C, S, R ({what})", **bar),
        shape, rows, cols, axis=0)
    if axis == 1:  # skeletons of A^H: its rows are A's columns; C' = R^H, R' = C^H, S' = S^H
        rows, cols, eta, eta_rows = cols, rows, eta_rows, eta
        C, S, R = R.conj().T, S.conj().T, C.conj().T
    return ST.cur_from_skeletons(C, S, R, rows=rows, cols=cols, eta=eta, eta_rows=eta_rows)
