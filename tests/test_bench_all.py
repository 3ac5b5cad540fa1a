"""experiments/bench_all.py (every README benchmark in one command, within a time budget): the
plan fits the budget, the dry run only prints, a device mismatch is a clear error, the runner
records failures and timeouts, and the JSON / markdown summary is assembled from the
benchmarks' JSON files (small fake ones here; no benchmark really runs)."""

from __future__ import annotations

import json
import sys
import time

import pytest


@pytest.fixture(scope="module")
def ba():
    from tests.conftest import load_experiment
    return load_experiment("bench_all")


CPU = {"backend": "cpu", "device_kind": "cpu", "device_count": 1, "jax": "0.0-test"}
GPU = {"backend": "gpu", "device_kind": "NVIDIA Test 80GB", "device_count": 1,
       "jax": "0.0-test"}

#: minimal JSONs in each benchmark's schema, with known headline values
FAKE = {
    "sketch": {"config": {"ls": [32, 512], "m": 8192, "n": 256}, "floor_s": 0.001,
               "min_s": {"gauss_hash": {"512": 0.010}, "gemm": {"512": 0.004},
                         "sparse_sign": {"512": 0.002}}},
    "operators": {"m": 100000, "n": 100000, "l": 210,
                  "seconds": {"sketch_hash": {"eager": 1.0, "jit": 2.0},
                              "matmat": {"eager": 0.5, "jit": 0.5},
                              "cols": {"eager": 1.0, "jit": 1.5}}},
    # the smooth-kernel first call is missing: those headlines are n/a with a note
    "cur": {"pivot": [{"l": 50, "n": 20000, "speedup": 8.0}],
            "id": [{"k": 20, "m": 800, "n": 400,
                    "defaults": {"speedup_vs_scipy": 30.0, "over_gemm_floor": 2.0,
                                 "err_vs_scipy": 1.01,
                                 "first_call": {"slow_decay": {"speedup": 4.0,
                                                               "compile_s": 0.5}}}},
                   {"k": 50, "m": 800, "n": 400,
                    "defaults": {"speedup_vs_scipy": 20.0, "over_gemm_floor": 2.5,
                                 "err_vs_scipy": 1.02}}]},
    "angles": {"config": {"trials": 20, "r": 200, "l": 80, "k": 20},
               "settings": {"blas default threads": {"median_s": {"rdr_jax (default)": 0.05},
                                                     "ratio_numpy_over_default": 6.5},
                            "blas 1 thread": {"ratio_numpy_over_default": 3.5}}},
    "certificate": {"rows": [{"matrix": "dense 1000x500", "k": 20, "cost_ratio": 0.11,
                              "fro_ratio": 1.8}],
                    "fixed": {"certified 0.99": {"met_tol": 1.0}}},
}


def test_plan_fits_the_budget(ba, tmp_path):
    for device in ("cpu", "gpu", "tpu"):
        for budget in (480.0, 300.0, 3000.0):
            plan = ba.make_plan(ba.BENCHES, device, budget, tmp_path)
            runs = [s for s in plan if s.cmd is not None]
            total = sum(s.timeout_s for s in runs)
            assert total == pytest.approx(budget - ba.RESERVE_S) and total < budget
            assert min(s.timeout_s for s in runs) >= ba.MIN_TIMEOUT_S
            assert [s.bench.name for s in plan] == [b.name for b in ba.BENCHES]
            for s in runs:   # each benchmark writes into its own folder under --out
                assert str(s.out_dir).startswith(str(tmp_path))
                assert s.cmd[s.cmd.index("--out") + 1] in (str(s.out_dir), str(s.result_path))
    cpu = {s.bench.name: s for s in ba.make_plan(ba.BENCHES, "cpu", 480, tmp_path)}
    gpu = {s.bench.name: s for s in ba.make_plan(ba.BENCHES, "gpu", 480, tmp_path)}
    # CPU: quick sizes, no SNN1e6; GPU: README sizes, the SNN1e6 CUR included
    assert cpu["cur_snn1e6"].cmd is None and "size" in cpu["cur_snn1e6"].skip
    assert all("--quick" in s.cmd for s in cpu.values() if s.cmd is not None)
    assert all("--quick" not in s.cmd for s in gpu.values())
    # a subset shares the whole budget
    sub = ba.make_plan(ba.select("sketch,angles"), "gpu", 480, tmp_path)
    assert [s.bench.name for s in sub] == ["angles", "sketch"]     # plan order
    assert sum(s.timeout_s for s in sub) == pytest.approx(480 - ba.RESERVE_S)


#: wall seconds of each benchmark measured on an NVIDIA H200 (jax 0.11.2, 2026-11-27)
H200_WALL_S = {"operators": 45.5, "cur_snn1e6": 21.5, "adawac": 20.1, "outofcore": 30.5,
               "angles": 37.5, "certificate": 65.7, "sketch": 75.0, "cur": 124.1}


def test_gpu_plan_fits_the_measured_h200_times(ba, tmp_path, capsys):
    """With the wall times measured on an H200, the default 480 s GPU plan runs every
    benchmark to the end (each within its timeout plus the carried-over time) in < 8 min."""
    plan = ba.make_plan(ba.BENCHES, "gpu", 480, tmp_path)
    timeouts = {}

    def runner(step, timeout_s, env):
        timeouts[step.bench.name] = timeout_s
        wall = H200_WALL_S[step.bench.name]
        return {"status": "ok" if wall <= timeout_s else "timeout",
                "wall_s": min(wall, timeout_s)}

    records = ba.run_plan(plan, "gpu", runner=runner)
    assert {k: r["status"] for k, r in records.items()} == {k: "ok" for k in H200_WALL_S}
    assert all(H200_WALL_S[k] < timeouts[k] for k in H200_WALL_S)
    assert sum(H200_WALL_S.values()) < 480 - ba.RESERVE_S
    capsys.readouterr()


def test_bad_plan_arguments(ba, tmp_path):
    with pytest.raises(ValueError, match="too small .* need at least"):
        ba.make_plan(ba.BENCHES, "gpu", 100, tmp_path)
    with pytest.raises(ValueError, match="finite"):
        ba.make_plan(ba.BENCHES, "gpu", float("nan"), tmp_path)
    with pytest.raises(ValueError, match="unknown benchmark.*nope"):
        ba.select("sketch,nope")
    with pytest.raises(ValueError, match="device must be one of"):
        ba.make_plan(ba.BENCHES, "metal", 480, tmp_path)


def _must_not_run(*a, **k):
    raise AssertionError("the dry run must not probe the device or run a benchmark")


def test_dry_run_prints_the_plan_only(ba, tmp_path, capsys):
    out = tmp_path / "out"
    res = ba.main(["--device", "gpu", "--dry-run", "--out", str(out)],
                  probe=_must_not_run, runner=_must_not_run)
    text = capsys.readouterr().out
    assert res is None and not out.exists()
    for b in ba.BENCHES:
        assert f"experiments/{b.script}" in text
    assert "timeouts sum to 450 s of the 480 s budget" in text
    assert "--parts snn1e6" in text and "--quick" not in text


def test_device_mismatch_is_a_clear_error(ba, tmp_path, capsys):
    ba.check_device("cpu", CPU)
    ba.check_device("gpu", GPU)
    with pytest.raises(ValueError, match=r"--device gpu but jax.default_backend\(\) is 'cpu'"):
        ba.check_device("gpu", CPU)
    with pytest.raises(SystemExit) as e:
        ba.main(["--device", "gpu", "--out", str(tmp_path)], probe=lambda: CPU,
                runner=_must_not_run)
    assert e.value.code == 2
    assert "--device gpu but jax.default_backend() is 'cpu'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:          # argparse: unknown device
        ba.main(["--device", "metal", "--dry-run"])
    assert e.value.code == 2


def test_runner_records_failures_and_timeouts(ba, tmp_path):
    """The real subprocess runner, on tiny python commands instead of benchmarks."""
    def step(name, code):
        bench = ba.BY_NAME["angles"]
        return ba.Step(bench, (sys.executable, "-c", code), 1.0, tmp_path / name,
                       tmp_path / name / "r.json")
    env = ba.child_env("cpu")
    ok = step("ok", "import pathlib; pathlib.Path('%s').write_text('{}')"
              % (tmp_path / "ok" / "r.json"))
    assert ba.run_step(ok, 20, env)["status"] == "ok"
    failed = ba.run_step(step("failed", "print('boom'); raise SystemExit(3)"), 20, env)
    assert failed["status"] == "failed" and failed["returncode"] == 3
    assert "boom" in failed["log_tail"]
    silent = ba.run_step(step("silent", "pass"), 20, env)   # exit 0 without its JSON
    assert silent["status"] == "failed" and "no r.json" in silent["error"]
    slow = ba.run_step(step("slow", "import time; time.sleep(60)"), 0.5, env)
    assert slow["status"] == "timeout" and slow["returncode"] is None
    assert slow["wall_s"] < 0.5 + 2 * ba.KILL_GRACE_S
    # a timeout ends the benchmark's own child processes too (its process group)
    pidfile = tmp_path / "grandchild.pid"
    code = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(60)']); open(%r, 'w').write(str(p.pid)); time.sleep(60)"
            % str(pidfile))
    assert ba.run_step(step("tree", code), 1.0, env)["status"] == "timeout"
    pid = int(pidfile.read_text())
    for _ in range(50):
        try:
            state = open(f"/proc/{pid}/stat").read().split()[2]
        except FileNotFoundError:
            state = "gone"
        if state in ("gone", "Z", "X"):
            break
        time.sleep(0.05)
    assert state in ("gone", "Z", "X")
    stale = tmp_path / "failed" / "r.json"                   # a stale JSON is removed first
    stale.write_text("{}")
    assert ba.run_step(step("failed", "raise SystemExit(1)"), 20, env)["status"] == "failed"
    assert not stale.exists()


def test_summary_from_fake_benchmark_jsons(ba, tmp_path, capsys):
    """main with a fake probe and runner: five benchmarks write fake JSONs (one corrupt),
    adawac fails, outofcore times out; the summary holds them all."""
    given = {}

    def runner(step, timeout_s, env):
        name = step.bench.name
        given[name] = timeout_s
        step.out_dir.mkdir(parents=True, exist_ok=True)
        if name == "adawac":
            return {"status": "failed", "wall_s": 3.0, "returncode": 1, "log_tail": "Trace"}
        if name == "outofcore":
            return {"status": "timeout", "wall_s": timeout_s, "returncode": None}
        text = "{not json" if name == "certificate" else json.dumps(FAKE[name])
        step.result_path.write_text(text)
        return {"status": "ok", "wall_s": 1.0, "returncode": 0}

    out = tmp_path / "out"
    summary = ba.main(["--device", "cpu", "--out", str(out)], probe=lambda: CPU, runner=runner)
    plan = {s.bench.name: s for s in ba.make_plan(ba.BENCHES, "cpu", 480, out)}
    # unused time carries over: operators used 1 s of its share, adawac (the next one run on
    # CPU: the SNN1e6 CUR is skipped there) got the rest too
    assert given["adawac"] == pytest.approx(
        plan["adawac"].timeout_s + plan["operators"].timeout_s - 1.0)
    saved = json.loads((out / "bench_all.json").read_text())
    assert saved == json.loads(json.dumps(summary))
    assert saved["device"] == "cpu" and saved["jax"] == "0.0-test" and saved["date"]
    b = saved["benchmarks"]
    assert {k: v["status"] for k, v in b.items()} == {
        "sketch": "ok", "operators": "ok", "cur": "ok", "cur_snn1e6": "skipped",
        "angles": "ok", "certificate": "failed", "adawac": "failed", "outofcore": "timeout"}
    assert b["adawac"]["wall_s"] == 3.0 and b["adawac"]["metrics"] == []
    assert any("could not read" in n for n in b["certificate"]["notes"])

    def values(name):
        return {m["label"]: m["value"] for m in b[name]["metrics"]}
    sk = values("sketch")
    where = "sketch l=512, A 8192x256 f32"
    assert sk[f"{where}: Gaussian (hash) gen+GEMM / read floor"] == pytest.approx(10.0)
    assert sk[f"{where}: GEMM alone / read floor"] == pytest.approx(4.0)
    assert sk[f"{where}: sparse sign in jit / read floor"] == pytest.approx(2.0)
    assert sk[f"{where}: Gaussian (hash) / sparse sign in jit"] == pytest.approx(5.0)
    op = values("operators")
    assert op["operators SNN 100000x100000, l=210: jit / eager, median over ops"] == 1.5
    assert op["operators SNN 100000x100000, l=210: jit / eager, max"] == 2.0
    cur = values("cur")
    assert cur["pivot l=50, n=20000: CPQR / LUPP"] == 8.0
    assert cur["column ID k=20 of 800x400: speed-up vs scipy (warm)"] == 30.0
    assert cur["column ID k=50 of 800x400: time / GEMM floor"] == 2.5
    assert cur["column ID k=20 of 800x400: first call (slow_decay) speed-up vs scipy"] == 4.0
    assert cur["column ID k=20 of 800x400: XLA compile (slow_decay)"] == 0.5
    assert cur["column ID k=20 of 800x400: first call (smooth_kernel) speed-up vs scipy"] is None
    assert b["cur"]["notes"] == [
        "missing in bench_cur.json: id/0/defaults/first_call/smooth_kernel/speedup",
        "missing in bench_cur.json: id/0/defaults/first_call/smooth_kernel/compile_s"]
    assert values("angles")["angles N=20, r=200, l=80, k=20: speed-up vs numpy loop"] == 6.5

    md = (out / "bench_all.md").read_text()
    assert md in capsys.readouterr().out                   # printed as well as written
    assert md.startswith("| benchmark | measurement | target | CPU |\n| --- |")
    assert f"| sketch | {where}: Gaussian (hash) gen+GEMM / read floor |  | 10.00x |" in md
    assert "| sketch | status, wall time |  | ok, 1 s |" in md
    assert "| adawac | status, wall time |  | failed (exit 1) |" in md
    assert f"| outofcore | status, wall time |  | timeout after {given['outofcore']:.0f} s |" in md
    assert "| cur_snn1e6 | status, wall time |  | skipped: the SNN1e6 part" in md
    assert "first call (smooth_kernel) speed-up vs scipy | >= 1.5x | n/a |" in md
    assert ("- cur: missing in bench_cur.json: id/0/defaults/first_call/smooth_kernel/speedup"
            in md)
    rows = [ln for ln in md.splitlines() if ln.startswith("| ")]
    assert rows and all(len(ln.strip().strip("|").split("|")) == 4 for ln in rows)  # 4 cells


def test_gpu_column_and_missing_sections(ba, tmp_path):
    """On GPU the column names the card, and a JSON without the expected sections gives n/a
    rows with notes instead of an exception."""
    plan = ba.make_plan(ba.select("outofcore,adawac,sketch"), "gpu", 480, tmp_path)
    for s in plan:
        s.out_dir.mkdir(parents=True)
        bad = {"config": {"ls": "oops"}, "floor_s": "1 ms", "min_s": [1.0]}   # wrong types
        s.result_path.write_text(json.dumps(bad if s.bench.name == "sketch" else {"x": 1}))
    records = {s.bench.name: {"status": "ok", "wall_s": 2.0} for s in plan}
    summary = ba.summarize(plan, records, GPU, "gpu", 480, 5.0)
    md = ba.markdown(summary)
    assert "| GPU (NVIDIA Test 80GB) |" in md.splitlines()[0]
    for name in ("adawac", "outofcore", "sketch"):
        ms = summary["benchmarks"][name]["metrics"]
        assert ms and all(m["value"] is None for m in ms)
        assert summary["benchmarks"][name]["notes"]
    assert "- outofcore: missing in bench_outofcore.json: warm/time_s" in md
    assert "- sketch: missing in results.json: floor_s (not a finite number: '1 ms')" in md
    assert ba.fmt(0.0123, "s") == "12.3 ms" and ba.fmt(2.5, "s") == "2.50 s"
    assert ba.fmt(True, "bool") == "yes" and ba.fmt(None, "mib") == "n/a"
    with pytest.raises(ValueError, match="unknown metric kind"):
        ba.fmt(1.0, "furlongs")


def test_overrun_is_taken_from_the_next_benchmark(ba, tmp_path):
    """A benchmark killed after its timeout overran it by its grace time; the next one gets
    that much less (never under 1 s), so the total stays within the plan."""
    plan = ba.make_plan(ba.select("sketch,angles,adawac"), "gpu", 480, tmp_path)
    given = []

    def runner(step, timeout_s, env):
        given.append(timeout_s)
        return {"status": "timeout", "wall_s": timeout_s + 4.0}
    ba.run_plan(plan, "gpu", runner)
    t = [s.timeout_s for s in plan]
    assert given == pytest.approx([t[0], t[1] - 4.0, t[2] - 4.0])
    assert sum(given) + 4.0 * len(given) <= sum(t) + 4.0
