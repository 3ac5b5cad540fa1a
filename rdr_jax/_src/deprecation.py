"""Old names that keep working for one release, each with a DeprecationWarning naming the new one."""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import inspect
import sys
import warnings

#: module paths moved by the 0.2 layout (old -> new)
MOVED_MODULES = {f"rdr_jax.{m}": f"rdr_jax.id_cur.{m}" for m in (
    "pivoting", "selection", "decompositions", "fixed_accuracy", "streaming", "outofcore")}


def warn(old: str, new: str, stacklevel: int = 3) -> None:
    """Warn that ``old`` is deprecated in favour of ``new`` (removed in the next release), at
    the user's line (``stacklevel`` is kept for old callers and ignored)."""
    from rdr_jax._src.validation import user_stacklevel
    warnings.warn(f"{old} is deprecated and will be removed in the next release; use {new}",
                  DeprecationWarning, stacklevel=user_stacklevel())


class _MovedModuleLoader(importlib.abc.Loader):
    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        warn(spec.name, self.new, stacklevel=8)
        return importlib.import_module(self.new)

    def exec_module(self, module):
        pass


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    """``import rdr_jax.selection`` (an old path) imports ``rdr_jax.id_cur.selection``."""

    def find_spec(self, name, path=None, target=None):
        new = MOVED_MODULES.get(name)
        if new is None:
            return None
        return importlib.util.spec_from_loader(name, _MovedModuleLoader(new))


def install() -> None:
    """Register the finder for the moved module paths (idempotent)."""
    if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())


def moved_attribute(package: str, name: str):
    """``package.name`` for a moved submodule (``rdr_jax.selection``), with the warning."""
    new = MOVED_MODULES.get(f"{package}.{name}")
    if new is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    warn(f"{package}.{name}", new)
    module = importlib.import_module(new)
    setattr(sys.modules[package], name, module)        # warn once per process
    return module


def renamed_kwargs(kwargs: dict, renames: dict, where: str) -> dict:
    """``kwargs`` with deprecated keyword names replaced by their new names (warning once per
    name); a TypeError when both spellings are given."""
    out = dict(kwargs)
    for old, new in renames.items():
        if old in out:
            if new in out:
                raise TypeError(f"{where}: got both {old!r} (deprecated) and {new!r}")
            warn(f"{where}({old}=...)", f"{where}({new}=...)", stacklevel=4)
            out[new] = out.pop(old)
    return out


def with_deprecated_kwargs(handler):
    """Decorator for an entry point whose 0.1 keywords moved elsewhere: keywords its signature
    does not name go to ``handler(args, kwargs, old) -> (args, kwargs)`` (or ``-> (g, args,
    kwargs)`` to call another function g), which warns and maps them onto the new spelling
    (or raises a TypeError naming it). The signature users see (``inspect.signature``, docs)
    is the new one."""
    def decorate(f):
        names = set(inspect.signature(f).parameters)

        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            old = {k: kwargs.pop(k) for k in list(kwargs) if k not in names}
            if not old:
                return f(*args, **kwargs)
            out = handler(args, kwargs, old)
            g, (args, kwargs) = (out[0], out[1:]) if len(out) == 3 else (f, out)
            return g(*args, **kwargs)
        return wrapper
    return decorate


def renamed_field(owner: str, old: str, new: str) -> property:
    """A read-only property ``old`` of a result type that warns and returns field ``new``."""
    def get(self):
        warn(f"{owner}.{old}", f"{owner}.{new}")
        return getattr(self, new)
    return property(get, doc=f"Deprecated (0.2): use ``{new}``.")
