"""The Fortran ID as the CPU anchor (issue 30, item 2): rank-k column ID with rdr_jax against
scipy 1.14.1's Fortran ``scipy.linalg.interpolative.interp_decomp`` and the installed scipy's.

Why: scipy 1.15 replaced the Fortran id_dist behind ``scipy.linalg.interpolative`` with a
Python/Cython port that is 22-56x slower, so the installed scipy is a weak reference. The
strongest CPU reference is scipy 1.14.1's Fortran ``interp_decomp``; this script runs it from a
side virtual environment on the same matrices (float64) as the installed scipy and rdr_jax.

Run (from the repository root; the ``env -u`` gives numpy's OpenBLAS its normal kernels on the
machines that set those two variables; every child process inherits the environment)::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python experiments/bench_fortran_id.py
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python experiments/bench_fortran_id.py --quick
    ... --blas-threads 1      # also rows with OPENBLAS_NUM_THREADS=1 in the children
    ... --no-create           # only look for the side venv, never create it
    ... --workdir DIR         # keep the matrices and their singular values in DIR (reruns)

The side venv: ``$RDR_JAX_FORTRAN_VENV`` or ``~/.cache/rdr_jax/scipy-1.14.1-venv``; when it has
no scipy 1.14.1 it is created with ``python -m venv`` and ``pip install scipy==1.14.1
"numpy>=2.0,<2.1" threadpoolctl`` (binary wheels from the package registry; about a minute),
unless ``--no-create``. Its interpreter runs ``experiments/_fortran_child.py`` (numpy and
scipy only), which loads the matrices from ``.npy`` files in a temporary directory and times
``interp_decomp(A, k)`` (randomized, ``rand=True``, the default: id_dist's ``iddr_aid``, a
subsampled randomized Fourier transform with ``l = k + 8`` rows, a pivoted Gram-Schmidt ID
of that sketch and the coefficients ``proj`` from the sketch) and ``interp_decomp(A, k,
rand=False)`` (``iddr_id``, the pivoted QR of all of A; deterministic; fewer repeats).

Measured, each in its own child process, on the same matrices:

* ``Fortran 1.14.1``: the side venv's ``interp_decomp(A, k)`` (and ``rand=False``);
* ``scipy <installed>``: the main interpreter's ``interp_decomp(A, k)`` (the Cython port;
  note that its ``rand=True`` path falls back to the deterministic ``iddr_id`` for every
  input, as the errors show: the same as Fortran's ``rand=False``);
* ``rdr_jax default``: ``rdr_jax.interpolative(jax.random.key(0), A, k)`` (column ID,
  Rand-LUPP, Gaussian hash sketch, ``l = k + 10``, ``W = C^+ A``);
* ``rdr_jax interp=sketch``: ``method=rdr_jax.Method("Rand-LUPP", interp="sketch")``
  (``W`` from the sketch, as the Fortran's ``proj``);
* ``rdr_jax sparse_sign``: ``method=rdr_jax.Method("Rand-LUPP", sketch="sparse_sign")``.

Timing: warm. scipy: one untimed call, then ``--repeats`` timed calls (``--scipy-repeats`` for
the slow installed scipy, ``min(2, --repeats)`` for ``rand=False``); rdr_jax: two untimed
calls (compile, then caches), then ``--repeats`` calls, each ``jax.block_until_ready``. The
table shows the median (the min is in the JSON), speed-ups as ratios of medians, the error
``||A - A[:, cols] W||_F / ||A||_F`` (one draw, seed/key 0) over the optimal rank-k error
from the SVD (computed once per matrix, cached in the work directory), and the 1-minute load
average right after the timed calls; a row taken with a load above the core count is marked
``retake``. ``--blas-threads N`` adds the installed scipy and rdr_jax rows again with
``OPENBLAS_NUM_THREADS=N`` set in the CHILD's environment (a user's choice on a small CPU;
the library never does it); speed-ups are always against the default-environment rows.

Matrices (float64; k in {50, 200}; ``--quick``: 1000 x 600, k in {20, 50}, well under a
minute once the venv exists):

* ``slow_decay`` 4000 x 2000, singular values ``i^(-1/2)``, random orthogonal factors, seed 0
  (``experiments/bench_cur.slow_decay``);
* ``smooth_kernel`` ``exp(-|x - y| / 0.3)`` on 3000 x 2000 grid points of [0, 1]
  (``experiments/bench_cur.smooth_kernel``);
* ``image_patches`` 3000 x 2000, real images: each row a 40 x 50 grayscale patch (seed 0) of
  one of scikit-image's sample photographs shipped inside the package (camera, moon, coins,
  brick, ..., no download): a substitute for the thesis' YaleFace (rows = images);
* ``sparse_zipf`` 4000 x 3000 scipy.sparse CSR, 1% random nonzeros in (0, 1] with Zipf-like
  row and column weights (term-document-like): rdr_jax takes the CSR matrix directly;
  ``interp_decomp`` takes a dense array or a LinearOperator, and the dense path is timed for
  both scipys (the densification is not timed).

Targets (per matrix, at each k, against the Fortran's ``rand=True`` row, default environment):
rdr_jax default >= 3x faster than the Fortran with error/optimal no worse than the Fortran's;
``interp="sketch"`` >= 5x faster with error/optimal within 5% of the Fortran's.

Results: raw JSON ``bench_fortran_id[_quick].json`` in ``--out`` (default
``experiments/results/bench_fortran_id``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CHILD = HERE / "_fortran_child.py"
sys.path.insert(0, str(HERE))

from _fortran_child import optimal_rel_error, rel_error  # noqa: E402
from _common import parser  # noqa: E402

FORTRAN_SCIPY = "1.14.1"
FORTRAN_PIP = [f"scipy=={FORTRAN_SCIPY}", "numpy>=2.0,<2.1", "threadpoolctl"]
DEFAULT_VENV = Path("~/.cache/rdr_jax/scipy-1.14.1-venv").expanduser()
SLOW_BLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")

#: (speed-up over the Fortran's rand=True, error/optimal at most this times the Fortran's)
TARGETS = {"rdr_jax default": (3.0, 1.0), "rdr_jax interp=sketch": (5.0, 1.05)}

RDR_METHODS = ("rdr_jax default", "rdr_jax interp=sketch", "rdr_jax sparse_sign")

FULL = {"shapes": {"slow_decay": (4000, 2000), "smooth_kernel": (3000, 2000),
                   "image_patches": (3000, 2000), "sparse_zipf": (4000, 3000)},
        "ks": (50, 200), "density": 0.01}
QUICK = {"shapes": {"slow_decay": (1000, 600), "smooth_kernel": (1000, 600),
                    "image_patches": (1000, 600), "sparse_zipf": (1000, 600)},
         "ks": (20, 50), "density": 0.02}


# --------------------------------------------------------------------------- the side venv

def venv_dir() -> Path:
    """``$RDR_JAX_FORTRAN_VENV`` or ``~/.cache/rdr_jax/scipy-1.14.1-venv``."""
    env = os.environ.get("RDR_JAX_FORTRAN_VENV")
    return Path(env).expanduser() if env else DEFAULT_VENV


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def child_env(extra=None, *, isolated=False) -> dict:
    """The children's environment: this process's (so ``env -u OPENBLAS_CORETYPE ...`` holds
    for them too), plus ``extra``; ``isolated`` (the side venv) drops PYTHONPATH/PYTHONHOME,
    which would put the installed scipy in front of the venv's."""
    env = dict(os.environ)
    if isolated:
        for v in ("PYTHONPATH", "PYTHONHOME"):
            env.pop(v, None)
    env.update(extra or {})
    return env


def venv_versions(py: Path):
    """(scipy, numpy) versions of the interpreter ``py``, or None when it cannot import them."""
    if not py.exists():
        return None
    r = subprocess.run([str(py), "-c", "import scipy, numpy; print(scipy.__version__, "
                        "numpy.__version__)"], capture_output=True, text=True,
                       env=child_env(isolated=True))
    if r.returncode != 0:
        return None
    scipy_v, numpy_v = r.stdout.split()
    return scipy_v, numpy_v


def find_or_create_venv(create: bool = True) -> Path:
    """The side venv's interpreter, with scipy 1.14.1 checked; created when absent (prints
    each step). Raises SystemExit with the fix when it cannot be found or made."""
    venv = venv_dir()
    py = venv_python(venv)
    src = "$RDR_JAX_FORTRAN_VENV" if os.environ.get("RDR_JAX_FORTRAN_VENV") else "default"
    print(f"side venv for the Fortran ID ({src}): {venv}")
    have = venv_versions(py)
    if have and have[0] == FORTRAN_SCIPY:
        print(f"  found: scipy {have[0]}, numpy {have[1]} ({py})")
        return py
    if have:
        raise SystemExit(f"  {venv} has scipy {have[0]}, not {FORTRAN_SCIPY}: point "
                         "RDR_JAX_FORTRAN_VENV at another directory (or remove this one)")
    if not create:
        raise SystemExit(f"  not found (--no-create). Create it with: {sys.executable} -m venv "
                         f"{venv} && {py} -m pip install " + " ".join(f"'{p}'" for p in FORTRAN_PIP))
    if venv.exists() and any(venv.iterdir()) and not py.exists():
        raise SystemExit(f"  {venv} exists but is not a venv: remove it or set "
                         "RDR_JAX_FORTRAN_VENV to an empty or new directory")
    print(f"  not found: creating it ({sys.executable} -m venv {venv})", flush=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    cmd = [str(py), "-m", "pip", "install", "--only-binary=:all:", *FORTRAN_PIP]
    print("  installing: " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=child_env(isolated=True))
    have = venv_versions(py)
    if not have or have[0] != FORTRAN_SCIPY:
        raise SystemExit(f"  the new venv {venv} has no scipy {FORTRAN_SCIPY} ({have})")
    print(f"  created: scipy {have[0]}, numpy {have[1]}")
    return py


# --------------------------------------------------------------------------- matrices

def _bench_cur():
    """``experiments/bench_cur`` (slow_decay, smooth_kernel), imported without keeping the
    process-wide ``jax_enable_x64`` it sets on import."""
    import jax
    prev = jax.config.jax_enable_x64
    try:
        import bench_cur
    finally:
        jax.config.update("jax_enable_x64", prev)
    return bench_cur


#: scikit-image sample photographs that ship inside the package (no download)
IMAGES = ("camera", "moon", "coins", "page", "text", "brick", "grass", "gravel", "clock",
          "cell", "astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field",
          "immunohistochemistry", "retina")


def _patch_shape(n: int) -> tuple[int, int]:
    ph = max(d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0)
    return ph, n // ph


def image_patches(m: int, n: int, seed: int = 0) -> np.ndarray:
    """m x n real-image matrix: row i is a ph x pw (``ph pw = n``, near square) grayscale patch
    at a random position (seed) of scikit-image sample photograph ``i mod 17``, values in
    [0, 1]. Rows = images, as in YaleFace (thesis), for which it is a substitute."""
    import skimage.data as sd
    ph, pw = _patch_shape(n)
    imgs = []
    for name in IMAGES:
        try:
            im = np.asarray(getattr(sd, name)(), dtype=np.float64)
        except Exception:  # noqa: BLE001 - a sample that is not shipped: skip it
            continue
        if im.ndim == 3:
            im = im[..., :3] @ np.array([0.2125, 0.7154, 0.0721])
        if im.shape[0] >= ph and im.shape[1] >= pw:
            imgs.append(im / max(im.max(), 1.0))
    if len(imgs) < 4:
        raise RuntimeError(f"only {len(imgs)} scikit-image sample images found")
    rng = np.random.default_rng(seed)
    A = np.empty((m, n))
    for i in range(m):
        im = imgs[i % len(imgs)]
        r = rng.integers(0, im.shape[0] - ph + 1)
        c = rng.integers(0, im.shape[1] - pw + 1)
        A[i] = im[r:r + ph, c:c + pw].ravel()
    return A


def sparse_zipf(m: int, n: int, density: float = 0.01, seed: int = 0):
    """m x n scipy.sparse CSR: ``density`` random nonzeros uniform in (0, 1], rows scaled by
    ``rank^(-1/4)`` and columns by ``rank^(-1/2)`` (random ranks; Zipf-like, as term-document
    counts)."""
    import scipy.sparse as sp
    rng = np.random.default_rng(seed)
    S = sp.random(m, n, density=density, format="csr", rng=rng,
                  data_rvs=lambda size: 1.0 - rng.random(size))
    r = (1.0 + rng.permutation(m)) ** -0.25
    c = (1.0 + rng.permutation(n)) ** -0.5
    return sp.csr_matrix(sp.diags(r) @ S @ sp.diags(c))


DESCRIPTIONS = {
    "slow_decay": "singular values i^(-1/2), random orthogonal factors (seed 0)",
    "smooth_kernel": "exp(-|x - y| / 0.3) on grid points of [0, 1]",
    "image_patches": "real images: grayscale patches of scikit-image's shipped sample "
                     "photographs, rows = images (YaleFace substitute)",
    "sparse_zipf": "scipy.sparse CSR, random nonzeros with Zipf-like row/column weights "
                   "(rdr_jax: sparse input; scipy: dense path)",
}


def build_matrix(name: str, m: int, n: int, density: float):
    """(matrix, dense copy); the matrix is scipy.sparse for ``sparse_zipf``."""
    if name == "slow_decay":
        A = _bench_cur().slow_decay(m, n)[0]
    elif name == "smooth_kernel":
        A = _bench_cur().smooth_kernel(m, n)
    elif name == "image_patches":
        A = image_patches(m, n)
    elif name == "sparse_zipf":
        S = sparse_zipf(m, n, density)
        return S, S.toarray()
    else:
        raise ValueError(f"unknown matrix {name!r}")
    A = np.ascontiguousarray(A, dtype=np.float64)
    return A, A


def prepare(workdir: Path, name: str, m: int, n: int, density: float) -> dict:
    """Write ``NAME.npy`` (dense; ``NAME.npz`` too for sparse) and the singular values
    ``NAME_sv.npy`` into ``workdir``, reusing them when present. Returns the job entry."""
    tag = f"{name}_{m}x{n}" + (f"_d{density:g}" if name == "sparse_zipf" else "")
    dense, sv = workdir / f"{tag}.npy", workdir / f"{tag}_sv.npy"
    sparse = workdir / f"{tag}.npz" if name == "sparse_zipf" else None
    if not (dense.exists() and sv.exists() and (sparse is None or sparse.exists())):
        t = time.perf_counter()
        A, D = build_matrix(name, m, n, density)
        np.save(dense, D)
        if sparse is not None:
            import scipy.sparse as sp
            sp.save_npz(sparse, A)
        np.save(sv, np.linalg.svd(D, compute_uv=False))
        print(f"  {tag}: built, singular values computed ({time.perf_counter() - t:.1f} s)")
    else:
        print(f"  {tag}: reused from {workdir}")
    s = np.load(sv)
    return {"matrix": name, "file": dense.name, "sparse_file": sparse.name if sparse else None,
            "shape": [m, n], "sv_file": sv.name, "norm_fro": float(np.sqrt(np.sum(s ** 2)))}


# --------------------------------------------------------------------------- the rdr_jax child

def _timed_jax(f, repeats):
    import jax
    t = time.perf_counter()
    out = jax.block_until_ready(f())           # first call: compile included
    first = time.perf_counter() - t
    jax.block_until_ready(f())                 # second untimed call: caches warm
    times = []
    for _ in range(max(1, repeats)):
        t = time.perf_counter()
        out = jax.block_until_ready(f())
        times.append(time.perf_counter() - t)
    return first, times, out


def rdr_child(spec_path: str, out_path: str):
    """Child process: time the rdr_jax rows on the spec's matrices, write JSON."""
    import jax
    jax.config.update("jax_enable_x64", True)     # float64 (a child process of its own)
    import jax.numpy as jnp
    import scipy.sparse as sp

    import rdr_jax as R
    from _common import env_info
    spec = json.loads(Path(spec_path).read_text())
    wd = Path(spec["workdir"])
    methods = {"rdr_jax default": None,
               "rdr_jax interp=sketch": R.Method("Rand-LUPP", interp="sketch"),
               "rdr_jax sparse_sign": R.Method("Rand-LUPP", sketch="sparse_sign")}
    rows = []
    for job in spec["jobs"]:
        D = np.load(wd / job["file"])
        A = sp.load_npz(wd / job["sparse_file"]).tocsr() if job.get("sparse_file") else None
        A = jnp.asarray(D) if A is None else A
        for k in job["ks"]:
            for tag, meth in methods.items():
                kw = {} if meth is None else {"method": meth}

                def f(A=A, k=k, kw=kw):
                    return R.interpolative(jax.random.key(0), A, k, **kw)
                first, times, d = _timed_jax(f, spec["repeats"])
                load = os.getloadavg()[0]
                cols = np.asarray(d.cols)
                err = rel_error(D, cols, np.asarray(d.W))
                rows.append({"matrix": job["matrix"], "k": int(k), "method": tag,
                             "times_s": times, "min_s": min(times),
                             "median_s": statistics.median(times), "first_call_s": first,
                             "loadavg": load, "rel_err": err, "cols": cols.tolist()})
                print(f"    [{job['matrix']} k={k} {tag}] median "
                      f"{statistics.median(times) * 1e3:.1f} ms, rel err {err:.4g}, load "
                      f"{load:.2f}", file=sys.stderr, flush=True)
    import scipy
    info = env_info()
    info.update({"scipy": scipy.__version__, "rdr_jax": getattr(R, "__version__", "?")})
    try:
        from _fortran_child import blas_info
        info["blas"] = blas_info()
    except Exception as e:  # noqa: BLE001
        info["blas"] = f"unavailable: {e}"
    Path(out_path).write_text(json.dumps({"info": info, "rows": rows}, indent=1))


# --------------------------------------------------------------------------- orchestration

def run_child(cmd, out: Path, env: dict, what: str) -> dict:
    print(f"  running {what}", flush=True)
    t = time.perf_counter()
    subprocess.run([str(c) for c in cmd], check=True, env=env)
    print(f"  ... {what} done in {time.perf_counter() - t:.0f} s", flush=True)
    return json.loads(out.read_text())


def scipy_spec(workdir, jobs, ks, repeats, rand, repeats_det=None):
    return {"workdir": str(workdir), "repeats": repeats,
            "repeats_det": repeats if repeats_det is None else repeats_det,
            "jobs": [{"matrix": j["matrix"], "file": j["file"], "ks": list(ks), "rand": rand}
                     for j in jobs]}


def add_ratios(rows, opt, ncpu):
    """Fill error/optimal, the speed-ups (ratios of medians against the default-environment
    Fortran ``rand=True`` and installed-scipy rows of the same matrix and k) and the
    ``retake`` flag (load above ``ncpu``) into the table rows (dicts with ``matrix, k,
    method, median_s, rel_err, loadavg``, and ``ref``: "fortran", "scipy" or None)."""
    refs = {}
    for r in rows:
        if r.get("ref"):
            refs[(r["ref"], r["matrix"], r["k"])] = r["median_s"]
    for r in rows:
        o = opt[(r["matrix"], r["k"])]
        r["opt_rel_err"] = o
        r["err_over_opt"] = r["rel_err"] / o if o > 0 else float("inf")
        for ref in ("fortran", "scipy"):
            t = refs.get((ref, r["matrix"], r["k"]))
            r[f"speedup_vs_{ref}"] = t / r["median_s"] if t else None
        load = r.get("loadavg")
        r["retake"] = bool(load is not None and load > ncpu)
    return rows


def check_targets(rows, targets=TARGETS):
    """Each target (rdr_jax method: speed-up over the Fortran, error factor) on each matrix
    and k: held or not, with the numbers."""
    by = {(r["matrix"], r["k"], r["method"]): r for r in rows}
    fort = {(r["matrix"], r["k"]): r for r in rows if r.get("ref") == "fortran"}
    out = []
    for (mat, k), f in fort.items():
        for meth, (speed, errf) in targets.items():
            r = by.get((mat, k, meth))
            if r is None:
                continue
            sp_ok = r["speedup_vs_fortran"] >= speed
            err_ok = r["err_over_opt"] <= errf * f["err_over_opt"] * (1 + 1e-12)
            out.append({"matrix": mat, "k": k, "method": meth, "speedup_target": speed,
                        "speedup": r["speedup_vs_fortran"], "err_factor_target": errf,
                        "err_over_opt": r["err_over_opt"],
                        "fortran_err_over_opt": f["err_over_opt"],
                        "held": bool(sp_ok and err_ok), "speed_held": bool(sp_ok),
                        "error_held": bool(err_ok), "retake": r["retake"] or f["retake"]})
    return out


def _fmt(x, spec):
    return "-" if x is None else format(x, spec)


def format_table(rows) -> str:
    head = (f"{'matrix':<24} {'k':>4}  {'method':<46} {'time ms':>10} {'vs Fortran':>10} "
            f"{'vs scipy':>9} {'err/opt':>8} {'load':>6}")
    lines = [head, "-" * len(head)]
    prev = None
    for r in rows:
        key = (r["matrix"], r["k"])
        if prev is not None and key != prev:
            lines.append("")
        prev = key
        lines.append(
            f"{r.get('label', r['matrix']):<24} {r['k']:>4}  {r['method']:<46} "
            f"{r['median_s'] * 1e3:>10.1f} {_fmt(r.get('speedup_vs_fortran'), '9.2f') + 'x':>10} "
            f"{_fmt(r.get('speedup_vs_scipy'), '8.2f') + 'x':>9} {r['err_over_opt']:>8.3f} "
            f"{_fmt(r.get('loadavg'), '6.2f'):>6}" + ("  retake" if r.get("retake") else ""))
    return "\n".join(lines)


def format_targets(checks) -> str:
    lines = []
    for c in checks:
        lines.append(
            f"  {c['method']:<22} {c['matrix']:<14} k={c['k']:<4} speed-up {c['speedup']:6.2f}x "
            f"(>= {c['speedup_target']:g}x: {'yes' if c['speed_held'] else 'NO'}), err/opt "
            f"{c['err_over_opt']:.3f} vs Fortran {c['fortran_err_over_opt']:.3f} x "
            f"{c['err_factor_target']:g} ({'yes' if c['error_held'] else 'NO'}): "
            f"{'HELD' if c['held'] else 'NOT HELD'}" + ("  (retake: load)" if c["retake"] else ""))
    return "\n".join(lines)


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        return os.cpu_count() or 1


def parse_args(argv=None):
    ap = parser(__doc__, quick="1000 x 600 matrices, k in {20, 50}",
                out="experiments/results/bench_fortran_id")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per row (default 5)")
    ap.add_argument("--scipy-repeats", type=int, default=None,
                    help="timed calls for the installed scipy (slow; default 2, --quick: "
                         "--repeats)")
    ap.add_argument("--matrices", default=None,
                    help="comma-separated subset of " + ",".join(FULL["shapes"]))
    ap.add_argument("--ks", default=None, help="ranks, comma separated (default 50,200; "
                                               "--quick 20,50)")
    ap.add_argument("--blas-threads", type=int, default=None,
                    help="also run the installed-scipy and rdr_jax rows with "
                         "OPENBLAS_NUM_THREADS=N in the children's environment")
    ap.add_argument("--no-create", action="store_true",
                    help="only look for the side venv; never create it")
    ap.add_argument("--skip-deterministic", action="store_true",
                    help="skip the Fortran's interp_decomp(A, k, rand=False) rows")
    ap.add_argument("--workdir", default=None,
                    help="keep matrices and singular values here (default: a temporary "
                         "directory, removed at the end)")
    ap.add_argument("--rdr-child", nargs=2, metavar=("SPEC", "OUT"), default=None,
                    help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.rdr_child:
        rdr_child(*args.rdr_child)
        return None
    cfg = QUICK if args.quick else FULL
    names = args.matrices.split(",") if args.matrices else list(cfg["shapes"])
    ks = [int(k) for k in args.ks.split(",")] if args.ks else list(cfg["ks"])
    scipy_repeats = args.scipy_repeats or (args.repeats if args.quick else 2)
    ncpu = _cpu_count()
    for v in SLOW_BLAS_VARS:
        if os.environ.get(v) is not None:
            print(f"WARNING: {v}={os.environ[v]} is set: it slows numpy's OpenBLAS (and the "
                  "children inherit it). Run as: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "
                  f"python {' '.join(sys.argv)}")
    fortran_py = find_or_create_venv(create=not args.no_create)

    tmp = None
    if args.workdir:
        workdir = Path(args.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
    else:
        workdir = Path(tmp := tempfile.mkdtemp(prefix="bench_fortran_id_"))
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    try:
        print(f"matrices (float64) in {workdir}:")
        jobs = [prepare(workdir, nm, *cfg["shapes"][nm], cfg["density"]) for nm in names]
        opt = {}
        for j in jobs:
            s = np.load(workdir / j["sv_file"])
            for k in ks:
                opt[(j["matrix"], k)] = optimal_rel_error(s, k)

        envs = [("", child_env())]
        if args.blas_threads:
            envs.append((f" [OPENBLAS_NUM_THREADS={args.blas_threads}]",
                         child_env({"OPENBLAS_NUM_THREADS": str(args.blas_threads)})))
        raw = {}
        # the Fortran (default environment only: the anchor)
        spec = scipy_spec(workdir, jobs, ks, args.repeats,
                          [True] if args.skip_deterministic else [True, False],
                          repeats_det=min(2, args.repeats))
        (workdir / "spec_fortran.json").write_text(json.dumps(spec))
        raw["fortran"] = run_child(
            [fortran_py, CHILD, "--spec", workdir / "spec_fortran.json", "--out",
             workdir / "fortran.json"], workdir / "fortran.json",
            child_env(isolated=True), f"Fortran interp_decomp (scipy {FORTRAN_SCIPY}, side venv)")
        got = raw["fortran"]["info"]["scipy"]
        if got != FORTRAN_SCIPY:
            raise SystemExit(f"the side venv ran scipy {got}, not {FORTRAN_SCIPY}")
        spec = scipy_spec(workdir, jobs, ks, scipy_repeats, [True])
        (workdir / "spec_scipy.json").write_text(json.dumps(spec))
        rspec = {"workdir": str(workdir), "repeats": args.repeats, "jobs": jobs, "ks": ks}
        for j in rspec["jobs"]:
            j["ks"] = ks
        (workdir / "spec_rdr.json").write_text(json.dumps(rspec))
        for suffix, env in envs:
            key = "scipy" + suffix
            raw[key] = run_child(
                [sys.executable, CHILD, "--spec", workdir / "spec_scipy.json", "--out",
                 workdir / f"scipy{len(raw)}.json"], workdir / f"scipy{len(raw)}.json", env,
                f"installed scipy interp_decomp{suffix}")
            key = "rdr_jax" + suffix
            raw[key] = run_child(
                [sys.executable, __file__, "--rdr-child", workdir / "spec_rdr.json",
                 workdir / f"rdr{len(raw)}.json"], workdir / f"rdr{len(raw)}.json", env,
                f"rdr_jax{suffix}")
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)

    installed = raw["scipy"]["info"]["scipy"]
    labels = {j["matrix"]: f"{j['matrix']} {j['shape'][0]}x{j['shape'][1]}" for j in jobs}
    rows = []
    for src, res in raw.items():
        suffix = src[src.index(" "):] if " " in src else ""
        for r in res["rows"]:
            if src == "fortran":
                meth = f"Fortran {FORTRAN_SCIPY}" + ("" if r["rand"] else " rand=False")
                ref = "fortran" if r["rand"] else None
            elif src.startswith("scipy"):
                meth, ref = f"scipy {installed}" + suffix, (None if suffix else "scipy")
            else:
                meth, ref = r["method"] + suffix, None
            rows.append({"matrix": r["matrix"], "label": labels[r["matrix"]], "k": r["k"],
                         "method": meth, "ref": ref, "median_s": r["median_s"],
                         "min_s": r["min_s"], "times_s": r["times_s"],
                         "rel_err": r["rel_err"], "loadavg": r["loadavg"],
                         "first_call_s": r.get("first_call_s"), "source": src})
    order = {nm: i for i, nm in enumerate(names)}
    rows.sort(key=lambda r: (order[r["matrix"]], ks.index(r["k"])))   # stable: method order
    add_ratios(rows, opt, ncpu)
    checks = check_targets(rows)

    print(f"\nColumn ID, float64, median of the timed calls; speed-ups are ratios of medians "
          f"against Fortran {FORTRAN_SCIPY} interp_decomp(A, k) (rand=True) and scipy "
          f"{installed} interp_decomp(A, k); err/opt = relative Frobenius error / optimal "
          f"rank-k; load = 1-min load average after the row ('retake': above {ncpu} cores)")
    print(format_table(rows))
    print("\nTargets (against the Fortran's rand=True row):")
    print(format_targets(checks))
    n_held = sum(c["held"] for c in checks)
    print(f"  {n_held}/{len(checks)} held")
    f_info, s_info = raw["fortran"]["info"], raw["scipy"]["info"]
    print(f"\nFortran side: scipy {f_info['scipy']}, numpy {f_info['numpy']} "
          f"({f_info['executable']}); installed: scipy {s_info['scipy']}, numpy "
          f"{s_info['numpy']}; rdr_jax {raw['rdr_jax']['info'].get('rdr_jax')}, jax "
          f"{raw['rdr_jax']['info'].get('jax')}")
    for tag, info in (("Fortran side", f_info), ("installed", s_info)):
        tp = info.get("threadpoolctl")
        if isinstance(tp, list):
            print(f"  BLAS ({tag}): " + "; ".join(
                f"{d.get('internal_api')} {d.get('version')} {d.get('architecture')} "
                f"{d.get('num_threads')} threads" for d in tp))
    result = {"quick": args.quick, "config": {"shapes": {j["matrix"]: j["shape"] for j in jobs},
                                              "ks": ks, "repeats": args.repeats,
                                              "scipy_repeats": scipy_repeats,
                                              "blas_threads": args.blas_threads,
                                              "density": cfg["density"]},
              "descriptions": {nm: DESCRIPTIONS[nm] for nm in names},
              "command": " ".join([sys.executable, *sys.argv]),
              "env": {v: os.environ.get(v) for v in (*SLOW_BLAS_VARS, "OPENBLAS_NUM_THREADS",
                                                     "XLA_FLAGS")},
              "cpu_count": ncpu, "venv": str(venv_dir()), "targets_def": TARGETS,
              "optimal_rel_err": {f"{m} k={k}": v for (m, k), v in opt.items()},
              "rows": rows, "targets": checks, "raw": raw}
    path = outdir / ("bench_fortran_id_quick.json" if args.quick else "bench_fortran_id.json")
    path.write_text(json.dumps(result, indent=1, default=str))
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
