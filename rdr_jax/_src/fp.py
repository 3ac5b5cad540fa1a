"""Exact power-of-two rescaling and logarithms that survive extreme scales and subnormals.

:func:`max_exponent` (``floor(log2 max|x|)``), :func:`ldexp` (``x 2^n``), :func:`normalize`
and :func:`log_abs` decode the IEEE bits with integer ops. Why: XLA on CPU flushes subnormals
to zero in every float op, so ``jnp.ldexp``/``jnp.frexp``/``jnp.log`` read them as 0
(``docs/operators.md``). All are elementwise or reductions, jit/vmap compatible.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["ZERO_EXPONENT", "max_exponent", "ldexp", "normalize", "log_abs"]

# max_exponent of an all-zero array (far below any representable exponent, far from int32
# overflow when negated or doubled).
ZERO_EXPONENT = -(1 << 20)

# dtype -> (unsigned int dtype, total bits, mantissa bits, exponent bias)
_LAYOUT = {
    np.dtype(np.float64): (jnp.uint64, 64, 52, 1023),
    np.dtype(np.float32): (jnp.uint32, 32, 23, 127),
    np.dtype(np.float16): (jnp.uint16, 16, 10, 15),
    np.dtype(jnp.bfloat16): (jnp.uint16, 16, 7, 127),
}


def _layout(dtype):
    dt = np.dtype(dtype)
    if dt not in _LAYOUT:
        raise TypeError(f"unsupported floating dtype {dt} (float16/bfloat16/float32/float64)")
    return _LAYOUT[dt]


def _decode(x):
    """``|x| = sig * 2**ex`` with integer ``sig`` (< 2**(mant+1)) and int32 ``ex``; also the
    sign bit and whether x is finite. Integer ops only (immune to denormals-are-zero)."""
    udt, nbits, mb, bias = _layout(x.dtype)
    u = jax.lax.bitcast_convert_type(x, udt)
    one = jnp.asarray(1, udt)
    emask = jnp.asarray((1 << (nbits - 1 - mb)) - 1, udt)
    expf = ((u >> jnp.asarray(mb, udt)) & emask).astype(jnp.int32)
    mant = u & ((one << jnp.asarray(mb, udt)) - one)
    normal = expf > 0
    sig = jnp.where(normal, mant | (one << jnp.asarray(mb, udt)), mant)
    ex = jnp.where(normal, expf, 1) - (bias + mb)
    neg = (u >> jnp.asarray(nbits - 1, udt)) != 0
    finite = expf != int((1 << (nbits - 1 - mb)) - 1)
    return sig, ex, neg, finite


def _pow2(p, dtype):
    """``2.0**p`` for int32 ``p`` clipped to the normal range of ``dtype`` (exact there)."""
    udt, nbits, mb, bias = _layout(dtype)
    p = jnp.clip(p, 1 - bias, bias)
    return jax.lax.bitcast_convert_type((p + bias).astype(udt) << jnp.asarray(mb, udt), dtype)


def _real_exponent(x):
    """Elementwise ``floor(log2|x|)`` (int32), ZERO_EXPONENT for zeros, a large value for
    Inf/NaN (so they dominate a max)."""
    udt, nbits, mb, bias = _layout(x.dtype)
    sig, ex, _, finite = _decode(x)
    blen = nbits - jax.lax.clz(sig).astype(jnp.int32)          # bit length of sig
    e = ex + blen - 1
    e = jnp.where(sig == 0, ZERO_EXPONENT, e)
    return jnp.where(finite, e, bias + 1)


def max_exponent(x) -> jax.Array:
    """``floor(log2(max_ij max(|Re x_ij|, |Im x_ij|)))`` as an int32 scalar.

    Exact for normal and subnormal entries; ``ZERO_EXPONENT`` when every entry is zero (or x is
    empty); the dtype's ``max_exp`` when some entry is Inf/NaN.
    """
    x = jnp.asarray(x)
    if x.size == 0:
        return jnp.asarray(ZERO_EXPONENT, jnp.int32)
    if jnp.iscomplexobj(x):
        return jnp.maximum(max_exponent(jnp.real(x)), max_exponent(jnp.imag(x)))
    return jnp.max(_real_exponent(x))


def _ldexp_real(x, n):
    _, _, _, bias = _layout(x.dtype)
    sig, ex, neg, finite = _decode(x)
    p = ex + n
    lo, hi = 1 - bias, bias
    p1 = jnp.clip(p, lo, hi)
    p2 = jnp.clip(p - p1, lo, hi)
    # sig * 2**p1 is exact (a normal number, or Inf when the true result overflows); the
    # second factor only rounds where the true result is subnormal (flushed on CPU anyway)
    y = sig.astype(x.dtype) * _pow2(p1, x.dtype) * _pow2(p2, x.dtype)
    y = jnp.where(neg, -y, y)
    return jnp.where(finite, y, x)


def ldexp(x, n) -> jax.Array:
    """``x * 2**n`` for an int ``n`` (scalar or broadcastable), exact whenever the result is a
    normal number; subnormal *inputs* are handled exactly too (unlike ``jnp.ldexp`` under
    XLA's flush-to-zero). Results beyond the range give +-Inf / 0; Inf and NaN pass through.
    Complex x: real and imaginary parts separately."""
    x = jnp.asarray(x)
    n = jnp.asarray(n, jnp.int32)
    if jnp.iscomplexobj(x):
        return jax.lax.complex(_ldexp_real(jnp.real(x), n), _ldexp_real(jnp.imag(x), n))
    return _ldexp_real(x, n)


def normalize(x):
    """``(x * 2**-e, e)`` with ``e = max_exponent(x)``: the largest entry (in magnitude, per
    real/imaginary part) lands in [1, 2); every normal entry is scaled exactly, subnormal
    inputs are recovered exactly, and entries more than ~2**-126 (float32) below the largest
    may flush to 0 (they are below the rounding error of the largest). An all-zero x is
    returned unchanged with ``e = ZERO_EXPONENT``."""
    x = jnp.asarray(x)
    e = max_exponent(x)
    shift = jnp.where(e == ZERO_EXPONENT, 0, -e)
    return ldexp(x, shift), e


def log_abs(x) -> jax.Array:
    """``log|x|`` elementwise (real x): ``jnp.log`` on normal numbers, exact bit decoding on
    subnormals (which ``jnp.log`` reads as 0 under flush-to-zero); ``-inf`` for 0."""
    x = jnp.asarray(x)
    sig, ex, _, finite = _decode(x)
    udt, nbits, mb, bias = _layout(x.dtype)
    tiny = jnp.finfo(x.dtype).tiny
    sub = (sig != 0) & (sig < (1 << mb)) & finite                 # subnormal entries
    # log(sig) + ex log 2 with sig < 2**mb exact in x.dtype
    sub_log = jnp.log(jnp.where(sub, sig, 1).astype(x.dtype)) + ex.astype(x.dtype) * np.log(2.0)
    regular = jnp.log(jnp.where(sub, tiny, jnp.abs(x)))
    return jnp.where(sub, sub_log, regular)
