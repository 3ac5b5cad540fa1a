"""Benchmark: time to apply each sketch in :mod:`rdr_jax.sketching` to a dense matrix.

What it measures (one run, float32, A of shape m x n, default 65536 x 256 = 64 MiB), for each
sketch size l in ``--ls`` (default 32, 128, 512):

* ``floor (read A)``            -- one pass over A, ``jax.jit(lambda A: A.sum())``; the memory
                                   bound every sketch has to pay. Independent of l (measured once).
* ``GEMM alone (pre-drawn G)``  -- ``jnp.matmul(G, A)`` with a Gaussian G (l x m) drawn beforehand.
* ``gaussian threefry: gen+GEMM`` / ``gen only`` -- ``gaussian(k, l, m).apply(A)`` and
                                   ``gaussian(k, l, m).todense()``; the key is an argument of the
                                   jitted function, so generation is inside the timed call.
* ``gaussian hash: gen+GEMM`` / ``gen only``     -- the same with ``generator="hash"``
                                   (:func:`rdr_jax.sketching.hash_normal`).
* ``srtt (DCT): draw+apply``    -- ``srtt(k, l, m).apply(A)`` (permutation, signs, DCT-II, rows).
* ``sparse_sign: S.apply(A) eager`` -- the public call outside jit (the sparse sign primitive
                                   dispatched as one compiled call).
* ``sparse_sign: apply in jit (pre-drawn)`` -- ``jax.jit(lambda S, A: S.apply(A))`` with S drawn
                                   outside: on CPU the numba kernel reached through the XLA FFI
                                   (reads A's buffer in place), a sorted segment sum elsewhere.
* ``sparse_sign: draw+apply``   -- ``sparse_sign(k, l, m, zeta).apply(A)`` in one jitted call.
* ``sparse_sign xla: apply (pre-drawn)`` -- ``S.apply_dense(A, impl="xla")`` (the XLA formula:
                                   nonzeros sorted by row, then jaxlib's CSR product on CPU,
                                   a sorted segment sum elsewhere).
* ``numba kernel direct (host, no JAX)`` -- diagnostic: the same CPU kernel
                                   (``rdr_jax._src.kernels.sparse_sign_apply_host``) called on numpy
                                   arrays, without JAX (the difference to ``apply in jit`` is the
                                   cost of the FFI call).
* ``scipy CSR (host)``          -- the same sparse sign matrix as ``scipy.sparse`` CSR (l x m,
                                   built from ``S.todense()``) times the numpy A, single-threaded.

Every jitted function is compiled and warmed up before timing; each call is followed by
``block_until_ready``; the reported time is the minimum over ``--repeats`` calls (the median is
kept in the raw results). Cells of the table are "ms (x floor)". The target lines check, at
the largest l (512 by default): sparse_sign / floor <= 10 and Gaussian (gen+GEMM) /
sparse_sign >= 5 for both generators; the Gaussian breakdown splits gen+GEMM into generation
and GEMM shares. A float64 block (``--f64``, on by default) repeats the floor, the sparse sign
rows and the Gaussian rows at the largest l in float64 and checks the same targets. Raw numbers
go to ``results.json`` / ``results.csv`` and a plot to ``bench_sketch.png`` in ``--out``.

Run (from the repository root)::

    python experiments/bench_sketch.py            # full: m=65536, n=256, l=32,128,512, 7 repeats
    python experiments/bench_sketch.py --quick    # m=8192, 3 repeats, a few seconds

Works on any JAX backend (``jax.default_backend()``); the scipy row always runs on the host.

float32; the float64 block (--f64) runs under a scoped jax.enable_x64(True).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import sys
from contextlib import nullcontext
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import scipy
import scipy.sparse as sp
from tqdm import tqdm

from rdr_jax._src.kernels import sparse_sign_apply_host

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import gaussian, parser, sparse_sign, srtt, time_calls  # noqa: E402
from rdr_jax.operators import HIGHEST

F32 = jnp.float32
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "bench_sketch"

# method keys (stable, used in json/csv) -> table labels, in table order
METHODS = {
    "floor": "floor (read A)",
    "gemm": "GEMM alone (pre-drawn G)",
    "gauss_threefry": "gaussian threefry: gen+GEMM",
    "gauss_threefry_gen": "gaussian threefry: gen only",
    "gauss_hash": "gaussian hash: gen+GEMM",
    "gauss_hash_gen": "gaussian hash: gen only",
    "srtt": "srtt (DCT): draw+apply",
    "sparse_sign_eager": "sparse_sign: S.apply(A) eager",
    "sparse_sign": "sparse_sign: apply in jit (pre-drawn)",
    "sparse_sign_draw": "sparse_sign: draw+apply",
    "sparse_sign_xla": "sparse_sign xla: apply (pre-drawn)",
    "numba_direct": "numba kernel direct (host, no JAX)",
    "scipy_csr": "scipy CSR (host)",
}


# --------------------------------------------------------------------------------------
def _block(x):
    return jax.block_until_ready(x)



def time_call(fn, args, repeats: int, warmup: int = 2):
    """Run ``fn(*args)`` ``warmup`` times (compile + warm caches), then time ``repeats`` calls.

    Returns (list of seconds, output of the last call).
    """
    return time_calls(fn, *args, repeats=repeats, warmup=warmup)


def single_thread_blas():
    """Context that limits host BLAS/OpenMP pools to one thread (scipy reference)."""
    try:
        from threadpoolctl import threadpool_limits
        return threadpool_limits(limits=1)
    except ImportError:  # scipy.sparse @ dense is single-threaded anyway
        return nullcontext()


def rel_err(x, ref):
    x = np.asarray(x, np.float64)
    ref = np.asarray(ref, np.float64)
    return float(np.linalg.norm(x - ref) / max(np.linalg.norm(ref), 1e-300))


def numba_threads():
    try:
        import numba
        return int(numba.get_num_threads()), numba.__version__
    except Exception:  # pragma: no cover - numba is a dependency, but stay robust
        return None, None


# --------------------------------------------------------------------------------------
def build_tasks(l: int, m: int, zeta: int, key, A, A_host, G, S, S_csr):
    """(method, callable, args) for one sketch size l. Callables are jitted (except scipy)."""
    tasks = [
        ("gemm", jax.jit(lambda G, A: jnp.matmul(G, A, precision=HIGHEST)), (G, A)),
        ("gauss_threefry",
         jax.jit(lambda k, A: gaussian(k, l, m, dtype=F32).apply(A)), (key, A)),
        ("gauss_threefry_gen",
         jax.jit(lambda k: gaussian(k, l, m, dtype=F32).todense()), (key,)),
        ("gauss_hash",
         jax.jit(lambda k, A: gaussian(k, l, m, dtype=F32, generator="hash").apply(A)),
         (key, A)),
        ("gauss_hash_gen",
         jax.jit(lambda k: gaussian(k, l, m, dtype=F32, generator="hash").todense()), (key,)),
        ("srtt", jax.jit(lambda k, A: srtt(k, l, m, dtype=F32).apply(A)), (key, A)),
        ("sparse_sign_eager", lambda S, A: S.apply(A), (S, A)),
        ("sparse_sign", jax.jit(lambda S, A: S.apply(A)), (S, A)),
        ("sparse_sign_draw",
         jax.jit(lambda k, A: sparse_sign(k, l, m, zeta, dtype=F32).apply(A)), (key, A)),
        ("sparse_sign_xla", jax.jit(lambda S, A: S.apply_dense(A, impl="xla")), (S, A)),
        ("numba_direct", lambda X, r, s: sparse_sign_apply_host(X, r, s, l),
         (A_host, np.asarray(S.rows), np.asarray(S.signs))),
        ("scipy_csr", lambda C, X: C @ X, (S_csr, A_host)),
    ]
    return tasks


def run(args):
    backend = jax.default_backend()
    dev = jax.devices()[0]
    nthreads, numba_version = numba_threads()
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        affinity = os.cpu_count()
    env = {
        "jax": jax.__version__,
        "jaxlib": getattr(jax.lib, "__version__", None) if hasattr(jax, "lib") else None,
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "numba": numba_version,
        "python": platform.python_version(),
        "backend": backend,
        "device_kind": dev.device_kind,
        "device": str(dev),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "numba_threads": nthreads,
        "machine": platform.machine(),
        "processor": platform.processor(),
    }
    config = {"m": args.m, "n": args.n, "ls": args.ls, "zeta": args.zeta,
              "repeats": args.repeats, "seed": args.seed, "dtype": "float32",
              "quick": args.quick}

    print("# bench_sketch: sketch apply time, Gamma (l x m) @ A (m x n), float32")
    print(f"jax {env['jax']} | backend {backend} | device kind {env['device_kind']} | "
          f"CPU count {env['cpu_count']} (affinity {affinity}) | numba threads {nthreads}")
    print(f"m={args.m} n={args.n} ls={args.ls} zeta={args.zeta} repeats={args.repeats} "
          f"seed={args.seed}  (A = {args.m * args.n * 4 / 2**20:.0f} MiB)")
    print(f"command: {' '.join([os.path.basename(sys.executable)] + sys.argv)}")
    sys.stdout.flush()

    m, n = args.m, args.n
    kA, kG, kS, kT = jax.random.split(jax.random.key(args.seed), 4)
    A = _block(jax.random.normal(kA, (m, n), F32))
    A_host = np.asarray(A)

    raw: dict[str, dict[int, list[float]]] = {k: {} for k in METHODS}
    checks: dict[int, dict[str, float]] = {}
    n_tasks = 1 + len(args.ls) * (len(METHODS) - 1)
    bar = tqdm(total=n_tasks, desc="bench", unit="task", file=sys.stderr, dynamic_ncols=True)

    bar.set_postfix_str("floor")
    floor_times, _ = time_call(jax.jit(lambda A: A.sum()), (A,), args.repeats)
    for l in args.ls:
        raw["floor"][l] = floor_times
    bar.update(1)

    for l in args.ls:
        # pre-drawn operands (outside every timed call)
        G = _block(gaussian(kG, l, m, dtype=F32).todense())
        S = _block(sparse_sign(kS, l, m, args.zeta, dtype=F32))
        S_csr = sp.csr_matrix(np.asarray(S.todense()))
        assert S_csr.nnz == m * args.zeta, (S_csr.nnz, m * args.zeta)
        outs = {}
        for method, fn, fargs in build_tasks(l, m, args.zeta, kT, A, A_host, G, S, S_csr):
            bar.set_postfix_str(f"{method} l={l}")
            ctx = single_thread_blas() if method == "scipy_csr" else nullcontext()
            with ctx:
                times, out = time_call(fn, fargs, args.repeats)
            raw[method][l] = times
            outs[method] = out
            bar.update(1)
        # sanity checks on the warm-up outputs (not timed)
        ref_sparse = outs["scipy_csr"]
        G_t = np.asarray(gaussian(kT, l, m, dtype=F32).todense(), np.float64)
        checks[l] = {
            "sparse_sign vs scipy": rel_err(outs["sparse_sign"], ref_sparse),
            "sparse_sign eager vs scipy": rel_err(outs["sparse_sign_eager"], ref_sparse),
            "sparse_sign xla vs scipy": rel_err(outs["sparse_sign_xla"], ref_sparse),
            "numba direct vs scipy": rel_err(outs["numba_direct"], ref_sparse),
            "gaussian threefry apply vs todense@A": rel_err(outs["gauss_threefry"],
                                                            G_t @ A_host),
            "gemm vs numpy": rel_err(outs["gemm"], np.asarray(G, np.float64) @ A_host),
        }
        del G, S, S_csr, outs, G_t
    bar.close()

    # ----------------------------------------------------------------------------------
    best = {k: {l: min(v[l]) for l in v} for k, v in raw.items()}
    floor = best["floor"][args.ls[0]]

    lines = []
    header = "| method | " + " | ".join(f"l={l}" for l in args.ls) + " |"
    lines.append(header)
    lines.append("|---|" + "---:|" * len(args.ls))
    for k, label in METHODS.items():
        cells = [f"{best[k][l] * 1e3:.2f} ({best[k][l] / floor:.1f}x)" for l in args.ls]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print()
    print(f"## Apply time, ms (x floor); min of {args.repeats}; backend {backend}; "
          f"m={m} n={n} zeta={args.zeta}")
    print(table)

    # targets at the largest l (512 by default)
    lt = 512 if 512 in args.ls else max(args.ls)
    ss = best["sparse_sign"][lt]
    ss_draw = best["sparse_sign_draw"][lt]
    targets = []

    def target(name, value, op, bound):
        ok = value <= bound if op == "<=" else value >= bound
        targets.append({"name": name, "l": lt, "value": value, "op": op, "bound": bound,
                        "pass": bool(ok)})
        return f"{name}: {value:.2f} (target {op} {bound:g}) {'PASS' if ok else 'FAIL'}"

    print()
    print(f"## Targets at l={lt}")
    ss_eager = best["sparse_sign_eager"][lt]
    print("- " + target("sparse_sign eager S.apply(A) / floor", ss_eager / floor, "<=", 10))
    print("- " + target("sparse_sign inside jit / floor", ss / floor, "<=", 10))
    for gen in ("threefry", "hash"):
        print("- " + target(f"gaussian {gen} (gen+GEMM) / sparse_sign eager",
                            best[f"gauss_{gen}"][lt] / ss_eager, ">=", 5))
    for gen in ("threefry", "hash"):
        print("- " + target(f"gaussian {gen} (gen+GEMM) / sparse_sign inside jit",
                            best[f"gauss_{gen}"][lt] / ss, ">=", 5))
    print(f"- (info) sparse_sign draw+apply / floor: {ss_draw / floor:.2f}; "
          f"gaussian threefry / sparse_sign draw+apply: {best['gauss_threefry'][lt] / ss_draw:.2f};"
          f" gaussian hash / sparse_sign draw+apply: {best['gauss_hash'][lt] / ss_draw:.2f}")
    print(f"- (info) sparse_sign default impl (numba on CPU) vs alternatives: "
          f"xla / apply = {best['sparse_sign_xla'][lt] / ss:.2f}; "
          f"scipy CSR (host, 1 thread) / apply = {best['scipy_csr'][lt] / ss:.2f}; "
          f"numba kernel direct = {best['numba_direct'][lt] * 1e3:.2f} ms "
          f"({best['numba_direct'][lt] / floor:.1f}x floor), so jit/FFI overhead = "
          f"{(ss - best['numba_direct'][lt]) * 1e3:.2f} ms")

    print()
    print(f"## Sparse sign inside jit (l={lt}, float32): {ss * 1e3:.2f} ms = "
          f"{ss / floor:.1f}x the read-once floor; Gaussian in jit / sparse sign in jit: "
          f"hash {best['gauss_hash'][lt] / ss:.1f}x, threefry {best['gauss_threefry'][lt] / ss:.1f}x")

    f64 = None
    if args.f64:
        f64 = run_f64(args, lt, kA, kS, kT)
        fl64, ss64 = f64["min_s"]["floor"], f64["min_s"]["sparse_sign"]
        print()
        print(f"## float64 at l={lt} (ms (x floor); min of {args.repeats})")
        print("| method | float64 |")
        print("|---|---:|")
        for k, label in F64_METHODS.items():
            print(f"| {label} | {f64['min_s'][k] * 1e3:.2f} ({f64['min_s'][k] / fl64:.1f}x) |")
        print(f"- sparse sign inside jit: {ss64 * 1e3:.2f} ms = {ss64 / fl64:.1f}x the read-once "
              f"floor; Gaussian in jit / sparse sign in jit: hash "
              f"{f64['min_s']['gauss_hash'] / ss64:.1f}x, threefry "
              f"{f64['min_s']['gauss_threefry'] / ss64:.1f}x")
        print("- " + target("float64 sparse_sign inside jit / floor", ss64 / fl64, "<=", 10))
        for gen in ("threefry", "hash"):
            print("- " + target(f"float64 gaussian {gen} (gen+GEMM) / sparse_sign inside jit",
                                f64["min_s"][f"gauss_{gen}"] / ss64, ">=", 5))
        print(f"- (info) float64 sparse_sign in jit vs scipy CSR: relative error "
              f"{f64['rel_err_vs_scipy']:.1e}")

    print()
    print("## Gaussian breakdown (share of gen+GEMM time; overhead = total - gen - GEMM)")
    breakdown = {}
    for gen in ("threefry", "hash"):
        breakdown[gen] = {}
        for l in args.ls:
            tot = best[f"gauss_{gen}"][l]
            g = best[f"gauss_{gen}_gen"][l]
            mm = best["gemm"][l]
            breakdown[gen][l] = {"total_s": tot, "gen_s": g, "gemm_s": mm,
                                 "gen_share": g / tot, "gemm_share": mm / tot}
            print(f"- {gen:8s} l={l:<4d}: total {tot * 1e3:8.2f} ms = gen {g * 1e3:8.2f} ms "
                  f"({100 * g / tot:5.1f}%) + GEMM {mm * 1e3:8.2f} ms ({100 * mm / tot:5.1f}%)"
                  f" + overhead {(tot - g - mm) * 1e3:+.2f} ms")
    hg = {l: best["gauss_threefry_gen"][l] / best["gauss_hash_gen"][l] for l in args.ls}
    print("- generation speed-up hash vs threefry: "
          + ", ".join(f"l={l}: {v:.1f}x" for l, v in hg.items()))

    print()
    print("## Sanity checks (relative error of warm-up outputs)")
    for l, c in checks.items():
        print(f"- l={l}: " + "; ".join(f"{k} {v:.1e}" for k, v in c.items()))

    # ----------------------------------------------------------------------------------
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {
        "env": env, "config": config, "methods": METHODS, "floor_s": floor,
        "times_s": {k: {str(l): v[l] for l in v} for k, v in raw.items()},
        "min_s": {k: {str(l): v[l] for l in v} for k, v in best.items()},
        "targets": targets,
        "gaussian_breakdown": {g: {str(l): d for l, d in v.items()}
                               for g, v in breakdown.items()},
        "checks_rel_err": {str(l): c for l, c in checks.items()},
        "table_markdown": table,
        "float64": f64,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2))
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "label", "l", "m", "n", "zeta", "backend", "min_ms",
                    "median_ms", "x_floor", "repeats", "times_ms"])
        for k, label in METHODS.items():
            for l in args.ls:
                t = raw[k][l]
                w.writerow([k, label, l, m, n, args.zeta, backend, f"{min(t) * 1e3:.4f}",
                            f"{statistics.median(t) * 1e3:.4f}", f"{min(t) / floor:.3f}",
                            len(t), " ".join(f"{x * 1e3:.4f}" for x in t)])
    plot(best, floor, args, env, out / "bench_sketch.png")
    print()
    print(f"wrote {out / 'results.json'}, {out / 'results.csv'}, {out / 'bench_sketch.png'}")
    return results


F64_METHODS = {
    "floor": "floor (read A)",
    "sparse_sign_eager": "sparse_sign: S.apply(A) eager",
    "sparse_sign": "sparse_sign: apply in jit (pre-drawn)",
    "gauss_hash": "gaussian hash: gen+GEMM",
    "gauss_threefry": "gaussian threefry: gen+GEMM",
}


def run_f64(args, l: int, kA, kS, kT):
    """Floor, sparse sign (eager / in jit) and Gaussian (hash / threefry, in jit) at one l in
    float64 (under ``jax.enable_x64``)."""
    m, n, F64 = args.m, args.n, jnp.float64
    with jax.enable_x64(True):
        A = _block(jax.random.normal(kA, (m, n), F64))
        S = _block(sparse_sign(kS, l, m, args.zeta, dtype=F64))
        tasks = {
            "floor": (jax.jit(lambda A: A.sum()), (A,)),
            "sparse_sign_eager": (lambda S, A: S.apply(A), (S, A)),
            "sparse_sign": (jax.jit(lambda S, A: S.apply(A)), (S, A)),
            "gauss_hash": (jax.jit(lambda k, A: gaussian(k, l, m, dtype=F64, generator="hash")
                                   .apply(A)), (kT, A)),
            "gauss_threefry": (jax.jit(lambda k, A: gaussian(k, l, m, dtype=F64,
                                                             generator="threefry").apply(A)),
                               (kT, A)),
        }
        times, outs = {}, {}
        for name, (fn, fargs) in tqdm(tasks.items(), desc="float64", file=sys.stderr):
            times[name], outs[name] = time_call(fn, fargs, args.repeats)
        ref = sp.csr_matrix(np.asarray(S.todense())) @ np.asarray(A)
        err = rel_err(outs["sparse_sign"], ref)
    return {"l": l, "times_s": times, "min_s": {k: min(v) for k, v in times.items()},
            "rel_err_vs_scipy": err}


def plot(best, floor, args, env, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6))
    styles = {"gen only": "--", "pre-drawn G": ":", "host": "-."}
    colors = plt.get_cmap("tab20").colors
    for i, (k, label) in enumerate(kv for kv in METHODS.items() if kv[0] != "floor"):
        ls = next((s for key, s in styles.items() if key in label), "-")
        ax.plot(args.ls, [best[k][l] * 1e3 for l in args.ls], marker="o", linestyle=ls,
                color=colors[(2 * i) % 20 + (2 * i) // 20], label=label)
    ax.axhline(floor * 1e3, color="k", linewidth=2, label="floor (read A)")
    ax.axhline(10 * floor * 1e3, color="gray", linewidth=1, linestyle=":",
               label="10x floor (sparse_sign target)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(args.ls)
    ax.set_xticklabels([str(l) for l in args.ls])
    ax.set_xlabel("sketch size l")
    ax.set_ylabel("time per apply [ms] (min over repeats)")
    ax.set_title(f"Sketch apply, A {args.m}x{args.n} float32, zeta={args.zeta} | "
                 f"{env['backend']} ({env['device_kind']}), jax {env['jax']}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv=None):
    p = parser(__doc__, quick="m=8192, repeats=3 (a few seconds)", seed=0, out=str(DEFAULT_OUT),
               helps={"out": "output folder (default experiments/results/bench_sketch)"})
    p.add_argument("--m", type=int, default=65536, help="rows of A (default 65536)")
    p.add_argument("--n", type=int, default=256, help="columns of A (default 256)")
    p.add_argument("--ls", type=lambda s: [int(x) for x in s.split(",") if x.strip()],
                   default=[32, 128, 512], help="comma-separated sketch sizes (default 32,128,512)")
    p.add_argument("--zeta", type=int, default=8, help="sparse_sign nonzeros per column")
    p.add_argument("--repeats", type=int, default=7, help="timed calls per cell (min reported)")
    p.add_argument("--f64", action=argparse.BooleanOptionalAction, default=True,
                   help="also time the sparse sign and Gaussian rows in float64 at the largest l")
    args = p.parse_args(argv)
    if args.quick:
        args.m, args.repeats = 8192, 3
    if args.repeats < 1 or args.m < 1 or args.n < 1 or not args.ls:
        p.error("--m, --n, --repeats must be >= 1 and --ls non-empty")
    if args.zeta > min(args.ls):
        p.error(f"--zeta {args.zeta} must be <= every l in --ls")
    if max(args.ls) > args.m:
        p.error("every l must be <= m (srtt keeps l of the m rows)")
    return args


if __name__ == "__main__":
    run(parse_args())
