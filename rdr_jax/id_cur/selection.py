"""Randomized pivoting-based skeleton selection (thesis Chapter 2, Algorithm 1).

Line 1-2 build a row-basis approximator ``X`` (:func:`row_basis`), Line 3 pivots on its columns
(:func:`pivot_columns`), Line 4 on the rows of ``C = A(:, cols)`` (:func:`pivot_rows`). What to
do at each line is a small frozen choice object (:class:`LUPP`, :class:`CPQR`, :class:`DEIM`,
:class:`Leverage`, :class:`SRCUR`, the sketches), gathered in a :class:`Method`; the thesis'
seven algorithms are names (:data:`rdr_jax.id_cur.selection.VARIANTS`). Details and the variant table:
``docs/id-cur.md`` ("Skeleton selection").
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, ClassVar, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from rdr_jax._src import jit as _jit
from rdr_jax._src import dense
from rdr_jax._src import linalg as L
from rdr_jax._src import validation as V
from rdr_jax.id_cur import pivoting as P
from rdr_jax._src.tallqr import as_orthonormalizer
from rdr_jax.operators import HIGHEST, LinearOperator, as_operator
from rdr_jax.randomized_svd import orth, power_range
from rdr_jax.sketching import Gaussian, as_sketch

__all__ = ["LUPP", "CPQR", "DEIM", "Leverage", "SRCUR", "Method", "VARIANTS", "THESIS_NAMES",
           "PIVOTS", "resolve_method", "sketch_size", "ColumnSelection", "RowSelection",
           "Skeletons", "select_columns", "select_rows", "select_skeletons", "row_basis",
           "pivot_columns", "pivot_rows", "PivotRule", "RSVDBasisRule", "ColumnStep",
           "column_step", "RowStep", "row_step", "lu_row_step", "skeleton_block"]


# --------------------------------------------------------------------------------------
# pivoting choices
# --------------------------------------------------------------------------------------
#: friendly spelling of each pivot rule (a subclass of :class:`PivotRule` with a ``name``
#: registers itself)
PIVOTS: dict[str, type] = {}


class PivotRule:
    """Base of the pivot rules: what Lines 1-4 of Algorithm 1 do for this scheme.

    A new rule is a frozen dataclass subclass that implements :meth:`select` (and, where it
    differs, :meth:`row_basis`, :meth:`select_rows`, :meth:`refine`), sets a ``name`` (it then
    registers itself in :data:`PIVOTS`, so ``Method("name")`` works) and the declarations
    below. The pipeline asks the declarations; it never tests the class (``docs/design.md``,
    "Methods as strategy objects"; an example in its own file: :mod:`rdr_jax.id_cur.full_cpqr`).
    """

    #: the friendly name (``Method("lupp")``)
    name: ClassVar[str] = ""
    #: default oversampling l - k (implementation notes: k + 10 for pivoting on sketches,
    #: k + 5 for the rSVD-based methods)
    default_oversample: ClassVar[int] = 10
    #: its first k pivots do not depend on how many more are asked for, nor on zero rows of X
    #: past the first l: with a prefix-consistent sketch, an eager call may run padded to a
    #: rank bucket (one program for several k) and select the same skeletons
    greedy: ClassVar[bool] = False
    #: Line 4 is LUPP on C: the rows and ``W_rows = P^T L L_1^{-1}`` come from one getrf of
    #: C, with no second factorisation (:func:`lu_rows`)
    rows_by_lu: ClassVar[bool] = False
    #: :meth:`refine` changes the pivots after the pivot block is factored (swaps on the
    #: interpolation matrix T, which must then be formed): the skeleton block C is read after
    #: it, and the sketch's factor no longer preconditions C
    refines: ClassVar[bool] = False
    #: selects from one-pass sketches alone, ``X = Gamma A`` and ``Y = A Omega^H``
    #: (:func:`rdr_jax.streaming_skeletons`)
    streamable: ClassVar[bool] = False
    #: has a blocked fixed-accuracy loop (:func:`rdr_jax.interpolative_to_tolerance`)
    fixed_accuracy: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("name"):
            PIVOTS[cls.name] = cls

    def check_backend(self) -> None:
        """Raise :class:`rdr_jax.id_cur.pivoting.BackendError` where the scheme has no lowering."""

    def check_method(self, method: "Method") -> None:
        """Raise for a :class:`rdr_jax.id_cur.selection.Method` whose other fields this rule
        cannot honour (called by ``Method``'s constructor)."""

    def row_basis(self, key, op: LinearOperator, sz: "Sizes", method: "Method") -> "RowBasis":
        """Lines 1-2: the row-basis approximator ``X`` (lb x n): the sketch ``X = Gamma A``
        for ``power_iters = 0`` (at the backend's default matmul precision: TF32/bf16 passes
        on accelerators; the certificate is computed from the X actually formed), else
        ``X = Omega (A^H A)^q`` (Eq. (2.14); re-orthonormalised in between when ``stable``,
        Eq. (2.15))."""
        q = method.power_iters
        if q == 0:
            S = method.sketch.draw(key, sz.lb, op.shape[0], dtype=op.dtype)
            X = op.apply_sketch(S)
            if not isinstance(sz.l, int):
                X = jnp.where((jnp.arange(sz.lb) < sz.l)[:, None], X, 0)
            return RowBasis(X, None, S)
        ortho = as_orthonormalizer(method.orthonormalize)  # "auto" under a trace: Householder
        Y = power_range(key, op, sz.lb, method.sketch, q - 1, method.stable, ortho)
        return RowBasis(op.rmatmat(Y).conj().T, None, None)

    def select(self, key, X, k: int):
        """Line 3: k column pivots of the l x n approximator ``X``."""
        raise NotImplementedError

    def select_rows(self, key, C, Uk, k: int):
        """Line 4: k row pivots of ``C = A(:, cols)`` (or of the rSVD's ``U_k``)."""
        return self.select(key, C.T, k)

    def refine(self, W, idx):
        """Post-processing of ``(W, idx)`` (SRCUR's swaps); identity by default."""
        return W, idx


class RSVDBasisRule(PivotRule):
    """Base of the rules that pivot on singular vectors: Lines 1-2 are a rank-k rSVD, ``X =
    V_k^H`` (k x n), and its ``U_k`` (m x k) is kept for the row step."""

    default_oversample: ClassVar[int] = 5

    def row_basis(self, key, op, sz, method):
        """``X = V_k^H`` from the rSVD with sketch size l and q stable power iterations."""
        ortho = as_orthonormalizer(method.orthonormalize)
        Q = orth(power_range(key, op, sz.lb, method.sketch, method.power_iters, True, ortho),
                 ortho)
        B = op.rmatmat(Q).conj().T
        Ut, _, Vt = jnp.linalg.svd(B, full_matrices=False)
        return RowBasis(Vt[:sz.kb], jnp.matmul(Q, Ut[:, :sz.kb], precision=HIGHEST), None)


@dataclasses.dataclass(frozen=True)
class LUPP(PivotRule):
    """LU with partial pivoting on ``X^T`` (Eq. (2.18); every backend)."""

    name: ClassVar[str] = "lupp"
    greedy: ClassVar[bool] = True
    rows_by_lu: ClassVar[bool] = True
    streamable: ClassVar[bool] = True
    fixed_accuracy: ClassVar[bool] = True

    def select(self, key, X, k):
        # X is unit-scaled by the pipeline (pivot_block): partial pivoting on it directly
        # gives P.lupp's pivots (a power-of-two scaling changes no comparison)
        return dense.lu(X[:k].T)[2][:k].astype(jnp.int32)


def _cpqr_backend(impl: str, what: str) -> None:
    if impl == "lapack" and not P.cpqr_available():
        raise P.BackendError(
            f"{what} needs column-pivoted QR (geqp3), which has no lowering on backend "
            f"{jax.default_backend()!r}; use LUPP() or {what}(impl='xla') (portable)")


@dataclasses.dataclass(frozen=True)
class CPQR(PivotRule):
    """Column-pivoted QR on ``X`` (Eq. (2.17)); ``impl="lapack"`` (geqp3; CPU/GPU)
    or ``"xla"`` (pivoted Gram-Schmidt; every backend, TPU included)."""

    impl: str = "lapack"

    name: ClassVar[str] = "cpqr"
    greedy: ClassVar[bool] = True
    streamable: ClassVar[bool] = True

    def __post_init__(self):
        if self.impl not in ("lapack", "xla"):
            raise ValueError(f"impl must be 'lapack' or 'xla'; got {self.impl!r}")

    def check_backend(self):
        _cpqr_backend(self.impl, "CPQR")

    def select(self, key, X, k):
        return P.cpqr(X, k, impl=self.impl)


@dataclasses.dataclass(frozen=True)
class DEIM(RSVDBasisRule):
    """DEIM = LUPP on the rSVD's ``V_k^H`` (columns) and ``U_k^T`` (rows)."""

    name: ClassVar[str] = "deim"

    def select(self, key, X, k):
        return P.lupp(X, k)

    def select_rows(self, key, C, Uk, k):
        return P.lupp(Uk.T, k)


@dataclasses.dataclass(frozen=True)
class Leverage(RSVDBasisRule):
    """Leverage scores of the rSVD's ``V_k^H`` / ``U_k``: ``mode="sample"`` (without
    replacement, Gumbel top-k) or ``"topk"`` (deterministic, as the authors' code)."""

    mode: str = "sample"

    name: ClassVar[str] = "leverage"

    def __post_init__(self):
        if self.mode not in ("sample", "topk"):
            raise ValueError(f"mode must be 'sample' or 'topk'; got {self.mode!r}")

    def select(self, key, X, k):
        return P.leverage(key, X, k, mode=self.mode)

    def select_rows(self, key, C, Uk, k):
        return P.leverage(key, Uk.T, k, mode=self.mode)


@dataclasses.dataclass(frozen=True)
class SRCUR(PivotRule):
    """CPQR on the sketch, then spectrum-revealing swaps until every interpolation
    coefficient is at most ``g`` (> 1), at most ``max_swaps`` of them; rows by LUPP on C
    plus the same swaps."""

    g: float = 1.1
    max_swaps: int = 256
    impl: str = "lapack"

    name: ClassVar[str] = "srcur"
    refines: ClassVar[bool] = True

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


def _pivot_from_name(name: str):
    """``(pivoting object, power iterations)`` of a base name or thesis variant name."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key in VARIANTS:
        pname, q = VARIANTS[key]
    elif key in PIVOTS:
        pname, q = key, 0
    else:
        raise ValueError(f"unknown method {name!r}; choose one of {list(PIVOTS)}, a thesis "
                         f"variant {list(THESIS_NAMES.values())}, a pivoting object (LUPP(), "
                         "CPQR(), ...) or a Method")
    return PIVOTS[pname](), q


@dataclasses.dataclass(frozen=True)
class Method:
    """Everything static about a skeleton selection, ID or CUR, as one hashable object.

    Attributes:
      pivot: a pivoting object (:class:`LUPP`, :class:`CPQR`, :class:`DEIM`, :class:`Leverage`,
        :class:`SRCUR`) or a name: ``"lupp"``, ``"cpqr"``, ... or a thesis variant such as
        ``"Rand-CPQR-1piter"`` (:data:`rdr_jax.id_cur.selection.VARIANTS`).
      sketch: ``Gaussian()`` (default), ``SRTT()``, ``SparseSign(zeta)`` or their names.
      power_iters: power iterations q in the row-basis approximator (thesis Eq. (2.14)); default:
        the variant's (1 for ``-1piter``), else 0.
      stable: re-orthonormalise between half power iterations (default ``True``).
      oversample: ``l - k``; default 10 on sketches, 5 for the rSVD-based DEIM/leverage.
      interp: ``"exact"`` (``W = C^+ A``, one more pass) or ``"sketch"`` (``W = X_1^+ X``).
      orthonormalize: ``"auto"``, ``"householder"``, ``"cholesky_qr2"`` or an object
        (:func:`rdr_jax.rangefinder`); skeletons do not depend on it beyond rounding.

    Example:
      >>> cur(key, A, 20, method=Method("Rand-CPQR-1piter", sketch="sparse_sign"))
    """

    pivot: Any = LUPP()
    sketch: Any = Gaussian()
    power_iters: Optional[int] = None
    stable: bool = True
    oversample: Optional[int] = None
    interp: str = "exact"
    orthonormalize: Any = "auto"

    def __post_init__(self):
        q = 0
        if isinstance(self.pivot, str):
            pivot, q = _pivot_from_name(self.pivot)
            object.__setattr__(self, "pivot", pivot)
        if not isinstance(self.pivot, PivotRule):
            raise TypeError(f"pivot must be a name ({', '.join(PIVOTS)}) or a PivotRule "
                            f"(LUPP(), CPQR(), ...); got {self.pivot!r}")
        if self.power_iters is None:
            object.__setattr__(self, "power_iters", q)
        object.__setattr__(self, "sketch", as_sketch(self.sketch))
        V.check_int("power_iters", self.power_iters, low=0)
        object.__setattr__(self, "stable", V.check_bool("stable", self.stable))
        if self.oversample is not None:
            V.check_int("oversample", self.oversample, low=0)
        if self.interp not in ("exact", "sketch"):
            raise ValueError(f"interp must be 'exact' or 'sketch'; got {self.interp!r}")
        if not (isinstance(self.orthonormalize, str)
                and self.orthonormalize.strip().lower() in ("auto", "cholesky_qr2")):
            object.__setattr__(self, "orthonormalize", as_orthonormalizer(self.orthonormalize))
        self.pivot.check_method(self)

    def for_operator(self, op, adjoint: bool = False) -> "Method":
        """The method with ``orthonormalize="auto"`` resolved for ``op`` (or ``op^H``)."""
        return dataclasses.replace(self, orthonormalize=as_orthonormalizer(
            self.orthonormalize, op, adjoint))

    def replace(self, **changes) -> "Method":
        """A copy with the given fields changed (``None`` values are ignored)."""
        changes = {k: v for k, v in changes.items() if v is not None}
        return dataclasses.replace(self, **changes) if changes else self


def resolve_method(method: Any = "lupp", **overrides) -> Method:
    """The :class:`Method` for a name, a pivoting object or a Method; keyword arguments that
    are not None override its fields."""
    if isinstance(method, Method):
        base = method
    elif isinstance(method, (PivotRule, str)):
        base = Method(pivot=method)
    else:
        raise TypeError(f"method must be a name, a pivoting object or a Method; "
                        f"got {type(method).__name__}")
    if overrides.get("sketch") is not None:
        overrides["sketch"] = as_sketch(overrides["sketch"])
    return base.replace(**overrides)


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
    if isinstance(k, (float, np.floating)):
        raise TypeError(f"k must be an int rank; got the float {k!r} (a relative tolerance is "
                        "interpolative_to_tolerance(key, A, tol))")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be a Python int rank; got {type(k).__name__} {k!r}")
    return V.check_int("k", k, low=1, high=min(m, n),
                       high_desc=f"min(m, n) = {min(m, n)} for A of shape {(m, n)}")


def _boundary(key, A, k, method):
    """Validation shared by the public entry points: ``(key, op, k, l, method)``."""
    key = V.check_key(key)
    op = as_operator(A)
    k = check_rank(k, op.shape)
    method = resolve_method(method).for_operator(op)
    method.pivot.check_backend()
    return key, op, k, sketch_size(method, k, op.shape), method


# --------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------
class ColumnSelection(NamedTuple):
    """Column skeletons (Lines 1-3): ``cols`` (k,) int32 in pivot order; ``W`` (k x n)
    interpolation matrix ``X_1^+ X`` with ``W(:, cols) = I`` (``A ~ A(:, cols) W``);
    ``eta = ||W||_2 = sqrt(1 + ||X_1^+ X_2||_2^2)`` (Theorem 2.1)."""

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
    """Column and row skeletons (Algorithm 1).

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
#: bucket ends for the static rank: a rank k is computed in a program of size
#: ``kb = min(b >= k in RANK_BUCKETS)`` (then ``2 * kb`` steps up); round ranks (25, 50, 100,
#: 200, ...) are bucket ends, so they cost nothing extra
RANK_BUCKETS = (8, 16, 25, 50)


def rank_bucket(k: int, cap: int) -> int:
    """The static size ``kb >= k`` a rank-k pipeline is compiled for (at most ``cap``)."""
    b = next((b for b in RANK_BUCKETS if b >= k), None)
    if b is None:
        b = RANK_BUCKETS[-1]
        while b < k:
            b *= 2
    return min(b, cap)


def bucketable(method: "Method") -> bool:
    """Whether a method's pipeline can run padded to a rank bucket with the same skeletons:
    a prefix-consistent sketch (its first l rows do not depend on how many more are drawn),
    no power iterations, and a greedy pivot rule (its first k pivots depend only on the first
    k rows / columns it sees)."""
    return (method.sketch.prefix_consistent and method.power_iters == 0
            and method.pivot.greedy)


class Sizes(NamedTuple):
    """Sizes of one pipeline call: the rank ``k`` and sketch size ``l`` (traced int32 scalars
    inside the program) and the static padded sizes ``kb >= k``, ``lb >= l`` the arrays have.
    Entries past ``k`` (rows of W, columns of C, ...) are zero."""

    k: Any
    l: Any
    kb: int
    lb: int

    def valid(self):
        if isinstance(self.k, int):          # unpadded: a constant mask XLA folds away
            return jnp.asarray(np.arange(self.kb) < self.k)
        return jnp.arange(self.kb) < self.k

    @classmethod
    def of(cls, k, l, kb: int, lb: int) -> "Sizes":
        """Inside a jitted pipeline: ``k``/``l`` traced, or None for the unpadded sizes."""
        return cls(kb if k is None else k, lb if l is None else l, kb, lb)


class RowBasis(NamedTuple):
    """Lines 1-2: ``X`` (lb x n; rows past l zero), the rSVD's ``U_k`` (or None) and the drawn
    embedding when ``X = Gamma A`` with an oblivious Gamma (it then also sketches the
    skeleton block C: ``X(:, J) = Gamma C``), else None."""

    X: jax.Array
    Uk: Optional[jax.Array]
    sketch: Any


def row_basis(key, op: LinearOperator, sz: Sizes, method: Method) -> RowBasis:
    """Lines 1-2: the row-basis approximator ``X`` of the method's pivot rule
    (:meth:`PivotRule.row_basis`): a sketch of A, or ``V_k^H`` from an rSVD (DEIM/leverage,
    whose ``U_k`` the row step uses)."""
    return method.pivot.row_basis(key, op, sz, method)


class ColumnPivots(NamedTuple):
    """Lines 1-3 of the general algorithm, padded to ``kb`` (see :class:`Sizes`).

    cols: (kb,) pivots (the first k valid); X: the unit-scaled row basis (lb x n);
    M: ``X_1^+`` (kb x lb), the damped pseudo-inverse of the pivot block
    ``X_1 = X(:, cols)`` (rows past k zero), so that ``T = M X`` with ``T(:, cols) := I``
    is the sketch interpolation matrix; R: the triangular factor of the damped pivot block
    (kb x kb, ``R^H R = X_1^H X_1 + D^2``), a preconditioner for ``C = A(:, cols)`` when
    ``preconditions`` (X an oblivious sketch of A, else None); Uk: the rSVD's ``U_k`` or
    None; eta: ``>= ||T||_2`` (``rdr_jax._src.linalg.norm2_bound``, within
    ``kb^(1/512)``); T: the interpolation matrix when it was formed (SRCUR), else None.
    """

    cols: jax.Array
    X: jax.Array
    M: jax.Array
    R: Optional[jax.Array]
    Uk: Optional[jax.Array]
    eta: jax.Array
    T: Optional[jax.Array] = None


def sketch_interpolation(piv: ColumnPivots, valid) -> jax.Array:
    """``T = X_1^+ X`` (kb x n) with ``T(:, cols) = I`` on the valid pivots."""
    if piv.T is not None:
        return piv.T
    return L.with_identity(L.mm(piv.M, piv.X), piv.cols, valid)


def _eta_of_map(M, X, cols, valid):
    """``||T||_2`` bound for ``T = M X`` with ``T(:, cols) = I`` (valid pivots), from the
    small Gram ``X X^H`` without forming T: ``T T^H = M (X X^H) M^H - T_J T_J^H + I``,
    ``T_J = M X(:, cols)`` restricted to the valid pivot columns."""
    G = L.mm(M, L.mm(L.gram(L.ct(X)), L.ct(M)))
    TJ = L.mm(M, X[:, cols]) * valid[None, :].astype(M.dtype)
    G = G - L.mm(TJ, L.ct(TJ)) + jnp.diag(valid.astype(M.dtype))
    return L.interpolation_norm_bound(G, valid)


class PivotBlock(NamedTuple):
    """Lines 1-3 before any factorisation: pivots ``cols`` (kb,), the unit-scaled row basis
    ``X`` (lb x n), the pivot block ``X1 = X(:, cols)`` (lb x kb, padding columns zero;
    recomputed at HIGHEST on accelerators, see ``pivot_block``), the rSVD's ``U_k``
    (or None) and whether X is an oblivious sketch of A (then ``X1`` sketches C too)."""

    cols: jax.Array
    X: jax.Array
    X1: jax.Array
    Uk: Optional[jax.Array]
    oblivious: bool


def pivot_block(key, op: LinearOperator, sz: Sizes, method: Method) -> PivotBlock:
    """Lines 1-3: the row basis and its column pivots.

    When X is the oblivious sketch ``Gamma A`` on an accelerator (whose default matmul
    precision may be TF32 or bf16 passes), the pivot block is recomputed as ``Gamma C`` at
    HIGHEST: its triangular factor then preconditions ``C = A(:, cols)`` to working accuracy
    (on CPU the default precision is full, and ``X(:, cols)`` is used as is).
    """
    kx, kp = jax.random.split(key)
    rb = row_basis(kx, op, sz, method)
    X = L.unit_scale(rb.X)
    J = method.pivot.select(kp, X, sz.kb)
    X1 = X[:, J]
    oblivious = rb.sketch is not None and rb.sketch.oblivious and not method.pivot.refines
    if oblivious and rb.sketch.default_precision_product and jax.default_backend() != "cpu":
        X1 = L.unit_scale(rb.sketch.apply_dense(op.cols(J), precision=HIGHEST))
    X1 = jnp.where(sz.valid()[None, :], X1, 0)
    return PivotBlock(J, X, X1, rb.Uk, oblivious)


def damped_pivot_block(pb: PivotBlock, sz: Sizes):
    """``[X_1; D]`` for ``rdr_jax._src.linalg.sketch_qr`` (damping ``d = eps ||X_1||_F``:
    every solve stays finite for a rank-deficient block)."""
    return L.damped_block(pb.X1, sz.valid())


def finish_columns(pb: PivotBlock, R, Qt, M, sz: Sizes) -> ColumnPivots:
    """``ColumnPivots`` of a rule that does not refine, from the factor ``(R, Qt)`` of
    the damped pivot block and ``M = R^{-1} Qt = X_1^+``."""
    return ColumnPivots(pb.cols, pb.X, M, R if pb.oblivious else None, pb.Uk,
                        _eta_of_map(M, pb.X, pb.cols, sz.valid()))


class ColumnStep(NamedTuple):
    """Lines 1-3 as the decompositions use them (:func:`column_step`).

    pb: the pivot block, ``pb.cols`` the final pivots (after a refining rule's swaps ``pb.X1``
    is still the block of the pivots before them; nothing reads it then). piv: the finished
    ``ColumnPivots`` when the rule refines (its swaps needed the factored block and T
    before the pivots were final), else None: the caller factors ``damped_pivot_block(pb)``
    -- alone or batched with its other factorisations -- and calls ``finish_columns``."""

    pb: PivotBlock
    piv: Optional[ColumnPivots]


def column_step(key, op: LinearOperator, sz: Sizes, method: Method) -> ColumnStep:
    """Lines 1-3, the first stage of every pipeline (select columns, then rows, then
    coefficients): the pivot block of the rule's row basis; a refining rule (SRCUR) also
    factors it, forms ``T = X_1^+ X`` and swaps (:meth:`PivotRule.refine`)."""
    pb = pivot_block(key, op, sz, method)
    if not method.pivot.refines:
        return ColumnStep(pb, None)
    valid = sz.valid()
    R, Qt = L.sketch_qr(damped_pivot_block(pb, sz))
    M = L.pseudo_inverse(R, Qt, valid)
    T, J = method.pivot.refine(L.with_identity(L.mm(M, pb.X), pb.cols, valid), pb.cols)
    piv = ColumnPivots(J, pb.X, M, None, pb.Uk,
                       L.interpolation_norm_bound(L.gram(L.ct(T)), valid), T)
    return ColumnStep(pb._replace(cols=J), piv)


def skeleton_block(op: LinearOperator, cols, sz: Sizes):
    """``C = A(:, cols)`` (m x kb), columns past k zero."""
    return jnp.where(sz.valid()[None, :], op.cols(cols), 0)


def pivot_columns(key, op: LinearOperator, sz: Sizes, method: Method) -> ColumnPivots:
    """Lines 1-3: pivots, the damped pseudo-inverse of the pivot block and ``eta``.

    The pivot block ``X_1 = X(:, cols)`` (lb x kb) is factored once by Householder with a
    damping ``D`` (``rdr_jax._src.linalg.sketch_qr``): ``R^H R = X_1^H X_1 + D^2`` and
    ``X_1^+ = R^{-1} Q_1^H`` (two library calls).
    """
    cs = column_step(key, op, sz, method)
    if cs.piv is not None:
        return cs.piv
    R, Qt = L.sketch_qr(damped_pivot_block(cs.pb, sz))
    return finish_columns(cs.pb, R, Qt, L.pseudo_inverse(R, Qt, sz.valid()), sz)


class RowPivots(NamedTuple):
    """Line 4 on ``C = A(:, cols)`` (m x kb): rows (kb,); W (m x kb) ``C C(rows, :)^{-1}``
    with ``W(rows, :) = I`` on the valid block (columns past k zero); eta ``>= ||W||_2``."""

    rows: jax.Array
    W: jax.Array
    eta: jax.Array


class RowLU(NamedTuple):
    """LUPP of the skeleton block ``P C = L U`` for Line 4: ``rows`` (kb,), ``perm`` (m,),
    ``L`` (m x kb unit lower trapezoidal) and ``L1`` (kb x kb, the valid block of L's first
    kb rows, identity on the padding)."""

    rows: jax.Array
    perm: jax.Array
    L: jax.Array
    L1: jax.Array


def lu_rows(C, sz: Sizes) -> RowLU:
    """Line 4 with LUPP: one getrf of the (unit-scaled) skeleton block C (m x kb)."""
    m = C.shape[0]
    valid = sz.valid()
    lu, _, perm = dense.lu(L.unit_scale(C))
    Lf = jnp.tril(lu[:, :sz.kb], -1) + jnp.eye(m, sz.kb, dtype=C.dtype)
    both = (valid[:, None] & valid[None, :]) | jnp.eye(sz.kb, dtype=bool)
    L1 = jnp.where(both, Lf[:sz.kb], 0)
    return RowLU(perm[:sz.kb].astype(jnp.int32), perm, Lf, L1)


def rows_from_lu(lu: RowLU, L1inv, sz: Sizes) -> RowPivots:
    """``W_rows = P^T L L_1^{-1}`` (no solve with the possibly singular U: ``W_rows S = C``
    holds even for a singular ``S = C(rows, :)``) and ``eta_rows >= ||W_rows||_2``."""
    W = jnp.zeros(lu.L.shape, lu.L.dtype).at[lu.perm].set(L.mm(lu.L, L1inv))
    W = jnp.where(sz.valid()[None, :], W, 0)
    return RowPivots(lu.rows, W, L.interpolation_norm_bound(L.gram(W), sz.valid()))


def l1_inverse_rhs(lu: RowLU):
    """``(a, b)`` with ``a^{-1} b = L_1^{-H}`` for a batched upper-triangular left solve
    (``L_1^H`` is unit upper triangular)."""
    return L.ct(lu.L1), jnp.eye(lu.L1.shape[0], dtype=lu.L1.dtype)


class RowStep(NamedTuple):
    """Line 4 as the decompositions use it (:func:`row_step`): ``rows`` (kb,), and either
    the LU of C (``lu``; its triangular solve is :meth:`pending`, for the caller to batch
    with its own) or the finished ``RowPivots`` (``rp``)."""

    rows: jax.Array
    lu: Optional[RowLU]
    rp: Optional[RowPivots]

    def pending(self) -> list:
        """The triangular systems ``(a, b)`` still to solve: ``L_1^{-H}`` for the LU."""
        return [] if self.lu is None else [l1_inverse_rhs(self.lu)]

    def finish(self, sols, sz: Sizes) -> RowPivots:
        """``RowPivots`` from the solutions of :meth:`pending` (same order)."""
        return self.rp if self.lu is None else rows_from_lu(self.lu, L.ct(sols[0]), sz)

    def solve(self, sz: Sizes) -> RowPivots:
        """:meth:`finish` after solving :meth:`pending` here, one call each."""
        return self.finish([L.solve_triangular(a, b, left=True, lower=False)
                            for a, b in self.pending()], sz)


def lu_row_step(C, sz: Sizes) -> RowStep:
    """Line 4 by LUPP: one getrf of C; ``W_rows`` waits for the ``L_1^{-H}`` solve."""
    lu = lu_rows(C, sz)
    return RowStep(lu.rows, lu, None)


def row_step(key, C, sz: Sizes, method: Method, Uk=None) -> RowStep:
    """Line 4, the second stage of every pipeline: row skeletons of ``C`` (m x kb, columns
    past k zero) and ``W_rows = C C(rows, :)^{-1}``.

    A rule with ``rows_by_lu`` (LUPP): ``P C = L U`` gives the rows, and
    ``W_rows = P^T L L_1^{-1}`` waits for one triangular solve (:meth:`RowStep.pending`).
    Other rules: their :meth:`PivotRule.select_rows` (and :meth:`PivotRule.refine`), then
    ``W_rows^H = (S^H)^+ C^H`` from the damped factor of ``S^H = C(rows, :)^H``.
    """
    if method.pivot.rows_by_lu:
        return lu_row_step(C, sz)
    valid = sz.valid()
    Cn = L.unit_scale(C)
    I = method.pivot.select_rows(key, Cn, Uk, sz.kb)
    if method.pivot.refines:
        Wt, I = method.pivot.refine(P.interpolation(Cn.T, I), I)
        W = Wt.T
    else:
        S1 = jnp.where(valid[:, None] & valid[None, :], Cn[I].conj().T, 0)   # S^H
        Rs, Qt = L.sketch_qr(L.damped_block(S1, valid))
        Ms = L.pseudo_inverse(Rs, Qt, valid)
        W = L.ct(L.mm(Ms, L.ct(Cn)))
        eye = jnp.eye(sz.kb, dtype=W.dtype)
        W = W.at[I].set(jnp.where(valid[:, None], eye, W[I]))
    W = jnp.where(valid[None, :], W, 0)
    return RowStep(I, None, RowPivots(I, W, L.interpolation_norm_bound(L.gram(W), valid)))


def pivot_rows(key, C, sz: Sizes, method: Method, Uk=None) -> RowPivots:
    """Line 4 on its own: :func:`row_step` with its pending solve done."""
    return row_step(key, C, sz, method, Uk).solve(sz)


@functools.partial(_jit.jit, static_argnames=("kb", "lb", "method"))
def _select_columns(key, op, k, l, kb, lb, method):
    sz = Sizes.of(k, l, kb, lb)
    piv = pivot_columns(key, op, sz, method)
    return ColumnSelection(piv.cols, sketch_interpolation(piv, sz.valid()), piv.eta)


@functools.partial(_jit.jit, static_argnames=("kb", "lb", "method"))
def _select_skeletons(key, op, k, l, kb, lb, method):
    sz = Sizes.of(k, l, kb, lb)
    k1, k2 = jax.random.split(key)
    piv = pivot_columns(k1, op, sz, method)
    rp = pivot_rows(k2, skeleton_block(op, piv.cols, sz), sz, method, piv.Uk)
    return Skeletons(piv.cols, rp.rows, sketch_interpolation(piv, sz.valid()), rp.W, piv.eta,
                     rp.eta)


def plan(method: "Method", k: int, l: int, shape, key=None) -> Sizes:
    """Static and dynamic sizes of a call: for an eager call (``key`` concrete or None) the
    rank bucket when the method allows it (:func:`bucketable`; k and l are then traced, so
    every rank of a bucket -- the bucket size itself included -- shares one program), else
    exact static sizes. Under jit/vmap (``key`` a tracer) the sizes are exact: the enclosing
    program is traced for this k anyway, and padding would only add work (up to 2x k)."""
    if not bucketable(method) or (key is not None and not V.is_concrete(key)):
        return Sizes(None, None, k, l)
    cap = min(shape)
    kb = rank_bucket(k, cap)
    return Sizes(np.int32(k), np.int32(l), kb, min(kb + (l - k), cap))


def trim(res, k: int, fields: dict):
    """The padded result ``res`` cut to rank k: ``fields`` maps a field name to the axis of
    length kb to cut. Under jit a static slice; an eager result on one CPU device is cut as a
    host view copied into a new buffer (:func:`_cut_eager`), so a rank sweep compiles no
    program per k."""
    def cut(x, axes):
        for ax in (axes if isinstance(axes, tuple) else (axes,)):
            if x.shape[ax] != k:
                x = _cut_eager(x, k, ax) if _host_cuttable(x) else jax.lax.slice_in_dim(
                    x, 0, k, axis=ax)
        return x
    return res._replace(**{f: cut(getattr(res, f), ax) for f, ax in fields.items()
                           if getattr(res, f) is not None})


def _host_cuttable(x) -> bool:
    """A concrete array on a single CPU device (its host view costs no transfer)."""
    if not V.is_concrete(x) or not isinstance(x, jax.Array):
        return False
    devs = x.sharding.device_set
    return len(devs) == 1 and next(iter(devs)).platform == "cpu"


def _cut_eager(x, k: int, axis: int):
    """``x[..., :k, ...]`` along ``axis`` without compiling an XLA slice for this k: the CPU
    buffer's host view, cut and copied to a new array on the same device."""
    view = np.asarray(x)
    idx = [slice(None)] * view.ndim
    idx[axis] = slice(0, k)
    out = np.ascontiguousarray(view[tuple(idx)])
    # keep the placement kind: a committed array stays on its device, an uncommitted one
    # (the default device) stays free to meet arrays on other devices, as a slice would
    return jax.device_put(out, x.sharding) if getattr(x, "committed", True) else \
        jax.device_put(out)


# --------------------------------------------------------------------------------------
# public entry points
# --------------------------------------------------------------------------------------
def select_columns(key, A: Any, k: int, *, method: Any = "lupp") -> ColumnSelection:
    """Column skeletons by randomized pivoting (thesis Algorithm 1, Lines 1-3).

    Builds the row-basis approximator ``X``, pivots on it, and returns ``W = X(:, cols)^+ X``
    with ``eta = sqrt(1 + ||X_1^+ X_2||_2^2)``, so ``||A - C C^+ A|| <= eta ||A - A W^+ W||``
    (thesis Theorem 2.1). Why: the pivots are chosen on a small sketch, never on A.

    Args:
      key: ``jax.random.key``.
      A: m x n matrix or operator (dense, scipy.sparse, BCOO, implicit, factored).
      k: number of skeletons (static), ``1 <= k <= min(m, n)``.
      method: a :class:`Method`, a pivoting object or a name (``"lupp"``, default, or a thesis
        variant such as ``"Rand-LUPP-1piter"``).

    Returns:
      :class:`ColumnSelection` ``(cols, W, eta)``; jit- and vmap-able over keys.
    """
    key, op, k, l, method = _boundary(key, A, k, method)
    sz = plan(method, k, l, op.shape, key)
    res = trim(_select_columns(key, op, *sz, method), k, {"cols": 0, "W": 0})
    V.warn_if_nonfinite(res.eta, "the certificate eta")
    return res


def select_rows(key, A: Any, k: int, *, method: Any = "lupp") -> RowSelection:
    """Row skeletons: :func:`select_columns` on ``A^H``; ``W`` is m x k, ``A ~ W A(rows, :)``."""
    sel = select_columns(key, as_operator(A).H, k, method=method)
    return RowSelection(sel.cols, sel.W.conj().T, sel.eta)


def select_skeletons(key, A: Any, k: int, *, method: Any = "lupp") -> Skeletons:
    """Column and row skeletons (thesis Algorithm 1, all four lines).

    Columns as :func:`select_columns`; rows by pivoting on ``C = A(:, cols)`` (or on the
    rSVD's ``U_k`` for DEIM/leverage). Arguments as :func:`select_columns`.
    Returns :class:`Skeletons`.
    """
    key, op, k, l, method = _boundary(key, A, k, method)
    sz = plan(method, k, l, op.shape, key)
    return trim(_select_skeletons(key, op, *sz, method), k,
                {"cols": 0, "rows": 0, "W_cols": 0, "W_rows": 1})
