"""KD-Tutor (seeds/kd-tutor.md): public candidates filtered by a PATE-style DP discriminator,
in label proportions set by a DP label-distribution tutor.

    candidates  the generator writes a pool per label from the label alone        (§3.3)
    tutor       Gaussian label histogram, clipped and renormalised                 (§3.5)
    teachers    M private-vs-public classifiers on disjoint partitions of units    (§3.4)
    student     trained on candidates labelled by the noisy teacher vote           (§3.4)
    selection   per label, the candidates the student finds most private-like      (§3.6)

Departure (docs/privacy.md): every student query is a release and all of them compose on the
ledger, so the budget bounds how many candidates the student learns from; the paper counts
the distillation once.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from dpsynth.backends.base import Condition
from dpsynth.data import PrivateDataset
from dpsynth.methods.base import Recipe, RunContext, SyntheticSet, label_groups
from dpsynth.methods.toolbox import allocate, keep_produced
from dpsynth.ops.metadata import dp_label_distribution
from dpsynth.ops.pate import label_within_budget, train_discriminator, train_teachers
from dpsynth.privacy.planning import BudgetPlan, StageSpec


class KdTutorParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    n_output: int = Field(2_000, ge=1, description="synthetic texts in the output")
    pool_factor: float = Field(3.0, ge=1, description="candidates for the student to rank, "
                               "per output sample")
    n_negatives: int = Field(2_000, ge=1, description="public candidates the teachers learn "
                             "as negatives (kept apart from the ones the student ranks)")
    teachers: int = Field(15, ge=1, description="PATE teachers, each trained on a disjoint "
                          "partition of the private data")
    n_queries: int = Field(500, ge=1, description="candidates the student learns from; each "
                           "is one noisy teacher vote on the ledger")
    query_batch: int = Field(100, ge=1, description="student queries the teachers answer per "
                             "batch")
    noise: Literal["gaussian", "laplace"] = Field("gaussian", description="noise on the teachers' "
                                                  "vote counts")
    label_mode: Literal["tutor", "uniform", "none"] = Field(
        "tutor", description="label proportions of the output: the DP tutor, uniform, or "
        "none (top candidates whatever their label)")
    tutor_fraction: float = Field(0.1, gt=0, lt=1, description="budget share of the DP label "
                                  "distribution (label_mode: tutor)")


class KdTutor(Recipe):
    name: ClassVar[str] = "kd_tutor"
    Params: ClassVar[type[BaseModel]] = KdTutorParams
    params: KdTutorParams

    def _tutored(self, private: PrivateDataset) -> bool:
        return self.params.label_mode == "tutor" and private.has_labels

    def stages(self, private: PrivateDataset, delta: float) -> list[StageSpec]:
        p = self.params
        stages = []
        if self._tutored(private):
            stages.append(StageSpec("tutor", "gaussian", p.tutor_fraction,
                                    sensitivity=private.records_per_unit))
        rest = 1.0 - (p.tutor_fraction if self._tutored(private) else 0.0)
        stages.append(StageSpec("student_queries", p.noise, rest, max_changed=2,
                                compositions=p.n_queries))
        return stages

    def expected_generations(self, private: PrivateDataset) -> dict[str, int]:
        p = self.params
        return {"generate": p.n_negatives + int(np.ceil(p.pool_factor * p.n_output))}

    def run(self, ctx: RunContext) -> SyntheticSet:
        p = self.params
        plan = ctx.plan
        labels = ctx.private.label_names
        groups = label_groups(ctx.private)
        if ctx.resumed is None:
            pool = self._candidates(ctx, groups)
            probs = self._label_proportions(ctx, plan, groups)
            ctx.save(0, {"texts": pool[0], "labels": pool[1], "probs": probs.tolist()})
        else:
            state = ctx.resumed[1]
            pool, probs = (state["texts"], state["labels"]), np.asarray(state["probs"])
        texts, pool_labels = pool
        embeddings = ctx.embed_public(texts)
        ranked = np.arange(p.n_negatives, len(texts))

        teachers = self._teachers(ctx, embeddings[: p.n_negatives])
        queried, votes = self._query(ctx, plan, teachers, embeddings, ranked)
        scores = self._student_scores(ctx, embeddings[queried], votes, embeddings[ranked])
        ctx.report({"student_queries": len(queried), "noisy_private_votes": int(votes.sum()),
                    "teachers": len(teachers), "epsilon_spent": ctx.ledger.spent()})
        picked = self._select(scores, [pool_labels[i] for i in ranked], groups, probs)
        out_texts = [texts[ranked[i]] for i in picked]
        out_labels = [pool_labels[ranked[i]] for i in picked]
        return SyntheticSet(out_texts, out_labels if labels else None)

    def _candidates(self, ctx: RunContext, groups: list) -> tuple[list[str], list]:
        """A public pool: negatives for the teachers first, then the candidates to rank."""
        p = self.params
        total = p.n_negatives + int(np.ceil(p.pool_factor * p.n_output))
        conditions = [Condition(label=g) for g, n in
                      zip(groups, allocate(total, np.ones(len(groups))), strict=True)
                      for _ in range(int(n))]
        order = np.random.default_rng([ctx.seed, 0]).permutation(len(conditions))
        conditions = [conditions[i] for i in order]
        return keep_produced(ctx.generator.generate(conditions), [c.label for c in conditions])

    def _label_proportions(self, ctx: RunContext, plan: BudgetPlan,
                           groups: list) -> np.ndarray:
        if not self._tutored(ctx.private):
            return np.full(len(groups), 1.0 / len(groups))
        return dp_label_distribution(ctx.private, plan.stage("tutor").mechanism, ctx.ledger,
                                     ctx.noise, stage="tutor")

    def _teachers(self, ctx: RunContext, negatives: np.ndarray) -> list:
        """M discriminators, each on its partition of the private units (kd-tutor §3.4)."""
        return train_teachers(ctx.private, ctx.embed_private, negatives, self.params.teachers,
                              ctx.noise.random_key(), ctx.seed)

    def _query(self, ctx: RunContext, plan: BudgetPlan, teachers: list,
               embeddings: np.ndarray, ranked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Label candidates by noisy teacher votes, batch by batch, until the planned number
        of queries is reached or the next batch would exceed the budget."""
        p = self.params
        order = ranked[np.random.default_rng([ctx.seed, 1]).permutation(len(ranked))]
        order = order[: p.n_queries]
        labels = label_within_budget(teachers, embeddings[order],
                                     plan.stage("student_queries").mechanism, p.query_batch,
                                     ctx.ledger, ctx.noise)
        return order[: len(labels)], labels

    def _student_scores(self, ctx: RunContext, queried: np.ndarray, labels: np.ndarray,
                        candidates: np.ndarray) -> np.ndarray:
        """The student's P(private-like) for every candidate: post-processing of DP labels."""
        if len(np.unique(labels)) < 2:
            return np.full(len(candidates), float(labels[0]) if len(labels) else 0.5)
        student = train_discriminator(queried[labels == 1], queried[labels == 0], ctx.seed)
        return student.predict_proba(candidates)[:, 1]

    def _select(self, scores: np.ndarray, labels: list, groups: list,
                probs: np.ndarray) -> list[int]:
        n = min(self.params.n_output, len(scores))
        if self.params.label_mode == "none" or groups == [None]:
            return np.argsort(-scores, kind="stable")[:n].tolist()
        picked: list[int] = []
        for label, quota in zip(groups, allocate(n, probs), strict=True):
            rows = np.array([i for i, y in enumerate(labels) if y == label], dtype=np.int64)
            picked += rows[np.argsort(-scores[rows], kind="stable")[: int(quota)]].tolist()
        return picked
