"""Release 0.3 removed the 0.1 spellings that 0.2 kept for one release (``docs/changes-0.2.md``
announced it; ``docs/changes-0.3.md`` lists them): each now fails with Python's own error at
the call (TypeError for a keyword, AttributeError for a name, ModuleNotFoundError for a module
path), no import hook is installed, and every entry point shows its real signature. Later
deprecations use optax's pattern (``rdr_jax._src.deprecation.deprecation_getattr``), tested at
the end on a module of its own."""

import importlib
import inspect
import sys
import types
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest

import rdr_jax as R
from rdr_jax import angles as AN
from rdr_jax import certify as CE
from rdr_jax import diagnostics as DG
from rdr_jax import sketching as S
from rdr_jax._src import deprecation as DEP
from rdr_jax.id_cur import fixed_accuracy as FA

KEY = jax.random.key(0)
A = np.random.default_rng(0).standard_normal((30, 20)).astype(np.float32)
SPEC = np.logspace(0, -3, 50)


@pytest.mark.parametrize("call", [
    lambda: R.interpolative(KEY, A, 5, sketch="srtt"),
    lambda: R.interpolative(KEY, A, 5, power_iters=1),
    lambda: R.interpolative(KEY, A, 5, certify=True),
    lambda: R.interpolative(KEY, A, 5, confidence=0.9),
    lambda: R.cur(KEY, A, 5, l=12),
    lambda: R.select_columns(KEY, A, 5, oversample=3),
    lambda: R.select_skeletons(KEY, A, 5, stable=False),
    lambda: R.interpolative_to_tolerance(KEY, A, 1e-2, confidence=0.9),
    lambda: R.id_cur.fixed_accuracy.adaptive_row_skeletons(KEY, A, 1e-2, confidence=0.9),
    lambda: R.rsvd(KEY, A, 5, l=12),
    lambda: R.rsvd(KEY, A, 5, confidence=0.9),
    lambda: R.frobenius_norm(KEY, A, num_matvecs=9),
    lambda: R.spectral_norm_upper(KEY, A, num_samples=4),
    lambda: R.lowrank_error(A, (A[:, :2], None, np.eye(20, 2, dtype=np.float32)),
                            num_matvecs=5),
    lambda: AN.space_agnostic_bound(SPEC, 5, 10, side="right"),
    lambda: AN.space_agnostic_bound(SPEC, 5, 10, q=1),
    lambda: AN.unbiased_estimate(KEY, SPEC, 5, 10, power=1),
])
def test_old_keywords_are_type_errors(call):
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        call()


@pytest.mark.parametrize("module, name", [
    (R, "ErrorCertificate"), (R, "Certificate"), (R, "certificate"), (R, "error_certificate"),
    (R, "selection"), (R, "decompositions"), (CE, "ErrorCertificate"), (CE, "check_delta"),
    (CE, "error_certificate"), (DG, "Certificate"), (DG, "certificate"),
    (S, "GaussianSketch"), (S, "SRTTSketch"), (S, "SparseSignSketch"), (S, "gaussian"),
    (S, "srtt"), (S, "sparse_sign"), (AN, "SideBounds"),
])
def test_old_names_are_gone(module, name):
    with pytest.raises(AttributeError, match=name):
        getattr(module, name)


@pytest.mark.parametrize("result, field", [
    (lambda: R.error_bound(KEY, A, R.rsvd(KEY, A, 5)), "fro_bound"),
    (lambda: R.error_bound(KEY, A, R.rsvd(KEY, A, 5)), "spec_bound"),
    (lambda: R.error_bound(KEY, A, R.rsvd(KEY, A, 5)), "delta"),
    (lambda: R.lowrank_error(A, R.rsvd(KEY, A, 5)), "spec"),
    (lambda: R.eta_bound(A, R.select_columns(KEY, A, 5)), "residual_spec"),
])
def test_old_field_names_are_gone(result, field):
    res = result()
    assert not hasattr(res, field)


def test_old_module_paths_do_not_import_and_no_hook_is_installed():
    for old in ("selection", "pivoting", "decompositions", "fixed_accuracy", "streaming",
                "outofcore"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"rdr_jax.{old}")
        assert importlib.import_module(f"rdr_jax.id_cur.{old}").__name__ == f"rdr_jax.id_cur.{old}"
    assert not [f for f in sys.meta_path if type(f).__module__.startswith("rdr_jax")]


def test_a_float_rank_names_the_tolerance_function():
    for f in (R.interpolative, R.cur, R.interpolative_with_bound, R.cur_with_bound,
              R.select_columns):
        with pytest.raises(TypeError, match=r"float 0\.01 .*interpolative_to_tolerance"):
            f(KEY, A, 0.01)


def test_exact_prefix_takes_the_key_first():
    c = FA.adaptive_column_skeletons(KEY, A, 0.3, block_size=4)
    C = A[:, np.asarray(c.cols)]
    with pytest.raises(TypeError):
        FA.exact_prefix(A, c.cols, C, c.rank, 0.3)           # the 0.2.0 order, key missing
    res = FA.exact_prefix(KEY, A, c.cols, C, c.rank, 0.3)
    assert int(res.rank) <= int(c.rank) and bool(res.met)


#: public functions whose catch-all parameter is part of their API (options of a sketch, the
#: factors to check, the arguments passed on to a model)
VARIADIC = {"rdr_jax.distributed.check_factor_shardings", "rdr_jax.id_cur.selection.resolve_method",
            "rdr_jax.sketching.as_sketch", "rdr_jax.sketching.make_sketch",
            "rdr_jax.training.state.merge_apply"}


def test_every_public_function_shows_its_real_signature(monkeypatch):
    """No wrapper hides a signature (``inspect``, IDEs and static tools see the parameters the
    code takes), and no ``**kwargs`` catch-all collects old spellings."""
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "experiments"))
    import api_metrics
    seen = 0
    for name, f in api_metrics.public_functions().items():
        seen += 1
        assert not hasattr(f, "__wrapped__"), f"{name} is wrapped"
        params = inspect.signature(f, follow_wrapped=False).parameters.values()
        catch_all = [p.name for p in params if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
        assert not catch_all or name in VARIADIC, f"{name} takes {catch_all}"
    assert seen > 250


def test_later_deprecations_use_a_module_table_and_getattr():
    """optax's pattern: ``_DEPRECATIONS = {old: (new spelling, object)}`` and
    ``__getattr__ = deprecation_getattr(__name__, _DEPRECATIONS)``."""
    mod = types.ModuleType("rdr_jax_fake")
    mod.new_name = object()
    mod.__getattr__ = DEP.deprecation_getattr("rdr_jax_fake", {
        "old_name": ("rdr_jax_fake.new_name", mod.new_name)})
    with pytest.warns(DeprecationWarning, match=r"rdr_jax_fake\.old_name is deprecated .* use "
                                                r"rdr_jax_fake\.new_name") as rec:
        assert mod.old_name is mod.new_name
    assert rec[0].filename == __file__                  # points at the user's line
    with pytest.raises(AttributeError, match="has no attribute 'other'"):
        mod.other  # noqa: B018
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mod.new_name is not None
