"""Thesis Figure 2.1: run time of applying random embeddings vs the ambient size m.

Run (from the repository root)::

    python experiments/fig_sketch_ps_time.py            # full: n=1000, m=2^10..2^16, l=16,64,256
    python experiments/fig_sketch_ps_time.py --quick    # CI: n=100, m=2^11,2^14, l=16,64

Thesis claim (Section 2.5.1): "with proper implementation, the sparse sign
matrices are more efficient than the Gaussian embeddings and the SRTTs, especially for
large-scale problems. The SRTTs outperform Gaussian embeddings in terms of efficiency, and
such an advantage can be amplified as l increases." The script checks, at the largest m, from
the medians of ``--repeats`` (>= 3) timed calls per cell, with a noise rule applied both ways:
a comparison of two cells is *decided* only when their medians differ by more than the
repeats' spread (the larger of the two cells' min-max ranges); otherwise it is "within noise"
and cannot make a claim HELD:

1. ``sparse_sign_faster`` -- sparse sign (zeta = 8) is decidedly faster than Gaussian and than
   SRTT, for every l;
2. ``srtt_faster_than_gaussian`` -- SRTT is decidedly faster than Gaussian, for every l;
3. ``srtt_advantage_grows_with_l`` -- the advantage exists and is amplified as l increases:
   SRTT is decidedly faster than Gaussian (gaussian/srtt time ratio > 1) at the largest l, and
   the ratio grows with l (strictly increasing over the l grid). When SRTT is slower than
   Gaussian the advantage does not exist, so the claim is NOT HELD with the measured ratios,
   whatever their trend.

Each is written to ``results.json`` as ``{id, claim, held, detail, thesis_label, wording}``
(plus ``reason`` with the measured ratios and spreads when not held). (The thesis measured
this in Julia with LowRankApprox.jl; here every embedding is the rdr_jax one on the current
JAX backend; on a 2-core CPU the SRTT's fixed cost (its draw: two sort-based permutations of
m) and a memory-bound Gaussian GEMM at small l can make the Gaussian win there.)

What is timed, for each m in ``--ms``, each l in ``--ls`` (A is a dense m x n Gaussian matrix,
``--dtype`` float64 by default; n = 1000 in full mode as in the thesis text, n = 100 in quick
mode as in the figure caption):

* ``gaussian``    -- ``jax.jit(lambda key, A: make_sketch(key, "gaussian", l, m).apply(A))``:
                     drawing Gamma (the default ``Gaussian()``, counter-based ``"hash"``
                     generator) + the GEMM, in one compiled call;
* ``srtt``        -- the same with ``"srtt"`` (permutation, signs, DCT-II along m, l rows);
* ``sparse_sign`` -- ``draw(key).apply(A)`` with ``draw = jax.jit(make_sketch(.,
                     "sparse_sign", l, m, zeta=8))`` and the public eager ``.apply`` (the
                     multithreaded numba kernel reads A in place): the "proper
                     implementation" of the thesis;
* ``sparse_sign_jit`` (extra, dashed; only with ``--extras``) -- draw + apply inside one
                     ``jax.jit`` (XLA copies A before the host callback; shown for
                     completeness, not used in the verdict).

Every callable is compiled and run once before timing (warm-up excluded); each call ends with
``jax.block_until_ready``; the reported time is the median of ``--repeats`` calls, each with a
fresh key. ``--host-threads 1`` (default) runs the numba kernel (and OpenBLAS/OpenMP) on one
thread: on an oversubscribed 2-core machine its 2-thread parallel loop took ~24 ms instead of
~0.4 ms for a 2048 x 100 matrix (threads waiting for descheduled siblings); XLA's own thread
pool (the Gaussian GEMM, the DCT) is left alone. Use ``--host-threads 0`` on an idle machine.

Outputs in ``--out`` (default ``experiments/results/fig_sketch_ps_time``): ``results.json``,
``results.csv``, ``fig_sketch_ps_time.png``, ``config.json``.
Timings on a shared machine are noisy; the load average is recorded in ``config.json``.

float64 by default (--dtype float64: needed to reproduce the thesis' float64 timings); --dtype
float32 runs in float32.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from tqdm import tqdm

from rdr_jax.sketching import Gaussian, make_sketch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (NOISE_RULE, OUT_HELP, THREADS_HELP, compare_times, env_info,  # noqa: E402
                     ints as _ints, loadavg, parser, run_main)

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "fig_sketch_ps_time"
METHODS = ("gaussian", "srtt", "sparse_sign", "sparse_sign_jit")
PRIMARY = ("gaussian", "srtt", "sparse_sign")
LABELS = {"gaussian": "Gaussian", "srtt": "SRTT (DCT)", "sparse_sign": "sparse sign (zeta=8)",
          "sparse_sign_jit": "sparse sign, all in jit"}
CLAIM = ("sparse sign is faster than Gaussian and SRTT for large m; SRTT beats Gaussian, "
         "more so as l grows (thesis Sec. subsec:exp_embedding, Fig. fig:sketch-ps-time)")


def time_median(fn, keys, A, repeats: int) -> list[float]:
    """Warm up (compile) once, then time ``repeats`` calls ``fn(key_i, A)``."""
    jax.block_until_ready(fn(keys[0], A))
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(keys[i + 1], A))
        times.append(time.perf_counter() - t0)
    return times


def build(method: str, l: int, m: int, zeta: int, dtype):
    if method in ("gaussian", "srtt"):
        return jax.jit(lambda key, A: make_sketch(key, method, l, m, dtype=dtype).apply(A))
    if method == "sparse_sign_jit":
        return jax.jit(lambda key, A: make_sketch(key, "sparse_sign", l, m, dtype=dtype,
                                                  zeta=zeta).apply(A))
    draw = jax.jit(lambda key: make_sketch(key, "sparse_sign", l, m, dtype=dtype, zeta=zeta))
    return lambda key, A: draw(key).apply(A)


compare = compare_times      # the shared noise rule (experiments/_common.py)


_VERDICT = {-1: "decidedly faster", 0: "within noise", 1: "decidedly slower"}
_VS = {-1: "decidedly faster than", 0: "within noise of", 1: "decidedly slower than"}
_NOISE_RULE = NOISE_RULE


def _cell(raw, meth, c) -> str:
    t = raw[meth][c]
    return (f"{statistics.median(t) * 1e3:.2f} ms (range {min(t) * 1e3:.2f}-"
            f"{max(t) * 1e3:.2f})")


def check_claims(raw: dict, ms: list[int], ls: list[int]) -> list[dict]:
    """The thesis statements at the largest m, from the raw timed calls ``raw[method][(m,
    l)]`` (medians, noise rule :func:`compare`); see the module docstring."""
    mx = max(ms)
    med = {x: {c: statistics.median(t) for c, t in v.items()} for x, v in raw.items()}
    out = []
    label = "fig:sketch-ps-time"

    def claim(cid, text, held, detail, reason):
        c = {"id": cid, "claim": text, "held": bool(held), "detail": detail,
             "thesis_label": label, "wording": "thesis"}
        if not held:
            c["reason"] = reason
        return c

    # 1. sparse sign faster than Gaussian and SRTT, every l
    parts, bad = [], []
    for l in ls:
        c = (mx, l)
        for other in ("gaussian", "srtt"):
            v = compare(raw["sparse_sign"][c], raw[other][c])
            txt = (f"l={l}: {other}/sparse {med[other][c] / med['sparse_sign'][c]:.2f}x "
                   f"(sparse {_cell(raw, 'sparse_sign', c)}, {other} {_cell(raw, other, c)}: "
                   f"sparse {_VERDICT[v]})")
            parts.append(txt)
            if v != -1:
                bad.append(txt)
    out.append(claim("sparse_sign_faster",
                     f"sparse sign (zeta = 8) is faster than Gaussian and SRTT at the largest m "
                     f"(m={mx}), every l",
                     not bad, "; ".join(parts) + f". Noise rule: {_NOISE_RULE}",
                     "not decidedly faster: " + "; ".join(bad)))

    # 2. SRTT faster than Gaussian, every l
    ratio = {l: med["gaussian"][(mx, l)] / med["srtt"][(mx, l)] for l in ls}
    verdict = {l: compare(raw["srtt"][(mx, l)], raw["gaussian"][(mx, l)]) for l in ls}
    parts = [f"l={l}: gaussian/srtt {ratio[l]:.2f}x (srtt {_cell(raw, 'srtt', (mx, l))}, "
             f"gaussian {_cell(raw, 'gaussian', (mx, l))}: srtt {_VERDICT[verdict[l]]})"
             for l in ls]
    bad = [p for l, p in zip(ls, parts) if verdict[l] != -1]
    out.append(claim("srtt_faster_than_gaussian",
                     f"SRTT outperforms the Gaussian embedding in efficiency at the largest m "
                     f"(m={mx}), every l",
                     not bad, "; ".join(parts) + f". Noise rule: {_NOISE_RULE}",
                     "SRTT not decidedly faster than Gaussian at " + "; ".join(bad)))

    # 3. the advantage exists at the largest l and grows with l
    lmax = max(ls)
    exists = verdict[lmax] == -1 and ratio[lmax] > 1.0
    grows = all(ratio[b] > ratio[a] for a, b in zip(ls, ls[1:]))
    trend = ", ".join(f"l={l}: {ratio[l]:.2f}x" for l in ls)
    why = []
    if not exists:
        why.append(f"no advantage to amplify: at the largest l={lmax} gaussian/srtt = "
                   f"{ratio[lmax]:.2f}x, SRTT {_VS[verdict[lmax]]} Gaussian "
                   f"(srtt {_cell(raw, 'srtt', (mx, lmax))}, gaussian "
                   f"{_cell(raw, 'gaussian', (mx, lmax))}); "
                   f"SRTT is slower (ratio < 1) at {sum(ratio[l] < 1 for l in ls)} of "
                   f"{len(ls)} l")
    if not grows:
        why.append(f"the gaussian/srtt ratio does not increase with l ({trend})")
    out.append(claim("srtt_advantage_grows_with_l",
                     f"SRTT's advantage over Gaussian is amplified as l increases: gaussian/srtt "
                     f"time ratio > 1 (decided) at the largest l (l={lmax}) and increasing over "
                     f"l = {', '.join(map(str, ls))} (m={mx})",
                     exists and grows,
                     f"gaussian/srtt median time ratio {trend}; at l={lmax} SRTT "
                     f"{_VS[verdict[lmax]]} Gaussian. Noise rule: {_NOISE_RULE}",
                     "; ".join(why)))
    return out


def plot(med, ms, ls, cfg, env, path, methods=METHODS, raw=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(ls), figsize=(4.2 * len(ls), 3.8), squeeze=False)
    colors = {"gaussian": "C0", "srtt": "C1", "sparse_sign": "C2", "sparse_sign_jit": "C2"}
    for ax, l in zip(axes[0], ls):
        for meth in methods:
            y = [med[meth][(m, l)] * 1e3 for m in ms]
            yerr = None
            if raw is not None:
                yerr = [[y[i] - min(raw[meth][(m, l)]) * 1e3 for i, m in enumerate(ms)],
                        [max(raw[meth][(m, l)]) * 1e3 - y[i] for i, m in enumerate(ms)]]
            ax.errorbar(ms, y, yerr=yerr, marker="o", color=colors[meth], capsize=2,
                        linestyle="--" if meth == "sparse_sign_jit" else "-",
                        alpha=0.6 if meth == "sparse_sign_jit" else 1.0, label=LABELS[meth])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("ambient dimension m")
        ax.set_title(f"l = {l}, n = {cfg['n']}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel(f"time [ms], median of {cfg['repeats']} repeats (bars: min-max)")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle(f"Applying Gamma (l x m) to a dense Gaussian A (m x {cfg['n']}), "
                 f"{cfg['dtype']}, median of {cfg['repeats']} repeats | {env['backend']}, "
                 f"jax {env['jax']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv=None):
    p = parser(__doc__, quick="n=100, m=2^11,2^14, l=16,64, 3 repeats (< 1 min)", host_threads=1,
               seed=0, dtype=("float64", ("float32", "float64")), out=str(DEFAULT_OUT),
               helps={"host_threads": THREADS_HELP, "out": OUT_HELP})
    p.add_argument("--extras", action="store_true",
                   help="also time sparse sign drawn + applied inside one jit")
    p.add_argument("--ms", type=_ints, default=None,
                   help="comma-separated m values, e.g. '2**10,2**12' (default by mode)")
    p.add_argument("--ls", type=_ints, default=None, help="comma-separated l values")
    p.add_argument("--n", type=int, default=None, help="columns of A (1000 full, 100 quick)")
    p.add_argument("--zeta", type=int, default=8, help="sparse sign nonzeros per column")
    p.add_argument("--repeats", type=int, default=None, help="timed calls per cell (median)")
    args = p.parse_args(argv)
    if args.quick:
        defaults = dict(ms=[2**11, 2**14], ls=[16, 64], n=100, repeats=3)
    else:
        defaults = dict(ms=[2**k for k in range(10, 17)], ls=[16, 64, 256], n=1000, repeats=5)
    for name, v in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, v)
    args.ms, args.ls = sorted(args.ms), sorted(args.ls)
    if args.repeats < 3 or args.n < 1 or not args.ms or not args.ls:
        p.error("--repeats must be >= 3 (a median and a spread per cell), --n >= 1 and "
                "--ms, --ls non-empty")
    if args.zeta > min(args.ls) or max(args.ls) > min(args.ms):
        p.error("need zeta <= every l and every l <= every m (an SRTT keeps l of the m rows)")
    return args


def main(argv=None):
    return run_main(parse_args, run, argv, x64=lambda a: a.dtype == "float64")


def run(args, argv=None):
    env = env_info()
    dtype = jnp.dtype(args.dtype)
    cfg = {"script": "fig_sketch_ps_time", "thesis_figure": "fig:sketch-ps-time",
           "claim": CLAIM, "quick": args.quick, "ms": args.ms, "ls": args.ls, "n": args.n,
           "zeta": args.zeta, "gaussian_generator": Gaussian().generator,
           "repeats": args.repeats, "extras": args.extras,
           "dtype": args.dtype, "seed": args.seed, "host_threads": args.host_threads,
           "statistic": "median", "argv": sys.argv if argv is None else list(argv),
           "env": env, "loadavg_start": loadavg()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"# fig:sketch-ps-time | jax {env['jax']} on {env['backend']} "
          f"({env['cpu_affinity']} CPUs), {args.dtype}, n={args.n}, zeta={args.zeta}, "
          f"median of {args.repeats}; load average {cfg['loadavg_start']}")
    key = jax.random.key(args.seed)
    kA, kS = jax.random.split(key)
    methods = METHODS if args.extras else PRIMARY
    raw = {meth: {} for meth in methods}
    bar = tqdm(total=len(args.ms) * len(args.ls) * len(methods), desc="sketch-ps-time",
               unit="cell", file=sys.stderr, dynamic_ncols=True)
    t_start = time.perf_counter()
    for m in args.ms:
        A = jax.block_until_ready(jax.random.normal(jax.random.fold_in(kA, m), (m, args.n),
                                                    dtype))
        for l in args.ls:
            keys = [jax.random.fold_in(kS, 1000 * l + i) for i in range(args.repeats + 1)]
            for meth in methods:
                bar.set_postfix_str(f"m={m} l={l} {meth}")
                fn = build(meth, l, m, args.zeta, dtype)
                raw[meth][(m, l)] = time_median(fn, keys, A, args.repeats)
                bar.update(1)
        del A
    bar.close()
    med = {meth: {c: statistics.median(t) for c, t in v.items()} for meth, v in raw.items()}

    # table
    print()
    hdr = f"{'m':>8} {'l':>5} " + " ".join(f"{LABELS[x][:22]:>23}" for x in methods)
    print(f"median time [ms], A = m x {args.n}")
    print(hdr)
    for m in args.ms:
        for l in args.ls:
            print(f"{m:>8} {l:>5} " + " ".join(f"{med[x][(m, l)] * 1e3:>23.3f}"
                                                 for x in methods))
    claims = check_claims(raw, args.ms, args.ls)
    print()
    print(f"Thesis claim: {CLAIM}")
    for c in claims:
        print(f"  [{'HELD' if c['held'] else 'NOT HELD'}] {c['id']}: {c['claim']}: "
              f"{c['detail']}")
        if not c["held"]:
            print(f"      reason: {c['reason']}")
    # also with the all-in-jit sparse sign, for information
    mx = max(args.ms)
    info = ""
    if args.extras:
        sj = {l: med["sparse_sign_jit"][(mx, l)] for l in args.ls}
        info = "; ".join(f"l={l}: gaussian/sparse_jit {med['gaussian'][(mx, l)] / sj[l]:.2f}x, "
                         f"srtt/sparse_jit {med['srtt'][(mx, l)] / sj[l]:.2f}x" for l in args.ls)
    if info:
        print(f"  (info) with sparse sign drawn and applied inside one jit, at m={mx}: {info}")

    cfg["loadavg_end"] = loadavg()
    cfg["wall_s"] = time.perf_counter() - t_start
    results = {"config": cfg, "quick": args.quick, "wall_s": cfg["wall_s"], "claims": claims,
               "median_s": {x: {f"{m},{l}": v for (m, l), v in med[x].items()} for x in methods},
               "times_s": {x: {f"{m},{l}": v for (m, l), v in raw[x].items()} for x in methods}}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "m", "l", "n", "zeta", "dtype", "median_s", "min_s", "repeats"])
        for x in methods:
            for (m, l), t in raw[x].items():
                w.writerow([x, m, l, args.n, args.zeta, args.dtype, f"{statistics.median(t):.6g}",
                            f"{min(t):.6g}", len(t)])
    plot(med, args.ms, args.ls, cfg, env, out / "fig_sketch_ps_time.png", methods, raw)
    print(f"wrote {out}/{{results.json,results.csv,config.json,fig_sketch_ps_time.png}} "
          f"({cfg['wall_s']:.1f} s)")
    return results


if __name__ == "__main__":
    main()
