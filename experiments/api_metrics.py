"""Size of the public surface: the measures issue 24 ("one way to say each thing") tracks.

Usage::

    python experiments/api_metrics.py            # prints the table
    python experiments/api_metrics.py --json m.json

Measures (static analysis of ``rdr_jax/`` with :mod:`ast`, plus the entry points' signatures):

* parameters of each core entry point (target: at most 8, scikit-learn's ``randomized_svd`` has 8),
  and of every public function of every public module (``__all__``; issue 32's target: none
  above 8);
* import cycles between rdr_jax modules (every ``import`` statement, function-level ones too);
* private names imported across modules (``from rdr_jax.a import _b`` or ``a._b`` on an imported
  module), outside the internal package ``rdr_jax._src``;
* docstring lines per line of code (target: at most 0.4);
* README lines (target: at most 300);
* tests of a concrete pivot rule or sketch class, and ``jax.jit`` used outside
  ``rdr_jax/_src/jit.py`` (issue 32's strategy objects and one jit spelling; target: none).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "rdr_jax"
ENTRY_POINTS = ("interpolative", "interpolative_to_tolerance", "cur", "rsvd", "rangefinder",
                "select_columns", "select_rows", "select_skeletons", "error_bound")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules():
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _resolve(mod: str, node: ast.ImportFrom, is_pkg: bool) -> str:
    if not node.level:
        return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(mods: dict) -> tuple[dict, list]:
    """Edges between rdr_jax modules, and the private names imported across them."""
    edges: dict[str, set] = {m: set() for m in mods}
    private = []
    for mod, path in mods.items():
        tree = ast.parse(path.read_text())
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in mods:
                        edges[mod].add(a.name)
                        if a.asname:
                            aliases[a.asname] = a.name
            elif isinstance(node, ast.ImportFrom):
                src = _resolve(mod, node, path.name == "__init__.py")
                for a in node.names:
                    full = f"{src}.{a.name}"
                    if full in mods:                      # a module imported by name
                        edges[mod].add(full)
                        aliases[a.asname or a.name] = full
                    elif src in mods:
                        edges[mod].add(src)
                        if (a.name.startswith("_") and not a.name.startswith("__")
                                and not src.startswith("rdr_jax._src") and src != mod):
                            private.append(f"{mod}: from {src} import {a.name}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                target = aliases[node.value.id]
                if not target.startswith("rdr_jax._src") and target != mod:
                    private.append(f"{mod}: {target}.{node.attr}")
    # a package's import of its own submodule is not a dependency of the submodule's
    return edges, sorted(set(private))


def cycles(edges: dict) -> list:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w.startswith(v + "."):        # a package importing its own submodules
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def doc_and_code_lines(mods: dict) -> tuple[int, int]:
    doc = code = 0
    for path in mods.values():
        src = path.read_text()
        tree = ast.parse(src)
        doc_lines = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                body = node.body
                if body and isinstance(body[0], ast.Expr) and isinstance(
                        getattr(body[0], "value", None), ast.Constant) and isinstance(
                        body[0].value.value, str):
                    doc_lines.update(range(body[0].lineno, body[0].end_lineno + 1))
        for i, line in enumerate(src.splitlines(), 1):
            s = line.strip()
            if i in doc_lines:
                doc += 1
            elif s and not s.startswith("#"):
                code += 1
    return doc, code


def parameter_counts() -> dict:
    import rdr_jax
    out = {}
    for name in ENTRY_POINTS:
        f = getattr(rdr_jax, name, None)
        if f is not None:
            out[name] = len(inspect.signature(f).parameters)
    return out


def public_functions() -> dict:
    """``module.qualname`` -> the function, for every public function (in a public module's
    ``__all__``, defined in rdr_jax)."""
    import importlib
    out = {}
    for name in sorted(_modules()):
        if any(part.startswith("_") for part in name.split(".")):
            continue
        try:
            mod = importlib.import_module(name)
        except ImportError:          # a module of an extra that is not installed
            continue
        for attr in getattr(mod, "__all__", ()):
            f = getattr(mod, attr, None)
            if inspect.isfunction(f) and f.__module__.startswith("rdr_jax"):
                out[f"{f.__module__}.{f.__qualname__}"] = f
    return dict(sorted(out.items()))


def public_function_parameters() -> dict:
    """``module.qualname`` -> parameter count of every public function (signatures followed
    through ``functools.wraps``)."""
    return {name: len(inspect.signature(f).parameters) for name, f in public_functions().items()}


def concrete_type_branches(mods: dict | None = None) -> list[str]:
    """``path:line`` of every test of a concrete pivot rule or sketch class in rdr_jax
    (``type(x) is LUPP``, ``isinstance(x, (Gaussian, SRTT))``, ``type(x) in (...)``): issue
    32's strategy objects replace them with declarations (target: none)."""
    from rdr_jax.id_cur.selection import PIVOTS
    from rdr_jax.sketching import SKETCHES
    names = {c.__name__ for c in list(PIVOTS.values()) + list(SKETCHES.values())}

    def named(node) -> bool:
        elts = node.elts if isinstance(node, ast.Tuple) else [node]
        return any(isinstance(e, (ast.Name, ast.Attribute)) and
                   (e.id if isinstance(e, ast.Name) else e.attr) in names for e in elts)

    out = []
    for mod, path in (mods or _modules()).items():
        for node in ast.walk(ast.parse(path.read_text())):
            hit = (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                   and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2
                   and named(node.args[1]))
            hit = hit or (isinstance(node, ast.Compare) and isinstance(node.left, ast.Call)
                          and isinstance(node.left.func, ast.Name) and node.left.func.id == "type"
                          and any(named(c) for c in node.comparators))
            if hit:
                out.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return sorted(out)


def direct_jax_jit(mods: dict | None = None) -> list[str]:
    """``path:line`` of every ``jax.jit`` (or ``from jax import jit``) in rdr_jax outside
    ``rdr_jax/_src/jit.py``: the package has one jit spelling, ``rdr_jax._src.jit.jit``
    (issue 32; target: none)."""
    out = []
    for mod, path in (mods or _modules()).items():
        if mod == "rdr_jax._src.jit":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            hit = (isinstance(node, ast.Attribute) and node.attr == "jit"
                   and isinstance(node.value, ast.Name) and node.value.id == "jax")
            hit = hit or (isinstance(node, ast.ImportFrom) and node.module == "jax"
                          and any(a.name == "jit" for a in node.names))
            if hit:
                out.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}")
    return sorted(out)


def measure() -> dict:
    mods = _modules()
    edges, private = import_graph(mods)
    doc, code = doc_and_code_lines(mods)
    readme = (ROOT / "README.md").read_text().splitlines()
    public = public_function_parameters()
    return {"parameters": parameter_counts(), "public_functions": len(public),
            "public_over_8": {k: n for k, n in public.items() if n > 8},
            "import_cycles": cycles(edges),
            "private_cross_module_imports": private, "docstring_lines": doc, "code_lines": code,
            "docstring_ratio": round(doc / code, 3), "readme_lines": len(readme),
            "modules": len(mods), "concrete_type_branches": concrete_type_branches(mods),
            "direct_jax_jit": direct_jax_jit(mods)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the measures to this file")
    args = ap.parse_args(argv)
    m = measure()
    print("entry point parameters (target <= 8):")
    for name, n in m["parameters"].items():
        print(f"  {name:28s} {n:3d}  {'ok' if n <= 8 else 'OVER'}")
    over = m["public_over_8"]
    print(f"public functions with more than 8 parameters: {len(over)} of "
          f"{m['public_functions']}")
    for name, n in sorted(over.items(), key=lambda x: -x[1]):
        print(f"  {name:60s} {n:3d}")
    print(f"import cycles: {len(m['import_cycles'])}")
    for c in m["import_cycles"]:
        print("  " + " <-> ".join(c))
    print(f"private names imported across modules: {len(m['private_cross_module_imports'])}")
    for p in m["private_cross_module_imports"]:
        print("  " + p)
    print(f"docstring lines / code lines: {m['docstring_lines']} / {m['code_lines']} = "
          f"{m['docstring_ratio']:.2f} (target <= 0.40)")
    print(f"README lines: {m['readme_lines']} (target <= 300); modules: {m['modules']}")
    print(f"tests of a concrete pivot/sketch class: {len(m['concrete_type_branches'])} "
          "(target 0)")
    for p in m["concrete_type_branches"]:
        print("  " + p)
    print(f"jax.jit outside rdr_jax/_src/jit.py: {len(m['direct_jax_jit'])} (target 0)")
    for p in m["direct_jax_jit"]:
        print("  " + p)
    if args.json:
        Path(args.json).write_text(json.dumps(m, indent=1))
    return m


if __name__ == "__main__":
    main()
