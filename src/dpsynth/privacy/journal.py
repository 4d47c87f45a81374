"""The write-ahead journal of an output folder: every release ever made for it, in order.

One JSON object a line, each fsynced before the process goes on:

    {"header": {...}}                       the budget, the noise mode, the public seed
    {"charge": {...}}                       a release's charge, before its noise is drawn
    {"output": i, "value": ..., "draws": n} release i's noisy answer, before it is used, and
                                            the noise stream's position after it
    {"part": {"output": i, "index": j,      part j of release i's answer, for a release
              "value": ..., "draws": n,     drawn in parts (a text of DP decoding), as
              "layout": ...}}               it is drawn: a restart with the same layout
                                            continues after it

A release's noisy answer is public once drawn, so journaling it costs nothing; a run that
restarts in the folder replays the journal instead of releasing again (`PrivacyLedger.replay`).
The journal is only appended to. A line torn by a crash is dropped on the next open, by an
atomic rewrite: a torn charge never had its noise drawn, a torn answer was never used. One
process at a time: an open journal holds an exclusive lock on the folder, since two runs
appending side by side would each compose only their own charges.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpsynth.errors import InputError
from dpsynth.privacy.ledger import NOT_DRAWN, Charge, Journaled

log = logging.getLogger(__name__)

FORMAT = "dpsynth.journal/1"


@dataclass(frozen=True)
class JournalHeader:
    """What a folder's releases were made under: a restart must agree on all of it."""

    epsilon: float
    delta: float
    public_seed: int
    noise: str
    unit: str
    """The neighbouring relation the charges were computed for: "record", or
    "user:COLUMN:k" (which column makes a user, and its bound k). An older folder's "user:k"
    names no column, so it matches no new unit and is refused, never guessed."""

    data: dict[str, Any] | None = None
    """The `data:` settings that decide which records the releases were computed from (file,
    columns, labels, cleaning). None in a journal older than this field: not compared."""

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "epsilon": self.epsilon, "delta": self.delta,
                "public_seed": self.public_seed, "noise": self.noise, "unit": self.unit,
                **({"data": self.data} if self.data is not None else {})}

    def changed_data(self, data: dict[str, Any]) -> list[str]:
        """The `data:` settings asked for differently (none in an older journal; a setting
        this version no longer has, `min_examples_per_label`, selects no record)."""
        if self.data is None:
            return []
        return sorted(key for key in data if self.data.get(key) != data.get(key))

    def _terms(self) -> tuple:
        return self.epsilon, self.delta, self.noise, self.unit

    def _shown(self) -> tuple[str, ...]:
        """`_terms` as a refusal names them, each number in full: two budgets refused as
        different must not read the same."""
        return (f"ε={self.epsilon!r}", f"δ={self.delta!r}", f"noise {self.noise}",
                f"unit {self.unit}")


class Journal:
    """Append-only, fsynced record of one output folder's releases."""

    def __init__(self, path: Path, header: JournalHeader, releases: list[Journaled],
                 lock: Any) -> None:
        self.path = path
        self.header = header
        self.releases = releases
        """Every release recorded so far, oldest first (as read when opened)."""
        self._lock = lock

    @classmethod
    def open(cls, path: Path, header: JournalHeader) -> Journal:
        """The folder's journal, created with `header` when absent, locked until `close`. An
        existing journal keeps its own public seed; another budget, noise mode or unit of
        privacy is refused, and so is a folder another run holds."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = _lock(path.parent / ".lock")
        try:
            return cls._read(path, header, lock)
        except BaseException:
            lock.close()
            raise

    @classmethod
    def _read(cls, path: Path, header: JournalHeader, lock: Any) -> Journal:
        if not path.exists():
            _atomic_write(path, [{"header": header.to_json()}])
            return cls(path, header, [], lock)
        lines, torn = _read_lines(path)
        if not lines or "header" not in lines[0] or lines[0]["header"].get("format") != FORMAT:
            raise InputError(f"{path}: not a dpsynth release journal (or one written by an "
                             "older version); use a new output folder")
        stored = lines[0]["header"]
        recorded = JournalHeader(stored["epsilon"], stored["delta"],
                                 int(stored["public_seed"]), stored["noise"], stored["unit"],
                                 stored.get("data"))
        if recorded._terms() != header._terms():
            changed = [i for i, (was, now) in enumerate(zip(recorded._terms(), header._terms(),
                                                            strict=True)) if was != now]
            older = (" (an older dpsynth's journal, which does not say which column made a "
                     "user; a finished run's outputs there stand as they are)"
                     if re.fullmatch(r"user:\d+", recorded.unit) else "")
            raise InputError(
                f"{path.parent.parent}: its releases were made with "
                f"{', '.join(recorded._shown()[i] for i in changed)}{older}; this config asks "
                f"for {', '.join(header._shown()[i] for i in changed)}: use a new output folder")
        if torn:
            log.warning("%s: dropping a line a crash left half written", path.name)
            _atomic_write(path, lines)
        return cls(path, recorded, _releases(lines[1:]), lock)

    def refuse_other_data(self, data: dict[str, Any]) -> None:
        """Refuse to add releases computed from the records another `data:` section selects
        (a finished folder is refused by its whole config instead)."""
        moved = self.header.changed_data(data)
        if moved:
            raise InputError(
                f"{self.path.parent.parent}: its releases were computed from the records of "
                f"another data: section ({', '.join(f'data.{k}' for k in moved)} changed); "
                "one folder's releases must all come from the same records: restore the "
                "section or use a new output folder")

    def close(self) -> None:
        """Release the folder for the next run."""
        self._lock.close()

    def append_charge(self, charge: Charge) -> None:
        self._append({"charge": charge.to_json()})

    def append_output(self, index: int, value: Any, draws: int) -> None:
        self._append({"output": index, "value": encode(value), "draws": draws})

    def append_part(self, index: int, part: int, value: Any, draws: int, layout: str) -> None:
        self._append({"part": {"output": index, "index": part, "value": encode(value),
                               "draws": draws, "layout": layout}})

    def _append(self, entry: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry, allow_nan=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())


def _releases(lines: list[dict[str, Any]]) -> list[Journaled]:
    charges, outputs = [], {}
    parts: dict[int, list[tuple[Any, int]]] = {}
    layouts: dict[int, str] = {}
    for entry in lines:
        if "charge" in entry:
            charges.append(Charge.from_json(entry["charge"]))
        elif "part" in entry:
            part = entry["part"]
            index = int(part["output"])
            written = parts.setdefault(index, [])
            if int(part["index"]) == len(written) and layouts.setdefault(
                    index, part.get("layout")) == part.get("layout"):  # a prefix, in order
                written.append((decode(part["value"]), int(part["draws"])))
        else:
            outputs[int(entry["output"])] = decode(entry["value"]), entry.get("draws")
    return [Journaled(i, charge, *outputs.get(i, (NOT_DRAWN, None)), tuple(parts.get(i, ())),
                      layouts.get(i)) for i, charge in enumerate(charges)]


def _read_lines(path: Path) -> tuple[list[dict[str, Any]], bool]:
    """Parsed lines, and whether the last one was torn (unparseable or unterminated)."""
    raw = path.read_text(encoding="utf-8")
    parts = raw.split("\n")
    complete, tail = parts[:-1], parts[-1]
    lines = []
    for number, text in enumerate(complete, start=1):
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:
            if number != len(complete):
                raise InputError(f"{path}: line {number} is corrupt; the journal cannot be "
                                 "trusted, use a new output folder") from None
            return lines, True
    return lines, bool(tail.strip())


def _lock(path: Path) -> Any:
    handle = path.open("a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise InputError(f"{path.parent.parent}: another run is using this output folder; "
                         "wait for it to finish or use another folder") from None
    return handle


def _atomic_write(path: Path, lines: list[dict[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(line, allow_nan=False) + "\n" for line in lines))


def atomic_write_text(path: Path, text: str) -> None:
    """Replace `path` with `text` so that a crash leaves the old file or the new one, whole
    (temporary file, fsync, rename, fsync of the folder)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        fsync_folder(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def fsync_folder(folder: Path) -> None:
    """Make a rename inside `folder` survive a power loss, not only a killed process."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def encode(value: Any) -> Any:
    """A mechanism's answer as JSON that `decode` turns back into an equal value."""
    if isinstance(value, np.ndarray):
        return {"ndarray": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"cannot journal a release answer of type {type(value).__name__}")


def decode(value: Any) -> Any:
    if isinstance(value, dict):
        return np.asarray(value["ndarray"], dtype=value["dtype"])
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value
