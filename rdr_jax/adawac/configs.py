"""Configs for AdaWAC and its baselines (thesis Section 5.5, C.4).

Each function returns an ``ml_collections.ConfigDict`` for :func:`rdr_jax.adawac.train.train`;
``quick`` shrinks it for CI (phantom data, tiny network, same code path). Why: the thesis'
settings live in one place. The fields: ``docs/training.md`` ("AdaWAC configs").
"""

from __future__ import annotations

import ml_collections

__all__ = ["CONFIGS", "TRIM_KEEP_RATIO", "acdc", "get_config", "phantom_quick",
           "quick_overrides", "synapse_transunet", "synapse_unet"]

#: fraction of slices with foreground in the full Synapse training set (1280 of 2211): the
#: trim-ratio baseline keeps this fraction of every batch (Table 5.2). A config is a leaf:
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
    """``c`` shrunk for CI: the phantom, the tiny network, a few epochs."""
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

    TransUNet on Synapse (Table 5.1, 5.2, 5.4): 150
    epochs, batch 24, SGD 0.01 with poly decay, eta = lambda = 2.0.
    """
    c = _base()
    return quick_overrides(c) if quick else c


def synapse_unet(quick: bool = False) -> ml_collections.ConfigDict:
    """``python experiments/train_adawac.py --config synapse_unet --method adawac``

    UNet-ResNet34 on Synapse (``tab:synapse_unet``): :func:`synapse_transunet` with eta = 8.0.
    """
    c = _base()
    c.eta = 8.0
    c.model.name = "unet"
    return quick_overrides(c) if quick else c


def acdc(quick: bool = False) -> ml_collections.ConfigDict:
    """``python experiments/train_adawac.py --config acdc --method adawac``

    TransUNet on ACDC (Table 5.3): 4 classes, 360 epochs, eta = lambda = 2.0 (the last model
    is evaluated; the reference picks the best on validation).
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

    The offline demo: AdaWAC (eta 8.0) with the tiny CNN on the synthetic phantom.
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
    """The config ``name`` (a key of :data:`CONFIGS`); ``quick`` shrinks it for CI
    (``phantom_quick`` is always quick, ``phantom`` its larger version).
    """
    if name not in CONFIGS:
        raise ValueError(f"unknown config {name!r}; known: {sorted(CONFIGS)}")
    if name == "phantom_quick":
        return phantom_quick(True)
    if name == "phantom":
        return phantom_quick(quick)
    return CONFIGS[name](quick)
