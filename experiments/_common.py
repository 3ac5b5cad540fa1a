"""Shared helpers for the experiment scripts: the command line (:func:`parser`), environment
record, host thread limits, load average, integer-list arguments, CSV rows (:func:`write_csv`),
NaN-aware ROC AUC, the Monte-Carlo trials mesh. jax is imported where it is used, so that a
script that starts its jax children itself (bench_all, bench_threads, multihost_check, ...) can
parse its command line without importing jax."""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np


def ints(s: str) -> list[int]:
    """'1024,2**12' -> [1024, 4096]."""
    out = []
    for x in (t.strip() for t in s.split(",")):
        if x:
            b, _, e = x.partition("**")
            out.append(int(b) ** int(e) if e else int(b))
    return out


def floats(s: str) -> list[float]:
    """'0.1,1,1e2' -> [0.1, 1.0, 100.0]."""
    return [float(x) for x in s.split(",") if x.strip()]


#: ``--host-threads`` of the timing scripts
THREADS_HELP = ("threads for OpenBLAS/OpenMP/numba (default 1: robust timings on a shared "
                "machine; 0 = library defaults)")
#: ``--out`` of most scripts
OUT_HELP = "output folder"
_NO = object()   # a common flag the script does not have


def parser(doc: str, *, quick: Any = _NO, data_dir: Any = _NO, host_threads: Any = _NO,
           seed: Any = _NO, dtype: Any = _NO, out: Any = _NO,
           helps: Optional[Mapping[str, str]] = None) -> argparse.ArgumentParser:
    """The scripts' argument parser: the description is the first paragraph of ``doc`` (the
    script's docstring, shown as written), with the flags the experiments share already added;
    the script adds its own after them.

    Each keyword adds its flag (left out: the script has no such flag). ``quick``: the
    ``--quick`` switch (``store_true``), its value the help text (``True``: none);
    ``data_dir``: ``--data-dir`` (its value the default, normally None); ``host_threads``:
    ``--host-threads N`` (int; its value the default: 0 leaves the thread pools alone, 1 is
    robust for timings); ``seed``: ``--seed`` (int default); ``dtype``: ``--dtype`` as
    ``(default, choices)``; ``out``: ``--out`` (its value the default; a :class:`~pathlib.Path`
    default makes the flag's type ``Path``). ``helps`` maps a flag's keyword to its help text
    (:data:`THREADS_HELP`, :data:`OUT_HELP`, or the script's own).

    Example:
        >>> p = parser("A demo.", quick="small sizes", seed=0, out="results/demo")
        >>> a = p.parse_args(["--quick"])
        >>> (a.quick, a.seed, a.out)
        (True, 0, 'results/demo')
    """
    helps = dict(helps or {})
    unknown = set(helps) - {"quick", "data_dir", "host_threads", "seed", "dtype", "out"}
    if unknown:
        raise ValueError(f"helps: unknown flag(s) {sorted(unknown)}")
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    if quick is not _NO:
        p.add_argument("--quick", action="store_true",
                       help=quick if isinstance(quick, str) else helps.get("quick"))
    if data_dir is not _NO:
        p.add_argument("--data-dir", default=data_dir, help=helps.get("data_dir"))
    if host_threads is not _NO:
        p.add_argument("--host-threads", type=int, default=host_threads,
                       help=helps.get("host_threads"))
    if seed is not _NO:
        p.add_argument("--seed", type=int, default=seed, help=helps.get("seed"))
    if dtype is not _NO:
        default, choices = dtype
        p.add_argument("--dtype", default=default, choices=choices, help=helps.get("dtype"))
    if out is not _NO:
        p.add_argument("--out", default=out, help=helps.get("out"),
                       **({"type": Path} if isinstance(out, Path) else {}))
    return p


def write_csv(path, rows, fields=None, *, extrasaction: str = "raise",
              exact: bool = False) -> None:
    """Write ``rows`` (dicts) to ``path`` as CSV with a header row: the columns are ``fields``
    (default: the first row's keys); ``extrasaction="ignore"`` drops keys not in ``fields``;
    ``exact`` writes floats with 17 significant digits (round-trip exact)."""
    import csv

    rows = list(rows)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if fields is None else fields,
                           extrasaction=extrasaction)
        w.writeheader()
        for row in rows:
            w.writerow({k: f"{v:.17g}" if isinstance(v, (float, np.floating)) else v
                        for k, v in row.items()} if exact else row)


def trials_mesh(devices: int, trials: int, what: str = "--num-trials"):
    """A 1-D mesh ``("trials",)`` over the first ``devices`` devices to split Monte-Carlo
    trials over (None for ``devices == 1``). Raises ValueError (with the fix) when fewer
    devices exist or ``trials`` is not a multiple of ``devices``. On CPU, virtual devices come
    from ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` set before jax starts."""
    if devices < 1:
        raise ValueError(f"--devices must be >= 1; got {devices}")
    if devices == 1:
        return None
    import jax
    have = jax.device_count()
    if devices > have:
        hint = (f"; on CPU run with XLA_FLAGS=--xla_force_host_platform_device_count={devices}"
                if jax.default_backend() == "cpu" else "")
        raise ValueError(f"--devices {devices}: only {have} device(s) available{hint}")
    if trials % devices:
        raise ValueError(f"{what} = {trials} must be a multiple of --devices {devices} (the "
                         "trials are split evenly over the devices)")
    return jax.make_mesh((devices,), ("trials",), devices=jax.devices()[:devices],
                         axis_types=(jax.sharding.AxisType.Auto,))


def env_info() -> dict:
    import jax
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        affinity = os.cpu_count()
    return {"jax": jax.__version__, "numpy": np.__version__,
            "python": platform.python_version(), "backend": jax.default_backend(),
            "device_kind": jax.devices()[0].device_kind, "cpu_count": os.cpu_count(),
            "cpu_affinity": affinity, "x64": bool(jax.config.jax_enable_x64)}


@contextlib.contextmanager
def host_threads(n: int):
    """Limit the host thread pools to ``n`` threads for the duration (0: leave them alone).

    OpenBLAS (LAPACK behind jax's LU/QR/pivoted QR/SVD on CPU, numpy's SVD) and OpenMP via
    threadpoolctl, and numba (the sparse sign kernel) via ``numba.set_num_threads``. On an
    oversubscribed CPU their multithreaded paths can be 10-100x slower than one thread
    (threads spin or sleep waiting for descheduled siblings), which would swamp any
    comparison; XLA's own thread pool is not affected.
    """
    with contextlib.ExitStack() as stack:
        if n > 0:
            # threadpoolctl limits only the libraries already loaded: load scipy's OpenBLAS
            # (behind jaxlib's CPU LAPACK calls and numpy's linalg) first, or a script that
            # imports scipy later runs it unlimited (10-100x slower rSVD/CPQR selections
            # were measured that way in experiments/beyond_arp.py)
            import scipy.linalg  # noqa: F401
            try:
                from threadpoolctl import threadpool_limits
                stack.enter_context(threadpool_limits(limits=n))
            except ImportError:  # pragma: no cover - ships with scikit-learn
                pass
            try:
                import numba
                prev = numba.get_num_threads()
                numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
                stack.callback(numba.set_num_threads, prev)
            except ImportError:  # pragma: no cover - numba is a dependency
                pass
        yield


def loadavg():
    try:
        return list(os.getloadavg())
    except OSError:  # pragma: no cover
        return None



def run_main(parse_args, run, argv=None, *, x64=False):
    """The scripts' ``main``: parse, then run in float64 or float32 with the host thread
    pools limited.

    ``x64`` (a bool, or a function of the parsed arguments returning one) is the script's
    precision, recorded in its docstring: ``run`` executes inside ``jax.enable_x64(x64)``, a
    scoped, thread-local setting restored on return, so a script never flips the
    process-wide ``jax_enable_x64`` flag (importing or calling it leaves the caller's setting
    alone) and a float32 script stays in native float32 on GPU/TPU even in a process that
    turned float64 on.
    """
    import jax
    args = parse_args(argv)
    flag = bool(x64(args) if callable(x64) else x64)
    with jax.enable_x64(flag), host_threads(args.host_threads):
        return run(args, argv)


def roc_auc(labels, scores) -> float:
    """ROC AUC of ``scores`` for the boolean ``labels`` over the entries with a finite score;
    NaN when one class is absent there.

    Example:
        >>> roc_auc([False, True, True], [0.1, 0.9, float("nan")])
        1.0
    """
    from sklearn.metrics import roc_auc_score
    y = np.asarray(labels, bool)
    s = np.asarray(scores, np.float64)
    if y.shape != s.shape or y.ndim != 1:
        raise ValueError(f"labels and scores must be 1-D of the same length; got {y.shape} "
                         f"and {s.shape}")
    ok = np.isfinite(s)
    y, s = y[ok], s[ok]
    if y.all() or not y.any():
        return float("nan")
    return float(roc_auc_score(y, s))


def gaussian(key, l, m, *, dtype=None, generator="hash"):
    """A drawn l x m Gaussian sketch (``rdr_jax.Gaussian(generator).draw``)."""
    from rdr_jax.sketching import Gaussian
    return Gaussian(generator).draw(key, l, m, dtype=dtype)


def sparse_sign(key, l, m, zeta=8, *, dtype=None):
    """A drawn l x m sparse sign sketch (``rdr_jax.SparseSign(zeta).draw``)."""
    from rdr_jax.sketching import SparseSign
    return SparseSign(zeta).draw(key, l, m, dtype=dtype)


def srtt(key, l, m, *, dtype=None):
    """A drawn l x m SRTT sketch (``rdr_jax.SRTT().draw``)."""
    from rdr_jax.sketching import SRTT
    return SRTT().draw(key, l, m, dtype=dtype)


def time_calls(fn, *args, repeats: int = 3, warmup: int = 2):
    """Call ``fn(*args)`` ``warmup`` times untimed (compilation, then warm caches), then time
    ``repeats`` calls, each blocked until its result is ready.

    Returns:
        (list of seconds per timed call, the last call's output). The experiments' one timer:
        callers take the median or the minimum of the list.
    """
    import time

    import jax

    out = None
    for _ in range(warmup):
        out = jax.block_until_ready(fn(*args))
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return times, out


#: the rule every timing claim follows (shown in the claims' details)
NOISE_RULE = ("a comparison is decided only when the medians differ by more than the repeats' "
              "spread (the larger min-max range of the two cells)")


def compare_times(ta, tb) -> int:
    """-1 when the timed calls ``ta`` are decidedly faster than ``tb``, +1 when decidedly
    slower, 0 when within noise: decided only when the medians differ by more than the
    repeats' spread (the larger of the two min-max ranges), so noise counts both ways."""
    ma, mb = float(np.median(ta)), float(np.median(tb))
    spread = max(max(ta) - min(ta), max(tb) - min(tb))
    if abs(ma - mb) <= spread:
        return 0
    return -1 if ma < mb else 1


def ratio_range(tb, ta) -> tuple[float, float, float]:
    """The time ratio ``tb / ta`` of two sets of timed calls: (median ratio, lowest, highest
    over the repeats' ranges)."""
    return (float(np.median(tb) / np.median(ta)), min(tb) / max(ta), max(tb) / min(ta))


def data_desc(source: str) -> str:
    """What a Ch. 5 data source string means, for figure titles and legends (phantoms named
    as synthetic stand-ins)."""
    if source == "phantom":
        return "synthetic abdominal phantom (stand-in for Synapse)"
    if source == "cardiac_phantom":
        return "synthetic cardiac phantom (stand-in for ACDC)"
    if source.startswith("synapse"):
        return f"Synapse CT ({source.split(':', 1)[-1]})"
    if source.startswith("acdc"):
        return f"ACDC cine-MRI ({source.split(':', 1)[-1]})"
    return source
