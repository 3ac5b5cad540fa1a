"""Issue 30, item 1: does a default rdr_jax call fight OpenBLAS's threads on CPU?

For every shape of a grid (tall, square, wide; 500 to 8000 rows) and every rank k of a grid
(10 to 500), the default column ID ``rdr_jax.interpolative(key, A, k)`` (float64, warm:
two untimed calls, then the median of ``--repeats``) is timed in two fresh child processes:

* ``default``: the environment as given (OpenBLAS -- scipy's, behind jaxlib's CPU LAPACK
  kernels, and numpy's -- with its default thread count);
* ``1 thread``: the same with ``OPENBLAS_NUM_THREADS=1`` set *in the child's environment*
  (what a user can do; rdr_jax never changes its process).

Target: ``default / 1 thread <= 1.3`` at every (shape, k). The children run alternately
(default, one thread, default, ...) so that a change of machine load hits both. The load
average is printed next to every row; a row measured above the core count is marked
``retake``. Matrices: singular values ``i^(-1/2)`` (slow decay), random orthogonal factors.

Run (from the repository root; the machines of this project set OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE, which slow OpenBLAS, so unset them for a fair run)::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python experiments/bench_threads.py
    python experiments/bench_threads.py --quick          # 2 shapes, 3 ranks

Writes ``bench_threads.json`` to ``--out`` (default ``experiments/results/bench_threads``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import parser

SHAPES = ((500, 300), (2000, 2000), (8000, 1000), (500, 4000), (4000, 2000))
KS = (10, 30, 60, 100, 200, 300, 500)
QUICK_SHAPES = ((500, 300), (2000, 1000))
QUICK_KS = (10, 60, 200)
TARGET = 1.3


def child(spec: str) -> None:
    """Time the default column ID for every (shape, k) of ``spec`` (JSON) and print JSON."""
    import jax
    import numpy as np

    import rdr_jax as R

    cfg = json.loads(spec)
    out = []
    with jax.enable_x64(True):
        for m, n in cfg["shapes"]:
            rng = np.random.default_rng(0)
            r = min(m, n)
            U = np.linalg.qr(rng.standard_normal((m, r)))[0]
            V = np.linalg.qr(rng.standard_normal((n, r)))[0]
            A = jax.device_put((U / np.sqrt(np.arange(1, r + 1))) @ V.T)
            for k in cfg["ks"]:
                if k > r:
                    continue
                key = jax.random.key(0)
                for _ in range(2):
                    jax.block_until_ready(R.interpolative(key, A, k))
                ts = []
                for _ in range(cfg["repeats"]):
                    t = time.perf_counter()
                    jax.block_until_ready(R.interpolative(key, A, k))
                    ts.append(time.perf_counter() - t)
                out.append({"m": m, "n": n, "k": k, "ms": 1e3 * statistics.median(ts),
                            "min_ms": 1e3 * min(ts), "load": os.getloadavg()[0]})
    print(json.dumps(out))


def run_child(shapes, ks, repeats, one_thread: bool):
    env = dict(os.environ)
    if one_thread:
        env["OPENBLAS_NUM_THREADS"] = "1"
    else:
        env.pop("OPENBLAS_NUM_THREADS", None)
    spec = json.dumps({"shapes": shapes, "ks": ks, "repeats": repeats})
    res = subprocess.run([sys.executable, __file__, "--child", spec], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = parser(__doc__, quick="2 shapes, 3 ranks", out="experiments/results/bench_threads")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        return child(args.child)
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if var in os.environ:
            print(f"warning: {var} is set; run under `env -u OPENBLAS_CORETYPE -u "
                  "OPENBLAS_L2_SIZE` for a fair BLAS")
    shapes = QUICK_SHAPES if args.quick else SHAPES
    ks = QUICK_KS if args.quick else KS
    cores = os.cpu_count() or 1
    rows = []
    print(f"{'shape':>11} {'k':>4} {'default ms':>11} {'1 thread ms':>12} {'ratio':>6} "
          f"{'load':>5}")
    for shape in shapes:                      # one shape per child pair: alternate often
        d = run_child([shape], ks, args.repeats, one_thread=False)
        o = run_child([shape], ks, args.repeats, one_thread=True)
        for a, b in zip(d, o):
            ratio = a["ms"] / b["ms"]
            load = max(a["load"], b["load"])
            row = {**{f: a[f] for f in ("m", "n", "k")}, "default_ms": a["ms"],
                   "one_thread_ms": b["ms"], "ratio": ratio, "load": load,
                   "retake": load > cores, "held": ratio <= TARGET}
            rows.append(row)
            flag = " retake" if row["retake"] else ""
            print(f"{a['m']:>5}x{a['n']:<5} {a['k']:>4} {a['ms']:>11.1f} {b['ms']:>12.1f} "
                  f"{ratio:>6.2f} {load:>5.2f}{flag}", flush=True)
    worst = max(rows, key=lambda r: r["ratio"])
    held = all(r["held"] for r in rows)
    print(f"\ntarget default / 1 thread <= {TARGET} at every (shape, k): "
          f"{'HELD' if held else 'NOT HELD'} (worst {worst['ratio']:.2f} at "
          f"{worst['m']}x{worst['n']}, k = {worst['k']}); rows above the core count "
          f"({cores}): {sum(r['retake'] for r in rows)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_threads.json").write_text(json.dumps(
        {"rows": rows, "target": TARGET, "held": held, "cores": cores,
         "env": {v: os.environ.get(v) for v in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
                                                "OPENBLAS_NUM_THREADS", "XLA_FLAGS")}},
        indent=1))
    print(f"wrote {out / 'bench_threads.json'}")


if __name__ == "__main__":
    main()
