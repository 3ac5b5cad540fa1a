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

**LAPACK threads.** On CPU, jaxlib's LAPACK kernels (LU, QR, Cholesky, triangular solves,
SVD, eigh: every factorisation in the pipelines) call the LAPACK of SciPy's bundled OpenBLAS,
whose worker threads spin after each call and then compete with XLA's own thread pool for
the cores. On the pipelines' small factorisations (an l x n sketch, m x k skeleton blocks,
k x k Grams) one OpenBLAS thread is faster: measured on the 2-core machine of the README, the
default 4000 x 2000 column ID takes 56 -> 40 ms at k = 50 and 165 -> 124 ms at k = 200, and
the 8-device sharded CUR of ``experiments/bench_weak_scaling.py`` 2131 -> 320 ms (8 devices
calling a 2-thread OpenBLAS at once). So the first call of a compiled rdr_jax function on
the CPU backend limits *that* library (SciPy's, found with threadpoolctl by its path; NumPy's
own OpenBLAS is not touched) to :data:`LAPACK_THREADS` thread. SciPy's ``scipy.linalg`` in
the same process then runs on one OpenBLAS thread too (``scipy.linalg.interpolative`` was
not slower: 1849 vs 2452 ms at k = 50). ``RDR_JAX_LAPACK_THREADS=N`` sets another count and
``RDR_JAX_LAPACK_THREADS=default`` leaves the library alone.
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

#: OpenBLAS threads of the LAPACK behind jaxlib's CPU kernels (``RDR_JAX_LAPACK_THREADS``)
LAPACK_THREADS = 1

_lapack_limiter = None       # keeps threadpoolctl's limiter (and so the limit) alive


def lapack_threads_setting() -> Optional[int]:
    """The thread count from ``RDR_JAX_LAPACK_THREADS`` (default :data:`LAPACK_THREADS`), or
    None for ``default`` (leave the library alone). Raises ValueError on anything else."""
    raw = os.environ.get("RDR_JAX_LAPACK_THREADS", "").strip().lower()
    if raw == "":
        return LAPACK_THREADS
    if raw == "default":
        return None
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError("RDR_JAX_LAPACK_THREADS must be a positive integer or 'default'; "
                         f"got {raw!r}")
    return n


@functools.lru_cache(maxsize=None)
def limit_cpu_lapack_threads() -> tuple[str, ...]:
    """Limit the OpenBLAS/MKL that jaxlib's CPU LAPACK kernels use (SciPy's: jaxlib takes its
    LAPACK from ``scipy.linalg.cython_lapack``) to :func:`lapack_threads_setting` threads, once
    per process, on the CPU backend. Returns the paths of the libraries limited (empty when
    nothing was changed: not CPU, ``default``, threadpoolctl missing, or no separate SciPy
    BLAS, e.g. a system/conda BLAS shared with NumPy, which is left alone)."""
    global _lapack_limiter
    n = lapack_threads_setting()
    if n is None or jax.default_backend() != "cpu":
        return ()
    try:
        import scipy.linalg.cython_lapack  # noqa: F401  (the library jaxlib loads)
        import threadpoolctl
    except ImportError:             # pragma: no cover - both ship with the requirements
        return ()
    ctl = threadpoolctl.ThreadpoolController()
    paths = [lib.filepath for lib in ctl.lib_controllers
             if lib.user_api == "blas" and "scipy" in os.path.basename(
                 os.path.dirname(lib.filepath)).lower()]
    if not paths:
        return ()
    _lapack_limiter = ctl.select(filepath=paths).limit(limits=n)
    return tuple(paths)


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
        limit_cpu_lapack_threads()
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
