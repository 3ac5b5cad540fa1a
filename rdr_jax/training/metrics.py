"""The training metrics file (JSONL: ``{"kind": "train" | "eval", "step": s, ...}`` per
line, interval means of the step's scalar metrics), written by :func:`rdr_jax.training.fit`
and rewritten from the checkpoint on resume, and a reader for plots.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np

__all__ = ["MetricsFile", "plot_metrics", "read_metrics"]


def _clean(v: Any) -> Any:
    if isinstance(v, (np.floating, np.integer, np.bool_)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)                     # "nan" / "inf": valid JSON, read back by float()
    if isinstance(v, (list, tuple)):
        return [_clean(u) for u in v]
    if isinstance(v, dict):
        return {k: _clean(u) for k, u in v.items()}
    return v


class MetricsFile:
    """Append-only JSONL writer, started afresh with ``rows`` (those of a
    checkpoint; ``[]`` for a new run); ``kind`` defaults to ``"train"``.
    """

    def __init__(self, path: Path | str, rows: Sequence[Mapping[str, Any]]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "w") as fh:
            for r in rows:
                fh.write(self._line(r))

    @staticmethod
    def _line(row: Mapping[str, Any]) -> str:
        r = {"kind": "train", **row}
        return json.dumps(_clean(r)) + "\n"

    def write(self, row: Mapping[str, Any]) -> None:
        """Append one row."""
        with open(self.path, "a") as fh:
            fh.write(self._line(row))


def _number(v: Any) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return math.nan
    return math.nan


def read_metrics(path: Path | str, kind: str = "train") -> dict[str, np.ndarray]:
    """Columns ``{name: float64 array}`` of the ``kind`` rows of a metrics file
    (NaN where a row lacks a name).

    Raises:
        FileNotFoundError: no file. ValueError: a line is not a JSON object.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no metrics file at {path}")
    rows = []
    with open(path) as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{i} is not a JSON object: {e}") from e
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{i} is not a JSON object")
            if row.get("kind", "train") == kind:
                rows.append(row)
    names = ["step"] + sorted({k for r in rows for k, v in r.items()
                               if k not in ("step", "kind") and not isinstance(v, (list, dict))})
    return {k: np.asarray([_number(r.get(k)) for r in rows], np.float64) for k in names}


def plot_metrics(runs: Mapping[str, Path | str], keys: Sequence[str] = ("loss",),
                 path: Optional[Path | str] = None, kind: str = "train"):
    """One panel per metric in ``keys``, one line per run ``{label: file}``;
    returns the matplotlib figure (saved to ``path`` when given).
    """
    import matplotlib
    if path is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = list(keys)
    if not keys:
        raise ValueError("keys must name at least one metric")
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3), squeeze=False)
    for label, p in runs.items():
        cols = read_metrics(p, kind)
        for ax, k in zip(axes[0], keys):
            if k in cols:
                ax.plot(cols["step"], cols[k], label=label)
    for ax, k in zip(axes[0], keys):
        ax.set_xlabel("step")
        ax.set_title(k)
        if ax.lines:
            ax.legend(fontsize=7)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig
