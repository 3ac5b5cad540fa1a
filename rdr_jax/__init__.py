"""rdr_jax: randomized dimension reduction with statistical guarantees, in JAX.

Foundations (this package's top level):

* :func:`as_operator` and :mod:`rdr_jax.operators` -- the linear-operator protocol
  (dense, scipy.sparse, BCOO, implicit, factored);
* :mod:`rdr_jax.sketching` -- Gaussian, SRTT and sparse sign embeddings;
* :func:`rangefinder`, :func:`range_sketch`, :func:`rsvd` -- randomized rangefinder/SVD
  with (stable or plain) power iterations;
* :mod:`rdr_jax.norms` -- randomized spectral/Frobenius norm estimators;
* :mod:`rdr_jax.matrices` -- the thesis' test matrices (SNN, prescribed spectra, Kahan);
* :mod:`rdr_jax.datasets` -- offline loaders (MNIST IDX, Matrix Market, YaleFace .mat,
  scikit-learn digits).

Chapter 2 (randomized pivoting ID/CUR): :mod:`rdr_jax.pivoting` (LUPP, CPQR, leverage
scores, swaps, eta), :mod:`rdr_jax.skeletons` (Algorithm ``algo:sketch_pivot_CUR_general``,
the thesis' seven variants, streaming, fixed accuracy), :mod:`rdr_jax.id_cur`
(:func:`interpolative`, :func:`cur`, :func:`id_to_svd`, :func:`lowrank_error`).
Chapter 3 (canonical angles): :mod:`rdr_jax.angles`.
"""

from rdr_jax import datasets, matrices, norms, operators, sketching
from rdr_jax import angles
from rdr_jax import id_cur, pivoting, skeletons
from rdr_jax.id_cur import (CUR, ColumnID, RowID, TwoSidedID, certificate, cur, id_to_svd,
                            interpolative, lowrank_error)
from rdr_jax.skeletons import select_columns, select_rows, select_skeletons
from rdr_jax.norms import frobenius_norm, spectral_norm, spectral_norm_upper
from rdr_jax.operators import (
    DenseOperator,
    FactoredOperator,
    ImplicitOperator,
    LinearOperator,
    SparseOperator,
    as_operator,
    exact_singular_values,
    factored_operator,
    implicit_operator,
)
from rdr_jax.randomized_svd import RSVD, range_sketch, rangefinder, rsvd

__version__ = "0.1.0"

__all__ = [
    "angles", "id_cur", "pivoting", "skeletons",
    "CUR", "ColumnID", "RowID", "TwoSidedID", "certificate", "cur", "id_to_svd", "interpolative",
    "lowrank_error", "select_columns", "select_rows", "select_skeletons",
    "DenseOperator", "FactoredOperator", "ImplicitOperator", "LinearOperator", "SparseOperator",
    "RSVD", "as_operator", "datasets", "exact_singular_values", "factored_operator",
    "frobenius_norm", "implicit_operator", "matrices", "norms", "operators", "range_sketch",
    "rangefinder", "rsvd", "sketching", "spectral_norm", "spectral_norm_upper",
]
