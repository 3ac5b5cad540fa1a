"""The training stack shared by the Ch. 4 (DAC) and Ch. 5 (AdaWAC) trainers: a chapter
supplies its step and config; :mod:`~rdr_jax.training.state` (the train state, SGD, weight
average), :mod:`~rdr_jax.training.loop` (:func:`fit`), :mod:`~rdr_jax.training.runs` (:func:`fit_runs`:
several runs as one program), :mod:`~rdr_jax.training.parallel`,
:mod:`~rdr_jax.training.checkpoint` and :mod:`~rdr_jax.training.metrics` do the rest. Design:
``docs/training.md`` ("The shared training loop").
"""

from rdr_jax.training.checkpoint import restore_checkpoint, save_checkpoint
from rdr_jax.training.loop import (BatchSource, CompiledStep, FitResult, LoopConfig, check_loop,
                                   fit, jit_train_step, metric_vector_step, step_options)
from rdr_jax.training.runs import (BATCHINGS, RunStates, RunsResult, fit_runs,
                                   resolve_batching, stack_runs, unstack_runs)
from rdr_jax.training.metrics import MetricsFile, plot_metrics, read_metrics
from rdr_jax.training.parallel import (batch_sharding, make_mesh, replicated, shard_batch,
                                       state_mesh)
from rdr_jax.training.state import (COMPUTE_DTYPES, ModelGraph, ParamEmaState, TrainState,
                                    apply_gradients, check_schedule, compute_dtype, eval_params,
                                    init_train_state, merge_apply, param_ema, sgd, split_model)

__all__ = ["BATCHINGS", "BatchSource", "COMPUTE_DTYPES", "CompiledStep", "FitResult", "LoopConfig",
           "MetricsFile", "ModelGraph", "ParamEmaState", "TrainState", "apply_gradients",
           "batch_sharding", "check_loop", "check_schedule", "compute_dtype", "eval_params", "fit",
           "fit_runs", "init_train_state", "jit_train_step", "make_mesh", "merge_apply",
           "metric_vector_step", "param_ema", "RunStates", "RunsResult", "resolve_batching",
           "plot_metrics", "read_metrics", "replicated", "restore_checkpoint", "save_checkpoint",
           "sgd", "shard_batch", "split_model", "stack_runs", "state_mesh", "step_options",
           "unstack_runs"]
