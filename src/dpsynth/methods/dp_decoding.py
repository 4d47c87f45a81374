"""DP decoding, or private prediction (Amin et al. 2024, "Private prediction for large-scale
synthetic text generation"; InvisibleInk, Vinod et al., NeurIPS 2025): no training and no
selection; each synthetic text is sampled token by token from the local LM with a batch of
private records in its context.

    labels      a Laplace label histogram (one DP record count without labels)
                → texts per label and buckets per label             (label_fraction of ε)
    batches     the records of each label split by a digest of their own text into
                max(texts, noisy count / B) disjoint buckets of about B; one per text
    for each text, for t = 1 .. max_tokens (until the end of turn):
        p       log-probabilities of the next token, public prompt only
        V       top-k+ of p (public)
        u       p + Σ_{records i in the batch} clip(q_i − p, −C, C) / B  on V,
                q_i with record i in the prompt
        token   drawn from softmax(u / T): the exponential mechanism,
                (2C / (B·T))-bounded-range per token
    finish      a text cut at max_tokens is continued by the public prompt alone to the end
                of its sentence (at most finish_tokens; post-processing, no charge)
    output      the texts, each with its label

The decoding stage's ε fixes 2C/(B·T) by PLD/RDP composition of `max_tokens` bounded-range
draws (the batches are disjoint: a record moves one text); B and T are configured, so the plan
derives the clip C. Privacy analysis: docs/recipes/dp_decoding.md.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import unicodedata
from typing import ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from dpsynth.backends.generators.context_lm import SENTENCE_END, SLOT
from dpsynth.backends.generators.prompt_sets import UNDESCRIBED
from dpsynth.data.facts import DataFacts
from dpsynth.errors import ConfigError
from dpsynth.methods.base import Recipe, RunContext, SyntheticSet, label_groups
from dpsynth.methods.parts.distinct import distinct
from dpsynth.methods.parts.toolbox import allocate
from dpsynth.privacy.planning import BudgetPlan, StageSpec
from dpsynth.privacy.stages import DECODING, LABEL_HISTOGRAM
from dpsynth.private import DecodingSetup, TextRequest

log = logging.getLogger(__name__)

EXAMPLE = "{example}"
SYSTEM = "You write short, realistic texts. You reply with the text only."
PROMPT = ("Here is a short {document} about {label}:\n\n{example}\n\nWrite a new short "
          "{document} about {label}.")
PUBLIC_PROMPT = "Write a new short {document} about {label}."
UNLABELLED = "any topic"
"""What `{label}` reads in the prompts of unlabelled data."""
WEAK_CLIP = 0.5
"""Below this clip C, a batch moves a token's log-probability by at most ±0.5 in total: the
texts say little more than the public prompt does."""


class DpDecodingParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    n_output: int = Field(100, ge=1, description="synthetic texts, one per disjoint batch of "
                          "private records; a fixed number, not N: a count that moved with one "
                          "unit would reshuffle every record's batch")
    batch_size: int = Field(16, ge=1, description="B: private records in each text's batch "
                            "(expected), and the public divisor of their summed shifts; a "
                            "larger B allows a larger clip C at the same ε, and costs B "
                            "forward passes per token")
    temperature: float = Field(1.0, gt=0, description="T: sampling temperature of the "
                               "aggregate; the plan derives the clip C = ε_token·B·T/2")
    max_tokens: int = Field(64, ge=1, description="tokens per text at most; the plan charges "
                            "this many draws per text (a text that ends earlier spends the "
                            "same)")
    finish_tokens: int = Field(32, ge=0, description="a text still going after max_tokens "
                               "draws is continued by the public prompt alone (no record in "
                               "context: post-processing, no charge) for at most this many "
                               "tokens, to the end of its sentence; 0: it stops mid-sentence")
    top_k: int = Field(50, ge=1, description="k of the public top-k+ candidate set: the k most "
                       "likely tokens without a record, and those within 2C of the k-th")
    max_example_tokens: int = Field(64, ge=1, description="tokens of each private record put in "
                                    "the context; longer records are cut")
    precision: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="the LM's weights and passes while it decodes: bfloat16 takes "
        "about a third of float32's time on a CPU that multiplies bfloat16 natively (AMX or "
        "AVX512-BF16) and moves each token's law by a total variation of about 0.01; auto: "
        "bfloat16 on such a CPU, float32 elsewhere (emulated bfloat16 is slower)")
    texts_together: int = Field(8, ge=1, description="texts decoded in lockstep, one token "
                                "each per round, their rows sharing forward passes: larger "
                                "passes, faster per text; KV caches for all their batches at "
                                "once (about 8 MB a record on SmolLM2)")
    forward_batch: int = Field(64, ge=1, description="rows per forward pass, which may mix the "
                               "batches of texts decoded together (fixed shape: a record's "
                               "distribution must not depend on its companions)")
    cached_rows: int = Field(256, ge=1, description="rows of the texts decoded together "
                             "whose KV caches are held between tokens; batches past them (a "
                             "label's noisy count fell far under the true one) replay their "
                             "other rows at each token: the same scores, slower, within "
                             "bounded memory")
    label_fraction: float = Field(0.05, gt=0, lt=1, description="budget share of a DP label "
                                  "histogram (one DP record count without labels) allocating "
                                  "texts to labels and sizing each label's batches to about B "
                                  "records; must be > 0")
    system: str = Field(SYSTEM, description="system message of both prompts (none when empty)")
    prompt: str = Field(PROMPT, description="instruction with a private record in context: "
                        "{example} is replaced by the record (exactly once), {label} by the "
                        "label's name, {document} by data.document ('text' when unset)")
    public_prompt: str = Field(PUBLIC_PROMPT, description="the same instruction without a "
                               "record: the public distribution each record's shift is "
                               "clipped around; {label} and {document} as in prompt")

    @field_validator("prompt")
    @classmethod
    def _one_example(cls, value: str) -> str:
        if value.count(EXAMPLE) != 1:
            raise ValueError("must hold {example} exactly once")
        return value

    @field_validator("label_fraction", mode="before")
    @classmethod
    def _some_counts(cls, value: object) -> object:
        if isinstance(value, (int, float)) and value <= 0:
            raise ValueError("must be > 0: the DP label counts (one DP record count without "
                             "labels) size the batches to about batch_size records; without "
                             "them a batch's size would follow the private counts")
        return value

    @field_validator("public_prompt")
    @classmethod
    def _no_example(cls, value: str) -> str:
        if EXAMPLE in value:
            raise ValueError("must not hold {example}: it is the prompt without a record")
        return value


class DpDecoding(Recipe):
    name: ClassVar[str] = "dp_decoding"
    one_record_per_unit: ClassVar[bool] = True
    needs_local_lm: ClassVar[bool] = True
    Params: ClassVar[type[BaseModel]] = DpDecodingParams
    params: DpDecodingParams

    def stages(self, private: DataFacts, delta: float) -> list[StageSpec]:
        p = self.params
        # the DP counts size the buckets (without labels: one cell, the record count); never
        # N itself, which moves with one unit and would reshuffle every bucket
        stages = [StageSpec(LABEL_HISTOGRAM, "laplace", p.label_fraction,
                            sensitivity=private.records_per_unit)]
        rest = 1.0 - sum(s.fraction for s in stages)
        # one draw per token, ε per draw = 1 / noise scale; the parallel texts count once
        stages.append(StageSpec(DECODING, "exponential", rest, compositions=p.max_tokens))
        return stages

    def expected_generations(self, private: DataFacts) -> dict[str, int]:
        """None of the generator's operations: it reads the LM's next-token distributions
        (`n_output` texts of up to `max_tokens` draws, each a pass of one token for the B
        rows of its batch and its public row, `texts_together` texts sharing each pass)."""
        return {}

    def clip(self, plan: BudgetPlan) -> float:
        """C, from the plan's ε per token: ε_token = 2C/(B·T)."""
        p = self.params
        return p.batch_size * p.temperature / (2 * plan.stage(DECODING).noise_scale)

    def plan_notes(self, private: DataFacts, plan: BudgetPlan) -> list[str]:
        p, c = self.params, self.clip(plan)
        eps_token = 1 / plan.stage(DECODING).noise_scale
        notes = [f"dp_decoding: each token is a bounded-range draw of ε {eps_token:.3g} (the "
                 f"decoding stage's 1 / noise scale; {p.max_tokens} per text, the texts in "
                 f"parallel), so each record's shift of a token's log-probability is clipped to "
                 f"±{c:.3g} (batch_size {p.batch_size}, temperature {p.temperature:g})"]
        if c < WEAK_CLIP:
            notes.append(f"dp_decoding: clip {c:.3g} < {WEAK_CLIP}: the texts will read much "
                         "like the public prompt's; raise batch_size (or ε, or lower "
                         "max_tokens)")
        if p.n_output * p.batch_size > private.n_units:
            notes.append(f"dp_decoding: {p.n_output} texts × batch_size {p.batch_size} > "
                         f"{private.n_units} units: the batches hold fewer than "
                         f"{p.batch_size} records on average, which weakens each text's "
                         "private signal")
        return notes

    def run(self, ctx: RunContext) -> SyntheticSet:
        if ctx.generator.is_remote:  # before any release: private text meets a local LM only
            raise ConfigError("recipe dp_decoding puts private records in the generator's "
                              "context, so it needs a local generator (smollm or hf); "
                              "backends.generator is remote")
        lm = dataclasses.replace(ctx.generator.context_lm(), system=self.params.system)
        self._check_lm(ctx, lm)  # config-only refusals, before the first release
        lm = lm.at_precision(self.params.precision)
        log.info("dp_decoding: the LM decodes in %s", lm.precision)
        if ctx.resumed is not None and "texts" in ctx.resumed[1]:
            return self._output(ctx, ctx.resumed[1])
        state = ctx.resumed[1] if ctx.resumed is not None else self._labels(ctx)
        if ctx.resumed is None:
            ctx.save(0, state)
        requests, buckets = self._requests(ctx, state["label_counts"])
        p = self.params
        setup = DecodingSetup(p.batch_size, self.clip(ctx.plan), p.top_k, p.max_example_tokens,
                              p.forward_batch, p.max_tokens, p.cached_rows, p.texts_together)
        drawn = ctx.private.decode(ctx.plan.stage(DECODING), lm, setup, requests, buckets,
                                   ctx.seed, p.temperature)
        ended = sum(bool(ids) and ids[-1] == lm.eos_id for ids in drawn)
        drawn = self._finish(ctx, lm, requests, drawn)
        texts = [tidy(lm.decode([t for t in ids if t != lm.eos_id])) for ids in drawn]
        names = label_groups(ctx.private)
        kept = [(x, names[r.group]) for x, r in zip(texts, requests, strict=True) if x.strip()]
        out_texts, out_labels = distinct([x for x, _ in kept], [y for _, y in kept])
        state = {**state, "texts": out_texts, "labels": out_labels}
        ctx.report({"texts_decoded": len(texts), "ended_before_max_tokens": ended,
                    "ending_mid_sentence": sum(not SENTENCE_END.search(x) for x in texts),
                    "synthetic": len(out_texts), "clip": setup.clip,
                    "precision": lm.precision,
                    "tokens": int(sum(len(ids) for ids in drawn)),
                    "epsilon_spent": ctx.private.spent()})
        ctx.save(1, state)
        return self._output(ctx, state)

    def _finish(self, ctx: RunContext, lm, requests: list[TextRequest],
                drawn: list[list[int]]) -> list[list[int]]:
        """Each text the draws cut at `max_tokens` continued to the end of its sentence from
        its public prompt and its released tokens only, sampled with a public seed."""
        p = self.params
        return [ids if ids and ids[-1] == lm.eos_id else
                lm.finish(r.public_instruction, ids, p.finish_tokens, p.top_k, p.temperature,
                          np.random.default_rng([ctx.seed, 1, i]))
                for i, (r, ids) in enumerate(zip(requests, drawn, strict=True))]

    def _check_lm(self, ctx: RunContext, lm) -> None:
        """Refuse, from the config and the model alone (no record), what would otherwise fail
        inside the decoding release after the whole budget is charged: a model off the CPU,
        a prompt whose rendering holds the example slot more or less than once (a label name
        with `{example}`), and rows longer than the model's context."""
        p = self.params
        device = _device(lm.model)
        if device != "cpu":
            raise ConfigError(f"recipe dp_decoding reads the LM's next-token distributions on "
                              f"the CPU; the generator's model is on {device} (set "
                              "backends.generator.device: cpu)")
        limit = _max_positions(lm.model)
        for private, public in self._prompts(ctx):
            slots = lm.render(private).count(SLOT)
            if slots != 1:
                raise ConfigError(f"recipe dp_decoding: the rendered prompt holds the example "
                                  f"slot {slots} times, not once: a label name or "
                                  "recipe.params.system holds {example}; rename it")
            before, after = lm.slotted(private)
            width = len(before) + p.max_example_tokens + len(after)
            longest = max(width, len(lm.prompt(public)) + p.finish_tokens) + p.max_tokens
            if limit is not None and longest > limit:
                raise ConfigError(f"recipe dp_decoding: a row is {longest} tokens (prompt "
                                  f"{len(before) + len(after)} + max_example_tokens "
                                  f"{p.max_example_tokens} + max_tokens {p.max_tokens}, or the "
                                  f"public prompt + max_tokens + finish_tokens), more than the "
                                  f"model's {limit} positions; lower max_example_tokens, "
                                  "max_tokens or finish_tokens")

    def _prompts(self, ctx: RunContext) -> list[tuple[str, str]]:
        """Each group's private instruction (with the example slot) and public one."""
        out = []
        for group in label_groups(ctx.private):
            label = ctx.label_name(group) if group is not None else UNLABELLED
            words = {"{label}": label, "{document}": ctx.document or UNDESCRIBED}
            out.append((_fill(self.params.prompt, words).replace(EXAMPLE, SLOT),
                        _fill(self.params.public_prompt, words)))
        return out

    def _output(self, ctx: RunContext, state: dict) -> SyntheticSet:
        return SyntheticSet(state["texts"], state["labels"] if ctx.private.has_labels else None)

    def _labels(self, ctx: RunContext) -> dict:
        """The noisy record count per label (a DP label histogram; without labels, one cell:
        the DP record count)."""
        return {"label_counts":
                ctx.private.label_counts(ctx.plan.stage(LABEL_HISTOGRAM)).tolist()}

    def _requests(self, ctx: RunContext, noisy_counts: list[float]
                  ) -> tuple[list[TextRequest], list[int]]:
        """`n_output` texts over the labels, in proportion to their noisy counts; a label's
        records are split into max(its texts, noisy count / B) buckets, the first of which
        feed its texts, one each, so a batch holds about B records (or fewer). Only the
        config and the DP counts fix the buckets, never N: a record joining moves no other
        record's bucket."""
        p, groups = self.params, label_groups(ctx.private)
        sizes = np.asarray(noisy_counts, dtype=float)
        if sizes.shape != (len(groups),):
            raise ValueError("one noisy count per label group expected")
        probs = sizes / sizes.sum() if sizes.sum() > 0 else np.full(len(groups), 1 / len(groups))
        counts = allocate(p.n_output, probs, minimum=0)
        buckets = [max(int(n), int(size // p.batch_size), 1)
                   for n, size in zip(counts, sizes, strict=True)]
        requests = []
        for g, ((private, public), n) in enumerate(zip(self._prompts(ctx), counts,
                                                        strict=True)):
            requests += [TextRequest(g, j, public, private) for j in range(int(n))]
        return requests, buckets


def tidy(text: str) -> str:
    """A decoded text as one output cell: line breaks as \\n (a lone \\r splits a CSV row),
    no control characters, no U+FFFD (what a token sequence cut inside a UTF-8 character
    decodes to). Public post-processing of released tokens."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\ufffd", "")
    return "".join(c for c in text if c in "\n\t" or unicodedata.category(c) != "Cc").strip()


def _device(model) -> str:
    try:
        return str(next(model.parameters()).device.type)
    except (AttributeError, StopIteration, TypeError):
        return "cpu"


def _max_positions(model) -> int | None:
    """The model's maximum positions (None when its config does not say)."""
    config = getattr(model, "config", None)
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None



def _fill(template: str, words: dict[str, str]) -> str:
    """`template` with each placeholder of `words` replaced in one pass (a label name holding
    `{document}` stays as written)."""
    return re.sub("|".join(map(re.escape, words)), lambda m: words[m.group(0)], template)
