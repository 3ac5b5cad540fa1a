"""Benchmark for Chapter 2 (issue "Measure"): pivot speed, end-to-end column ID against
scipy.linalg.interpolative, and the 10^6 x 10^6 SNN CUR.

Run (from the repository root)::

    python experiments/bench_cur.py            # full: all three parts (SNN1e6 takes minutes)
    python experiments/bench_cur.py --quick    # smaller sizes, seconds; no SNN1e6
    python experiments/bench_cur.py --parts pivot,id   # choose parts

Parts (one run, float64, 2-core CPU unless the backend says otherwise; every jitted function
is compiled before timing; times are the median of ``--repeats`` calls, block_until_ready):

1. ``pivot``: the pivot step alone on an l x n Gaussian sketch, l in {100, 500},
   n = 100000: LUPP (``jax.lax.linalg.lu`` on X^T) vs CPQR (geqp3 via
   ``jax.lax.linalg.qr(pivoting=True)``). Target: LUPP >= 5x faster.
2. ``id``: rank-k column ID, k in {50, 200}, of a 4000 x 2000 dense matrix with singular
   values ``1/sqrt(i)`` (slow decay), against ``scipy.linalg.interpolative.interp_decomp(A, k)``
   (randomized, the default). Ours: ``rdr_jax.interpolative(key, A, k)`` with DEFAULT
   arguments (Rand-LUPP, hash Gaussian sketch, l = k + 10, ``W = C^+ A``), warm and on the
   first call (compile included), next to the GEMM floor (the sketch ``Gamma A`` and the
   ``A^H Q`` product alone) and to other settings (sketch coefficients, sparse sign,
   threefry, one power iteration). Issue 12 targets: warm >= 25x (k = 50) and >= 30x
   (k = 200) faster with error <= 1.15x scipy's; first call >= 3x at k = 50; within 3x of the
   GEMM floor. Rand-LUPP-1piter error <= 1.08x scipy's. The first call is measured in new
   processes: the median of 3 with an empty compilation cache (and of 3 with tiered
   compilation off, ``RDR_JAX_TIERED_COMPILE=0``), and one with a warm persistent cache; the
   second call of those processes (where tiering compiles the optimised executable) is
   reported next to it. Warm times come after two untimed calls.
3. ``snn1e6``: rank-200 Rand-LUPP CUR of the factored 10^6 x 10^6 SNN (r = 400) end to end
   (sketch, pivots, U, exact error in factored form), run in a subprocess so that its peak
   RSS is its own. Target: within 45 s (issue 13; 60 s in issue 12); memory must scale
   with (m + n) l, not m n.

Results: ``bench_cur.json`` in ``--out`` (default ``experiments/results/bench_cur``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import jax
import threadpoolctl

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import rdr_jax as R  # noqa: E402
from rdr_jax import pivoting as P  # noqa: E402


def timed(f, *args, repeats=3):
    # two untimed calls: rdr_jax compiles a signature's first call quickly and its second
    # call optimised (tiered compilation, rdr_jax._jit); the timed calls are steady state
    for _ in range(2):
        out = f(*args)
        jax.block_until_ready(out)
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = f(*args)
        jax.block_until_ready(out)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts), out


def bench_pivot(ls, n, repeats):
    rows = []
    for l in ls:
        X = jax.random.normal(jax.random.key(l), (l, n), dtype=jnp.float64)
        lu = jax.jit(lambda X: P.lupp(X, X.shape[0]))
        qr = jax.jit(lambda X: P.cpqr(X, X.shape[0]))
        t_lu, _ = timed(lu, X, repeats=repeats)
        t_qr, _ = timed(qr, X, repeats=repeats)
        rows.append({"l": l, "n": n, "lupp_s": t_lu, "cpqr_s": t_qr, "speedup": t_qr / t_lu,
                     "target": 5.0, "pass": t_qr / t_lu >= 5.0})
        print(f"  pivot l={l:4d} n={n}: LUPP {t_lu*1e3:8.1f} ms  CPQR {t_qr*1e3:8.1f} ms  "
              f"CPQR/LUPP = {t_qr/t_lu:5.1f}x  (target >= 5x: "
              f"{'PASS' if t_qr / t_lu >= 5 else 'FAIL'})")
    return rows


def slow_decay(m, n, seed=0):
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.standard_normal((m, n)))[0]
    V = np.linalg.qr(rng.standard_normal((n, n)))[0]
    s = 1.0 / np.sqrt(np.arange(1, n + 1))
    return (U * s) @ V.T, s


#: issue 12 targets for the column ID with DEFAULT arguments: warm speedup over
#: interp_decomp per k, first-call (compile included) speedup at the first k, error ratio,
#: and distance to the GEMM floor
ID_TARGETS = {"speedup": {50: 25.0, 200: 30.0}, "first_call": 3.0, "err": 1.15, "floor": 3.0}


def gemm_floor(Aj, k, l, repeats):
    """The sketch and C^+ A products alone (``Gamma A``: l x m x n, ``Q^H A``: k x m x n),
    jitted, with their inputs precomputed (``Q^H`` too, so both are plain GEMMs, the fastest
    form on CPU): what any column ID with exact coefficients must spend."""
    m, n = Aj.shape
    G = jax.random.normal(jax.random.key(0), (l, m), Aj.dtype)
    Qh = jnp.asarray(np.ascontiguousarray(np.asarray(jnp.linalg.qr(Aj[:, :k])[0]).T))
    f = jax.jit(lambda A, G, Qh: (G @ A, Qh @ A))
    t, _ = timed(f, Aj, G, Qh, repeats=repeats)
    return t


def first_call_child(m, n, k, cache_dir):
    """Runs in a subprocess: the first two default column IDs of this process (first call:
    trace + compile or persistent-cache load + run; second call: with tiered compilation,
    the optimised compile + run); prints the seconds. ``cache_dir="-"``: no persistent
    cache."""
    if cache_dir != "-":
        jax.config.update("jax_compilation_cache_dir", cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    A, _ = slow_decay(m, n)
    Aj = jax.block_until_ready(jnp.asarray(A))
    key = jax.random.key(k)
    jax.block_until_ready(key)
    ts = []
    for _ in range(2):
        t = time.perf_counter()
        jax.block_until_ready(R.interpolative(key, Aj, k))
        ts.append(time.perf_counter() - t)
    print(json.dumps({"first_call_s": ts[0], "second_call_s": ts[1]}))


#: new processes per cold first-call measurement (the median is reported: one process's
#: first call varies by +-30% on a shared 2-core machine)
FIRST_CALL_PROCESSES = 3


def first_call_times(m, n, k, processes=FIRST_CALL_PROCESSES):
    """First (and second) call of new processes: the median over ``processes`` processes with
    defaults and an empty compilation cache, the same with tiered compilation off (CPU
    backend only; elsewhere nothing is tiered), and one process with a warm persistent
    compilation cache."""
    tiered = jax.default_backend() == "cpu"
    import tempfile

    def child(cache, **env):
        r = subprocess.run([sys.executable, __file__, "--first-call-child",
                            f"{m},{n},{k},{cache}"], check=True, capture_output=True,
                           text=True, env={**os.environ, **env})
        return json.loads(r.stdout.strip().splitlines()[-1])

    def median(runs, key):
        return statistics.median(r[key] for r in runs)

    cold, untiered = [], []
    for _ in range(processes):          # interleaved, so that drift hits both alike
        cold.append(child("-"))
        untiered.append(child("-", RDR_JAX_TIERED_COMPILE="0") if tiered else cold[-1])
    with tempfile.TemporaryDirectory() as cache:
        child(cache)
        warm = child(cache)
    return {"first_call_s": median(cold, "first_call_s"),
            "first_call_runs_s": [r["first_call_s"] for r in cold],
            "second_call_s": median(cold, "second_call_s"),
            "first_call_warm_cache_s": warm["first_call_s"],
            "first_call_untiered_s": median(untiered, "first_call_s"),
            "first_call_untiered_runs_s": [r["first_call_s"] for r in untiered],
            "second_call_untiered_s": median(untiered, "second_call_s")}


def bench_id(m, n, ks, repeats):
    import scipy.linalg.interpolative as sli
    A, s = slow_decay(m, n)
    Aj = jnp.asarray(A)
    rows = []
    for i, k in enumerate(ks):
        opt = float(np.sqrt(np.sum(s[k:] ** 2)))
        ts = []
        # scipy with its default BLAS threads (rdr_jax limits the OpenBLAS of SciPy, which
        # jaxlib's LAPACK kernels use, to one thread after its first call: rdr_jax._jit)
        with threadpoolctl.threadpool_limits(limits=os.cpu_count(), user_api="blas"):
            for _ in range(max(1, repeats - 1)):
                t = time.perf_counter()
                idx, proj = sli.interp_decomp(A, k)
                ts.append(time.perf_counter() - t)
        t_sc = statistics.median(ts)
        B = sli.reconstruct_skel_matrix(A, k, idx)
        e_sc = float(np.linalg.norm(A - sli.reconstruct_matrix_from_id(B, idx, proj)))
        row = {"k": k, "m": m, "n": n, "scipy_s": t_sc, "scipy_err_over_opt": e_sc / opt}
        print(f"  column ID k={k}: scipy interp_decomp {t_sc*1e3:8.1f} ms, "
              f"error/optimal {e_sc/opt:.3f}")
        # the first (and second) call of new processes, compile included: empty cache
        # (tiered and untiered) and warm persistent cache
        first = first_call_times(m, n, k, FIRST_CALL_PROCESSES if i == 0 and m * n > 10 ** 6
                                 else 1)       # the target is at the first k, full size
        t_first, t_first_cached = first["first_call_s"], first["first_call_warm_cache_s"]
        floor = gemm_floor(Aj, k, k + 10, repeats)
        row["gemm_floor_s"] = floor
        variants = [("defaults", {}),
                    ("Rand-LUPP/sketch", dict(interp="sketch")),
                    ("Rand-LUPP/sparse_sign", dict(sketch="sparse_sign")),
                    ("Rand-LUPP/threefry", dict(sketch=R.Gaussian("threefry"))),
                    ("Rand-LUPP-1piter", dict(method="Rand-LUPP-1piter"))]
        for tag, kw in variants:
            def run(key, kw=kw):
                return R.interpolative(key, Aj, k, **kw)
            t, d = timed(run, jax.random.key(k), repeats=repeats)
            errs = []
            for seed in range(5):   # error averaged over keys (timing uses one)
                dd = run(jax.random.key(1000 + seed))
                errs.append(float(np.linalg.norm(A - np.asarray(dd.C @ dd.W))))
            e = float(np.mean(errs))
            row[tag] = {"time_s": t, "speedup_vs_scipy": t_sc / t, "err_vs_scipy": e / e_sc,
                        "err_over_opt": e / opt, "over_gemm_floor": t / floor}
            print(f"    {tag:24s} {t*1e3:8.1f} ms  speedup {t_sc/t:6.1f}x  "
                  f"error/scipy {e/e_sc:.3f}  error/optimal {e/opt:.3f}  "
                  f"time/GEMM floor {t/floor:5.2f}")
        d = row["defaults"]
        d.update(first)
        d["first_call_untiered_speedup"] = t_sc / first["first_call_untiered_s"]
        d["first_call_speedup"] = t_sc / t_first
        d["first_call_warm_cache_speedup"] = t_sc / t_first_cached
        want = ID_TARGETS["speedup"].get(k, 25.0)
        checks = {f"warm speedup >= {want:g}x": d["speedup_vs_scipy"] >= want,
                  f"error <= {ID_TARGETS['err']}x scipy": d["err_vs_scipy"] <= ID_TARGETS["err"],
                  f"within {ID_TARGETS['floor']:g}x of the GEMM floor":
                      d["over_gemm_floor"] <= ID_TARGETS["floor"]}
        if i == 0:
            checks[f"first call, cold compile, >= {ID_TARGETS['first_call']:g}x"] = (
                d["first_call_speedup"] >= ID_TARGETS["first_call"])
            checks[f"first call, warm persistent cache, >= {ID_TARGETS['first_call']:g}x"] = (
                d["first_call_warm_cache_speedup"] >= ID_TARGETS["first_call"])
        row["targets"] = checks
        untiered = ("" if jax.default_backend() != "cpu" else
                    f"; with RDR_JAX_TIERED_COMPILE=0 first call "
                    f"{first['first_call_untiered_s']*1e3:.0f} ms "
                    f"({d['first_call_untiered_speedup']:.1f}x), second "
                    f"{first['second_call_untiered_s']*1e3:.0f} ms")
        print(f"    defaults: GEMM floor {floor*1e3:.1f} ms; first call of a new process "
              f"(median of {len(first['first_call_runs_s'])}) {t_first*1e3:.0f} ms "
              f"({t_sc/t_first:.1f}x scipy) with an empty compilation cache, "
              f"{t_first_cached*1e3:.0f} ms ({t_sc/t_first_cached:.1f}x) with a warm one; "
              f"second call {first['second_call_s']*1e3:.0f} ms{untiered}")
        for name, ok in checks.items():
            print(f"    target {name}: {'PASS' if ok else 'FAIL'}")
        p1 = row["Rand-LUPP-1piter"]["err_vs_scipy"]
        row["target_1piter"] = {"err_vs_scipy": p1, "pass": p1 <= 1.08}
        rows.append(row)
    return rows


def snn1e6_child(k: int, out: str, sketch: str = "gaussian"):
    """Runs in a subprocess: build SNN1e6, rank-k CUR end to end, exact error, peak RSS."""
    from rdr_jax import matrices as M
    t0 = time.perf_counter()
    A = M.snn1e6(jax.random.key(0))
    t_build = time.perf_counter() - t0
    s = R.exact_singular_values(A)
    t1 = time.perf_counter()
    d = R.cur(jax.random.key(1), A, k, sketch=sketch)
    jax.block_until_ready(d)
    t_cur = time.perf_counter() - t1
    err = R.lowrank_error(A, d)
    t_total = time.perf_counter() - t1
    res = {"k": k, "sketch": sketch, "build_s": t_build, "cur_s": t_cur, "cur_plus_error_s": t_total,
           "rel_err_fro": err.fro / float(np.sqrt(np.sum(s ** 2))),
           "opt_rel_err_fro": float(np.sqrt(np.sum(s[k:] ** 2) / np.sum(s ** 2))),
           "rel_err_2": err.spec / float(s[0]), "opt_rel_err_2": float(s[k] / s[0]),
           "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20,
           "eta": float(d.eta), "eta_rows": float(d.eta_rows)}
    Path(out).write_text(json.dumps(res))


def bench_snn1e6(k, outdir, sketch="gaussian"):
    out = outdir / f"snn1e6_child_{sketch}.json"
    cmd = [sys.executable, __file__, "--snn1e6-child", str(k), "--child-out", str(out),
           "--snn-sketch", sketch]
    subprocess.run(cmd, check=True)
    res = json.loads(out.read_text())
    m = n = 10 ** 6
    l = k + 10
    bytes_ml = (m + n) * l * 8 / 2 ** 30
    res["target"] = 45.0
    res["pass"] = res["cur_plus_error_s"] <= 45.0
    res["(m+n)l_float64_gib"] = bytes_ml
    res["mn_float64_gib"] = m * n * 8 / 2 ** 30
    print(f"  SNN1e6 rank-{k} CUR ({sketch} sketch): CUR {res['cur_s']:.1f} s, + exact error "
          f"{res['cur_plus_error_s']:.1f} s (target <= 45 s: {'PASS' if res['pass'] else 'FAIL'});"
          f" rel. Frobenius error {res['rel_err_fro']:.4g} (optimal {res['opt_rel_err_fro']:.4g});"
          f" peak RSS {res['peak_rss_gib']:.1f} GiB vs (m+n) l float64 = {bytes_ml:.1f} GiB "
          f"(m n would be {res['mn_float64_gib']:.0f} GiB)")
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--parts", default="pivot,id,snn1e6")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="experiments/results/bench_cur")
    ap.add_argument("--snn-sketch", default="gaussian,sparse_sign",
                    help="sketches for the SNN1e6 part (comma separated)")
    ap.add_argument("--snn1e6-child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--first-call-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.first_call_child is not None:
        m, n, k, cache = args.first_call_child.split(",", 3)
        first_call_child(int(m), int(n), int(k), cache)
        return None
    if args.snn1e6_child is not None:
        snn1e6_child(args.snn1e6_child, args.child_out, args.snn_sketch)
        return None
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    parts = set(args.parts.split(","))
    if args.quick:
        parts.discard("snn1e6")
    print(f"backend {jax.default_backend()}, devices {jax.devices()}, cpus {os.cpu_count()}")
    results = {"quick": args.quick, "backend": jax.default_backend()}
    if "pivot" in parts:
        print("[1] pivot step alone")
        results["pivot"] = bench_pivot((100, 500) if not args.quick else (50, 100),
                                       100_000 if not args.quick else 20_000, args.repeats)
    if "id" in parts:
        print("[2] end-to-end column ID vs scipy.linalg.interpolative")
        results["id"] = bench_id(*((4000, 2000) if not args.quick else (800, 400)),
                                 (50, 200) if not args.quick else (20, 50), args.repeats)
    if "snn1e6" in parts:
        print("[3] SNN1e6 CUR end to end")
        results["snn1e6"] = [bench_snn1e6(200, outdir, sk) for sk in args.snn_sketch.split(",")]
    (outdir / "bench_cur.json").write_text(json.dumps(results, indent=2, default=str))
    print(f"wrote {outdir / 'bench_cur.json'}")
    return results


if __name__ == "__main__":
    main()
