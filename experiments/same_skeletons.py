"""Issue 30's "must hold": the same key gives the same skeletons before and after a change.

Records the skeletons (column ID columns; CUR rows and columns and two-sided ID rows for
Rand-LUPP / Rand-CPQR) of fixed keys for the thesis' methods and the three sketches, on a
slow-decay 500 x 300 matrix and a smooth kernel 600 x 400, float64 and float32, to a JSON
file; with ``--compare OLD.json`` it compares and prints every difference. To compare two
commits, run it once from a checkout of each (``PYTHONPATH=<checkout>``).

    python experiments/same_skeletons.py out.json
    python experiments/same_skeletons.py new.json --compare old.json

Raw JSON of issue 30 (before: 936ad94, after: the XLA kernels and the new SRTT):
``experiments/cpu/same_skeletons_2026-11-29_{before,after}.json`` (64 of 64 lists identical).
"""

import argparse
import json

import jax
import numpy as np

CASES = [("Rand-LUPP", "gaussian"), ("Rand-LUPP", "srtt"), ("Rand-LUPP", "sparse_sign"),
         ("Rand-CPQR", "gaussian"), ("RSVD-DEIM", "gaussian"), ("SRCUR", "gaussian")]


def matrices():
    rng = np.random.default_rng(1)
    U = np.linalg.qr(rng.standard_normal((500, 300)))[0]
    V = np.linalg.qr(rng.standard_normal((300, 300)))[0]
    x = np.linspace(0, 1, 600)[:, None]
    y = np.linspace(0, 1, 400)[None, :]
    return {"decay": (U / np.sqrt(np.arange(1, 301))) @ V.T,
            "kernel": np.exp(-np.abs(x - y) / 0.3)}


def record():
    import rdr_jax as R
    res = {}
    for name, A in matrices().items():
        for dt in ("float64", "float32"):
            Ad = A.astype(dt)
            for meth, sk in CASES:
                full = sk == "gaussian" and meth in ("Rand-LUPP", "Rand-CPQR")
                for k in ((10, 60) if meth == "Rand-LUPP" and sk == "gaussian" else (60,)):
                    M = R.Method(meth, sketch=sk)
                    key = jax.random.key(3)
                    d = R.interpolative(key, Ad, k, method=M, on_rank_deficient="ignore")
                    out = {"cols": np.asarray(d.cols).tolist()}
                    if full:
                        c = R.cur(key, Ad, k, method=M, on_rank_deficient="ignore")
                        t = R.interpolative(key, Ad, k, method=M, side="two_sided",
                                            on_rank_deficient="ignore")
                        out.update(cur_rows=np.asarray(c.rows).tolist(),
                                   cur_cols=np.asarray(c.cols).tolist(),
                                   ts_rows=np.asarray(t.rows).tolist())
                    res[f"{name}|{dt}|{meth}|{sk}|{k}"] = out
    return res


def compare(old, new):
    same = total = 0
    for key, fields in old.items():
        for f, ref in fields.items():
            total += 1
            got = new.get(key, {}).get(f)
            if got == ref:
                same += 1
            else:
                print(f"DIFF {key} {f}: {ref} -> {got}")
    print(f"{same} / {total} skeleton lists identical")
    return same == total


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--compare", default=None, help="an earlier JSON to compare with")
    args = ap.parse_args(argv)
    with jax.enable_x64(True):
        res = record()
    with open(args.out, "w") as f:
        json.dump(res, f)
    if args.compare:
        with open(args.compare) as f:
            raise SystemExit(0 if compare(json.load(f), res) else 1)


if __name__ == "__main__":
    main()
