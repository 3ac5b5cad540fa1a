"""``fig_canonical_angles --devices N``: the estimator's Monte-Carlo trials split over N
devices (``unbiased_estimate(mesh=)``) give the one-device results (the script's ``main``,
run for 1 and 2 devices in the suite's 8-device subprocess, ``tests/_multidevice.py``)."""

import csv
import json
import sys
from pathlib import Path

import pytest

from tests import _multidevice

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--quick", "--matrix", "gaussian_fast", "--size", "100", "--configs", "8:32:0,1",
        "--num-trials", "4"]


def devices_job(workdir):
    """``{"d1"|"d2": {"rows": results.csv rows, "config": config.json}}`` (a job of
    ``tests/_multidevice.py``)."""
    from tests.conftest import load_experiment
    mod = load_experiment("fig_canonical_angles")
    out = {}
    for devices in (1, 2):
        d = workdir / f"d{devices}"
        mod.main([*ARGS, "--devices", str(devices), "--out", str(d)])
        with open(d / "results.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        out[f"d{devices}"] = {"rows": rows,
                              "config": json.loads((d / "config.json").read_text())}
    return out


def test_trials_over_two_devices_match_one_device(multidevice):
    runs = _multidevice.job(multidevice, "canonical_angles_devices")
    assert runs["d2"]["config"]["devices"] == 2
    rows1, rows2 = runs["d1"]["rows"], runs["d2"]["rows"]
    assert len(rows1) == len(rows2) == 2 * 2 * 8        # q x subspaces x i
    for a, b in zip(rows1, rows2):
        for key in a:
            if key.startswith("prop_mean"):          # the mean over trials: summation order
                assert abs(float(a[key]) - float(b[key])) <= 1e-12 * abs(float(a[key])), key
            else:
                assert a[key] == b[key], (key, a[key], b[key])


def test_devices_must_divide_the_trials(script, tmp_path, capsys):
    mod = script("fig_canonical_angles")
    with pytest.raises(SystemExit) as e:
        mod.main([*ARGS, "--devices", "3", "--out", str(tmp_path)])
    assert e.value.code == 2
    assert "--devices must be >= 1 and divide --num-trials (4)" in capsys.readouterr().err


def test_trials_mesh_errors():
    sys.path.insert(0, str(ROOT / "experiments"))
    from _common import trials_mesh
    assert trials_mesh(1, 3) is None
    with pytest.raises(ValueError, match="only 1 device.*xla_force_host_platform_device_count=4"):
        trials_mesh(4, 4)
    with pytest.raises(ValueError, match="--devices must be >= 1"):
        trials_mesh(0, 4)
