"""Fixed accuracy held to the truth: ``interpolative_to_tolerance`` on smooth kernels, Hilbert
matrices, real images and MNIST, as dense arrays, CSR, implicit operators and scipy
LinearOperators, in float32 and float64, with the true relative Frobenius error of the
returned factors (float64, on the host).

Each row prints the rank, the reported ``error_estimate``, the true error, ``converged`` and
the stop reason, and whether the result is honest: a converged result must have a true error
within ``tol`` (certified rows: the bound must be above the truth), and a non-converged one
must say why. The script exits non-zero when a row is dishonest.

    python experiments/fixed_accuracy_check.py            # all cases (~3 min on 2 cores)
    python experiments/fixed_accuracy_check.py --quick    # the small cases only
    python experiments/fixed_accuracy_check.py --json out.json

The issue-29 numbers in ``docs/id-cur.md`` come from this script (before: commit 19644b8).
"""
from __future__ import annotations

import json
import sys
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg as sl
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from jax.tree_util import Partial

import rdr_jax as R
from _common import parser


def _matmat(data, X):
    return data @ X


def _rmatmat(data, Y):
    return data.conj().T @ Y


def implicit(A):
    """``A`` as an implicit operator, its data passed as pytree leaves (``Partial``)."""
    Aj = jnp.asarray(A)
    return R.implicit_operator(Partial(_matmat, Aj), Partial(_rmatmat, Aj), A.shape)


def gaussian_kernel(m, n, h=0.09, seed=0):
    """``exp(-|x - y|^2 / h)`` on uniform points of [0, 1]^2 (the issue's kernel)."""
    rng = np.random.default_rng(seed)
    X, Y = rng.random((m, 2)), rng.random((n, 2))
    return np.exp(-((X[:, None, :] - Y[None, :, :]) ** 2).sum(-1) / h)


def matrices(quick):
    """name -> float64 matrix (generated once)."""
    out = {"kernel 3000x2000": gaussian_kernel(3000, 2000),
           "hilbert 300": sl.hilbert(300)}
    if not quick:
        from skimage import data
        out["camera 512x512"] = data.camera().astype(np.float64) / 255.0
        out["mnist 5000x784"] = R.datasets.load_mnist_5k()[0]
        out["kernel 6000x4000"] = gaussian_kernel(6000, 4000)
    return out


def cases(quick):
    """(matrix, dtype, input kind, tol, failure_prob, block_size)."""
    c = [("kernel 3000x2000", "float32", "implicit", 1e-4, 0.01, 16),   # the case
         ("kernel 3000x2000", "float32", "implicit", 1e-4, None, 16),
         ("kernel 3000x2000", "float32", "implicit", 1e-5, None, 16),
         ("kernel 3000x2000", "float32", "dense", 1e-4, None, 16),
         ("kernel 3000x2000", "float32", "dense", 1e-5, None, 16),
         ("kernel 3000x2000", "float32", "dense", 1e-6, None, 16),
         ("kernel 3000x2000", "float64", "dense", 1e-5, None, 16),
         ("kernel 3000x2000", "float64", "implicit", 1e-8, 0.01, 16),
         ("hilbert 300", "float64", "linop", 1e-9, None, 16),         # scipy's rank test
         ("hilbert 300", "float64", "implicit", 1e-9, 0.01, 16),
         ("hilbert 300", "float32", "dense", 1e-6, None, 16)]
    if quick:
        return c
    return c + [
        ("camera 512x512", "float32", "dense", 1e-8, None, 16),
        ("camera 512x512", "float32", "implicit", 1e-3, None, 16),
        ("camera 512x512", "float64", "sparse", 1e-3, 0.01, 16),
        ("mnist 5000x784", "float32", "dense", 1e-1, None, 16),
        ("mnist 5000x784", "float32", "sparse", 1e-1, None, 16),
        ("mnist 5000x784", "float32", "implicit", 1e-1, None, 16),
        ("mnist 5000x784", "float32", "dense", 1e-2, None, 16),
        ("mnist 5000x784", "float32", "sparse", 1e-2, None, 16),
        ("mnist 5000x784", "float32", "implicit", 1e-2, None, 16),
        ("kernel 6000x4000", "float32", "implicit", 1e-4, 0.01, 16)]


def as_input(A, dtype, kind):
    A = A.astype(dtype)
    if kind == "dense":
        return jnp.asarray(A)
    if kind == "sparse":
        return sp.csr_matrix(A)
    if kind == "implicit":
        return implicit(A)
    if kind == "linop":
        return spla.aslinearoperator(A)
    raise ValueError(kind)


def true_error(A64, d):
    """Relative Frobenius error of the returned column ID, in float64 on the host."""
    C, W = np.asarray(d.C, np.float64), np.asarray(d.W, np.float64)
    return float(np.linalg.norm(A64 - C @ W) / np.linalg.norm(A64))


def optimal_rank(s, tol):
    tail = np.append(np.sqrt(np.cumsum(s[::-1] ** 2)[::-1] / np.sum(s ** 2)), 0.0)
    return int(np.argmax(tail <= tol))


def run_case(mats, svals, case):
    name, dtype, kind, tol, fp, b = case
    A64 = mats[name]
    ctx = jax.enable_x64(dtype == "float64")
    with ctx, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        inp = as_input(A64, dtype, kind)
        t0 = time.perf_counter()
        d = R.interpolative_to_tolerance(jax.random.key(0), inp, tol, failure_prob=fp,
                                         block_size=b).trim()
        jax.block_until_ready(d)
        secs = time.perf_counter() - t0
    A_used = A64.astype(dtype).astype(np.float64)      # the matrix the call saw
    err = true_error(A_used, d)
    est = float(d.error_estimate)
    # (before 0.2.1 the result had no flag: a user could only read estimate <= tol)
    conv = bool(d.converged) if hasattr(d, "converged") else est <= tol
    reason = d.reason() if hasattr(d, "reason") else "(no field)"
    if fp is not None:      # a certified bound must be above the truth whenever converged
        honest = (not conv) or (err <= tol and est >= err * (1 - 1e-3))
    else:                   # an estimate: converged means the true error is within tol
        honest = (not conv) or err <= tol * 1.0001
    msgs = [str(w.message).split("\n")[0] for w in caught
            if issubclass(w.category, RuntimeWarning)]
    if svals.get(name) is None:
        svals[name] = np.linalg.svd(A64, compute_uv=False)
    return dict(matrix=name, dtype=dtype, input=kind, tol=tol, failure_prob=fp,
                rank=int(d.rank), optimal_rank=optimal_rank(svals[name], tol),
                estimate=est, true_error=err, converged=conv, reason=reason,
                honest=bool(honest), seconds=round(secs, 2), warnings=msgs)


def main(argv=None):
    ap = parser(__doc__, quick="the small matrices only")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    mats, svals, rows = matrices(args.quick), {}, []
    print(f"rdr_jax {R.__version__}, jax {jax.__version__}")
    hdr = (f"{'matrix':18s} {'dtype':7s} {'input':8s} {'tol':>7s} {'fp':>5s} {'rank':>5s} "
           f"{'opt':>4s} {'estimate':>9s} {'true':>9s} {'conv':>5s} {'reason':18s} honest")
    print(hdr)
    for case in cases(args.quick):
        r = run_case(mats, svals, case)
        rows.append(r)
        print(f"{r['matrix']:18s} {r['dtype']:7s} {r['input']:8s} {r['tol']:7.0e} "
              f"{str(r['failure_prob']):>5s} {r['rank']:5d} {r['optimal_rank']:4d} "
              f"{r['estimate']:9.2e} {r['true_error']:9.2e} {str(r['converged']):>5s} "
              f"{r['reason'][:18]:18s} {'yes' if r['honest'] else 'NO'}", flush=True)
        for w in r["warnings"]:
            print(f"    warning: {w}")
    bad = [r for r in rows if not r["honest"]]
    print(f"\n{len(rows) - len(bad)}/{len(rows)} rows honest")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(version=R.__version__, jax=jax.__version__, rows=rows), f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
