"""Loaders for the ImageNet-pretrained encoders of the Chapter 5 segmentation models (Section C.4): torchvision ResNet weights (exported once to ``.npz``) and the official
``R50+ViT-B_16.npz`` of TransUNet, read from local files.

Every key is validated before anything changes (a failed load leaves the model untouched); a
missing key raises ``KeyError``, a wrong shape ``ValueError``, naming the key. Why: the
thesis' models start from these weights. Key layouts and transpositions:
``docs/training.md`` ("Pretrained weights").
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping, NamedTuple

import jax.numpy as jnp
import numpy as np
import scipy.ndimage
from flax import nnx

from rdr_jax.models.resnet import ResNet
from rdr_jax.models.transunet import StdConv, TransUNet

__all__ = ["LoadResult", "load_torchvision_resnet", "load_r50_vit_b16", "read_npz",
           "TORCH_EXPORT_COMMAND", "resize_pos_embedding"]

#: One-line torch command that turns a torchvision ``.pth`` state dict into the ``.npz`` read
#: by :func:`load_torchvision_resnet` (run where torch is installed).
TORCH_EXPORT_COMMAND = (
    "python -c \"import torch, numpy as np; sd = torch.load('resnet34-b627a593.pth', "
    "map_location='cpu'); np.savez('resnet34.npz', **{k: v.numpy() for k, v in sd.items()})\"")


class LoadResult(NamedTuple):
    """What a loader did: ``loaded`` file keys copied into the model, ``unused`` file keys
    that were not needed (e.g. the ViT classifier head or ``num_batches_tracked``)."""

    loaded: tuple[str, ...]
    unused: tuple[str, ...]


def read_npz(source: Any, name: str = "source") -> dict[str, np.ndarray]:
    """Read ``source`` (an ``.npz`` path or a mapping) into a dict; a ``.pth`` path
    raises ``ValueError`` with the export command.
    """
    if isinstance(source, Mapping):
        return {str(k): np.asarray(v) for k, v in source.items()}
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path to an .npz file or a mapping of arrays; got "
                        f"{type(source).__name__}")
    path = os.fspath(source)
    if path.endswith((".pth", ".pt", ".bin")):
        raise ValueError(f"{name} {path!r} is a torch pickle, which cannot be read without "
                         f"torch; export it once to .npz with:\n  {TORCH_EXPORT_COMMAND}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{name}: no such file {path!r}")
    with np.load(path, allow_pickle=False) as f:
        return {k: np.asarray(f[k]) for k in f.files}


class _Plan:
    """Collects (variable, value) assignments, validating each before anything is written."""

    def __init__(self, weights: dict[str, np.ndarray], what: str):
        self.w = weights
        self.what = what
        self.items: list[tuple[nnx.Variable, np.ndarray]] = []
        self.used: set[str] = set()

    def get(self, key: str) -> np.ndarray:
        if key not in self.w:
            raise KeyError(f"{self.what}: missing key {key!r} ({len(self.w)} keys in the file)")
        self.used.add(key)
        return self.w[key]

    def put(self, var: nnx.Variable, key: str,
            transform: Callable[[np.ndarray], np.ndarray] | None = None,
            source_shape: tuple[int, ...] | None = None,
            alt_shapes: tuple[tuple[int, ...], ...] = (), flatten_ok: bool = False) -> None:
        """Queue ``var <- transform(file[key])`` after checking the file shape."""
        arr = self.get(key)
        target = tuple(var.shape)
        expected = tuple(source_shape) if source_shape is not None else target
        shape = tuple(arr.shape)
        if shape == expected:
            val = transform(arr) if transform is not None else arr
        elif shape in alt_shapes or (flatten_ok and int(np.prod(shape)) == int(np.prod(target))
                                     and sum(d != 1 for d in shape) <= 1):
            val = arr.reshape(target)
        else:
            alts = "".join(f" or {a}" for a in alt_shapes)
            raise ValueError(f"{self.what}: key {key!r} has shape {shape}, expected "
                             f"{expected}{alts} (model parameter shape {target})")
        if not np.issubdtype(np.asarray(val).dtype, np.floating):
            raise TypeError(f"{self.what}: key {key!r} must hold floating values; got dtype "
                            f"{np.asarray(val).dtype}")
        if tuple(val.shape) != target:  # a bad transform is a bug, not a user error
            raise AssertionError(f"{key}: transformed shape {val.shape} != {target}")
        self.items.append((var, np.asarray(val)))

    def apply(self) -> None:
        for var, val in self.items:
            var.set_value(jnp.asarray(val, dtype=var.dtype))


def _oihw_to_hwio(a: np.ndarray) -> np.ndarray:
    return np.transpose(a, (2, 3, 1, 0))


def _hwio_shape_as_oihw(shape: tuple[int, ...]) -> tuple[int, ...]:
    kh, kw, i, o = shape
    return (o, i, kh, kw)


def _conv(plan: _Plan, conv: nnx.Conv, key: str) -> None:
    plan.put(conv.kernel, key, _oihw_to_hwio, _hwio_shape_as_oihw(tuple(conv.kernel.shape)))


def _bn(plan: _Plan, bn: nnx.BatchNorm, prefix: str) -> None:
    plan.put(bn.scale, prefix + ".weight")
    plan.put(bn.bias, prefix + ".bias")
    plan.put(bn.mean, prefix + ".running_mean")
    plan.put(bn.var, prefix + ".running_var")


def load_torchvision_resnet(model: Any, source: Any, *, strict: bool = True) -> LoadResult:
    """Copy a torchvision ResNet state dict (``.npz`` export) into a
    :class:`~rdr_jax.models.resnet.ResNet` or the ``encoder`` of a
    :class:`~rdr_jax.models.unet.UNetResNet34`, in place (OIHW -> HWIO).

    Args:
        model: a ``ResNet`` or a module whose ``encoder`` is one.
        source: ``.npz`` path (:data:`TORCH_EXPORT_COMMAND`) or a mapping with torchvision's keys.
        strict: raise on keys the model does not use.

    Returns:
        :class:`LoadResult` (keys loaded and left unused).

    Raises:
        KeyError: a needed key is missing. ValueError: a wrong shape, unexpected keys under
        ``strict``, or a ``.pth`` path.
    """
    net = model.encoder if (not isinstance(model, ResNet)
                            and isinstance(getattr(model, "encoder", None), ResNet)) else model
    if not isinstance(net, ResNet):
        raise TypeError(f"model must be a ResNet or have a ResNet 'encoder'; got "
                        f"{type(model).__name__}")
    weights = read_npz(source)
    plan = _Plan(weights, "torchvision ResNet state dict")
    _conv(plan, net.conv1, "conv1.weight")
    _bn(plan, net.bn1, "bn1")
    for li, stage in enumerate((net.layer1, net.layer2, net.layer3, net.layer4), start=1):
        for bi, blk in enumerate(stage):
            p = f"layer{li}.{bi}."
            convs = ("conv1", "conv2", "conv3") if net.block == "bottleneck" else ("conv1",
                                                                                   "conv2")
            for c in convs:
                _conv(plan, getattr(blk, c), p + c + ".weight")
                _bn(plan, getattr(blk, "bn" + c[-1]), p + "bn" + c[-1])
            if blk.downsample is not None:
                _conv(plan, blk.downsample[0], p + "downsample.0.weight")
                _bn(plan, blk.downsample[1], p + "downsample.1")
    if net.fc is not None:
        k = net.fc.kernel
        plan.put(k, "fc.weight", lambda a: a.T, tuple(k.shape)[::-1])
        plan.put(net.fc.bias, "fc.bias")
    unused = sorted(set(weights) - plan.used)
    if strict:
        unexpected = [k for k in unused if not k.endswith("num_batches_tracked")
                      and not (net.fc is None and k.startswith("fc."))]
        if unexpected:
            more = f" (+{len(unexpected) - 5} more)" if len(unexpected) > 5 else ""
            raise ValueError(f"torchvision ResNet state dict: unexpected keys "
                             f"{unexpected[:5]}{more} (depths {net.depths}, block "
                             f"{net.block!r}); pass strict=False to ignore them")
    plan.apply()
    return LoadResult(tuple(sorted(plan.used)), tuple(unused))


def resize_pos_embedding(posemb: np.ndarray, n_tokens: int) -> np.ndarray:
    """TransUNet's position-embedding adaptation ``(1, N0, D) ->
    (1, n_tokens, D)``: drop a class token, zoom the grid bilinearly.
    """
    posemb = np.asarray(posemb)
    if posemb.ndim != 3 or posemb.shape[0] != 1:
        raise ValueError(f"posemb must have shape (1, N, D); got {posemb.shape}")
    n0 = posemb.shape[1]
    if n0 == n_tokens:
        return posemb
    if n0 - 1 == n_tokens:
        return posemb[:, 1:]
    grid = posemb[0] if int(round(np.sqrt(n0))) ** 2 == n0 else posemb[0, 1:]
    g0 = int(round(np.sqrt(grid.shape[0])))
    g = int(round(np.sqrt(n_tokens)))
    if g0 * g0 != grid.shape[0] or g * g != n_tokens:
        raise ValueError(f"posemb: cannot map {n0} tokens onto a square grid of {n_tokens}")
    grid = grid.reshape(g0, g0, -1).astype(np.float64)
    zoomed = scipy.ndimage.zoom(grid, (g / g0, g / g0, 1), order=1)
    return zoomed.reshape(1, g * g, -1)


def load_r50_vit_b16(model: TransUNet, source: Any) -> LoadResult:
    """Copy the official ``R50+ViT-B_16.npz`` hybrid encoder (R50, patch and
    position embeddings, transformer, ``encoder_norm``) into a
    :class:`~rdr_jax.models.transunet.TransUNet`, in place.

    Args:
        model: the TransUNet (shapes must match). source: ``.npz`` path or a mapping.

    Returns:
        :class:`LoadResult`.

    Raises:
        KeyError: a needed key is missing. ValueError: a wrong shape.
    """
    if not isinstance(model, TransUNet):
        raise TypeError(f"model must be a TransUNet; got {type(model).__name__}")
    weights = read_npz(source)
    plan = _Plan(weights, "R50+ViT-B/16 npz")
    d = model.hidden
    plan.put(model.patch_embeddings.kernel, "embedding/kernel")
    plan.put(model.patch_embeddings.bias, "embedding/bias")
    plan.put(model.encoder_norm.scale, "Transformer/encoder_norm/scale")
    plan.put(model.encoder_norm.bias, "Transformer/encoder_norm/bias")
    pe_key = "Transformer/posembed_input/pos_embedding"
    pe = plan.get(pe_key)
    n_tok = model.position_embeddings.shape[1]
    if pe.ndim != 3 or pe.shape[0] != 1 or pe.shape[2] != d:
        raise ValueError(f"R50+ViT-B/16 npz: key {pe_key!r} has shape {pe.shape}, expected "
                         f"(1, N, {d}) (model parameter shape {(1, n_tok, d)})")
    try:
        resized = resize_pos_embedding(pe, n_tok)
    except ValueError as e:
        raise ValueError(f"R50+ViT-B/16 npz: key {pe_key!r}: {e}") from None
    plan.put(model.position_embeddings, pe_key, lambda a: resized, tuple(pe.shape))
    for i, blk in enumerate(model.layer):
        root = f"Transformer/encoderblock_{i}/"
        att = root + "MultiHeadDotProductAttention_1/"
        h, hd = blk.attn.num_heads, blk.attn.head_dim
        plan.put(blk.attention_norm.scale, root + "LayerNorm_0/scale")
        plan.put(blk.attention_norm.bias, root + "LayerNorm_0/bias")
        plan.put(blk.ffn_norm.scale, root + "LayerNorm_2/scale")
        plan.put(blk.ffn_norm.bias, root + "LayerNorm_2/bias")
        for name in ("query", "key", "value"):
            lin = getattr(blk.attn, name)
            plan.put(lin.kernel, att + name + "/kernel", alt_shapes=((d, h, hd),))
            plan.put(lin.bias, att + name + "/bias", alt_shapes=((h, hd),))
        plan.put(blk.attn.out.kernel, att + "out/kernel", alt_shapes=((h, hd, d),))
        plan.put(blk.attn.out.bias, att + "out/bias")
        for j, lin in enumerate((blk.ffn.fc1, blk.ffn.fc2)):
            plan.put(lin.kernel, root + f"MlpBlock_3/Dense_{j}/kernel")
            plan.put(lin.bias, root + f"MlpBlock_3/Dense_{j}/bias")
    r50 = model.hybrid_model
    plan.put(r50.root_conv.kernel, "conv_root/kernel")
    plan.put(r50.root_gn.scale, "gn_root/scale", flatten_ok=True)
    plan.put(r50.root_gn.bias, "gn_root/bias", flatten_ok=True)
    for s, stage in enumerate(r50.body, start=1):
        for u, unit in enumerate(stage, start=1):
            p = f"block{s}/unit{u}/"
            for c in ("1", "2", "3"):
                conv: StdConv = getattr(unit, "conv" + c)
                plan.put(conv.kernel, p + f"conv{c}/kernel")
                gn = getattr(unit, "gn" + c)
                plan.put(gn.scale, p + f"gn{c}/scale", flatten_ok=True)
                plan.put(gn.bias, p + f"gn{c}/bias", flatten_ok=True)
            if unit.conv_proj is not None:
                plan.put(unit.conv_proj.kernel, p + "conv_proj/kernel")
                plan.put(unit.gn_proj.scale, p + "gn_proj/scale", flatten_ok=True)
                plan.put(unit.gn_proj.bias, p + "gn_proj/bias", flatten_ok=True)
    plan.apply()
    return LoadResult(tuple(sorted(plan.used)), tuple(sorted(set(weights) - plan.used)))
