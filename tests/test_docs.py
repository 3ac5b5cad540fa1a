"""The API reference (``docs/build.py``, pdoc) builds offline and without warnings.

The build runs in-process: no rdr_jax module touches ``jax_enable_x64`` or other jax
configuration at import (checked below), and the build restores pdoc's configuration and the
objects it adjusts. The "View Source" panels are left out (half the build time; the checks do
not depend on them).
"""

import importlib.util
import re
import sys
import textwrap
from pathlib import Path

import jax
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load_build_script():
    spec = importlib.util.spec_from_file_location("rdr_jax_docs_build", ROOT / "docs" / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module        # dataclasses look their module up while defined
    spec.loader.exec_module(module)
    return module


docs_build = _load_build_script()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The rdr_jax reference, built once for this module."""
    from rdr_jax.id_cur.decompositions import ColumnID

    x64, new_module = jax.config.jax_enable_x64, ColumnID.__new__.__module__
    report = docs_build.build(tmp_path_factory.mktemp("api"), show_source=False)
    assert jax.config.jax_enable_x64 == x64, "building the docs changed jax_enable_x64"
    assert ColumnID.__new__.__module__ == new_module     # the NamedTuple adjustment is undone
    return report


def test_builds_without_warnings(reference):
    """The CI check: what ``python docs/build.py --strict`` enforces."""
    lines = [f"{where}:\n" + "\n".join(f"  {w}" for w in group)
             for where, group in reference.by_file().items()]
    assert not reference.warnings, "API reference warnings:\n" + "\n".join(lines)


def test_every_public_module_has_a_page(reference):
    modules = docs_build.discover_modules()
    assert reference.modules == modules
    for name in ("rdr_jax", "rdr_jax.angles", "rdr_jax.certify", "rdr_jax.randomized_svd",
                 "rdr_jax.dac.linear", "rdr_jax.adawac.transform", "rdr_jax.models.unet",
                 "rdr_jax.training"):
        assert name in modules
    assert not [m for m in modules if any(p.startswith("_") for p in m.split("."))]
    for name in modules:
        assert (reference.out / f"{name.replace('.', '/')}.html").is_file(), name
    assert len(reference.pages) == len(modules) + 1          # + index.html
    assert (reference.out / "search.js").stat().st_size > 0


def test_landing_page_leads_with_the_main_functions(reference):
    """index.html is a landing page (not a redirect, not the flat list of every name): the
    main functions grouped by task, each linking to its section, then every module."""
    index = (reference.out / "index.html").read_text(encoding="utf-8")
    assert "http-equiv" not in index
    main = index[index.index('<main class="pdoc">'):]
    links = re.findall(r'<a href="([^"#]+)#([^"]+)"><code>([^<]+)</code></a>', main)
    names = [name for _, _, name in links]
    assert names[:4] == ["rdr_jax.interpolative", "rdr_jax.interpolative_to_tolerance",
                         "rdr_jax.cur", "rdr_jax.id_to_svd"]
    for name in ("rdr_jax.rsvd", "rdr_jax.rangefinder", "rdr_jax.select_columns",
                 "rdr_jax.error_bound", "rdr_jax.Method", "rdr_jax.SparseSign",
                 "rdr_jax.angles.canonical_angles", "rdr_jax.adawac.beta_mirror_ascent"):
        assert name in names, name
    assert len(names) < 80                                   # the main ones, not ~300
    for page, anchor, name in links:                         # each reaches its section
        assert f'id="{anchor}"' in (reference.out / page).read_text(encoding="utf-8"), name
    # the functions are documented where they are defined, e.g. id_cur/decompositions.html
    assert ("rdr_jax/id_cur/decompositions.html", "interpolative",
            "rdr_jax.interpolative") in links
    modules = main[main.index('<section id="modules">'):]
    for sub in ("rdr_jax.angles", "rdr_jax.id_cur", "rdr_jax.dac", "rdr_jax.adawac",
                "rdr_jax.models", "rdr_jax.training"):
        assert f'<code>{sub}</code>' in modules, sub
    assert main.index('<section id="modules">') > main.index("rdr_jax.interpolative")


def test_landing_page_lists_the_adawac_api(reference):
    """The AdaWAC sections name every public name of rdr_jax.adawac, the beta step and the
    loss terms a user's own train step needs first."""
    import rdr_jax.adawac

    index = (reference.out / "index.html").read_text(encoding="utf-8")
    sections = re.findall(r'<section id="(adawac[^"]*)">(.*?)</section>', index, re.S)
    assert sections, "no AdaWAC section on the landing page"
    listed = {name for _, body in sections
              for name in re.findall(r"<code>rdr_jax\.adawac\.(\w+)</code>", body)}
    for name in ("init_beta", "beta_gradient", "beta_mirror_ascent", "wac_objective",
                 "wac_dice_loss", "cross_entropy", "consistency"):
        assert name in listed, name
    assert listed == set(rdr_jax.adawac.__all__), set(rdr_jax.adawac.__all__) ^ listed


def test_module_summaries_end_outside_parentheses(reference):
    """The landing page's one-line module summaries are whole sentences: none is cut inside
    a parenthesis, e.g. at "(thesis Ch." of "(thesis Ch. 5, Algorithm 6)"."""
    index = (reference.out / "index.html").read_text(encoding="utf-8")
    modules = index[index.index('<section id="modules">'):]
    items = re.findall(r"<li[^>]*>\s*<a href=\"[^\"]+\"><code>([\w.]+)</code></a>(.*?)</li>",
                       modules, re.S)
    assert len(items) == len(reference.modules)
    for name, summary in items:
        text = re.sub(r"<code>.*?</code>", "", summary)
        assert text.count("(") == text.count(")"), (name, summary.strip())
        assert not re.search(r"\b(Ch|Eq|Sec|Thm|e\.g|i\.e)\s*$", text.strip()), name
    transform = dict(items)["rdr_jax.adawac.transform"]
    assert "(thesis Ch. 5, Algorithm 6)" in transform


def test_first_sentence_of_a_summary():
    first = docs_build._first_sentence
    assert first("Losses (thesis Ch. 5, Eq. (C.9)). More text.") == (
        "Losses (thesis Ch. 5, Eq. (C.9))")
    assert first("One, e.g. two. Three.") == "One, e.g. two"
    assert first("Calls <code>f(x. y)</code> once. Then.") == "Calls <code>f(x. y)</code> once"
    assert first("No period") == "No period"
    assert first("Ends with a period.") == "Ends with a period"


def _page(reference, module: str) -> str:
    return (reference.out / f"{module.replace('.', '/')}.html").read_text(encoding="utf-8")


def test_key_pages_document_the_entry_points(reference):
    top = _page(reference, "rdr_jax")
    for name in ("cur", "interpolative", "interpolative_to_tolerance", "rsvd", "error_bound",
                 "ErrorBound", "CUR", "Method"):
        assert f'<section id="{name}">' in top, name
    # Google sections and doctest examples are rendered, not left as plain text
    def section(name):
        start = top.index(f'<section id="{name}">')
        return top[start:top.index("</section>", start)]

    assert '<h6 id="arguments">Arguments:</h6>' in section("cur")
    assert '<span class="gp">&gt;&gt;&gt; </span>' in top
    assert '<section id="space_agnostic_bound">' in _page(reference, "rdr_jax.angles")
    assert '<section id="beta_mirror_ascent">' in _page(reference, "rdr_jax.adawac.transform")
    # the top page lists the subpackages that its __all__ leaves out
    nav = top[top.index("<h2>Submodules</h2>"):top.index("<h2>API Documentation</h2>")]
    for sub in ("dac", "adawac", "models", "randomized_svd", "training"):
        assert f'<a href="rdr_jax/{sub}.html">{sub}</a>' in nav, sub


def test_cross_references_are_links(reference):
    """Roles become links to the documented objects (the full paths written for pdoc)."""
    sketching = _page(reference, "rdr_jax.sketching")
    assert re.search(r'<code><a href="#Gaussian">(rdr_jax\.sketching\.)?Gaussian(\(\))?</a></code>',
                     sketching)
    decompositions = _page(reference, "rdr_jax.id_cur.decompositions")
    assert re.search(r'<code><a href="[^"]*#Method">rdr_jax\.(id_cur\.selection\.)?Method</a>'
                     r'</code>', decompositions)
    plots = _page(reference, "rdr_jax.adawac.plots")
    assert re.search(r'#SliceDataset\.case_index">rdr_jax\.adawac\.data\.SliceDataset\.case_index</a>',
                     plots)
    # NamedTuple constructors show evaluated annotations (no pdoc warning for them)
    assert re.search(r'ColumnID</span><span class="signature[^"]*">\(<span class="param">\s*'
                     r'<span class="n">cols</span><span class="p">:</span> <span class="n">jax',
                     decompositions)


def test_pages_are_offline_and_clean(reference):
    files = [p for p in reference.out.rglob("*") if p.is_file()]
    assert files
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert "XrEfMaRk" not in text, path                     # build markers removed
        assert not re.search(r'<script[^>]+src="https?:', text), path
        assert not re.search(r'<link[^>]+href="https?:', text), path


# -- the strict checker itself, on a small package with known problems -------------------

_PACKAGE = {
    "__init__.py": '''\
        """A package for the checker. See :func:`docpkg_t.good.f`, :func:`missing`, :func:`f`."""
        ''',
    "good.py": '''\
        """Good module; its :class:`G` is local, :func:`numpy.linalg.svd` external."""


        class G:
            """A class; see :meth:`G.run` and :func:`f`."""

            def run(self):
                """Run."""


        def f():
            """Links :class:`G`.

            Sphinx's short form :func:`~docpkg_t.good.f` links. Broken: :func:`the f <f>`,
            :func:`numpy.linalg.nope`, :func:`docpkg_t._private.h` and :ref:`label`.
            """
        ''',
    "broken.py": '''\
        """Fails at import."""
        raise ImportError("broken on purpose")
        ''',
    "_private.py": '''\
        def h():
            """Private."""
        ''',
}


@pytest.fixture
def docpkg(tmp_path, monkeypatch):
    src = tmp_path / "src" / "docpkg_t"
    src.mkdir(parents=True)
    for name, text in _PACKAGE.items():
        (src / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(src.parent))
    yield src
    for name in [m for m in sys.modules if m == "docpkg_t" or m.startswith("docpkg_t.")]:
        del sys.modules[name]


def test_strict_checker_reports_each_problem_with_its_line(docpkg, tmp_path):
    report = docs_build.build(tmp_path / "out", package="docpkg_t", show_source=False)
    found = sorted((w.kind, Path(w.where.rsplit(":", 1)[0]).name, int(w.where.rsplit(":", 1)[1]),
                    w.message.split()[0])
                   for w in report.warnings if w.kind != "import")
    assert found == [
        ("role", "good.py", 14, ":func:`the"),
        ("role", "good.py", 15, ":ref:`label`:"),
        ("xref", "__init__.py", 1, ":func:`f`"),
        ("xref", "__init__.py", 1, ":func:`missing`"),
        ("xref", "good.py", 15, ":func:`docpkg_t._private.h`"),
        ("xref", "good.py", 15, ":func:`numpy.linalg.nope`"),
    ]
    imports = [w for w in report.warnings if w.kind == "import"]
    assert [(w.where, "broken on purpose" in w.message) for w in imports] == [
        ("docpkg_t.broken", True)]
    assert report.modules == ["docpkg_t", "docpkg_t.good"]
    message = {w.message.split()[0]: w.message for w in report.warnings}
    assert message[":func:`f`"].endswith("write :func:`docpkg_t.good.f`")   # the full path
    assert "write ``docpkg_t._private.h``" in message[":func:`docpkg_t._private.h`"]
    # the pages are still written, links that resolve are links
    good = (tmp_path / "out" / "docpkg_t" / "good.html").read_text()
    assert '<code><a href="#G">G</a></code>' in good
    assert '<code><a href="#G.run">G.run()</a></code>' in good
    assert '<code><a href="#f">docpkg_t.good.f()</a></code>' in good       # from "~"
    assert "~" not in good[good.index('<section id="f">'):]


def test_command_line_strict_exit_status_and_summary(docpkg, tmp_path, capsys):
    out = tmp_path / "cli"
    (out / "docpkg_t" / "old").mkdir(parents=True)
    (out / "docpkg_t" / "old" / "removed.html").write_text("stale page")
    (out / "docpkg_t" / "notes.txt").write_text("not ours")
    assert docs_build.main(["--out", str(out), "--package", "docpkg_t", "--no-source"]) == 0
    assert docs_build.main(["--out", str(out), "--package", "docpkg_t", "--no-source",
                            "--strict"]) == 1
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1] == f"docpkg_t API reference: 2 modules, 3 pages, 7 warnings -> {out}"
    assert any(line.endswith("good.py: 4 warning(s)") for line in printed)
    # stale pages of an earlier build are removed, other files are left alone
    assert not (out / "docpkg_t" / "old").exists()
    assert (out / "docpkg_t" / "notes.txt").read_text() == "not ours"
    assert sorted(p.name for p in (out / "docpkg_t").iterdir()) == ["good.html", "notes.txt"]


# -- thesis references by number (docs/thesis_refs.py, docs/thesis_labels.json) ----------------

def _load_thesis_refs():
    spec = importlib.util.spec_from_file_location("rdr_jax_thesis_refs",
                                                  ROOT / "docs" / "thesis_refs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


thesis_refs = _load_thesis_refs()


def test_thesis_label_map_gives_the_printed_numbers():
    labels = thesis_refs.load_labels()
    assert len(labels) > 250
    expect = {
        "ch:cur": "Chapter 2", "ch:adawac": "Chapter 5",
        "sec:cur_rand_lupp": "Section 2.4", "subsec:rsvd": "Section 2.2.4",
        "eq:def_power_iter": "Eq. (2.14)", "eq:stable_power_iter": "Eq. (3.1)",
        "algo:sketch_pivot_CUR_general": "Algorithm 1", "algo:rand-id-lupp": "Algorithm 2",
        "algo:rsvd_power_iterations": "Algorithm 4",        # algorithm.sty: one counter
        "thm:pivoting_on_rangeapprox_error_bound": "Theorem 2.1",
        "thm:space_agnostic_bounds": "Theorem 3.1",
        "prop:space_agnostic_estimation": "Proposition 3.2",   # shares the theorem counter
        "def:canonical-angles": "Definition 3.1",
        "ass:separability_sparse_dense": "Assumption 1",    # numbered through the document
        "apx:case_ood": "Section B.4", "eq:dice_loss": "Eq. (C.8)",   # \appendices: A, B, C
        "tab:trim": "Table 5.2", "fig:rand-errfro-rank_large": "Figure 2.3a",
        "eq:ortho_power_iter": "Eq. (2.15)",   # label on an unnumbered row: its display's number
    }
    assert {k: labels[k]["text"] for k in expect} == expect


def test_thesis_rewrite_replaces_citations_in_prose_only(tmp_path):
    labels = thesis_refs.load_labels()
    text, n = thesis_refs.rewrite_text(
        "Power iterations (Eq. ``eq:def_power_iter``), Algorithm ``algo:rand-id-lupp``, "
        "Thm ``thm:pivoting_on_rangeapprox_error_bound``, see ch:cur and Sec. `sec:cur_rand_lupp`; "
        "Eqs. ``eq:dac_soft`` / ``eq:dac_hard``; eq:not_a_label.", labels)
    assert text == ("Power iterations (Eq. (2.14)), Algorithm 2, Theorem 2.1, see Chapter 2 and "
                    "Section 2.4; Eqs. (4.1) / (4.2); eq:not_a_label.")
    assert n == 7
    py = tmp_path / "m.py"
    py.write_text('"""Module (Eq. ``eq:def_power_iter``)."""\n'
                  'KEYS = {"tab:trim": 1}  # Table ``tab:trim``\n\n\n'
                  'def f():\n    """See ``thm:space_agnostic_bounds``."""\n    return "ch:cur"\n')
    assert thesis_refs.rewrite_file(py, labels) == 3
    assert py.read_text() == ('"""Module (Eq. (2.14))."""\n'
                              'KEYS = {"tab:trim": 1}  # Table 5.2\n\n\n'
                              'def f():\n    """See Theorem 3.1."""\n    return "ch:cur"\n')
    md = tmp_path / "p.md"
    md.write_text("Text `ch:dac`.\n\n```bash\npython x.py --figure fig:acdc\n```\n")
    assert thesis_refs.rewrite_file(md, labels) == 1
    assert md.read_text().startswith("Text Chapter 4.\n")
    assert "--figure fig:acdc" in md.read_text()          # code blocks are left alone


def test_own_docs_cite_the_thesis_by_number():
    files = [ROOT / "README.md"] + [ROOT / "docs" / f for f in (
        "choosing-a-method.md", "design.md", "performance.md", "scale-out.md",
        "reproducing.md", "development.md", "chapters-4-5.md")]
    labels = thesis_refs.load_labels()
    left = {str(p.relative_to(ROOT)): n for p in files if p.exists()
            and (n := thesis_refs.rewrite_file(p, labels, write=False))}
    assert not left, f"label citations left (python docs/thesis_refs.py --rewrite): {left}"
    for p in files:
        if p.exists():
            assert "implementation-notes" not in p.read_text(encoding="utf-8"), p
