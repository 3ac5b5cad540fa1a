"""Diagnostics: exact errors, certificates and reference singular values (host side).

These functions measure the algorithms of :mod:`rdr_jax.id_cur.decompositions` and
:mod:`rdr_jax.randomized_svd`; they are kept apart from them (like scikit-learn's
``utils.extmath`` helpers) and run on the host in float64: they return Python floats in
NamedTuples and are meant for experiments, tests and reports, not for use inside ``jit``.

* :func:`lowrank_error` -- ``||A - A_hat||_F`` and ``||A - A_hat||_2`` for a low-rank
  ``A_hat = F G H^H`` (exact for dense, small sparse and factored A; estimated otherwise;
  ``spectral=False`` skips the SVD a dense spectral norm needs).
* :func:`eta_bound` -- the bound of thesis Theorem 2.1,
  ``||A - C C^+ A|| <= eta ||A - A W^+ W||``, in both norms (a check of the theorem; the
  a posteriori bound of an approximation is :func:`rdr_jax.error_bound`).
* :func:`exact_singular_values` -- all singular values of a small or factored matrix.
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from rdr_jax._src import linalg as L
from rdr_jax._src import validation as V
from rdr_jax import norms
from rdr_jax.operators import (FactoredOperator, LinearOperator,
                               as_operator, implicit_operator)
from rdr_jax.randomized_svd import RSVD

__all__ = ["LowRankError", "EtaBound", "lowrank_error", "eta_bound",
           "exact_singular_values", "factor_core", "low_rank_factors"]


class LowRankError(NamedTuple):
    """``fro = ||A - A_hat||_F``, ``spectral = ||A - A_hat||_2`` (NaN when not computed:
    ``lowrank_error(..., spectral=False)``, or a large dense residual by default),
    ``relative_fro = fro / ||A||_F`` and whether the values are exact (``False``: randomized
    estimates)."""

    fro: float
    spectral: float
    relative_fro: float
    exact: bool


class EtaBound(NamedTuple):
    """Thesis Theorem 2.1 for a column selection: ``||A - C C^+ A||_xi <= eta * residual_xi``
    with ``residual = ||A - A W^+ W||``; ``fro``/``spectral`` are the two bounds."""

    fro: float
    spectral: float
    eta: float
    residual_fro: float
    residual_spectral: float


def _wide(dtype):
    return np.complex128 if np.dtype(dtype).kind == "c" else np.float64


def factor_core(F: LinearOperator, dense_limit: int = 1 << 25) -> np.ndarray:
    """An r x r matrix M with ``F = U M`` for some U with orthonormal columns
    (``F^H F = M^H M``), in float64 on the host.

    Small factors: M = R from a QR of F (singular values accurate to ~eps ||F||). Large
    sparse factors: ``M = sqrt(w) Q^H`` from the eigendecomposition of the sparse Gram
    matrix ``F^H F`` (no densification; values below ~sqrt(eps) of the largest lose
    relative accuracy).
    """
    wide = _wide(F.dtype)
    m, r = F.shape
    if m * r <= dense_limit or not F.explicit or F.dense:
        return np.linalg.qr(F.to_numpy().astype(wide), mode="r")
    S = F.to_scipy().astype(wide)
    w, Q = np.linalg.eigh((S.conj().T @ S).toarray())
    return np.sqrt(np.clip(w, 0, None))[:, None] * Q.conj().T


def exact_singular_values(A: Any) -> np.ndarray:
    """All singular values of a (small or factored) matrix, in float64, descending
    (host-only reference for experiments and tests).

    Dense/sparse/implicit inputs are densified (small problems only). For a
    :class:`rdr_jax.operators.FactoredOperator` ``L diag(d) R^H`` the values come from the
    r x r core ``M_L diag(d) M_R^H`` (:func:`rdr_jax.diagnostics.factor_core`), so a
    10^6 x 10^6 factored matrix costs O(nnz r + r^3).
    """
    op = as_operator(A)
    if isinstance(op, FactoredOperator):
        core = (factor_core(op.L) * np.asarray(op.d)[None, :]) @ factor_core(op.R).conj().T
        return np.linalg.svd(core, compute_uv=False)
    return np.linalg.svd(_dense64(op), compute_uv=False)


def _dense64(op: LinearOperator) -> np.ndarray:
    return op.to_numpy().astype(_wide(op.dtype))


def low_rank_factors(approx, shape) -> tuple:
    """``(F, G, H)`` with ``A_hat = F G H^H`` (G None for the identity) from an ID/CUR result
    (``.factors()``), an :class:`rdr_jax.randomized_svd.RSVD` (``F = U diag(s)``,
    ``H = V``) or a tuple ``(F, G, H)``; ValueError when the factors do not fit an A of
    ``shape`` ("not an approximation of this A"), TypeError for anything else."""
    if isinstance(approx, RSVD):
        F, G, H = approx.U * approx.s[None, :], None, approx.Vt.conj().T
    elif hasattr(approx, "factors"):
        F, G, H = approx.factors()
    elif isinstance(approx, tuple) and len(approx) == 3:
        F, G, H = approx
    else:
        raise TypeError("approx must be an ID/CUR result, an RSVD, or a tuple (F, G, H) with "
                        f"A_hat = F G H^H; got {type(approx).__name__}")
    m, n = shape
    F, H = jnp.asarray(F), jnp.asarray(H)
    r = F.shape[1] if F.ndim == 2 else -1
    g_ok = G is None or (jnp.ndim(G) == 2 and jnp.shape(G) == (r, H.shape[1]))
    if F.ndim != 2 or H.ndim != 2 or F.shape[0] != m or H.shape[0] != n or not g_ok or (
            G is None and H.shape[1] != r):
        raise ValueError(
            f"approx is not a low-rank approximation of this A (shape {(m, n)}): its factors "
            f"have shapes F {tuple(F.shape)}, G {None if G is None else tuple(jnp.shape(G))}, "
            f"H {tuple(H.shape)}; need F (m x r), G (r x s) or None, H (n x s)")
    return F, G, H


def _check_relative(err: LowRankError, what: str) -> LowRankError:
    if err.relative_fro > 1.0 + 1e-6:
        warnings.warn(
            f"{what}: ||A - A_hat||_F = {err.fro:.4g} exceeds ||A||_F (relative error "
            f"{err.relative_fro:.4g} > 1): A_hat is no better than zero -- it is probably an "
            "approximation of another matrix", RuntimeWarning, stacklevel=V.user_stacklevel())
    return err


#: the exact spectral norm of a dense residual needs its float64 SVD, whose cost grows as
#: ``m n min(m, n)``; by default (``spectral=None``) it is computed up to this much work: a
#: 2000 x 1000 residual (0.6 s on one core of the project's CPU machine); 4000 x 2000 does 8x
#: the work (4-30 s there), 6000 x 4000 48x (measurements: docs/performance.md)
SPECTRAL_WORK_LIMIT = 1 << 31
#: rows of the float64 residual formed at a time for the Frobenius norm alone (about 8 MB)
_BLOCK_ENTRIES = 1 << 20


def _check_spectral(spectral) -> Optional[bool]:
    if spectral is None or isinstance(spectral, (bool, np.bool_)):
        return None if spectral is None else bool(spectral)
    raise TypeError("spectral must be None (exact ||A - A_hat||_2 when cheap), True (always) "
                    f"or False (Frobenius only); got {type(spectral).__name__} {spectral!r}")


def _want_spectral(spectral: Optional[bool], m: int, n: int) -> bool:
    return spectral if spectral is not None else m * n * min(m, n) <= SPECTRAL_WORK_LIMIT


def _relative(fro: float, a: float) -> float:
    return fro / a if a > 0 else (0.0 if fro == 0 else np.inf)


def lowrank_error(A: Any, approx, *, key=None, spectral: Optional[bool] = None,
                  dense_limit: int = 1 << 26, num_vectors: int = 40) -> LowRankError:
    """``||A - A_hat||_F`` and ``||A - A_hat||_2`` for a low-rank ``A_hat = F G H^H``
    (host-side diagnostic, float64).

    ``approx`` is an ID/CUR result (anything with ``.factors()``), an
    :class:`rdr_jax.randomized_svd.RSVD`, or a tuple ``(F, G, H)`` (G may be None).
    Exact for dense inputs and for sparse inputs with ``m n <= dense_limit`` (densified,
    float64), and for factored inputs ``A = L diag(d) R^H`` when
    ``range(F) in range(L)``, ``range(H) in range(R)`` (true for anything built from A's rows,
    columns and products): then ``A - A_hat = Q_L (K - c_F G c_H^H) Q_R^H`` with an r x r
    core. Otherwise estimated with ``key`` (Hutch++ and the power method,
    :mod:`rdr_jax.norms`).

    The Frobenius norm of a dense residual needs no SVD (it is summed block by block); the
    exact spectral norm needs a float64 SVD of the whole m x n residual (seconds to minutes
    beyond a few million entries), hence ``spectral``:

    * ``None`` (default): the spectral norm when it is cheap: dense residuals with
      ``m n min(m, n) <= SPECTRAL_WORK_LIMIT`` (``2**31``, e.g. 2000 x 1000), factored
      inputs (an r x r core) and randomized estimates; ``spectral`` is NaN otherwise.
    * ``True``: always (a dense SVD of any size).
    * ``False``: the Frobenius norm only; ``spectral`` is NaN.

    Raises:
      ValueError: factors whose shapes do not fit A ("not an approximation of this A"), or
        an operator too large to densify without ``key``.
      TypeError: ``spectral`` not None or a bool.

    Warns:
      RuntimeWarning: when ``||A - A_hat||_F > ||A||_F`` (no better than zero: most likely
        an approximation of another matrix).

    Returns:
      :class:`LowRankError` ``(fro, spectral, relative_fro, exact)``: Python floats computed
      in float64 on the host; inside the caller's jit/vmap (traced inputs) jax scalars
      computed in the working precision (no warning there).
    """
    spectral = _check_spectral(spectral)
    op = as_operator(A)
    F, G, H = low_rank_factors(approx, op.shape)
    if _traced(op, F, G, H):
        return _traced_error(op, F, G, H, key, spectral, dense_limit, num_vectors)
    if isinstance(op, FactoredOperator):
        out = _factored_error(op, F, G, H, spectral)
        if out is not None:
            return _check_relative(out, "lowrank_error")
    m, n = op.shape
    if op.dense or (m * n <= dense_limit and not isinstance(op, FactoredOperator)):
        return _check_relative(_dense_error(op, F, G, H, _want_spectral(spectral, m, n)),
                               "lowrank_error")
    if key is None:
        raise ValueError("A is too large to densify and not factored: pass key= for a "
                         "randomized error estimate")
    Gm = jnp.eye(F.shape[1], dtype=F.dtype) if G is None else G

    def mv(X):
        return op.matmat(X) - L.mm(F, L.mm(Gm, L.mm(H.conj().T, X)))

    def rmv(Y):
        return op.rmatmat(Y) - L.mm(H, L.mm(Gm.conj().T, L.mm(F.conj().T, Y)))

    E = implicit_operator(mv, rmv, op.shape, op.dtype)
    k1, k2, k3 = jax.random.split(V.check_key(key), 3)
    fro = float(norms.frobenius_norm(k1, E, num_vectors=num_vectors))
    a = float(norms.frobenius_norm(k3, op, num_vectors=num_vectors))
    spec = float(norms.spectral_norm(k2, E)) if spectral is not False else np.nan
    return _check_relative(LowRankError(fro, spec, fro / a if a > 0 else np.inf, False),
                           "lowrank_error")


def _dense_error(op: LinearOperator, F, G, H, spectral: bool) -> LowRankError:
    """The exact errors of a densified A in float64: the whole residual and its SVD for the
    spectral norm, else the Frobenius norms summed over row blocks (no m x n float64 copy)."""
    wide = _wide(op.dtype)
    A = np.asarray(op.todense()) if op.dense else op.to_numpy()   # dense: a view, no copy
    Fh = np.asarray(F, wide)
    if G is not None:
        Fh = Fh @ np.asarray(G, wide)
    Hh = np.asarray(H, wide).conj().T
    m, n = A.shape
    if spectral:
        A64 = A.astype(wide)
        s = np.linalg.svd(A64 - Fh @ Hh, compute_uv=False)
        fro = float(np.sqrt(np.sum(s ** 2)))
        return LowRankError(fro, float(s[0]) if s.size else 0.0,
                            _relative(fro, float(np.linalg.norm(A64))), True)
    rows = max(1, _BLOCK_ENTRIES // max(n, 1))
    fro = a = 0.0
    for i in range(0, m, rows):
        block = A[i:i + rows].astype(wide)
        a = float(np.hypot(a, np.linalg.norm(block)))
        fro = float(np.hypot(fro, np.linalg.norm(block - Fh[i:i + rows] @ Hh)))
    return LowRankError(fro, np.nan, _relative(fro, a), True)


def _traced(*trees) -> bool:
    return any(not V.is_concrete(x) for x in jax.tree_util.tree_leaves(trees))


def _scaled_fro(E):
    s = jnp.max(jnp.abs(E))
    return s * jnp.linalg.norm(E / jnp.where(s > 0, s, 1.0))


def _traced_error(op, F, G, H, key, spectral, dense_limit, num_vectors) -> LowRankError:
    """``lowrank_error`` inside the caller's jit/vmap: the same quantities as jax scalars in
    the working precision (dense for ``m n <= dense_limit``, else randomized with ``key``)."""
    m, n = op.shape
    Ah = F if G is None else L.mm(F, G)
    if m * n <= dense_limit:
        Ad = op.todense()
        E = Ad - L.mm(Ah, H.conj().T)
        fro = _scaled_fro(E)
        if _want_spectral(spectral, m, n):
            spec = jnp.linalg.norm(E / jnp.maximum(jnp.max(jnp.abs(E)),
                                                   jnp.finfo(E.dtype).tiny), 2) * jnp.max(
                                                       jnp.abs(E))
        else:
            spec = jnp.full((), jnp.nan, fro.dtype)
        a = _scaled_fro(Ad)
        return LowRankError(fro, spec, fro / a, True)
    if key is None:
        raise ValueError("A is too large to densify: pass key= for a randomized estimate")
    E = implicit_operator(lambda X: op.matmat(X) - L.mm(Ah, L.mm(H.conj().T, X)),
                          lambda Y: op.rmatmat(Y) - L.mm(H, L.mm(Ah.conj().T, Y)),
                          op.shape, op.dtype)
    k1, k2, k3 = jax.random.split(V.check_key(key), 3)
    fro = norms.frobenius_norm(k1, E, num_vectors=num_vectors)
    spec = (norms.spectral_norm(k2, E) if spectral is not False
            else jnp.full((), jnp.nan, fro.dtype))
    return LowRankError(fro, spec,
                        fro / norms.frobenius_norm(k3, op, num_vectors=num_vectors), False)


def _factor_coords(Fop: LinearOperator, X: np.ndarray):
    """``M`` with ``Fop = Q M`` (Q orthonormal) and ``c = Q^H X = M^{-H} Fop^H X``."""
    M = factor_core(Fop)
    FhX = np.asarray(Fop.rmatmat(jnp.asarray(X, dtype=Fop.dtype)), dtype=M.dtype)
    c = np.linalg.lstsq(M.conj().T, FhX, rcond=None)[0]
    return M, c


def _factored_error(op: FactoredOperator, F, G, H, spectral: Optional[bool] = None):
    wide = _wide(op.dtype)
    F = np.asarray(F, wide)
    H = np.asarray(H, wide)
    ML, cF = _factor_coords(op.L, F)
    MR, cH = _factor_coords(op.R, H)
    # containment check: ||F - Q_L c_F||_F^2 = ||F||_F^2 - ||c_F||_F^2
    for name, X, c in (("F", F, cF), ("H", H, cH)):
        nx = np.sum(np.abs(X) ** 2)
        out = nx - np.sum(np.abs(c) ** 2)
        if nx > 0 and out > 1e-6 * nx:
            warnings.warn(f"lowrank_error: the approximation's {name} factor is not in the "
                          "range of A's factor; using the randomized estimate",
                          RuntimeWarning, stacklevel=V.user_stacklevel())
            return None
    K = (ML * np.asarray(op.d, wide)[None, :]) @ MR.conj().T
    Gm = np.eye(F.shape[1]) if G is None else np.asarray(G, wide)
    E = K - cF @ Gm @ cH.conj().T          # r x r: its SVD is cheap
    fro = float(np.linalg.norm(E))
    spec = float(np.linalg.norm(E, 2)) if spectral is not False and E.size else (
        0.0 if spectral is not False else np.nan)
    return LowRankError(fro, spec, _relative(fro, float(np.linalg.norm(K))), True)


def eta_bound(A: Any, selection, *, key=None) -> EtaBound:
    """The bound of thesis Theorem 2.1 in both norms (host-side diagnostic).

    For a column selection (:class:`rdr_jax.id_cur.selection.ColumnSelection`, or anything with
    ``cols``, ``W`` (k x n) and ``eta``): ``||A - C C^+ A|| <= eta ||A - A W^+ W||`` with
    ``C = A(:, cols)``. The right-hand side is evaluated exactly when :func:`lowrank_error`
    can (dense, small sparse, factored), else estimated with ``key``. The theorem holds for
    ANY interpolation matrix with ``W(:, cols) = I`` and ``eta = ||W||_2`` -- also one
    computed for another matrix of the same shape (the bound is then true but may be loose)
    -- so the checks are structural: shapes, ``W(:, cols) = I``, ``eta = ||W||_2``, and,
    when the left-hand side can be evaluated exactly (dense or small sparse A), the bound
    itself.

    Raises:
      ValueError: a selection whose shapes do not fit A, whose ``W(:, cols)`` is not the
        identity (not an interpolation matrix), or whose bound is violated.

    Returns:
      :class:`EtaBound` ``(fro, spectral, eta, residual_fro, residual_spectral)``: floats,
      or jax scalars inside the caller's jit/vmap (then without the checks above, which
      need concrete values).
    """
    op = as_operator(A)
    m, n = op.shape
    if not all(hasattr(selection, f) for f in ("cols", "W", "eta")):
        raise TypeError("selection must be a column selection with cols, W and eta (e.g. "
                        f"rdr_jax.select_columns(...)); got {type(selection).__name__}")
    W = jnp.asarray(selection.W)
    if _traced(op, selection):
        # inside the caller's jit/vmap: the bound as jax scalars; the structural checks and
        # the violation check need concrete values and are skipped
        Q = jnp.linalg.qr(W.conj().T, mode="reduced")[0]
        r = lowrank_error(op, (op.matmat(Q), None, Q), key=key, spectral=True)
        eta = jnp.asarray(selection.eta)
        return EtaBound(eta * r.fro, eta * r.spectral, eta, r.fro, r.spectral)
    cols = np.asarray(selection.cols)
    if W.ndim != 2 or W.shape[1] != n or cols.ndim != 1 or cols.size != W.shape[0] or (
            cols.size and (cols.min() < 0 or cols.max() >= n)):
        raise ValueError(f"selection does not fit A of shape {(m, n)}: W {tuple(W.shape)}, "
                         f"cols {tuple(cols.shape)}; need W (k x n) and k column indices < n")
    Wc = np.asarray(W)[:, cols]
    if not np.allclose(Wc, np.eye(cols.size), atol=1e-5):
        raise ValueError("selection.W(:, cols) is not the identity: W is not the "
                         "interpolation matrix of these skeletons")
    eta = float(selection.eta)
    norm_w = float(np.linalg.norm(np.asarray(W, _wide(W.dtype)), 2))
    if not np.isclose(eta, norm_w, rtol=1e-3):
        raise ValueError(f"selection.eta = {eta:.6g} is not ||W||_2 = {norm_w:.6g}: not the "
                         "certificate of this interpolation matrix")
    Q = jnp.linalg.qr(W.conj().T, mode="reduced")[0]
    r = lowrank_error(op, (op.matmat(Q), None, Q), key=key, spectral=True)   # both norms
    cert = EtaBound(eta * r.fro, eta * r.spectral, eta, r.fro, r.spectral)
    if op.explicit and m * n <= 1 << 26:
        C = op.cols(jnp.asarray(cols))
        Qc = jnp.linalg.qr(C, mode="reduced")[0]
        true = lowrank_error(op, (Qc, None, op.rmatmat(Qc)), key=key, spectral=False)
        if true.fro > cert.fro * (1 + 1e-4) + 1e-12 * np.linalg.norm(_dense64(op)):
            raise ValueError(
                f"certificate violated: ||A - C C^+ A||_F = {true.fro:.4g} > bound "
                f"{cert.fro:.4g}; the selection was not computed for this A")
    return cert
