"""Run a recipe end to end: load, plan, resume or start, synthesise, write the outputs.

Outputs in `output.dir`: `synthetic.<format>`, `privacy.json` (the ledger, every figure
recomputed from its events), `metrics.jsonl` (per-iteration diagnostics), `usage.json`
(generator and embedder calls, tokens, failures, cost), `config.json` (the resolved config),
`run.log`, and `checkpoints/`.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
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
from dpsynth.methods.registry import build_recipe
from dpsynth.plan import RunPlan, make_plan
from dpsynth.privacy.ledger import Charge, PrivacyLedger
from dpsynth.privacy.noise import NoiseSource

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunOutputs:
    synthetic: Path
    privacy: Path
    metrics: Path
    result: SyntheticSet
    ledger: PrivacyLedger


def run(config: RunConfig, *, embedder: Embedder | None = None,
        generator: Generator | None = None, run_plan: RunPlan | None = None) -> RunOutputs:
    """Synthesise per `config`, resuming from the output folder's latest checkpoint."""
    run_plan = run_plan or make_plan(config)
    recipe = build_recipe(config.recipe, config.budget.split)
    out = config.output.dir
    store = CheckpointStore(out / "checkpoints")
    journal = out / "checkpoints" / "charges.jsonl"
    latest = store.latest()
    if latest is None:
        ledger = PrivacyLedger(run_plan.epsilon, run_plan.delta)
        noise = NoiseSource(config.seed)
        seed = config.seed if config.seed is not None else secrets.randbits(63)
        resumed = None
        journal.unlink(missing_ok=True)
    else:
        step, envelope = latest
        ledger = PrivacyLedger.from_dict(envelope["ledger"])
        if (ledger.epsilon, ledger.delta) != (run_plan.epsilon, run_plan.delta):
            raise InputError(f"{out}: its checkpoints were made with budget ε={ledger.epsilon:g}, "
                             f"δ={ledger.delta:.3g}; use a new output folder for a new budget")
        noise = NoiseSource.from_state_dict(envelope["noise"])
        seed, resumed = int(envelope["public_seed"]), (step, envelope["recipe"])
        _charge_lost_releases(ledger, journal, noise.seeded)
        log.info("resuming from checkpoint %d (ε spent so far %.4g)", step, ledger.spent())
    _write_journal(journal, ledger.charges)
    ledger.on_charge = lambda charge: _append_journal(journal, charge)

    metrics_path = out / "metrics.jsonl"

    def report(row: dict[str, Any]) -> None:
        log.info("progress: %s", json.dumps(row))
        with metrics_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")

    out.mkdir(parents=True, exist_ok=True)
    backends = config.backends
    embedder = embedder or build_embedder(backends.embedder, base_dir=config.base_dir)
    generator = CountingGenerator(
        generator or build_generator(_seeded(backends.generator, config.seed),
                                     base_dir=config.base_dir))
    if latest is not None and "generator" in latest[1] and hasattr(generator, "load_state_dict"):
        generator.load_state_dict(latest[1]["generator"])
    ctx = RunContext(private=run_plan.data.dataset, ledger=ledger, noise=noise,
                     embedder=embedder, generator=generator, checkpoints=store, seed=seed,
                     report=report, resumed=resumed,
                     allow_remote_embedding=backends.embedder.allow_remote_on_private)
    result = recipe.run(ctx)
    usage = {"generator": generator.usage(), "embedder": embedder.usage(),
             "remote_embedding_of_private_text": bool(
                 embedder.is_remote and backends.embedder.allow_remote_on_private)}
    (out / "usage.json").write_text(json.dumps(usage, indent=2), encoding="utf-8")

    frame = pd.DataFrame({"text": result.texts}
                         | ({"label": result.labels} if result.labels is not None else {}))
    synthetic = write_table(frame, out / f"synthetic.{config.output.format}",
                            config.output.format)
    privacy = out / "privacy.json"
    privacy.write_text(json.dumps(_privacy_report(ledger), indent=2), encoding="utf-8")
    (out / "config.json").write_text(config.model_dump_json(indent=2), encoding="utf-8")
    log.info("done: %d synthetic records, ε spent %.4g of %g", len(result.texts),
             ledger.spent(), ledger.epsilon)
    return RunOutputs(synthetic, privacy, metrics_path, result, ledger)


def _seeded(cfg: GeneratorConfig, seed: int | None) -> GeneratorConfig:
    """A seeded run seeds its generator too (unless the config sets one): same seed, same
    local backends, same output."""
    return cfg if cfg.seed is not None or seed is None else cfg.model_copy(update={"seed": seed})


def _charge_lost_releases(ledger: PrivacyLedger, journal: Path, seeded: bool) -> None:
    """Releases made after the checkpoint, before a crash, may have left the process.

    A seeded run replays them with the same noise, so they are the same releases and cost
    nothing more. An unseeded run draws fresh noise, so the lost ones stay on the ledger.
    """
    if not journal.exists():
        return
    recorded = [Charge.from_json(json.loads(line))
                for line in journal.read_text(encoding="utf-8").splitlines() if line.strip()]
    lost = recorded[len(ledger.charges):]
    if lost and not seeded:
        log.warning("%d release(s) made after the last checkpoint stay charged", len(lost))
        for charge in lost:
            ledger.charge(f"{charge.stage} (before resume)", charge.event,
                          mechanism=charge.mechanism, sensitivity=charge.sensitivity,
                          noise_scale=charge.noise_scale)


def _write_journal(journal: Path, charges: list[Charge]) -> None:
    journal.parent.mkdir(parents=True, exist_ok=True)
    journal.write_text("".join(json.dumps(c.to_json()) + "\n" for c in charges),
                       encoding="utf-8")


def _append_journal(journal: Path, charge: Charge) -> None:
    with journal.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(charge.to_json()) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def _privacy_report(ledger: PrivacyLedger) -> dict[str, Any]:
    """The ledger, with its total recomputed from the recorded events."""
    recomputed = PrivacyLedger.from_dict(ledger.to_dict())
    return {**ledger.to_dict(), "recomputed_epsilon": recomputed.spent()}
