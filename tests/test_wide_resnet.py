"""Tests for rdr_jax.models.wide_resnet (WRN-28-2 of the FixMatch PyTorch code, thesis App.
``apdx:exp_detail``).

The forward pass is checked against an independent NumPy transcription of the reference
PyTorch ``BasicBlock.forward`` / ``WideResNet.forward`` (symmetric padding 1, the
activate-before-residual branch, BatchNorm with batch or running statistics); the parameter
count against the reference's layer shapes written out by hand; the initialisation against
the reference's ``kaiming_normal_(fan_out, leaky_relu)`` / ``xavier_normal_`` / BN(1, 0).
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from rdr_jax.models.wide_resnet import BasicBlock, WideResNet

EPS = 1e-5


@pytest.fixture(scope="module")
def wrn28():
    """One WRN-28-2 for 100 classes (building it is the expensive part; shared)."""
    return WideResNet(100, rngs=nnx.Rngs(0))


def _n_params(model) -> int:
    return sum(int(np.size(x)) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


# ------------------------------------------------------------------ architecture / init
def test_param_count_matches_reference_formula(wrn28):
    """Reference shapes: conv3x3(3->16); per group, block 0 = BN(in) + conv3x3(in->out)
    + BN(out) + conv3x3(out->out) + conv1x1(in->out), blocks 1..n-1 = BN(out) + 2 conv3x3 +
    BN(out); final BN(128) and Linear(128 -> 100) with bias. BN has weight and bias."""
    def conv(k, cin, cout):
        return k * k * cin * cout

    def bn(c):
        return 2 * c

    n, ch = 4, [16, 32, 64, 128]
    total = conv(3, 3, 16)
    for cin, cout in zip(ch[:-1], ch[1:]):
        total += bn(cin) + conv(3, cin, cout) + bn(cout) + conv(3, cout, cout) + conv(1, cin, cout)
        total += (n - 1) * (bn(cout) + conv(3, cout, cout) + bn(cout) + conv(3, cout, cout))
    total += bn(128) + 128 * 100 + 100
    assert total == 1_479_220
    assert _n_params(wrn28) == total


def test_output_shapes_and_features(wrn28):
    x = jax.random.uniform(jax.random.key(0), (2, 32, 32, 3))
    wrn28.eval()
    logits = wrn28(x)
    feats = wrn28.features(x)
    assert logits.shape == (2, 100) and feats.shape == (2, 128)
    assert logits.dtype == jnp.float32
    # logits = fc(features)
    np.testing.assert_allclose(np.asarray(wrn28.fc(feats)), np.asarray(logits), rtol=1e-6)
    m = nnx.clone(wrn28)  # keep the shared model's running statistics untouched
    m.train()
    assert m(x).shape == (2, 100)


def test_init_statistics_match_reference(wrn28):
    """kaiming_normal_(mode='fan_out', nonlinearity='leaky_relu', a=0) -> N(0, 2/(k k C_out)),
    untruncated; xavier_normal_ -> N(0, 2/(fan_in+fan_out)); BN weight 1, bias 0, running
    mean 0 / var 1; Linear bias 0."""
    zs = []
    n_conv = 0
    for path, m in nnx.iter_modules(wrn28):
        if isinstance(m, nnx.Conv):
            w = np.asarray(m.kernel[...], np.float64)
            kh, kw, cin, cout = w.shape
            z = w.ravel() / np.sqrt(2.0 / (kh * kw * cout))
            n = z.size
            assert abs(z.mean()) < 5 / np.sqrt(n), path
            assert abs(z.std() - 1) < 5 / np.sqrt(2 * n), path
            assert m.bias is None
            zs.append(z)
            n_conv += 1
        elif isinstance(m, nnx.BatchNorm):
            assert np.all(np.asarray(m.scale[...]) == 1) and np.all(np.asarray(m.bias[...]) == 0)
            assert np.all(np.asarray(m.mean[...]) == 0) and np.all(np.asarray(m.var[...]) == 1)
    assert n_conv == 1 + 3 * (4 * 2 + 1)  # stem + 2 convs per block + 3 shortcuts
    z = np.concatenate(zs)
    # Untruncated normal: P(|z| > 2) = 0.0455 (a truncated normal would give 0) and
    # kurtosis 3; n ~ 1.46e6 so the standard errors are 1.7e-4 and 4e-3.
    assert abs(np.mean(np.abs(z) > 2) - 0.0455) < 1e-3
    assert abs(np.mean(z**4) / np.mean(z**2) ** 2 - 3) < 0.05
    w = np.asarray(wrn28.fc.kernel[...], np.float64)
    assert w.shape == (128, 100)
    zf = w.ravel() / np.sqrt(2.0 / (128 + 100))
    assert abs(zf.std() - 1) < 5 / np.sqrt(2 * zf.size) and abs(zf.mean()) < 5 / np.sqrt(zf.size)
    assert np.mean(np.abs(zf) > 2) > 0.03
    assert np.all(np.asarray(wrn28.fc.bias[...]) == 0)


# ------------------------------------------------------------------ NumPy reference forward
def _np_conv(x, w, stride, pad):
    b, h, wd, _ = x.shape
    k = w.shape[0]
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    ho = (h + 2 * pad - k) // stride + 1
    wo = (wd + 2 * pad - k) // stride + 1
    out = np.zeros((b, ho, wo, w.shape[3]))
    for i in range(k):
        for j in range(k):
            patch = xp[:, i:i + stride * (ho - 1) + 1:stride, j:j + stride * (wo - 1) + 1:stride]
            out += patch @ w[i, j]
    return out


def _np_bn(x, bn, train):
    if train:
        mean, var = x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2))
    else:
        mean, var = np.asarray(bn.mean[...], np.float64), np.asarray(bn.var[...], np.float64)
    return ((x - mean) / np.sqrt(var + EPS) * np.asarray(bn.scale[...], np.float64)
            + np.asarray(bn.bias[...], np.float64))


def _act(x):
    return np.where(x >= 0, x, 0.1 * x)


def _np_block(blk, x, stride, train, equal_in_out, activate_before_residual):
    """Literal transcription of the reference BasicBlock.forward."""
    k = lambda c: np.asarray(c.kernel[...], np.float64)  # noqa: E731
    if not equal_in_out and activate_before_residual:
        x = _act(_np_bn(x, blk.bn1, train))
    else:
        out = _act(_np_bn(x, blk.bn1, train))
    out = _act(_np_bn(_np_conv(out if equal_in_out else x, k(blk.conv1), stride, 1),
                      blk.bn2, train))
    out = _np_conv(out, k(blk.conv2), 1, 1)
    return (x if equal_in_out else _np_conv(x, k(blk.conv_shortcut), stride, 0)) + out


def _np_forward(model, x, train):
    out = _np_conv(x, np.asarray(model.conv1.kernel[...], np.float64), 1, 1)
    for g, (blocks, stride) in enumerate([(model.block1, 1), (model.block2, 2),
                                          (model.block3, 2)]):
        for i, blk in enumerate(blocks):
            out = _np_block(blk, out, stride if i == 0 else 1, train, i > 0, g == 0)
    feats = _act(_np_bn(out, model.bn1, train)).mean(axis=(1, 2))
    logits = (feats @ np.asarray(model.fc.kernel[...], np.float64)
              + np.asarray(model.fc.bias[...], np.float64))
    return feats, logits


def _randomize_bn(model, rng):
    for _, m in nnx.iter_modules(model):
        if isinstance(m, nnx.BatchNorm):
            c = m.scale[...].shape[0]
            dt = m.scale[...].dtype
            m.scale[...] = jnp.asarray(1 + 0.3 * rng.standard_normal(c), dt)
            m.bias[...] = jnp.asarray(0.2 * rng.standard_normal(c), dt)
            m.mean[...] = jnp.asarray(0.2 * rng.standard_normal(c), dt)
            m.var[...] = jnp.asarray(rng.uniform(0.5, 2.0, c), dt)


def test_forward_matches_numpy_reference(dtype, rng):
    """Depth 10 (one block per group, so every block kind and the stride-2 padding appear),
    eval and train mode, float32 and float64 parameters and inputs."""
    model = WideResNet(10, depth=10, widen_factor=2, param_dtype=dtype, rngs=nnx.Rngs(3))
    _randomize_bn(model, rng)
    x = rng.uniform(0, 1, (4, 8, 8, 3))
    xj = jnp.asarray(x, dtype)
    tol = dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)

    model.eval()
    logits = model(xj)
    assert logits.dtype == dtype and logits.shape == (4, 10)
    f_ref, l_ref = _np_forward(model, x, train=False)
    np.testing.assert_allclose(np.asarray(model.features(xj)), f_ref, **tol)
    np.testing.assert_allclose(np.asarray(logits), l_ref, **tol)

    # train mode: batch statistics; running statistics move by bn_momentum = 0.001
    stem = _np_conv(x, np.asarray(model.conv1.kernel[...], np.float64), 1, 1)
    old_mean = np.asarray(model.block1[0].bn1.mean[...], np.float64)
    old_var = np.asarray(model.block1[0].bn1.var[...], np.float64)
    # input of block2[0] (its bn1 is evaluated but unused, as in the reference)
    h1 = _np_block(model.block1[0], stem, 1, True, False, True)
    old_mean2 = np.asarray(model.block2[0].bn1.mean[...], np.float64)
    f_ref, l_ref = _np_forward(model, x, train=True)
    model.train()
    logits = model(xj)
    np.testing.assert_allclose(np.asarray(logits), l_ref, **tol)
    np.testing.assert_allclose(np.asarray(model.block1[0].bn1.mean[...]),
                               0.999 * old_mean + 0.001 * stem.mean(axis=(0, 1, 2)), **tol)
    np.testing.assert_allclose(np.asarray(model.block1[0].bn1.var[...]),
                               0.999 * old_var + 0.001 * stem.var(axis=(0, 1, 2)), **tol)
    np.testing.assert_allclose(np.asarray(model.block2[0].bn1.mean[...]),
                               0.999 * old_mean2 + 0.001 * h1.mean(axis=(0, 1, 2)), **tol)


def test_train_vs_eval_mode(rng):
    model = WideResNet(10, depth=10, widen_factor=2, rngs=nnx.Rngs(1))
    _randomize_bn(model, rng)
    x = jnp.asarray(rng.uniform(0, 1, (4, 8, 8, 3)), jnp.float32)
    x2 = x.at[1:].set(jnp.asarray(rng.uniform(0, 1, (3, 8, 8, 3)), jnp.float32))  # row 0 kept
    def stats():
        return [np.asarray(v) for v in jax.tree.leaves(nnx.state(model, nnx.BatchStat))]
    before = stats()
    model.eval()
    ev, ev2 = np.asarray(model(x)), np.asarray(model(x2))
    # eval: running statistics -> each sample's output ignores the rest of the batch, and
    # the running statistics do not change
    np.testing.assert_allclose(ev2[0], ev[0], rtol=1e-6, atol=1e-6)
    assert np.abs(ev2[1:] - ev[1:]).max() > 1e-3
    assert all(np.array_equal(a, b) for a, b in zip(before, stats()))
    model.train()
    tr, tr2 = np.asarray(model(x)), np.asarray(model(x2))
    # train: batch statistics couple the samples, and the running statistics move
    assert np.abs(tr2[0] - tr[0]).max() > 1e-3
    assert np.abs(tr - ev).max() > 1e-3
    after = stats()
    assert all(not np.array_equal(a, b) for a, b in zip(before, after))


def test_dropout_train_only():
    """Dropout sits inside every block (between act(bn2) and conv2) and is active only in
    training mode. Checked on one block: each activation shape costs a sampler compilation."""
    model = WideResNet(10, depth=10, widen_factor=2, dropout=0.3, rngs=nnx.Rngs(2))
    blocks = [*model.block1, *model.block2, *model.block3]
    assert all(b.dropout is not None and b.dropout.rate == 0.3 for b in blocks)
    assert WideResNet(10, depth=10, rngs=nnx.Rngs(2)).block1[0].dropout is None
    blk = BasicBlock(16, 16, 1, dropout=0.3, rngs=nnx.Rngs(4))
    x = jax.random.normal(jax.random.key(1), (2, 4, 4, 16))
    blk.eval()
    np.testing.assert_array_equal(np.asarray(blk(x)), np.asarray(blk(x)))
    blk.train()
    a, b = np.asarray(blk(x)), np.asarray(blk(x))
    assert np.abs(a - b).max() > 1e-4


def test_jitted_sgd_step_decreases_loss_and_dead_bn_gets_no_gradient():
    model = WideResNet(10, depth=10, widen_factor=2, rngs=nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.sgd(0.03, momentum=0.9), wrt=nnx.Param)
    kx, ky = jax.random.split(jax.random.key(5))
    x = jax.random.uniform(kx, (8, 8, 8, 3))
    y = jax.random.randint(ky, (8,), 0, 10)

    @nnx.jit
    def step(model, opt, x, y):
        def loss_fn(m):
            return optax.softmax_cross_entropy_with_integer_labels(m(x), y).mean()
        loss, grads = nnx.value_and_grad(loss_fn)(model)
        opt.update(model, grads)
        return loss, grads

    model.train()
    losses = []
    for _ in range(6):
        loss, grads = step(model, opt, x, y)
        losses.append(float(loss))
    assert losses[1] < losses[0]
    assert losses[-1] < 0.8 * losses[0]
    assert np.all(np.diff(losses) < 0), losses
    # reference quirk: bn1 of the first block of groups 2 and 3 is not on the data path
    for g in (grads.block2[0].bn1, grads.block3[0].bn1):
        assert np.all(np.asarray(g.scale[...]) == 0) and np.all(np.asarray(g.bias[...]) == 0)
    assert np.abs(np.asarray(grads.block1[0].bn1.scale[...])).max() > 0
    assert np.abs(np.asarray(grads.block2[0].bn2.scale[...])).max() > 0


# ------------------------------------------------------------------ bad inputs
@pytest.mark.parametrize("kwargs, err, match", [
    (dict(num_classes=0), ValueError, "num_classes"),
    (dict(num_classes=10, depth=27), ValueError, "depth"),
    (dict(num_classes=10, depth=4), ValueError, "depth"),
    (dict(num_classes=10, widen_factor=0), ValueError, "widen_factor"),
    (dict(num_classes=10, widen_factor=2.0), TypeError, "widen_factor"),
    (dict(num_classes=10, in_channels=0), ValueError, "in_channels"),
    (dict(num_classes=10, bn_momentum=0.0), ValueError, "bn_momentum"),
    (dict(num_classes=10, bn_momentum=1.5), ValueError, "bn_momentum"),
    (dict(num_classes=10, dropout=1.0), ValueError, "dropout"),
    (dict(num_classes=10, leaky_slope=-0.1), ValueError, "leaky_slope"),
    (dict(num_classes=10, param_dtype=jnp.int32), TypeError, "param_dtype"),
])
def test_bad_constructor_args(kwargs, err, match):
    with pytest.raises(err, match=match):
        WideResNet(rngs=nnx.Rngs(0), **kwargs)


def test_bad_inputs(wrn28):
    wrn28.eval()
    with pytest.raises(ValueError, match="rank 4"):
        wrn28(jnp.zeros((32, 32, 3)))
    with pytest.raises(ValueError, match="3 channels"):
        wrn28(jnp.zeros((2, 32, 32, 1)))
    with pytest.raises(ValueError, match="3 channels"):
        wrn28(jnp.zeros((2, 3, 32, 32)))  # NCHW by mistake
    with pytest.raises(TypeError, match="floating"):
        wrn28.features(jnp.zeros((2, 32, 32, 3), jnp.uint8))
