"""Multi-process (multi-host) check: the sharded core entry points across JAX processes.

Launches ``--processes`` local Python processes that form one JAX multi-process job
(``jax.distributed.initialize`` with a coordinator on localhost, cross-process CPU
collectives through gloo), each with ``--local-devices`` virtual CPU devices. Every process
holds only its own block of rows of A; the global row-sharded array is assembled with
``jax.make_array_from_process_local_data``, exactly as on a multi-host GPU/TPU job where each
host loads its shard. Each process then runs ``rdr_jax.cur``, ``rdr_jax.interpolative``
(column and row side) and ``rdr_jax.rsvd`` on the global array, gathers the results with
``jax.experimental.multihost_utils.process_allgather`` and compares them with the unsharded
call on one local device with the same key (the hash Gaussian sketch does not depend on the
device count, so the skeletons must be identical and the factors equal to float tolerance).

Run (from the repository root)::

    python experiments/multihost_check.py                        # 2 processes x 2 devices
    python experiments/multihost_check.py --processes 4 --local-devices 2 --m 4000 --n 1000

On a real cluster the same child code runs once per host with the coordinator's address
(see the README, "GPU, TPU and multi-host"); here the launcher plays the cluster scheduler.
Writes ``--out``/multihost_check.json and prints whether every check held (exit 1 if not).

float64: needed because factors must match the unsharded call to RTOL = 1e-9 (set in each child
process, which the launcher owns).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from _common import parser

ROOT = Path(__file__).resolve().parents[1]

#: factors must match the unsharded call to this relative tolerance (float64)
RTOL = 1e-9


def rank40_matrix(m: int, n: int, seed: int = 0):
    """A rank-40 matrix with decaying spectrum plus small noise (float64, numpy)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    r = 40
    L = rng.standard_normal((m, r)) / np.arange(1, r + 1)
    return L @ rng.standard_normal((r, n)) + 1e-3 * rng.standard_normal((m, n))


def child(pid: int, nproc: int, port: int, local_devices: int, m: int, n: int, k: int,
          timeout_s: float) -> dict:
    """One process of the job: build the global row-sharded A from this process's rows, run
    the entry points, compare with the unsharded reference on a local device."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    os.environ["XLA_FLAGS"] = " ".join(
        flags + [f"--xla_force_host_platform_device_count={local_devices}"])
    import faulthandler
    faulthandler.dump_traceback_later(max(timeout_s - 10.0, 5.0), exit=True)  # a hang: where
    import jax
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=nproc,
                               process_id=pid, initialization_timeout=120)
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding, PartitionSpec as P

    import rdr_jax as R

    if m % (nproc * local_devices):
        raise ValueError(f"m = {m} must be divisible by the {nproc * local_devices} devices")
    A = rank40_matrix(m, n)
    mesh = jax.make_mesh((jax.device_count(),), ("x",),
                         axis_types=(jax.sharding.AxisType.Auto,))
    rows = m // nproc
    Ag = jax.make_array_from_process_local_data(
        NamedSharding(mesh, P("x", None)), A[pid * rows:(pid + 1) * rows], (m, n))
    local = jax.device_put(jnp.asarray(A), jax.local_devices()[0])
    key = jax.random.key(7)

    def gather(x):
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))

    def close(a, b):
        a, b = np.asarray(a), np.asarray(b)
        return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))

    checks, diffs = {}, {}       # diffs: relative difference to the unsharded factors
    t0 = time.perf_counter()
    def step(name):
        print(f"[process {pid}] {name} at {time.perf_counter() - t0:.1f} s", flush=True)

    step("cur")
    c, c0 = R.cur(key, Ag, k), R.cur(key, local, k)
    checks["cur: same column skeletons"] = bool(np.array_equal(gather(c.cols), c0.cols))
    checks["cur: same row skeletons"] = bool(np.array_equal(gather(c.rows), c0.rows))
    diffs["cur: U to float tolerance"] = close(gather(c.U), c0.U)
    checks["cur: C row-sharded over all devices"] = (
        len(c.C.sharding.device_set) == jax.device_count())
    for side in ("column", "row"):
        step(f"interpolative ({side})")
        d, d0 = R.interpolative(key, Ag, k, side=side), R.interpolative(key, local, k, side=side)
        checks[f"interpolative ({side}): same skeletons"] = bool(
            np.array_equal(gather(d.cols if side == "column" else d.rows),
                           d0.cols if side == "column" else d0.rows))
        diffs[f"interpolative ({side}): W to float tolerance"] = close(gather(d.W), d0.W)
    step("rsvd")
    s, s0 = R.rsvd(key, Ag, k), R.rsvd(key, local, k)
    diffs["rsvd: singular values to float tolerance"] = close(gather(s.s), s0.s)
    recon = gather(s.U) * gather(s.s) @ gather(s.Vt)
    diffs["rsvd: U diag(s) Vt to float tolerance"] = close(
        recon, (np.asarray(s0.U) * np.asarray(s0.s)) @ np.asarray(s0.Vt))
    checks.update({name: v < RTOL for name, v in diffs.items()})
    wall = time.perf_counter() - t0
    jax.distributed.shutdown()
    return {"process": pid, "processes": nproc, "devices": nproc * local_devices,
            "checks": checks, "rel_diff": diffs, "wall_s": wall}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def launch(nproc: int, local_devices: int, m: int, n: int, k: int, timeout_s: float) -> list:
    """Start the processes, wait for all (killing them all on a timeout), return each one's
    JSON record. Raises RuntimeError with the failing process's output."""
    port = free_port()
    procs = [subprocess.Popen(
        [sys.executable, __file__, "--child", str(pid), "--port", str(port),
         "--processes", str(nproc), "--local-devices", str(local_devices),
         "--m", str(m), "--n", str(n), "--k", str(k), "--timeout-s", str(timeout_s)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        for pid in range(nproc)]
    deadline = time.monotonic() + timeout_s
    records, failures = [], []
    for pid, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            tails = [f"--- process {i}:\n{q.communicate()[0][-1500:]}"
                     for i, q in enumerate(procs)]
            raise RuntimeError(f"process {pid} did not finish within {timeout_s:g} s\n"
                               + "\n".join(tails))
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        if p.returncode != 0 or not lines:
            failures.append(f"process {pid} (exit {p.returncode}):\n{out[-3000:]}")
        else:
            records.append(json.loads(lines[-1]))
    if failures:
        raise RuntimeError("\n".join(failures))
    return records


def main(argv=None) -> int:
    ap = parser(__doc__, out=str(ROOT / "experiments" / "results" / "multihost_check"))
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--local-devices", type=int, default=2, help="virtual CPU devices each")
    ap.add_argument("--m", type=int, default=1200)
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--timeout-s", type=float, default=300.0)
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.processes < 1 or args.local_devices < 1:
        ap.error("--processes and --local-devices must be >= 1")
    if args.child is not None:
        rec = child(args.child, args.processes, args.port, args.local_devices,
                    args.m, args.n, args.k, args.timeout_s)
        print(json.dumps(rec), flush=True)
        return 0
    total = args.processes * args.local_devices
    if args.m % total:
        ap.error(f"--m {args.m} must be divisible by processes x local devices = {total}")
    t = time.perf_counter()
    records = launch(args.processes, args.local_devices, args.m, args.n, args.k,
                     args.timeout_s)
    wall = time.perf_counter() - t
    print(f"{args.processes} processes x {args.local_devices} virtual CPU devices "
          f"(gloo collectives), A {args.m} x {args.n} row-sharded over {total} devices, "
          f"k = {args.k}; {wall:.1f} s including start-up")
    held = True
    for name in records[0]["checks"]:
        ok = all(r["checks"][name] for r in records)
        held &= ok
        diff = [r["rel_diff"][name] for r in records if name in r["rel_diff"]]
        extra = f"; max rel. difference {max(diff):.1e} (< {RTOL:g})" if diff else ""
        print(f"  {name:46s} {'HELD' if ok else 'NOT HELD'} (all {len(records)} "
              f"processes{extra})")
    print(f"multi-process results identical to the unsharded call: "
          f"{'HELD' if held else 'NOT HELD'}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "multihost_check.json").write_text(json.dumps(
        {"processes": args.processes, "local_devices": args.local_devices, "m": args.m,
         "n": args.n, "k": args.k, "wall_s": wall, "held": held, "records": records},
        indent=2))
    print(f"wrote {out / 'multihost_check.json'}")
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
