"""Minimal reproducer (jax + numpy only) for an XLA:CPU miscompile in YNNPACK fusions
(``"__ynn_fusion"`` in ``jax.jit(f).lower(...).compile().as_text()``).

Fails on jax 0.10.2 / jaxlib 0.10.2 (CPU, x86-64, 2 cores). One elementwise value read by
two ``pad`` ops at different offsets, added together and to a reduction, all in one YNNPACK
fusion (the reduce is what sends the fusion to YNNPACK):

* ``vjp``: the VJP of ``mean((z[:8] - z[8:])**2)`` (autodiff pads the two slices'
  cotangents back into the 16 rows) plus a reduction. Part of the padded window is read from
  uninitialised memory: values up to 1e37 and a different number of wrong entries on every
  call, with a constant or a data-dependent cotangent; some runs segfault.
* ``pad``: the same by hand, ``e = 2 x``; ``pad(e, lo=0, hi=8) + pad(e, lo=8, hi=0) +
  g.sum(2)``. Rows 14-15 lose their ``2 x``, the same on every call.

AdaWAC's consistency term ``lam * mean((z[:b] - z[b:])**2)`` is the ``vjp`` case; it made
trim + ACR training non-deterministic. Compiled with ``compiler_options={
"xla_cpu_experimental_ynn_fusion_type": ""}`` (no YNNPACK fusions) both cases are right;
``rdr_jax.training`` compiles its train steps that way on CPU.

    python docs/xla_cpu_ynn_pad_repro.py
"""
import jax
import jax.numpy as jnp
import numpy as np

B, H = 8, 6
rng = np.random.default_rng(0)


def case_vjp(z, g):
    _, vjp = jax.vjp(lambda z: ((z[:B] - z[B:]) ** 2).reshape(B, -1).mean(1), z)
    return vjp(jnp.full((B,), 0.0625, jnp.float32))[0] + g.reshape(
        2 * B, H, 2, H, 2, -1).sum((2, 4))


def case_pad(x, g):
    e = x * 2.0
    return (jnp.pad(e, ((0, B), (0, 0), (0, 0), (0, 0)))
            + jnp.pad(e, ((B, 0), (0, 0), (0, 0), (0, 0))) + g.sum(2))


z = rng.standard_normal((2 * B, H, H, 64)).astype(np.float32)
g2 = rng.standard_normal((2 * B, 2 * H, 2 * H, 64)).astype(np.float32)
d = 0.0625 * 2 * (z[:B] - z[B:]) / (H * H * 64)
want_vjp = np.concatenate([d, -d]) + g2.reshape(2 * B, H, 2, H, 2, 64).sum((2, 4))
x = rng.standard_normal((B, H, H, 32)).astype(np.float32)
g1 = rng.standard_normal((2 * B, H, 2, H, 32)).astype(np.float32)
want_pad = 2 * np.concatenate([x, x]) + g1.sum(2)

print(f"jax {jax.__version__}, {jax.devices()[0].platform}")
for name, f, args, want in (("vjp", case_vjp, (z, g2), want_vjp),
                            ("pad", case_pad, (x, g1), want_pad)):
    for opts in (None, {"xla_cpu_experimental_ynn_fusion_type": ""}):
        jf = jax.jit(f, compiler_options=opts)
        n = jf.lower(*args).compile().as_text().count('"__ynn_fusion"')
        for _ in range(3):
            got = np.asarray(jf(*args))
            bad = ~np.isclose(got, want, rtol=1e-4, atol=1e-5)
            print(f"{name}, {n} YNN fusion(s): {int(bad.sum())} of {bad.size} entries wrong, "
                  f"max |out| {np.nanmax(np.abs(got)):.3g} (right: {np.abs(want).max():.3g})",
                  flush=True)
