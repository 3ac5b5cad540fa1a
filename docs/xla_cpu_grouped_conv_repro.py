"""Why ``rdr_jax.training.fit_runs(batching="auto")`` trains seeds one after another on CPU.

``jax.vmap`` of a convolution whose weights carry the vmapped axis (one network per seed) is
one grouped convolution (``feature_group_count`` = the number of seeds). XLA:CPU runs it
several times slower than the same convolutions one after another, so a vmapped train step
of R seeds costs more than R single-seed steps. Measured with jax / jaxlib 0.10.2 on the
project's 2-core x86-64 machine for 5 seeds of a 3 x 3, 16-channel convolution on 128 images
of 14 x 14 (SmallCNN's third layer): 97 ms grouped vs 21 ms separate (4.7x; all-ones inputs,
mean of 10, quiet machine) and 135 vs 10 ms (13x; this script, best of 10, load ~2).

    python docs/xla_cpu_grouped_conv_repro.py
"""
import re
import time

import jax
import jax.numpy as jnp
from jax import lax

R, N, HW, C = 5, 128, 14, 16


def conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


def best_of(fn, n=10):
    jax.block_until_ready(fn())
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        ts.append(time.perf_counter() - t0)
    return min(ts)


if __name__ == "__main__":
    x = jax.random.normal(jax.random.key(0), (R, N, HW, HW, C))
    w = jax.random.normal(jax.random.key(1), (R, 3, 3, C, C))
    grouped = jax.jit(jax.vmap(conv))
    single = jax.jit(conv)
    hlo = grouped.lower(x, w).as_text()
    print("in the vmapped program:", sorted(set(re.findall(r"feature_group_count = \d+", hlo))))
    t_grouped = best_of(lambda: grouped(x, w))
    t_single = best_of(lambda: [single(x[i], w[i]) for i in range(R)])
    same = jnp.allclose(grouped(x, w), jnp.stack([single(x[i], w[i]) for i in range(R)]),
                        rtol=1e-4, atol=1e-3)
    print(f"{jax.devices()[0].device_kind}, jax {jax.__version__}: vmapped (grouped) "
          f"{1e3 * t_grouped:.1f} ms, {R} separate {1e3 * t_single:.1f} ms, ratio "
          f"{t_grouped / t_single:.1f}x; same values: {bool(same)}")
