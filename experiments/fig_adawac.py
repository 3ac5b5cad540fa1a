"""Thesis Chapter 5 figures: AdaWAC's weight heatmaps and segmentation overlays.

Run (from the repository root)::

    python experiments/fig_adawac.py --figure all --quick        # phantoms, tiny CNN (CI size)
    python experiments/fig_adawac.py --figure weights --quick
    python experiments/fig_adawac.py --figure synapse --data-dir data/Synapse
    python experiments/fig_adawac.py --figure acdc --data-dir data/ACDC

Figures (one PNG each, plus ``<figure>.json`` / ``<figure>.csv`` with the numbers):

* ``weights`` -- Figure 5.3: AdaWAC (config ``synapse_transunet``, eta = 2) on the
  full training set; per-slice cross-entropy ``l_CE(theta_t; (x_i, y_i))`` (top), CE weight
  ``beta_t`` (middle) and consistency ``R_AC(theta_t; x_i, A_i1, A_i2)`` (bottom) over
  slices x epochs, with black lines between cases and purple lines between slices with and
  without foreground (:func:`rdr_jax.adawac.plots.weight_heatmaps`).
* ``synapse`` -- Figure 5.2: AdaWAC and the ERM baseline trained on the full Synapse
  training set; 6 test slices (those with the most foreground classes, spread over the test
  volumes), rows ground truth / ours (AdaWAC) / baseline
  (:func:`rdr_jax.adawac.plots.segmentation_overlay`), per-slice DSC in the column titles.
* ``half_sparse`` -- Figure C.2: the same on the ``half-sparse``
  subset (first half of the slices of every case, mostly label-sparse), plus the stand-alone
  organ legend (``half_sparse_legend.png``).
* ``acdc`` -- Figure C.1: the same with config ``acdc`` on 4-class cardiac data.

Data: ``--quick`` uses the synthetic multi-organ phantom (:func:`rdr_jax.adawac.phantom_cases`)
for the Synapse figures and the synthetic cardiac phantom
(:func:`rdr_jax.adawac.cardiac_phantom.cardiac_phantom_cases`) for ``acdc``, with the tiny CPU
network. Otherwise the TransUNet-preprocessed folders are read (``--data-dir``, else the
config's root / ``$RDR_JAX_DATA/<Synapse|ACDC>``, as ``experiments/train_adawac.py``), falling
back to the phantoms when absent (the run says so). Nothing is downloaded.

Thesis claims, printed as ``[HELD]`` / ``[NOT HELD]`` (Figure 5.3 paragraph,
Section 5.5.1); "dense" = slice has foreground, "sparse" = it has none, and a
group's CE (consistency) in an epoch is the mean over its slices of the last value seen in
that epoch:

(weights a) the CE of label-sparse and label-dense slices separates during training: the
    ratio ``mean CE(dense) / mean CE(sparse)`` in the last epoch exceeds that of the first
    epoch (and 1);
(weights b) the consistency "remains mixed": in the last epoch its dense/sparse ratio is
    closer to 1 than CE's, ``|log r_cons| < |log r_CE|`` (the ROC AUCs of CE and
    consistency against "has foreground" are printed too);
(weights c) the final CE weights separate them: ROC AUC of the final ``beta`` against "slice
    has foreground" >= 0.9; (c2) the same against "foreground >= 1% of the slice" (the
    thesis' label-dense: it calls a slice label-sparse when most pixels are background);
(synapse / half_sparse / acdc) AdaWAC's mean test DSC (:func:`rdr_jax.adawac.train.evaluate`,
    last model) exceeds the ERM baseline's.

Each (config, method, subset) is trained once per invocation: ``--figure all`` reuses the
AdaWAC run of ``weights`` for ``synapse`` (the ``results["trainings"]`` list records every
training). A figure whose data are missing (``acdc`` without ACDC data and without the
cardiac phantom module) is skipped with a message and listed under ``skipped``. ``--set
field=value`` overrides config fields of every figure (e.g. ``--set model.width=4``).
Outputs in ``--out`` (default ``experiments/results/fig_adawac``):
``<figure>.png``, ``<figure>.json`` (numbers, claims, config), ``<figure>.csv`` (weights:
one row per epoch; overlays: one row per shown slice), ``results.json`` (all claims) and
``config.json``.

float32: network training and plots; nothing here needs float64.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
import scipy.ndimage

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import data_desc, env_info, host_threads, parser, roc_auc, write_csv  # noqa: E402

from rdr_jax.adawac import configs as adawac_configs  # noqa: E402
from rdr_jax.adawac import plots  # noqa: E402
from rdr_jax.adawac.data import (SegmentationData, VolumeDataset, has_foreground,  # noqa: E402
                                 load_acdc, make_subset)
from rdr_jax.adawac.metrics import predict_volume, volume_metrics  # noqa: E402
from rdr_jax.adawac.train import TrainResult, _jitted_predict, method_spec, train  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "fig_adawac"

#: figure name -> (config name, training subset, thesis label)
FIGURES = {
    "weights": ("synapse_transunet", "full", "fig:synapse-weights"),
    "synapse": ("synapse_transunet", "full", "fig:synapse"),
    "half_sparse": ("synapse_transunet", "half-sparse", "fig:vis_synapse_half_slice_sparse"),
    "acdc": ("acdc", "full", "fig:acdc"),
}
#: ROC AUC of the final beta against "has foreground" needed for claim (weights c).
AUC_THRESHOLD = 0.9
#: "label-dense" in the secondary AUC: foreground covers at least this fraction of the slice.
DENSE_FRACTION = 0.01
#: test slices shown per overlay figure (the thesis shows 6).
NUM_SLICES = 6
#: row labels of the overlays ("top to bottom: ground truth, ours, baseline").
METHOD_LABELS = {"adawac": "ours (AdaWAC)", "erm": "baseline (ERM)"}


def figures_to_run(figure: str) -> list[str]:
    """The figures selected by ``--figure`` (``all`` = every figure, in :data:`FIGURES` order).

    Raises:
        ValueError: an unknown name (the known ones are listed).

    Example:
        >>> figures_to_run("all")
        ['weights', 'synapse', 'half_sparse', 'acdc']
    """
    if not isinstance(figure, str):
        raise TypeError(f"--figure must be a string; got {type(figure).__name__}")
    f = figure.strip().lower().replace("-", "_")
    if f == "all":
        return list(FIGURES)
    if f not in FIGURES:
        raise ValueError(f"--figure must be one of {list(FIGURES) + ['all']}; got {figure!r}")
    return [f]


def apply_overrides(cfg, overrides: list[str]):
    """Apply ``--set field.path=value`` overrides (value parsed as JSON, else a string) to a
    copy of the ConfigDict ``cfg``; e.g. ``model.width=4``, ``data.size=16``, ``eta=8``.

    Raises:
        ValueError: an item without ``=`` or a field the config does not have.

    Example:
        >>> c = apply_overrides(adawac_configs.get_config("acdc", quick=True), ["eta=8"])
        >>> c.eta
        8.0
    """
    cfg = copy.deepcopy(cfg)
    for item in overrides:
        path, sep, raw = str(item).partition("=")
        path = path.strip()
        if not sep or not path:
            raise ValueError(f"--set expects field.path=value; got {item!r}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        *parents, leaf = path.split(".")
        node = cfg
        for part in parents:
            if part not in node:
                raise ValueError(f"--set {item!r}: the config has no field {path!r}")
            node = node[part]
        if not hasattr(node, "keys") or leaf not in node:
            raise ValueError(f"--set {item!r}: the config has no field {path!r}")
        if isinstance(node[leaf], float) and isinstance(value, int):
            value = float(value)
        node[leaf] = value
    return cfg


# ============================================================================ statistics


def group_means(table: Any, dense: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-row means over the dense and the sparse columns, ignoring NaN (slices not seen).

    Args:
        table: ``(epochs, n)`` per-slice values (history ``ce`` / ``cons`` / ``beta``).
        dense: bool ``(n,)``.

    Returns:
        ``(dense_mean, sparse_mean)``, each ``(epochs,)`` (NaN where a group has no finite
        entry in that row).

    Example:
        >>> d, s = group_means([[1.0, 3.0, 2.0]], [True, True, False])
        >>> d.tolist(), s.tolist()
        ([2.0], [2.0])
    """
    t = np.atleast_2d(np.asarray(table, np.float64))
    m = np.asarray(dense, bool)
    if m.shape != (t.shape[1],):
        raise ValueError(f"dense must be a bool vector of length {t.shape[1]} (the number of "
                         f"slices); got shape {m.shape}")

    def mean(cols):
        sub = t[:, cols]
        cnt = np.isfinite(sub).sum(axis=1)
        tot = np.where(np.isfinite(sub), sub, 0.0).sum(axis=1)
        return np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)

    return mean(m), mean(~m)


def separation_stats(history: dict, dense: Any, dense_1pct: Any) -> list[dict]:
    """Per-epoch separation of label-dense and label-sparse slices in an AdaWAC history.

    For every snapshot ``e`` (one per epoch): group means of ``ce``, ``cons`` and ``beta``
    over the slices with / without foreground, the ratios ``r_f = mean_f(dense) /
    mean_f(sparse)`` and the ROC AUCs of ``ce``, ``cons``, ``beta`` against "has foreground"
    (and of ``beta`` against "foreground >= 1%").

    Args:
        history: :attr:`rdr_jax.adawac.train.TrainResult.history`.
        dense: bool ``(n,)``, slice has foreground.
        dense_1pct: bool ``(n,)``, foreground covers >= :data:`DENSE_FRACTION` of the slice.

    Returns:
        one dict per snapshot.
    """
    ce = np.asarray(history["ce"], np.float64)
    cons = np.asarray(history["cons"], np.float64)
    beta = np.asarray(history["beta"], np.float64)
    if ce.ndim != 2 or ce.shape[0] == 0:
        raise ValueError("history holds no snapshots (train for at least one step)")
    rows = []
    means = {f: group_means(a, dense) for f, a in (("ce", ce), ("cons", cons), ("beta", beta))}
    for e in range(ce.shape[0]):
        r = {"epoch": int(history["epoch"][e]), "step": int(history["step"][e])}
        for f in ("ce", "cons", "beta"):
            d, s = means[f][0][e], means[f][1][e]
            r[f"{f}_dense"], r[f"{f}_sparse"] = float(d), float(s)
            r[f"{f}_ratio"] = float(d / s) if s > 0 else float("nan")
        r["auc_ce"] = roc_auc(dense, ce[e])
        r["auc_cons"] = roc_auc(dense, cons[e])
        r["auc_beta"] = roc_auc(dense, beta[e])
        r["auc_beta_dense1pct"] = roc_auc(dense_1pct, beta[e])
        rows.append(r)
    return rows


def _abslog(x: float) -> float:
    return abs(math.log(x)) if x > 0 and math.isfinite(x) else float("nan")


def weight_claims(stats: list[dict]) -> dict:
    """Claims (a)-(c) of Figure 5.3 from :func:`separation_stats` rows.

    Returns:
        ``{"a_ce_separates", "b_consistency_mixed", "c_beta_separates",
        "c2_beta_separates_label_dense"}`` -> ``{"held": bool, "detail": str}``; a NaN
        statistic (e.g. a group never seen) counts as not held.

    Example:
        >>> rows = [{"ce_ratio": 1.2, "cons_ratio": 1.1, "auc_ce": .6, "auc_cons": .5,
        ...          "auc_beta": .5, "auc_beta_dense1pct": .5, "beta_dense": .5,
        ...          "beta_sparse": .5},
        ...         {"ce_ratio": 4.0, "cons_ratio": 1.3, "auc_ce": .9, "auc_cons": .6,
        ...          "auc_beta": .95, "auc_beta_dense1pct": .97, "beta_dense": .8,
        ...          "beta_sparse": .3}]
        >>> {k: v["held"] for k, v in weight_claims(rows).items()}
        {'a_ce_separates': True, 'b_consistency_mixed': True, 'c_beta_separates': True, \
'c2_beta_separates_label_dense': True}
    """
    first, last = stats[0], stats[-1]
    r0, r1 = first["ce_ratio"], last["ce_ratio"]
    a_held = bool(r1 > r0 and r1 > 1.0)
    lc, lce = _abslog(last["cons_ratio"]), _abslog(r1)
    b_held = bool(lc < lce)
    auc, auc1 = last["auc_beta"], last["auc_beta_dense1pct"]
    return {
        "a_ce_separates": {
            "held": a_held,
            "detail": f"mean CE dense/sparse {r0:.3f} (first epoch) -> {r1:.3f} (last epoch); "
                      f"AUC(CE, has foreground) {first['auc_ce']:.3f} -> {last['auc_ce']:.3f}"},
        "b_consistency_mixed": {
            "held": b_held,
            "detail": f"last epoch: consistency dense/sparse {last['cons_ratio']:.3f} "
                      f"(|log| {lc:.3f}) vs CE {r1:.3f} (|log| {lce:.3f}); AUC(cons, has "
                      f"foreground) {last['auc_cons']:.3f} vs AUC(CE) {last['auc_ce']:.3f}"},
        "c_beta_separates": {
            "held": bool(auc >= AUC_THRESHOLD),
            "detail": f"AUC(final beta, has foreground) = {auc:.3f} (>= {AUC_THRESHOLD} "
                      f"needed); mean beta dense {last['beta_dense']:.3f} vs sparse "
                      f"{last['beta_sparse']:.3f}"},
        "c2_beta_separates_label_dense": {
            "held": bool(auc1 >= AUC_THRESHOLD),
            "detail": f"AUC(final beta, foreground >= {DENSE_FRACTION:.0%} of the slice) = "
                      f"{auc1:.3f} (>= {AUC_THRESHOLD} needed; the thesis' label-dense: "
                      f"slices with a few labelled pixels are label-sparse)"},
    }


# ============================================================================ test slices


def pick_slices(volumes: VolumeDataset, k: int = NUM_SLICES) -> list[tuple[int, int]]:
    """``k`` test slices ``(volume, slice)`` with the most foreground classes.

    Slices are ranked by the number of distinct foreground classes, then by foreground area;
    at most ``ceil(k / num_volumes)`` come from one volume and two from the same volume are
    never neighbours, so the figure spreads over the test set. The result is sorted by volume
    and slice.

    Example:
        >>> lab = np.zeros((3, 4, 4), np.uint8); lab[1, :2, :2] = 1; lab[1, 2:, 2:] = 2
        >>> pick_slices(VolumeDataset((lab * 0.0,), (lab,), ("v",)), 1)
        [(0, 1)]
    """
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1; got {k!r}")
    if not volumes.labels:
        raise ValueError("volumes holds no test volumes")
    cand = []
    for v, lab in enumerate(volumes.labels):
        lab = np.asarray(lab)
        flat = lab.reshape(lab.shape[0], -1)
        for s in range(lab.shape[0]):
            classes = np.unique(flat[s])
            n_cls = int((classes > 0).sum())
            if n_cls:
                cand.append((-n_cls, -int((flat[s] > 0).sum()), v, s))
    cand.sort()
    per_vol = math.ceil(k / len(volumes.labels))
    chosen: list[tuple[int, int]] = []
    for _, _, v, s in cand:
        mine = [t for (u, t) in chosen if u == v]
        if len(mine) >= per_vol or any(abs(t - s) <= 1 for t in mine):
            continue
        chosen.append((v, s))
        if len(chosen) == k:
            break
    if not chosen:
        raise ValueError("no test slice has foreground; nothing to show")
    return sorted(chosen)


def slice_dice(pred: np.ndarray, label: np.ndarray, num_classes: int) -> float:
    """Mean DSC of one slice over the foreground classes present in the label or the
    prediction (:func:`rdr_jax.adawac.metrics.volume_metrics` on a one-slice volume; classes
    absent from both are left out, as they would score a vacuous 1). NaN if there is none.

    Example:
        >>> lab = np.zeros((4, 4), int); lab[:2] = 1
        >>> slice_dice(lab, lab, 3)
        1.0
    """
    pred = np.asarray(pred)
    label = np.asarray(label)
    m = volume_metrics(pred[None], label[None], num_classes)
    present = np.array([(pred == c).any() or (label == c).any()
                        for c in range(1, num_classes)])
    return float(np.mean(m.dice[present])) if present.any() else float("nan")


def predict_slices(res: TrainResult, images: np.ndarray, input_size: int,
                   batch_size: int) -> np.ndarray:
    """Class maps ``(b, H, W)`` of a trained model on test slices ``(b, H, W)`` of one volume:
    :func:`rdr_jax.adawac.metrics.predict_volume` (resize to ``input_size``, BatchNorm in
    evaluation mode, argmax, resize back), as the test evaluation does."""
    predict = _jitted_predict(res.graph.eval)
    return predict_volume(lambda xb: predict(res.state, jnp.asarray(xb)), images, batch_size,
                          input_size=input_size)


def _fit(a: np.ndarray, size: tuple[int, int], order: int) -> np.ndarray:
    """Resize a 2-D slice to ``size`` (display only; ``order`` 0 for labels)."""
    if a.shape == size:
        return a
    out = scipy.ndimage.zoom(a, (size[0] / a.shape[0], size[1] / a.shape[1]), order=order)
    return out.astype(a.dtype)


# ============================================================================ runner


class FigureSkipped(RuntimeError):
    """A figure cannot be made here (its data are missing); :func:`run` reports and skips."""


class Runner:
    """Loads each data set once and trains each (config, method, subset) once per run."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self._data: dict[str, tuple[SegmentationData, str]] = {}
        self._runs: dict[tuple, TrainResult] = {}
        self.trainings: list[dict] = []

    def config(self, name: str):
        """The config ``name`` (quick or not) with ``--seed``, ``--steps`` and ``--set``."""
        cfg = adawac_configs.get_config(name, quick=self.args.quick)
        cfg.seed = int(self.args.seed)
        if self.args.steps is not None:
            cfg.num_steps = int(self.args.steps)
        return apply_overrides(cfg, getattr(self.args, "set", None) or [])

    def data(self, config_name: str) -> tuple[SegmentationData, str]:
        """``(data, source)`` for a config (cached): real data when present (not ``--quick``),
        else the synthetic phantom (multi-organ for Synapse, cardiac for ACDC)."""
        if config_name in self._data:
            return self._data[config_name]
        import train_adawac  # sibling script: data-root lookup and the Synapse loader
        cfg = self.config(config_name)
        key = jax.random.key(self.args.data_seed)
        if config_name == "acdc":
            got = None
            if not self.args.quick:
                root = train_adawac._data_root(cfg, self.args.data_dir)
                if root.is_dir():
                    got = load_acdc(root, size=cfg.data.size), f"acdc:{root}"
                else:
                    print(f"[fig_adawac] ACDC data not found at {root}; using the synthetic "
                          f"cardiac phantom instead (pass --data-dir)")
            if got is None:
                try:
                    from rdr_jax.adawac.cardiac_phantom import cardiac_phantom_cases
                except ImportError as e:
                    raise FigureSkipped(
                        f"no ACDC data and the synthetic cardiac phantom is unavailable "
                        f"(rdr_jax.adawac.cardiac_phantom: {type(e).__name__}: {e})") from e
                got = (cardiac_phantom_cases(key, cfg.data.num_cases, cfg.data.num_slices,
                                             cfg.data.size,
                                             num_test_cases=cfg.data.num_test_cases),
                       "cardiac phantom")
        else:
            ns = argparse.Namespace(data_dir=self.args.data_dir, data_seed=self.args.data_seed)
            got = train_adawac.load_data(cfg, ns)
        self._data[config_name] = got
        return got

    def train(self, config_name: str, method: str, subset: str) -> TrainResult:
        """The trained run of ``method`` on ``subset`` (cached by config, method, subset)."""
        name = method_spec(method).name
        key = (config_name, name, subset)
        if key in self._runs:
            return self._runs[key]
        data, source = self.data(config_name)
        cfg = self.config(config_name)
        cfg.method = name
        cfg.data.subset = subset
        ds = make_subset(data.train, subset)
        test = data.test if data.test is not None else data.val
        t0 = time.perf_counter()
        res = train(cfg, ds, test=test, num_classes=data.num_classes, progress=True)
        secs = time.perf_counter() - t0
        dsc = res.test["dice"] if res.test else float("nan")
        print(f"[fig_adawac] trained {name} on {config_name}/{subset} ({source}, {len(ds.names)} "
              f"slices, {int(res.state.step)} steps, {secs:.1f} s): test DSC {dsc:.4f}")
        self.trainings.append({"config": config_name, "method": name, "subset": subset,
                               "source": source, "num_slices": len(ds.names),
                               "steps": int(res.state.step),
                               "seconds": secs, "test_dice": dsc,
                               "test_hd95": res.test["hd95"] if res.test else float("nan")})
        self._runs[key] = res
        return res


# ============================================================================ figures


def _model_desc(cfg) -> str:
    """The network a config trains, for titles."""
    m = cfg.model
    if m.name == "tiny":
        return f"tiny CNN (TinySegNet width {m.width}, depth {m.depth})"
    name = "UNet-ResNet34" if m.name == "unet" else "TransUNet"
    return name + (" (small)" if m.small else "")


def fig_weights(runner: Runner, out: Path) -> dict:
    """Figure 5.3: AdaWAC's CE / beta / consistency heatmaps and claims (a)-(c)."""
    config_name, subset, label = FIGURES["weights"]
    data, source = runner.data(config_name)
    ds = make_subset(data.train, subset)
    res = runner.train(config_name, "adawac", subset)
    fg = has_foreground(ds)
    frac = (np.asarray(ds.labels) > 0).reshape(len(fg), -1).mean(axis=1)
    dense1 = frac >= DENSE_FRACTION
    stats = separation_stats(res.history, fg, dense1)
    claims = weight_claims(stats)
    cfg = runner.config(config_name)
    title = (f"AdaWAC ({_model_desc(cfg)}, eta={cfg.eta:g}"
             f"{', quick' if runner.args.quick else ''}) on {data_desc(source)}\n"
             f"{len(fg)} slices, {len(ds.case_names)} cases, "
             f"{fg.mean():.0%} with foreground")
    plots.weight_heatmaps(res.history, ds.case_index, slice_index=ds.slice_index,
                          foreground=fg, title=title, path=out / "weights.png")
    write_csv(out / "weights.csv", stats)
    return {"figure": "weights", "thesis": label, "source": source, "subset": subset,
            "num_slices": len(fg), "num_cases": len(ds.case_names),
            "foreground_fraction": float(fg.mean()),
            "dense_1pct_fraction": float(dense1.mean()), "per_epoch": stats,
            "final_beta": np.asarray(res.state.beta, np.float64).tolist(),
            "has_foreground": fg.astype(int).tolist(), "names": list(ds.names),
            "claims": claims, "config": cfg.to_dict(), "png": "weights.png"}


def fig_overlay(runner: Runner, figure: str, out: Path) -> dict:
    """Figure 5.2 / C.2 / C.1: ground truth,
    AdaWAC and ERM on :data:`NUM_SLICES` test slices, per-slice DSC, test DSC claim."""
    config_name, subset, label = FIGURES[figure]
    data, source = runner.data(config_name)
    vols = data.test if data.test is not None else data.val
    if vols is None:
        raise ValueError(f"{figure}: the data set has no test or validation volumes to show")
    cfg = runner.config(config_name)
    picks = pick_slices(vols, NUM_SLICES)
    runs = {m: runner.train(config_name, m, subset) for m in ("adawac", "erm")}
    size = int(np.asarray(data.train.images).shape[1])
    preds: dict[str, dict[tuple[int, int], np.ndarray]] = {m: {} for m in runs}
    for m, res in runs.items():
        for v in sorted({v for v, _ in picks}):
            rows = [s for u, s in picks if u == v]
            p = predict_slices(res, np.asarray(vols.images[v])[rows], size,
                               int(cfg.eval_batch_size))
            for s, ps in zip(rows, p):
                preds[m][(v, s)] = ps
    shape = tuple(np.asarray(vols.images[picks[0][0]]).shape[1:])
    images, labels, shown = [], [], {m: [] for m in runs}
    table, names = [], []
    for v, s in picks:
        img = np.asarray(vols.images[v][s], np.float32)
        lab = np.asarray(vols.labels[v][s]).astype(np.int64)
        row = {"volume": vols.names[v], "slice": s,
               "num_classes": int((np.unique(lab) > 0).sum()),
               "foreground_fraction": float((lab > 0).mean())}
        for m in runs:
            row[f"dice_{m}"] = slice_dice(preds[m][(v, s)], lab, data.num_classes)
            shown[m].append(_fit(preds[m][(v, s)].astype(np.int64), shape, 0))
        images.append(_fit(img, shape, 1))
        labels.append(_fit(lab, shape, 0))
        table.append(row)
        names.append(f"{vols.names[v]} #{s}\nDSC {row['dice_adawac']:.2f} / "
                     f"{row['dice_erm']:.2f}")
    test = {m: res.test for m, res in runs.items()}
    da, de = (test[m]["dice"] if test[m] else float("nan") for m in ("adawac", "erm"))
    title = (f"{label} layout on {data_desc(source)}, {subset}, {_model_desc(cfg)}\n"
             f"test DSC AdaWAC {da:.3f}, ERM {de:.3f}; columns: slice DSC AdaWAC / ERM")
    plots.segmentation_overlay(np.stack(images), np.stack(labels),
                               {METHOD_LABELS[m]: np.stack(shown[m]) for m in runs},
                               class_names=data.class_names, example_names=names, title=title,
                               style=plots.OverlayStyle(layout="columns"),
                               path=out / f"{figure}.png")
    extra = {}
    if figure == "half_sparse":
        plots.legend_figure(data.class_names, path=out / "half_sparse_legend.png")
        extra["legend_png"] = "half_sparse_legend.png"
    write_csv(out / f"{figure}.csv", table)
    claims = {"adawac_beats_erm": {
        "held": bool(da > de),
        "detail": f"test DSC AdaWAC {da:.4f} vs ERM {de:.4f} (HD95 "
                  f"{_get_test(test['adawac'], 'hd95'):.2f} vs "
                  f"{_get_test(test['erm'], 'hd95'):.2f}; {subset}, seed {runner.args.seed}); "
                  f"mean DSC of the {len(picks)} shown slices "
                  f"{np.nanmean([r['dice_adawac'] for r in table]):.3f} vs "
                  f"{np.nanmean([r['dice_erm'] for r in table]):.3f}"}}
    return {"figure": figure, "thesis": label, "source": source, "subset": subset,
            "num_train_slices": len(make_subset(data.train, subset).names), "test": test,
            "slices": table, "claims": claims, "config": cfg.to_dict(), "png": f"{figure}.png",
            **extra}


def _get_test(t: Optional[dict], k: str) -> float:
    return float(t[k]) if t else float("nan")


def _clean(v: Any) -> Any:
    """JSON-safe copy: NaN / inf -> None, numpy scalars -> Python."""
    if isinstance(v, dict):
        return {str(k): _clean(u) for k, u in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(u) for u in v]
    if isinstance(v, (np.floating, float)):
        v = float(v)
        return v if math.isfinite(v) else None
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


# ============================================================================ main


def parse_args(argv=None) -> argparse.Namespace:
    p = parser(__doc__, quick="CI size: phantoms + tiny network", data_dir=None, host_threads=0,
               seed=0, out=str(DEFAULT_OUT),
               helps={"data_dir": "Synapse / ACDC folder (TransUNet preprocessing)",
                      "seed": "training seed"})
    p.add_argument("--figure", default="all", choices=list(FIGURES) + ["all"])
    p.add_argument("--data-seed", type=int, default=0, help="phantom data seed")
    p.add_argument("--steps", type=int, default=None,
                   help="override the number of training steps (default: the config's epochs)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a config field of every figure, e.g. --set model.width=4 "
                        "(repeatable)")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    with host_threads(args.host_threads):
        return run(args)


def run(args: argparse.Namespace) -> dict:
    """Make the figures of ``args.figure``; returns ``{"figures": {name: result}, "claims":
    {"<figure>/<claim>": {"held", "detail"}}, "trainings": [...], "skipped": {...}}``."""
    figures = figures_to_run(args.figure)
    if args.steps is not None and args.steps < 1:
        raise ValueError(f"--steps must be >= 1; got {args.steps}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runner = Runner(args)
    t_start = time.perf_counter()
    results: dict[str, Any] = {"figures": {}, "claims": {}, "skipped": {}}
    for fig in figures:
        t0 = time.perf_counter()
        try:
            res = (fig_weights(runner, out) if fig == "weights"
                   else fig_overlay(runner, fig, out))
        except FigureSkipped as e:
            print(f"[fig_adawac] {fig} figure SKIPPED: {e}")
            results["skipped"][fig] = str(e)
            continue
        res["seconds"] = time.perf_counter() - t0
        res["args"] = vars(args)
        (out / f"{fig}.json").write_text(json.dumps(_clean(res), indent=2))
        results["figures"][fig] = res
        for cid, cl in res["claims"].items():
            results["claims"][f"{fig}/{cid}"] = cl
            print(f"  [{'HELD' if cl['held'] else 'NOT HELD'}] {fig}/{cid}: {cl['detail']}")
        print(f"[fig_adawac] wrote {out / res['png']} and {fig}.json / {fig}.csv "
              f"({res['seconds']:.1f} s)")
    results["trainings"] = runner.trainings
    results["seconds"] = time.perf_counter() - t_start
    results["env"] = env_info()
    summary = {k: v for k, v in results.items() if k != "figures"}
    (out / "results.json").write_text(json.dumps(_clean(summary), indent=2))
    (out / "config.json").write_text(json.dumps(_clean(
        {"args": vars(args),
         "configs": {f: runner.config(FIGURES[f][0]).to_dict() for f in figures}}), indent=2))
    held = sum(c["held"] for c in results["claims"].values())
    print(f"[fig_adawac] {held}/{len(results['claims'])} claims held; "
          f"{len(runner.trainings)} trainings; {results['seconds']:.1f} s; wrote {out}")
    return results


if __name__ == "__main__":
    main()
