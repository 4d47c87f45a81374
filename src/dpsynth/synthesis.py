"""Run a recipe end to end: load, plan, resume or start, synthesise, write the outputs.

Outputs in `output.dir`: `synthetic.<format>`, `privacy.json` (the ledger, every figure
recomputed from its events), `metrics.jsonl` (per-iteration diagnostics), `usage.json`
(generator and embedder calls, tokens, failures, cost), `config.json` (the resolved config),
`run.log`, and `checkpoints/`: the recipe's checkpoints and `releases.jsonl`, the write-ahead
journal of every release ever made for the folder (docs/privacy.md, "Crashes and resume").
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from dpsynth.backends import Embedder, Generator, build_embedder, build_generator
from dpsynth.backends.config import GeneratorConfig
from dpsynth.backends.counting import CountingGenerator
from dpsynth.checkpoint import CheckpointStore
from dpsynth.config import RunConfig
from dpsynth.data import write_table
from dpsynth.errors import InputError
from dpsynth.methods.base import RunContext, SyntheticSet
from dpsynth.preflight import RunPlan, make_plan
from dpsynth.privacy.journal import Journal, JournalHeader
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.privacy.noise import NoiseSource

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunOutputs:
    synthetic: Path
    privacy: Path
    metrics: Path
    result: SyntheticSet
    ledger: PrivacyLedger


NOT_PRIVATE = ("NOT PRIVATE: budget.noise is seeded_not_private, so the DP noise follows "
               "from the seed and can be subtracted; this run is a reproduction, not a release")


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


def run(config: RunConfig, *, embedder: Embedder | None = None,
        generator: Generator | None = None, run_plan: RunPlan | None = None) -> RunOutputs:
    """Synthesise per `config`, resuming from the output folder's journal and checkpoints."""
    prepare_output_dir(config.output.dir)
    run_plan = run_plan or make_plan(config)
    if not config.budget.private:
        log.warning(NOT_PRIVATE)
    unit = (f"user:{config.data.records_per_unit}" if config.data.user_column else "record")
    journal = Journal.open(config.output.dir / "checkpoints" / "releases.jsonl", JournalHeader(
        config.budget.epsilon, run_plan.delta,
        config.seed if config.seed is not None else secrets.randbits(31),
        config.budget.noise, unit))
    try:
        return _run(config, run_plan, journal, embedder, generator)
    finally:
        journal.close()


def _run(config: RunConfig, run_plan: RunPlan, journal: Journal, embedder: Embedder | None,
         generator: Generator | None) -> RunOutputs:
    out = config.output.dir
    store = CheckpointStore(out / "checkpoints")
    ledger, noise, resumed = _restore(journal, store.latest(), config)
    ledger.on_charge = journal.append_charge
    ledger.on_answer = journal.append_output
    seed = journal.header.public_seed

    metrics_path = out / "metrics.jsonl"

    def report(row: dict[str, Any]) -> None:
        log.info("progress: %s", json.dumps(row))
        with metrics_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")

    out.mkdir(parents=True, exist_ok=True)
    backends = config.backends
    embedder = embedder or build_embedder(backends.embedder, base_dir=config.base_dir)
    generator = CountingGenerator(
        generator or build_generator(_seeded(backends.generator, seed),
                                     base_dir=config.base_dir))
    if resumed is not None and "generator" in resumed[2] and hasattr(generator,
                                                                     "load_state_dict"):
        generator.load_state_dict(resumed[2]["generator"])
    ctx = RunContext(private=run_plan.data, ledger=ledger, noise=noise,
                     embedder=embedder, generator=generator, checkpoints=store, seed=seed,
                     plan=run_plan.budget,
                     report=report, resumed=resumed[:2] if resumed else None,
                     allow_remote_embedding=backends.embedder.allow_remote_on_private)
    result = run_plan.recipe.run(ctx)
    usage = {"generator": generator.usage(), "embedder": embedder.usage(),
             "remote_embedding_of_private_text": bool(
                 embedder.is_remote and backends.embedder.allow_remote_on_private)}
    (out / "usage.json").write_text(json.dumps(usage, indent=2), encoding="utf-8")

    frame = pd.DataFrame({"text": result.texts}
                         | ({"label": result.labels} if result.labels is not None else {}))
    synthetic = write_table(frame, out / f"synthetic.{config.output.format}",
                            config.output.format)
    privacy = out / "privacy.json"
    privacy.write_text(json.dumps(_privacy_report(ledger, config), indent=2), encoding="utf-8")
    (out / "config.json").write_text(config.model_dump_json(indent=2), encoding="utf-8")
    log.info("done: %d synthetic records, ε spent %.4g of %g", len(result.texts),
             ledger.spent(), ledger.epsilon)
    return RunOutputs(synthetic, privacy, metrics_path, result, ledger)


def _seeded(cfg: GeneratorConfig, seed: int) -> GeneratorConfig:
    """The public seed (the config's, or one drawn once per output folder and journaled)
    seeds the generator unless the config sets its own: same seed, same local backends, same
    output, and a restart regenerates what its replayed releases were computed on."""
    return cfg if cfg.seed is not None else cfg.model_copy(update={"seed": seed})


def _restore(journal: Journal, latest: tuple[int, dict[str, Any]] | None, config: RunConfig
             ) -> tuple[PrivacyLedger, NoiseSource, tuple[int, dict, dict] | None]:
    """The ledger holds every release the folder's journal recorded, whether or not a
    checkpoint followed it; those made after the latest checkpoint are replayed.

    Returns the ledger, the noise source and, when resuming, (step, recipe state, envelope).
    """
    h = journal.header
    ledger = PrivacyLedger(h.epsilon, h.delta, charges=[r.charge for r in journal.releases])
    noise = NoiseSource(h.public_seed if h.noise == "seeded_not_private" else None)
    position, resumed = 0, None
    if latest is not None:
        step, envelope = latest
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


def _privacy_report(ledger: PrivacyLedger, config: RunConfig) -> dict[str, Any]:
    """The ledger, with its total recomputed from the recorded events, and what it treats as
    public."""
    recomputed = PrivacyLedger.from_dict(ledger.to_dict())
    report = {**ledger.to_dict(), "recomputed_epsilon": recomputed.spent(),
              "private": config.budget.private,
              "public_facts": {
                  "units": "N, the number of privacy units (δ is derived from it)",
                  "unit": "user" if config.data.user_column else "record",
                  "records_per_unit": config.data.records_per_unit,
                  "label_set": config.data.labels or "read from the data (see run.log)"}}
    if not config.budget.private:
        report = {"NOT_PRIVATE": NOT_PRIVATE, **report}
    return report
