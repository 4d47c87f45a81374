"""DPGA-TextSyn (seeds/dpga-textsyn.md): a genetic algorithm over synthetic text whose
selection is a DP nearest-neighbour vote.

    metadata   SVT length range, Laplace label / length / keyword histograms   (§3.2)
    τ          DP mean private self-similarity, for suppression (opt-in)       (§3.3.2)
    init       N_init samples from conditions drawn from the metadata          (§3.2)
    repeat T:  vote (Poisson-subsampled Gaussian) → elites: the most noisy     (§3.3)
               votes, skipping those within τ of one chosen (opt-in)
               → rewrite, fill, crossover, generate                            (§3.4)

Per label: only private records of a label vote for that label's samples. The final output
is the last elite set; each vote is over distinct texts (an offspring that repeats an elite,
or another offspring, is dropped before it), so no elite set holds a text twice. Similarity
suppression (§3.3.2) is off by default: on ag_news with the public pool it makes the elite
set near random even without noise (docs/recipes/dpga.md).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from dpsynth.backends.base import Condition
from dpsynth.data.config import as_label
from dpsynth.data.facts import DataFacts
from dpsynth.methods.base import (
    IterativeRecipe,
    RunContext,
    SyntheticSet,
    label_groups,
)
from dpsynth.methods.dpga_metadata import Metadata
from dpsynth.methods.parts.distinct import distinct, generate_distinct
from dpsynth.methods.parts.keywords import class_keywords
from dpsynth.methods.parts.lengths import Lengths, linear_edges
from dpsynth.methods.parts.suppression import select_distinct
from dpsynth.methods.parts.toolbox import allocate, keep_produced, mask_words, softmax
from dpsynth.methods.parts.votes import LabelsFrom, vote_on_samples
from dpsynth.privacy.planning import BudgetPlan, StageSpec
from dpsynth.privacy.stages import (
    KEYWORD_HISTOGRAM,
    LABEL_HISTOGRAM,
    LENGTH_HISTOGRAM,
    LENGTH_RANGE,
    SIMILARITY_THRESHOLD,
    VOTING,
)

SIZE_RATIOS = {"n_init": 5, "n_rewrite": 1, "n_fill": 1, "n_crossover": 1, "n_generate": 1}
"""Each size left out, as a multiple of the output size (the elite set): App. D.4 sets 10,000
initial samples, 2,000 elites, 2,000 offspring per genetic operation."""


class DpgaParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    iterations: int = Field(10, ge=1, description="T: vote-and-evolve iterations")
    n_output: int | None = Field(None, ge=1, description="output size: the elites kept per "
                                 "iteration, the last of which are the output; none: N, the "
                                 "private set's units")
    n_init: int | None = Field(None, ge=1, description="initial population, generated from the "
                               "DP metadata; none: 5 × n_output (App. D.4: 10,000 for 2,000 "
                               "elites)")
    n_rewrite: int | None = Field(None, ge=0, description="offspring per iteration made by "
                                  "rewriting an elite; none: n_output (App. D.4)")
    n_fill: int | None = Field(None, ge=0, description="offspring per iteration made by filling "
                               "masked words of an elite; none: n_output (App. D.4)")
    n_crossover: int | None = Field(None, ge=0, description="offspring per iteration made by "
                                    "crossing elites; none: n_output (App. D.4)")
    n_generate: int | None = Field(None, ge=0, description="offspring per iteration generated "
                                   "afresh from the DP metadata; none: n_output (App. D.4)")
    sampling_rate: float = Field(0.8, gt=0, le=1, description="Poisson rate at which private "
                                 "records join each vote")
    length_bins: int = Field(100, ge=1, description="bins of the DP length histogram")
    max_words: int = Field(1_000, ge=1, description="upper end of the SVT length search")
    fill_mask_rate: float = Field(0.5, ge=0, le=1, description="probability that fill masks a "
                                  "word")
    rewrite_strength: float = Field(0.5, ge=0, le=1, description="how much a rewrite changes a "
                                    "text (0 to 1)")
    tau_step: float = Field(0.01, gt=0, description="increment of the similarity threshold τ when "
                            "too few elites pass")
    keywords: dict[str, list[str]] | None = Field(
        None, description="public candidate keywords per label ('' when unlabelled); "
        "generated from the label names when omitted")
    keywords_per_label: int = Field(10, ge=1, description="candidate keywords per label, taken "
                                    "from the probe texts, for the DP keyword vote")
    keyword_probe_samples: int = Field(20, ge=1, description="texts generated per label to "
                                       "derive candidate keywords")
    keywords_per_sample: int = Field(3, ge=0, description="keywords put into each generation "
                                     "request")
    similarity_suppression: bool = Field(False, description="suppress candidates too similar "
                                         "to one another (threshold τ, a DP estimate), as the "
                                         "paper does; off by default (docs/recipes/dpga.md)")
    similarity_buckets: int = Field(128, ge=1, description="hash buckets of the DP τ estimate: "
                                    "one pair per bucket, so about min(B, N/2) pairs; fixed "
                                    "by the config, never by N")
    use_length: bool = Field(True, description="condition generations on the DP length histogram; "
                             "the paper's ablation")
    labels_from: LabelsFrom = Field(
        "generation", description="a sample's label: the one it was generated for (the "
        "paper), or the one whose private records voted for it clearly most (records vote "
        "over every sample, at the same charge; pe's default, docs/recipes/pe.md)")
    use_keywords: bool = Field(True, description="condition generations on the DP keywords; the "
                               "paper's ablation")

    @field_validator("keywords", mode="before")
    @classmethod
    def _number_keys_are_labels(cls, value: object) -> object:
        """`{0: [...], 1: [...]}` for labels 0 and 1, read as text like the data's labels."""
        return {as_label(k): v for k, v in value.items()} if isinstance(value, dict) else value


class Dpga(IterativeRecipe):
    name: ClassVar[str] = "dpga"
    embeds_private: ClassVar[bool] = True
    one_record_per_unit: ClassVar[bool] = True
    renamed: ClassVar[dict[str, str]] = {"n_elite": "n_output"}
    Params: ClassVar[type[BaseModel]] = DpgaParams
    params: DpgaParams

    def stages(self, private: DataFacts, delta: float) -> list[StageSpec]:
        """Default split: 0.05 SVT, 0.1 label and keyword histograms, 0.05 length histogram,
        the rest (0.7) voting, less 0.05 for τ, which the paper leaves unaccounted. App. D.3
        gives the metadata half the budget; the votes make better use of it (the departure
        and its measurement: docs/recipes/dpga.md)."""
        p, k = self.params, private.records_per_unit
        stages = [StageSpec(LENGTH_RANGE, "svt", 0.05, sensitivity=k, compositions=2)]
        if private.has_labels:
            stages.append(StageSpec(LABEL_HISTOGRAM, "laplace", 0.1, sensitivity=k))
        stages.append(StageSpec(LENGTH_HISTOGRAM, "laplace", 0.05, sensitivity=k))
        if p.use_keywords and p.keywords_per_sample:
            stages.append(StageSpec(KEYWORD_HISTOGRAM, "laplace", 0.1, sensitivity=k))
        if p.similarity_suppression:
            stages.append(StageSpec(SIMILARITY_THRESHOLD, "noisy_mean", 0.05,
                                    sensitivity=2.0))
        stages.append(StageSpec(VOTING, "subsampled_gaussian",
                                0.65 if p.similarity_suppression else 0.7,
                                compositions=p.iterations, sampling_rate=p.sampling_rate))
        return stages

    def sizes(self, private: DataFacts) -> dict[str, int]:
        """App. D.4's ratios to the elite set (the output): 10,000 initial samples for 2,000
        elites, and 2,000 offspring each by rewriting, filling, crossover and generation."""
        sizes = super().sizes(private)
        n = sizes["n_output"]
        for key, ratio in SIZE_RATIOS.items():
            value = getattr(self.params, key)
            sizes[key] = value if value is not None else ratio * n
        return sizes

    def expected_generations(self, private: DataFacts) -> dict[str, int]:
        p = self.resolved(private).params
        rounds = p.iterations - 1
        probes = 0 if (p.keywords or not (p.use_keywords and p.keywords_per_sample)) else (
            p.keyword_probe_samples * max(1, len(private.label_names or ())))
        return {"generate": probes + p.n_init + rounds * p.n_generate,
                "rewrite": rounds * p.n_rewrite, "fill": rounds * p.n_fill,
                "crossover": rounds * p.n_crossover}

    def plan_notes(self, private: DataFacts, plan: BudgetPlan) -> list[str]:
        p = self.resolved(private).params
        if p.labels_from == "generation" and p.n_init <= p.n_output:
            return [f"dpga: n_init {p.n_init} <= n_output {p.n_output}: the first vote keeps "
                    "every initial sample as an elite, so its share of ε changes nothing; "
                    "raise n_init (the paper: 5 × n_output) or set labels_from: votes"]
        return []

    def iterations(self) -> int:
        return self.params.iterations

    def initial(self, ctx: RunContext) -> dict:
        """DP metadata and τ (§3.2), then N_init samples from conditions drawn from it."""
        meta, tau = self._metadata(ctx, ctx.plan)
        texts, labels = self._generate(ctx, meta, self.params.n_init,
                                       np.random.default_rng([ctx.seed, 0, 0]))
        return {"metadata": meta.to_json(), "tau": tau, "texts": texts, "labels": labels}

    def step(self, ctx: RunContext, state: dict, t: int, last: bool) -> tuple[dict, dict]:
        """Vote (§3.3.1), elites by noisy votes, with similarity suppression if asked
        (§3.3.2), and unless this was the last vote, the next population from them (§3.4)."""
        meta, tau = Metadata.from_json(state["metadata"]), state["tau"]
        texts, labels = distinct(state["texts"], state["labels"])  # elites are distinct texts
        pop_emb = ctx.embed_public(texts)
        votes, labels = vote_on_samples(ctx, texts, pop_emb, labels, label_groups(ctx.private),
                                        self.params.labels_from)
        elites, tau_used = self._select(votes, pop_emb, labels, meta, tau)
        row = {"population": len(texts), "elites": len(elites), "tau": tau_used,
               "noisy_votes_total": float(votes.sum()), "noisy_votes_max": float(votes.max())}
        texts, labels = [texts[i] for i in elites], [labels[i] for i in elites]
        if not last:
            texts, labels = self._expand(ctx, meta, texts, labels, t)
        return {**state, "texts": texts, "labels": labels}, row

    def output(self, ctx: RunContext, state: dict) -> SyntheticSet:
        """The last elite set."""
        return SyntheticSet(state["texts"],
                            state["labels"] if ctx.private.has_labels else None)

    # -- metadata (§3.2) -------------------------------------------------------------------

    def _metadata(self, ctx: RunContext, plan: BudgetPlan) -> tuple[Metadata, float | None]:
        p, private = self.params, ctx.private
        labels = private.label_names
        public_keywords: dict[str, list[str]] = {}
        if p.use_keywords and p.keywords_per_sample:  # public probes: before any release
            public_keywords = p.keywords or self._public_keywords(ctx)
        low, high = private.length_range(plan.stage(LENGTH_RANGE), p.max_words)
        label_probs = (private.label_distribution(plan.stage(LABEL_HISTOGRAM))
                       if labels else None)
        edges = linear_edges(low, high, p.length_bins)
        lengths = Lengths.from_noisy(edges, private.length_histogram(
            plan.stage(LENGTH_HISTOGRAM), edges))
        if not p.use_length:
            lengths = None
        keywords: dict[str, list[str]] = {}
        weights: dict[str, np.ndarray] = {}
        if public_keywords:
            keywords, weights = self._weigh_keywords(ctx, plan, public_keywords)
        tau = None
        if p.similarity_suppression:
            tau = private.similarity_threshold(plan.stage(SIMILARITY_THRESHOLD),
                                               p.similarity_buckets)
        meta = Metadata(labels, label_probs, lengths, keywords, weights)
        ctx.report({"iteration": 0, "length_range": [low, high], "tau": tau,
                    "epsilon_spent": ctx.private.spent()})
        return meta, tau

    def _public_keywords(self, ctx: RunContext) -> dict[str, list[str]]:
        """Candidate keywords from public information only: texts generated from each label
        name, reduced to their class-based TF-IDF terms."""
        groups = label_groups(ctx.private)
        probes = {}
        for label in groups:
            conditions = [Condition(label=label)] * self.params.keyword_probe_samples
            probes[label or ""] = keep_produced(ctx.generator.generate(conditions),
                                                conditions)[0]
        return class_keywords(probes, self.params.keywords_per_label)

    def _weigh_keywords(self, ctx: RunContext, plan: BudgetPlan,
                        keywords: dict[str, list[str]]
                        ) -> tuple[dict[str, list[str]], dict[str, np.ndarray]]:
        """The keyword histogram's DP weights per label. A label without candidates (given
        none, or its probes held none) generates without keywords."""
        labels = ctx.private.label_names
        keywords = {key: words for key, words in keywords.items() if words}
        flat = [(key, word) for key, words in keywords.items() for word in words]
        if not flat:
            return {}, {}
        keys = [key for key, _ in flat]
        keyword_codes = (np.array([labels.index(k) if k in labels else -1 for k in keys])
                         if labels else None)
        stage = plan.stage(KEYWORD_HISTOGRAM)
        votes = ctx.private.keyword_votes(stage, ctx.embed_public([w for _, w in flat]),
                                          keyword_codes)
        weights = {}
        for key in keywords:
            rows = [i for i, k in enumerate(keys) if k == key]
            weights[key] = softmax(votes[rows], temperature=stage.mechanism.noise_scale)
        return keywords, weights

    # -- population ------------------------------------------------------------------------

    def _generate(self, ctx: RunContext, meta: Metadata, n: int,
                  rng: np.random.Generator) -> tuple[list[str], list]:
        groups = meta.groups
        probs = meta.label_probs if meta.label_probs is not None else np.ones(1)
        conditions = []
        for label, count in zip(groups, allocate(n, probs), strict=True):
            conditions += meta.sample(rng, label, int(count), self.params.keywords_per_sample)
        texts, asked = generate_distinct(ctx.generator.generate, conditions)
        return texts, [conditions[i].label for i in asked]

    def _select(self, votes: np.ndarray, pop_emb: np.ndarray, pop_labels: list,
                meta: Metadata, tau: float | None) -> tuple[list[int], float | None]:
        groups = meta.groups
        probs = meta.label_probs if meta.label_probs is not None else np.ones(1)
        chosen: list[int] = []
        taus = []
        for label, quota in zip(groups, allocate(self.params.n_output, probs), strict=True):
            rows = np.array([i for i, y in enumerate(pop_labels) if y == label], dtype=np.int64)
            quota = min(int(quota), len(rows))
            if quota == 0:
                continue
            if tau is None:
                picked = np.argsort(-votes[rows], kind="stable")[:quota]
            else:
                picked, used = select_distinct(votes[rows], pop_emb[rows], quota, tau,
                                               self.params.tau_step)
                taus.append(used)
            chosen += rows[picked].tolist()
        return chosen, (max(taus) if taus else None)

    def _expand(self, ctx: RunContext, meta: Metadata, elites: list[str], elite_labels: list,
                t: int) -> tuple[list[str], list]:
        """Elites carried over, plus rewrite, fill, crossover and fresh generation (§3.4)."""
        p = self.params
        texts, labels = list(elites), list(elite_labels)
        groups = meta.groups
        probs = meta.label_probs if meta.label_probs is not None else np.ones(1)
        by_label = {g: [i for i, y in enumerate(elite_labels) if y == g] for g in groups}
        present = [g for g in groups if by_label[g]]
        weights = np.array([probs[groups.index(g)] for g in present])
        for op, count in (("rewrite", p.n_rewrite), ("fill", p.n_fill),
                          ("crossover", p.n_crossover)):
            rng = np.random.default_rng([ctx.seed, t + 1, ("rewrite", "fill",
                                                           "crossover").index(op) + 1])
            parents, conditions = [], []
            for label, n in zip(present, allocate(count, weights), strict=True):
                pool = by_label[label]
                for _ in range(int(n)):
                    picks = rng.choice(pool, size=2 if op == "crossover" else 1)
                    group = [elites[i] for i in picks]
                    parents.append(group)
                    conditions.append(Condition(label=label, length=len(group[0].split())))
            if not parents:
                continue
            if op == "rewrite":
                out = ctx.generator.rewrite([g[0] for g in parents], conditions,
                                            p.rewrite_strength)
            elif op == "fill":
                masked = [mask_words(g[0], p.fill_mask_rate, rng) for g in parents]
                out = ctx.generator.fill(masked, conditions)
            else:
                out = ctx.generator.crossover(parents, conditions)
            produced, produced_labels = keep_produced(out, [c.label for c in conditions])
            texts += produced
            labels += produced_labels
        fresh_texts, fresh_labels = self._generate(ctx, meta, p.n_generate,
                                                   np.random.default_rng([ctx.seed, t + 1, 4]))
        return texts + fresh_texts, labels + fresh_labels
