"""Every Python code block of the README and of ``docs/*.md`` runs as written and shows
its output.

A block is a fenced block whose info string starts with ``python``. Blocks of one file run
in order in one namespace (the README's quick tour builds on itself). A block written as a
doctest (``>>>`` lines followed by their output) is checked by :mod:`doctest` (``...``
elides, whitespace is normalised); any other block is executed and must show its output in
comments. ```` ```python no-run ```` marks a block that cannot run here (an accelerator, a
file on disk, a long run): kept rare (``MAX_NO_RUN``).
"""

from __future__ import annotations

import doctest
import re
import time
import warnings
from pathlib import Path

import jax
import pytest

ROOT = Path(__file__).resolve().parent.parent
FILES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
_FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<code>.*?)^```[ \t]*$", re.S | re.M)
#: the most ``no-run`` blocks allowed over all the files
MAX_NO_RUN = 6
#: the README's quick tour takes about 60 s of CPU time on the 2-core CI machine; a guard
#: against growth (CPU time of this process, not wall time, which other jobs inflate)
README_BUDGET_CPU_S = 150


class Block:
    def __init__(self, path: Path, line: int, info: str, code: str):
        self.path, self.line, self.info, self.code = path, line, info.strip(), code

    @property
    def runnable(self) -> bool:
        return "no-run" not in self.info.split()

    @property
    def is_doctest(self) -> bool:
        return any(ln.lstrip().startswith(">>> ") or ln.strip() == ">>>"
                   for ln in self.code.splitlines())

    @property
    def name(self) -> str:
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{path}:{self.line}"


def python_blocks(path: Path) -> list[Block]:
    """The fenced Python blocks of a Markdown file, in order."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in _FENCE.finditer(text):
        info = m.group("info").strip()
        if info.split()[:1] == ["python"]:
            out.append(Block(path, text.count("\n", 0, m.start()) + 2, info, m.group("code")))
    return out


def run_block(block: Block, globs: dict) -> None:
    """Run one block in ``globs``; raise AssertionError with doctest's report on a
    mismatch."""
    if block.is_doctest:
        test = doctest.DocTestParser().get_doctest(block.code, globs, block.name,
                                                   str(block.path), block.line - 1)
        flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
        runner = doctest.DocTestRunner(optionflags=flags, verbose=False)
        report: list[str] = []
        runner.run(test, out=report.append, clear_globs=False)
        globs.update(test.globs)          # DocTest runs in a copy of the namespace
        if runner.failures:
            raise AssertionError(f"{block.name}: doctest failed\n" + "".join(report))
    else:
        exec(compile(block.code, block.name, "exec"), globs)


def run_file(path: Path) -> float:
    """Run the runnable blocks of ``path`` in sequence; returns the CPU seconds taken."""
    globs: dict = {"__name__": "__readme__"}
    t = time.process_time()
    with jax.enable_x64(False), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for block in python_blocks(path):
            if block.runnable:
                run_block(block, globs)
    return time.process_time() - t


_WITH_CODE = [p for p in FILES if any(b.runnable for b in python_blocks(p))]


@pytest.mark.parametrize("path", _WITH_CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_blocks_run_as_written(path):
    seconds = run_file(path)
    if path.name == "README.md":
        assert seconds < README_BUDGET_CPU_S, f"the quick tour took {seconds:.0f} CPU s"


def test_blocks_show_their_output_and_no_run_is_rare():
    blocks = [b for p in FILES for b in python_blocks(p)]
    assert blocks, "no Python blocks found"
    silent = []
    for b in blocks:
        if not b.runnable:
            continue
        if b.is_doctest:
            examples = doctest.DocTestParser().get_examples(b.code)
            if not any(e.want.strip() for e in examples):
                silent.append(b.name)
        elif not re.search(r"#\s*(->|prints|output)", b.code):
            silent.append(b.name)
    assert not silent, f"blocks that show no output: {silent}"
    no_run = [b.name for b in blocks if not b.runnable]
    assert len(no_run) <= MAX_NO_RUN, f"too many no-run blocks: {no_run}"


def test_block_parser_on_a_sample(tmp_path):
    md = tmp_path / "x.md"
    md.write_text("text\n```python\n>>> 1 + 1\n2\n```\n\n```bash\nls\n```\n"
                  "```python no-run\nimport gpu_only\n```\n```python\nx = 3  # -> 3\n```\n")
    blocks = python_blocks(md)
    assert [(b.line, b.runnable, b.is_doctest) for b in blocks] == [
        (3, True, True), (11, False, False), (14, True, False)]
    globs: dict = {}
    for b in blocks:
        if b.runnable:
            run_block(b, globs)
    assert globs["x"] == 3
    bad = tmp_path / "y.md"
    bad.write_text("```python\n>>> 1 + 1\n3\n```\n")
    with pytest.raises(AssertionError, match="doctest failed"):
        run_block(python_blocks(bad)[0], {})


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_fences_are_balanced(path):
    """An unclosed fence turns the rest of a page into code (and hides its blocks)."""
    fences = [ln for ln in path.read_text(encoding="utf-8").splitlines()
              if ln.lstrip().startswith("```")]
    assert len(fences) % 2 == 0, f"{path.name}: {len(fences)} fence lines"


def test_ci_runs_exactly_the_readme_test_command():
    """``.ci/run``'s last line is the README's test command (with ``--durations=20``: every CI
    run prints its 20 slowest tests)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    command = next(ln for ln in readme if ln.startswith("ruff check . && python -m pytest"))
    assert "--durations=20" in command.split()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci[-1] == command
