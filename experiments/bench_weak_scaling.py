"""Weak scaling of the sharded CUR over virtual CPU devices (issue 13, item 5).

For d = 1, 2, 4, 8 devices (``--xla_force_host_platform_device_count=d``, one subprocess
each) A has ``d * block`` rows and n columns, row-sharded over a 1-D mesh, so every device
holds one ``block x n`` slab whatever d is. Each run times ``rdr_jax.cur(key, A, k)`` warm
(median of ``--repeats`` calls after a compile call) and records the bytes of A per device,
the process's peak RSS, and the peak RSS divided by d.

On hardware with one compute unit per device, ideal weak scaling keeps the wall time flat.
Virtual CPU devices share the machine's cores, and one device alone already uses all of them
(XLA:CPU's GEMMs are multithreaded), so on this machine the total work grows with d while the
compute stays fixed: the number to compare is the **time per device** (wall time / d, the
time each device's slab costs), which stays flat when the sharded algorithm adds no
redundant work or communication. The target (issue 13): time per device at d devices within
1.5x of one device. Both ratios are printed; on real multi-device hardware the wall-time
ratio is the one to watch.

Writes ``--out`` (default ``experiments/results/bench_weak_scaling/``): ``weak_scaling.csv``,
``weak_scaling.json`` and ``weak_scaling.png``.

    python experiments/bench_weak_scaling.py            # block 4000 x 1000, k = 50
    python experiments/bench_weak_scaling.py --quick    # block 1000 x 400, k = 20

float64: kept to match the README's float64 weak-scaling table (scoped jax.enable_x64 in each
child).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from _common import parser, write_csv

HERE = Path(__file__).resolve().parent
TARGET = 1.5


def child(d: int, block: int, n: int, k: int, repeats: int) -> dict:
    """Runs in a subprocess with d virtual devices: time the warm sharded CUR (float64,
    scoped with ``jax.enable_x64``)."""
    import jax
    with jax.enable_x64(True):
        return _child(d, block, n, k, repeats)


def _child(d: int, block: int, n: int, k: int, repeats: int) -> dict:
    import jax
    import numpy as np
    from jax.sharding import PartitionSpec as P

    import rdr_jax as R

    assert jax.device_count() == d, (jax.device_count(), d)
    m = d * block
    rng = np.random.default_rng(0)
    r = 4 * k                                   # rank-r signal + noise, decaying spectrum
    s = 1.0 / np.arange(1, r + 1)
    U = np.linalg.qr(rng.standard_normal((m, r)))[0]
    V = np.linalg.qr(rng.standard_normal((n, r)))[0]
    A = (U * s) @ V.T + 1e-4 * rng.standard_normal((m, n)) / np.sqrt(max(m, n))
    del U
    mesh = jax.make_mesh((d,), ("x",))
    A_sh = R.shard(A, mesh, P("x", None))
    del A
    key = jax.random.key(0)
    for _ in range(2):     # compile (rdr_jax: quick first call, optimised second call)
        jax.block_until_ready(R.cur(key, A_sh, k))
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(R.cur(key, A_sh, k))
        ts.append(time.perf_counter() - t)
    shard_bytes = {int(sh.device.id): int(sh.data.nbytes) for sh in A_sh.addressable_shards}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024   # Linux: KiB
    return {"devices": d, "rows": m, "cols": n, "k": k, "time_s": float(np.median(ts)),
            "A_bytes_per_device": max(shard_bytes.values()),
            "peak_rss_bytes": int(peak), "peak_rss_per_device_bytes": int(peak // d),
            "sketch_floats_per_device": int((m // d + n) * (k + 10))}


def run(devices, block, n, k, repeats, out: Path) -> list[dict]:
    rows = []
    cores = os.cpu_count() or 1
    for d in devices:
        env = dict(os.environ)
        flags = [f for f in env.get("XLA_FLAGS", "").split()
                 if not f.startswith("--xla_force_host_platform_device_count")]
        env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={d}"])
        env["JAX_PLATFORMS"] = "cpu"
        cmd = [sys.executable, __file__, "--child", f"{d},{block},{n},{k},{repeats}"]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise SystemExit(f"d = {d} failed:\n{res.stderr[-3000:]}")
        row = json.loads(res.stdout.strip().splitlines()[-1])
        row["time_per_device_s"] = row["time_s"] / d
        rows.append(row)
        print(f"  d = {d}: A {row['rows']} x {row['cols']}, {row['time_s'] * 1e3:8.1f} ms, "
              f"A/device {row['A_bytes_per_device'] / 2**20:6.1f} MiB, peak RSS "
              f"{row['peak_rss_bytes'] / 2**20:7.1f} MiB ({row['peak_rss_per_device_bytes'] / 2**20:.1f}"
              f" MiB/device)", flush=True)
    base = rows[0]
    for row in rows:
        row["time_ratio"] = row["time_s"] / base["time_s"]
        row["time_per_device_ratio"] = row["time_per_device_s"] / base["time_per_device_s"]
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "weak_scaling.csv", rows)
    (out / "weak_scaling.json").write_text(json.dumps(
        {"cores": cores, "block": block, "n": n, "k": k, "target_ratio": TARGET,
         "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "") or "OpenBLAS default",
         "rows": rows}, indent=2))
    plot(rows, cores, out / "weak_scaling.png")
    return rows


def plot(rows, cores, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = [r["devices"] for r in rows]
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.4))
    ax[0].plot(d, [r["time_ratio"] for r in rows], "o-", label="wall time")
    ax[0].plot(d, [r["time_per_device_ratio"] for r in rows], "s--",
               label=f"time per device (wall / d; {cores} cores)")
    ax[0].axhline(TARGET, color="r", lw=0.8, ls=":", label=f"target {TARGET}x")
    ax[0].axhline(1.0, color="k", lw=0.5)
    ax[0].set(xscale="log", xticks=d, xticklabels=d, xlabel="virtual CPU devices",
              ylabel="time / time(1 device)", title="weak scaling, sharded CUR")
    ax[0].legend(fontsize=7)
    ax[1].plot(d, [r["A_bytes_per_device"] / 2**20 for r in rows], "o-", label="A per device")
    ax[1].plot(d, [r["peak_rss_per_device_bytes"] / 2**20 for r in rows], "s--",
               label="peak RSS / devices")
    ax[1].set(xscale="log", xticks=d, xticklabels=d, xlabel="virtual CPU devices",
              ylabel="MiB", title="memory per device")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = parser(__doc__, quick="block 1000 x 400, k = 20",
                out=HERE / "results" / "bench_weak_scaling")
    ap.add_argument("--devices", default="1,2,4,8")
    ap.add_argument("--block", type=int, default=None, help="rows per device")
    ap.add_argument("--n", type=int, default=None, help="columns")
    ap.add_argument("--k", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        d, block, n, k, repeats = (int(v) for v in args.child.split(","))
        print(json.dumps(child(d, block, n, k, repeats)))
        return 0
    block = args.block or (1000 if args.quick else 4000)
    n = args.n or (400 if args.quick else 1000)
    k = args.k or (20 if args.quick else 50)
    devices = [int(v) for v in args.devices.split(",")]
    if devices[0] != 1:
        ap.error("--devices must start with 1 (the baseline)")
    cores = os.cpu_count() or 1
    print(f"weak scaling: {block} x {n} rows per device, rank-{k} CUR, float64, "
          f"{cores} physical cores; OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS', '') or '(unset: OpenBLAS default)'}")
    rows = run(devices, block, n, k, args.repeats, args.out)
    print("\n| devices | A (rows x cols) | wall time | wall / 1 device | time per device "
          "(wall / d) | per device / 1 device | A per device | peak RSS / device |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['devices']} | {r['rows']} x {r['cols']} | {r['time_s'] * 1e3:.1f} ms | "
              f"{r['time_ratio']:.2f}x | {r['time_per_device_s'] * 1e3:.1f} ms | "
              f"{r['time_per_device_ratio']:.2f}x | "
              f"{r['A_bytes_per_device'] / 2**20:.1f} MiB | "
              f"{r['peak_rss_per_device_bytes'] / 2**20:.1f} MiB |")
    worst = max(r["time_ratio"] for r in rows)
    worst_dev = max(r["time_per_device_ratio"] for r in rows)
    print(f"\ntime per device within {TARGET}x of one device (the target): "
          f"{'HELD' if worst_dev <= TARGET else 'NOT HELD'} (worst {worst_dev:.2f}x; "
          f"{cores} cores shared by up to {max(devices)} virtual devices)")
    print(f"wall time within {TARGET}x of one device (needs one compute unit per device): "
          f"{'HELD' if worst <= TARGET else 'NOT HELD'} (worst {worst:.2f}x)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
