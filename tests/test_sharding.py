"""Sharded inputs, sharded algorithms and Monte-Carlo trials across devices (issue 13, 1-3).

The cases run in the suite's ONE subprocess with
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` set before jax is imported (the pytest
process itself has one CPU device; ``tests/_multidevice.py``). There :func:`sharding_job`
loops over every case and returns one JSON object of measurements that the tests below
assert on: the JAX start-up and the compilations are paid once. Meshes with d = 1, 2, 4, 8 devices are built from the first d devices; A is 256 x 128
with a decaying spectrum, k = 10, float64 (float32 for the CholeskyQR2 accuracy check).
"""

from __future__ import annotations

import pytest

from tests import _multidevice


# --------------------------------------------------------------------------------------
# the worker (runs in the 8-device subprocess)
# --------------------------------------------------------------------------------------
def sharding_job(workdir):  # noqa: C901 - one flat list of cases, on purpose
    """The measurements the tests below assert on (a job of ``tests/_multidevice.py``)."""
    import re

    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import rdr_jax as R
    from rdr_jax import sketching
    from rdr_jax.distributed import shard
    from rdr_jax.randomized_svd import CholeskyQR2, cholesky_qr2

    out = {"devices": jax.device_count()}
    devs = jax.devices()
    rng = np.random.default_rng(0)
    m, n, k = 256, 128, 10
    A = (rng.standard_normal((m, 40)) * 0.8 ** np.arange(40)) @ rng.standard_normal((40, n))
    Aj = jnp.asarray(A)
    key = jax.random.key(7)

    def mesh(d, shape=None):
        shape = shape or (d,)
        names = ("x",) if len(shape) == 1 else ("x", "y")
        return Mesh(np.array(devs[:d]).reshape(shape), names)

    layouts = {  # name -> (mesh, spec)
        "row1": (mesh(1), P("x", None)), "row2": (mesh(2), P("x", None)),
        "row4": (mesh(4), P("x", None)), "row8": (mesh(8), P("x", None)),
        "col2": (mesh(2), P(None, "x")), "col4": (mesh(4), P(None, "x")),
        "col8": (mesh(8), P(None, "x")),
        "block4": (mesh(4, (2, 2)), P("x", "y")), "block8": (mesh(8, (4, 2)), P("x", "y")),
    }
    placed = {name: shard(A, *ms) for name, ms in layouts.items()}

    def diff(a, b):
        return float(jnp.max(jnp.abs(jnp.asarray(a) - jnp.asarray(b))))

    def same(a, b):
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))

    # ---- item 1: entry points on sharded A vs the unsharded call, same key -------------
    ref_cur = R.cur(key, Aj, k)
    for name in ("row1", "col4", "block8", "row8"):
        res = R.cur(key, placed[name], k)
        out[f"cur/{name}"] = dict(cols=same(res.cols, ref_cur.cols),
                                  rows=same(res.rows, ref_cur.rows),
                                  err=max(diff(res.U, ref_cur.U) / float(jnp.abs(ref_cur.U).max()),
                                          diff(res.C, ref_cur.C), diff(res.R, ref_cur.R)))
    for side, names in (("two_sided", ("row8", "block4")), ("row", ("col8",)),
                        ("column", ("col2",))):
        ref = R.interpolative(key, Aj, k, side=side)
        for name in names:
            res = R.interpolative(key, placed[name], k, side=side)
            idx = [f for f in ("rows", "cols") if f in res._fields]
            mats = [f for f in res._fields if f not in idx and getattr(res, f) is not None
                    and jnp.ndim(getattr(res, f)) == 2]
            out[f"id-{side}/{name}"] = dict(
                cols=all(same(getattr(res, f), getattr(ref, f)) for f in idx),
                rows=True, err=max(diff(getattr(res, f), getattr(ref, f)) for f in mats))
    ref = R.rsvd(key, Aj, k, power_iters=1)
    for name in ("row2", "col4", "block4"):
        res = R.rsvd(key, placed[name], k, power_iters=1)
        # singular vectors are unique up to sign: compare s and the rank-k products
        err = max(diff(res.s, ref.s) / float(ref.s[0]),
                  diff((res.U * res.s) @ res.Vt, (ref.U * ref.s) @ ref.Vt) / float(ref.s[0]),
                  diff(jnp.abs(res.U), jnp.abs(ref.U)))
        out[f"rsvd/{name}"] = dict(cols=True, rows=True, err=err)
    ref = R.rangefinder(key, Aj, 20, power_iters=1)
    Q = R.rangefinder(key, placed["row8"], 20, power_iters=1)     # auto -> CholeskyQR2
    out["rangefinder/row8"] = dict(
        cols=True, rows=True, err=diff(Q @ (Q.T @ Aj), ref @ (ref.T @ Aj)),
        orth=float(jnp.linalg.norm(Q.T @ Q - jnp.eye(20), 2)))
    for fn, name in (("select_columns", "row8"), ("select_rows", "col8")):
        ref = getattr(R, fn)(key, Aj, k)
        res = getattr(R, fn)(key, placed[name], k)
        out[f"{fn}/{name}"] = dict(cols=same(res[0], ref[0]), rows=True,
                                   err=max(diff(res.W, ref.W), diff(res.eta, ref.eta)))
    res = R.cur(key, placed["row8"], k)
    e_sh, e_ref = R.lowrank_error(placed["row8"], res), R.lowrank_error(Aj, ref_cur)
    sv = np.linalg.svd(A, compute_uv=False)
    out["lowrank_error/row8"] = dict(cols=True, rows=True, err=abs(e_sh.fro - e_ref.fro),
                                     rel=e_sh.relative_fro,
                                     opt=float(np.linalg.norm(sv[k:]) / np.linalg.norm(sv)))
    ref = R.streaming_skeletons(key, [Aj[i:i + 128] for i in (0, 128)], (m, n), k)
    Ac = placed["col8"]
    res = R.streaming_skeletons(key, [Ac[i:i + 128] for i in (0, 128)], (m, n), k)
    out["streaming/col8"] = dict(cols=same(res.cols, ref.cols), rows=same(res.rows, ref.rows),
                                 err=0.0)
    # factored operator L diag(d) R^H with row-sharded factors
    Lf, Rf = rng.standard_normal((m, 30)), rng.standard_normal((n, 30))
    dv = 0.7 ** np.arange(30)
    fac = R.factored_operator(Lf, dv, Rf)
    mesh8 = layouts["row8"][0]
    fac_sh = R.factored_operator(shard(Lf, mesh8, P("x", None)), dv,
                                 shard(Rf, mesh8, P("x", None)))
    ref, res = R.cur(key, fac, k), R.cur(key, fac_sh, k)
    out["cur/factored-row8"] = dict(cols=same(res.cols, ref.cols), rows=same(res.rows, ref.rows),
                                    err=diff(res.U, ref.U) / float(jnp.abs(ref.U).max()))
    ref, res = R.rsvd(key, fac, k), R.rsvd(key, fac_sh, k)
    out["rsvd/factored-row8"] = dict(cols=True, rows=True, err=diff(res.s, ref.s) / float(ref.s[0]))

    # ---- item 2: collectives of the compiled sketch and of CholeskyQR2 ----------------
    def collectives(f, *args):
        txt = jax.jit(f).lower(*args).compile().as_text()
        ops = re.findall(r"= (\S+) (all-reduce|all-gather|reduce-scatter|all-to-all|"
                         r"collective-permute)(?:-start)?\(", txt)
        return [[kind, shape] for shape, kind in ops]

    def sketch(kk, a):
        return sketching.as_sketch("gaussian").draw(kk, 20, a.shape[0], dtype=a.dtype).apply(a)

    for name in ("row8", "col8", "row4"):
        out[f"hlo/sketch/{name}"] = collectives(sketch, key, placed[name])
    Y = jnp.asarray(rng.standard_normal((m, 20)))
    Ys = jax.device_put(Y, NamedSharding(mesh8, P("x", None)))
    out["hlo/cholesky_qr2/row8"] = collectives(lambda y: cholesky_qr2(y, blocks=8), Ys)
    out["hlo/householder/row8"] = collectives(lambda y: jnp.linalg.qr(y)[0], Ys)

    # ---- CholeskyQR2 accuracy: cond 1e7 (float64), 1e3 (float32); sharded == unsharded -
    def prescribed(mm, nn, cond, dtype, seed):
        g = np.random.default_rng(seed)
        U = np.linalg.qr(g.standard_normal((mm, nn)))[0]
        V = np.linalg.qr(g.standard_normal((nn, nn)))[0]
        return ((U * np.logspace(0, -np.log10(cond), nn)) @ V.T).astype(dtype)

    qr_f = jax.jit(lambda y: cholesky_qr2(y, blocks=8))
    for dt, cond, seed in (("float64", 1e7, 1), ("float64", 1e7, 2), ("float32", 1e3, 3)):
        Yc = prescribed(1024, 40, cond, dt, seed)
        Q, Rr = qr_f(jnp.asarray(Yc))
        Qs, Rs = qr_f(jax.device_put(Yc, NamedSharding(mesh8, P("x", None))))
        Q64, R64 = np.asarray(Q, np.float64), np.asarray(Rr, np.float64)
        out[f"cqr/{dt}/{seed}"] = dict(
            orth=float(np.linalg.norm(Q64.T @ Q64 - np.eye(40), 2)),
            resid=float(np.linalg.norm(Q64 @ R64 - Yc) / np.linalg.norm(Yc)),
            triu=bool(np.allclose(R64, np.triu(R64))),
            sharded=float(np.abs(np.asarray(Qs, np.float64) - Q64).max()),
            sign=float(np.min(np.diagonal(R64))))
    # numerically rank-deficient basis (rank 5 < 20 columns): still orthonormal, spans Y
    Yd = jnp.asarray(prescribed(1024, 5, 10.0, "float64", 4) @ rng.standard_normal((5, 20)))
    Qd, _ = qr_f(Yd)
    out["cqr/rankdef"] = dict(orth=float(jnp.linalg.norm(Qd.T @ Qd - jnp.eye(20), 2)),
                              span=float(jnp.linalg.norm(Yd - Qd @ (Qd.T @ Yd)) /
                                         jnp.linalg.norm(Yd)))
    Qh = R.rangefinder(key, Aj, 20, power_iters=2, orthonormalize="householder")
    Qc = R.rangefinder(key, Aj, 20, power_iters=2, orthonormalize=CholeskyQR2())
    out["rangefinder/cqr-vs-householder"] = diff(Qc @ Qc.T, Qh @ Qh.T)

    # ---- item 3: Monte-Carlo trials across devices -------------------------------------
    s = jnp.asarray(np.r_[np.ones(10), 1.0 / np.sqrt(np.arange(1, 91))])
    e1 = R.angles.unbiased_estimate(key, s, 5, 20, 1, num_trials=8)
    e8 = R.angles.unbiased_estimate(key, s, 5, 20, 1, num_trials=8,
                                    options=R.angles.EstimateOptions(mesh=mesh8))
    e4 = R.angles.unbiased_estimate(key, s, 5, 20, 1, num_trials=8,
                                    options=R.angles.EstimateOptions(mesh=mesh(4, (2, 2))))
    out["angles"] = dict(trials8=same(e8.trials, e1.trials), trials4=same(e4.trials, e1.trials),
                         mean=max(diff(e8.mean, e1.mean), diff(e4.mean, e1.mean)),
                         minmax=same(e8.min, e1.min) and same(e8.max, e1.max),
                         sharded=len(e8.trials.sharding.device_set))

    # ---- bad inputs ---------------------------------------------------------------------
    def error_of(f):
        try:
            f()
        except (ValueError, TypeError) as e:
            return [type(e).__name__, str(e)]
        return None

    out["bad/indivisible"] = error_of(lambda: shard(np.ones((250, 128)), mesh8, P("x", None)))
    out["bad/axis"] = error_of(lambda: shard(A, mesh8, P("z", None)))
    other = Mesh(np.array(devs[4:]), ("x",))
    out["bad/factor-devices"] = error_of(lambda: R.factored_operator(
        shard(Lf, layouts["row4"][0], P("x", None)), dv, shard(Rf, other, P("x", None))))
    out["bad/factor-inner"] = error_of(lambda: R.factored_operator(
        shard(Lf, mesh(2), P(None, "x")), dv, shard(Rf, mesh(2), P("x", None))))
    out["bad/trials"] = error_of(lambda: R.angles.unbiased_estimate(
        key, s, 5, 20, 1, num_trials=3, options=R.angles.EstimateOptions(mesh=mesh8)))
    out["bad/orthonormalize"] = error_of(lambda: R.rangefinder(key, Aj, 5, orthonormalize="gs"))
    return out


# --------------------------------------------------------------------------------------
# pytest side
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def results(multidevice):
    """The measurements of :func:`sharding_job`, run in the suite's one 8-device subprocess
    (``tests/_multidevice.py``)."""
    return _multidevice.job(multidevice, "sharding")


def test_eight_devices(results):
    assert results["devices"] == 8


SHARDED_CASES = ["cur/row1", "cur/col4", "cur/block8", "cur/row8",
                 "id-two_sided/row8", "id-two_sided/block4", "id-row/col8", "id-column/col2",
                 "rsvd/row2", "rsvd/col4", "rsvd/block4", "rangefinder/row8",
                 "select_columns/row8", "select_rows/col8", "lowrank_error/row8",
                 "streaming/col8", "cur/factored-row8", "rsvd/factored-row8"]


@pytest.mark.parametrize("case", SHARDED_CASES)
def test_sharded_matches_unsharded(results, case):
    """Same key: same skeleton indices, factors equal to float64 tolerance."""
    r = results[case]
    assert r["cols"] and r["rows"], r
    assert r["err"] < 1e-10, r


def test_sharded_rangefinder_is_orthonormal(results):
    assert results["rangefinder/row8"]["orth"] < 1e-13


def test_lowrank_error_of_sharded_cur(results):
    r = results["lowrank_error/row8"]          # near the optimal rank-k error
    assert r["opt"] <= r["rel"] < 3 * r["opt"], r


def test_sketch_collectives(results):
    """Row-sharded A: exactly one all-reduce, of the small l x n sketch; column-sharded:
    no collective at all."""
    for name in ("row8", "row4"):
        ops = results[f"hlo/sketch/{name}"]
        assert len(ops) == 1 and ops[0][0] == "all-reduce", ops
        assert ops[0][1].startswith("f64[20,128]"), ops
    assert results["hlo/sketch/col8"] == []


def test_cholesky_qr2_communicates_only_the_gram(results):
    ops = results["hlo/cholesky_qr2/row8"]
    assert ops and all(kind == "all-reduce" and shape.startswith("f64[20,20]")
                       for kind, shape in ops), ops
    # the reference point: Householder QR of the same row-sharded Y gathers it
    assert any(kind == "all-gather" and shape.startswith("f64[256,20]")
               for kind, shape in results["hlo/householder/row8"])


@pytest.mark.parametrize("case", ["float64/1", "float64/2", "float32/3"])
def test_cholesky_qr2_accuracy(results, case):
    """Loss of orthogonality and residual at float tolerance; cond 1e7 in float64."""
    r = results[f"cqr/{case}"]
    u = 1.1e-16 if case.startswith("float64") else 6e-8
    assert r["orth"] < (1e-12 if u < 1e-10 else 50 * u), r
    assert r["resid"] < 50 * u, r
    assert r["triu"] and r["sign"] > 0, r
    # sharded vs one device: the Gram's all-reduce sums in another order; Q's forward
    # error is then ~ cond(Y) u (here 1e7 u in float64, 1e3 u in float32)
    assert r["sharded"] < 1e2 * (1e7 if u < 1e-10 else 1e3) * u, r


def test_cholesky_qr2_rank_deficient(results):
    r = results["cqr/rankdef"]
    assert r["orth"] < 1e-12 and r["span"] < 1e-12, r


def test_rangefinder_cholesky_equals_householder_subspace(results):
    assert results["rangefinder/cqr-vs-householder"] < 1e-12


def test_unbiased_estimate_across_devices(results):
    r = results["angles"]
    assert r["trials8"] and r["trials4"] and r["minmax"], r
    assert r["mean"] < 1e-15, r
    assert r["sharded"] == 8


@pytest.mark.parametrize("case,words", [
    ("bad/indivisible", ["250", "does not divide"]),
    ("bad/axis", ["'z'", "axes"]),
    ("bad/factor-devices", ["incompatible devices", "same mesh"]),
    ("bad/factor-inner", ["mixed shardings"]),
    ("bad/trials", ["num_trials", "multiple"]),
    ("bad/orthonormalize", ["orthonormalize", "'gs'"]),
])
def test_bad_inputs(results, case, words):
    err = results[case]
    assert err is not None and err[0] == "ValueError", err
    for w in words:
        assert w in err[1], err

