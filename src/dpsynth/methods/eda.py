"""Embedding-EDA (seeds/embedding-eda.md): a population of embeddings evolved towards the
private data, decoded to text by an inversion decoder trained on public text whose output
the run's generator rewrites (the rewrite closest to the embedding kept).

    E_pop = embeddings of N_pb public texts (written by the generator from the label names)
    repeat T:  hist = private nearest-neighbour votes over E_pop             (Alg. 1, 5-9)
               parents = LimitedDomain(hist, K, k); stop when empty          (Alg. 3)
               S_syn = decoded parents with perplexity < H                    (Alg. 1, 15-22)
               E_pop = N_cld draws of the EDA Gaussian of the kept parents    (Alg. 2)
    output S_syn, topped up with decoded, filtered draws of the last Gaussian, each text once

Decoding (`decoding`, public post-processing of DP-selected points) keeps, of several
candidate texts, the one the embedder puts closest to the embedding. The inversion decoder
(`decode_closest`: the shipped 7.4M LM conditioned on the embedding, greedy and a few
samples) reads the embedding but writes broken text. With `generator` (the default) the
run's generator (SmolLM2 by default, so the backend stays the user's) rewrites that text
`rewrite_samples` times, the rewrites join it as candidates, and the same generator scores
readability where it can: the one correction step of the seed's Vec2Text, untrained. At
negligible noise on ag_news (benchmarks/results/eda_decoder.md, 3 seeds) that lifts the
decoded texts' accuracy from 0.778 to 0.795 (the embeddings themselves: 0.810) and their
cosine to the embeddings from 0.339 to 0.354, on every seed, at about ten times the decoding
time. Rewriting the label's public texts nearest the embedding too (`rewrite_neighbours`)
got closer still (0.411) but scored lower (0.745). `inversion` is the inversion decoder
alone, scored by its public LM (the earlier default).

Per label: a private record votes only among its own label's population, each label has its
own parents and Gaussian, and the labels' selections compose in parallel (one charge per
iteration). N_pb and N_cld are split evenly over the labels, the output by a DP label
histogram (`label_fraction` of the budget), as every other recipe's is.

Everything kept between iterations is public: the Gaussian (from DP-selected parents), the
decoded parents, and the seed of the public randomness that draws each population, so a
checkpoint holds a few numbers per label rather than N_cld embeddings.
"""

from __future__ import annotations

import logging
from functools import cached_property
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from dpsynth.backends import Condition, build_inversion_decoder
from dpsynth.data.facts import DataFacts
from dpsynth.errors import ConfigError
from dpsynth.methods.base import IterativeRecipe, RunContext, SyntheticSet, label_groups
from dpsynth.methods.parts.decoding import DecodeSources, GeneratorDecoder
from dpsynth.methods.parts.distinct import DRAW_TRIES, distinct
from dpsynth.methods.parts.gaussian import GaussianModel, estimate
from dpsynth.methods.parts.toolbox import allocate, keep_produced
from dpsynth.privacy.mechanisms import LimitedDomainTopK
from dpsynth.privacy.planning import BudgetPlan, StageSpec
from dpsynth.privacy.stages import LABEL_HISTOGRAM, SELECTION

log = logging.getLogger(__name__)


RECORDS_PER_CANDIDATE = 20
"""N / N_cld when n_offspring is left out: private records a candidate gets a vote from, on
average (docs/recipes/eda.md: 20 scored best on ag_news at ε = 1; the seed's scale is 40)."""


class EdaParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    iterations: int = Field(5, ge=1, description="T, at most; the budget is split over T")
    n_public: int | None = Field(None, ge=1, description="N_pb: initial public texts, all "
                                 "labels; none: n_output (the seed's N_pb = 1,000 beside "
                                 "dpsynth's former 1,000 outputs)")
    n_offspring: int | None = Field(None, ge=1, description="N_cld: population per iteration, "
                                    "all labels; none: N/20 (20 private records a candidate, "
                                    "docs/recipes/eda.md), at least n_parents a label")
    domain_size: int = Field(300, ge=1, description="K, per label")
    n_parents: int = Field(30, ge=1, description="k = N_par, per label")
    alpha: float = Field(0.1, ge=0, le=1, description="EDA smoothing")
    top_r: int = Field(10, ge=1, description="R: parents whose spread enters σ̂")
    perplexity_threshold: float | None = Field(
        None, gt=0, description="H; when omitted, the `perplexity_quantile` of the decoded "
        "initial (public) population")
    perplexity_quantile: float = Field(0.9, gt=0, le=1, description="quantile of the initial "
                                       "population's perplexity that sets H when "
                                       "perplexity_threshold is omitted")
    delta_share: float = Field(0.5, gt=0, lt=1, description="share of δ spent by the "
                               "LimitedDomain bars (T·δ₀); the rest is the PLD's")
    text_words: int = Field(20, ge=1, description="length of the generator-written initial "
                            "texts")
    n_output: int | None = Field(None, ge=1, description="output size: synthetic texts, all "
                                 "labels; none: N, the private set's units")
    label_fraction: float = Field(0.05, ge=0, lt=1, description="budget share of a DP label "
                                  "histogram that gives each label its share of the output; "
                                  "0 splits the output evenly")
    decoding: Literal["generator", "inversion"] = Field(
        "generator", description="how an embedding becomes text. generator: the run's "
        "generator rewrites the inversion decoder's text (and the label's "
        "`rewrite_neighbours` public texts nearest the embedding) `rewrite_samples` times, "
        "and of those and the inversion text the one the embedder puts closest is kept, "
        "readability scored by the same generator where it can score; inversion: the "
        "inversion decoder alone, scored by its public LM (the earlier default; "
        "benchmarks/results/eda_decoder.md)")
    rewrite_samples: int = Field(4, ge=1, description="decoding: generator: generator "
                                 "rewrites per decoded embedding")
    rewrite_neighbours: int = Field(0, ge=0, description="decoding: generator: public texts "
                                    "nearest the embedding that are rewritten too, besides "
                                    "the inversion decoder's text (1 scored lower on ag_news)")
    decoder: str | None = Field(None, description="inversion decoder folder; the shipped one "
                                "when omitted")
    decode_samples: int = Field(8, ge=0, description="sampled hypotheses per decoded "
                                "embedding besides the inversion decoder's greedy one; the "
                                "one the embedder puts closest is kept (0: greedy only)")
    calibration_size: int = Field(200, ge=1, description="initial public texts decoded to "
                                  "calibrate H")

    @model_validator(mode="after")
    def _check(self) -> EdaParams:
        if self.n_parents > self.domain_size:
            raise ValueError(f"n_parents={self.n_parents} exceeds domain_size="
                             f"{self.domain_size}")
        return self


class Eda(IterativeRecipe):
    name: ClassVar[str] = "eda"
    embeds_private: ClassVar[bool] = True
    one_record_per_unit: ClassVar[bool] = True
    state_version: ClassVar[int] = 2  # 2: the output's label shares
    Params: ClassVar[type[BaseModel]] = EdaParams
    params: EdaParams

    def sizes(self, private: DataFacts) -> dict[str, int]:
        """N_pb = the output size (the seed writes 1,000 public texts and gives no output size;
        dpsynth's output was 1,000 beside them). N_cld follows N, not the output: what decides
        whether the selection sees the private data is the votes a candidate gets, N / N_cld;
        the seed has about 40 (120,000 records, N_cld = 3,000), and ag_news scored best at 20
        (docs/recipes/eda.md), so N_cld = N / RECORDS_PER_CANDIDATE, and at least n_parents a
        label."""
        sizes = super().sizes(private)
        p = self.params
        sizes["n_public"] = p.n_public if p.n_public is not None else sizes["n_output"]
        sizes["n_offspring"] = p.n_offspring if p.n_offspring is not None else max(
            -(-private.n_units // RECORDS_PER_CANDIDATE),
            p.n_parents * len(label_groups(private)))
        return sizes

    def validate(self, private: DataFacts) -> None:
        """Also refuse an n_offspring that leaves a label no draws: its population would be
        empty at the second iteration, after releases."""
        super().validate(private)
        labels = len(label_groups(private))
        if self.resolved(private).params.n_offspring < labels:
            raise ConfigError(
                f"recipe.params.n_offspring: {self.params.n_offspring} is split over the "
                f"{labels} labels, so some would draw no candidates; set it to at least "
                f"{labels} (or leave it out: N / {RECORDS_PER_CANDIDATE}, at least "
                f"n_parents a label)")

    def _allocated(self, private: DataFacts) -> bool:
        return bool(self.params.label_fraction) and private.has_labels

    def stages(self, private: DataFacts, delta: float) -> list[StageSpec]:
        """The label histogram, then one LimitedDomain selection per iteration; each
        selection spends δ₀ outside the PLD. Vote counts only grow when a record is added:
        the monotone LimitedDomain applies."""
        p = self.params
        stages = []
        if self._allocated(private):
            stages.append(StageSpec(LABEL_HISTOGRAM, "laplace", p.label_fraction,
                                    sensitivity=private.records_per_unit))
        share = 1.0 - (p.label_fraction if self._allocated(private) else 0.0)
        return [*stages, StageSpec(SELECTION, "limited_domain", share,
                                   compositions=p.iterations, selections=p.n_parents,
                                   domain_size=p.domain_size,
                                   delta=p.delta_share * delta / p.iterations, monotonic=True)]

    def expected_generations(self, private: DataFacts) -> dict[str, int]:
        """The public texts, and with generator decoding its rewrites: for the calibration,
        every parent if all T iterations run (k a label) and the output with one round of
        top-up (an estimate: a run that stops early decodes fewer)."""
        p = self.resolved(private).params
        out = {"generate": p.n_public}
        if p.decoding == "generator":
            labels = len(private.label_names or ()) or 1
            decoded = (min(p.calibration_size, p.n_public)
                       + p.iterations * p.n_parents * labels + 2 * p.n_output)
            out["rewrite"] = decoded * p.rewrite_samples
        return out

    def plan_notes(self, private: DataFacts, plan: BudgetPlan) -> list[str]:
        """Selection drowned: each record votes once per iteration, so a candidate holds
        N / n_offspring votes on average; Gumbel noise of 4 times that picks parents close
        to at random (trec ε = 1: 24.7 against 4.5, 0.300 ± 0.006 at a majority class of
        0.276; ag_news ε = 1: 25.3 against 6.7, 0.721 ± 0.051)."""
        scale = plan.stage(SELECTION).mechanism.noise_scale
        votes = private.n_units / self.resolved(private).params.n_offspring
        if scale < 4 * votes:
            return []
        return [f"eda: the selection's Gumbel noise (scale {scale:.3g}) is over 4 times the "
                f"{votes:.2g} votes a candidate gets on average (N / n_offspring), so parents "
                "are picked close to at random; give it more ε, or fewer selections "
                "(n_parents, iterations), or a smaller n_offspring"]

    @cached_property
    def _decoder(self):
        return build_inversion_decoder(self.params.decoder)

    def _scorer(self, ctx: RunContext):
        """The perplexity model of the readability filter: with generator decoding the run's
        generator where it can score, else the inversion decoder's public LM."""
        generator, scorer = self.__dict__.get("_scorer_of", (None, None))
        if generator is not ctx.generator:
            scorer = (self._rewriter(ctx).scorer(fallback=self._decoder.scorer)
                      if self.params.decoding == "generator" else self._decoder.scorer())
            self.__dict__["_scorer_of"] = (ctx.generator, scorer)
        return scorer

    def _rewriter(self, ctx: RunContext) -> GeneratorDecoder:
        return GeneratorDecoder(ctx.generator, ctx.embedder, self.params.rewrite_samples,
                                self.params.rewrite_neighbours)

    def run(self, ctx: RunContext) -> SyntheticSet:
        self._decoder.check_embedder(ctx.embedder)
        groups = len(label_groups(ctx.private))
        largest = max(int(_even(n, groups).max())
                      for n in (self.params.n_offspring, self.params.n_public))
        _warn_of_the_bar(ctx.plan.stage(SELECTION).mechanism, largest, groups)
        return super().run(ctx)

    def iterations(self) -> int:
        return self.params.iterations

    def initial(self, ctx: RunContext) -> dict[str, Any]:
        return self._initial(ctx, label_groups(ctx.private))

    def finished(self, state: dict[str, Any]) -> bool:
        return all(state["stopped"])

    def step(self, ctx: RunContext, state: dict[str, Any], t: int,
             last: bool) -> tuple[dict[str, Any], dict[str, Any]]:
        """Alg. 1 lines 5-28 for every label still running: populations, one DP selection
        for all labels (they vote in disjoint histograms), filtered parents, new Gaussians."""
        groups = label_groups(ctx.private)
        sizes = _even(self.params.n_offspring, len(groups))
        live = [g for g in range(len(groups)) if not state["stopped"][g]]
        pops = {g: self._population(ctx, state, g, t, int(sizes[g])) for g in live}
        codes = np.concatenate([np.full(len(pops[g]), g) for g in live])
        picked = ctx.private.select_parents(ctx.plan.stage(SELECTION),
                                            np.concatenate([pops[g] for g in live]), codes)
        selected: dict[str, int] = {}
        kept_by_label: dict[str, int] = {}
        for g in live:
            offset = int(np.flatnonzero(codes == g)[0])
            chosen = pops[g][[i - offset for i in picked[g]]]
            selected[_key(groups[g])] = len(chosen)
            kept_by_label[_key(groups[g])] = self._next_generation(ctx, state, g, t, chosen)
        row = {"iteration": t + 1, "selected": sum(selected.values()),
               "kept": sum(kept_by_label.values()),
               "labels_running": sum(not s for s in state["stopped"]),
               "perplexity_threshold": state["threshold"], "epsilon_spent": ctx.private.spent(),
               "selected_by_label": selected, "kept_by_label": kept_by_label}
        state["history"].append(row)
        return state, row

    def output(self, ctx: RunContext, state: dict[str, Any]) -> SyntheticSet:
        return self._output(ctx, state, label_groups(ctx.private))

    def _initial(self, ctx: RunContext, groups: list[str | None]) -> dict[str, Any]:
        """The output's label shares (a DP label histogram, or even); N_pb public texts
        written from the label names alone; H from their decodings."""
        p = self.params
        shares = (ctx.private.label_distribution(ctx.plan.stage(LABEL_HISTOGRAM))
                  if self._allocated(ctx.private) else np.full(len(groups), 1.0 / len(groups)))
        sizes = _even(p.n_public, len(groups))
        conditions = [Condition(label=g, length=p.text_words)
                      for g, n in zip(groups, sizes, strict=True) for _ in range(int(n))]
        texts, owners = keep_produced(ctx.generator.generate(conditions),
                                      [c.label for c in conditions])
        public = [[t for t, y in zip(texts, owners, strict=True) if y == g] for g in groups]
        threshold = p.perplexity_threshold
        state = {"shares": shares.tolist(), "public": public, "threshold": threshold,
                 "models": [None] * len(groups),
                 "parents": [[] for _ in groups], "stopped": [not t for t in public],
                 "history": []}
        if threshold is None:
            pick = np.unique(np.linspace(0, len(texts) - 1, min(len(texts),
                                                                p.calibration_size)).astype(int))
            decoded = []
            for g in range(len(groups)):
                mine = [texts[i] for i in pick if owners[i] == groups[g]]
                if mine:
                    decoded += self._decode(ctx, ctx.embed_public(mine), (0,),
                                            *self._sources(ctx, state, g))
            scores = self._scorer(ctx).perplexity(decoded)
            finite = scores[np.isfinite(scores)]
            state["threshold"] = float(np.quantile(finite, p.perplexity_quantile)) \
                if len(finite) else float("inf")
        return state

    def _next_generation(self, ctx: RunContext, state: dict[str, Any], g: int, t: int,
                         chosen: np.ndarray) -> int:
        """Filter label `g`'s selected parents by readability and fit Alg. 2's Gaussian on
        those kept; a label with none left stops (Alg. 1 lines 12-14, 27-28). Returns how
        many were kept."""
        kept, texts = self._readable(ctx, state, g, chosen, (t + 1, g))
        if not kept:
            state["stopped"][g] = True
            return 0
        state["models"][g] = estimate(chosen[kept], self.params.alpha,
                                      self.params.top_r).to_json()
        state["parents"][g] = texts
        return len(kept)

    def _population(self, ctx: RunContext, state: dict[str, Any], g: int, t: int,
                    size: int) -> np.ndarray:
        """E_pop of label `g` at iteration `t`: the public texts' embeddings until a first
        Gaussian exists, then `size` draws from it (seeded by run, iteration and label)."""
        model = state["models"][g]
        if model is None:
            return ctx.embed_public(state["public"][g])
        return draw_population(model, ctx.seed, t, g, size)

    @staticmethod
    def _sources(ctx: RunContext, state: dict[str, Any],
                 g: int) -> tuple[str | None, list[str]]:
        """Label `g` and its public texts: its initial texts and its last decoded parents."""
        return (label_groups(ctx.private)[g],
                list(dict.fromkeys(state["public"][g] + state["parents"][g])))

    def _decode(self, ctx: RunContext, embeddings: np.ndarray, key: tuple[int, ...],
                label: str | None, public: list[str]) -> list[str]:
        """Texts for public embeddings of `label`. The inversion decoder's best of greedy
        and `decode_samples` samples, its sampling seeded by the run's seed and `key` (step,
        label) so that a resumed run decodes as the unbroken one did; with generator
        decoding, that text and the generator's rewrites of the `public` texts (the label's)
        nearest each embedding are the candidates, the closest kept."""
        seed = int(np.random.SeedSequence([ctx.seed, *key]).generate_state(1)[0])
        inverted = self._decoder.decode_closest(embeddings, ctx.embedder,
                                                self.params.decode_samples, seed=seed)
        if self.params.decoding == "inversion" or not len(embeddings):
            return inverted
        return self._rewriter(ctx).decode(embeddings, DecodeSources(
            label, public, ctx.embed_public(public), inverted))

    def _readable(self, ctx: RunContext, state: dict[str, Any], g: int, embeddings: np.ndarray,
                  key: tuple[int, ...]) -> tuple[list[int], list[str]]:
        """Indices and decoded texts of label `g`'s embeddings whose decoding passes the
        perplexity filter (Alg. 1 lines 16-22), in their given order."""
        if not len(embeddings):
            return [], []
        texts = self._decode(ctx, embeddings, key, *self._sources(ctx, state, g))
        scores = self._scorer(ctx).perplexity(texts)
        kept = [i for i, (t, s) in enumerate(zip(texts, scores, strict=True))
                if t and s <= state["threshold"]]
        return kept, [texts[i] for i in kept]

    def _output(self, ctx: RunContext, state: dict[str, Any],
                groups: list[str | None]) -> SyntheticSet:
        """Each label's share of the output: its last S_syn, topped up with readable
        decodings of draws from its last Gaussian (a label never selected from falls back to
        decodings of its public texts); each text once over all labels, a decoding that
        repeats one already kept replaced by further draws, for up to DRAW_TRIES more rounds."""
        quotas = allocate(self.params.n_output, np.asarray(state["shares"]))
        texts: list[str] = []
        labels: list[str | None] = []
        for g, quota in enumerate(quotas):
            chosen = distinct(state["parents"][g], state["parents"][g], seen=texts)[0]
            chosen = chosen[: int(quota)]
            for extra in range(1 + DRAW_TRIES):
                need = int(quota) - len(chosen)
                if need <= 0:
                    break
                t = self.params.iterations + extra
                pool = self._population(ctx, state, g, t, 2 * need)
                drawn = self._readable(ctx, state, g, pool[: 2 * need], (t + 1, g))[1]
                chosen += distinct(drawn, drawn, seen=texts + chosen)[0][:need]
            texts += chosen
            labels += [groups[g]] * len(chosen)
        return SyntheticSet(texts, labels if groups != [None] else None)


def draw_population(model: dict[str, Any], seed: int, t: int, g: int,
                    size: int) -> np.ndarray:
    """`size` draws of label `g`'s Gaussian (as stored in a checkpoint) for iteration `t`,
    seeded by the run's public seed, iteration and label: a resumed run, or a benchmark
    reading the checkpoint, draws the same population."""
    return GaussianModel.from_json(model).sample(size, np.random.default_rng([seed, t, g]))


def _warn_of_the_bar(mechanism: LimitedDomainTopK, population: int, labels: int) -> None:
    """Say, from public parameters only, how far above the (K+1)-th count a parent must
    stand when a label's population exceeds K: on small private sets nothing clears it."""
    k = mechanism.domain_size
    if population <= k:
        return
    bar = mechanism.bar_margin(population)
    log.warning("eda: populations of up to %d per label exceed domain_size K = %d, so each "
                "selection releases only candidates whose noisy count clears the ⊥ bar, "
                "about %.0f votes above the (K+1)-th count (ε₀ = %.3g, δ₀ = %.2g); on a "
                "small private set the run may stop early. n_public and n_offspring up to "
                "K × labels = %d keep every selection plain top-k.", population, k, bar,
                mechanism.epsilon, mechanism.delta, k * labels)


def _even(n: int, parts: int) -> np.ndarray:
    """`n` split over `parts` labels as evenly as integers allow (a public choice)."""
    return allocate(n, np.full(parts, 1.0 / parts))


def _key(label: str | None) -> str:
    return label if label is not None else ""
