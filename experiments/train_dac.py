"""Thesis Section 4.7: DAC vs DA-ERM on CIFAR-100 (Tables 4.1-4.5).

Run (from the repository root; needs the CIFAR-100 python version, see below)::

    python experiments/train_dac.py --config different_lambda            # Table 4.1
    python experiments/train_dac.py --config different_number_of_aug     # ..._number_of_aug
    python experiments/train_dac.py --config different_labeled_samples   # ..._labeled_samples
    python experiments/train_dac.py --config misspecified_lambda         # ..._misspecified_lambda
    python experiments/train_dac.py --config fixmatch_dac                # ..._combining_with_SSL
    python experiments/train_dac.py --config different_lambda --quick    # CI-sized, same path
    python experiments/train_dac.py --config different_lambda --run 3 --seed 0   # one cell
    python experiments/train_dac.py --config different_lambda --set total_steps=4096
    python experiments/train_dac.py --config different_lambda --set dtype=bfloat16  # bf16 compute

Thesis claims (Section 4.7), printed as HELD / NOT HELD with the numbers:

* ``different_lambda``: "With proper choice of lambda, training with DAC significantly
  improves over DA-ERM" (thesis: 70.56 vs 69.40);
* ``different_number_of_aug``: DAC beats DA-ERM for every number of augmentations, by more
  when there are few (thesis: +2.14 at 1, +1.01 at 15);
* ``different_labeled_samples``: DAC beats DA-ERM, by more when labels are scarce (thesis:
  +2.48 at 1000 labels, +0.07 at 20000);
* ``misspecified_lambda``: with misspecified augmentations (100 random ops) DAC with a tuned
  lambda beats DA-ERM and no augmentation (thesis: 64.30 vs 61.35 and 62.82);
* ``fixmatch_dac``: FixMatch + DAC (lambda = 1) beats FixMatch for 5000, 10000, 20000
  unlabeled images (thesis: 71.24 / 72.7 / 74.04 vs 67.74 / 69.23 / 70.76).

Settings are :mod:`rdr_jax.dac.configs` (Section B.6: WideResNet-28-2,
RandAugment(2, 10), 7 augmentations, batch 64, 2^15 SGD steps, lr 0.03 cos(7 pi i / (16 2^15)),
5 seeds); each (cell, seed) is :func:`rdr_jax.dac.deep.train` in its own work directory
``<out>/runs/<cell>_seed<s>/`` with orbax checkpoints every ``checkpoint_every`` steps, so an
interrupted script resumes where it stopped (finished runs are read back from their
``final.json``). On one GPU a thesis run (2^15 steps with 8 x 64 images per step through
WRN-28-2) takes about an hour; on CPU only ``--quick`` is practical. ``--quick`` trains a
small CNN for a few steps on 2 labels per class (it checks the pipeline, not the claims).

Data: CIFAR-100 python version (``cifar-100-python/{train,test,meta}`` or
``cifar-100-python.tar.gz`` from https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz) under
``--data-dir``, else ``$RDR_JAX_DATA``, else ``~/.rdr_jax/data`` (also in a ``cifar100/``
subdirectory); see :func:`rdr_jax.dac.data.find_cifar100`. Without it the script says so and
exits cleanly (status 0). Nothing is downloaded.

Outputs in ``--out`` (default ``experiments/results/train_dac/<config>``): ``results.csv`` (one
row per cell and seed), ``results.json`` (rows, per-cell mean/std next to the thesis numbers,
verdicts), ``train_dac_<config>.png`` (mean +- std per cell), ``training_curves.png`` (loss,
cross-entropy and consistency against the step, read from each run's ``metrics.jsonl``, which
the shared loop writes every ``log_every`` steps), ``config.json``.

float32 (``--set dtype=bfloat16`` for bf16 compute): network training; nothing here needs
float64.
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import env_info  # noqa: E402

from rdr_jax.dac import configs as C  # noqa: E402
from rdr_jax.dac import data as D  # noqa: E402
from rdr_jax.dac import deep  # noqa: E402
from rdr_jax.training import plot_metrics  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "train_dac"

# thesis numbers (test accuracy in %), keyed by cell label
THESIS = {
    "different_lambda": {"da_erm": 69.40, "dac lam=0": 62.82, "dac lam=1": 68.63,
                         "dac lam=5": 70.56, "dac lam=10": 70.52, "dac lam=20": 68.65},
    "different_number_of_aug": {"da_erm alpha=1": 67.92, "dac lam=10 alpha=1": 70.06,
                                "da_erm alpha=3": 69.04, "dac lam=10 alpha=3": 70.77,
                                "da_erm alpha=7": 69.25, "dac lam=10 alpha=7": 70.74,
                                "da_erm alpha=15": 69.30, "dac lam=10 alpha=15": 70.31},
    "different_labeled_samples": {"da_erm labels=1000": 31.11, "dac lam=10 labels=1000": 33.59,
                                  "da_erm labels=10000": 68.89,
                                  "dac lam=10 labels=10000": 70.71,
                                  "da_erm labels=20000": 76.79,
                                  "dac lam=10 labels=20000": 76.86},
    "misspecified_lambda": {"dac lam=0": 62.82, "da_erm": 61.35, "dac lam=0.1": 63.73,
                            "dac lam=1": 64.30, "dac lam=10": 64.00},
    "fixmatch_dac": {"fixmatch unl=5000": 67.74, "fixmatch+dac lam=1 unl=5000": 71.24,
                     "fixmatch unl=10000": 69.23, "fixmatch+dac lam=1 unl=10000": 72.7,
                     "fixmatch unl=20000": 70.76, "fixmatch+dac lam=1 unl=20000": 74.04},
}


def cell_label(name: str, run: dict, n_classes: int = 100) -> str:
    """A short, stable label of a table cell (matches the keys of THESIS in full mode)."""
    m = run.get("method", "dac")
    lam = run.get("lam")
    lam_s = f"lam={lam:g}" if lam is not None else ""
    if m == "fixmatch_dac":
        s = "fixmatch" if not lam else f"fixmatch+dac {lam_s}"
        return f"{s} unl={run['num_unlabeled']}"
    s = "da_erm" if m == "da_erm" else f"dac {lam_s}"
    if name == "different_number_of_aug":
        s += f" alpha={run['alpha']}"
    if name == "different_labeled_samples":
        s += f" labels={run['labels_per_class'] * n_classes}"
    return s


def _parse_value(v: str):
    try:
        return ast.literal_eval(v)
    except (ValueError, SyntaxError):
        return v


def apply_overrides(cfg, sets: list[str]):
    for item in sets or []:
        if "=" not in item:
            raise SystemExit(f"--set expects key=value; got {item!r}")
        k, v = item.split("=", 1)
        node = cfg
        parts = k.split(".")
        for p in parts[:-1]:
            node = node[p]
        with cfg.unlocked():
            node[parts[-1]] = _parse_value(v)
    return cfg


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, choices=[k for k in C.CONFIGS if k != "digits"])
    p.add_argument("--quick", action="store_true", help="CI-sized run (pipeline check)")
    p.add_argument("--run", type=int, action="append", help="cell index (repeatable)")
    p.add_argument("--seed", type=int, action="append", help="seed (repeatable)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. total_steps=4096 or model.depth=16")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default=None)
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


def claims(name: str, cells: dict) -> dict:
    """HELD / NOT HELD per thesis claim from the per-cell mean accuracies (%)."""
    mean = {k: v["mean"] for k, v in cells.items()}
    out = {}

    def pair_gains():
        """best DAC cell minus the baseline cell with the same suffix (alpha/labels/unl)."""
        gains = {}
        for k, v in mean.items():
            if not k.startswith(("da_erm", "fixmatch ")):
                continue
            suffix = k.split(" ", 1)[1] if " " in k else ""
            partners = [x for x in mean if x.startswith(("dac", "fixmatch+dac"))
                        and (not suffix or x.endswith(" " + suffix))]
            if partners:
                gains[suffix or "all"] = max(mean[x] for x in partners) - v
        return gains

    if name in ("different_lambda", "misspecified_lambda"):
        dacs = {k: v for k, v in mean.items() if k.startswith("dac") and k != "dac lam=0"}
        best = max(dacs, key=dacs.get)
        ok = dacs[best] > mean["da_erm"]
        detail = f"best DAC ({best}) {dacs[best]:.2f} vs DA-ERM {mean['da_erm']:.2f}"
        if name == "misspecified_lambda":
            ok = ok and dacs[best] > mean["dac lam=0"]
            detail += f", no augmentation {mean['dac lam=0']:.2f}"
        out["dac_beats_da_erm"] = {"held": bool(ok), "detail": detail}
    else:
        gains = pair_gains()
        if not gains:
            raise ValueError("no (baseline, DAC) pair of cells in this selection")
        keys = list(gains)
        out["dac_beats_baseline_everywhere"] = {
            "held": bool(all(g > 0 for g in gains.values())),
            "detail": ", ".join(f"{k}: {g:+.2f}" for k, g in gains.items())}
        if name in ("different_number_of_aug", "different_labeled_samples") and len(keys) > 1:
            out["gain_larger_when_scarce"] = {
                "held": bool(gains[keys[0]] > gains[keys[-1]]),
                "detail": f"gain at {keys[0]} {gains[keys[0]]:+.2f} vs at {keys[-1]} "
                          f"{gains[keys[-1]]:+.2f}"}
    return out


def plot(name, cells, thesis, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = list(cells)
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(labels)), 4))
    x = np.arange(len(labels))
    ax.bar(x, [cells[k]["mean"] for k in labels], yerr=[cells[k]["std"] for k in labels],
           color=["C1" if k.startswith(("da_erm", "fixmatch ")) else "C0" for k in labels],
           capsize=3, label="rdr_jax (mean +- std over seeds)")
    th = [thesis.get(k, np.nan) for k in labels]
    ax.plot(x, th, "k_", ms=20, mew=2, label="thesis")
    ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("test accuracy [%]")
    ax.set_title(f"{name}: DAC (blue) vs baseline (orange)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    args = parse_args(argv)
    cfg = apply_overrides(C.get_config(args.config, args.quick), args.set)
    out = Path(args.out) if args.out else DEFAULT_OUT / args.config
    root = D.find_cifar100(args.data_dir)
    if root is None:
        msg = ("CIFAR-100 not found: expected cifar-100-python/{train,test,meta} or "
               "cifar-100-python.tar.gz under --data-dir, $RDR_JAX_DATA or ~/.rdr_jax/data "
               f"(get it from {D.CIFAR100_SOURCE}; nothing is downloaded). Skipping "
               f"{args.config}; for an offline demo run python experiments/dac_digits.py.")
        print(msg)
        return {"skipped": msg}
    print(f"CIFAR-100 from {root}; backend {jax.default_backend()} "
          f"({jax.devices()[0].device_kind}); config {args.config}"
          f"{' (quick)' if args.quick else ''}")
    tr = D.load_cifar100(root, "train")
    te = D.load_cifar100(root, "test")
    n_classes = len(tr.label_names)
    test_x, test_y = te.images, te.labels
    if cfg.max_test:
        test_x, test_y = test_x[:cfg.max_test], test_y[:cfg.max_test]
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(
        {"config": cfg.to_dict(), "quick": args.quick, "argv": argv if argv else sys.argv[1:],
         "env": env_info(), "data": str(root)}, indent=1, default=str))

    runs = args.run if args.run else list(range(len(cfg.runs)))
    seeds = args.seed if args.seed else list(cfg.seeds)
    rows, curves = [], {}
    for r in runs:
        for s in seeds:
            rc = C.run_config(cfg, r, s)
            label = cell_label(args.config, dict(cfg.runs[r]), n_classes)
            wd = out / "runs" / f"{label.replace(' ', '_').replace('=', '')}_seed{s}"
            curves[f"{label} seed {s}"] = wd / "metrics.jsonl"
            final = wd / "final.json"
            if final.is_file():
                row = json.loads(final.read_text())
                print(f"{label} seed {s}: done before, test accuracy "
                      f"{100 * row['test_accuracy']:.2f}%")
                rows.append(row)
                continue
            lab, unl = D.sample_labeled_subset(tr.labels, int(rc.labels_per_class), seed=s,
                                               num_unlabeled=int(rc.num_unlabeled))
            t0 = time.perf_counter()
            res = deep.train(rc, tr.images[lab], tr.labels[lab], test_x, test_y,
                             unlabeled_images=tr.images[unl] if unl.size else None,
                             workdir=wd, progress=not args.no_progress,
                             to_float=D.uint8_to_float)
            row = {"cell": label, "run": r, "seed": s, "method": rc.method, "lam": rc.lam,
                   "alpha": rc.alpha, "labels": int(lab.size), "unlabeled": int(unl.size),
                   "steps": int(res.state.step), "test_accuracy": res.test["accuracy"],
                   "test_ce": res.test["ce"], "n_test": res.test["n"],
                   "train_loss_last": res.history[-1]["loss"] if res.history else None,
                   "resumed_from": res.resumed_from,
                   "time_s": time.perf_counter() - t0}
            final.write_text(json.dumps(row, indent=1))
            print(f"{label} seed {s}: test accuracy {100 * row['test_accuracy']:.2f}% "
                  f"({row['time_s']:.0f} s)")
            rows.append(row)

    cells = {}
    for row in rows:
        cells.setdefault(row["cell"], []).append(100 * row["test_accuracy"])
    cells = {k: {"mean": float(np.mean(v)), "std": float(np.std(v)), "n": len(v)}
             for k, v in cells.items()}
    thesis = THESIS[args.config]
    print(f"\n{cfg.table}: test accuracy [%], mean +- std over seeds (thesis)")
    for k, v in cells.items():
        th = thesis.get(k)
        print(f"  {k:<32} {v['mean']:6.2f} +- {v['std']:.2f}  (n={v['n']})"
              + (f"   thesis {th:.2f}" if th is not None else ""))
    verdicts = {}
    try:
        verdicts = claims(args.config, cells)
    except (KeyError, ValueError) as e:   # a partial selection of cells
        print(f"claims not checked on this selection of cells ({e})")
    for cid, c in verdicts.items():
        note = " [quick: pipeline check only, not evidence]" if args.quick else ""
        print(f"[{'HELD' if c['held'] else 'NOT HELD'}] {cid}: {c['detail']}{note}")
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    result = {"config": args.config, "table": cfg.table, "quick": args.quick, "rows": rows,
              "cells": cells, "thesis": thesis, "claims": verdicts}
    (out / "results.json").write_text(json.dumps(result, indent=1))
    plot(args.config, cells, thesis, out / f"train_dac_{args.config}.png")
    curves = {k: p for k, p in curves.items() if p.is_file()}
    if curves:
        import matplotlib.pyplot as plt
        plt.close(plot_metrics(curves, ("loss", "ce", "consistency"),
                               out / "training_curves.png"))
    return result


if __name__ == "__main__":
    main()
