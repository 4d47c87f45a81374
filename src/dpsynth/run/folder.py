"""The output folder: set up before a run, marked when its run finishes, and, on a rerun,
compared with the config: a finished folder's outputs are returned as they are, releasing
nothing, and a finished folder with another config is refused."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from dpsynth.config import RunConfig
from dpsynth.data import DataConfig, read_table
from dpsynth.errors import InputError
from dpsynth.methods.base import SyntheticSet
from dpsynth.privacy.journal import Journal, atomic_write_text
from dpsynth.run.outputs import RunOutputs
from dpsynth.run.resume import journal_ledger

log = logging.getLogger(__name__)

COMPLETE_FILE = "complete.json"

RESCORING_SECTIONS = ("held_out",)
"""Config sections that only score a finished run's output, on real records kept out of
`data.path`: they release nothing and read no private record, so adding or changing one on a
finished folder is not "another config". The rerun scores the output it has."""


def prepare_output_dir(folder: Path) -> Path:
    """Create the output folder, or say in one line why it cannot be one (exit 2): a path
    that is a file, lies under a file, or cannot be created or written (`/proc/...`)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise InputError(f"output.dir {folder}: is a file, not a folder; name a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe, name = tempfile.mkstemp(dir=folder, prefix=".write-test-")
        os.close(probe)
        os.unlink(name)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InputError(f"output.dir {folder}: cannot be created or written ({reason}); "
                         "name a folder you can write to") from None
    return folder


def released_anything(folder: Path) -> bool:
    """Whether the folder's journal holds a charge: a run stopped by bad data, a config the
    recipe refuses or a backend that cannot answer stops before its first release."""
    journal = Path(folder) / "checkpoints" / "releases.jsonl"
    if not journal.is_file():
        return False
    return any('"charge"' in line for line in journal.read_text(encoding="utf-8").splitlines())


def mark_complete(config: RunConfig, outputs: RunOutputs, releases: int) -> None:
    """Record that the folder's run finished: a rerun returns its outputs, releasing nothing."""
    atomic_write_text(config.output.dir / "checkpoints" / COMPLETE_FILE, json.dumps({
        "releases": releases, "synthetic": outputs.synthetic.name,
        "config": _comparable(config)}, indent=2))


def finished(config: RunConfig, journal: Journal) -> RunOutputs | None:
    """The outputs of the folder's finished run, or None when it has not finished. A
    finished folder with another config is refused: it holds that config's release."""
    out = config.output.dir
    marker = out / "checkpoints" / COMPLETE_FILE
    if not marker.exists():
        return None
    done = json.loads(marker.read_text(encoding="utf-8"))
    synthetic = out / done["synthetic"]
    if done["releases"] != len(journal.releases) or not synthetic.exists():
        raise InputError(f"{out}: its finished run's files are not as it left them "
                         f"({COMPLETE_FILE}, the release journal, {synthetic.name}); use a new "
                         "output folder")
    now, before = _comparable(config), _comparable(done["config"])
    before["backends"] = _backend_keys(before.get("backends", {}), now["backends"])
    changed = sorted(k for k in now.keys() | before.keys() if not _same(now.get(k),
                                                                       before.get(k)))
    if changed:
        raise InputError(f"{out}: holds a finished run made with another config (it differs "
                         f"in {', '.join(changed)}); use a new output folder")
    table = read_table(synthetic, config.output.format)
    result = SyntheticSet(table["text"].tolist(),
                          table["label"].tolist() if "label" in table.columns else None)
    _record_rescoring(config)
    log.info("this run is already complete; its outputs are in %s (nothing was run again)", out)
    return RunOutputs(synthetic, out / "privacy.json", out / "metrics.jsonl", result,
                      journal_ledger(journal), config.budget.private, already_complete=True)


def _comparable(config: RunConfig | dict[str, Any]) -> dict[str, Any]:
    """What must match for a folder's finished run to be this config's: everything that
    reaches a release or the output (data, budget, recipe, backends, seed, output format)."""
    dumped = config.model_dump(mode="json") if isinstance(config, RunConfig) else dict(config)
    dumped["output"] = {k: v for k, v in dumped["output"].items()
                        if k != "dir"}  # the same folder, however it was spelled
    # a `data:` setting an older version recorded and this one dropped (min_examples_per_label)
    # selects no record now: ignored, as the journal's comparison ignores it
    dumped["data"] = {k: v for k, v in dumped["data"].items() if k in DataConfig.model_fields}
    for section in RESCORING_SECTIONS:
        dumped.pop(section, None)
    return dumped


def _backend_keys(before: Any, now: Any) -> Any:
    """`before`'s backends section cut to the keys `now`'s has: a dpsynth before per-backend
    configs recorded every backend's keys in each section, and only the named backend's
    reached the run (a different backend differs in `name`)."""
    if isinstance(before, dict) and isinstance(now, dict):
        return {k: _backend_keys(before[k], now[k]) for k in now if k in before}
    return before


def _same(now: Any, before: Any) -> bool:
    """Config values equal, a key one side lacks counting as None: a finished run recorded
    before a newer dpsynth added an optional key (`data.label_names`) is the same run."""
    if isinstance(now, dict) and isinstance(before, dict):
        return all(_same(now.get(k), before.get(k)) for k in now.keys() | before.keys())
    return now == before


def _record_rescoring(config: RunConfig) -> None:
    """A finished run rerun with a new `held_out`: config.json says what eval/ was scored on
    (a rerun without one leaves the last scoring recorded, as eval/ still holds it)."""
    path = config.output.dir / "config.json"
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    now = config.model_dump(mode="json")
    updated = {**recorded, **{k: now[k] for k in RESCORING_SECTIONS if now.get(k) is not None}}
    if updated != recorded:
        atomic_write_text(path, json.dumps(updated, indent=2))
