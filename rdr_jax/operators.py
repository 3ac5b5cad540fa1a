"""Linear operators: the one small protocol every algorithm in rdr_jax consumes.

An operator ``A`` (m x n) has ``shape``, ``dtype``, ``matmat(X) = A X``, ``rmatmat(Y) = A^H Y``,
``lmatmat(X) = X A``, the dense gathers ``rows(I)``, ``cols(J)``, ``submatrix(I, J)``, the
adjoint ``H``, ``todense()``, ``apply_sketch(S) = S A`` and the methods of
:class:`LinearOperator` that explicit operators override (``max_exponent``, ``ldexp``,
``fro_norm_sq``, ``residual_fro``, ``shards``, ``to_numpy``). Implementations, all pytrees:
:class:`DenseOperator`, :class:`SparseOperator`, :class:`ImplicitOperator`,
:class:`FactoredOperator`; :func:`as_operator` wraps anything. Design notes: ``docs/operators.md``.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import warnings
from typing import Any, Callable, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from jax.experimental import sparse as jsparse

from rdr_jax import distributed
from rdr_jax._src import fp
from rdr_jax._src import validation as V
from rdr_jax._src.dense import HIGHEST


# Largest (nnz x columns) intermediate a sparse product may materialise before it is done in
# column blocks (elements). 2^26 float32 = 256 MiB.
_SPARSE_CHUNK_ELEMS = 1 << 26


def pytree_dataclass(cls=None, *, meta=()):
    """Register a frozen dataclass as a pytree whose ``meta`` fields are static."""
    def wrap(c):
        c = dataclasses.dataclass(frozen=True, repr=False)(c)
        names = [f.name for f in dataclasses.fields(c)]
        data = [n for n in names if n not in meta]
        return jax.tree_util.register_dataclass(c, data_fields=data, meta_fields=list(meta))
    return wrap if cls is None else wrap(cls)


def _wide(a: np.ndarray) -> np.ndarray:
    return a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)


class LinearOperator:
    """Base class: the derived parts of the protocol and the defaults of an implicit operator.

    Subclasses define ``shape``, ``dtype``, ``matmat``, ``rmatmat``, ``rows``, ``cols``, ``H``.
    """

    shape: tuple[int, int]
    dtype: np.dtype
    #: the entries are stored (dense, sparse), so exact norms and residuals are available
    explicit: ClassVar[bool] = False
    #: the entries are one dense array (``todense()`` is free)
    dense: ClassVar[bool] = False

    def max_exponent(self) -> jax.Array | None:
        """``floor(log2 max |a_ij|)`` as a traced int32 (``rdr_jax._src.fp.max_exponent``),
        or None when the entries are not stored."""
        return None

    def ldexp(self, k) -> LinearOperator | None:
        """The operator ``2^k A`` of the same kind (exact power-of-two scaling), or None."""
        return None

    def fro_norm_sq(self) -> jax.Array | None:
        """Exact ``||A||_F^2``, or None when the entries are not stored."""
        return None

    def residual_fro(self, AQ, Q) -> jax.Array | None:
        """Exact ``||A - AQ Q^H||_F`` for ``Q`` (n x k) with orthonormal columns and
        ``AQ = A Q``, computed on ``A / max|.|`` so that it neither overflows nor underflows;
        None when the entries are not stored."""
        return None

    def shards(self, axis: int) -> int:
        """Number of shards the rows (``axis=0``) or columns (``axis=1``) are split into."""
        return 1

    def to_numpy(self) -> np.ndarray:
        """A host copy in float64/complex128 (small problems and tests)."""
        return _wide(np.asarray(self.todense()))

    @property
    def ndim(self) -> int:
        return 2

    def __matmul__(self, X):
        return self.matmat(X)

    def submatrix(self, I, J):
        """Dense ``A[I][:, J]``; the default gathers rows then columns."""
        return self.rows(I)[:, J]

    def apply_sketch(self, sketch):
        """``S @ A`` for a sketch ``S`` (l x m); default ``(A^H S^H)^H`` with a dense ``S^H``."""
        return self.rmatmat(sketch.adjoint_dense(self.dtype)).conj().T

    def lmatmat(self, X):
        """``X @ A`` for a dense ``X`` (b x m); default ``(A^H X^H)^H``."""
        return self.rmatmat(jnp.asarray(X).conj().T).conj().T

    def todense(self):
        """Dense array (``A @ I_n``), for small problems and tests."""
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
    """A dense matrix; products use ``Precision.HIGHEST``."""

    array: jax.Array
    explicit: ClassVar[bool] = True
    dense: ClassVar[bool] = True

    @property
    def shape(self):
        return tuple(self.array.shape)

    @property
    def dtype(self):
        return self.array.dtype

    def matmat(self, X):
        return jnp.matmul(self.array, X, precision=HIGHEST)

    def rmatmat(self, Y):
        # (Y^H A)^H with Y^H materialised: faster than a transposed-operand GEMM on CPU
        # (docs/operators.md)
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

    def max_exponent(self):
        return fp.max_exponent(self.array)

    def ldexp(self, k):
        return DenseOperator(fp.ldexp(self.array, k))

    def fro_norm_sq(self):
        return jnp.sum(jnp.abs(self.array) ** 2)

    def residual_fro(self, AQ, Q):
        E = self.array - jnp.matmul(AQ, Q.conj().T, precision=HIGHEST)
        s = jnp.max(jnp.abs(E))
        return s * jnp.linalg.norm(E / jnp.where(s > 0, s, 1.0))

    def shards(self, axis):
        return (distributed.col_shards if axis else distributed.row_shards)(self.array)

    def to_numpy(self):
        return _wide(np.asarray(self.array))


# --------------------------------------------------------------------------------------
# Sparse (CSR + CSC)
# --------------------------------------------------------------------------------------
# Sparse products are primitives of rdr_jax._src.kernels (docs/operators.md).
def _kernel_arrays(S):
    """The eight arrays of a SparseOperator in ``rdr_jax._src.kernels.ARRAY_FIELDS`` order."""
    return (S.data_r, S.row_r, S.col_r, S.indptr_r, S.data_c, S.row_c, S.col_c, S.indptr_c)


def _spmm_xla(X, S, left):
    """``S @ X`` or ``X @ S`` by sorted segment sums (any dtype; the GPU/TPU lowering)."""
    from rdr_jax._src import kernels as K
    return K.spmm_xla(X, _kernel_arrays(S), S.shape, left, _SPARSE_CHUNK_ELEMS)


def _spmm(X, S, left: bool):
    """``S @ X`` (left=False) or ``X @ S`` (left=True) as one sparse-product primitive call;
    complex products are assembled from real ones (``docs/operators.md``)."""
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
    """Sparse matrix stored in CSR (``*_r``) and CSC (``*_c``) order.

    Both orders make the adjoint free and let ``rows``/``cols`` gather windows of the static
    widths ``max_row_nnz``/``max_col_nnz`` (None: built under jit, no static width).
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
    max_row_nnz: int | None
    max_col_nnz: int | None
    explicit: ClassVar[bool] = True

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
        """Build from a 2-D ``BCOO``: on the host when concrete, by a traced sort under jit."""
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
        return cls.from_scipy(coo, dtype=data.dtype if data.dtype.kind in "fc" else None)

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
        """``A[I][:, J]`` (``None``: all) by one O(nnz) scatter (no static window widths)."""
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

    def max_exponent(self):
        return fp.max_exponent(self.data_r)

    def ldexp(self, k):
        return dataclasses.replace(self, data_r=fp.ldexp(self.data_r, k),
                                   data_c=fp.ldexp(self.data_c, k))

    def fro_norm_sq(self):
        return jnp.sum(jnp.abs(self.data_r) ** 2)

    def residual_fro(self, AQ, Q):
        # ||A - A Q Q^H||_F^2 = ||A||_F^2 - ||A Q||_F^2, both on A / max|a_ij|
        s = jnp.max(jnp.abs(self.data_r), initial=0.0)
        safe = jnp.where(s > 0, s, 1.0)
        a2 = jnp.sum(jnp.abs(self.data_r / safe) ** 2)
        return s * jnp.sqrt(jnp.maximum(a2 - jnp.sum(jnp.abs(AQ / safe) ** 2), 0.0))

    def to_numpy(self):
        return _wide(self.to_scipy().toarray())


# --------------------------------------------------------------------------------------
# Implicit (user matmat / rmatmat)
# --------------------------------------------------------------------------------------
def _split_callable(f):
    """``(dynamic, static)`` halves of a callable: a pytree callable whose leaves are all JAX
    values (``jax.tree_util.Partial(f, A)``, a registered operator class) is dynamic, so its
    arrays are arguments of the compiled program; anything else (a plain function, a closure,
    a ``functools.partial``) is static, hashed by identity, and its data are constants."""
    if f is None or jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(f)):
        return None, f
    if all(isinstance(x, (jax.Array, np.ndarray, np.generic, bool, int, float, complex))
           for x in jax.tree_util.tree_leaves(f)):
        return f, None
    return None, f


_FN_FIELDS = ("matmat_fn", "rmatmat_fn", "rows_fn", "cols_fn")


@dataclasses.dataclass(frozen=True, repr=False)
class ImplicitOperator(LinearOperator):
    """A matrix known through ``matmat(X) = A X`` and ``rmatmat(Y) = A^H Y``.

    Optional ``rows_fn(I)``/``cols_fn(J)`` gather rows/columns (otherwise one product with a
    one-hot block). A callable that is a pytree (``jax.tree_util.Partial(f, data)``) is a
    pytree child, so its data are traced arguments under jit; other callables are static,
    hashed by identity (reuse the same objects to avoid recompiling). Build with
    :func:`implicit_operator`.
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


def _flatten_implicit(op):
    halves = [_split_callable(getattr(op, f)) for f in _FN_FIELDS]
    return tuple(d for d, _ in halves), (tuple(s for _, s in halves), op.shape, op.dtype_)


def _unflatten_implicit(aux, children):
    static, shape, dtype_ = aux
    return ImplicitOperator(*(s if s is not None else d for d, s in zip(children, static)),
                            shape, dtype_)


jax.tree_util.register_pytree_node(ImplicitOperator, _flatten_implicit, _unflatten_implicit)


@dataclasses.dataclass(frozen=True)
class _AdjointGather:
    """rows of A^H = conj(cols of A)^T; a pytree with the same static/dynamic split as the
    callable it wraps."""

    fn: Callable

    def __call__(self, idx):
        return self.fn(idx).conj().T


jax.tree_util.register_pytree_node(
    _AdjointGather,
    lambda g: ((lambda d, s: ((d,), s))(*_split_callable(g.fn))),
    lambda s, children: _AdjointGather(s if s is not None else children[0]))


#: a captured array of at least this many elements becomes a large constant of every
#: compiled program that applies the operator (XLA then spends seconds folding it)
_BIG_CAPTURE = 100_000
#: the captured-array warning has been shown in this process
_capture_warned = False
#: callables of these packages are not searched for captured arrays
_LIBRARY_MODULES = ("jax", "jaxlib", "numpy", "scipy", "rdr_jax")


def _cells(f) -> list:
    out = []
    for c in f.__closure__ or ():
        try:
            out.append(c.cell_contents)
        except ValueError:                   # an empty cell (a name not yet assigned)
            pass
    return out


def _is_library(obj) -> bool:
    return (getattr(obj, "__module__", None) or "").split(".")[0] in _LIBRARY_MODULES


def _captured_arrays(f, depth: int = 0, seen: set | None = None):
    """Concrete jax/numpy arrays a callable carries outside its arguments: closure cells,
    the module globals it names, ``functools.partial`` arguments, a bound method's object
    and the attributes of such objects, following user functions two levels deep. The
    leaves of a pytree callable (``Partial``) are arguments, not captures; tracers are
    lifted into arguments too."""
    seen = set() if seen is None else seen
    if id(f) in seen or depth > 2:
        return
    seen.add(id(f))
    if _split_callable(f)[0] is not None:    # a pytree callable: only its function captures
        objs = [getattr(f, "func", None)]
    elif isinstance(f, functools.partial):
        objs = [f.func, *f.args, *f.keywords.values()]
    elif isinstance(f, types.MethodType):
        objs = [f.__self__, f.__func__]
    elif isinstance(f, types.FunctionType):
        g = f.__globals__
        objs = _cells(f) + [g[n] for n in f.__code__.co_names if n in g]
    else:                                    # an object with __call__: its attributes
        objs = list(getattr(f, "__dict__", {}).values())
    for obj in objs:
        if isinstance(obj, (types.FunctionType, types.MethodType, functools.partial)):
            if not _is_library(obj.func if isinstance(obj, functools.partial) else obj):
                yield from _captured_arrays(obj, depth + 1, seen)
            continue
        if obj is None or isinstance(obj, (types.ModuleType, type)) or _is_library(obj) and (
                not isinstance(obj, (jax.Array, np.ndarray, LinearOperator))):
            continue
        for leaf in jax.tree_util.tree_leaves(obj):
            if isinstance(leaf, (jax.Array, np.ndarray)):
                if not isinstance(leaf, jax.core.Tracer):
                    yield leaf
            elif hasattr(leaf, "__dict__") and not _is_library(leaf) and depth < 2:
                yield from _captured_arrays(leaf, depth + 1, seen)   # e.g. self.A


def _warn_big_captures(fns: dict) -> None:
    """Warn once per process when a callable of a user's implicit operator captures a large
    array (a closure, a global, a functools.partial argument): under jit it becomes a
    compile-time constant. Calls from inside rdr_jax are not checked."""
    global _capture_warned
    level = V.user_stacklevel()
    if _capture_warned or level != 3:        # 3: the user called implicit_operator
        return
    for name, f in fns.items():
        if f is None:
            continue
        big = next((a for a in _captured_arrays(f) if a.size >= _BIG_CAPTURE), None)
        if big is None:
            continue
        _capture_warned = True
        warnings.warn(
            f"{name} captures a {np.dtype(big.dtype).name} array of shape {tuple(big.shape)} "
            "(closure, global or functools.partial argument): under jit it becomes a constant "
            "of the compiled program (slow compiles, XLA 'Constant folding' messages). Pass "
            "the data as pytree leaves instead: "
            "jax.tree_util.Partial(lambda A, X: A @ X, A), whose arguments are traced like "
            "any input (docs/your-own-matrix.md). Shown once per process.",
            UserWarning, stacklevel=level)
        return


def _probe(f, shape, dtype):
    return jax.eval_shape(f, jax.ShapeDtypeStruct(shape, dtype))


def _infer_dtype(matmat, rmatmat, m: int, n: int) -> np.dtype:
    """The dtype of the callables' products on real probes (complex callables give complex)."""
    for probe in dict.fromkeys([V.default_float(), np.dtype(np.float32)]):
        try:
            outs = (_probe(matmat, (n, 2), probe), _probe(rmatmat, (m, 2), probe))
        except Exception:   # e.g. lax.dot with strict dtypes: try the next probe
            continue
        return V.check_dtype("the output of matmat/rmatmat", jnp.result_type(*outs))
    return V.default_float()  # both probes failed: the checks below report the error


def implicit_operator(matmat: Callable, rmatmat: Callable, shape: tuple[int, int],
                      dtype: Any = None, *, rows: Callable | None = None,
                      cols: Callable | None = None) -> ImplicitOperator:
    """Wrap jax-traceable callables as an operator, checking their output shapes and dtypes.

    Pass the matrix's data as pytree leaves, ``jax.tree_util.Partial(lambda A, X: A @ X,
    A)``, not as a closure: a Partial's arguments are traced like any input, while a
    closed-over array becomes a constant of every compiled program (slow compiles; warned
    once per process above 10^5 elements).

    Args:
      matmat: ``X (n, b) -> A X (m, b)``.
      rmatmat: ``Y (m, b) -> A^H Y (n, b)``.
      shape: ``(m, n)``.
      dtype: float32/float64/complex64/complex128; default: the dtype ``matmat``/``rmatmat``
        return for a real input (``jax.eval_shape``), so complex callables give a complex
        operator.
      rows, cols: optional ``I -> A[I, :]`` and ``J -> A[:, J]``.

    Returns:
      An :class:`ImplicitOperator`.

    Raises:
      ValueError: a callable fails or returns the wrong shape.
      TypeError: a callable returns another dtype than ``dtype`` (e.g. complex output for a
        real ``dtype``), or a non-callable argument.

    Example:
      >>> from jax.tree_util import Partial
      >>> op = implicit_operator(Partial(lambda A, X: A @ X, A),
      ...                        Partial(lambda A, Y: A.T @ Y, A), A.shape)
    """
    for name, f in (("matmat", matmat), ("rmatmat", rmatmat)):
        if not callable(f):
            raise TypeError(f"{name} must be callable; got {type(f).__name__}")
    if not (isinstance(shape, (tuple, list)) and len(shape) == 2):
        raise ValueError(f"shape must be a pair (m, n); got {shape!r}")
    m = V.check_int("shape[0]", shape[0], low=1)
    n = V.check_int("shape[1]", shape[1], low=1)
    dt = (_infer_dtype(matmat, rmatmat, m, n) if dtype is None
          else V.check_dtype("dtype", dtype))
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
        got = np.dtype(out.dtype)
        if got != dt:
            raise TypeError(
                f"{name} returns {got} for an input of dtype {arg.dtype}, but the operator's "
                f"dtype is {dt}: pass dtype={got.name} (or leave dtype out to infer it) or "
                f"make {name} return {dt}")
    _warn_big_captures({"matmat": matmat, "rmatmat": rmatmat, "rows": rows, "cols": cols})
    return ImplicitOperator(matmat, rmatmat, rows, cols, (m, n), dt.name)


def _to_words(X):
    """A 64-bit (complex) array as uint32 words, shape ``X.shape + (parts, 2)`` (exact)."""
    parts = jnp.stack([X.real, X.imag], -1) if jnp.iscomplexobj(X) else X[..., None]
    return jax.lax.bitcast_convert_type(parts, jnp.uint32)


def _from_words(W, dt: np.dtype):
    """Inverse of :func:`_to_words` (jax or numpy)."""
    if isinstance(W, np.ndarray):
        Y = np.ascontiguousarray(W).view(V.real_dtype(dt))[..., 0]
        return Y[..., 0] + 1j * Y[..., 1] if dt.kind == "c" else Y[..., 0]
    Y = jax.lax.bitcast_convert_type(W, V.real_dtype(dt))
    return jax.lax.complex(Y[..., 0], Y[..., 1]) if dt.kind == "c" else Y[..., 0]


def _np_words(Y: np.ndarray) -> np.ndarray:
    """:func:`_to_words` on the host."""
    parts = np.stack([Y.real, Y.imag], -1) if Y.dtype.kind == "c" else Y[..., None]
    return np.ascontiguousarray(parts).view(np.uint32).reshape(parts.shape + (2,))


@dataclasses.dataclass(frozen=True)
class _HostProduct:
    """``A X`` or ``A^H X`` of a scipy ``LinearOperator``, run on the host by
    ``jax.pure_callback`` (works under jit and vmap; not differentiable).

    64-bit operands and results travel as uint32 words (exact): the callback machinery
    places the inputs and checks the result in the thread that runs the callback, where a
    thread-local ``jax.enable_x64(True)`` is not in effect, so float64 inputs would arrive
    rounded to float32 and float64 results be refused."""

    op: Any
    adjoint: bool
    dtype: str

    def __call__(self, X):
        f = self.op.rmatmat if self.adjoint else self.op.matmat
        dt = np.dtype(jnp.result_type(self.dtype, X.dtype))
        shape = (self.op.shape[1 if self.adjoint else 0], X.shape[1])
        if V.real_dtype(dt).itemsize < 8:
            return jax.pure_callback(lambda x: np.asarray(f(np.asarray(x)), dt),
                                     jax.ShapeDtypeStruct(shape, dt), X,
                                     vmap_method="sequential")
        parts = 2 if dt.kind == "c" else 1
        W = jax.pure_callback(
            lambda w: _np_words(np.asarray(f(_from_words(np.asarray(w), dt)), dt)),
            jax.ShapeDtypeStruct(shape + (parts, 2), np.uint32), _to_words(X.astype(dt)),
            vmap_method="sequential")
        return _from_words(W, dt)


def _check_scipy_products(A, name: str, dt: np.dtype) -> None:
    """Refuse, before any jit, a scipy ``LinearOperator`` whose ``A X`` or ``A^H Y`` fails.

    scipy has no public way to ask whether an operator has an adjoint: ``LinearOperator(shape,
    matvec)`` stores the missing ``rmatvec`` as None in a private attribute and fails only
    when called ("'NoneType' object is not callable" through its adjoint, NotImplementedError
    in a subclass without ``_rmatvec``), and sums, products, ``.H``/``.T`` and subclasses
    delegate at call time. So each product is applied once to a zero column, through the
    same public ``matmat``/``rmatmat`` the host callback uses: two products of one vector,
    next to the 2 l of any decomposition, and correct whatever scipy's internals.
    """
    m, n = A.shape
    for prod, size, want, what in (("matmat", n, m, "A X"), ("rmatmat", m, n, "A^H Y")):
        try:
            out = getattr(A, prod)(np.zeros((size, 1), dt))
        except Exception as e:
            missing = isinstance(e, NotImplementedError) or (
                isinstance(e, TypeError) and "'NoneType' object is not callable" in str(e))
            err = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            if not missing:
                raise ValueError(f"{name}.{prod} (the scipy LinearOperator's {what}) failed "
                                 f"on a zero block of shape {(size, 1)}: {err}") from e
            vec = "rmatvec/rmatmat" if prod == "rmatmat" else "matvec/matmat"
            raise TypeError(
                f"{name} is a scipy LinearOperator without the product {what} (no {vec}: "
                f"{name}.{prod} raised {err}). Every rdr_jax decomposition needs both A X "
                "and A^H Y (sketching from the left uses A^H): build it as "
                "LinearOperator(shape, matvec=..., rmatvec=...) (or rmatmat=...), or wrap "
                "jax-traceable products with rdr_jax.implicit_operator(matmat, rmatmat, "
                "shape)") from None
        if np.shape(out) != (want, 1):
            raise ValueError(f"{name}.{prod} returned shape {np.shape(out)} for an input of "
                             f"shape {(size, 1)}; expected {(want, 1)} for an operator of "
                             f"shape {(m, n)}")


def _from_scipy_operator(A, name: str) -> LinearOperator:
    """A scipy ``LinearOperator``: a ``MatrixLinearOperator`` is unwrapped to its matrix (exact,
    no host round trip); others call their matmat/rmatmat through ``jax.pure_callback``,
    which keeps them usable inside jit."""
    M = getattr(A, "A", None)
    if isinstance(M, np.ndarray) or sp.issparse(M):
        return as_operator(M, name=name)
    m = V.check_int(f"{name}.shape[0]", A.shape[0], low=1)
    n = V.check_int(f"{name}.shape[1]", A.shape[1], low=1)
    dt = _float_dtype(name, np.dtype(A.dtype if A.dtype is not None else np.float64)).name
    _check_scipy_products(A, name, np.dtype(dt))
    return ImplicitOperator(_HostProduct(A, False, dt), _HostProduct(A, True, dt), None, None,
                            (m, n), dt)


# --------------------------------------------------------------------------------------
# Factored L diag(d) R^H
# --------------------------------------------------------------------------------------
@pytree_dataclass
class FactoredOperator(LinearOperator):
    """``A = L diag(d) R^H`` with ``L`` (m x r), ``R`` (n x r) dense or sparse operators.

    Every method works on the factors: a product costs O((nnz(L) + nnz(R)) b), A is never
    formed (the 10^6 x 10^6 SNN matrix of thesis Section 2.5.3).
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

    def shards(self, axis):
        return (self.R if axis else self.L).shards(0)   # A's rows / columns are L's / R's rows


def factored_operator(L, d, R) -> FactoredOperator:
    """``L diag(d) R^H`` (:class:`FactoredOperator`) from validated dense or sparse factors.

    Shard L and R by rows over one mesh (``P("x", None)``) and every product stays local up
    to one all-reduce of an r x b block.

    Raises:
      ValueError: mismatched shapes, NaN/Inf in ``d``, or factors on different devices or
        with differently sharded rank dimensions (``distributed.check_factor_shardings``).
    """
    distributed.check_factor_shardings(L=L, d=d, R=R)
    Lop, Rop = as_operator(L, name="L"), as_operator(R, name="R")
    d = jnp.asarray(distributed.auto_axes(d))
    if d.ndim != 1:
        raise ValueError(f"d must be 1-D; got shape {d.shape}")
    if not (Lop.shape[1] == d.shape[0] == Rop.shape[1]):
        raise ValueError(f"factor shapes do not match: L {Lop.shape}, d {d.shape}, R {Rop.shape}"
                         "; need L (m x r), d (r,), R (n x r)")
    V.check_array_values("d", d)
    return FactoredOperator(Lop, d.astype(jnp.result_type(Lop.dtype, Rop.dtype, d.dtype)), Rop)


# --------------------------------------------------------------------------------------
def as_operator(A: Any, *, name: str = "A") -> LinearOperator:
    """Wrap a matrix as a :class:`LinearOperator`, validated at the boundary.

    Args:
      A: a jax/numpy array, a ``scipy.sparse`` matrix or array, a ``BCOO``, a scipy
        ``LinearOperator`` or an operator (returned unchanged). Floating and complex inputs
        keep their dtype; integer and bool inputs become float64 (float32 without x64), as
        in scikit-learn.
      name: the argument's name in error messages.

    Returns:
      A pytree :class:`LinearOperator`.

    Raises:
      TypeError: an unsupported type or dtype; a bare function (wrap it with
        :func:`implicit_operator`); a scipy ``LinearOperator`` without ``rmatvec``/``rmatmat``
        (every decomposition needs ``A^H Y``). ValueError: not 2-D, empty, NaN/Inf in host
        data (jax arrays are checked through the results, not scanned), or a scipy product
        that fails on a zero column.
    """
    if isinstance(A, LinearOperator):
        return A
    if isinstance(A, jsparse.BCOO):
        if A.ndim != 2:
            raise ValueError(f"{name} must be 2-D; got a BCOO with shape {A.shape}")
        dt = _float_dtype(name, A.dtype)
        op = SparseOperator.from_bcoo(A if A.dtype == dt else A.astype(dt))
        V.check_array_values(name, op.data_r)
        return op
    if sp.issparse(A):
        if A.ndim != 2:
            raise ValueError(f"{name} must be 2-D; got shape {A.shape}")
        op = SparseOperator.from_scipy(A, _float_dtype(name, A.dtype))
        V.check_array_values(name, op.data_r)
        return op
    if isinstance(A, spla.LinearOperator):
        return _from_scipy_operator(A, name)
    if isinstance(A, (jax.Array, np.ndarray)) or hasattr(A, "__array__"):
        arr = A if isinstance(A, jax.Array) else np.asarray(A)
        if arr.ndim != 2:
            raise ValueError(f"{name} must be a 2-D matrix; got {arr.ndim}-D array of shape "
                             f"{arr.shape}")
        dt = _float_dtype(name, arr.dtype)
        if 0 in arr.shape:
            raise ValueError(f"{name} is empty (shape {arr.shape})")
        if not isinstance(arr, jax.Array):
            V.check_array_values(name, arr)   # jax arrays: checked through the results
        if arr.dtype != dt:
            arr = arr.astype(dt)
        return DenseOperator(jnp.asarray(distributed.auto_axes(arr)))
    if callable(A):
        what = getattr(A, "__name__", None) or type(A).__name__
        fn = what if isinstance(A, types.FunctionType) and what.isidentifier() else "matmat"
        raise TypeError(
            f"{name} is a callable ({what}), not a matrix. rdr_jax needs both products A @ X "
            f"and A^H @ Y (sketching from the left uses A^H): pass {name}="
            f"rdr_jax.implicit_operator({fn}, {fn}_adjoint, (m, n)), where {fn}(X) = A @ X for "
            f"X of shape (n, b) and {fn}_adjoint(Y) = A^H @ Y for Y of shape (m, b) "
            "(docs/your-own-matrix.md)")
    raise TypeError(f"{name} must be an array, scipy.sparse matrix, BCOO or LinearOperator; "
                    f"got {type(A).__name__}")


def _float_dtype(name: str, dtype: Any) -> np.dtype:
    """The dtype rdr_jax computes ``name`` in: its own for float32/float64/complex, float64
    for integers and bools (as scikit-learn), canonicalised for JAX (one warning when x64 is
    off and 64-bit data is computed in 32 bits)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iub":
        want = np.dtype(np.float64)
    elif dtype in V.REAL_DTYPES + V.COMPLEX_DTYPES:
        want = dtype
    elif dtype.kind in "fc":
        raise TypeError(f"{name} has unsupported dtype {dtype}; use float32/float64")
    else:
        raise TypeError(f"{name} has dtype {dtype}; rdr_jax works on float32/float64 (or "
                        f"complex) matrices: convert with A.astype(np.float32/np.float64)")
    got = np.dtype(jax.dtypes.canonicalize_dtype(want))
    if got != want:
        conv = f" (integers and bools are computed as {want})" if dtype != want else ""
        warnings.warn(
            f"{name} is {dtype}{conv} but jax_enable_x64 is off, so rdr_jax computes in {got} "
            "(about 7 significant digits). For float64, run "
            "jax.config.update('jax_enable_x64', True) at startup or call inside "
            f"`with jax.enable_x64(True):`; to silence this, pass {name}.astype(np.float32).",
            UserWarning, stacklevel=V.user_stacklevel())
    return got
