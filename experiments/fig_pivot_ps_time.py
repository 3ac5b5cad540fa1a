"""Thesis Figure 2.2: run time of the pivoting schemes LUPP, CPQR and DEIM vs n.

Run (from the repository root)::

    python experiments/fig_pivot_ps_time.py            # full: n=2^10..2^16, l=16,64,256, m=1000
    python experiments/fig_pivot_ps_time.py --quick    # CI: n=2^10,2^13, l=16,64

Thesis claim (Section 2.5.2): "we observe a considerable run time advantage of
the LUPP over the CPQR and DEIM, especially when l is large. (Additionally, we see that DEIM
slightly outperforms CPQR, which is perhaps surprising, given the substantially larger number
of flops required by DEIM.)" The script checks, at the largest n:

1. LUPP is faster than CPQR and than DEIM, for every l (ratios printed);
2. the advantage grows with l: the CPQR/LUPP (2a) and DEIM/LUPP (2b) time ratios are larger
   at the largest l than at the smallest l;
3. (side remark) DEIM is faster than CPQR, for every l.

Each is printed as HELD / NOT HELD with the numbers.

Set-up (float64). ``A`` is a dense m x n standard Gaussian matrix (``--m``, default 1000);
the row sketch ``X = Gamma A`` (l x n, Gaussian Gamma) and the column sketch ``Y = A Omega``
(m x l) are computed once, outside the timings, as the thesis' "given sketch". With l = k
(the thesis' convention for this comparison) each scheme picks l column pivots:

* ``LUPP`` -- :func:`rdr_jax.id_cur.pivoting.lupp` ``(X, l)`` (LU with partial pivoting of X^T);
* ``CPQR`` -- :func:`rdr_jax.id_cur.pivoting.cpqr` ``(X, l)`` (LAPACK geqp3);
* ``DEIM`` -- the thesis' description: ``Q_Y = orth(Y)`` (QR), the reduced SVD of
  ``Q_Y^T A`` (l x n), then :func:`rdr_jax.id_cur.pivoting.lupp` on the l x n right singular vectors
  (the same steps as the ``DEIM()`` branch of :func:`rdr_jax.id_cur.selection.row_basis`, minus
  drawing the sketch). Its time therefore includes the m x n x l product ``Q_Y^T A``.

Each scheme is one ``jax.jit``-compiled function, warmed up once (compile excluded); the
reported time is the median of ``--repeats`` calls with ``jax.block_until_ready``. Outputs in
``--out`` (default ``experiments/results/fig_pivot_ps_time``): ``results.json``,
``results.csv``, ``fig_pivot_ps_time.png``, ``config.json``.

float64: needed because the figure reproduces the thesis' float64 pivoting times.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from rdr_jax.id_cur import pivoting
from rdr_jax.operators import HIGHEST

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (NOISE_RULE, OUT_HELP, THREADS_HELP, compare_times, env_info,  # noqa: E402
                     ints as _ints, loadavg, parser, ratio_range, run_main,
                     time_calls)

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "fig_pivot_ps_time"
METHODS = ("LUPP", "CPQR", "DEIM")
CLAIM = ("LUPP is considerably faster than CPQR and DEIM, especially for large l; DEIM "
         "slightly outperforms CPQR (thesis Sec. subsec:exp_pivot, Fig. fig:pivot-ps-time)")


@partial(jax.jit, static_argnames=("k",))
def lupp_pivots(X, k):
    return pivoting.lupp(X, k)


@partial(jax.jit, static_argnames=("k",))
def cpqr_pivots(X, k):
    return pivoting.cpqr(X, k)


@partial(jax.jit, static_argnames=("k",))
def deim_pivots(Y, A, k):
    """Orthonormalise the column sketch, SVD of Q^T A, LUPP on the right singular vectors."""
    Q, _ = jnp.linalg.qr(Y, mode="reduced")
    B = jnp.matmul(Q.T, A, precision=HIGHEST)
    _, _, Vt = jnp.linalg.svd(B, full_matrices=False)
    return pivoting.lupp(Vt, k)


def time_median(fn, args, repeats: int) -> tuple[list[float], np.ndarray]:
    """One untimed compile + warm-up call, then ``repeats`` timed calls
    (:func:`_common.time_calls`); the pivots of the last call."""
    times, out = time_calls(fn, *args, repeats=repeats, warmup=1)
    return times, np.asarray(out)


def check_claims(raw: dict, ns: list[int], ls: list[int]) -> list[dict]:
    """The thesis statements at the largest n from the timed calls ``raw[method][(n, l)]``:
    medians, and a comparison decided only beyond the repeats' spread
    (:func:`_common.compare_times`); every NOT HELD says why with the measured ratios."""
    nx = max(ns)
    lmin, lmax = min(ls), max(ls)
    t = {m: {l: raw[m][(nx, l)] for l in ls} for m in METHODS}
    rr = {(b, a): {l: ratio_range(t[b][l], t[a][l]) for l in ls}
          for b, a in (("CPQR", "LUPP"), ("DEIM", "LUPP"), ("CPQR", "DEIM"))}

    def fmt(b, a):
        return ", ".join(f"l={l}: {rr[b, a][l][0]:.2f}x [{rr[b, a][l][1]:.2f}, "
                         f"{rr[b, a][l][2]:.2f}]" for l in ls)

    def faster(a, b):      # a decidedly faster than b at every l; the l values that fail
        return [l for l in ls if compare_times(t[a][l], t[b][l]) != -1]

    def grows(b, a):       # ratio b/a decidedly larger at lmax than at lmin
        lo_max, hi_min = rr[b, a][lmax][1], rr[b, a][lmin][2]
        return lo_max > hi_min

    rule = f"; noise rule: {NOISE_RULE}; [range over the repeats]"
    claims = []
    bad = {m: faster("LUPP", m) for m in ("CPQR", "DEIM")}
    ok = not bad["CPQR"] and not bad["DEIM"]
    claims.append({
        "id": "lupp_fastest", "claim": f"LUPP faster than CPQR and DEIM at the largest n "
                                       f"(n={nx}), every l",
        "held": ok, "detail": f"CPQR/LUPP {fmt('CPQR', 'LUPP')}; DEIM/LUPP "
                              f"{fmt('DEIM', 'LUPP')}" + rule,
        "reason": "" if ok else f"not decidedly faster at l = {bad} (medians within the "
                                "repeats' spread or slower)"})
    for m in ("CPQR", "DEIM"):
        ok = grows(m, "LUPP")
        r0, r1 = rr[m, "LUPP"][lmin][0], rr[m, "LUPP"][lmax][0]
        claims.append({
            "id": f"lupp_advantage_over_{m.lower()}_grows",
            "claim": f"LUPP's advantage over {m} grows with l ({m}/LUPP at l={lmax} > at "
                     f"l={lmin}, n={nx})", "wording": "ours",
            "held": bool(ok), "detail": f"{m}/LUPP {fmt(m, 'LUPP')}" + rule,
            "reason": "" if ok else (
                f"{m}/LUPP is {r0:.1f}x at l = {lmin} and {r1:.1f}x at l = {lmax} (medians): "
                + ("LUPP is faster at every l but the ratio does not grow"
                   if r1 <= r0 else "the growth lies within the repeats' spread"))})
    bad = faster("DEIM", "CPQR")
    qd = ", ".join(f"{rr['CPQR', 'DEIM'][l][0]:.2f}x" for l in ls)
    claims.append({
        "id": "deim_faster_than_cpqr",
        "claim": f"(side remark) DEIM faster than CPQR at the largest n (n={nx}), every l",
        "held": not bad, "detail": f"CPQR/DEIM {fmt('CPQR', 'DEIM')}" + rule,
        "reason": "" if not bad else (
            f"CPQR/DEIM = {qd} at l = {ls}: here CPQR (LAPACK's column-pivoted QR of the l x n sketch through "
            "XLA) is faster than DEIM (QR of the column sketch, SVD of Q^T A, then LUPP on the "
            "right singular vectors); the thesis' remark is about its MATLAB implementations")})
    return claims


def plot(med, ns, ls, cfg, env, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(ls), figsize=(4.2 * len(ls), 3.8), squeeze=False)
    for ax, l in zip(axes[0], ls):
        for meth, c in zip(METHODS, ("C0", "C1", "C2")):
            ax.plot(ns, [med[meth][(n, l)] * 1e3 for n in ns], marker="o", color=c, label=meth)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("problem size n")
        ax.set_title(f"l = {l}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel(f"pivoting time [ms] (median of {cfg['repeats']})")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle(f"Pivoting on an l x n sketch (DEIM: + orth, Q^T A with m={cfg['m']}, SVD) | "
                 f"{env['backend']}, jax {env['jax']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv=None):
    p = parser(__doc__, quick="n=2^10,2^13, l=16,64, 3 repeats", host_threads=1, seed=0,
               out=str(DEFAULT_OUT), helps={"host_threads": THREADS_HELP, "out": OUT_HELP})
    p.add_argument("--ns", type=_ints, default=None, help="comma-separated n, e.g. '2**10,2**12'")
    p.add_argument("--ls", type=_ints, default=None, help="comma-separated l")
    p.add_argument("--m", type=int, default=1000, help="rows of A (DEIM's Q^T A), default 1000")
    p.add_argument("--repeats", type=int, default=None, help="timed calls per cell (median)")
    args = p.parse_args(argv)
    if args.quick:
        defaults = dict(ns=[2**10, 2**13], ls=[16, 64], repeats=3)
    else:
        defaults = dict(ns=[2**k for k in range(10, 17)], ls=[16, 64, 256], repeats=5)
    for name, v in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, v)
    args.ns, args.ls = sorted(args.ns), sorted(args.ls)
    if args.repeats < 1 or not args.ns or not args.ls:
        p.error("--repeats must be >= 1 and --ns, --ls non-empty")
    if max(args.ls) > min(min(args.ns), args.m):
        p.error("every l must be <= every n and <= m")
    return args


def main(argv=None):
    return run_main(parse_args, run, argv, x64=True)


def run(args, argv=None):
    env = env_info()
    cfg = {"script": "fig_pivot_ps_time", "thesis_figure": "fig:pivot-ps-time", "claim": CLAIM,
           "quick": args.quick, "ns": args.ns, "ls": args.ls, "m": args.m,
           "repeats": args.repeats, "dtype": "float64", "seed": args.seed,
           "host_threads": args.host_threads,
           "statistic": "median", "pivots": "k = l", "cpqr": "CPQR(impl='lapack'): geqp3",
           "argv": sys.argv if argv is None else list(argv), "env": env,
           "loadavg_start": loadavg()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"# fig:pivot-ps-time | jax {env['jax']} on {env['backend']} ({env['cpu_affinity']} "
          f"CPUs), float64, m={args.m}, median of {args.repeats}; load average "
          f"{cfg['loadavg_start']}")
    key = jax.random.key(args.seed)
    raw = {x: {} for x in METHODS}
    checks = {}
    bar = tqdm(total=len(args.ns) * len(args.ls) * len(METHODS), desc="pivot-ps-time",
               unit="cell", file=sys.stderr, dynamic_ncols=True)
    t_start = time.perf_counter()
    for n in args.ns:
        kA, kG, kO = jax.random.split(jax.random.fold_in(key, n), 3)
        A = jax.random.normal(kA, (args.m, n), jnp.float64)
        for l in args.ls:
            X = jax.block_until_ready(jnp.matmul(
                jax.random.normal(kG, (l, args.m), jnp.float64) / np.sqrt(l), A,
                precision=HIGHEST))
            Y = jax.block_until_ready(jnp.matmul(
                A, jax.random.normal(kO, (n, l), jnp.float64) / np.sqrt(l), precision=HIGHEST))
            piv = {}
            for meth, fn, fargs in (("LUPP", lupp_pivots, (X, l)), ("CPQR", cpqr_pivots, (X, l)),
                                    ("DEIM", deim_pivots, (Y, A, l))):
                bar.set_postfix_str(f"n={n} l={l} {meth}")
                raw[meth][(n, l)], piv[meth] = time_median(fn, fargs, args.repeats)
                bar.update(1)
            checks[(n, l)] = all(len(set(p.tolist())) == l and p.min() >= 0 and p.max() < n
                                 for p in piv.values())
            del X, Y
        del A
    bar.close()
    med = {x: {c: statistics.median(t) for c, t in v.items()} for x, v in raw.items()}
    if not all(checks.values()):
        bad = [c for c, ok in checks.items() if not ok]
        raise RuntimeError(f"invalid pivots (not l distinct indices) for (n, l) in {bad}")

    print()
    print("median pivoting time [ms]")
    print(f"{'n':>8} {'l':>5} " + " ".join(f"{x:>10}" for x in METHODS)
          + f" {'CPQR/LUPP':>10} {'DEIM/LUPP':>10}")
    for n in args.ns:
        for l in args.ls:
            t = [med[x][(n, l)] for x in METHODS]
            print(f"{n:>8} {l:>5} " + " ".join(f"{v * 1e3:>10.3f}" for v in t)
                  + f" {t[1] / t[0]:>10.2f} {t[2] / t[0]:>10.2f}")
    claims = check_claims(raw, args.ns, args.ls)
    print()
    print(f"Thesis claim: {CLAIM}")
    for c in claims:
        print(f"  [{'HELD' if c['held'] else 'NOT HELD'}] {c['claim']}: {c['detail']}")

    cfg["loadavg_end"] = loadavg()
    cfg["wall_s"] = time.perf_counter() - t_start
    results = {"config": cfg, "claims": claims,
               "median_s": {x: {f"{n},{l}": v for (n, l), v in med[x].items()} for x in METHODS},
               "times_s": {x: {f"{n},{l}": v for (n, l), v in raw[x].items()} for x in METHODS}}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "n", "l", "m", "median_s", "min_s", "repeats"])
        for x in METHODS:
            for (n, l), t in raw[x].items():
                w.writerow([x, n, l, args.m, f"{statistics.median(t):.6g}", f"{min(t):.6g}",
                            len(t)])
    plot(med, args.ns, args.ls, cfg, env, out / "fig_pivot_ps_time.png")
    print(f"wrote {out}/{{results.json,results.csv,config.json,fig_pivot_ps_time.png}} "
          f"({cfg['wall_s']:.1f} s)")
    return results


if __name__ == "__main__":
    main()
