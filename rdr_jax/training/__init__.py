"""The training stack shared by the Ch. 4 (DAC) and Ch. 5 (AdaWAC) trainers.

A chapter supplies only its loss/step function and its config; everything else is here:

* :mod:`~rdr_jax.training.state` -- :class:`TrainState` (one pytree: step, params, model
  variables, optimizer state, chapter extras), :func:`split_model` / :func:`merge_apply`
  (NNX model <-> pytrees), :func:`apply_gradients`, the optimizer :func:`sgd`, the weight
  average :func:`param_ema` / :func:`eval_params` and :func:`compute_dtype` (a config's
  ``dtype`` field);
* :mod:`~rdr_jax.training.loop` -- :func:`fit`, the loop (jitted once, data-parallel,
  metrics fetched once per ``log_every`` steps, orbax checkpoint/resume, evaluation hook,
  tqdm bar);
* :mod:`~rdr_jax.training.parallel` -- the 1-D ``jax.sharding`` mesh and batch placement;
* :mod:`~rdr_jax.training.checkpoint` -- :func:`save_checkpoint` / :func:`restore_checkpoint`;
* :mod:`~rdr_jax.training.metrics` -- the JSONL metrics file, :func:`read_metrics`,
  :func:`plot_metrics`.

Example (the chapters' entry points are thin wrappers of :func:`fit`)::

    graph, state = init_train_state(model, sgd(0.03, ema_decay=0.999))
    res = fit(step, state, batches, key=jax.random.key(0),
              loop=LoopConfig(num_steps=1000, log_every=100, workdir="runs/a"))
    read_metrics("runs/a/metrics.jsonl")["loss"]
"""

from rdr_jax.training.checkpoint import restore_checkpoint, save_checkpoint
from rdr_jax.training.loop import (BatchSource, CompiledStep, FitResult, LoopConfig, fit,
                                   jit_train_step)
from rdr_jax.training.metrics import MetricsFile, plot_metrics, read_metrics
from rdr_jax.training.parallel import (batch_sharding, make_mesh, replicated, shard_batch,
                                       state_mesh)
from rdr_jax.training.state import (COMPUTE_DTYPES, ModelGraph, ParamEmaState, TrainState,
                                    apply_gradients, compute_dtype, eval_params,
                                    init_train_state, merge_apply, param_ema, sgd, split_model)

__all__ = ["BatchSource", "COMPUTE_DTYPES", "CompiledStep", "FitResult", "LoopConfig",
           "MetricsFile", "ModelGraph", "ParamEmaState", "TrainState", "apply_gradients",
           "batch_sharding", "compute_dtype", "eval_params", "fit", "init_train_state",
           "jit_train_step", "make_mesh", "merge_apply", "param_ema", "plot_metrics",
           "read_metrics", "replicated", "restore_checkpoint", "save_checkpoint", "sgd",
           "shard_batch", "split_model", "state_mesh"]
