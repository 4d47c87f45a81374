"""Resume: a run starts from what its output folder's journal and checkpoints hold.

The journal (`checkpoints/releases.jsonl`, `privacy.journal`) records every release ever made
for the folder, before its noise is drawn; a checkpoint (`checkpoint.CheckpointStore`) holds
the recipe's public state, the ledger and the noise stream after a step. Here the run builds
the ledger from the journal, restores the noise source, the recipe's state and the
generator's cache numbering from the latest checkpoint, and has the ledger replay the
releases made after it (`PrivacyLedger.replay`): nothing is released twice (docs/privacy.md,
"Crashes and resume").
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from dpsynth.backends import Generator
from dpsynth.config import RunConfig
from dpsynth.data.load import resolve_path
from dpsynth.errors import InputError
from dpsynth.privacy.journal import Journal, JournalHeader
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.privacy.noise import NoiseSource

log = logging.getLogger(__name__)

Resumed = tuple[int, dict[str, Any], dict[str, Any]]
"""(step, recipe state, checkpoint envelope) of the checkpoint a run resumes from."""

JOURNAL_DATA = {"path", "format", "text_column", "label_column", "labels", "user_column",
                "max_chars", "over_length", "duplicates"}
"""The `data:` settings that decide which records a folder's releases are computed from; its
journal records them and a resumed run must ask for the same (`k` is in the journal's unit;
`label_names` only words prompts)."""


def journal_data(config: RunConfig) -> dict[str, Any]:
    """The `JOURNAL_DATA` settings of `config`, its data file resolved."""
    return config.data.model_dump(mode="json", include=JOURNAL_DATA) | {
        "path": str(resolve_path(config.data, config.base_dir).resolve())}


def open_journal(config: RunConfig, delta: float, data: dict[str, Any]) -> Journal:
    """The folder's journal, created with this run's header if it has none. The public seed
    is the config's, or one drawn now and kept by the journal for every restart."""
    unit = (f"user:{config.data.user_column}:{config.data.records_per_unit}"
            if config.data.user_column else "record")
    return Journal.open(config.output.dir / "checkpoints" / "releases.jsonl", JournalHeader(
        config.budget.epsilon, delta,
        config.seed if config.seed is not None else secrets.randbits(31),
        config.budget.noise, unit, data))


def journal_ledger(journal: Journal) -> PrivacyLedger:
    """A ledger of every charge the journal recorded."""
    h = journal.header
    return PrivacyLedger(h.epsilon, h.delta, charges=[r.charge for r in journal.releases])


def restore(journal: Journal, latest: tuple[int, dict[str, Any]] | None, config: RunConfig,
            state_version: int) -> tuple[PrivacyLedger, NoiseSource, Resumed | None]:
    """The ledger holds every release the folder's journal recorded, whether or not a
    checkpoint followed it; those made after the latest checkpoint are replayed, and every
    new one is journaled. A checkpoint of another state layout (`Recipe.state_version`; none
    written means 1) is refused.

    Returns the ledger, the noise source and, when resuming, (step, recipe state, envelope).
    """
    h = journal.header
    ledger = journal_ledger(journal)
    noise = NoiseSource(h.public_seed if h.noise == "seeded_not_private" else None)
    position, resumed = 0, None
    if latest is not None:
        step, envelope = latest
        if envelope.get("state_version", 1) != state_version:
            raise InputError(f"{config.output.dir}: its checkpoints hold {config.recipe.name} "
                             "state in another layout (written by another dpsynth version); "
                             "the outputs of a finished run there stand as they are, an "
                             "unfinished one cannot resume: use a new output folder")
        position = len(envelope["ledger"]["charges"])
        recorded = [r.charge.to_json() for r in journal.releases[:position]]
        if recorded != envelope["ledger"]["charges"]:
            raise InputError(f"{config.output.dir}: its checkpoints and release journal "
                             "disagree; the spend cannot be trusted, use a new output folder")
        noise = _noise_at(noise, envelope["noise"], config)
        resumed = (step, envelope["recipe"], envelope)
    later = journal.releases[position:]
    if later:
        log.info("%d release(s) recorded after the last checkpoint will be replayed",
                 len(later))
    ledger.replay(later)
    if journal.releases:
        log.info("resuming: ε spent so far %.4g", ledger.spent())
    ledger.on_charge = journal.append_charge
    ledger.on_answer = journal.append_output
    ledger.on_part = journal.append_part
    return ledger, noise, resumed


def _noise_at(noise: NoiseSource, saved: dict[str, Any], config: RunConfig) -> NoiseSource:
    """The journal's noise mode decides; a checkpoint only says how far a seeded stream got.
    A seeded state under a cryptographic journal (a journal deleted by hand) is refused."""
    if saved.get("seed") != noise.seed:
        raise InputError(f"{config.output.dir}: its checkpoints were made with another noise "
                         "source than its release journal records; use a new output folder")
    if noise.seeded:
        noise.draws = int(saved["draws"])
    return noise


def restore_generator(generator: Generator, resumed: Resumed | None) -> None:
    """The generator's cache numbering as the checkpoint left it, so a restart asks for
    what its replayed releases were computed on."""
    if resumed is not None and "generator" in resumed[2]:
        generator.load_state_dict(resumed[2]["generator"])
