"""What a report reads from a run folder; each part may be missing and says why.

A run folder holds (see docs/evaluation.md):
- `privacy.json`: the privacy ledger (`dpsynth.privacy-ledger/1`: budget, spent, breakdown
  per stage, and the recorded charges);
- `metrics.jsonl`: one JSON object per iteration, with an `iteration` key and numbers;
- `synthetic.<csv|tsv|jsonl|parquet|hf>`: the synthetic set (`hf`: a saved Hugging Face
  dataset, a folder);
- `config.json` (the resolved run config) and `usage.json` (generator and embedder calls,
  tokens, cost);
- `eval/metrics.json` and `eval/figures.json`: written by `dpsynth eval --output RUN/eval`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpsynth.data.io import FORMATS
from dpsynth.errors import DpsynthError, InputError
from dpsynth.evaluate.result import FIGURES_FILE, METRICS_FILE, EvalResult
from dpsynth.evaluate.tables import TextTable, read_text_table
from dpsynth.privacy.spend import recomputed_spend

log = logging.getLogger(__name__)

SYNTHETIC_NAMES = tuple(f"synthetic.{fmt}" for fmt in FORMATS)
"""Every name `dpsynth run` may give its synthetic set, one per `output.format`."""
RUN_FILES = ("privacy.json", "config.json", "metrics.jsonl", "usage.json", *SYNTHETIC_NAMES,
             f"eval/{METRICS_FILE}", METRICS_FILE)
"""What a run folder holds; a folder with none of them is not a run (a report of it would
be an empty page)."""


@dataclass(frozen=True)
class StageSpend:
    stage: str
    epsilon_alone: float | None
    releases: int | None
    mechanisms: tuple[str, ...] = ()


@dataclass(frozen=True)
class PrivacySpend:
    """The ledger's figures; `source` says whether they were recomputed from the events."""

    budget_epsilon: float | None
    budget_delta: float | None
    spent_epsilon: float | None
    stages: tuple[StageSpend, ...]
    source: str
    stopped: str | None = None
    """How an incomplete run stopped ("interrupted", "failed (BackendError)"); None when the
    run finished."""
    assumes: str | None = None
    """What the ε rests on beyond the ledger (privacy.json `assumes`), e.g. a remote embedder."""


@dataclass
class RunArtifacts:
    run_dir: Path
    privacy: PrivacySpend | None = None
    iterations: list[dict[str, Any]] = field(default_factory=list)
    synthetic: TextTable | None = None
    evaluation: EvalResult | None = None
    config: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    missing: dict[str, str] = field(default_factory=dict)
    """Part name → why it is not in the report."""


def load_run(run_dir: str | Path) -> RunArtifacts:
    """Read whatever the run folder holds; a missing or unreadable part is noted, not fatal."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir() or not any((run_dir / name).exists() for name in RUN_FILES):
        raise InputError(f"{run_dir}: not a run folder (no privacy.json, config.json, "
                         "synthetic set or other output of dpsynth run in it)")
    out = RunArtifacts(run_dir)
    loaders = {"privacy": _privacy, "iterations": _iterations, "synthetic": _synthetic,
               "evaluation": _evaluation, "config": _json_file("config.json"),
               "usage": _json_file("usage.json")}
    for name, loader in loaders.items():
        try:
            setattr(out, name, loader(run_dir))
        except (OSError, ValueError, KeyError, TypeError, DpsynthError) as exc:
            out.missing[name] = str(exc)
            log.info("report: no %s (%s)", name, exc)
    return out


def read_privacy(data: dict[str, Any]) -> PrivacySpend:
    """Figures from a ledger dict, recomputed from its charges where it records them (a
    report's ε must not trust a stored number), else as stored."""
    if "charges" in data:
        spent, breakdown = recomputed_spend(data)
        source = f"recomputed from the {len(data['charges'])} recorded releases"
    else:
        spent, breakdown = data.get("spent", {}).get("epsilon"), data.get("breakdown", {})
        source = "as stored in privacy.json (not recomputed from recorded releases)"
    budget = data.get("budget", {})
    stages = tuple(
        StageSpend(name, info.get("epsilon_alone"), info.get("releases"),
                   tuple(info.get("mechanisms", ())))
        for name, info in breakdown.items())
    stopped = None if data.get("complete", True) else str(data.get("stopped", "stopped early"))
    return PrivacySpend(budget.get("epsilon"), budget.get("delta"), spent, stages, source,
                        stopped, data.get("assumes"))


def _privacy(run_dir: Path) -> PrivacySpend:
    path = run_dir / "privacy.json"
    if not path.exists():
        raise FileNotFoundError("no privacy.json in the run folder")
    return read_privacy(json.loads(path.read_text(encoding="utf-8")))


def _iterations(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError("no metrics.jsonl in the run folder")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError(f"metrics.jsonl line {number} is not a JSON object")
            rows.append(row)
    return rows


def _json_file(name: str):
    def load(run_dir: Path) -> dict[str, Any]:
        path = run_dir / name
        if not path.exists():
            raise FileNotFoundError(f"no {name} in the run folder")
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"{name} is not a JSON object")
        return data

    return load


def _synthetic(run_dir: Path) -> TextTable:
    for name in SYNTHETIC_NAMES:
        if (run_dir / name).exists():
            return read_text_table(run_dir / name)
    raise FileNotFoundError(f"no synthetic set ({', '.join(SYNTHETIC_NAMES)})")


def _evaluation(run_dir: Path) -> EvalResult:
    for folder in (run_dir / "eval", run_dir):
        if (folder / METRICS_FILE).exists():
            return EvalResult.read(folder)
    raise FileNotFoundError(
        f"no eval/{METRICS_FILE} (and {FIGURES_FILE}); run `dpsynth eval --synthetic "
        f"<synthetic file> --real-test <test file> --output {run_dir / 'eval'}`")
