"""The chapter notebooks: committed with current outputs, and runnable on quick settings.

Fast checks read the committed files (``notebooks/run_all.py``'s ``check``: header cells, code
unchanged since the recorded run, outputs and images present, headline HELD, size); the
execution tests run every notebook top to bottom with ``RDR_JAX_QUICK=1`` (CI sizes).
"""

import builtins
import copy
import io
import importlib.util
import os
import pathlib
import sys
import types

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager
from IPython.utils.text import DollarFormatter

ROOT = pathlib.Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("run_all", ROOT / "notebooks" / "run_all.py")
run_all = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_all)

NOTEBOOKS = run_all.notebooks()
IDS = [p.stem for p in NOTEBOOKS]


def test_the_five_chapter_notebooks():
    assert IDS == ["00_foundations", "01_cur", "02_canonical_angles", "03_dac", "04_adawac"]


# ------------------------------------------------------------------ committed files (fast)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_committed_notebook_is_current(path):
    assert run_all.check(path) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_committed_outputs(path):
    nb = nbformat.read(path, as_version=4)
    assert path.stat().st_size < 1_500_000
    assert nb.metadata["rdr_jax"]["code_sha256"] == run_all.code_sha256(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1))
    assert run_all.images(nb) >= 1                      # every chapter notebook shows a figure
    verdicts = run_all.headline_verdicts(nb)
    assert verdicts and set(verdicts) == {"HELD"}
    # no "Open in Colab" badge (no public repository to open); the install cell comes first
    assert not any("colab.research.google.com" in c.source for c in nb.cells)
    assert nb.cells[0].source == run_all.install_source()


def _write(nb, tmp_path, name):
    p = tmp_path / name
    nbformat.write(nb, p)
    return p


def test_check_catches_stale_and_broken_notebooks(tmp_path):
    path = NOTEBOOKS[0]
    nb = nbformat.read(path, as_version=4)
    assert run_all.check(_write(nb, tmp_path, path.name)) == []

    edited = copy.deepcopy(nb)                           # code edited after the run
    last = [c for c in edited.cells if c.cell_type == "code"][-1]
    last.source += "\nprint('edited')"
    assert any("stale" in p for p in run_all.check(_write(edited, tmp_path, path.name)))

    badge = copy.deepcopy(nb)                            # a Colab badge (placeholder URL)
    badge.cells.insert(0, nbformat.v4.new_markdown_cell(
        "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
        "(https://colab.research.google.com/github/someone/fork/blob/main/x.ipynb)"))
    assert any("badge" in p for p in run_all.check(_write(badge, tmp_path, path.name)))

    old_install = copy.deepcopy(nb)                      # an outdated install cell
    old_install.cells[0].source = old_install.cells[0].source.replace("unzip", "git clone")
    problems = run_all.check(_write(old_install, tmp_path, path.name))
    assert any("install cell" in p for p in problems)
    assert not any("stale" in p for p in problems)       # it is not part of the code hash

    cleared = copy.deepcopy(nb)                          # committed without outputs
    for c in cleared.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    problems = run_all.check(_write(cleared, tmp_path, path.name))
    assert any("execution counts" in p for p in problems)
    assert any("no image" in p for p in problems)
    assert any("HELD" in p for p in problems)

    failed = copy.deepcopy(nb)                           # headline not reproduced
    head = next(c for c in failed.cells if "headline" in c.metadata.get("tags", []))
    head.outputs = [nbformat.v4.new_output("stream", name="stdout", text="[NOT HELD] x: y\n")]
    assert any("not all HELD" in p for p in run_all.check(_write(failed, tmp_path, path.name)))

    quick = copy.deepcopy(nb)                            # CI-sized outputs committed
    quick.metadata["rdr_jax"]["setting"] = "quick"
    assert any("quick" in p for p in run_all.check(_write(quick, tmp_path, path.name)))

    big = copy.deepcopy(nb)                              # too large
    big.cells.append(nbformat.v4.new_markdown_cell("x" * run_all.MAX_BYTES))
    assert any("MB >" in p for p in run_all.check(_write(big, tmp_path, path.name)))


def test_run_all_cli(capsys):
    assert run_all.main(["--check"]) == 0
    out = capsys.readouterr().out
    assert all(p.name in out for p in NOTEBOOKS)
    with pytest.raises(SystemExit, match="unknown notebook"):
        run_all.main(["--check", "--only", "99_nothing"])
    with pytest.raises(SystemExit):                      # quick outputs are never committed
        run_all.main(["--setting", "quick"])
    with pytest.raises(ValueError, match="setting"):
        run_all.execute(NOTEBOOKS[0], "medium")


# ------------------------------------------------------------------ the Colab install cell
def test_colab_requirements_keep_colab_jax():
    reqs = run_all.colab_requirements()
    names = [r.split(">")[0].split("=")[0].split("[")[0] for r in reqs]
    for absent in ("jax", "jaxlib", "pytest", "ruff", "threadpoolctl"):
        assert absent not in names
    for needed in ("numpy", "scipy", "flax", "optax", "matplotlib", "dm-pix", "mlxtend"):
        assert needed in names


class _Dist:
    """A stand-in for an ``importlib.metadata.Distribution`` (name and version only)."""

    def __init__(self, name, version):
        self.name, self.version = name, version


def test_install_cell_commands_in_colab(monkeypatch):
    """Run the install cell with IPython's transformations, a fake ``google.colab``, fake
    installed distributions and recorded shell/pip commands and files: it unpacks the uploaded
    copy of the repository (COLAB_ARCHIVE), installs rdr_jax without its dependencies, writes pip constraints pinning jax, jaxlib and
    the accelerator plugins to the installed versions, and installs the requirements under
    them with jax and jaxlib pinned."""
    import importlib.metadata

    import jax
    import jaxlib
    calls, written = [], {}

    class Shell:
        def system(self, cmd):
            calls.append(("!", cmd))

        def run_line_magic(self, name, line):
            calls.append((name, line))

    class File(io.StringIO):
        def __init__(self, path):
            super().__init__()
            self.path = path

        def close(self):
            written[self.path] = self.getvalue()
            super().close()

    def fake_open(path, mode="r", *args, **kwargs):
        assert "w" in mode, (path, mode)
        return File(path)

    installed = [_Dist("jax", jax.__version__), _Dist("jaxlib", jaxlib.__version__),
                 _Dist("jax-cuda12-plugin", "9.9.1"), _Dist("jax_cuda12_pjrt", "9.9.1"),
                 _Dist("libtpu", "0.0.7"), _Dist("jaxtyping", "0.2.36"),
                 _Dist("jax-dataclasses", "1.0"), _Dist(None, "1.0")]
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: iter(installed))
    code = TransformerManager().transform_cell(run_all.install_source())
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    monkeypatch.setattr(os.path, "isdir", lambda p: False)
    monkeypatch.setattr(os.path, "isfile", lambda p: p == run_all.COLAB_ARCHIVE)
    monkeypatch.setattr(os, "chdir", lambda p: calls.append(("chdir", p)))
    exec(code, {"get_ipython": Shell, "__builtins__": dict(vars(builtins), open=fake_open)})
    assert calls[0] == ("!", f"unzip -q {run_all.COLAB_ARCHIVE} -d /content")
    assert calls[1] == ("pip", "install -q --no-deps /content/rdr_jax")
    # the constraints: Colab's jax, jaxlib and accelerator plugins, as installed, nothing else
    assert written[run_all.CONSTRAINTS].splitlines() == sorted([
        f"jax=={jax.__version__}", f"jaxlib=={jaxlib.__version__}", "jax-cuda12-plugin==9.9.1",
        "jax_cuda12_pjrt==9.9.1", "libtpu==0.0.7"])
    assert calls[2][0] == "pip"
    # IPython expands {expressions} in magics with DollarFormatter: jax and jaxlib stay at
    # Colab's versions, and every other requirement is resolved under the constraints
    expanded = DollarFormatter().vformat(calls[2][1], args=[],
                                         kwargs={"jax": jax, "jaxlib": jaxlib})
    assert expanded.startswith(f'install -q -c {run_all.CONSTRAINTS} "jax=={jax.__version__}" '
                               f'"jaxlib=={jaxlib.__version__}" ')
    assert all(f'"{r}"' in calls[2][1] for r in run_all.colab_requirements())
    assert "--upgrade" not in calls[2][1] and " -U " not in calls[2][1]
    assert calls[3] == ("chdir", "/content/rdr_jax/notebooks")
    assert len(calls) == 4


def test_install_cell_without_the_archive_says_how_to_make_it(monkeypatch):
    code = TransformerManager().transform_cell(run_all.install_source())
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    monkeypatch.setattr(os.path, "isdir", lambda p: False)
    monkeypatch.setattr(os.path, "isfile", lambda p: False)
    with pytest.raises(FileNotFoundError, match="git archive --format=zip --prefix=rdr_jax/"):
        exec(code, {"get_ipython": None, "__builtins__": builtins})


def test_install_cell_does_nothing_outside_colab(monkeypatch):
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    code = TransformerManager().transform_cell(run_all.install_source())
    exec(code, {"get_ipython": None, "__builtins__": builtins})    # would fail on any command


# ------------------------------------------------------------------ execution (CI sizes)
@pytest.fixture(scope="module")
def quick_kernel():
    """One kernel for all notebooks (``run_all.start_kernel``): each notebook starts from an
    empty namespace, and the kernel's start-up and imports (jax, rdr_jax, flax, matplotlib)
    are paid once. That each notebook also runs alone, in its own kernel, is what
    ``test_committed_notebook_is_current`` checks (its outputs come from such a run of the
    current code)."""
    km = run_all.start_kernel("quick")
    yield km
    km.shutdown_kernel(now=True)


def test_shared_kernel_is_reset_between_notebooks(quick_kernel, tmp_path):
    """A name defined by one notebook is gone in the next; the working directory is back."""
    first = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os\nleft_over = 1\nos.chdir('..')")])
    second = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os\nprint('left_over' in dir(), os.getcwd())")])
    run_all.execute(_write(first, tmp_path, "first.ipynb"), "quick", header=False,
                    kernel=quick_kernel)
    nb = run_all.execute(_write(second, tmp_path, "second.ipynb"), "quick", header=False,
                         kernel=quick_kernel)
    assert run_all.outputs_of(nb, "stream")[0]["text"].split() == [
        "False", str(run_all.NOTEBOOK_DIR)]
    with pytest.raises(ValueError, match="started for setting 'quick'"):
        run_all.execute(NOTEBOOKS[0], "default", kernel=quick_kernel)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_runs_on_quick_settings(path, quick_kernel):
    nb = run_all.execute(path, "quick", kernel=quick_kernel)   # raises on a failing cell
    assert not run_all.outputs_of(nb, "error")
    assert run_all.images(nb) >= 1
    assert run_all.headline_verdicts(nb)                 # printed; quick sizes need not hold
