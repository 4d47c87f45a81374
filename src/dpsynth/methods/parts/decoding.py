"""Embedding → text through the run's generator: best-of-n rewrites re-ranked by the embedder
(eda's default `decoding: generator`; `decoding: inversion` is the inversion decoder of
backends/offline/inversion.py alone).

For each target embedding of one label:

    sources    = the inversion decoder's text for the target when one is given, and the
                 `neighbours` public texts of that label nearest the target (the
                 generator-written initial population, the decoded parents so far; eda's
                 default is none)
    candidates = `samples` rewrites of the sources under the label (Generator.rewrite), and
                 the inversion text itself
    keep       = the candidate the embedder puts closest (cosine) to the target

The targets are DP outputs (evolved from DP-selected parents), so this is post-processing:
nothing but public text (the sources, the label name, a length) reaches a prompt, and the
target itself only meets the embeddings of public candidates. A small instruction model
writes fluent text but cannot read an embedding; the inversion decoder reads it but writes
broken text; rewrites of the inversion text, the closest kept, score higher downstream than
the inversion text alone (benchmarks/results/eda_decoder.md). Rewriting the nearest public
texts too gets closer in cosine but scores lower: such a rewrite brings that text's topic.

The readability filter scores texts with the same generator where it can (`Generator.score`:
smollm, hf, offline), as per-word perplexity; a generator without token probabilities (pool,
openai) leaves it to the fallback scorer the caller gives.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpsynth.backends.base import FAILED, BackendError, Condition, Embedder, Generator

log = logging.getLogger(__name__)

REWRITE_STRENGTH = 0.5
"""`Generator.rewrite`'s strength for the candidates: keep the meaning, change the words."""
MIN_WORDS = 5
"""The shortest length a rewrite is asked for (otherwise its source's length in words)."""
SCORE_PROMPT = "\n"
"""What a text is scored after: a line break, so every text is scored from its first word."""


@dataclass(frozen=True)
class DecodeSources:
    """What is public about the targets of one label: its name and public texts (with their
    embeddings, rows aligned), and per target an optional text of another decoder."""

    label: str | None
    texts: Sequence[str]
    embeddings: np.ndarray
    hypotheses: Sequence[str] | None = None


class GeneratorDecoder:
    """Best of `samples` generator rewrites per target (see the module docstring)."""

    def __init__(self, generator: Generator, embedder: Embedder, samples: int = 4,
                 neighbours: int = 0, length: int | None = None) -> None:
        if samples < 1:
            raise ValueError(f"samples: need >= 1, got {samples}")
        if neighbours < 0:
            raise ValueError(f"neighbours: need >= 0, got {neighbours}")
        self.generator = generator
        self.embedder = embedder
        self.samples = samples
        self.neighbours = neighbours
        self.length = length

    def sources(self, targets: np.ndarray, public: DecodeSources) -> list[list[str]]:
        """Per target, the texts its candidates are rewritten from: its `neighbours` nearest
        public texts, then the other decoder's text (when given and not empty)."""
        rows: list[list[str]] = []
        near = _nearest(targets, np.asarray(public.embeddings, dtype=np.float32),
                        self.neighbours)
        for i, order in enumerate(near):
            row = list(dict.fromkeys(public.texts[j] for j in order))
            if public.hypotheses is not None and public.hypotheses[i]:
                row.append(public.hypotheses[i])
            rows.append(row)
        return rows

    def decode(self, targets: np.ndarray, public: DecodeSources) -> list[str]:
        """One text per target row: the closest of its candidates ("" where the generator
        produced none and no other decoder's text was given)."""
        targets = np.asarray(targets, dtype=np.float32)
        if not len(targets):
            return []
        sources = self.sources(targets, public)
        asked, owners = [], []
        for i, row in enumerate(sources):
            for s in range(self.samples if row else 0):
                asked.append(row[s % len(row)])
                owners.append(i)
        conditions = [Condition(label=public.label,
                                length=self.length or max(MIN_WORDS, len(text.split())))
                      for text in asked]
        written = (self.generator.rewrite(asked, conditions, REWRITE_STRENGTH)
                   if asked else [])
        candidates: list[list[str]] = [[] for _ in targets]
        for i, text in zip(owners, written, strict=True):
            if text != FAILED:
                candidates[i].append(text)
        if public.hypotheses is not None:
            for i, text in enumerate(public.hypotheses):
                if text:
                    candidates[i].append(text)
        return closest(targets, candidates, self.embedder)

    def scorer(self, fallback=None):
        """A perplexity model for the readability filter: this generator where it can score,
        else `fallback()` (called only then)."""
        try:
            self.generator.score([SCORE_PROMPT], ["a test"])
        except (BackendError, NotImplementedError):
            if fallback is None:
                raise
            log.info("eda: %s cannot score texts; the readability filter uses the offline "
                     "public LM", type(self.generator).__name__)
            return fallback()
        return GeneratorPerplexity(self.generator)


class GeneratorPerplexity:
    """Per-word perplexity under a generator that scores continuations: exp(−log p / words).
    Per word, not per token, because `Generator.score` gives no token counts; the threshold
    it is compared with is calibrated on the same scale (eda's `perplexity_quantile`)."""

    def __init__(self, generator: Generator) -> None:
        self.generator = generator

    def perplexity(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        out = np.full(len(texts), np.inf)
        scored = [i for i, t in enumerate(texts) if t.strip()]
        if scored:
            logp = np.asarray(self.generator.score([SCORE_PROMPT] * len(scored),
                                                   [texts[i] for i in scored]), dtype=float)
            words = np.array([len(texts[i].split()) for i in scored], dtype=float)
            out[scored] = np.exp(-logp / words)
        return out


def closest(targets: np.ndarray, candidates: Sequence[Sequence[str]],
            embedder: Embedder) -> list[str]:
    """Per target row, the candidate whose embedding has the highest cosine to it (the first
    on ties; "" where it has none)."""
    flat = [t for row in candidates for t in row]
    if not flat:
        return ["" for _ in candidates]
    vectors = np.asarray(embedder.encode(flat), dtype=np.float32)
    out, start = [], 0
    for target, row in zip(targets, candidates, strict=True):
        if not row:
            out.append("")
            continue
        sims = vectors[start:start + len(row)] @ target
        out.append(row[int(np.argmax(sims))])
        start += len(row)
    return out


def _nearest(targets: np.ndarray, embeddings: np.ndarray, k: int) -> list[list[int]]:
    """Indices of the `k` rows of `embeddings` nearest (cosine) each target, best first."""
    if not k or not len(embeddings):
        return [[] for _ in targets]
    sims = targets @ embeddings.T
    return [list(np.argsort(-row, kind="stable")[:k]) for row in sims]
