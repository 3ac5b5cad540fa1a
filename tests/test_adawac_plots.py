"""Tests for rdr_jax.adawac.plots: the AdaWAC weight heatmaps and segmentation overlays
(thesis fig:synapse-weights, fig:synapse, fig:acdc, fig:vis_synapse_half_slice_sparse)."""

from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from PIL import Image  # noqa: E402

from rdr_jax.adawac.data import ACDC_CLASSES, SYNAPSE_CLASSES, has_foreground  # noqa: E402
from rdr_jax.adawac.phantom import phantom_cases  # noqa: E402
from rdr_jax.adawac.plots import (ACDC_COLORS, HEATMAP_FIELDS, SYNAPSE_COLORS,  # noqa: E402
                                  HeatmapStyle, OverlayStyle, default_colors, legend_figure,
                                  segmentation_overlay, weight_heatmaps)


class History(NamedTuple):
    ce: np.ndarray
    cons: np.ndarray
    beta: np.ndarray


def _history(epochs, n, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    h = {"ce": rng.random((epochs, n)) * 2.0, "cons": rng.random((epochs, n)) * 0.3,
         "beta": rng.random((epochs, n))}
    h = {k: v.astype(dtype) for k, v in h.items()}
    h["ce"][0, 1] = np.nan  # a slice not seen in epoch 0
    h["cons"][2, 3] = np.nan
    return h


def _lines(ax, gid):
    out = []
    for line in ax.lines:
        if line.get_gid() == gid:
            xs = np.asarray(line.get_xdata(), float)
            assert xs[0] == xs[1]  # vertical
            out.append(float(xs[0]))
    return sorted(out)


# ----------------------------------------------------------------------------- heatmaps

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_heatmap_data_order_and_case_lines(dtype, tmp_path):
    # 3 cases, slices stored shuffled; the default order is (case, slice number).
    case = np.array([2, 0, 1, 0, 2, 1, 0, 1, 2, 0])
    sidx = np.array([1, 2, 0, 0, 0, 1, 1, 2, 2, 3])
    h = _history(5, 10, dtype)
    fg = np.array([True, True, False, False, False, True, True, True, True, False])
    path = tmp_path / "heat.png"
    fig = weight_heatmaps(History(**h), case, slice_index=sidx, foreground=fg, title="t",
                          path=path, style=HeatmapStyle(dpi=60))
    assert isinstance(fig, Figure)
    # independent reference of the documented order: sort keys by hand
    order = np.array(sorted(range(10), key=lambda i: (case[i], sidx[i])))
    assert order.tolist() == [3, 6, 1, 9, 2, 5, 7, 4, 0, 8]
    heat = [ax for ax in fig.axes if ax.get_label() in HEATMAP_FIELDS]
    assert [ax.get_label() for ax in heat] == ["ce", "beta", "cons"]  # thesis top-to-bottom
    assert len(fig.axes) == 6  # + three colour bars
    for ax in heat:
        assert len(ax.images) == 1
        got = ax.images[0].get_array()
        want = h[ax.get_label()][:, order].astype(np.float64)
        assert got.shape == (5, 10)  # epochs on y, slices on x
        np.testing.assert_array_equal(np.ma.getmaskarray(got), np.isnan(want))
        np.testing.assert_array_equal(np.ma.filled(got, -1.0), np.where(np.isnan(want), -1.0,
                                                                        want))
        # cases 0 | 1 | 2 occupy columns 0-3 | 4-6 | 7-9
        assert _lines(ax, "case-boundary") == [3.5, 6.5]
        # foreground (ordered): [F, T, T, F | F, T, T | F, T, T] -> changes inside cases
        assert _lines(ax, "foreground-boundary") == [0.5, 2.5, 4.5, 7.5]
    beta_im = heat[1].images[0]
    assert beta_im.norm.vmin == 0.0 and beta_im.norm.vmax == 1.0
    assert path.is_file() and Image.open(path).size[0] > 100
    assert fig._suptitle.get_text() == "t"


def test_heatmap_default_and_explicit_order():
    case = np.array([1, 1, 0, 0, 1])
    h = _history(3, 5)
    # without slice_index the stored order is kept within a case (stable sort by case)
    fig = weight_heatmaps(h, jnp.asarray(case))
    got = fig.axes[0].images[0].get_array()
    np.testing.assert_array_equal(np.ma.filled(got, -1), np.nan_to_num(h["ce"][:, [2, 3, 0, 1, 4]],
                                                                       nan=-1))
    assert _lines(fig.axes[0], "case-boundary") == [1.5]
    assert _lines(fig.axes[0], "foreground-boundary") == []
    # explicit slice_order: column j is slice order[j]; lines wherever the case changes
    order = np.array([4, 2, 0, 3, 1])
    fig = weight_heatmaps(h, case, slice_order=order)
    got = fig.axes[1].images[0].get_array()
    np.testing.assert_array_equal(np.asarray(got), h["beta"][:, order])
    assert _lines(fig.axes[1], "case-boundary") == [0.5, 1.5, 2.5, 3.5]  # cases 1,0,1,0,1


def test_heatmap_single_case_and_all_nan_panel():
    h = _history(3, 4)
    h["cons"][:] = np.nan
    fig = weight_heatmaps(h, np.zeros(4, np.int32))
    assert _lines(fig.axes[0], "case-boundary") == []
    assert np.ma.getmaskarray(fig.axes[2].images[0].get_array()).all()


def test_heatmap_bad_inputs():
    h = _history(4, 6)
    case = np.array([0, 0, 0, 1, 1, 1])
    with pytest.raises(ValueError, match="same shape"):
        weight_heatmaps({**h, "beta": h["beta"][:, :5]}, case)
    with pytest.raises(ValueError, match="same shape"):
        weight_heatmaps({**h, "cons": h["cons"][:3]}, case)
    with pytest.raises(ValueError, match="history.ce must have shape"):
        weight_heatmaps({**h, "ce": h["ce"][0]}, case)
    with pytest.raises(ValueError, match="missing 'beta'"):
        weight_heatmaps({"ce": h["ce"], "cons": h["cons"]}, case)
    with pytest.raises(TypeError, match="history"):
        weight_heatmaps(object(), case)
    with pytest.raises(ValueError, match="inf"):
        weight_heatmaps({**h, "ce": np.where(h["ce"] > 1.0, np.inf, h["ce"])}, case)
    with pytest.raises(ValueError, match="case_index has length 5.*num_slices=6"):
        weight_heatmaps(h, case[:5])
    with pytest.raises(TypeError, match="case_index must hold integers"):
        weight_heatmaps(h, case.astype(float))
    with pytest.raises(ValueError, match="slice_index has length"):
        weight_heatmaps(h, case, slice_index=np.arange(7))
    with pytest.raises(ValueError, match="permutation"):
        weight_heatmaps(h, case, slice_order=np.array([0, 0, 1, 2, 3, 4]))
    with pytest.raises(ValueError, match="foreground"):
        weight_heatmaps(h, case, foreground=np.ones(5, bool))
    with pytest.raises(TypeError, match="foreground must be a bool"):
        weight_heatmaps(h, case, foreground=np.ones(6))
    with pytest.raises(TypeError, match="robust must be a bool"):
        HeatmapStyle(robust="yes")
    with pytest.raises(ValueError, match="dpi must be an int >= 1"):
        HeatmapStyle(dpi=72.5)
    with pytest.raises(TypeError, match="style must be a HeatmapStyle"):
        weight_heatmaps(h, case, style=OverlayStyle())


# ----------------------------------------------------------------------------- overlays

def _blend_ref(img_b, yx, color, alpha):
    """Independent expected colour at one pixel: min-max grey of the example, then mix."""
    g = (img_b[yx] - img_b.min()) / (img_b.max() - img_b.min())
    return (1 - alpha) * np.full(3, g) + alpha * np.asarray(color)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_overlay_pixels_axes_and_png(dtype, tmp_path):
    rng = np.random.default_rng(1)
    b, hgt, wid = 2, 12, 10
    img = (rng.random((b, hgt, wid)) * 3.0 - 1.0).astype(dtype)
    lab = np.zeros((b, hgt, wid), np.uint8)
    lab[0, 1, 2] = 1
    lab[0, 5, 5] = 8
    lab[1, 7, 3] = 5
    ours = lab.copy()
    ours[1, 0, 0] = 7
    base = np.zeros_like(lab)
    base[0, 4, 4] = 3
    alpha = 0.4
    path = tmp_path / "ov.png"
    fig = segmentation_overlay(jnp.asarray(img), lab, {"ours": ours, "baseline": base},
                               class_names=SYNAPSE_CLASSES, style=OverlayStyle(alpha=alpha),
                               path=path,
                               example_names=["a", "b"])
    assert len(fig.axes) == b * 3
    assert all(len(ax.images) == 1 for ax in fig.axes)
    assert [ax.get_title() for ax in fig.axes[:3]] == ["ground truth", "ours", "baseline"]
    synapse_hex = ["#0000ff", "#00c000", "#ff0000", "#00ffff", "#ff00ff", "#ffff00",
                   "#8000ff", "#ff8000"]  # the documented organ table, classes 1..8
    col = {c + 1: to_rgb(x) for c, x in enumerate(synapse_hex)}
    img64 = img.astype(np.float64)
    checks = [(0, 0, (1, 2), 1), (0, 0, (5, 5), 8), (1, 0, (7, 3), 5),  # ground truth
              (1, 1, (0, 0), 7), (0, 2, (4, 4), 3)]                    # predictions
    for e, j, (y, x), c in checks:
        rgb = np.asarray(fig.axes[e * 3 + j].images[0].get_array())
        assert rgb.shape == (hgt, wid, 3)
        np.testing.assert_allclose(rgb[y, x], _blend_ref(img64[e], (y, x), col[c], alpha),
                                   rtol=0, atol=1e-6)
    # background pixels stay grey (R = G = B = min-max scaled intensity)
    rgb = np.asarray(fig.axes[2].images[0].get_array())  # example 0, baseline
    g = (img64[0] - img64[0].min()) / np.ptp(img64[0])
    bg = base[0] == 0
    np.testing.assert_allclose(rgb[bg], np.repeat(g[bg][:, None], 3, 1), atol=1e-6)
    assert len(fig.legends) == 1 and len(fig.legends[0].get_texts()) == 8
    assert [t.get_text() for t in fig.legends[0].get_texts()] == list(SYNAPSE_CLASSES[1:])
    assert path.is_file() and Image.open(path).size[0] > 100


def test_overlay_thesis_layout_single_example_acdc():
    img = np.linspace(0.0, 1.0, 64).reshape(8, 8)
    lab = np.zeros((8, 8), np.int64)
    lab[3, 3], lab[4, 4], lab[5, 5] = 1, 2, 3
    preds = {"ours": lab, "baseline": np.roll(lab, 1, axis=1)}
    fig = segmentation_overlay(img, lab, preds, class_names=ACDC_CLASSES,
                               style=OverlayStyle(layout="columns", alpha=1.0, legend=False))
    assert len(fig.axes) == 3 and not fig.legends
    assert [ax.get_ylabel() for ax in fig.axes] == ["ground truth", "ours", "baseline"]
    rgb = np.asarray(fig.axes[2].images[0].get_array())
    np.testing.assert_allclose(rgb[4, 5], to_rgb("#00c000"))  # Myo shifted right, alpha 1
    np.testing.assert_allclose(rgb[3, 3], img[3, 3])           # background there now
    # batch with the thesis layout: axes are [panel][example]
    fig = segmentation_overlay(np.stack([img, img[::-1]]), np.stack([lab, lab]),
                               {"m": np.stack([lab, 0 * lab])}, class_names=ACDC_CLASSES,
                               style=OverlayStyle(layout="columns", alpha=1.0))
    assert len(fig.axes) == 4
    rgb = np.asarray(fig.axes[3].images[0].get_array())  # method m, example 1 (all bg)
    np.testing.assert_allclose(rgb[..., 0], img[::-1])


def test_overlay_any_num_classes_and_custom_colors():
    names = tuple(f"c{i}" for i in range(13))
    table = default_colors(names)
    assert table.shape == (13, 3) and len({tuple(r) for r in table[1:]}) == 12
    lab = np.arange(13 * 2).reshape(2, 13) % 13
    img = np.ones((2, 13))  # constant image -> grey 0
    fig = segmentation_overlay(img, lab, {}, class_names=names, style=OverlayStyle(alpha=0.5))
    rgb = np.asarray(fig.axes[0].images[0].get_array())
    np.testing.assert_allclose(rgb[0, 1:], 0.5 * table[1:13])
    custom = np.array([[0, 0, 0], [0.2, 0.4, 0.6]])
    fig = segmentation_overlay(img, (lab > 0).astype(int), {}, class_names=("bg", "fg"),
                               style=OverlayStyle(colors=custom, alpha=0.25))
    rgb = np.asarray(fig.axes[0].images[0].get_array())
    np.testing.assert_allclose(rgb[0, 1], 0.25 * custom[1])


def test_color_tables():
    assert SYNAPSE_COLORS.shape == (len(SYNAPSE_CLASSES), 3)
    assert ACDC_COLORS.shape == (len(ACDC_CLASSES), 3)
    assert default_colors(SYNAPSE_CLASSES) is SYNAPSE_COLORS
    assert default_colors(list(ACDC_CLASSES)) is ACDC_COLORS
    for t in (SYNAPSE_COLORS, ACDC_COLORS):
        assert len({tuple(r) for r in t[1:]}) == len(t) - 1  # organs distinguishable
        assert not t.flags.writeable
    lf = legend_figure(ACDC_CLASSES)
    assert [t.get_text() for t in lf.legends[0].get_texts()] == ["RV", "Myo", "LV"]


def test_overlay_bad_inputs():
    img = np.zeros((2, 6, 6))
    lab = np.zeros((2, 6, 6), int)
    kw = {"class_names": ACDC_CLASSES}
    with pytest.raises(ValueError, match="label must have the shape of image"):
        segmentation_overlay(img, lab[:, :5], {}, **kw)
    with pytest.raises(ValueError, match=r"predictions\['b'\] must have the shape"):
        segmentation_overlay(img, lab, {"a": lab, "b": lab[0, :, :5]}, **kw)
    with pytest.raises(ValueError, match=r"predictions\['a'\] holds class ids \[4, 9\]"):
        bad = lab.copy()
        bad[0, 0, 0], bad[1, 1, 1] = 4, 9
        segmentation_overlay(img, lab, {"a": bad}, **kw)
    with pytest.raises(ValueError, match=r"label holds class ids \[-1\]"):
        segmentation_overlay(img, lab - 1, {}, **kw)
    with pytest.raises(ValueError, match="colors has 3 rows but class_names has 4"):
        segmentation_overlay(img, lab, {}, style=OverlayStyle(colors=ACDC_COLORS[:3]), **kw)
    with pytest.raises(ValueError, match=r"colors must be RGB values in \[0, 1\]"):
        OverlayStyle(colors=ACDC_COLORS * 255)
    with pytest.raises(ValueError, match=r"colors must have shape \(num_classes, 3\)"):
        OverlayStyle(colors=ACDC_COLORS[:, :2])
    with pytest.raises(TypeError, match="integer class ids"):
        segmentation_overlay(img, lab + 0.5, {}, **kw)
    with pytest.raises(ValueError, match="image must have shape"):
        segmentation_overlay(img[None], lab[None], {}, **kw)
    with pytest.raises(ValueError, match="NaN or Inf"):
        segmentation_overlay(np.full((6, 6), np.nan), lab[0], {}, **kw)
    with pytest.raises(ValueError, match="alpha"):
        OverlayStyle(alpha=1.5)
    with pytest.raises(ValueError, match="layout"):
        OverlayStyle(layout="grid")
    with pytest.raises(TypeError, match="gt_title must be a string"):
        OverlayStyle(gt_title=None)
    with pytest.raises(TypeError, match="legend must be a bool"):
        OverlayStyle(legend="yes")
    with pytest.raises(ValueError, match="dpi must be an int >= 1"):
        OverlayStyle(dpi=0)
    with pytest.raises(TypeError, match="style must be an OverlayStyle"):
        segmentation_overlay(img, lab, {}, style={"alpha": 0.5}, **kw)
    with pytest.raises(ValueError, match="example_names"):
        segmentation_overlay(img, lab, {}, example_names=["one"], **kw)
    with pytest.raises(TypeError, match="predictions must be a dict"):
        segmentation_overlay(img, lab, [lab], **kw)
    with pytest.raises(TypeError, match="class_names"):
        segmentation_overlay(img, lab, {}, class_names="background")


def test_phantom_end_to_end_no_pyplot_leak(tmp_path):
    before = plt.get_fignums()
    d = phantom_cases(jax.random.key(3), 3, 8, 24, num_test_cases=1)
    tr = d.train
    n = len(tr.names)
    rng = np.random.default_rng(0)
    h = {k: rng.random((4, n)) for k in ("ce", "cons", "beta")}
    fig = weight_heatmaps(h, tr.case_index, slice_index=tr.slice_index,
                          foreground=has_foreground(tr), path=tmp_path / "w.png",
                          style=HeatmapStyle(dpi=50))
    assert _lines(fig.axes[0], "case-boundary") == [7.5, 15.5]
    vol, lab = d.test.images[0], d.test.labels[0]
    fig = segmentation_overlay(vol[2:6], lab[2:6], {"ours": lab[2:6], "baseline": lab[1:5]},
                               class_names=d.class_names, style=OverlayStyle(dpi=50),
                               path=tmp_path / "o.png")
    assert len(fig.axes) == 12
    assert (tmp_path / "w.png").is_file() and (tmp_path / "o.png").is_file()
    assert plt.get_fignums() == before  # nothing registered with pyplot
