"""What a run writes and returns: the synthetic set, privacy.json, metrics.jsonl, usage.json,
and, for a run that stopped early, privacy.json marked incomplete."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from dpsynth.backends import Embedder, Generator
from dpsynth.backends.config import REMOTE_EMBEDDING_ASSUMPTION
from dpsynth.checkpoint import CheckpointStore
from dpsynth.config import RunConfig
from dpsynth.data import write_table
from dpsynth.logs import where_raised
from dpsynth.methods.base import SyntheticSet
from dpsynth.privacy.journal import atomic_write_text
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.stops import shielded

log = logging.getLogger(__name__)

NOT_PRIVATE = ("NOT PRIVATE: budget.noise is seeded_not_private, so the DP noise follows "
               "from the seed and can be subtracted; this run is a reproduction, not a release")

NOT_PRIVATE_COLUMN = "not_private"
"""A seeded run's synthetic set and metrics.jsonl rows carry this column, true in every row:
the mark travels with a row or a file copied on its own, in every format, while a private
run's file keeps its name and its `text` and `label` columns, and readers pick those."""


@dataclass(frozen=True)
class RunOutputs:
    synthetic: Path
    privacy: Path
    metrics: Path
    result: SyntheticSet
    ledger: PrivacyLedger
    private: bool
    """False for a seeded, NOT PRIVATE reproduction."""
    already_complete: bool = False
    """The folder held a finished run: these are its outputs, and nothing was run again."""

    def spend(self) -> dict[str, Any]:
        """What the run spent, for a caller to show: `epsilon` spent (composed over every
        release), `epsilon_budget`, `delta`, `private` and each stage's `stages` entry (ε
        alone, releases)."""
        return {"epsilon": self.ledger.spent(), "epsilon_budget": self.ledger.epsilon,
                "delta": self.ledger.delta, "private": self.private,
                "stages": self.ledger.breakdown()}


def _mark(config: RunConfig) -> dict[str, bool]:
    return {} if config.budget.private else {NOT_PRIVATE_COLUMN: True}


def metrics_writer(config: RunConfig) -> Callable[[dict[str, Any]], None]:
    """`ctx.report`: each per-iteration row logged and appended to metrics.jsonl."""
    path, mark = config.output.dir / "metrics.jsonl", _mark(config)

    def report(row: dict[str, Any]) -> None:
        row = {**mark, **row}
        log.info("progress: %s", json.dumps(row))
        with path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")

    return report


def write_outputs(config: RunConfig, result: SyntheticSet, ledger: PrivacyLedger,
                  generator: Generator, embedder: Embedder) -> RunOutputs:
    """usage.json, the synthetic set and privacy.json (complete) of a finished run."""
    out, backends = config.output.dir, config.backends
    usage = {"generator": generator.usage(), "embedder": embedder.usage(),
             "remote_embedding_of_private_text": bool(
                 embedder.is_remote and backends.embedder.allow_remote_on_private)}
    (out / "usage.json").write_text(json.dumps(usage, indent=2), encoding="utf-8")

    frame = pd.DataFrame({"text": result.texts}
                         | ({"label": result.labels} if result.labels is not None else {})
                         | _mark(config))
    synthetic = write_table(frame, out / f"synthetic.{config.output.format}",
                            config.output.format)
    privacy = _write_privacy(ledger, config, {"complete": True})
    log.info("done: %d synthetic records, ε spent %.4g of %g", len(result.texts),
             ledger.spent(), ledger.epsilon)
    return RunOutputs(synthetic, privacy, out / "metrics.jsonl", result, ledger,
                      config.budget.private)


def _write_privacy(ledger: PrivacyLedger, config: RunConfig, status: dict[str, Any]) -> Path:
    path = config.output.dir / "privacy.json"
    atomic_write_text(path, json.dumps({**status, **_privacy_report(ledger, config)},
                                       indent=2, allow_nan=False))
    return path


def write_incomplete(ledger: PrivacyLedger, config: RunConfig, exc: BaseException) -> None:
    """privacy.json for a run that stopped early: its spend so far, marked incomplete. Says
    how it stopped by the exception's type only (a message could quote anything)."""
    stopped = ("interrupted" if isinstance(exc, KeyboardInterrupt)
               else f"failed ({type(exc).__name__})")
    try:
        with shielded():
            _write_privacy(ledger, config, {
                "complete": False, "stopped": stopped,
                "note": "the run did not finish: this is what it spent, every release its "
                        "journal recorded; run the same config again to resume"})
    except Exception as failed:  # never hide the error that stopped the run
        log.warning("could not write privacy.json for the stopped run:\n%s",
                    where_raised(failed))


def stopped_summary(folder: Path) -> str:
    """Where a stopped run in `folder` stands, from its incomplete privacy.json and
    checkpoints: "at checkpoint step 2, after 3 release(s): ε = 1.2 of 4 spent (...)"."""
    path = Path(folder) / "privacy.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        releases, spent = len(data["charges"]), float(data["spent"]["epsilon"])
        budget = float(data["budget"]["epsilon"])
    except (OSError, ValueError, KeyError, TypeError):
        return "before any release"
    latest = CheckpointStore(Path(folder) / "checkpoints").latest()
    where = f"at checkpoint step {latest[0]}" if latest else "before the first checkpoint"
    if not releases:
        return f"{where}, before any release (nothing spent)"
    return f"{where}, after {releases} release(s): ε = {spent:.4g} of {budget:g} spent ({path})"


def _privacy_report(ledger: PrivacyLedger, config: RunConfig) -> dict[str, Any]:
    """The ledger, with its total recomputed from the recorded events, and what it treats as
    public."""
    recomputed = PrivacyLedger.from_dict(ledger.to_dict())
    report = {**ledger.to_dict(), "recomputed_epsilon": recomputed.spent(),
              "private": config.budget.private,
              "public_facts": {
                  "units": ("N, the number of privacy units (δ is derived from it)"
                            if config.data.max_units is None else
                            f"data.max_units = {config.data.max_units}, a declared bound on N "
                            "(δ and sampling rates are derived from it; N is not public)"),
                  "unit": "user" if config.data.user_column else "record",
                  "records_per_unit": config.data.records_per_unit,
                  "label_set": config.data.labels}}
    embedder = config.backends.embedder
    if embedder.name == "openai" and embedder.allow_remote_on_private:
        report["assumes"] = REMOTE_EMBEDDING_ASSUMPTION
    if not config.budget.private:
        report = {"NOT_PRIVATE": NOT_PRIVATE, **report}
    return report
