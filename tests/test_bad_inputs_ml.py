"""Bad inputs of the Chapter 4-5 code and the data loaders get a clear error or warning
(issue 24, "Bad inputs that still get an unclear error or a silent result")."""

from __future__ import annotations

import struct
import warnings

import h5py
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.io
import scipy.sparse

from rdr_jax.adawac.data import load_synapse_test
from rdr_jax.adawac.losses import wac_dice_loss
from rdr_jax.adawac.transform import beta_gradient, beta_mirror_ascent, init_beta
from rdr_jax.dac.deep import cosine_schedule
from rdr_jax.datasets import load_matrix_market, load_mnist, load_yaleface
from rdr_jax.training import check_schedule, sgd


# ----------------------------------------------------------- AdaWAC beta update: NaN gradient

def _nan_gradient():
    ce = jnp.array([0.3, jnp.nan, 0.2, jnp.inf])
    return beta_gradient(ce, jnp.full(4, 0.1), jnp.arange(4), 6)


def test_nan_gradient_never_reaches_beta_eager():
    beta = init_beta(6)
    tx = beta_mirror_ascent(2.0)
    with pytest.warns(RuntimeWarning, match="skipped 2 non-finite"):
        upd, state = tx.update(_nan_gradient(), tx.init(beta), beta)
    new = np.asarray(optax.apply_updates(beta, upd))
    assert np.all(np.isfinite(new))
    assert new[1] == 0.5 and new[3] == 0.5            # NaN / inf rows keep their beta
    assert new[0] == pytest.approx(1 / (1 + np.exp(-0.4)), rel=1e-6)
    assert int(state.notfinite_count) == 2 and int(state.count) == 1


def test_nan_gradient_never_reaches_beta_under_jit():
    beta = init_beta(6)
    tx = beta_mirror_ascent(2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                # traced: counted, not warned
        upd, state = jax.jit(tx.update)(_nan_gradient(), tx.init(beta), beta)
    new = np.asarray(optax.apply_updates(beta, upd))
    assert np.all(np.isfinite(new)) and new[1] == 0.5 and new[3] == 0.5
    assert int(state.notfinite_count) == 2


# ----------------------------------------------------------- step sizes that turn negative

def test_negative_schedule_raises_at_construction():
    sched = optax.linear_schedule(1.0, -1.0, transition_steps=10)
    with pytest.raises(ValueError, match=r"learning_rate\(6\) = -0\.2"):
        beta_mirror_ascent(sched, num_steps=10)
    beta_mirror_ascent(sched, num_steps=5)            # non-negative over 5 steps
    with pytest.raises(ValueError, match=r"planned 10 steps"):
        sgd(sched, num_steps=10)
    with pytest.raises(ValueError, match="finite and >= 0"):
        check_schedule(lambda i: jnp.where(i == 3, jnp.nan, 0.1), 5)
    with pytest.raises(ValueError, match="num_cycles must lie in"):
        cosine_schedule(0.03, 100, num_cycles=1.0)


def test_negative_schedule_raises_eagerly_and_is_skipped_under_jit():
    sched = optax.linear_schedule(1.0, -1.0, transition_steps=4)   # 1, .5, 0, -.5
    beta, g = init_beta(3), jnp.ones(3)
    tx = beta_mirror_ascent(sched)
    state = tx.init(beta)
    for _ in range(3):
        upd, state = tx.update(g, state, beta)
    with pytest.raises(ValueError, match=r"learning_rate\(3\) must be a finite number >= 0"):
        tx.update(g, state, beta)
    upd, _ = jax.jit(tx.update)(g, state, beta)       # inside jit: the step is skipped
    assert np.all(np.asarray(upd) == 0)


# ----------------------------------------------------------- losses

def test_wac_dice_loss_empty_batch():
    with pytest.raises(ValueError, match="empty batch"):
        wac_dice_loss(jnp.zeros((0, 4, 4, 3)), jnp.zeros((0, 4, 4), jnp.int32),
                      jnp.zeros((0, 5)), jnp.zeros((0, 5)), jnp.zeros((0,)))


# ----------------------------------------------------------- data loaders

def test_matrix_market_nan_names_the_file(tmp_path):
    path = tmp_path / "nan.mtx"
    scipy.io.mmwrite(path, scipy.sparse.coo_matrix(np.array([[1.0, 0.0], [np.nan, 2.0]])))
    with pytest.raises(ValueError, match=r"nan\.mtx.* 1 non-finite"):
        load_matrix_market(path)


def test_yaleface_nan_names_the_file(tmp_path):
    path = tmp_path / "Yale_nan.mat"
    fea = np.ones((4, 9))
    fea[2, 3] = np.nan
    scipy.io.savemat(path, {"fea": fea, "gnd": np.arange(4.0).reshape(4, 1)})
    with pytest.raises(ValueError, match=r"Yale_nan\.mat.*non-finite"):
        load_yaleface(path)


def test_mnist_with_zero_images(tmp_path):
    path = tmp_path / "empty-idx3-ubyte"
    path.write_bytes(struct.pack(">BBBB", 0, 0, 0x08, 3) + struct.pack(">III", 0, 28, 28))
    with pytest.raises(ValueError, match=r"empty-idx3-ubyte' holds no images"):
        load_mnist(path)


def _truncated_h5(path, **arrays):
    with h5py.File(path, "w") as f:
        for k, v in arrays.items():
            f[k] = v
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    return path


def test_truncated_hdf5_names_the_file(tmp_path):
    mat = _truncated_h5(tmp_path / "Yale_v73.mat", fea=np.ones((10, 100)))
    with pytest.raises(ValueError, match=r"Yale_v73\.mat.*truncated or corrupt"):
        load_yaleface(mat)
    (tmp_path / "vol").mkdir()
    _truncated_h5(tmp_path / "vol" / "case0001.npy.h5", image=np.ones((3, 8, 8)),
                  label=np.zeros((3, 8, 8)))
    with pytest.raises(ValueError, match=r"case0001\.npy\.h5.*truncated or corrupt"):
        load_synapse_test(tmp_path / "vol")
