"""CPU kernel for applying a sparse sign sketch to a dense matrix.

Why a hand-written kernel: XLA:CPU lowers the scatter-add ``out[rows[j, t]] += s[j, t] A[j]``
to a serial loop that costs 65-85x one read of A (65536 x 256 float32, zeta = 8, measured by
``experiments/bench_sketch.py``), and no maintained JAX library provides a CPU sparse-dense
product. The numba kernel below streams A once, keeps one private (l x n) accumulator per
thread (small, cache resident) and sums them at the end. It is reached through
``jax.pure_callback`` on CPU only; GPU/TPU use XLA's scatter-add, which is fast there.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(parallel=True, fastmath=True, cache=True, nogil=True)
def _sparse_sign_apply(A, rows, signs, l, nt):  # pragma: no cover - compiled
    m, n = A.shape
    zeta = rows.shape[1]
    acc = np.zeros((nt, l, n), dtype=A.dtype)
    step = (m + nt - 1) // nt
    for b in numba.prange(nt):
        out = acc[b]
        for j in range(b * step, min(m, (b + 1) * step)):
            a = A[j]
            for t in range(zeta):
                o = out[rows[j, t]]
                s = signs[j, t]
                for c in range(n):
                    o[c] += s * a[c]
    res = acc[0]
    for b in range(1, nt):
        res += acc[b]
    return res


def sparse_sign_apply_host(A, rows, signs, l: int) -> np.ndarray:
    """``Gamma @ A`` for ``Gamma[rows[j, t], j] = signs[j, t]`` (host numpy arrays)."""
    A = np.ascontiguousarray(A)
    rows = np.ascontiguousarray(rows, dtype=np.int32)
    signs = np.ascontiguousarray(signs, dtype=A.dtype)
    return _sparse_sign_apply(A, rows, signs, int(l), int(numba.get_num_threads()))
