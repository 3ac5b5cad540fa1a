"""Benchmark: SRTT (DCT) vs Gaussian sketch, draw + apply to a dense m x n matrix.

What it measures (one run; A a dense m x n Gaussian matrix, default 65536 x 1000), for each
dtype in ``--dtypes`` (float64 under a scoped ``jax.enable_x64(True)``, float32 without) and
each l in ``--ls`` (default 16, 64, 256):

* ``gaussian``   -- ``jax.jit(lambda key, A: Gaussian().draw(key, l, m).apply(A))`` (the
                    default hash generator): generation + GEMM in one compiled call;
* ``srtt``       -- the same with ``SRTT().draw`` (permutation, signs, DCT-II, l rows;
                    ``apply_dense(impl="auto")``);
* ``srtt_fft`` / ``srtt_dense`` -- draw + ``apply_dense(impl="fft")`` / ``impl="dense"``
                    (the two algorithms behind ``"auto"``);
* ``srtt_draw``  -- the draw alone (two sort-based permutations of m: a fixed cost);
* ``srtt_apply`` -- ``apply`` alone, the sketch drawn before the timed call.

Every function is compiled and run twice before timing; the repeats interleave the methods
(one call of each per round) so load drifts hit all of them; each call ends with
``jax.block_until_ready``; the load average (``os.getloadavg()``, 1 minute) is read before
every call. Reported per cell: min and median ms and the median load; ``ratio`` =
gaussian / srtt (min over repeats of each). The check "SRTT faster than Gaussian" holds for an
l when the medians differ by more than the repeats' spread (``experiments/_common.py``'s noise
rule) in SRTT's favour. ``--old`` adds one timed call of the previous formula
(``jax.scipy.fft.dct`` of the whole permuted matrix along axis 0) per dtype.

Run (from the repository root)::

    python experiments/bench_srtt.py            # m=65536, n=1000, l=16,64,256, 5 repeats
    python experiments/bench_srtt.py --quick    # m=8192, n=200, 3 repeats, seconds

Raw numbers go to ``results.json`` in ``--out`` (default ``experiments/results/bench_srtt``).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import jax
import numpy as np

from rdr_jax.sketching import SRTT, Gaussian

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import compare_times, env_info, ints, parser  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "bench_srtt"
METHODS = ("gaussian", "srtt", "srtt_fft", "srtt_dense", "srtt_draw", "srtt_apply")


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:  # pragma: no cover
        return float("nan")


def build(method: str, l: int, m: int):
    if method == "gaussian":
        return jax.jit(lambda key, A: Gaussian().draw(key, l, m, dtype=A.dtype).apply(A))
    if method == "srtt_draw":
        return jax.jit(lambda key, A: SRTT().draw(key, l, m, dtype=A.dtype))
    if method == "srtt_apply":          # called with a drawn sketch instead of a key
        return jax.jit(lambda sk, A: sk.apply(A))
    impl = {"srtt": "auto", "srtt_fft": "fft", "srtt_dense": "dense"}[method]
    return jax.jit(lambda key, A: SRTT().draw(key, l, m, dtype=A.dtype).apply_dense(
        A, impl=impl))


def old_srtt(key, A, l):
    """The previous formula: DCT-II of the whole permuted, signed matrix along axis 0."""
    m = A.shape[0]
    sk = SRTT().draw(key, l, m, dtype=A.dtype)
    X = A[sk.perm] * sk.signs[:, None]
    X = jax.scipy.fft.dct(X, type=2, norm="ortho", axis=0)
    return X[sk.rows] * np.asarray(math.sqrt(m / l), A.dtype)


def run_dtype(dtype: str, args) -> dict:
    m, n = args.m, args.n
    A = jax.random.normal(jax.random.key(0), (m, n), dtype)
    jax.block_until_ready(A)
    keys = jax.random.split(jax.random.key(args.seed), args.repeats + 2)
    out = {}
    for l in args.ls:
        fns = {meth: build(meth, l, m) for meth in METHODS}
        draw = fns["srtt_draw"]
        sketches = [jax.block_until_ready(draw(k, A)) for k in keys]

        def first(meth, i):
            return sketches[i] if meth == "srtt_apply" else keys[i]

        for meth, fn in fns.items():  # compile + warm up
            for i in range(2):
                jax.block_until_ready(fn(first(meth, i), A))
        times = {meth: [] for meth in METHODS}
        loads = {meth: [] for meth in METHODS}
        for r in range(args.repeats):
            for meth, fn in fns.items():
                loads[meth].append(_load())
                t0 = time.perf_counter()
                jax.block_until_ready(fn(first(meth, r + 2), A))
                times[meth].append(time.perf_counter() - t0)
        out[l] = {"times_s": times, "load": loads}
        g, s = times["gaussian"], times["srtt"]
        print(f"{dtype:8s} l={l:4d}  gaussian {min(g) * 1e3:8.1f} ms (med "
              f"{statistics.median(g) * 1e3:8.1f}, load {statistics.median(loads['gaussian']):4.1f})"
              f"  srtt {min(s) * 1e3:8.1f} ms (med {statistics.median(s) * 1e3:8.1f}, load "
              f"{statistics.median(loads['srtt']):4.1f})  ratio {min(g) / min(s):5.2f}  "
              f"[fft {min(times['srtt_fft']) * 1e3:.1f}, dense "
              f"{min(times['srtt_dense']) * 1e3:.1f}, draw {min(times['srtt_draw']) * 1e3:.1f}, "
              f"apply {min(times['srtt_apply']) * 1e3:.1f} ms]",
              flush=True)
    if args.old:
        fn = jax.jit(lambda key, A: old_srtt(key, A, args.ls[0]))
        jax.block_until_ready(fn(keys[0], A))
        load = _load()
        t0 = time.perf_counter()
        jax.block_until_ready(fn(keys[1], A))
        out["old"] = {"l": args.ls[0], "time_s": time.perf_counter() - t0, "load": load}
        print(f"{dtype:8s} previous formula (whole-matrix DCT, l={args.ls[0]}): "
              f"{out['old']['time_s'] * 1e3:.1f} ms (load {load:.1f})", flush=True)
    return out


def parse_args(argv=None):
    p = parser(__doc__, quick="m=8192, n=200, 3 repeats", seed=0, out=DEFAULT_OUT)
    p.add_argument("--m", type=int, default=65536)
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--ls", type=ints, default=[16, 64, 256])
    p.add_argument("--dtypes", default="float64,float32")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--old", action="store_true", help="also time the previous formula once")
    args = p.parse_args(argv)
    if args.quick:
        args.m, args.n, args.repeats = 8192, 200, 3
    if args.repeats < 1 or max(args.ls) > args.m:
        p.error("need --repeats >= 1 and every l <= m")
    return args


def main(argv=None):
    args = parse_args(argv)
    print(f"SRTT vs Gaussian, draw + apply, A {args.m} x {args.n}, min of {args.repeats} "
          f"(load = 1-min load average, {os.cpu_count()} CPUs)")
    results = {"config": {k: (str(v) if isinstance(v, Path) else v)
                          for k, v in vars(args).items()}, "env": env_info()}
    verdict = {}
    for dtype in args.dtypes.split(","):
        with jax.enable_x64(dtype == "float64"):
            res = run_dtype(dtype, args)
        results[dtype] = {str(k): v for k, v in res.items()}
        for l in args.ls:
            t = res[l]["times_s"]
            verdict[(dtype, l)] = compare_times(t["srtt"], t["gaussian"])
    held = all(v == -1 for v in verdict.values())
    bad = [f"{d} l={l} ({'within noise' if v == 0 else 'slower'})"
           for (d, l), v in verdict.items() if v != -1]
    line = ("SRTT faster than Gaussian for every l and dtype: "
            + ("HELD" if held else "NOT HELD (" + "; ".join(bad) + ")"))
    print(line)
    results["srtt_faster_than_gaussian"] = {
        "held": held, "per_cell": {f"{d} l={l}": v for (d, l), v in verdict.items()}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"wrote {args.out / 'results.json'}")
    return results


if __name__ == "__main__":
    main()
