"""Tests for rdr_jax.adawac.metrics: DSC / HD95 against a brute-force reference, the empty-mask
rules, aggregation, and slice-by-slice volume prediction."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.ndimage
from scipy.spatial.distance import cdist

from rdr_jax.adawac.metrics import (MetricsSummary, VolumeMetrics, aggregate_metrics,
                                    binary_dice_hd95, predict_volume, volume_metrics)


# ------------------------------------------------------------------ independent reference

def _ref_surface(mask):
    """Voxels of ``mask`` with at least one 6-neighbour outside the mask (outside the array
    counts as outside), by explicit shifts of a zero-padded copy."""
    pad = np.pad(mask, 1, constant_values=False)
    interior = np.ones_like(mask)
    core = tuple(slice(1, -1) for _ in range(mask.ndim))
    for ax in range(mask.ndim):
        for step in (-1, 1):
            sl = list(core)
            sl[ax] = slice(1 + step, pad.shape[ax] - 1 + step)
            interior &= pad[tuple(sl)]
    return mask & ~interior


def _ref_dice_hd95(p, g):
    if not p.any() and not g.any():
        return 1.0, 0.0
    if not p.any() or not g.any():
        return 0.0, 0.0
    dice = 2.0 * np.sum(p & g) / (p.sum() + g.sum())
    sp, sg = np.argwhere(_ref_surface(p)), np.argwhere(_ref_surface(g))
    d = cdist(sp, sg)
    pooled = np.concatenate([d.min(axis=1), d.min(axis=0)])
    return dice, float(np.percentile(pooled, 95))


def _random_class_map(rng, shape, num_classes, absent=()):
    """Smooth random blobs: argmax of smoothed noise, with some classes removed."""
    noise = rng.standard_normal((num_classes,) + shape)
    noise = scipy.ndimage.gaussian_filter(noise, sigma=(0, 1.2, 1.2, 1.2))
    noise[0] += 0.3
    out = np.argmax(noise, axis=0)
    for k in absent:
        out[out == k] = 0
    return out


# ------------------------------------------------------------------ DSC / HD95

def test_volume_metrics_match_bruteforce_reference():
    rng = np.random.default_rng(0)
    num_classes = 5
    checked_nonempty = 0
    for trial in range(12):
        shape = tuple(int(s) for s in rng.integers(4, 12, size=3))
        absent_p = tuple(rng.choice(np.arange(1, num_classes), size=trial % 3, replace=False))
        absent_g = tuple(rng.choice(np.arange(1, num_classes), size=(trial // 3) % 2,
                                    replace=False))
        pred = _random_class_map(rng, shape, num_classes, absent_p)
        label = _random_class_map(rng, shape, num_classes, absent_g)
        m = volume_metrics(pred, label, num_classes)
        assert isinstance(m, VolumeMetrics)
        assert m.dice.shape == m.hd95.shape == (num_classes - 1,)
        for k in range(1, num_classes):
            ref = _ref_dice_hd95(pred == k, label == k)
            np.testing.assert_allclose(m.dice[k - 1], ref[0], rtol=1e-12, atol=0)
            np.testing.assert_allclose(m.hd95[k - 1], ref[1], rtol=1e-12, atol=1e-12)
            checked_nonempty += int((pred == k).any() and (label == k).any())
    assert checked_nonempty >= 20   # most comparisons exercise the surface-distance path


def test_hd95_known_values_and_border_voxels():
    # Two single voxels 3 apart along a row: surfaces are the voxels themselves.
    p = np.zeros((1, 1, 8), bool); p[0, 0, 1] = True
    g = np.zeros((1, 1, 8), bool); g[0, 0, 4] = True
    assert binary_dice_hd95(p, g) == (0.0, 3.0)
    # A mask filling the whole array: every voxel lies on the surface (zero border).
    full = np.ones((3, 4, 5), bool)
    part = np.zeros_like(full); part[:, :2, :] = True
    dice, hd = binary_dice_hd95(full, part)
    rd, rh = _ref_dice_hd95(full, part)
    assert dice == pytest.approx(rd, rel=1e-14) and hd == pytest.approx(rh, rel=1e-14)
    assert dice == pytest.approx(2 * 30 / (60 + 30))
    # Identical masks: DSC 1, HD95 0.
    assert binary_dice_hd95(part, part) == (1.0, 0.0)


def test_empty_mask_rules():
    z = np.zeros((2, 5, 5), int)
    one = z.copy(); one[1, 2, 2] = 1
    # both empty -> (1, 0); prediction empty -> (0, 0); label empty -> (0, 0)
    m = volume_metrics(z, z, 3)
    np.testing.assert_array_equal(m.dice, [1.0, 1.0]); np.testing.assert_array_equal(m.hd95, 0)
    m = volume_metrics(z, one, 3)
    np.testing.assert_array_equal(m.dice, [0.0, 1.0]); np.testing.assert_array_equal(m.hd95, 0)
    m = volume_metrics(one, z, 3)
    np.testing.assert_array_equal(m.dice, [0.0, 1.0]); np.testing.assert_array_equal(m.hd95, 0)


def test_float_integer_valued_inputs_accepted():
    rng = np.random.default_rng(3)
    pred = _random_class_map(rng, (4, 6, 6), 3)
    label = _random_class_map(rng, (4, 6, 6), 3)
    a = volume_metrics(pred, label, 3)
    b = volume_metrics(pred.astype(np.float32), label.astype(np.uint8), 3)
    np.testing.assert_array_equal(a.dice, b.dice)
    np.testing.assert_array_equal(a.hd95, b.hd95)


def test_aggregate_metrics_volumes_then_classes():
    m1 = VolumeMetrics(np.array([1.0, 0.5, 0.0]), np.array([0.0, 2.0, 6.0]))
    m2 = VolumeMetrics(np.array([0.5, 0.5, 1.0]), np.array([4.0, 2.0, 0.0]))
    s = aggregate_metrics([m1, m2])
    assert isinstance(s, MetricsSummary)
    np.testing.assert_allclose(s.per_class_dice, [0.75, 0.5, 0.5])
    np.testing.assert_allclose(s.per_class_hd95, [2.0, 2.0, 3.0])
    assert s.dice == pytest.approx(1.75 / 3) and s.hd95 == pytest.approx(7.0 / 3)


# ------------------------------------------------------------------ predict_volume

def test_predict_volume_resize_matches_manual_pipeline(dtype):
    rng = np.random.default_rng(1)
    vol = rng.random((5, 20, 20))
    chex.clear_trace_counter()

    def score_fn(x, xp):
        # class 2 for x < 0.35, class 1 for x > 0.65, class 0 in between
        return xp.stack([0.3 - xp.abs(x - 0.5), x - 0.5, 0.5 - x], axis=-1)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def scores(x):
        return score_fn(jnp.asarray(x, dtype), jnp)

    pred = predict_volume(scores, vol, batch_size=2, input_size=16)
    assert pred.shape == vol.shape and pred.dtype == np.int32
    # manual reference: cubic zoom to 16, argmax, nearest zoom back
    ref = []
    for x in vol:
        xs = scipy.ndimage.zoom(x, (16 / 20, 16 / 20), order=3).astype(np.float32)
        xs = xs.astype(dtype)
        s = score_fn(xs, np)
        ref.append(scipy.ndimage.zoom(np.argmax(s, -1), (20 / 16, 20 / 16), order=0))
    np.testing.assert_array_equal(pred, np.stack(ref))
    assert len(np.unique(pred)) == 3


def test_predict_volume_batches_are_padded_and_labels_pass_through():
    vol = np.random.default_rng(2).random((7, 6, 6))
    seen = []

    def fn(x):
        seen.append(x.shape)
        return (x > 0.5).astype(np.int64)

    pred = predict_volume(fn, vol, batch_size=3)
    assert seen == [(3, 6, 6)] * 3
    np.testing.assert_array_equal(pred, vol > 0.5)


def test_predict_volume_bad_inputs():
    vol = np.zeros((2, 4, 4))
    with pytest.raises(ValueError, match="volume"):
        predict_volume(lambda x: x, np.zeros((4, 4)), 1)
    with pytest.raises(ValueError, match="batch_size"):
        predict_volume(lambda x: x, vol, 0)
    with pytest.raises(ValueError, match="predict_fn"):
        predict_volume(lambda x: np.zeros((1, 2)), vol, 1)
    with pytest.raises(ValueError, match="input_size"):
        predict_volume(lambda x: x, vol, 1, input_size=(1, 2, 3))


# ------------------------------------------------------------------ bad inputs

def test_volume_metrics_bad_inputs():
    ok = np.zeros((2, 3, 3), int)
    with pytest.raises(ValueError, match="pred and label must have the same shape"):
        volume_metrics(ok, np.zeros((2, 3, 4), int), 3)
    with pytest.raises(ValueError, match="pred must be one 3-D volume"):
        volume_metrics(np.zeros((3, 3), int), np.zeros((3, 3), int), 3)
    bad = ok.copy(); bad[0, 0, 0] = 3
    with pytest.raises(ValueError, match=r"label values must lie in \[0, num_classes - 1\]"):
        volume_metrics(ok, bad, 3)
    with pytest.raises(ValueError, match="pred values"):
        volume_metrics(ok - 1, ok, 3)
    with pytest.raises(ValueError, match="integer class ids"):
        volume_metrics(ok + 0.5, ok, 3)
    with pytest.raises(ValueError, match="num_classes must be >= 2"):
        volume_metrics(ok, ok, 1)
    with pytest.raises(TypeError, match="num_classes"):
        volume_metrics(ok, ok, 3.0)
    with pytest.raises(TypeError, match="pred must be an integer class map"):
        volume_metrics(ok.astype(bool), ok, 3)
    with pytest.raises(ValueError, match="pred_mask and label_mask"):
        binary_dice_hd95(np.zeros((2, 2), bool), np.zeros((2, 3), bool))
    with pytest.raises(ValueError, match="at least one"):
        aggregate_metrics([])
    with pytest.raises(ValueError, match="same number of classes"):
        aggregate_metrics([VolumeMetrics(np.zeros(2), np.zeros(2)),
                           VolumeMetrics(np.zeros(3), np.zeros(3))])
    with pytest.raises(TypeError, match="VolumeMetrics"):
        aggregate_metrics([(np.zeros(2), np.zeros(2))])
