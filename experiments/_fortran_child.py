"""Child of ``experiments/bench_fortran_id.py``: times ``scipy.linalg.interpolative.interp_decomp``
with whatever scipy the interpreter running it has.

It imports only numpy, scipy and (if present) threadpoolctl, so it runs both in the side
virtual environment with scipy 1.14.1 (the last release with the Fortran id_dist behind
``scipy.linalg.interpolative``) and under the main interpreter (the installed scipy, whose
``interp_decomp`` is the Python/Cython port of scipy >= 1.15). Keep it importable on Python
3.9+ and numpy 1.x/2.x, with no rdr_jax or jax import.

Run::

    python experiments/_fortran_child.py --spec SPEC.json --out RESULT.json

``SPEC.json``: ``{"workdir": DIR, "repeats": R, "jobs": [{"matrix": NAME, "file": "NAME.npy",
"ks": [50, 200], "rand": [true, false]}], "repeats_det": R2}`` (``R2``: the timed calls of
``rand=False``, default ``R``); each ``DIR/NAME.npy`` is a dense float64 matrix. For each
job, k and ``rand``: one untimed call, then ``R`` timed calls (``time.perf_counter``); the
result records every time, their min and median, the 1-minute load average after the timed
calls, the skeleton ``idx[:k]`` and the relative Frobenius error
``||A - A[:, idx[:k]] [I, proj] P||_F / ||A||_F`` (scipy's own ``reconstruct_*`` helpers), plus
the versions and BLAS of this interpreter.
"""

from __future__ import annotations

import argparse
import inspect
import io
import json
import os
import platform
import statistics
import sys
import time
from contextlib import redirect_stdout


def rel_error(A, cols, W):
    """``||A - A[:, cols] W||_F / ||A||_F`` in float64 (the column ID's relative Frobenius
    error; ``W`` is k x n with ``W[:, cols] = I``)."""
    import numpy as np
    A = np.asarray(A, dtype=np.float64)
    R = A - A[:, np.asarray(cols)] @ np.asarray(W, dtype=np.float64)
    return float(np.linalg.norm(R) / np.linalg.norm(A))


def optimal_rel_error(s, k):
    """The best rank-k relative Frobenius error ``sqrt(sum_{i>k} s_i^2) / ||s||_2`` from the
    singular values ``s`` (Eckart-Young)."""
    import numpy as np
    s = np.asarray(s, dtype=np.float64)
    return float(np.sqrt(np.sum(s[k:] ** 2)) / np.sqrt(np.sum(s ** 2)))


def loadavg():
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):  # pragma: no cover
        return float("nan")


def blas_info():
    """Versions and BLAS of this interpreter: numpy/scipy build configuration (BLAS/LAPACK
    entries) and threadpoolctl's view of the loaded libraries (when installed)."""
    import numpy as np
    import scipy
    info = {"python": platform.python_version(), "executable": sys.executable,
            "numpy": np.__version__, "scipy": scipy.__version__,
            "env": {v: os.environ.get(v) for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                   "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}}
    for name, mod in (("numpy_config", np), ("scipy_config", scipy)):
        try:
            with redirect_stdout(io.StringIO()):
                cfg = mod.show_config(mode="dicts")
            deps = cfg.get("Build Dependencies", {})
            info[name] = {key: deps.get(key) for key in ("blas", "lapack")}
        except Exception as e:  # noqa: BLE001 - old numpy/scipy: no mode="dicts"
            info[name] = f"unavailable: {type(e).__name__}: {e}"
    try:
        import scipy.linalg  # noqa: F401 - load scipy's BLAS so threadpoolctl sees it
        from threadpoolctl import threadpool_info
        info["threadpoolctl"] = [
            {k: d.get(k) for k in ("internal_api", "version", "num_threads", "threading_layer",
                                   "architecture", "filepath")} for d in threadpool_info()]
    except ImportError:
        info["threadpoolctl"] = "not installed"
    return info


def _seed_kwargs(sli):
    """Reproducible randomness: scipy >= 1.15 takes ``rng=``; the Fortran (<= 1.14) has a
    global generator reset by ``interpolative.seed``."""
    import numpy as np
    if "rng" in inspect.signature(sli.interp_decomp).parameters:
        return lambda: {"rng": np.random.default_rng(0)}
    return lambda: (sli.seed(0), {})[1]


def time_interp_decomp(A, k, rand=True, repeats=3):
    """``interp_decomp(A, k, rand=rand)``: one untimed call, then ``repeats`` timed calls.
    Returns the times (s), min, median, load average, ``idx[:k]`` and the relative error."""
    import numpy as np
    import scipy.linalg.interpolative as sli
    kw = _seed_kwargs(sli)
    idx, proj = sli.interp_decomp(A, k, rand=rand, **kw())      # untimed (warm)
    times = []
    for _ in range(max(1, repeats)):
        extra = kw()
        t = time.perf_counter()
        idx, proj = sli.interp_decomp(A, k, rand=rand, **extra)
        times.append(time.perf_counter() - t)
    load = loadavg()
    idx = np.asarray(idx)
    B = sli.reconstruct_skel_matrix(A, k, idx)
    err = float(np.linalg.norm(A - sli.reconstruct_matrix_from_id(B, idx, proj))
                / np.linalg.norm(A))
    # the same error from the generic column-ID formula (a check of the bookkeeping)
    err2 = rel_error(A, idx[:k], sli.reconstruct_interp_matrix(idx, proj))
    return {"times_s": times, "min_s": min(times), "median_s": statistics.median(times),
            "loadavg": load, "cols": [int(i) for i in idx[:k]], "rel_err": err,
            "rel_err_check": err2}


def run_spec(spec):
    import numpy as np
    rows = []
    for job in spec["jobs"]:
        A = np.load(os.path.join(spec["workdir"], job["file"]))
        A = np.asarray(A, dtype=np.float64)
        for k in job["ks"]:
            for rand in job.get("rand", [True]):
                reps = spec["repeats"] if rand else spec.get("repeats_det", spec["repeats"])
                r = time_interp_decomp(A, int(k), rand=bool(rand), repeats=reps)
                r.update({"matrix": job["matrix"], "k": int(k), "rand": bool(rand),
                          "shape": list(A.shape)})
                rows.append(r)
                print(f"    [{job['matrix']} k={k} rand={rand}] median "
                      f"{r['median_s'] * 1e3:.1f} ms, rel err {r['rel_err']:.4g}, "
                      f"load {r['loadavg']:.2f}", file=sys.stderr, flush=True)
    return {"info": blas_info(), "rows": rows}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spec", help="job description (JSON); not needed with --info-only")
    p.add_argument("--out", required=True, help="where to write the result (JSON)")
    p.add_argument("--info-only", action="store_true", help="only versions and BLAS")
    a = p.parse_args(argv)
    if a.info_only:
        res = {"info": blas_info(), "rows": []}
    else:
        if not a.spec:
            p.error("--spec is required (unless --info-only)")
        with open(a.spec) as f:
            res = run_spec(json.load(f))
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
