"""Randomized linear embeddings (sketches), thesis Sec. ``subsec:embedding``.

Three families, each an l x m random matrix ``Gamma`` with ``E[Gamma^H Gamma] = I_m``:

* :func:`gaussian` -- i.i.d. ``N(0, 1/l)`` entries. Sketching cost O(nnz(A) l)
  (thesis Table ``tab:embedding_summary``).
* :func:`srtt` -- subsampled randomized trigonometric transform
  ``Gamma = sqrt(m/l) P_{m->l} T Phi Pi_{m->m}``: a random row permutation ``Pi``, random
  signs ``Phi`` (unit phases for complex), an orthonormal transform ``T`` (DCT-II or
  discrete Hartley for real data, DFT for complex) and a uniform choice of l of the m rows
  ``P``. Cost O(mn log m).
* :func:`sparse_sign` -- ``Gamma = zeta^{-1/2} [s_1, ..., s_m]``, each column holding zeta
  independent Rademacher signs at zeta distinct uniformly random rows. Cost O(nnz(A) zeta);
  never materialised when applied. (The thesis writes the scale as sqrt(m/zeta) in one
  place; 1/sqrt(zeta) is the scaling that gives ``E[Gamma^T Gamma] = I_m`` and the one the
  authors' code uses.)

Every sketch is a pytree (``jit``/``vmap`` friendly: ``jax.vmap(lambda k: gaussian(k, l,
m).apply(A))(keys)`` gives a batch of sketches) with

* ``.apply(A)`` = ``Gamma @ A`` for any operator accepted by :func:`rdr_jax.as_operator`
  (dense, scipy.sparse, BCOO, implicit, factored),
* ``.todense()`` = the l x m matrix, ``.adjoint_dense()`` = ``Gamma^H`` (m x l),
* ``.shape`` = (l, m).

``l``, ``m`` and ``zeta`` are Python ints (static under jit). The same key always gives the
same sketch, with or without jit.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, ClassVar, Union

import jax
import jax.numpy as jnp
import numpy as np

from rdr_jax._src import jit as _jit
from rdr_jax._src import validation as V
from rdr_jax.operators import pytree_dataclass, as_operator

__all__ = ["gaussian", "srtt", "sparse_sign", "make_sketch", "as_sketch", "SKETCHES",
           "Gaussian", "SRTT", "SparseSign", "GaussianSketch", "SRTTSketch", "SparseSignSketch",
           "hash_normal"]


class _Sketch:
    """Shared part of the sketch protocol."""

    l: int
    m: int

    @property
    def shape(self) -> tuple[int, int]:
        return (self.l, self.m)

    def apply(self, A):
        """``Gamma @ A`` for a matrix or operator A with ``m`` rows."""
        op = as_operator(A)
        if op.shape[0] != self.m:
            raise ValueError(f"A has {op.shape[0]} rows but the sketch has m = {self.m} "
                             f"columns (sketch shape {self.shape})")
        return op.apply_sketch(self)

    def __matmul__(self, A):
        return self.apply(A)

    def _out_dtype(self, dtype):
        return jnp.result_type(self.dtype, dtype if dtype is not None else self.dtype)

    def apply_sparse(self, S):
        """``Gamma @ S`` for a :class:`~rdr_jax.operators.SparseOperator`: ``(S^H Gamma^H)^H``."""
        return S.rmatmat(self.adjoint_dense(S.dtype)).conj().T

    def adjoint_dense(self, dtype=None):
        """``Gamma^H`` as a dense (m x l) array."""
        return self.todense(dtype).conj().T

    def __repr__(self):
        return f"{type(self).__name__}(l={self.l}, m={self.m}, dtype={self.dtype})"


# --------------------------------------------------------------------------------------
# Gaussian
# --------------------------------------------------------------------------------------
_M1 = np.uint32(0x21F0AAAD)
_M2 = np.uint32(0x735A2D97)


def _mix32(x):
    """lowbias32 integer hash (xorshift-multiply, bijective on uint32)."""
    x = x ^ (x >> 16)
    x = x * _M1
    x = x ^ (x >> 15)
    x = x * _M2
    return x ^ (x >> 15)


def hash_normal(key, shape: tuple[int, int], dtype=jnp.float32):
    """Standard normal (l x m) array from a counter-based hash generator.

    Entry (i, j) is ``sqrt(2) erfinv(v)`` with ``v`` uniform on an odd grid in (-1, 1) built from
    ``h = mix(mix(mix(i + s0) ^ mix(j ^ s1)) + s1)`` (one 32-bit word for float32; a second
    word for the 53-bit float64 mantissa), where ``s0, s1`` are 32 random bits drawn from
    ``key`` with ``jax.random.bits`` and ``mix`` is the lowbias32 xorshift-multiply hash.
    Counter-based, so any element is computed independently (parallel, no state);
    3-4x faster than threefry ``jax.random.normal`` on CPU (see ``experiments/bench_sketch.py``).
    Not cryptographic; moments and the embedding property are tested in ``tests/``.
    """
    return _hash_normal(key, tuple(int(d) for d in shape), np.dtype(dtype))


@functools.partial(_jit.jit, static_argnums=(1, 2))
def _hash_normal(key, shape, dtype):
    # jitted so that an eager call is one fused loop, not a dozen full-size temporaries
    s = jax.random.bits(key, (2,), jnp.uint32)
    rows = jax.lax.broadcasted_iota(jnp.uint32, shape, 0)
    cols = jax.lax.broadcasted_iota(jnp.uint32, shape, 1)
    h = _mix32(_mix32(_mix32(rows + s[0]) ^ _mix32(cols ^ s[1])) + s[1])
    # v = 2u - 1 on the odd grid (2x - (2^b - 1)) / 2^b, exact in floating point, in (-1, 1)
    if np.dtype(dtype) == np.float64:
        h2 = _mix32(h + s[0])
        x = (h >> 5).astype(jnp.float64) * 67108864.0 + (h2 >> 6).astype(jnp.float64)
        v = (2.0 * x - (2.0 ** 53 - 1)) * (2.0 ** -53)
    else:
        x = (h >> 8).astype(jnp.int32)
        v = (2 * x - (2 ** 24 - 1)).astype(jnp.float32) * np.float32(2.0 ** -24)
    return (np.sqrt(2.0) * jax.lax.erf_inv(v.astype(dtype))).astype(dtype)


@pytree_dataclass(meta=("l", "m", "dtype_", "generator"))
class GaussianSketch(_Sketch):
    """Gaussian embedding with i.i.d. ``N(0, 1/l)`` entries (complex: ``CN(0, 1/l)``).

    Only the key is stored; the matrix is generated where it is used, in the precision of
    the product (so a float32 sketch applied to float64 data is drawn in float64).
    """

    key: jax.Array
    l: int
    m: int
    dtype_: str
    generator: str

    @property
    def dtype(self):
        return np.dtype(self.dtype_)

    def todense(self, dtype=None):
        return _gaussian_dense(self.key, self.l, self.m, np.dtype(self._out_dtype(dtype)),
                               self.generator)

    def apply_dense(self, A, *, precision=None):
        """``Gamma @ A`` at ``precision`` (default: the backend's default matmul precision,
        which ``jax.default_matmul_precision("highest")`` raises; full float32/float64 on
        CPU, TF32 on NVIDIA GPUs, bf16 passes on TPUs)."""
        G = self.todense(A.dtype)
        return jnp.matmul(G, A.astype(G.dtype), precision=precision)

    def apply_sparse(self, S):
        """``Gamma @ S`` for a sparse S: the (l x m) Gamma times S from the left (numba kernel
        on CPU), without forming or transposing ``Gamma^H``."""
        return S.lmatmat(self.todense(S.dtype))


@functools.partial(_jit.jit, static_argnums=(1, 2, 3, 4))
def _gaussian_dense(key, l, m, dt, generator):
    """Gamma (l x m) of a GaussianSketch, as one jitted computation (an eager call writes the
    matrix once instead of materialising the unscaled draw first)."""
    draw = _GENERATORS[generator]
    if dt.kind == "c":
        rdt = V.real_dtype(dt)
        kr, ki = jax.random.split(key)
        G = (draw(kr, (l, m), rdt) + 1j * draw(ki, (l, m), rdt))
        return (G / np.sqrt(2 * l)).astype(dt)
    return draw(key, (l, m), dt) / np.asarray(np.sqrt(l), dt)


_GENERATORS: dict[str, Callable] = {
    "threefry": lambda key, shape, dtype: jax.random.normal(key, shape, dtype),
    "hash": hash_normal,
}


def gaussian(key, l: int, m: int, *, dtype=None, generator: str = "hash") -> GaussianSketch:
    """Gaussian embedding ``Gamma`` (l x m), entries i.i.d. ``N(0, 1/l)`` (thesis Sec. 2.2.2 (1)).

    ``E[Gamma^H Gamma] = I_m``; with ``l = k + p`` it solves the randomized rangefinder
    problem with ``E||A - A X^+ X||_F^2 <= (l-1)/(l-k-1) ||A - A_k||_F^2`` for ``X = Gamma A``
    (thesis Eq. ``eq:rand_rangefinder_error_bound``).

    Args:
      key: a ``jax.random.key``.
      l: sketch size (static int >= 1).
      m: number of columns of Gamma = rows of the matrices it is applied to (static int).
      dtype: float32/float64/complex64/complex128 (default float64 under x64, else float32).
      generator: ``"hash"`` (default; :func:`hash_normal`, 3-5x faster than threefry on CPU,
        where generation would otherwise cost more than the GEMM it feeds) or ``"threefry"``
        (``jax.random.normal`` with the key's own implementation).

    Example:
      >>> S = gaussian(jax.random.key(0), 20, 1000)
      >>> S.apply(jnp.ones((1000, 5))).shape
      (20, 5)
    """
    key = V.check_key(key)
    l = V.check_int("l", l, low=1)
    m = V.check_int("m", m, low=1)
    if generator not in _GENERATORS:
        raise ValueError(f"generator must be one of {sorted(_GENERATORS)}; got {generator!r}")
    dt = V.check_dtype("dtype", dtype if dtype is not None else V.default_float())
    return GaussianSketch(key, l, m, dt.name, generator)


# --------------------------------------------------------------------------------------
# SRTT
# --------------------------------------------------------------------------------------
def _hartley(X, axis=0):
    F = jnp.fft.fft(X, axis=axis, norm="ortho")
    return (F.real - F.imag).astype(X.dtype)


_TRANSFORMS = {
    # name: (forward along axis 0, adjoint along axis 0)
    "dct": (lambda X: jax.scipy.fft.dct(X, type=2, norm="ortho", axis=0),
            lambda X: jax.scipy.fft.idct(X, type=2, norm="ortho", axis=0)),
    "hartley": (_hartley, _hartley),  # the orthonormal DHT is symmetric and involutory
    "fft": (lambda X: jnp.fft.fft(X, axis=0, norm="ortho"),
            lambda X: jnp.fft.ifft(X, axis=0, norm="ortho")),
}


@pytree_dataclass(meta=("l", "m", "dtype_", "transform", "permute"))
class SRTTSketch(_Sketch):
    """``Gamma = sqrt(m/l) P T Phi Pi`` (see :func:`srtt`)."""

    perm: jax.Array   # (m,) row permutation Pi (identity when permute=False)
    signs: jax.Array  # (m,) +-1 (real) or unit phases (complex)
    rows: jax.Array   # (l,) distinct rows kept by P
    l: int
    m: int
    dtype_: str
    transform: str
    permute: bool

    @property
    def dtype(self):
        return np.dtype(self.dtype_)

    def apply_dense(self, A):
        dt = self._out_dtype(A.dtype)
        X = A.astype(dt)
        if self.permute:
            X = X[self.perm]
        X = X * self.signs.astype(dt)[:, None]
        X = _TRANSFORMS[self.transform][0](X)
        return X[self.rows] * np.asarray(math.sqrt(self.m / self.l), V.real_dtype(dt))

    def todense(self, dtype=None):
        dt = self._out_dtype(dtype)
        return self.apply_dense(jnp.eye(self.m, dtype=dt))

    def adjoint_dense(self, dtype=None):
        """``Gamma^H = sqrt(m/l) Pi^T Phi^H T^H P^T``, O(ml log m), without forming Gamma."""
        dt = self._out_dtype(dtype)
        E = jnp.zeros((self.m, self.l), dt).at[self.rows, jnp.arange(self.l)].set(1)
        X = _TRANSFORMS[self.transform][1](E).astype(dt)
        X = X * self.signs.astype(dt).conj()[:, None]
        if self.permute:
            X = jnp.zeros_like(X).at[self.perm].set(X)
        return X * np.asarray(math.sqrt(self.m / self.l), V.real_dtype(dt))


def srtt(key, l: int, m: int, *, dtype=None, transform: str | None = None,
         permute: bool = True) -> SRTTSketch:
    """Subsampled randomized trigonometric transform (thesis Sec. 2.2.2 (2)).

    ``Gamma = sqrt(m/l) P_{m->l} T Phi Pi_{m->m}`` with ``Pi`` a uniformly random row
    permutation (skip with ``permute=False``), ``Phi`` i.i.d. Rademacher signs (uniform unit
    phases for complex dtypes), ``T`` an orthonormal trigonometric transform along the m
    axis and ``P`` a uniformly random choice of l distinct rows. ``E[P^T P] = (l/m) I`` so
    ``E[Gamma^H Gamma] = I_m``. Applying it to a dense m x n matrix costs O(mn log m).

    Args:
      key: a ``jax.random.key``.
      l: sketch size, ``1 <= l <= m`` (static).
      m: ambient dimension (static).
      dtype: real dtypes use ``transform="dct"`` (default) or ``"hartley"``; complex dtypes
        use ``"fft"``.
      transform: ``"dct"``, ``"hartley"`` or ``"fft"`` (complex only).
      permute: include the random permutation ``Pi`` (the thesis' definition).
    """
    key = V.check_key(key)
    m = V.check_int("m", m, low=1)
    l = V.check_int("l", l, low=1, high=m, high_desc="an SRTT keeps l of the m rows")
    dt = V.check_dtype("dtype", dtype if dtype is not None else V.default_float())
    if transform is None:
        transform = "fft" if dt.kind == "c" else "dct"
    if transform not in _TRANSFORMS:
        raise ValueError(f"transform must be one of {sorted(_TRANSFORMS)}; got {transform!r}")
    if (transform == "fft") != (dt.kind == "c"):
        raise ValueError(f"transform={transform!r} does not match dtype {dt}: use 'dct' or "
                         "'hartley' for real sketches and 'fft' for complex ones")
    kp, ks, kr = jax.random.split(key, 3)
    perm = jax.random.permutation(kp, m).astype(jnp.int32)
    if dt.kind == "c":
        signs = jnp.exp(2j * jnp.pi * jax.random.uniform(ks, (m,), V.real_dtype(dt))).astype(dt)
    else:
        signs = jax.random.rademacher(ks, (m,), dtype=dt)
    rows = jax.random.choice(kr, m, (l,), replace=False).astype(jnp.int32)
    return SRTTSketch(perm, signs, rows, l, m, dt.name, transform, bool(permute))


# --------------------------------------------------------------------------------------
# Sparse sign
# --------------------------------------------------------------------------------------
@pytree_dataclass(meta=("l", "m", "zeta", "dtype_"))
class SparseSignSketch(_Sketch):
    """``Gamma[rows[j, t], j] = signs[j, t]`` (signs are +-1/sqrt(zeta)); see :func:`sparse_sign`."""

    rows: jax.Array   # (m, zeta) int32, distinct within each column
    signs: jax.Array  # (m, zeta) +-1/sqrt(zeta)
    l: int
    m: int
    zeta: int
    dtype_: str

    @property
    def dtype(self):
        return np.dtype(self.dtype_)

    def todense(self, dtype=None):
        dt = self._out_dtype(dtype)
        cols = jnp.broadcast_to(jnp.arange(self.m)[:, None], self.rows.shape)
        return jnp.zeros((self.l, self.m), dt).at[self.rows, cols].add(self.signs.astype(dt))

    def apply_dense(self, A, *, impl: str = "auto"):
        """``Gamma @ A`` for a dense A (m x n): O(mn zeta) work, one read of A, Gamma never
        formed.

        Row ``i`` of the result is ``sum_{(j, t): rows[j, t] = i} signs[j, t] A[j]``.
        ``impl="auto"`` calls ``rdr_jax._src.kernels.sparse_sign_matmul``, a JAX primitive: on
        CPU a multithreaded numba kernel reached through the XLA FFI (A streamed once; equally
        fast eagerly and inside ``jit``); on GPU/TPU, and on CPU when the kernels are off
        (``RDR_JAX_CPU_KERNELS=0``, or a numba/jaxlib the kernels do not support), the
        nonzeros sorted by row once, then summed in sorted segments (GPU/TPU: no contended
        atomics) or multiplied as a CSR matrix (CPU: jaxlib's CSR kernel). It is linear in A with the gather ``Gamma^T G`` as its transpose, so
        ``jax.grad``/``jvp``/``vjp`` stay on the same route, and ``jax.vmap`` over sketches
        (keys) with a shared A stacks them into one (batch l) x m sketch that reads A once.
        ``impl="xla"`` computes the sorted formula without the primitive (a reference; JAX
        differentiates it itself). Complex A is sketched as real and imaginary parts (Gamma
        is real). Timings: ``docs/performance.md``.
        """
        if impl not in ("auto", "xla"):
            raise ValueError(f"impl must be 'auto' or 'xla'; got {impl!r}")
        dt = self._out_dtype(A.dtype)
        A = A.astype(dt)
        if np.dtype(dt).kind == "c":
            return jax.lax.complex(self.apply_dense(A.real, impl=impl),
                                   self.apply_dense(A.imag, impl=impl)).astype(dt)
        signs = self.signs.astype(dt)
        if impl == "xla":
            return _sparse_sign_xla(A, self.rows, signs, self.l)
        from rdr_jax._src import kernels as _kernels
        return _kernels.sparse_sign_matmul(A, self.rows, signs, self.l)

    def apply_sparse(self, S):
        """``Gamma @ S`` for a :class:`rdr_jax.operators.SparseOperator` S, O(nnz(S) zeta).

        Column j of the result is ``sum_i S_ij Gamma[:, i]`` over the nonzeros of column j of
        S, each ``Gamma[:, i]`` holding zeta signs: a JAX primitive
        (``rdr_jax._src.kernels.sparse_sign_sparse_matmul``) that on CPU runs a numba kernel
        over S's CSC order (one output column per task, no atomics) and on GPU/TPU sorts the
        nnz * zeta products by output position and sums sorted segments. Bilinear in (S's
        values, signs), differentiable in both. A complex S is split into real and
        imaginary parts (Gamma is real).
        """
        from rdr_jax._src import kernels as _kernels
        dt = np.dtype(self._out_dtype(S.dtype))
        rdt = V.real_dtype(dt)
        signs = self.signs.astype(rdt)

        def part(values):
            return _kernels.sparse_sign_sparse_matmul(
                values.astype(rdt), self.rows, signs, S.row_c, S.col_c, S.indptr_c, self.l,
                S.shape[1])

        if dt.kind == "c":
            return jax.lax.complex(part(S.data_c.real), part(S.data_c.imag)).astype(dt)
        return part(S.data_c)


def _sparse_sign_xla(A, rows, signs, l):
    """``Gamma @ A`` by the XLA formula of the sparse sign primitive, without the primitive
    (differentiable by JAX itself): the nonzeros sorted by row once, then a sorted segment
    sum (GPU/TPU) or a CSR product (CPU)."""
    from rdr_jax._src import kernels as _kernels
    return _kernels.sparse_sign_xla(A, rows, signs, l)


def _distinct_rows(key, m: int, l: int, zeta: int):
    """zeta distinct uniform rows in [0, l) for each of m columns (Floyd's algorithm)."""
    picks = jnp.zeros((m, zeta), jnp.int32)
    keys = jax.random.split(key, zeta)
    for t, j in enumerate(range(l - zeta, l)):
        cand = jax.random.randint(keys[t], (m,), 0, j + 1, dtype=jnp.int32)
        dup = jnp.any(picks[:, :t] == cand[:, None], axis=1) if t else jnp.zeros((m,), bool)
        picks = picks.at[:, t].set(jnp.where(dup, j, cand))
    return picks


def sparse_sign(key, l: int, m: int, zeta: int = 8, *, dtype=None) -> SparseSignSketch:
    """Sparse sign embedding (thesis Sec. 2.2.2 (3)): zeta nonzeros +-1/sqrt(zeta) per column.

    Each column holds zeta i.i.d. Rademacher signs at zeta distinct uniformly random rows
    (drawn with Floyd's algorithm), so ``E[Gamma^T Gamma] = I_m``. Applying it costs
    O(nnz(A) zeta) and never forms Gamma; the default zeta = 8 follows thesis Sec. 2.2.2
    (``zeta = min(l, 8)`` in practice).

    Args:
      key: a ``jax.random.key``.
      l: sketch size (static).
      m: ambient dimension (static).
      zeta: nonzeros per column, ``1 <= zeta <= l`` (static).
      dtype: float32/float64 (complex data can still be sketched by a real sketch).
    """
    key = V.check_key(key)
    l = V.check_int("l", l, low=1)
    m = V.check_int("m", m, low=1)
    zeta = V.check_int("zeta", zeta, low=1, high=l, high_desc="at most l nonzeros per column")
    dt = V.check_dtype("dtype", dtype if dtype is not None else V.default_float(),
                       allow_complex=False)
    kr, ks = jax.random.split(key)
    rows = _distinct_rows(kr, m, l, zeta)
    signs = jax.random.rademacher(ks, (m, zeta), dtype=dt) / np.asarray(np.sqrt(zeta), dt)
    return SparseSignSketch(rows, signs, l, m, zeta, dt.name)


# --------------------------------------------------------------------------------------
# Sketch choices: small frozen, hashable objects (static under jit)
# --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Gaussian:
    """Choice of a Gaussian embedding (:func:`rdr_jax.sketching.gaussian`), e.g.
    ``rsvd(key, A, k, sketch=Gaussian())``.

    ``generator="hash"`` (default, :func:`rdr_jax.sketching.hash_normal`: a counter-based
    generator 3-5x faster than threefry on CPU, where generating the l x m matrix otherwise
    costs more than the GEMM it feeds) or ``"threefry"`` (``jax.random.normal``).
    """

    generator: str = "hash"

    name: ClassVar[str] = "gaussian"
    streamable: ClassVar[bool] = True

    def __post_init__(self):
        if self.generator not in _GENERATORS:
            raise ValueError(f"generator must be one of {sorted(_GENERATORS)}; "
                             f"got {self.generator!r}")

    def draw(self, key, l: int, m: int, *, dtype=None) -> GaussianSketch:
        """The l x m embedding for ``key`` (key first, like ``jax.random``)."""
        return gaussian(key, l, m, dtype=dtype, generator=self.generator)


@dataclasses.dataclass(frozen=True)
class SRTT:
    """Choice of a subsampled randomized trigonometric transform (:func:`rdr_jax.sketching.srtt`).
    ``transform=None`` picks ``"dct"`` for real and ``"fft"`` for complex data."""

    transform: str | None = None
    permute: bool = True

    name: ClassVar[str] = "srtt"
    streamable: ClassVar[bool] = False

    def __post_init__(self):
        if self.transform is not None and self.transform not in _TRANSFORMS:
            raise ValueError(f"transform must be one of {sorted(_TRANSFORMS)} or None; "
                             f"got {self.transform!r}")

    def draw(self, key, l: int, m: int, *, dtype=None) -> SRTTSketch:
        dt = V.check_dtype("dtype", dtype if dtype is not None else V.default_float())
        transform = self.transform
        if transform is not None and (transform == "fft") != (dt.kind == "c"):
            transform = None  # a real transform for complex data (or vice versa): use the default
        return srtt(key, l, m, dtype=dt, transform=transform, permute=self.permute)


@dataclasses.dataclass(frozen=True)
class SparseSign:
    """Choice of a sparse sign embedding (:func:`rdr_jax.sketching.sparse_sign`) with
    ``zeta`` nonzeros per column (default 8; ``min(zeta, l)`` is used, the thesis'
    ``zeta = min(l, 8)``)."""

    zeta: int = 8

    name: ClassVar[str] = "sparse_sign"
    streamable: ClassVar[bool] = True

    def __post_init__(self):
        V.check_int("zeta", self.zeta, low=1)

    def draw(self, key, l: int, m: int, *, dtype=None) -> SparseSignSketch:
        if dtype is not None and np.dtype(dtype).kind == "c":
            dtype = V.real_dtype(dtype)  # a real sketch applies to complex data
        return sparse_sign(key, l, m, min(self.zeta, int(l)), dtype=dtype)


#: the friendly spelling of each sketch choice
SKETCHES: dict[str, type] = {"gaussian": Gaussian, "srtt": SRTT, "sparse_sign": SparseSign}
SketchChoice = Union[Gaussian, SRTT, SparseSign]


def as_sketch(sketch: Any, **options: Any) -> SketchChoice:
    """The sketch choice object for a name (``"gaussian"``, ``"srtt"``, ``"sparse_sign"``)
    or an existing choice (returned unchanged).

    ``options`` are the choice's fields for a name (``as_sketch("sparse_sign", zeta=4)``).

    Raises:
      ValueError: unknown name or option.
    """
    if isinstance(sketch, (Gaussian, SRTT, SparseSign)):
        if options:
            raise ValueError(f"options {sorted(options)} given with a sketch object {sketch!r}; "
                             "set them on the object instead")
        return sketch
    if not isinstance(sketch, str) or sketch.lower() not in SKETCHES:
        raise ValueError(f"sketch must be one of {sorted(SKETCHES)} or a sketch object "
                         f"(Gaussian(), SRTT(), SparseSign()); got {sketch!r}")
    cls = SKETCHES[sketch.lower()]
    try:
        return cls(**options)
    except TypeError as e:
        fields = [f.name for f in dataclasses.fields(cls)]
        raise ValueError(f"sketch {sketch!r} takes options {fields}; got {sorted(options)}") from e


def make_sketch(key, sketch: Any, l: int, m: int, *, dtype=None, **options: Any):
    """Draw an l x m embedding: ``make_sketch(key, "sparse_sign", l, m, zeta=4)`` or
    ``make_sketch(key, SparseSign(zeta=4), l, m)`` (key first, like ``jax.random``).

    Returns a :class:`GaussianSketch`, :class:`SRTTSketch` or :class:`SparseSignSketch`.
    """
    return as_sketch(sketch, **options).draw(key, l, m, dtype=dtype)
