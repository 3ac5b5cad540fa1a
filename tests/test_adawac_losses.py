"""Tests for rdr_jax.adawac.losses: CE, dice, consistency, WAC objective (eq:objective_wac_dice)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rdr_jax.adawac.losses import (WACAux, WACLossOptions, consistency, cross_entropy, dice_loss,
                                   wac_dice_loss, wac_objective)

B, H, W, C, F = 3, 5, 4, 4, 6


def _rtol(dtype):
    return 2e-5 if np.dtype(dtype) == np.float32 else 1e-12


# ------------------------------------------------------------------ numpy references (float64)


def _ce_np(logits, labels):
    logits = np.asarray(logits, np.float64)
    out = np.zeros(logits.shape[0])
    for b in range(logits.shape[0]):
        x = logits[b].reshape(-1, logits.shape[-1])
        y = np.asarray(labels[b]).reshape(-1)
        m = x.max(axis=1, keepdims=True)
        lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=1))
        out[b] = np.mean(lse - x[np.arange(len(y)), y])
    return out


def _dice_np(logits, labels, smooth=1e-5):
    logits = np.asarray(logits, np.float64)
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    losses = []
    for k in range(logits.shape[-1]):
        pk = p[..., k]
        gk = (np.asarray(labels) == k).astype(np.float64)
        inter = np.sum(pk * gk)
        losses.append(1 - (2 * inter + smooth) / (np.sum(pk * pk) + np.sum(gk * gk) + smooth))
    return np.mean(losses)


def _cons_np(z1, z2, lam):
    d = np.asarray(z1, np.float64) - np.asarray(z2, np.float64)
    return lam * np.mean(d.reshape(d.shape[0], -1) ** 2, axis=1)


def _data(dtype, seed=0):
    rng = np.random.default_rng(seed)
    logits = (3 * rng.normal(size=(B, H, W, C))).astype(dtype)
    labels = rng.integers(0, C, size=(B, H, W)).astype(np.int32)
    labels[0] = 0  # a label-sparse sample (background only)
    z1 = rng.normal(size=(B, 7, F)).astype(dtype)
    z2 = (z1 + 0.3 * rng.normal(size=(B, 7, F))).astype(dtype)
    beta = rng.uniform(0, 1, B).astype(dtype)
    return logits, labels, z1, z2, beta


# ------------------------------------------------------------------ values


def test_cross_entropy_matches_numpy(dtype):
    logits, labels, *_ = _data(dtype)
    ref = _ce_np(logits, labels)
    ce = cross_entropy(jnp.asarray(logits), jnp.asarray(labels))
    assert ce.shape == (B,) and ce.dtype == dtype
    np.testing.assert_allclose(np.asarray(ce), ref, rtol=_rtol(dtype))
    # vmap over a stack of batches, under jit
    stack_l = np.stack([logits, logits[::-1]])
    stack_y = np.stack([labels, labels[::-1]])
    out = jax.jit(jax.vmap(cross_entropy))(jnp.asarray(stack_l), jnp.asarray(stack_y))
    np.testing.assert_allclose(np.asarray(out), np.stack([ref, ref[::-1]]), rtol=_rtol(dtype))


def test_cross_entropy_large_logits_stable():
    logits = jnp.array([[[1000.0, 0.0], [0.0, 1000.0]]], jnp.float32)  # (1, 2, 2)
    labels = jnp.array([[1, 1]])
    np.testing.assert_allclose(np.asarray(cross_entropy(logits, labels)), [500.0], rtol=1e-6)


def test_dice_matches_numpy(dtype):
    logits, labels, *_ = _data(dtype)
    for smooth in (1e-5, 0.5):
        ref = _dice_np(logits, labels, smooth)
        got = jax.jit(dice_loss)(jnp.asarray(logits), jnp.asarray(labels), smooth=smooth)
        assert got.shape == () and got.dtype == dtype
        np.testing.assert_allclose(float(got), ref, rtol=_rtol(dtype))


def test_dice_closed_forms():
    labels = jnp.array([[[0, 1, 2], [2, 2, 0]]])
    perfect = 60.0 * jax.nn.one_hot(labels, 4)  # class 3 absent everywhere
    # softmax mass left on wrong classes is ~e^-60: the loss is ~0, class 3 included (0/0 -> 1)
    assert float(dice_loss(perfect, labels)) == pytest.approx(0.0, abs=1e-6)
    # uniform prediction: p = 1/4 on each of the 6 pixels
    counts = np.array([2, 1, 3, 0])
    ref = np.mean(1 - (2 * counts / 4 + 1e-5) / (6 / 16 + counts + 1e-5))
    assert float(dice_loss(jnp.zeros((1, 2, 3, 4)), labels)) == pytest.approx(ref, rel=1e-6)


def test_consistency_matches_numpy(dtype):
    _, _, z1, z2, _ = _data(dtype)
    got = consistency(jnp.asarray(z1), jnp.asarray(z2), lam=2.0)
    assert got.shape == (B,) and got.dtype == dtype
    np.testing.assert_allclose(np.asarray(got), _cons_np(z1, z2, 2.0), rtol=_rtol(dtype))
    np.testing.assert_allclose(np.asarray(consistency(jnp.asarray(z1), jnp.asarray(z1))), 0.0)


def test_wac_dice_loss_matches_numpy(dtype):
    logits, labels, z1, z2, beta = _data(dtype, seed=1)
    fn = jax.jit(lambda dw, ww, *a: wac_dice_loss(
        *a, options=WACLossOptions(lam=2.0, dice_weight=dw, wac_weight=ww)))
    ce, cons, dice = _ce_np(logits, labels), _cons_np(z1, z2, 2.0), _dice_np(logits, labels)
    for dw, ww in [(0.5, 0.5), (1.0, 1.0)]:  # reference implementation / thesis display
        loss, aux = fn(dw, ww, *map(jnp.asarray, (logits, labels, z1, z2, beta)))
        assert isinstance(aux, WACAux) and loss.shape == ()
        ref = dw * dice + ww * np.mean(beta * ce + (1 - beta) * cons)
        np.testing.assert_allclose(float(loss), ref, rtol=_rtol(dtype))
        np.testing.assert_allclose(np.asarray(aux.ce), ce, rtol=_rtol(dtype))
        np.testing.assert_allclose(np.asarray(aux.cons), cons, rtol=_rtol(dtype))
        np.testing.assert_allclose(float(aux.dice), dice, rtol=_rtol(dtype))
        # the combination from precomputed terms agrees
        comb = wac_objective(aux.dice, aux.ce, aux.cons, jnp.asarray(beta), dice_weight=dw,
                             wac_weight=ww)
        np.testing.assert_allclose(float(comb), float(loss), rtol=_rtol(dtype))


def test_wac_gradients(dtype):
    """d/d beta_i = w (ce_i - cons_i) / B (the beta step's direction); d/d logits by differences."""
    logits, labels, z1, z2, beta = _data(dtype, seed=2)
    args = list(map(jnp.asarray, (logits, labels, z1, z2, beta)))

    @jax.jit
    def f(lg, b):
        return wac_dice_loss(lg, args[1], args[2], args[3], b, options=WACLossOptions(lam=2.0))

    (loss, aux), (g_logits, g_beta) = jax.jit(
        jax.value_and_grad(f, argnums=(0, 1), has_aux=True))(args[0], args[4])
    np.testing.assert_allclose(np.asarray(g_beta), 0.5 * (np.asarray(aux.ce) - aux.cons) / B,
                               rtol=_rtol(dtype), atol=1e-7)
    np.testing.assert_allclose(float(loss), _dice_np(logits, labels) / 2 + np.mean(
        beta * _ce_np(logits, labels) + (1 - beta) * _cons_np(z1, z2, 2.0)) / 2,
        rtol=_rtol(dtype))
    if dtype != np.float64:
        return
    # central differences in float64 along two random directions
    rng = np.random.default_rng(0)
    h = 1e-6
    for _ in range(2):
        v = rng.normal(size=logits.shape)
        fp = float(f(jnp.asarray(logits + h * v), args[4])[0])
        fm = float(f(jnp.asarray(logits - h * v), args[4])[0])
        np.testing.assert_allclose((fp - fm) / (2 * h), np.sum(np.asarray(g_logits) * v),
                                   rtol=1e-6)


def test_bfloat16_inputs_computed_in_float32():
    logits, labels, z1, z2, beta = _data(np.float32, seed=3)
    loss, aux = wac_dice_loss(jnp.asarray(logits, jnp.bfloat16), jnp.asarray(labels),
                              jnp.asarray(z1, jnp.bfloat16), jnp.asarray(z2, jnp.bfloat16),
                              jnp.asarray(beta, jnp.bfloat16), options=WACLossOptions(lam=2.0))
    assert loss.dtype == jnp.float32 and aux.ce.dtype == jnp.float32
    lb = np.asarray(jnp.asarray(logits, jnp.bfloat16), np.float64)
    np.testing.assert_allclose(np.asarray(aux.ce), _ce_np(lb, labels), rtol=1e-5)


def test_out_of_range_labels_inside_jit_give_nan():
    logits, labels, *_ = _data(np.float32)
    labels = labels.copy()
    labels[1, 0, 0] = C  # invalid class id, not checkable under jit
    ce = jax.jit(cross_entropy)(jnp.asarray(logits), jnp.asarray(labels))
    assert np.isnan(float(ce[1])) and np.all(np.isfinite(np.asarray(ce)[[0, 2]]))
    assert np.isnan(float(jax.jit(dice_loss)(jnp.asarray(logits), jnp.asarray(labels))))


# ------------------------------------------------------------------ bad inputs


def test_bad_inputs():
    logits, labels, z1, z2, beta = _data(np.float32)  # numpy inputs are accepted too

    def put(a, index, value):
        a = a.copy()
        a[index] = value
        return a

    with pytest.raises(ValueError, match=r"labels must lie in \[0, C\)"):
        cross_entropy(logits, put(labels, (0, 0, 0), C))
    with pytest.raises(ValueError, match=r"labels must lie in \[0, C\)"):
        dice_loss(logits, put(labels, (0, 0, 0), -1))
    with pytest.raises(ValueError, match=r"labels must lie in"):
        wac_dice_loss(logits, put(labels, (2, 1, 1), C + 3), z1, z2, beta)
    with pytest.raises(TypeError, match="labels must have an integer dtype"):
        cross_entropy(logits, labels.astype(np.float32))
    with pytest.raises(TypeError, match="logits must have a floating dtype"):
        cross_entropy(labels[..., None].repeat(2, -1), labels)
    with pytest.raises(ValueError, match="labels must have shape"):
        cross_entropy(logits, labels[:, :, :-1])
    with pytest.raises(ValueError, match="labels must have shape"):
        dice_loss(logits, labels[:2])
    with pytest.raises(ValueError, match="at least 2 classes"):
        cross_entropy(logits[..., :1], labels * 0)
    with pytest.raises(ValueError, match="non-finite"):
        cross_entropy(put(logits, (0, 0, 0, 0), np.nan), labels)
    with pytest.raises(ValueError, match="z1 and z2 must have the same shape"):
        consistency(z1, z2[:, :-1])
    with pytest.raises(ValueError, match="z1 and z2 must have the same shape"):
        wac_dice_loss(logits, labels, z1, z2[:2], beta)
    with pytest.raises(ValueError, match="batch size"):
        wac_dice_loss(logits, labels, z1[:2], z2[:2], beta)
    with pytest.raises(ValueError, match=r"beta must hold .* shape \(3,\)"):
        wac_dice_loss(logits, labels, z1, z2, beta[:2])
    with pytest.raises(ValueError, match=r"beta must lie in \[0, 1\]"):
        wac_dice_loss(logits, labels, z1, z2, put(beta, 0, 1.5))
    with pytest.raises(ValueError, match="lam must be a finite number >= 0"):
        consistency(z1, z2, lam=-1.0)
    with pytest.raises(ValueError, match="smooth must be"):
        dice_loss(logits, labels, smooth=-1e-5)
    with pytest.raises(ValueError, match="dice_weight must be"):
        WACLossOptions(dice_weight=-0.5)
    with pytest.raises(ValueError, match="lam must be"):
        WACLossOptions(lam=float("inf"))
    with pytest.raises(TypeError, match="smooth must be a real"):
        WACLossOptions(smooth="1e-5")
    with pytest.raises(TypeError, match="options must be a WACLossOptions"):
        wac_dice_loss(logits, labels, z1, z2, beta, options={"lam": 2.0})
    with pytest.raises(ValueError, match="ce and cons must have the same shape"):
        wac_objective(np.float32(0.1), np.ones(3, np.float32), np.ones(2, np.float32), beta)
    with pytest.raises(ValueError, match="dice must be a scalar"):
        wac_objective(np.ones(2, np.float32), np.ones(3, np.float32), np.ones(3, np.float32), beta)
