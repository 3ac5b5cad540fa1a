"""Randomized pivoting-based skeleton selection (thesis Chapter 2, ``ch:cur``).

The general framework (Algorithm ``algo:sketch_pivot_CUR_general``), read top to bottom:

1. draw an embedding and build a *row-basis approximator* ``X`` (l x n) of ``A`` (m x n)
   (:func:`row_basis`);
2. pivot on the columns of ``X`` -> column skeletons ``cols`` (|cols| = k), interpolation
   matrix ``W = X_1^+ X`` and certificate ``eta`` (:func:`pivot_columns`);
3. pivot on the rows of ``C = A(:, cols)`` -> row skeletons ``rows`` (:func:`pivot_rows`).

What to do at each line is described by small frozen, hashable *choice objects*, passed as
one static argument (like lineax's solver objects):

* a pivoting scheme: :class:`LUPP` (default), :class:`CPQR`, :class:`DEIM`,
  :class:`Leverage`, :class:`SRCUR`;
* a sketch: :class:`rdr_jax.sketching.Gaussian` (default), ``SRTT``, ``SparseSign``;
* both together with the power iterations, oversampling and interpolation: :class:`Method`.

Strings are the friendly spelling of these objects: ``method="Rand-LUPP-1piter"`` is
``Method(pivot=LUPP(), power_iters=1)``, ``sketch="sparse_sign"`` is ``SparseSign()``
(:func:`resolve_method`). The thesis' named algorithms (:data:`VARIANTS`):

===================  ====================================================  ===============
name                 row-basis approximator X                              pivoting
===================  ====================================================  ===============
Rand-LUPP            ``Gamma A``  (Algorithm ``algo:rand-id-lupp``)          LUPP on X^T
Rand-LUPP-1piter     ``Omega A^H A`` (one power iteration,                  LUPP on X^T
                     Eq. ``eq:def_power_iter``)
Rand-CPQR            ``Gamma A`` (Voronin-Martinsson 2017)                   CPQR on X
Rand-CPQR-1piter     ``Omega A^H A``                                        CPQR on X
RSVD-DEIM            ``V_k^H`` from a rank-k rSVD (Eq. ``eq:rsvd_procedures``) LUPP on V_k^H
RSVD-LS              ``V_k^H`` from a rank-k rSVD                            leverage scores
SRCUR                ``Gamma A``                                            CPQR + swaps
===================  ====================================================  ===============

Every selection returns the interpolation matrix ``W = X_1^+ X`` (``X_1 = X(:, cols)``) and
the a-posteriori factor ``eta = sqrt(1 + ||X_1^+ X_2||_2^2)`` of Thm
``thm:pivoting_on_rangeapprox_error_bound``:

    ``||A - C C^+ A|| <= eta ||A - A W^+ W||``   (spectral and Frobenius norms),

where ``W`` (k x n, ``W(:, cols) = I``) spans a subspace of the row space of ``X``.

SRCUR (Chen et al. 2020): a randomized complete-pivoting-type selection on a sketch, then
spectrum-revealing swaps that increase the pivot-block volume by a factor > g until every
interpolation coefficient is at most g (:func:`rdr_jax.pivoting.maxvol_refine`), for columns
and rows. Not implemented from the paper: its swap test on the Schur complement of the full
``A`` (O(mn) per test), so the paper's gap-dependent bound is not certified; the ``eta``
certificate holds instead. (The authors' thesis code for SRCUR was broken.)

Vocabulary used across rdr_jax: skeleton indices ``cols``/``rows``; interpolation matrix
``W`` (``A ~ C W`` for columns, ``A ~ W R`` for rows); ``power_iters``; ``stable``
(default ``True`` everywhere); the key is always the first argument.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, ClassVar, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np

from rdr_jax import _jit
from rdr_jax import _validation as V
from rdr_jax import pivoting as P
from rdr_jax._tallqr import as_orthonormalizer
from rdr_jax.operators import HIGHEST, LinearOperator, as_operator
from rdr_jax.randomized_svd import orth, power_range
from rdr_jax.sketching import Gaussian, as_sketch

__all__ = ["LUPP", "CPQR", "DEIM", "Leverage", "SRCUR", "Method", "VARIANTS", "THESIS_NAMES",
           "PIVOTS", "resolve_method", "sketch_size", "ColumnSelection", "RowSelection",
           "Skeletons", "select_columns", "select_rows", "select_skeletons", "row_basis",
           "pivot_columns", "pivot_rows"]


# --------------------------------------------------------------------------------------
# pivoting choices
# --------------------------------------------------------------------------------------
class _Pivot:
    """Shared part of the pivoting choices: what Lines 2-4 do for this scheme."""

    #: Line 1-2: ``"sketch"`` (X = Gamma A or a power iteration of it) or ``"svd"``
    #: (X = V_k^H from a rank-k rSVD, whose U_k the row step uses)
    basis: ClassVar[str] = "sketch"
    #: default oversampling l - k (implementation notes: k + 10 for pivoting on sketches,
    #: k + 5 for the rSVD-based methods)
    default_oversample: ClassVar[int] = 10

    def check_backend(self) -> None:
        """Raise :class:`rdr_jax.pivoting.BackendError` where the scheme has no lowering."""

    def select(self, key, X, k: int):
        """Line 3: k column pivots of the l x n approximator ``X``."""
        raise NotImplementedError

    def select_rows(self, key, C, Uk, k: int):
        """Line 4: k row pivots of ``C = A(:, cols)`` (or of the rSVD's ``U_k``)."""
        return self.select(key, C.T, k)

    def refine(self, W, idx):
        """Post-processing of ``(W, idx)`` (SRCUR's swaps); identity by default."""
        return W, idx


@dataclasses.dataclass(frozen=True)
class LUPP(_Pivot):
    """LU with partial pivoting on ``X^T`` (Eq. ``eq:def_LUPP``; every backend)."""

    def select(self, key, X, k):
        return P.lupp(X, k)


def _cpqr_backend(impl: str, what: str) -> None:
    if impl == "lapack" and not P.cpqr_available():
        raise P.BackendError(
            f"{what} needs column-pivoted QR (geqp3), which has no lowering on backend "
            f"{jax.default_backend()!r}; use LUPP() or {what}(impl='xla') (portable)")


@dataclasses.dataclass(frozen=True)
class CPQR(_Pivot):
    """Column-pivoted QR on ``X`` (Eq. ``eq:def_QRCP``); ``impl="lapack"`` (geqp3; CPU/GPU)
    or ``"xla"`` (pivoted Gram-Schmidt; every backend, TPU included)."""

    impl: str = "lapack"

    def __post_init__(self):
        if self.impl not in ("lapack", "xla"):
            raise ValueError(f"impl must be 'lapack' or 'xla'; got {self.impl!r}")

    def check_backend(self):
        _cpqr_backend(self.impl, "CPQR")

    def select(self, key, X, k):
        return P.cpqr(X, k, impl=self.impl)


@dataclasses.dataclass(frozen=True)
class DEIM(_Pivot):
    """DEIM = LUPP on the rSVD's ``V_k^H`` (columns) and ``U_k^T`` (rows)."""

    basis: ClassVar[str] = "svd"
    default_oversample: ClassVar[int] = 5

    def select(self, key, X, k):
        return P.lupp(X, k)

    def select_rows(self, key, C, Uk, k):
        return P.lupp(Uk.T, k)


@dataclasses.dataclass(frozen=True)
class Leverage(_Pivot):
    """Leverage scores of the rSVD's ``V_k^H`` / ``U_k``: ``mode="sample"`` (without
    replacement, Gumbel top-k) or ``"topk"`` (deterministic, as the authors' code)."""

    mode: str = "sample"

    basis: ClassVar[str] = "svd"
    default_oversample: ClassVar[int] = 5

    def __post_init__(self):
        if self.mode not in ("sample", "topk"):
            raise ValueError(f"mode must be 'sample' or 'topk'; got {self.mode!r}")

    def select(self, key, X, k):
        return P.leverage(key, X, k, mode=self.mode)

    def select_rows(self, key, C, Uk, k):
        return P.leverage(key, Uk.T, k, mode=self.mode)


@dataclasses.dataclass(frozen=True)
class SRCUR(_Pivot):
    """CPQR on the sketch, then spectrum-revealing swaps until every interpolation
    coefficient is at most ``g`` (> 1), at most ``max_swaps`` of them; rows by LUPP on C
    plus the same swaps."""

    g: float = 1.1
    max_swaps: int = 256
    impl: str = "lapack"

    def __post_init__(self):
        if not (isinstance(self.g, (int, float)) and self.g > 1.0):
            raise ValueError(f"g (SRCUR swap tolerance) must be a number > 1; got {self.g!r}")
        V.check_int("max_swaps", self.max_swaps, low=0)
        if self.impl not in ("lapack", "xla"):
            raise ValueError(f"impl must be 'lapack' or 'xla'; got {self.impl!r}")

    def check_backend(self):
        _cpqr_backend(self.impl, "SRCUR")

    def select(self, key, X, k):
        return P.cpqr(X, k, impl=self.impl)

    def select_rows(self, key, C, Uk, k):
        return P.lupp(C.T, k)

    def refine(self, W, idx):
        idx, W, _ = P.maxvol_refine(W, idx, g=self.g, max_swaps=self.max_swaps)
        return P.interpolation(W, idx), idx  # re-anchor W(:, idx) = I after the updates


PivotChoice = Union[LUPP, CPQR, DEIM, Leverage, SRCUR]
#: friendly spelling of each pivoting choice
PIVOTS: dict[str, type] = {"lupp": LUPP, "cpqr": CPQR, "deim": DEIM, "leverage": Leverage,
                           "srcur": SRCUR}
_ALIASES = {"ls": "leverage", "lu": "lupp", "qr": "cpqr", "qrcp": "cpqr"}
#: thesis variant name -> (pivoting name, power iterations)
VARIANTS = {
    "rand-lupp": ("lupp", 0),
    "rand-lupp-1piter": ("lupp", 1),
    "rand-cpqr": ("cpqr", 0),
    "rand-cpqr-1piter": ("cpqr", 1),
    "rsvd-deim": ("deim", 0),
    "rsvd-ls": ("leverage", 0),
    "srcur": ("srcur", 0),
}
THESIS_NAMES = {"rand-lupp": "Rand-LUPP", "rand-lupp-1piter": "Rand-LUPP-1piter",
                "rand-cpqr": "Rand-CPQR", "rand-cpqr-1piter": "Rand-CPQR-1piter",
                "rsvd-deim": "RSVD-DEIM", "rsvd-ls": "RSVD-LS", "srcur": "SRCUR"}


@dataclasses.dataclass(frozen=True)
class Method:
    """Everything static about a skeleton selection / ID / CUR, as one hashable object.

    Attributes:
      pivot: pivoting scheme (:class:`LUPP`, :class:`CPQR`, :class:`DEIM`,
        :class:`Leverage`, :class:`SRCUR`).
      sketch: embedding (``Gaussian()``, ``SRTT()``, ``SparseSign(zeta)``).
      power_iters: q, power iterations in the row-basis approximator (Eq.
        ``eq:def_power_iter``; for DEIM/leverage: in the rSVD).
      stable: re-orthonormalise between half power iterations (Eq. ``eq:ortho_power_iter``;
        default ``True`` as everywhere in rdr_jax). For LUPP the pivots equal the plain
        iteration's in exact arithmetic (the two X differ by a triangular factor).
      oversample: ``l - k``; ``None`` means the pivot's default (10 on sketches, 5 for
        the rSVD-based DEIM/leverage).
      interp: interpolation matrix of an ID: ``"exact"`` (``W = C^+ A``, one more pass over
        A; the best coefficients for the skeleton) or ``"sketch"`` (``W = X_1^+ X``, no
        extra pass: the classic randomized ID).
      orthonormalize: orthonormalisation of the tall bases of the power iterations and of
        the rSVD (DEIM/leverage): ``"auto"`` (default: CholeskyQR2 when A's rows are
        sharded over devices, resolved at the entry points from the concrete input;
        Householder otherwise), ``"householder"``, ``"cholesky_qr2"`` or a choice object
        (see :func:`rdr_jax.randomized_svd.rangefinder`). Skeletons do not depend on it
        beyond rounding.

    Example:
      >>> m = Method(pivot=CPQR(), sketch=SparseSign(zeta=4), power_iters=1)
      >>> cur(key, A, 20, method=m)
    """

    pivot: Any = LUPP()
    sketch: Any = Gaussian()
    power_iters: int = 0
    stable: bool = True
    oversample: Optional[int] = None
    interp: str = "exact"
    orthonormalize: Any = "auto"

    def __post_init__(self):
        if not isinstance(self.pivot, _Pivot):
            raise TypeError(f"pivot must be LUPP(), CPQR(), DEIM(), Leverage() or SRCUR(); "
                            f"got {self.pivot!r}")
        object.__setattr__(self, "sketch", as_sketch(self.sketch))
        V.check_int("power_iters", self.power_iters, low=0)
        if not isinstance(self.stable, (bool, np.bool_)):
            raise TypeError(f"stable must be a bool; got {self.stable!r}")
        object.__setattr__(self, "stable", bool(self.stable))
        if self.oversample is not None:
            V.check_int("oversample", self.oversample, low=0)
        if self.interp not in ("exact", "sketch"):
            raise ValueError(f"interp must be 'exact' or 'sketch'; got {self.interp!r}")
        if not (isinstance(self.orthonormalize, str)
                and self.orthonormalize.strip().lower() in ("auto", "cholesky_qr2")):
            # validate (and normalise) everything but the input-dependent spellings
            object.__setattr__(self, "orthonormalize", as_orthonormalizer(self.orthonormalize))

    def for_operator(self, op, adjoint: bool = False) -> "Method":
        """The method with ``orthonormalize="auto"``/``"cholesky_qr2"`` resolved for the
        concrete input ``op`` (its row sharding; see
        ``rdr_jax._tallqr.as_orthonormalizer``), or for ``op^H`` with ``adjoint=True`` (the
        operator a row ID runs its column ID on: its rows are op's columns)."""
        return dataclasses.replace(self, orthonormalize=as_orthonormalizer(
            self.orthonormalize, op, adjoint))

    def replace(self, **changes) -> "Method":
        """A copy with the given fields changed (``None`` values are ignored)."""
        changes = {k: v for k, v in changes.items() if v is not None}
        return dataclasses.replace(self, **changes) if changes else self


def resolve_method(method: Any = "lupp", *, sketch: Any = None, power_iters: int | None = None,
                   stable: bool | None = None, oversample: int | None = None,
                   interp: str | None = None, orthonormalize: Any = None) -> Method:
    """The :class:`Method` for a name, a pivoting choice or a Method, with overrides.

    ``method`` is a :class:`Method`, a pivoting choice (``LUPP()``, ``CPQR(impl="xla")``,
    ...), a base name (``"lupp"``, ``"cpqr"``, ``"deim"``, ``"leverage"``/``"ls"``,
    ``"srcur"``) or a thesis variant from :data:`VARIANTS` (case-insensitive, e.g.
    ``"Rand-LUPP-1piter"``, which sets ``power_iters=1``). Keyword arguments that are not
    ``None`` override the corresponding fields (an explicit ``power_iters`` overrides the
    variant's).
    """
    if isinstance(method, Method):
        base = method
    elif isinstance(method, _Pivot):
        base = Method(pivot=method)
    elif isinstance(method, str):
        name = method.strip().lower()
        name = _ALIASES.get(name, name)
        if name in VARIANTS:
            pname, q = VARIANTS[name]
        elif name in PIVOTS:
            pname, q = name, 0
        else:
            raise ValueError(f"unknown method {method!r}; choose one of {list(PIVOTS)}, a "
                             f"thesis variant {list(THESIS_NAMES.values())}, a pivoting "
                             "object (LUPP(), CPQR(), ...) or a Method")
        base = Method(pivot=PIVOTS[pname](), power_iters=q)
    else:
        raise TypeError(f"method must be a name, a pivoting object or a Method; "
                        f"got {type(method).__name__}")
    return base.replace(sketch=None if sketch is None else as_sketch(sketch),
                        power_iters=power_iters, stable=stable, oversample=oversample,
                        interp=interp, orthonormalize=orthonormalize)


def sketch_size(method: Method, k: int, shape: tuple[int, int], l: int | None = None) -> int:
    """``l = min(k + oversample, m, n)``, or the explicit ``l`` checked against
    ``k <= l <= min(m, n)``."""
    m, n = shape
    if l is None:
        p = method.oversample if method.oversample is not None else \
            method.pivot.default_oversample
        return min(k + p, m, n)
    return V.check_int("l", l, low=k, high=min(m, n),
                       high_desc=f"min(m, n) for A of shape {(m, n)}")


def check_rank(k: Any, shape: tuple[int, int]) -> int:
    """Validate an integer rank ``1 <= k <= min(m, n)``."""
    m, n = shape
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be a Python int rank; got {type(k).__name__} {k!r}")
    return V.check_int("k", k, low=1, high=min(m, n),
                       high_desc=f"min(m, n) = {min(m, n)} for A of shape {(m, n)}")


def _boundary(key, A, k, method, l, overrides):
    """Validation shared by the public entry points: ``(key, op, k, l, method)``."""
    key = V.check_key(key)
    op = as_operator(A)
    k = check_rank(k, op.shape)
    method = resolve_method(method, **overrides).for_operator(op)
    method.pivot.check_backend()
    return key, op, k, sketch_size(method, k, op.shape, l), method


# --------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------
class ColumnSelection(NamedTuple):
    """Column skeletons (Lines 1-3): ``cols`` (k,) int32 in pivot order; ``W`` (k x n)
    interpolation matrix ``X_1^+ X`` with ``W(:, cols) = I`` (``A ~ A(:, cols) W``);
    ``eta = ||W||_2 = sqrt(1 + ||X_1^+ X_2||_2^2)`` (Thm
    ``thm:pivoting_on_rangeapprox_error_bound``)."""

    cols: jax.Array
    W: jax.Array
    eta: jax.Array


class RowSelection(NamedTuple):
    """Row skeletons: ``rows`` (k,) int32; ``W`` (m x k) with ``W(rows, :) = I``
    (``A ~ W A(rows, :)``); ``eta = ||W||_2``."""

    rows: jax.Array
    W: jax.Array
    eta: jax.Array


class Skeletons(NamedTuple):
    """Column and row skeletons (Algorithm ``algo:sketch_pivot_CUR_general``).

    ``cols``/``rows``: (k,) int32; ``W_cols`` (k x n, ``A ~ C W_cols``) and ``W_rows``
    (m x k, ``C = W_rows C(rows, :)``); ``eta``/``eta_rows``: certificates of the column
    selection (on X) and of the row selection (on C:
    ``||A - A R^+ R|| <= eta_rows ||A - C C^+ A||``).
    """

    cols: jax.Array
    rows: jax.Array
    W_cols: jax.Array
    W_rows: jax.Array
    eta: jax.Array
    eta_rows: jax.Array


# --------------------------------------------------------------------------------------
# the traceable pipeline (Lines 1-4)
# --------------------------------------------------------------------------------------
def _unit_scale(X):
    """``X / 2^e`` with ``2^e ~ max |X|`` (exact in floating point): eta, W and the pivots are
    scale invariant, but the Gram products behind them under/overflow for inputs scaled by
    1e-30 or 1e30 in float32."""
    mx = jnp.max(jnp.abs(X))
    e = jnp.where(mx > 0, jnp.floor(jnp.log2(jnp.where(mx > 0, mx, 1.0))), 0.0)
    return X * jnp.exp2(-e).astype(X.dtype)


def row_basis(key, op: LinearOperator, k: int, l: int, method: Method):
    """Lines 1-2: the row-basis approximator ``X`` and, for rSVD-based pivots, ``U_k``.

    * sketch-based pivots: ``X = Gamma A`` (l x n) for ``power_iters = 0``;
      ``X = Omega (A^H A)^q`` (Eq. ``eq:def_power_iter``; re-orthonormalised in between
      when ``stable``, Eq. ``eq:ortho_power_iter``) for ``q >= 1``.
    * DEIM/leverage: ``X = V_k^H`` (k x n) from the rSVD with sketch size l and q stable
      power iterations; the left vectors ``U_k`` (m x k) are returned too.

    Returns ``(X, U_k or None)``.
    """
    q = method.power_iters
    ortho = as_orthonormalizer(method.orthonormalize)  # "auto" under a trace: Householder
    if method.pivot.basis == "svd":
        Q = orth(power_range(key, op, l, method.sketch, q, True, ortho), ortho)
        B = op.rmatmat(Q).conj().T
        Ut, _, Vt = jnp.linalg.svd(B, full_matrices=False)
        return Vt[:k], jnp.matmul(Q, Ut[:, :k], precision=HIGHEST)
    if q == 0:
        return op.apply_sketch(method.sketch.draw(key, l, op.shape[0], dtype=op.dtype)), None
    Y = power_range(key, op, l, method.sketch, q - 1, method.stable, ortho)
    return op.rmatmat(Y).conj().T, None


def pivot_columns(key, op: LinearOperator, k: int, l: int, method: Method,
                  need_W: bool = True, speculate: bool = False):
    """Lines 1-3: ``(cols, W or None, eta, U_k or None)``.

    ``need_W=False`` skips the k x n interpolation matrix (eta then comes from the l x l
    Gram of X, :func:`rdr_jax.pivoting.eta_from_gram`), which is all CUR needs.
    ``speculate=True`` (the first call's quick tier, ``rdr_jax._jit``) computes that eta
    by :func:`rdr_jax.pivoting.eta_from_gram_fast`: the same value, or NaN where the fast
    route does not apply (the caller then reruns the full program).
    """
    kx, kp = jax.random.split(key)
    X, Uk = row_basis(kx, op, k, l, method)
    X = _unit_scale(X)
    J = method.pivot.select(kp, X, k)
    if need_W or isinstance(method.pivot, SRCUR):
        W, J = method.pivot.refine(P.interpolation(X, J), J)
        return J, W, P.eta_from_interpolation(W), Uk
    if speculate and Uk is None:
        return J, None, P.eta_from_gram_fast(X, J), Uk
    # V_k^H from the rSVD has orthonormal rows: X X^H = I
    gram = jnp.eye(X.shape[0], dtype=X.dtype) if Uk is not None else None
    return J, None, P.eta_from_gram(X, J, gram), Uk


def pivot_rows(key, C, k: int, method: Method, Uk=None, need_W: bool = True):
    """Line 4: ``(rows, W_rows or None, eta_rows, G or None)`` for ``C = A(:, cols)``;
    ``G = C_s^H C_s`` is the Gram of ``C_s = C / 2^e`` (``2^e ~ max |C|``).

    ``W_rows = C C(rows, :)^{-1}`` (m x k, ``W_rows(rows, :) = I``),
    ``eta_rows = ||W_rows||_2``; the Gram ``C^H C`` is returned for reuse (None for SRCUR).
    """
    C = _unit_scale(C)  # W_rows = C C(rows, :)^{-1} and eta_rows are scale invariant
    I = method.pivot.select_rows(key, C, Uk, k)
    if isinstance(method.pivot, SRCUR):
        Wt, I = method.pivot.refine(P.interpolation(C.T, I), I)  # (k x m) = (C C_I^{-1})^T
        return I, Wt.T, P.eta_from_interpolation(Wt), None
    gram_C = jnp.matmul(C.conj().T, C, precision=HIGHEST)
    eta_r = P.eta_rows_from_gram(gram_C, C[I], C=C)
    Wr = P.interpolation(C.T, I).T if need_W else None
    return I, Wr, eta_r, gram_C


@functools.partial(_jit.jit, static_argnames=("k", "l", "method"),
                   quick_first=_jit.sketch_work)
def _select_columns(key, op, k, l, method):
    J, W, eta, _ = pivot_columns(key, op, k, l, method, True)
    return ColumnSelection(J, W, eta)


@functools.partial(_jit.jit, static_argnames=("k", "l", "method"),
                   quick_first=_jit.sketch_work)
def _select_skeletons(key, op, k, l, method):
    k1, k2 = jax.random.split(key)
    J, W, eta, Uk = pivot_columns(k1, op, k, l, method, True)
    C = op.cols(J)
    I, Wr, eta_r, _ = pivot_rows(k2, C, k, method, Uk, True)
    return Skeletons(J, I, W, Wr, eta, eta_r)


# --------------------------------------------------------------------------------------
# public entry points
# --------------------------------------------------------------------------------------
def select_columns(key, A: Any, k: int, *, method: Any = "lupp", sketch: Any = None,
                   power_iters: int | None = None, stable: bool | None = None,
                   oversample: int | None = None, l: int | None = None) -> ColumnSelection:
    """Column skeletons by randomized pivoting (Lines 1-3 of ``algo:sketch_pivot_CUR_general``).

    Math: build ``X`` (:func:`rdr_jax.selection.row_basis`), pivot to get ``cols``, return
    ``W = X(:, cols)^+ X`` and ``eta = sqrt(1 + ||X_1^+ X_2||_2^2)`` so that
    ``||A - C C^+ A|| <= eta ||A - A W^+ W||`` (Eq. ``eq:pivoting_on_rangeapprox_error_bound``).

    Args:
      key: ``jax.random.key``.
      A: m x n matrix or operator (dense, scipy.sparse, BCOO, implicit, factored).
      k: number of skeletons (static), ``1 <= k <= min(m, n)``.
      method: ``"lupp"`` (default; Rand-LUPP, Algorithm ``algo:rand-id-lupp``), ``"cpqr"``,
        ``"deim"``, ``"leverage"``, ``"srcur"``, a thesis name such as ``"Rand-LUPP-1piter"``
        (:data:`rdr_jax.selection.VARIANTS`), a pivoting object (``CPQR(impl="xla")``,
        ``Leverage("topk")``, ``SRCUR(g=1.2)``) or a :class:`rdr_jax.selection.Method`.
      sketch: ``"gaussian"`` (default), ``"srtt"``, ``"sparse_sign"`` or a choice object
        (``SparseSign(zeta=4)``); overrides the method's.
      power_iters: q (static); default from the method (0, or 1 for the ``-1piter`` names).
      stable: orthonormalise between power iterations (default ``True``).
      oversample: ``l = k + oversample`` (default 10 for lupp/cpqr/srcur, 5 for
        deim/leverage).
      l: explicit sketch size, ``k <= l <= min(m, n)``.

    Returns:
      :class:`ColumnSelection` ``(cols, W, eta)``. One compiled function per shape, dtype
      and method; works under ``jax.jit`` and ``jax.vmap`` over keys.

    Raises:
      ValueError/TypeError: bad k, l, method, sketch, NaN/Inf in A.
      rdr_jax.pivoting.BackendError: CPQR requested where it has no lowering (TPU).

    Example:
      >>> sel = select_columns(jax.random.key(0), A, 20)
      >>> C = A[:, sel.cols]; float(sel.eta)
    """
    key, op, k, l, method = _boundary(key, A, k, method, l, dict(
        sketch=sketch, power_iters=power_iters, stable=stable, oversample=oversample))
    res = _select_columns(key, op, k, l, method)
    V.warn_if_nonfinite(res.eta, "the certificate eta")
    return res


def select_rows(key, A: Any, k: int, **kwargs) -> RowSelection:
    """Row skeletons: :func:`select_columns` on ``A^H``; ``W`` is m x k with
    ``A ~ W A(rows, :)``. Keyword arguments as :func:`select_columns`."""
    sel = select_columns(key, as_operator(A).H, k, **kwargs)
    return RowSelection(sel.cols, sel.W.conj().T, sel.eta)


def select_skeletons(key, A: Any, k: int, *, method: Any = "lupp", sketch: Any = None,
                     power_iters: int | None = None, stable: bool | None = None,
                     oversample: int | None = None, l: int | None = None) -> Skeletons:
    """Column and row skeletons (all four lines of ``algo:sketch_pivot_CUR_general``).

    Columns as :func:`select_columns`; rows by pivoting on ``C = A(:, cols)`` (LUPP on C,
    CPQR on ``C^H`` for CPQR, LUPP/leverage on the rSVD's ``U_k`` for DEIM/leverage,
    LUPP + swaps for SRCUR). Since C has full column rank, selecting rows from it is exact:
    the two-sided ID equals the column ID in exact arithmetic. Arguments as
    :func:`select_columns`.
    """
    key, op, k, l, method = _boundary(key, A, k, method, l, dict(
        sketch=sketch, power_iters=power_iters, stable=stable, oversample=oversample))
    return _select_skeletons(key, op, k, l, method)
