"""Tests for rdr_jax.dac.randaugment (the 14-op RandAugment of thesis App. ``apdx:exp_detail``).

References: PIL (``ImageOps``, ``ImageEnhance``, ``Image.transform``/``rotate``, the calls
made by kekmodel/FixMatch-pytorch ``dataset/randaugment.py``) on uint8 test images, compared
in uint8 levels (our output x 255). Tolerances: exact (up to float rounding, 1e-3 levels) for
the ops whose PIL result is a lookup or a pixel copy (equalize, posterize, solarize, rotate,
shear, translate); for the others PIL rounds/truncates intermediate and final values to uint8
and we do not: brightness and autocontrast truncate once (< 1 level); color and sharpness
also round their degenerate image (< 0.5 |1 - f| + 1 <= 1.5 levels for f in [0, 2]);
contrast rounds the per-pixel luma and the mean (< |1 - f| + 1 <= 2 levels).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageEnhance, ImageOps

from rdr_jax.dac import randaugment as ra

SLACK = 1e-3  # float rounding, in uint8 levels


def _images():
    """One shape (few compilations); 21 x 20 makes 90-degree rotations hit exact ties."""
    rng = np.random.default_rng(7)
    yy, xx = np.mgrid[0:21, 0:20]
    return {
        "random": rng.integers(0, 256, (21, 20, 3), dtype=np.uint8),
        "gradient": np.stack([(xx * 11) % 256, (yy * 9) % 256, (xx + yy) * 5], -1).astype(np.uint8),
        "low_contrast": rng.integers(60, 140, (21, 20, 3), dtype=np.uint8),
        "gray": rng.integers(30, 220, (21, 20, 1), dtype=np.uint8),
    }


def _pil(u8):
    return Image.fromarray(u8[..., 0] if u8.shape[-1] == 1 else u8)


def _levels(img):
    a = np.asarray(img, np.float64)
    return a[..., None] if a.ndim == 2 else a


def _fill(u8, level):
    return level if u8.shape[-1] == 1 else (level,) * 3


def _cases():
    """(op name, our call, PIL call, tolerance in levels)."""
    c = [("auto_contrast", lambda x: ra.auto_contrast(x), lambda p, u: ImageOps.autocontrast(p), 1),
         ("equalize", lambda x: ra.equalize(x), lambda p, u: ImageOps.equalize(p), 0)]
    for t in (0, 100, 231, 256):
        c.append((f"solarize{t}", lambda x, t=t: ra.solarize(x, t / 255),
                  lambda p, u, t=t: ImageOps.solarize(p, t), 0))
    for b in (1, 4, 7):
        c.append((f"posterize{b}", lambda x, b=b: ra.posterize(x, b),
                  lambda p, u, b=b: ImageOps.posterize(p, b), 0))
    for f in (0.05, 0.95, 1.8):
        c += [(f"color{f}", lambda x, f=f: ra.color(x, f),
               lambda p, u, f=f: ImageEnhance.Color(p).enhance(f), 1.5),
              (f"contrast{f}", lambda x, f=f: ra.contrast(x, f),
               lambda p, u, f=f: ImageEnhance.Contrast(p).enhance(f), 2),
              (f"brightness{f}", lambda x, f=f: ra.brightness(x, f),
               lambda p, u, f=f: ImageEnhance.Brightness(p).enhance(f), 1),
              (f"sharpness{f}", lambda x, f=f: ra.sharpness(x, f),
               lambda p, u, f=f: ImageEnhance.Sharpness(p).enhance(f), 1.5)]
    for d in (-30, 7, 90):  # PIL default fill (black), as the reference
        c.append((f"rotate{d}", lambda x, d=d: ra.rotate(x, d, fill=0.0),
                  lambda p, u, d=d: p.rotate(d), 0))
    c.append(("rotate_fill", lambda x: ra.rotate(x, 21.0, fill=128 / 255),
              lambda p, u: p.rotate(21.0, fillcolor=_fill(u, 128)), 0))
    for s in (-0.3, 0.21):
        c += [(f"shear_x{s}", lambda x, s=s: ra.shear_x(x, s, fill=128 / 255),
               lambda p, u, s=s: p.transform(p.size, Image.AFFINE, (1, s, 0, 0, 1, 0),
                                             fillcolor=_fill(u, 128)), 0),
              (f"shear_y{s}", lambda x, s=s: ra.shear_y(x, s, fill=0.0),
               lambda p, u, s=s: p.transform(p.size, Image.AFFINE, (1, 0, 0, s, 1, 0)), 0),
              # reference TranslateX/Y: int(v * size) pixels
              (f"translate_x{s}", lambda x, s=s: ra.translate_x(x, s, fill=0.0),
               lambda p, u, s=s: p.transform(p.size, Image.AFFINE,
                                             (1, 0, int(s * p.size[0]), 0, 1, 0)), 0),
              (f"translate_y{s}", lambda x, s=s: ra.translate_y(x, s, fill=1.0),
               lambda p, u, s=s: p.transform(p.size, Image.AFFINE,
                                             (1, 0, 0, 0, 1, int(s * p.size[1])),
                                             fillcolor=_fill(u, 255)), 0)]
    return c


def test_ops_match_pil(dtype):
    worst = {}
    for name, ours, ref, tol in _cases():
        for iname, u8 in _images().items():
            x = jnp.asarray(u8 / 255.0, dtype)
            y = ours(x)
            assert y.shape == x.shape and y.dtype == dtype, (name, iname)
            got = np.asarray(y, np.float64) * 255
            want = _levels(ref(_pil(u8), u8))
            err = np.abs(got - want).max()
            worst[name] = max(worst.get(name, 0.0), err)
            assert err <= tol + SLACK, (name, iname, err)
    # the inexact ops are inexact only by PIL's integer rounding (errors do occur)
    assert worst["brightness0.95"] > 0.1 and worst["equalize"] <= SLACK


def test_equalize_and_autocontrast_degenerate_cases(dtype):
    rng = np.random.default_rng(3)
    small = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)  # 64 px < 255: PIL step == 0
    const = np.full((8, 8, 3), 77, np.uint8)
    two = np.where(rng.random((8, 8, 3)) < 0.5, 10, 200).astype(np.uint8)  # two levels
    for u8 in (small, const, two):
        x = jnp.asarray(u8 / 255.0, dtype)
        np.testing.assert_allclose(np.asarray(ra.equalize(x)) * 255,
                                   _levels(ImageOps.equalize(_pil(u8))), atol=SLACK)
        np.testing.assert_allclose(np.asarray(ra.auto_contrast(x)) * 255,
                                   _levels(ImageOps.autocontrast(_pil(u8))), atol=1 + SLACK)
    xc = jnp.asarray(const / 255.0, dtype)  # one level only: unchanged (PIL: hi <= lo)
    np.testing.assert_array_equal(np.asarray(ra.auto_contrast(xc)), np.asarray(xc))


# ------------------------------------------------------------------ the table
def test_ops_table_follows_thesis_list_and_reference_ranges():
    # thesis App. apdx:exp_detail, in its order
    assert list(ra.OPS) == ["identity", "auto_contrast", "equalize", "rotate", "solarize",
                            "color", "posterize", "contrast", "brightness", "sharpness",
                            "shear_x", "shear_y", "translate_x", "translate_y"]
    # reference fixmatch_augment_pool: (max_v, bias); parameter = m * max_v / 10 + bias
    pool = {"rotate": (30, 0), "color": (0.9, 0.05), "posterize": (4, 4),
            "contrast": (0.9, 0.05), "brightness": (0.9, 0.05), "sharpness": (0.9, 0.05),
            "shear_x": (0.3, 0), "shear_y": (0.3, 0), "translate_x": (0.3, 0),
            "translate_y": (0.3, 0)}
    for name, (max_v, bias) in pool.items():
        fn, lo, hi = ra.OPS[name]
        assert fn is getattr(ra, name)
        assert lo == pytest.approx(bias) and hi == pytest.approx(max_v + bias)
        for m in range(11):
            v = ra.op_value(name, float(m))
            if name in ("posterize", "rotate"):  # reference _int_parameter
                assert int(np.floor(v + 1e-9)) == int(m * max_v / 10) + bias
            else:
                assert v == pytest.approx(m * max_v / 10 + bias)
    for name in ("identity", "auto_contrast", "equalize"):
        assert ra.OPS[name][1:] == (None, None) and ra.op_value(name, 10.0) is None
    assert ra.SIGNED_OPS == {"rotate", "shear_x", "shear_y", "translate_x", "translate_y"}
    # solarize: reference PIL threshold 256 - int(m * 256 / 10); same inverted levels
    ramp = np.arange(256, dtype=np.uint8).reshape(16, 16, 1)
    for m in range(11):
        ours = ra.apply_op("solarize", jnp.asarray(ramp / 255.0), float(m))
        ref = ImageOps.solarize(_pil(ramp), 256 - int(m * 256 / 10))
        np.testing.assert_allclose(np.asarray(ours) * 255, _levels(ref), atol=SLACK)


# ------------------------------------------------------------------ range / identity
def test_every_op_keeps_shape_dtype_range(dtype):
    x = jax.random.uniform(jax.random.key(0), (12, 12, 3), dtype)
    for img in (x, x[..., :1]):
        for m in (0.0, 3.0, 10.0):
            ys = _all_ops(img, m)  # all 14 ops x both signs, jitted once per shape/dtype
            assert ys.shape == (28,) + img.shape and ys.dtype == dtype
            a = np.asarray(ys)
            assert np.all(np.isfinite(a)) and a.min() >= 0 and a.max() <= 1, m


def test_identity_at_zero_magnitude(dtype):
    """m = 0 is the identity for identity/rotate/solarize/shear/translate; with the
    reference ranges it is NOT for posterize (4 bits) and the enhance ops (factor 0.05),
    whose neutral parameters (8 bits, factor 1) are checked instead."""
    u8 = _images()["random"]
    x = jnp.asarray(u8 / 255.0, dtype)
    for name in ("identity", "rotate", "solarize", "shear_x", "shear_y", "translate_x",
                 "translate_y"):
        for sign in (1, -1):
            np.testing.assert_array_equal(np.asarray(ra.apply_op(name, x, 0.0, sign=sign)),
                                          np.asarray(x), err_msg=name)
    for name in ("color", "contrast", "brightness", "sharpness"):
        np.testing.assert_allclose(np.asarray(getattr(ra, name)(x, 1.0)), np.asarray(x),
                                   atol=1e-6, err_msg=name)
        assert np.abs(np.asarray(ra.apply_op(name, x, 0.0)) - np.asarray(x)).max() > 0.1
    eps = float(np.finfo(dtype).eps)  # posterize re-divides the levels by 255
    np.testing.assert_allclose(np.asarray(ra.posterize(x, 8)), np.asarray(x), rtol=0, atol=eps)
    np.testing.assert_allclose(np.asarray(ra.apply_op("posterize", x, 10.0)), np.asarray(x),
                               rtol=0, atol=eps)
    assert np.abs(np.asarray(ra.apply_op("posterize", x, 0.0)) - np.asarray(x)).max() > 0.02


# ------------------------------------------------------------------ RandAugment
def _test_image():
    rng = np.random.default_rng(11)
    return jnp.asarray(rng.integers(50, 180, (12, 12, 3)) / 255.0, jnp.float32)


_NAMES = [(n, s) for n in ra.OPS for s in (1, -1)]


@jax.jit
def _all_ops(x, magnitude):
    """All 28 (op, sign) results of one op at ``magnitude`` (unsigned ops twice)."""
    return jnp.stack([ra.apply_op(n, x, magnitude, sign=s) for n, s in _NAMES])


def _candidates(x, magnitude):
    return _NAMES, _all_ops(x, magnitude)


def test_rand_augment_draws_ops_uniformly_with_random_signs():
    """num_ops = 1 over 700 keys (one vmap): identify the op applied to each image from the
    28 candidate outputs; op frequencies must be uniform over the 14 ops (chi-square) and
    signs fair for the geometric ops (binomial)."""
    from scipy import stats

    x = _test_image()
    m = 7.0  # at 7 all 14 ops give distinct images (at 10 posterize is the identity)
    names, outs = _candidates(x, m)
    flat = np.asarray(outs).reshape(len(names), -1)
    distinct = {tuple(np.round(f, 6)) for f in flat}
    assert len(distinct) == 14 + len(ra.SIGNED_OPS)
    n = 700
    ys = ra.rand_augment_batch(jax.random.key(42), jnp.broadcast_to(x, (n,) + x.shape),
                               num_ops=1, magnitude=m)
    d = np.abs(np.asarray(ys).reshape(n, 1, -1) - flat[None]).max(axis=2)  # (n, 28)
    hit = d.argmin(axis=1)
    assert np.all(d.min(axis=1) < 1e-6)
    ops = np.array([list(ra.OPS).index(names[h][0]) for h in hit])
    counts = np.bincount(ops, minlength=14)
    assert stats.chisquare(counts).pvalue > 1e-3, counts
    signs = np.array([names[h][1] for h in hit])
    geo = np.isin(ops, [list(ra.OPS).index(s) for s in ra.SIGNED_OPS])
    k = int(np.sum(signs[geo] == -1))
    assert stats.binomtest(k, int(geo.sum()), 0.5).pvalue > 1e-3


def test_rand_augment_composes_num_ops_ops_and_is_deterministic_jit_vmap():
    x = _test_image()
    names, outs = _candidates(x, 10.0)
    # every two-op composition: the 28 candidates applied to each of the 28 candidates
    second = jnp.concatenate([_all_ops(o, 10.0) for o in outs])  # reuses the compilation
    flat2 = np.asarray(second).reshape(len(names) ** 2, -1)
    keys = jax.random.split(jax.random.key(0), 6)
    ys = [ra.rand_augment(k, x) for k in keys]  # num_ops=2, magnitude=10 (thesis setting)
    for y in ys:
        assert np.abs(flat2 - np.asarray(y).ravel()).max(axis=1).min() < 1e-6
    # different keys give different op choices; same key, same result
    assert len({tuple(np.round(np.asarray(y).ravel(), 6)) for y in ys}) >= 4
    np.testing.assert_array_equal(np.asarray(ra.rand_augment(keys[0], x)), np.asarray(ys[0]))
    # jit (with a traced magnitude) and vmap agree with the eager call
    jitted = jax.jit(lambda k, img, mag: ra.rand_augment(k, img, 2, mag))
    np.testing.assert_array_equal(np.asarray(jitted(keys[1], x, 10.0)), np.asarray(ys[1]))
    batch = jnp.stack([x, 1 - x, x * 0.5])
    kb = jax.random.key(9)
    yb = ra.rand_augment_batch(kb, batch)
    for i, k in enumerate(jax.random.split(kb, 3)):
        np.testing.assert_array_equal(np.asarray(yb[i]), np.asarray(ra.rand_augment(k, batch[i])))
    yv = jax.vmap(lambda k, img: ra.rand_augment(k, img))(jax.random.split(kb, 3), batch)
    np.testing.assert_array_equal(np.asarray(yv), np.asarray(yb))
    # num_ops = 0 is the identity; legacy uint32 keys are accepted
    np.testing.assert_array_equal(np.asarray(ra.rand_augment(keys[0], x, num_ops=0)), np.asarray(x))
    assert ra.rand_augment(jax.random.PRNGKey(0), x).shape == x.shape


def test_rand_augment_dtypes_and_range(dtype):
    x = jax.random.uniform(jax.random.key(1), (12, 12, 3), dtype)
    for key in range(4):
        y = ra.rand_augment(jax.random.key(key), x)
        assert y.shape == x.shape and y.dtype == dtype
        assert np.asarray(y).min() >= 0 and np.asarray(y).max() <= 1
    if dtype == np.float32:  # one grayscale run (each shape/dtype costs a compilation)
        g = ra.rand_augment(jax.random.key(3), x[..., :1], fill=0.0)
        assert g.shape == (12, 12, 1) and g.dtype == dtype


# ------------------------------------------------------------------ bad inputs
def test_bad_inputs():
    k = jax.random.key(0)
    x = _test_image()
    with pytest.raises(ValueError, match="rank 3"):
        ra.rand_augment(k, x[..., 0])
    with pytest.raises(ValueError, match="rand_augment_batch"):
        ra.rand_augment(k, x[None])
    with pytest.raises(ValueError, match="channels"):
        ra.rand_augment(k, jnp.full((8, 8, 2), 0.5))
    with pytest.raises(ValueError, match="channels"):
        ra.rand_augment(k, jnp.full((3, 8, 8), 0.5))  # CHW by mistake
    with pytest.raises(ValueError, match="channels"):
        ra.rotate(jnp.full((8, 8, 4), 0.5), 10.0)
    with pytest.raises(TypeError, match="float32 or float64"):
        ra.rand_augment(k, jnp.full((8, 8, 3), 128, jnp.uint8))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        ra.rand_augment(k, x * 255)
    with pytest.raises(ValueError, match="num_ops"):
        ra.rand_augment(k, x, num_ops=-1)
    with pytest.raises(TypeError, match="num_ops"):
        ra.rand_augment(k, x, num_ops=1.5)
    with pytest.raises(ValueError, match="magnitude"):
        ra.rand_augment(k, x, magnitude=-0.5)
    with pytest.raises(ValueError, match="magnitude"):
        ra.rand_augment(k, x, magnitude=10.5)
    with pytest.raises(ValueError, match="magnitude"):
        ra.rand_augment(k, x, magnitude=15.0, max_magnitude=12.0)
    with pytest.raises(ValueError, match="max_magnitude"):
        ra.rand_augment(k, x, max_magnitude=0.0)
    with pytest.raises(ValueError, match="fill"):
        ra.rand_augment(k, x, fill=1.5)
    with pytest.raises(TypeError, match="key"):
        ra.rand_augment(0, x)
    with pytest.raises(ValueError, match="rank 4"):
        ra.rand_augment_batch(k, x)
    with pytest.raises(ValueError, match="num_ops"):
        ra.rand_augment_batch(k, x[None], num_ops=-2)
    with pytest.raises(ValueError, match="magnitude"):
        ra.rand_augment_batch(k, x[None], magnitude=11.0)
    with pytest.raises(ValueError, match="name"):
        ra.apply_op("cutout", x, 5.0)
    with pytest.raises(ValueError, match="bits"):
        ra.posterize(x, 0)
    with pytest.raises(ValueError, match="factor"):
        ra.color(x, -0.1)
    # magnitude inside [0, max] is fine at both ends
    assert ra.rand_augment(k, x, magnitude=0.0).shape == x.shape


# --------------------------------------------------------------------------------------
# Cutout (the reference RandAugmentMC's last op, kekmodel/FixMatch-pytorch CutoutAbs)
# --------------------------------------------------------------------------------------
def _box(mask):
    rows, cols = np.flatnonzero(mask.any(1)), np.flatnonzero(mask.any(0))
    return rows.min(), rows.max(), cols.min(), cols.max()


def test_cutout_masks_one_square_as_pil_draws_it(dtype):
    """Each image gets one axis-aligned box equal to PIL's inclusive ``rectangle((x0, y0,
    min(W, x0 + v), min(H, y0 + v)), (127,)*3)`` on the uint8 image (v = 16 for 32 x 32),
    i.e. a (v + 1)-pixel square cut only by the right / bottom border."""
    u8 = np.random.default_rng(3).integers(0, 256, (6, 32, 32, 3), dtype=np.uint8)
    x = jnp.asarray(u8 / 255.0, dtype)
    key = jax.random.key(5)
    y = np.asarray(jax.jit(lambda k, a: ra.cutout_batch(k, a))(key, x))
    assert y.dtype == dtype
    keys = jax.random.split(key, 6)
    v = 16
    for i in range(6):
        np.testing.assert_array_equal(y[i], np.asarray(ra.cutout(keys[i], x[i])))  # vmap = loop
        mask = np.any(y[i] != np.asarray(x[i]), -1)
        y0, y1, x0, x1 = _box(mask)
        assert mask.sum() == (y1 - y0 + 1) * (x1 - x0 + 1)             # one filled box
        assert x1 - x0 + 1 == min(v + 1, 32 - x0) and y1 - y0 + 1 == min(v + 1, 32 - y0)
        ref = _pil(u8[i]).copy()
        ImageDraw.Draw(ref).rectangle((x0, y0, min(32, x0 + v), min(32, y0 + v)), (127,) * 3)
        np.testing.assert_allclose(y[i] * 255, _levels(ref), atol=SLACK)
    np.testing.assert_array_equal(y, np.asarray(ra.cutout_batch(key, x)))   # deterministic
    assert not np.array_equal(y, np.asarray(ra.cutout_batch(jax.random.key(6), x)))


def test_cutout_corner_follows_the_reference_distribution():
    """x0 = floor(max(0, c - v/2)) with c ~ U[0, W): x0 = 0 with probability (v/2 + 1)/W,
    every x0 in 1..W-v/2-1 with probability 1/W (W = 32, v = 16: 9/32 and 1/32, x0 <= 23)."""
    n = 4000
    y = jax.jit(lambda k: ra.cutout_batch(k, jnp.zeros((n, 32, 32, 1))))(jax.random.key(0))
    m = np.asarray(y[..., 0] > 0)
    x0 = np.argmax(m.any(1), axis=1)
    y0 = np.argmax(m.any(2), axis=1)
    for c in (x0, y0):
        counts = np.bincount(c, minlength=32)
        assert counts[24:].sum() == 0 and np.all(counts[:24] > 0)
        p = np.r_[9 / 32, np.full(23, 1 / 32)]
        se = np.sqrt(p * (1 - p) / n)
        assert np.all(np.abs(counts[:24] / n - p) < 5 * se), counts
    np.testing.assert_allclose(np.asarray(y)[m], ra.CUTOUT_FILL, rtol=1e-7)


def test_cutout_bad_inputs():
    x = jnp.zeros((8, 8, 3))
    for bad in (0.0, 1.5, -0.5):
        with pytest.raises(ValueError, match="size must lie in"):
            ra.cutout(jax.random.key(0), x, bad)
    with pytest.raises(TypeError, match="size must be a Python float"):
        ra.cutout(jax.random.key(0), x, "half")
    with pytest.raises(ValueError, match="fill"):
        ra.cutout(jax.random.key(0), x, fill=2.0)
    with pytest.raises(ValueError, match="rank 4"):
        ra.cutout_batch(jax.random.key(0), x)
