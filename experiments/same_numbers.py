"""Issue 32's "must hold": the same key gives the same numbers before and after a refactor, for
every decomposition and every method.

Records, for fixed keys, every array of the results of the public decompositions --
``interpolative`` (column, row, two-sided; eager and under ``jax.jit``), ``cur``,
``cur_with_bound``, ``interpolative_with_bound``, ``select_columns``/``rows``/``skeletons``,
``interpolative_to_tolerance``, ``streaming_skeletons``, ``error_bound``, ``eta_bound``,
``id_to_svd``, ``rsvd``, ``rangefinder`` and ``range_sketch`` -- over every pivot rule (LUPP,
CPQR, DEIM, leverage scores, SRCUR) and sketch (Gaussian, SRTT, sparse sign), the thesis'
power-iteration variants and the sketch interpolation, on a slow-decay matrix and a smooth
kernel (both 150 x 100: one compile per shape and dtype), in float64 and float32. An input a
method rejects is recorded as its error type. Writes a compressed ``.npz``; with
``--compare OLD.npz`` it prints, per array, whether it is bitwise identical, equal to rounding
(``--rtol``, relative to the array's largest entry) or different, and exits 1 on any
difference beyond rounding or any missing case.
To compare two commits, run it once from a checkout of each (``PYTHONPATH=<checkout>``).

    python experiments/same_numbers.py before.npz
    python experiments/same_numbers.py after.npz --compare before.npz
"""

import argparse
import sys
import warnings

import jax
import numpy as np

PIVOTS = ("lupp", "cpqr", "deim", "leverage", "srcur")
SKETCHES = ("gaussian", "srtt", "sparse_sign")
VARIANTS = ("Rand-LUPP-1piter", "Rand-CPQR-1piter")
K = 12


def matrices() -> dict:
    """The two test matrices (float64): slow singular-value decay and a smooth kernel."""
    rng = np.random.default_rng(1)
    U = np.linalg.qr(rng.standard_normal((150, 100)))[0]
    V = np.linalg.qr(rng.standard_normal((100, 100)))[0]
    x = np.linspace(0, 1, 150)[:, None]
    y = np.linspace(0, 1, 100)[None, :]
    return {"decay": (U / np.arange(1, 101)) @ V.T, "kernel": np.exp(-np.abs(x - y) / 0.3)}


def methods(R) -> dict:
    """name -> Method: every pivot rule with every sketch, the -1piter variants, and the
    sketch interpolation of LUPP."""
    out = {f"{p}/{s}": R.Method(p, sketch=s) for p in PIVOTS for s in SKETCHES}
    out.update({v: R.Method(v) for v in VARIANTS})
    out["lupp/gaussian/interp=sketch"] = R.Method("lupp", interp="sketch")
    return out


def _leaves(prefix: str, result, out: dict) -> None:
    """Every array leaf of ``result`` (a NamedTuple, dataclass or array) under
    ``prefix|path``."""
    flat, _ = jax.tree_util.tree_flatten_with_path(result)
    for path, leaf in flat:
        if leaf is None or isinstance(leaf, (str, bool)):
            continue
        arr = np.asarray(leaf)
        if arr.dtype.kind in "biufc" and arr.dtype != object:
            out[f"{prefix}|{jax.tree_util.keystr(path)}"] = arr


def _call(prefix: str, fn, out: dict) -> None:
    """Record ``fn()``'s arrays, or its error type as ``prefix|error``."""
    try:
        res = fn()
    except Exception as e:  # noqa: BLE001 -- a rejected input is part of the behaviour
        out[f"{prefix}|error"] = np.array(type(e).__name__)
        return
    _leaves(prefix, res, out)


def _release_executables(limit: int = 20000) -> None:
    """Free jax's compiled executables when this process holds more than ``limit`` memory
    maps: every XLA:CPU executable keeps ~10, and the thousands this recording compiles
    passed Linux's ``vm.max_map_count`` (65530; "LLVM compilation error: Cannot allocate
    memory", 2026-11-30). Recompiling changes no number."""
    try:
        with open("/proc/self/maps") as f:
            maps = sum(1 for _ in f)
    except OSError:          # not Linux
        return
    if maps > limit:
        jax.clear_caches()


def record(progress: bool = True) -> dict:
    """All recorded arrays, ``case|field`` -> ndarray."""
    import rdr_jax as R
    out: dict = {}
    key = jax.random.key(7)
    k2 = jax.random.key(8)
    for mname, A64 in matrices().items():
        for dt in ("float64", "float32"):
            A = A64.astype(dt)
            for name, M in methods(R).items():
                c = f"{mname}|{dt}|{name}"
                _release_executables()
                if progress:
                    print(c, file=sys.stderr, flush=True)
                kw = dict(method=M, on_rank_deficient="ignore")
                for side in ("column", "row", "two_sided"):
                    _call(f"{c}|interpolative/{side}",
                          lambda: R.interpolative(key, A, K, side=side, **kw), out)
                _call(f"{c}|interpolative/jit", lambda: jax.jit(
                    lambda kk: R.interpolative(kk, A, K, **kw))(key), out)
                _call(f"{c}|cur", lambda: R.cur(key, A, K, **kw), out)
                _call(f"{c}|cur/jit", lambda: jax.jit(lambda kk: R.cur(kk, A, K, **kw))(key),
                      out)
                _call(f"{c}|cur_with_bound", lambda: R.cur_with_bound(key, A, K, **kw), out)
                _call(f"{c}|interpolative_with_bound",
                      lambda: R.interpolative_with_bound(key, A, K, **kw), out)
                for sel in ("select_columns", "select_rows", "select_skeletons"):
                    _call(f"{c}|{sel}", lambda: getattr(R, sel)(key, A, K, method=M), out)
                _call(f"{c}|interpolative_to_tolerance", lambda: R.interpolative_to_tolerance(
                    key, A, 1e-3, method=M, max_rank=60), out)
                _call(f"{c}|streaming_skeletons", lambda: R.streaming_skeletons(
                    key, (A[i:i + 40] for i in range(0, A.shape[0], 40)), A.shape, K,
                    method=M), out)
                cur = R.cur(key, A, K, **kw)
                _call(f"{c}|error_bound", lambda: R.error_bound(k2, A, cur), out)
                _call(f"{c}|id_to_svd", lambda: R.id_to_svd(cur), out)
                _call(f"{c}|eta_bound", lambda: R.eta_bound(
                    A, R.select_columns(key, A, K, method=M)), out)
            for sk in SKETCHES:
                for q in (0, 1, 2):
                    for stable in (True, False):
                        c = f"{mname}|{dt}|{sk}/q={q}/stable={stable}"
                        _call(f"{c}|rsvd", lambda: R.rsvd(key, A, K, power_iters=q, sketch=sk,
                                                          stable=stable), out)
                        _call(f"{c}|rangefinder", lambda: R.rangefinder(
                            key, A, K + 5, power_iters=q, sketch=sk, stable=stable), out)
                        _call(f"{c}|range_sketch", lambda: R.range_sketch(
                            key, A, K + 5, power_iters=q, sketch=sk, stable=stable), out)
    return out


def compare(old: dict, new: dict, rtol: float) -> int:
    """Print the comparison; the number of arrays that differ beyond rounding or are
    missing on either side."""
    same = close = 0
    bad = []
    for name in sorted(set(old) | set(new)):
        if name not in old or name not in new:
            bad.append(f"{name}: only in {'old' if name in old else 'new'}")
            continue
        a, b = old[name], new[name]
        if a.shape != b.shape or a.dtype != b.dtype:
            bad.append(f"{name}: {a.dtype}{a.shape} -> {b.dtype}{b.shape}")
        elif np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"):
            same += 1
        elif a.dtype.kind in "fc":
            scale = max(float(np.nanmax(np.abs(a))), np.finfo(a.dtype).tiny) if a.size else 1.0
            diff = float(np.nanmax(np.abs(a - b))) / scale
            tol = rtol if a.dtype in (np.float64, np.complex128) else max(rtol, 1e-4)
            if diff <= tol:
                close += 1
            else:
                bad.append(f"{name}: max |diff| / max |old| = {diff:.2e}")
        else:
            bad.append(f"{name}: {int(np.sum(a != b))} of {a.size} entries differ")
    for line in bad:
        print("DIFFERENT", line)
    print(f"{same} arrays bitwise identical, {close} equal to rounding, {len(bad)} different "
          f"or missing (of {len(set(old) | set(new))})")
    return len(bad)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="the .npz to write")
    p.add_argument("--compare", metavar="OLD.npz", help="compare with an earlier recording")
    p.add_argument("--rtol", type=float, default=1e-10,
                   help="'equal to rounding' in float64, relative to the array's largest "
                        "entry (float32: at least 1e-4)")
    p.add_argument("--quiet", action="store_true", help="no per-case progress lines")
    args = p.parse_args(argv)
    with jax.enable_x64(True), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rec = record(progress=not args.quiet)
    np.savez_compressed(args.out, **rec)
    print(f"wrote {len(rec)} arrays to {args.out}")
    if args.compare:
        with np.load(args.compare) as f:
            old = {k: f[k] for k in f.files}
        return 1 if compare(old, rec, args.rtol) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
