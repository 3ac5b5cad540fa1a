"""rdr_jax.datasets.load_lfw_subset: scikit-image's 200-image LFW subset as an offline,
labelled substitute for YaleFace, scaled as load_yaleface scales; a clear error without
scikit-image; fig_rand_err_rank swaps it in for YaleFace when YaleFace's file is absent."""

from __future__ import annotations

import argparse
import importlib.util

import jax
import numpy as np
import pytest

from rdr_jax import datasets

HAVE_SKIMAGE = importlib.util.find_spec("skimage") is not None
needs_skimage = pytest.mark.skipif(not HAVE_SKIMAGE, reason="scikit-image is not installed")


def _hide_skimage(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(datasets.importlib.util, "find_spec",
                        lambda name, *a, **k: None if name == "skimage" else real(name, *a, **k))


@needs_skimage
def test_lfw_subset_matrix_scaling_and_labels():
    raw = np.load(datasets.lfw_subset_path())
    assert raw.shape == (200, 25, 25)
    X, y = datasets.load_lfw_subset(return_labels=True)
    assert X.shape == (200, 625) and X.dtype == np.float64
    assert y.tolist() == [1] * 100 + [0] * 100           # faces first, then non-faces
    # the YaleFace preprocessing: each row divided by its maximum, then the columns centred
    R = raw.reshape(200, -1).astype(np.float64)
    R = R / R.max(axis=1, keepdims=True)
    np.testing.assert_allclose(X, R - R.mean(axis=0), rtol=0, atol=1e-15)
    np.testing.assert_allclose(X.mean(axis=0), 0.0, atol=1e-14)
    assert -1.0 <= X.min() and X.max() <= 1.0
    # real images, not a low-rank toy: full numerical rank after centring (200 - 1)
    s = np.linalg.svd(X, compute_uv=False)
    assert int(np.sum(s > s[0] * 1e-10)) == 199
    raw_X = datasets.load_lfw_subset(preprocess=False)
    np.testing.assert_array_equal(raw_X, raw.reshape(200, -1))
    # the same array scikit-image's own accessor returns (no download involved)
    import skimage.data
    np.testing.assert_array_equal(raw, skimage.data.lfw_subset())


def test_lfw_subset_without_scikit_image_names_pip_install(monkeypatch):
    _hide_skimage(monkeypatch)
    with pytest.raises(ModuleNotFoundError, match="pip install scikit-image"):
        datasets.load_lfw_subset()
    with pytest.raises(ModuleNotFoundError, match="pip install scikit-image"):
        datasets.lfw_subset_path()


def test_lfw_subset_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="pip install scikit-image"):
        datasets.load_lfw_subset(path=tmp_path / "missing.npy")
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((10, 25, 25)))
    with pytest.raises(ValueError, match=r"shape \(10, 25, 25\)"):
        datasets.load_lfw_subset(path=bad)
    nan = tmp_path / "nan.npy"
    a = np.zeros((200, 25, 25))
    a[3, 4, 5] = np.nan
    np.save(nan, a)
    with pytest.raises(ValueError, match="NaN|finite"):
        datasets.load_lfw_subset(path=nan)


def _args(**kw):
    base = dict(dataset=None, exclude_dataset=[], quick=False)
    base.update(kw)
    return argparse.Namespace(**base)


def test_fig_rand_err_rank_swaps_lfw_for_missing_yaleface(script, tmp_path):
    mod = script("fig_rand_err_rank")
    empty = tmp_path / "no-data"
    empty.mkdir()
    # full default: YaleFace's file is absent -> lfw; snn1e6 left out with its measured cost
    names, skipped, subs = mod.select_datasets(_args(), empty)
    assert names == ["snn1e3", "digits", "lfw", "mnist", "large"]
    assert subs == {"yaleface": "lfw"} and set(skipped) == {"snn1e6"}
    why = skipped["snn1e6"]
    assert "--dataset snn1e6" in why and "s for one rank" in why
    assert f"{mod.SNN1E6_MEASURED['s_per_rank']:.0f} s" in why
    # the lead's split: MNIST runs as a job of its own
    names, skipped, _ = mod.select_datasets(_args(exclude_dataset=["mnist"]), empty)
    assert names == ["snn1e3", "digits", "lfw", "large"]
    # explicit requests; no double run of the substitute
    names, _, subs = mod.select_datasets(_args(dataset=["yaleface", "lfw"]), empty)
    assert names == ["lfw"] and subs == {"yaleface": "lfw"}
    names, skipped, _ = mod.select_datasets(_args(dataset=["yaleface"],
                                                  exclude_dataset=["lfw"]), empty)
    assert names == [] and "not available offline" in skipped["yaleface"]
    # quick: snn1e3 and YaleFace's substitute; the rest skipped with a message
    names, skipped, _ = mod.select_datasets(_args(quick=True), empty)
    assert names == ["snn1e3", "lfw"]
    assert {"digits", "mnist", "large", "snn1e6"} <= set(skipped)
    # a YaleFace file present: it runs itself
    (empty / "Yale_64x64.mat").write_bytes(b"")
    names, _, subs = mod.select_datasets(_args(dataset=["yaleface"]), empty)
    assert names == ["yaleface"] and subs == {}


def test_fig_rand_err_rank_lfw_load_and_missing_package(script, monkeypatch, x64):
    mod = script("fig_rand_err_rank")
    if HAVE_SKIMAGE:
        A, desc, source = mod.load("lfw", jax.random.key(0), None)
        assert source == "lfw" and A.shape == (200, 625) and "lfw_subset.npy" in desc
        assert "scikit-image" in mod.TITLES["lfw"] and "YaleFace" in mod.TITLES["lfw"]
        assert mod.DATA_KINDS["lfw"] == "real substitute"
        assert mod.THESIS_LABELS["lfw"] == "fig:rand-err-rank_yaleface-64x64"
    _hide_skimage(monkeypatch)
    A, msg, source = mod.load("lfw", jax.random.key(0), None)
    assert A is None and source is None and "pip install scikit-image" in msg
