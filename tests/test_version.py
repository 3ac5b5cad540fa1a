"""One version: ``rdr_jax.__version__`` is the single source, read by setuptools at build time
(``[tool.setuptools.dynamic]``) without importing jax, and the installed metadata agrees."""

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

import rdr_jax

ROOT = Path(__file__).resolve().parent.parent


def test_pyproject_reads_the_version_from_the_package():
    tomllib = pytest.importorskip("tomllib")           # Python >= 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "rdr_jax.__version__"}


def test_build_reads_the_version_without_importing_jax():
    """setuptools finds the literal assignment statically; a build environment without jax
    (pip's build isolation) still gets the version."""
    code = ("import sys; sys.modules['jax'] = sys.modules['numpy'] = None\n"
            "from setuptools.config.expand import read_attr\n"
            "print(read_attr('rdr_jax.__version__', root_dir='.'), 'rdr_jax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == [rdr_jax.__version__, "False"]


def test_installed_metadata_matches_the_package():
    try:
        installed = importlib.metadata.version("rdr_jax")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("rdr_jax is not installed (pip install -e .)")
    assert installed == rdr_jax.__version__, (
        f"installed metadata says {installed}, rdr_jax.__version__ {rdr_jax.__version__}: "
        "reinstall (pip install -e . --no-deps)")


def test_install_instructions_work_from_a_clone():
    """rdr_jax is not on PyPI and has no public repository: the README and the docs install
    it from a clone (``pip install -e .``), and every extra they name exists."""
    import re

    texts = {p: p.read_text(encoding="utf-8") for p in
             [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
              *sorted((ROOT / "rdr_jax").rglob("*.py"))]}
    for path, text in texts.items():
        assert not re.search(r"pip install (-U )?[\"']?rdr[_-]jax", text), path
    readme = texts[ROOT / "README.md"]
    assert "pip install -e ." in readme
    tomllib = pytest.importorskip("tomllib")
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
                 ["project"]["optional-dependencies"])
    named = {e for m in re.findall(r'pip install -e "\.\[([\w,]+)\]"', readme)
             for e in m.split(",")}
    assert named and named <= extras, named - extras
