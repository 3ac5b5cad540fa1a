"""experiments/bench_weak_scaling.py on tiny sizes: one subprocess per device count, outputs
written, every device holding the same slab of A."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "experiments" / "bench_weak_scaling.py"


def test_weak_scaling_tiny(tmp_path):
    out = tmp_path / "ws"
    r = subprocess.run([sys.executable, str(SCRIPT), "--devices", "1,2", "--block", "64",
                        "--n", "40", "--k", "5", "--repeats", "1", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads((out / "weak_scaling.json").read_text())
    rows = data["rows"]
    assert [row["devices"] for row in rows] == [1, 2]
    assert [row["rows"] for row in rows] == [64, 128]
    # the same 64 x 40 float64 slab on every device, whatever the device count
    assert [row["A_bytes_per_device"] for row in rows] == [64 * 40 * 8] * 2
    assert rows[0]["time_ratio"] == 1.0 and rows[1]["time_s"] > 0
    assert (out / "weak_scaling.csv").read_text().count("\n") == 3
    assert (out / "weak_scaling.png").stat().st_size > 1000
    assert "time per device within 1.5x of one device" in r.stdout
    assert rows[1]["time_per_device_s"] == rows[1]["time_s"] / 2


def test_devices_must_start_with_one(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--devices", "2,4", "--out",
                        str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "must start with 1" in r.stderr
