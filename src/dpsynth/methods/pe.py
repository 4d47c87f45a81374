"""Private Evolution / AUG-PE (Lin et al. 2024; Xie et al. 2024), the baseline DPGA-TextSyn
compares against.

    S_0 = random API (generate from the label and a length drawn from a DP length histogram)
          N = n_output texts; N is by default the private set's size (its units, public)
    repeat T:  DP nearest-neighbour histogram over S (Gaussian, counts below H zeroed)
               S' = N draws in proportion to the noisy counts
               S  = variation API (rewrite) of S'        — skipped after the last vote
                    (before the last vote: S' and its rewrites, 2N candidates)
    output S'

By default (`labels_from: votes`, a departure measured in docs/recipes/pe.md) private records
vote over all samples, each in its own label's cell, and a sample takes the label that voted
for it clearly most; with `labels_from: generation`, as in PE and DPGA, records vote only for
samples of their own label. Labels are allocated by a Laplace label histogram
(`label_fraction` of the budget), or uniformly when `label_fraction` is 0. The last draw is
without replacement: PE's output is a varied population, never one sample repeated, so the
output holds each selected text once. Drawn without replacement from a population of N, the
last draw of N would take every candidate and its vote would change nothing; so the last vote
chooses among 2N distinct candidates (S' kept beside its rewrites, or S_0 generated at 2N when
T = 1), and every release can change the output.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from pydantic import BaseModel, Field

from dpsynth.backends.base import Condition
from dpsynth.data.facts import DataFacts
from dpsynth.methods.base import (
    IterativeRecipe,
    RunContext,
    SyntheticSet,
    label_groups,
)
from dpsynth.methods.parts.distinct import distinct, generate_distinct
from dpsynth.methods.parts.lengths import (
    LengthParams,
    dp_lengths,
    length_conditions,
    length_stages,
)
from dpsynth.methods.parts.toolbox import allocate
from dpsynth.methods.parts.votes import LabelsFrom, vote_on_samples
from dpsynth.privacy.planning import StageSpec
from dpsynth.privacy.stages import LABEL_HISTOGRAM, VOTING

FINAL_CANDIDATES = 2
"""The last vote chooses the N outputs among this many times N candidates."""


class PeParams(LengthParams):
    iterations: int = Field(10, ge=1, description="T: DP votes; a rewrite follows every vote but "
                            "the last")
    n_output: int | None = Field(None, ge=1, description="output size, and the population of "
                                 "every iteration (AUG-PE's N_syn: the population is the "
                                 "output); none: N, the private set's units")
    sampling_rate: float = Field(1.0, gt=0, le=1, description="Poisson rate at which private "
                                 "records join each vote")
    threshold: float = Field(2.0, ge=0, description="noisy counts below H count as zero")
    rewrite_strength: float = Field(0.5, ge=0, le=1, description="how much a rewrite (the "
                                    "variation API) changes a text (0 to 1)")
    label_fraction: float = Field(0.1, ge=0, lt=1, description="budget share of a DP label "
                                  "histogram; 0 allocates labels uniformly")
    labels_from: LabelsFrom = Field(
        "votes", description="a sample's label: the one it was generated for, or the one "
        "whose private records voted for it clearly most (records vote over every sample, "
        "at the same charge); votes help wherever the generator's label conditioning is weak")


class PrivateEvolution(IterativeRecipe):
    name: ClassVar[str] = "pe"
    embeds_private: ClassVar[bool] = True
    one_record_per_unit: ClassVar[bool] = True
    renamed: ClassVar[dict[str, str]] = {"n_samples": "n_output"}
    Params: ClassVar[type[BaseModel]] = PeParams
    params: PeParams

    def stages(self, private: DataFacts, delta: float) -> list[StageSpec]:
        p = self.params
        stages = []
        if p.label_fraction and private.has_labels:
            stages.append(StageSpec(LABEL_HISTOGRAM, "laplace", p.label_fraction,
                                    sensitivity=private.records_per_unit))
        stages += length_stages(p, private)
        voting = 1.0 - sum(s.fraction for s in stages)
        stages.append(StageSpec(VOTING, "subsampled_gaussian", voting,
                                compositions=p.iterations, sampling_rate=p.sampling_rate))
        return stages

    def expected_generations(self, private: DataFacts) -> dict[str, int]:
        sized = self.resolved(private)
        p = sized.params
        return {"generate": sized._initial_size(),
                "rewrite": (p.iterations - 1) * p.n_output}

    def _initial_size(self) -> int:
        """S_0's size: with one vote it is the last, which needs FINAL_CANDIDATES × N."""
        p = self.params
        return p.n_output * (FINAL_CANDIDATES if p.iterations == 1 else 1)

    def iterations(self) -> int:
        return self.params.iterations

    def initial(self, ctx: RunContext) -> dict:
        """S_0: generated from the label and a length, labels allocated uniformly or by a DP
        label histogram, lengths drawn from a DP length histogram (rewrites keep their
        parent's length)."""
        p, groups = self.params, label_groups(ctx.private)
        probs = np.full(len(groups), 1.0 / len(groups))
        if p.label_fraction and ctx.private.has_labels:
            probs = ctx.private.label_distribution(ctx.plan.stage(LABEL_HISTOGRAM))
        lengths = dp_lengths(ctx, p)
        conditions = length_conditions(
            [g for g, n in zip(groups, allocate(self._initial_size(), probs), strict=True)
             for _ in range(int(n))], lengths, np.random.default_rng([ctx.seed, 0]))
        texts, asked = generate_distinct(ctx.generator.generate, conditions)
        return {"texts": texts, "labels": [conditions[i].label for i in asked],
                "label_probs": probs.tolist()}

    def step(self, ctx: RunContext, state: dict, t: int, last: bool) -> tuple[dict, dict]:
        """DP nearest-neighbour histogram over S; S' = draws by the thresholded noisy
        counts; S = variation of S' (after the last vote, S' is the output)."""
        p, groups = self.params, label_groups(ctx.private)
        texts, labels = state["texts"], state["labels"]
        votes, labels = vote_on_samples(ctx, texts, ctx.embed_public(texts), labels, groups,
                                        p.labels_from, p.threshold)
        weights = np.where(votes >= p.threshold, votes, 0.0)
        picked = self._resample(weights, labels, groups, state["label_probs"],
                                np.random.default_rng([ctx.seed, t + 1]), distinct=last)
        row = {"population": len(texts), "candidates_above_threshold": int((weights > 0).sum()),
               "noisy_votes_total": float(votes.sum())}
        chosen, chosen_labels = [texts[i] for i in picked], [labels[i] for i in picked]
        if not last:
            conditions = [Condition(label=y, length=len(x.split()))
                          for x, y in zip(chosen, chosen_labels, strict=True)]
            rewritten, asked = generate_distinct(lambda rows: ctx.generator.rewrite(
                [chosen[i] for i in rows], [conditions[i] for i in rows], p.rewrite_strength),
                range(len(chosen)))
            rewritten_labels = [chosen_labels[i] for i in asked]
            if t == p.iterations - 2:  # the last vote chooses among parents and rewrites
                rewritten, rewritten_labels = distinct(chosen + rewritten,
                                                       chosen_labels + rewritten_labels)
            chosen, chosen_labels = rewritten, rewritten_labels
        return {**state, "texts": chosen, "labels": chosen_labels}, row

    def output(self, ctx: RunContext, state: dict) -> SyntheticSet:
        return SyntheticSet(state["texts"],
                            state["labels"] if ctx.private.has_labels else None)

    def _resample(self, weights: np.ndarray, pop_labels: list, groups: list,
                  probs: list[float], rng: np.random.Generator, distinct: bool) -> list[int]:
        """Draw each label's quota in proportion to its candidates' thresholded noisy votes
        (uniformly where none passed the threshold); `distinct` draws without replacement
        from a population of distinct texts, candidates with votes before those without, a
        label short of candidates (relabelling moves samples between labels) passing its
        shortfall to labels with some to spare; a population smaller than N gives fewer
        outputs, never a repeat."""
        picked: list[int] = []
        by_label = [np.array([i for i, y in enumerate(pop_labels) if y == label],
                             dtype=np.int64) for label in groups]
        quotas = allocate(self.params.n_output, np.asarray(probs))
        if distinct:
            quotas = _distinct_quotas(quotas, np.array([len(r) for r in by_label]),
                                      np.asarray(probs))
        for rows, quota in zip(by_label, quotas, strict=True):
            if quota == 0 or len(rows) == 0:
                continue
            w = weights[rows]
            if distinct:
                order = _weighted_order(w, rng)
                picked += rows[order[: int(quota)]].tolist()
                continue
            p = w / w.sum() if w.sum() > 0 else None
            picked += rows[rng.choice(len(rows), size=int(quota), p=p)].tolist()
        return picked


def _distinct_quotas(quotas: np.ndarray, available: np.ndarray,
                     probs: np.ndarray) -> np.ndarray:
    """Quotas no larger than the candidates each label has, the shortfall moved to labels
    with candidates to spare (in proportion to `probs`); what no label can take is left out."""
    total, quotas = int(quotas.sum()), np.minimum(quotas, available)
    weights = np.asarray(probs, dtype=np.float64) + 1e-12
    while total > int(quotas.sum()) and (spare := available > quotas).any():
        quotas = np.minimum(quotas + allocate(total - int(quotas.sum()),
                                              np.where(spare, weights, 0.0), 0), available)
    return quotas


def _weighted_order(weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random order in which each next item is drawn in proportion to its weight among
    those left (Efraimidis–Spirakis keys u^(1/w)); zero-weight items come last, shuffled."""
    u = rng.random(len(weights))
    keys = np.where(weights > 0, np.log(u) / np.where(weights > 0, weights, 1.0), -np.inf)
    return np.lexsort((rng.random(len(weights)), -keys))

