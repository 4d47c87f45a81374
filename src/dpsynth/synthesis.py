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
from dpsynth.backends.base import UnusedGenerator
from dpsynth.backends.config import REMOTE_EMBEDDING_ASSUMPTION, GeneratorConfig, SmolLMConfig
from dpsynth.backends.generators.counting import CountingGenerator
from dpsynth.backends.generators.label_names import with_label_names
from dpsynth.backends.health import check_backends
from dpsynth.backends.ray_cluster import ray_session
from dpsynth.checkpoint import CheckpointStore
from dpsynth.config import RunConfig
from dpsynth.data import DataConfig, read_table, write_table
from dpsynth.data.load import resolve_path
from dpsynth.errors import InputError
from dpsynth.logs import where_raised
from dpsynth.methods.base import RunContext, SyntheticSet
from dpsynth.preflight import RunPlan, make_plan
from dpsynth.privacy.journal import Journal, JournalHeader, atomic_write_text
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.privacy.noise import NoiseSource
from dpsynth.private import Private
from dpsynth.private.engine import build_engine
from dpsynth.sizing import record as record_fit
from dpsynth.stops import shielded

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunOutputs:
    synthetic: Path
    privacy: Path
    metrics: Path
    result: SyntheticSet
    ledger: PrivacyLedger
    already_complete: bool = False
    """The folder held a finished run: these are its outputs, and nothing was run again."""


NOT_PRIVATE = ("NOT PRIVATE: budget.noise is seeded_not_private, so the DP noise follows "
               "from the seed and can be subtracted; this run is a reproduction, not a release")

NOT_PRIVATE_COLUMN = "not_private"
"""A seeded run's synthetic set and metrics.jsonl rows carry this column, true in every row:
the mark travels with a row or a file copied on its own, in every format, while a private
run's file keeps its name and its `text` and `label` columns, and readers pick those."""

JOURNAL_DATA = {"path", "format", "text_column", "label_column", "labels", "user_column",
                "max_chars", "over_length", "duplicates"}
"""The `data:` settings that decide which records a folder's releases are computed from; its
journal records them and a resumed run must ask for the same (`k` is in the journal's unit;
`label_names` only words prompts)."""


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
    """Synthesise per `config`, resuming from the output folder's journal and checkpoints.

    A folder whose run finished is not run again: its outputs are returned as they are
    (`RunOutputs.already_complete`). A run that stops early, on an error or Ctrl-C, still
    writes privacy.json, marked incomplete, with every release its journal recorded."""
    prepare_output_dir(config.output.dir)
    run_plan = run_plan or make_plan(config)
    # the sizes `recipe.time` chose, if it is set
    config = config.model_copy(update={"recipe": run_plan.config.recipe})
    if not config.budget.private:
        log.warning(NOT_PRIVATE)
    unit = (f"user:{config.data.user_column}:{config.data.records_per_unit}"
            if config.data.user_column else "record")
    data = config.data.model_dump(mode="json", include=JOURNAL_DATA) | {
        "path": str(resolve_path(config.data, config.base_dir).resolve())}
    journal = Journal.open(config.output.dir / "checkpoints" / "releases.jsonl", JournalHeader(
        config.budget.epsilon, run_plan.delta,
        config.seed if config.seed is not None else secrets.randbits(31),
        config.budget.noise, unit, data))
    try:
        finished = _finished(config, journal)
        if finished is not None:
            return finished
        journal.refuse_other_data(data)
        if run_plan.fit is not None:  # before any release: a restart keeps these sizes
            record_fit(config, run_plan.fit)
        store = CheckpointStore(config.output.dir / "checkpoints")
        ledger = _journal_ledger(journal)
        try:
            ledger, noise, resumed = _restore(journal, store.latest(), config,
                                              run_plan.recipe.state_version)
            outputs = _run(config, run_plan, journal, ledger, noise, resumed, store,
                           embedder, generator)
        except BaseException as exc:
            _write_incomplete(ledger, config, exc)
            raise
        _mark_complete(config, outputs, len(ledger.charges))
        return outputs
    finally:
        journal.close()


def _run(config: RunConfig, run_plan: RunPlan, journal: Journal, ledger: PrivacyLedger,
         noise: NoiseSource, resumed: tuple[int, dict, dict] | None, store: CheckpointStore,
         embedder: Embedder | None, generator: Generator | None) -> RunOutputs:
    out = config.output.dir
    ledger.on_charge = journal.append_charge
    ledger.on_answer = journal.append_output
    ledger.hold_to({s.spec.name: s.epsilon_alone for s in run_plan.budget.stages})
    for note in run_plan.recipe.plan_notes(run_plan.data, run_plan.budget):
        log.warning("%s", note)
    seed = journal.header.public_seed

    metrics_path = out / "metrics.jsonl"
    mark = {} if config.budget.private else {NOT_PRIVATE_COLUMN: True}

    def report(row: dict[str, Any]) -> None:
        row = {**mark, **row}
        log.info("progress: %s", json.dumps(row))
        with metrics_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")

    (out / "config.json").write_text(config.model_dump_json(indent=2), encoding="utf-8")
    backends = config.backends
    if generator is None:
        generator = (build_generator(_seeded(backends.generator, seed), base_dir=config.base_dir)
                     if run_plan.recipe.uses_backend_generator else UnusedGenerator())
    generator = CountingGenerator(with_label_names(generator, config.data.label_names))
    if run_plan.recipe.uses_backend_generator:
        check_backends(generator=generator)  # before loading the embedder: fail fast
    elif backends.generator != SmolLMConfig():
        log.warning("%s samples the LM it fine-tunes with DP: backends.generator is not used",
                    config.recipe.name)
    embedder = embedder or build_embedder(backends.embedder, base_dir=config.base_dir)
    check_backends(embedder=embedder)
    if resumed is not None and "generator" in resumed[2] and hasattr(generator,
                                                                     "load_state_dict"):
        generator.load_state_dict(resumed[2]["generator"])
    private = Private(run_plan.data, ledger, noise,
                      build_engine(embedder, backends, config.base_dir))
    ctx = RunContext(private=private, embedder=embedder, generator=generator,
                     checkpoints=store, seed=seed, plan=run_plan.budget,
                     label_names=config.data.label_names or {}, report=report,
                     resumed=resumed[:2] if resumed else None,
                     state_version=run_plan.recipe.state_version)
    with ray_session(backends.executor):
        try:
            result = run_plan.recipe.run(ctx)
        finally:
            private.close()
    usage = {"generator": generator.usage(), "embedder": embedder.usage(),
             "remote_embedding_of_private_text": bool(
                 embedder.is_remote and backends.embedder.allow_remote_on_private)}
    (out / "usage.json").write_text(json.dumps(usage, indent=2), encoding="utf-8")

    frame = pd.DataFrame({"text": result.texts}
                         | ({"label": result.labels} if result.labels is not None else {})
                         | mark)
    synthetic = write_table(frame, out / f"synthetic.{config.output.format}",
                            config.output.format)
    privacy = _write_privacy(ledger, config, {"complete": True})
    log.info("done: %d synthetic records, ε spent %.4g of %g", len(result.texts),
             ledger.spent(), ledger.epsilon)
    return RunOutputs(synthetic, privacy, metrics_path, result, ledger)


def _seeded(cfg: GeneratorConfig, seed: int) -> GeneratorConfig:
    """The public seed (the config's, or one drawn once per output folder and journaled)
    seeds the generator unless the config sets its own: same seed, same local backends, same
    output, and a restart regenerates what its replayed releases were computed on."""
    return cfg if cfg.seed is not None else cfg.model_copy(update={"seed": seed})


def _restore(journal: Journal, latest: tuple[int, dict[str, Any]] | None, config: RunConfig,
             state_version: int
             ) -> tuple[PrivacyLedger, NoiseSource, tuple[int, dict, dict] | None]:
    """The ledger holds every release the folder's journal recorded, whether or not a
    checkpoint followed it; those made after the latest checkpoint are replayed. A checkpoint
    of another state layout (`Recipe.state_version`; none written means 1) is refused.

    Returns the ledger, the noise source and, when resuming, (step, recipe state, envelope).
    """
    h = journal.header
    ledger = PrivacyLedger(h.epsilon, h.delta, charges=[r.charge for r in journal.releases])
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


def _journal_ledger(journal: Journal) -> PrivacyLedger:
    h = journal.header
    return PrivacyLedger(h.epsilon, h.delta, charges=[r.charge for r in journal.releases])


def _write_privacy(ledger: PrivacyLedger, config: RunConfig, status: dict[str, Any]) -> Path:
    path = config.output.dir / "privacy.json"
    atomic_write_text(path, json.dumps({**status, **_privacy_report(ledger, config)},
                                       indent=2, allow_nan=False))
    return path


def _write_incomplete(ledger: PrivacyLedger, config: RunConfig, exc: BaseException) -> None:
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


COMPLETE_FILE = "complete.json"


def _mark_complete(config: RunConfig, outputs: RunOutputs, releases: int) -> None:
    """Record that the folder's run finished: a rerun returns its outputs, releasing nothing."""
    atomic_write_text(config.output.dir / "checkpoints" / COMPLETE_FILE, json.dumps({
        "releases": releases, "synthetic": outputs.synthetic.name,
        "config": _comparable(config)}, indent=2))


RESCORING_SECTIONS = ("held_out",)
"""Config sections that only score a finished run's output, on real records kept out of
`data.path`: they release nothing and read no private record, so adding or changing one on a
finished folder is not "another config". The rerun scores the output it has."""


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


def _finished(config: RunConfig, journal: Journal) -> RunOutputs | None:
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
                      _journal_ledger(journal), already_complete=True)


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
