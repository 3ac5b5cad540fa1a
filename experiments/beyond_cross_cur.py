"""Beyond the thesis: CUR's cross-approximation core ``U = A(I, J)^+`` against the stable core
``U = C^+ A R^+`` (thesis Eq. (2.10)) on the thesis' matrices.

Usage::

    python experiments/beyond_cross_cur.py --quick      # seconds (CI)
    python experiments/beyond_cross_cur.py              # the full run (about 2 minutes)

For each matrix, rank k, pivoting method and key, both cores are built on the same skeletons
(``rdr_jax.cur(..., core=...)``), and their errors ``||A - C U R||_F`` are divided by the
optimal ``||A - A_k||_F``. Claims checked (printed as HELD / NOT HELD):

1. Cross approximation is exact at exact rank: ``A = C A(I, J)^+ R`` when ``rank A = k`` and
   ``A(I, J)`` is nonsingular (Goreinov, Tyrtyshnikov and Zamarashkin, "A theory of
   pseudoskeleton approximations", LAA 261, 1997).
2. ``U = C^+ A R^+`` minimises ``||A - C U R||_F`` over U for the given C and R (Stewart,
   "Four algorithms for the efficient computation of truncated pivoted QR approximations to
   a sparse matrix", Numer. Math. 83, 1999; Mahoney and Drineas, PNAS 2009): the cross core
   is never more accurate.

The measured ratio cross/stable per matrix (median over keys and methods) is what
``docs/choosing-a-method.md`` ("Which CUR core") quotes. Matrices: the thesis' SNN1e3
(Section 2.5.3), and synthetic ones with its polynomial and exponential decay (Section
3.6.1; 500 x 400 in the full run), dense, float64. Outputs: ``cross_cur.json`` (the beyond
schema of ``experiments/report.py``), ``cross_cur.csv``, ``cross_cur.png`` in ``--out``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

try:
    from experiments import _common
except ImportError:  # run as a script
    import _common

PAPER = ("Goreinov, Tyrtyshnikov and Zamarashkin, A theory of pseudoskeleton approximations "
         "(LAA 261, 1997); Stewart (Numer. Math. 83, 1999)")


def parse_args(argv=None):
    p = _common.parser(__doc__, quick="small matrices, one rank and method, 2 keys (CI)", seed=0,
                       host_threads=1, out=Path("experiments/results/beyond/cross_cur"),
                       helps={"host_threads": _common.THREADS_HELP,
                              "out": _common.OUT_HELP})
    p.add_argument("--keys", type=int, default=None, help="keys per setting (default 5; "
                   "--quick 2)")
    return p.parse_args(argv)


def _matrices(quick: bool):
    import jax
    from rdr_jax import matrices as M
    key = jax.random.key(0)
    m, n = (120, 100) if quick else (500, 400)
    out = {"polynomial": M.with_spectrum(key, m, n, M.polynomial_decay(min(m, n))),
           "exponential": M.with_spectrum(key, m, n, M.exponential_decay(min(m, n)))}
    if not quick:
        out["SNN1e3"] = M.snn1e3(key)
    return {name: np.asarray(A, np.float64) for name, A in out.items()}


def _err(A, c):
    return float(np.linalg.norm(A - np.asarray(c.todense(), np.float64)))


def _timed(fn):
    return float(np.median(_common.time_calls(fn, repeats=3, warmup=1)[0]))


def run(args, argv=None):
    import jax
    from tqdm import tqdm
    import rdr_jax as R

    quick = args.quick
    keys = args.keys or (2 if quick else 5)
    ranks = [10] if quick else [10, 20, 40, 80]
    methods = ["Rand-LUPP"] if quick else ["Rand-LUPP", "Rand-CPQR", "SRCUR"]
    mats = _matrices(quick)
    rows, jobs = [], [(nm, k, me, s) for nm in mats for k in ranks for me in methods
                      for s in range(keys)]
    for name, k, meth, s in tqdm(jobs, desc="cross vs stable CUR", disable=None):
        A = mats[name]
        sv = np.linalg.svd(A, compute_uv=False)
        opt = float(np.sqrt(np.sum(sv[k:] ** 2)))
        key = jax.random.key(args.seed * 1000 + s)
        st = R.cur(key, A, k, method=meth, on_rank_deficient="ignore")
        cr = R.cur(key, A, k, method=meth, on_rank_deficient="ignore", core="cross")
        row = {"matrix": name, "k": k, "method": meth, "key": s,
               "stable_over_opt": _err(A, st) / opt, "cross_over_opt": _err(A, cr) / opt}
        if s == 0:
            row["t_stable_s"] = _timed(lambda: R.cur(key, A, k, method=meth,
                                                     on_rank_deficient="ignore"))
            row["t_cross_s"] = _timed(lambda: R.cur(key, A, k, method=meth,
                                                    on_rank_deficient="ignore", core="cross"))
        rows.append(row)

    # claim 1: exactness at exact rank (rank-k product, both cores, every method)
    rng = np.random.default_rng(args.seed)
    kx = 12
    X = rng.standard_normal((90, kx)) @ rng.standard_normal((kx, 70))
    exact = max(np.linalg.norm(X - np.asarray(R.cur(jax.random.key(s), X, kx, method=me,
                                                    core="cross").todense()))
                / np.linalg.norm(X) for me in methods for s in range(keys))
    claim1 = exact < 1e-8
    # claim 2: the stable core is never worse (to rounding)
    worse = [r for r in rows if r["cross_over_opt"] < r["stable_over_opt"] * (1 - 1e-9)]
    claim2 = not worse
    ratios = {nm: float(np.median([r["cross_over_opt"] / r["stable_over_opt"]
                                   for r in rows if r["matrix"] == nm])) for nm in mats}
    worst = {nm: float(np.max([r["cross_over_opt"] / r["stable_over_opt"]
                               for r in rows if r["matrix"] == nm])) for nm in mats}
    timed = [r for r in rows if "t_stable_s" in r]
    speed = float(np.median([r["t_stable_s"] / r["t_cross_s"] for r in timed]))

    args.out.mkdir(parents=True, exist_ok=True)
    _common.write_csv(args.out / "cross_cur.csv", rows,
                      fields=["matrix", "k", "method", "key", "stable_over_opt",
                              "cross_over_opt", "t_stable_s", "t_cross_s"])
    setting = (f"{', '.join(f'{nm} {mats[nm].shape[0]}x{mats[nm].shape[1]}' for nm in mats)}; "
               f"k in {ranks}; {', '.join(methods)}; {keys} keys; float64")
    import scipy
    result = {
        "section": "Beyond the thesis", "item": "CUR cross-approximation core",
        "paper": PAPER, "mode": "quick" if quick else "full",
        "command": "python experiments/beyond_cross_cur.py" + (" --quick" if quick else ""),
        "versions": {"jax": jax.__version__, "numpy": np.__version__,
                     "scipy": scipy.__version__},
        "claims": [
            {"claim": "A = C A(I,J)^+ R exactly when rank A = k (cross approximation)",
             "published": "exact (Goreinov et al. 1997, Lemma)",
             "measured": f"max relative error {exact:.1e} over {len(methods)} methods x "
                         f"{keys} keys", "held": bool(claim1),
             "setting": f"90 x 70 of rank {kx}, float64"},
            {"claim": "U = C^+ A R^+ minimises ||A - CUR||_F for given C, R: the cross core "
                      "is never more accurate",
             "published": "optimality (Stewart 1999)",
             "measured": f"{len(rows) - len(worse)} of {len(rows)} runs; median cross/stable "
                         + ", ".join(f"{nm} {v:.2f}x (worst {worst[nm]:.1f}x)"
                                     for nm, v in ratios.items()),
             "held": bool(claim2), "setting": setting},
        ],
        "median_cross_over_stable": ratios, "worst_cross_over_stable": worst,
        "median_time_stable_over_cross": speed, "load_average": _common.loadavg(),
        "env": _common.env_info(),
    }
    (args.out / "cross_cur.json").write_text(json.dumps(result, indent=1))
    _plot(rows, mats, ranks, methods, args.out / "cross_cur.png")
    for c in result["claims"]:
        print(f"{'HELD' if c['held'] else 'NOT HELD'}: {c['claim']} -- published: "
              f"{c['published']}; measured: {c['measured']}")
    print(f"median time stable / cross: {speed:.2f}x (load {_common.loadavg()})")
    return result


def _plot(rows, mats, ranks, methods, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(mats), figsize=(4.2 * len(mats), 3.4), squeeze=False)
    for ax, nm in zip(axes[0], mats):
        for me in methods:
            for core, ls in (("stable", "-"), ("cross", "--")):
                y = [np.median([r[f"{core}_over_opt"] for r in rows
                                if r["matrix"] == nm and r["k"] == k and r["method"] == me])
                     for k in ranks]
                ax.semilogy(ranks, y, ls, marker="o", label=f"{me} {core}")
        ax.set_title(nm)
        ax.set_xlabel("k")
        ax.set_ylabel("||A - CUR||_F / ||A - A_k||_F")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    return _common.run_main(parse_args, run, argv, x64=True)


if __name__ == "__main__":
    main()
