"""Shared fixtures: run tests in float32 (x64 off) and float64 (x64 on); import experiment
scripts."""

import gc
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

# The suite runs thousands of small compiled functions whose run time is negligible next to
# their XLA compile time: skip LLVM's backend optimisations (about halves each compile;
# GEMMs, convolutions and LAPACK calls are library code and unaffected) and use XLA:CPU's
# LLVM-IR fusion emitters instead of the MLIR ones (halves it again; rdr_jax's own pipelines
# do this per function, see rdr_jax/_jit.py). Set before jax initialises its backend;
# notebook kernels and script subprocesses inherit it.
# ``parallel_codegen_split_count=1``: one LLVM module per compile, not several compiled on
# threads: the two xdist workers already keep both cores busy (a 7-program compile benchmark
# under load: 6.7 s against 7.9 s).
for _flag in ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false",
              "--xla_cpu_parallel_codegen_split_count=1"):
    if _flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()

# One persistent compilation cache per test session, in a fresh temporary folder that the
# session deletes at its end: the xdist workers, the files after a ``jax.clear_caches()``
# and the notebook/script subprocesses (which inherit the variables) load the programs
# another of them compiled instead of compiling them again. With the flag above, the full
# suite on 2 cores took 803 s against 882 and 886 s without both (docs/development.md).
# Created by the controlling process (the workers inherit it); a folder the caller set is
# used and kept.
_OWN_CACHE = None
if "PYTEST_XDIST_WORKER" not in os.environ and not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    _OWN_CACHE = tempfile.mkdtemp(prefix="rdr_jax_tests_xla_cache_")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _OWN_CACHE
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"

# One OpenBLAS thread per test process. The suite runs two xdist workers plus notebook
# kernels and script subprocesses on two cores; an OpenBLAS call that starts its own threads
# there (numpy/scipy references, jaxlib's LAPACK calls) leaves them spinning after the call
# while every core already has work (the thread fight of issue 30, docs/performance.md).
# The variable reaches the workers and subprocesses (set before they start; scipy's OpenBLAS
# loads later); threadpoolctl limits the copy a plugin loaded before this file. The suite's
# own choice for its processes: rdr_jax itself never changes a thread pool.
# Measured: 5-11% less user CPU for a fresh clone's .ci/run (docs/development.md, "Where the
# suite's time goes").
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# Python's cyclic garbage collector runs its young generation every 10,000 net allocations
# instead of 700. A worker's heap grows past a million tracked objects (jax's trace and
# lowering caches of thousands of compiled programs), and with the default thresholds a full
# collection walked all of it every few seconds: 6% of the suite's CPU in ``perf`` samples;
# 14 against 3 full collections and 9% less CPU time for ``tests/test_methods_generic.py``
# (docs/development.md). Garbage is still collected (every tenth young collection promotes,
# every tenth of those is a full one); the workers' peak memory did not change. The suite's
# own choice for its processes, like the thread count above: rdr_jax never touches the gc.
gc.set_threshold(10_000, 10, 10)

import jax
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

_BLAS_LIMIT = threadpool_limits(limits=int(os.environ["OPENBLAS_NUM_THREADS"]), user_api="blas")

if os.environ.get("JAX_COMPILATION_CACHE_DIR"):     # in case a plugin imported jax first
    jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(
        os.environ.get("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")))


def pytest_unconfigure(config):
    """Delete the session's compilation cache (the controlling process only)."""
    if _OWN_CACHE is not None:
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


#: the test files that take longest (``--durations`` on the 2-core machine), run first: with
#: ``--dist loadfile`` (pyproject.toml) each file runs whole on one xdist worker (its module
#: fixtures and compilations once, not once per worker), and the two workers end together
#: on the many quick files. Only the first user of the 8-device subprocess
#: (``tests/_multidevice.py``) is here; its other users come later and read its cached results.
HEAVY_FIRST = ("test_training_determinism.py", "test_notebooks.py", "test_sharding.py",
               "test_transformations.py", "test_seg_models.py", "test_training_runs.py",
               "test_train_dac_mnist.py", "test_experiments_ch2.py", "test_fig_adawac.py",
               "test_experiments_ch5.py", "test_angles.py")


def pytest_collection_modifyitems(config, items):
    """Put the files of :data:`HEAVY_FIRST` first, in that order (a stable sort: every file
    keeps its tests' order, the other files their alphabetical order)."""
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def _memory_maps() -> int:
    try:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)
    except OSError:          # not Linux
        return 0


#: release compiled executables when a worker holds more memory maps than this
_MAP_LIMIT = 20000


@pytest.fixture(autouse=True, scope="module")
def _release_executables():
    """Free JAX's compiled executables after a test module when the process holds many
    memory mappings. Every XLA:CPU executable keeps its JIT-compiled code in its own
    mappings (~10 per executable) until ``jax.clear_caches()``; one worker of the full suite
    compiles thousands of functions and passed Linux's ``vm.max_map_count`` (65530), after
    which LLVM's ``mmap`` fails ("LLVM compilation error: Cannot allocate memory") and the
    worker crashes inside a compile."""
    yield
    if _memory_maps() > _MAP_LIMIT:
        jax.clear_caches()
        gc.collect()


@pytest.fixture(params=["float32", "float64"])
def dtype(request):
    """The test's working dtype; float64 runs inside the thread-local ``jax.enable_x64``
    context (the global flag is never flipped between cases; the CPU kernels are XLA FFI
    calls, so no callback thread needs to see the flag)."""
    with jax.enable_x64(request.param == "float64"):
        yield np.dtype(request.param)


def rtol(dtype) -> float:
    """Relative tolerance for products/reconstructions in ``dtype``."""
    return 2e-4 if np.dtype(dtype) == np.float32 else 1e-10


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"


def load_experiment(name: str):
    """Import ``experiments/<name>.py`` as module ``name`` (with experiments/ on sys.path, as
    when a script runs from the command line, so scripts can import their siblings)."""
    if str(EXPERIMENTS) not in sys.path:
        sys.path.insert(0, str(EXPERIMENTS))
    spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def script():
    """``script(name)`` imports an experiment script. The scripts scope float64 with
    ``jax.enable_x64`` (see ``experiments/_common.run_main``); the process-wide
    ``jax_enable_x64`` is restored afterwards all the same, in case a test changes it."""
    prev = jax.config.jax_enable_x64
    try:
        yield load_experiment
    finally:
        jax.config.update("jax_enable_x64", prev)


@pytest.fixture
def x64():
    """float64 for one test, with the thread-local ``jax.enable_x64`` context (the global flag
    is never flipped between cases)."""
    with jax.enable_x64(True):
        yield


@pytest.fixture(scope="session")
def multidevice(tmp_path_factory, worker_id):
    """``{job: {"result": ...} or {"error": traceback}}`` of the one 8-device subprocess that
    runs the suite's multi-device checks (``tests/_multidevice.py``); once per session."""
    from tests import _multidevice
    return _multidevice.results(tmp_path_factory, worker_id)
