"""Issue 31, item 2: the seeds of a table cell as one program. Is it faster?

For each train step of the Ch. 4 / Ch. 5 experiments, ``R`` runs (seeds) are trained with
:func:`rdr_jax.training.fit_runs` twice in this process, on the same synthetic batches
(uniform noise in the experiments' shapes; a step costs the same whatever the pixels are):

* ``sequential``: one jitted single-run step, called for each run in turn (one compile);
* ``vmap``: one ``jax.vmap``-ed, jitted program that steps every run at once.

Printed per step: the first step (compilation included), the steady step time of all ``R``
runs, and the ratio ``sequential / vmap`` for a whole cell of ``--cell-steps`` steps, compile
included (``(C_seq + T s_seq) / (C_vmap + T s_vmap)``). Target (issue 31): >= 2 on this 2-core
CPU, >= 4 on a GPU. Also the split of one run's step into augmentation, forward/backward and
the optimizer update, each jitted alone (they overlap less than in the fused step, so they do
not sum to it exactly).

Steps (the experiments' settings; docs/performance.md, "Training: several seeds at once"):

* ``small_cnn``: DAC, SmallCNN width 8 on 28 x 28 x 1 (the MNIST tables), batch 16, alpha 7,
  RandAugment(2, 10);
* ``wrn_28_2``: DAC, WideResNet-28-2 on 32 x 32 x 3 (the thesis' CIFAR-100 model), batch 16,
  alpha 7 (the thesis: batch 64; shrunk so that a CPU step takes seconds, not tens);
* ``tiny_segnet``: AdaWAC, TinySegNet width 16 depth 3 on 48 x 48 slices (the MNI152 tables),
  batch 8;
* ``unet_resnet34``: AdaWAC, UNetResNet34 (small) on 64 x 64 slices (its five stride-2 stages
  need sides divisible by 32), batch 8.

Run (from the repository root)::

    python experiments/bench_training.py                 # R = 5, all four steps (~15 min)
    python experiments/bench_training.py --quick         # R = 2, SmallCNN and TinySegNet, 3 steps

Writes ``bench_training.json`` to ``--out`` (default ``experiments/results/bench_training``),
with the load average before and after each measurement (a timing taken above the core count is
marked ``retake``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import env_info, loadavg, parser, time_calls  # noqa: E402

from rdr_jax.adawac import configs as adawac_configs  # noqa: E402
from rdr_jax.adawac import train as adawac  # noqa: E402
from rdr_jax.adawac.augment import batch_two_views  # noqa: E402
from rdr_jax.dac import configs as dac_configs  # noqa: E402
from rdr_jax.dac import deep  # noqa: E402
from rdr_jax.training import (LoopConfig, fit_runs, merge_apply, step_options)  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "bench_training"
STEPS = ("small_cnn", "wrn_28_2", "tiny_segnet", "unet_resnet34")
QUICK_STEPS = ("small_cnn", "tiny_segnet")
TIMED = {"small_cnn": 30, "wrn_28_2": 3, "tiny_segnet": 30, "unet_resnet34": 10}


class _Fixed:
    """A batch source that returns batch ``t % len(batches)`` (host arrays)."""

    def __init__(self, batches):
        self.batches, self.t = batches, 0

    def next_batch(self):
        b = self.batches[self.t % len(self.batches)]
        self.t += 1
        return b

    def state_dict(self):
        return {"t": self.t}

    def load_state_dict(self, d):
        self.t = int(d["t"])


def _timeit(fn, *args, n: int = 5) -> float:
    """Median seconds of ``fn(*args)`` (blocked) after one untimed call."""
    return float(np.median(time_calls(fn, *args, repeats=n, warmup=1)[0]))


def dac_case(name: str, runs: int):
    """(step, states, batch lists, split timer) of a DAC step."""
    if name == "small_cnn":
        cfg = dac_configs.get_mnist_config("different_lambda")
        shape, batch, alpha = (28, 28, 1), 16, 7
    else:
        cfg = dac_configs.get_config("different_lambda")
        shape, batch, alpha = (32, 32, 3), 16, 7
    tx = deep.make_optimizer(deep.cosine_schedule(0.03, 1000, 7 / 16), momentum=0.9,
                             nesterov=True, weight_decay=5e-4)
    built = [deep.init_train_state(deep.build_model(cfg.model, seed=s), tx) for s in range(runs)]
    graph = built[0][0]
    augment = deep.build_augment(cfg.augment)
    step = deep.make_train_step(graph, tx, alpha=alpha, augment=augment)
    rng = np.random.default_rng(0)
    classes = int(cfg.model.num_classes)
    batches = [[(rng.random((batch,) + shape, np.float32),
                 rng.integers(0, classes, batch).astype(np.int32), np.float32(1.0),
                 np.bool_(True)) for _ in range(4)] for _ in range(runs)]

    def split():
        opts = step_options(jax.default_backend())
        x = jnp.asarray(batches[0][0][0])
        y = jnp.asarray(batches[0][0][1])
        key = jax.random.key(0)
        aug = jax.jit(lambda k, v: jax.vmap(augment, in_axes=(0, None))(
            jax.random.split(k, alpha), v), compiler_options=opts)
        full = jnp.concatenate([x[None], aug(key, x)], 0).reshape((-1,) + shape)
        st = built[0][1]

        def loss(p, ms):
            logits, _ = merge_apply(graph.train, p, ms, full)
            return deep.cross_entropy(logits[:batch], y)
        fb = jax.jit(jax.grad(loss), compiler_options=opts)
        grads = fb(st.params, st.model_state)
        upd = jax.jit(lambda g, o, p: tx.update(g, o, p), compiler_options=opts)
        return {"augmentation": _timeit(aug, key, x), "forward_backward": _timeit(
            fb, st.params, st.model_state), "optimizer": _timeit(upd, grads, st.opt_state,
                                                                  st.params)}

    return step, [b[1] for b in built], batches, split


def adawac_case(name: str, runs: int):
    """(step, states, batch lists, split timer) of an AdaWAC step."""
    c = adawac_configs.synapse_unet(quick=True)
    c.method, c.batch_size, c.num_steps = "adawac", 8, 1000
    c.optim.lr = 0.01
    if name == "tiny_segnet":
        c.model.name, c.model.width, c.model.depth = "tiny", 16, 3
    else:
        c.model.name, c.model.small = "unet", True
    # the MNI152 tables' 48 x 48 slices; the U-Net needs sides divisible by 32: 64 x 64
    size, n, classes = (48 if name == "tiny_segnet" else 64), 56, 3
    st = adawac.validate_config(c, num_examples=n)
    tx = adawac.settings_optimizer(st)
    built = [adawac.init_state(adawac.build_model(c, classes, image_size=size, seed=s), tx,
                               jnp.full((n,), 0.5, jnp.float32)) for s in range(runs)]
    graph = built[0][0]
    step = adawac.settings_step(graph, st._replace(seed=0))
    rng = np.random.default_rng(0)
    batches = []
    for r in range(runs):
        rows = []
        for _ in range(4):
            idx = rng.choice(n, 8, replace=False).astype(np.int32)
            rows.append((rng.random((8, size, size), np.float32),
                         rng.integers(0, classes, (8, size, size)).astype(np.int32), idx,
                         np.ones(8, bool)))
        batches.append(rows)

    def split():
        opts = step_options(jax.default_backend())
        x, y = jnp.asarray(batches[0][0][0]), jnp.asarray(batches[0][0][1])
        key = jax.random.key(0)
        views = jax.jit(batch_two_views, compiler_options=opts)
        v = views(key, x, y)
        inp = jnp.concatenate([v.image1, v.image2], 0)[..., None]
        s0 = built[0][1]

        def loss(p):
            (logits, z), _ = merge_apply(graph.train, p, s0.model_state, inp)
            return jnp.mean(logits ** 2) + jnp.mean(z ** 2)
        fb = jax.jit(jax.grad(loss), compiler_options=opts)
        grads = fb(s0.params)
        upd = jax.jit(lambda g, o, p: tx.update(g, o, p), compiler_options=opts)
        return {"augmentation": _timeit(views, key, x, y),
                "forward_backward": _timeit(fb, s0.params),
                "optimizer": _timeit(upd, grads, s0.opt_state, s0.params)}

    return step, [b[1] for b in built], batches, split


def measure(name: str, runs: int, timed: int, cell_steps: int) -> dict:
    case = dac_case if name in ("small_cnn", "wrn_28_2") else adawac_case
    step, states, batches, split = case(name, runs)
    keys = [jax.random.key(s) for s in range(runs)]
    row = {"step": name, "runs": runs, "timed_steps": timed, "load_before": loadavg()}
    for mode in ("sequential", "vmap"):
        res = fit_runs(step, states, [_Fixed(b) for b in batches], keys=keys,
                       loop=LoopConfig(num_steps=timed + 1, log_every=timed + 1),
                       batching=mode)
        row[mode] = {"first_step_s": res.first_step_seconds,
                     "step_s": res.seconds_per_step,
                     "runs_per_s": runs / res.seconds_per_step,
                     "finite": bool(np.all(np.isfinite(res.losses)))}
    row["split_one_run_s"] = split()
    row["load_after"] = loadavg()
    seq, vm = row["sequential"], row["vmap"]
    row["steady_ratio"] = seq["step_s"] / vm["step_s"]
    row["cell_steps"] = cell_steps
    row["cell_ratio"] = ((seq["first_step_s"] + cell_steps * seq["step_s"])
                         / (vm["first_step_s"] + cell_steps * vm["step_s"]))
    cores = os.cpu_count() or 1
    row["retake"] = any(v is not None and v[0] > cores
                        for v in (row["load_before"], row["load_after"]))
    return row


def parse_args(argv=None):
    p = parser(__doc__, quick="R = 2, two steps, 3 timed steps", out=DEFAULT_OUT)
    p.add_argument("--runs", type=int, default=None, help="runs per cell (default 5; quick 2)")
    p.add_argument("--steps", nargs="+", choices=STEPS, default=None)
    p.add_argument("--cell-steps", type=int, default=1000,
                   help="steps of the cell the compile-included ratio is computed for")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    runs = args.runs or (2 if args.quick else 5)
    names = args.steps or (QUICK_STEPS if args.quick else STEPS)
    rows = []
    print(f"{runs} runs per cell; ratio = sequential / vmap (> 1: the vmapped program is "
          f"faster); cell = {args.cell_steps} steps, compile included")
    print(f"{'step':<15}{'seq 1st [s]':>12}{'vmap 1st [s]':>13}{'seq [ms]':>10}"
          f"{'vmap [ms]':>11}{'steady':>8}{'cell':>7}  split of one run (aug / fwd+bwd / opt, ms)")
    for name in names:
        r = measure(name, runs, 3 if args.quick else TIMED[name], args.cell_steps)
        rows.append(r)
        s = r["split_one_run_s"]
        print(f"{name:<15}{r['sequential']['first_step_s']:>12.1f}{r['vmap']['first_step_s']:>13.1f}"
              f"{1e3 * r['sequential']['step_s']:>10.1f}{1e3 * r['vmap']['step_s']:>11.1f}"
              f"{r['steady_ratio']:>8.2f}{r['cell_ratio']:>7.2f}  "
              f"{1e3 * s['augmentation']:.1f} / {1e3 * s['forward_backward']:.1f} / "
              f"{1e3 * s['optimizer']:.1f}" + ("  retake (load)" if r["retake"] else ""),
              flush=True)
    target = 4.0 if jax.default_backend() == "gpu" else 2.0
    held = all(r["cell_ratio"] >= target for r in rows)
    print(f"[{'HELD' if held else 'NOT HELD'}] a {runs}-run cell as one vmapped program is "
          f">= {target:g}x faster than the runs one after another (compile included) on "
          f"{jax.devices()[0].device_kind}: cell ratios "
          + ", ".join(f"{r['step']} {r['cell_ratio']:.2f}" for r in rows))
    out = {"rows": rows, "target": target, "held": held, "env": env_info(),
           "quick": bool(args.quick), "command": " ".join(sys.argv)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_training.json").write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
