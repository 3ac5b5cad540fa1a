"""Private helpers shared by every part of rdr_jax (validation, floating point, tall QR,
compiled kernels, small linear-algebra utilities). Not a public API."""
