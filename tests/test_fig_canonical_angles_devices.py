"""``fig_canonical_angles --devices N``: the estimator's Monte-Carlo trials split over N
devices (``EstimateOptions(mesh=)``) give the one-device results (2 virtual CPU devices,
subprocesses)."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "fig_canonical_angles.py"
ARGS = ["--quick", "--matrix", "gaussian_fast", "--size", "100", "--configs", "8:32:0,1",
        "--num-trials", "4"]


def _run(tmp_path, devices, extra=()):
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "")
                        + " --xla_force_host_platform_device_count=2").strip()
    out = tmp_path / f"d{devices}"
    r = subprocess.run([sys.executable, str(SCRIPT), *ARGS, *extra, "--devices", str(devices),
                        "--out", str(out)], capture_output=True, text=True, timeout=600,
                       env=env, cwd=ROOT)
    return r, out


def test_trials_over_two_devices_match_one_device(tmp_path):
    (r1, o1), (r2, o2) = _run(tmp_path, 1), _run(tmp_path, 2)
    assert r1.returncode == 0, r1.stderr[-3000:]
    assert r2.returncode == 0, r2.stderr[-3000:]
    assert json.loads((o2 / "config.json").read_text())["devices"] == 2
    rows1 = list(csv.DictReader(open(o1 / "results.csv")))
    rows2 = list(csv.DictReader(open(o2 / "results.csv")))
    assert len(rows1) == len(rows2) == 2 * 2 * 8        # q x subspaces x i
    for a, b in zip(rows1, rows2):
        for key in a:
            if key.startswith("prop_mean"):          # the mean over trials: summation order
                assert abs(float(a[key]) - float(b[key])) <= 1e-12 * abs(float(a[key])), key
            else:
                assert a[key] == b[key], (key, a[key], b[key])


def test_devices_must_divide_the_trials(tmp_path):
    r, _ = _run(tmp_path, 3)
    assert r.returncode == 2 and "--devices must be >= 1 and divide --num-trials (4)" in r.stderr


def test_trials_mesh_errors():
    import pytest
    sys.path.insert(0, str(ROOT / "experiments"))
    from _common import trials_mesh
    assert trials_mesh(1, 3) is None
    with pytest.raises(ValueError, match="only 1 device.*xla_force_host_platform_device_count=4"):
        trials_mesh(4, 4)
    with pytest.raises(ValueError, match="--devices must be >= 1"):
        trials_mesh(0, 4)
