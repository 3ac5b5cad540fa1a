"""Randomized linear embeddings (sketches), thesis Sec. 2.2.3.

Three sketches, each an l x m random matrix ``Gamma`` with ``E[Gamma^H Gamma] = I_m``:
:class:`Gaussian` (i.i.d. ``N(0, 1/l)``), :class:`SRTT` (subsampled randomized trigonometric
transform) and :class:`SparseSign` (zeta signs per column). ``Gaussian()`` is the choice (a
static, hashable configuration, also spelled ``"gaussian"``); ``Gaussian().draw(key, l, m)``
or ``make_sketch(key, "gaussian", l, m)`` the drawn sketch, a pytree with ``apply(A) = Gamma
A``, ``todense()``, ``adjoint_dense()`` and ``shape``. The same key gives the same sketch,
with or without jit. Costs and derivations: ``docs/operators.md``.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, ClassVar, Union

import jax
import jax.numpy as jnp
import numpy as np

from rdr_jax._src import deprecation
from rdr_jax._src import jit as _jit
from rdr_jax._src import validation as V
from rdr_jax.operators import as_operator, pytree_dataclass

__all__ = ["Gaussian", "SRTT", "SparseSign", "SKETCHES", "as_sketch", "make_sketch",
           "hash_normal"]


class _Sketch:
    """Shared part of the three sketches: a choice (``l is None``) or a drawn l x m sketch."""

    l: int | None
    m: int | None
    dtype_: str | None
    _choice: ClassVar[tuple[str, ...]] = ()

    @property
    def shape(self) -> tuple[int, int]:
        return (self.l, self.m)

    @property
    def dtype(self):
        return None if self.dtype_ is None else np.dtype(self.dtype_)

    def apply(self, A):
        """``Gamma @ A`` for a matrix or operator A with ``m`` rows."""
        if self.l is None:
            raise ValueError(f"{self!r} is a sketch choice: draw the matrix first, "
                             f"{type(self).__name__}(...).draw(key, l, m)")
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

    def choice(self):
        """The configuration alone (a drawn sketch without its matrix)."""
        return type(self)(*(getattr(self, f) for f in self._choice))

    def __repr__(self):
        if self.l is None:
            args = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._choice)
            return f"{type(self).__name__}({args})"
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
    """Standard normal array of ``shape`` from a counter-based hash of (row, column, key).

    Args:
      key: ``jax.random.key`` (32 random bits seed the hash).
      shape: (l, m), static.
      dtype: float32 or float64 (a second hash word fills the 53-bit mantissa).

    Returns:
      ``sqrt(2) erfinv(v)``, ``v`` uniform on an odd grid in (-1, 1). Why: any entry is
      computed independently (parallel, no state, the same on any number of devices) and it
      is 3-4x faster than threefry on CPU (``docs/operators.md``). Not cryptographic.
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


_GENERATORS: dict[str, Callable] = {
    "threefry": lambda key, shape, dtype: jax.random.normal(key, shape, dtype),
    "hash": hash_normal,
}


@pytree_dataclass(meta=("generator", "l", "m", "dtype_"))
class Gaussian(_Sketch):
    """Gaussian embedding, entries i.i.d. ``N(0, 1/l)`` (complex: ``CN(0, 1/l)``), thesis
    Sec. 2.2.3 (1): with ``l = k + p`` it solves the randomized rangefinder problem.

    Args:
      generator: ``"hash"`` (default, :func:`rdr_jax.sketching.hash_normal`; why: on CPU generating Gamma with
        threefry costs more than the GEMM it feeds) or ``"threefry"`` (``jax.random.normal``).

    A drawn sketch stores only its key; Gamma is generated where it is used, in the
    precision of the product.
    """

    generator: str = "hash"
    key: jax.Array | None = None
    l: int | None = None
    m: int | None = None
    dtype_: str | None = None

    name: ClassVar[str] = "gaussian"
    streamable: ClassVar[bool] = True
    _choice: ClassVar[tuple[str, ...]] = ("generator",)

    def __post_init__(self):
        if self.generator not in _GENERATORS:
            raise ValueError(f"generator must be one of {sorted(_GENERATORS)}; "
                             f"got {self.generator!r}")

    def draw(self, key, l: int, m: int, *, dtype=None) -> Gaussian:
        """The l x m sketch for ``key`` (dtype default: float64 under x64, else float32)."""
        return _gaussian(key, l, m, dtype=dtype, generator=self.generator)

    def todense(self, dtype=None):
        return _gaussian_dense(self.key, self.l, self.m, np.dtype(self._out_dtype(dtype)),
                               self.generator)

    def apply_dense(self, A, *, precision=None):
        """``Gamma @ A`` at ``precision`` (default: the backend's default matmul precision)."""
        G = self.todense(A.dtype)
        return jnp.matmul(G, A.astype(G.dtype), precision=precision)

    def apply_sparse(self, S):
        """``Gamma @ S`` for a sparse S as a left product (no ``Gamma^H`` formed)."""
        return S.lmatmat(self.todense(S.dtype))


@functools.partial(_jit.jit, static_argnums=(1, 2, 3, 4))
def _gaussian_dense(key, l, m, dt, generator):
    """Gamma (l x m) of a drawn :class:`Gaussian`, jitted so an eager call writes it once."""
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


def _gaussian(key, l: int, m: int, *, dtype=None, generator: str = "hash") -> Gaussian:
    key = V.check_key(key)
    l = V.check_int("l", l, low=1)
    m = V.check_int("m", m, low=1)
    if generator not in _GENERATORS:
        raise ValueError(f"generator must be one of {sorted(_GENERATORS)}; got {generator!r}")
    dt = V.check_dtype("dtype", dtype if dtype is not None else V.default_float())
    return Gaussian(generator, key, l, m, dt.name)


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


@pytree_dataclass(meta=("transform", "permute", "l", "m", "dtype_"))
class SRTT(_Sketch):
    """Subsampled randomized trigonometric transform ``Gamma = sqrt(m/l) P T Phi Pi``, thesis
    Sec. 2.2.3 (2): a random row permutation ``Pi``, random signs ``Phi`` (unit phases for
    complex), an orthonormal transform ``T`` and l uniformly chosen rows ``P``; O(mn log m)
    for a dense m x n matrix.

    Args:
      transform: ``"dct"`` or ``"hartley"`` (real), ``"fft"`` (complex); None picks ``"dct"``
        for real and ``"fft"`` for complex data.
      permute: include ``Pi`` (the thesis' definition).
    """

    transform: str | None = None
    permute: bool = True
    perm: jax.Array | None = None    # (m,) row permutation Pi
    signs: jax.Array | None = None   # (m,) +-1 or unit phases
    rows: jax.Array | None = None    # (l,) distinct rows kept by P
    l: int | None = None
    m: int | None = None
    dtype_: str | None = None

    name: ClassVar[str] = "srtt"
    streamable: ClassVar[bool] = False
    _choice: ClassVar[tuple[str, ...]] = ("transform", "permute")

    def __post_init__(self):
        if self.transform is not None and self.transform not in _TRANSFORMS:
            raise ValueError(f"transform must be one of {sorted(_TRANSFORMS)} or None; "
                             f"got {self.transform!r}")

    def draw(self, key, l: int, m: int, *, dtype=None) -> SRTT:
        """The l x m sketch for ``key`` (``1 <= l <= m``)."""
        dt = V.check_dtype("dtype", dtype if dtype is not None else V.default_float())
        transform = self.transform
        if transform is not None and (transform == "fft") != (dt.kind == "c"):
            transform = None  # a real transform for complex data (or vice versa): use the default
        return _srtt(key, l, m, dtype=dt, transform=transform, permute=self.permute)

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


def _srtt(key, l: int, m: int, *, dtype=None, transform: str | None = None,
          permute: bool = True) -> SRTT:
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
    return SRTT(transform, bool(permute), perm, signs, rows, l, m, dt.name)


# --------------------------------------------------------------------------------------
# Sparse sign
# --------------------------------------------------------------------------------------
@pytree_dataclass(meta=("zeta", "l", "m", "dtype_"))
class SparseSign(_Sketch):
    """Sparse sign embedding, thesis Sec. 2.2.3 (3): each column holds zeta signs
    ``+-1/sqrt(zeta)`` at distinct uniformly random rows; applied in O(nnz(A) zeta) without
    forming Gamma.

    Args:
      zeta: nonzeros per column (default 8; ``min(zeta, l)`` is used, the thesis'
        ``zeta = min(l, 8)``).

    A drawn sketch holds ``Gamma[rows[j, t], j] = signs[j, t]``; it is real (complex data is
    sketched part by part).
    """

    zeta: int = 8
    rows: jax.Array | None = None    # (m, zeta) int32, distinct within each column
    signs: jax.Array | None = None   # (m, zeta) +-1/sqrt(zeta)
    l: int | None = None
    m: int | None = None
    dtype_: str | None = None

    name: ClassVar[str] = "sparse_sign"
    streamable: ClassVar[bool] = True
    _choice: ClassVar[tuple[str, ...]] = ("zeta",)

    def __post_init__(self):
        V.check_int("zeta", self.zeta, low=1)

    def draw(self, key, l: int, m: int, *, dtype=None) -> SparseSign:
        """The l x m sketch for ``key`` (a complex ``dtype`` gives its real counterpart)."""
        if dtype is not None and np.dtype(dtype).kind == "c":
            dtype = V.real_dtype(dtype)  # a real sketch applies to complex data
        return _sparse_sign(key, l, m, min(self.zeta, int(l)), dtype=dtype)

    def todense(self, dtype=None):
        dt = self._out_dtype(dtype)
        cols = jnp.broadcast_to(jnp.arange(self.m)[:, None], self.rows.shape)
        return jnp.zeros((self.l, self.m), dt).at[self.rows, cols].add(self.signs.astype(dt))

    def apply_dense(self, A, *, impl: str = "auto"):
        """``Gamma @ A`` for a dense A (m x n) in O(mn zeta), reading A once.

        ``impl="auto"``: the sparse-sign primitive of ``rdr_jax._src.kernels`` (a numba
        kernel on CPU, sorted segment sums on GPU/TPU; differentiable, batches under vmap);
        ``"xla"``: the same formula without the primitive (a reference).
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
        """``Gamma @ S`` for a :class:`~rdr_jax.operators.SparseOperator` in O(nnz(S) zeta), by
        the sparse-times-sparse-sign primitive over S's CSC order."""
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
    """``Gamma @ A`` by the primitive's XLA formula, without the primitive (a reference)."""
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


def _sparse_sign(key, l: int, m: int, zeta: int = 8, *, dtype=None) -> SparseSign:
    key = V.check_key(key)
    l = V.check_int("l", l, low=1)
    m = V.check_int("m", m, low=1)
    zeta = V.check_int("zeta", zeta, low=1, high=l, high_desc="at most l nonzeros per column")
    dt = V.check_dtype("dtype", dtype if dtype is not None else V.default_float(),
                       allow_complex=False)
    kr, ks = jax.random.split(key)
    rows = _distinct_rows(kr, m, l, zeta)
    signs = jax.random.rademacher(ks, (m, zeta), dtype=dt) / np.asarray(np.sqrt(zeta), dt)
    return SparseSign(zeta, rows, signs, l, m, dt.name)


# --------------------------------------------------------------------------------------
#: the name of each sketch
SKETCHES: dict[str, type] = {"gaussian": Gaussian, "srtt": SRTT, "sparse_sign": SparseSign}
SketchChoice = Union[Gaussian, SRTT, SparseSign]


def as_sketch(sketch: Any, **options: Any) -> SketchChoice:
    """The sketch choice for a name (``"gaussian"``, ``"srtt"``, ``"sparse_sign"``) with the
    choice's fields as ``options`` (``as_sketch("sparse_sign", zeta=4)``), or for a sketch
    object (a drawn sketch gives its choice).

    Raises:
      ValueError: unknown name or option.
    """
    if isinstance(sketch, (Gaussian, SRTT, SparseSign)):
        if options:
            raise ValueError(f"options {sorted(options)} given with a sketch object {sketch!r}; "
                             "set them on the object instead")
        return sketch if sketch.l is None else sketch.choice()
    if not isinstance(sketch, str) or sketch.lower() not in SKETCHES:
        raise ValueError(f"sketch must be one of {sorted(SKETCHES)} or a sketch object "
                         f"(Gaussian(), SRTT(), SparseSign()); got {sketch!r}")
    cls = SKETCHES[sketch.lower()]
    if not set(options) <= set(cls._choice):
        raise ValueError(f"sketch {sketch!r} takes options {list(cls._choice)}; "
                         f"got {sorted(options)}")
    return cls(**options)


def make_sketch(key, sketch: Any, l: int, m: int, *, dtype=None, **options: Any):
    """The l x m sketch ``as_sketch(sketch, **options).draw(key, l, m, dtype=dtype)``, e.g.
    ``make_sketch(key, "sparse_sign", l, m, zeta=4)`` (key first, like ``jax.random``)."""
    return as_sketch(sketch, **options).draw(key, l, m, dtype=dtype)


#: old names (0.1) -> (the new spelling, the object), each with a DeprecationWarning
_DEPRECATED = {
    "GaussianSketch": ("rdr_jax.sketching.Gaussian", Gaussian),
    "SRTTSketch": ("rdr_jax.sketching.SRTT", SRTT),
    "SparseSignSketch": ("rdr_jax.sketching.SparseSign", SparseSign),
    "gaussian": ("Gaussian(generator).draw(key, l, m)", _gaussian),
    "srtt": ("SRTT(transform, permute).draw(key, l, m)", _srtt),
    "sparse_sign": ("SparseSign(zeta).draw(key, l, m)", _sparse_sign),
}


def __getattr__(name):
    if name in _DEPRECATED:
        new, obj = _DEPRECATED[name]
        deprecation.warn(f"rdr_jax.sketching.{name}", new)
        return obj
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
