"""Reference outputs of the pre-redesign core (commit 18d513f), for tests/test_core_reference.py.

A record of how ``core_reference.npz`` was made: it runs only on commit 18d513f
(``git worktree add /tmp/old 18d513f``), whose API it uses on purpose (``sketch=`` and
``bound`` on the results, ``s.idx``/``s.T``/``c.P``; in 0.2 spelled ``method=R.Method(...,
sketch=...)``, :func:`rdr_jax.eta_bound`, ``cols``/``W``/``W_rows``). Do not port it: the
reference must come from the old code.
"""
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
import rdr_jax as R
rng = np.random.default_rng(0)
U = np.linalg.qr(rng.standard_normal((60, 40)))[0]
V = np.linalg.qr(rng.standard_normal((40, 40)))[0]
A = (U * (0.7 ** np.arange(40))) @ V.T
out = {"A": A}
def put(name, **kw):
    for f, v in kw.items():
        out[f"{name}/{f}"] = np.asarray(v)
for method in ["Rand-LUPP", "Rand-LUPP-1piter", "Rand-CPQR", "Rand-CPQR-1piter", "RSVD-DEIM", "RSVD-LS", "SRCUR"]:
    for sk in ["gaussian", "srtt", "sparse_sign"]:
        key = jax.random.key(3)
        d = R.cur(key, A, 8, method=method, sketch=sk, on_rank_deficient="ignore")
        put(f"cur/{method}/{sk}", rows=d.rows, cols=d.cols, U=d.U, eta=d.eta, eta_rows=d.eta_rows, bound=d.bound)
        c = R.interpolative(key, A, 8, method=method, sketch=sk, on_rank_deficient="ignore")
        put(f"id_col/{method}/{sk}", cols=c.cols, W=c.W, eta=c.eta, bound=c.bound)
        s = R.select_columns(key, A, 8, method=method, sketch=sk)
        put(f"select_columns/{method}/{sk}", cols=s.idx, W=s.T, eta=s.eta)
for side in ["row", "two_sided"]:
    c = R.interpolative(jax.random.key(5), A, 8, side=side, on_rank_deficient="ignore")
    if side == "row":
        put("id_row", rows=c.rows, W=c.W, eta=c.eta)
    else:
        put("id_two_sided", rows=c.rows, cols=c.cols, P=c.P, S=c.S, W=c.W, eta=c.eta, eta_rows=c.eta_rows)
c = R.interpolative(jax.random.key(5), A, 8, interp="sketch", on_rank_deficient="ignore")
put("id_col_sketch", cols=c.cols, W=c.W)
for sk in ["gaussian", "srtt", "sparse_sign"]:
    for q in [0, 2]:
        r = R.rsvd(jax.random.key(7), A, 6, sketch=sk, power_iters=q)
        put(f"rsvd/{sk}/{q}", U=r.U, s=r.s, Vt=r.Vt)
        Q = R.rangefinder(jax.random.key(7), A, 10, sketch=sk, power_iters=q)
        put(f"rangefinder/{sk}/{q}", Q=Q)
np.savez_compressed("tests/data/core_reference.npz", **out)
print(len(out), "arrays")
