"""rdr_jax: randomized dimension reduction with statistical guarantees, in JAX.

Main functions (the key is always the first argument):

* Chapter 2, skeletons: :func:`interpolative`, :func:`interpolative_to_tolerance`, :func:`cur`,
  :func:`select_columns`, :func:`select_rows`, :func:`select_skeletons`; options on a
  :class:`Method` (pivoting :class:`LUPP`, :class:`CPQR`, :class:`DEIM`, :class:`Leverage`,
  :class:`SRCUR`; sketches :class:`Gaussian`, :class:`SRTT`, :class:`SparseSign`); the pipeline
  lives in :mod:`rdr_jax.id_cur`.
* Rangefinder and SVD: :func:`rangefinder`, :func:`rsvd`; error bounds: :func:`error_bound`.
* Chapter 3, canonical angles: :mod:`rdr_jax.angles`.
* Beyond the thesis (``docs/changes-0.4.md``): :func:`block_krylov_svd`, :func:`rpcholesky`,
  ``cur(..., core="cross")``, :func:`rsvd_loo`, ``error_bound(..., spectral="krylov")`` and
  the :class:`ARP` pivot rule (``Method("arp")``).
* Chapters 4-5 (``pip install -e ".[train]"`` in a clone): :mod:`rdr_jax.dac`,
  :mod:`rdr_jax.adawac`, :mod:`rdr_jax.models`, :mod:`rdr_jax.training`.
* Inputs: :func:`as_operator` accepts dense arrays, scipy.sparse, BCOO, scipy LinearOperators,
  implicit and factored operators (:mod:`rdr_jax.operators`).
"""

from rdr_jax import datasets, matrices, norms, operators, sketching
from rdr_jax import angles
from rdr_jax import certify, diagnostics
from rdr_jax import id_cur
from rdr_jax.certify import ErrorBound, KrylovCertificate, error_bound
from rdr_jax.loo import LOOEstimate, NystromEstimate, nystrom_loo, rsvd_loo
from rdr_jax.id_cur.decompositions import (CUR, ColumnID, RowID, TwoSidedID, cur, cur_with_bound,
                                           id_to_svd, interpolative, interpolative_to_tolerance,
                                           interpolative_with_bound)
from rdr_jax.id_cur.fixed_accuracy import StopReason
from rdr_jax.diagnostics import EtaBound, LowRankError, eta_bound, exact_singular_values, lowrank_error
from rdr_jax.norms import frobenius_norm, spectral_norm, spectral_norm_upper
from rdr_jax.operators import (
    DenseOperator,
    FactoredOperator,
    ImplicitOperator,
    LinearOperator,
    SparseOperator,
    as_operator,
    factored_operator,
    implicit_operator,
)
from rdr_jax.randomized_svd import RSVD, range_sketch, rangefinder, rsvd
from rdr_jax.krylov import block_krylov_svd, krylov_range
from rdr_jax.pivoted_cholesky import (KernelEntries, PartialCholesky, PSDEntries, kernel_entries,
                                rpcholesky)
from rdr_jax.id_cur.selection import (CPQR, DEIM, LUPP, SRCUR, ColumnSelection, Leverage, Method,
    RowSelection, Skeletons, select_columns, select_rows, select_skeletons)
from rdr_jax.sketching import SRTT, Gaussian, SparseSign
from rdr_jax.id_cur.full_cpqr import FullCPQR
from rdr_jax.id_cur.arp import ARP, arp_select
from rdr_jax.id_cur.streaming import (StreamingSkeletons, cur_from_skeletons, retrieve_skeletons,
    streaming_sketches, streaming_skeletons)
from rdr_jax import distributed
from rdr_jax.distributed import shard
from rdr_jax.id_cur.outofcore import DiskMatrix, streaming_cur
from rdr_jax.randomized_svd import CholeskyQR2, Householder, cholesky_qr2
from rdr_jax._src.jit import compilation_cache

__version__ = "0.4.1"

__all__ = [
    "angles", "certify", "diagnostics", "id_cur", "datasets", "matrices", "norms", "operators", "sketching",
    "CUR", "ColumnID", "RowID", "TwoSidedID", "cur", "id_to_svd", "interpolative",
    "interpolative_to_tolerance", "interpolative_with_bound", "cur_with_bound", "StopReason",
    "ErrorBound", "error_bound",
    "EtaBound", "LowRankError", "eta_bound", "exact_singular_values", "lowrank_error",
    "frobenius_norm", "spectral_norm", "spectral_norm_upper",
    "DenseOperator", "FactoredOperator", "ImplicitOperator", "LinearOperator", "SparseOperator",
    "as_operator", "factored_operator", "implicit_operator",
    "RSVD", "range_sketch", "rangefinder", "rsvd", "block_krylov_svd", "krylov_range",
    "rpcholesky", "PartialCholesky", "PSDEntries", "KernelEntries", "kernel_entries",
    "KrylovCertificate", "LOOEstimate", "NystromEstimate", "rsvd_loo", "nystrom_loo",
    "ARP", "arp_select",
    "CPQR", "DEIM", "LUPP", "SRCUR", "Leverage", "FullCPQR", "Method", "ColumnSelection", "RowSelection",
    "Skeletons", "select_columns", "select_rows", "select_skeletons",
    "Gaussian", "SRTT", "SparseSign",
    "StreamingSkeletons", "cur_from_skeletons", "retrieve_skeletons", "streaming_sketches",
    "streaming_skeletons", "DiskMatrix", "streaming_cur",
    "distributed", "shard", "CholeskyQR2", "Householder", "cholesky_qr2",
    "compilation_cache",
]
