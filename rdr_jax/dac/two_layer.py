"""DAC vs DA-ERM for two-layer ReLU regression (thesis Section 4.6.1, Theorem B.2).

``y = (x^T B*)_+ w* + eps``; augmentations perturb the environment coordinates the teacher
ignores; DA-ERM fits the augmented samples as extra data, DAC constrains (``lam=None``) or
penalises the first layer to be invariant. Why: the thesis' nonlinear example where DAC's
risk bound beats DA-ERM's. Parameters are a pytree, so a whole fit is one pure function
(``jax.vmap`` over seeds). Setting and bounds: ``docs/training.md`` ("Two-layer ReLU").
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float

from rdr_jax._src import validation as V
from rdr_jax._src.jit import jit
from rdr_jax.operators import HIGHEST

__all__ = [
    "TwoLayerParams", "TwoLayerData", "AugmentationSubspace", "FitResult", "DataShape",
    "FitOptions",
    "make_teacher", "augment", "make_data",
    "init_params", "predict", "first_layer",
    "da_erm_loss", "consistency_penalty", "dac_loss",
    "augmentation_subspace", "project_l1_ball", "project_params",
    "make_train_step", "fit_da_erm", "fit_dac", "excess_risk", "c_null",
]

METHODS = ("da_erm", "dac")


# ======================================================================================
# containers
# ======================================================================================
class TwoLayerParams(NamedTuple):
    """Parameters of ``h(x) = (x^T B)_+ w``: ``B (d, width)``, ``w (width,)``."""

    B: Float[Array, "d q"]
    w: Float[Array, " q"]


class TwoLayerData(NamedTuple):
    """One draw of the problem (:func:`make_data`).

    Attributes:
      X: ``(N, d)`` inputs. y: ``(N,)`` noisy labels. X_aug: ``(alpha, N, d)``.
      f_X: ``(N,)`` noiseless ``h*(X)``. X_test: ``(n_test, d)``. f_test: ``h*(X_test)``.
      teacher: the ground truth :class:`TwoLayerParams`.
    """

    X: Float[Array, "n d"]
    y: Float[Array, " n"]
    X_aug: Float[Array, "alpha n d"]
    f_X: Float[Array, " n"]
    X_test: Float[Array, "m d"]
    f_test: Float[Array, " m"]
    teacher: TwoLayerParams


class AugmentationSubspace(NamedTuple):
    """Projectors of ``Delta = A(X) - M X`` (:func:`augmentation_subspace`).

    Attributes:
      P_null: ``(d, d)`` projector onto ``null(Delta)``. P_range: ``I - P_null``.
      rank: the empirical ``d_aug`` (int32 scalar).
    """

    P_null: Float[Array, "d d"]
    P_range: Float[Array, "d d"]
    rank: Array


class FitResult(NamedTuple):
    """Result of :func:`fit_da_erm` / :func:`fit_dac`: the trained ``params`` and the
    ``losses`` ``(steps,)`` before each step.
    """

    params: TwoLayerParams
    losses: Float[Array, " steps"]


# ======================================================================================
# validation helpers
# ======================================================================================
def _float_dtype(name: str, a: Any) -> np.dtype:
    dt = np.dtype(a.dtype if hasattr(a, "dtype") else np.asarray(a).dtype)
    if not np.issubdtype(dt, np.floating):
        raise TypeError(f"{name} must be a float32/float64 array; got dtype {dt}")
    return V.check_dtype(name, dt, allow_complex=False)


def _check_xy(X, y=None, X_aug=None, *, need_aug: bool = True):
    """Validate ``X (N, d)``, ``y (N,)``, ``X_aug (alpha, N, d)``; cast to one float dtype."""
    if not hasattr(X, "shape"):
        X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (N, d); got shape {tuple(X.shape)}")
    n, d = X.shape
    if n < 1 or d < 1:
        raise ValueError(f"X must have N >= 1 rows and d >= 1 columns; got shape {X.shape}")
    dts = [_float_dtype("X", X)]
    if y is not None:
        if not hasattr(y, "shape"):
            y = np.asarray(y)
        if y.shape != (n,):
            raise ValueError(f"y must have shape (N,) = ({n},) matching X; got {tuple(y.shape)}")
        dts.append(_float_dtype("y", y))
    if X_aug is not None:
        if not hasattr(X_aug, "shape"):
            X_aug = np.asarray(X_aug)
        if X_aug.ndim != 3:
            raise ValueError("X_aug must be 3-D (alpha, N, d), stacking alpha augmentations of "
                             f"X; got shape {tuple(X_aug.shape)}")
        if X_aug.shape[0] < 1:
            raise ValueError("alpha (X_aug.shape[0], the number of augmentations per sample) "
                             f"must be >= 1; got X_aug of shape {tuple(X_aug.shape)}")
        if tuple(X_aug.shape[1:]) != (n, d):
            raise ValueError(f"X_aug must have shape (alpha, N, d) = (alpha, {n}, {d}) matching "
                             f"X; got {tuple(X_aug.shape)}")
        dts.append(_float_dtype("X_aug", X_aug))
    elif need_aug:
        raise ValueError("X_aug must be given as an (alpha, N, d) array")
    dt = np.dtype(jnp.result_type(*dts))
    out = [jnp.asarray(X, dt)]
    V.check_array_values("X", X)
    if y is not None:
        V.check_array_values("y", y)
        out.append(jnp.asarray(y, dt))
    if X_aug is not None:
        V.check_array_values("X_aug", X_aug)
        out.append(jnp.asarray(X_aug, dt))
    return out


def _check_lam(lam):
    if lam is None:
        return None
    if V.is_concrete(lam):
        arr = np.asarray(lam)
        if arr.shape != ():
            raise ValueError(f"lam must be a scalar; got shape {arr.shape}")
        if not np.isfinite(arr) or arr < 0:
            raise ValueError(f"lam must be a finite number >= 0 (None: the hard constraint); "
                             f"got {lam!r}")
    return lam


def _check_pos_float(name: str, value, *, allow_none: bool = False, allow_zero: bool = False):
    if value is None and allow_none:
        return None
    if V.is_concrete(value):
        arr = np.asarray(value)
        if arr.shape != () or not np.isfinite(arr) or (arr < 0 if allow_zero else arr <= 0):
            rng = ">= 0" if allow_zero else "> 0"
            raise ValueError(f"{name} must be a finite number {rng}; got {value!r}")
    return value


def _check_params(params, d: int | None = None) -> TwoLayerParams:
    if not isinstance(params, TwoLayerParams):
        raise TypeError(f"params must be a TwoLayerParams(B, w); got {type(params).__name__}")
    B, w = params
    if B.ndim != 2 or w.ndim != 1 or B.shape[1] != w.shape[0]:
        raise ValueError(f"params must have B of shape (d, width) and w of shape (width,); "
                         f"got B {tuple(B.shape)}, w {tuple(w.shape)}")
    if d is not None and B.shape[0] != d:
        raise ValueError(f"params.B has {B.shape[0]} rows but X has d = {d} columns")
    return params


def _dtype_arg(dtype) -> np.dtype:
    return V.default_float() if dtype is None else V.check_dtype("dtype", dtype,
                                                                 allow_complex=False)


# ======================================================================================
# data: teacher, augmentations, problem draws
# ======================================================================================
def make_teacher(key, d: int, q: int, d_causal: int, *, dtype=None) -> TwoLayerParams:
    """Ground truth ``h*(x) = (x^T B*)_+ w*``: unit columns supported on the first
    ``d_causal`` coordinates, ``w* = +-1``.

    Args:
      key: PRNG key. d, q, d_causal: static sizes. dtype: float dtype.

    Returns:
      :class:`TwoLayerParams` ``(B* (d, q), w* (q,))``.
    """
    key = V.check_key(key)
    d = V.check_int("d", d, low=1)
    q = V.check_int("q", q, low=1)
    d_causal = V.check_int("d_causal", d_causal, low=1, high=d, high_desc="d")
    return _teacher(key, d, q, d_causal, _dtype_arg(dtype).name)


@jit(static_argnums=(1, 2, 3, 4), fast_cpu_compile=False)
def _teacher(key, d, q, d_causal, dt) -> TwoLayerParams:
    dt = np.dtype(dt)
    G = jax.random.normal(key, (d_causal + 1, q), dt)
    w = jnp.where(G[-1] >= 0, 1.0, -1.0).astype(dt)          # random signs
    G = G[:-1] / jnp.linalg.norm(G[:-1], axis=0, keepdims=True)
    B = jnp.zeros((d, q), dt).at[:d_causal].set(G)
    return TwoLayerParams(B, w)


def augment(key, X: Float[Array, "n d"], alpha: int, d_aug, *,
            aug_scale: float = 1.0) -> Float[Array, "alpha n d"]:
    """``alpha`` augmentations ``x_{i,j} = x_i + aug_scale [0; z_{i,j}]``, ``z ~ N(0, I)``
    on the last ``d_aug`` coordinates (label invariant when ``h*`` ignores them).

    Args:
      key: PRNG key. X: ``(N, d)``. alpha: static int >= 1. d_aug: may be traced.
      aug_scale: perturbation std > 0.

    Returns:
      ``X_aug``, ``(alpha, N, d)``.
    """
    key = V.check_key(key)
    (X,) = _check_xy(X, need_aug=False)
    alpha = V.check_int("alpha", alpha, low=1)
    d = X.shape[1]
    if V.is_concrete(d_aug):
        if isinstance(d_aug, bool) or not isinstance(d_aug, (numbers.Integral, np.ndarray,
                                                             jax.Array)):
            raise TypeError(f"d_aug must be an int; got {type(d_aug).__name__}")
        v = int(np.asarray(d_aug))
        if v < 0 or v > d:
            raise ValueError(f"d_aug must be in [0, d] = [0, {d}]; got {v}")
    _check_pos_float("aug_scale", aug_scale)
    return _augment(key, X, alpha, d_aug, aug_scale)


@jit(static_argnums=(2,), fast_cpu_compile=False)
def _augment(key, X, alpha, d_aug, aug_scale):
    d = X.shape[1]
    mask = (jnp.arange(d) >= d - d_aug).astype(X.dtype)
    Z = jax.random.normal(key, (alpha,) + X.shape, X.dtype)
    return X[None] + (aug_scale * mask) * Z


@dataclasses.dataclass(frozen=True)
class DataShape:
    """The static sizes of a two-layer problem (:func:`make_data`; one compilation each):
    ``n`` samples in ``d`` dimensions, a teacher of width ``q`` on the first ``d_causal``
    coordinates, ``alpha`` augmentations per sample, ``n_test`` test points (Section 4.6.1).
    Every size is a Python int ``>= 1``, ``d_causal <= d``."""

    n: int
    d: int
    q: int
    d_causal: int
    alpha: int
    n_test: int

    def __post_init__(self):
        for name in ("n", "d", "q", "alpha", "n_test"):
            V.check_int(name, getattr(self, name), low=1)
        V.check_int("d_causal", self.d_causal, low=1, high=self.d, high_desc="d")


def make_data(key, shape: DataShape, *, d_aug, sigma: float, aug_scale: float = 1.0,
              teacher: TwoLayerParams | None = None, dtype=None) -> TwoLayerData:
    """Draw teacher, ``(X, y)``, augmentations and a test set (Section 4.6.1).

    Args:
      key: PRNG key. shape: :class:`DataShape` (the static sizes).
      d_aug: ``<= d - d_causal`` (may be traced). sigma: label noise std.
      aug_scale: see :func:`augment`. teacher: optional fixed ground truth. dtype: float dtype.

    Returns:
      :class:`TwoLayerData`.
    """
    key = V.check_key(key)
    if not isinstance(shape, DataShape):
        raise TypeError(f"shape must be a DataShape(n, d, q, d_causal, alpha, n_test); got "
                        f"{type(shape).__name__}")
    d, d_causal = shape.d, shape.d_causal
    if V.is_concrete(d_aug) and not 0 <= int(np.asarray(d_aug)) <= d - d_causal:
        raise ValueError(f"d_aug must be in [0, d - d_causal] = [0, {d - d_causal}] so that the "
                         f"augmentations are label invariant; got {int(np.asarray(d_aug))}")
    _check_pos_float("sigma", sigma, allow_zero=True)
    _check_pos_float("aug_scale", aug_scale)
    dt = _dtype_arg(dtype)
    if teacher is not None:
        teacher = _check_params(teacher, d)
        teacher = TwoLayerParams(jnp.asarray(teacher.B, dt), jnp.asarray(teacher.w, dt))
    return _make_data(key, d_aug, jnp.asarray(sigma, dt), jnp.asarray(aug_scale, dt), teacher,
                      shape, dt.name)


@jit(static_argnames=("shape", "dtype"), fast_cpu_compile=False)
def _make_data(key, d_aug, sigma, aug_scale, teacher, shape: DataShape, dtype: str
               ) -> TwoLayerData:
    n, d, q, d_causal = shape.n, shape.d, shape.q, shape.d_causal
    alpha, n_test = shape.alpha, shape.n_test
    dt = np.dtype(dtype)
    kt, kg = jax.random.split(key)
    if teacher is None:
        teacher = _teacher(kt, d, q, d_causal, dt.name)
    # one Gaussian draw, sliced (a single threefry instance keeps the compilation small)
    sizes = (n * d, n, alpha * n * d, n_test * d)
    g = jax.random.normal(kg, (sum(sizes),), dt)
    X, eps, Z, X_test = (p.reshape(shape) for p, shape in zip(
        jnp.split(g, np.cumsum(sizes)[:-1]), ((n, d), (n,), (alpha, n, d), (n_test, d))))
    f_X = predict(teacher, X)
    y = f_X + sigma * eps
    mask = (jnp.arange(d) >= d - d_aug).astype(dt)
    X_aug = X[None] + (aug_scale * mask) * Z
    return TwoLayerData(X, y, X_aug, f_X, X_test, predict(teacher, X_test), teacher)


# ======================================================================================
# model and objectives
# ======================================================================================
def first_layer(params: TwoLayerParams, X: Float[Array, "... d"]) -> Float[Array, "... q"]:
    """The representation ``phi(x) = (x^T B)_+`` (the DAC-regularised layer)."""
    return jax.nn.relu(jnp.matmul(X, params.B, precision=HIGHEST))


def predict(params: TwoLayerParams, X: Float[Array, "... d"]) -> Float[Array, "..."]:
    """``h(x) = (x^T B)_+ w`` for every row of ``X``."""
    return jnp.matmul(first_layer(params, X), params.w, precision=HIGHEST)


def da_erm_loss(params: TwoLayerParams, X: Float[Array, "n d"], y: Float[Array, " n"],
                X_aug: Float[Array, "alpha n d"]) -> Array:
    """DA-ERM objective (Eq. (4.3), square loss), averaged over the
    originals and augmentations.
    """
    r0 = predict(params, X) - y
    ra = predict(params, X_aug) - y[None]
    n_all = (1 + X_aug.shape[0]) * X.shape[0]
    return (jnp.sum(r0 * r0) + jnp.sum(ra * ra)) / (2 * n_all)


def consistency_penalty(params: TwoLayerParams, X: Float[Array, "n d"],
                        X_aug: Float[Array, "alpha n d"]) -> Array:
    """DAC penalty ``1/(alpha N) sum ||phi(x_{i,j}) - phi(x_i)||^2`` on the
    first layer (Eq. (4.1)).
    """
    diff = first_layer(params, X_aug) - first_layer(params, X)[None]
    return jnp.sum(diff * diff) / (X_aug.shape[0] * X.shape[0])


def dac_loss(params: TwoLayerParams, X: Float[Array, "n d"], y: Float[Array, " n"],
             X_aug: Float[Array, "alpha n d"], lam=0.0) -> Array:
    """Soft DAC objective (Eq. (4.1)): the square loss on the originals plus
    ``lam`` times :func:`consistency_penalty` (``lam = 0``: ERM on the originals).
    """
    r = predict(params, X) - y
    return jnp.sum(r * r) / (2 * X.shape[0]) + lam * consistency_penalty(params, X, X_aug)


def excess_risk(params: TwoLayerParams, X: Float[Array, "n d"], f_X: Float[Array, " n"]) -> Array:
    """``1/n ||h(X) - h*(X)||^2`` (Theorem B.2; fixed-design on
    the training inputs, population on fresh inputs).
    """
    r = predict(params, X) - f_X
    return jnp.mean(r * r)


# ======================================================================================
# constraints
# ======================================================================================
def augmentation_subspace(X: Float[Array, "n d"], X_aug: Float[Array, "alpha n d"], *,
                          rtol: float | None = None) -> AugmentationSubspace:
    """Projectors onto ``null(Delta)`` and ``range(Delta^T)`` from the SVD
    of ``Delta``; singular values below ``rtol * max(s_1, ||M X||_F)`` count as zero.

    Args:
      X: ``(N, d)``. X_aug: ``(alpha, N, d)``. rtol: default ``max(alpha N, d) eps``.

    Returns:
      :class:`AugmentationSubspace` (jittable; the rank is a mask).
    """
    X, X_aug = _check_xy(X, None, X_aug)
    return _subspace(X, X_aug, None if rtol is None else float(rtol))


@jit(static_argnames=("rtol",), fast_cpu_compile=False)
def _subspace(X, X_aug, rtol=None) -> AugmentationSubspace:
    d = X.shape[1]
    D = (X_aug - X[None]).reshape(-1, d)
    if rtol is None:
        rtol = max(D.shape) * float(jnp.finfo(D.dtype).eps)
    _, s, Vt = jnp.linalg.svd(D, full_matrices=False)
    # Relative to the data, not only to s_1(Delta): under jit XLA may evaluate x_i in two
    # fusions with different roundings, so an "unperturbed" coordinate differs by ~eps |x|.
    scale = jnp.maximum(s[0], np.sqrt(X_aug.shape[0]) * jnp.linalg.norm(X))
    keep = s > rtol * scale         # all False when Delta = 0
    Vk = Vt * keep[:, None].astype(Vt.dtype)
    P_range = jnp.matmul(Vk.T, Vk, precision=HIGHEST)
    P_null = jnp.eye(d, dtype=X.dtype) - P_range
    return AugmentationSubspace(P_null, P_range, jnp.sum(keep).astype(jnp.int32))


def c_null(X: Float[Array, "n d"], P_null: Float[Array, "d d"]) -> Array:
    """``C_null = sqrt(1/N sum ||P_null x_i||^2)`` (Theorem B.2)."""
    Z = jnp.matmul(X, P_null, precision=HIGHEST)
    return jnp.sqrt(jnp.mean(jnp.sum(Z * Z, axis=1)))


def project_l1_ball(v: Float[Array, " q"], radius) -> Float[Array, " q"]:
    """Euclidean projection onto ``{w : ||w||_1 <= radius}`` (Duchi et al. 2008)."""
    a = jnp.abs(v)
    u = jnp.sort(a)[::-1]
    css = jnp.cumsum(u)
    k = jnp.arange(1, v.shape[0] + 1, dtype=v.dtype)
    cond = u - (css - radius) / k > 0
    rho = jnp.maximum(jnp.sum(cond), 1)
    theta = (css[rho - 1] - radius) / rho.astype(v.dtype)
    w = jnp.sign(v) * jnp.maximum(a - theta, 0)
    return jnp.where(jnp.sum(a) <= radius, v, w)


def project_params(params: TwoLayerParams, *, P_null: Float[Array, "d d"] | None = None,
                   c_w=None) -> TwoLayerParams:
    """Project onto the class ``H``: unit columns (in ``null(Delta)`` with
    ``P_null``, the hard DAC set) and ``||w||_1 <= c_w``. An infeasible column becomes NaN.
    """
    B = params.B
    if P_null is not None:
        B = jnp.matmul(P_null, B, precision=HIGHEST)
    B = B / jnp.linalg.norm(B, axis=0, keepdims=True)
    w = params.w if c_w is None else project_l1_ball(params.w, c_w)
    return TwoLayerParams(B, w)


def init_params(key, d: int, width: int, *, P_null: Float[Array, "d d"] | None = None,
                c_w=None, dtype=None) -> TwoLayerParams:
    """Random feasible start: Gaussian columns projected by :func:`project_params`,
    ``w ~ N(0, 1/width)``.
    """
    key = V.check_key(key)
    d = V.check_int("d", d, low=1)
    width = V.check_int("width", width, low=1)
    return _init_jit(key, P_null, c_w, d=d, width=width, dt=_dtype_arg(dtype).name)


@jit(static_argnames=("d", "width", "dt"), fast_cpu_compile=False)
def _init_jit(key, P_null, c_w, *, d, width, dt):
    return _init(key, d, width, P_null, c_w, np.dtype(dt))


def _init(key, d, width, P_null, c_w, dt) -> TwoLayerParams:
    G = jax.random.normal(key, (d + 1, width), dt)
    B, w = G[:d], G[d] / np.sqrt(width)
    return project_params(TwoLayerParams(B, w), P_null=P_null, c_w=c_w)


# ======================================================================================
# training
# ======================================================================================
def make_train_step(optimizer: optax.GradientTransformation, method: str, *, lam=None,
                    c_w=None):
    """A pure projected step ``step(params, opt_state, X, y, X_aug, P_null) ->
    (params, opt_state, loss)`` of DA-ERM or DAC.

    Args:
      optimizer: an optax transformation. method: ``"da_erm"`` or ``"dac"``.
      lam: DAC only: ``None`` (hard constraint, needs ``P_null``) or a number ``>= 0``.
      c_w: l1 radius of ``w`` (``None``: unconstrained).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}; got {method!r}")
    if method == "da_erm" and lam is not None:
        raise ValueError("lam is a DAC setting; pass lam=None with method='da_erm'")
    lam = _check_lam(lam)
    c_w = _check_pos_float("c_w", c_w, allow_none=True)
    hard = method == "dac" and lam is None

    def objective(params, X, y, X_aug):
        if method == "da_erm":
            return da_erm_loss(params, X, y, X_aug)
        return dac_loss(params, X, y, X_aug, 0.0 if hard else lam)

    def step(params, opt_state, X, y, X_aug, P_null=None):
        loss, g = jax.value_and_grad(objective)(params, X, y, X_aug)
        updates, opt_state = optimizer.update(g, opt_state, params)
        params = optax.apply_updates(params, updates)
        params = project_params(params, P_null=P_null if hard else None, c_w=c_w)
        return params, opt_state, loss

    return step


@dataclasses.dataclass(frozen=True)
class _FitConfig:
    """Static settings of the training scan (hashable; one compilation each). ``optimizer``
    is an optax transformation (hashed by identity) or None for the default Adam."""

    method: str
    hard: bool
    width: int
    steps: int
    optimizer: Any = None


@dataclasses.dataclass(frozen=True)
class FitOptions:
    """How :func:`fit_da_erm` and :func:`fit_dac` train: ``width`` of the student and
    ``steps`` (static ints ``>= 1``), ``learning_rate`` (peak step of the default cosine Adam,
    > 0), ``c_w`` (l1 radius of ``w``; None: unconstrained; may be traced) and ``optimizer``
    (an optax transformation replacing the default, static)."""

    width: int = 8
    steps: int = 2000
    learning_rate: float = 1e-2
    c_w: Any = None
    optimizer: Any = None

    def __post_init__(self):
        V.check_int("width", self.width, low=1)
        V.check_int("steps", self.steps, low=1)
        _check_pos_float("c_w", self.c_w, allow_none=True)
        if self.optimizer is not None and not isinstance(self.optimizer,
                                                         optax.GradientTransformation):
            raise TypeError("optimizer must be an optax.GradientTransformation or None; got "
                            f"{type(self.optimizer).__name__}")
        if self.optimizer is None:
            _check_pos_float("learning_rate", self.learning_rate)


@dataclasses.dataclass(frozen=True)
class _FitSpec:
    """The user's training options, before validation (see :func:`fit_dac`)."""

    method: str
    lam: Any
    width: Any
    steps: Any
    learning_rate: Any
    c_w: Any
    optimizer: Any


@jit(static_argnames=("cfg",), fast_cpu_compile=False)
def _fit(key, X, y, X_aug, lam, c_w, learning_rate, cfg: _FitConfig):
    method, hard, width, steps, optimizer = (cfg.method, cfg.hard, cfg.width, cfg.steps,
                                             cfg.optimizer)
    if optimizer is None:
        optimizer = optax.adam(optax.cosine_decay_schedule(learning_rate, steps))
    P_null = _subspace(X, X_aug).P_null if hard else None
    step = make_train_step(optimizer, method, lam=None if (hard or method == "da_erm") else lam,
                           c_w=c_w)
    params = _init(key, X.shape[1], width, P_null, c_w, X.dtype)

    def body(carry, _):
        p, s = carry
        p, s, loss = step(p, s, X, y, X_aug, P_null)
        return (p, s), loss

    (params, _), losses = jax.lax.scan(body, (params, optimizer.init(params)), None,
                                       length=steps)
    return FitResult(params, losses)


def _fit_checked(key, X, y, X_aug, spec: _FitSpec):
    method, optimizer, learning_rate = spec.method, spec.optimizer, spec.learning_rate
    width, steps, lam, c_w = spec.width, spec.steps, spec.lam, spec.c_w
    key = V.check_key(key)
    X, y, X_aug = _check_xy(X, y, X_aug)
    width = V.check_int("width", width, low=1)
    steps = V.check_int("steps", steps, low=1)
    lam = _check_lam(lam)
    c_w = _check_pos_float("c_w", c_w, allow_none=True)
    if optimizer is not None and not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError("optimizer must be an optax.GradientTransformation or None; got "
                        f"{type(optimizer).__name__}")
    if optimizer is None:
        _check_pos_float("learning_rate", learning_rate)
    hard = method == "dac" and lam is None
    if hard and V.is_concrete(X) and V.is_concrete(X_aug):
        d = X.shape[1]
        r = int(_subspace(X, X_aug).rank)
        if r >= d:
            raise ValueError(f"the augmentations perturb all d = {d} directions (rank(Delta) = "
                             f"{r}): the hard DAC constraint leaves no unit-norm first layer; "
                             "use a finite lam or weaker augmentations")
    dt = X.dtype
    lam_arr = jnp.asarray(0.0 if lam is None else lam, dt)
    cw_arr = None if c_w is None else jnp.asarray(c_w, dt)
    return _fit(key, X, y, X_aug, lam_arr, cw_arr, jnp.asarray(learning_rate, dt),
                _FitConfig(method, hard, width, steps, optimizer))


def _fit_spec(method: str, lam, options: FitOptions) -> _FitSpec:
    if not isinstance(options, FitOptions):
        raise TypeError(f"options must be a FitOptions; got {type(options).__name__}")
    return _FitSpec(method, lam, options.width, options.steps, options.learning_rate,
                    options.c_w, options.optimizer)


def fit_da_erm(key, X: Float[Array, "n d"], y: Float[Array, " n"],
               X_aug: Float[Array, "alpha n d"], *,
               options: FitOptions = FitOptions()) -> FitResult:
    """Train ``h`` by DA-ERM (Eq. (4.3)): full-batch projected steps in one
    ``lax.scan`` (vmap over ``key`` for seeds).

    Args:
      key: PRNG key. X: ``(N, d)``; y: ``(N,)``; X_aug: ``(alpha, N, d)``.
      options: :class:`FitOptions` (``width``, ``steps``, ``learning_rate``, ``c_w``,
        ``optimizer``).

    Returns:
      :class:`FitResult`.

    Raises:
      ValueError / TypeError: bad shapes, ``width < 1``, non-finite data, bad ``c_w`` or rate.
    """
    return _fit_checked(key, X, y, X_aug, _fit_spec("da_erm", None, options))


def fit_dac(key, X: Float[Array, "n d"], y: Float[Array, " n"],
            X_aug: Float[Array, "alpha n d"], lam=None, *,
            options: FitOptions = FitOptions()) -> FitResult:
    """Train ``h`` with DAC on the first layer: the hard constraint ``B = P_null B``
    (``lam=None``, the estimator of Theorem B.2) or the soft penalty.

    Args:
      key, X, y, X_aug, options: as :func:`fit_da_erm`.
      lam: ``None`` or a finite number ``>= 0``.

    Returns:
      :class:`FitResult` (``losses``: the DAC objective).

    Raises:
      ValueError / TypeError: as :func:`fit_da_erm`, ``lam < 0``, and ``rank(Delta) = d`` for
      the hard constraint (under an outer jit: NaN parameters).
    """
    return _fit_checked(key, X, y, X_aug, _fit_spec("dac", lam, options))
