"""Regression: a row ID (``side="row"``) of a row-sharded A runs its column ID on ``A^H``,
whose rows are A's columns; its orthonormaliser must be resolved for ``A^H``. It was
resolved for A (CholeskyQR2 with 4 row blocks on an unsharded skeleton), and the compiled
program deadlocked for k above the numerical rank (the QR route of the coefficients).
Runs on 4 of the 8 virtual devices of the suite's multi-device subprocess
(``tests/_multidevice.py``, with its timeout); also a 4-device ``jax.make_mesh`` mesh with
its default axis types (the 1-device case is in tests/test_explicit_mesh.py)."""

from tests import _multidevice


def row_id_job(workdir):
    """The checks, as assertions (a job of ``tests/_multidevice.py``): "OK" when all hold."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    jax.config.update("jax_enable_x64", True)
    import rdr_jax as R
    from rdr_jax.id_cur.selection import resolve_method
    rng = np.random.default_rng(0)
    A = (rng.standard_normal((1200, 40)) / np.arange(1, 41)) @ rng.standard_normal((40, 400))
    A = A + 1e-3 * rng.standard_normal(A.shape)                # numerical rank ~40 < k = 50
    mesh = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    rows = jax.device_put(A, NamedSharding(mesh, P("x", None)))
    cols = jax.device_put(A, NamedSharding(mesh, P(None, "x")))
    m = resolve_method("lupp")
    assert m.for_operator(R.as_operator(rows)) == m.replace(orthonormalize=R.CholeskyQR2(blocks=4))
    assert m.for_operator(R.as_operator(rows), adjoint=True).orthonormalize == R.Householder()
    assert m.for_operator(R.as_operator(cols), adjoint=True).orthonormalize == R.CholeskyQR2(blocks=4)
    key = jax.random.key(7)
    ref = R.interpolative(key, jnp.asarray(A), 50, side="row", on_rank_deficient="ignore")
    # a mesh from jax.make_mesh with its default (Explicit, in recent jax) axis types: XLA's LU
    # refuses such row-sharded operands unless the entry point converts them (distributed.auto_axes)
    explicit = jax.device_put(A, NamedSharding(jax.make_mesh((4,), ("x",)), P("x", None)))
    c_ref = R.cur(key, jnp.asarray(A), 20)
    c_ex = R.cur(key, explicit, 20)
    np.testing.assert_array_equal(np.asarray(c_ex.cols), np.asarray(c_ref.cols))
    np.testing.assert_allclose(np.asarray(c_ex.U), np.asarray(c_ref.U), rtol=1e-9, atol=1e-12)
    for X in (rows, cols, explicit):
        d = R.interpolative(key, X, 50, side="row", on_rank_deficient="ignore")
        np.testing.assert_array_equal(np.asarray(d.rows), np.asarray(ref.rows))
        np.testing.assert_allclose(np.asarray(d.W), np.asarray(ref.W), atol=1e-8)
    return "OK"


def test_row_id_of_row_sharded_matrix_completes_and_matches(multidevice):
    assert _multidevice.job(multidevice, "row_id") == "OK"
