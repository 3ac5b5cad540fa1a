"""Tests for rdr_jax.adawac.{data, phantom, augment}: Synapse/ACDC loaders on fixture files
written here in the published formats, the training subsets, the synthetic phantom, and the
two-view augmentation against numpy / scipy.ndimage references."""

import chex
import h5py
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.ndimage
import scipy.stats

from rdr_jax.adawac.augment import (AugmentParams, TwoViews, apply_augmentation, augment,
                                    batch_two_views, sample_augment_params, two_views)
from rdr_jax.adawac.data import (ACDC_CLASSES, SYNAPSE_CLASSES, SYNAPSE_HALF_VOL_CASES,
                                 SegmentationData, SliceDataset, has_foreground, load_acdc,
                                 load_acdc_slices, load_synapse, load_synapse_test,
                                 load_synapse_train, make_subset, select_slices,
                                 slices_from_volumes)
from rdr_jax.adawac.phantom import PhantomOptions, phantom_cases

# ------------------------------------------------------------------ fixtures


def _write_h5(path, image, label):
    with h5py.File(path, "w") as f:
        f.create_dataset("image", data=image)
        f.create_dataset("label", data=label)


@pytest.fixture
def synapse_dir(tmp_path):
    """TransUNet layout: train_npz/caseXXXX_sliceYYY.npz, test_vol_h5/caseXXXX.npy.h5, lists."""
    rng = np.random.default_rng(0)
    root = tmp_path / "Synapse"
    (root / "train_npz").mkdir(parents=True)
    (root / "test_vol_h5").mkdir()
    written = {}
    for case, n in (("case0031", 3), ("case0005", 4)):
        for j in range(n):
            img = rng.random((8, 8)).astype(np.float32)
            lab = rng.integers(0, 9, size=(8, 8)).astype(np.float32)   # TransUNet stores floats
            name = f"{case}_slice{j:03d}"
            np.savez(root / "train_npz" / f"{name}.npz", image=img, label=lab)
            written[name] = (img, lab)
    vols = {}
    for case in ("case0001", "case0002"):
        img = rng.random((3, 8, 8)).astype(np.float32)
        lab = rng.integers(0, 9, size=(3, 8, 8)).astype(np.uint8)
        _write_h5(root / "test_vol_h5" / f"{case}.npy.h5", img, lab)
        vols[case] = (img, lab)
    lists = root / "lists_Synapse"
    lists.mkdir()
    order = ["case0031_slice000", "case0031_slice001", "case0031_slice002",
             "case0005_slice000", "case0005_slice001", "case0005_slice002", "case0005_slice003"]
    (lists / "train.txt").write_text("\n".join(order) + "\n")
    (lists / "test_vol.txt").write_text("case0002\ncase0001\n")
    return root, written, vols, order


@pytest.fixture
def acdc_dir(tmp_path):
    """AdaWAC layout: ACDC_training_slices/*.h5 (different sizes), ACDC_training_volumes/*.h5."""
    rng = np.random.default_rng(1)
    root = tmp_path / "ACDC"
    (root / "ACDC_training_slices").mkdir(parents=True)
    (root / "ACDC_training_volumes").mkdir()
    slices = {}
    for case, shape, n in (("patient001_frame01", (10, 8), 12),
                           ("patient002_frame12", (12, 12), 2)):
        for j in range(n):
            img = rng.random(shape).astype(np.float32)
            lab = rng.integers(0, 4, size=shape).astype(np.uint8)
            _write_h5(root / "ACDC_training_slices" / f"{case}_slice_{j}.h5", img, lab)
            slices[f"{case}_slice_{j}"] = (img, lab)
    vols = {}
    for case in ("patient003_frame01", "patient004_frame01"):
        img = rng.random((4, 9, 7)).astype(np.float32)
        lab = rng.integers(0, 4, size=(4, 9, 7)).astype(np.uint8)
        _write_h5(root / "ACDC_training_volumes" / f"{case}.h5", img, lab)
        vols[case] = (img, lab)
    return root, slices, vols


# ------------------------------------------------------------------ Synapse loaders


def test_load_synapse_roundtrip_with_lists(synapse_dir):
    root, written, vols, order = synapse_dir
    data = load_synapse(root)
    assert isinstance(data, SegmentationData)
    assert data.num_classes == 9 and data.class_names == SYNAPSE_CLASSES and data.val is None
    tr = data.train
    assert isinstance(tr, SliceDataset)
    assert tr.names == tuple(order)                       # list order is kept
    assert tr.images.dtype == np.float32 and tr.labels.dtype == np.uint8
    for i, name in enumerate(order):
        np.testing.assert_array_equal(tr.images[i], written[name][0])
        np.testing.assert_array_equal(tr.labels[i], written[name][1].astype(np.uint8))
    assert tr.case_names == ("case0031", "case0005")
    np.testing.assert_array_equal(tr.case_index, [0, 0, 0, 1, 1, 1, 1])
    np.testing.assert_array_equal(tr.slice_index, [0, 1, 2, 0, 1, 2, 3])
    assert data.test.names == ("case0002", "case0001")
    for img, lab, name in zip(data.test.images, data.test.labels, data.test.names):
        np.testing.assert_array_equal(img, vols[name][0])
        np.testing.assert_array_equal(lab, vols[name][1])


def test_load_synapse_discovery_and_resize(synapse_dir):
    root, written, vols, _ = synapse_dir
    tr = load_synapse_train(root / "train_npz", size=6)   # no list: discover + sort
    assert tr.names == tuple([f"case0005_slice{j:03d}" for j in range(4)]
                             + [f"case0031_slice{j:03d}" for j in range(3)])
    for i, name in enumerate(tr.names):
        img, lab = written[name]
        np.testing.assert_array_equal(tr.images[i],
                                      scipy.ndimage.zoom(img, (0.75, 0.75), order=3))
        np.testing.assert_array_equal(tr.labels[i],
                                      scipy.ndimage.zoom(lab, (0.75, 0.75), order=0))
    te = load_synapse_test(root / "test_vol_h5")
    assert te.names == ("case0001", "case0002")


def test_synapse_missing_and_corrupt_files(synapse_dir, tmp_path):
    root, written, vols, order = synapse_dir
    # a listed slice that is absent: FileNotFoundError naming it
    lst = tmp_path / "train.txt"
    lst.write_text("case0031_slice000\ncase0031_slice009\n")
    with pytest.raises(FileNotFoundError, match="case0031_slice009.npz"):
        load_synapse_train(root / "train_npz", list_file=lst)
    with pytest.raises(FileNotFoundError, match="nothere"):
        load_synapse_train(tmp_path / "nothere")
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        load_synapse_train(root / "train_npz", list_file=tmp_path / "missing.txt")
    # corrupt npz
    bad = root / "train_npz" / "case0031_slice001.npz"
    bad.write_bytes(b"this is not a zip file")
    with pytest.raises(ValueError, match="case0031_slice001.npz"):
        load_synapse(root)
    # npz without 'label'
    np.savez(bad, image=np.zeros((8, 8), np.float32))
    with pytest.raises(ValueError, match=r"case0031_slice001.npz.*missing.*label"):
        load_synapse(root)
    # label out of range (>= 9 classes)
    np.savez(bad, image=np.zeros((8, 8), np.float32), label=np.full((8, 8), 9.0))
    with pytest.raises(ValueError, match=r"case0031_slice001.npz.*\[0, 8\]"):
        load_synapse(root)
    # non-integer label values
    np.savez(bad, image=np.zeros((8, 8), np.float32), label=np.full((8, 8), 0.5))
    with pytest.raises(ValueError, match="integer class ids"):
        load_synapse(root)
    # image / label shape mismatch and a 3-D "slice"
    np.savez(bad, image=np.zeros((8, 8), np.float32), label=np.zeros((8, 7)))
    with pytest.raises(ValueError, match=r"'label' shape \(8, 7\) differs"):
        load_synapse(root)
    np.savez(bad, image=np.zeros((2, 8, 8), np.float32), label=np.zeros((2, 8, 8)))
    with pytest.raises(ValueError, match="2-D slice"):
        load_synapse(root)
    # mixed slice sizes without `size`
    np.savez(bad, image=np.zeros((6, 6), np.float32), label=np.zeros((6, 6)))
    with pytest.raises(ValueError, match="size="):
        load_synapse(root, load_test=False)
    assert load_synapse(root, size=8, load_test=False).train.images.shape == (7, 8, 8)
    # corrupt test volume, and a 2-D "volume"
    badv = root / "test_vol_h5" / "case0001.npy.h5"
    badv.write_bytes(b"\x00garbage")
    with pytest.raises(ValueError, match="case0001.npy.h5"):
        load_synapse_test(root / "test_vol_h5")
    _write_h5(badv, np.zeros((8, 8), np.float32), np.zeros((8, 8), np.uint8))
    with pytest.raises(ValueError, match=r"case0001.npy.h5.*3-D volume"):
        load_synapse_test(root / "test_vol_h5")
    with pytest.raises(ValueError, match="size"):
        load_synapse_train(root / "train_npz", size=(1, 2, 3))
    # a stray file whose name has no slice number
    np.savez(root / "train_npz" / "notes.npz", image=np.zeros((8, 8)), label=np.zeros((8, 8)))
    with pytest.raises(ValueError, match=r"notes.npz.*_slice<number>"):
        load_synapse_train(root / "train_npz")


# ------------------------------------------------------------------ ACDC loaders


def test_load_acdc_roundtrip_lists_and_sizes(acdc_dir):
    root, slices, vols = acdc_dir
    # different slice sizes need `size`
    with pytest.raises(ValueError, match="size="):
        load_acdc_slices(root / "ACDC_training_slices")
    ds = load_acdc_slices(root / "ACDC_training_slices", size=(10, 8))
    # natural sort: slice_2 before slice_10
    first = [n for n in ds.names if n.startswith("patient001")]
    assert first == [f"patient001_frame01_slice_{j}" for j in range(12)]
    assert ds.case_names == ("patient001_frame01", "patient002_frame12")
    for i, name in enumerate(ds.names):
        img, lab = slices[name]
        if img.shape == (10, 8):
            np.testing.assert_array_equal(ds.images[i], img)
            np.testing.assert_array_equal(ds.labels[i], lab)
        else:   # resized, nearest for both by default (the ACDC reference)
            np.testing.assert_array_equal(
                ds.images[i], scipy.ndimage.zoom(img, (10 / 12, 8 / 12), order=0))
            np.testing.assert_array_equal(
                ds.labels[i], scipy.ndimage.zoom(lab, (10 / 12, 8 / 12), order=0))
    # with lists: train subset, val / test volumes
    lists = root / "lists_ACDC"
    lists.mkdir()
    (lists / "train.txt").write_text("patient001_frame01_slice_3\npatient001_frame01_slice_0\n")
    (lists / "val.txt").write_text("patient004_frame01\n")
    (lists / "test.txt").write_text("patient003_frame01\n")
    data = load_acdc(root)
    assert data.num_classes == 4 and data.class_names == ACDC_CLASSES
    assert data.train.names == ("patient001_frame01_slice_3", "patient001_frame01_slice_0")
    np.testing.assert_array_equal(data.train.slice_index, [3, 0])
    np.testing.assert_array_equal(data.train.images[0], slices["patient001_frame01_slice_3"][0])
    assert data.val.names == ("patient004_frame01",)
    np.testing.assert_array_equal(data.val.images[0], vols["patient004_frame01"][0])
    np.testing.assert_array_equal(data.test.labels[0], vols["patient003_frame01"][1])


def test_acdc_bad_files(acdc_dir):
    root, _, _ = acdc_dir
    bad = root / "ACDC_training_slices" / "patient002_frame12_slice_1.h5"
    _write_h5(bad, np.zeros((12, 12), np.float32), np.full((12, 12), 4, np.uint8))
    with pytest.raises(ValueError, match=r"patient002_frame12_slice_1.h5.*\[0, 3\]"):
        load_acdc_slices(root / "ACDC_training_slices", size=8)
    with h5py.File(bad, "w") as f:
        f.create_dataset("image", data=np.zeros((12, 12), np.float32))
    with pytest.raises(ValueError, match=r"patient002_frame12_slice_1.h5.*missing.*label"):
        load_acdc_slices(root / "ACDC_training_slices", size=8)
    _write_h5(bad, np.full((12, 12), np.nan, np.float32), np.zeros((12, 12), np.uint8))
    with pytest.raises(ValueError, match="non-finite"):
        load_acdc_slices(root / "ACDC_training_slices", size=8)


# ------------------------------------------------------------------ subsets


def _toy_slices():
    lens = {"case0005": 5, "case0007": 6, "case0009": 7, "case0010": 4}
    imgs, labs = [], []
    for v, n in enumerate(lens.values()):
        img = np.arange(n * 4, dtype=np.float32).reshape(n, 2, 2) + 100 * v
        lab = np.zeros((n, 2, 2), np.uint8)
        lab[1:-1, 0, 0] = 1 + v
        imgs.append(img)
        labs.append(lab)
    return slices_from_volumes(imgs, labs, list(lens)), lens


def test_subsets_select_the_right_slices():
    ds, lens = _toy_slices()
    full = make_subset(ds, "full")
    np.testing.assert_array_equal(full.images, ds.images)
    hs = make_subset(ds, "half-slice")
    assert all(j % 2 == 0 for j in hs.slice_index)
    assert len(hs.names) == sum((n + 1) // 2 for n in lens.values())
    hsp = make_subset(ds, "half_sparse")
    expect = [f"{c}_slice{j:03d}" for c, n in lens.items() for j in range((n + 1) // 2)]
    assert list(hsp.names) == expect
    hv = make_subset(ds, "half-vol")
    assert hv.case_names == ("case0005", "case0007")
    np.testing.assert_array_equal(hv.case_index, [0] * 5 + [1] * 6)
    np.testing.assert_array_equal(hv.images, ds.images[:11])
    hv2 = make_subset(ds, "half-vol", cases=["case0009", "case0005"])
    assert hv2.case_names == ("case0005", "case0009")
    assert set(hv2.names) == {n for n in ds.names if n[:8] in ("case0005", "case0009")}
    # the authors' 9 cases are a valid `cases` argument when present
    assert len(SYNAPSE_HALF_VOL_CASES) == 9 and "case0005" in SYNAPSE_HALF_VOL_CASES
    # has_foreground / select_slices
    fg = has_foreground(ds)
    np.testing.assert_array_equal(fg, ds.labels.reshape(len(fg), -1).max(1) > 0)
    sel = select_slices(ds, fg)
    assert len(sel.names) == int(fg.sum()) and sel.labels.max(axis=(1, 2)).min() > 0


def test_subset_bad_inputs():
    ds, _ = _toy_slices()
    with pytest.raises(ValueError, match="kind must be one of"):
        make_subset(ds, "quarter")
    with pytest.raises(TypeError, match="kind"):
        make_subset(ds, 3)
    with pytest.raises(ValueError, match="only used by kind='half-vol'"):
        make_subset(ds, "full", cases=["case0005"])
    with pytest.raises(ValueError, match="not in the dataset"):
        make_subset(ds, "half-vol", cases=["case9999"])
    with pytest.raises(ValueError, match="indices"):
        select_slices(ds, [100])
    with pytest.raises(ValueError, match="equal length"):
        slices_from_volumes([np.zeros((2, 2, 2))], [], ["a"])


# ------------------------------------------------------------------ phantom


def test_phantom_structure_and_determinism():
    d = phantom_cases(jax.random.key(0), 6, 32, 48, num_test_cases=2)
    d_again = phantom_cases(jax.random.key(0), 6, 32, 48, num_test_cases=2)
    d_other = phantom_cases(jax.random.key(1), 6, 32, 48, num_test_cases=2)
    np.testing.assert_array_equal(d.train.images, d_again.train.images)
    np.testing.assert_array_equal(d.train.labels, d_again.train.labels)
    np.testing.assert_array_equal(d.test.images[1], d_again.test.images[1])
    assert not np.array_equal(d.train.labels, d_other.train.labels)
    assert np.abs(d.train.images - d_other.train.images).mean() > 0.01

    tr = d.train
    assert tr.images.shape == (6 * 32, 48, 48) and tr.images.dtype == np.float32
    assert tr.images.min() >= 0.0 and tr.images.max() <= 1.0
    assert d.num_classes == 9 and len(d.test.names) == 2
    empty_frac, low_empty, top_empty = [], [], []
    for dd in (d, d_other):
        t = dd.train
        assert set(np.unique(t.labels)) == set(range(9))
        assert set(np.unique(np.concatenate([v.ravel() for v in dd.test.labels]))) == set(range(9))
        fg = has_foreground(t)
        for c in range(len(t.case_names)):
            f = fg[t.case_index == c]
            empty_frac.append(1.0 - f.mean())
            low_empty.append(1.0 - f[:5].mean())    # 5 slices at the inferior end
            top_empty.append(not f[-1])             # the slice at the superior end
            run = np.flatnonzero(f)
            assert f[run[0]:run[-1] + 1].all()       # empty slices only before / after the run
    # a sizeable share of label-empty slices, at the ends, varying between cases
    assert 0.2 <= np.mean(empty_frac) <= 0.5
    assert np.mean(low_empty) >= 0.9 and np.mean(top_empty) >= 0.6
    assert np.std(empty_frac) > 0.05
    # intensities: organ-specific means in the CT-like order (aorta, kidneys > liver > bg)
    means = [tr.images[tr.labels == k].mean() for k in range(9)]
    assert means[1] > means[3] > means[5] > means[0]
    assert abs(means[3] - means[4]) < 0.05
    # the organs sit in visceral fat with bowel loops, not in uniform soft tissue: most
    # background pixels are air or fat (< 0.15 after the TransUNet window), while a tenth or
    # more are soft-tissue bright (bowel, muscular wall), so background is not one intensity
    bg = tr.images[tr.labels == 0]
    assert np.mean(bg < 0.15) > 0.5 and np.mean(bg > 0.3) > 0.1


def test_phantom_half_sparse_is_label_sparse():
    """Slice 0 is the inferior end and the organ block sits in the upper part, so the
    thesis' half-sparse subset (first half of every case) is mostly label-sparse."""
    d = phantom_cases(jax.random.key(0), 8, 16, 32, num_test_cases=0)
    full, half = d.train, make_subset(d.train, "half-sparse")

    def dense_share(ds):
        return np.mean((ds.labels > 0).reshape(len(ds.labels), -1).mean(1) >= 0.01)

    assert dense_share(half) < 0.5 * dense_share(full)
    assert (half.labels > 0).mean() < 0.3 * (full.labels > 0).mean()
    # the liver (superior) lies above the kidneys (inferior) along the slice index
    z = np.arange(16)
    lab = full.labels[full.case_index == 0]
    mean_z = {k: (z[:, None, None] * (lab == k)).sum() / (lab == k).sum() for k in (3, 4, 5)}
    assert mean_z[5] > max(mean_z[3], mean_z[4])


def test_phantom_bad_inputs():
    with pytest.raises(ValueError, match="num_cases"):
        phantom_cases(jax.random.key(0), 0, 8, 16)
    with pytest.raises(TypeError, match="size"):
        phantom_cases(jax.random.key(0), 1, 8, 16.0)
    with pytest.raises(TypeError, match="key"):
        phantom_cases(0, 1, 8, 16)
    with pytest.raises(ValueError, match="noise"):
        PhantomOptions(noise=-1.0)
    with pytest.raises(ValueError, match="z_scale"):
        PhantomOptions(z_scale=(0.9, 0.5))
    with pytest.raises(TypeError, match="z_scale must be a pair"):
        PhantomOptions(z_scale=0.5)
    with pytest.raises(ValueError, match="block_center"):
        PhantomOptions(block_center=1.0)
    with pytest.raises(ValueError, match="bowel_threshold must be finite"):
        PhantomOptions(bowel_threshold=float("nan"))
    with pytest.raises(TypeError, match="options must be a PhantomOptions"):
        phantom_cases(jax.random.key(0), 1, 8, 16, options={"noise": 0.0})
    quiet = PhantomOptions(noise=0.0)
    assert quiet == PhantomOptions(0.35, (0.55, 0.95), 0.6, 0.0) and hash(quiet)


# ------------------------------------------------------------------ augmentation


def _reference(x, rot_flip, k, axis, angle):
    """TransUNet's random_rot_flip / random_rotate with the drawn parameters, in numpy/scipy."""
    if rot_flip:
        return np.flip(np.rot90(x, k), axis=axis)
    return scipy.ndimage.rotate(x, angle, order=0, reshape=False, cval=0)


def _all_params():
    rf = [True] * 8 + [False] * 40
    ks = [k for k in range(4) for _ in range(2)] + [0] * 40
    ax = [a for _ in range(4) for a in range(2)] + [0] * 40
    an = [0] * 8 + list(range(-20, 20))
    return AugmentParams(jnp.array(rf), jnp.array(ks, jnp.int32), jnp.array(ax, jnp.int32),
                         jnp.array(an, jnp.int32))


@pytest.mark.parametrize("n", [16, 17])
def test_apply_matches_numpy_scipy_for_every_transform(dtype, n):
    rng = np.random.default_rng(n)
    x = rng.random((n, n)).astype(dtype)
    y = rng.integers(0, 9, size=(n, n)).astype(np.int32)
    params = _all_params()
    f = jax.jit(jax.vmap(apply_augmentation, in_axes=(0, None, None)))
    xa, ya = f(params, jnp.asarray(x), jnp.asarray(y))
    assert xa.dtype == dtype and ya.dtype == jnp.int32
    xa, ya = np.asarray(xa), np.asarray(ya)
    for t in range(48):
        p = [np.asarray(v[t]).item() for v in params]
        np.testing.assert_array_equal(xa[t], _reference(x, *p), err_msg=f"image, params {p}")
        np.testing.assert_array_equal(ya[t], _reference(y, *p), err_msg=f"label, params {p}")


def test_sampled_params_distribution():
    keys = jax.random.split(jax.random.key(7), 8000)
    p = jax.jit(jax.vmap(sample_augment_params))(keys)
    rf, k, ax, an = (np.asarray(v) for v in p)
    m = len(rf)
    assert abs(rf.mean() - 0.5) < 4 * np.sqrt(0.25 / m)          # P(rot90 + flip) = 1/2
    assert an.min() == -20 and an.max() == 19                      # integers in [-20, 20)
    for vals, lo, hi in ((k, 0, 4), (ax, 0, 2), (an, -20, 20)):
        counts = np.bincount(vals - lo, minlength=hi - lo)
        assert len(counts) == hi - lo
        assert scipy.stats.chisquare(counts).pvalue > 1e-4         # uniform
    # independence of branch and angle
    table = np.array([np.bincount(an[rf == b] + 20, minlength=40) for b in (False, True)])
    assert scipy.stats.chi2_contingency(table).pvalue > 1e-4


def test_two_views_aligned_independent_and_consistent():
    # float32 only: the transform is an exact gather, and dtype preservation in float32 and
    # float64 is covered by test_apply_matches_numpy_scipy_for_every_transform.
    chex.clear_trace_counter()
    dtype = np.dtype(np.float32)
    rng = np.random.default_rng(3)
    b, n = 48, 12
    labels = rng.integers(0, 9, size=(b, n, n)).astype(np.int32)
    images = (labels / 8.0).astype(dtype)        # image encodes its label exactly

    @jax.jit
    @chex.assert_max_traces(n=1)
    def views(key, x, y):
        # the batch API, the sub-keys it uses (split per sample, then per view), the params
        # those sub-keys draw, and the single-slice APIs on sample 0
        sub = jax.vmap(jax.random.split)(jax.random.split(key, x.shape[0]))
        p1 = jax.vmap(sample_augment_params)(sub[:, 0])
        p2 = jax.vmap(sample_augment_params)(sub[:, 1])
        one = two_views(jax.random.split(key, x.shape[0])[0], x[0], y[0])
        aug = augment(sub[0, 1], x[0], y[0])
        return batch_two_views(key, x, y), p1, p2, one, aug

    key = jax.random.key(11)
    v, p1, p2, one, aug = views(key, jnp.asarray(images), jnp.asarray(labels))
    v2 = views(jax.random.key(12), jnp.asarray(images), jnp.asarray(labels))[0]  # no retrace
    assert isinstance(v, TwoViews) and v.image1.dtype == dtype and v.label1.dtype == jnp.int32
    for img, lab in ((v.image1, v.label1), (v.image2, v.label2), (v2.image1, v2.label1)):
        np.testing.assert_array_equal(np.rint(np.asarray(img) * 8).astype(np.int32),
                                      np.asarray(lab))          # fill 0 <-> background 0
    # view j of sample i is the numpy/scipy reference transform with its sub-key's params
    for params, out_img, out_lab in ((p1, v.image1, v.label1), (p2, v.image2, v.label2)):
        params = [np.asarray(t) for t in params]
        for i in range(b):
            p = [t[i].item() for t in params]
            np.testing.assert_array_equal(np.asarray(out_img[i]), _reference(images[i], *p))
            np.testing.assert_array_equal(np.asarray(out_lab[i]), _reference(labels[i], *p))
    # the two views are independent draws: they differ for most samples
    differ = np.any(np.asarray(v.image1) != np.asarray(v.image2), axis=(1, 2))
    assert differ.mean() > 0.8
    # single-slice APIs agree with the batched one
    np.testing.assert_array_equal(np.asarray(one.image2), np.asarray(v.image2[0]))
    np.testing.assert_array_equal(np.asarray(one.label1), np.asarray(v.label1[0]))
    np.testing.assert_array_equal(np.asarray(aug[0]), np.asarray(v.image2[0]))


def test_augment_bad_inputs():
    key = jax.random.key(0)
    x = jnp.zeros((8, 8))
    y = jnp.zeros((8, 8), jnp.int32)
    with pytest.raises(ValueError, match="square"):
        augment(key, jnp.zeros((8, 6)), jnp.zeros((8, 6), jnp.int32))
    with pytest.raises(ValueError, match="label must have the image's shape"):
        augment(key, x, jnp.zeros((8, 7), jnp.int32))
    with pytest.raises(TypeError, match="label must have an integer dtype"):
        augment(key, x, jnp.zeros((8, 8)))
    with pytest.raises(TypeError, match="image must have a floating dtype"):
        augment(key, y, y)
    with pytest.raises(ValueError, match="2-D slice"):
        two_views(key, jnp.zeros((2, 8, 8)), jnp.zeros((2, 8, 8), jnp.int32))
    with pytest.raises(ValueError, match="batch"):
        batch_two_views(key, x, y)
    with pytest.raises(ValueError, match="labels must have the images' shape"):
        batch_two_views(key, jnp.zeros((2, 8, 8)), jnp.zeros((3, 8, 8), jnp.int32))
    with pytest.raises(TypeError, match="key"):
        augment(0, x, y)
    with pytest.raises(ValueError, match="max_angle"):
        augment(key, x, y, max_angle=0)
