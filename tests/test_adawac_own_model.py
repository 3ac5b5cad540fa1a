"""The AdaWAC train step for a user's own Flax model, as ``docs/chapters-4-5.md`` ("AdaWAC
and DAC in your own model") writes it: the same seed gives bitwise the same parameters and
beta, beta moves only on the batch rows (by Algorithm 6's step from the forward pass at the
current parameters), and the loss is finite."""

import doctest
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("flax")
from flax import nnx  # noqa: E402

from tests.test_readme_blocks import python_blocks  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "chapters-4-5.md"
HEADING = "## AdaWAC and DAC in your own model"


def _own_model_namespace() -> dict:
    """Run the doc's AdaWAC block up to the definition of ``train_step`` in a fresh namespace
    (its model, optimizer, beta table and step)."""
    text = DOC.read_text(encoding="utf-8")
    start = text.count("\n", 0, text.index(HEADING))
    block = next(b for b in python_blocks(DOC) if b.line > start)
    ns: dict = {"__name__": "own_model"}
    for example in doctest.DocTestParser().get_examples(block.code):
        exec(compile(example.source, block.name, "exec"), ns)
        if "def train_step" in example.source:
            return ns
    raise AssertionError(f"{block.name}: no train_step defined")


def _run(num_steps=3, seed=0):
    ns = _own_model_namespace()
    n = ns["n"]
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((n, 16, 16, 1), dtype=np.float32)
    labels = np.digitize(images[..., 0], [-0.5, 0.5])
    beta, beta_state = ns["beta"], ns["beta_state"]
    losses, batches = [], []
    for _ in range(num_steps):
        idx = rng.choice(n, 4, replace=False)
        x1 = images[idx]
        x2 = x1 + 0.1 * rng.standard_normal(x1.shape, dtype=np.float32)
        batches.append((idx, x1, x2, labels[idx]))
        loss, beta, beta_state = ns["train_step"](ns["model"], ns["opt"], beta, beta_state, x1,
                                                  x2, labels[idx], idx)
        losses.append(float(loss))
    return ns, beta, beta_state, losses, batches


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def test_own_model_step_is_deterministic_and_moves_only_the_batch_rows():
    ns, beta, beta_state, losses, batches = _run()
    params0 = _leaves(nnx.state(_own_model_namespace()["model"], nnx.Param))
    ns2, beta2, beta_state2, losses2, _ = _run()
    params = _leaves(nnx.state(ns["model"], nnx.Param))
    # bitwise the same run twice: parameters, optimizer state, beta and its state, losses
    for a, b in zip(params + _leaves(nnx.state(ns["opt"])) + _leaves((beta, beta_state)),
                    _leaves(nnx.state(ns2["model"], nnx.Param)) + _leaves(nnx.state(ns2["opt"]))
                    + _leaves((beta2, beta_state2))):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    assert losses == losses2 and np.all(np.isfinite(losses))
    assert any(not np.array_equal(a, b) for a, b in zip(params, params0))   # it trains
    # beta moved on the rows of the batches only; the others are bitwise 1/2
    seen = np.unique(np.concatenate([idx for idx, *_ in batches]))
    b = np.asarray(beta)
    assert np.all(b[seen] != 0.5)
    assert np.all(b[np.setdiff1d(np.arange(ns["n"]), seen)] == np.float32(0.5))
    assert int(beta_state.count) == 3 and int(beta_state.notfinite_count) == 0


def test_first_beta_step_is_algorithm_6_from_the_initial_parameters():
    """beta_i' = sigmoid(logit(1/2) + eta (ce_i - cons_i)) with the losses at the parameters
    before the step: a sample whose cross-entropy exceeds its consistency gains weight."""
    from rdr_jax import adawac

    ns = _own_model_namespace()
    rng = np.random.default_rng(1)
    n = ns["n"]
    images = rng.standard_normal((n, 16, 16, 1), dtype=np.float32)
    labels = np.digitize(images[..., 0], [-0.5, 0.5])
    idx = np.array([3, 0, 9, 14])
    x1 = images[idx]
    x2 = x1 + 0.1 * rng.standard_normal(x1.shape, dtype=np.float32)
    logits, z1 = ns["model"](jnp.asarray(x1))
    z2 = ns["model"](jnp.asarray(x2))[1]
    g = np.asarray(adawac.cross_entropy(logits, labels[idx]), np.float64) - np.asarray(
        adawac.consistency(z1, z2, lam=2.0), np.float64)
    _, beta, _ = ns["train_step"](ns["model"], ns["opt"], ns["beta"], ns["beta_state"], x1, x2,
                                  labels[idx], idx)
    expect = 1 / (1 + np.exp(-2.0 * g))                      # eta = 2, logit(1/2) = 0
    np.testing.assert_allclose(np.asarray(beta)[idx], expect, rtol=1e-5)
    assert np.all((np.asarray(beta)[idx] > 0.5) == (g > 0))
