"""Boundary checks shared by the public functions.

Every public entry point validates its arguments *before* entering ``jit`` and raises a
``ValueError`` / ``TypeError`` that names the offending argument and the allowed range.
Checks that need concrete values (finiteness) are skipped for tracers, i.e. when the caller
has already entered their own ``jit``/``vmap`` with the matrix as a traced argument.
"""

from __future__ import annotations

import numbers
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

REAL_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
COMPLEX_DTYPES = (np.dtype(np.complex64), np.dtype(np.complex128))


def is_concrete(x: Any) -> bool:
    """True when ``x`` holds concrete values (not a tracer inside jit/vmap/grad)."""
    return not isinstance(x, jax.core.Tracer)


def check_bool(name: str, value: Any) -> bool:
    """Check that ``value`` is a Python or NumPy bool (not 0/1, not a string) and return it."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool; got {value!r}")
    return bool(value)


def check_int(name: str, value: Any, *, low: int | None = None, high: int | None = None,
              high_desc: str | None = None) -> int:
    """Check that ``value`` is a Python/NumPy integer in ``[low, high]`` and return it as int."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a Python int (it sets array shapes and is static "
                        f"under jit); got {type(value).__name__} {value!r}")
    value = int(value)
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low}; got {value}")
    if high is not None and value > high:
        what = f" ({high_desc})" if high_desc else ""
        raise ValueError(f"{name} must be <= {high}{what}; got {value}")
    return value


def check_dtype(name: str, dtype: Any, *, allow_complex: bool = True) -> np.dtype:
    """Check a floating (optionally complex) dtype and return it canonicalised for JAX.

    float64/complex128 silently become float32/complex64 when ``jax_enable_x64`` is off,
    exactly as ``jnp.asarray`` would do.
    """
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"{name} must be a floating dtype; got {dtype!r}") from e
    allowed = REAL_DTYPES + (COMPLEX_DTYPES if allow_complex else ())
    if dt not in allowed:
        kinds = "float32/float64" + ("/complex64/complex128" if allow_complex else "")
        raise TypeError(f"{name} has unsupported dtype {dt}; supported: {kinds}")
    return np.dtype(jax.dtypes.canonicalize_dtype(dt))


def default_float() -> np.dtype:
    """float64 when jax_enable_x64 is on, else float32."""
    return np.dtype(jax.dtypes.canonicalize_dtype(np.float64))


def real_dtype(dtype: Any) -> np.dtype:
    """The real counterpart of a (possibly complex) floating dtype."""
    return np.dtype(jnp.finfo(dtype).dtype)


def check_array_values(name: str, a: Any) -> None:
    """Raise ValueError if a concrete array holds NaN or Inf."""
    if is_concrete(a):
        arr = np.asarray(a)
        if arr.size and not np.all(np.isfinite(arr)):
            bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
            raise ValueError(f"{name} contains {bad} non-finite (NaN or Inf) entries")


def warn_if_nonfinite(x: Any, what: str, stacklevel: int = 3) -> None:
    """Eager calls only (no-op for tracers): warn when the (scalar or small) result ``x``
    holds NaN or Inf -- the trace of NaN/Inf entries in a jax-array input, which is not
    scanned at the boundary (that would be a host pass over A). Reads ``x`` (one small
    device-to-host copy); under the caller's jit/vmap the NaN itself is the flag."""
    import warnings
    if is_concrete(x) and not np.all(np.isfinite(np.asarray(x))):
        warnings.warn(f"{what} is not finite: A contains NaN or Inf (jax-array inputs are "
                      "checked through the result, not scanned at the boundary)",
                      RuntimeWarning, stacklevel=user_stacklevel())


def check_key(key: Any, name: str = "key") -> jax.Array:
    """Accept a typed key (``jax.random.key``) or a legacy uint32[2] key; return a typed key."""
    if isinstance(key, (int, np.integer)):
        raise TypeError(f"{name} must be a JAX PRNG key such as jax.random.key(0); got int {key}")
    if not hasattr(key, "dtype"):
        raise TypeError(f"{name} must be a JAX PRNG key; got {type(key).__name__}")
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != ():
            raise ValueError(f"{name} must be a single key (shape ()); got shape {key.shape}; "
                             "use jax.vmap over keys for batches")
        return key
    if key.dtype == jnp.uint32 and key.shape == (2,):
        return jax.random.wrap_key_data(key)
    raise TypeError(f"{name} must be a JAX PRNG key (jax.random.key(seed)); "
                    f"got array of dtype {key.dtype} and shape {key.shape}")


_PACKAGE = __file__.rsplit("/_src/", 1)[0]


def user_stacklevel() -> int:
    """``stacklevel`` for a ``warnings.warn`` issued by the calling function that points at
    the first frame outside rdr_jax (the user's line), however deep the call inside rdr_jax
    (nested helpers included)."""
    import sys
    f, level = sys._getframe(1), 1
    while f is not None and f.f_code.co_filename.startswith(_PACKAGE):
        f, level = f.f_back, level + 1
    return level
