"""The result of an evaluation: a JSON-able metrics dict, plot data, and a markdown view."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpsynth.evaluate.privacy import PRIVATE_NOTICE

METRICS_FILE = "metrics.json"
PRIVATE_SECTIONS = ("reference", "privacy")
"""Sections of metrics.json computed from the real train split, the private data."""
FIGURES_FILE = "figures.json"


@dataclass
class EvalResult:
    """`metrics` holds the sections `meta`, `utility`, `fidelity` and, when a real train
    split was given, `reference` (a classifier trained on it) and `privacy` (both
    private-only, carrying the notice); `figures` holds the data
    the HTML report plots (length samples, 2-D embedding coordinates)."""

    metrics: dict[str, Any]
    figures: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return self.metrics

    def write(self, out_dir: str | Path) -> Path:
        """Write metrics.json and figures.json into `out_dir`; returns the metrics path."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / FIGURES_FILE).write_text(json.dumps(self.figures), encoding="utf-8")
        path = out_dir / METRICS_FILE
        path.write_text(json.dumps(self.metrics, indent=2), encoding="utf-8")
        return path

    @classmethod
    def read(cls, out_dir: str | Path) -> EvalResult:
        out_dir = Path(out_dir)
        figures = out_dir / FIGURES_FILE
        return cls(json.loads((out_dir / METRICS_FILE).read_text(encoding="utf-8")),
                   json.loads(figures.read_text(encoding="utf-8")) if figures.exists() else {})

    def rows(self) -> list[tuple[str, str, str]]:
        """(section, metric, value) rows of the headline numbers, for tables."""
        return metric_rows(self.metrics)

    def to_markdown(self) -> str:
        lines = ["| section | metric | value |", "|---|---|---|"]
        lines += [f"| {s} | {m} | {v} |" for s, m, v in self.rows()]
        private = [s for s in PRIVATE_SECTIONS if s in self.metrics]
        if private:
            lines += ["", f"**{' and '.join(private)} rows: {PRIVATE_NOTICE}.**"]
        return "\n".join(lines)


def metric_rows(metrics: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Flatten the headline metrics into rows; nested per-class and histogram data are left
    to figures and the JSON."""
    rows: list[tuple[str, str, str]] = []
    for section in ("utility", "fidelity", "reference", "privacy"):
        for key, value in metrics.get(section, {}).items():
            if key == "notice":
                continue
            label = f"{section} (private only)" if section in PRIVATE_SECTIONS else section
            rows += [(label, name, _fmt(v)) for name, v in _leaves(key, value)]
    return rows


_SKIP = {"per_class_recall", "real_shares", "synthetic_shares", "bin_edges", "counts",
         "exact_rows", "near_rows", "classes_missing_from_train"}


def _leaves(prefix: str, value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        out = []
        for key, inner in value.items():
            if key not in _SKIP:
                out += _leaves(f"{prefix}.{key}", inner)
        return out
    return [(prefix, value)]


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
