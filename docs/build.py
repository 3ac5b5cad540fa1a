"""Build the HTML API reference of ``rdr_jax`` from its docstrings with pdoc, offline.

Usage (from the repository root)::

    python docs/build.py                   # writes docs/api/; open docs/api/index.html
    python docs/build.py --strict          # exit 1 on any warning (what CI checks)
    python docs/build.py --out /tmp/api    # another output folder

Every public module of the package is documented (``rdr_jax`` and, recursively, every
submodule whose name does not start with an underscore, including the subpackages ``dac``,
``adawac`` and ``models`` that the package's ``__all__`` does not list). Docstrings are read in
the Google style (``Args:``, ``Returns:``, ``Raises:``, ``Example:`` sections) with the
reStructuredText roles the library uses (``:func:``, ``:class:``, ``:mod:``, ``:meth:``,
``:attr:``, ``:data:``), which pdoc turns into links. The pages need no network: MathJax and
Mermaid are off, the search index is a local ``search.js``.

Warnings (all counted, and fatal under ``--strict``):

* ``import``: a module that fails to import (it would be missing from the reference);
* ``pdoc``: a warning pdoc itself emits while documenting, e.g. a type annotation it cannot
  evaluate;
* ``xref``: a cross-reference role whose target pdoc cannot resolve, so that it renders as
  plain code instead of a link (pdoc drops these silently; this script finds them by tagging
  every role before pdoc converts it and checking the rendered page for the link);
* ``landing``: a name of the landing page (:data:`LANDING`) that is not a documented object;
* ``role``: a role pdoc does not understand (``:ref:``, ...), a role target that is not a
  plain dotted name (``title <target>``), or a role inside a code block, where it is never
  linked. Sphinx's ``:class:`~a.b.C``` is accepted and links ``a.b.C`` (shown in full: pdoc
  cannot shorten a link's text).

Each warning names the source file and line of the docstring and, for a broken
reference, the public object it most likely meant. The summary line reads
``rdr_jax API reference: N modules, P pages, W warnings -> DIR``.

The reference opens on a landing page (``index.html``, ``docs/templates/index.html.jinja2``)
that leads with the main functions grouped by task (:data:`LANDING`), each with the first
line of its docstring and a link to its page, then lists the subpackages and modules. A
landing entry that does not resolve to a documented object is a warning (``landing``).

Two pdoc behaviours are adjusted for this package: the "Submodules" list of a page shows every
documented child module (``docs/templates/module.html.jinja2``), and the constructors of
``typing.NamedTuple`` classes are documented with their class's module globals (Python creates
``__new__`` in a synthetic ``namedtuple_<Name>`` module, so pdoc could not evaluate
postponed annotations such as ``Optional[jax.Array]``); the library's objects are restored
when the build ends.
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import dataclasses
import difflib
import functools
import importlib.util
import pkgutil
import re
import sys
import warnings
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
DEFAULT_OUT = DOCS / "api"
TEMPLATES = DOCS / "templates"
PACKAGE = "rdr_jax"

#: the roles pdoc converts (``pdoc.docstrings.rst``); the same pattern, so both agree
_ROLE = re.compile(r"(:py)?:(mod|func|data|const|class|meth|attr|exc|obj):`([^`]+)`")
#: any role left after pdoc's conversion (``:math:`` is converted as well)
_OTHER_ROLE = re.compile(r"(?<![\w:]):([A-Za-z][\w-]*):`[^`]+`")
_PLAIN_TARGET = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
#: a token that survives Markdown, pygments and pdoc's linker unchanged
_MARK = "XrEfMaRk{}E"
_MARK_RE = re.compile(r"XrEfMaRk(\d+)E")
_INLINE_CODE_BEFORE = re.compile(r"<code>((?:(?!</?code>).)*)</code>\Z", re.S)

#: the landing page of a package: an introduction, then groups of (title, names relative to
#: the package); packages not listed get the module list only
LANDING: dict[str, dict] = {
    "rdr_jax": {
        "intro": "Randomized dimension reduction with statistical guarantees, in JAX (the "
                 "methods of the thesis of that name). The main functions first, grouped by "
                 "task, then every module. Usage: <code>import rdr_jax as R</code>; which "
                 "decomposition and method to use: <code>docs/choosing-a-method.md</code>.",
        "groups": [
            ("Interpolative and CUR decompositions (Chapter 2)",
             ["interpolative", "interpolative_to_tolerance", "cur", "id_to_svd",
              "select_columns", "select_rows", "select_skeletons"]),
            ("Randomized SVD and rangefinder", ["rsvd", "rangefinder"]),
            ("Configuration: the method and the sketch",
             ["Method", "Gaussian", "SRTT", "SparseSign", "LUPP", "CPQR", "DEIM", "Leverage",
              "SRCUR"]),
            ("Errors and error bounds",
             ["error_bound", "ErrorBound", "lowrank_error", "eta_bound"]),
            ("Canonical angles (Chapter 3)",
             ["angles.canonical_angles", "angles.space_agnostic_bound",
              "angles.unbiased_estimate", "angles.angle_report", "angles.plan_budget"]),
            ("Data augmentation consistency (Chapter 4)",
             ["dac.fit_dac", "dac.fit_da_erm", "dac.label_invariant_theory"]),
            ("AdaWAC (Chapter 5): the sample weights beta and the losses",
             ["adawac.init_beta", "adawac.beta_gradient", "adawac.beta_mirror_ascent",
              "adawac.BetaMirrorAscentState", "adawac.cross_entropy", "adawac.consistency",
              "adawac.dice_loss", "adawac.wac_objective", "adawac.wac_dice_loss",
              "adawac.WACLossOptions", "adawac.WACAux"]),
            ("AdaWAC: data, augmentation and metrics",
             ["adawac.load_synapse", "adawac.load_acdc", "adawac.load_mni152",
              "adawac.phantom_cases", "adawac.cardiac_phantom_cases", "adawac.PhantomOptions",
              "adawac.CardiacPhantomOptions", "adawac.make_subset",
              "adawac.SegmentationData", "adawac.SliceDataset", "adawac.VolumeDataset",
              "adawac.two_views", "adawac.batch_two_views", "adawac.augment",
              "adawac.AugmentParams", "adawac.TwoViews", "adawac.predict_volume",
              "adawac.volume_metrics", "adawac.aggregate_metrics", "adawac.VolumeMetrics",
              "adawac.MetricsSummary"]),
            ("Inputs: matrices and operators",
             ["as_operator", "implicit_operator", "factored_operator"]),
        ],
    },
}


@dataclasses.dataclass(frozen=True)
class DocWarning:
    """One problem found by the build.

    Attributes:
      kind: ``"import"``, ``"pdoc"``, ``"xref"``, ``"landing"`` or ``"role"`` (see the module
        docstring).
      where: ``"path/to/file.py:LINE"`` relative to the repository root when the source is
        known, else the module name.
      message: what is wrong and, for a broken reference, a suggested target.
    """

    kind: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: [{self.kind}] {self.message}"


@dataclasses.dataclass
class BuildReport:
    """What :func:`build` wrote and found.

    Attributes:
      out: the output folder.
      modules: the documented module names, in page order.
      pages: the HTML files written (one per module, plus the landing page ``index.html``).
      warnings: the problems found, sorted by location; empty for a clean build.
    """

    out: Path
    modules: list[str]
    pages: list[Path]
    warnings: list[DocWarning]

    def summary(self, package: str = PACKAGE) -> str:
        """The one-line summary printed by the command line."""
        return (f"{package} API reference: {len(self.modules)} modules, {len(self.pages)} pages, "
                f"{len(self.warnings)} warnings -> {self.out}")

    def by_file(self) -> dict[str, list[DocWarning]]:
        """Warnings grouped by source file (or module, when the file is unknown)."""
        groups: dict[str, list[DocWarning]] = {}
        for w in self.warnings:
            groups.setdefault(w.where.split(":")[0], []).append(w)
        return groups


def discover_modules(package: str = PACKAGE) -> list[str]:
    """The public modules of ``package``: itself and every submodule, recursively, whose
    name has no component starting with ``_`` (found on disk, without importing them).

    Raises:
      ModuleNotFoundError: if ``package`` cannot be found.
    """
    spec = importlib.util.find_spec(package)
    if spec is None:
        raise ModuleNotFoundError(f"package {package!r} not found")
    names = [package]

    def walk(paths: list[str], prefix: str) -> None:
        for info in sorted(pkgutil.iter_modules(paths), key=lambda i: i.name):
            if info.name.startswith("_"):
                continue
            name = f"{prefix}.{info.name}"
            names.append(name)
            if info.ispkg:
                walk([str(Path(p) / info.name) for p in paths], name)

    if spec.submodule_search_locations:
        walk(list(spec.submodule_search_locations), package)
    return names


@dataclasses.dataclass(frozen=True)
class _Role:
    text: str          # the role as written, e.g. ":func:`cur`"
    target: str        # "cur"
    docstring: str     # the docstring it appears in (as pdoc saw it)
    source_file: Path | None
    nth: int = 0       # earlier occurrences of the same text in that docstring


class _Locator:
    """Finds the file and line of a role in the package sources."""

    def __init__(self, files: list[Path]):
        self._files = files
        self._lines: dict[Path, list[str]] = {}

    def lines(self, path: Path) -> list[str]:
        if path not in self._lines:
            try:
                self._lines[path] = path.read_text(encoding="utf-8").splitlines()
            except OSError:
                self._lines[path] = []
        return self._lines[path]

    def find(self, needle: str, docstring: str, hint: Path | None,
             nth: int = 0) -> tuple[Path, int] | None:
        """The line of the ``nth`` (from 0) occurrence of ``needle`` within a copy of
        ``docstring`` in the sources (the hint file first), else the first line holding
        ``needle`` anywhere."""
        files = ([hint] if hint else []) + [f for f in self._files if f != hint]
        doc_lines = [ln.strip() for ln in docstring.splitlines() if ln.strip()]
        first = doc_lines[0] if doc_lines else ""
        span = len(docstring.splitlines()) + 2
        for path in files:
            lines = self.lines(path)
            for i, line in enumerate(lines):
                if first and first in line:
                    hits = [j for j in range(i, min(i + span, len(lines))) if needle in lines[j]]
                    if hits:
                        return path, hits[min(nth, len(hits) - 1)] + 1
        for path in files:
            for i, line in enumerate(self.lines(path)):
                if needle in line:
                    return path, i + 1
        return None


def _where(loc: tuple[Path, int] | None, fallback: str) -> str:
    if loc is None:
        return fallback
    path, line = loc
    try:
        shown = path.resolve().relative_to(ROOT)
    except ValueError:
        shown = path
    return f"{shown}:{line}"


class _Build:
    """State of one build: the role registry, the warnings, the public-name index."""

    def __init__(self, package: str, roots: list[Path], source_files: list[Path]):
        self.package = package
        self.roots = [str(r.resolve()) for r in roots]
        self.roles: list[_Role] = []
        self.role_ids: dict[tuple[str, str, Path | None, int], int] = {}
        self.locator = _Locator(source_files)
        self.warnings: dict[tuple[str, str, str], None] = {}
        self.all_modules: dict = {}

    def warn(self, kind: str, where: str, message: str) -> None:
        self.warnings.setdefault((kind, where, message), None)

    def role_id(self, role: _Role) -> int:
        key = (role.text, role.docstring, role.source_file, role.nth)
        if key not in self.role_ids:
            self.role_ids[key] = len(self.roles)
            self.roles.append(role)
        return self.role_ids[key]

    def locate(self, role: _Role, fallback: str) -> str:
        return _where(self.locator.find(role.text, role.docstring, role.source_file, role.nth),
                      fallback)

    def is_external(self, target: str) -> bool:
        """True for a target outside the documented package that exists (a builtin, or an
        importable ``module.attr...``): pdoc links only documented modules, so such a
        reference rightly renders as code. A missing external target is still a warning."""
        name = target.removesuffix("()")
        parts = name.split(".")
        if parts[0] == self.package or not _PLAIN_TARGET.fullmatch(name):
            return False
        if len(parts) == 1:
            return hasattr(builtins, name)
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except Exception:       # any import failure means "not this prefix"
                continue
            try:
                for attr in parts[i:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                return False
            return True
        return False

    @functools.cached_property
    def public_names(self) -> list[str]:
        """Full names of the public objects (computed only when a reference is broken)."""
        return _public_names(self.all_modules)

    def suggest(self, target: str) -> str:
        """The public object a broken ``target`` most likely meant."""
        tail = target.removesuffix("()")
        public = self.public_names
        hits = [n for n in public if n == tail or n.endswith("." + tail)]
        if hits:
            return " or ".join(hits[:3])
        close = difflib.get_close_matches(tail, public, n=1, cutoff=0.8)
        return close[0] if close else ""

    # -- pdoc hooks -------------------------------------------------------------------------

    def marking_rst(self, original_rst):
        """A wrapper of ``pdoc.docstrings.rst`` that tags every role with a marker token and
        reports roles pdoc would leave unconverted or mangled."""

        def rst(contents: str, source_file: Path | None) -> str:
            def mark(m: re.Match) -> str:
                # Sphinx's "~a.b.c" (display "c"): pdoc cannot shorten, so link "a.b.c"
                target = m.group(3).removeprefix("~")
                role = _Role(m.group(0), target, contents, source_file,
                             contents.count(m.group(0), 0, m.start()))
                if not _PLAIN_TARGET.fullmatch(target):
                    self.warn("role", self.locate(role, str(source_file)),
                              f"{role.text}: the target is not a plain dotted name (pdoc "
                              "does not support 'title <target>')")
                rewritten = m.group(0) if target == m.group(3) else f":{m.group(2)}:`{target}`"
                return rewritten + _MARK.format(self.role_id(role))

            converted = original_rst(_ROLE.sub(mark, contents), source_file)
            for m in _OTHER_ROLE.finditer(converted):
                role = _Role(m.group(0), "", contents, source_file)
                self.warn("role", self.locate(role, str(source_file)),
                          f"{m.group(0)}: pdoc does not support the role :{m.group(1)}: "
                          "(it renders literally)")
            return converted

        return rst

    def check_page(self, html: str, module_name: str) -> str:
        """Classify every marked role on a rendered page (linked, unresolved, or inside a
        code block) and return the page without the markers."""
        main = html.find('<main class="pdoc">')
        for m in _MARK_RE.finditer(html):
            if m.start() < main:      # the navigation's table of contents is never linked
                continue
            role = self.roles[int(m.group(1))]
            if not _PLAIN_TARGET.fullmatch(role.target):
                continue              # reported when marked
            code = _INLINE_CODE_BEFORE.search(html, max(0, m.start() - 4000), m.start())
            if code is None:
                self.warn("role", self.locate(role, module_name),
                          f"{role.text} is inside a code block, where it is not linked: "
                          f"write ``{role.target}``")
            elif "<a " not in code.group(1) and not self.is_external(role.target):
                hint = self.suggest(role.target)
                fix = (f"write :{role.text.split(':')[-2]}:`{hint}`" if hint and " or " not in hint
                       else f"candidates: {hint}" if hint
                       else f"write ``{role.target}`` (not a documented public object)")
                self.warn("xref", self.locate(role, module_name),
                          f"{role.text} does not resolve on the page of {module_name}; {fix}")
        return _MARK_RE.sub("", html)


def _public_names(all_modules) -> list[str]:
    """Full names of the public objects, at the module that defines them."""
    import pdoc.doc

    names: list[str] = []

    def visit(doc) -> None:
        for member in doc.own_members:
            if member.name.startswith("_") or member.taken_from != (member.modulename,
                                                                    member.qualname):
                continue
            names.append(member.fullname)
            if isinstance(member, pdoc.doc.Class):
                visit(member)

    for module in all_modules.values():
        names.append(module.fullname)
        visit(module)
    return sorted(set(names))


@contextlib.contextmanager
def _namedtuple_globals(modules) -> Iterator[None]:
    """Give each NamedTuple constructor its class's module while pdoc documents it (see the
    module docstring); restore the original ``__module__`` afterwards."""
    patched = []
    try:
        for module in modules:
            for obj in vars(module).values():
                if not (isinstance(obj, type) and issubclass(obj, tuple)
                        and hasattr(obj, "_fields") and obj.__module__ == module.__name__):
                    continue
                new = obj.__dict__.get("__new__")
                fn = getattr(new, "__func__", new)
                old = getattr(fn, "__module__", None)
                if isinstance(old, str) and old.startswith("namedtuple_"):
                    patched.append((fn, old))
                    fn.__module__ = module.__name__
        yield
    finally:
        for fn, old in patched:
            fn.__module__ = old


@contextlib.contextmanager
def _search_without_markers() -> Iterator[None]:
    """Let pdoc's search index convert docstrings without the role markers."""
    import pdoc.render_helpers
    import pdoc.search

    original = pdoc.search.to_html
    pdoc.search.to_html = lambda markdown: _MARK_RE.sub("", pdoc.render_helpers.to_html(markdown))
    try:
        yield
    finally:
        pdoc.search.to_html = original


@contextlib.contextmanager
def _pdoc_configured(build: _Build, *, show_source: bool) -> Iterator[None]:
    """Configure pdoc for this package and install the role marker; undo both on exit."""
    import pdoc.docstrings
    import pdoc.render

    env = pdoc.render.env
    saved_globals, saved_loader = dict(env.globals), env.loader
    original_rst = pdoc.docstrings.rst
    pdoc.render.configure(docformat="google", math=False, mermaid=False, search=True,
                          show_source=show_source, template_directory=TEMPLATES,
                          footer_text="rdr_jax: randomized dimension reduction with "
                                      "statistical guarantees")
    pdoc.docstrings.rst = build.marking_rst(original_rst)
    pdoc.docstrings.convert.cache_clear()     # conversions are cached by docstring
    try:
        yield
    finally:
        pdoc.docstrings.rst = original_rst
        pdoc.docstrings.convert.cache_clear()
        env.globals.clear()
        env.globals.update(saved_globals)
        env.loader = saved_loader


def _record(build: _Build, caught: list[warnings.WarningMessage], where: str) -> None:
    """Keep the warnings that pdoc or the documented package emitted (third-party
    deprecation notices at import are not documentation problems)."""
    import pdoc

    pdoc_dir = str(Path(pdoc.__file__).resolve().parent)
    for w in caught:
        filename = str(Path(w.filename).resolve())
        if filename.startswith(pdoc_dir):
            build.warn("pdoc", where, str(w.message).strip().splitlines()[0])
        elif any(filename.startswith(root) for root in build.roots):
            build.warn("pdoc", where, f"{w.category.__name__} at import: {w.message}")


def _clean(out: Path, package: str) -> None:
    """Remove the pages an earlier build of ``package`` wrote to ``out``: HTML files and the
    folders they leave empty, nothing else (``out`` may be any folder)."""
    tree = out / package
    if tree.is_dir():
        for page in tree.rglob("*.html"):
            page.unlink()
        for folder in sorted((d for d in tree.rglob("*") if d.is_dir()), reverse=True) + [tree]:
            if not any(folder.iterdir()):
                folder.rmdir()
    for name in (f"{package}.html", "index.html", "search.js"):
        (out / name).unlink(missing_ok=True)


def _summary(docstring: str) -> str:
    """The first paragraph of a docstring as HTML: escaped, inline code and roles as
    ``<code>``."""
    import html

    first = " ".join(docstring.strip().split("\n\n")[0].split())
    text = html.escape(first, quote=False)
    text = re.sub(r"(?::[a-z]+:)?``?~?([^`]+?)``?", r"<code>\1</code>", text)   # "~a.b": a.b
    return text


#: words after which a period does not end a sentence
_ABBREVIATIONS = ("e.g", "i.e", "cf", "vs", "etc", "Ch", "Chs", "Sec", "Eq", "Eqs", "Fig", "Thm",
                  "Alg", "Prop", "Def", "No")


def _first_sentence(summary: str) -> str:
    """The first sentence of a summary (HTML from :func:`_summary`), without its final
    period: it ends at the first ``". "`` outside parentheses and inline code that does not
    follow an abbreviation (``Ch.``, ``Eq.``, ``e.g.``), so "(thesis Ch. 5, Eq. (5.6))" is
    kept whole."""
    depth, in_code, i = 0, False, 0
    while i < len(summary):
        if summary.startswith("<code>", i) or summary.startswith("</code>", i):
            in_code = summary[i + 1] != "/"
            i = summary.index(">", i) + 1
            continue
        c = summary[i]
        if not in_code:
            if c == "(":
                depth += 1
            elif c == ")":
                depth = max(depth - 1, 0)
            elif c == "." and depth == 0 and summary[i + 1:i + 2] in (" ", ""):
                word = re.split(r"[\s(]", summary[:i])[-1]
                if word not in _ABBREVIATIONS and summary[i + 1:].strip():
                    return summary[:i]
        i += 1
    return summary.removesuffix(".")


def _page_of(modulename: str) -> str:
    return modulename.replace(".", "/") + ".html"


def _landing(state: _Build, all_modules, package: str) -> dict:
    """The landing page's groups and module list (see :data:`LANDING`)."""
    spec = LANDING.get(package, {})
    groups = []
    for title, names in spec.get("groups", []):
        entries = []
        for name in names:
            full = f"{package}.{name}"
            parent, _, attr = full.rpartition(".")
            doc = None
            if parent in all_modules:
                doc = all_modules[parent].get(attr)
            if doc is None:
                state.warn("landing", package, f"{full} is not a documented object")
                continue
            home, qualname = doc.taken_from        # the defining module, when documented
            if home in all_modules and all_modules[home].get(qualname) is not None:
                doc = all_modules[home].get(qualname)
            entries.append({"name": full, "href": f"{_page_of(doc.modulename)}#{doc.qualname}",
                            "summary": _summary(doc.docstring)})
        groups.append({"title": title, "id": re.sub(r"\W+", "-", title.lower()).strip("-"),
                       "entries": entries})
    modules = [{"name": name, "href": _page_of(name), "depth": name.count("."),
                "summary": _first_sentence(_summary(module.docstring))}
               for name, module in all_modules.items()]
    return {"title": package, "intro": spec.get("intro", ""), "groups": groups,
            "modules": modules}


def _check_landing(state: _Build, landing: dict, out: Path, package: str) -> None:
    """Every landing link must reach an anchor of a written page."""
    for group in landing["groups"]:
        for entry in group["entries"]:
            page, _, anchor = entry["href"].partition("#")
            path = out / page
            if not path.is_file() or f'id="{anchor}"' not in path.read_text(encoding="utf-8"):
                state.warn("landing", package, f"{entry['name']}: link {entry['href']} does "
                                               "not reach its section")


def build(out: Path | str = DEFAULT_OUT, *, package: str = PACKAGE,
          show_source: bool = True) -> BuildReport:
    """Render the API reference of ``package`` into ``out`` and report every problem.

    Args:
      out: output folder (created; files of an earlier build there are replaced).
      package: the top-level package to document (importable).
      show_source: add a "View Source" panel to every object (about half the build time;
        the checks do not depend on it).

    Returns:
      a :class:`BuildReport`; ``report.warnings`` is empty for a clean build.

    Raises:
      ModuleNotFoundError: if ``package`` cannot be found.
    """
    import pdoc.doc
    import pdoc.render

    out = Path(out)
    names = discover_modules(package)
    spec = importlib.util.find_spec(package)
    roots = [Path(p) for p in (spec.submodule_search_locations or [])] or [Path(spec.origin).parent]
    sources = sorted(f for r in roots for f in r.rglob("*.py"))
    state = _Build(package, roots, sources)

    all_modules: dict[str, pdoc.doc.Module] = state.all_modules
    for name in names:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                all_modules[name] = pdoc.doc.Module.from_name(name)
            except RuntimeError as e:    # pdoc wraps any import error
                cause = e.__cause__ or e
                state.warn("import", name, f"cannot import {name}: "
                           f"{type(cause).__name__}: {cause}".splitlines()[0])
        _record(state, caught, name)

    _clean(out, package)
    pages: list[Path] = []
    objects = [m.obj for m in all_modules.values()]
    with _pdoc_configured(state, show_source=show_source), _namedtuple_globals(objects):
        for name, module in all_modules.items():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                html = state.check_page(pdoc.render.html_module(module, all_modules), name)
            _record(state, caught, name)
            page = out / f"{name.replace('.', '/')}.html"
            page.parent.mkdir(parents=True, exist_ok=True)
            page.write_text(html, encoding="utf-8")
            pages.append(page)
        # the index page and the search data (from the cached conversions, markers removed)
        with (_search_without_markers(), warnings.catch_warnings(record=True) as caught):
            warnings.simplefilter("always")
            landing = _landing(state, all_modules, package)
            index = pdoc.render.env.get_template("index.html.jinja2").render(
                all_modules=all_modules, root_module_name=None, **landing)
            pages.append(out / "index.html")
            pages[-1].write_text(index, encoding="utf-8")
            _check_landing(state, landing, out, package)
            search = pdoc.render.search_index(all_modules)
            if search:
                (out / "search.js").write_text(search, encoding="utf-8")
        _record(state, caught, package)

    ordered = sorted((DocWarning(k, w, m) for k, w, m in state.warnings),
                     key=lambda w: (_sort_key(w.where), w.kind, w.message))
    return BuildReport(out, list(all_modules), pages, ordered)


def _sort_key(where: str) -> tuple[str, int]:
    path, _, line = where.partition(":")
    return path, int(line) if line.isdigit() else 0


def main(argv: list[str] | None = None) -> int:
    """Command line: build, print the warnings per file and the summary; with ``--strict``
    return 1 when there is any warning."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"output folder (default: {DEFAULT_OUT.relative_to(ROOT)})")
    parser.add_argument("--strict", action="store_true",
                        help="exit with status 1 on any warning (unresolved cross references, "
                             "modules that fail to import, pdoc warnings)")
    parser.add_argument("--package", default=PACKAGE,
                        help=f"top-level package to document (default: {PACKAGE})")
    parser.add_argument("--no-source", action="store_true",
                        help='leave out the "View Source" panels (about twice as fast)')
    args = parser.parse_args(argv)
    if str(ROOT) not in sys.path:            # document the checkout, installed or not
        sys.path.insert(0, str(ROOT))
    report = build(args.out, package=args.package, show_source=not args.no_source)
    for where, group in report.by_file().items():
        print(f"{where}: {len(group)} warning(s)")
        for w in group:
            print(f"  {w}")
    print(report.summary(args.package))
    return 1 if args.strict and report.warnings else 0


if __name__ == "__main__":
    sys.exit(main())
