"""Issue 30: the XLA kernels of ``rdr_jax._src.dense`` against jaxlib's LAPACK (OpenBLAS) calls.

For each kernel at the sizes of a k = 50 and a k = 200 column ID (LU of the n x kb sketch,
Householder R of the damped pivot block, triangular solves, Cholesky): compile time and the
min of 5 warm calls, float64, in this process (default OpenBLAS threads). Prints the load
average next to each row; above the core count a row is a retake.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python experiments/bench_dense_kernels.py
"""

import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from rdr_jax._src import dense as D


def bench(name, f, *args):
    t = time.perf_counter()
    c = jax.jit(f).lower(*args).compile()
    tc = time.perf_counter() - t
    jax.block_until_ready(c(*args))
    ts = []
    for _ in range(5):
        t = time.perf_counter()
        jax.block_until_ready(c(*args))
        ts.append(time.perf_counter() - t)
    print(f"{name:34s} compile {tc:6.2f} s  run {1e3 * min(ts):8.2f} ms   "
          f"load {os.getloadavg()[0]:.1f}", flush=True)


def main():
    rng = np.random.default_rng(0)
    with jax.enable_x64(True):
        for n, kb in [(2000, 50), (2000, 200)]:
            Y = jnp.asarray(rng.standard_normal((n, kb)))
            bench(f"LU xla {n}x{kb}", lambda a: D.lu(a)[2], Y)
            bench(f"LU lapack {n}x{kb}", lambda a: jax.lax.linalg.lu(a)[2], Y)
            Q = jnp.asarray(rng.standard_normal((2 * kb + 20, 2 * kb + 10)))
            bench(f"Householder R xla {Q.shape}", lambda a: D.qr_r(a, kb), Q)
            bench(f"Householder R lapack {Q.shape}", lambda a: jnp.linalg.qr(a, mode="r"), Q)
            T = jnp.triu(jnp.asarray(rng.standard_normal((kb, kb)))) + 5 * jnp.eye(kb)
            B = jnp.asarray(rng.standard_normal((kb, 2000)))
            bench(f"left solve xla {kb}x2000", lambda t, b: D.triangular_solve(
                t, b, left_side=True), T, B)
            bench(f"left solve lapack {kb}x2000", lambda t, b: jax.lax.linalg.triangular_solve(
                t, b, left_side=True), T, B)
            G = jnp.eye(kb) * 3 + 0.01
            bench(f"Cholesky xla {kb}", D.cholesky, G)
            bench(f"Cholesky lapack {kb}", jax.lax.linalg.cholesky, G)


if __name__ == "__main__":
    main()
