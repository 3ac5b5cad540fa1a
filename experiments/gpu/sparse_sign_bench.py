"""Sparse sign vs Gaussian sketch on one device: draw + apply, each inside one jitted call.

The question (issue 22): on a GPU, is drawing and applying a sparse sign sketch (the sorted
segment-sum lowering of :func:`rdr_jax._src.kernels.sparse_sign_matmul`) faster than a Gaussian
sketch, whose GEMM runs at the backend's default precision (TF32 on NVIDIA GPUs) and, under
``jax.default_matmul_precision("highest")``, in full float32? On CPU the sparse sign product
is the numba kernel, and ``sparse_sign_xla`` times the XLA formula for comparison.

Each timed call is one jitted function of (key, A), warmed up first and followed by
``jax.block_until_ready``; the methods are timed round-robin (one call each per round), so
slow drifts of a shared machine hit them alike. Reported: medians, minima and ratios.

Run (from the repository root)::

    python experiments/gpu/sparse_sign_bench.py                 # m=65536, n=256, l=512, zeta=8
    python experiments/gpu/sparse_sign_bench.py --m 8192 --repeats 5 --out bench.json
    python experiments/gpu/sparse_sign_bench.py --cpu-routes     # CPU: kernel vs fallbacks
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rdr_jax._src import kernels as _kernels  # noqa: E402
from rdr_jax.sketching import Gaussian, SparseSign  # noqa: E402

#: method -> what it times (all: one jitted call of (key, A))
METHODS = {
    "floor": "one read of A (column sums): the memory floor",
    "sparse_sign": "SparseSign(zeta).draw(key, l, m).apply(A)",
    "sparse_sign_xla": "the same with apply_dense(A, impl='xla') (sorted XLA formula)",
    "gaussian": "Gaussian().draw(key, l, m).apply(A), default matmul precision",
    "gaussian_highest": "the same under jax.default_matmul_precision('highest')",
}


def _methods(m: int, l: int, zeta: int, dt):
    def sparse(key, A):
        return SparseSign(zeta).draw(key, l, m, dtype=dt).apply(A)

    def sparse_xla(key, A):
        return SparseSign(zeta).draw(key, l, m, dtype=dt).apply_dense(A, impl="xla")

    def gauss(key, A):
        return Gaussian().draw(key, l, m, dtype=dt).apply(A)

    highest = lambda: jax.default_matmul_precision("highest")  # noqa: E731
    # name -> (jitted function, context active while it is traced and run)
    return {"floor": (jax.jit(lambda key, A: jnp.sum(A, axis=0)), nullcontext),
            "sparse_sign": (jax.jit(sparse), nullcontext),
            "sparse_sign_xla": (jax.jit(sparse_xla), nullcontext),
            "gaussian": (jax.jit(gauss), nullcontext),
            "gaussian_highest": (jax.jit(gauss), highest)}


def bench_sparse_vs_gaussian(m: int = 65536, n: int = 256, l: int = 512, zeta: int = 8,
                             repeats: int = 20, *, dtype="float32", seed: int = 0) -> dict:
    """Time drawing + applying a sparse sign and a Gaussian sketch (l x m) to A (m x n).

    Args:
      m, n, l, zeta: A's shape, the sketch size and the sparse sign's nonzeros per column.
      repeats: timed calls per method (after two warm-up calls).
      dtype: ``"float32"`` (default) or ``"float64"`` (needs ``jax_enable_x64``).
      seed: seeds A and the keys.

    Returns:
      A dict: ``backend``, ``device``, versions, the sizes, ``median_s``/``min_s`` per method
      (:data:`METHODS`), ``ratios`` (``gaussian / sparse_sign``,
      ``gaussian_highest / sparse_sign``, ``sparse_sign / floor``, ``sparse_sign_xla /
      sparse_sign``, from medians), ``max_rel_diff_xla`` (sparse sign routes agree) and
      ``cpu_kernels`` (whether the numba kernels ran; CPU only).
    """
    dt = np.dtype(dtype)
    key_a, key_s = jax.random.split(jax.random.key(seed))
    A = jax.block_until_ready(jax.random.normal(key_a, (m, n), dt))
    keys = jax.random.split(key_s, repeats + 2)
    fns = _methods(m, l, zeta, dt)
    outs, times = {}, {name: [] for name in fns}
    for name, (fn, ctx) in fns.items():      # compile and warm up
        with ctx():
            jax.block_until_ready(fn(keys[0], A))
            outs[name] = jax.block_until_ready(fn(keys[1], A))
    for r in range(repeats):                 # round-robin
        for name, (fn, ctx) in fns.items():
            with ctx():
                t0 = time.perf_counter()
                jax.block_until_ready(fn(keys[r + 2], A))
                times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    ref = np.asarray(outs["sparse_sign"], np.float64)
    diff = np.abs(np.asarray(outs["sparse_sign_xla"], np.float64) - ref).max()
    backend = jax.default_backend()
    return {
        "backend": backend,
        "device": jax.devices()[0].device_kind,
        "jax": jax.__version__,
        "jaxlib": _jaxlib_version(),
        "m": m, "n": n, "l": l, "zeta": zeta, "dtype": dt.name, "repeats": repeats,
        "median_s": med,
        "min_s": {k: min(v) for k, v in times.items()},
        "ratios": {
            "gaussian / sparse_sign": med["gaussian"] / med["sparse_sign"],
            "gaussian_highest / sparse_sign": med["gaussian_highest"] / med["sparse_sign"],
            "sparse_sign / floor": med["sparse_sign"] / med["floor"],
            "sparse_sign_xla / sparse_sign": med["sparse_sign_xla"] / med["sparse_sign"],
        },
        "max_rel_diff_xla": float(diff / max(np.abs(ref).max(), 1e-300)),
        "cpu_kernels": _kernels.cpu_kernels_status()[0] if backend == "cpu" else None,
    }


#: CPU route -> how ``Gamma @ A`` (pre-drawn sketch, inside jit) is computed
CPU_ROUTES = {
    "floor": "one read of A (column sums)",
    "kernel": "numba kernel through the XLA FFI (the default on CPU)",
    "csr": "fallback (RDR_JAX_CPU_KERNELS=0): sort by row, jaxlib's CSR kernel (BCSR @ A)",
    "segment_sum": "the GPU/TPU formula on CPU: sort by row, sorted segment_sum",
    "scatter": "the previous XLA formula: unsorted scatter-add",
}


def bench_cpu_routes(m: int = 16384, n: int = 256, l: int = 512, zeta: int = 8,
                     repeats: int = 15, *, dtype="float32", seed: int = 0) -> dict:
    """Time ``Gamma @ A`` for a pre-drawn sparse sign sketch by each route of
    :data:`CPU_ROUTES` (CPU backend; each route compiled once, then timed round-robin).
    Returns medians, minima, ``ratios`` to the kernel (medians) and the routes' largest
    difference to the kernel (relative to its largest entry)."""
    dt = np.dtype(dtype)
    key_a, key_s = jax.random.split(jax.random.key(seed))
    A = jax.block_until_ready(jax.random.normal(key_a, (m, n), dt))
    S = SparseSign(zeta).draw(key_s, l, m, dtype=dt)
    env, prev_env = _kernels.KERNELS_ENV, os.environ.get(_kernels.KERNELS_ENV)
    prev_accel = _kernels._CPU_FALLBACK_AS_ACCELERATOR

    def scatter(S, A):
        upd = S.signs.T[:, :, None] * A[None, :, :]
        return jnp.zeros((l, n), A.dtype).at[S.rows.T].add(upd)

    fns, outs = {}, {}
    try:
        for name in CPU_ROUTES:   # each route is fixed when its function is compiled
            if name == "kernel":
                os.environ.pop(env, None)
            else:
                os.environ[env] = "0"
            _kernels._CPU_FALLBACK_AS_ACCELERATOR = name == "segment_sum"
            f = jax.jit({"floor": lambda S, A: jnp.sum(A, axis=0), "scatter": scatter}.get(
                name, lambda S, A: S.apply(A)))
            f = f.lower(S, A).compile()
            outs[name] = jax.block_until_ready(f(S, A))
            fns[name] = f
    finally:
        _kernels._CPU_FALLBACK_AS_ACCELERATOR = prev_accel
        if prev_env is None:
            os.environ.pop(env, None)
        else:
            os.environ[env] = prev_env
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, f in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(f(S, A))
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    ref = np.asarray(outs["kernel"], np.float64)
    scale = max(np.abs(ref).max(), 1e-300)
    return {"backend": jax.default_backend(), "m": m, "n": n, "l": l, "zeta": zeta,
            "dtype": dt.name, "repeats": repeats, "threads": _numba_threads(),
            "median_s": med, "min_s": {k: min(v) for k, v in times.items()},
            "ratios": {f"{k} / kernel": med[k] / med["kernel"] for k in med if k != "kernel"},
            "max_rel_diff": {k: float(np.abs(np.asarray(outs[k], np.float64) - ref).max()
                                      / scale) for k in outs if k not in ("kernel", "floor")}}


def _numba_threads():
    try:
        import numba
        return int(numba.get_num_threads())
    except Exception:  # pragma: no cover
        return None


def _jaxlib_version():
    try:
        import jaxlib
        return jaxlib.__version__
    except Exception:  # pragma: no cover
        return None


def format_table(res: dict) -> str:
    lines = [f"## sparse sign vs Gaussian: m={res['m']}, n={res['n']}, l={res['l']}, "
             f"zeta={res['zeta']}, {res['dtype']}, {res['backend']} ({res['device']}), "
             f"jax {res['jax']}, {res['repeats']} repeats",
             "", "| method | median ms | min ms | what |", "| --- | --- | --- | --- |"]
    for k, what in METHODS.items():
        lines.append(f"| {k} | {res['median_s'][k] * 1e3:.3f} | {res['min_s'][k] * 1e3:.3f} "
                     f"| {what} |")
    lines.append("")
    lines += [f"- {k}: {v:.2f}" for k, v in res["ratios"].items()]
    lines.append(f"- max relative difference, xla formula vs default route: "
                 f"{res['max_rel_diff_xla']:.1e}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=None, help="default 65536 (16384 with --cpu-routes)")
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--l", type=int, default=512)
    ap.add_argument("--zeta", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=None, help="default 20 (15 with --cpu-routes)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    ap.add_argument("--cpu-routes", action="store_true",
                    help="instead: time Gamma @ A by each CPU route (kernel, fallbacks); "
                         "defaults then m=16384, repeats=15")
    args = ap.parse_args(argv)
    if args.cpu_routes:
        m, reps = args.m or 16384, args.repeats or 15
        with jax.enable_x64(args.dtype == "float64"):
            res = bench_cpu_routes(m, args.n, args.l, args.zeta, reps, dtype=args.dtype)
        print(f"## Gamma @ A on CPU by route: m={res['m']}, n={res['n']}, l={res['l']}, "
              f"zeta={res['zeta']}, {res['dtype']}, {res['threads']} numba threads, "
              f"{res['repeats']} repeats\n\n| route | median ms | min ms | what |\n"
              "| --- | --- | --- | --- |")
        for k, what in CPU_ROUTES.items():
            print(f"| {k} | {res['median_s'][k] * 1e3:.2f} | {res['min_s'][k] * 1e3:.2f} | "
                  f"{what} |")
        print("\n" + "\n".join(f"- {k}: {v:.2f}" for k, v in res["ratios"].items()))
        print("- max relative difference to the kernel: " + ", ".join(
            f"{k} {v:.1e}" for k, v in res["max_rel_diff"].items()))
        if args.out is not None:
            args.out.write_text(json.dumps(res, indent=2))
        return res
    with jax.enable_x64(args.dtype == "float64"):
        res = bench_sparse_vs_gaussian(args.m or 65536, args.n, args.l, args.zeta,
                                       args.repeats or 20, dtype=args.dtype)
    print(format_table(res))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":
    main()
