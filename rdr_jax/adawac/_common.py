"""Helpers shared by the two phantoms (:mod:`rdr_jax.adawac.phantom`,
:mod:`rdr_jax.adawac.cardiac_phantom`; private)."""

from __future__ import annotations

import numbers

import jax
import numpy as np

from rdr_jax._src.validation import check_int, check_key
from rdr_jax.adawac.data import SegmentationData, VolumeDataset, slices_from_volumes

__all__ = ["check_case_args", "check_nonneg", "interp_matrix", "phantom_dataset"]


def interp_matrix(n_out: int, n_in: int) -> np.ndarray:
    """``(n_out, n_in)`` linear-interpolation weights from ``n_in`` cell centres to ``n_out``."""
    pos = np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0.0, n_in - 1.0)
    lo = np.minimum(np.floor(pos).astype(int), n_in - 2) if n_in > 1 else np.zeros(n_out, int)
    frac = pos - lo
    m = np.zeros((n_out, n_in))
    m[np.arange(n_out), lo] = 1.0 - frac
    if n_in > 1:
        m[np.arange(n_out), lo + 1] += frac
    return m


def check_nonneg(name: str, value) -> float:
    """``value`` as a float; TypeError unless a real number, ValueError unless finite >= 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number; got {type(value).__name__} {value!r}")
    value = float(value)
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0; got {value}")
    return value


def check_case_args(key, num_cases, num_slices, size, num_test_cases,
                    test_per_train: tuple[int, int]):
    """Validated ``(key, num_cases, num_slices, size, num_test_cases)`` of a phantom data set;
    ``num_test_cases=None`` becomes ``max(1, a * num_cases // b)`` for ``test_per_train =
    (a, b)`` (Synapse 12 : 18 -> (2, 3); ACDC 20 : 70 -> (2, 7))."""
    key = check_key(key)
    num_cases = check_int("num_cases", num_cases, low=1)
    num_slices = check_int("num_slices", num_slices, low=4)
    size = check_int("size", size, low=8)
    if num_test_cases is None:
        a, b = test_per_train
        num_test_cases = max(1, (a * num_cases) // b)
    num_test_cases = check_int("num_test_cases", num_test_cases, low=0)
    return key, num_cases, num_slices, size, num_test_cases


def phantom_dataset(key, num_cases: int, num_test_cases: int, prefix: str,
                    class_names: tuple[str, ...], make_volume) -> SegmentationData:
    """Draw ``num_cases + num_test_cases`` volumes ``make_volume(rng) -> (image, label)``
    from the host generator seeded with ``jax.random.key_data(key)``; the first
    ``num_cases`` (named ``<prefix>0000..``) become training slices, the rest test volumes
    (None when there are none). Shared by the CT and the cine-MRI phantoms."""
    seed = np.asarray(jax.random.key_data(key)).astype(np.uint64).ravel().tolist()
    rng = np.random.default_rng(seed)
    vols = [make_volume(rng) for _ in range(num_cases + num_test_cases)]
    names = [f"{prefix}{i:04d}" for i in range(num_cases + num_test_cases)]
    train = slices_from_volumes([v[0] for v in vols[:num_cases]],
                                [v[1] for v in vols[:num_cases]], names[:num_cases])
    test = None
    if num_test_cases:
        test = VolumeDataset(tuple(v[0] for v in vols[num_cases:]),
                             tuple(v[1] for v in vols[num_cases:]), tuple(names[num_cases:]))
    return SegmentationData(train, test, None, len(class_names), class_names)
