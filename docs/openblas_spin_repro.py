"""Minimal reproducer (jax + numpy only) for an upstream report: after a jaxlib CPU LAPACK call
(getrf/geqrf/trsm run on the OpenBLAS that scipy ships), the next XLA GEMM of the same
process is slower, because OpenBLAS's worker threads keep spinning and compete with XLA's
intra-op thread pool for the cores. Compare a default run with ``OPENBLAS_NUM_THREADS=1``:

    python docs/openblas_spin_repro.py
    OPENBLAS_NUM_THREADS=1 python docs/openblas_spin_repro.py

Each row: the LAPACK call's own time and the time of the GEMM that follows it (median of 7).
"""
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)
m, n, k = 4000, 2000, 200
rng = np.random.default_rng(0)
A = jnp.asarray(rng.standard_normal((m, n)))
G = jnp.asarray(rng.standard_normal((k, m)))
T = jnp.asarray(np.triu(rng.standard_normal((k, k))) + 10 * np.eye(k))
calls = {
    "nothing": jax.jit(lambda: jnp.zeros(())),
    "getrf (n x k)": jax.jit(lambda: jax.lax.linalg.lu(A[:, :k].T)[0]),
    "geqrf (2k x 2k)": jax.jit(lambda: jnp.linalg.qr(A[:2 * k, :2 * k], mode="r")),
    "trsm (k x k) \\ (k x n)": jax.jit(lambda: jax.lax.linalg.triangular_solve(
        T, A[:k], left_side=True, lower=False)),
}
gemm = jax.jit(lambda G, A: G @ A)
print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}, "
      f"{os.cpu_count()} cores, jax {jax.__version__}")
for name, f in calls.items():
    jax.block_until_ready(f())
    jax.block_until_ready(gemm(G, A))
    t_call, t_gemm = [], []
    for _ in range(7):
        t0 = time.perf_counter()
        jax.block_until_ready(f())
        t1 = time.perf_counter()
        jax.block_until_ready(gemm(G, A))
        t_call.append(t1 - t0)
        t_gemm.append(time.perf_counter() - t1)
    print(f"{name:24s} call {1e3 * statistics.median(t_call):8.2f} ms   next GEMM "
          f"{1e3 * statistics.median(t_gemm):8.2f} ms   load {os.getloadavg()[0]:.2f}")
