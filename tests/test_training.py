"""Tests for rdr_jax.training: the split/apply plumbing, the train state and the orbax
checkpoint round trip shared by the DAC and AdaWAC trainers (the loop: test_training_loop.py;
the trainers' kill-and-resume tests cover whole runs)."""

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


def test_train_state_extras_and_weight_average_round_trip(tmp_path):
    """One TrainState for both chapters: ``extra`` entries read as attributes (AdaWAC's
    table), the optimizer's weight average is ``ema_params``; both survive a checkpoint."""
    from rdr_jax.training import TrainState, apply_gradients, init_train_state, sgd
    tx = sgd(0.5, momentum=0.0, ema_decay=0.75)
    graph, st = init_train_state(nnx.Linear(2, 1, rngs=nnx.Rngs(0)), tx,
                                 extra={"beta": jnp.full(3, 0.5)})
    assert st.beta.shape == (3,) and st.ema_params is not None
    with pytest.raises(AttributeError, match="no field or extra entry 'gamma'"):
        st.gamma
    grads = jax.tree.map(jnp.ones_like, st.params)
    new = apply_gradients(st, tx, grads, st.model_state, {"beta": st.beta + 1})
    assert int(new.step) == 1 and float(new.beta[0]) == 1.5
    for p0, p1, e in zip(*(jax.tree.leaves(t) for t in (st.params, new.params,
                                                        new.ema_params))):
        np.testing.assert_allclose(np.asarray(p1), np.asarray(p0) - 0.5)
        np.testing.assert_allclose(np.asarray(e), 0.75 * np.asarray(p0) + 0.25 * np.asarray(p1),
                                   rtol=1e-6)
    save_checkpoint(tmp_path, new, {})
    back, _ = restore_checkpoint(tmp_path, st)
    assert isinstance(back, TrainState) and float(back.beta[0]) == 1.5
    assert jax.tree.structure(back.opt_state) == jax.tree.structure(new.opt_state)
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(new)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
