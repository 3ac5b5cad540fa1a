"""The 0.1 spellings of the core API (issue 24): each keeps working for one release with a
DeprecationWarning that names the new spelling, and gives the same numbers as the new
spelling with the same key; the keywords that changed a result's shape (``certify=``,
``confidence=`` on a fixed rank) are gone, with a TypeError naming ``rdr_jax.error_bound``.
Each old spelling is tested once here; the rest of the suite uses the new ones."""

import contextlib
import re
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rdr_jax as R
from rdr_jax import certify as CE
from rdr_jax import diagnostics as DG
from rdr_jax.id_cur import fixed_accuracy as FA
from rdr_jax.id_cur import selection as SL

KEY = jax.random.key(0)
K = 5


def _matrix(m=40, n=30, seed=0):
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.standard_normal((m, n)))[0]
    V = np.linalg.qr(rng.standard_normal((n, n)))[0]
    return ((U * 0.6 ** np.arange(n)) @ V.T).astype(np.float32)


A = _matrix()


@contextlib.contextmanager
def new_spelling():
    """The new spelling warns about nothing deprecated."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        yield


def old_spelling(new: str):
    """The old spelling warns, naming ``new``."""
    return pytest.warns(DeprecationWarning, match=re.escape(new))


def same(old, new):
    """Bit-identical results (NaN equal to NaN)."""
    assert type(old) is type(new)
    a, b = jax.tree_util.tree_leaves(old), jax.tree_util.tree_leaves(new)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# --------------------------------------------------------------------------------------
# Method fields as keywords -> method=Method(...)
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn,old,new", [
    ("interpolative", {"sketch": "sparse_sign"}, R.Method(sketch="sparse_sign")),
    ("cur", {"power_iters": 1}, R.Method(power_iters=1)),
    ("select_columns", {"oversample": 4}, R.Method(oversample=4)),
    ("select_rows", {"l": K + 3}, R.Method(oversample=3)),
    ("select_skeletons", {"method": "Rand-LUPP-1piter", "stable": False},
     R.Method("Rand-LUPP-1piter", stable=False)),
    ("interpolative", {"interp": "sketch", "side": "two_sided"}, R.Method(interp="sketch")),
], ids=["sketch", "power_iters", "oversample", "l", "stable", "interp"])
def test_method_keywords_move_onto_the_method(fn, old, new):
    f = getattr(R, fn)
    name = next(k for k in old if k not in ("method", "side"))
    spelled = "oversample=l - k" if name == "l" else f"{name}=..."
    extra = {"side": old["side"]} if "side" in old else {}
    with old_spelling(f"{fn}(method=Method(..., {spelled}))"):
        got = f(KEY, A, K, **old)
    with new_spelling():
        same(got, f(KEY, A, K, method=new, **extra))


def test_streaming_skeletons_method_keywords():
    blocks = A.reshape(4, 10, A.shape[1])
    with old_spelling("streaming_skeletons(method=Method(..., sketch=...))"), \
            old_spelling("streaming_skeletons(method=Method(..., oversample=...))"):
        got = R.streaming_skeletons(KEY, blocks, A.shape, K, sketch="sparse_sign", oversample=4)
    with new_spelling():
        same(got, R.streaming_skeletons(KEY, blocks, A.shape, K,
                                        method=R.Method(sketch="sparse_sign", oversample=4)))


# --------------------------------------------------------------------------------------
# a float k -> interpolative_to_tolerance; confidence -> failure_prob = 1 - confidence
# --------------------------------------------------------------------------------------
def test_float_k_goes_to_interpolative_to_tolerance():
    with old_spelling("interpolative_to_tolerance(key, A, tol)"):
        got = R.interpolative(KEY, A, 1e-2, side="row")
    with new_spelling():
        same(got, R.interpolative_to_tolerance(KEY, A, 1e-2, side="row"))


def test_float_k_with_its_fixed_accuracy_keywords():
    with old_spelling("interpolative_to_tolerance(key, A, tol)"), \
            old_spelling("interpolative_to_tolerance(method=Method(..., interp=...))"), \
            old_spelling("interpolative_to_tolerance(failure_prob=1 - c)"):
        got = R.interpolative(KEY, A, 1e-2, interp="sketch", max_rank=20, block_size=4,
                              confidence=0.99)
    with new_spelling():
        new = R.interpolative_to_tolerance(KEY, A, 1e-2, method=R.Method(interp="sketch"),
                                           max_rank=20, block_size=4, failure_prob=1 - 0.99)
    same(got, new)
    assert float(new.error_estimate) <= 1e-2        # the certified bound


@pytest.mark.parametrize("fn", ["adaptive_row_skeletons", "adaptive_column_skeletons"])
def test_adaptive_skeletons_confidence(fn):
    f = getattr(FA, fn)
    with old_spelling(f"{fn}(failure_prob=1 - c)"):
        got = f(KEY, A, 0.05, block_size=4, confidence=0.9)
    with new_spelling():
        same(got, f(KEY, A, 0.05, block_size=4, failure_prob=1 - 0.9))
        assert np.isnan(float(f(KEY, A, 0.05, block_size=4).error_bound))  # not certified
    assert np.isfinite(float(got.error_bound))


# --------------------------------------------------------------------------------------
# error certificate -> error bound
# --------------------------------------------------------------------------------------
def test_error_certificate_is_error_bound():
    d = R.cur(KEY, A, K)
    key2 = jax.random.fold_in(KEY, 1)
    with old_spelling("rdr_jax.error_bound(failure_prob=...)"):
        got = R.error_certificate(key2, A, d, delta=0.05)
    with new_spelling():
        new = R.error_bound(key2, A, d, failure_prob=0.05)
    same(got, new)


@pytest.mark.parametrize("old,new", [("fro_bound", "fro"), ("spec_bound", "spectral"),
                                     ("spec_estimate", "spectral_estimate"),
                                     ("delta", "failure_prob")])
def test_error_bound_0_1_field_names(old, new):
    b = R.error_bound(KEY, A, R.rsvd(KEY, A, K))
    with old_spelling(f"ErrorBound.{new}"):
        assert getattr(b, old) is getattr(b, new)


@pytest.mark.parametrize("module,old,new", [
    (R, "ErrorCertificate", "ErrorBound"), (CE, "ErrorCertificate", "ErrorBound"),
    (R, "Certificate", "EtaBound"), (DG, "Certificate", "EtaBound"),
    (DG, "certificate", "eta_bound")], ids=lambda x: getattr(x, "__name__", x))
def test_renamed_names(module, old, new):
    with old_spelling(new):
        assert getattr(module, old) is getattr(R, new)


def test_check_delta():
    with old_spelling("check_failure_prob"):
        assert CE.check_delta is CE.check_failure_prob


# --------------------------------------------------------------------------------------
# certificate -> eta_bound; LowRankError.spec; lowrank_error(num_matvecs=)
# --------------------------------------------------------------------------------------
def test_certificate_is_eta_bound():
    sel = R.select_columns(KEY, A, K)
    with old_spelling("rdr_jax.eta_bound"):
        got = R.certificate(A, sel)
    with new_spelling():
        same(got, R.eta_bound(A, sel))


def test_eta_bound_0_1_field_names():
    b = R.eta_bound(A, R.select_columns(KEY, A, K))
    with old_spelling("spectral"):
        assert b.spec == b.spectral and b.residual_spec == b.residual_spectral


def test_lowrank_error_spec():
    e = R.lowrank_error(A, R.cur(KEY, A, K))
    with old_spelling("LowRankError.spectral"):
        assert e.spec == e.spectral


def _implicit(M):
    Mj = jnp.asarray(M)
    return R.implicit_operator(lambda X: Mj @ X, lambda Y: Mj.T @ Y, M.shape, M.dtype)


def test_lowrank_error_num_matvecs():
    op, d = _implicit(A), R.cur(KEY, A, K)
    kw = dict(key=jax.random.fold_in(KEY, 1), dense_limit=0)     # the randomized estimate
    with old_spelling("lowrank_error(num_vectors=...)"):
        got = R.lowrank_error(op, d, num_matvecs=12, **kw)
    with new_spelling():
        same(got, R.lowrank_error(op, d, num_vectors=12, **kw))


# --------------------------------------------------------------------------------------
# rsvd(l=) -> oversample = l - k
# --------------------------------------------------------------------------------------
def test_rsvd_l():
    with old_spelling("rsvd(oversample=l - k)"):
        got = R.rsvd(KEY, A, K, l=K + 4)
    with new_spelling():
        same(got, R.rsvd(KEY, A, K, oversample=4))
    with pytest.raises(ValueError, match="k must be <= l"), pytest.warns(DeprecationWarning):
        R.rsvd(KEY, A, K, l=K - 1)


# --------------------------------------------------------------------------------------
# module paths
# --------------------------------------------------------------------------------------
def test_old_module_path_imports_the_new_module():
    def forget():
        sys.modules.pop("rdr_jax.selection", None)
        R.__dict__.pop("selection", None)
    forget()
    try:
        with old_spelling("rdr_jax.id_cur.selection"):
            import rdr_jax.selection as old
        assert old is SL
    finally:
        forget()


# --------------------------------------------------------------------------------------
# removed: the keywords that changed the result's shape
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("call", [
    lambda: R.interpolative(KEY, A, K, certify=True),
    lambda: R.cur(KEY, A, K, certify=True),
    lambda: R.interpolative(KEY, A, K, side="row", confidence=0.99),
    lambda: R.cur(KEY, A, K, confidence=0.99),
    lambda: R.rsvd(KEY, A, K, confidence=0.99),
], ids=["interpolative-certify", "cur-certify", "interpolative-confidence",
        "cur-confidence", "rsvd-confidence"])
def test_removed_keywords_raise_naming_error_bound(call):
    with pytest.raises(TypeError, match="error_bound"):
        call()
