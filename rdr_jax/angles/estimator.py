"""Unbiased Monte-Carlo estimates of the canonical angles of a randomized SVD from its
spectrum alone (thesis Ch. 3, Prop 3.2), and the padded approximate spectrum.
Derivations: ``docs/angles.md``."""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import solve_triangular
from jaxtyping import Array, Bool, Float

from rdr_jax._src import fp as _fp
from rdr_jax._src import jit as _jit
from rdr_jax._src import validation as V
from rdr_jax.angles._common import (check_sketch, check_spectrum,
                                    check_subspace, mm, run_after)
from rdr_jax.angles.options import EstimateOptions
from rdr_jax.sketching import make_sketch

__all__ = ["unbiased_estimate", "padded_spectrum", "Estimate"]

# The Cholesky fast path is kept only when eps sqrt(l) (max diag L / min diag L)^2 <= this.
_CHOL_TOL = 1e-8


class Estimate(NamedTuple):
    """Monte-Carlo estimate of ``E[sin theta_i]``: ``mean``, ``min``, ``max`` over the
    trials (the thesis' line and band), the per-trial sines ``trials`` (N, k), each row
    ascending, and ``valid`` (False, every other field NaN, when the spectrum's powers
    cannot be represented in its dtype)."""

    mean: Float[Array, " k"]
    min: Float[Array, " k"]
    max: Float[Array, " k"]
    trials: Float[Array, "N k"]
    valid: Bool[Array, ""]


def _weight_log_floor(dtype) -> float:
    """``log(tiny / eps)``: relative weights below this are lost in ``dtype``."""
    fi = np.finfo(dtype)
    return float(np.log(fi.tiny) - np.log(fi.eps))


def _weight_spans(xp, logs, exponent, k: int, l: int):
    """The log dynamic ranges ``(sigma_1/sigma_k)^p``, ``(sigma_{k+1}/sigma_{k+l})^p``."""
    return exponent * (logs[0] - logs[k - 1]), exponent * (logs[k] - logs[k + l - 1])


class _Trials(NamedTuple):
    """Static options of the estimator's Monte-Carlo trials (one hashable jit argument)."""

    num: int
    sketch: Any
    method: str
    sharding: Any = None      # the trials axis over devices (see unbiased_estimate's mesh)


@functools.partial(_jit.jit, static_argnames=("k", "l", "trials"))
def _estimate_jit(key, s, exponent, k, l, trials: _Trials):
    num_trials, sketch, method, trials_sharding = trials
    r = s.shape[0]
    dt = s.dtype
    # weights relative to sigma_1 (head) and sigma_{k+1} (tail), all <= 1; the gap enters
    # through its logarithm (docs/angles.md)
    logs = _fp.log_abs(s)
    d = jnp.concatenate([jnp.exp(exponent * (logs[:k] - logs[0])),
                         jnp.exp(exponent * (logs[k:] - logs[k]))])
    log_gap = exponent * (logs[0] - logs[k])
    head, tail = _weight_spans(jnp, logs, exponent, k, l)
    floor = _weight_log_floor(dt)
    valid = (-head >= floor) & (-tail >= floor)

    def draw(kk):
        # Gamma (l x r) = Omega^T, drawn in float32 (enough for Monte-Carlo input)
        G = make_sketch(kk, sketch, l, r, dtype=jnp.float32).todense()
        return G.astype(dt) * d[None, :]                      # [W1^T, W2^T] (normalised)

    def finish(Wt, L):
        # L lower triangular with L L^T = W2^T W2: nu = sv(W1 W2^+) = sv(W1 L^-T)
        Mt = solve_triangular(L, Wt[:, :k], lower=True)      # L^-1 W1^T  (l x k)
        nu = jnp.linalg.svd(Mt, compute_uv=False)              # descending
        # sin = (1 + nu^2)^(-1/2), nu = nu' (sigma_1/sigma_{k+1})^p, in the log domain
        log_nu = jnp.log(nu) + log_gap
        return jnp.exp(-0.5 * jnp.logaddexp(jnp.zeros((), dt), 2 * log_nu))  # ascending

    def qr_trial(kk, dep=None):
        Wt = draw(kk) if dep is None else run_after(dep, draw(kk))
        R = jnp.linalg.qr(Wt[:, k:].T, mode="r")              # W2 = Q R, R (l x l)
        return finish(Wt, R.conj().T)

    def chol_trial(kk):
        Wt = draw(kk)
        W2t = Wt[:, k:]
        L = jnp.linalg.cholesky(mm(W2t, W2t.T))
        dg = jnp.abs(jnp.diagonal(L))
        est = jnp.finfo(dt).eps * math.sqrt(l) * (jnp.max(dg) / jnp.min(dg)) ** 2
        bad = ~jnp.all(jnp.isfinite(L)) | ~(est <= _CHOL_TOL)
        return finish(Wt, L), bad

    keys = jax.random.split(key, num_trials)
    if trials_sharding is not None:   # the trials axis over the devices (vmap + sharding)
        keys = jax.lax.with_sharding_constraint(keys, trials_sharding)
    if method == "qr":
        trials = jax.vmap(qr_trial)(keys)
    else:
        fast, bad = jax.vmap(chol_trial)(keys)
        if method == "cholesky":
            trials = jnp.where(bad[:, None], jnp.nan, fast)
        else:  # auto: redo the whole batch with QR if any trial was ill-conditioned
            # (under an outer vmap the cond runs both branches: QR strictly after Cholesky)
            trials = jax.lax.cond(jnp.any(bad),
                                  lambda: jax.vmap(qr_trial)(keys, fast),
                                  lambda: fast)
    trials = jnp.where(valid, trials, jnp.nan)
    return Estimate(jnp.mean(trials, axis=0), jnp.min(trials, axis=0),
                    jnp.max(trials, axis=0), trials, valid)


def _check_estimate_range(s, exponent: int, k: int, l: int, subspace: str) -> None:
    """ValueError when a concrete spectrum's powers cannot be represented (traced: valid)."""
    if not V.is_concrete(s):
        return
    logs = np.log(np.asarray(s, np.float64))
    head, tail = _weight_spans(np, logs, float(exponent), k, l)
    floor = _weight_log_floor(s.dtype)
    for span, what in ((head, f"(sigma_1/sigma_k)^p, k = {k}"),
                       (tail, f"(sigma_(k+1)/sigma_(k+l))^p, k + l = {k + l}")):
        if -span < floor:
            raise ValueError(
                f"unbiased_estimate cannot represent the spectrum's powers in {s.dtype}: "
                f"{what}, p = {exponent} ({subspace} subspace) is "
                f"10^{span / math.log(10):.0f}, beyond the dtype's usable range eps/tiny = "
                f"10^{-floor / math.log(10):.0f}, so the smallest weights would flush to 0 "
                f"and the estimate would degenerate; use float64 (jax.enable_x64) or fewer "
                f"power_iters")


def _trials_sharding(mesh: Any, num_trials: int):
    """``NamedSharding`` of the trials axis over all devices of ``mesh`` (None: no mesh)."""
    if mesh is None:
        return None
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    if not isinstance(mesh, Mesh):
        raise TypeError(f"mesh must be a jax.sharding.Mesh or None; got {type(mesh).__name__}")
    if num_trials % mesh.size:
        raise ValueError(f"num_trials = {num_trials} must be a multiple of the mesh's "
                         f"{mesh.size} devices to split the trials over them")
    return NamedSharding(mesh, PartitionSpec(tuple(mesh.axis_names)))


def unbiased_estimate(key: Any, s: Any, k: int, l: int, power_iters: int, *,
                      subspace: str = "left", num_trials: int = 3,
                      options: EstimateOptions = EstimateOptions()) -> Estimate:
    """Unbiased Monte-Carlo estimate of ``E[sin angle_i(U_k, U_hat_l)]`` (or V), i <= k,
    from the spectrum alone.

    Each trial draws ``Omega ~ N(0, 1/l)^{r x l}`` and returns
    ``(1 + sv(W1 W2^+)^2)^(-1/2)`` with ``W1 = Sigma_k^p Omega_1``,
    ``W2 = Sigma_{r\\k}^p Omega_2``, ``p = 2q + 1`` (left) or ``2q + 2`` (right): exactly the
    distribution of a Gaussian rSVD's sines. Thesis Prop 3.2
    (Proposition 3.2, Algorithm 5).

    Args:
      key: ``jax.random.key``.
      s: spectrum, length r (true, or :func:`padded_spectrum`).
      k: target rank (static), ``k >= 1``.
      l: sketch size (static), ``k <= l <= r - k`` (so W2 has full column rank).
      power_iters: power iterations (q), ``>= 0``.
      subspace: ``"left"`` (U) or ``"right"`` (V).
      num_trials: N (static), ``>= 1``; the thesis uses 3.
      options: :class:`rdr_jax.angles.options.EstimateOptions` (``sketch``, ``method``,
        ``mesh``; default: Gaussian, ``"auto"``, no mesh).

    Returns:
      :class:`Estimate`.

    Raises:
      ValueError: bad arguments, or (concrete s) powers that the dtype cannot represent
        (inside ``jit``: NaN and ``valid = False``); use float64 or fewer power_iters.
    """
    key = V.check_key(key)
    subspace = check_subspace(subspace)
    s = check_spectrum(s)
    r = s.shape[0]
    k = V.check_int("k", k, low=1)
    if r < 2 * k:
        raise ValueError(f"len(s) = r = {r} is too short for k = {k}: need r >= 2k so that "
                         f"k <= l <= r - k is possible")
    l = V.check_int("l", l, low=k, high=r - k,
                    high_desc=f"r - k = {r} - {k}, so that W2 has full column rank")
    q = V.check_int("power_iters", power_iters, low=0)
    num_trials = V.check_int("num_trials", num_trials, low=1)
    if not isinstance(options, EstimateOptions):
        raise TypeError(f"options must be an EstimateOptions; got {type(options).__name__}")
    method, mesh = options.method, options.mesh
    sk = check_sketch(options.sketch)
    if method == "auto" and not (s.dtype == jnp.float64 and 2 * l <= r - k):
        method = "qr"
    p = 2 * q + (1 if subspace == "left" else 2)
    _check_estimate_range(s, p, k, l, subspace)
    return _estimate_jit(key, s, jnp.asarray(p, s.dtype), k, l,
                         _Trials(num_trials, sk, method, _trials_sharding(mesh, num_trials)))


def padded_spectrum(s_hat: Any, r: int) -> Float[Array, " r"]:
    """The approximate spectrum ``(s_hat_1, ..., s_hat_l, s_hat_l, ..., s_hat_l)`` of
    length r: what the bounds and estimates use when the true spectrum is unknown (thesis
    Section 3.6.2).

    Args:
      s_hat: (l,) computed singular values (descending, positive).
      r: target length (static), ``r >= l``.

    Returns:
      (r,) array.
    """
    s_hat = check_spectrum(s_hat, name="s_hat")
    l = s_hat.shape[0]
    r = V.check_int("r", r, low=l)
    return jnp.concatenate([s_hat, jnp.full((r - l,), s_hat[-1], s_hat.dtype)])
