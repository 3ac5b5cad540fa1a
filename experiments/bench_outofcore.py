"""Benchmark for issue 13 item 4 (out-of-core): a matrix on disk, larger than the memory
budget, through the two passes of the streaming CUR (Algorithm 3) with peak memory O((m + n) l + block).

Run (from the repository root)::

    python experiments/bench_outofcore.py            # 20000 x 5000 float64 (800 MB), 128 MiB budget
    python experiments/bench_outofcore.py --quick    # 12000 x 2000 (192 MB), 16 MiB budget

The file (HDF5 by default, ``--format npy`` for a .npy file) is written block by block into a
temporary folder (``--dir``). A fresh subprocess (so that its peak RSS is its own) imports
rdr_jax, records its RSS, runs :func:`rdr_jax.id_cur.outofcore.streaming_cur` once cold (compiles
included) and once warm (after resetting VmHWM through ``/proc/self/clear_refs``), and
reports the time, the number of blocks and the peak RSS growth of each run. The claim
checked: the warm peak growth stays under ``budget + 4 (m + n) l itemsize + 96 MiB`` (the
constant of ``tests/test_outofcore.py``) while the file is larger than that. When the matrix
fits in memory (``--compare``, default on below 4 GiB), the parent loads it and checks that
the in-memory ``streaming_skeletons`` on the same blocks picks the same skeletons and that
the factors agree, and reports the CUR error ``||A - C U R||_F / ||A||_F``.

Results: ``bench_outofcore.json`` (``bench_outofcore_quick.json`` with ``--quick``) in
``--out`` (default ``experiments/results/bench_outofcore``), with the configuration and the
environment.

float64: needed because the file and the in-memory reference are float64 (scoped
jax.enable_x64).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import parser

MiB = 2 ** 20
RUNTIME_CONSTANT = 96 * MiB


def write_matrix(path: Path, m: int, n: int, fmt: str, seed: int, rank: int = 100,
                 chunk: int = 1024) -> None:
    """``A = G diag(0.9^i) V + 1e-3 noise`` (numerical rank ~ rank), written in row chunks so
    that the writer never holds the matrix either."""
    import h5py
    rng = np.random.default_rng(seed)
    V = rng.standard_normal((rank, n)) / np.sqrt(n)
    decay = 0.9 ** np.arange(rank)
    if fmt == "hdf5":
        f = h5py.File(path, "w")
        ds = f.create_dataset("A", (m, n), dtype=np.float64)
    else:
        ds = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(m, n))
    for i in range(0, m, chunk):
        b = min(chunk, m - i)
        ds[i:i + b] = (rng.standard_normal((b, rank)) * decay) @ V \
            + 1e-3 * rng.standard_normal((b, n)) / np.sqrt(n)
        if fmt != "hdf5":
            ds.flush()
    if fmt == "hdf5":
        f.close()
    else:
        del ds


def _method(args):
    """The streaming method: LUPP with sketch size ``args.l`` (oversampling ``l - k``)."""
    import rdr_jax as R
    return R.Method("lupp", oversample=args.l - args.k)


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(s.split()[1]) * 1024 for s in f if s.startswith(key + ":"))


def child(args) -> None:
    """Runs in a subprocess: cold and warm streaming CUR of the file (float64, scoped with
    ``jax.enable_x64``); prints JSON."""
    import jax
    with jax.enable_x64(True):
        _child(args)


def _child(args) -> None:
    import jax

    from rdr_jax.id_cur import outofcore as O

    base = _status("VmRSS")
    D = O.DiskMatrix.open(args.child, memory_budget=args.budget_mib * MiB)
    out = {"rss_after_import": base, "nbytes": D.nbytes, "blocks": D.num_blocks(args.axis),
           "block_size": D.block_size(args.axis), "format": D.format}
    for run, seed in (("cold", args.seed), ("warm", args.seed + 1)):
        before = _status("VmRSS")
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # VmHWM := VmRSS
            reset = True
        except OSError:
            reset = False
        t = time.perf_counter()
        cur = O.streaming_cur(jax.random.key(seed), D, args.k, method=_method(args), axis=args.axis,
                              progress=not args.no_progress)
        jax.block_until_ready(cur)
        out[run] = {"time_s": time.perf_counter() - t, "rss_before": before,
                    "peak_growth": _status("VmHWM") - before, "hwm_reset": reset}
        if run == "warm":
            np.savez(args.child_out + ".npz", rows=np.asarray(cur.rows),
                     cols=np.asarray(cur.cols), U=np.asarray(cur.U), eta=float(cur.eta),
                     eta_rows=float(cur.eta_rows))
    print(json.dumps(out))


def compare(path: Path, fmt: str, args, res: dict) -> dict:
    """In-memory reference on the same blocks; CUR error of the out-of-core result (float64,
    scoped: this runs in the calling process, whose x64 flag is left alone)."""
    import jax
    with jax.enable_x64(True):
        return _compare(path, fmt, args, res)


def _compare(path: Path, fmt: str, args, res: dict) -> dict:
    import h5py
    import jax

    from rdr_jax.id_cur import streaming as ST
    if fmt == "hdf5":
        with h5py.File(path, "r") as f:
            A = f["A"][...]
    else:
        A = np.load(path)
    got = np.load(str(res["npz"]))
    b = res["block_size"]
    blocks = [A[i:i + b] if args.axis == 0 else A[:, i:i + b]
              for i in range(0, A.shape[args.axis], b)]
    ref = ST.streaming_skeletons(jax.random.key(args.seed + 1), blocks, A.shape, args.k,
                                 method=_method(args), axis=args.axis)
    C, S, R = ST.retrieve_skeletons(blocks, A.shape, ref.rows, ref.cols, axis=args.axis)
    U = np.asarray(ST.cur_from_skeletons(C, S, R).U)
    rows, cols = got["rows"], got["cols"]
    Cs, Rs = A[:, cols], A[rows]
    nA = np.linalg.norm(A)
    err = np.linalg.norm(A - Cs @ got["U"] @ Rs) / nA
    # the same skeletons with the optimal core C^+ A R^+ (needs A again: not streaming)
    err_best = np.linalg.norm(A - Cs @ (np.linalg.pinv(Cs) @ A @ np.linalg.pinv(Rs)) @ Rs) / nA
    return {"same_rows": bool(np.array_equal(rows, np.asarray(ref.rows))),
            "same_cols": bool(np.array_equal(cols, np.asarray(ref.cols))),
            "U_rel_diff": float(np.linalg.norm(got["U"] - U) / np.linalg.norm(U)),
            "cur_rel_error_fro": float(err), "cur_best_core_rel_error_fro": float(err_best)}


def parse_args(argv=None):
    ap = parser(__doc__, quick="12000 x 2000, 16 MiB budget", seed=0,
                out="experiments/results/bench_outofcore")
    ap.add_argument("--m", type=int, default=None)
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--k", type=int, default=50)
    ap.add_argument("--l", type=int, default=None, help="sketch size (default k + 10)")
    ap.add_argument("--budget-mib", type=int, default=None)
    ap.add_argument("--axis", type=int, default=0, choices=(0, 1))
    ap.add_argument("--format", default="hdf5", choices=("hdf5", "npy"))
    ap.add_argument("--compare", choices=("auto", "yes", "no"), default="auto",
                    help="in-memory reference (auto: when the file is under 4 GiB)")
    ap.add_argument("--dir", default=None, help="folder for the temporary file")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    m0, n0, b0 = (12000, 2000, 16) if args.quick else (20000, 5000, 128)
    args.m = args.m or m0
    args.n = args.n or n0
    args.budget_mib = args.budget_mib or b0
    args.l = args.l or min(args.k + 10, args.m, args.n)
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        return child(args)
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    ext = "h5" if args.format == "hdf5" else "npy"
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / f"A.{ext}"
        t = time.perf_counter()
        write_matrix(path, args.m, args.n, args.format, args.seed)
        t_write = time.perf_counter() - t
        cmd = [sys.executable, __file__, "--child", str(path), "--child-out",
               str(Path(tmp) / "cur"), "--k", str(args.k), "--l", str(args.l),
               "--budget-mib", str(args.budget_mib), "--axis", str(args.axis),
               "--seed", str(args.seed), "--m", str(args.m), "--n", str(args.n)]
        if args.no_progress:
            cmd.append("--no-progress")
        p = subprocess.run(cmd, check=True, capture_output=True, text=True)
        res = json.loads(p.stdout.strip().splitlines()[-1])
        res["npz"] = str(Path(tmp) / "cur.npz")
        do_cmp = args.compare == "yes" or (args.compare == "auto" and res["nbytes"] < 4 << 30)
        cmp = compare(path, args.format, args, res) if do_cmp else None
    m, n, l = args.m, args.n, args.l
    budget = args.budget_mib * MiB
    sketch_bytes = (m + n) * l * 8
    bound = budget + 4 * sketch_bytes + RUNTIME_CONSTANT
    held = res["warm"]["peak_growth"] <= bound < res["nbytes"]
    from experiments._common import env_info, loadavg
    record = {"config": {k: v for k, v in vars(args).items() if not k.startswith("child")},
              "env": env_info(), "loadavg": loadavg(), "write_s": t_write,
              "file_mib": res["nbytes"] / MiB, "budget_mib": args.budget_mib,
              "sketch_mib": sketch_bytes / MiB, "bound_mib": bound / MiB,
              "blocks": res["blocks"], "block_size": res["block_size"],
              "rss_after_import_mib": res["rss_after_import"] / MiB,
              "cold": res["cold"], "warm": res["warm"], "compare": cmp, "claim_held": held}
    name = "bench_outofcore_quick.json" if args.quick else "bench_outofcore.json"
    (outdir / name).write_text(json.dumps(record, indent=2))
    print(f"{m} x {n} float64 {args.format}: file {res['nbytes'] / MiB:.0f} MiB, budget "
          f"{args.budget_mib} MiB -> {res['blocks']} blocks of {res['block_size']} "
          f"{'rows' if args.axis == 0 else 'columns'}; (m + n) l = {(m + n) * l} floats "
          f"= {sketch_bytes / MiB:.1f} MiB; RSS after import {res['rss_after_import'] / MiB:.0f}"
          " MiB")
    for run in ("cold", "warm"):
        r = res[run]
        print(f"  {run}: {r['time_s']:.2f} s ({2 * res['nbytes'] / MiB / r['time_s']:.0f} MiB/s"
              f" read over the 2 passes), peak RSS growth {r['peak_growth'] / MiB:.1f} MiB "
              f"= {r['peak_growth'] / budget:.2f} x budget")
    if cmp:
        print(f"  in-memory reference on the same blocks: same rows {cmp['same_rows']}, same "
              f"cols {cmp['same_cols']}, ||U - U_ref|| / ||U_ref|| = {cmp['U_rel_diff']:.1e}; "
              f"||A - CUR||_F / ||A||_F = {cmp['cur_rel_error_fro']:.2e} (same skeletons, core "
              f"C^+ A R^+ instead of S^+: {cmp['cur_best_core_rel_error_fro']:.2e})")
    print(f"claim: warm peak growth {res['warm']['peak_growth'] / MiB:.0f} MiB <= budget + "
          f"4 (m + n) l * 8 + 96 MiB = {bound / MiB:.0f} MiB < file {res['nbytes'] / MiB:.0f} "
          f"MiB: {'held' if held else 'NOT held'}")
    print(f"results: {outdir / name}")
    return record


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main()
