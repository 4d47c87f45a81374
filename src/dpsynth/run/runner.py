"""`Run`: one run of a config, from its plan to its outputs. `dpsynth run` and
`dpsynth.synthesize` both execute one, so the command line and the API run the same way and
differ only in how they take arguments and show results."""

from __future__ import annotations

import logging

import pandas as pd

from dpsynth.backends import Embedder, Generator
from dpsynth.backends.ray_cluster import ray_session
from dpsynth.checkpoint import CheckpointStore
from dpsynth.config import RunConfig
from dpsynth.methods.base import RunContext
from dpsynth.preflight import RunPlan, make_plan
from dpsynth.privacy.journal import Journal
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.privacy.noise import NoiseSource
from dpsynth.private import Private
from dpsynth.private.engine import build_engine
from dpsynth.run.folder import finished, mark_complete, prepare_output_dir
from dpsynth.run.models import build_models
from dpsynth.run.outputs import (
    NOT_PRIVATE,
    RunOutputs,
    metrics_writer,
    write_incomplete,
    write_outputs,
)
from dpsynth.run.resume import (
    Resumed,
    journal_data,
    journal_ledger,
    open_journal,
    restore,
    restore_generator,
)
from dpsynth.sizing import record as record_fit
from dpsynth.stops import signals_stop_the_run

log = logging.getLogger(__name__)


class Run:
    """A run of `config` on its private set (`data.path`, or the in-memory `frame` it
    describes), with the caller's `embedder` and `generator` or those `backends:` names."""

    def __init__(self, config: RunConfig, frame: pd.DataFrame | None = None, *,
                 embedder: Embedder | None = None, generator: Generator | None = None,
                 plan: RunPlan | None = None) -> None:
        self.config = config
        self._frame, self._embedder, self._generator = frame, embedder, generator
        self._plan = plan

    def plan(self) -> RunPlan:
        """The plan, made once: the private set read and validated, the sizes fixed and every
        release's noise planned. Nothing is released."""
        if self._plan is None:
            self._plan = make_plan(self.config, self._frame)
        return self._plan

    def execute(self) -> RunOutputs:
        """Synthesise, resuming from the output folder's journal and checkpoints; SIGINT and
        SIGTERM stop the run.

        A folder whose run finished is not run again: its outputs are returned as they are
        (`RunOutputs.already_complete`). A run that stops early, on an error or a signal,
        still writes privacy.json, marked incomplete, with every release its journal
        recorded."""
        prepare_output_dir(self.config.output.dir)
        run_plan = self.plan()
        # the sizes `recipe.time` chose, if it is set
        config = self.config.model_copy(update={"recipe": run_plan.config.recipe})
        if not config.budget.private:
            log.warning(NOT_PRIVATE)
        data = journal_data(config)
        with signals_stop_the_run():
            journal = open_journal(config, run_plan.delta, data)
            try:
                done = finished(config, journal)
                if done is not None:
                    return done
                journal.refuse_other_data(data)
                if run_plan.fit is not None:  # before any release: a restart keeps these sizes
                    record_fit(config, run_plan.fit)
                return self._resume_or_start(config, run_plan, journal)
            finally:
                journal.close()

    def _resume_or_start(self, config: RunConfig, run_plan: RunPlan,
                         journal: Journal) -> RunOutputs:
        store = CheckpointStore(config.output.dir / "checkpoints")
        ledger = journal_ledger(journal)
        try:
            ledger, noise, resumed = restore(journal, store.latest(), config,
                                             run_plan.recipe.state_version)
            outputs = self._synthesise(config, run_plan, ledger, noise, resumed, store,
                                       journal.header.public_seed)
        except BaseException as exc:
            write_incomplete(ledger, config, exc)
            raise
        mark_complete(config, outputs, len(ledger.charges))
        return outputs

    def _synthesise(self, config: RunConfig, run_plan: RunPlan, ledger: PrivacyLedger,
                    noise: NoiseSource, resumed: Resumed | None, store: CheckpointStore,
                    seed: int) -> RunOutputs:
        """The recipe's run, its private side handed the ledger and the noise source."""
        ledger.hold_to({s.spec.name: s.epsilon_alone for s in run_plan.budget.stages})
        for note in run_plan.recipe.plan_notes(run_plan.data, run_plan.budget):
            log.warning("%s", note)
        report = metrics_writer(config)
        (config.output.dir / "config.json").write_text(config.model_dump_json(indent=2),
                                                       encoding="utf-8")
        generator, embedder = build_models(config, run_plan.recipe, seed, self._embedder,
                                           self._generator)
        restore_generator(generator, resumed)
        backends = config.backends
        private = Private(run_plan.data, ledger, noise,
                          build_engine(embedder, backends, config.base_dir))
        ctx = RunContext(private=private, embedder=embedder, generator=generator,
                         checkpoints=store, seed=seed, plan=run_plan.budget,
                         label_names=config.data.label_names or {},
                         document=config.data.document, report=report,
                         resumed=resumed[:2] if resumed else None,
                         state_version=run_plan.recipe.state_version)
        with ray_session(backends.executor):
            try:
                if run_plan.recipe.embeds_private:
                    private.embed_records()
                result = run_plan.recipe.run(ctx)
            finally:
                private.close()
        return write_outputs(config, result, ledger, generator, embedder)


def run(config: RunConfig, *, embedder: Embedder | None = None,
        generator: Generator | None = None, run_plan: RunPlan | None = None) -> RunOutputs:
    """`Run(config, ...).execute()`, for a script that holds a config."""
    return Run(config, embedder=embedder, generator=generator, plan=run_plan).execute()
