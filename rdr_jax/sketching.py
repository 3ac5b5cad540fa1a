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
from typing import Any, Callable, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from rdr_jax._src import jit as _jit
from rdr_jax._src import validation as V
from rdr_jax.operators import as_operator, pytree_dataclass

__all__ = ["Sketch", "Gaussian", "SRTT", "SparseSign", "SKETCHES", "as_sketch", "make_sketch",
           "hash_normal"]

#: the name of each sketch (a subclass of :class:`Sketch` with a ``name`` registers itself)
SKETCHES: dict[str, type] = {}


class Sketch:
    """Base of the sketches: a choice (``l is None``) or a drawn l x m sketch. A new sketch is a
    frozen dataclass subclass with ``draw``, ``todense`` and ``apply_dense``, a ``name`` (it
    registers itself in :data:`SKETCHES`) and the declarations below, which the pipeline asks
    instead of testing the class (``docs/design.md``, "Methods as strategy objects")."""

    l: int | None
    m: int | None
    dtype_: str | None
    _choice: ClassVar[tuple[str, ...]] = ()
    #: the friendly name (``Method(sketch="gaussian")``)
    name: ClassVar[str] = ""
    #: ``Gamma`` does not depend on A (an oblivious subspace embedding): ``X = Gamma A``
    #: then also sketches the skeleton block, ``X(:, J) = Gamma A(:, J)``
    oblivious: ClassVar[bool] = True
    #: the first l rows of an l' x m draw (l' >= l) are the l x m draw for the same key, so a
    #: pipeline padded to a rank bucket selects the same skeletons
    prefix_consistent: ClassVar[bool] = False
    #: can be applied block by block in one pass (:func:`rdr_jax.streaming_sketches`)
    streamable: ClassVar[bool] = False
    #: ``Gamma A`` is a matmul at the backend's default precision (TF32/bf16 passes on
    #: accelerators); ``apply_dense(Y, precision=HIGHEST)`` recomputes a product exactly
    default_precision_product: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("name"):
            SKETCHES[cls.name] = cls

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
class Gaussian(Sketch):
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
    prefix_consistent: ClassVar[bool] = True
    default_precision_product: ClassVar[bool] = True
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
# Gamma = sqrt(m/l) P T Phi Pi is applied without a transform of the whole m x n matrix.
# Each transform T is a length-m DFT of reordered rows: y_k = c_k Re(e^{-i pi k/2m} V_k) for
# the DCT-II with Makhoul's order v = (x_0, x_2, x_4, ..., x_5, x_3, x_1); y_k = Re V_k - Im V_k
# for the Hartley transform; y_k = V_k for the DFT (V_k = sum_j v_j e^{-2 pi i jk/m}). The
# reorder is folded into Pi (one gather), and only the l rows of P are needed: with m = p q,
# V_k = sum_{j1 < p} e^{-2 pi i j1 k/m} Z[j1, k mod q], Z[j1] = DFT_q(v_{j1}, v_{j1+p}, ...),
# so each group of q gathered rows gets one FFT of length q along its last axis (after an
# in-cache transpose) and l twiddled terms: O(mn log q + mnl/q), A read once, in place.
# Twiddle phases are exact integers mod 4m (no float argument reduction). For l <= 32 the
# explicit l x m matrix (same phases) times A is cheaper (a GEMM like the Gaussian's).
_SRTT_DENSE_MAX_L = 32      # impl="auto": at most this many rows -> explicit Gamma @ A
_SRTT_MIN_Q = 256           # smallest FFT length (a divisor of m) of the row groups
_SRTT_TILE = 2 ** 19        # CPU: elements of A per loop step (one group of q rows x columns)


def _divisors(x: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(x) + 1) if x % d == 0]
    return sorted(set(small + [x // d for d in small]))


def _mulmod(a, b, M: int, amax: int, bmax: int):
    """``(a * b) mod M`` exactly in uint32 for integers ``0 <= a <= amax < M``, ``0 <= b <=
    bmax``, ``M < 2**31`` (one product when it fits in 32 bits, else digit by digit)."""
    a, b = jnp.asarray(a, jnp.uint32), jnp.asarray(b, jnp.uint32)
    Mu = np.uint32(M)
    if amax * bmax < 2 ** 32:
        return (a * b) % Mu
    c = 32 - (M - 1).bit_length()             # r * 2^c and a * digit stay below 2^32
    r = jnp.zeros(jnp.broadcast_shapes(a.shape, b.shape), jnp.uint32)
    for i in reversed(range(-(-bmax.bit_length() // c))):
        d = (b >> np.uint32(i * c)) & np.uint32((1 << c) - 1)
        r = ((r << np.uint32(c)) % Mu + (a * d) % Mu) % Mu
    return r


def _unit(phase, M: int, rdt):
    """``(cos, sin)`` of ``-2 pi phase / M`` for integer phases in ``[0, M)``."""
    ang = phase.astype(rdt) * np.asarray(-2 * np.pi / M, rdt)
    return jnp.cos(ang), jnp.sin(ang)


def _srtt_order(m: int, transform: str) -> np.ndarray:
    """Row order v of the length-m DFT (Makhoul's for the DCT-II)."""
    if transform == "dct":
        return np.concatenate([np.arange(0, m, 2), np.arange(1, m, 2)[::-1]]).astype(np.int32)
    return np.arange(m, dtype=np.int32)


def _srtt_matrix(sk: SRTT, dt) -> jax.Array:
    """Gamma (l x m) entry by entry from exact integer phases: ``Gamma[t, perm[j]] =
    sqrt(m/l) T[rows[t], j] signs[j]``."""
    m, l, rdt = sk.m, sk.l, V.real_dtype(dt)
    j = jnp.arange(m, dtype=jnp.int32)
    if sk.permute:                           # j = Pi^{-1}(i) for column i
        j = jnp.zeros(m, jnp.int32).at[sk.perm].set(j, unique_indices=True)
    s = sk.signs[j].astype(dt)[None, :]
    k = sk.rows.astype(jnp.uint32)[:, None]
    ju = j.astype(jnp.uint32)[None, :]
    scale = math.sqrt(m / l)
    if sk.transform == "dct":                # cos(pi (2j+1) k / 2m): phase (2jk + k) mod 4m
        ph = (2 * _mulmod(ju, k, 2 * m, m - 1, m - 1) + k) % np.uint32(4 * m)
        c = jnp.where(k == 0, scale / math.sqrt(m), scale * math.sqrt(2 / m)).astype(rdt)
        return _unit(ph, 4 * m, rdt)[0] * c * s
    wr, wi = _unit(_mulmod(ju, k, m, m - 1, m - 1), m, rdt)
    c = np.asarray(scale / math.sqrt(m), rdt)
    if sk.transform == "hartley":
        return (wr - wi) * c * s
    return jax.lax.complex(wr * c, wi * c) * s


def _srtt_twiddles(rows, m: int, q: int, rdt, transform: str, scale: float):
    """Column of Z and weights for each kept row k: real transforms ``y_k = sum_j1 P[j1, k]
    Re Z[j1, col_k] + Q[j1, k] Im Z[j1, col_k]`` (Z from an rfft; ``col_k = k mod q`` folded
    into ``[0, q/2]`` by conjugate symmetry); the DFT ``y_k = sum_j1 W[j1, k] Z[j1, k mod q]``."""
    p = m // q
    k = rows.astype(jnp.uint32)[None, :]
    j1 = jnp.arange(p, dtype=jnp.uint32)[:, None]
    r = (rows % q).astype(jnp.int32)
    if transform == "dct":                   # e^{-i pi k (4 j1 + 1) / 2m}
        wr, wi = _unit(_mulmod(4 * j1 + 1, k, 4 * m, 4 * p - 3, m - 1), 4 * m, rdt)
        c = jnp.where(k == 0, scale / math.sqrt(m), scale * math.sqrt(2 / m)).astype(rdt)
        P, Q = wr * c, -wi * c
    else:                                    # e^{-2 pi i j1 k / m}
        wr, wi = _unit(_mulmod(j1, k, m, p - 1, m - 1), m, rdt)
        c = np.asarray(scale / math.sqrt(m), rdt)
        if transform == "fft":
            return r, (jax.lax.complex(wr * c, wi * c),)
        P, Q = (wr - wi) * c, -(wr + wi) * c
    flip = r > q // 2                        # Z[q - r] = conj(Z[r]) for real data
    return jnp.where(flip, q - r, r), (P, jnp.where(flip, -Q, Q))


def _srtt_fft(sk: SRTT, X, q: int, tile: int | None):
    """``Gamma @ X`` through FFTs of length q over groups of q rows (see above); ``tile``: at
    most this many elements per loop step (None: all groups at once)."""
    (m, n), l, transform = X.shape, sk.l, sk.transform
    p = m // q
    order = _srtt_order(m, transform)
    gidx = sk.perm[order] if sk.permute else jnp.asarray(order)
    gsgn = sk.signs[order].astype(X.dtype)
    idx = gidx.reshape(q, p).T               # group j1: rows v_{j1}, v_{j1+p}, ...
    sgn = gsgn.reshape(q, p).T
    col, wts = _srtt_twiddles(sk.rows, m, q, V.real_dtype(X.dtype), transform,
                              math.sqrt(m / l))
    if tile is None:
        B, nc = p, n
    else:
        B, nc = 1, (n if q * n <= tile else max(8, tile // q))
    xs = (idx.reshape(p // B, B, q), sgn.reshape(p // B, B, q)) + tuple(
        w.reshape(p // B, B, l) for w in wts)

    def part(c0, ncc):
        def step(y, x):
            ib, sb, *w = x
            if c0 is None:
                G = X[ib]
            else:                            # rows ib, columns c0 .. c0 + ncc - 1
                G = jax.vmap(lambda i: jax.lax.dynamic_slice(X, (i, c0), (1, ncc))[0])(
                    ib.reshape(-1)).reshape(ib.shape + (ncc,))
            G = jnp.swapaxes(G * sb[..., None], 1, 2)                   # (B, ncc, q)
            if transform == "fft":
                Zk = jnp.take(jnp.fft.fft(G, axis=-1), col, axis=2, mode="clip")
                return y + jnp.sum(w[0][:, None, :] * Zk, axis=0), None
            Z = jnp.fft.rfft(G, axis=-1)
            re = jnp.take(Z.real, col, axis=2, mode="clip")
            im = jnp.take(Z.imag, col, axis=2, mode="clip")
            return y + jnp.sum(w[0][:, None, :] * re + w[1][:, None, :] * im, axis=0), None
        y = jnp.zeros((ncc, l), X.dtype)
        if p // B == 1:
            return step(y, tuple(x[0] for x in xs))[0]
        return jax.lax.scan(step, y, xs)[0]

    if nc >= n:
        return part(None, n).T
    # column chunks of width nc; the last one overlaps its predecessor (same values)
    def chunk(i, Y):
        c0 = jnp.minimum(i * nc, n - nc).astype(jnp.int32)
        return jax.lax.dynamic_update_slice_in_dim(Y, part(c0, nc), c0, axis=0)
    return jax.lax.fori_loop(0, -(-n // nc), chunk, jnp.zeros((n, l), X.dtype)).T


def _srtt_apply(sk: SRTT, A, impl: str):
    dt = sk._out_dtype(A.dtype)
    m, n = A.shape
    if impl == "auto":
        impl = "dense" if sk.l <= _SRTT_DENSE_MAX_L or n == 0 else "fft"
    if impl == "dense":
        return jnp.matmul(_srtt_matrix(sk, dt), A.astype(dt),
                          precision=jax.lax.Precision.HIGHEST)
    if sk.transform != "fft" and dt.kind == "c":   # a real transform of complex data
        Y = _srtt_apply(sk, jnp.concatenate([A.real, A.imag], axis=1), impl)
        return jax.lax.complex(Y[:, :n], Y[:, n:]).astype(dt)
    X = A.astype(dt)
    q = min((d for d in _divisors(m) if d >= max(_SRTT_MIN_Q, 2 * sk.l)), default=m)
    return jax.lax.platform_dependent(
        X, cpu=lambda X: _srtt_fft(sk, X, q, _SRTT_TILE),
        default=lambda X: _srtt_fft(sk, X, q, None))

_TRANSFORMS = ("dct", "hartley", "fft")   # orthonormal DCT-II, Hartley (real), DFT (complex)


@pytree_dataclass(meta=("transform", "permute", "l", "m", "dtype_"))
class SRTT(Sketch):
    """Subsampled randomized trigonometric transform ``Gamma = sqrt(m/l) P T Phi Pi``, thesis
    Sec. 2.2.3 (2): a random row permutation ``Pi``, random signs ``Phi`` (unit phases for
    complex), an orthonormal transform ``T`` and l uniformly chosen rows ``P``. A dense
    m x n matrix costs O(mn log l) (FFTs of length ~max(256, 2l) over groups of rows, only
    the l kept rows formed; ``apply_dense``), ``todense``/``adjoint_dense`` O(ml).

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

    def apply_dense(self, A, *, impl: str = "auto"):
        """``Gamma @ A`` for a dense A (m x n).

        ``impl="fft"``: FFTs of length q over groups of q gathered rows (q a divisor of m,
        about max(256, 2l)), O(mn log q + mnl/q), A read once; ``"dense"``: the explicit
        l x m matrix times A, O(lmn); ``"auto"``: ``"dense"`` for l <= 32, else ``"fft"``.
        Both give the same Gamma up to rounding.
        """
        if impl not in ("auto", "fft", "dense"):
            raise ValueError(f"impl must be 'auto', 'fft' or 'dense'; got {impl!r}")
        return _srtt_apply(self, A, impl)

    def todense(self, dtype=None):
        return _srtt_matrix(self, self._out_dtype(dtype))

    def adjoint_dense(self, dtype=None):
        """``Gamma^H = sqrt(m/l) Pi^T Phi^H T^H P^T`` (m x l), O(ml) from exact phases."""
        return self.todense(dtype).conj().T


def _srtt(key, l: int, m: int, *, dtype=None, transform: str | None = None,
          permute: bool = True) -> SRTT:
    key = V.check_key(key)
    m = V.check_int("m", m, low=1, high=2 ** 28 - 1,
                    high_desc="exact integer twiddle phases mod 4m fit in 31 bits")
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
class SparseSign(Sketch):
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


def as_sketch(sketch: Any, **options: Any) -> Sketch:
    """The sketch choice for a name (``"gaussian"``, ``"srtt"``, ``"sparse_sign"``) with the
    choice's fields as ``options`` (``as_sketch("sparse_sign", zeta=4)``), or for a sketch
    object (a drawn sketch gives its choice).

    Raises:
      ValueError: unknown name or option.
    """
    if isinstance(sketch, Sketch):
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
