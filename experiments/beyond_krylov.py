"""Beyond the thesis: randomized block Krylov iteration (RBKI, ``rdr_jax.block_krylov_svd``)
against randomized subspace iteration (RSI, ``rdr_jax.rsvd`` with power iterations) at equal
numbers of products with A.

Usage::

    python experiments/beyond_krylov.py --quick      # seconds (CI)
    python experiments/beyond_krylov.py              # the full run (a few minutes)

Matrices (float64, Haar singular vectors, ``rdr_jax.matrices.with_spectrum``): slow
polynomial decay ``sigma_j = j^-1/2``, the thesis' fast exponential decay, and the thesis'
polynomial decay (``polynomial_decay``: a flat top of 20 equal values, then ``j^-1/2``;
Section 3.6.1). Target rank k = 20. RSI uses ``l = k + 10`` columns and q
power iterations (``l (2q + 2)`` products); RBKI uses blocks of ``b = 10`` and depth q'
(``b (2q' + 2)`` products), at the same budgets. Errors: ``||A - A_hat||_2 / sigma_{k+1}``
(1 is optimal), median over keys.

Claims (printed as HELD / NOT HELD):

1. Tropp and Webber ("Randomized algorithms for low-rank matrix approximation: design,
   analysis, and applications", arXiv 2306.12418): RBKI is more accurate than RSI for the
   same matvecs on slowly decaying spectra -- checked at every budget past the first.
2. The same survey: on rapidly decaying spectra the plain randomized SVD is already near
   optimal (RSI's q = 0 within 10% of sigma_{k+1} in the spectral norm).
4. With a cluster of equal singular values wider than the block (the thesis' flat top of 20
   against b = 10), RBKI stalls where b = 20 is already near optimal (block Lanczos finds at
   most b copies of a repeated value in exact arithmetic; in floating point rounding seeds the
   missing directions, so b = 10 catches up later: reported).
3. The thesis' prior bound (Theorem 3.1, ``rdr_jax.angles.space_agnostic_bound`` with
   ``l = b``, q = depth, calibrated constants) also bounds the Krylov space's canonical
   angles, because ``K_q`` contains RSI's range for the same test matrix: every key's angles
   are within the bound.

Outputs in ``--out``: ``krylov.json`` (the beyond schema of ``experiments/report.py``),
``krylov.csv``, ``krylov.png``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

try:
    from experiments import _common
except ImportError:  # run as a script
    import _common

PAPER = ("Tropp and Webber, Randomized algorithms for low-rank matrix approximation: design, "
         "analysis, and applications (arXiv 2306.12418, 2023); Musco and Musco (NeurIPS 2015)")
K_RANK, L_RSI, B_KRYLOV = 20, 30, 10


def parse_args(argv=None):
    p = _common.parser(__doc__, quick="a 200 x 150 matrix, 2 keys, 2 budgets (CI)", seed=0,
                       host_threads=1, out=Path("experiments/results/beyond/krylov"),
                       helps={"host_threads": _common.THREADS_HELP, "out": _common.OUT_HELP})
    p.add_argument("--keys", type=int, default=None, help="keys (default 5; --quick 2)")
    return p.parse_args(argv)


def _spectral_err(A, r):
    return float(np.linalg.norm(A - (np.asarray(r.U) * np.asarray(r.s)) @ np.asarray(r.Vt), 2))


def run(args, argv=None):
    import jax
    import scipy
    from tqdm import tqdm
    import rdr_jax as R
    from rdr_jax import matrices as M

    quick = args.quick
    keys = args.keys or (2 if quick else 5)
    m, n = (200, 150) if quick else (1000, 800)
    qs = [0, 1] if quick else [0, 1, 2, 3, 5, 7]            # RSI power iterations
    spectra = {"polynomial j^-1/2 (slow)": 1.0 / np.sqrt(np.arange(1.0, n + 1)),
               "exponential (fast)": M.exponential_decay(n),
               "thesis polynomial (flat top of 20)": M.polynomial_decay(n)}
    rows = []
    jobs = [(name, q, s) for name in spectra for q in qs for s in range(keys)]
    mats = {name: np.asarray(M.with_spectrum(jax.random.key(args.seed), m, n, sp), np.float64)
            for name, sp in spectra.items()}
    for name, q, s in tqdm(jobs, desc="RBKI vs RSI", disable=None):
        A, sig = mats[name], np.sort(spectra[name])[::-1]
        budget = L_RSI * (2 * q + 2)
        depth = budget // (2 * B_KRYLOV) - 1
        key = jax.random.key(1000 * args.seed + s)
        rsi = R.rsvd(key, A, K_RANK, oversample=L_RSI - K_RANK, power_iters=q)
        kry = R.block_krylov_svd(key, A, K_RANK, block_size=B_KRYLOV, depth=depth)
        wide = R.block_krylov_svd(key, A, K_RANK, block_size=K_RANK,
                                  depth=budget // (2 * K_RANK) - 1)
        rows.append({"matrix": name, "budget": budget, "rsi_q": q, "krylov_depth": depth,
                     "key": s, "rsi_over_opt": _spectral_err(A, rsi) / sig[K_RANK],
                     "krylov_over_opt": _spectral_err(A, kry) / sig[K_RANK],
                     "krylov_b20_over_opt": _spectral_err(A, wide) / sig[K_RANK]})

    def med(name, budget, what):
        return float(np.median([r[what] for r in rows
                                if r["matrix"] == name and r["budget"] == budget]))

    budgets = sorted({r["budget"] for r in rows})
    slow, fast, flat = list(spectra)
    better = [(b, med(slow, b, "krylov_over_opt"), med(slow, b, "rsi_over_opt"))
              for b in budgets[1:]]
    claim1 = all(kr <= rs for _, kr, rs in better)
    rsvd0 = med(fast, budgets[0], "rsi_over_opt")
    claim2 = rsvd0 <= 1.1
    # claim 4: a cluster of equal singular values wider than the block stalls RBKI, at the
    # first budget where b = 20 is within 5% of optimal; in floating point rounding seeds the
    # missing directions, which then grow, so b = 10 catches up later (reported, not claimed)
    top = next((b for b in budgets if med(flat, b, "krylov_b20_over_opt") <= 1.05), budgets[-1])
    flat_b10, flat_b20 = (med(flat, top, "krylov_over_opt"), med(flat, top, "krylov_b20_over_opt"))
    claim4 = flat_b10 > 1.2 and flat_b20 <= 1.05
    caught = next((b for b in budgets if med(flat, b, "krylov_over_opt") <= 1.05), None)

    # claim 3: the thesis' prior bound for (l = b, q) bounds the Krylov space's angles
    from rdr_jax import angles
    A, sig = mats[slow], np.sort(spectra[slow])[::-1]
    kb, depth = 5, (1 if quick else 3)
    Uk = np.linalg.svd(A, full_matrices=False)[0][:, :kb]
    bound = np.asarray(angles.space_agnostic_bound(sig, kb, B_KRYLOV, depth,
                                                   constants="calibrated"))
    held3, worst3 = 0, 0.0
    for s in range(keys):
        Q = R.krylov_range(jax.random.key(1000 * args.seed + s), A, B_KRYLOV, depth)
        sines = np.asarray(angles.canonical_angles(Uk, Q))
        ratio = np.nanmax(sines / bound)
        worst3 = max(worst3, float(ratio))
        held3 += bool(ratio <= 1.0)
    claim3 = held3 == keys

    args.out.mkdir(parents=True, exist_ok=True)
    _common.write_csv(args.out / "krylov.csv", rows)
    setting = (f"{m} x {n}, k = {K_RANK}; RSI l = {L_RSI}, q in {qs}; RBKI b = {B_KRYLOV}; "
               f"{keys} keys; float64")
    result = {
        "section": "Beyond the thesis", "item": "Randomized block Krylov iteration",
        "paper": PAPER, "mode": "quick" if quick else "full",
        "command": "python experiments/beyond_krylov.py" + (" --quick" if quick else ""),
        "versions": {"jax": jax.__version__, "numpy": np.__version__,
                     "scipy": scipy.__version__},
        "claims": [
            {"claim": "RBKI is more accurate than subspace iteration for the same matvecs on a "
                      "slowly decaying spectrum",
             "published": "RBKI superior on slowly decaying spectra (Tropp & Webber 2023)",
             "measured": "; ".join(f"{b} matvecs: RBKI {kr:.3f} vs RSI {rs:.3f}"
                                   for b, kr, rs in better) + " (||A - A_hat||_2 / sigma_k+1)",
             "held": bool(claim1), "setting": f"polynomial decay; {setting}"},
            {"claim": "on a rapidly decaying spectrum the randomized SVD (q = 0) is already "
                      "near optimal",
             "published": "RSVD excels on rapidly decaying spectra (Tropp & Webber 2023)",
             "measured": f"RSI q = 0: {rsvd0:.3f} x sigma_k+1", "held": bool(claim2),
             "setting": f"exponential decay; {setting}"},
            {"claim": "the thesis' prior angle bound for (l, q) = (b, depth) bounds the Krylov "
                      "space's canonical angles (K_q contains RSI's range)",
             "published": "Theorem 3.1 (calibrated constants: held in >= 99% of RSI draws)",
             "measured": f"{held3} of {keys} keys within the bound (worst sin/bound "
                         f"{worst3:.2f})", "held": bool(claim3),
             "setting": f"polynomial decay, k = {kb}, b = {B_KRYLOV}, depth {depth}"},
            {"claim": "block Krylov with block size b cannot resolve a cluster of more than "
                      "b equal singular values: choose b at least the cluster's size",
             "published": "block Lanczos finds at most b copies of a repeated eigenvalue "
                          "(exact arithmetic; Tropp & Webber 2023 on the block size)",
             "measured": f"flat top of 20, {top} matvecs (b = 20's first within 5%): b = 10 "
                         f"{flat_b10:.3f}, b = 20 {flat_b20:.3f} (x sigma_k+1); b = 10 catches "
                         + (f"up at {caught} matvecs (rounding seeds the missing directions)"
                            if caught else "up at no budget tried"), "held": bool(claim4),
             "setting": f"the thesis' polynomial decay (flat top of 20); {setting}"},
        ],
        "load_average": _common.loadavg(), "env": _common.env_info(),
    }
    (args.out / "krylov.json").write_text(json.dumps(result, indent=1))
    _plot(rows, spectra, budgets, args.out / "krylov.png")
    for c in result["claims"]:
        print(f"{'HELD' if c['held'] else 'NOT HELD'}: {c['claim']} -- published: "
              f"{c['published']}; measured: {c['measured']}")
    return result


def _plot(rows, spectra, budgets, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(spectra), figsize=(12.5, 3.4), squeeze=False)
    for ax, name in zip(axes[0], spectra):
        for what, label in (("rsi_over_opt", "subspace iteration (l = 30)"),
                            ("krylov_over_opt", "block Krylov (b = 10)"),
                            ("krylov_b20_over_opt", "block Krylov (b = 20)")):
            y = [np.median([r[what] for r in rows if r["matrix"] == name and r["budget"] == b])
                 for b in budgets]
            ax.plot(budgets, y, marker="o", label=label)
        ax.set_title(name)
        ax.set_xlabel("products with A or A^H")
        ax.set_ylabel("||A - A_hat||_2 / sigma_k+1")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    return _common.run_main(parse_args, run, argv, x64=True)


if __name__ == "__main__":
    main()
