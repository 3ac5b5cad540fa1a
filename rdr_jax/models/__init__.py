"""Flax NNX models and their registry: WideResNet and SmallCNN (Ch. 4), UNetResNet34,
TransUNet and TinySegNet (Ch. 5); :func:`build_model` builds any of them from a spec,
importing the model module only then.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping, Optional, Union

__all__ = ["MODELS", "build_model", "register_model"]

#: name -> ``"module:Class"`` (imported when built) or a constructor
#: ``ctor(num_classes, *, rngs, **kwargs)``.
MODELS: dict[str, Union[str, Callable]] = {
    "small_cnn": "rdr_jax.models.small_cnn:SmallCNN",
    "wide_resnet": "rdr_jax.models.wide_resnet:WideResNet",
    "tiny_segnet": "rdr_jax.models.tiny_segnet:TinySegNet",
    "unet": "rdr_jax.models.unet:UNetResNet34",
    "transunet": "rdr_jax.models.transunet:TransUNet",
}
_ALIASES = {"tiny": "tiny_segnet", "wrn": "wide_resnet", "unet_resnet34": "unet"}


def register_model(name: str, ctor: Union[str, Callable]) -> None:
    """Add a model to :data:`MODELS` (``ctor(num_classes, *, rngs, **kwargs)`` or
    ``"module:Class"``)."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty string; got {name!r}")
    MODELS[name] = ctor


def _resolve(name: str) -> Callable:
    key = _ALIASES.get(name, name)
    if key not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {sorted(MODELS)} (aliases "
                         f"{sorted(_ALIASES)})")
    ctor = MODELS[key]
    if isinstance(ctor, str):
        mod, attr = ctor.split(":")
        ctor = getattr(importlib.import_module(mod), attr)
    return ctor


def build_model(spec: Mapping[str, Any], *, seed: int = 0, rngs: Optional[Any] = None) -> Any:
    """The model a spec names: ``MODELS[spec["name"]](spec["num_classes"],
    rngs=rngs, **rest)``; ``small: true`` builds the CPU-sized variant, ``rngs`` defaults to
    ``nnx.Rngs(seed)``.

    Raises:
        ValueError: unknown name, or no ``num_classes``.
    """
    cfg = dict(spec.to_dict() if hasattr(spec, "to_dict") else spec)
    if "name" not in cfg:
        raise ValueError(f"a model spec needs a 'name' (one of {sorted(MODELS)}); got {cfg}")
    name = cfg.pop("name")
    if "num_classes" not in cfg:
        raise ValueError(f"the spec of model {name!r} needs 'num_classes'")
    ctor = _resolve(name)
    if cfg.pop("small", False):
        if not hasattr(ctor, "small"):
            raise ValueError(f"model {name!r} has no small variant")
        ctor = ctor.small
    if rngs is None:
        from flax import nnx
        rngs = nnx.Rngs(seed)
    return ctor(cfg.pop("num_classes"), rngs=rngs, **cfg)
