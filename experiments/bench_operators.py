"""Benchmark: protocol operations of the factored SNN operator (thesis Section 2.5.3).

``A = L diag(d) R^H`` with sparse L, R (m x 400, n x 400, about two nonzeros per row), float64
(``jax_enable_x64``): the 10^6 x 10^6 ``snn1e6`` (full) or a 10^5 x 10^5 instance (``--quick``).
Operations, with l = 210 and k = 200 (``--l``, ``--k``):

* ``gaussian(key, l, m, generator="threefry").apply(A)`` -- Gaussian row sketch, through
  the sparse factor L (``S L``, then ``(S L) diag(d) R^H``); also with ``generator="hash"``,
  and the generation alone (``todense``), which is the floor of the Gaussian rows;
* ``sparse_sign(key, l, m).apply(A)`` for comparison;
* ``A.cols(J)`` (m x k), ``A.rows(I)`` (k x n), ``A.matmat(Q)``, ``A.rmatmat(Q)`` (Q dense).

Columns: ``eager`` = the public call outside jit, ``jit`` = the same call inside ``jax.jit``,
``jit/eager`` their ratio. Both run the same primitives (:mod:`rdr_jax._src.kernels`): on CPU the
numba kernels reached through the XLA FFI, which read and write XLA's buffers in place, so the
ratio should be close to 1 (eager calls dispatch each primitive as its own compiled call; the
earlier ``pure_callback`` route copied every operand and made jit the slow path).
``xla (before)`` = the XLA formulas (sorted segment sums over the (nnz x b) intermediate in
column blocks, Gamma^H materialised and transposed; the GPU/TPU lowering of the same
primitives), timed only with ``--before`` (default in ``--quick``; about 3 minutes at full
size). Times are seconds, the minimum over ``--repeats`` calls after two warm-up calls (compile
excluded); every call ends with ``block_until_ready``. The ``reported`` column holds the times
of the XLA implementation measured before the numba kernels (10^6 only). The machine is shared
and noisy: compare columns of one run.

Run (from the repository root)::

    python experiments/bench_operators.py            # snn1e6, 10^6 x 10^6
    python experiments/bench_operators.py --quick    # 10^5 x 10^5, with the xla column

float64: needed because it times the thesis' float64 SNN operator of the README table (scoped
jax.enable_x64).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import rdr_jax
from rdr_jax import operators as ops

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import gaussian, parser, sparse_sign, time_calls  # noqa: E402

F64 = jnp.float64
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "bench_operators"
# previous implementation on snn1e6, seconds (measured before the numba kernels)
REPORTED_1E6 = {"sketch_gauss": 73.7, "cols": 13.9, "rows": 10.3, "matmat": 20.7}



def _timeit(fn, args, repeats):
    return min(time_calls(fn, *args, repeats=repeats)[0])   # best of the timed calls


# ---- the previous implementation (XLA segment sums), for the "before" column -------------
def _old_sparse_matmat(S, X):
    return ops._spmm_xla(X, S, False)


def _old_apply_sketch(A, G):
    SL = _old_sparse_matmat(A.L.H, G.conj().T).conj().T  # L^H Gamma^H, transposed
    return _old_sparse_matmat(A.R, A.d.conj()[:, None] * SL.conj().T).conj().T


def _old_sign_sketch(A, S):
    from rdr_jax._src import kernels as _kernels
    L = A.L
    SL = _kernels.sparse_sign_sparse_xla(L.data_c, S.rows, S.signs.astype(L.dtype), L.row_c,
                                         L.col_c, L.indptr_c, l=S.l, n=L.shape[1])
    return _old_sparse_matmat(A.R, A.d.conj()[:, None] * SL.conj().T).conj().T


def _old_ops(A, l, m):
    return {
        "sketch_sign": lambda S: _old_sign_sketch(A, S),
        "sketch_gauss": lambda k: _old_apply_sketch(
            A, gaussian(k, l, m, dtype=F64, generator="threefry").todense()),
        "sketch_hash": lambda k: _old_apply_sketch(
            A, gaussian(k, l, m, dtype=F64, generator="hash").todense()),
        "cols": lambda J: _old_sparse_matmat(A.L, A.d[:, None] * A.R.rows(J).conj().T),
        "rows": lambda I: _old_sparse_matmat(
            A.R, A.d.conj()[:, None] * A.L.rows(I).conj().T).conj().T,
        "matmat": lambda Q: _old_sparse_matmat(
            A.L, A.d[:, None] * _old_sparse_matmat(A.R.H, Q)),
        "rmatmat": lambda Q: _old_sparse_matmat(
            A.R, A.d[:, None] * _old_sparse_matmat(A.L.H, Q)),
    }


def _main(argv=None):
    p = parser(__doc__, quick="10^5 x 10^5 instead of 10^6", seed=0, out=DEFAULT_OUT)
    p.add_argument("--l", type=int, default=210)
    p.add_argument("--k", type=int, default=200)
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--before", action=argparse.BooleanOptionalAction, default=None,
                   help="also time the previous XLA implementation (default: only --quick)")
    a = p.parse_args(argv)
    repeats = a.repeats or (3 if a.quick else 1)
    before = a.quick if a.before is None else a.before

    key = jax.random.key(a.seed)
    t0 = time.perf_counter()
    if a.quick:
        A = rdr_jax.matrices.snn(key, 10**5, 10**5, r=400, density=2 / 400, factored=True,
                                 dtype=F64)
    else:
        A = rdr_jax.matrices.snn1e6(key, dtype=F64)
    m, n = A.shape
    l, k = a.l, a.k
    print(f"# bench_operators: factored SNN {m} x {n}, r={A.L.shape[1]}, nnz(L)={A.L.nnz}, "
          f"nnz(R)={A.R.nnz}, float64, l={l}, k={k}, repeats={repeats}  "
          f"(built in {time.perf_counter() - t0:.1f} s)")
    print(f"jax {jax.__version__} | backend {jax.default_backend()} | CPUs {os.cpu_count()} | "
          f"load average {os.getloadavg()[0]:.1f}")

    kk, kq, ki = jax.random.split(jax.random.key(a.seed + 1), 3)
    I = jax.random.choice(ki, m, (k,), replace=False)
    J = jax.random.choice(ki, n, (k,), replace=False)
    Qn = jax.random.normal(kq, (n, k), F64)
    Qm = jax.random.normal(kq, (m, k), F64)
    S_sign = sparse_sign(kk, l, m, 8, dtype=F64)
    rows = {  # name: (label, public call, args)
        "gen_threefry": ("gaussian threefry: generate Gamma only",
                         lambda key: gaussian(key, l, m, dtype=F64,
                                              generator="threefry").todense(), (kk,)),
        "gen_hash": ("gaussian hash: generate Gamma only",
                     lambda key: gaussian(key, l, m, dtype=F64, generator="hash").todense(),
                     (kk,)),
        "sketch_gauss": ("gaussian(key, l, m).apply(A)  [threefry]",
                         lambda key: A.apply_sketch(gaussian(key, l, m, dtype=F64,
                                                             generator="threefry")), (kk,)),
        "sketch_hash": ("gaussian(..., generator='hash').apply(A)",
                        lambda key: A.apply_sketch(gaussian(key, l, m, dtype=F64,
                                                            generator="hash")), (kk,)),
        "sketch_sign": ("sparse_sign(key, l, m).apply(A) (pre-drawn)",
                        lambda S: A.apply_sketch(S), (S_sign,)),
        "cols": (f"A.cols(J), {m} x {k}", lambda J: A.cols(J), (J,)),
        "rows": (f"A.rows(I), {k} x {n}", lambda I: A.rows(I), (I,)),
        "matmat": (f"A.matmat(Q), Q {n} x {k}", lambda Q: A.matmat(Q), (Qn,)),
        "rmatmat": (f"A.rmatmat(Q), Q {m} x {k}", lambda Q: A.rmatmat(Q), (Qm,)),
    }
    old = _old_ops(A, l, m) if before else {}
    results = {}
    head = f"{'operation':46s} {'eager':>8s} {'jit':>8s} {'jit/eager':>9s}"
    head += f" {'xla (before)':>13s}" if before else ""
    head += f" {'reported':>9s}" if not a.quick else ""
    print(head)
    print("-" * len(head))
    for name, (label, fn, args) in rows.items():
        r = {"eager": _timeit(fn, args, repeats), "jit": _timeit(jax.jit(fn), args, repeats)}
        line = (f"{label:46s} {r['eager']:8.3f} {r['jit']:8.3f} "
                f"{r['jit'] / r['eager']:9.2f}")
        if before:
            if name in old:
                r["xla_before"] = _timeit(jax.jit(old[name]), args, repeats)
                line += f" {r['xla_before']:13.2f}"
            else:
                line += f" {'':>13s}"
        if not a.quick:
            line += f" {REPORTED_1E6[name]:9.1f}" if name in REPORTED_1E6 else f" {'':>9s}"
        print(line, flush=True)
        results[name] = r
    ratios = {name: r["jit"] / r["eager"] for name, r in results.items()}
    worst = max(ratios, key=ratios.get)
    print(f"jit / eager: median {np.median(list(ratios.values())):.2f}, max "
          f"{ratios[worst]:.2f} ({worst})")
    # correctness spot check of the new paths against the XLA path (small slices)
    if before:
        errs = {}
        for name in ("cols", "rows", "matmat", "sketch_gauss", "sketch_sign"):
            fn, args = rows[name][1], rows[name][2]
            new, ref = np.asarray(fn(*args)), np.asarray(jax.jit(old[name])(*args))
            errs[name] = float(np.abs(new - ref).max() / np.abs(ref).max())
        print("max relative difference new vs xla:",
              ", ".join(f"{k}={v:.1e}" for k, v in errs.items()))
    a.out.mkdir(parents=True, exist_ok=True)
    tag = "quick" if a.quick else "full"
    (a.out / f"results_{tag}.json").write_text(json.dumps(
        {"m": m, "n": n, "l": l, "k": k, "repeats": repeats, "seconds": results,
         "reported_before_1e6": REPORTED_1E6}, indent=1))
    print(f"wrote {a.out / f'results_{tag}.json'}")


def main(argv=None):
    """Run the benchmark in float64 (scoped: the process-wide x64 flag is left alone)."""
    with jax.enable_x64(True):
        return _main(argv)


if __name__ == "__main__":
    main()
