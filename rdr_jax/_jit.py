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

**Tiered compilation (first call).** XLA:CPU spends most of a pipeline's first call in LLVM's
optimisation passes: on the default 4000 x 2000 column ID of ``experiments/bench_cur.py``
(k = 50) tracing + lowering take ~0.25 s, the optimised compile ~0.6-0.75 s and the run
~0.04 s. At backend optimisation level 0 the same program compiles in ~0.3 s and runs ~1.5x
slower (the LLVM-emitted elementwise kernels, mostly the Gaussian generation; GEMMs and
LAPACK are library code either way). So the decomposition pipelines (those jitted here with
``quick_first=``, a static estimate of their elementwise work) compile a signature's
*first* top-level call on the CPU backend at level 0 (:data:`QUICK_COMPILER_OPTIONS`) and
its *second* call with the full options, from the same lowering (no second trace); every
later call runs the optimised executable. A signature whose estimated elementwise work
exceeds :data:`QUICK_MAX_WORK` (where the slower run would cost more than the compile saves,
e.g. a Gaussian sketch of a 10^6-row matrix) is compiled optimised from the start.

**Speculative first calls.** A pipeline may also opt into ``speculative=``: its quick tier
then traces only the fast routes of its run-time route choices (the column ID: the normal
equations for the exact coefficients, not the QR + pseudo-inverse fallback, and eta by
:func:`rdr_jax.pivoting.eta_from_gram_fast`, without exponent decoding or SVD fallback;
in A/Bs of the first call over 7 fresh processes with stubs: medians 0.68 -> 0.63 s without
the coefficient fallback, 0.57 -> 0.51 s without the eta safeguards and lupp's rescaling,
which the speculative program keeps) and returns their preconditions with the result. The
first call reads that flag on the host (the eager entry point reads its result's flags
anyway); when it is False the full optimised program is compiled and run at once, so the
caller always gets the full program's answer for such inputs.

What this costs: a signature used more than once compiles twice (+~0.3 s, once), and the
first call's floating-point results may differ from later calls' in the last bits (LLVM
forms fused multiply-adds only when optimising: ~7% of the float64 Gaussian sketch entries
differ by one ulp), amplified by the conditioning of the pivot block: ``eta``/``W``/singular
values agree to ~1e-16 cond; skeletons, sensitive to such differences only at ties, agreed
in every test. So only 64-bit data are tiered (in float32 an ill-conditioned case showed a
2.5% different eta), and a speculative first call whose skeleton is numerically rank
deficient is rerun in full. Later calls are bitwise reproducible, and bitwise equal to an
untiered process. ``RDR_JAX_TIERED_COMPILE=0`` compiles every call optimised from the start
(as does an ``XLA_FLAGS`` that already sets ``--xla_backend_optimization_level=0``, or
``jax.disable_jit()``); inside the caller's own ``jax.jit`` nothing is tiered.
"""

from __future__ import annotations

import collections
import functools
import inspect
import os
import threading
from typing import Any, Callable, Optional

import jax
import numpy as np

try:                                   # "not inside a jit/vmap/grad trace"
    from jax._src.core import trace_state_clean as _top_level
except ImportError:                    # pragma: no cover - other jax versions
    def _top_level() -> bool:
        return False

try:     # the configuration jax.jit keys its caches on (x64, matmul precision, device, ...)
    from jax._src.config import trace_context as _trace_context
except ImportError:                    # pragma: no cover - other jax versions
    def _trace_context():
        return (jax.config.jax_enable_x64, jax.config.jax_default_matmul_precision,
                jax.config.jax_numpy_rank_promotion, jax.config.jax_numpy_dtype_promotion)

#: per-function XLA options used on the CPU backend
CPU_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False}

#: extra XLA options of a signature's first call (tiered compilation, CPU backend)
QUICK_COMPILER_OPTIONS = {"xla_backend_optimization_level": 0}

#: largest estimated elementwise work (array elements touched by LLVM-emitted kernels) for
#: which a first call is compiled with :data:`QUICK_COMPILER_OPTIONS`: at level 0 those
#: kernels cost up to ~50 ns more per element (the float64 Gaussian generation), so 2^22
#: elements bound the slowdown by ~0.2 s, below the ~0.3-0.45 s of compile time saved
QUICK_MAX_WORK = 1 << 22

#: signatures remembered per function by the tiered path (least recently used dropped)
_MAX_TIERS = 64

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


def _flag_off(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("0", "false", "no", "off")


@functools.lru_cache(maxsize=8)
def _xla_flags_quick(flags: str) -> bool:
    """Whether ``XLA_FLAGS`` already compiles everything at optimisation level 0."""
    return any(f.replace(" ", "") == "--xla_backend_optimization_level=0" for f in flags.split())


def tiered_compile_enabled() -> bool:
    """Whether top-level calls of the decomposition pipelines use tiered compilation (see the
    module docstring): CPU backend with :func:`cpu_compiler_options` in effect, not turned
    off by ``RDR_JAX_TIERED_COMPILE=0``, ``XLA_FLAGS`` not already at level 0, jit enabled."""
    return (not _flag_off("RDR_JAX_TIERED_COMPILE")
            and not _xla_flags_quick(os.environ.get("XLA_FLAGS", ""))
            and not jax.config.jax_disable_jit
            and cpu_compiler_options() is not None)


def _leaf_key(x) -> tuple:
    """What a compiled executable is specialised on, for one argument leaf."""
    if isinstance(x, (jax.Array, np.ndarray, np.generic)):
        return (type(x), x.shape, x.dtype, getattr(x, "weak_type", False),
                getattr(x, "sharding", None))
    return (type(x),)                           # Python scalars: weakly typed


_UNTIERED = object()      # "take the plain jit path"


class _Tier:
    """One call signature of a tiered function: the lowering and the executable in use."""

    __slots__ = ("lowered", "exe", "optimised")

    def __init__(self, lowered, exe, optimised):
        self.lowered, self.exe, self.optimised = lowered, exe, optimised


def _static_params(fun: Callable, kwargs: dict):
    """``(signature, static argument names, static positions)`` as ``jax.jit`` resolves them."""
    sig = inspect.signature(fun)
    names = kwargs.get("static_argnames", ()) or ()
    nums = kwargs.get("static_argnums", ()) or ()
    names = {names} if isinstance(names, str) else set(names)
    nums = {nums} if isinstance(nums, int) else set(nums)
    positional = [p.name for p in sig.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names |= {positional[i] for i in nums if 0 <= i < len(positional)}
    nums |= {i for i, n in enumerate(positional) if n in names}
    return sig, frozenset(names), frozenset(nums)


class _Jitted:
    """A function jitted twice (plain and with :func:`cpu_compiler_options`); a top-level call
    uses the second when the options are in effect. Inside another transformation (the
    caller's jit, vmap or grad) the plain one is used: jax accepts compiler options only on
    the outermost jit, whose options then apply. Attributes (``lower``, ``trace``,
    ``_cache_size``, ...) are those of the top-level variant."""

    def __init__(self, fun: Callable, kwargs: dict, quick_first=None, speculative=None):
        functools.update_wrapper(self, fun)
        self._plain = jax.jit(fun, **kwargs)
        try:
            self._fast = jax.jit(fun, compiler_options=CPU_COMPILER_OPTIONS, **kwargs)
        except TypeError:      # jax without jit(compiler_options=...)
            self._fast = self._plain
        self._quick_first = quick_first
        self._speculative = dict(speculative or {})
        self._tiers: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()
        if quick_first is not None:
            self._sig, self._static_names, self._static_nums = _static_params(fun, kwargs)

    def _pick(self):
        return self._fast if cpu_compiler_options() is not None else self._plain

    def __call__(self, *args, **kwargs):
        limit_cpu_lapack_threads()
        if not _top_level():
            return self._plain(*args, **kwargs)
        if self._quick_first is not None and tiered_compile_enabled():
            out = self._tiered_call(args, kwargs)
            if out is not _UNTIERED:
                return out
        return self._pick()(*args, **kwargs)

    def _speculative_args(self, args, kwargs):
        """``(args, kwargs)`` with the static arguments named in ``speculative`` rewritten."""
        args, kwargs = list(args), dict(kwargs)
        positions = {n: i for i, n in enumerate(self._sig.parameters)}
        for name, rewrite in self._speculative.items():
            i = positions[name]
            if name in kwargs:
                kwargs[name] = rewrite(kwargs[name])
            elif i < len(args):
                args[i] = rewrite(args[i])
            else:                           # not passed: its default, rewritten
                kwargs[name] = rewrite(self._sig.parameters[name].default)
        return tuple(args), kwargs

    def _tiered_call(self, args, kwargs):
        """Run this call through its :class:`_Tier` (compiling what it needs), or return
        ``_UNTIERED`` for the plain jit path. With ``speculative``, the first call runs the
        rewritten (fast-routes-only) program, which returns ``(out, ok)``; when ``ok`` is
        False the full program is compiled and run at once."""
        dyn_args = tuple(a for i, a in enumerate(args) if i not in self._static_nums)
        dyn_kwargs = {n: v for n, v in kwargs.items() if n not in self._static_names}
        tier = self._tier(args, kwargs, dyn_args, dyn_kwargs)
        if tier is None:
            return _UNTIERED
        if tier.optimised or not self._speculative:
            return tier.exe(*dyn_args, **dyn_kwargs)
        out, ok = tier.exe(*dyn_args, **dyn_kwargs)       # the first call, speculative
        if bool(ok):
            return out
        with self._lock:        # a route the speculative program left out is needed
            self._promote(tier, args, kwargs)
        return tier.exe(*dyn_args, **dyn_kwargs)

    def _promote(self, tier: _Tier, args, kwargs) -> None:
        """Compile the optimised full program of a tier (under ``self._lock``)."""
        if tier.optimised:
            return
        lowered = tier.lowered or self._fast.trace(*args, **kwargs).lower()
        tier.exe = lowered.compile(compiler_options=cpu_compiler_options())
        tier.lowered, tier.optimised = None, True

    def _tier(self, args, kwargs, dyn_args, dyn_kwargs) -> Optional[_Tier]:
        """The :class:`_Tier` for this call (compiling what it needs), or None for the plain
        jit path (arguments the signature cannot key, or too much work for a quick tier)."""
        try:
            bound = self._sig.bind(*args, **kwargs)
        except TypeError:
            return None                     # let jax.jit report the bad call
        work = self._quick_first(bound.arguments)
        if work is None or work > QUICK_MAX_WORK:
            return None                     # the jit path compiles it optimised
        # static values by name; dynamic ones as passed (positional or keyword: the
        # executable's input tree)
        static = tuple((n, v) for n, v in bound.arguments.items() if n in self._static_names)
        leaves, tree = jax.tree.flatten((dyn_args, dyn_kwargs))
        try:
            key = (static, tree, tuple(_leaf_key(x) for x in leaves), _trace_context())
            hash(key)
        except TypeError:
            return None
        with self._lock:
            tier = self._tiers.get(key)
            if tier is not None:
                self._tiers.move_to_end(key)
                self._promote(tier, args, kwargs)     # second call: the optimised program
                return tier
        if self._speculative:
            lowered = None                  # the full program is lowered when promoted
            s_args, s_kwargs = self._speculative_args(args, kwargs)
            quick = self._fast.trace(*s_args, **s_kwargs).lower()
        else:
            lowered = quick = self._fast.trace(*args, **kwargs).lower()
        exe = quick.compile(compiler_options={**cpu_compiler_options(), **QUICK_COMPILER_OPTIONS})
        tier = _Tier(lowered, exe, False)
        with self._lock:
            self._tiers[key] = tier
            while len(self._tiers) > _MAX_TIERS:
                self._tiers.popitem(last=False)
        return tier

    def _cache_size(self) -> int:
        """Executables held: jax.jit's cache of the top-level variant plus the tiered path's
        signatures (a no-retrace check sees either grow)."""
        return self._pick()._cache_size() + len(self._tiers)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pick(), name)


def jit(fun: Optional[Callable] = None, *, quick_first: Optional[Callable] = None,
        speculative: Optional[dict] = None, **kwargs):
    """``jax.jit(fun, **kwargs)`` compiled with :data:`CPU_COMPILER_OPTIONS` on CPU (usable as
    ``@jit``, ``@jit(static_argnames=...)`` or ``functools.partial(jit, ...)``).

    ``quick_first(arguments) -> int | None`` (a dict of the bound arguments, static ones
    included) opts the function into tiered compilation (module docstring): it estimates the
    elements that LLVM-emitted elementwise kernels touch, compared with
    :data:`QUICK_MAX_WORK` (None: this call is never tiered).
    ``speculative={name: rewrite}`` (static arguments only): the quick tier runs the function
    with those arguments rewritten, a program that must return ``(out, ok)`` where ``ok``
    says that its result is the full program's (module docstring)."""
    if fun is None:
        return functools.partial(jit, quick_first=quick_first, speculative=speculative,
                                 **kwargs)
    return _Jitted(fun, kwargs, quick_first, speculative)


def sketch_work(arguments: dict) -> Optional[int]:
    """``quick_first`` estimate for the pipelines called as ``f(key, op, k, l, ...)``: the
    sketch ``l x m`` plus the ``l x n`` row basis, ``l (m + n)`` elements; None (never a
    quick tier) for 32-bit data, where the quick executable's last-bit differences, times
    the condition number of a pivot block, can show in eta (2.5% measured on an
    ill-conditioned float32 case) -- in 64-bit they stay ~1e-16 cond."""
    op = arguments["op"]
    if np.finfo(np.dtype(op.dtype)).bits < 64:
        return None
    m, n = op.shape
    return int(arguments["l"]) * (int(m) + int(n))
