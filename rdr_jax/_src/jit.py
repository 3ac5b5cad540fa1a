"""``jax.jit`` with one per-function XLA:CPU compile option (faster compiles, same results).

On the CPU backend most of a pipeline's compile time goes to XLA's MLIR fusion emitters; the
older LLVM-IR emitters compile the same program in about half the time and produce code that
runs as fast (measurements: ``docs/performance.md``). The option is passed per function
(``jax.jit(..., compiler_options=...)``), so it changes nothing outside rdr_jax: no
``XLA_FLAGS``, no global configuration. It is used only for top-level calls on the CPU
backend (jax accepts compiler options only on the outermost jit; inside the caller's
jit/vmap/grad the plain function runs) and only when this jax/XLA accepts it (probed once).
``RDR_JAX_DEFAULT_COMPILER=1`` turns it off.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, Optional

import jax
import numpy as np

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


def _traced(args, kwargs) -> bool:
    """Whether some argument is a tracer (the call is inside the caller's jit/vmap/grad)."""
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((args, kwargs)))


class _Jitted:
    """A function jitted twice (plain and with :func:`cpu_compiler_options`); a top-level call
    uses the second when the options are in effect. Attributes (``lower``, ``trace``,
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
        if cpu_compiler_options() is None or _traced(args, kwargs):
            return self._plain(*args, **kwargs)
        try:
            return self._fast(*args, **kwargs)
        except ValueError as e:     # inside the caller's jit with only concrete arguments
            if "compiler_options" not in str(e):
                raise
            return self._plain(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pick(), name)


def jit(fun: Optional[Callable] = None, *, fast_cpu_compile: bool = True, **kwargs):
    """rdr_jax's one way to jit: ``jax.jit(fun, **kwargs)`` compiled with
    :data:`CPU_COMPILER_OPTIONS` on CPU (usable as ``@jit``, ``@jit(static_argnames=...)`` or
    ``functools.partial(jit, ...)``).

    ``fast_cpu_compile=False`` returns plain ``jax.jit(fun, **kwargs)`` (XLA's default
    emitters, the caller's own ``compiler_options`` if any): the Ch. 4-5 training code, whose
    committed results were compiled so (the option changes the bits of 13 of the 15 training
    runs of ``tests/test_training_determinism.py``; ``docs/design.md``, "One jit")."""
    if fun is None:
        return functools.partial(jit, fast_cpu_compile=fast_cpu_compile, **kwargs)
    if not fast_cpu_compile:
        return jax.jit(fun, **kwargs)
    return _Jitted(fun, kwargs)


def compilation_cache(directory: str | os.PathLike | None = None, *,
                      min_compile_time_s: float = 0.0) -> str:
    """Turn on JAX's persistent compilation cache for this process (an explicit opt-in: it
    sets JAX configuration, which rdr_jax never does on its own).

    Compiled programs are written to ``directory`` (default ``$JAX_COMPILATION_CACHE_DIR``,
    else ``~/.cache/rdr_jax/jax``) and loaded by later processes instead of being compiled
    again: a script or notebook that calls the same decompositions pays XLA's compile time
    once per machine (measurements: ``docs/performance.md``). Equivalent to
    ``jax.config.update("jax_compilation_cache_dir", directory)`` plus a minimum compile time
    of ``min_compile_time_s`` (JAX's default, 1 s, would skip most rdr_jax programs).

    Returns the directory used.

    Example:
      >>> rdr_jax.compilation_cache()          # first thing in a script or notebook
    """
    path = (directory or os.environ.get("JAX_COMPILATION_CACHE_DIR")
            or os.path.join(os.path.expanduser("~"), ".cache", "rdr_jax", "jax"))
    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_time_s))
    return path
