"""``jax.jit`` with XLA:CPU compile options that halve the first-call cost.

rdr_jax's entry points are single compiled pipelines whose run time on small and mid-size
problems is comparable to their XLA compile time. On CPU, most of that compile time goes to
XLA's MLIR fusion emitters for the elementwise fusions (hash Gaussian generation, scaling,
masking); XLA's older LLVM-IR emitters produce code that runs as fast here (measured on the
4000 x 2000 column ID of ``experiments/bench_cur.py``: 85 vs 88 ms at k = 50, 285 vs 285 ms at
k = 200) and compile in about half the time (0.47 vs 1.12 s at k = 50). So every jitted
function of the core is compiled with ``xla_cpu_use_fusion_emitters=False`` when it runs on
the CPU backend (a per-function compiler option: it does not change the process's
``XLA_FLAGS`` or any computation outside rdr_jax). On GPU/TPU, or on a jax/XLA build that does
not know the option (probed once), functions are compiled with the defaults.

``RDR_JAX_DEFAULT_COMPILER=1`` in the environment turns this off.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, Optional

import jax
import numpy as np

try:                                   # "not inside a jit/vmap/grad trace"
    from jax._src.core import trace_state_clean as _top_level
except ImportError:                    # pragma: no cover - other jax versions
    def _top_level() -> bool:
        return False

#: per-function XLA options used on the CPU backend
CPU_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False}


@functools.lru_cache(maxsize=None)
def cpu_compiler_options() -> Optional[dict]:
    """The compile options in effect: :data:`CPU_COMPILER_OPTIONS` on the CPU backend when
    this jax/XLA accepts them, else None (decided once per process)."""
    if os.environ.get("RDR_JAX_DEFAULT_COMPILER", "") not in ("", "0"):
        return None
    if jax.default_backend() != "cpu":
        return None
    try:
        jax.jit(lambda x: x + 1, compiler_options=CPU_COMPILER_OPTIONS).lower(
            np.float32(0.0)).compile()
    except Exception:          # older jax (no compiler_options) or XLA without the option
        return None
    return dict(CPU_COMPILER_OPTIONS)


class _Jitted:
    """A function jitted twice (plain and with :func:`cpu_compiler_options`); a top-level call
    uses the second when the options are in effect. Inside another transformation (the
    caller's jit, vmap or grad) the plain one is used: jax accepts compiler options only on
    the outermost jit, whose options then apply. Attributes (``lower``, ``trace``,
    ``_cache_size``, ...) are those of the top-level variant."""

    def __init__(self, fun: Callable, kwargs: dict):
        functools.update_wrapper(self, fun)
        self._plain = jax.jit(fun, **kwargs)
        try:
            self._fast = jax.jit(fun, compiler_options=CPU_COMPILER_OPTIONS, **kwargs)
        except TypeError:      # jax without jit(compiler_options=...)
            self._fast = self._plain

    def _pick(self):
        return self._fast if cpu_compiler_options() is not None else self._plain

    def __call__(self, *args, **kwargs):
        fn = self._pick() if _top_level() else self._plain
        return fn(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pick(), name)


def jit(fun: Optional[Callable] = None, **kwargs):
    """``jax.jit(fun, **kwargs)`` compiled with :data:`CPU_COMPILER_OPTIONS` on CPU (usable as
    ``@jit``, ``@jit(static_argnames=...)`` or ``functools.partial(jit, ...)``)."""
    if fun is None:
        return functools.partial(jit, **kwargs)
    return _Jitted(fun, kwargs)
