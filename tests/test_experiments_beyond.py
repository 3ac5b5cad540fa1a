"""The "Beyond the thesis" experiment scripts (``experiments/beyond_*.py``): quick runs write
the JSON that ``experiments/report.py`` reads, with every claim evaluated."""

import csv
import json

import numpy as np

BEYOND_KEYS = {"section", "item", "paper", "mode", "command", "versions", "claims"}


def check_beyond_json(path):
    """The shared schema of a beyond result (``experiments/report.py`` reads it)."""
    res = json.loads(path.read_text())
    assert BEYOND_KEYS <= set(res), BEYOND_KEYS - set(res)
    assert res["section"] == "Beyond the thesis" and res["claims"]
    for c in res["claims"]:
        assert isinstance(c["held"], bool)
        assert all(isinstance(c[f], str) and c[f] for f in
                   ("claim", "published", "measured", "setting")), c
    return res


def test_beyond_cross_cur_quick(script, tmp_path):
    mod = script("beyond_cross_cur")
    mod.main(["--quick", "--out", str(tmp_path)])
    res = check_beyond_json(tmp_path / "cross_cur.json")
    assert res["mode"] == "quick" and (tmp_path / "cross_cur.png").stat().st_size > 0
    # both claims are facts (exactness at exact rank; Frobenius optimality of C^+ A R^+)
    assert all(c["held"] for c in res["claims"]), res["claims"]
    with open(tmp_path / "cross_cur.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows
    for r in rows:        # both at least the optimal error; the stable core at most the cross
        st, cr = float(r["stable_over_opt"]), float(r["cross_over_opt"])
        assert 1 - 1e-9 <= st <= cr * (1 + 1e-9) and np.isfinite(cr)


def test_beyond_krylov_quick(script, tmp_path):
    mod = script("beyond_krylov")
    mod.main(["--quick", "--out", str(tmp_path)])
    res = check_beyond_json(tmp_path / "krylov.json")
    assert res["mode"] == "quick" and (tmp_path / "krylov.png").stat().st_size > 0
    with open(tmp_path / "krylov.csv") as f:
        rows = list(csv.DictReader(f))
    for r in rows:      # the spectral error of a rank-k approximation is at least sigma_k+1
        for f in ("rsi_over_opt", "krylov_over_opt", "krylov_b20_over_opt"):
            assert float(r[f]) >= 1 - 1e-9, r
    # the Krylov space contains the subspace iteration's range: the thesis' bound applies
    assert res["claims"][2]["held"], res["claims"][2]
