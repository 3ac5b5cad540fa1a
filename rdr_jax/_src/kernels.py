"""Sparse products as JAX primitives: numba kernels on CPU, sorted XLA formulas elsewhere.

* :func:`sparse_sign_matmul` -- ``Gamma @ A`` for a sparse sign sketch
  ``Gamma[rows[j, t], j] = signs[j, t]`` (l x m) and a dense A (m x n);
* :func:`sparse_sign_rmatmul` -- ``Gamma^T @ Y``, its transpose (a gather);
* :func:`sparse_sign_sparse_matmul` -- ``Gamma @ S`` for a sparse S in CSC order;
* :func:`sparse_matmul` -- ``S @ X`` or ``X @ S`` for a sparse S kept in CSR and CSC order
  (:class:`rdr_jax.operators.SparseOperator`).

Each has JVP, transpose and batching rules, so ``jit``, ``grad`` and ``vmap`` work on every
platform. The maps are linear in the dense operand: the JVP is the primitive applied to the
tangent and the transpose is the partner map (``Gamma^T``, ``S^T``), so reverse mode stays on
the same kernels. ``vmap`` over the dense operand folds the batch into its columns; ``vmap``
over sketches with a shared A stacks them into one (batch * l) x m sketch (A read once).

Lowering. On CPU, float32/float64 operands go to multithreaded numba kernels called from
compiled code through the typed XLA FFI (a numba ``cfunc`` decodes ``XLA_FFI_CallFrame``: no
copies, no Python per call). Elsewhere, and on CPU when the kernels are off, XLA formulas
run. On GPU/TPU the sparse sign products sort their nonzeros by output position once and sum
sorted segments (``jax.ops.segment_sum(..., indices_are_sorted=True)``: few atomic updates,
unlike an unsorted scatter-add), and ``sparse_matmul`` sums sorted segments of the CSR/CSC
order. The CPU fallback multiplies CSR matrices with ``jax.experimental.sparse.BCSR``
(jaxlib's CPU CSR kernel) where it can, and scatter-adds ``Gamma @ S``. ``Gamma^T Y`` is a
gather everywhere.

When the CPU kernels are used. Checked each time an operation is lowered (compiled):

* the environment variable ``RDR_JAX_CPU_KERNELS`` is not ``0`` (``0``/``false``/``off``:
  always the XLA formulas; ``1``/``true``/``on``: also try a numba outside the tested range);
* numba imports and its version is in :data:`NUMBA_VERSIONS`;
* ``jax.ffi`` exists and jaxlib's FFI headers give the API version of :data:`FFI_API_VERSION`
  (same major, at least that minor: the call-frame layout decoded here);
* the kernel compiles (numba, ``cache=True``) and registers with XLA.

A failed check (other than the variable) falls back to the XLA formulas with one
:class:`KernelFallbackWarning`; nothing crashes. Compiled functions keep the route they were
compiled with: set the variable before the first call, or call ``jax.clear_caches()``.
Nothing global is changed (no jax config, no thread settings). Measurements:
``docs/performance.md``, section "Sparse sign sketches and CPU kernels".
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import threading
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import sparse as jsparse
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir, xla

try:  # numba only serves the CPU kernels: without a working one, the XLA formulas run
    import numba
    from numba import types
    from numba.extending import intrinsic
    _NUMBA_ERROR = None
except Exception as e:  # pragma: no cover - e.g. a numba built for another NumPy
    numba = types = intrinsic = None
    _NUMBA_ERROR = (f"numba cannot be imported ({type(e).__name__}: {e}); the CPU kernels "
                    "need pip install numba (the extra [kernels])")

__all__ = ["FFI_API_VERSION", "KERNELS_ENV", "KernelFallbackWarning", "NUMBA_VERSIONS",
           "cpu_kernels_status", "sparse_matmul", "sparse_sign_apply_host",
           "sparse_sign_csr", "sparse_sign_matmul", "sparse_sign_rmatmul",
           "sparse_sign_segment_sum", "sparse_sign_sparse_matmul", "sparse_sign_sparse_xla",
           "sparse_sign_t_xla", "sparse_sign_xla", "spmm_xla"]

#: environment variable read when an operation is lowered: ``0`` forces the XLA formulas
KERNELS_ENV = "RDR_JAX_CPU_KERNELS"
#: numba versions the kernels are tested with: ``low <= (major, minor) < high``
NUMBA_VERSIONS = ((0, 60), (0, 69))
#: XLA FFI C API version of the call frames decoded here: same major, at least this minor
FFI_API_VERSION = (0, 1)


class KernelFallbackWarning(RuntimeWarning):
    """The CPU kernels cannot be used; sparse products run the (slower) XLA formulas."""


# Strategy thresholds of the left product X @ S (module constants, read when a product is
# traced; tests patch them to exercise every strategy).
_LEFT_ROW_BLOCK = 128       # rows of S per block in _k_dense_csr
_LEFT_COL_BLOCK = 128       # output columns per parallel task in _k_dense_csc
_LEFT_ACC_ELEMS = 1 << 22   # largest per-thread (n x b) accumulators of _k_dense_csr, in all
_SMALL_DIM = 1 << 16        # X @ S via CSC when S has at most this many rows
# Smallest kernel (multiply-adds: m n zeta, nnz b, nnz zeta) that uses several threads.
_PARALLEL_WORK = 1 << 21
# Largest (batch * l * n) output for which vmap over sketches stacks them into one sketch
# (the CPU kernel keeps one such accumulator per thread); larger batches loop.
_FOLD_ELEMS = 1 << 24
# Tests set this to lower the CPU fallback with the GPU/TPU formulas (sorted segment sums).
_CPU_FALLBACK_AS_ACCELERATOR = False
# Largest l * m * zeta whose sort keys (row, position) pack into one uint32 (faster sort).
_PACKED_KEYS = 1 << 32

_REAL = (np.dtype(np.float32), np.dtype(np.float64))


# ======================================================================================
# numba kernels (plain Python sources, compiled lazily by _kernel with prange bound)
# ======================================================================================
prange = range
_njit_serial = (numba.njit(fastmath=True, cache=True, nogil=True) if numba is not None
                else (lambda f: f))


def _k_sparse_sign(A, rows, signs, out, nt):  # pragma: no cover - compiled
    """out (l, n) = Gamma @ A. Each of nt threads streams a contiguous block of A's rows once
    and adds ``signs[j, t] A[j]`` to row ``rows[j, t]`` of a private (l, n) accumulator
    (small, cache resident); the accumulators are summed at the end. nt = 1 accumulates into
    ``out`` directly, without touching the thread pool."""
    m, n = A.shape
    zeta = rows.shape[1]
    nt = max(1, min(nt, m))
    if nt == 1:
        out[:, :] = 0
        for j in range(m):
            a = A[j]
            for t in range(zeta):
                o = out[rows[j, t]]
                s = signs[j, t]
                for c in range(n):
                    o[c] += s * a[c]
        return
    acc = np.zeros((nt, out.shape[0], n), dtype=A.dtype)
    step = (m + nt - 1) // nt
    for b in prange(nt):
        o_b = acc[b]
        for j in range(b * step, min(m, (b + 1) * step)):
            a = A[j]
            for t in range(zeta):
                o = o_b[rows[j, t]]
                s = signs[j, t]
                for c in range(n):
                    o[c] += s * a[c]
    for i in prange(out.shape[0]):
        o = out[i]
        for c in range(n):
            o[c] = acc[0, i, c]
        for b in range(1, nt):
            ab = acc[b, i]
            for c in range(n):
                o[c] += ab[c]


# Every kernel takes nt, the number of threads to split its work over (decided when the call
# is traced, see _threads): nt = 1 runs serially without touching numba's thread pool; nt > 1
# runs nt contiguous blocks in a prange loop. The serial pieces are these njit helpers.
@_njit_serial
def _ss_csc_cols(rows, signs, indptr, indices, data, out, j0, j1):  # pragma: no cover
    zeta = rows.shape[1]
    for j in range(j0, j1):
        o = out[j]
        for c in range(o.shape[0]):
            o[c] = 0
        for p in range(indptr[j], indptr[j + 1]):
            i = indices[p]
            v = data[p]
            for t in range(zeta):
                o[rows[i, t]] += signs[i, t] * v


@_njit_serial
def _csr_rows(indptr, indices, data, X, out, i0, i1):  # pragma: no cover
    b = X.shape[1]
    for i in range(i0, i1):
        o = out[i]
        for c in range(b):
            o[c] = 0
        for p in range(indptr[i], indptr[i + 1]):
            v = data[p]
            x = X[indices[p]]
            for c in range(b):
                o[c] += v * x[c]


@_njit_serial
def _csr_acc(X, indptr, indices, data, out, t, nt):  # pragma: no cover
    b, m = X.shape
    buf = np.empty((_LEFT_ROW_BLOCK, b), X.dtype)
    for ib in range(t, (m + _LEFT_ROW_BLOCK - 1) // _LEFT_ROW_BLOCK, nt):
        i0 = ib * _LEFT_ROW_BLOCK
        i1 = min(m, i0 + _LEFT_ROW_BLOCK)
        for a in range(b):
            xa = X[a]
            for i in range(i0, i1):
                buf[i - i0, a] = xa[i]
        for i in range(i0, i1):
            x = buf[i - i0]
            for p in range(indptr[i], indptr[i + 1]):
                v = data[p]
                o = out[indices[p]]
                for c in range(b):
                    o[c] += v * x[c]


@_njit_serial
def _sum_transposed(acc, out, a0, a1):  # pragma: no cover
    for a in range(a0, a1):
        oa = out[a]
        for p in range(oa.shape[0]):
            s = acc[0, p, a]
            for t in range(1, acc.shape[0]):
                s += acc[t, p, a]
            oa[p] = s


@_njit_serial
def _csc_blocks(XT, indptr, indices, data, out, jb0, jb1):  # pragma: no cover
    b = XT.shape[1]
    n = out.shape[1]
    buf = np.empty((_LEFT_COL_BLOCK, b), XT.dtype)
    for jb in range(jb0, jb1):
        j0 = jb * _LEFT_COL_BLOCK
        j1 = min(n, j0 + _LEFT_COL_BLOCK)
        buf[:, :] = 0
        for j in range(j0, j1):
            o = buf[j - j0]
            for p in range(indptr[j], indptr[j + 1]):
                v = data[p]
                x = XT[indices[p]]
                for c in range(b):
                    o[c] += v * x[c]
        for a in range(b):
            oa = out[a]
            for j in range(j0, j1):
                oa[j] = buf[j - j0, a]


def _k_sparse_sign_csc(rows, signs, indptr, indices, data, out, nt):  # pragma: no cover
    """out (n, l) = (Gamma @ S)^T for S (m x n) in CSC: row j of ``out`` is the sum over the
    nonzeros S_ij of column j of ``S_ij Gamma[:, i]`` (zeta entries each); each output row is
    written once by one thread."""
    n = out.shape[0]
    nt = max(1, min(nt, n))
    if nt == 1:
        _ss_csc_cols(rows, signs, indptr, indices, data, out, 0, n)
        return
    step = (n + nt - 1) // nt
    for b in prange(nt):
        _ss_csc_cols(rows, signs, indptr, indices, data, out, b * step, min(n, (b + 1) * step))


def _k_csr_dense(indptr, indices, data, X, out, nt):  # pragma: no cover - compiled
    """out (m, b) = S @ X for S in CSR (row i: entries indptr[i]:indptr[i+1]); each output
    row is written once by one thread."""
    m = out.shape[0]
    nt = max(1, min(nt, m))
    if nt == 1:
        _csr_rows(indptr, indices, data, X, out, 0, m)
        return
    step = (m + nt - 1) // nt
    for b in prange(nt):
        _csr_rows(indptr, indices, data, X, out, b * step, min(m, (b + 1) * step))


def _k_dense_csr(X, indptr, indices, data, out, nt):  # pragma: no cover - compiled
    """out (b, n) = X @ S for X (b, m), S in CSR. Each of nt threads takes every nt-th block
    of rows of S; a block of X's columns is transposed into a small buffer so that each
    nonzero S_ip adds ``S_ip X[:, i]`` to row p of a private, cache resident (n, b)
    accumulator as one contiguous vector operation; the accumulators are then summed and
    transposed into ``out``."""
    b = X.shape[0]
    n = out.shape[1]
    nt = max(1, nt)
    acc = np.zeros((nt, n, b), X.dtype)
    if nt == 1:
        _csr_acc(X, indptr, indices, data, acc[0], 0, 1)
        _sum_transposed(acc, out, 0, b)
        return
    for t in prange(nt):
        _csr_acc(X, indptr, indices, data, acc[t], t, nt)
    step = (b + nt - 1) // nt
    for t in prange(nt):
        _sum_transposed(acc, out, t * step, min(b, (t + 1) * step))


def _k_dense_csc(XT, indptr, indices, data, out, nt):  # pragma: no cover - compiled
    """out (b, n) = X @ S for XT = X^T (m, b) and S in CSC: each task computes a block of
    columns as a (block, b) CSR-times-dense product (contiguous vector operations over b)
    and writes its transpose into ``out``."""
    nblk = (out.shape[1] + _LEFT_COL_BLOCK - 1) // _LEFT_COL_BLOCK
    nt = max(1, min(nt, nblk))
    if nt == 1:
        _csc_blocks(XT, indptr, indices, data, out, 0, nblk)
        return
    step = (nblk + nt - 1) // nt
    for t in prange(nt):
        _csc_blocks(XT, indptr, indices, data, out, t * step, min(nblk, (t + 1) * step))


def _k_probe(x):  # pragma: no cover - compiled
    s = 0.0
    for i in prange(x.shape[0]):
        s += x[i]
    return s


# ======================================================================================
# XLA FFI call frames, decoded in numba (layout: xla/ffi/api/c_api.h, API version 0.x)
# ======================================================================================
# XLA_FFI_CallFrame: struct_size, extension_start, api, ctx, stage (8-byte words 0-4),
# XLA_FFI_Args {struct_size, extension_start, size, types, args} (words 5-9),
# XLA_FFI_Rets {..., rets} (words 10-14), XLA_FFI_Attrs {struct_size, extension_start, size,
# types, names, attrs} (words 15-20; attributes sorted by name, a scalar attribute points to
# XLA_FFI_Scalar {dtype, pad, value*}). XLA_FFI_Buffer: struct_size, extension_start,
# dtype (int32 at byte 16), data (byte 24), rank (byte 32), dims (byte 40).
_FRAME_EXT, _FRAME_ARGS, _FRAME_RETS, _FRAME_ATTRS = 8, 72, 112, 160
_BUF_DTYPE, _BUF_DATA, _BUF_DIMS = 16, 24, 40
_F32, _F64 = 11, 12                 # XLA_FFI_DataType_F32 / _F64
_EXT_METADATA = 1                   # XLA_FFI_Extension_Metadata
_API_MAJOR, _API_MINOR = FFI_API_VERSION   # the layout above exists since FFI 0.1


def _ptr_intrinsic(name):
    if numba is None:
        return None
    nbtype = getattr(types, name)

    @intrinsic
    def to_ptr(typingctx, addr):
        sig = types.CPointer(nbtype)(types.int64)

        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(signature.return_type))
        return sig, codegen
    return to_ptr


_p_i64 = _ptr_intrinsic("int64")
_p_i32 = _ptr_intrinsic("int32")
_p_f32 = _ptr_intrinsic("float32")
_p_f64 = _ptr_intrinsic("float64")

_njit_inline = (functools.partial(numba.njit, inline="always", cache=True)
                if numba is not None else (lambda f: f))


@_njit_inline
def _ld64(addr):  # pragma: no cover - compiled
    return numba.carray(_p_i64(addr), 1)[0]


@_njit_inline
def _ld32(addr):  # pragma: no cover - compiled
    return numba.carray(_p_i32(addr), 1)[0]


@_njit_inline
def _metadata_query(frame):  # pragma: no cover - compiled
    """XLA first calls a handler with a metadata extension to learn its FFI API version and
    traits; answer it (version 0.1, no traits, stateless) and report True."""
    ext = _ld64(frame + _FRAME_EXT)
    if ext == 0 or _ld32(ext + 8) != _EXT_METADATA:
        return False
    md = _ld64(ext + 24)                           # XLA_FFI_Metadata*
    w = numba.carray(_p_i64(md), 6)
    h = numba.carray(_p_i32(md), 12)
    w[1] = 24                                      # api_version.struct_size
    w[2] = 0                                       # api_version.extension_start
    h[6] = _API_MAJOR
    h[7] = _API_MINOR
    h[8] = 0                                       # traits
    if w[0] >= 48:
        w[5] = 0                                   # state_type_id: XLA_FFI_UNKNOWN_TYPE_ID
    return True


@_njit_inline
def _arg(frame, i):  # pragma: no cover - compiled
    return _ld64(_ld64(frame + _FRAME_ARGS) + 8 * i)


@_njit_inline
def _ret(frame, i):  # pragma: no cover - compiled
    return _ld64(_ld64(frame + _FRAME_RETS) + 8 * i)


@_njit_inline
def _nt(frame):  # pragma: no cover - compiled
    """The int64 attribute ``nt`` (the only attribute): threads the kernel splits its work
    over, read from numba when the call is traced (calling numba.get_num_threads in the
    handler would make it uncachable)."""
    return _ld64(_ld64(_ld64(_ld64(frame + _FRAME_ATTRS)) + 8))


@_njit_inline
def _dim(buf, k):  # pragma: no cover - compiled
    return _ld64(_ld64(buf + _BUF_DIMS) + 8 * k)


@_njit_inline
def _data(buf):  # pragma: no cover - compiled
    return _ld64(buf + _BUF_DATA)


@_njit_inline
def _is_f32(buf):  # pragma: no cover - compiled
    return _ld32(buf + _BUF_DTYPE) == _F32


@_njit_inline
def _i32(buf, shape):  # pragma: no cover - compiled
    return numba.carray(_p_i32(_data(buf)), shape)


@_njit_inline
def _f32(buf, shape):  # pragma: no cover - compiled
    return numba.carray(_p_f32(_data(buf)), shape)


@_njit_inline
def _f64(buf, shape):  # pragma: no cover - compiled
    return numba.carray(_p_f64(_data(buf)), shape)


# Handlers: ``XLA_FFI_Error* handler(XLA_FFI_CallFrame*)`` (NULL = success), compiled as
# numba cfuncs int64(int64). Shapes and dtypes are checked when the call is traced
# (_check_*), so the handlers only decode. Zero-size operands never reach them.
def _h_sparse_sign(frame):  # pragma: no cover - compiled
    # args: A (m, n), rows (m, zeta) int32, signs (m, zeta); ret: out (l, n)
    if _metadata_query(frame):
        return 0
    a, r, s, o = _arg(frame, 0), _arg(frame, 1), _arg(frame, 2), _ret(frame, 0)
    m, n, zeta, l = _dim(a, 0), _dim(a, 1), _dim(r, 1), _dim(o, 0)
    rows = _i32(r, (m, zeta))
    nt = _nt(frame)
    if _is_f32(a):
        _k_sparse_sign(_f32(a, (m, n)), rows, _f32(s, (m, zeta)), _f32(o, (l, n)), nt)
    else:
        _k_sparse_sign(_f64(a, (m, n)), rows, _f64(s, (m, zeta)), _f64(o, (l, n)), nt)
    return 0


def _h_sparse_sign_csc(frame):  # pragma: no cover - compiled
    # args: rows (m, zeta) int32, signs (m, zeta), indptr_c (n+1,), indices_c (nnz,),
    # data_c (nnz,); ret: out (n, l)
    if _metadata_query(frame):
        return 0
    r, s, ip, ix, d, o = _arg(frame, 0), _arg(frame, 1), _arg(frame, 2), _arg(frame, 3), \
        _arg(frame, 4), _ret(frame, 0)
    m, zeta, nnz, n, l = _dim(r, 0), _dim(r, 1), _dim(ix, 0), _dim(o, 0), _dim(o, 1)
    rows, indptr, indices = _i32(r, (m, zeta)), _i32(ip, (n + 1,)), _i32(ix, (nnz,))
    nt = _nt(frame)
    if _is_f32(s):
        _k_sparse_sign_csc(rows, _f32(s, (m, zeta)), indptr, indices, _f32(d, (nnz,)),
                           _f32(o, (n, l)), nt)
    else:
        _k_sparse_sign_csc(rows, _f64(s, (m, zeta)), indptr, indices, _f64(d, (nnz,)),
                           _f64(o, (n, l)), nt)
    return 0


def _h_csr_dense(frame):  # pragma: no cover - compiled
    # args: indptr (m+1,), indices (nnz,), data (nnz,), X (k, b); ret: out (m, b)
    if _metadata_query(frame):
        return 0
    ip, ix, d, x, o = _arg(frame, 0), _arg(frame, 1), _arg(frame, 2), _arg(frame, 3), \
        _ret(frame, 0)
    nnz, k, b, m = _dim(ix, 0), _dim(x, 0), _dim(x, 1), _dim(o, 0)
    indptr, indices = _i32(ip, (m + 1,)), _i32(ix, (nnz,))
    nt = _nt(frame)
    if _is_f32(x):
        _k_csr_dense(indptr, indices, _f32(d, (nnz,)), _f32(x, (k, b)), _f32(o, (m, b)), nt)
    else:
        _k_csr_dense(indptr, indices, _f64(d, (nnz,)), _f64(x, (k, b)), _f64(o, (m, b)), nt)
    return 0


def _h_dense_csr(frame):  # pragma: no cover - compiled
    # args: X (b, m), indptr (m+1,), indices (nnz,), data (nnz,); ret: out (b, n)
    if _metadata_query(frame):
        return 0
    x, ip, ix, d, o = _arg(frame, 0), _arg(frame, 1), _arg(frame, 2), _arg(frame, 3), \
        _ret(frame, 0)
    b, m, nnz, n = _dim(x, 0), _dim(x, 1), _dim(ix, 0), _dim(o, 1)
    indptr, indices = _i32(ip, (m + 1,)), _i32(ix, (nnz,))
    nt = _nt(frame)
    if _is_f32(x):
        _k_dense_csr(_f32(x, (b, m)), indptr, indices, _f32(d, (nnz,)), _f32(o, (b, n)), nt)
    else:
        _k_dense_csr(_f64(x, (b, m)), indptr, indices, _f64(d, (nnz,)), _f64(o, (b, n)), nt)
    return 0


def _h_dense_csc(frame):  # pragma: no cover - compiled
    # args: XT (m, b), indptr_c (n+1,), indices_c (nnz,), data_c (nnz,); ret: out (b, n)
    if _metadata_query(frame):
        return 0
    x, ip, ix, d, o = _arg(frame, 0), _arg(frame, 1), _arg(frame, 2), _arg(frame, 3), \
        _ret(frame, 0)
    m, b, nnz, n = _dim(x, 0), _dim(x, 1), _dim(ix, 0), _dim(o, 1)
    indptr, indices = _i32(ip, (n + 1,)), _i32(ix, (nnz,))
    nt = _nt(frame)
    if _is_f32(x):
        _k_dense_csc(_f32(x, (m, b)), indptr, indices, _f32(d, (nnz,)), _f32(o, (b, n)), nt)
    else:
        _k_dense_csc(_f64(x, (m, b)), indptr, indices, _f64(d, (nnz,)), _f64(o, (b, n)), nt)
    return 0


_TARGETS = {  # FFI target name -> (handler source, kernel it calls)
    "rdr_jax_sparse_sign": (_h_sparse_sign, "_k_sparse_sign"),
    "rdr_jax_sparse_sign_csc": (_h_sparse_sign_csc, "_k_sparse_sign_csc"),
    "rdr_jax_csr_dense": (_h_csr_dense, "_k_csr_dense"),
    "rdr_jax_dense_csr": (_h_dense_csr, "_k_dense_csr"),
    "rdr_jax_dense_csc": (_h_dense_csc, "_k_dense_csc"),
}
_KERNEL_SOURCES = {"_k_sparse_sign": _k_sparse_sign, "_k_sparse_sign_csc": _k_sparse_sign_csc,
                   "_k_csr_dense": _k_csr_dense,
                   "_k_dense_csr": _k_dense_csr, "_k_dense_csc": _k_dense_csc}
_LOCK = threading.RLock()
_REGISTERED: dict[str, object] = {}    # target -> compiled cfunc (kept alive)
_STATE: dict[str, object] = {}


def _parallel() -> bool:
    """Whether the kernels may use numba's thread pool: only with a thread-safe threading
    layer (XLA may run two custom calls concurrently; numba's ``workqueue`` layer aborts the
    process on concurrent use)."""
    if "parallel" not in _STATE:
        probe = numba.njit(parallel=True, cache=True)(_k_probe)
        globals()["prange"] = numba.prange
        probe(np.ones(4))
        _STATE["parallel"] = numba.threading_layer() in ("omp", "tbb")
    return bool(_STATE["parallel"])


def _kernel(name: str):
    """The compiled numba kernel ``name`` (parallel when the threading layer allows)."""
    with _LOCK:
        k = _STATE.get(name)
        if k is None:
            par = _parallel()
            globals()["prange"] = numba.prange
            k = numba.njit(parallel=par, fastmath=True, cache=True, nogil=True)(
                _KERNEL_SOURCES[name])
            globals()[name] = k  # the handlers resolve the kernel by this global name
            _STATE[name] = k
        return k


def _register(target: str) -> None:
    """Compile the handler of ``target`` and register it with XLA:CPU (once per process)."""
    with _LOCK:
        if target in _REGISTERED:
            return
        src, kname = _TARGETS[target]
        _kernel(kname)
        h = numba.cfunc(types.int64(types.int64), nopython=True, cache=True)(src)
        jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(ctypes.c_void_p(h.address)),
                                    platform="cpu", api_version=1)
        _REGISTERED[target] = h


def _threads(work: int) -> int:
    """Threads for a kernel doing ``work`` multiply-adds, fixed when the call is traced:
    numba's setting in the tracing thread (``numba.set_num_threads(1)`` there makes the
    kernels serial; the setting is thread local and the kernel runs on an XLA thread), or 1
    for small problems, where waking a thread pool costs more than it saves (and on an
    oversubscribed machine a parallel loop waits for descheduled siblings)."""
    if not _parallel() or work < _PARALLEL_WORK:
        return 1
    return int(numba.get_num_threads())


def _ffi(target: str, out_shape, dtype, *args, nt: int = 1):
    _register(target)
    return jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(out_shape, dtype))(
        *args, nt=np.int64(nt))


def sparse_sign_apply_host(A, rows, signs, l: int) -> np.ndarray:
    """``Gamma @ A`` on host numpy arrays with the CPU kernel, without JAX (diagnostics:
    ``experiments/bench_sketch.py`` compares it with the in-jit call)."""
    reason = _unsupported(force=True)
    if reason is not None:
        raise RuntimeError(f"the CPU kernel is unavailable: {reason}")
    A = np.ascontiguousarray(A)
    out = np.empty((int(l), A.shape[1]), A.dtype)
    _kernel("_k_sparse_sign")(A, np.ascontiguousarray(rows, dtype=np.int32),
                              np.ascontiguousarray(signs, dtype=A.dtype), out,
                              numba.get_num_threads())
    return out


# ---- when the kernels are used -------------------------------------------------------
_OFF = ("0", "false", "off", "no")
_ON = ("1", "true", "on", "yes")


def _numba_version() -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", getattr(numba, "__version__", ""))
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _ffi_api_version():
    """(major, minor) of the XLA FFI C API in jaxlib's headers, or None without headers."""
    if "ffi_api" not in _STATE:
        try:
            text = (Path(jax.ffi.include_dir()) / "xla" / "ffi" / "api" / "c_api.h").read_text()
            found = [re.search(rf"#define XLA_FFI_API_{w} (\d+)", text) for w in ("MAJOR", "MINOR")]
            api = tuple(int(f.group(1)) for f in found) if all(found) else None
        except (OSError, AttributeError):
            api = None
        _STATE["ffi_api"] = api
    return _STATE["ffi_api"]


def _unsupported(force: bool = False):
    """Why this process cannot use the CPU kernels, or None. ``force`` skips the numba
    version range (never the FFI check: a foreign call-frame layout would crash)."""
    if _NUMBA_ERROR is not None:
        return _NUMBA_ERROR
    (lo, hi), v = NUMBA_VERSIONS, _numba_version()
    if not force and not lo <= v < hi:
        return (f"numba {numba.__version__} is outside the tested range "
                f"{lo[0]}.{lo[1]} <= numba < {hi[0]}.{hi[1]} (set {KERNELS_ENV}=1 to try the "
                "kernels anyway)")
    if not (hasattr(jax, "ffi") and hasattr(jax.ffi, "ffi_call")):
        return f"this jax ({jax.__version__}) has no jax.ffi"
    api = _ffi_api_version()   # None: no headers shipped; XLA still checks at registration
    if api is not None and (api[0] != FFI_API_VERSION[0] or api[1] < FFI_API_VERSION[1]):
        return (f"jaxlib speaks XLA FFI API {api[0]}.{api[1]}; the kernels decode call frames "
                f"of API {FFI_API_VERSION[0]}.x with x >= {FFI_API_VERSION[1]}")
    return _STATE.get("broken")


def cpu_kernels_status(target: str = "rdr_jax_sparse_sign"):
    """``(used, reason)``: whether an operation lowered now for CPU (float32/float64) would
    call the numba kernel ``target`` (compiling and registering it if needed), and if not,
    why (None when the variable turned them off)."""
    setting = os.environ.get(KERNELS_ENV, "").strip().lower()
    if setting in _OFF:
        return False, None
    reason = _unsupported(force=setting in _ON)
    if reason is None:
        try:
            _register(target)
        except Exception as e:  # a numba that cannot compile or XLA refusing the handler
            reason = _STATE["broken"] = (f"compiling or registering the numba kernel {target!r} "
                                         f"failed ({type(e).__name__}: {e})")
    return reason is None, reason


def _use_kernels(target: str, *avals) -> bool:
    """Lowering-time choice: the kernel ``target`` for operands of one real dtype when
    :func:`cpu_kernels_status` allows, else the XLA formula (one warning per reason)."""
    dt = np.dtype(avals[0].dtype)
    if dt not in _REAL or any(np.dtype(a.dtype) != dt for a in avals[1:]):
        return False
    used, reason = cpu_kernels_status(target)
    if reason is not None:
        with _LOCK:
            warned = _STATE.setdefault("warned", set())
            if reason not in warned:
                warned.add(reason)
                warnings.warn(f"rdr_jax: the CPU kernels for sparse products are off: {reason}. "
                              "Using the XLA formulas (correct, slower on CPU); set "
                              f"{KERNELS_ENV}=0 to choose them explicitly.",
                              KernelFallbackWarning, stacklevel=2)
    return used


# ======================================================================================
# XLA formulas (GPU/TPU lowering; the CPU fallback; complex data and the value tangents)
# ======================================================================================
def _csr_order(rows, signs, l: int):
    """The m * zeta nonzeros of Gamma (l x m) in CSR order (by row, then by column):
    ``(row, col, val)``, each (m * zeta,). One sort of packed uint32 keys ``row * nnz + p``
    (p the position in ``rows.ravel()``) when ``l * nnz`` fits in 32 bits, else a stable
    key-value sort."""
    m, zeta = rows.shape
    nnz = m * zeta
    r = rows.reshape(-1).astype(jnp.int32)
    if l * nnz <= _PACKED_KEYS:
        div = np.uint32(nnz)
        key = jax.lax.sort(r.astype(jnp.uint32) * div + jnp.arange(nnz, dtype=jnp.uint32))
        r, p = (jax.lax.div(key, div).astype(jnp.int32),
                jax.lax.rem(key, div).astype(jnp.int32))
    else:
        r, p = jax.lax.sort((r, jnp.arange(nnz, dtype=jnp.int32)), num_keys=1, is_stable=True)
    return r, jax.lax.div(p, np.int32(zeta)), signs.reshape(-1)[p]


def _empty(A, rows):
    return 0 in A.shape + rows.shape


def sparse_sign_segment_sum(A, rows, signs, l: int):
    """``Gamma @ A`` (GPU/TPU formula): the nonzeros sorted by row once, then
    ``segment_sum(val * A[col], row, indices_are_sorted=True)``; XLA:GPU's sorted scatter
    sums each run of equal rows before one atomic update, where an unsorted scatter-add
    makes m * zeta contended atomic updates (l rows, each hit ~m zeta / l times)."""
    if _empty(A, rows):
        return jnp.zeros((l, A.shape[1]), A.dtype)
    r, c, v = _csr_order(rows, signs, l)
    return jax.ops.segment_sum(v.astype(A.dtype)[:, None] * A[c], r, num_segments=l,
                               indices_are_sorted=True)


_BCSR_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.complex64,
                                            np.complex128))


def sparse_sign_csr(A, rows, signs, l: int):
    """``Gamma @ A`` (CPU formula): Gamma sorted into CSR arrays once and multiplied as a
    ``jax.experimental.sparse.BCSR`` matrix, which XLA:CPU runs with jaxlib's CSR kernel (one
    pass over the nonzeros, no (m zeta, n) intermediate). Other dtypes: the segment sum."""
    if _empty(A, rows) or np.dtype(A.dtype) not in _BCSR_DTYPES:
        return sparse_sign_segment_sum(A, rows, signs, l)
    r, c, v = _csr_order(rows, signs, l)
    indptr = jnp.searchsorted(r, jnp.arange(l + 1, dtype=jnp.int32)).astype(jnp.int32)
    G = jsparse.BCSR((v.astype(A.dtype), c, indptr), shape=(l, A.shape[0]),
                     indices_sorted=True, unique_indices=True)
    return jsparse.bcsr_dot_general(G, A, dimension_numbers=(([1], [0]), ([], [])))


def sparse_sign_xla(A, rows, signs, l: int):
    """``Gamma @ A`` without the primitive (``impl="xla"``; differentiated and batched by
    JAX itself): :func:`sparse_sign_csr` on CPU, :func:`sparse_sign_segment_sum` elsewhere."""
    return jax.lax.platform_dependent(
        A, rows, signs, cpu=functools.partial(sparse_sign_csr, l=l),
        default=functools.partial(sparse_sign_segment_sum, l=l))


def sparse_sign_t_xla(Y, rows, signs):
    """``Gamma^T @ Y``: ``out[j] = sum_t signs[j, t] Y[rows[j, t]]``, zeta row gathers of the
    small Y summed in one fused loop (no (m, zeta, n) intermediate)."""
    out = signs[:, 0, None] * Y[rows[:, 0]]
    for t in range(1, rows.shape[1]):
        out = out + signs[:, t, None] * Y[rows[:, t]]
    return out


def _sparse_sign_sparse_scatter(data, rows, signs, row, col, indptr, *, l, n):
    """``Gamma @ S`` (CPU formula): one scatter-add of the nnz * zeta products (XLA:CPU runs
    it as one serial pass, cheaper there than sorting the products first)."""
    r = rows[row]                                    # (nnz, zeta) output rows
    vals = signs[row] * data[:, None]
    cols = jnp.broadcast_to(col[:, None], r.shape)
    return jnp.zeros((l, n), data.dtype).at[r, cols].add(vals.astype(data.dtype))


def _sparse_sign_sparse_sorted(data, rows, signs, row, col, indptr, *, l, n):
    """``Gamma @ S`` (GPU/TPU formula): the nnz * zeta products ``signs[row[p], t] data[p]``
    sorted by their output position ``rows[row[p], t] * n + col[p]`` (one key-value sort)
    and summed in sorted segments (no contended atomics, even for a dense column of S)."""
    if l * n > 2 ** 31 - 1 or 0 in data.shape + rows.shape:  # keys would not fit in int32
        return _sparse_sign_sparse_scatter(data, rows, signs, row, col, indptr, l=l, n=n)
    key = (rows[row] * np.int32(n) + col[:, None].astype(jnp.int32)).reshape(-1)
    vals = (signs[row] * data[:, None]).astype(data.dtype).reshape(-1)
    key, vals = jax.lax.sort((key, vals), num_keys=1)
    out = jax.ops.segment_sum(vals, key, num_segments=l * n, indices_are_sorted=True)
    return out.reshape(l, n)


def sparse_sign_sparse_xla(data, rows, signs, row, col, indptr, *, l, n):
    """``Gamma @ S`` for S (m x n) given by its nonzeros ``(row[p], col[p], data[p])``, without
    the primitive: a scatter-add on CPU, a sort and sorted segment sum elsewhere."""
    kw = {"l": l, "n": n}
    return jax.lax.platform_dependent(
        data, rows, signs, row, col, indptr,
        cpu=functools.partial(_sparse_sign_sparse_scatter, **kw),
        default=functools.partial(_sparse_sign_sparse_sorted, **kw))


def _segment_product(data, gather_idx, seg_idx, nseg, X, chunk):
    def block(Xb):
        prod = data[:, None] * Xb[gather_idx]
        return jax.ops.segment_sum(prod, seg_idx, num_segments=nseg, indices_are_sorted=True)
    b = X.shape[1]
    width = max(1, chunk // max(1, data.shape[0]))
    if b <= width:
        return block(X)
    return jnp.concatenate([block(X[:, s:s + width]) for s in range(0, b, width)], axis=1)


def spmm_xla(X, arrays, shape, left: bool, chunk: int = 1 << 26):
    """``S @ X`` (left=False) or ``X @ S`` (left=True) as sorted segment sums over the CSR
    order (``S @ X``) or the CSC order (``X @ S = (S^H X^H)^H``), any dtype. ``arrays`` are
    ``(data_r, row_r, col_r, indptr_r, data_c, row_c, col_c, indptr_c)``; the (nnz x b)
    intermediate is built in column blocks of at most ``chunk`` elements."""
    data_r, row_r, col_r, _, data_c, row_c, col_c, _ = arrays
    m, n = shape
    if not left:
        return _segment_product(data_r, col_r, row_r, m, X, chunk)
    return _segment_product(data_c.conj(), row_c, col_c, n, X.conj().T, chunk).conj().T


# ======================================================================================
# Primitive plumbing
# ======================================================================================
def _eager(prim):
    prim.def_impl(functools.partial(xla.apply_primitive, prim))  # one jitted call per shape


def _map_batched(prim, args, dims, **params):
    """Fallback batching: loop over the batch with ``jax.lax.map``."""
    moved = [None if d is None else jnp.moveaxis(x, d, 0)
             for x, d in zip(args, dims)]

    def one(xs):
        it = iter(xs)
        return prim.bind(*[next(it) if mv is not None else x
                           for x, mv in zip(args, moved)], **params)
    out = jax.lax.map(one, [mv for mv in moved if mv is not None])
    return out, 0


def _fold_cols(X, d):
    """(batch at axis d) -> (rows, batch * cols) with batch-major columns."""
    X = jnp.moveaxis(X, d, 1)
    return X.reshape(X.shape[0], -1), X.shape[1]


# ---- Gamma @ A -----------------------------------------------------------------------
sparse_sign_p = Primitive("rdr_jax_sparse_sign")
sparse_sign_t_p = Primitive("rdr_jax_sparse_sign_t")
_eager(sparse_sign_p)
_eager(sparse_sign_t_p)


def sparse_sign_matmul(A, rows, signs, l: int):
    """``Gamma @ A`` for ``Gamma[rows[j, t], j] = signs[j, t]`` (l x m, never formed).

    ``A`` (m, n) real, ``rows`` (m, zeta) int32 in ``[0, l)``, ``signs`` (m, zeta) of A's
    dtype. Differentiable in A and signs, batchable, jit-compatible (see module docstring).
    """
    return sparse_sign_p.bind(A, rows.astype(jnp.int32), signs, l=int(l))


def sparse_sign_rmatmul(Y, rows, signs):
    """``Gamma^T @ Y`` (m, n) for Y (l, n): the transpose of :func:`sparse_sign_matmul`."""
    return sparse_sign_t_p.bind(Y, rows.astype(jnp.int32), signs)


sparse_sign_p.def_abstract_eval(
    lambda A, rows, signs, *, l: jax.core.ShapedArray((l, A.shape[1]), A.dtype))
sparse_sign_t_p.def_abstract_eval(
    lambda Y, rows, signs: jax.core.ShapedArray((rows.shape[0], Y.shape[1]), Y.dtype))


def _sparse_sign_jvp(primals, tangents, *, l):
    A, rows, signs = primals
    dA, _, ds = tangents
    out = sparse_sign_p.bind(A, rows, signs, l=l)
    terms = []
    if type(dA) is not ad.Zero:
        terms.append(sparse_sign_p.bind(dA, rows, signs, l=l))
    if type(ds) is not ad.Zero:
        terms.append(sparse_sign_p.bind(A, rows, ds, l=l))
    return out, (functools.reduce(jnp.add, terms) if terms else jnp.zeros_like(out))


def _sparse_sign_t_jvp(primals, tangents):
    Y, rows, signs = primals
    dY, _, ds = tangents
    out = sparse_sign_t_p.bind(Y, rows, signs)
    terms = []
    if type(dY) is not ad.Zero:
        terms.append(sparse_sign_t_p.bind(dY, rows, signs))
    if type(ds) is not ad.Zero:
        terms.append(sparse_sign_t_p.bind(Y, rows, ds))
    return out, (functools.reduce(jnp.add, terms) if terms else jnp.zeros_like(out))


def _signs_cotangent(G, rows, Z):
    """d<G, Gamma Z> / d signs[j, t] = <G[rows[j, t]], Z[j]> (G is l x n, Z is m x n)."""
    return jnp.stack([jnp.sum(G[rows[:, t]] * Z, axis=1) for t in range(rows.shape[1])], 1)


def _sparse_sign_transpose(ct, A, rows, signs, *, l):
    if type(ct) is ad.Zero:
        return [None, None, None]
    if ad.is_undefined_primal(A):
        return [sparse_sign_t_p.bind(ct, rows, signs), None, None]
    return [None, None, _signs_cotangent(ct, rows, A)]


def _sparse_sign_t_transpose(ct, Y, rows, signs):
    if type(ct) is ad.Zero:
        return [None, None, None]
    if ad.is_undefined_primal(Y):
        return [sparse_sign_p.bind(ct, rows, signs, l=Y.aval.shape[0]), None, None]
    return [None, None, _signs_cotangent(Y, rows, ct)]


ad.primitive_jvps[sparse_sign_p] = _sparse_sign_jvp
ad.primitive_jvps[sparse_sign_t_p] = _sparse_sign_t_jvp
ad.primitive_transposes[sparse_sign_p] = _sparse_sign_transpose
ad.primitive_transposes[sparse_sign_t_p] = _sparse_sign_t_transpose


def _stack_sketches(rows, dr, signs, ds, B, l):
    """B sketches (rows/signs batched along dr/ds, or shared) as one (B l) x m sketch whose
    column j holds the B * zeta nonzeros ``rows_b[j, t] + b l``: its product with A stacks
    the B products ``Gamma_b A``."""
    r = jnp.moveaxis(rows, dr, 0) if dr is not None else rows[None]
    s = jnp.moveaxis(signs, ds, 0) if ds is not None else signs[None]
    m, zeta = r.shape[1], r.shape[2]
    r = jnp.broadcast_to(r, (B, m, zeta)) + (jnp.arange(B, dtype=jnp.int32) * l)[:, None, None]
    s = jnp.broadcast_to(s, (B, m, zeta))
    return (jnp.moveaxis(r, 0, 1).reshape(m, B * zeta),
            jnp.moveaxis(s, 0, 1).reshape(m, B * zeta))


def _sparse_sign_batch(args, dims, *, l):
    A, rows, signs = args
    dA, dr, ds = dims
    nm = None
    if dr is nm and ds is nm:  # one sketch, a batch of matrices: columns
        X, B = _fold_cols(A, dA)
        out = sparse_sign_p.bind(X, rows, signs, l=l)
        return out.reshape(l, B, -1), 1
    B = rows.shape[dr] if dr is not nm else signs.shape[ds]
    if dA is nm and B * l * A.shape[1] <= _FOLD_ELEMS:
        # a batch of sketches, one matrix: one stacked sketch, so A is read once
        r, s = _stack_sketches(rows, dr, signs, ds, B, l)
        out = sparse_sign_p.bind(A, r, s, l=B * l)
        return out.reshape(B, l, A.shape[1]), 0
    return _map_batched(sparse_sign_p, args, dims, l=l)


def _sparse_sign_t_batch(args, dims):
    Y, rows, signs = args
    dY, dr, ds = dims
    nm = None
    if dr is nm and ds is nm:
        X, B = _fold_cols(Y, dY)
        out = sparse_sign_t_p.bind(X, rows, signs)
        return out.reshape(rows.shape[0], B, -1), 1
    return _map_batched(sparse_sign_t_p, args, dims)


batching.primitive_batchers[sparse_sign_p] = _sparse_sign_batch
batching.primitive_batchers[sparse_sign_t_p] = _sparse_sign_t_batch


def _sparse_sign_lower_cpu(ctx, A, rows, signs, *, l):
    a_A, a_r, a_s = ctx.avals_in
    if 0 not in a_A.shape + a_r.shape + (l,) and _use_kernels("rdr_jax_sparse_sign", a_A, a_s):
        nt = _threads(a_A.size * a_r.shape[1])

        def fn(A, r, s):
            return _ffi("rdr_jax_sparse_sign", (l, A.shape[1]), A.dtype, A, r, s, nt=nt)
    elif _CPU_FALLBACK_AS_ACCELERATOR:
        fn = functools.partial(sparse_sign_segment_sum, l=l)
    else:
        fn = functools.partial(sparse_sign_csr, l=l)
    return mlir.lower_fun(fn, multiple_results=False)(ctx, A, rows, signs)


def _sparse_sign_lower(ctx, A, rows, signs, *, l):
    return mlir.lower_fun(functools.partial(sparse_sign_segment_sum, l=l),
                          multiple_results=False)(ctx, A, rows, signs)


mlir.register_lowering(sparse_sign_p, _sparse_sign_lower)
mlir.register_lowering(sparse_sign_p, _sparse_sign_lower_cpu, platform="cpu")
mlir.register_lowering(sparse_sign_t_p, mlir.lower_fun(sparse_sign_t_xla,
                                                       multiple_results=False))


# ---- Gamma @ S for a sparse S --------------------------------------------------------
sparse_sign_sparse_p = Primitive("rdr_jax_sparse_sign_sparse")
_eager(sparse_sign_sparse_p)


def sparse_sign_sparse_matmul(data, rows, signs, row, col, indptr, l: int, n: int):
    """``Gamma @ S`` (l x n) for a sparse S (m x n) in CSC order: values ``data``, row
    indices ``row``, column indices ``col`` (nondecreasing) and column pointers ``indptr``
    (n + 1). Bilinear in (data, signs): differentiable in both, batchable over sketches."""
    return sparse_sign_sparse_p.bind(data, rows.astype(jnp.int32), signs, row, col, indptr,
                                     l=int(l), n=int(n))


sparse_sign_sparse_p.def_abstract_eval(
    lambda data, rows, signs, row, col, indptr, *, l, n: jax.core.ShapedArray((l, n),
                                                                               data.dtype))


def _sparse_sign_sparse_jvp(primals, tangents, *, l, n):
    data, rows, signs, row, col, indptr = primals
    dd, _, ds = tangents[:3]
    out = sparse_sign_sparse_p.bind(*primals, l=l, n=n)
    terms = []
    if type(dd) is not ad.Zero:
        terms.append(sparse_sign_sparse_p.bind(dd, rows, signs, row, col, indptr, l=l, n=n))
    if type(ds) is not ad.Zero:
        terms.append(sparse_sign_sparse_p.bind(data, rows, ds, row, col, indptr, l=l, n=n))
    return out, (functools.reduce(jnp.add, terms) if terms else jnp.zeros_like(out))


def _sparse_sign_sparse_transpose(ct, *operands, l, n):
    data, rows, signs, row, col, _ = operands   # the primitive's operands, as bound
    if type(ct) is ad.Zero:
        return [None] * 6
    # <G, Gamma S> = sum_{p, t} G[rows[row_p, t], col_p] signs[row_p, t] data_p
    g = ct[rows[row], col[:, None]]                  # (nnz, zeta)
    if ad.is_undefined_primal(data):
        return [jnp.sum(g * signs[row], axis=1), None, None, None, None, None]
    m = signs.aval.shape[0]
    ct_s = jnp.zeros((m, rows.shape[1]), ct.dtype).at[row].add(g * data[:, None])
    return [None, None, ct_s, None, None, None]


def _sparse_sign_sparse_batch(args, dims, *, l, n):
    data, rows, signs, row, col, indptr = args
    dd, dr, ds = dims[:3]
    nm = None  # batching passes None for an unbatched operand
    if (dd is nm and all(d is nm for d in dims[3:]) and (dr is not nm or ds is not nm)):
        B = rows.shape[dr] if dr is not nm else signs.shape[ds]
        if B * l * n <= _FOLD_ELEMS:  # stack the sketches into one (B l) x m sketch
            r, s = _stack_sketches(rows, dr, signs, ds, B, l)
            out = sparse_sign_sparse_p.bind(data, r, s, row, col, indptr, l=B * l, n=n)
            return out.reshape(B, l, n), 0
    return _map_batched(sparse_sign_sparse_p, args, dims, l=l, n=n)


ad.primitive_jvps[sparse_sign_sparse_p] = _sparse_sign_sparse_jvp
ad.primitive_transposes[sparse_sign_sparse_p] = _sparse_sign_sparse_transpose
batching.primitive_batchers[sparse_sign_sparse_p] = _sparse_sign_sparse_batch


def _sparse_sign_sparse_lower_cpu(ctx, *operands, l, n):
    a_d, a_r, a_s = ctx.avals_in[:3]
    if (0 not in a_d.shape + a_r.shape + (l, n)
            and _use_kernels("rdr_jax_sparse_sign_csc", a_d, a_s)):
        nt = _threads(a_d.shape[0] * a_r.shape[1])

        def fn(data, rows, signs, row, col, indptr):
            return _ffi("rdr_jax_sparse_sign_csc", (n, l), data.dtype, rows, signs, indptr,
                        row, data, nt=nt).T
    elif _CPU_FALLBACK_AS_ACCELERATOR:
        fn = functools.partial(_sparse_sign_sparse_sorted, l=l, n=n)
    else:
        fn = functools.partial(_sparse_sign_sparse_scatter, l=l, n=n)
    return mlir.lower_fun(fn, multiple_results=False)(ctx, *operands)


mlir.register_lowering(sparse_sign_sparse_p, mlir.lower_fun(_sparse_sign_sparse_sorted,
                                                            multiple_results=False))
mlir.register_lowering(sparse_sign_sparse_p, _sparse_sign_sparse_lower_cpu, platform="cpu")


# ---- S @ X and X @ S -----------------------------------------------------------------
spmm_p = Primitive("rdr_jax_spmm")
_eager(spmm_p)

#: the eight arrays of a SparseOperator, in this order
ARRAY_FIELDS = ("data_r", "row_r", "col_r", "indptr_r", "data_c", "row_c", "col_c", "indptr_c")


def _left_method(b: int, m: int, n: int, nnz: int) -> str:
    """How to compute X @ S (X b x m, S m x n) on CPU: per-thread (n, b) accumulators over
    the CSR order when they are small, a CSC product when S has few rows (X^T fits in
    cache), else ``(S^T X^T)^T`` with two transposes (regular memory traffic)."""
    if _threads(nnz * b) * n * b <= _LEFT_ACC_ELEMS:
        return "acc"
    if m <= _SMALL_DIM:
        return "csc"
    return "csr_t"


def sparse_matmul(X, arrays, shape, left: bool, chunk: int = 1 << 26):
    """``S @ X`` (left=False, X n x b) or ``X @ S`` (left=True, X b x m) for S (m x n) given
    by ``arrays`` (see :data:`ARRAY_FIELDS`), real float32/float64 of one dtype.

    Linear in X (JVP, transpose via ``S^T``, batching over X folded into one call);
    differentiable in the values (through :func:`spmm_xla`). ``chunk`` bounds the (nnz x b)
    intermediate of the XLA formula (GPU/TPU).
    """
    shape = (int(shape[0]), int(shape[1]))
    method = _left_method(X.shape[0], *shape, arrays[0].shape[0]) if left else "csr"
    return spmm_p.bind(X, *arrays, shape=shape, left=bool(left), method=method,
                       chunk=int(chunk))


def _spmm_abstract(X, *arrays, shape, left, method, chunk):
    out = (X.shape[0], shape[1]) if left else (shape[0], X.shape[1])
    return jax.core.ShapedArray(out, X.dtype)


spmm_p.def_abstract_eval(_spmm_abstract)


def _transposed_arrays(arrays):
    """The arrays of S^T (no conjugation): its CSR order is S's CSC order."""
    data_r, row_r, col_r, indptr_r, data_c, row_c, col_c, indptr_c = arrays
    return (data_c, col_c, row_c, indptr_c, data_r, col_r, row_r, indptr_r)


def _spmm_jvp(primals, tangents, *, shape, left, method, chunk):
    X, *arrays = primals
    dX, *darrays = tangents
    params = {"shape": shape, "left": left, "method": method, "chunk": chunk}
    out = spmm_p.bind(X, *arrays, **params)
    terms = []
    if type(dX) is not ad.Zero:
        terms.append(spmm_p.bind(dX, *arrays, **params))
    dd = darrays[4] if left else darrays[0]          # the values the product reads
    if type(dd) is not ad.Zero:
        arr = list(arrays)
        arr[4 if left else 0] = dd
        terms.append(spmm_xla(X, arr, shape, left, chunk))
    return out, (functools.reduce(jnp.add, terms) if terms else jnp.zeros_like(out))


def _spmm_transpose(ct, X, *arrays, shape, left, method, chunk):
    assert ad.is_undefined_primal(X) and not any(ad.is_undefined_primal(a) for a in arrays)
    if type(ct) is ad.Zero:
        return [None] * 9
    tshape = (shape[1], shape[0])
    if left:   # (X S)^T: G -> G S^T
        ctX = sparse_matmul(ct, _transposed_arrays(arrays), tshape, True, chunk)
    else:      # (S X)^T: G -> S^T G
        ctX = sparse_matmul(ct, _transposed_arrays(arrays), tshape, False, chunk)
    return [ctX] + [None] * 8


def _spmm_batch(args, dims, *, shape, left, method, chunk):
    X, *arrays = args
    dX, *darr = dims
    nm = None
    if any(d is not nm for d in darr):
        return _map_batched(spmm_p, args, dims, shape=shape, left=left, method=method,
                            chunk=chunk)
    if left:  # X (B, b, m) -> (B b, m)
        Xb = jnp.moveaxis(X, dX, 0)
        B, b = Xb.shape[:2]
        out = sparse_matmul(Xb.reshape(B * b, -1), arrays, shape, True, chunk)
        return out.reshape(B, b, -1), 0
    Xc, B = _fold_cols(X, dX)  # X (B, n, b) -> (n, B b)
    out = sparse_matmul(Xc, arrays, shape, False, chunk)
    return out.reshape(shape[0], B, -1), 1


ad.primitive_jvps[spmm_p] = _spmm_jvp
ad.primitive_transposes[spmm_p] = _spmm_transpose
batching.primitive_batchers[spmm_p] = _spmm_batch


def _spmm_cpu(X, *arrays, shape, left, method, chunk):
    # arrays: the SparseOperator's eight arrays in ARRAY_FIELDS order
    data_r, row_r, col_r, indptr_r, data_c, row_c, col_c, indptr_c = arrays
    m, n = shape
    dt = X.dtype
    b = X.shape[0] if left else X.shape[1]
    nt = _threads(data_r.shape[0] * b)
    if not left:
        return _ffi("rdr_jax_csr_dense", (m, b), dt, indptr_r, col_r, data_r, X, nt=nt)
    if method == "acc":
        return _ffi("rdr_jax_dense_csr", (b, n), dt, X, indptr_r, col_r, data_r, nt=nt)
    if method == "csc":
        return _ffi("rdr_jax_dense_csc", (b, n), dt, X.T, indptr_c, row_c, data_c, nt=nt)
    # (S^T X^T)^T: S^T in CSR is S's CSC order
    return _ffi("rdr_jax_csr_dense", (n, b), dt, indptr_c, row_c, data_c, X.T, nt=nt).T


def _spmm_xla_lowered(X, *arrays, shape, left, method, chunk):
    return spmm_xla(X, arrays, shape, left, chunk)


def _spmm_csr_lowered(X, *arrays, shape, left, method, chunk):
    """CPU fallback: ``S @ X`` as a ``jax.experimental.sparse.BCSR`` product over the CSR
    arrays, ``X @ S = (S^T X^T)^T`` over the CSC ones (jaxlib's CPU CSR kernel)."""
    data_r, _, col_r, indptr_r, data_c, row_c, _, indptr_c = arrays
    m, n = shape
    dn = (([1], [0]), ([], []))
    if not left:
        return jsparse.bcsr_dot_general(jsparse.BCSR((data_r, col_r, indptr_r), shape=(m, n)),
                                        X, dimension_numbers=dn)
    return jsparse.bcsr_dot_general(jsparse.BCSR((data_c, row_c, indptr_c), shape=(n, m)),
                                    X.T, dimension_numbers=dn).T


def _spmm_lower_cpu(ctx, X, *arrays, shape, left, method, chunk):
    a_X = ctx.avals_in[0]
    a_d = (ctx.avals_in[5] if left else ctx.avals_in[1])
    target = ("rdr_jax_csr_dense" if not left or method == "csr_t" else
              "rdr_jax_dense_csr" if method == "acc" else "rdr_jax_dense_csc")
    ok = (0 not in a_X.shape + tuple(shape) + a_d.shape
          and all(np.dtype(a.dtype) == np.int32 for i, a in enumerate(ctx.avals_in[1:])
                  if i not in (0, 4)))
    if ok and _use_kernels(target, a_X, a_d):
        fn = _spmm_cpu
    elif (ok and not _CPU_FALLBACK_AS_ACCELERATOR and np.dtype(a_X.dtype) in _BCSR_DTYPES
          and a_d.dtype == a_X.dtype):
        fn = _spmm_csr_lowered
    else:
        fn = _spmm_xla_lowered
    return mlir.lower_fun(functools.partial(fn, shape=shape, left=left, method=method,
                                            chunk=chunk), multiple_results=False)(ctx, X, *arrays)


mlir.register_lowering(spmm_p, mlir.lower_fun(_spmm_xla_lowered, multiple_results=False))
mlir.register_lowering(spmm_p, _spmm_lower_cpu, platform="cpu")
