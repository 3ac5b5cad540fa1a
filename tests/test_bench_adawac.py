"""experiments/bench_adawac.py (AdaWAC vs ACR-only vs ERM step time, ``alg:srw_dac``) runs end
to end on its quick setting and writes sane outputs; bad arguments fail with clear messages.

Timings depend on the machine, so no threshold is asserted: only that every method was timed
(positive, finite step times, consistent images/s), that the three ratios are present and
consistent with the per-round times, and that the verdict is a boolean matching the ratio.
"""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

METHODS = {"erm", "acr-only", "adawac"}
RATIOS = {"adawac/acr-only", "adawac/erm", "acr-only/erm"}


def test_bench_adawac_quick(script, tmp_path, capsys):
    mod = script("bench_adawac")
    res = mod.main(["--quick", "--steps", "2", "--rounds", "2", "--warmup", "0",
                    "--beta-calls", "5", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    for name in ("results.json", "results.csv", "config.json", "bench_adawac.png"):
        assert (tmp_path / name).is_file() and (tmp_path / name).stat().st_size > 0, name

    saved = json.loads((tmp_path / "results.json").read_text())
    assert set(saved["methods"]) == METHODS == set(res["methods"])
    assert saved["model"] == "tiny" and saved["batch"] == 4 and saved["size"] == 32
    assert saved["backend"] and saved["device_kind"]
    for m, s in saved["methods"].items():
        assert s["n_steps"] == 2 * 2, m
        for k in ("median_s", "q10_s", "q25_s", "q75_s", "mean_s", "min_s", "images_per_s"):
            assert math.isfinite(s[k]) and s[k] > 0, (m, k)
        assert s["q25_s"] <= s["median_s"] <= s["q75_s"]
        assert s["images_per_s"] == pytest.approx(4 / s["median_s"])
        assert math.isfinite(s["final_loss"])
        assert len(saved["per_round_s"][m]) == 2
        assert all(len(r) == 2 for r in saved["per_round_s"][m])
    # only AdaWAC moves the table; ACR-only runs with eta forced to 0
    assert saved["methods"]["adawac"]["updates_beta"] is True
    assert saved["methods"]["acr-only"]["updates_beta"] is False
    assert saved["methods"]["acr-only"]["eta"] == 0.0

    assert set(saved["ratios"]) == RATIOS
    for name, r in saved["ratios"].items():
        a, b = name.split("/")
        expect = [np.median(x) / np.median(y) for x, y in
                  zip(saved["per_round_s"][a], saved["per_round_s"][b])]
        np.testing.assert_allclose(r["per_round"], expect, rtol=1e-12)
        assert r["ratio"] == pytest.approx(float(np.median(expect)))
        assert r["ratio_q25"] <= r["ratio"] <= r["ratio_q75"]
        assert math.isfinite(r["q10_ratio"]) and r["q10_ratio"] > 0
        assert math.isfinite(r["pooled_ratio"]) and r["pooled_ratio"] > 0

    claim = saved["claim"]
    assert isinstance(claim["held"], bool)
    assert claim["held"] == (claim["ratio"] <= 1.05)
    assert claim["ratio"] == saved["ratios"]["adawac/acr-only"]["ratio"]
    tag = "[HELD]" if claim["held"] else "[NOT HELD]"
    assert f"{tag} beta bookkeeping overhead <= 5% over ACR-only" in printed

    beta = saved["beta_only"]
    assert beta["n"] == 2211 and beta["table_in_open_unit_interval"]
    assert beta["per_call_median_s"] > 0 and beta["dispatch_floor_s"] > 0
    net = max(beta["per_call_median_s"] - beta["dispatch_floor_s"], 0.0)
    assert beta["net_s"] == pytest.approx(net)

    with open(tmp_path / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["method"] for r in rows} == METHODS
    for r in rows:
        assert float(r["median_s"]) > 0 and float(r["images_per_s"]) > 0
    acr = next(r for r in rows if r["method"] == "acr-only")
    assert float(acr["ratio_vs_acr_only"]) == pytest.approx(1.0)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["config"]["model"]["small"] is True and cfg["env"]["backend"]


@pytest.mark.parametrize("argv, message", [
    (["--batch", "0"], "--batch must be >= 1"),
    (["--steps", "0"], "--steps must be >= 1"),
    (["--rounds", "-1"], "--rounds must be >= 1"),
    (["--warmup", "-1"], "--warmup must be >= 0"),
    (["--model", "resnet"], "invalid choice: 'resnet'"),
    (["--model", "unet", "--size", "48"], "--size must be a positive multiple of 32"),
    (["--size", "20"], "--size must be a positive multiple of 8"),
    (["--table", "3", "--batch", "4"], "--table (3) must be >= --batch (4)"),
    (["--eta", "0"], "--eta must be > 0"),
    (["--lam", "nan"], "--lam must be a finite number >= 0"),
])
def test_bench_adawac_bad_args(script, tmp_path, capsys, argv, message):
    mod = script("bench_adawac")
    with pytest.raises(SystemExit) as e:
        mod.main(argv + ["--out", str(tmp_path)])
    assert e.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "results.json").exists()
