"""Optional dependencies: the core install is jax, numpy, scipy and jaxtyping.

numba (CPU kernels of the sparse products; without it the XLA formulas run), h5py (HDF5 and
MATLAB v7.3 files), scikit-learn (the bundled digits) and tqdm (progress bars) are extras
(``pyproject.toml``): :func:`require` imports one where a feature needs it and says which extra
installs it; :func:`progress_bar` is a tqdm bar, or a silent stand-in without tqdm.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["EXTRAS", "progress_bar", "require"]

#: module -> (pip distribution, rdr_jax extra that installs it)
EXTRAS = {"numba": ("numba", "kernels"), "h5py": ("h5py", "io"),
          "sklearn": ("scikit-learn", "data"), "tqdm": ("tqdm", "progress")}


def require(module: str, purpose: str) -> Any:
    """Import the optional ``module`` (a key of :data:`EXTRAS`) for ``purpose``, or raise an
    ImportError that names the install command."""
    dist, extra = EXTRAS[module]
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{purpose} needs {dist}, which is not installed: pip install {dist} "
                          f"(or pip install -e \".[{extra}]\" in the rdr_jax clone)") from e


class _SilentBar:
    """What rdr_jax calls on a tqdm bar, doing nothing (tqdm is not installed)."""

    def __init__(self, iterable=None, **_: Any):
        self._it = iterable

    def __iter__(self):
        return iter(self._it if self._it is not None else ())

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass

    def set_postfix_str(self, *args: Any, **kwargs: Any) -> None:
        pass

    def set_description(self, *args: Any, **kwargs: Any) -> None:
        pass

    def write(self, s: str) -> None:
        print(s)

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def progress_bar(iterable=None, **kwargs: Any):
    """``tqdm.auto.tqdm(iterable, **kwargs)``; without tqdm (an extra) a bar that shows
    nothing, so a progress bar is never the reason a computation fails."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _SilentBar(iterable, **kwargs)
    return tqdm(iterable, **kwargs)
