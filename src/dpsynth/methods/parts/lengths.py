"""Text lengths from a DP length histogram: public bins, the stage that releases the histogram,
and lengths drawn from it for the generator's conditions. Everything here but the release
(`ctx.private.length_histogram`) is public post-processing.

Without a length, a generator writes the length it prefers: the offline default wrote
56-word paragraphs for 15-word tweets (issue 39). Bins are fixed by the config, never by the
data, so the histogram's shape is public and one record moves one count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from dpsynth.backends.base import Condition
from dpsynth.data.facts import DataFacts
from dpsynth.methods.base import RunContext
from dpsynth.privacy.planning import StageSpec
from dpsynth.privacy.stages import LENGTH_HISTOGRAM

SPURIOUS_BINS = 0.05
"""The chance that any bin no record falls in survives the floor. Laplace noise on empty bins
would otherwise draw lengths from all of them, and a few long texts among short ones gather
votes out of proportion: on 300 tweets (15 words) one empty 64-82-word bin that cleared a floor
of 3 noise scales held 5% of the histogram, and 25% of pe's output ran past 96 words. With B
bins the floor is b·ln(B / (2·SPURIOUS_BINS)) for noise scale b (a Laplace tail exceeds c·b
with probability e^-c / 2): 5.4·b for 22 bins. A real bin of fewer records is lost with it
(the tails of a small set)."""


class LengthParams(BaseModel):
    """The length histogram's settings, shared by the recipes that condition on it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    length_fraction: float = Field(0.1, ge=0, lt=1, description="budget share of a DP "
                                   "length histogram whose lengths the generator is asked for; "
                                   "0: no length is asked for (the generator's own)")
    length_bins: int = Field(24, ge=1, description="bins of the DP length histogram, spaced "
                             "geometrically over [1, max_words] words (about 30% wide each "
                             "at the defaults, from tweets to long reviews)")
    max_words: int = Field(512, ge=1, description="upper end of the length histogram; longer "
                           "texts count in its last bin")


def length_stages(params: LengthParams, private: DataFacts) -> list[StageSpec]:
    """The Laplace length histogram, when asked for: one record moves one count, so its
    sensitivity is the records a unit may hold."""
    if not params.length_fraction:
        return []
    return [StageSpec(LENGTH_HISTOGRAM, "laplace", params.length_fraction,
                      sensitivity=private.records_per_unit)]


def geometric_edges(max_words: int, n_bins: int) -> np.ndarray:
    """Integer bin edges over [1, max_words], each bin a fixed ratio wider than the last (the
    narrow ones at the bottom merged): the same relative resolution for a tweet and a review."""
    return np.unique(np.geomspace(1, max_words + 1, n_bins + 1).round().astype(np.int64))


def linear_edges(low: int, high: int, n_bins: int) -> np.ndarray:
    """Integer bin edges over [low, high] in `n_bins` equal steps (fewer for a narrow range)."""
    return np.unique(np.linspace(low, high + 1, n_bins + 1).round().astype(np.int64))


@dataclass(frozen=True)
class Lengths:
    """A distribution over length bins, from a DP histogram: a length is a bin drawn by its
    probability, then a length within it uniformly."""

    edges: np.ndarray
    probs: np.ndarray

    @classmethod
    def from_noisy(cls, edges: np.ndarray, noisy: np.ndarray,
                   floor: float = 0.0) -> Lengths | None:
        """Counts below `floor` set to zero, the rest normalised; None when none is left (a
        generator then writes its own lengths)."""
        kept = np.where(np.asarray(noisy, dtype=np.float64) >= max(floor, 0.0), noisy, 0.0)
        kept = np.clip(kept, 0.0, None)
        return cls(np.asarray(edges), kept / kept.sum()) if kept.sum() > 0 else None

    def draw(self, rng: np.random.Generator) -> int:
        b = rng.choice(len(self.probs), p=self.probs)
        return int(rng.integers(self.edges[b], max(self.edges[b + 1], self.edges[b] + 1)))

    def to_json(self) -> dict:
        return {"edges": self.edges.tolist(), "probs": self.probs.tolist()}

    @classmethod
    def from_json(cls, data: dict | None) -> Lengths | None:
        if data is None:
            return None
        return cls(np.asarray(data["edges"], dtype=np.int64), np.asarray(data["probs"]))


def dp_lengths(ctx: RunContext, params: LengthParams) -> Lengths | None:
    """The length distribution of the private texts from the planned DP histogram over
    `params`' bins (None when the recipe asks for none, or noise left no bin standing)."""
    if not params.length_fraction:
        return None
    stage = ctx.plan.stage(LENGTH_HISTOGRAM)
    edges = geometric_edges(params.max_words, params.length_bins)
    noisy = ctx.private.length_histogram(stage, edges)
    return Lengths.from_noisy(edges, noisy, length_floor(len(edges) - 1, stage.noise_scale))


def length_floor(n_bins: int, noise_scale: float) -> float:
    """The count a bin's noisy count must reach to be drawn from (SPURIOUS_BINS)."""
    return noise_scale * float(np.log(n_bins / (2 * SPURIOUS_BINS)))


def length_conditions(labels: list, lengths: Lengths | None,
                      rng: np.random.Generator) -> list[Condition]:
    """One request per label given, each with a length drawn from `lengths` (none without)."""
    return [Condition(label=y, length=lengths.draw(rng) if lengths is not None else None)
            for y in labels]
