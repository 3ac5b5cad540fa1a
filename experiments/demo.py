"""Main demo: randomized SVD on the thesis' test matrices, error vs optimal and time.

Run:  python experiments/demo.py            (about half a minute on 2 CPU cores)
      python experiments/demo.py --quick    (smaller, for CI)

For each matrix and each sketch (Gaussian, SRTT, sparse sign) it computes a rank-k
randomized SVD with q power iterations (thesis Algorithm 4) and
prints the relative Frobenius error ||A - U S V^T||_F / ||A||_F next to the optimal rank-k
error sqrt(sum_{i>k} s_i^2) / ||A||_F (Eckart-Young) and the time, against a full
LAPACK SVD (numpy) where the matrix is small enough to have one. The last row is the
10^6 x 10^6 factored SNN matrix of thesis Section 2.5.3, whose exact error is
computed in factored form: ||A - U U^T A||_F^2 = ||A||_F^2 - ||U^T A||_F^2.

float32: the errors shown are far above float32 rounding.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import rdr_jax as R
from rdr_jax import datasets, matrices
from _common import parser, time_calls


def _timed(fn, *args, repeats=3):
    ts, out = time_calls(fn, *args, repeats=repeats, warmup=1)   # compile + warm up
    return out, min(ts)


def _row(name, sketch, err, opt, seconds):
    print(f"{name:<22} {sketch:<12} {err:>11.4e} {opt:>11.4e} {err / opt:>7.3f} "
          f"{seconds * 1e3:>9.1f}")


def dense_case(name, A, k, q, key):
    A = jnp.asarray(A, jnp.float32)
    s_true, t_svd = _timed(lambda A: jnp.linalg.svd(A, compute_uv=False), A, repeats=1)
    s_true = np.asarray(s_true, np.float64)
    normA = np.sqrt(np.sum(s_true ** 2))
    opt = np.sqrt(np.sum(s_true[k:] ** 2)) / normA
    _row(name, "full SVD", opt, opt, t_svd)
    for sketch in ("gaussian", "srtt", "sparse_sign"):
        res, t = _timed(lambda key, A: R.rsvd(key, A, k, power_iters=q, sketch=sketch), key, A)
        err = float(jnp.linalg.norm(A - (res.U * res.s) @ res.Vt)) / normA
        _row(name, sketch, err, opt, t)


def factored_case(m, k, q, key):
    F = matrices.snn1e6(key, m=m, n=m)
    sv = R.exact_singular_values(F)
    normA2 = float(np.sum(sv ** 2))
    opt = np.sqrt(np.sum(sv[k:] ** 2) / normA2)
    name = f"SNN {m:.0e} (factored)"
    for sketch in ("gaussian", "sparse_sign"):
        res, t = _timed(lambda key: R.rsvd(key, F, k, power_iters=q, sketch=sketch), key,
                        repeats=1)
        UtA = np.asarray(F.rmatmat(res.U), np.float64)  # n x k, exact
        err = np.sqrt(max(normA2 - np.sum(UtA ** 2), 0.0) / normA2)
        _row(name, sketch, err, opt, t)


def main(argv=None):
    p = parser(__doc__, quick="small sizes (CI)", seed=0)
    args = p.parse_args(argv)
    key = jax.random.key(args.seed)
    k1, k2, k3, k4 = jax.random.split(key, 4)
    print(f"rdr_jax {R.__version__} | jax {jax.__version__} on {jax.default_backend()}")
    print(f"{'matrix':<22} {'method':<12} {'rel. error':>11} {'optimal':>11} {'ratio':>7} "
          f"{'time (ms)':>9}")
    digits = datasets.load_digits_matrix()
    dense_case("digits 1797x64", digits, 10, 1, k1)
    n = 500 if args.quick else 1000
    snn = matrices.snn(k2, n, n, r=n, density=1e-2, dtype=np.float32)
    dense_case(f"SNN {n}x{n}", snn, 50, 1, k3)
    factored_case(10**5 if args.quick else 10**6, 20, 1, k4)
    print("ratio = rSVD error / optimal rank-k error (1 is optimal).")


if __name__ == "__main__":
    main()
