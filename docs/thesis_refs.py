"""Thesis label -> the number a reader sees in the PDF, and a rewriter for label citations.

Usage (from the repository root)::

    python docs/thesis_refs.py --tex PATH/thesis.tex     # writes docs/thesis_labels.json
    python docs/thesis_refs.py --rewrite FILE...         # label citations -> "Eq. (2.14)", ...
    python docs/thesis_refs.py --check FILE...           # list the label citations left (exit 1)

The thesis source is not part of the repository, so the map is committed as
``docs/thesis_labels.json``; ``--tex`` defaults to ``$RDR_JAX_THESIS`` or
``shared/reference/thesis.tex`` next to (or above) the checkout.

Numbering follows the document's preamble as LaTeX would: class ``report`` (sections,
figures and tables within chapters); ``\\numberwithin{equation}{chapter}``; theorem, corollary,
lemma and proposition share one counter within chapters, definitions and remarks have their
own within chapters, examples and assumptions are numbered through the whole document;
``algorithm.sty`` without options numbers algorithms through the document; utdiss'
``\\appendices`` restarts chapters as A, B, C; amsmath numbers every ``align`` row without
``\\nonumber``/``\\notag``; a ``\\label`` takes the number of the last counter stepped in its group
(LaTeX's ``\\@currentlabel``).

``--rewrite`` edits prose only: Markdown text outside fenced code, notebook Markdown cells, and
Python comments and docstrings (a label used as a key in code is left alone). A citation word
before the label (``Eq.``, ``Algorithm``, ``Thm``, ``Sec.``, ``App.``, ...) is replaced along
with it; a bare label becomes its full form (the label of Chapter 2 -> ``Chapter 2``).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JSON = ROOT / "docs" / "thesis_labels.json"

#: theorem-like environments -> (counter, name); from the thesis' \newtheorem lines
THEOREMS = {"theorem": ("theorem", "Theorem"), "corollary": ("theorem", "Corollary"),
            "lemma": ("theorem", "Lemma"), "proposition": ("theorem", "Proposition"),
            "definition": ("definition", "Definition"), "remark": ("remark", "Remark"),
            "example": ("example", "Example"), "assumption": ("assumption", "Assumption")}
WITHIN_CHAPTER = {"section", "equation", "theorem", "definition", "remark", "figure", "table"}
ROWS_ENVS = {"align", "gather", "flalign", "alignat", "eqnarray"}       # one number per row
ONE_NUMBER_ENVS = {"equation", "multline"}
STARRED_MATH = {e + "*" for e in ROWS_ENVS | ONE_NUMBER_ENVS}
SECTIONS = ("chapter", "section", "subsection", "subsubsection")
KIND_NAMES = {"chapter": "Chapter", "appendix": "Appendix", "section": "Section",
              "subsection": "Section", "subsubsection": "Section", "equation": "Eq.",
              "algorithm": "Algorithm", "figure": "Figure", "subfigure": "Figure",
              "table": "Table", "subtable": "Table", "item": "item"}

_TOKEN = re.compile(
    r"\\(?P<sec>chapter|section|subsection|subsubsection)(?P<star>\*?)\s*(?:\[[^\]]*\])?\s*\{"
    r"|\\(?P<app>appendices|appendix)\b"
    r"|\\begin\{(?P<begin>[^}]+)\}"
    r"|\\end\{(?P<end>[^}]+)\}"
    r"|\\label\{(?P<label>[^}]+)\}"
    r"|\\(?P<caption>caption)(?P<cstar>\*?)(?![A-Za-z])"
    r"|\\tag\*?\{(?P<tag>[^}]*)\}"
    r"|\\(?P<nonum>nonumber|notag)\b"
    r"|(?P<cr>\\\\)"
    r"|\\(?P<item>item)\b"
    r"|(?P<brace>[{}])"
    r"|\\[{}%\\]")


def strip_comments(text: str) -> str:
    """Remove ``%`` comments (not ``\\%``) and ``comment`` environments."""
    text = re.sub(r"(?<!\\)%[^\n]*", "", text)
    return re.sub(r"\\begin\{comment\}.*?\\end\{comment\}", "", text, flags=re.S)


def _alph(n: int) -> str:
    return chr(ord("A") + n - 1) if 1 <= n <= 26 else str(n)


class _Numberer:
    """Walks the document body and records the number each \\label shows."""

    def __init__(self):
        self.c = {name: 0 for name in ("chapter", "section", "subsection", "subsubsection",
                                       "equation", "theorem", "definition", "remark",
                                       "example", "assumption", "algorithm", "figure",
                                       "table", "subfigure", "subtable", "enumi")}
        self.appendix = False
        self.current: tuple[str, str] = ("", "")           # (kind, number): \@currentlabel
        self.stack: list[tuple[str, tuple[str, str], int]] = []   # (env, saved, brace depth)
        self.depth = 0
        self.row: dict | None = None                       # the open align row
        self.pending: list[str] = []                       # labels of unnumbered rows
        self.stepped: list[bool] = []      # per open environment: its float counter stepped
        self.float_number: list[str] = []
        self.labels: dict[str, dict] = {}
        self.problems: list[str] = []

    # -- counters ------------------------------------------------------------------------------
    def chapter_no(self) -> str:
        n = self.c["chapter"]
        return _alph(n) if self.appendix else str(n)

    def step(self, counter: str) -> str:
        self.c[counter] += 1
        if counter == "chapter":
            for name in WITHIN_CHAPTER | {"subsection", "subsubsection"}:
                self.c[name] = 0
        elif counter == "section":
            self.c["subsection"] = self.c["subsubsection"] = 0
        elif counter == "subsection":
            self.c["subsubsection"] = 0
        elif counter in ("figure", "table"):
            self.c["sub" + counter] = 0
        ch = self.chapter_no()
        n = self.c[counter]
        if counter == "chapter":
            return ch
        if counter == "section":
            return f"{ch}.{n}"
        if counter == "subsection":
            return f"{ch}.{self.c['section']}.{n}"
        if counter == "subsubsection":
            return f"{ch}.{self.c['section']}.{self.c['subsection']}.{n}"
        if counter in ("subfigure", "subtable"):
            return f"{ch}.{self.c[counter[3:]]}{chr(ord('a') + n - 1)}"
        if counter in WITHIN_CHAPTER:
            return f"{ch}.{n}"
        return str(n)

    # -- events --------------------------------------------------------------------------------
    def record(self, label: str, kind: str, number: str, line: int) -> None:
        if not kind:
            self.problems.append(f"line {line}: \\label{{{label}}} before any numbered object")
            return
        if label in self.labels:
            self.problems.append(f"line {line}: \\label{{{label}}} defined twice")
        self.labels[label] = {"kind": kind, "number": number, "line": line}

    def begin(self, env: str) -> None:
        self.stack.append((env, self.current, self.depth))
        self.stepped.append(False)
        self.float_number.append("")
        if env in THEOREMS:
            counter, name = THEOREMS[env]
            self.current = (env, self.step(counter))
        elif env in ONE_NUMBER_ENVS:
            self.current = ("equation", self.step("equation"))
        elif env in ROWS_ENVS:
            self.row = {"labels": [], "nonum": False, "tag": None, "text": False}
        elif env == "enumerate":
            self.c["enumi"] = 0

    def end_row(self, line: int, last: bool) -> None:
        row = self.row
        if row is None:
            return
        if last and not row["text"] and not row["labels"] and row["tag"] is None:
            self.row = None            # amsmath ignores an empty last row
            return
        if row["tag"] is not None:
            number = row["tag"]
        elif not row["nonum"]:
            number = self.step("equation")
        else:
            number = None
        if number is None:             # LaTeX would give such a label the previous number;
            self.pending += row["labels"]      # a reader finds the display's printed one
            if last:
                for label in self.pending:
                    self.problems.append(f"line {line}: \\label{{{label}}} in a display "
                                         "without a number: not mapped")
                self.pending = []
        else:
            for label in self.pending:
                self.problems.append(f"line {line}: \\label{{{label}}} sits on an unnumbered "
                                     f"row; mapped to the number its display prints, ({number})")
            for label in self.pending + row["labels"]:
                self.record(label, "equation", number, line)
            self.pending = []
        self.row = None if last else {"labels": [], "nonum": False, "tag": None, "text": False}

    def end(self, env: str, line: int) -> None:
        if env in ROWS_ENVS:
            self.end_row(line, last=True)
        while self.stack:
            top, saved, _ = self.stack.pop()
            self.stepped.pop()
            self.float_number.pop()
            self.current = saved
            if top == env:
                break
            self.problems.append(f"line {line}: \\end{{{env}}} closes \\begin{{{top}}}")

    def caption(self, line: int) -> None:
        """A float's counter is stepped once, by its first caption or sub-caption (the
        caption package); a sub-caption also steps the sub-counter."""
        envs = [e.rstrip("*") for e, _, _ in self.stack]
        floats = [i for i, e in enumerate(envs) if e in ("figure", "table", "algorithm")]
        if not floats:
            self.problems.append(f"line {line}: \\caption outside a float")
            return
        i = floats[-1]
        if not self.stepped[i]:
            self.stepped[i] = True
            self.float_number[i] = self.step(envs[i])
        sub = [e for e in envs[i + 1:] if e in ("subfigure", "subtable")]
        if sub:
            self.current = (sub[-1], self.step(sub[-1]))
        else:
            self.current = (envs[i], self.float_number[i])

    def in_rows_env(self) -> bool:
        return bool(self.stack) and self.stack[-1][0] in ROWS_ENVS and \
            self.depth == self.stack[-1][2]

    def run(self, body: str, first_line: int) -> None:
        pos = prev_end = 0
        line = first_line
        for m in _TOKEN.finditer(body):
            line += body.count("\n", pos, m.start())
            if self.row is not None and body[prev_end:m.start()].strip():
                self.row["text"] = True
            pos, prev_end = m.start(), m.end()
            g = m.lastgroup
            if m.group("sec"):
                # \subsubsection: report's secnumdepth is 2 (titlesec keeps the standard
                # levels), so a label there takes its subsection's number, which holds it
                if not m.group("star") and m.group("sec") != "subsubsection":
                    kind = m.group("sec")
                    number = self.step(kind)
                    if kind == "chapter" and self.appendix:
                        kind = "appendix"
                    self.current = (kind, number)
                self.depth += 1              # the title's opening brace
            elif m.group("app"):
                self.appendix = True
                self.c["chapter"] = 0
            elif m.group("begin"):
                env = m.group("begin").strip()
                if env == "document":
                    continue
                self.begin(env)
            elif m.group("end"):
                self.end(m.group("end").strip(), line)
            elif m.group("label"):
                label = m.group("label").strip()
                if self.row is not None and self.in_rows_env():
                    self.row["labels"].append(label)
                else:
                    self.record(label, *self.current, line)
            elif m.group("caption"):
                if not m.group("cstar"):
                    self.caption(line)
            elif g == "tag":
                if self.row is not None and self.in_rows_env():
                    self.row["tag"] = m.group("tag")
                elif self.stack and self.stack[-1][0] in ONE_NUMBER_ENVS:
                    self.c["equation"] -= 1
                    self.current = ("equation", m.group("tag"))
            elif m.group("nonum"):
                if self.row is not None and self.in_rows_env():
                    self.row["nonum"] = True
            elif m.group("cr"):
                if self.row is not None and self.in_rows_env():
                    self.end_row(line, last=False)
            elif m.group("item"):
                if self.stack and self.stack[-1][0] == "enumerate":
                    self.c["enumi"] += 1
                    self.current = ("item", str(self.c["enumi"]))
            elif m.group("brace"):
                self.depth += 1 if m.group("brace") == "{" else -1
        if self.stack:
            self.problems.append(f"unclosed environments at the end: {[e for e, _, _ in self.stack]}")


def readable(kind: str, number: str) -> str:
    """The form a reader looks up: ``Eq. (2.5)``, ``Theorem 2.3``, ``Chapter 2``, ..."""
    if kind == "equation":
        return f"Eq. ({number})"
    name = THEOREMS[kind][1] if kind in THEOREMS else KIND_NAMES.get(kind, kind.title())
    return f"{name} {number}"


def build_map(tex: Path) -> dict:
    """Parse ``tex`` and return the JSON-ready map."""
    raw = tex.read_text(encoding="utf-8")
    text = strip_comments(raw)
    start = text.index("\\begin{document}")
    numberer = _Numberer()
    numberer.run(text[start:], first_line=text.count("\n", 0, start) + 1)
    labels = {name: {"kind": v["kind"], "number": v["number"],
                     "text": readable(v["kind"], v["number"])}
              for name, v in sorted(numberer.labels.items())}
    return {"source": tex.name, "sha256": hashlib.sha256(raw.encode()).hexdigest(),
            "note": "generated by docs/thesis_refs.py from the thesis source; do not edit",
            "problems": numberer.problems, "labels": labels}


# -- rewriting citations ---------------------------------------------------------------------------
#: a citation word before a label -> replaced together with the label
_WORD = (r"(?:Eqs?\.|Equations?|Algorithms?|Alg\.|Algo\.|Thms?\.?|Theorems?|Lemmas?|Lem\.|"
         r"Props?\.|Propositions?|Cor\.|Corollary|Corollaries|Defs?\.|Definitions?|"
         r"Secs?\.|Sections?|Subsections?|App\.|Apx\.|Appendix|Appendices|Figs?\.|Figures?|"
         r"Tables?|Tabs?\.|Chapters?|Ch\.|Remarks?|Rmk\.|Assumptions?|Ass\.|Examples?|Ex\.)")
_PLURAL = re.compile(r"Eqs\.|Equations|Algorithms|Thms\.?|Theorems|Lemmas|Props\.|Propositions|"
                     r"Corollaries|Defs\.|Definitions|Secs\.|Sections|Subsections|Appendices|"
                     r"Figs\.|Figures|Tables|Tabs\.|Chapters|Remarks|Assumptions|Examples")
_PLURALS = {"Eq.": "Eqs.", "Corollary": "Corollaries", "Appendix": "Appendices",
            **{n: n + "s" for n in ("Algorithm", "Theorem", "Lemma", "Proposition",
                                    "Definition", "Section", "Figure", "Table", "Chapter",
                                    "Remark", "Assumption", "Example")}}
_JOINER = re.compile(r"\s*(?:,|/|and|or|&|-+|to)\s*")


def _label_re(labels) -> re.Pattern:
    names = "|".join(re.escape(n) for n in sorted(labels, key=len, reverse=True))
    return re.compile(rf"(?:(?P<word>{_WORD})[\s~]*(?P<paren>\()?)?(?P<q>``|`)?(?<![\w:-])"
                      rf"(?P<label>{names})(?![\w-])(?P=q)?(?(paren)\))")


def rewrite_text(text: str, labels: dict, pattern: re.Pattern | None = None) -> tuple[str, int]:
    """Replace the label citations in prose ``text``; returns (text, number replaced)."""
    pattern = pattern or _label_re(labels)
    out, last, count, prev = [], 0, 0, ""
    for m in pattern.finditer(text):
        q = m.group("q") or ""
        if q and not text.startswith(q, m.end("label")):
            continue                                   # an unbalanced quote: leave it
        entry = labels[m.group("label")]
        name = entry["text"].partition(" ")[0]
        joined = (count and name == prev and _JOINER.fullmatch(text[last:m.start()]))
        if m.group("word") is None and joined:         # "Eqs. (2.5) and (2.6)",
            new = (f"({entry['number']})" if entry["kind"] == "equation"   # "Theorems 2.3
                   else entry["number"])                                   # and 2.4"
        else:
            new = entry["text"]
            if _PLURAL.fullmatch(m.group("word") or ""):      # "Thms ``a`` and ``b``"
                name, _, number = new.partition(" ")
                new = f"{_PLURALS.get(name, name)} {number}"
        out.append(text[last:m.start()])
        out.append(new)
        last, prev = m.end(), name
        count += 1
    out.append(text[last:])
    return "".join(out), count


def _rewrite_markdown(text: str, labels, pattern) -> tuple[str, int]:
    """Rewrite the prose of a Markdown text; fenced code blocks are left alone."""
    out, prose, total, fenced = [], [], 0, False

    def flush():
        nonlocal total
        new, n = rewrite_text("".join(prose), labels, pattern)
        out.append(new)
        total += n
        prose.clear()

    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("```"):
            if not fenced:
                flush()
            fenced = not fenced
            out.append(line)
        elif fenced:
            out.append(line)
        else:
            prose.append(line)
    flush()
    return "".join(out), total


def _docstring_tokens(source: str) -> set[tuple[int, int]]:
    """Start positions of the string tokens that are docstrings (expression statements)."""
    starts, prev = set(), None
    toks = list(tokenize.generate_tokens(io.StringIO(source).readline))
    for i, tok in enumerate(toks):
        if tok.type == tokenize.STRING:
            before = prev.type if prev is not None else tokenize.NEWLINE
            after = toks[i + 1].type if i + 1 < len(toks) else tokenize.NEWLINE
            if before in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.NL,
                          tokenize.ENCODING) and after in (tokenize.NEWLINE, tokenize.ENDMARKER,
                                                          tokenize.COMMENT, tokenize.NL):
                starts.add(tok.start)
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            prev = tok
    return starts


def _rewrite_python(text: str, labels, pattern) -> tuple[str, int]:
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for ln in lines:
        offsets.append(offsets[-1] + len(ln))
    docs = _docstring_tokens(text)
    edits = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT or (tok.type == tokenize.STRING and tok.start in docs):
            a = offsets[tok.start[0] - 1] + tok.start[1]
            b = offsets[tok.end[0] - 1] + tok.end[1]
            new, n = rewrite_text(text[a:b], labels, pattern)
            if n:
                edits.append((a, b, new, n))
    total = 0
    for a, b, new, n in reversed(edits):
        text = text[:a] + new + text[b:]
        total += n
    return text, total


def _rewrite_notebook(text: str, labels, pattern) -> tuple[str, int]:
    nb = json.loads(text)
    total = 0
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            new, n = _rewrite_markdown(src, labels, pattern)
            if n:
                cell["source"] = new.splitlines(keepends=True)
                total += n
    if not total:
        return text, 0
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n", total


def rewrite_file(path: Path, labels: dict, pattern=None, write: bool = True) -> int:
    """Rewrite one file in place; returns the number of citations replaced."""
    pattern = pattern or _label_re(labels)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        new, n = _rewrite_python(text, labels, pattern)
    elif path.suffix == ".ipynb":
        new, n = _rewrite_notebook(text, labels, pattern)
    elif path.suffix in (".md", ".markdown"):
        new, n = _rewrite_markdown(text, labels, pattern)
    else:
        new, n = rewrite_text(text, labels, pattern)
    if n and write:
        path.write_text(new, encoding="utf-8")
    return n


def load_labels(path: Path = DEFAULT_JSON) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))["labels"]


def _default_tex() -> Path | None:
    env = os.environ.get("RDR_JAX_THESIS")
    cands = ([Path(env)] if env else []) + [ROOT / "shared" / "reference" / "thesis.tex",
                                            ROOT.parent / "shared" / "reference" / "thesis.tex"]
    return next((p for p in cands if p.is_file()), None)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tex", type=Path, default=None, help="the thesis source")
    p.add_argument("--out", type=Path, default=DEFAULT_JSON, help="the label map (JSON)")
    p.add_argument("--rewrite", nargs="+", type=Path, metavar="FILE",
                   help="replace label citations in these files (uses --out as the map)")
    p.add_argument("--check", nargs="+", type=Path, metavar="FILE",
                   help="list the label citations that --rewrite would replace; exit 1 if any")
    args = p.parse_args(argv)
    if args.rewrite or args.check:
        labels = load_labels(args.out)
        pattern = _label_re(labels)
        total = 0
        for path in args.rewrite or args.check:
            n = rewrite_file(path, labels, pattern, write=bool(args.rewrite))
            if n:
                print(f"{path}: {n} citation(s) {'rewritten' if args.rewrite else 'left'}")
            total += n
        print(f"{total} citation(s) {'rewritten' if args.rewrite else 'found'}")
        return 1 if args.check and total else 0
    tex = args.tex or _default_tex()
    if tex is None:
        p.error("thesis.tex not found: pass --tex or set RDR_JAX_THESIS")
    data = build_map(tex)
    args.out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for problem in data["problems"]:
        print("warning:", problem)
    print(f"{len(data['labels'])} labels -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
