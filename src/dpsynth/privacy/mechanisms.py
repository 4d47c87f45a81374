"""DP mechanisms: each one is described by its parameters and its event before any noise.

A mechanism object is immutable. `event` (a dp_accounting DpEvent) is computed from the
parameters alone, so the ledger can charge it — and refuse it — before `_release` draws any
noise. Recipes never call `_release` themselves: they call `PrivacyLedger.release`.

Sensitivities are for adding or removing one privacy unit. Value releases work on an integer
grid: the query is divided by a power-of-two `granularity` (1 for counts); `integer_valued`
queries must land on the grid exactly, other queries are rounded and their per-coordinate
sensitivity grows by one grid step to cover the rounding.

`linf_sensitivity` and `max_changed` describe how one unit moves a vector: at most
`max_changed` coordinates, each by at most `linf_sensitivity`. A PATE vote (one teacher moves
one vote) is (1, 2). A count histogram where a unit holds k records is (k, 1), not (1, k):
the k records may all fall into one bin, and one coordinate moving by k costs more than k
coordinates moving by one (for Laplace and Gaussian alike; tests/privacy check it against
dp_accounting).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
from dp_accounting import dp_event

from dpsynth.privacy.events import (
    ApproximateDpEvent,
    BoundedRangeDpEvent,
    DiscreteGaussianDpEvent,
    PureDpEvent,
)
from dpsynth.privacy.noise import NoiseSource


class Mechanism(ABC):
    """A DP release: `event` for the ledger, `_release` to draw the noisy answer."""

    kind: ClassVar[str]

    @property
    @abstractmethod
    def event(self) -> dp_event.DpEvent:
        """The privacy event, from parameters alone."""

    @property
    @abstractmethod
    def sensitivity(self) -> float:
        """The sensitivity the noise is calibrated to (L1, L2 or score, per mechanism)."""

    @property
    @abstractmethod
    def noise_scale(self) -> float:
        """The scale of the noise drawn (Laplace b, Gaussian σ, Gumbel β, ...)."""

    @abstractmethod
    def _release(self, values: Any, noise: NoiseSource) -> Any:
        """Draw the noisy answer; called by the ledger after the charge succeeded."""


def _positive(name: str, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be finite and > 0, got {value}")


def _check_grid(granularity: float) -> None:
    _positive("granularity", granularity)
    if math.frexp(granularity)[0] != 0.5:
        raise ValueError(f"granularity must be a power of two, got {granularity}")


@dataclass(frozen=True)
class _GridQuery:
    """How a real-valued query is put on the integer grid, and its sensitivity there."""

    linf_sensitivity: float
    max_changed: int
    integer_valued: bool
    granularity: float

    def __post_init__(self) -> None:
        _positive("linf_sensitivity", self.linf_sensitivity)
        _check_grid(self.granularity)
        if self.max_changed < 1:
            raise ValueError(f"max_changed must be >= 1, got {self.max_changed}")

    @property
    def steps(self) -> int:
        """Per-coordinate sensitivity in grid steps (one more when values are rounded)."""
        base = math.ceil(self.linf_sensitivity / self.granularity)  # exact: γ is 2^k
        return base if self.integer_valued else base + 1

    def to_grid(self, values: Any) -> np.ndarray:
        scaled = np.asarray(values, dtype=float) / self.granularity
        if not np.all(np.isfinite(scaled)):
            raise ValueError("values must be finite")
        grid = np.rint(scaled)
        if self.integer_valued and not np.array_equal(grid, scaled):
            bad = int(np.flatnonzero(grid != scaled)[0])
            # the value itself is private: name its position only
            raise ValueError(f"value at index {bad} is not a multiple of granularity "
                             f"{self.granularity}; pass integer_valued=False to round it")
        return grid.astype(np.int64)


class _GridValues(Mechanism):
    """A value release on the integer grid with integer noise: the part Laplace and Gaussian
    share. One coordinate's event, composed over the `max_changed` coordinates that move."""

    linf_sensitivity: float
    max_changed: int
    integer_valued: bool
    granularity: float

    @property
    @abstractmethod
    def _scale(self) -> float: ...

    @abstractmethod
    def _one_coordinate(self) -> dp_event.DpEvent: ...

    @abstractmethod
    def _draw(self, noise: NoiseSource, scale: float, size: int) -> np.ndarray: ...

    def _check(self, name: str) -> None:
        _positive(name, self._scale)
        self._grid  # noqa: B018 - validates the grid parameters

    @property
    def _grid(self) -> _GridQuery:
        return _GridQuery(self.linf_sensitivity, self.max_changed, self.integer_valued,
                          self.granularity)

    @property
    def event(self) -> dp_event.DpEvent:
        one = self._one_coordinate()
        return one if self.max_changed == 1 else dp_event.SelfComposedDpEvent(one,
                                                                              self.max_changed)

    @property
    def noise_scale(self) -> float:
        return self._scale

    def _release(self, values: Any, noise: NoiseSource) -> np.ndarray:
        grid = self._grid.to_grid(values)
        drawn = self._draw(noise, self._scale / self.granularity, grid.size)
        return (grid + drawn.reshape(grid.shape)) * self.granularity


@dataclass(frozen=True)
class Laplace(_GridValues):
    """Discrete Laplace noise of scale `scale` on the grid: ε = max_changed·steps·γ/scale.

    With one coordinate changed (a count histogram under add/remove) the event is the exact
    discrete Laplace PLD; with several it is their composition.
    """

    scale: float
    linf_sensitivity: float = 1.0
    max_changed: int = 1
    integer_valued: bool = True
    granularity: float = 1.0
    kind: ClassVar[str] = "laplace"

    def __post_init__(self) -> None:
        self._check("scale")

    @property
    def _scale(self) -> float:
        return self.scale

    @property
    def epsilon(self) -> float:
        return self.max_changed * self._grid.steps * self.granularity / self.scale

    def _one_coordinate(self) -> dp_event.DpEvent:
        return dp_event.DiscreteLaplaceDpEvent(self.granularity / self.scale, self._grid.steps)

    @property
    def sensitivity(self) -> float:
        return self.linf_sensitivity * self.max_changed

    def _draw(self, noise: NoiseSource, scale: float, size: int) -> np.ndarray:
        return noise.discrete_laplace(scale, size)


@dataclass(frozen=True)
class Gaussian(_GridValues):
    """Discrete Gaussian noise (parameter σ) on the grid, the L2 analogue of `Laplace`.

    L2 sensitivity = linf_sensitivity·√max_changed; a PATE vote histogram, where one teacher
    moves one vote between two classes, is `linf_sensitivity=1, max_changed=2` (√2).
    """

    sigma: float
    linf_sensitivity: float = 1.0
    max_changed: int = 1
    integer_valued: bool = True
    granularity: float = 1.0
    kind: ClassVar[str] = "gaussian"

    def __post_init__(self) -> None:
        self._check("sigma")

    @property
    def _scale(self) -> float:
        return self.sigma

    def _one_coordinate(self) -> dp_event.DpEvent:
        return DiscreteGaussianDpEvent(self.sigma / self.granularity, self._grid.steps)

    @property
    def sensitivity(self) -> float:
        return self.linf_sensitivity * math.sqrt(self.max_changed)

    def _draw(self, noise: NoiseSource, scale: float, size: int) -> np.ndarray:
        return noise.discrete_gaussian(scale, size)


@dataclass(frozen=True)
class Votes:
    """What a vote histogram is built from: each unit's vote (a bin index) and the number of
    bins, which the candidates fix at release time (the event does not depend on it)."""

    targets: Any
    n_bins: int


@runtime_checkable
class VoteTable(Protocol):
    """Votes held elsewhere, by a cluster's workers (`dpsynth.private.engine.ray`): how many there
    are, and the counts of the votes a sample keeps (`keep`: one bool per vote, in the order
    a local array of the same votes would have). The same sample gives the same histogram."""

    def __len__(self) -> int: ...

    def histogram(self, keep: np.ndarray, n_bins: int) -> np.ndarray: ...


@dataclass(frozen=True)
class SubsampledGaussianHistogram(Mechanism):
    """Each unit votes for one of the bins; units are Poisson-sampled at `sampling_rate`,
    the sampled votes counted, and discrete Gaussian noise σ added (L2 sensitivity 1)."""

    sigma: float
    sampling_rate: float
    kind: ClassVar[str] = "subsampled_gaussian"

    def __post_init__(self) -> None:
        _positive("sigma", self.sigma)
        if not 0 < self.sampling_rate <= 1:
            raise ValueError(f"sampling_rate must be in (0, 1], got {self.sampling_rate}")

    @property
    def event(self) -> dp_event.DpEvent:
        return dp_event.PoissonSampledDpEvent(self.sampling_rate,
                                              DiscreteGaussianDpEvent(self.sigma, 1))

    @property
    def sensitivity(self) -> float:
        return 1.0

    @property
    def noise_scale(self) -> float:
        return self.sigma

    def _release(self, values: Votes, noise: NoiseSource) -> np.ndarray:
        n_bins = values.n_bins
        if n_bins < 1:
            raise ValueError(f"n_bins must be >= 1, got {n_bins}")
        if isinstance(values.targets, VoteTable):
            table = values.targets
            counts = table.histogram(noise.poisson_sample(len(table), self.sampling_rate),
                                     n_bins)
        else:
            votes = np.asarray(values.targets, dtype=np.int64).ravel()
            if votes.size and (votes.min() < 0 or votes.max() >= n_bins):
                bad = int(np.flatnonzero((votes < 0) | (votes >= n_bins))[0])
                raise ValueError(f"votes must lie in [0, {n_bins}); the vote at index {bad} "
                                 "does not")
            kept = votes[noise.poisson_sample(votes.size, self.sampling_rate)]
            counts = np.bincount(kept, minlength=n_bins)
        return (counts + noise.discrete_gaussian(self.sigma, n_bins)).astype(float)


@dataclass(frozen=True)
class AboveThreshold(Mechanism):
    """Sparse vector, AboveThreshold (Dwork & Roth Alg. 1; dpga-textsyn App. B.2): ε-DP.

    Threshold noise Lap(2Δ/ε), query noise Lap(4Δ/ε); releases the index of the first query
    whose noisy answer reaches the noisy threshold, or None when none does.
    """

    epsilon: float
    threshold: float
    query_sensitivity: float = 1.0
    kind: ClassVar[str] = "svt"

    def __post_init__(self) -> None:
        _positive("epsilon", self.epsilon)
        _positive("query_sensitivity", self.query_sensitivity)

    @property
    def event(self) -> dp_event.DpEvent:
        return PureDpEvent(self.epsilon)

    @property
    def sensitivity(self) -> float:
        return self.query_sensitivity

    @property
    def noise_scale(self) -> float:
        return 2 * self.query_sensitivity / self.epsilon

    def _release(self, values: Sequence[float], noise: NoiseSource) -> int | None:
        answers = np.asarray(values, dtype=float)
        noisy_threshold = self.threshold + noise.laplace(self.noise_scale, 1)[0]
        noisy = answers + noise.laplace(2 * self.noise_scale, answers.size)
        hits = np.flatnonzero(noisy >= noisy_threshold)
        return int(hits[0]) if hits.size else None


@dataclass(frozen=True)
class ExponentialTopK(Mechanism):
    """One-shot Gumbel top-k: k exponential-mechanism selections of ε each (peeling).

    Gumbel scale 2Δ/ε, or Δ/ε when scores only move one way between neighbours (counts under
    add/remove). Releases k indices, best first. Event: k-fold composition of ε-DP.
    """

    epsilon: float
    k: int = 1
    score_sensitivity: float = 1.0
    monotonic: bool = False
    kind: ClassVar[str] = "exponential"

    def __post_init__(self) -> None:
        _positive("epsilon", self.epsilon)
        _positive("score_sensitivity", self.score_sensitivity)
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")

    @property
    def event(self) -> dp_event.DpEvent:
        one = PureDpEvent(self.epsilon)
        return one if self.k == 1 else dp_event.SelfComposedDpEvent(one, self.k)

    @property
    def sensitivity(self) -> float:
        return self.score_sensitivity

    @property
    def noise_scale(self) -> float:
        return (1 if self.monotonic else 2) * self.score_sensitivity / self.epsilon

    def _release(self, values: Sequence[float], noise: NoiseSource) -> list[int]:
        scores = np.asarray(values, dtype=float)
        if scores.size < self.k:
            raise ValueError(f"need at least k={self.k} scores, got {scores.size}")
        noisy = scores + noise.gumbel(self.noise_scale, scores.size)
        return [int(i) for i in np.argsort(-noisy, kind="stable")[: self.k]]


def report_noisy_max(epsilon: float, score_sensitivity: float = 1.0,
                     monotonic: bool = False) -> ExponentialTopK:
    """Report-noisy-max with Gumbel noise: the exponential mechanism choosing one index."""
    return ExponentialTopK(epsilon, 1, score_sensitivity, monotonic)


@dataclass(frozen=True)
class ExponentialSample(Mechanism):
    """One draw of the exponential mechanism: index j with probability ∝ exp(score_j / T),
    by Gumbel-max (Gumbel noise of scale T, the temperature).

    `score_range` bounds how one unit moves the scores: every score moves by an amount in one
    interval of that width (a unit adds a clipped value in [-C, C]/B to each score: width
    2C/B). Each output's log-probability then moves within an interval of width
    score_range/T, so the draw is ε-bounded-range (Durfee & Rogers 2019) with
    ε = score_range/T: ε-DP, and ε²/8-zCDP for composition. Scores of -inf (tokens outside
    a public candidate set) are never drawn.
    """

    temperature: float
    score_range: float
    kind: ClassVar[str] = "exponential_sample"

    def __post_init__(self) -> None:
        _positive("temperature", self.temperature)
        _positive("score_range", self.score_range)

    @property
    def epsilon(self) -> float:
        return self.score_range / self.temperature

    @property
    def event(self) -> dp_event.DpEvent:
        return BoundedRangeDpEvent(self.epsilon)

    @property
    def sensitivity(self) -> float:
        return self.score_range

    @property
    def noise_scale(self) -> float:
        return self.temperature

    def probabilities(self, values: Sequence[float]) -> np.ndarray:
        """The exact output distribution (what the Gumbel-max draw samples from)."""
        z = np.asarray(values, dtype=np.float64) / self.temperature
        z = np.exp(z - np.max(z))
        return z / z.sum()

    def _release(self, values: Sequence[float], noise: NoiseSource) -> int:
        scores = np.asarray(values, dtype=np.float64).ravel()
        if scores.size == 0 or not np.isfinite(scores).any() or np.isnan(scores).any() \
                or np.isposinf(scores).any():
            raise ValueError("need at least one finite score, none NaN or +inf")
        return int(np.argmax(scores + noise.gumbel(self.temperature, scores.size)))


@runtime_checkable
class ScoreSequences(Protocol):
    """The scores of the next draw of each of a group of sequences drawn in lockstep (one draw
    each per round), given the draws so far: `next_scores(drawn)` gives, per sequence,
    (candidate ids, their scores), or None where that sequence is finished; `drawn` holds each
    sequence's candidate ids drawn so far."""

    def next_scores(self, drawn: Sequence[list[int]]
                    ) -> list[tuple[np.ndarray, np.ndarray] | None]: ...


@runtime_checkable
class GroupedSequences(Protocol):
    """Sequences to draw, in groups drawn in lockstep: `groups(start)` gives the (start, stop)
    of each group from sequence `start` on, and `together(start, stop)` the group's
    `ScoreSequences`."""

    def __len__(self) -> int: ...

    def groups(self, start: int) -> Iterable[tuple[int, int]]: ...

    def together(self, start: int, stop: int) -> ScoreSequences: ...


class ReleasedInParts(Mechanism):
    """A release whose answer is a list of parts drawn one after another (DP decoding: a text
    per part). The ledger journals each part as it is drawn, so a run killed inside a long
    release resumes after the parts journaled instead of drawing them again; the charge, made
    before the first part, covers them all. Only parts drawn under the same `layout` are
    continued: which data feeds which part decides that the parts compose in parallel."""

    layout: str
    """A public digest of which data feeds which part."""

    def _release(self, values: Any, noise: NoiseSource) -> list:
        return self._release_from(values, noise, [], lambda index, part: None)

    @abstractmethod
    def _release_from(self, values: Any, noise: NoiseSource, done: list,
                      on_part: Callable[[int, Any], None]) -> list:
        """`done` followed by the parts of `values` after the first `len(done)`, calling
        `on_part(index, part)` as each is drawn."""


@dataclass(frozen=True)
class DisjointSequences(ReleasedInParts):
    """Sequences of up to `length` adaptive `ExponentialSample` draws, the sequences computed
    from disjoint parts of the data (private decoding: a text per disjoint batch of records,
    one draw per token), drawn group by group in lockstep (`GroupedSequences`).

    One unit is in one part, so it moves one sequence's scores only: the sequences compose
    in parallel, and the event is one sequence's, `length` draws composed adaptively (a
    sequence that finishes early has made fewer; the charge is for `length`). Which
    sequences share a round changes only the order the noise is drawn in. Releases the
    candidate ids drawn, one list per sequence, each group's as it finishes."""

    step: ExponentialSample
    length: int
    layout: str
    """Which records feed which sequence (a digest of the batches' public layout)."""

    def __post_init__(self) -> None:
        if self.length < 1:
            raise ValueError(f"length must be >= 1, got {self.length}")

    @property
    def kind(self) -> str:  # type: ignore[override]
        return f"disjoint_sequences_{self.step.kind}"

    @property
    def event(self) -> dp_event.DpEvent:
        one = self.step.event
        return one if self.length == 1 else dp_event.SelfComposedDpEvent(one, self.length)

    @property
    def sensitivity(self) -> float:
        return self.step.sensitivity

    @property
    def noise_scale(self) -> float:
        return self.step.noise_scale

    def _release_from(self, values: GroupedSequences, noise: NoiseSource,
                      done: list, on_part: Callable[[int, Any], None]) -> list[list[int]]:
        out = list(done)
        for start, stop in values.groups(len(done)):
            for sequence in self._lockstep(values.together(start, stop), stop - start, noise):
                out.append(sequence)
                on_part(len(out) - 1, sequence)
        return out

    def _lockstep(self, group: ScoreSequences, size: int, noise: NoiseSource
                  ) -> list[list[int]]:
        drawn: list[list[int]] = [[] for _ in range(size)]
        for _ in range(self.length):
            scores = group.next_scores(drawn)
            if all(s is None for s in scores):
                break
            for sequence, nxt in zip(drawn, scores, strict=True):
                if nxt is not None:
                    ids, values = nxt
                    sequence.append(int(np.asarray(ids)[self.step._release(values, noise)]))
        return drawn


@dataclass(frozen=True)
class LimitedDomainTopK(Mechanism):
    """LimitedDomain top-k (Durfee & Rogers 2019; embedding-eda Alg. 3) over a count histogram.

    Only the `domain_size` largest true counts may be chosen; a noisy ⊥ bar at
    h_(K+1) + 1 + c·ln(min(Δ₀, K, d-K)/δ)/ε stops the selection, so fewer than k (even zero)
    indices may come back; Gumbel noise of scale c/ε. Guarantee: the k-fold composition of
    ε-DP selections, plus δ. Counts change by at most 1 (Δ∞ = 1) in at most `l0_sensitivity`
    bins. c = 2 in general (embedding-eda's Alg. 3); c = 1 when counts only move one way
    between neighbours (votes under add/remove), Durfee & Rogers' own setting. There each
    selection is also ε-bounded-range: adding a unit raises every score, ⊥'s bar included, by
    0 or 1, so every output's log-odds move within one interval of width ε. The event says so
    (`BoundedRangeDpEvent`) for the monotone selection only.
    """

    epsilon: float
    delta: float
    domain_size: int
    k: int
    l0_sensitivity: int = 1
    monotonic: bool = False
    kind: ClassVar[str] = "limited_domain"

    def __post_init__(self) -> None:
        _positive("epsilon", self.epsilon)
        if not 0 < self.delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {self.delta}")
        if not 1 <= self.k <= self.domain_size:
            raise ValueError(f"need 1 <= k <= domain_size, got k={self.k}, "
                             f"domain_size={self.domain_size}")
        if self.l0_sensitivity < 1:
            raise ValueError(f"l0_sensitivity must be >= 1, got {self.l0_sensitivity}")

    @property
    def event(self) -> dp_event.DpEvent:
        one = (BoundedRangeDpEvent if self.monotonic else PureDpEvent)(self.epsilon)
        inner = one if self.k == 1 else dp_event.SelfComposedDpEvent(one, self.k)
        return ApproximateDpEvent(inner, self.delta)

    @property
    def sensitivity(self) -> float:
        return 1.0

    @property
    def noise_scale(self) -> float:
        return (1.0 if self.monotonic else 2.0) / self.epsilon

    def bar_margin(self, bins: int) -> float:
        """How far the ⊥ bar sits above the (K+1)-th count, before its noise, for a
        histogram of `bins` > K bins: 1 + c·ln(min(Δ₀, K, bins−K)/δ)/ε. Public."""
        m = min(self.l0_sensitivity, self.domain_size, bins - self.domain_size)
        return 1 + math.log(m / self.delta) * self.noise_scale

    def _release(self, values: Sequence[float], noise: NoiseSource) -> list[int]:
        hist = np.asarray(values, dtype=float)
        order = np.argsort(-hist, kind="stable")
        d, top = hist.size, min(self.domain_size, hist.size)
        noisy = hist[order[:top]] + noise.gumbel(self.noise_scale, top)
        ranked = order[:top][np.argsort(-noisy, kind="stable")]
        if d <= self.domain_size:  # the whole histogram is the domain: plain top-k
            return [int(i) for i in ranked[: self.k]]
        bar = (hist[order[self.domain_size]] + self.bar_margin(d)
               + noise.gumbel(self.noise_scale, 1)[0])
        n_above = int(np.sum(noisy > bar))
        return [int(i) for i in ranked[: min(n_above, self.k)]]


@dataclass(frozen=True)
class Disjoint(Mechanism):
    """One mechanism run on each of several histograms built from disjoint parts of the data
    (a record's label decides its part). Adding or removing one unit changes one part only, so
    the releases compose in parallel: the event is the inner mechanism's, once."""

    inner: Mechanism

    @property
    def kind(self) -> str:  # type: ignore[override]
        return f"disjoint_{self.inner.kind}"

    @property
    def event(self) -> dp_event.DpEvent:
        return self.inner.event

    @property
    def sensitivity(self) -> float:
        return self.inner.sensitivity

    @property
    def noise_scale(self) -> float:
        return self.inner.noise_scale

    def _release(self, values: Sequence[Any], noise: NoiseSource) -> list[Any]:
        return [self.inner._release(part, noise) for part in values]


@dataclass(frozen=True)
class NoisyMean(Mechanism):
    """ε-DP mean of per-unit values clipped to [lower, upper]: a noisy centred sum over a
    noisy count, both discrete Laplace; the scale b is set so the two together spend ε."""

    epsilon: float
    lower: float
    upper: float
    granularity: float = 2.0**-10
    kind: ClassVar[str] = "noisy_mean"

    def __post_init__(self) -> None:
        _positive("epsilon", self.epsilon)
        _check_grid(self.granularity)
        if not self.upper > self.lower:
            raise ValueError(f"need upper > lower, got [{self.lower}, {self.upper}]")

    @property
    def _half(self) -> float:
        return (self.upper - self.lower) / 2

    @property
    def _sum(self) -> Laplace:
        grid = _GridQuery(self._half, 1, False, self.granularity)
        b = (1 + grid.steps * self.granularity / self._half) / self.epsilon
        return Laplace(b * self._half, self._half, 1, False, self.granularity)

    @property
    def _count(self) -> Laplace:
        return Laplace(self._sum.scale / self._half)

    @property
    def event(self) -> dp_event.DpEvent:
        return dp_event.ComposedDpEvent([self._sum.event, self._count.event])

    @property
    def sensitivity(self) -> float:
        return self._half

    @property
    def noise_scale(self) -> float:
        return self._count.scale

    def _release(self, values: Sequence[float], noise: NoiseSource) -> float:
        x = np.clip(np.asarray(values, dtype=float).ravel(), self.lower, self.upper)
        mid = (self.upper + self.lower) / 2
        total = self._sum._release([float(np.sum(x - mid))], noise)[0]
        count = self._count._release([x.size], noise)[0]
        return float(np.clip(mid + total / max(count, 1.0), self.lower, self.upper))
