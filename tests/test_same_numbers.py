"""experiments/same_numbers.py (issue 32's must-hold recorder): what it records and how it
compares two recordings."""

from __future__ import annotations

import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import same_numbers as S  # noqa: E402

import rdr_jax as R  # noqa: E402


def test_leaves_records_every_array_and_errors_by_type():
    out = {}
    sel = R.ColumnSelection(jnp.arange(3), jnp.ones((3, 5)), jnp.float32(1.5))
    S._leaves("case", sel, out)
    assert sorted(out) == ["case|.W", "case|.cols", "case|.eta"]
    np.testing.assert_array_equal(out["case|.cols"], [0, 1, 2])
    S._call("bad", lambda: R.interpolative(None, np.ones((4, 4)), 2), out)
    assert out["bad|error"].item() == "TypeError"


def test_compare_tells_identical_rounding_and_different_apart(capsys):
    old = {"a|x": np.arange(3), "b|y": np.array([1.0, 2.0]),
           "c|z": np.array([1.0, 2.0], np.float32), "d|error": np.array("ValueError"),
           "f|n": np.array([np.nan, 1.0])}
    new = {"a|x": np.arange(3), "b|y": np.array([1.0, 2.0 + 1e-13]),
           "c|z": np.array([1.0, 2.5], np.float32), "e|w": np.zeros(2),
           "f|n": np.array([np.nan, 1.0])}
    assert S.compare(old, new, 1e-10) == 3
    text = capsys.readouterr().out
    assert "2 arrays bitwise identical, 1 equal to rounding, 3 different" in text
    assert "c|z: max |diff| / max |old| = 2.50e-01" in text
    assert "d|error: only in old" in text and "e|w: only in new" in text
    assert S.compare(old, old, 1e-10) == 0
    ints = {"a|x": np.array([0, 1, 5])}
    assert S.compare({"a|x": np.arange(3)}, ints, 1e-10) == 1


def test_the_method_list_covers_every_pivot_and_sketch():
    names = S.methods(R)
    assert {n.split("/")[0] for n in names} >= set(S.PIVOTS)
    assert all(isinstance(m, R.Method) for m in names.values())
    assert len(names) == len(S.PIVOTS) * len(S.SKETCHES) + len(S.VARIANTS) + 1
