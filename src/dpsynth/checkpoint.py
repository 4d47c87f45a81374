"""Checkpoints between iterations: atomic JSON files that hold only public state.

A recipe saves its population (synthetic text), the ledger, the noise source's state and its
iteration; a resumed run loads the latest and continues, so no release is made twice. JSON,
not pickle: a checkpoint can be read by a person and cannot carry a `PrivateDataset` (which
refuses serialisation anyway).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dpsynth.privacy.journal import atomic_write_text

_PREFIX = "step-"


class CheckpointStore:
    """Numbered checkpoints in one folder; the highest number is the latest."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def save(self, step: int, state: dict[str, Any]) -> Path:
        """Write `state` for `step` atomically (a crash leaves the previous one intact)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        target = self.folder / f"{_PREFIX}{step:05d}.json"
        atomic_write_text(target, json.dumps({"step": step, "state": state},
                                             ensure_ascii=False))
        return target

    def latest(self) -> tuple[int, dict[str, Any]] | None:
        """The latest (step, state), or None when nothing was saved. Latest by number, not by
        name: `step-100000` sorts before `step-99950` as text."""
        files = self.folder.glob(f"{_PREFIX}*.json")
        newest = max(files, key=lambda f: int(f.stem[len(_PREFIX):]), default=None)
        if newest is None:
            return None
        payload = json.loads(newest.read_text(encoding="utf-8"))
        return int(payload["step"]), payload["state"]
