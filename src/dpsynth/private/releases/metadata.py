"""DP metadata of the private set (dpga-textsyn §3.2): label, length and keyword histograms.

Each function reads private data, charges the ledger through a mechanism and returns only
the noisy release (or what is computed from it). Sensitivities are per privacy unit: a unit
holds at most k = `records_per_unit` records, each of which moves one count by one, and all k
may land in the same bin: a histogram's sensitivity is k in one coordinate (L1 = L2 = k).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpsynth.data import Access, PrivateDataset
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.privacy.mechanisms import AboveThreshold, Gaussian, Laplace
from dpsynth.privacy.noise import NoiseSource
from dpsynth.private.engine.nearest import Voters


def word_lengths(texts: Sequence[str]) -> np.ndarray:
    """Length in words, the unit the generator's conditions use."""
    return np.fromiter((len(t.split()) for t in texts), dtype=np.int64, count=len(texts))


def noisy_histogram(counts: np.ndarray, mechanism: Laplace | Gaussian, ledger: PrivacyLedger,
                    noise: NoiseSource, stage: str) -> np.ndarray:
    """Laplace histogram of counts; `mechanism.sensitivity` must cover a unit's k records."""
    return np.asarray(ledger.release(stage, mechanism, counts, noise), dtype=np.float64)


def to_distribution(noisy_counts: np.ndarray) -> np.ndarray:
    """Clip a noisy histogram at zero and normalise it (uniform when nothing is left)."""
    clipped = np.clip(np.asarray(noisy_counts, dtype=np.float64), 0.0, None)
    total = clipped.sum()
    return clipped / total if total > 0 else np.full(len(clipped), 1.0 / len(clipped))


def dp_label_distribution(private: PrivateDataset, mechanism: Laplace | Gaussian,
                          ledger: PrivacyLedger, noise: NoiseSource, stage: str) -> np.ndarray:
    """The label distribution, from a noisy histogram of label counts (every recipe's)."""
    codes = private.label_codes(Access.LEDGERED_OP)
    counts = np.bincount(codes, minlength=len(private.label_names or ()))
    noisy = noisy_histogram(counts, mechanism, ledger, noise, stage)
    return to_distribution(noisy)


def dp_length_range(private: PrivateDataset, mechanism: AboveThreshold, max_words: int,
                    ledger: PrivacyLedger, noise: NoiseSource, stage: str) -> tuple[int, int]:
    """Approximate minimum and maximum length in words by two runs of `mechanism`.

    Maximum: L = 0, 1, ... until the noisy count of texts longer than L falls to the noisy
    threshold 0. Minimum: L = max, max-1, ... until the noisy count of texts shorter than L
    does. Each query is a count, so its sensitivity is the records a unit may hold.
    """
    lengths = word_lengths(private.texts(Access.LEDGERED_OP))
    if mechanism.threshold != 0.0 or mechanism.query_sensitivity < private.records_per_unit:
        raise ValueError("length SVT needs threshold 0 and query sensitivity >= records per unit")
    steps = np.arange(0, max_words + 1)
    longer = np.searchsorted(np.sort(lengths), steps, side="right")
    longer = len(lengths) - longer  # texts longer than L, for each L
    hit = ledger.release(stage, mechanism, -longer.astype(np.float64), noise)
    high = int(steps[hit]) if hit is not None else max_words
    downward = np.arange(max(high, 1), 0, -1)
    shorter = np.searchsorted(np.sort(lengths), downward, side="left")  # texts shorter than L
    hit = ledger.release(stage, mechanism, -shorter.astype(np.float64), noise)
    low = int(downward[hit]) if hit is not None else 1
    return min(low, max(high, 1)), max(high, 1)


def dp_length_histogram(private: PrivateDataset, edges: np.ndarray, mechanism: Laplace,
                        ledger: PrivacyLedger, noise: NoiseSource, stage: str) -> np.ndarray:
    """Laplace histogram of lengths in words over the public bins [edges[i], edges[i+1]),
    lengths clipped into [edges[0], edges[-1] - 1]: the noisy count per bin."""
    edges = np.asarray(edges, dtype=np.int64)
    lengths = np.clip(word_lengths(private.texts(Access.LEDGERED_OP)), edges[0], edges[-1] - 1)
    counts, _ = np.histogram(lengths, bins=edges)
    return noisy_histogram(counts, mechanism, ledger, noise, stage)


def dp_keyword_votes(voters: Voters, keyword_embeddings: np.ndarray,
                     keyword_labels: np.ndarray | None,
                     mechanism: Laplace, ledger: PrivacyLedger, noise: NoiseSource,
                     stage: str) -> np.ndarray:
    """Noisy votes for keywords: each private record votes for its nearest keyword of its own
    label (dpga-textsyn §3.2.2), so one record moves one count; Laplace on the histogram."""
    counts = voters.counts(keyword_embeddings, keyword_labels)
    return noisy_histogram(counts, mechanism, ledger, noise, stage)
