#!/usr/bin/env python
"""Regenerate the chapter notebooks with their outputs, or check the committed ones.

    python notebooks/run_all.py                  # execute every notebook in place
    python notebooks/run_all.py --only 03_dac    # one notebook (repeatable; ".ipynb" optional)
    python notebooks/run_all.py --check          # verify only, execute nothing

Each notebook is executed top to bottom by nbclient (kernel ``python3``, working directory
``notebooks/``) on its ``default`` run size -- the "quick but meaningful" setting whose
outputs are committed -- and written back with its outputs. Before the run the header cell
is (re)written from this file: an install cell that works in a fresh Colab runtime from an
uploaded copy of the repository (rdr_jax has no public repository to clone and is not on
PyPI), keeps Colab's accelerator jax (jax, jaxlib and their CUDA/TPU plugins pinned as
installed) and does nothing elsewhere. After the run volatile metadata (execution timestamps,
widget state, the kernel's Python version) is dropped and the SHA-256 of the other code cells
is recorded in ``metadata.rdr_jax.code_sha256``, so that ``--check`` (and
``tests/test_notebooks.py``) can tell when a committed notebook's code no longer matches the
outputs stored beside it.

Run sizes (each notebook reads them from the environment in its first code cell):
``quick`` (``RDR_JAX_QUICK=1``, what CI executes), ``default`` (neither variable set: the
committed outputs; about 4 minutes for all five on 2 busy CPU cores) and ``full``
(``RDR_JAX_FULL=1``: the thesis' sizes).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import os
import pathlib
import re
import sys
import time

import nbformat
from nbclient import NotebookClient

# rdr_jax has no public repository (nothing to clone, no "Open in Colab" badge to point at):
# on Colab, the install cell unpacks a copy of the repository uploaded as this archive, made in
# a clone with ARCHIVE_COMMAND (one top folder, rdr_jax/)
COLAB_ARCHIVE = "/content/rdr_jax.zip"
ARCHIVE_COMMAND = "git archive --format=zip --prefix=rdr_jax/ -o rdr_jax.zip HEAD"

NOTEBOOK_DIR = pathlib.Path(__file__).resolve().parent
REPO_ROOT = NOTEBOOK_DIR.parent
MAX_BYTES = 1_500_000
SETTINGS = ("quick", "default", "full")
CELL_TIMEOUT_S = 1800
# the header cell's id; BADGE_ID: the "Open in Colab" badge cell of earlier versions (removed)
BADGE_ID, INSTALL_ID = "colab-badge", "colab-install"
HEADLINE_TAG = "headline"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
VERDICT = re.compile(r"^\[(HELD|NOT HELD)\] ", re.MULTILINE)
# requirements.txt entries that only the tests, docs or lint need (not installed on Colab)
DEV_ONLY = {"pytest", "pytest-xdist", "nbformat", "nbclient", "ipykernel", "pdoc", "ruff"}
# requirements.txt entries the notebooks do not need: threadpoolctl only pins the BLAS thread
# counts of the benchmarks (experiments/bench_*.py), and scikit-learn depends on it anyway;
# scikit-image (lfw_subset) and nilearn (MNI152) are the real-data substitutes of the
# reproduction report (experiments/), which no notebook loads
NOT_FOR_NOTEBOOKS = {"threadpoolctl", "scikit-image", "nilearn"}
# Colab's accelerator jax: never in the list of requirements to install, pinned as installed
JAX_CORE = {"jax", "jaxlib"}
# where the Colab install cell writes the pip constraints pinning Colab's jax
CONSTRAINTS = "/content/jax-constraints.txt"


def notebooks() -> list[pathlib.Path]:
    """The chapter notebooks, ``notebooks/NN_name.ipynb``, in order."""
    return sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))


def colab_requirements(path: pathlib.Path = REPO_ROOT / "requirements.txt") -> list[str]:
    """The runtime requirements of ``requirements.txt`` without jax/jaxlib, the dev tools and
    what only the benchmarks use.

    Colab ships its own accelerator build of jax; these are what the notebooks need beside it.
    """
    reqs = []
    for line in path.read_text().splitlines():
        spec = line.split("#", 1)[0].strip()
        if not spec:
            continue
        name = re.split(r"[\[<>=!~; ]", spec, maxsplit=1)[0].lower().replace("_", "-")
        if name not in DEV_ONLY | NOT_FOR_NOTEBOOKS | JAX_CORE:
            reqs.append(spec)
    return reqs


def install_source() -> str:
    """The first cell: installs rdr_jax in a fresh Colab runtime, does nothing elsewhere.

    It unpacks the copy of the repository the user uploaded as ``COLAB_ARCHIVE`` (the
    notebooks import ``experiments/`` and read paths relative to ``notebooks/``, so the
    notebook file alone is not enough; without the archive it raises an error that says how
    to make it) and installs rdr_jax from it with ``--no-deps``. Colab's
    accelerator jax must survive: the cell writes a pip constraints file (``CONSTRAINTS``)
    pinning ``jax``, ``jaxlib`` and any installed CUDA/ROCm plugin or ``libtpu`` to the
    installed versions, and installs the other runtime requirements under it (``-c``), with
    jax and jaxlib also pinned on the command line. pip then adds what is missing (choosing
    versions compatible with Colab's jax) but can never upgrade, downgrade or swap jax or its
    plugins, e.g. for the CPU wheel.
    """
    reqs = " ".join(f'"{r}"' for r in colab_requirements())
    return f"""\
# Colab: get rdr_jax (this cell does nothing in a local checkout or in CI). rdr_jax is not on
# PyPI and has no public repository: in a clone, run
#     {ARCHIVE_COMMAND}
# upload rdr_jax.zip with Colab's Files panel (to /content), then run this cell. Colab's
# accelerator jax stays: jax, jaxlib and any CUDA/TPU plugin are pinned to the installed
# versions in a pip constraints file, so only the missing requirements are added; then we work
# from notebooks/.
import os
import sys

if "google.colab" in sys.modules:
    if not os.path.isdir("/content/rdr_jax"):
        if not os.path.isfile("{COLAB_ARCHIVE}"):
            raise FileNotFoundError(
                "upload a copy of the rdr_jax repository as {COLAB_ARCHIVE}, made in a clone "
                "with: {ARCHIVE_COMMAND}")
        !unzip -q {COLAB_ARCHIVE} -d /content
        import re
        from importlib import metadata
        import jax
        import jaxlib
        plugin = re.compile(r"jax-(cuda|rocm)[0-9]*-(plugin|pjrt)|libtpu(-nightly)?")
        pins = {{f"jax=={{jax.__version__}}", f"jaxlib=={{jaxlib.__version__}}"}} | {{
            f"{{d.name}}=={{d.version}}" for d in metadata.distributions()
            if plugin.fullmatch(re.sub(r"[-_.]+", "-", (d.name or "").lower()))}}
        with open("{CONSTRAINTS}", "w") as f:
            f.write("\\n".join(sorted(pins)) + "\\n")
        %pip install -q --no-deps /content/rdr_jax
        %pip install -q -c {CONSTRAINTS} "jax=={{jax.__version__}}" "jaxlib=={{jaxlib.__version__}}" {reqs}
    os.chdir("/content/rdr_jax/notebooks")"""


def code_sha256(nb) -> str:
    """SHA-256 of the notebook's code cells (their sources, in order), the install cell left
    out: it is checked against :func:`install_source` and does nothing outside Colab, so
    changing it never makes the outputs stale."""
    sources = [c.source for c in nb.cells if c.cell_type == "code" and c.get("id") != INSTALL_ID]
    return hashlib.sha256(json.dumps(sources).encode()).hexdigest()


def set_header(nb, name: str) -> None:
    """Put the install cell first (replacing older versions of it and of the badge cell)."""
    nb.cells = [c for c in nb.cells if c.get("id") not in (BADGE_ID, INSTALL_ID)]
    install = nbformat.v4.new_code_cell(install_source())
    install.id = INSTALL_ID
    nb.cells[:0] = [install]


def strip_volatile(nb) -> None:
    """Drop what changes from run to run without the notebook changing: execution
    timestamps, widget state, the kernel's Python version."""
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        cell.metadata.pop("ExecuteTime", None)
        for out in cell.get("outputs", []):
            out.get("metadata", {}).pop("transient", None)
            out.pop("transient", None)
    nb.metadata.pop("widgets", None)
    info = nb.metadata.get("language_info")
    if info is not None:
        nb.metadata["language_info"] = {k: v for k, v in info.items() if k != "version"}


@contextlib.contextmanager
def environ(changes: dict[str, str | None]):
    """Set (``None``: unset) environment variables for the duration of the block."""
    saved = {k: os.environ.get(k) for k in changes}

    def apply(values):
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    apply(changes)
    try:
        yield
    finally:
        apply(saved)


def kernel_environ(setting: str) -> dict[str, str | None]:
    """The environment a notebook kernel starts with for run size ``setting``."""
    if setting not in SETTINGS:
        raise ValueError(f"setting must be one of {SETTINGS}; got {setting!r}")
    return {"RDR_JAX_QUICK": "1" if setting == "quick" else None,
            "RDR_JAX_FULL": "1" if setting == "full" else None,
            "MPLBACKEND": "module://matplotlib_inline.backend_inline", "TQDM_DISABLE": "1",
            # tqdm.auto's "install ipywidgets" hint (a kernel without ipywidgets), not a result
            "PYTHONWARNINGS": "ignore:IProgress not found"}


#: run in a shared kernel (:func:`start_kernel`) before each notebook: an empty namespace, no
#: open figure, the notebooks' folder as working directory (imported modules stay loaded)
RESET_SOURCE = f"""%reset -f
import os, matplotlib.pyplot
os.chdir({str(NOTEBOOK_DIR)!r})
matplotlib.pyplot.close("all")
%reset -f"""


def start_kernel(setting: str):
    """Start one kernel for several :func:`execute` calls (``kernel=``) on run size ``setting``:
    they share its start-up and imports (the test suite runs the five notebooks in one).
    Shut it down with ``kernel.shutdown_kernel(now=True)``."""
    from jupyter_client.manager import KernelManager
    km = KernelManager(kernel_name="python3")
    with environ(kernel_environ(setting)):               # the kernel inherits it
        km.start_kernel(cwd=str(NOTEBOOK_DIR))
    km.rdr_jax_setting = setting
    return km


def execute(path: pathlib.Path, setting: str = "default", *, header: bool = True,
            timings: bool = False, kernel=None):
    """Execute the notebook at ``path`` on run size ``setting`` and return it (not written).

    The kernel starts in ``notebooks/`` with ``RDR_JAX_QUICK`` / ``RDR_JAX_FULL`` set for
    ``setting``, the inline matplotlib backend, tqdm progress bars disabled and tqdm's
    "IProgress not found" warning silenced. ``kernel``: a kernel from :func:`start_kernel`
    (same ``setting``) to run in instead, after :data:`RESET_SOURCE`.
    With ``timings``, returns ``(notebook, {cell index: seconds})``.
    Raises ``nbclient.exceptions.CellExecutionError`` when a cell fails.
    """
    env = kernel_environ(setting)
    nb = nbformat.read(path, as_version=4)
    if header:
        set_header(nb, path.name)
    options = dict(timeout=CELL_TIMEOUT_S, kernel_name="python3", record_timing=True,
                   coalesce_streams=True, resources={"metadata": {"path": str(path.parent)}})
    if kernel is None:
        with environ(env):                               # the kernel inherits it
            NotebookClient(nb, **options).execute()
    else:
        if getattr(kernel, "rdr_jax_setting", None) != setting:
            raise ValueError(f"the kernel was started for setting "
                             f"{getattr(kernel, 'rdr_jax_setting', None)!r}, not {setting!r}")
        reset = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(RESET_SOURCE)])
        for book in (reset, nb):
            client = NotebookClient(book, km=kernel, **options)
            try:
                client.execute()
            finally:
                if client.kc is not None:
                    client.kc.stop_channels()
    seconds = cell_seconds(nb)
    strip_volatile(nb)
    nb.metadata["rdr_jax"] = {"code_sha256": code_sha256(nb), "setting": setting}
    return (nb, seconds) if timings else nb


def cell_seconds(nb) -> dict[int, float]:
    """Wall time of each executed code cell (index -> seconds), from nbclient's timestamps."""
    out = {}
    for i, c in enumerate(nb.cells):
        t = c.metadata.get("execution", {})
        a, b = t.get("iopub.execute_input"), t.get("shell.execute_reply")
        if a and b:
            out[i] = (datetime.datetime.fromisoformat(b.replace("Z", "+00:00"))
                      - datetime.datetime.fromisoformat(a.replace("Z", "+00:00"))).total_seconds()
    return out


def outputs_of(nb, output_type: str | None = None):
    """All outputs of the code cells (optionally of one ``output_type``)."""
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if output_type is None or o.get("output_type") == output_type]


def headline_verdicts(nb) -> list[str]:
    """``HELD`` / ``NOT HELD`` of each verdict line printed by the cells tagged ``headline``."""
    verdicts = []
    for c in nb.cells:
        if c.cell_type == "code" and HEADLINE_TAG in c.metadata.get("tags", []):
            for o in c.get("outputs", []):
                if o.get("output_type") == "stream" and o.get("name") == "stdout":
                    verdicts += VERDICT.findall(o.get("text", ""))
    return verdicts


def plots(nb) -> bool:
    """Whether a code cell draws a figure (matplotlib or ``rdr_jax...plots``)."""
    return any(re.search(r"\bplt\.|\bplots\.", c.source)
               for c in nb.cells if c.cell_type == "code")


def images(nb) -> int:
    """Number of PNG images among the outputs."""
    return sum("image/png" in o.get("data", {}) for o in outputs_of(nb))


def check(path: pathlib.Path) -> list[str]:
    """Problems with the committed notebook at ``path`` (empty when it is current).

    Checks: the header cell equals what this script writes (the install cell; no Colab
    badge); the code cells hash to the recorded ``metadata.rdr_jax.code_sha256``
    (otherwise the outputs are stale); every code cell ran, in order, without an error;
    the run was not the CI-sized ``quick`` one; a notebook that plots holds at least one
    image; the headline cell printed its verdicts and all are ``HELD``; no volatile
    metadata; the file is under ``MAX_BYTES``.
    """
    problems = []
    size = path.stat().st_size
    if size > MAX_BYTES:
        problems.append(f"{size / 1e6:.2f} MB > {MAX_BYTES / 1e6:.1f} MB")
    nb = nbformat.read(path, as_version=4)
    cells = nb.cells
    if not (len(cells) > 1 and cells[0].cell_type == "code"
            and cells[0].source == install_source()):
        problems.append("first cell is not the current Colab install cell")
    if any(c.get("id") == BADGE_ID or "colab-badge" in c.source for c in cells):
        problems.append("a Colab badge (there is no public repository for it to open)")
    meta = nb.metadata.get("rdr_jax", {})
    if meta.get("code_sha256") != code_sha256(nb):
        problems.append("stale outputs: code cells changed since the recorded run "
                        "(rerun notebooks/run_all.py)")
    if meta.get("setting") not in ("default", "full"):
        problems.append(f"outputs from run size {meta.get('setting')!r}, not 'default'/'full'")
    counts = [c.get("execution_count") for c in cells if c.cell_type == "code"]
    if counts != list(range(1, len(counts) + 1)):
        problems.append(f"code cells not executed once, in order: execution counts {counts}")
    if outputs_of(nb, "error"):
        problems.append("an output is an error")
    if plots(nb) and not images(nb):
        problems.append("the notebook plots but holds no image")
    verdicts = headline_verdicts(nb)
    if not verdicts:
        problems.append(f"no [HELD]/[NOT HELD] line printed by a cell tagged {HEADLINE_TAG!r}")
    elif any(v != "HELD" for v in verdicts):
        problems.append(f"headline verdicts {verdicts}: not all HELD")
    if nb.metadata.get("widgets") or any("execution" in c.metadata for c in cells):
        problems.append("volatile metadata (widget state or execution timestamps)")
    return problems


def select(only: list[str] | None) -> list[pathlib.Path]:
    """The notebooks named in ``only`` (stem or file name), all when ``None``."""
    paths = notebooks()
    if not only:
        return paths
    by_name = {p.stem: p for p in paths} | {p.name: p for p in paths}
    unknown = [n for n in only if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown notebook(s) {unknown}; choose from {[p.stem for p in paths]}")
    return [by_name[n] for n in only]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true",
                    help="verify the committed notebooks (stale code, size, header, "
                         "headline); execute nothing")
    ap.add_argument("--only", action="append", metavar="NAME",
                    help="only this notebook (e.g. 03_dac); repeatable")
    ap.add_argument("--setting", choices=SETTINGS, default="default",
                    help="run size (default: %(default)s; 'quick' is what CI executes)")
    ap.add_argument("--out", type=pathlib.Path, default=None,
                    help="write the executed notebooks to this folder instead of in place")
    args = ap.parse_args(argv)
    paths = select(args.only)
    failed = []
    if args.check:
        for p in paths:
            problems = check(p)
            status = "ok" if not problems else "; ".join(problems)
            print(f"{p.name:28s} {p.stat().st_size / 1e6:5.2f} MB  {status}")
            failed += [p.name] if problems else []
        return 1 if failed else 0
    if args.out is None and args.setting == "quick":
        ap.error("--setting quick only with --out: committed outputs use 'default' or 'full'")
    t_all = time.perf_counter()
    for i, p in enumerate(paths, 1):
        print(f"[{i}/{len(paths)}] {p.name} ({args.setting}) ...", flush=True)
        t0 = time.perf_counter()
        try:
            nb, seconds = execute(p, args.setting, timings=True)
        except Exception as e:  # noqa: BLE001 - report, keep the old file, go on
            lines = ANSI.sub("", str(e)).strip().splitlines()
            print(f"    FAILED after {time.perf_counter() - t0:.0f} s: "
                  f"{lines[-1] if lines else type(e).__name__}", flush=True)
            failed.append(p.name)
            continue
        dest = (args.out / p.name) if args.out else p
        dest.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, dest)
        verdicts = headline_verdicts(nb)
        print(f"    {time.perf_counter() - t0:.0f} s, {dest.stat().st_size / 1e6:.2f} MB, "
              f"{images(nb)} images, headline {verdicts or 'missing'} -> {dest}", flush=True)
        slow = sorted(seconds.items(), key=lambda kv: -kv[1])[:3]
        print("    slowest cells: " + ", ".join(f"#{i} {t:.0f} s" for i, t in slow), flush=True)
    print(f"total {time.perf_counter() - t_all:.0f} s"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
