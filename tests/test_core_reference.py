"""Same key, same skeletons and factors before and after the core redesign (issue 12).

``tests/data/core_reference.npz`` was written by the pre-redesign code (commit 18d513f,
script ``tests/data/make_core_reference_pre_redesign.py``) on a 60 x 40 float64 matrix. The
redesign changed two defaults (Gaussian generator ``"hash"``, ``stable=True`` everywhere),
so the old defaults are spelled out here: ``Gaussian("threefry")`` and ``stable=False``
for the skeleton selection (the old rsvd default was already ``stable=True``). The 0.1
results carried ``bound = eta ||A - A W^+ W||_F`` (Theorem 2.1; times
``sqrt(1 + eta_rows^2)`` for CUR, Eq. (2.26)); 0.2 computes it with :func:`rdr_jax.eta_bound`
on the decompositions' column selection.
"""

from pathlib import Path

import jax
import numpy as np
import pytest

import rdr_jax as R

REF = np.load(Path(__file__).parent / "data" / "core_reference.npz")
METHODS = ["Rand-LUPP", "Rand-LUPP-1piter", "Rand-CPQR", "Rand-CPQR-1piter", "RSVD-DEIM",
           "RSVD-LS", "SRCUR"]
OLD_SKETCH = {"gaussian": R.Gaussian("threefry"), "srtt": R.SRTT(), "sparse_sign": R.SparseSign()}


@pytest.fixture(scope="module")
def A():
    return REF["A"]


def close(name, got, **kw):
    ref = REF[name]
    if ref.dtype.kind in "iu":
        np.testing.assert_array_equal(np.asarray(got), ref, err_msg=name)
    else:
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-8, atol=1e-10, err_msg=name,
                                   **kw)


CASES = [(m, "gaussian") for m in METHODS] + [("Rand-LUPP", "srtt"), ("Rand-CPQR", "sparse_sign")]


@pytest.mark.parametrize("method,sk", CASES)
def test_cur_id_selection_match_pre_redesign(x64, A, method, sk):
    key = jax.random.key(3)
    m = R.Method(method, sketch=OLD_SKETCH[sk], stable=False)
    d = R.cur(key, A, 8, method=m, on_rank_deficient="ignore")
    p = f"cur/{method}/{sk}"
    for f in ("rows", "cols", "U", "eta", "eta_rows"):
        close(f"{p}/{f}", getattr(d, f))
    # the column selection of cur and interpolative: the first of three subkeys
    eb = R.eta_bound(A, R.select_columns(jax.random.split(key, 3)[0], A, 8, method=m))
    close(f"{p}/bound", np.sqrt(1.0 + float(d.eta_rows) ** 2) * eb.fro)
    c = R.interpolative(key, A, 8, method=m, on_rank_deficient="ignore")
    p = f"id_col/{method}/{sk}"
    for f in ("cols", "W", "eta"):
        close(f"{p}/{f}", getattr(c, f))
    close(f"{p}/bound", eb.fro)
    s = R.select_columns(key, A, 8, method=m)
    p = f"select_columns/{method}/{sk}"
    for f in ("cols", "W", "eta"):
        close(f"{p}/{f}", getattr(s, f))


def test_other_sides_and_rsvd_match_pre_redesign(x64, A):
    old = R.Method(sketch=OLD_SKETCH["gaussian"], stable=False)
    kw = dict(method=old, on_rank_deficient="ignore")
    r = R.interpolative(jax.random.key(5), A, 8, side="row", **kw)
    for f in ("rows", "W", "eta"):
        close(f"id_row/{f}", getattr(r, f))
    t = R.interpolative(jax.random.key(5), A, 8, side="two_sided", **kw)
    close("id_two_sided/rows", t.rows)
    close("id_two_sided/cols", t.cols)
    close("id_two_sided/P", t.W_rows)
    close("id_two_sided/S", t.S)
    close("id_two_sided/W", t.W_cols)
    close("id_two_sided/eta_rows", t.eta_rows)
    s = R.interpolative(jax.random.key(5), A, 8, method=old.replace(interp="sketch"),
                        on_rank_deficient="ignore")
    close("id_col_sketch/cols", s.cols)
    close("id_col_sketch/W", s.W)
    for sk, q in [("gaussian", 0), ("srtt", 2), ("sparse_sign", 2)]:
        d = R.rsvd(jax.random.key(7), A, 6, sketch=OLD_SKETCH[sk], power_iters=q)
        for f in ("U", "s", "Vt"):
            close(f"rsvd/{sk}/{q}/{f}", getattr(d, f))
        close(f"rangefinder/{sk}/{q}/Q",
              R.rangefinder(jax.random.key(7), A, 10, sketch=OLD_SKETCH[sk], power_iters=q))
