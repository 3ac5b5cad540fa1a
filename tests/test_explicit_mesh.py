"""Meshes from ``jax.make_mesh`` (Explicit axes by default in recent jax) work as inputs."""

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

import rdr_jax as R
from rdr_jax.distributed import auto_axes


def _explicit_mesh():
    mesh = jax.make_mesh((1,), ("x",))
    types = getattr(mesh, "axis_types", None)
    return mesh, types


def test_explicit_mesh_array_gives_the_unsharded_result():
    mesh, _ = _explicit_mesh()
    A = np.random.default_rng(0).standard_normal((40, 30)).astype(np.float32)
    A_ex = jax.device_put(A, NamedSharding(mesh, P("x", None)))
    key = jax.random.key(1)
    ref = R.cur(key, A, 6)
    for arr in (A_ex, R.shard(A, mesh, P("x", None))):
        got = R.cur(key, arr, 6)
        np.testing.assert_array_equal(np.asarray(got.cols), np.asarray(ref.cols))
        np.testing.assert_array_equal(np.asarray(got.rows), np.asarray(ref.rows))
        np.testing.assert_allclose(np.asarray(got.U), np.asarray(ref.U), rtol=1e-5, atol=1e-6)
    L = jax.device_put(A[:, :5], NamedSharding(mesh, P("x", None)))
    Rf = jax.device_put(A[:20, :5], NamedSharding(mesh, P("x", None)))
    op = R.factored_operator(L, np.ones(5, np.float32), Rf)
    c = R.cur(key, op, 3)
    assert c.cols.shape == (3,)


def test_auto_axes_converts_only_explicit_named_shardings():
    mesh, types = _explicit_mesh()
    a = jax.device_put(np.ones((4, 2)), NamedSharding(mesh, P("x", None)))
    b = auto_axes(a)
    if types is not None:
        assert all(t == jax.sharding.AxisType.Auto for t in b.sharding.mesh.axis_types)
    np.testing.assert_array_equal(np.asarray(b), np.ones((4, 2)))
    plain = jax.numpy.ones(3)
    assert auto_axes(plain) is plain
    assert auto_axes(np.ones(2)).shape == (2,)
