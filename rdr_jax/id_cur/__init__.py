"""Chapter 2: randomized pivoting for interpolative and CUR decompositions.

Read top to bottom: :mod:`~rdr_jax.id_cur.pivoting` (the pivoting kernels),
:mod:`~rdr_jax.id_cur.selection` (Algorithm 1: sketch, pivot on columns, pivot on rows),
:mod:`~rdr_jax.id_cur.decompositions` (ID and CUR), :mod:`~rdr_jax.id_cur.fixed_accuracy`
(the rank from a tolerance), :mod:`~rdr_jax.id_cur.streaming` (one pass) and
:mod:`~rdr_jax.id_cur.outofcore` (matrices on disk).
"""
