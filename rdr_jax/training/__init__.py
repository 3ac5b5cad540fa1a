"""The training stack shared by the Ch. 4 (DAC) and Ch. 5 (AdaWAC) trainers: a chapter
supplies its step and config; :mod:`~rdr_jax.training.state` (the train state, SGD, weight
average), :mod:`~rdr_jax.training.loop` (:func:`fit`), :mod:`~rdr_jax.training.parallel`,
:mod:`~rdr_jax.training.checkpoint` and :mod:`~rdr_jax.training.metrics` do the rest. Design:
``docs/training.md`` ("The shared training loop").
"""

from rdr_jax.training.checkpoint import restore_checkpoint, save_checkpoint
from rdr_jax.training.loop import (BatchSource, CompiledStep, FitResult, LoopConfig, fit,
                                   jit_train_step)
from rdr_jax.training.metrics import MetricsFile, plot_metrics, read_metrics
from rdr_jax.training.parallel import (batch_sharding, make_mesh, replicated, shard_batch,
                                       state_mesh)
from rdr_jax.training.state import (COMPUTE_DTYPES, ModelGraph, ParamEmaState, TrainState,
                                    apply_gradients, check_schedule, compute_dtype, eval_params,
                                    init_train_state, merge_apply, param_ema, sgd, split_model)

__all__ = ["BatchSource", "COMPUTE_DTYPES", "CompiledStep", "FitResult", "LoopConfig",
           "MetricsFile", "ModelGraph", "ParamEmaState", "TrainState", "apply_gradients",
           "batch_sharding", "check_schedule", "compute_dtype", "eval_params", "fit",
           "init_train_state", "jit_train_step", "make_mesh", "merge_apply", "param_ema",
           "plot_metrics", "read_metrics", "replicated", "restore_checkpoint", "save_checkpoint",
           "sgd", "shard_batch", "split_model", "state_mesh"]
