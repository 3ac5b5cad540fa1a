"""Configs for AdaWAC and its baselines (thesis ``sec:experiments_adawac``, ``app:imp``).

Each function returns an ``ml_collections.ConfigDict`` for
:func:`rdr_jax.adawac.train.train` and takes ``quick`` (CI-sized: the synthetic phantom, the
tiny CPU network, a few dozen steps; same code path). Fields:

* ``method``: ``adawac`` (default), ``erm``, ``trim-train``, ``trim-train+acr``,
  ``trim-ratio``, ``trim-ratio+acr``, ``pseudo-adawac``, ``reweight-only``, ``acr-only``
  (:data:`rdr_jax.adawac.train.METHODS`);
* ``eta`` (beta step size; 2.0 TransUNet, 8.0 UNet; 0.01 / 1.0 in ``tab:ablation``), ``lam``
  (consistency scale, 2.0), ``dice_weight`` / ``wac_weight`` (0.5 / 0.5), ``keep_ratio``
  (trim-ratio, 1280/2211);
* ``batch_size`` (24), ``epochs`` (Synapse 150, ACDC 360) or ``num_steps`` (overrides epochs
  when > 0), ``seed``, ``checkpoint_every`` (steps; 0 = only at the end), ``log_every``
  (steps between metric fetches / rows of ``metrics.jsonl``), ``eval_batch_size``;
* ``optim``: SGD ``lr`` 0.01, ``momentum`` 0.9, ``weight_decay`` 1e-4, ``schedule``
  (``poly``: the TransUNet trainer's ``lr (1 - t/T)^0.9``; ``constant``);
* ``model``: ``name`` (``tiny``, ``unet``, ``transunet``), ``small`` (CPU-sized variant),
  ``width``, ``depth`` (tiny only: base width, stride-2 levels);
* ``dtype``: the model's computation dtype, ``"float32"`` (default) or ``"bfloat16"`` (mixed
  precision: parameters, BatchNorm statistics and the losses stay in float32);
* ``data``: ``name`` (``phantom``, ``cardiac_phantom``, ``synapse``, ``acdc``), ``subset`` (``full``,
  ``half-slice``, ``half-vol``, ``half-sparse``), ``size`` (input side, 224), ``root`` (data
  folder; empty: ``$RDR_JAX_DATA/<name>``), phantom shape ``num_cases``, ``num_slices``,
  ``num_test_cases``, ``num_classes``.

Example:
    >>> from rdr_jax.adawac.configs import get_config
    >>> cfg = get_config("synapse_unet")
    >>> cfg.eta, cfg.model.name, cfg.batch_size
    (8.0, 'unet', 24)
"""

from __future__ import annotations

import ml_collections

__all__ = ["CONFIGS", "TRIM_KEEP_RATIO", "acdc", "get_config", "phantom_quick",
           "quick_overrides", "synapse_transunet", "synapse_unet"]

#: fraction of slices with foreground in the full Synapse training set (1280 of 2211): the
#: trim-ratio baseline keeps this fraction of every batch (``tab:trim``). A config is a leaf:
#: the trainer imports it from here.
TRIM_KEEP_RATIO = 1280 / 2211


def _base() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.quick = False
    c.method = "adawac"
    c.eta = 2.0
    c.lam = 2.0
    c.dice_weight = 0.5
    c.wac_weight = 0.5
    c.keep_ratio = TRIM_KEEP_RATIO
    c.batch_size = 24
    c.epochs = 150
    c.num_steps = 0
    c.seed = 0
    c.dtype = "float32"
    c.checkpoint_every = 1000
    c.log_every = 100
    c.eval_batch_size = 24
    c.optim = ml_collections.ConfigDict(
        {"lr": 0.01, "momentum": 0.9, "weight_decay": 1e-4, "schedule": "poly"})
    c.model = ml_collections.ConfigDict(
        {"name": "transunet", "small": False, "width": 8, "depth": 2})
    c.data = ml_collections.ConfigDict(
        {"name": "synapse", "subset": "full", "size": 224, "root": "", "num_cases": 18,
         "num_slices": 32, "num_test_cases": 12, "num_classes": 9})
    return c


def quick_overrides(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Shrink a config for CI: phantom data (8 cases x 16 slices of 32 x 32, 3 test cases),
    the tiny CNN (width 16, depth 3: its bottleneck sees the whole 32 x 32 slice), batch 8,
    30 epochs with lr 0.05 and the poly decay, no intermediate checkpoints. Method, eta and
    lambda are kept. (Measured: the adawac run takes ~25 s on 2 CPU cores and reaches a test
    DSC of ~0.7 on the phantom; the earlier width-8 depth-2 net with 10 constant-lr epochs
    stayed below 0.2.)"""
    c = ml_collections.ConfigDict(c.to_dict())
    c.quick = True
    c.batch_size = 8
    c.epochs = 30
    c.num_steps = 0
    c.checkpoint_every = 0
    c.log_every = 16
    c.eval_batch_size = 8
    c.optim.lr = 0.05
    c.optim.schedule = "poly"
    c.model.name = "tiny"
    c.model.small = True
    c.model.width = 16
    c.model.depth = 3
    c.data.name = "phantom"
    c.data.size = 32
    c.data.num_cases = 8
    c.data.num_slices = 16
    c.data.num_test_cases = 3
    c.data.num_classes = 9
    return c


def synapse_transunet(quick: bool = False) -> ml_collections.ConfigDict:
    """``python experiments/train_adawac.py --config synapse_transunet --method adawac``

    AdaWAC with TransUNet (R50-ViT-B/16) on Synapse (``tab:synapse_sample_eff``, ``tab:trim``,
    ``tab:ablation``): 9 classes, 224 x 224, batch 24, 150 epochs, SGD 0.01 / 0.9 / 1e-4 with
    poly decay, eta = 2.0, lambda = 2.0.
    """
    c = _base()
    return quick_overrides(c) if quick else c


def synapse_unet(quick: bool = False) -> ml_collections.ConfigDict:
    """``python experiments/train_adawac.py --config synapse_unet --method adawac``

    AdaWAC with UNet-ResNet34 on Synapse (``tab:synapse_unet``): as
    :func:`synapse_transunet` with ``eta = 8.0``.
    """
    c = _base()
    c.eta = 8.0
    c.model.name = "unet"
    return quick_overrides(c) if quick else c


def acdc(quick: bool = False) -> ml_collections.ConfigDict:
    """``python experiments/train_adawac.py --config acdc --method adawac``

    AdaWAC with TransUNet on ACDC (``tab:acdc``): 4 classes (bg, RV, Myo, LV), 224 x 224,
    batch 24, 360 epochs, eta = 2.0, lambda = 2.0; the model with the best validation DSC is
    reported by the reference (this library evaluates the last model).
    """
    c = _base()
    c.epochs = 360
    c.data.name = "acdc"
    c.data.num_classes = 4
    if not quick:
        return c
    c = quick_overrides(c)  # the cine-MRI stand-in: 14 + 4 cases x 10 slices, 4 classes
    c.data.name = "cardiac_phantom"
    c.data.num_classes = 4
    c.data.num_cases = 14
    c.data.num_slices = 10
    c.data.num_test_cases = 4
    return c


def phantom_quick(quick: bool = True) -> ml_collections.ConfigDict:
    """``python experiments/train_adawac.py --config phantom_quick --quick``

    The offline demo: AdaWAC (eta = 8.0, lambda = 2.0) with the tiny CNN on the synthetic
    multi-organ phantom (8 training cases x 16 slices of 32 x 32, 3 test volumes), batch 8,
    30 epochs (``quick``) or 60 epochs on 12 cases x 32 slices of 64 x 64 (``quick=False``).
    """
    c = quick_overrides(_base())
    c.eta = 8.0
    if not quick:
        c.quick = False
        c.epochs = 60
        c.data.size = 64
        c.data.num_cases = 12
        c.data.num_slices = 32
        c.data.num_test_cases = 8
        c.model.width = 16
        c.model.depth = 4
        c.checkpoint_every = 500
    return c


CONFIGS = {"synapse_transunet": synapse_transunet, "synapse_unet": synapse_unet,
           "acdc": acdc, "phantom_quick": phantom_quick,
           "phantom": lambda quick=False: phantom_quick(quick)}


def get_config(name: str, quick: bool = False) -> ml_collections.ConfigDict:
    """The config ``name`` (a key of :data:`CONFIGS`); ``quick`` shrinks it for CI.

    ``phantom_quick`` is always the quick phantom run; ``phantom`` is its larger version
    (``phantom_quick(quick=False)``) unless ``quick``.

    Raises:
        ValueError: unknown name.

    Example:
        >>> get_config("acdc", quick=True).data.name
        'cardiac_phantom'
    """
    if name not in CONFIGS:
        raise ValueError(f"unknown config {name!r}; known: {sorted(CONFIGS)}")
    if name == "phantom_quick":
        return phantom_quick(True)
    if name == "phantom":
        return phantom_quick(quick)
    return CONFIGS[name](quick)
