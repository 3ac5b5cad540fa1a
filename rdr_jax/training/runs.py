"""Several runs of one train step at once: :func:`fit_runs`.

The runs of a table cell (its seeds, and where the step takes it as data, its lambda grid)
share the step function and differ in their state, key and batches. :func:`fit_runs` carries
all of them with a leading *run axis* and trains them either as one ``jax.vmap``-ed, jitted
program (``batching="vmap"``) or one jitted single-run step called for each run in turn
(``"sequential"``). Each run computes what :func:`rdr_jax.training.fit` computes for it alone,
up to the order of floating-point sums. Why: one program per table cell instead of one per run;
which batching is faster depends on the backend (``docs/training.md``, "Several runs at once").
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from rdr_jax._src.jit import jit
from rdr_jax._src.optional import progress_bar
from rdr_jax.training.loop import BatchSource, LoopConfig, check_loop, metric_vector_step, \
    step_options

__all__ = ["BATCHINGS", "RunStates", "RunsResult", "fit_runs", "resolve_batching",
           "stack_runs", "unstack_runs"]

#: the values :func:`fit_runs`' ``batching`` takes
BATCHINGS = ("auto", "vmap", "sequential")


def stack_runs(trees: Sequence[Any]) -> Any:
    """One pytree whose leaves carry a leading run axis, from per-run pytrees of one structure
    (PRNG key arrays included)."""
    trees = list(trees)
    if not trees:
        raise ValueError("stack_runs needs at least one run")
    return jax.tree.map(lambda *a: jnp.stack(a), *trees)


def unstack_runs(tree: Any) -> list:
    """The per-run pytrees of a pytree with a leading run axis (inverse of :func:`stack_runs`)."""
    leaves = jax.tree.leaves(tree)
    if not leaves:
        raise ValueError("unstack_runs needs a pytree with at least one array")
    n = int(np.shape(leaves[0])[0])
    return [jax.tree.map(lambda a, i=i: a[i], tree) for i in range(n)]


def resolve_batching(batching: str, platform: str) -> str:
    """The batching ``"auto"`` means on ``platform``: ``"sequential"`` on CPU (XLA:CPU runs a
    vmapped convolution with per-run weights as a grouped convolution, measured 1.6-2.3x slower
    than the runs one after another: ``experiments/bench_training.py``), ``"vmap"`` elsewhere.
    Other values are returned as they are; ValueError outside :data:`BATCHINGS`.
    """
    if batching not in BATCHINGS:
        raise ValueError(f"batching must be one of {BATCHINGS}; got {batching!r}")
    if batching == "auto":
        return "sequential" if platform == "cpu" else "vmap"
    return batching


@functools.lru_cache(maxsize=32)
def _compile_runs(step: Callable, batching: str, platform: str) -> tuple[Callable, list]:
    wrapped, names = metric_vector_step(step)
    if batching == "vmap":
        wrapped = jax.vmap(wrapped)
    return jit(wrapped, donate_argnums=(0,), compiler_options=step_options(platform),
               fast_cpu_compile=False), names


class RunStates:
    """The runs' current states as :func:`fit_runs` holds them; ``run(i)`` is run ``i``'s
    state, ``stacked()`` all of them with a leading run axis. Hooks receive one."""

    def __init__(self, states: Any, batching: str):
        self._states, self.batching = states, batching

    def __len__(self) -> int:
        if self.batching == "vmap":
            return int(np.shape(jax.tree.leaves(self._states)[0])[0])
        return len(self._states)

    def run(self, i: int) -> Any:
        """Run ``i``'s state."""
        if self.batching == "vmap":
            return jax.tree.map(lambda a: a[i], self._states)
        return self._states[i]

    def view(self, i: int) -> "_RunView":
        """Run ``i``'s state, sliced lazily: ``view(i).beta`` slices only ``beta`` (a hook
        that reads one field on some steps does not copy the parameters on every step)."""
        return _RunView(self, i)

    def stacked(self) -> Any:
        """All states with a leading run axis."""
        return self._states if self.batching == "vmap" else stack_runs(self._states)


class _RunView:
    """Attribute access to one run's state without slicing the rest (:meth:`RunStates.view`)."""

    def __init__(self, states: RunStates, i: int):
        self._s, self._i = states, i

    def __getattr__(self, name: str) -> Any:
        s = self._s
        if s.batching == "vmap":
            return jax.tree.map(lambda a: a[self._i], getattr(s._states, name))
        return getattr(s._states[self._i], name)


class RunsResult(NamedTuple):
    """What :func:`fit_runs` returns.

    Attributes:
        states: the final state of each run (a list). history: each run's logged rows (means
            of the scalar metrics over each ``log_every`` interval).
        losses: ``(num_steps, runs)`` per-step losses. diverged: per run, the first step with
            a non-finite loss (the run keeps stepping; its numbers are not evidence) or None.
        batching: ``"vmap"`` or ``"sequential"``. first_step_seconds: the first step,
            compilation included. seconds_per_step: the mean of the other steps (all runs).
    """

    states: list
    history: list
    losses: np.ndarray
    diverged: tuple
    batching: str
    first_step_seconds: float
    seconds_per_step: float


def _check_runs(states, sources, keys, loop) -> int:
    loop = check_loop(loop)
    if loop.workdir is not None or loop.checkpoint_every or loop.stop_after is not None:
        raise ValueError("fit_runs does not checkpoint (no workdir, checkpoint_every or "
                         "stop_after); train a long checkpointed run with fit")
    if loop.eval_every:
        raise ValueError("fit_runs evaluates nothing itself (eval_every must be 0); evaluate "
                         "RunsResult.states")
    n = len(states)
    if n < 1:
        raise ValueError("fit_runs needs at least one run")
    if len(sources) != n or len(keys) != n:
        raise ValueError(f"one state, batch source and key per run: got {n} states, "
                         f"{len(sources)} sources and {len(keys)} keys")
    return n


def fit_runs(step: Callable, states: Sequence[Any], sources: Sequence[BatchSource], *,
             keys: Sequence[jax.Array], loop: LoopConfig, batching: str = "auto",
             hooks: Sequence[Any] = ()) -> RunsResult:
    """Train several runs of one step for ``loop.num_steps`` steps, as one vmapped program
    or one after another per step (:func:`resolve_batching`).

    Args:
        step: ``(state, key, *batch) -> (state, metrics)`` as for :func:`rdr_jax.training.loop.fit` (a scalar
            ``loss`` among the metrics); every run-dependent setting is in its state or batch.
        states, sources, keys: per run, the initial state, a :class:`rdr_jax.training.loop.BatchSource` and the PRNG
            key (run ``i`` computes what ``fit(step, states[i], sources[i], key=keys[i])`` does).
        loop: :class:`rdr_jax.training.loop.LoopConfig` (``num_steps``, ``log_every``, ``progress``, ``desc``; no
            checkpoints or evaluation). batching: one of :data:`BATCHINGS`.
        hooks: objects with ``after_step(step, RunStates)``.

    Returns:
        :class:`RunsResult`.

    Raises:
        ValueError: bad settings, mismatched run lists, batches whose shapes differ across runs.
    """
    n = _check_runs(states, sources, keys, loop)
    platform = _platform(states[0])
    mode = resolve_batching(batching, platform)
    fn, names = _compile_runs(step, mode, platform)
    if mode == "vmap":
        cur: Any = stack_runs(states)          # new buffers: the callers' states survive
        keys_dev: Any = stack_runs(list(keys))
    else:
        cur = [jax.tree.map(lambda a: jnp.array(a, copy=True), s) for s in states]  # donated
        keys_dev = list(keys)
    hooks = tuple(hooks)
    vecs: list = []
    losses: list = []
    rows: list = [[] for _ in range(n)]
    pending: list = []
    diverged: list = [None] * n
    bar = progress_bar(total=loop.num_steps, desc=loop.desc, disable=not loop.progress,
                       leave=False)

    def flush(s: int) -> None:
        if not vecs:
            return
        block = np.asarray(jax.device_get(jnp.stack(vecs)), np.float64)   # (t, runs, m)
        vecs.clear()
        i = names.index("loss")
        for t, v in enumerate(block):
            losses.append(v[:, i])
            for r in range(n):
                if diverged[r] is None and not np.isfinite(v[r, i]):
                    diverged[r] = s - len(block) + t + 1
        pending.append(block)
        if s % loop.log_every == 0 or s == loop.num_steps:
            vals = np.concatenate(pending).mean(0)
            pending.clear()
            for r in range(n):
                rows[r].append({"step": s, **{k: float(x) for k, x in zip(names, vals[r])}})
            if loop.progress:
                bar.set_postfix({"loss": f"{np.nanmean(vals[:, i]):.4g}"})

    t_first = t_end = float("nan")
    t0 = time.perf_counter()
    try:
        for t in range(loop.num_steps):
            batches = [tuple(src.next_batch()) for src in sources]
            _check_batches(batches, t)
            if mode == "vmap":
                cur, vec = fn(cur, keys_dev, jax.tree.map(lambda *a: np.stack(a), *batches))
            else:
                outs = [fn(cur[r], keys_dev[r], batches[r]) for r in range(n)]
                cur = [o[0] for o in outs]
                vec = jnp.stack([o[1] for o in outs])
            vecs.append(vec)
            if t == 0:
                jax.block_until_ready(vec)
                t_first = time.perf_counter() - t0
                t0 = time.perf_counter()
            s = t + 1
            for h in hooks:
                if hasattr(h, "after_step"):
                    h.after_step(s, RunStates(cur, mode))
            if s % loop.log_every == 0 or s == loop.num_steps:
                flush(s)
            bar.update(1)
        jax.block_until_ready(cur)
        t_end = time.perf_counter() - t0
    finally:
        bar.close()
    final = RunStates(cur, mode)
    sps = t_end / (loop.num_steps - 1) if loop.num_steps > 1 else float("nan")
    return RunsResult([final.run(r) for r in range(n)], rows, np.asarray(losses),
                      tuple(diverged), mode, t_first, sps)


def _platform(tree: Any) -> str:
    """The platform of a pytree's first device array (the default backend for host arrays)."""
    for x in jax.tree.leaves(tree):
        if isinstance(x, jax.Array):
            return next(iter(x.devices())).platform
    return jax.default_backend()


def _check_batches(batches: list, t: int) -> None:
    first = jax.tree.structure(batches[0])
    shapes = [np.shape(x) for x in jax.tree.leaves(batches[0])]
    for r, b in enumerate(batches[1:], 1):
        if jax.tree.structure(b) != first or [np.shape(x) for x in jax.tree.leaves(b)] != shapes:
            raise ValueError(f"step {t}: run {r}'s batch differs in structure or shape from run "
                             f"0's; the runs of one fit_runs call share the batch shapes")
