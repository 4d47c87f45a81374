"""KD-Tutor (seeds/kd-tutor.md): public candidates filtered by a PATE-style DP discriminator,
in label proportions set by a DP label-distribution tutor.

    lengths     Laplace length histogram (a departure: the seed asks for none)
    candidates  the generator writes a pool per label from the label and a length  (§3.3)
    tutor       Gaussian label histogram, clipped and renormalised                 (§3.5)
    teachers    M private-vs-public classifiers on disjoint partitions of units    (§3.4)
    student     trained on candidates labelled by the noisy teacher vote           (§3.4)
                (soft, the default: a class each teacher draws from its probabilities,
                Eq. 4 sampled; hard: the class it predicts)
    selection   per label, the candidates the student finds most private-like      (§3.6)

Departures (docs/privacy.md, docs/recipes/kd_tutor.md): every student query is a release and
all of them compose on the ledger, so the budget bounds how many candidates the student
learns from; the paper counts the distillation once. A soft vote is sampled: each teacher
casts one class drawn from its probabilities (Eq. 4's sum in expectation), so a unit moves
one teacher's one-hot vote, as with hard votes. The student learns from the noisy votes'
shares, where the seed takes its argmax (Eq. 1). `discriminator: labelled` (the default)
makes the teachers (K+1)-way — the K private labels and "public" — so the noisy vote also says
which label a candidate looks like, and a label takes, among the candidates generated for it,
the ones the student finds most likely to be its private records (with `relabel`, among all
candidates: a poor student then mislabels).
"""

from __future__ import annotations

import logging
from typing import ClassVar, Literal

import numpy as np
from pydantic import BaseModel, Field

from dpsynth.data.facts import DataFacts
from dpsynth.methods.base import Recipe, RunContext, SyntheticSet, label_groups
from dpsynth.methods.parts.distinct import generate_distinct
from dpsynth.methods.parts.lengths import (
    LengthParams,
    dp_lengths,
    length_conditions,
    length_stages,
)
from dpsynth.methods.parts.toolbox import allocate
from dpsynth.privacy.planning import BudgetPlan, StageSpec
from dpsynth.privacy.stages import STUDENT_QUERIES, TUTOR
from dpsynth.private import train_on_shares

log = logging.getLogger(__name__)


class KdTutorParams(LengthParams):
    n_output: int | None = Field(None, ge=1, description="output size: synthetic texts in the "
                                 "output; none: N, the private set's units")
    pool_factor: float = Field(3.0, ge=1, description="candidates for the student to rank, "
                               "per output sample")
    n_negatives: int | None = Field(None, ge=1, description="public candidates the teachers "
                                    "learn as negatives (kept apart from the ones the student "
                                    "ranks); none: n_output")
    teachers: int = Field(60, ge=1, description="PATE teachers, each trained on a disjoint "
                          "partition of the private data")
    n_queries: int = Field(100, ge=1, description="candidates the student learns from; each "
                           "is one noisy teacher vote on the ledger")
    query_batch: int = Field(100, ge=1, description="student queries the teachers answer per "
                             "batch")
    discriminator: Literal["binary", "labelled"] = Field(
        "labelled", description="teachers and student tell private from public (binary, the "
        "seed's) or also which private label (labelled: K+1 classes; binary without labels)")
    relabel: bool = Field(False, description="discriminator: labelled — a candidate may be "
                          "output under any label the student finds it likely to be a private "
                          "record of, not only the label it was generated for")
    noise: Literal["gaussian", "laplace"] = Field("gaussian", description="noise on the teachers' "
                                                  "vote counts")
    votes: Literal["soft", "hard"] = Field(
        "soft", description="what each teacher gives a query: a class drawn from its class "
        "probabilities by randomness no record touches (soft: the seed's Eq. 4 in "
        "expectation), or the class it predicts (hard, PATE's); either way a unit joining "
        "moves one teacher's vote, so both take the same noise (gaussian or laplace) and "
        "charge")
    selection: Literal["top", "sample"] = Field(
        "top", description="how each label's candidates are chosen: the highest student "
        "scores (top, the seed's §3.6), or drawn in proportion to them (sample: the seed's "
        "P_syn ∝ P_discr · P_LLM, which keeps the candidates' variety); post-processing, no ε")
    label_mode: Literal["tutor", "uniform", "none"] = Field(
        "tutor", description="label proportions of the output: the DP tutor, uniform, or "
        "none (top candidates whatever their label)")
    tutor_fraction: float = Field(0.1, gt=0, lt=1, description="budget share of the DP label "
                                  "distribution (label_mode: tutor)")


class KdTutor(Recipe):
    name: ClassVar[str] = "kd_tutor"
    embeds_private: ClassVar[bool] = True
    state_version: ClassVar[int] = 2  # 2: the pool's count of negatives
    Params: ClassVar[type[BaseModel]] = KdTutorParams
    params: KdTutorParams

    def sizes(self, private: DataFacts) -> dict[str, int]:
        """The negatives follow the output size, one for one (dpsynth's former defaults, 2,000
        each; the seed gives no count). The pool the student ranks is already a ratio of
        the output (`pool_factor`)."""
        sizes = super().sizes(private)
        n = self.params.n_negatives
        sizes["n_negatives"] = n if n is not None else sizes["n_output"]
        return sizes

    def _tutored(self, private: DataFacts) -> bool:
        return self.params.label_mode == "tutor" and private.has_labels

    def _labelled(self, private: DataFacts) -> bool:
        return self.params.discriminator == "labelled" and private.has_labels

    def stages(self, private: DataFacts, delta: float) -> list[StageSpec]:
        p = self.params
        stages = []
        if self._tutored(private):
            stages.append(StageSpec(TUTOR, "gaussian", p.tutor_fraction,
                                    sensitivity=private.records_per_unit))
        stages += length_stages(p, private)
        rest = 1.0 - sum(s.fraction for s in stages)
        stages.append(StageSpec(STUDENT_QUERIES, p.noise, rest, max_changed=2,
                                compositions=p.n_queries))
        return stages

    def plan_notes(self, private: DataFacts, plan: BudgetPlan) -> list[str]:
        """Votes drowned: noise of half the teachers' votes turns most labels to chance (at
        ag_news ε = 1, σ 53 against 60 teachers: 0.563 ± 0.117, below the pool's 0.644)."""
        sigma, teachers = plan.stage(STUDENT_QUERIES).noise_scale, min(
            self.params.teachers, private.n_units)
        if sigma < teachers / 2:
            return []
        return [f"kd_tutor: each student query's vote noise (scale {sigma:.3g}) is at least "
                f"half the {teachers} teachers' votes, so most of the student's labels are "
                "chance and the selection may score below the candidates' own level; give it "
                "more ε, or fewer n_queries"]

    def expected_generations(self, private: DataFacts) -> dict[str, int]:
        p = self.resolved(private).params
        return {"generate": p.n_negatives + int(np.ceil(p.pool_factor * p.n_output))}

    def run(self, ctx: RunContext) -> SyntheticSet:
        p = self.params
        plan = ctx.plan
        labels = ctx.private.label_names
        groups = label_groups(ctx.private)
        if p.discriminator == "labelled" and not ctx.private.has_labels:
            log.warning("discriminator: labelled needs labels and the data has none: the "
                        "teachers and the student tell private from public only (binary)")
        if ctx.resumed is None:
            texts, pool_labels, negatives = self._candidates(ctx, groups)
            probs = self._label_proportions(ctx, plan, groups)
            ctx.save(0, {"texts": texts, "labels": pool_labels, "negatives": negatives,
                         "probs": probs.tolist()})
        else:
            state = ctx.resumed[1]
            texts, pool_labels, negatives = state["texts"], state["labels"], state["negatives"]
            probs = np.asarray(state["probs"])
        embeddings = ctx.embed_public(texts)
        ranked = np.arange(negatives, len(texts))

        queried, shares = self._query(ctx, plan, embeddings[:negatives], embeddings, ranked)
        proba = self._student(ctx, embeddings[queried], shares, embeddings[ranked])
        ctx.report({"student_queries": len(queried),
                    "noisy_private_votes": int(np.count_nonzero(shares.argmax(axis=1))),
                    "teachers": p.teachers, "epsilon_spent": ctx.private.spent()})
        generated = np.array([groups.index(pool_labels[i]) for i in ranked], dtype=np.int64)
        picked = self._select(self._scores(ctx.private, proba, generated), probs,
                              np.random.default_rng([ctx.seed, 3]))
        out_texts = [texts[ranked[i]] for i, _ in picked]
        out_labels = [groups[g] for _, g in picked]
        return SyntheticSet(out_texts, out_labels if labels else None)

    def _candidates(self, ctx: RunContext, groups: list) -> tuple[list[str], list, int]:
        """A public pool of distinct texts: negatives for the teachers first, then the
        candidates to rank (so the output, chosen among them, holds each text once), each
        written from its label and a length from the DP length histogram (negatives too: the
        teachers then cannot tell private from public by length alone). Returns the texts,
        their labels and how many negatives lead."""
        p = self.params
        total = p.n_negatives + int(np.ceil(p.pool_factor * p.n_output))
        labels = [g for g, n in zip(groups, allocate(total, np.ones(len(groups))), strict=True)
                  for _ in range(int(n))]
        rng = np.random.default_rng([ctx.seed, 0])
        labels = [labels[i] for i in rng.permutation(len(labels))]
        conditions = length_conditions(labels, dp_lengths(ctx, p), rng)
        texts, asked = generate_distinct(ctx.generator.generate, conditions)
        return (texts, [conditions[i].label for i in asked],
                sum(i < p.n_negatives for i in asked))

    def _label_proportions(self, ctx: RunContext, plan: BudgetPlan,
                           groups: list) -> np.ndarray:
        if not self._tutored(ctx.private):
            return np.full(len(groups), 1.0 / len(groups))
        return ctx.private.label_distribution(plan.stage(TUTOR))

    def _classes(self, private: DataFacts) -> int:
        """Vote classes: public and private, or public and each private label."""
        return 1 + len(private.label_names) if self._labelled(private) else 2

    def _query(self, ctx: RunContext, plan: BudgetPlan, negatives: np.ndarray,
               embeddings: np.ndarray, ranked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """M discriminators, each on its partition of the private units (kd-tutor §3.4),
        against the public negatives; candidates labelled by their noisy votes (class shares:
        one-hot from hard votes, graded from sampled soft ones), batch by batch, until the planned
        number of queries is reached or the next batch would exceed the budget."""
        p = self.params
        order = ranked[np.random.default_rng([ctx.seed, 1]).permutation(len(ranked))]
        order = order[: p.n_queries]
        labels = ctx.private.teacher_labels(
            plan.stage(STUDENT_QUERIES), negatives, embeddings[order],
            n_teachers=p.teachers, batch=p.query_batch, labelled=self._labelled(ctx.private),
            soft=p.votes == "soft", seed=ctx.seed)
        return order[: len(labels)], labels

    def _student(self, ctx: RunContext, queried: np.ndarray, shares: np.ndarray,
                 candidates: np.ndarray) -> np.ndarray:
        """The student's P(class | candidate), one column per vote class (0 = public; a class
        no vote named gets 0), learnt from the labels' shares (Eq. 2's cross-entropy, against
        soft labels where the votes are soft): post-processing of DP labels."""
        proba = np.zeros((len(candidates), self._classes(ctx.private)))
        seen = np.flatnonzero(shares.sum(axis=0))
        if len(seen) < 2:
            proba[:, seen] = 1.0
            return proba
        student = train_on_shares(queried, shares, ctx.seed)
        proba[:, student.classes_] = student.predict_proba(candidates)
        return proba

    def _scores(self, private: DataFacts, proba: np.ndarray,
                generated: np.ndarray) -> np.ndarray:
        """How well each candidate (row) fits each output label (column), -inf where it may
        not take that label. Binary: P(private), under the label it was generated for only.
        Labelled: P(private record of that label), under the label it was generated for, or
        with `relabel` under any label; a label no vote named (the student knows nothing of
        it) keeps the candidates generated for it."""
        own = generated[:, None] == np.arange(len(label_groups(private)))
        if not self._labelled(private):
            return np.where(own, proba[:, [1]], -np.inf)
        scores = proba[:, 1:]
        unnamed = ~scores.any(axis=0)
        scores[:, unnamed] = own[:, unnamed]
        return scores if self.params.relabel else np.where(own, scores, -np.inf)

    def _select(self, scores: np.ndarray, probs: np.ndarray,
                rng: np.random.Generator) -> list[tuple[int, int]]:
        """(candidate, label) pairs, best key first, each candidate used once and each label
        up to its quota (the tutor's or uniform; with label_mode none, any number). The key
        is the score (top), or log score + Gumbel noise (sample: drawing without replacement
        in proportion to the scores, the Gumbel-top-k trick; a public seed)."""
        n = min(self.params.n_output, len(scores))
        quota = (np.full(scores.shape[1], n) if self.params.label_mode == "none"
                 else allocate(n, probs).astype(np.int64))
        if self.params.selection == "sample":
            with np.errstate(divide="ignore"):
                scores = np.where(np.isfinite(scores), np.log(np.maximum(scores, 1e-12))
                                  + rng.gumbel(size=scores.shape), -np.inf)
        used = np.zeros(len(scores), dtype=bool)
        picked: list[tuple[int, int]] = []
        for flat in np.argsort(-scores, axis=None, kind="stable"):
            row, label = divmod(int(flat), scores.shape[1])
            if len(picked) == n or not np.isfinite(scores[row, label]):
                break
            if not used[row] and quota[label] > 0:
                used[row], quota[label] = True, quota[label] - 1
                picked.append((row, label))
        return picked
