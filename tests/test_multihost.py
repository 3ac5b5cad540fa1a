"""Multi-process (multi-host) run of the sharded entry points: 2 JAX processes x 2 virtual
CPU devices joined by ``jax.distributed.initialize`` (gloo collectives), each holding only
its rows of A (``experiments/multihost_check.py``). Same skeletons and factors as the
unsharded call."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "multihost_check.py"


def test_two_processes_match_the_unsharded_call(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--processes", "2", "--local-devices", "2",
                        "--m", "400", "--n", "120", "--k", "10", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "identical to the unsharded call: HELD" in r.stdout
    rec = json.loads((tmp_path / "multihost_check.json").read_text())
    assert rec["held"] and len(rec["records"]) == 2
    assert {x["process"] for x in rec["records"]} == {0, 1}
    assert all(x["devices"] == 4 for x in rec["records"])
    names = set(rec["records"][0]["checks"])
    assert {"cur: same column skeletons", "cur: same row skeletons",
            "interpolative (row): same skeletons", "rsvd: U diag(s) Vt to float tolerance"} <= names
    assert all(max(x["rel_diff"].values()) < 1e-9 for x in rec["records"])


def test_bad_layout_is_a_clear_error(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--processes", "2", "--local-devices", "2",
                        "--m", "402", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "must be divisible by processes x local devices = 4" in r.stderr


@pytest.mark.parametrize("argv", [["--processes", "0"], ["--local-devices", "0"]])
def test_bad_counts(argv, tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), *argv, "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "must be >= 1" in r.stderr
