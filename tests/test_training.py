"""Tests for rdr_jax.training: the split/apply plumbing and the orbax checkpoint round trip
shared by the DAC and AdaWAC trainers (their kill-and-resume tests cover whole runs)."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rdr_jax.training import merge_apply, restore_checkpoint, save_checkpoint, split_model


class _State(NamedTuple):
    step: Any
    params: Any
    key: Any


class _Net(nnx.Module):
    def __init__(self, rngs):
        self.lin = nnx.Linear(3, 2, rngs=rngs)
        self.bn = nnx.BatchNorm(2, rngs=rngs)

    def __call__(self, x):
        return self.bn(self.lin(x))


def test_split_and_merge_apply_update_batchnorm_only_in_train_mode():
    graph, params, rest = split_model(_Net(nnx.Rngs(0)))
    x = jnp.arange(12.0).reshape(4, 3)
    y_train, rest_train = merge_apply(graph.train, params, rest, x)
    y_eval, rest_eval = merge_apply(graph.eval, params, rest, x)
    mean0 = np.asarray(rest["bn"]["mean"][...])
    assert not np.allclose(np.asarray(rest_train["bn"]["mean"][...]), mean0)
    np.testing.assert_array_equal(np.asarray(rest_eval["bn"]["mean"][...]), mean0)
    # training mode normalises with batch statistics: zero mean per feature
    np.testing.assert_allclose(np.asarray(y_train).mean(0), 0.0, atol=1e-5)
    assert not np.allclose(np.asarray(y_eval), np.asarray(y_train))
    # merge_apply works under jit and grad (fresh variables inside the trace)
    g = jax.jit(jax.grad(lambda p: merge_apply(graph.train, p, rest, x)[0].sum() ** 2))(params)
    assert all(np.all(np.isfinite(np.asarray(v))) for v in jax.tree.leaves(g))


def test_checkpoint_round_trip_keeps_types_dtypes_and_typed_keys(tmp_path):
    like = _State(jnp.asarray(3, jnp.int32), {"w": jnp.arange(4.0, dtype=jnp.float32)},
                  jax.random.key(7))
    assert restore_checkpoint(tmp_path / "none", like) is None
    save_checkpoint(tmp_path, like, {"pos": [1, 2]})
    later = like._replace(step=jnp.asarray(5, jnp.int32), params={"w": like.params["w"] + 1})
    save_checkpoint(tmp_path, later, {"pos": [3]})
    state, meta = restore_checkpoint(tmp_path, like)
    assert isinstance(state, _State) and int(state.step) == 5 and meta == {"pos": [3]}
    assert state.params["w"].dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(state.params["w"]), [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(np.asarray(jax.random.key_data(state.key)),
                                  np.asarray(jax.random.key_data(like.key)))
    with pytest.raises(ValueError, match=r"checkpoint in .* \(step 5\) does not match"):
        restore_checkpoint(tmp_path, (like.step, like.params))
    # the failed restore touched nothing: the checkpoint still restores
    assert int(restore_checkpoint(tmp_path, like)[0].step) == 5
