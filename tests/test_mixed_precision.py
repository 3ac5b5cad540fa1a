"""Mixed precision in the models and trainers (Flax's ``dtype`` / ``param_dtype``).

(a) every model builds with ``dtype=bfloat16`` (bf16 computation, float32 parameters) and with
``param_dtype=bfloat16``; its forward pass runs, the parameters have the requested dtype, the
outputs that feed losses are float32 and the BatchNorm statistics stay float32. (b) DAC and
AdaWAC training from their quick configs in bf16 follow the float32 run. (c) A bad config
``dtype`` fails with a clear error.
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rdr_jax import training
from rdr_jax.adawac import configs as adawac_configs
from rdr_jax.adawac import train as adawac_train
from rdr_jax.adawac.phantom import phantom_cases
from rdr_jax.dac import configs as dac_configs
from rdr_jax.dac import deep
from rdr_jax.models.resnet import ResNet
from rdr_jax.models.small_cnn import SmallCNN
from rdr_jax.models.tiny_segnet import TinySegNet
from rdr_jax.models.transunet import TransUNet
from rdr_jax.models.unet import UNetResNet34
from rdr_jax.models.wide_resnet import WideResNet

BF16, F32 = np.dtype(jnp.bfloat16), np.dtype(np.float32)


@pytest.fixture(autouse=True)
def _float32():
    with jax.enable_x64(False):
        yield


# Each model in its smallest configuration (same topology), with an input of a valid shape.
MODELS = {
    "small_cnn": (lambda **kw: SmallCNN(4, in_channels=1, width=4, **kw), (2, 8, 8, 1)),
    "tiny_segnet": (lambda **kw: TinySegNet(3, width=4, **kw), (2, 16, 16, 1)),
    "wide_resnet": (lambda **kw: WideResNet(4, depth=10, widen_factor=1, in_channels=1, **kw),
                    (2, 8, 8, 1)),
    "resnet": (lambda **kw: ResNet("basic", (1, 1, 1, 1), (4, 4, 4, 4), in_channels=1,
                                   num_classes=3, **kw), (2, 32, 32, 1)),
    "unet": (lambda **kw: UNetResNet34(3, widths=(4, 4, 4, 4), depths=(1, 1, 1, 1),
                                       decoder_channels=(4, 4, 4, 4, 4), **kw), (2, 32, 32, 1)),
    "transunet": (lambda **kw: TransUNet(3, img_size=32, hidden=16, num_layers=1, num_heads=2,
                                         mlp_dim=16, resnet_units=(1, 1, 1), width=32,
                                         decoder_channels=(4, 4, 4, 4), head_channels=8,
                                         **kw), (2, 32, 32, 1)),
}

_BF16_MATMUL = re.compile(r"bf16\[[^\]]*\] = (conv_general_dilated|dot_general)\b")


def _dtypes(tree) -> set:
    return {np.dtype(leaf.dtype) for leaf in jax.tree.leaves(tree)}


#: Models whose ``param_dtype=bfloat16`` variant is checked abstractly (``nnx.eval_shape`` /
#: ``jax.eval_shape``: the same constructor and forward code, every dtype, no compilation of
#: a few dozen bf16 initializers and of a second forward program; ~5 s of CPU). Their bf16
#: computation (``dtype``) runs for real, as do both variants of the other models.
ABSTRACT_PARAM_BF16 = ("transunet", "unet")


@pytest.mark.parametrize("variant", ["dtype", "param_dtype"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_mixed_precision(name, variant):
    ctor, shape = MODELS[name]
    abstract = variant == "param_dtype" and name in ABSTRACT_PARAM_BF16
    build = lambda: ctor(rngs=nnx.Rngs(0), **{variant: jnp.bfloat16})  # noqa: E731
    model = nnx.eval_shape(build) if abstract else build()
    graph, params, rest = training.split_model(model)
    assert _dtypes(params) == {F32 if variant == "dtype" else BF16}
    stats0 = nnx.state(model, nnx.BatchStat)
    assert jax.tree.leaves(stats0) and _dtypes(stats0) == {F32}

    def fwd(params, rest, x):
        return training.merge_apply(graph.train, params, rest, x)

    x = jax.random.uniform(jax.random.key(1), shape)
    run = functools.partial(jax.eval_shape, fwd) if abstract else jax.jit(fwd)
    outs, new_rest = run(params, rest, x)
    outs = outs if isinstance(outs, tuple) else (outs,)
    # logits (and the encoder features of the segmentation models) are float32
    assert [o.dtype for o in outs] == [F32] * len(outs)
    # BatchNorm statistics after a training-mode step: still float32
    stats1 = nnx.state(nnx.merge(graph.train, params, new_rest), nnx.BatchStat)
    assert _dtypes(stats1) == {F32}
    if not abstract:
        assert all(np.all(np.isfinite(np.asarray(o))) for o in outs)
        assert not all(np.array_equal(a, b) for a, b in
                       zip(jax.tree.leaves(stats0), jax.tree.leaves(stats1)))
    # the convolutions / matmuls run in bfloat16 with dtype=bfloat16 (and only then)
    text = str(jax.make_jaxpr(fwd)(params, rest, x))
    assert bool(_BF16_MATMUL.search(text)) == (variant == "dtype")


def test_default_dtypes_unchanged():
    """Without dtype arguments the models compute in float32 with float32 parameters and
    float32 BatchNorm statistics, as before."""
    m = SmallCNN(4, in_channels=1, width=4, rngs=nnx.Rngs(0))
    assert m.dtype is None and m.param_dtype == F32
    assert _dtypes(nnx.state(m, nnx.Param)) == _dtypes(nnx.state(m, nnx.BatchStat)) == {F32}
    graph, params, rest = training.split_model(m)
    text = str(jax.make_jaxpr(lambda p, r, x: training.merge_apply(graph.train, p, r, x))(
        params, rest, jnp.zeros((2, 8, 8, 1))))
    assert "bf16" not in text


def test_model_rejects_bad_dtypes():
    with pytest.raises(TypeError, match="param_dtype"):
        SmallCNN(4, param_dtype=jnp.int32, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="dtype"):
        TinySegNet(3, dtype="not-a-dtype", rngs=nnx.Rngs(0))


# ------------------------------------------------------------------ trainers: bf16 vs float32


def _learnable_images(n=48, k=4, seed=0):
    """``k`` classes told apart by a bright row in one channel (learnable in a few steps)."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % k
    x = rng.uniform(0, 0.3, (n, 8, 8, 3)).astype(np.float32)
    for i in range(n):
        x[i, 2 * y[i], :, y[i] % 3] += 0.7
    return x, y


def _check_follows_float32(f32: np.ndarray, bf16: np.ndarray, rtol: float) -> None:
    assert len(f32) == len(bf16) == 20
    assert np.all(np.isfinite(bf16))
    for losses in (f32, bf16):             # both runs learn
        assert losses[-5:].mean() < losses[:5].mean()
    assert not np.array_equal(f32, bf16)   # the bf16 run really computed in bf16
    np.testing.assert_allclose(bf16[-5:].mean(), f32[-5:].mean(), rtol=rtol)


def test_dac_training_in_bfloat16_follows_float32():
    """The quick DAC config (small CNN, lambda = 1), 20 steps from the same seed. The mean of
    the last 5 losses drops from ~4.5 to ~1.1 in both runs and they differ by ~0.3 % (bf16
    rounding); 5 % would catch a bf16 run that learns markedly slower or diverges."""
    x, y = _learnable_images()
    runs = {}
    for dtype in ("float32", "bfloat16"):
        cfg = dac_configs.run_config(dac_configs.get_config("different_lambda", quick=True),
                                     2, 0)
        cfg.total_steps, cfg.log_every, cfg.checkpoint_every = 20, 1, 0
        cfg.augment = {"name": "shift_rotate"}   # cheaper to compile than RandAugment
        cfg.dtype = dtype
        res = deep.train(cfg, (x, y), progress=False)
        assert _dtypes(res.state.params) == {F32}
        assert _dtypes(res.state.model_state) <= {F32, np.dtype(np.uint32)}
        runs[dtype] = np.array([h["loss"] for h in res.history])
    _check_follows_float32(runs["float32"], runs["bfloat16"], rtol=0.05)


def test_adawac_training_in_bfloat16_follows_float32():
    """The quick AdaWAC config (tiny segmenter, eta = 8, lambda = 2) on 16 x 16 phantom
    slices, 20 steps from the same seed. The mean of the last 5 losses drops from ~1.5 to
    ~0.73 in both runs and they differ by ~1 % (up to ~4 % with a narrower net; the loss of
    single steps is noisier, the beta step amplifies rounding); 10 % would catch a bf16 run
    that learns markedly slower or diverges."""
    data = phantom_cases(jax.random.key(3), 4, 8, 16, num_test_cases=1)
    runs = {}
    for dtype in ("float32", "bfloat16"):
        cfg = adawac_configs.get_config("phantom_quick")
        cfg.num_steps, cfg.log_every, cfg.dtype = 20, 20, dtype
        res = adawac_train.train(cfg, data.train)
        assert _dtypes(res.state.params) == {F32}
        assert _dtypes(res.state.model_state) <= {F32, np.dtype(np.uint32)}
        runs[dtype] = np.asarray(res.losses)
    _check_follows_float32(runs["float32"], runs["bfloat16"], rtol=0.1)


# ------------------------------------------------------------------ config validation


@pytest.mark.parametrize("bad", ["float16", "bf16", "float64"])
def test_bad_config_dtype_raises(bad):
    msg = r"dtype must be one of \('float32', 'bfloat16'\)"
    for value in (bad, 3, jnp.int32):
        with pytest.raises(ValueError, match=msg):
            training.compute_dtype(value)
    cfg = dac_configs.run_config(dac_configs.get_config("different_lambda", quick=True), 2, 0)
    cfg.dtype = bad
    x, y = _learnable_images(8)
    with pytest.raises(ValueError, match=msg):
        deep.train(cfg, (x, y), progress=False)
    acfg = adawac_configs.get_config("phantom_quick")
    acfg.dtype = bad
    with pytest.raises(ValueError, match=msg):
        adawac_train.validate_config(acfg, num_examples=64)
    with pytest.raises(ValueError, match=msg):
        adawac_train.build_model(acfg, 3, image_size=16)


def test_configs_default_to_float32():
    for name in dac_configs.CONFIGS:
        if name != "digits":
            assert dac_configs.get_config(name, quick=True).dtype == "float32"
    for name in adawac_configs.CONFIGS:
        assert adawac_configs.get_config(name, quick=True).dtype == "float32"
        assert adawac_configs.get_config(name).dtype == "float32"
    st = adawac_train.validate_config(adawac_configs.get_config("phantom_quick"),
                                      num_examples=64)
    assert st.dtype == F32
