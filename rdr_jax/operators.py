"""Linear operators: the one small protocol every algorithm in rdr_jax consumes.

A linear operator ``A`` (m x n) exposes

============================  =========================================================
``A.shape``, ``A.dtype``      static shape and dtype
``A.matmat(X)``               ``A @ X`` for a dense ``X`` of shape (n, b)
``A.rmatmat(Y)``              ``A^H @ Y`` (conjugate transpose; ``A^T`` for real A), Y (m, b)
``A.lmatmat(X)``              ``X @ A`` for a dense ``X`` of shape (b, m) (left product)
``A.rows(I)``                 dense ``A[I, :]``,  shape (len(I), n)
``A.cols(J)``                 dense ``A[:, J]``,  shape (m, len(J))
``A.submatrix(I, J)``         dense ``A[I][:, J]``
``A.H``                       the adjoint operator (free for every implementation)
``A.todense()``               dense array (for small problems and tests only)
``A.apply_sketch(S)``         ``S @ A`` for a sketch from :mod:`rdr_jax.sketching`
                              (sketches call this from ``S.apply(A)``)
============================  =========================================================

Implementations (all pytrees, so they pass through ``jit`` and ``vmap``):

* :class:`DenseOperator` -- a jax/numpy array.
* :class:`SparseOperator` -- ``scipy.sparse`` or ``jax.experimental.sparse.BCOO`` input,
  stored in both CSR and CSC order so that the adjoint, row and column gathers are all
  gather-only (no densification, no sorting under jit).
* :class:`ImplicitOperator` -- user ``matmat``/``rmatmat`` callables.
* :class:`FactoredOperator` -- ``L diag(d) R^H`` with dense or sparse factors, e.g. the
  10^6 x 10^6 SNN test matrix of thesis Sec. ``subsec:exp_cur``.

Use :func:`as_operator` to wrap anything. Sparse inputs must be converted outside ``jit``
(their sparsity pattern sets static shapes).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from jax.experimental import sparse as jsparse

from rdr_jax._src import validation as V
from rdr_jax.distributed import auto_axes, check_factor_shardings

HIGHEST = jax.lax.Precision.HIGHEST

# Largest (nnz x columns) intermediate a sparse product may materialise before it is done in
# column blocks (elements). 2^26 float32 = 256 MiB.
_SPARSE_CHUNK_ELEMS = 1 << 26


def pytree_dataclass(cls=None, *, meta=()):
    """Register a frozen dataclass as a pytree with the given static (meta) fields (used by the
    operators, the sketches and the angles results)."""
    def wrap(c):
        c = dataclasses.dataclass(frozen=True, repr=False)(c)
        names = [f.name for f in dataclasses.fields(c)]
        data = [n for n in names if n not in meta]
        return jax.tree_util.register_dataclass(c, data_fields=data, meta_fields=list(meta))
    return wrap if cls is None else wrap(cls)


class LinearOperator:
    """Base class with the derived parts of the protocol (see module docstring)."""

    shape: tuple[int, int]
    dtype: np.dtype

    @property
    def ndim(self) -> int:
        return 2

    def __matmul__(self, X):
        return self.matmat(X)

    def submatrix(self, I, J):
        """Dense ``A[I][:, J]``; the default gathers rows then columns."""
        return self.rows(I)[:, J]

    def apply_sketch(self, sketch):
        """``S @ A`` for a sketch ``S`` (l x m). Default: ``(A^H S^H)^H`` with a dense ``S^H``.

        Operators override this when they can do better (dense and sparse inputs use the
        sketch's structured kernels; factored inputs sketch their left factor).
        """
        return self.rmatmat(sketch.adjoint_dense(self.dtype)).conj().T

    def lmatmat(self, X):
        """``X @ A`` for a dense ``X`` of shape (b, m) (default ``(A^H X^H)^H``; sparse and
        factored operators override it with a left product that needs no transposes)."""
        return self.rmatmat(jnp.asarray(X).conj().T).conj().T

    def todense(self):
        """Dense array (``A @ I_n``); meant for small problems and tests."""
        return self.matmat(jnp.eye(self.shape[1], dtype=self.dtype))

    def __repr__(self):
        return f"{type(self).__name__}(shape={self.shape}, dtype={np.dtype(self.dtype).name})"


def _dense_rows_from_rmatmat(op: LinearOperator, I):
    E = jax.nn.one_hot(I, op.shape[0], dtype=op.dtype).T  # m x k
    return op.rmatmat(E).conj().T


def _dense_cols_from_matmat(op: LinearOperator, J):
    E = jax.nn.one_hot(J, op.shape[1], dtype=op.dtype).T  # n x k
    return op.matmat(E)


# --------------------------------------------------------------------------------------
# Dense
# --------------------------------------------------------------------------------------
@pytree_dataclass
class DenseOperator(LinearOperator):
    """A dense matrix. ``matmat`` uses ``Precision.HIGHEST``."""

    array: jax.Array

    @property
    def shape(self):
        return tuple(self.array.shape)

    @property
    def dtype(self):
        return self.array.dtype

    def matmat(self, X):
        return jnp.matmul(self.array, X, precision=HIGHEST)

    def rmatmat(self, Y):
        # A^H Y = (Y^H A)^H with Y^H materialised: XLA would otherwise fold the transposes
        # into a transposed-operand GEMM, 2.5x slower on CPU than the plain one (4000 x 2000
        # A, 200 columns: 79 vs 32 ms); the barrier keeps the small copy of Y^H.
        Yh = jax.lax.optimization_barrier(Y.conj().T)
        return jnp.matmul(Yh, self.array, precision=HIGHEST).conj().T

    def lmatmat(self, X):
        return jnp.matmul(X, self.array, precision=HIGHEST)

    def rows(self, I):
        return self.array[I]

    def cols(self, J):
        return self.array[:, J]

    def submatrix(self, I, J):
        return self.array[I][:, J]

    @property
    def H(self):
        return DenseOperator(self.array.conj().T)

    def todense(self):
        return self.array

    def apply_sketch(self, sketch):
        return sketch.apply_dense(self.array)


# --------------------------------------------------------------------------------------
# Sparse (CSR + CSC)
# --------------------------------------------------------------------------------------
# Sparse products. XLA:CPU lowers the segment sum / scatter-add of a sparse product to a
# serial loop over an (nnz x b) intermediate (materialised in column blocks): 10-35 s for a
# 10^6 x 400 factor with 2e6 nonzeros times a 400 x 200 block, against ~0.5 s for one pass
# (``experiments/bench_operators.py``). The products are therefore JAX primitives
# (:mod:`rdr_jax._src.kernels`): on CPU they run numba kernels that stream the CSR/CSC arrays
# once, write each output element once and are parallel without atomics, reached from
# inside ``jit`` through the XLA FFI (no operand copies, no Python on the call path); on
# GPU/TPU they lower to the sorted segment sums of :func:`_spmm_xla`. The same call is fast
# eagerly and inside ``jit``, differentiable (``grad``/``jvp``/``vjp``: the transpose of
# ``X -> S X`` is ``G -> S^T G``, the same kernel on the CSC arrays) and batchable.
def _kernel_arrays(S):
    """The eight arrays of a SparseOperator in :data:`rdr_jax._src.kernels.ARRAY_FIELDS` order."""
    return (S.data_r, S.row_r, S.col_r, S.indptr_r, S.data_c, S.row_c, S.col_c, S.indptr_c)


def _spmm_xla(X, S, left):
    """XLA formula (any dtype; the GPU/TPU lowering of the sparse product primitive): sorted
    segment sums over CSR (``S @ X``) or CSC order (``X @ S = (S^H X^H)^H``), with the
    (nnz x b) intermediate built in column blocks of ``_SPARSE_CHUNK_ELEMS`` elements."""
    from rdr_jax._src import kernels as K
    return K.spmm_xla(X, _kernel_arrays(S), S.shape, left, _SPARSE_CHUNK_ELEMS)


def _spmm(X, S, left: bool):
    """``S @ X`` (left=False) or ``X @ S`` (left=True) for a SparseOperator S, as one
    primitive call (:func:`rdr_jax._src.kernels.sparse_matmul`) whatever the context (eager,
    ``jit``, ``vmap``, ``grad``).

    Complex products are assembled from real ones, ``(S_r + i S_i)(X_r + i X_i) = (S_r X_r -
    S_i X_i) + i (S_r X_i + S_i X_r)``, with ``[X_r | X_i]`` stacked so that each real part of
    S is applied once (one product for a real S, two for a complex S). Other dtypes (e.g.
    bfloat16) use the XLA formula.
    """
    from rdr_jax._src import kernels as K
    dt = np.dtype(jnp.result_type(S.dtype, X.dtype))
    if dt not in (np.float32, np.float64, np.complex64, np.complex128):
        return _spmm_xla(X.astype(dt), S, left)
    rdt = V.real_dtype(dt)
    shape, chunk = S.shape, _SPARSE_CHUNK_ELEMS

    def mm(Z, part):  # the real or imaginary part of S applied to a real Z
        a = _kernel_arrays(S)
        vr, vc = (getattr(jnp, part)(v).astype(rdt) for v in (a[0], a[4]))
        return K.sparse_matmul(Z, (vr,) + a[1:4] + (vc,) + a[5:], shape, left, chunk)

    if dt.kind == "f":
        return mm(X.astype(dt), "real")
    s_complex = np.dtype(S.dtype).kind == "c"
    if not jnp.iscomplexobj(X):  # real X, complex S: S_r X + i S_i X
        Xr = X.astype(rdt)
        return jax.lax.complex(mm(Xr, "real"), mm(Xr, "imag")).astype(dt)
    axis = 0 if left else 1
    b = X.shape[axis]
    Z = jnp.concatenate([X.real.astype(rdt), X.imag.astype(rdt)], axis=axis)
    P = mm(Z, "real")  # [S_r X_r | S_r X_i] (stacked along the axis of X's columns/rows)
    Pr, Pi = jnp.split(P, [b], axis=axis)
    if not s_complex:
        return jax.lax.complex(Pr, Pi).astype(dt)
    Q = mm(Z, "imag")
    Qr, Qi = jnp.split(Q, [b], axis=axis)
    return jax.lax.complex(Pr - Qi, Pi + Qr).astype(dt)


def _window_gather(indptr, data, other, I, width):
    """Entries of the selected rows (CSR) as padded (k, width) arrays + validity mask."""
    start = indptr[I]
    stop = indptr[I + 1]
    pos = start[:, None] + jnp.arange(width, dtype=indptr.dtype)[None, :]
    valid = pos < stop[:, None]
    pos = jnp.where(valid, pos, 0)
    vals = jnp.where(valid, data[pos], jnp.zeros((), data.dtype))
    return vals, other[pos]


def _positions(sel, size, idx):
    """Position of each entry's row/column ``idx`` in the selection ``sel`` (``len(sel)`` =
    dropped when not selected); ``sel=None`` selects everything."""
    if sel is None:
        return idx, size
    k = sel.shape[0]
    return jnp.full((size + 1,), k, jnp.int32).at[sel].set(jnp.arange(k, dtype=jnp.int32))[idx], k


@pytree_dataclass(meta=("shape", "max_row_nnz", "max_col_nnz"))
class SparseOperator(LinearOperator):
    """Sparse matrix stored in CSR order *and* CSC order.

    Fields ``*_r`` are sorted by row (CSR), ``*_c`` by column (CSC); ``indptr_r`` has m+1
    entries, ``indptr_c`` n+1. Keeping both orders makes the adjoint free and lets
    ``rows``/``cols`` gather fixed-width windows (``max_row_nnz``/``max_col_nnz`` are static).
    Products are segment sums over the nonzeros, O(nnz * b) work; large products are done in
    column blocks so the (nnz x b) intermediate stays under ~256 MiB.
    """

    data_r: jax.Array
    row_r: jax.Array
    col_r: jax.Array
    indptr_r: jax.Array
    data_c: jax.Array
    row_c: jax.Array
    col_c: jax.Array
    indptr_c: jax.Array
    shape: tuple[int, int]
    max_row_nnz: int | None   # None: unknown (built under jit from a traced BCOO)
    max_col_nnz: int | None

    @property
    def dtype(self):
        return self.data_r.dtype

    @property
    def nnz(self) -> int:
        return int(self.data_r.shape[0])

    @classmethod
    def from_scipy(cls, A, dtype=None) -> "SparseOperator":
        """Build from any ``scipy.sparse`` matrix/array (duplicates are summed)."""
        A = sp.csr_matrix(A)
        A.sum_duplicates()
        if dtype is None:
            dtype = A.dtype if A.dtype.kind in "fc" else V.default_float()
        dtype = np.dtype(jax.dtypes.canonicalize_dtype(dtype))
        m, n = A.shape
        csr = A.tocsr()
        csc = A.tocsc()
        rows_r = np.repeat(np.arange(m, dtype=np.int32), np.diff(csr.indptr))
        cols_c = np.repeat(np.arange(n, dtype=np.int32), np.diff(csc.indptr))
        return cls(
            data_r=jnp.asarray(csr.data.astype(dtype)),
            row_r=jnp.asarray(rows_r),
            col_r=jnp.asarray(csr.indices.astype(np.int32)),
            indptr_r=jnp.asarray(csr.indptr.astype(np.int32)),
            data_c=jnp.asarray(csc.data.astype(dtype)),
            row_c=jnp.asarray(csc.indices.astype(np.int32)),
            col_c=jnp.asarray(cols_c),
            indptr_c=jnp.asarray(csc.indptr.astype(np.int32)),
            shape=(int(m), int(n)),
            max_row_nnz=int(np.diff(csr.indptr).max(initial=0)),
            max_col_nnz=int(np.diff(csc.indptr).max(initial=0)),
        )

    @classmethod
    def from_bcoo(cls, A: jsparse.BCOO) -> "SparseOperator":
        """Build from a 2-D ``jax.experimental.sparse.BCOO``.

        Concrete BCOO: converted on the host (duplicates summed, fixed-width row/column
        windows). Traced BCOO (a BCOO passed as an argument of the caller's ``jit``): the
        CSR/CSC orders are built with a traced sort; padding entries (BCOO marks them with
        out-of-range indices) get zero values and sort last; ``rows``/``cols`` then scatter
        over all nonzeros (O(nnz)) since no static window width is known.
        """
        if A.n_batch or A.n_dense:
            raise ValueError("A: only 2-D BCOO matrices without batch/dense dimensions are "
                             f"supported; got n_batch={A.n_batch}, n_dense={A.n_dense}")
        m, n = A.shape
        if not V.is_concrete(A.data) or not V.is_concrete(A.indices):
            return cls._from_traced_coo(A.data, A.indices[:, 0], A.indices[:, 1], (m, n))
        idx = np.asarray(A.indices)
        data = np.asarray(A.data)
        keep = (idx[:, 0] < m) & (idx[:, 1] < n)  # BCOO pads with out-of-range indices
        coo = sp.coo_matrix((data[keep], (idx[keep, 0], idx[keep, 1])), shape=(m, n))
        return cls.from_scipy(coo, dtype=data.dtype)

    @classmethod
    def _from_traced_coo(cls, data, row, col, shape) -> "SparseOperator":
        m, n = shape
        valid = (row < m) & (col < n) & (row >= 0) & (col >= 0)
        data = jnp.where(valid, data, jnp.zeros((), data.dtype))
        row = jnp.where(valid, row, m).astype(jnp.int32)
        col = jnp.where(valid, col, n).astype(jnp.int32)
        o_r = jnp.lexsort((col, row))
        o_c = jnp.lexsort((row, col))
        r_r, c_c = row[o_r], col[o_c]
        return cls(
            data_r=data[o_r], row_r=r_r, col_r=col[o_r],
            indptr_r=jnp.searchsorted(r_r, jnp.arange(m + 1, dtype=jnp.int32)).astype(jnp.int32),
            data_c=data[o_c], row_c=row[o_c], col_c=c_c,
            indptr_c=jnp.searchsorted(c_c, jnp.arange(n + 1, dtype=jnp.int32)).astype(jnp.int32),
            shape=(int(m), int(n)), max_row_nnz=None, max_col_nnz=None)

    def _scatter_select(self, I, J):
        """``A[I][:, J]`` (``None``: all) by one scatter over the nonzeros, O(nnz); used when
        the window widths are not static (traced BCOO input)."""
        pi, ki = _positions(I, self.shape[0], self.row_r)
        pj, kj = _positions(J, self.shape[1], self.col_r)
        return jnp.zeros((ki, kj), self.dtype).at[pi, pj].add(self.data_r, mode="drop")

    def to_scipy(self) -> sp.csr_matrix:
        return sp.csr_matrix((np.asarray(self.data_r), np.asarray(self.col_r),
                              np.asarray(self.indptr_r)), shape=self.shape)

    def matmat(self, X):
        return _spmm(jnp.asarray(X), self, left=False)

    def rmatmat(self, Y):
        return self.H.matmat(Y)

    def lmatmat(self, X):
        return _spmm(jnp.asarray(X), self, left=True)

    def rows(self, I):
        I = jnp.asarray(I)
        if self.max_row_nnz is None:
            return self._scatter_select(I, None)
        vals, cols = _window_gather(self.indptr_r, self.data_r, self.col_r, I, self.max_row_nnz)
        out = jnp.zeros((I.shape[0], self.shape[1]), self.dtype)
        return out.at[jnp.arange(I.shape[0])[:, None], cols].add(vals)

    def cols(self, J):
        J = jnp.asarray(J)
        if self.max_col_nnz is None:
            return self._scatter_select(None, J)
        vals, rows = _window_gather(self.indptr_c, self.data_c, self.row_c, J, self.max_col_nnz)
        out = jnp.zeros((self.shape[0], J.shape[0]), self.dtype)
        return out.at[rows, jnp.arange(J.shape[0])[:, None]].add(vals)

    def submatrix(self, I, J):
        I, J = jnp.asarray(I), jnp.asarray(J)
        if self.max_row_nnz is None:
            return self._scatter_select(I, J)
        vals, cols = _window_gather(self.indptr_r, self.data_r, self.col_r, I, self.max_row_nnz)
        pos = jnp.full((self.shape[1],), J.shape[0], jnp.int32).at[J].set(
            jnp.arange(J.shape[0], dtype=jnp.int32))[cols]
        vals = jnp.where(pos < J.shape[0], vals, 0)
        out = jnp.zeros((I.shape[0], J.shape[0] + 1), self.dtype)
        out = out.at[jnp.arange(I.shape[0])[:, None], pos].add(vals)
        return out[:, :-1]

    @property
    def H(self):
        return SparseOperator(
            data_r=self.data_c.conj(), row_r=self.col_c, col_r=self.row_c,
            indptr_r=self.indptr_c, data_c=self.data_r.conj(), row_c=self.col_r,
            col_c=self.row_r, indptr_c=self.indptr_r, shape=(self.shape[1], self.shape[0]),
            max_row_nnz=self.max_col_nnz, max_col_nnz=self.max_row_nnz)

    def todense(self):
        out = jnp.zeros(self.shape, self.dtype)
        return out.at[self.row_r, self.col_r].add(self.data_r, mode="drop")

    def apply_sketch(self, sketch):
        return sketch.apply_sparse(self)


# --------------------------------------------------------------------------------------
# Implicit (user matmat / rmatmat)
# --------------------------------------------------------------------------------------
@pytree_dataclass(meta=("matmat_fn", "rmatmat_fn", "rows_fn", "cols_fn", "shape", "dtype_"))
class ImplicitOperator(LinearOperator):
    """A matrix known only through ``matmat(X) = A @ X`` and ``rmatmat(Y) = A^H @ Y``.

    ``rows_fn(I)``/``cols_fn(J)`` may be supplied when the user can gather rows/columns
    cheaply; otherwise they cost one ``rmatmat``/``matmat`` with a one-hot (m x k)/(n x k)
    matrix. Build with :func:`implicit_operator`, which checks the callables' shapes.
    The callables are static (hashed by identity): reuse the same function objects to avoid
    recompilation.
    """

    matmat_fn: Callable
    rmatmat_fn: Callable
    rows_fn: Callable | None
    cols_fn: Callable | None
    shape: tuple[int, int]
    dtype_: Any

    @property
    def dtype(self):
        return np.dtype(self.dtype_)

    def matmat(self, X):
        return self.matmat_fn(X)

    def rmatmat(self, Y):
        return self.rmatmat_fn(Y)

    def rows(self, I):
        return self.rows_fn(I) if self.rows_fn is not None else _dense_rows_from_rmatmat(self, I)

    def cols(self, J):
        return self.cols_fn(J) if self.cols_fn is not None else _dense_cols_from_matmat(self, J)

    @property
    def H(self):
        rows_fn = None if self.cols_fn is None else _AdjointGather(self.cols_fn)
        cols_fn = None if self.rows_fn is None else _AdjointGather(self.rows_fn)
        return ImplicitOperator(self.rmatmat_fn, self.matmat_fn, rows_fn, cols_fn,
                                (self.shape[1], self.shape[0]), self.dtype_)


@dataclasses.dataclass(frozen=True)
class _AdjointGather:
    """rows of A^H = conj(cols of A)^T (hashable so the adjoint stays a static pytree)."""

    fn: Callable

    def __call__(self, idx):
        return self.fn(idx).conj().T


def implicit_operator(matmat: Callable, rmatmat: Callable, shape: tuple[int, int],
                      dtype: Any = None, *, rows: Callable | None = None,
                      cols: Callable | None = None) -> ImplicitOperator:
    """Wrap user callables as an operator, checking their output shapes and dtypes.

    Args:
      matmat: ``X (n, b) -> A @ X (m, b)``; must be jax-traceable.
      rmatmat: ``Y (m, b) -> A^H @ Y (n, b)``.
      shape: ``(m, n)``.
      dtype: float32/float64/complex64/complex128 (default: float64 under x64, else float32).
      rows, cols: optional ``I -> A[I, :]`` and ``J -> A[:, J]``.

    Raises:
      ValueError: if a callable returns the wrong shape (e.g. ``matmat`` of an (n, 1) input
        is not (m, 1)).
      TypeError: for a non-floating dtype or non-callable arguments.

    Example:
      >>> A = np.random.rand(5, 3)
      >>> op = implicit_operator(lambda X: A @ X, lambda Y: A.T @ Y, A.shape, np.float32)
    """
    for name, f in (("matmat", matmat), ("rmatmat", rmatmat)):
        if not callable(f):
            raise TypeError(f"{name} must be callable; got {type(f).__name__}")
    if not (isinstance(shape, (tuple, list)) and len(shape) == 2):
        raise ValueError(f"shape must be a pair (m, n); got {shape!r}")
    m = V.check_int("shape[0]", shape[0], low=1)
    n = V.check_int("shape[1]", shape[1], low=1)
    dt = V.check_dtype("dtype", dtype if dtype is not None else V.default_float())
    checks = [("matmat", matmat, (n, 2), (m, 2)), ("rmatmat", rmatmat, (m, 2), (n, 2))]
    if rows is not None:
        checks.append(("rows", rows, None, (2, n)))
    if cols is not None:
        checks.append(("cols", cols, None, (m, 2)))
    for name, f, in_shape, want in checks:
        arg = (jax.ShapeDtypeStruct(in_shape, dt) if in_shape is not None
               else jax.ShapeDtypeStruct((2,), jnp.int32))
        try:
            out = jax.eval_shape(f, arg)
        except Exception as e:  # the user's function failed on a correctly-shaped input
            raise ValueError(f"{name} failed on an input of shape {arg.shape} for an operator "
                             f"of shape {(m, n)}: {e}") from e
        if tuple(getattr(out, "shape", ())) != want:
            raise ValueError(f"{name} returned shape {tuple(getattr(out, 'shape', ()))} for an "
                             f"input of shape {arg.shape}; expected {want} for an operator of "
                             f"shape {(m, n)}")
    return ImplicitOperator(matmat, rmatmat, rows, cols, (m, n), dt.name)


# --------------------------------------------------------------------------------------
# Factored L diag(d) R^H
# --------------------------------------------------------------------------------------
@pytree_dataclass
class FactoredOperator(LinearOperator):
    """``A = L diag(d) R^H`` with ``L`` (m x r), ``R`` (n x r) dense or sparse operators.

    Every protocol method works on the factors, so an m x n matrix with m, n ~ 10^6 and
    r ~ 400 costs O((nnz(L) + nnz(R)) b) per product and never forms A.
    """

    L: LinearOperator
    d: jax.Array
    R: LinearOperator

    @property
    def shape(self):
        return (self.L.shape[0], self.R.shape[0])

    @property
    def dtype(self):
        return jnp.result_type(self.L.dtype, self.d.dtype, self.R.dtype)

    def matmat(self, X):
        return self.L.matmat(self.d[:, None] * self.R.rmatmat(X))

    def rmatmat(self, Y):
        return self.R.matmat(self.d.conj()[:, None] * self.L.rmatmat(Y))

    def rows(self, I):
        # (L[I] diag(d)) R^H, a left product with R^H: written in (k, n) order directly
        return self.R.H.lmatmat(self.L.rows(I) * self.d[None, :])

    def lmatmat(self, X):
        return self.R.H.lmatmat(self.L.lmatmat(X) * self.d[None, :])

    def cols(self, J):
        return self.L.matmat(self.d[:, None] * self.R.rows(J).conj().T)

    def submatrix(self, I, J):
        return jnp.matmul(self.L.rows(I) * self.d[None, :], self.R.rows(J).conj().T,
                          precision=HIGHEST)

    @property
    def H(self):
        return FactoredOperator(self.R, self.d.conj(), self.L)

    def todense(self):
        return jnp.matmul(self.L.todense() * self.d[None, :], self.R.todense().conj().T,
                          precision=HIGHEST)

    def apply_sketch(self, sketch):
        SL = self.L.apply_sketch(sketch)  # l x r, the sketch meets only the sparse factor
        return self.R.H.lmatmat(SL * self.d[None, :])  # (S L) diag(d) R^H, in (l, n) order


def factored_operator(L, d, R) -> FactoredOperator:
    """``L diag(d) R^H`` from dense/sparse factors (validated). See :class:`FactoredOperator`.

    Sharded factors (jax arrays placed with ``NamedSharding``) are accepted: shard L and R
    by rows over one mesh (``P("x", None)``) and every product stays local up to one
    all-reduce of an r x b block. Raises ValueError for factors on different device sets or
    with differently sharded rank dimensions
    (:func:`rdr_jax.distributed.check_factor_shardings`).
    """
    check_factor_shardings(L=L, d=d, R=R)
    Lop, Rop = as_operator(L, name="L"), as_operator(R, name="R")
    d = jnp.asarray(auto_axes(d))
    if d.ndim != 1:
        raise ValueError(f"d must be 1-D; got shape {d.shape}")
    if not (Lop.shape[1] == d.shape[0] == Rop.shape[1]):
        raise ValueError(f"factor shapes do not match: L {Lop.shape}, d {d.shape}, R {Rop.shape}"
                         "; need L (m x r), d (r,), R (n x r)")
    V.check_array_values("d", d)
    return FactoredOperator(Lop, d.astype(jnp.result_type(Lop.dtype, Rop.dtype, d.dtype)), Rop)


# --------------------------------------------------------------------------------------
def as_operator(A: Any, *, name: str = "A") -> LinearOperator:
    """Wrap a matrix as a :class:`LinearOperator` (validated at the boundary).

    Accepts jax/numpy arrays, ``scipy.sparse`` matrices/arrays, ``BCOO`` matrices, and
    existing operators (returned unchanged). Dense inputs keep their dtype; integer/bool
    inputs raise ``TypeError`` (convert to float explicitly); NaN/Inf raise ``ValueError``.

    Args:
      A: the matrix.
      name: argument name used in error messages.

    Returns:
      A pytree :class:`LinearOperator`.

    Example:
      >>> op = as_operator(scipy.sparse.random(100, 50, density=0.1, format="csr"))
      >>> op.matmat(jnp.ones((50, 2))).shape
      (100, 2)
    """
    if isinstance(A, LinearOperator):
        return A
    if isinstance(A, jsparse.BCOO):
        if A.ndim != 2:
            raise ValueError(f"{name} must be 2-D; got a BCOO with shape {A.shape}")
        _check_float(name, np.dtype(A.dtype))
        op = SparseOperator.from_bcoo(A)
        V.check_array_values(name, op.data_r)
        return op
    if sp.issparse(A):
        if A.ndim != 2:
            raise ValueError(f"{name} must be 2-D; got shape {A.shape}")
        _check_float(name, A.dtype)
        _warn_if_downcast(name, A.dtype)
        op = SparseOperator.from_scipy(A)
        V.check_array_values(name, op.data_r)
        return op
    if isinstance(A, (jax.Array, np.ndarray)) or hasattr(A, "__array__"):
        arr = A if isinstance(A, jax.Array) else np.asarray(A)
        if arr.ndim != 2:
            raise ValueError(f"{name} must be a 2-D matrix; got {arr.ndim}-D array of shape "
                             f"{arr.shape}")
        _check_float(name, np.dtype(arr.dtype))
        if 0 in arr.shape:
            raise ValueError(f"{name} is empty (shape {arr.shape})")
        if not isinstance(arr, jax.Array):
            _warn_if_downcast(name, np.dtype(arr.dtype))
            # host (numpy) inputs are checked here; a jax array lives on the device, so its
            # finiteness is checked inside the computation (a host pass over A would cost
            # ~ one GEMM): the algorithms warn from the running computation when their
            # results are not finite (_validation.warn_if_nonfinite)
            V.check_array_values(name, arr)
        return DenseOperator(jnp.asarray(auto_axes(arr)))
    raise TypeError(f"{name} must be an array, scipy.sparse matrix, BCOO or LinearOperator; "
                    f"got {type(A).__name__}")


def _warn_if_downcast(name: str, dtype: np.dtype) -> None:
    """One clear warning when 64-bit host data will be computed in 32 bits because JAX's
    x64 mode is off (JAX itself converts silently)."""
    if np.dtype(dtype) in (np.dtype(np.float64), np.dtype(np.complex128)) \
            and not jax.config.jax_enable_x64:
        warnings.warn(
            f"{name} is {np.dtype(dtype)} but jax_enable_x64 is off, so rdr_jax computes in "
            f"{'float32' if np.dtype(dtype).kind == 'f' else 'complex64'} (about 7 significant "
            "digits). For float64, run jax.config.update('jax_enable_x64', True) at startup "
            "or call inside `with jax.enable_x64(True):`; to silence this, pass "
            f"{name}.astype(np.float32).", UserWarning, stacklevel=3)


def _check_float(name: str, dtype: np.dtype) -> None:
    if dtype.kind not in "fc":
        raise TypeError(f"{name} has dtype {dtype}; rdr_jax works on float32/float64 (or "
                        f"complex) matrices: convert with A.astype(np.float32/np.float64)")
    if dtype not in V.REAL_DTYPES + V.COMPLEX_DTYPES:
        raise TypeError(f"{name} has unsupported dtype {dtype}; use float32/float64")
