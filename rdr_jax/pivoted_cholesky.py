"""Randomly pivoted Cholesky (RPCholesky) for positive-semidefinite (kernel) matrices, plain
and accelerated, with uniform and greedy pivoting as baselines.

Chen, Epperly, Tropp & Webber, "Randomly pivoted Cholesky: practical approximation of a
kernel matrix with few entry evaluations", CPAM 2024 (arXiv 2207.06503), Algorithm 1;
Epperly, Tropp & Webber, "Embrace rejection: kernel matrix approximation by accelerated
randomly pivoted Cholesky" (arXiv 2410.03969). The math, the random draws and measurements:
``docs/rpcholesky.md``.

A PSD ``N x N`` matrix is given densely or as an *entry oracle* (:class:`PSDEntries`,
:func:`kernel_entries`): only its diagonal and the rows of the chosen pivots are evaluated,
never the whole matrix.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rdr_jax._src import dense as D
from rdr_jax._src import validation as V
from rdr_jax._src.jit import jit

__all__ = ["rpcholesky", "PartialCholesky", "PSDEntries", "KernelEntries", "kernel_entries",
           "RPCHOLESKY_METHODS"]

#: the pivot rules of :func:`rpcholesky`
RPCHOLESKY_METHODS = ("rpc", "accelerated", "greedy", "uniform")
_KERNELS = ("gaussian", "laplace")


class PartialCholesky(NamedTuple):
    """A Nystrom approximation ``A ~ F F^H`` from the columns ``pivots``: pivots (k,), F
    (N x k; a partial Cholesky factor, column i from pivot i, except for "uniform"),
    trace_error ``tr(A - F F^H)`` (from the residual diagonal), entries_evaluated (entries
    of A read: diagonal, pivot rows, blocks)."""

    pivots: jax.Array
    F: jax.Array
    trace_error: jax.Array
    entries_evaluated: jax.Array


@dataclasses.dataclass(frozen=True)
class PSDEntries:
    """A PSD matrix given by its entries: ``entries(rows, cols)`` returns ``A[rows][:, cols]``
    for integer index arrays (traceable by jax); ``diag`` is the diagonal (an array of
    shape (n,)) or a function of no arguments that returns it; ``n`` the order; ``dtype``
    float32 or float64. A pytree (a diagonal array is its leaf; the functions are static)."""

    entries: Callable[[jax.Array, jax.Array], jax.Array]
    diag: Any
    n: int
    dtype: Any = np.float32


def _flatten_entries(op):
    if callable(op.diag):
        return (), (op.entries, op.diag, op.n, np.dtype(op.dtype))
    return (op.diag,), (op.entries, None, op.n, np.dtype(op.dtype))


def _unflatten_entries(aux, children):
    entries, diag, n, dtype = aux
    return PSDEntries(entries, children[0] if diag is None else diag, n, dtype)


jax.tree_util.register_pytree_node(PSDEntries, _flatten_entries, _unflatten_entries)


@dataclasses.dataclass(frozen=True)
class KernelEntries:
    """The kernel matrix ``K[i, j] = kappa(X[i], X[j])`` of the points X (N x d), never formed:
    ``gaussian`` ``exp(-||x - y||_2^2 / (2 h^2))``, ``laplace`` ``exp(-||x - y||_1 / h)``
    (the kernels of arXiv 2207.06503's experiments), h = ``bandwidth``. Build it with
    :func:`kernel_entries`; a pytree (X and bandwidth are leaves)."""

    X: jax.Array
    bandwidth: jax.Array
    kernel: str = "gaussian"

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.X.dtype)

    def entries(self, rows, cols):
        """``K[rows][:, cols]`` (differences, not the Gram trick: the diagonal is exactly 1)."""
        diff = self.X[rows][:, None, :] - self.X[cols][None, :, :]
        if self.kernel == "gaussian":
            return jnp.exp(-jnp.sum(diff * diff, axis=-1) / (2 * self.bandwidth ** 2))
        return jnp.exp(-jnp.sum(jnp.abs(diff), axis=-1) / self.bandwidth)

    def diag(self):
        return jnp.ones(self.X.shape[0], self.X.dtype)


jax.tree_util.register_dataclass(KernelEntries, data_fields=["X", "bandwidth"],
                                 meta_fields=["kernel"])


def kernel_entries(X, kernel: str = "gaussian", bandwidth: float = 1.0) -> KernelEntries:
    """The kernel matrix of the rows of ``X`` (N x d, float32/float64) as an entry oracle
    (:class:`KernelEntries`): ``"gaussian"`` ``exp(-||x - y||^2 / (2 bandwidth^2))`` or
    ``"laplace"`` ``exp(-||x - y||_1 / bandwidth)``. Why: RPCholesky reads (k+1)N of its
    N^2 entries, so the matrix is never formed."""
    if kernel not in _KERNELS:
        raise ValueError(f"kernel must be one of {_KERNELS}; got {kernel!r}")
    if not hasattr(X, "shape") or not hasattr(X, "dtype"):
        X = np.asarray(X)
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"X must be a non-empty 2-D array (points x features); got shape "
                         f"{tuple(X.shape)}")
    dt = V.check_dtype("X", X.dtype, allow_complex=False)
    V.check_array_values("X", X)
    if V.is_concrete(bandwidth):
        bw = float(np.asarray(bandwidth))
        if not (np.isfinite(bw) and bw > 0):
            raise ValueError(f"bandwidth must be a finite number > 0; got {bandwidth!r}")
    return KernelEntries(jnp.asarray(X, dt), jnp.asarray(bandwidth, dt), kernel)


# ----------------------------------------------------------------------------------------
# access to A: dense array or oracle
# ----------------------------------------------------------------------------------------
def _is_oracle(A) -> bool:
    return isinstance(A, (PSDEntries, KernelEntries))


def _rows(A, idx, dtype):
    if _is_oracle(A):
        return jnp.asarray(A.entries(idx, jnp.arange(A.n)), dtype)
    return A[idx]


def _block(A, idx, dtype):
    if _is_oracle(A):
        return jnp.asarray(A.entries(idx, idx), dtype)
    return A[idx[:, None], idx[None, :]]


def _diagonal(A, dtype):
    if _is_oracle(A):
        d = A.diag() if callable(A.diag) else A.diag
        return jnp.asarray(d, dtype)
    return jnp.diagonal(A)


def _int():
    """The default integer dtype (int64 with x64, else int32) of the entry counts."""
    return jax.dtypes.canonicalize_dtype(np.int64)


def _sample(d, total, u):
    """Inverse-CDF draws ``s`` with ``P(s = i) = d_i / total`` from uniforms u in [0, 1):
    the first i with ``cumsum(d)_i > u total`` (a zero-weight index is never drawn)."""
    n = d.shape[0]
    s = jnp.searchsorted(jnp.cumsum(d), u * total, side="right")
    last = n - 1 - jnp.argmax((d > 0)[::-1])          # the last index of positive weight
    return jnp.minimum(s, last).astype(jnp.int32)


def _stop_level(trace0, dtype):
    """Residual traces at or below this are rounding noise (the loops stop there)."""
    return 16 * float(np.finfo(dtype).eps) * trace0


def _uniform(key, A, k: int, dtype):
    """Uniform Nystrom: k distinct pivots S drawn uniformly, ``F = A[:, S] V diag(w)^{-1/2}``
    from ``A[S, S] = V diag(w) V^H`` with eigenvalues below ``k eps max(w)`` dropped (the
    pseudo-inverse of ``numpy.linalg.pinv``): stable where a Cholesky of an ill-conditioned
    ``A[S, S]`` is not. Columns of F follow the eigenvalues, not the pivots."""
    d0 = jnp.maximum(_diagonal(A, dtype), 0)
    n = d0.shape[0]
    piv = jax.random.choice(key, n, (k,), replace=False).astype(jnp.int32)
    rows = _rows(A, piv, dtype)                                        # A[S, :], k x N
    W = rows[:, piv]
    W = (W + W.T) / 2
    w, V = jnp.linalg.eigh(W)
    keep = w > k * float(np.finfo(dtype).eps) * jnp.maximum(jnp.max(w), 0)
    scale = jnp.where(keep, 1 / jnp.sqrt(jnp.where(keep, w, 1)), 0)
    G = D.mm((V * scale[None, :]).T, rows)                              # F^H, k x N
    d = jnp.maximum(d0 - jnp.sum(G * G, axis=0), 0).at[piv].set(0)
    return piv, G, d, jnp.asarray((k + 1) * n, _int())


def _sequential(key, A, k: int, method: str, dtype):
    """One pivot per step (rpc, greedy): Algorithm 1 of arXiv 2207.06503 with the pivot
    rule swapped. G (k x N) holds F^H row by row."""
    d0 = jnp.maximum(_diagonal(A, dtype), 0)
    n = d0.shape[0]
    stop = _stop_level(jnp.sum(d0), dtype)
    draws = jax.random.uniform(key, (k,), dtype)

    def body(i, state):
        G, d, piv, chosen = state
        total = jnp.sum(d)
        done = total <= stop
        if method == "rpc":
            s = _sample(d, total, draws[i])
        else:
            s = jnp.argmax(d).astype(jnp.int32)
        # residual at rounding level: pad with unused indices
        s = jnp.where(done, jnp.argmax(~chosen).astype(jnp.int32), s)
        row = _rows(A, s[None], dtype)[0]
        r = row - D.mm(G[:, s][None, :], G)[0]
        ds = d[s]
        ok = (ds > 0) & ~done
        g = jnp.where(ok, r / jnp.sqrt(jnp.where(ok, ds, 1)), 0)
        G = G.at[i].set(g)
        d = jnp.maximum(d - g * g, 0).at[s].set(0)
        return G, d, piv.at[i].set(s), chosen.at[s].set(True)

    state = (jnp.zeros((k, n), dtype), d0, jnp.zeros((k,), jnp.int32), jnp.zeros((n,), bool))
    G, d, piv, _ = jax.lax.fori_loop(0, k, body, state)
    return piv, G, d, jnp.asarray((k + 1) * n, _int())


def _row_chunk(b: int) -> int:
    """Accelerated rows are read in chunks of this many accepted pivots."""
    return max(1, -(-b // 4))


def _accelerated(key, A, k: int, b: int, dtype):
    """Rounds of arXiv 2410.03969: propose b pivots i.i.d. from the residual diagonal d,
    accept proposal j with probability ``H_jj / d_{s_j}`` (H: the b x b residual block,
    Schur-complemented on the proposals accepted before j), then one block Cholesky step on
    the accepted rows."""
    d0 = jnp.maximum(_diagonal(A, dtype), 0)
    n = d0.shape[0]
    c = _row_chunk(b)
    stop = _stop_level(jnp.sum(d0), dtype)
    max_rounds = 4 * k + 16
    ar_b = jnp.arange(b)
    ar_c = jnp.arange(c)

    def reject(H, u, idx, U2, room):
        def step(j, st):
            H, acc, m = st
            hjj = jnp.maximum(H[j, j], 0)
            dup = jnp.any(acc & (idx == idx[j]))
            ok = (U2[j] * u[idx[j]] < hjj) & ~dup & (m < room)
            col = jnp.where(ok & (ar_b > j), H[:, j] / jnp.sqrt(jnp.where(ok, hjj, 1)), 0)
            return H - jnp.outer(col, col), acc.at[j].set(ok), m + ok.astype(jnp.int32)
        _, acc, m = jax.lax.fori_loop(0, b, step, (H, jnp.zeros((b,), bool), jnp.int32(0)))
        return acc, m

    def chunk_body(st):
        j, G, d, piv, chosen, ents, sel, m, count = st
        pos = j * c + ar_c
        valid = pos < m
        sidx = jnp.where(valid, sel[jnp.minimum(pos, b - 1)], sel[0])
        R = _rows(A, sidx, dtype) - D.mm(G[:, sidx].T, G)
        R = jnp.where(valid[:, None], R, 0)
        B = jnp.where(valid[:, None] & valid[None, :], R[:, sidx], jnp.eye(c, dtype=dtype))
        L = D.cholesky(B)
        Gn = D.triangular_solve(L, R, left_side=True, lower=True)
        G = jax.lax.dynamic_update_slice(G, Gn, (count + j * c, jnp.int32(0)))
        piv = jax.lax.dynamic_update_slice(piv, jnp.where(valid, sidx, 0), (count + j * c,))
        drop = jnp.where(valid, sidx, n)
        d = jnp.maximum(d - jnp.sum(Gn * Gn, axis=0), 0).at[drop].set(0, mode="drop")
        chosen = chosen.at[drop].set(True, mode="drop")
        return j + 1, G, d, piv, chosen, ents + c * n, sel, m, count

    def round_body(st):
        G, d, piv, chosen, count, rounds, ents = st
        k1, k2 = jax.random.split(jax.random.fold_in(key, rounds))
        U1 = jax.random.uniform(k1, (b,), dtype)
        U2 = jax.random.uniform(k2, (b,), dtype)
        idx = _sample(d, jnp.sum(d), U1)
        H = _block(A, idx, dtype) - D.mm(G[:, idx].T, G[:, idx])
        acc, m = reject(H, d, idx, U2, k - count)
        sel = idx[jnp.argsort(~acc, stable=True)]
        nch = (m + c - 1) // c
        _, G, d, piv, chosen, ents, *_ = jax.lax.while_loop(
            lambda s: s[0] < nch, chunk_body,
            (jnp.int32(0), G, d, piv, chosen, ents + b * b, sel, m, count))
        return G, d, piv, chosen, count + m, rounds + 1, ents

    def cond(st):
        _, d, _, _, count, rounds, _ = st
        return (count < k) & (jnp.sum(d) > stop) & (rounds < max_rounds)

    state = (jnp.zeros((k + c, n), dtype), d0, jnp.zeros((k + c,), jnp.int32),
             jnp.zeros((n,), bool), jnp.int32(0), jnp.int32(0), jnp.asarray(n, _int()))
    G, d, piv, chosen, count, _, ents = jax.lax.while_loop(cond, round_body, state)
    # pivots left when the residual is rounding noise: unused indices, zero columns of F
    unused = jnp.argsort(chosen, stable=True).astype(jnp.int32)
    slot = jnp.arange(k)
    piv = jnp.where(slot < count, piv[:k], unused[jnp.clip(slot - count, 0, n - 1)])
    return piv, G[:k], d, ents


def _core(key, A, k: int, method: str, b: int):
    dtype = np.dtype(A.dtype)
    if method == "accelerated":
        piv, G, d, ents = _accelerated(key, A, k, b, dtype)
    elif method == "uniform":
        piv, G, d, ents = _uniform(key, A, k, dtype)
    else:
        piv, G, d, ents = _sequential(key, A, k, method, dtype)
    return PartialCholesky(piv, G.T, jnp.sum(d), ents)


_core_jit = jit(_core, static_argnames=("k", "method", "b"))


# ----------------------------------------------------------------------------------------
# public entry point
# ----------------------------------------------------------------------------------------
def _check_matrix(A):
    """Validate A (dense PSD array or oracle); returns A ready for the core."""
    if isinstance(A, PSDEntries):
        if not callable(A.entries):
            raise TypeError(f"A.entries must be callable (rows, cols) -> A[rows][:, cols]; "
                            f"got {type(A.entries).__name__}")
        n = V.check_int("A.n", A.n, low=1)
        dt = V.check_dtype("A.dtype", A.dtype, allow_complex=False)
        diag = A.diag
        if not callable(diag):
            if not hasattr(diag, "shape"):
                diag = np.asarray(diag)
            if tuple(diag.shape) != (n,):
                raise ValueError(f"A.diag must have shape ({n},) (A.n = {n}); got "
                                 f"{tuple(diag.shape)}")
            V.check_array_values("A.diag", diag)
            if V.is_concrete(diag) and np.any(np.asarray(diag) < 0):
                raise ValueError("A.diag has negative entries: A is not positive "
                                 "semidefinite")
            diag = jnp.asarray(diag, dt)
        return PSDEntries(A.entries, diag, n, dt)
    if isinstance(A, KernelEntries):
        if A.kernel not in _KERNELS:
            raise ValueError(f"A.kernel must be one of {_KERNELS}; got {A.kernel!r}")
        return A
    if not hasattr(A, "shape") or not hasattr(A, "dtype"):
        raise TypeError("A must be a dense PSD array, a PSDEntries or a KernelEntries "
                        f"(kernel_entries(X)); got {type(A).__name__}")
    if len(A.shape) != 2 or A.shape[0] != A.shape[1] or A.shape[0] < 1:
        raise ValueError(f"A must be a square non-empty matrix (N x N); got shape "
                         f"{tuple(A.shape)}")
    if np.dtype(A.dtype).kind == "c":
        raise TypeError(f"A must be real (float32/float64); got {np.dtype(A.dtype)}")
    dt = V.check_dtype("A", A.dtype, allow_complex=False)
    V.check_array_values("A", A)
    if V.is_concrete(A):
        a = np.asarray(A)
        if np.any(np.diagonal(a) < 0):
            raise ValueError("A has negative diagonal entries: A is not positive "
                             "semidefinite")
        scale = float(np.max(np.abs(a))) if a.size else 0.0
        if np.max(np.abs(a - a.T)) > 64 * float(np.finfo(dt).eps) * max(scale, 1e-300):
            raise ValueError("A is not symmetric: RPCholesky needs a symmetric PSD matrix")
    return jnp.asarray(A, dt)


def rpcholesky(key, A, k: int, *, method: str = "rpc",
               block_size: int | None = None) -> PartialCholesky:
    """Rank-k partial Cholesky ``A ~ F F^H`` of a PSD matrix with random, greedy or uniform
    pivots, reading only the diagonal and k rows of A.

    ``method="rpc"``: RPCholesky (arXiv 2207.06503, Algorithm 1): pivot ``s_i`` drawn with
    probability ``d_j / sum(d)``, d the diagonal of the current residual
    ``A - F F^H``; (k+1)N entries. ``"accelerated"``: accelerated RPCholesky (arXiv
    2410.03969): rounds of ``block_size`` proposals thinned by rejection sampling, the same
    pivot distribution as "rpc", the rows updated with block products (faster).
    ``"greedy"``: the largest residual diagonal entry (partially pivoted Cholesky);
    ``"uniform"``: k distinct pivots uniformly at random, ``F = A[:, S] (A[S, S]^+)^{1/2}``
    by an eigendecomposition (the Nystrom approximation ``A[:, S] A[S, S]^+ A[S, :]``). Why: a near-optimal Nystrom approximation of a kernel
    matrix from few entry evaluations, never forming it.

    Args:
      key: a JAX PRNG key (unused by "greedy").
      A: a dense real symmetric PSD array (N x N), a :class:`PSDEntries` or a
        :class:`KernelEntries` (:func:`kernel_entries`).
      k: number of pivots, 1 <= k <= N (static).
      method: "rpc", "accelerated", "greedy" or "uniform" (static).
      block_size: proposals per round for "accelerated" (static; default
        ``min(k, max(10, ceil(k / 10)))``); only with "accelerated".

    Returns:
      :class:`PartialCholesky` ``(pivots, F, trace_error, entries_evaluated)``. Residual
      diagonal entries below 0 from rounding are clipped to 0, as in the papers' code. When
      the residual trace falls to rounding level (16 eps tr(A)) the remaining pivots are
      unused indices with zero columns of F.
    """
    key = V.check_key(key)
    if not isinstance(method, str) or method not in RPCHOLESKY_METHODS:
        raise ValueError(f"method must be one of {RPCHOLESKY_METHODS}; got {method!r}")
    A = _check_matrix(A)
    n = int(A.n) if _is_oracle(A) else int(A.shape[0])
    k = V.check_int("k", k, low=1, high=n, high_desc="the order N of A")
    if method == "accelerated":
        b = min(k, max(10, -(-k // 10))) if block_size is None else V.check_int(
            "block_size", block_size, low=1, high=n, high_desc="the order N of A")
    elif block_size is not None:
        raise ValueError(f"block_size applies to method='accelerated' only; got "
                         f"block_size={block_size!r} with method={method!r}")
    else:
        b = 0
    return _core_jit(key, A, k=k, method=method, b=b)
