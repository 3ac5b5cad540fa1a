"""rdr_jax: randomized dimension reduction with statistical guarantees, in JAX.

Foundations (this package's top level):

* :func:`as_operator` and :mod:`rdr_jax.operators` -- the linear-operator protocol
  (dense, scipy.sparse, BCOO, implicit, factored);
* :mod:`rdr_jax.sketching` -- Gaussian, SRTT and sparse sign embeddings and their choice
  objects (``Gaussian()``, ``SRTT()``, ``SparseSign(zeta)``);
* :func:`rangefinder`, :func:`range_sketch`, :func:`rsvd` -- randomized rangefinder/SVD
  with (stable or plain) power iterations;
* :mod:`rdr_jax.norms` -- randomized spectral/Frobenius norm estimators;
* :mod:`rdr_jax.matrices` -- the thesis' test matrices (SNN, prescribed spectra, Kahan);
* :mod:`rdr_jax.datasets` -- offline loaders (MNIST IDX, Matrix Market, YaleFace .mat,
  scikit-learn digits).

Chapter 2 (randomized pivoting ID/CUR), one module per responsibility:

* :mod:`rdr_jax.id_cur.pivoting` -- the pivoting kernels (LUPP, CPQR, leverage scores, swaps, eta);
* :mod:`rdr_jax.id_cur.selection` -- Algorithm ``algo:sketch_pivot_CUR_general``: the pivoting
  choices (``LUPP()``, ``CPQR()``, ``DEIM()``, ``Leverage()``, ``SRCUR()``), :class:`Method`,
  the thesis' seven variants, :func:`select_columns`, :func:`select_rows`,
  :func:`select_skeletons`;
* :mod:`rdr_jax.id_cur.decompositions` -- :func:`interpolative`, :func:`cur`, :func:`id_to_svd`;
* :mod:`rdr_jax.id_cur.fixed_accuracy` -- blocked randomized LUPP to a tolerance;
* :mod:`rdr_jax.id_cur.streaming` -- the one-pass Algorithm ``algo:sketch_pivot_CUR_online``;
* :mod:`rdr_jax.diagnostics` -- exact errors, certificates, reference singular values
  (host side);
* :mod:`rdr_jax.certify` -- a posteriori error certificates with a stated probability for
  any low-rank approximation (:func:`error_certificate`; beyond the thesis).

Chapter 3 (canonical angles): :mod:`rdr_jax.angles`.

Chapters 4-5 and their models (subpackages imported on their own, ``import rdr_jax.dac``):

* :mod:`rdr_jax.dac` -- data augmentation consistency (linear theory, two-layer and deep
  DAC vs DA-ERM);
* :mod:`rdr_jax.adawac` -- AdaWAC (the beta mirror-ascent optax transform, segmentation
  data, losses, metrics, training);
* :mod:`rdr_jax.models` -- the Flax NNX models (Ch. 4 classifiers, Ch. 5 segmentation networks);
* :mod:`rdr_jax.training` -- the functional training plumbing they share.

API reference: ``python docs/build.py`` writes it to ``docs/api/`` (open ``index.html``).
"""

from rdr_jax import datasets, matrices, norms, operators, sketching
from rdr_jax import angles
from rdr_jax import certify, diagnostics
from rdr_jax import id_cur
from rdr_jax.certify import ErrorCertificate, error_certificate
from rdr_jax.id_cur.decompositions import (CUR, ColumnID, RowID, TwoSidedID, cur, id_to_svd,
    interpolative)
from rdr_jax.diagnostics import (Certificate, LowRankError, certificate, exact_singular_values,
                                 lowrank_error)
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
from rdr_jax.id_cur.selection import (CPQR, DEIM, LUPP, SRCUR, ColumnSelection, Leverage, Method,
    RowSelection, Skeletons, select_columns, select_rows, select_skeletons)
from rdr_jax.sketching import SRTT, Gaussian, SparseSign
from rdr_jax.id_cur.streaming import (StreamingSkeletons, cur_from_skeletons, retrieve_skeletons,
    streaming_sketches, streaming_skeletons)
from rdr_jax import distributed
from rdr_jax.distributed import shard
from rdr_jax.id_cur.outofcore import DiskMatrix, streaming_cur
from rdr_jax.randomized_svd import CholeskyQR2, Householder, cholesky_qr2
from rdr_jax._src.jit import compilation_cache

from rdr_jax._src import deprecation as _deprecation

_deprecation.install()


def __getattr__(name):          # rdr_jax.selection & co. moved to rdr_jax.id_cur (0.2)
    return _deprecation.moved_attribute(__name__, name)


__version__ = "0.2.0"

__all__ = [
    "angles", "certify", "diagnostics", "id_cur", "datasets", "matrices", "norms", "operators", "sketching",
    "CUR", "ColumnID", "RowID", "TwoSidedID", "cur", "id_to_svd", "interpolative",
    "ErrorCertificate", "error_certificate",
    "Certificate", "LowRankError", "certificate", "exact_singular_values", "lowrank_error",
    "frobenius_norm", "spectral_norm", "spectral_norm_upper",
    "DenseOperator", "FactoredOperator", "ImplicitOperator", "LinearOperator", "SparseOperator",
    "as_operator", "factored_operator", "implicit_operator",
    "RSVD", "range_sketch", "rangefinder", "rsvd",
    "CPQR", "DEIM", "LUPP", "SRCUR", "Leverage", "Method", "ColumnSelection", "RowSelection",
    "Skeletons", "select_columns", "select_rows", "select_skeletons",
    "Gaussian", "SRTT", "SparseSign",
    "StreamingSkeletons", "cur_from_skeletons", "retrieve_skeletons", "streaming_sketches",
    "streaming_skeletons", "DiskMatrix", "streaming_cur",
    "distributed", "shard", "CholeskyQR2", "Householder", "cholesky_qr2",
    "compilation_cache",
]
