"""Deprecations, optax's pattern: a module that renames or removes a public name keeps a
module-level table ``_DEPRECATIONS = {old name: (message, object)}`` and sets
``__getattr__ = deprecation_getattr(__name__, _DEPRECATIONS)``; the old name then keeps working
for one release with a DeprecationWarning at the user's line. Release 0.3 removed every 0.1
spelling (``docs/changes-0.3.md``); the tables are empty until the next rename."""

from __future__ import annotations

import warnings
from typing import Any, Callable


def warn(old: str, new: str) -> None:
    """Warn that ``old`` is deprecated in favour of ``new`` (removed in the next release), at
    the user's line."""
    from rdr_jax._src.validation import user_stacklevel
    warnings.warn(f"{old} is deprecated and will be removed in the next release; use {new}",
                  DeprecationWarning, stacklevel=user_stacklevel())


def deprecation_getattr(module: str, table: dict[str, tuple[str, Any]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` serving the deprecated names of ``table`` (``old -> (the new
    spelling, the object)``) with a DeprecationWarning; any other name is an AttributeError."""
    def __getattr__(name: str):
        if name in table:
            new, obj = table[name]
            warn(f"{module}.{name}", new)
            return obj
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    return __getattr__
