"""The training loop both chapters use: :func:`fit`.

A chapter supplies a pure step ``step(state, key, *batch) -> (state, metrics)``, the initial
:class:`~rdr_jax.training.TrainState`, a batch source and a :class:`LoopConfig`; :func:`fit`
jits the step once, splits batches over a 1-D mesh, fetches metrics once per ``log_every``
steps, checkpoints and resumes (bitwise on CPU) and evaluates. Why: one loop for both
chapters' experiments. Design: ``docs/training.md`` ("The shared training loop").
"""

from __future__ import annotations

import collections
import functools
import numbers
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional, Protocol, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from rdr_jax._src.jit import jit
from rdr_jax._src.optional import progress_bar
from rdr_jax.training.checkpoint import restore_checkpoint, save_checkpoint
from rdr_jax.training.metrics import MetricsFile
from rdr_jax.training.parallel import (batch_layout, layout_shardings, make_mesh, replicated,
                                       shard_batch)

__all__ = ["BatchSource", "CompiledStep", "FitResult", "LoopConfig", "check_loop", "fit",
           "jit_train_step", "metric_vector_step", "step_options"]


class BatchSource(Protocol):
    """What :func:`fit` reads batches from: ``next_batch()`` (a tuple of host
    arrays, split over the mesh along axis 0; scalars replicated) and ``state_dict()`` /
    ``load_state_dict(d)`` for the position (JSON-able).
    """

    def next_batch(self) -> tuple: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, d: dict) -> None: ...


class LoopConfig(NamedTuple):
    """Settings of :func:`fit`.

    Attributes:
        num_steps: total steps (>= 1). log_every: fetch and log metric means this often.
        checkpoint_every: 0: only at the end (needs ``workdir``). eval_every: 0: only at the end.
        workdir: ``checkpoints/`` and ``metrics.jsonl`` (None: neither).
        stop_after: stop (and checkpoint) after this step, as if killed.
        progress, desc: tqdm bar and its label. metrics_path: default ``workdir/metrics.jsonl``.
        max_inflight: steps dispatched ahead of the device.
    """

    num_steps: int
    log_every: int = 100
    checkpoint_every: int = 0
    eval_every: int = 0
    workdir: Optional[Path | str] = None
    stop_after: Optional[int] = None
    progress: bool = False
    desc: str = "train"
    metrics_path: Optional[Path | str] = None
    max_inflight: int = 2


class FitResult(NamedTuple):
    """What :func:`fit` returns.

    Attributes:
        state: final state (on the mesh). history: logged rows of the whole run.
        evals: evaluation rows. eval: the final evaluation or None.
        losses: per-step losses of this call. resumed_from: restored step or None.
        seconds_per_step: step time after the first (NaN with < 2 steps).
        metrics_path: the JSONL file or None.
    """

    state: Any
    history: list
    evals: list
    eval: Optional[dict]
    losses: list
    resumed_from: Optional[int]
    seconds_per_step: float
    metrics_path: Optional[Path]


class CompiledStep(NamedTuple):
    """A jitted, sharded step ``fn(state, key, batch) -> (state, metrics vector)`` and the
    names of the vector's entries (the step's scalar metrics; filled when it is traced)."""

    fn: Callable
    names: list


#: XLA options of every train step compiled on CPU: no YNNPACK fusions. jaxlib 0.10.2
#: miscompiles a YNNPACK fusion in which one value feeds two ``pad`` ops at different offsets
#: next to a reduction; autodiff writes exactly that for ``z[:b] - z[b:]`` (AdaWAC's
#: consistency term), and part of the gradient is then read from uninitialised memory: runs of
#: one seed differ and blow up (``docs/xla_cpu_ynn_pad_repro.py``). With the option the faulty
#: code path is absent from the program whatever op pattern would reach it, so determinism does
#: not hang on how XLA happens to fuse a step; XLA's own CPU emitters run those ops instead.
_CPU_STEP_OPTIONS = (("xla_cpu_experimental_ynn_fusion_type", ""),)


@functools.lru_cache(maxsize=8)
def step_options(platform: str) -> Optional[dict]:
    """The XLA ``compiler_options`` every train step is compiled with on ``platform``: on CPU
    no YNNPACK fusions (a jaxlib 0.10.2 miscompile, ``docs/xla_cpu_ynn_pad_repro.py``; probed
    once, None when the jaxlib lacks the option); None (XLA's defaults) elsewhere.
    """
    if platform != "cpu":
        return None
    opts = dict(_CPU_STEP_OPTIONS)
    try:   # a jaxlib without the option has no YNNPACK fusions to turn off
        x = jax.device_put(np.float32(0), jax.devices("cpu")[0])
        jit(lambda v: v + 1, compiler_options=opts, fast_cpu_compile=False).lower(x).compile()
    except jax.errors.JaxRuntimeError:
        return None
    return opts


def metric_vector_step(step: Callable) -> tuple[Callable, list]:
    """``(wrapped, names)``: ``wrapped(state, key, batch) -> (state, vector)`` runs
    ``step(state, key, *batch)`` and stacks its scalar metrics into one vector (the loop's one
    fetch per log interval); ``names`` is filled with their names when ``wrapped`` is traced.
    ValueError at trace time if there is no scalar ``loss``.
    """
    names: list = []

    def wrapped(state, key, batch):
        new, metrics = step(state, key, *batch)
        m = metrics._asdict() if hasattr(metrics, "_asdict") else dict(metrics)
        scal = [(k, v) for k, v in m.items() if jnp.ndim(v) == 0]
        if "loss" not in dict(scal):
            raise ValueError(f"the step's metrics must include a scalar 'loss'; got "
                             f"{sorted(m)}")
        names[:] = [k for k, _ in scal]
        dt = jnp.result_type(float)
        return new, jnp.stack([jnp.asarray(v).astype(dt) for _, v in scal])

    return wrapped, names


@functools.lru_cache(maxsize=64)
def _compile(step: Callable, mesh: Mesh, layout: Any) -> CompiledStep:
    wrapped, names = metric_vector_step(step)
    repl = replicated(mesh)
    fn = jit(wrapped, in_shardings=(repl, repl, layout_shardings(mesh, layout)),
             out_shardings=(repl, repl), donate_argnums=(0,),
             compiler_options=step_options(mesh.devices.flat[0].platform), fast_cpu_compile=False)
    return CompiledStep(fn, names)


def jit_train_step(step: Callable, mesh: Mesh, batch: tuple) -> CompiledStep:
    """The jitted, sharded step :func:`fit` runs (cached per step function, mesh
    and batch layout): ``fn(state, key, batch)`` donates ``state`` and returns it with the
    scalar metrics stacked into one vector named by ``names``. On CPU it is compiled without
    YNNPACK fusions (a jaxlib 0.10.2 miscompile: ``docs/xla_cpu_ynn_pad_repro.py``).
    """
    return _compile(step, mesh, batch_layout(batch))


def check_loop(loop: LoopConfig) -> LoopConfig:
    """``loop`` if it is a valid :class:`LoopConfig`; TypeError / ValueError naming the field."""
    if not isinstance(loop, LoopConfig):
        raise TypeError(f"loop must be a LoopConfig; got {type(loop).__name__}")

    def count(name, v, low, none_ok=False):
        if v is None and none_ok:
            return
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < low:
            raise ValueError(f"loop.{name} must be an int >= {low}; got {v!r}")

    count("num_steps", loop.num_steps, 1)
    count("log_every", loop.log_every, 1)
    count("checkpoint_every", loop.checkpoint_every, 0)
    count("eval_every", loop.eval_every, 0)
    count("stop_after", loop.stop_after, 0, none_ok=True)
    count("max_inflight", loop.max_inflight, 1)
    return loop


def _fetch(x: Any) -> Any:
    """The loop's only device-to-host transfer of metrics (one per log interval)."""
    return jax.device_get(x)


class _Recorder:
    """Host side of the metrics: per-step vectors still on device, fetched rows not yet
    logged (``pending``: ``[step, *values]``), the logged rows and the metrics file."""

    def __init__(self, path: Optional[Path], meta: dict):
        self.history = list(meta.get("log", []))
        self.evals = list(meta.get("evals", []))
        self.pending = [list(r) for r in meta.get("pending", [])]
        self.names = list(meta.get("names", []))
        self.device: list = []
        self.losses: list = []
        self.file = None
        if path is not None:
            self.file = MetricsFile(path, sorted(
                [dict(r, kind="train") for r in self.history]
                + [dict(r, kind="eval") for r in self.evals], key=lambda r: r["step"]))

    def fetch(self, names: list) -> Optional[tuple[int, float]]:
        """Fetch the queued vectors (one transfer); return ``(step, loss)`` of the first
        non-finite loss, else None."""
        if names != self.names:          # a fresh run, or other metrics than the checkpoint
            self.names, self.pending = list(names), []
        if not self.device:
            return None
        vals = np.asarray(_fetch(jnp.stack([v for _, v in self.device])), np.float64)
        steps = [s for s, _ in self.device]
        self.device = []
        i = names.index("loss")
        for s, row in zip(steps, vals):
            if not np.isfinite(row[i]):
                return s, float(row[i])
            self.pending.append([s] + row.tolist())
            self.losses.append(float(row[i]))
        return None

    def log(self, step: int) -> dict:
        vals = np.asarray([r[1:] for r in self.pending], np.float64)
        row = {"step": int(step), **{k: float(v) for k, v in zip(self.names, vals.mean(0))}}
        self.history.append(row)
        self.pending = []
        if self.file is not None:
            self.file.write(row)
        return row

    def log_eval(self, step: int, result: dict) -> None:
        row = {"step": int(step)}
        row.update({k: v for k, v in result.items()
                    if isinstance(v, (numbers.Number, list, tuple, str))})
        self.evals.append(row)
        if self.file is not None:
            self.file.write({"kind": "eval", **row})

    def meta(self) -> dict:
        return {"log": self.history, "evals": self.evals, "pending": self.pending,
                "names": self.names}


def _postfix(row: dict, names: list) -> dict:
    return {k: f"{row[k]:.4g}" for k in (["loss"] + [n for n in names if n != "loss"])[:3]}


def fit(step: Callable, state: Any, data: BatchSource, *, key: jax.Array, loop: LoopConfig,
        mesh: Optional[Mesh] = None, evaluate: Optional[Callable[[Any], dict]] = None,
        hooks: Sequence[Any] = ()) -> FitResult:
    """Train ``state`` with ``step`` for ``loop.num_steps`` steps.

    Args:
        step: ``(state, key, *batch) -> (state, metrics)``, metrics with a scalar ``loss``;
            randomness from ``fold_in(key, state.step)``.
        state: the initial state (a checkpoint in ``loop.workdir`` replaces it).
        data: a :class:`BatchSource`. key: the run's PRNG key. loop: :class:`LoopConfig`.
        mesh: 1-D mesh (default: all local devices).
        evaluate: ``evaluate(state) -> dict``, every ``eval_every`` steps and at the end.
        hooks: objects with ``after_step(step, state)`` / ``state_dict`` / ``load_state_dict``.

    Returns:
        :class:`FitResult`.

    Raises:
        FloatingPointError: a non-finite loss (found at a fetch; the last checkpoint stays the
            last good one). ValueError: bad settings, a batch that does not split, no ``loss``.
    """
    loop = check_loop(loop)
    mesh = make_mesh() if mesh is None else mesh
    repl = replicated(mesh)
    workdir = None if loop.workdir is None else Path(loop.workdir)
    ckpt_dir = None if workdir is None else workdir / "checkpoints"
    mpath = Path(loop.metrics_path) if loop.metrics_path is not None else (
        None if workdir is None else workdir / "metrics.jsonl")
    hooks = tuple(hooks)
    meta: dict = {}
    resumed_from = None
    if ckpt_dir is not None:
        got = restore_checkpoint(ckpt_dir, state)
        if got is not None:
            state, meta = got
            data.load_state_dict(meta["data"])
            for h, d in zip(hooks, meta.get("hooks", [])):
                if hasattr(h, "load_state_dict"):
                    h.load_state_dict(d)
            resumed_from = int(jax.device_get(state.step))
    rec = _Recorder(mpath, meta)
    state = jax.device_put(state, repl, may_alias=False)   # a copy: the loop donates it
    key = jax.device_put(key, repl)
    start = int(jax.device_get(state.step))
    end = loop.num_steps if loop.stop_after is None else min(loop.num_steps, loop.stop_after)
    last_saved = resumed_from
    compiled: Optional[CompiledStep] = None

    bar = progress_bar(total=loop.num_steps, initial=min(start, loop.num_steps),
                       desc=loop.desc, disable=not loop.progress, leave=False)

    def save() -> int:
        return save_checkpoint(ckpt_dir, state, {
            "data": data.state_dict(), **rec.meta(),
            "hooks": [h.state_dict() if hasattr(h, "state_dict") else None for h in hooks]})

    def flush(s: int, log: bool) -> None:
        bad = rec.fetch(compiled.names)
        if bad is not None:
            where = (f"the last good checkpoint (step {last_saved}) in {ckpt_dir} is intact; "
                     f"resume from it with a smaller learning rate"
                     if last_saved is not None else "no checkpoint was written")
            raise FloatingPointError(
                f"non-finite training loss {bad[1]} at step {bad[0]} ({loop.desc}); training "
                f"stopped before saving this state: {where}")
        if log and rec.pending:
            bar.set_postfix(_postfix(rec.log(s), rec.names))

    inflight: collections.deque = collections.deque()
    t_first = t_end = None
    t_side = 0.0
    try:
        for t in range(start, end):
            batch = shard_batch(mesh, tuple(data.next_batch()))
            if compiled is None:
                compiled = jit_train_step(step, mesh, batch)
            state, vec = compiled.fn(state, key, batch)
            s = t + 1
            rec.device.append((s, vec))
            if t == start:               # the compiling step: excluded from the timing
                jax.block_until_ready(vec)
                t_first = time.perf_counter()
            else:                        # bounded run-ahead; the device stays busy
                inflight.append(vec)
                if len(inflight) > loop.max_inflight:
                    inflight.popleft().block_until_ready()
            for h in hooks:
                if hasattr(h, "after_step"):
                    h.after_step(s, state)
            if s % loop.log_every == 0 or s == loop.num_steps:
                flush(s, log=True)
            if ckpt_dir is not None and loop.checkpoint_every and \
                    s % loop.checkpoint_every == 0 and s < end:
                t0 = time.perf_counter()
                flush(s, log=False)
                last_saved = save()
                t_side += time.perf_counter() - t0
            if evaluate is not None and loop.eval_every and s % loop.eval_every == 0 \
                    and s < loop.num_steps:
                t0 = time.perf_counter()
                rec.log_eval(s, evaluate(state))
                t_side += time.perf_counter() - t0
            bar.update(1)
        if compiled is not None:
            flush(end, log=False)        # the rest of an interval: checked, kept pending
            t_end = time.perf_counter()
        if ckpt_dir is not None and end > start:
            save()
    finally:
        bar.close()
    final = None
    if evaluate is not None and int(jax.device_get(state.step)) == loop.num_steps:
        final = evaluate(state)
        rec.log_eval(loop.num_steps, final)
    n = end - start
    sps = (t_end - t_first - t_side) / (n - 1) if n > 1 else float("nan")
    return FitResult(state, rec.history, rec.evals, final, rec.losses, resumed_from, sps,
                     mpath)
