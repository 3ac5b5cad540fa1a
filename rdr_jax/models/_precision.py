"""Precision helpers shared by the models: BatchNorm statistics and the outputs that feed
losses stay in at least float32, whatever the computation dtype.
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

#: floating dtypes a model accepts as ``dtype`` or ``param_dtype``
MODEL_DTYPES = (np.dtype(jnp.bfloat16), np.dtype(np.float16), np.dtype(np.float32),
                np.dtype(np.float64))


def check_model_dtype(name: str, dtype: Any, *, allow_none: bool = False) -> Optional[np.dtype]:
    """A floating dtype (bfloat16, float16, float32, float64) canonicalised for JAX (float64
    becomes float32 when ``jax_enable_x64`` is off); ``None`` passes when ``allow_none``."""
    if dtype is None and allow_none:
        return None
    try:
        dt = jnp.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"{name} must be a floating dtype (bfloat16, float16, float32, "
                        f"float64); got {dtype!r}") from e
    if dt not in MODEL_DTYPES:
        raise TypeError(f"{name} has unsupported dtype {dt}; supported: bfloat16, float16, "
                        f"float32, float64")
    return np.dtype(jax.dtypes.canonicalize_dtype(dt))


def check_dtypes(dtype: Any, param_dtype: Any) -> tuple[Optional[np.dtype], np.dtype]:
    """Validate a model's ``(dtype, param_dtype)`` pair (``dtype`` may be ``None``)."""
    return (check_model_dtype("dtype", dtype, allow_none=True),
            check_model_dtype("param_dtype", param_dtype))


def at_least_float32(x: jax.Array) -> jax.Array:
    """``x`` in ``promote_types(x.dtype, float32)``: half precision becomes float32, float32
    and float64 are returned unchanged."""
    return x.astype(jnp.promote_types(x.dtype, jnp.float32))


def keep_stats_precise(bn: nnx.BatchNorm, param_dtype: Any) -> nnx.BatchNorm:
    """Store ``bn``'s running statistics in ``promote_types(param_dtype,
    float32)`` (Flax creates them in float32, which would cost a float64 model precision).
    """
    dt = jnp.promote_types(param_dtype, jnp.float32)
    bn.mean = nnx.BatchStat(jnp.zeros(bn.mean.shape, dt))
    bn.var = nnx.BatchStat(jnp.ones(bn.var.shape, dt))
    return bn
