"""One subprocess with 8 virtual CPU devices for the suite's multi-device checks.

The pytest process has one CPU device, and ``--xla_force_host_platform_device_count`` must be
set before jax starts, so multi-device checks run in a child process. Several test files
share ONE such child (the ``multidevice`` fixture of ``tests/conftest.py``): it runs every job
of :data:`JOBS` in turn and prints one JSON object ``{job: {"result": ...}}`` (or
``{"error": traceback}`` for a job that raised), so JAX's start-up is paid once and one
failing job does not hide the others' results. The first pytest-xdist worker that asks runs
it under a file lock; the other reads the cached JSON. A job is a function ``job(workdir)``
of a test module that returns JSON-able results; its tests assert on them. Meshes of d < 8
devices use the first d devices.

Run as ``python -m tests._multidevice WORKDIR`` (from the repository root) to see the JSON.
"""

from __future__ import annotations

import fcntl
import importlib
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEVICES = 8
MARK = "MULTIDEVICE-RESULTS:"
#: job name -> "module:function"
JOBS = {
    "sharding": "tests.test_sharding:sharding_job",
    "row_id": "tests.test_row_id_sharded:row_id_job",
    "canonical_angles_devices": "tests.test_fig_canonical_angles_devices:devices_job",
    "data_parallel": "tests.test_training_loop:data_parallel_job",
}


def _child(workdir: Path) -> None:
    import gc
    gc.set_threshold(10_000, 10, 10)     # as in tests/conftest.py (this child: 5% less CPU)
    import jax
    out = {}
    for name, target in JOBS.items():
        module, fn = target.split(":")
        jax.config.update("jax_enable_x64", False)       # each job starts from the default
        try:
            d = workdir / name
            d.mkdir(parents=True, exist_ok=True)
            out[name] = {"result": getattr(importlib.import_module(module), fn)(d)}
        except BaseException:                            # noqa: BLE001 - reported per job
            out[name] = {"error": traceback.format_exc()}
    print(MARK + json.dumps(out), flush=True)


def _run(workdir: Path) -> dict:
    env = dict(os.environ)                               # tests/conftest.py's XLA flags
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "")
                        + f" --xla_force_host_platform_device_count={DEVICES}").strip()
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run([sys.executable, "-m", "tests._multidevice", str(workdir)], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=1800)
    line = [x for x in proc.stdout.splitlines() if x.startswith(MARK)]
    assert proc.returncode == 0 and line, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(line[-1][len(MARK):])


def results(tmp_path_factory, worker_id: str) -> dict:
    """The child's JSON, computed once per test session (shared by the xdist workers)."""
    if worker_id == "master":
        return _run(tmp_path_factory.mktemp("multidevice"))
    shared = tmp_path_factory.getbasetemp().parent
    with open(shared / "multidevice.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cache = shared / "multidevice.json"
        if not cache.exists():
            cache.write_text(json.dumps(_run(shared / "multidevice")))
        return json.loads(cache.read_text())


def job(results: dict, name: str):
    """The result of job ``name``; fails the calling test with the job's traceback."""
    r = results[name]
    assert "error" not in r, f"job {name!r} failed in the 8-device process:\n{r['error']}"
    return r["result"]


if __name__ == "__main__":
    _child(Path(sys.argv[1]))
