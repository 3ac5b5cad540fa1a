"""Chapter 5 segmentation models: ResNet backbones, UNet-ResNet34, TransUNet, weight loaders.

Full-size models are only built abstractly (``nnx.eval_shape``) for parameter counts and
224 x 224 output shapes; everything that runs uses the ``small`` variants on 64 x 64 inputs.
Independent references: closed-form parameter counts written here from the layer lists of
torchvision / segmentation_models_pytorch / TransUNet (ResNet-34 with ``fc`` is torchvision's
published 21,797,672, without it 21,284,672; ResNet-50 25,557,032 / 23,508,032; smp
``Unet('resnet34', classes=1)`` 24,436,369; TransUNet R50-ViT-B/16 with 9 classes 105.28M),
numpy re-implementations of the stem, weight-standardised convolution, GroupNorm and a ViT
block, and ``scipy.ndimage.zoom`` for aligned-corner bilinear upsampling.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.ndimage
import scipy.special
from flax import nnx

from rdr_jax.models import pretrained as P
from rdr_jax.models.resnet import ResNet, resnet34, resnet50
from rdr_jax.models.transunet import (StdConv, TransUNet, ViTBlock,
                                      upsample_bilinear_align_corners)
from rdr_jax.models.unet import UNetResNet34
from tests.conftest import rtol


def R(seed: int) -> nnx.Rngs:
    """NNX streams from an ``rbg`` key: initialising with the default threefry key compiles
    one slow CPU kernel per parameter shape (~37 s for the small UNet, ~7 s with rbg)."""
    return nnx.Rngs(jax.random.key(seed, impl="rbg"))


def n_params(model) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


# ----------------------------------------------------------------------------------------------
# independent closed-form parameter counts
# ----------------------------------------------------------------------------------------------
def conv_p(cin, cout, k, bias=False):
    return k * k * cin * cout + (cout if bias else 0)


def bn_p(c):
    return 2 * c


def resnet_count(block, depths, widths=(64, 128, 256, 512), cin=3, fc=None):
    total = conv_p(cin, widths[0], 7) + bn_p(widths[0])
    c = widths[0]
    for s, (n, w) in enumerate(zip(depths, widths)):
        for i in range(n):
            stride = (1 if s == 0 else 2) if i == 0 else 1
            if block == "basic":
                out = w
                total += conv_p(c, w, 3) + bn_p(w) + conv_p(w, w, 3) + bn_p(w)
            else:
                out = 4 * w
                total += (conv_p(c, w, 1) + bn_p(w) + conv_p(w, w, 3) + bn_p(w)
                          + conv_p(w, out, 1) + bn_p(out))
            if stride != 1 or c != out:
                total += conv_p(c, out, 1) + bn_p(out)
            c = out
    if fc is not None:
        total += c * fc + fc
    return total


def unet_count(k, widths=(64, 128, 256, 512), depths=(3, 4, 6, 3),
               dec=(256, 128, 64, 32, 16)):
    enc = resnet_count("basic", depths, widths)
    ins = [widths[3]] + list(dec[:-1])
    skips = [widths[2], widths[1], widths[0], widths[0], 0]
    d = sum(conv_p(i + s, o, 3) + bn_p(o) + conv_p(o, o, 3) + bn_p(o)
            for i, s, o in zip(ins, skips, dec))
    return enc + d + conv_p(dec[-1], k, 3, bias=True)


def transunet_count(k, hidden=768, layers=12, mlp=3072, units=(3, 4, 9), w=64, img=224,
                    dec=(256, 128, 64, 16), head=512, n_skip=3):
    gn = bn_p  # scale + bias per channel
    r50 = conv_p(3, w, 7) + gn(w)
    c = w
    for s, n in enumerate(units):
        cmid, cout = w * 2 ** s, 4 * w * 2 ** s
        for i in range(n):
            r50 += (conv_p(c, cmid, 1) + gn(cmid) + conv_p(cmid, cmid, 3) + gn(cmid)
                    + conv_p(cmid, cout, 1) + gn(cout))
            if i == 0:  # stride 2 or channel change in every first unit
                r50 += conv_p(c, cout, 1) + gn(cout)
            c = cout
    emb = conv_p(c, hidden, 1, bias=True) + (img // 16) ** 2 * hidden
    block = (2 * 2 * hidden + 4 * (hidden * hidden + hidden)
             + hidden * mlp + mlp + mlp * hidden + hidden)
    vit = layers * block + 2 * hidden
    decoder = conv_p(hidden, head, 3) + bn_p(head)
    ins = [head] + list(dec[:-1])
    skips = [8 * w, 4 * w, w, 0][:n_skip] + [0] * (4 - n_skip)
    decoder += sum(conv_p(i + s, o, 3) + bn_p(o) + conv_p(o, o, 3) + bn_p(o)
                   for i, s, o in zip(ins, skips, dec))
    return r50 + emb + vit + decoder + conv_p(dec[-1], k, 3, bias=True)


@pytest.fixture(scope="module")
def full_models():
    """Abstract (shape-only) full-size models: nothing is allocated or initialised."""
    return {
        "unet": nnx.eval_shape(lambda: UNetResNet34(9, rngs=R(0))),
        "transunet": nnx.eval_shape(lambda: TransUNet(9, rngs=R(0))),
    }


def test_resnet_param_counts_match_torchvision():
    r34 = nnx.eval_shape(lambda: resnet34(rngs=R(0)))
    r34fc = nnx.eval_shape(lambda: resnet34(num_classes=1000, rngs=R(0)))
    r50 = nnx.eval_shape(lambda: resnet50(rngs=R(0)))
    r50fc = nnx.eval_shape(lambda: resnet50(num_classes=1000, rngs=R(0)))
    # formula == published torchvision totals (with fc) == model
    assert resnet_count("basic", (3, 4, 6, 3)) == n_params(r34) == 21_284_672
    assert resnet_count("basic", (3, 4, 6, 3), fc=1000) == n_params(r34fc) == 21_797_672
    assert resnet_count("bottleneck", (3, 4, 6, 3)) == n_params(r50) == 23_508_032
    assert resnet_count("bottleneck", (3, 4, 6, 3), fc=1000) == n_params(r50fc) == 25_557_032
    # BatchNorm running statistics are state, not parameters: 2 per BN channel
    stats = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(r34, nnx.BatchStat)))
    assert stats == n_params(r34) - sum(
        int(np.prod(x.shape)) for p, x in nnx.to_flat_state(nnx.state(r34, nnx.Param))
        if p[-1] == "kernel")


def test_full_model_param_counts_and_224_shapes(full_models):
    unet, tu = full_models["unet"], full_models["transunet"]
    assert n_params(unet) == unet_count(9) == 24_437_529
    assert unet_count(1) == 24_436_369                      # smp Unet('resnet34', classes=1)
    assert n_params(unet.encoder) == 21_284_672
    assert n_params(tu) == transunet_count(9) == 105_277_081   # "105.28M" (TransUNet)
    x = jax.ShapeDtypeStruct((2, 224, 224, 1), jnp.float32)
    for model, feat in ((unet, (2, 7, 7, 512)), (tu, (2, 14, 14, 768))):
        model.eval()
        gd, st = nnx.split(model)
        logits, z = jax.eval_shape(lambda s, x: nnx.merge(gd, s)(x), st, x)
        assert logits.shape == (2, 224, 224, 9) and logits.dtype == jnp.float32
        assert z.shape == feat


def test_small_param_counts():
    unet = nnx.eval_shape(lambda: UNetResNet34.small(4, rngs=R(0)))
    tu = nnx.eval_shape(lambda: TransUNet.small(4, rngs=R(0)))
    assert n_params(unet) == unet_count(4, (8, 16, 32, 64), (1, 1, 1, 1), (32, 16, 16, 8, 8))
    assert n_params(tu) == transunet_count(4, 64, 2, 128, (1, 1, 1), 32, 64, (32, 16, 16, 8),
                                           64)


# ----------------------------------------------------------------------------------------------
# forward pass against numpy references
# ----------------------------------------------------------------------------------------------
#: a jitted ``module(x)`` (one compilation instead of one per eager op)
_call = nnx.jit(lambda m, x: m(x))


def np_conv(x, w_hwio, stride, pad):
    """Direct NHWC cross-correlation with symmetric zero padding (PyTorch semantics)."""
    x = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    kh, kw = w_hwio.shape[:2]
    ho = (x.shape[1] - kh) // stride + 1
    wo = (x.shape[2] - kw) // stride + 1
    out = np.zeros((x.shape[0], ho, wo, w_hwio.shape[3]))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, i:i + stride * ho:stride, j:j + stride * wo:stride, :]
            out += patch @ w_hwio[i, j]
    return out


def np_maxpool(x, k, stride, pad):
    x = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)), constant_values=-np.inf)
    ho = (x.shape[1] - k) // stride + 1
    out = np.full((x.shape[0], ho, ho, x.shape[3]), -np.inf)
    for i in range(k):
        for j in range(k):
            out = np.maximum(out, x[:, i:i + stride * ho:stride, j:j + stride * ho:stride])
    return out


def np_layernorm(x, g, b, eps):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * g + b


def test_resnet_stem_and_basic_block_match_numpy(dtype):
    """Symmetric PyTorch padding (stride 2), -inf max-pool padding, eval-mode BatchNorm."""
    net = resnet34(widths=(8, 8, 8, 8), depths=(1, 1, 1, 1), param_dtype=dtype,
                   rngs=R(1))
    rng = np.random.default_rng(0)
    for bn in (net.bn1, net.layer1[0].bn1, net.layer1[0].bn2):   # non-trivial statistics
        bn.mean[...] = jnp.asarray(rng.normal(size=bn.mean.shape), dtype)
        bn.var[...] = jnp.asarray(rng.uniform(0.5, 2, size=bn.var.shape), dtype)
        bn.scale[...] = jnp.asarray(rng.normal(size=bn.scale.shape), dtype)
    net.eval()
    x = rng.normal(size=(2, 14, 14, 3)).astype(dtype)
    f = nnx.jit(lambda m, x: m.features(x))(net, jnp.asarray(x))

    def bn(h, m):
        return ((h - np.asarray(m.mean[...])) / np.sqrt(np.asarray(m.var[...]) + 1e-5)
                * np.asarray(m.scale[...]) + np.asarray(m.bias[...]))

    k = lambda c: np.asarray(c.kernel[...], np.float64)  # noqa: E731
    stem = np.maximum(bn(np_conv(x, k(net.conv1), 2, 3), net.bn1), 0)
    assert stem.shape == f[0].shape == (2, 7, 7, 8)
    np.testing.assert_allclose(f[0], stem, rtol=rtol(dtype) * 10, atol=rtol(dtype) * 10)
    pooled = np_maxpool(stem, 3, 2, 1)
    b = net.layer1[0]
    h = np.maximum(bn(np_conv(pooled, k(b.conv1), 1, 1), b.bn1), 0)
    h = np.maximum(bn(np_conv(h, k(b.conv2), 1, 1), b.bn2) + pooled, 0)
    np.testing.assert_allclose(f[1], h, rtol=rtol(dtype) * 10, atol=rtol(dtype) * 10)
    assert [a.shape[1] for a in f] == [7, 4, 2, 1, 1]


def test_stdconv_and_groupnorm_match_numpy(dtype):
    rngs = R(2)
    conv = StdConv(4, 6, 3, 2, padding=1, param_dtype=dtype, rngs=rngs)
    x = np.random.default_rng(1).normal(size=(2, 9, 9, 4)).astype(dtype)
    w = np.asarray(conv.kernel[...], np.float64)
    m = w.mean(axis=(0, 1, 2), keepdims=True)
    v = w.var(axis=(0, 1, 2), keepdims=True)     # biased, as torch.var_mean(unbiased=False)
    ref = np_conv(x, (w - m) / np.sqrt(v + 1e-5), 2, 1)
    out = _call(conv, jnp.asarray(x))
    assert out.dtype == dtype
    np.testing.assert_allclose(out, ref, rtol=rtol(dtype) * 10, atol=rtol(dtype) * 10)
    # torch GroupNorm(G, C): statistics over (C/G contiguous channels) x H x W per sample
    gn = nnx.GroupNorm(8, num_groups=2, epsilon=1e-6, use_fast_variance=False,
                       param_dtype=dtype, rngs=rngs)
    y = np.random.default_rng(2).normal(size=(3, 5, 5, 8)).astype(dtype)
    yg = y.reshape(3, 5, 5, 2, 4).astype(np.float64)
    ref = ((yg - yg.mean(axis=(1, 2, 4), keepdims=True))
           / np.sqrt(yg.var(axis=(1, 2, 4), keepdims=True) + 1e-6)).reshape(y.shape)
    np.testing.assert_allclose(_call(gn, jnp.asarray(y)), ref, rtol=rtol(dtype) * 10,
                               atol=rtol(dtype) * 10)


def test_vit_block_matches_numpy_with_official_head_layout(dtype):
    """A ViT block (eval) equals a numpy pre-LN block that uses the official (D, heads, hd)
    attention kernels; so the loader's reshape keeps the head ordering."""
    d, h, hd, mlp = 8, 2, 4, 16
    blk = ViTBlock(d, h, mlp, 0.1, 0.0, param_dtype=dtype, rngs=R(3))
    blk.eval()
    rng = np.random.default_rng(3)
    wq, wk, wv = (rng.normal(size=(d, h, hd)) / 3 for _ in range(3))
    bq, bk, bv = (rng.normal(size=(h, hd)) for _ in range(3))
    wo, bo = rng.normal(size=(h, hd, d)) / 3, rng.normal(size=d)
    for lin, kk, bb in ((blk.attn.query, wq, bq), (blk.attn.key, wk, bk),
                        (blk.attn.value, wv, bv)):
        lin.kernel[...] = jnp.asarray(kk.reshape(d, d), dtype)
        lin.bias[...] = jnp.asarray(bb.reshape(d), dtype)
    blk.attn.out.kernel[...] = jnp.asarray(wo.reshape(d, d), dtype)
    blk.attn.out.bias[...] = jnp.asarray(bo, dtype)
    g1, b1, g2, b2 = (rng.normal(size=d) for _ in range(4))
    blk.attention_norm.scale[...], blk.attention_norm.bias[...] = (jnp.asarray(g1, dtype),
                                                                     jnp.asarray(b1, dtype))
    blk.ffn_norm.scale[...], blk.ffn_norm.bias[...] = jnp.asarray(g2, dtype), jnp.asarray(
        b2, dtype)
    x = rng.normal(size=(2, 5, d)).astype(dtype)
    out = _call(blk, jnp.asarray(x))

    xn = np_layernorm(x.astype(np.float64), g1, b1, 1e-6)
    q = np.einsum("bnd,dhk->bnhk", xn, wq) + bq
    k = np.einsum("bnd,dhk->bnhk", xn, wk) + bk
    v = np.einsum("bnd,dhk->bnhk", xn, wv) + bv
    s = np.einsum("bqhk,bshk->bhqs", q, k) / math.sqrt(hd)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ctx = np.einsum("bhqs,bshk->bqhk", p, v)
    y = x + np.einsum("bqhk,hkd->bqd", ctx, wo) + bo
    yn = np_layernorm(y, g2, b2, 1e-6)
    w1, c1 = np.asarray(blk.ffn.fc1.kernel[...], np.float64), np.asarray(blk.ffn.fc1.bias[...])
    w2, c2 = np.asarray(blk.ffn.fc2.kernel[...], np.float64), np.asarray(blk.ffn.fc2.bias[...])
    a = yn @ w1 + c1
    ref = y + (0.5 * a * (1 + scipy.special.erf(a / math.sqrt(2)))) @ w2 + c2
    assert out.dtype == dtype
    np.testing.assert_allclose(out, ref, rtol=rtol(dtype) * 20, atol=rtol(dtype) * 20)
    blk.train()                                    # MLP dropout (rate 0.1) is now active
    a, b = _call(blk, jnp.asarray(x)), _call(blk, jnp.asarray(x))
    assert not np.allclose(a, b) and not np.allclose(a, ref)


def test_upsample_align_corners_matches_scipy(dtype):
    x = np.random.default_rng(4).normal(size=(2, 3, 5, 2)).astype(dtype)
    out = upsample_bilinear_align_corners(jnp.asarray(x))
    # scipy's zoom with grid_mode=False maps the corner samples onto each other
    ref = scipy.ndimage.zoom(x.astype(np.float64), (1, 2, 2, 1), order=1, grid_mode=False)
    assert out.shape == (2, 6, 10, 2) and out.dtype == dtype
    np.testing.assert_allclose(out, ref, rtol=rtol(dtype), atol=rtol(dtype))


# ----------------------------------------------------------------------------------------------
# small models: concrete 64 x 64 forward, train/eval, float64, training step
# ----------------------------------------------------------------------------------------------
_fwd = _call   # shared, so that equal graphs/modes reuse the compilation


@pytest.fixture(scope="module")
def x64():
    return jax.random.uniform(jax.random.key(0), (2, 64, 64, 1))


def test_unet_small_forward_64_train_eval_channel_repeat_and_float64(x64):
    x = x64
    # in_channels=1 is x repeated to 3 channels (same init key -> same weights)
    u1 = UNetResNet34.small(9, rngs=R(0))
    u3 = UNetResNet34.small(9, in_channels=3, rngs=R(0))
    u1.eval(), u3.eval()
    (l1, z1), (l3, z3) = _fwd(u1, x), _fwd(u3, jnp.repeat(x, 3, axis=-1))
    assert l1.shape == (2, 64, 64, 9) and z1.shape == (2, 2, 2, 64)
    assert l1.dtype == z1.dtype == jnp.float32 and np.all(np.isfinite(l1))
    np.testing.assert_array_equal(l1, l3)
    np.testing.assert_array_equal(z1, z3)
    # float64: the same weights cast to float64 give a float64 forward close to float32's
    with jax.enable_x64(True):
        gd, st = nnx.split(u1)
        u64 = nnx.merge(gd, jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), st))
        l64, z64 = _fwd(u64, jnp.asarray(x, jnp.float64))
        assert l64.dtype == z64.dtype == jnp.float64
        np.testing.assert_allclose(l64, l1, rtol=1e-4, atol=1e-4 * float(jnp.abs(l64).max()))
        m = nnx.eval_shape(lambda: UNetResNet34.small(2, param_dtype=jnp.float64, rngs=R(0)))
        assert {a.dtype for a in jax.tree.leaves(nnx.state(m, (nnx.Param, nnx.BatchStat)))
                } == {np.dtype(np.float64)}
    # train mode uses batch statistics and updates the running ones; eval leaves them
    mean0 = np.asarray(u1.encoder.bn1.mean[...])
    _fwd(u1, x)
    np.testing.assert_array_equal(u1.encoder.bn1.mean[...], mean0)
    u1.train()
    l1t, _ = _fwd(u1, x)
    assert not np.allclose(u1.encoder.bn1.mean[...], mean0)
    assert not np.allclose(l1t, l1)


def test_transunet_small_forward_64_train_eval_and_skips(x64):
    x = x64
    t = TransUNet.small(4, rngs=R(1))
    t.eval()
    lt, zt = _fwd(t, x)
    assert lt.shape == (2, 64, 64, 4) and zt.shape == (2, 4, 4, 64)
    assert np.all(np.isfinite(lt))
    np.testing.assert_array_equal(_fwd(t, x)[0], lt)          # eval: deterministic
    # the encoder features are the normed transformer output on the 4 x 4 grid
    np.testing.assert_allclose(jnp.mean(zt, -1), 0.0, atol=1e-5)  # LayerNorm (scale 1, bias 0)
    np.testing.assert_allclose(jnp.var(zt, -1), 1.0, rtol=1e-3)
    # skip features of the R50: [block2 (8w @ H/8), block1 zero-padded (4w @ H/4), root]
    h, feats = nnx.jit(lambda m, x: m(x))(t.hybrid_model, jnp.repeat(x, 3, axis=-1))
    assert h.shape == (2, 4, 4, 512)
    assert [f.shape for f in feats] == [(2, 8, 8, 256), (2, 16, 16, 128), (2, 32, 32, 32)]
    np.testing.assert_array_equal(feats[1][:, 15], 0.0)       # padded row/column (15 -> 16)
    np.testing.assert_array_equal(feats[1][:, :, 15], 0.0)
    assert np.asarray(feats[1][:, :15, :15]).max() > 0


@pytest.mark.parametrize("ctor", [UNetResNet34.small, TransUNet.small],
                         ids=["unet", "transunet"])
def test_jitted_train_step_decreases_ce(ctor):
    k = 3
    model = ctor(k, rngs=R(0))
    model.train()
    x = jax.random.uniform(jax.random.key(1), (2, 64, 64, 1))
    y = jnp.minimum((x[..., 0] * k).astype(jnp.int32), k - 1)   # learnable intensity classes
    gd, params, rest = nnx.split(model, nnx.Param, ...)
    opt = optax.sgd(0.05, momentum=0.9)   # the thesis uses lr 0.01 (App. app:imp); 0.05 is
    #                                       quicker to show on 10 steps
    opt_state = opt.init(params)

    @jax.jit
    def step(params, rest, opt_state):
        def loss_fn(p, rest):
            # fresh Variables in this trace (NNX refuses to mutate BatchNorm statistics or
            # dropout counters created under the outer jit trace)
            p, rest = jax.tree.map(lambda v: v, (p, rest))
            m = nnx.merge(gd, p, rest)
            logits, z = m(x)
            ce = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
            return ce, (nnx.state(m, nnx.Not(nnx.Param)), z)
        (loss, (rest, z)), g = jax.value_and_grad(loss_fn, has_aux=True)(params, rest)
        upd, opt_state = opt.update(g, opt_state, params)
        return optax.apply_updates(params, upd), rest, opt_state, loss

    losses = []
    for _ in range(10):
        params, rest, opt_state, loss = step(params, rest, opt_state)
        losses.append(float(loss))
    assert np.all(np.isfinite(losses))
    # fixed batch, small steps: the CE decreases at every step, by > 0.05 nats in total
    assert np.all(np.diff(losses) < 1e-4), losses
    assert losses[-1] < losses[0] - 0.05, losses


# ----------------------------------------------------------------------------------------------
# weight loaders
# ----------------------------------------------------------------------------------------------
def torchvision_keys(block, depths, widths, fc=None, cin=3):
    """Key -> torch-layout shape of a torchvision ResNet state dict, built from its naming."""
    keys = {"conv1.weight": (widths[0], cin, 7, 7)}

    def bn(p, c):
        for s in ("weight", "bias", "running_mean", "running_var"):
            keys[f"{p}.{s}"] = (c,)
        keys[f"{p}.num_batches_tracked"] = ()

    bn("bn1", widths[0])
    c = widths[0]
    for li, (n, w) in enumerate(zip(depths, widths), start=1):
        for b in range(n):
            stride = (1 if li == 1 else 2) if b == 0 else 1
            p = f"layer{li}.{b}"
            if block == "basic":
                out, convs = w, [(c, w, 3), (w, w, 3)]
            else:
                out, convs = 4 * w, [(c, w, 1), (w, w, 3), (w, 4 * w, 1)]
            for j, (ci, co, kk) in enumerate(convs, start=1):
                keys[f"{p}.conv{j}.weight"] = (co, ci, kk, kk)
                bn(f"{p}.bn{j}", co)
            if stride != 1 or c != out:
                keys[f"{p}.downsample.0.weight"] = (out, c, 1, 1)
                bn(f"{p}.downsample.1", out)
            c = out
    if fc is not None:
        keys["fc.weight"], keys["fc.bias"] = (fc, c), (fc,)
    return keys


def random_state(shapes, seed):
    rng = np.random.default_rng(seed)
    return {k: (np.asarray(7, np.int64) if k.endswith("num_batches_tracked")
                else rng.normal(size=s).astype(np.float32)) for k, s in shapes.items()}


def test_torchvision_loader_roundtrip_unet_encoder(tmp_path):
    model = UNetResNet34.small(4, rngs=R(0))
    shapes = torchvision_keys("basic", (1, 1, 1, 1), (8, 16, 32, 64))
    sd = random_state(shapes, 0)
    sd["fc.weight"], sd["fc.bias"] = np.ones((10, 64), np.float32), np.ones(10, np.float32)
    path = tmp_path / "resnet34.npz"
    np.savez(path, **sd)
    res = P.load_torchvision_resnet(model, path)           # UNet -> its encoder
    enc = model.encoder
    np.testing.assert_array_equal(enc.conv1.kernel[...],
                                  np.transpose(sd["conv1.weight"], (2, 3, 1, 0)))
    np.testing.assert_array_equal(enc.bn1.var[...], sd["bn1.running_var"])
    blk = enc.layer2[0]
    np.testing.assert_array_equal(blk.conv2.kernel[...],
                                  np.transpose(sd["layer2.0.conv2.weight"], (2, 3, 1, 0)))
    np.testing.assert_array_equal(blk.downsample[0].kernel[...],
                                  np.transpose(sd["layer2.0.downsample.0.weight"], (2, 3, 1, 0)))
    np.testing.assert_array_equal(blk.downsample[1].scale[...], sd["layer2.0.downsample.1.weight"])
    np.testing.assert_array_equal(blk.downsample[1].mean[...],
                                  sd["layer2.0.downsample.1.running_mean"])
    # every parameter and statistic of the encoder came from the file
    n_loaded = sum(int(np.prod(sd[k].shape)) for k in res.loaded)
    n_enc = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(enc, nnx.Param))) + sum(
        int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(enc, nnx.BatchStat)))
    assert n_loaded == n_enc
    assert set(res.unused) == {"fc.weight", "fc.bias"} | {
        k for k in sd if k.endswith("num_batches_tracked")}


def test_torchvision_loader_bottleneck_with_fc_and_errors(tmp_path):
    net = resnet50(widths=(4, 8, 8, 8), depths=(1, 2, 1, 1), num_classes=5, rngs=R(0))
    shapes = torchvision_keys("bottleneck", (1, 2, 1, 1), (4, 8, 8, 8), fc=5)
    sd = random_state(shapes, 1)
    P.load_torchvision_resnet(net, sd)
    np.testing.assert_array_equal(net.fc.kernel[...], sd["fc.weight"].T)     # (out,in)->(in,out)
    np.testing.assert_array_equal(net.fc.bias[...], sd["fc.bias"])
    np.testing.assert_array_equal(net.layer2[1].conv3.kernel[...],
                                  np.transpose(sd["layer2.1.conv3.weight"], (2, 3, 1, 0)))
    np.testing.assert_array_equal(net.layer2[1].bn3.scale[...], sd["layer2.1.bn3.weight"])

    before = np.asarray(net.conv1.kernel[...])
    bad = dict(sd)
    del bad["layer3.0.bn2.running_var"]
    bad["conv1.weight"] = sd["conv1.weight"] + 1
    with pytest.raises(KeyError, match=r"layer3\.0\.bn2\.running_var"):
        P.load_torchvision_resnet(net, bad)
    np.testing.assert_array_equal(net.conv1.kernel[...], before)   # nothing half-loaded
    bad = dict(sd, **{"layer1.0.conv2.weight": np.zeros((4, 4, 1, 3), np.float32)})
    with pytest.raises(ValueError, match=r"layer1\.0\.conv2\.weight.*\(4, 4, 1, 3\).*"
                                         r"\(4, 4, 3, 3\)"):
        P.load_torchvision_resnet(net, bad)
    bad = dict(sd, **{"fc.weight": sd["fc.weight"].T})            # forgot torch's layout
    with pytest.raises(ValueError, match=r"fc\.weight"):
        P.load_torchvision_resnet(net, bad)
    with pytest.raises(ValueError, match=r"unexpected keys \['layer5\.0\.conv1\.weight'\]"):
        P.load_torchvision_resnet(net, dict(sd, **{"layer5.0.conv1.weight": np.zeros(1)}))
    P.load_torchvision_resnet(net, dict(sd, **{"layer5.0.conv1.weight": np.zeros(1)}),
                              strict=False)
    (tmp_path / "resnet34.pth").write_bytes(b"\x80\x02")
    with pytest.raises(ValueError, match="np.savez"):
        P.load_torchvision_resnet(net, tmp_path / "resnet34.pth")
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        P.load_torchvision_resnet(net, tmp_path / "missing.npz")
    with pytest.raises(TypeError, match="model must be a ResNet"):
        P.load_torchvision_resnet(nnx.Linear(2, 2, rngs=R(0)), sd)


def vit_npz(model: TransUNet, n_pos_tokens: int, seed: int):
    """Random arrays under the official R50+ViT-B_16.npz names (JAX layouts, 3-D heads)."""
    rng = np.random.default_rng(seed)
    d = model.hidden
    r = lambda *s: rng.normal(size=s).astype(np.float32)  # noqa: E731
    w = model.hybrid_model.width
    c_out = model.hybrid_model.out_channels
    sd = {"embedding/kernel": r(1, 1, c_out, d), "embedding/bias": r(d),
          "Transformer/encoder_norm/scale": r(d), "Transformer/encoder_norm/bias": r(d),
          "Transformer/posembed_input/pos_embedding": r(1, n_pos_tokens, d),
          "conv_root/kernel": r(7, 7, 3, w), "gn_root/scale": r(w), "gn_root/bias": r(w),
          "head/kernel": r(d, 3), "cls": r(1, 1, d)}
    for i, blk in enumerate(model.layer):
        h, hd = blk.attn.num_heads, blk.attn.head_dim
        mlp = blk.ffn.fc1.kernel.shape[1]
        root = f"Transformer/encoderblock_{i}/"
        for ln in ("LayerNorm_0", "LayerNorm_2"):
            sd[root + ln + "/scale"], sd[root + ln + "/bias"] = r(d), r(d)
        for nm in ("query", "key", "value"):
            sd[root + f"MultiHeadDotProductAttention_1/{nm}/kernel"] = r(d, h, hd)
            sd[root + f"MultiHeadDotProductAttention_1/{nm}/bias"] = r(h, hd)
        sd[root + "MultiHeadDotProductAttention_1/out/kernel"] = r(h, hd, d)
        sd[root + "MultiHeadDotProductAttention_1/out/bias"] = r(d)
        mb = root + "MlpBlock_3/"
        sd[mb + "Dense_0/kernel"], sd[mb + "Dense_0/bias"] = r(d, mlp), r(mlp)
        sd[mb + "Dense_1/kernel"], sd[mb + "Dense_1/bias"] = r(mlp, d), r(d)
    cin = w
    for s, stage in enumerate(model.hybrid_model.body, start=1):
        cmid, cout = w * 2 ** (s - 1), 4 * w * 2 ** (s - 1)
        for u in range(1, len(stage) + 1):
            p = f"block{s}/unit{u}/"
            sd[p + "conv1/kernel"] = r(1, 1, cin, cmid)
            sd[p + "conv2/kernel"] = r(3, 3, cmid, cmid)
            sd[p + "conv3/kernel"] = r(1, 1, cmid, cout)
            for g, c in (("gn1", cmid), ("gn2", cmid), ("gn3", cout)):
                sd[p + g + "/scale"], sd[p + g + "/bias"] = r(c), r(c)
            if u == 1:
                sd[p + "conv_proj/kernel"] = r(1, 1, cin, cout)
                sd[p + "gn_proj/scale"], sd[p + "gn_proj/bias"] = r(1, 1, 1, cout), r(cout)
            cin = cout
    return sd


def test_vit_loader_roundtrip_and_pos_embedding_resize(tmp_path):
    model = TransUNet.small(4, rngs=R(0))                  # grid 4 x 4, hidden 64
    d = model.hidden
    sd = vit_npz(model, 1 + 8 * 8, seed=2)   # class token + 8 x 8 grid: resized to 4 x 4
    path = tmp_path / "R50+ViT-B_16.npz"
    np.savez(path, **sd)
    dec_before = np.asarray(model.decoder.conv_more.conv.kernel[...])
    res = P.load_r50_vit_b16(model, str(path))
    assert set(res.unused) == {"head/kernel", "cls"}
    b1 = model.layer[1]
    root = "Transformer/encoderblock_1/MultiHeadDotProductAttention_1/"
    np.testing.assert_array_equal(b1.attn.query.kernel[...],
                                  sd[root + "query/kernel"].reshape(d, d))
    np.testing.assert_array_equal(b1.attn.value.bias[...], sd[root + "value/bias"].reshape(d))
    np.testing.assert_array_equal(b1.attn.out.kernel[...], sd[root + "out/kernel"].reshape(d, d))
    np.testing.assert_array_equal(b1.ffn.fc2.kernel[...],
                                  sd["Transformer/encoderblock_1/MlpBlock_3/Dense_1/kernel"])
    np.testing.assert_array_equal(b1.ffn_norm.scale[...],
                                  sd["Transformer/encoderblock_1/LayerNorm_2/scale"])
    np.testing.assert_array_equal(model.patch_embeddings.kernel[...], sd["embedding/kernel"])
    r50 = model.hybrid_model
    np.testing.assert_array_equal(r50.root_conv.kernel[...], sd["conv_root/kernel"])
    np.testing.assert_array_equal(r50.body[2][0].conv2.kernel[...],
                                  sd["block3/unit1/conv2/kernel"])
    np.testing.assert_array_equal(r50.body[1][0].gn_proj.scale[...],
                                  sd["block2/unit1/gn_proj/scale"].reshape(-1))
    # position embeddings: class token dropped, 8x8 grid zoomed (order 1) to 4x4
    grid = sd["Transformer/posembed_input/pos_embedding"][0, 1:].reshape(8, 8, d)
    ref = scipy.ndimage.zoom(grid.astype(np.float64), (0.5, 0.5, 1), order=1).reshape(1, 16, d)
    np.testing.assert_allclose(model.position_embeddings[...], ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(model.decoder.conv_more.conv.kernel[...], dec_before)
    # 224-style table with one class token and the model's grid: the token is dropped
    pe = np.random.default_rng(0).normal(size=(1, 17, d))
    np.testing.assert_array_equal(P.resize_pos_embedding(pe, 16), pe[:, 1:])
    assert P.resize_pos_embedding(np.zeros((1, 197, 3)), 16 * 16).shape == (1, 256, 3)

    # errors name the key
    bad = {k: v for k, v in sd.items() if k != "block2/unit1/gn3/bias"}
    with pytest.raises(KeyError, match="block2/unit1/gn3/bias"):
        P.load_r50_vit_b16(model, bad)
    k = "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/key/kernel"
    bad = dict(sd, **{k: np.zeros((d, 4, 16), np.float32)})
    with pytest.raises(ValueError, match=k + r".*\(64, 4, 16\)"):
        P.load_r50_vit_b16(model, bad)
    bad = dict(sd, **{"Transformer/posembed_input/pos_embedding": np.zeros((1, 20, d))})
    with pytest.raises(ValueError, match="pos_embedding"):
        P.load_r50_vit_b16(model, bad)
    with pytest.raises(TypeError, match="TransUNet"):
        P.load_r50_vit_b16(nnx.Linear(2, 2, rngs=R(0)), sd)


# ----------------------------------------------------------------------------------------------
# validation
# ----------------------------------------------------------------------------------------------
def test_bad_inputs_raise_clear_errors():
    r = R(0)
    unet = nnx.eval_shape(lambda: UNetResNet34.small(2, rngs=R(0)))
    tu = nnx.eval_shape(lambda: TransUNet.small(2, rngs=R(0)))
    with pytest.raises(ValueError, match="divisible by 32"):
        unet(jnp.zeros((1, 48, 64, 1)))
    with pytest.raises(ValueError, match="1 channels"):
        unet(jnp.zeros((1, 64, 64, 3)))
    with pytest.raises(ValueError, match="rank 4"):
        unet(jnp.zeros((64, 64, 1)))
    with pytest.raises(TypeError, match="floating"):
        unet(jnp.zeros((1, 64, 64, 1), jnp.int32))
    with pytest.raises(ValueError, match="64 x 64"):
        tu(jnp.zeros((1, 96, 96, 1)))
    with pytest.raises(ValueError, match="num_classes must be >= 1"):
        UNetResNet34(0, rngs=r)
    with pytest.raises(ValueError, match="decoder_channels must have 5"):
        UNetResNet34(2, decoder_channels=(8, 8, 8, 8), rngs=r)
    with pytest.raises(ValueError, match="depths must have 4"):
        UNetResNet34(2, depths=(1, 1, 1), rngs=r)
    with pytest.raises(TypeError, match="rngs"):
        UNetResNet34(2, rngs=0)
    with pytest.raises(ValueError, match="img_size must be divisible by 16"):
        TransUNet(2, img_size=200, rngs=r)
    with pytest.raises(ValueError, match="num_heads must divide hidden"):
        TransUNet(2, hidden=64, num_heads=5, rngs=r)
    with pytest.raises(ValueError, match="width must be divisible by 32"):
        TransUNet(2, width=48, rngs=r)
    with pytest.raises(ValueError, match="n_skip must be <= 3"):
        TransUNet(2, n_skip=4, rngs=r)
    with pytest.raises(ValueError, match="dropout_rate"):
        TransUNet(2, dropout_rate=1.5, rngs=r)
    with pytest.raises(ValueError, match="block must be"):
        ResNet("wide", (1, 1, 1, 1), rngs=r)


def test_conv_options_reject_bad_values_and_keep_the_layer():
    """0.3: conv2d's padding, bias and initializers live on a frozen ConvOptions."""
    from rdr_jax.models.resnet import ConvOptions, conv2d
    with pytest.raises(ValueError, match="padding must be >= 0"):
        ConvOptions(padding=-1)
    with pytest.raises(TypeError, match="use_bias must be a bool"):
        ConvOptions(use_bias=1)
    with pytest.raises(TypeError, match="kernel_init must be an initializer"):
        ConvOptions(kernel_init="kaiming")
    with pytest.raises(TypeError, match="bias_init must be an initializer"):
        ConvOptions(bias_init=0.0)
    with pytest.raises(TypeError, match="options must be a ConvOptions"):
        conv2d(3, 4, 3, options={"padding": 0}, rngs=nnx.Rngs(0))
    c = conv2d(3, 4, 7, 2, options=ConvOptions(padding=3, use_bias=True), rngs=nnx.Rngs(0))
    assert c.padding == ((3, 3), (3, 3)) and c.bias is not None
    assert ConvOptions() == ConvOptions(None, False)
