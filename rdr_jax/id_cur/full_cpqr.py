"""Deterministic column-pivoted QR on the matrix itself: the classic ID baseline.

Businger and Golub's QR with column pivoting (LAPACK ``geqp3``) on A, not on a sketch. It is
the deterministic method that the thesis' randomized pivoting (Algorithm 1, Eq. (2.17))
approximates at a fraction of the cost, and the selection behind scipy's
``interp_decomp(A, k, rand=False)``. It costs O(mn min(m, n)) and needs A's entries (an
implicit operator is densified), so it is a reference for small problems, not a method for
large ones.

This module is also the proof that a pivot rule plugs into the pipeline of
:mod:`rdr_jax.id_cur.selection` as one class. It overrides Lines 1-2 (``row_basis``: the
basis is A's triangular factor, not a sketch) and declares itself greedy. No edit to the
pipeline was needed. ``docs/design.md`` ("Methods as strategy objects") lists the files.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp

from rdr_jax.id_cur import pivoting as P
from rdr_jax.id_cur.selection import PivotRule, RowBasis

__all__ = ["FullCPQR"]


@dataclasses.dataclass(frozen=True)
class FullCPQR(PivotRule):
    """Column-pivoted QR on A itself (deterministic: the key is not used for the skeletons).

    Lines 1-2 take ``X = R`` from ``A = Q R`` when A is tall, else ``X = A``. The pivots of
    CPQR, and ``T = X_1^+ X = A_1^+ A``, do not change under the orthogonal Q, and R has only
    ``min(m, n)`` rows. Line 3 is CPQR on X. Line 4 is CPQR on ``C^H`` (the default row step).
    Why: the classic baseline that the randomized rules are measured against.

    Args:
      impl: ``"lapack"`` (geqp3; CPU/GPU) or ``"xla"`` (pivoted Gram-Schmidt; every backend).
    """

    impl: str = "lapack"

    name: ClassVar[str] = "full_cpqr"
    #: X does not depend on l, and CPQR's first k pivots do not depend on later ones
    greedy: ClassVar[bool] = True

    def __post_init__(self):
        if self.impl not in ("lapack", "xla"):
            raise ValueError(f"impl must be 'lapack' or 'xla'; got {self.impl!r}")

    def check_backend(self):
        if self.impl == "lapack" and not P.cpqr_available():
            raise P.BackendError(
                "FullCPQR needs column-pivoted QR (geqp3), which has no lowering on backend "
                f"{jax.default_backend()!r}; use FullCPQR(impl='xla') (portable)")

    def check_method(self, method):
        if method.power_iters:
            raise ValueError("FullCPQR pivots on A itself, so power iterations do not apply; "
                             f"got power_iters = {method.power_iters}")

    def row_basis(self, key, op, sz, method):
        """``X = R`` of ``A = Q R`` for a tall A, else ``X = A`` (dense; n columns)."""
        A = op.todense()
        m, n = op.shape
        X = jnp.linalg.qr(A, mode="r") if m > n else A
        return RowBasis(X, None, None)

    def select(self, key, X, k):
        return P.cpqr(X, k, impl=self.impl)
