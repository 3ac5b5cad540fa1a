"""Every performance benchmark of the README in one command, within a time budget, on one device.

Run (from the repository root)::

    python experiments/bench_all.py --device gpu                # full README sizes, <= 8 min
    python experiments/bench_all.py --device cpu                # the --quick sizes
    python experiments/bench_all.py --device gpu --dry-run      # print the plan only
    python experiments/bench_all.py --device cpu --only angles,adawac --budget-s 120

Each benchmark script of ``experiments/`` (``bench_sketch``, ``bench_operators``,
``bench_cur`` (pivot + column ID, and the SNN1e6 CUR as a second run), ``bench_angles``,
``bench_certificate``, ``bench_adawac``, ``bench_outofcore``) runs as its own subprocess with
its own output folder under ``--out`` and a timeout from a time plan: benchmark ``i`` gets the
share ``w_i / sum_j w_j`` of ``budget - reserve`` (``w_i`` its nominal seconds on this kind
of device, ``reserve`` the seconds kept for the device probe and the summary), plus whatever
the benchmarks before it left unused, so the whole command stays within ``--budget-s``. On
GPU/TPU the benchmarks run at the README's sizes; on CPU at their ``--quick`` sizes (the
SNN1e6 CUR, which has no smaller size, is skipped there). A benchmark that fails or runs out
of time is recorded as such, and the others still run.

Outputs in ``--out`` (default ``experiments/results/bench_all``): ``bench_all.json`` (device,
card, jax version, date, plan, and per benchmark: command, status ok / failed / timeout /
skipped, wall time, the headline numbers read from its JSON, notes on keys it lacked) and
``bench_all.md``: one markdown table with a column for this device, ready to paste as the
README's GPU column. Each benchmark's own JSON and log stay in ``--out/<name>/``.

This process never initialises a JAX backend itself (on a GPU that would pre-allocate most
of its memory): the device is read by a short probe subprocess, and the benchmarks run with
``XLA_PYTHON_CLIENT_PREALLOCATE=false`` on GPU because some of them start a child process
that needs the GPU too.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from _common import parser

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "experiments" / "results" / "bench_all"
DEVICES = ("cpu", "gpu", "tpu")
#: seconds of the budget kept for the device probe, process start-up and the summary
RESERVE_S = 30.0
#: the smallest timeout a benchmark may get from the plan
MIN_TIMEOUT_S = 10.0
#: seconds between SIGINT and SIGKILL when a benchmark runs out of time
KILL_GRACE_S = 5.0


def device_class(device: str) -> str:
    """``"cpu"`` for the CPU, ``"accel"`` for a GPU or TPU (the full README sizes)."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}; got {device!r}")
    return "cpu" if device == "cpu" else "accel"


# ---- reading a benchmark's JSON ---------------------------------------------------------

class Reader:
    """Path lookups in a benchmark's JSON that never raise: a missing key (or index, or a
    value of the wrong type) gives ``None`` and is remembered in ``missing``, so the
    headline that needed it shows as "n/a" with a note."""

    def __init__(self, data):
        self.data = data
        self.missing: list[str] = []

    def get(self, *path):
        """``get("a", "b", 0)`` is ``data["a"]["b"][0]``, or None (noted) when absent."""
        node = self.data
        for p in path:
            try:
                node = node[p]
            except (KeyError, IndexError, TypeError):
                self.missing.append("/".join(map(str, path)))
                return None
        return node

    def num(self, *path):
        """Like :meth:`get`, for a finite number (bools excluded); None (noted) otherwise."""
        v = self.get(*path)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            self.missing.append("/".join(map(str, path)) + f" (not a finite number: {v!r})")
            return None
        return float(v)


def _div(a, b):
    """a / b, or None when either is missing or b is 0."""
    return None if a is None or b is None or b == 0 else a / b


@dataclasses.dataclass(frozen=True)
class Metric:
    """One headline measurement: ``kind`` says how to print ``value`` (``x``: a ratio,
    ``s``: seconds, ``pct``: a fraction shown in %, ``mib`` / ``gib``: sizes, ``bool``)."""

    label: str
    value: float | bool | None
    kind: str
    target: str = ""


def fmt(value, kind: str) -> str:
    """Text of a metric value; ``"n/a"`` when it is missing.

    Example:
        >>> fmt(0.0123, "s"), fmt(12.345, "x"), fmt(0.025, "pct"), fmt(None, "x")
        ('12.3 ms', '12.35x', '2.5%', 'n/a')
    """
    if value is None:
        return "n/a"
    if kind == "bool":
        return "yes" if value else "no"
    if kind == "x":
        return f"{value:.2f}x" if value < 100 else f"{value:.0f}x"
    if kind == "s":
        return f"{value * 1e3:.1f} ms" if value < 1 else f"{value:.2f} s"
    if kind == "pct":
        return f"{100 * value:.1f}%"
    if kind == "mib":
        return f"{value:.0f} MiB"
    if kind == "gib":
        return f"{value:.1f} GiB"
    raise ValueError(f"unknown metric kind {kind!r}")


def extract_sketch(r: Reader) -> list[Metric]:
    """bench_sketch ``results.json``: at the largest l (512 by default), each sketch's
    ``min_s`` over the read-once floor ``floor_s``."""
    ls = r.get("config", "ls")
    ls = [x for x in ls if isinstance(x, int)] if isinstance(ls, list) else []
    l = 512 if 512 in ls else (max(ls) if ls else 512)
    m, n = r.get("config", "m"), r.get("config", "n")
    floor = r.num("floor_s")
    t = {k: r.num("min_s", k, str(l)) for k in ("gauss_hash", "gemm", "sparse_sign")}
    where = f"l={l}, A {m}x{n} f32"
    return [
        Metric(f"sketch {where}: Gaussian (hash) gen+GEMM / read floor",
               _div(t["gauss_hash"], floor), "x"),
        Metric(f"sketch {where}: GEMM alone / read floor", _div(t["gemm"], floor), "x"),
        Metric(f"sketch {where}: sparse sign in jit / read floor",
               _div(t["sparse_sign"], floor), "x", "<= 10x"),
        Metric(f"sketch {where}: Gaussian (hash) / sparse sign in jit",
               _div(t["gauss_hash"], t["sparse_sign"]), "x", ">= 5x"),
    ]


def extract_operators(r: Reader) -> list[Metric]:
    """bench_operators ``results_{quick,full}.json``: ``seconds[op]["jit" | "eager"]``."""
    secs = r.get("seconds") or {}
    ratios = [_div(r.num("seconds", k, "jit"), r.num("seconds", k, "eager")) for k in secs]
    ratios = [x for x in ratios if x is not None]
    where = f"SNN {r.get('m')}x{r.get('n')}, l={r.get('l')}"
    if not ratios:
        r.missing.append("seconds/*/{jit,eager}")
    return [
        Metric(f"operators {where}: jit / eager, median over ops",
               statistics.median(ratios) if ratios else None, "x"),
        Metric(f"operators {where}: jit / eager, max", max(ratios) if ratios else None, "x"),
        Metric(f"operators {where}: hash Gaussian sketch apply (jit)",
               r.num("seconds", "sketch_hash", "jit"), "s"),
        Metric(f"operators {where}: A.matmat(Q) (jit)", r.num("seconds", "matmat", "jit"), "s"),
    ]


def extract_cur(r: Reader) -> list[Metric]:
    """bench_cur ``bench_cur.json``, parts ``pivot`` (CPQR / LUPP) and ``id`` (column ID with
    default arguments vs scipy ``interp_decomp`` and vs the GEMM floor)."""
    out = []
    pivots = r.get("pivot") or [{}]
    for i, _ in enumerate(pivots):
        out.append(Metric(f"pivot l={r.get('pivot', i, 'l')}, n={r.get('pivot', i, 'n')}: "
                          "CPQR / LUPP", r.num("pivot", i, "speedup"), "x", ">= 5x"))
    ids = r.get("id") or [{}]
    for i, _ in enumerate(ids):
        k = r.get("id", i, "k")
        where = f"column ID k={k} of {r.get('id', i, 'm')}x{r.get('id', i, 'n')}"
        d = ("id", i, "defaults")
        out += [
            Metric(f"{where}: speed-up vs scipy (warm)", r.num(*d, "speedup_vs_scipy"), "x",
                   ">= 50x"),
            Metric(f"{where}: time / GEMM floor", r.num(*d, "over_gemm_floor"), "x", "<= 1.5x"),
            Metric(f"{where}: error / scipy's", r.num(*d, "err_vs_scipy"), "x", "<= 1.15x"),
        ]
        if i == 0:
            for mat in ("slow_decay", "smooth_kernel"):
                f = (*d, "first_call", mat)
                out += [Metric(f"{where}: first call ({mat}) speed-up vs scipy",
                               r.num(*f, "speedup"), "x", ">= 1.5x"),
                        Metric(f"{where}: XLA compile ({mat})", r.num(*f, "compile_s"), "s")]
    return out


def extract_cur_snn(r: Reader) -> list[Metric]:
    """bench_cur ``bench_cur.json``, part ``snn1e6``: the rank-200 CUR of the factored
    10^6 x 10^6 SNN end to end (exact error included) and the child's peak RSS."""
    out = []
    for i, _ in enumerate(r.get("snn1e6") or [{}]):
        where = f"SNN1e6 rank-{r.get('snn1e6', i, 'k')} CUR ({r.get('snn1e6', i, 'sketch')})"
        out += [Metric(f"{where}: CUR + exact error", r.num("snn1e6", i, "cur_plus_error_s"),
                       "s", "<= 45 s"),
                Metric(f"{where}: peak RSS", r.num("snn1e6", i, "peak_rss_gib"), "gib")]
    return out


def extract_angles(r: Reader) -> list[Metric]:
    """bench_angles JSON: numpy loop / ``unbiased_estimate`` (``ratio_numpy_over_default``)
    with the BLAS threads as found and limited to one."""
    where = ("angles " + ", ".join(f"{short}={r.get('config', key)}" for short, key in
                                   (("N", "trials"), ("r", "r"), ("l", "l"), ("k", "k"))))
    s = ("settings", "blas default threads")
    return [
        Metric(f"{where}: unbiased_estimate time", r.num(*s, "median_s", "rdr_jax (default)"),
               "s"),
        Metric(f"{where}: speed-up vs numpy loop", r.num(*s, "ratio_numpy_over_default"), "x",
               ">= 5x"),
        Metric(f"{where}: speed-up vs 1-thread numpy loop",
               r.num("settings", "blas 1 thread", "ratio_numpy_over_default"), "x"),
    ]


def extract_certificate(r: Reader) -> list[Metric]:
    """bench_certificate ``bench_certificate.json``: certificate time / decomposition time
    (``rows[i].cost_ratio``) and the certified fixed-accuracy stopping rule."""
    out = []
    for i, _ in enumerate(r.get("rows") or [{}]):
        where = f"certificate {r.get('rows', i, 'matrix')}, k={r.get('rows', i, 'k')}"
        out += [Metric(f"{where}: cost / CUR", r.num("rows", i, "cost_ratio"), "pct", "<= 10%"),
                Metric(f"{where}: Frobenius bound / true", r.num("rows", i, "fro_ratio"), "x")]
    out.append(Metric("certificate fixed accuracy, confidence 0.99: met tol",
                      r.num("fixed", "certified 0.99", "met_tol"), "pct", ">= 99%"))
    return out


def extract_adawac(r: Reader) -> list[Metric]:
    """bench_adawac ``results.json``: median step times and their per-round ratios."""
    where = (f"AdaWAC {r.get('model')} net, batch {r.get('batch')} of "
             f"{r.get('size')}x{r.get('size')}")
    return [
        Metric(f"{where}: AdaWAC step", r.num("methods", "adawac", "median_s"), "s"),
        Metric(f"{where}: AdaWAC / ACR-only step", r.num("ratios", "adawac/acr-only", "ratio"),
               "x", "<= 1.05x"),
        Metric(f"{where}: AdaWAC / ERM step", r.num("ratios", "adawac/erm", "ratio"), "x"),
    ]


def extract_outofcore(r: Reader) -> list[Metric]:
    """bench_outofcore ``bench_outofcore[_quick].json``: the two-pass streaming CUR of a file
    on disk, cold (compile included) and warm, and the warm run's peak RSS growth."""
    def c(key):
        return r.get("config", key)
    where = (f"out-of-core {c('format')} {c('m')}x{c('n')} "
             f"({fmt(r.num('file_mib'), 'mib')}), budget {c('budget_mib')} MiB")
    growth = r.num("warm", "peak_growth")
    return [
        Metric(f"{where}: cold time", r.num("cold", "time_s"), "s"),
        Metric(f"{where}: warm time", r.num("warm", "time_s"), "s"),
        Metric(f"{where}: warm peak RSS growth", None if growth is None else growth / 2**20,
               "mib", f"<= {fmt(r.num('bound_mib'), 'mib')}"),
        Metric(f"{where}: memory claim held", r.get("claim_held"), "bool"),
    ]


@dataclasses.dataclass(frozen=True)
class Bench:
    """One benchmark run: ``args[cls]`` are the script's arguments on a device class
    (``"cpu"`` / ``"accel"``; ``None``: not run there, ``skip`` says why), ``seconds[cls]``
    its nominal time (the plan's weight), ``result`` its JSON inside the output folder
    (``--out`` names that file itself when ``out_is_file``)."""

    name: str
    script: str
    args: Mapping[str, tuple[str, ...] | None]
    seconds: Mapping[str, float]
    result: Mapping[str, str]
    extract: Callable[[Reader], list[Metric]]
    out_is_file: bool = False
    skip: str = ""


#: Run (and table) order: the benchmarks whose time is predictable first, so that the time they
#: leave unused carries over to the last two, whose GPU time is mostly XLA compilation of many
#: variants (bench_sketch) and the CPU scipy reference (bench_cur). Nominal "accel" seconds
#: follow the wall times measured on an H200 (2026-11-27): operators 46 s, SNN1e6 CUR 22 s,
#: adawac 20 s, outofcore 31 s, angles 38 s, certificate 66 s, sketch 75 s, cur 124 s.
BENCHES: tuple[Bench, ...] = (
    Bench("operators", "bench_operators.py",
          {"cpu": ("--quick", "--no-before"), "accel": ("--no-before",)},
          {"cpu": 60, "accel": 55},
          {"cpu": "results_quick.json", "accel": "results_full.json"}, extract_operators),
    Bench("cur_snn1e6", "bench_cur.py",
          {"cpu": None, "accel": ("--parts", "snn1e6", "--snn-sketch", "gaussian")},
          {"cpu": 0, "accel": 25}, {"cpu": "bench_cur.json", "accel": "bench_cur.json"},
          extract_cur_snn,
          skip="the SNN1e6 part has one size (10^6 x 10^6, ~80 s and 8 GiB on a 2-core CPU)"),
    Bench("adawac", "bench_adawac.py", {"cpu": ("--quick",), "accel": ()},
          {"cpu": 60, "accel": 25}, {"cpu": "results.json", "accel": "results.json"},
          extract_adawac),
    Bench("outofcore", "bench_outofcore.py",
          {"cpu": ("--quick", "--no-progress"), "accel": ("--no-progress",)},
          {"cpu": 60, "accel": 35},
          {"cpu": "bench_outofcore_quick.json", "accel": "bench_outofcore.json"},
          extract_outofcore),
    Bench("angles", "bench_angles.py", {"cpu": ("--quick",), "accel": ()},
          {"cpu": 60, "accel": 40}, {"cpu": "bench_angles.json", "accel": "bench_angles.json"},
          extract_angles, out_is_file=True),
    Bench("certificate", "bench_certificate.py", {"cpu": ("--quick",), "accel": ()},
          {"cpu": 90, "accel": 70},
          {"cpu": "bench_certificate.json", "accel": "bench_certificate.json"},
          extract_certificate),
    Bench("sketch", "bench_sketch.py", {"cpu": ("--quick",), "accel": ()},
          {"cpu": 45, "accel": 90}, {"cpu": "results.json", "accel": "results.json"},
          extract_sketch),
    Bench("cur", "bench_cur.py",
          {"cpu": ("--quick", "--parts", "pivot,id"), "accel": ("--parts", "pivot,id")},
          {"cpu": 90, "accel": 140}, {"cpu": "bench_cur.json", "accel": "bench_cur.json"},
          extract_cur),
)
BY_NAME = {b.name: b for b in BENCHES}


# ---- the plan -----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Step:
    """A planned run: ``cmd`` (None when skipped, with ``skip`` the reason), its planned
    timeout, its output folder and the JSON it must write."""

    bench: Bench
    cmd: tuple[str, ...] | None
    timeout_s: float
    out_dir: Path
    result_path: Path
    skip: str = ""


def select(only: str | None) -> tuple[Bench, ...]:
    """The benchmarks named in ``--only`` ("sketch,adawac"), in plan order; all when None."""
    if not only:
        return BENCHES
    names = [s.strip() for s in only.split(",") if s.strip()]
    unknown = [s for s in names if s not in BY_NAME]
    if unknown or not names:
        raise ValueError(f"--only: unknown benchmark(s) {unknown or only!r}; choose from "
                         f"{', '.join(BY_NAME)}")
    return tuple(b for b in BENCHES if b.name in names)


def make_plan(benches: Sequence[Bench], device: str, budget_s: float, out: Path,
              python: str = sys.executable) -> list[Step]:
    """Commands and timeouts: with nominal seconds ``w_i`` of the benchmarks that run on this
    device class, benchmark ``i`` gets ``t_i = (budget_s - RESERVE_S) w_i / sum_j w_j``, so
    ``sum_i t_i = budget_s - RESERVE_S < budget_s``. Raises ValueError when a benchmark would
    get less than ``MIN_TIMEOUT_S``."""
    cls = device_class(device)
    if not (isinstance(budget_s, (int, float)) and math.isfinite(budget_s)):
        raise ValueError(f"--budget-s must be a finite number of seconds; got {budget_s!r}")
    runs = [b for b in benches if b.args[cls] is not None]
    total_w = sum(b.seconds[cls] for b in runs)
    avail = budget_s - RESERVE_S
    if runs and avail * min(b.seconds[cls] for b in runs) / total_w < MIN_TIMEOUT_S:
        need = RESERVE_S + MIN_TIMEOUT_S * total_w / min(b.seconds[cls] for b in runs)
        raise ValueError(f"--budget-s {budget_s:g} is too small for {len(runs)} benchmark(s) "
                         f"on {device}: need at least {math.ceil(need)} s "
                         f"({RESERVE_S:g} s reserve + >= {MIN_TIMEOUT_S:g} s each)")
    plan = []
    for b in benches:
        out_dir = Path(out) / b.name
        result = out_dir / b.result[cls]
        a = b.args[cls]
        if a is None:
            plan.append(Step(b, None, 0.0, out_dir, result, b.skip or f"not run on {device}"))
            continue
        target = result if b.out_is_file else out_dir
        cmd = (python, str(ROOT / "experiments" / b.script), *a, "--out", str(target))
        plan.append(Step(b, cmd, avail * b.seconds[cls] / total_w, out_dir, result))
    return plan


def format_plan(plan: Sequence[Step], device: str, budget_s: float) -> str:
    """The plan as text: one line per benchmark with its timeout and command."""
    planned = sum(s.timeout_s for s in plan)
    lines = [f"plan for --device {device}: {sum(s.cmd is not None for s in plan)} benchmark "
             f"run(s), timeouts sum to {planned:.0f} s of the {budget_s:g} s budget "
             f"({RESERVE_S:g} s reserved; unused time carries over to the next benchmark)"]
    for s in plan:
        if s.cmd is None:
            lines.append(f"  {s.bench.name:12s} skipped: {s.skip}")
        else:
            rel = [str(Path(c).relative_to(ROOT)) if c.startswith(str(ROOT)) else c
                   for c in s.cmd[1:]]
            lines.append(f"  {s.bench.name:12s} timeout {s.timeout_s:5.0f} s: python "
                         + " ".join(rel))
    return "\n".join(lines)


# ---- running ------------------------------------------------------------------------------

def child_env(device: str) -> dict[str, str]:
    """The benchmarks' environment: the repository on PYTHONPATH and, on GPU, no memory
    pre-allocation (bench_cur and bench_outofcore start child processes of their own)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    if device == "gpu":
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    return env


def _killpg(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the process group we started; False when it no longer exists."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _stop(proc: subprocess.Popen) -> None:
    """SIGINT to the benchmark's process group (KeyboardInterrupt runs the scripts' cleanup,
    e.g. their temporary files), then SIGKILL after ``KILL_GRACE_S`` seconds."""
    for sig in (signal.SIGINT, signal.SIGKILL):
        if not _killpg(proc.pid, sig):
            return
        try:
            proc.wait(timeout=KILL_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


def run_step(step: Step, timeout_s: float, env: Mapping[str, str]) -> dict:
    """Run one planned benchmark in its own process group (so its children die with it on a
    timeout), its output in ``out_dir/log.txt``. Returns the record: status ``ok`` (exit 0
    and its JSON written), ``failed`` or ``timeout``, wall seconds, exit code."""
    step.out_dir.mkdir(parents=True, exist_ok=True)
    step.result_path.unlink(missing_ok=True)     # never report a stale JSON
    log = step.out_dir / "log.txt"
    t0 = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.Popen(step.cmd, cwd=ROOT, env=dict(env), stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
            status = "ok" if rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            status, rc = "timeout", None
            _stop(proc)
        except KeyboardInterrupt:       # its own session: Ctrl-C here does not reach it
            _stop(proc)
            raise
        finally:
            _killpg(proc.pid, signal.SIGKILL)     # whatever of its group is still running
    wall = time.perf_counter() - t0
    rec = {"status": status, "wall_s": wall, "timeout_s": timeout_s, "returncode": rc,
           "log": str(log)}
    if status == "ok" and not step.result_path.is_file():
        rec["status"] = "failed"
        rec["error"] = f"exit 0 but no {step.result_path.name} was written"
    if rec["status"] != "ok":
        rec["log_tail"] = log.read_text(errors="replace")[-2000:]
    return rec


def run_plan(plan: Sequence[Step], device: str, runner=run_step) -> dict[str, dict]:
    """Run the steps in order; each gets its planned timeout plus the time the earlier ones
    left unused (minus the seconds a killed one overran its timeout, at least 1 s), so the
    sum of the wall times stays at the plan's sum. A failure or timeout is recorded and the
    next benchmark runs."""
    env = child_env(device)
    records, carry = {}, 0.0
    for s in plan:
        if s.cmd is None:
            records[s.bench.name] = {"status": "skipped", "reason": s.skip, "wall_s": 0.0}
            continue
        timeout = max(1.0, s.timeout_s + carry)
        print(f"[bench_all] {s.bench.name}: timeout {timeout:.0f} s", flush=True)
        rec = runner(s, timeout, env)
        carry = timeout - rec["wall_s"]
        print(f"[bench_all] {s.bench.name}: {rec['status']} in {rec['wall_s']:.1f} s", flush=True)
        records[s.bench.name] = rec
    return records


# ---- the device ---------------------------------------------------------------------------

_PROBE = ("import json, jax; d = jax.devices(); print(json.dumps({'backend': "
          "jax.default_backend(), 'device_kind': d[0].device_kind, 'device_count': len(d), "
          "'jax': jax.__version__}))")


def probe_device(python: str = sys.executable, timeout_s: float = 120.0) -> dict:
    """Backend, first device kind, device count and jax version, read by a subprocess (this
    process must not hold the GPU while the benchmarks run)."""
    r = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, cwd=ROOT,
                       timeout=timeout_s)
    if r.returncode != 0:
        raise RuntimeError(f"could not start jax to read the device:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def check_device(device: str, info: Mapping) -> None:
    """Raise ValueError unless ``jax.default_backend()`` (``info["backend"]``) is ``device``."""
    device_class(device)
    if info.get("backend") != device:
        raise ValueError(
            f"--device {device} but jax.default_backend() is {info.get('backend')!r} "
            f"(first device: {info.get('device_kind')!r}); install the jax build for "
            f"{device} (e.g. jax[cuda12] for gpu) or pass --device {info.get('backend')}")


# ---- the summary --------------------------------------------------------------------------

def summarize(plan: Sequence[Step], records: Mapping[str, dict], info: Mapping,
              device: str, budget_s: float, total_wall_s: float | None = None) -> dict:
    """``bench_all.json``'s content: the device, and per benchmark its record, command and
    the headline metrics read from its JSON (missing keys: value None and a note)."""
    benches = {}
    for s in plan:
        rec = dict(records.get(s.bench.name, {"status": "not run", "wall_s": 0.0}))
        entry = {**rec, "command": None if s.cmd is None else list(s.cmd),
                 "planned_timeout_s": s.timeout_s, "result_json": str(s.result_path),
                 "metrics": [], "notes": []}
        if rec.get("status") == "ok":
            try:
                data = json.loads(s.result_path.read_text())
            except (OSError, ValueError) as e:
                entry["status"] = "failed"
                entry["notes"].append(f"could not read {s.result_path.name}: {e}")
                data = None
            if data is not None:
                r = Reader(data)
                try:
                    metrics = s.bench.extract(r)
                except Exception as e:     # an unexpected schema must not lose the rest
                    metrics = []
                    entry["notes"].append(f"could not read the headline numbers: {e!r}")
                entry["metrics"] = [dataclasses.asdict(m) for m in metrics]
                entry["notes"] += [f"missing in {s.result_path.name}: {k}"
                                   for k in dict.fromkeys(r.missing)]
        benches[s.bench.name] = entry
    return {"device": device, "card": info.get("device_kind"),
            "device_count": info.get("device_count"), "backend": info.get("backend"),
            "jax": info.get("jax"), "python": sys.version.split()[0],
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "budget_s": budget_s, "total_wall_s": total_wall_s,
            "env": {"XLA_PYTHON_CLIENT_PREALLOCATE":
                    child_env(device).get("XLA_PYTHON_CLIENT_PREALLOCATE")},
            "benchmarks": benches}


def markdown(summary: Mapping) -> str:
    """One markdown table: benchmark | measurement | target | a column for this device, with
    a status row per benchmark ("ok, 35 s", "timeout after 60 s", "failed (exit 1)")."""
    card = summary.get("card") if summary["device"] != "cpu" else None
    col = summary["device"].upper() + (f" ({card})" if card else "")
    lines = [f"| benchmark | measurement | target | {col} |", "| --- | --- | --- | ---: |"]
    for name, e in summary["benchmarks"].items():
        st = e.get("status")
        if st == "ok":
            state = f"ok, {e['wall_s']:.0f} s"
        elif st == "timeout":
            state = f"timeout after {e['wall_s']:.0f} s"
        elif st == "failed":
            rc = e.get("returncode")
            state = f"failed ({'exit ' + str(rc) if rc not in (None, 0) else e.get('error', '')})"
        else:
            state = f"{st}: {e.get('reason', '')}".rstrip(": ")
        lines.append(f"| {name} | status, wall time |  | {state} |")
        for m in e.get("metrics", []):
            lines.append(f"| {name} | {m['label']} | {m['target']} | {fmt(m['value'], m['kind'])} |")
    notes = [f"{name}: {n}" for name, e in summary["benchmarks"].items() for n in e["notes"]]
    tail = (f"\n{col}, jax {summary.get('jax')}, "
            f"{summary['date']}, total {summary.get('total_wall_s') or 0:.0f} s of a "
            f"{summary['budget_s']:g} s budget.")
    if notes:
        tail += "\n\nNotes (n/a):\n" + "\n".join(f"- {n}" for n in notes)
    return "\n".join(lines) + "\n" + tail + "\n"


def write_outputs(summary: Mapping, out: Path) -> tuple[Path, Path]:
    """Write ``bench_all.json`` and ``bench_all.md`` into ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    pj, pm = out / "bench_all.json", out / "bench_all.md"
    pj.write_text(json.dumps(summary, indent=2))
    pm.write_text(markdown(summary))
    return pj, pm


# ---- command line -------------------------------------------------------------------------

def parse_args(argv=None):
    """The command line (see the module docstring)."""
    p = parser(__doc__, out=DEFAULT_OUT,
               helps={"out": "output folder (default experiments/results/bench_all)"})
    p.add_argument("--device", choices=DEVICES, required=True,
                   help="the backend to measure; must be jax.default_backend()")
    p.add_argument("--budget-s", type=float, default=480.0,
                   help="wall-clock budget of the whole command in seconds (default 480)")
    p.add_argument("--only", default=None,
                   help=f"comma-separated subset of: {', '.join(BY_NAME)}")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (commands and timeouts) and exit; no device probe")
    return p.parse_args(argv)


def _fail(err: Exception):
    print(f"bench_all: error: {err}", file=sys.stderr)
    raise SystemExit(2)


def main(argv=None, probe=probe_device, runner=run_step) -> dict | None:
    """Parse, plan, check the device, run, and write ``bench_all.json`` / ``bench_all.md``.
    Bad arguments and a device mismatch exit with status 2 and a message."""
    t0 = time.perf_counter()
    args = parse_args(argv)
    try:
        plan = make_plan(select(args.only), args.device, args.budget_s, args.out)
    except ValueError as e:
        _fail(e)
    print(format_plan(plan, args.device, args.budget_s))
    if args.dry_run:
        return None
    info = probe()
    try:
        check_device(args.device, info)
    except ValueError as e:
        _fail(e)
    card = f", card {info.get('device_kind')}" if args.device != "cpu" else ""
    print(f"[bench_all] backend {info['backend']}{card}, jax {info.get('jax')}", flush=True)
    records = run_plan(plan, args.device, runner)
    summary = summarize(plan, records, info, args.device, args.budget_s,
                        time.perf_counter() - t0)
    pj, pm = write_outputs(summary, args.out)
    print()
    print(pm.read_text())
    print(f"wrote {pj} and {pm}")
    return summary


if __name__ == "__main__":
    main()
