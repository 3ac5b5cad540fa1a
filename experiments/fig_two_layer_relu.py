"""Thesis Section 4.6.1: DAC vs DA-ERM for two-layer ReLU regression.

Run (from the repository root)::

    python experiments/fig_two_layer_relu.py             # full: 5 alphas x 6 d_aug x 20 seeds
    python experiments/fig_two_layer_relu.py --quick     # CI: 2 alphas x 4 d_aug x 6 seeds
    python experiments/fig_two_layer_relu.py --alphas 1,4 --d-augs 0,20 --seeds 10

Thesis claim (Section 4.6.1, Theorem B.2, Corollary B.3): DAC on the first layer gives ``L(h_dac) - L(h*) <~ sigma C_w
C_null / sqrt(N)`` with ``C_null <~ sqrt(d - d_aug)``, while DA-ERM achieves no better than
``sigma C_w max(sqrt(d / ((alpha+1) N)), sqrt((d - d_aug)/N))``: "DAC tends to be more efficient
than DA-ERM, and such advantage is enhanced with strong but limited data augmentations (i.e.,
large d_aug and small alpha)". Checked on the mean test excess risk over seeds and printed as
HELD / NOT HELD:

(a) DAC beats DA-ERM: mean excess risk of DAC < DA-ERM in every cell with ``d_aug > 0`` (the
    paired per-seed win rate is printed); at ``d_aug = 0`` the two coincide (the augmentations
    are copies), printed as a sanity check;
(a2) the same as a paired test: DAC's per-seed risk is lower than DA-ERM's with a one-sided
    Wilcoxon signed-rank p < 0.05 in every cell with ``d_aug >= max(d_aug)/2`` (strong
    augmentations), and DA-ERM is significantly lower (p < 0.05) in no cell;
(b) the advantage grows with d_aug: for every alpha, the Spearman correlation between d_aug and
    the gap ``DA-ERM - DAC`` is >= 0.8; (b2) the same for the ratio ``DA-ERM / DAC``;
(c) the advantage is largest for limited augmentations: at the largest d_aug the gap at the
    smallest alpha exceeds the gap at the largest alpha;
(d) stronger augmentations help DAC (Corollary B.3): the Spearman
    correlation between d_aug and DAC's excess risk is <= -0.8 (at the smallest alpha).

Setting (the thesis fixes no numbers for this example; chosen like its linear examples,
Example 2, d = 30): ``x ~ N(0, I_30)``, teacher ``h*(x) = (x^T B*)_+ w*``
with ``q = 2`` unit columns of ``B*`` in the first ``d_causal = 5`` coordinates and ``w* = +-1``
(``||w*||_1 = 2``), label noise ``sigma = 0.5``, ``N = 300`` training samples (``alpha N >= 4
d_aug`` for every alpha, Theorem B.2 (a)), ``alpha`` augmentations per
sample adding ``N(0, 1)`` noise to the last ``d_aug`` coordinates (label invariant, ``rank(Delta)
= d_aug`` a.s.). Student: width 8, unit-norm first-layer columns, ``||w||_1 <= C_w = ||w*||_1``
(the thesis' class), full-batch Adam with a cosine-decayed step size from 1e-2 for 2000 steps,
projected after every step (:mod:`rdr_jax.dac.two_layer`). DAC is the thesis' hard constraint
(``B = P_null B``); ``--soft-lam`` adds the soft penalty of Eq. (4.1). Every cell uses
the same seeds (same teacher, inputs and initialisation: paired comparisons). Excess risk
``mean (h(x) - h*(x))^2`` on ``n_test = 2000`` fresh inputs (population risk) and on the
training inputs (the thesis' fixed-design risk, saved as ``*_train``).

Outputs in ``--out`` (default ``experiments/results/fig_two_layer_relu``): ``results.csv`` (one
row per alpha, d_aug with mean/std over seeds), ``results.json`` (rows, per-seed values,
verdicts), ``fig_two_layer_relu.png`` (excess risk vs d_aug and vs alpha, mean +- std),
``config.json``.

float64: needed because its invariants (DAC = DA-ERM at d_aug = 0, leak < 1e-12) are
float64-exact and float32 runs flip quick-mode verdict (b).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import scipy.stats
from tqdm import tqdm

from rdr_jax.dac import two_layer as T

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT_HELP, env_info, ints, loadavg, parser, run_main, write_csv  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "fig_two_layer_relu"
CLAIM = ("DAC beats DA-ERM for two-layer ReLU regression, by more for strong (large d_aug) and "
         "limited (small alpha) augmentations (thesis Sec. sec:example_2relu)")
CLAIM_TEXT = {
    "a_dac_better": "(a) DAC < DA-ERM (mean test excess risk) in every cell with d_aug > 0",
    "a2_dac_better_significant": "(a2) DAC significantly better (paired Wilcoxon, 5%) in "
                                 "every cell with d_aug >= max(d_aug)/2, and significantly "
                                 "worse in none",
    "b_gap_grows_with_daug": "(b) the gap DA-ERM - DAC grows with d_aug (Spearman >= 0.8, "
                             "every alpha)",
    "b2_ratio_grows_with_daug": "(b2) the ratio DA-ERM / DAC grows with d_aug (Spearman >= "
                                "0.8, every alpha)",
    "c_gap_largest_small_alpha": "(c) at the largest d_aug, the gap is larger for the smallest "
                                 "alpha than for the largest",
    "d_dac_improves_with_daug": "(d) DAC's excess risk decreases with d_aug (Spearman <= -0.8)",
}
FULL = dict(alphas=[1, 2, 4, 8, 16], d_augs=[0, 5, 10, 15, 20, 25], seeds=20, steps=2000)
QUICK = dict(alphas=[1, 4], d_augs=[0, 10, 20, 25], seeds=6, steps=1000)
RHO = 0.8
ALPHA_TEST = 0.05


def wilcoxon_p(x, y, alternative: str) -> float:
    """Paired Wilcoxon signed-rank p-value for ``x - y`` (1.0 when all pairs tie)."""
    dlt = np.asarray(x) - np.asarray(y)
    if np.all(np.abs(dlt) <= 1e-12 * np.maximum(np.abs(np.asarray(y)), 1e-30)):
        return 1.0
    return float(scipy.stats.wilcoxon(x, y, alternative=alternative).pvalue)


def parse_args(argv=None):
    p = parser(__doc__,
               quick="alphas 1,4; d_aug 0,10,20,25; 6 seeds; 1000 steps (two XLA "
                     "compilations, one per alpha, dominate: about a minute)",
               host_threads=1, seed=0, out=str(DEFAULT_OUT),
               helps={"host_threads": "threads for OpenBLAS/OpenMP (0 = library defaults)",
                      "out": OUT_HELP})
    p.add_argument("--alphas", type=ints, default=None, help="augmentations per sample")
    p.add_argument("--d-augs", type=ints, default=None, help="perturbed coordinates")
    p.add_argument("--seeds", type=int, default=None, help="seeds per cell (vmapped)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per fit")
    p.add_argument("--n", type=int, default=300, help="training samples N")
    p.add_argument("--d", type=int, default=30, help="input dimension")
    p.add_argument("--d-causal", type=int, default=5, help="coordinates the teacher uses")
    p.add_argument("--q", type=int, default=2, help="teacher width")
    p.add_argument("--width", type=int, default=8, help="student width")
    p.add_argument("--sigma", type=float, default=0.5, help="label noise std")
    p.add_argument("--aug-scale", type=float, default=1.0, help="augmentation noise std")
    p.add_argument("--lr", type=float, default=1e-2, help="peak Adam step size")
    p.add_argument("--n-test", type=int, default=2000, help="test inputs")
    p.add_argument("--soft-lam", type=float, default=None,
                   help="also train soft DAC (Eq. eq:dac_soft) with this lam")
    args = p.parse_args(argv)
    base = QUICK if args.quick else FULL
    for k in ("alphas", "d_augs", "seeds", "steps"):
        if getattr(args, k) is None:
            setattr(args, k, base[k])
    if min(args.alphas) < 1:
        p.error("--alphas must be >= 1")
    if min(args.d_augs) < 0 or max(args.d_augs) > args.d - args.d_causal:
        p.error(f"--d-augs must lie in [0, d - d_causal] = [0, {args.d - args.d_causal}]")
    if args.seeds < 2 or args.steps < 1:
        p.error("--seeds must be >= 2 and --steps >= 1")
    if args.soft_lam is not None and args.soft_lam < 0:
        p.error("--soft-lam must be >= 0")
    args.alphas, args.d_augs = sorted(set(args.alphas)), sorted(set(args.d_augs))
    return args


def main(argv=None):
    return run_main(parse_args, run, argv, x64=True)


def make_cell(args, alpha: int):
    """jit(vmap over seeds) of one (alpha, d_aug) cell; d_aug is traced (no recompilation)."""
    shape = T.DataShape(n=args.n, d=args.d, q=args.q, d_causal=args.d_causal, alpha=alpha,
                        n_test=args.n_test)

    def one(key, d_aug):
        kd, ki = jax.random.split(key)
        data = T.make_data(kd, shape, d_aug=d_aug, sigma=args.sigma, aug_scale=args.aug_scale)
        c_w = jnp.sum(jnp.abs(data.teacher.w))           # C_w = ||w*||_1
        fit = T.FitOptions(width=args.width, steps=args.steps, learning_rate=args.lr, c_w=c_w)
        fits = {"da_erm": T.fit_da_erm(ki, data.X, data.y, data.X_aug, options=fit),
                "dac": T.fit_dac(ki, data.X, data.y, data.X_aug, options=fit)}
        if args.soft_lam is not None:
            fits["dac_soft"] = T.fit_dac(ki, data.X, data.y, data.X_aug, lam=args.soft_lam,
                                         options=fit)
        sub = T.augmentation_subspace(data.X, data.X_aug)
        out = {"rank": sub.rank, "c_null": T.c_null(data.X, sub.P_null),
               "dac_leak": jnp.max(jnp.abs(sub.P_range @ fits["dac"].params.B))}
        for name, res in fits.items():
            out[name] = T.excess_risk(res.params, data.X_test, data.f_test)
            out[name + "_train"] = T.excess_risk(res.params, data.X, data.f_X)
            out[name + "_loss"] = res.losses[-1]
        return out

    return jax.jit(jax.vmap(one, in_axes=(0, None)))


def spearman(x, y) -> float:
    r = scipy.stats.spearmanr(x, y).statistic
    return float(r) if np.isfinite(r) else 0.0


def check_claims(rows, alphas, d_augs) -> dict:
    cell = {(r["alpha"], r["d_aug"]): r for r in rows}
    pos = [da for da in d_augs if da > 0]
    out = {}
    bad = [(a, da) for a in alphas for da in pos
           if not cell[(a, da)]["dac_mean"] < cell[(a, da)]["da_erm_mean"]]
    wins = [cell[(a, da)]["dac_win_rate"] for a in alphas for da in pos]
    zero = [abs(cell[(a, 0)]["dac_mean"] / cell[(a, 0)]["da_erm_mean"] - 1)
            for a in alphas if 0 in d_augs]
    out["a_dac_better"] = {
        "held": bool(pos) and not bad,
        "detail": (f"DA-ERM/DAC ratio over d_aug>0 cells: min "
                   f"{min(cell[(a, da)]['ratio'] for a in alphas for da in pos):.2f}, max "
                   f"{max(cell[(a, da)]['ratio'] for a in alphas for da in pos):.2f}; per-seed "
                   f"win rate of DAC min {min(wins):.2f}, mean {np.mean(wins):.2f}"
                   + (f"; cells where DAC did not win: {bad}" if bad else "")
                   + (f"; at d_aug=0 |DAC/DA-ERM - 1| <= {max(zero):.1e}" if zero else ""))
        if pos else "no d_aug > 0 in the grid"}
    strong = [da for da in pos if da >= d_augs[-1] / 2] if pos else []
    p_better = {(a, da): cell[(a, da)]["p_dac_better"] for a in alphas for da in strong}
    worse = [(a, da) for a in alphas for da in pos if cell[(a, da)]["p_dac_worse"] < ALPHA_TEST]
    out["a2_dac_better_significant"] = {
        "held": bool(strong) and all(v < ALPHA_TEST for v in p_better.values()) and not worse,
        "detail": (f"one-sided paired Wilcoxon p (DAC < DA-ERM) in the strong cells d_aug >= "
                   f"{d_augs[-1] / 2:g}: max {max(p_better.values()):.1e}; cells where DA-ERM "
                   f"is significantly better (p < {ALPHA_TEST}): {worse or 'none'}")
        if strong else "no d_aug > 0 in the grid"}
    rho_gap = {a: spearman(d_augs, [cell[(a, da)]["gap"] for da in d_augs]) for a in alphas}
    rho_ratio = {a: spearman(d_augs, [cell[(a, da)]["ratio"] for da in d_augs])
                 for a in alphas}
    out["b_gap_grows_with_daug"] = {
        "held": len(d_augs) >= 3 and all(v >= RHO - 1e-9 for v in rho_gap.values()),
        "detail": "Spearman(d_aug, gap): " + ", ".join(f"alpha={a}: {v:.2f}"
                                                       for a, v in rho_gap.items())
        + "; gap at d_aug=" + str(d_augs[-1]) + ": " + ", ".join(
            f"alpha={a}: {cell[(a, d_augs[-1])]['gap']:.4f}" for a in alphas)}
    out["b2_ratio_grows_with_daug"] = {
        "held": len(d_augs) >= 3 and all(v >= RHO - 1e-9 for v in rho_ratio.values()),
        "detail": "Spearman(d_aug, DA-ERM/DAC): " + ", ".join(
            f"alpha={a}: {v:.2f}" for a, v in rho_ratio.items())
        + "; ratio at d_aug=" + str(d_augs[-1]) + ": " + ", ".join(
            f"alpha={a}: {cell[(a, d_augs[-1])]['ratio']:.2f}" for a in alphas)}
    da = d_augs[-1]
    g_lo, g_hi = cell[(alphas[0], da)]["gap"], cell[(alphas[-1], da)]["gap"]
    out["c_gap_largest_small_alpha"] = {
        "held": len(alphas) >= 2 and g_lo > g_hi,
        "detail": f"d_aug={da}: gap {g_lo:.4f} at alpha={alphas[0]} vs {g_hi:.4f} at alpha="
                  f"{alphas[-1]}; DA-ERM {cell[(alphas[0], da)]['da_erm_mean']:.4f} -> "
                  f"{cell[(alphas[-1], da)]['da_erm_mean']:.4f}, DAC "
                  f"{cell[(alphas[0], da)]['dac_mean']:.4f} -> "
                  f"{cell[(alphas[-1], da)]['dac_mean']:.4f}"}
    dac = [cell[(alphas[0], d)]["dac_mean"] for d in d_augs]
    rho = spearman(d_augs, dac)
    out["d_dac_improves_with_daug"] = {
        "held": len(d_augs) >= 3 and rho <= -RHO + 1e-9,
        "detail": f"alpha={alphas[0]}: Spearman(d_aug, DAC risk) = {rho:.2f}; DAC risk "
                  + ", ".join(f"{d}: {v:.4f}" for d, v in zip(d_augs, dac))
                  + "; C_null^2 " + ", ".join(f"{cell[(alphas[0], d)]['c_null'] ** 2:.1f}"
                                              for d in d_augs)}
    return out


def plot(rows, alphas, d_augs, path: Path, has_soft: bool):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cell = {(r["alpha"], r["d_aug"]): r for r in rows}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    cmap = plt.get_cmap("viridis")
    ax = axes[0]
    for i, a in enumerate(alphas):
        col = cmap(i / max(len(alphas) - 1, 1))
        m = np.array([cell[(a, d)]["da_erm_mean"] for d in d_augs])
        s = np.array([cell[(a, d)]["da_erm_std"] for d in d_augs])
        ax.plot(d_augs, m, "o-", color=col, label=f"DA-ERM, alpha={a}")
        ax.fill_between(d_augs, m - s, m + s, color=col, alpha=0.15)
    for key, lab, st in [("dac", "DAC (hard)", "k^--")] + (
            [("dac_soft", "DAC (soft)", "r^:")] if has_soft else []):
        a = alphas[0]
        m = np.array([cell[(a, d)][key + "_mean"] for d in d_augs])
        s = np.array([cell[(a, d)][key + "_std"] for d in d_augs])
        ax.plot(d_augs, m, st, label=f"{lab}, alpha={a}")
        ax.fill_between(d_augs, m - s, m + s, color=st[0], alpha=0.1)
    ax.set_xlabel("d_aug (perturbed coordinates)")
    ax.set_ylabel("test excess risk")
    ax.set_yscale("log")
    ax.set_title("excess risk vs d_aug (mean +- std over seeds)")
    ax.legend(fontsize=7)
    ax = axes[1]
    show = [d for d in d_augs if d > 0][-2:] or d_augs[-1:]
    for j, d in enumerate(show):
        for key, lab, ls in [("da_erm", "DA-ERM", "-"), ("dac", "DAC", "--")]:
            m = np.array([cell[(a, d)][key + "_mean"] for a in alphas])
            s = np.array([cell[(a, d)][key + "_std"] for a in alphas])
            ax.errorbar(alphas, m, yerr=s, ls=ls, marker="o", color=f"C{j}", capsize=3,
                        label=f"{lab}, d_aug={d}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("alpha (augmentations per sample)")
    ax.set_title("excess risk vs alpha")
    ax.legend(fontsize=7)
    fig.suptitle("Two-layer ReLU regression: DAC vs DA-ERM (thesis Sec. sec:example_2relu)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args, argv=None):
    env = env_info()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = {"script": "fig_two_layer_relu", "thesis_section": "sec:example_2relu",
           "claim": CLAIM, "quick": args.quick, "alphas": args.alphas, "d_augs": args.d_augs,
           "seeds": args.seeds, "steps": args.steps, "n": args.n, "d": args.d,
           "d_causal": args.d_causal, "q": args.q, "width": args.width, "sigma": args.sigma,
           "aug_scale": args.aug_scale, "lr": args.lr, "optimizer": "adam, cosine decay",
           "n_test": args.n_test, "c_w": "||w*||_1", "soft_lam": args.soft_lam,
           "seed": args.seed, "host_threads": args.host_threads, "dtype": "float64",
           "argv": sys.argv if argv is None else list(argv), "env": env,
           "loadavg_start": loadavg()}
    print(f"# sec:example_2relu | jax {env['jax']} on {env['backend']}, float64 | N={args.n}, "
          f"d={args.d}, d_causal={args.d_causal}, q={args.q}, width={args.width}, "
          f"sigma={args.sigma}, {args.seeds} seeds, {args.steps} Adam steps")
    keys = jax.random.split(jax.random.key(args.seed), args.seeds)
    methods = ["da_erm", "dac"] + (["dac_soft"] if args.soft_lam is not None else [])
    rows, per_seed = [], {}
    t0 = time.perf_counter()
    bar = tqdm(total=len(args.alphas) * len(args.d_augs), desc="two-layer ReLU", unit="cell",
               file=sys.stderr, dynamic_ncols=True)
    for alpha in args.alphas:
        cell_fn = make_cell(args, alpha)
        for d_aug in args.d_augs:
            res = jax.tree.map(np.asarray, cell_fn(keys, d_aug))
            row = {"alpha": alpha, "d_aug": d_aug, "rank": int(np.min(res["rank"])),
                   "c_null": float(np.mean(res["c_null"])),
                   "dac_leak": float(np.max(res["dac_leak"]))}
            for m in methods:
                for suffix in ("", "_train"):
                    v = res[m + suffix]
                    row[f"{m}{suffix}_mean"] = float(np.mean(v))
                    row[f"{m}{suffix}_std"] = float(np.std(v, ddof=1))
                row[f"{m}_final_loss"] = float(np.mean(res[m + "_loss"]))
            row["gap"] = row["da_erm_mean"] - row["dac_mean"]
            row["ratio"] = row["da_erm_mean"] / row["dac_mean"]
            row["dac_win_rate"] = float(np.mean(res["dac"] < res["da_erm"]))
            row["p_dac_better"] = wilcoxon_p(res["dac"], res["da_erm"], "less")
            row["p_dac_worse"] = wilcoxon_p(res["dac"], res["da_erm"], "greater")
            row["p_dac_better_train"] = wilcoxon_p(res["dac_train"], res["da_erm_train"], "less")
            row["p_dac_worse_train"] = wilcoxon_p(res["dac_train"], res["da_erm_train"],
                                                  "greater")
            row["dac_bound_shape"] = args.sigma * args.q * row["c_null"] / np.sqrt(args.n)
            row["da_erm_rate_shape"] = args.sigma * args.q * max(
                np.sqrt(args.d / ((alpha + 1) * args.n)),
                np.sqrt((args.d - d_aug) / args.n))
            rows.append(row)
            per_seed[f"alpha={alpha},d_aug={d_aug}"] = {
                m: res[m].tolist() for m in methods}
            bar.update(1)
    bar.close()
    claims = check_claims(rows, args.alphas, args.d_augs)
    claims_train = check_claims(
        [dict(r, da_erm_mean=r["da_erm_train_mean"], dac_mean=r["dac_train_mean"],
              gap=r["da_erm_train_mean"] - r["dac_train_mean"],
              ratio=r["da_erm_train_mean"] / r["dac_train_mean"],
              p_dac_better=r["p_dac_better_train"], p_dac_worse=r["p_dac_worse_train"])
         for r in rows],
        args.alphas, args.d_augs)
    cfg["wall_s"] = time.perf_counter() - t0
    cfg["loadavg_end"] = loadavg()

    print("\ntest excess risk, mean +- std over seeds (DAC: hard constraint)")
    hdr = (f"{'alpha':>5} {'d_aug':>5} {'rank':>4} {'DA-ERM':>17} {'DAC':>17} "
           f"{'ratio':>6} {'wins':>5} {'C_null^2':>8} {'leak':>8}")
    if args.soft_lam is not None:
        hdr += f" {'DAC soft':>17}"
    print(hdr)
    for r in rows:
        line = (f"{r['alpha']:>5} {r['d_aug']:>5} {r['rank']:>4} "
                f"{r['da_erm_mean']:>8.4f} +- {r['da_erm_std']:<6.4f}"
                f"{r['dac_mean']:>8.4f} +- {r['dac_std']:<6.4f}"
                f"{r['ratio']:>6.2f} {r['dac_win_rate']:>5.2f} {r['c_null'] ** 2:>8.2f} "
                f"{r['dac_leak']:>8.1e}")
        if args.soft_lam is not None:
            line += f" {r['dac_soft_mean']:>8.4f} +- {r['dac_soft_std']:<6.4f}"
        print(line)
    print("\nThesis claims (test excess risk; fixed-design training-input risk as info):")
    for cid, text in CLAIM_TEXT.items():
        c, ct = claims[cid], claims_train[cid]
        print(f"  [{'HELD' if c['held'] else 'NOT HELD'}] {text}: {c['detail']} | fixed "
              f"design: {'held' if ct['held'] else 'not held'}")

    results = {"config": cfg, "rows": rows, "per_seed_test_excess_risk": per_seed,
               "claims": [{"id": k, "claim": CLAIM_TEXT[k], **v} for k, v in claims.items()],
               "claims_fixed_design_info": [{"id": k, "claim": CLAIM_TEXT[k], **v}
                                            for k, v in claims_train.items()]}
    png = out / "fig_two_layer_relu.png"
    plot(rows, args.alphas, args.d_augs, png, args.soft_lam is not None)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=float))
    (out / "config.json").write_text(json.dumps(cfg, indent=2, default=str))
    write_csv(out / "results.csv", rows)
    print(f"\nsummary ({cfg['wall_s']:.1f} s): " + "  ".join(
        f"{cid.split('_')[0]}: {'HELD' if c['held'] else 'NOT HELD'}"
        for cid, c in claims.items()))
    print(f"wrote {out}/{{results.json,results.csv,config.json,{png.name}}}")
    return results


if __name__ == "__main__":
    main()
