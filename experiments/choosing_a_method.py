"""Which decomposition and which of the thesis' seven methods to use when: measured errors
and times on four kinds of matrices (the table of ``docs/choosing-a-method.md``).

Usage::

    python experiments/choosing_a_method.py            # full: 2000 x 1000, k = 10, 50 (~5 min)
    python experiments/choosing_a_method.py --quick    # 400 x 200, k = 10, fewer rows (< 30 s)

For each matrix (fast decay, slow decay, the kernel ``exp(-|x - y|)``, a sparse SNN matrix
given as ``scipy.sparse``) and rank k, every row reports the Frobenius error divided by the
optimal rank-k error ``||A - A_k||_F`` (from a full SVD; median over keys 1-3) and the warm
time (the fastest of ``--repeats`` calls; the compiling first call is reported apart in the
JSON).
Rows: the column ID with each of the seven methods (Gaussian sketch, rdr_jax's defaults),
other sketches, ``interp="sketch"``, row and two-sided IDs, CUR, rsvd, and
``scipy.linalg.interpolative.interp_decomp`` (randomized and pivoted QR) as references.
float64 throughout (scipy's precision). Time numpy/scipy without the machine's OpenBLAS
tuning variables: ``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python ...``.

Writes ``choosing_a_method.json`` and ``choosing_a_method.md`` to ``--out`` (default
``experiments/results/choosing_a_method/``, git-ignored).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Callable

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np
import scipy.linalg.interpolative as sli
import scipy.sparse as sp

import rdr_jax as R
from rdr_jax import matrices

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import env_info, parser  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "experiments" / "results" / "choosing_a_method"
#: the errors are the median over keys 1..ERROR_KEYS, whatever the number of timed calls
ERROR_KEYS = 3
SEVEN = ("Rand-LUPP", "Rand-LUPP-1piter", "Rand-CPQR", "Rand-CPQR-1piter", "RSVD-DEIM",
         "RSVD-LS", "SRCUR")


# -- matrices ----------------------------------------------------------------------------------
def kernel(m: int, n: int) -> np.ndarray:
    """``exp(-|x_i - y_j|)`` on uniform grids of [0, 1]."""
    x = np.linspace(0.0, 1.0, m)[:, None]
    y = np.linspace(0.0, 1.0, n)[None, :]
    return np.exp(-np.abs(x - y))


def sparse_snn(m: int, n: int, density: float, seed: int = 0) -> sp.csr_matrix:
    """``X diag(d) Y^T`` with sparse non-negative X, Y (the thesis' SNN construction,
    ``d_i = 2/i`` up to 100 then ``1/i``), returned as scipy CSR."""
    rng = np.random.default_rng(seed)
    r = min(m, n)
    X = sp.random(m, r, density=density, random_state=rng, format="csc")
    Y = sp.random(n, r, density=density, random_state=rng, format="csc")
    d = matrices.snn_spectrum(r)
    return (X @ sp.diags(d) @ Y.T).tocsr()


def make_matrices(m: int, n: int) -> dict:
    key = jax.random.key(0)
    return {
        "fast decay": np.asarray(matrices.with_spectrum(
            key, m, n, matrices.exponential_decay(n, r1=5, base=0.85, floor=1e-8), dtype=np.float64)),
        "slow decay": np.asarray(matrices.with_spectrum(
            key, m, n, matrices.polynomial_decay(n), dtype=np.float64)),
        "kernel exp(-|x-y|)": kernel(m, n),
        "sparse SNN": sparse_snn(m, n, density=10.0 / n),
    }


MATRIX_NOTES = {
    "fast decay": "`with_spectrum`: 5 singular values 1, then 0.85^(i-5)",
    "slow decay": "`with_spectrum`: 20 singular values 1, then (i-19)^(-1/2)",
    "kernel exp(-|x-y|)": "`exp(-|x_i - y_j|)` on uniform grids of [0, 1]",
    "sparse SNN": "`X diag(d) Y^T`, sparse non-negative X, Y; scipy CSR",
}


# -- the rows ----------------------------------------------------------------------------------
def method(name: str, sketch: str = "gaussian"):
    """``R.Method(name, sketch=...)``; the older spelling where that is not available yet."""
    try:
        return R.Method(name, sketch=sketch)
    except TypeError:
        from rdr_jax.id_cur.selection import resolve_method
        return resolve_method(name, sketch=sketch)


def _id(name, sketch="gaussian", side="column", interp=None):
    def run(key, A, k):
        m = method(name, sketch)
        if interp is not None:
            m = dataclasses.replace(m, interp=interp)
        return R.interpolative(key, A, k, side=side, method=m)
    return run


def _cur(name):
    return lambda key, A, k: R.cur(key, A, k, method=method(name))


def _rsvd(power_iters):
    return lambda key, A, k: R.rsvd(key, A, k, power_iters=power_iters)


def _scipy(rand: bool):
    def run(key, A, k):
        A = A.toarray() if sp.issparse(A) else A
        seed = int(jax.random.randint(key, (), 0, 2**31 - 1))
        idx, proj = sli.interp_decomp(A, k, rand=rand, rng=np.random.default_rng(seed))
        return A[:, idx[:k]], sli.reconstruct_interp_matrix(idx, proj)
    return run


@dataclasses.dataclass(frozen=True)
class Row:
    decomposition: str
    method: str
    sketch: str
    run: Callable
    quick: bool = False       # kept in --quick
    sparse: bool = True       # run on the sparse matrix too (first k only)
    all_k: bool = True        # every k on the dense matrices (else the first k only)
    numpy: bool = False       # a host (numpy/scipy) baseline


def rows() -> list[Row]:
    out = [Row("column ID", name, "gaussian", _id(name),
               quick=name in ("Rand-LUPP", "Rand-CPQR-1piter"))
           for name in SEVEN]
    out += [
        Row("column ID", "Rand-LUPP", "sparse_sign", _id("Rand-LUPP", "sparse_sign"),
            sparse=False),
        Row("column ID", "Rand-LUPP", "srtt", _id("Rand-LUPP", "srtt"), sparse=False,
            all_k=False),
        Row("column ID", "Rand-CPQR-1piter", "sparse_sign",
            _id("Rand-CPQR-1piter", "sparse_sign"), sparse=False),
        Row("column ID, interp=\"sketch\"", "Rand-LUPP", "gaussian",
            _id("Rand-LUPP", interp="sketch"), sparse=False, all_k=False),
        Row("row ID", "Rand-LUPP", "gaussian", _id("Rand-LUPP", side="row"), sparse=False,
            all_k=False),
        Row("two-sided ID", "Rand-LUPP", "gaussian", _id("Rand-LUPP", side="two_sided"),
            sparse=False, all_k=False),
        Row("CUR", "Rand-LUPP", "gaussian", _cur("Rand-LUPP")),
        Row("CUR", "Rand-CPQR-1piter", "gaussian", _cur("Rand-CPQR-1piter"), sparse=False),
        Row("rsvd", "power_iters=0", "gaussian", _rsvd(0)),
        Row("rsvd", "power_iters=1", "gaussian", _rsvd(1), quick=True),
        Row("scipy interp_decomp", "rand=True", "", _scipy(True), quick=True, numpy=True),
        Row("scipy interp_decomp", "rand=False (pivoted QR)", "", _scipy(False), quick=True,
            numpy=True),
    ]
    return out


# -- measuring ---------------------------------------------------------------------------------
def dense_approx(res) -> np.ndarray:
    """The m x n approximation a result stands for, in float64 on the host."""
    if isinstance(res, tuple) and len(res) == 2:                  # scipy: (C, W)
        return np.asarray(res[0]) @ np.asarray(res[1])
    if isinstance(res, R.RSVD):
        return (np.asarray(res.U) * np.asarray(res.s)) @ np.asarray(res.Vt)
    return np.asarray(res.todense(), np.float64)


def timed(fn, key, A, k):
    t = time.perf_counter()
    res = jax.block_until_ready(fn(key, A, k))
    return res, time.perf_counter() - t


def measure(row: Row, A, Ad: np.ndarray, k: int, opt: float, repeats: int) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, first = timed(row.run, jax.random.key(0), A, k)        # compile (rdr_jax)
        ratios, times = [], []
        for r in range(1, max(repeats, ERROR_KEYS) + 1):
            res, t = timed(row.run, jax.random.key(r), A, k)
            if r <= ERROR_KEYS:
                ratios.append(float(np.linalg.norm(Ad - dense_approx(res)) / opt))
            if r <= repeats:
                times.append(t)
    return {"ratio": statistics.median(ratios), "ratio_max": max(ratios),
            "time_ms": 1e3 * min(times), "first_ms": 1e3 * first}


def run(args) -> dict:
    m, n = (400, 200) if args.quick else (2000, 1000)
    ks = [10] if args.quick else [10, 50]
    repeats = args.repeats or (2 if args.quick else 5)
    mats = make_matrices(m, n)
    if args.quick:                  # the dense kinds share their compilations
        mats.pop("sparse SNN")
    table = [r for r in rows() if r.quick or not args.quick]
    results = []
    for name, A in mats.items():
        Ad = A.toarray() if sp.issparse(A) else A
        t_svd = []
        for _ in range(2):          # OpenBLAS wakes its threads on the first call
            t = time.perf_counter()
            s = np.linalg.svd(Ad, compute_uv=False)
            t_svd.append(time.perf_counter() - t)
        normF = float(np.linalg.norm(s))
        for k in (ks[:1] if sp.issparse(A) else ks):
            opt = float(np.sqrt(np.sum(s[k:] ** 2)))
            results.append({"matrix": name, "k": k, "decomposition": "SVD (optimal)",
                            "method": "numpy svd", "sketch": "", "ratio": 1.0,
                            "ratio_max": 1.0, "time_ms": 1e3 * min(t_svd), "first_ms": None,
                            "opt_rel": opt / normF})
            for row in table:
                if sp.issparse(A) and (k != ks[0] or not row.sparse):
                    continue
                if k != ks[0] and not row.all_k:
                    continue
                res = measure(row, A, Ad, k, opt, repeats)
                res.update(matrix=name, k=k, decomposition=row.decomposition,
                           method=row.method, sketch=row.sketch, opt_rel=opt / normF,
                           first_ms=None if row.numpy else res["first_ms"])
                results.append(res)
                print(f"{name:20s} k={k:<3d} {row.decomposition:28s} {row.method:24s} "
                      f"{row.sketch:12s} {res['ratio']:7.3f}x  {res['time_ms']:9.1f} ms",
                      flush=True)
    return {"shape": [m, n], "ks": ks, "repeats": repeats, "quick": bool(args.quick),
            "load_average": [round(x, 1) for x in os.getloadavg()],
            "date": datetime.date.today().isoformat(), "env": env_info(),
            "command": "python experiments/choosing_a_method.py"
                       + (" --quick" if args.quick else ""),
            "matrices": MATRIX_NOTES, "results": results}


def markdown(data: dict) -> str:
    """One table per matrix: error / optimal and warm time per k."""
    ks = data["ks"]
    m, n = data["shape"]
    lines = [f"{m} x {n}, float64, k = {', '.join(map(str, ks))}; error = "
             "`||A - A_hat||_F / ||A - A_k||_F` (median over "
             f"{ERROR_KEYS} keys), "
             f"ms = fastest of {data['repeats']} warm calls (compilation excluded). "
             f"{data['env']['device_kind']}, jax {data['env']['jax']}, {data['date']}, load "
             f"average at the end {data['load_average'][0]} on "
             f"{data['env']['cpu_count']} cores.", ""]
    for name, note in data["matrices"].items():
        sel = [r for r in data["results"] if r["matrix"] == name]
        if not sel:
            continue
        opt = {r["k"]: r["opt_rel"] for r in sel if r["decomposition"] == "SVD (optimal)"}
        here = [k for k in ks if k in opt]
        lines += [f"**{name}** ({note}; optimal relative error "
                  + ", ".join(f"{opt[k]:.1e} at k = {k}" for k in here) + ")", ""]
        head = "| decomposition | method | sketch | " + " | ".join(
            f"error k={k} | ms k={k}" for k in here) + " |"
        lines += [head, "|" + " --- |" * 3 + " ---: | ---: |" * len(here)]
        keys = list(dict.fromkeys((r["decomposition"], r["method"], r["sketch"]) for r in sel))
        for dec, meth, sk in keys:
            cells = []
            for k in here:
                hit = [r for r in sel if (r["decomposition"], r["method"], r["sketch"], r["k"])
                       == (dec, meth, sk, k)]
                cells += ([f"{hit[0]['ratio']:.3f}", f"{hit[0]['time_ms']:.1f}"] if hit
                          else ["", ""])
            lines.append(f"| {dec} | {meth} | {sk} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def parse_args(argv=None):
    p = parser(__doc__, quick="400 x 200, k = 10, fewer rows", out=DEFAULT_OUT)
    p.add_argument("--repeats", type=int, default=0,
                   help="timed calls per row, the fastest reported (default 5; 2 with --quick); "
                        "errors are the median over keys 1-3")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    t = time.perf_counter()
    data = run(args)
    data["wall_s"] = time.perf_counter() - t
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "choosing_a_method.json").write_text(json.dumps(data, indent=1))
    md = markdown(data)
    (args.out / "choosing_a_method.md").write_text(md + "\n")
    print()
    print(md)
    print(f"wall time {data['wall_s']:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
