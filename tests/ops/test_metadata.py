"""DP metadata ops: with a large ε they recover the truth; the τ construction has the
sensitivity its docstring claims."""

from collections import Counter

import numpy as np
import pytest

from dpsynth.data import PrivateDataset
from dpsynth.methods.parts.keywords import class_keywords
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.privacy.mechanisms import AboveThreshold, Laplace, NoisyMean
from dpsynth.privacy.noise import NoiseSource
from dpsynth.private.engine.nearest import Voters
from dpsynth.private.releases.metadata import (
    dp_keyword_votes,
    dp_label_distribution,
    dp_length_histogram,
    dp_length_range,
)
from dpsynth.private.releases.self_similarity import bucket_pair_similarities, dp_self_similarity

BIG = 50.0  # ε per release: noise far below one count


@pytest.fixture
def ledger():
    return PrivacyLedger(epsilon=1e6, delta=1e-6, discretization=0.1)


def dataset(lengths, labels=None):
    texts = [" ".join(f"w{i}x{j}" for j in range(n)) for i, n in enumerate(lengths)]
    return PrivateDataset(texts, labels=labels,
                          label_names=sorted(set(labels)) if labels is not None else None)


def test_length_range_finds_min_and_max(ledger):
    data = dataset([5, 7, 9, 12, 30] * 20)
    low, high = dp_length_range(data, AboveThreshold(BIG, 0.0), 100, ledger, NoiseSource(0),
                                "length_range_svt")
    # threshold 0 halts where the count reaches 0, give or take the (tiny) noise
    assert 3 <= low <= 5 and 30 <= high <= 33
    assert ledger.breakdown()["length_range_svt"]["releases"] == 2


def test_length_range_is_noisy_at_small_epsilon(ledger):
    data = dataset([5, 7, 9, 12, 30] * 20)
    ranges = {dp_length_range(data, AboveThreshold(0.5, 0.0), 100, ledger, NoiseSource(s),
                              "length_range_svt")
              for s in range(10)}
    assert len(ranges) > 1


def test_label_distribution(ledger):
    data = dataset([3] * 100, labels=["a"] * 70 + ["b"] * 30)
    probs = dp_label_distribution(data, Laplace(1 / BIG), ledger, NoiseSource(0),
                                  "label_histogram")
    np.testing.assert_allclose(probs, [0.7, 0.3], atol=1e-3)


def test_length_histogram_counts_lengths_in_the_public_bins_clipped_in(ledger):
    data = dataset([2] * 10 + [9] * 30 + [40] * 5)
    noisy = dp_length_histogram(data, np.array([1, 3, 6, 11]), Laplace(1 / BIG), ledger,
                                NoiseSource(0), "length_histogram")
    np.testing.assert_allclose(noisy, [10, 0, 35], atol=1e-2)  # 40 words: in the last bin


def test_keyword_votes_stay_within_each_label(ledger):
    private = np.eye(3, dtype=np.float32)[[0, 0, 1, 2]]
    keywords = np.eye(3, dtype=np.float32)
    votes = dp_keyword_votes(Voters(private, np.array([0, 0, 1, 1])), keywords,
                             np.array([0, 1, 1]),
                             Laplace(1 / BIG), ledger, NoiseSource(0), "keyword_histogram")
    # label 0 votes only keyword 0; label 1's records vote among keywords 1 and 2
    np.testing.assert_allclose(votes, [2, 1, 1], atol=1e-2)


def test_bucket_pairs_one_unit_moves_at_most_one_value():
    rng = np.random.default_rng(0)
    texts = [f"record {i}" for i in range(200)]
    emb = rng.normal(size=(201, 8))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    key = b"k" * 16
    before = Counter(np.round(bucket_pair_similarities(emb[:200], texts, 40, key), 9))
    for extra in range(20):  # add each of several new units in turn
        moved = np.vstack([emb[:200], emb[200:]])
        after = Counter(np.round(bucket_pair_similarities(
            moved, [*texts, f"new unit {extra}"], 40, key), 9))
        assert sum((before - after).values()) <= 1
        assert sum((after - before).values()) <= 1


def test_self_similarity_recovers_the_mean(ledger):
    rng = np.random.default_rng(1)
    base = rng.normal(size=8)
    emb = base + 0.3 * rng.normal(size=(400, 8))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    data = PrivateDataset([f"t{i}" for i in range(400)])
    truth = float(np.mean((emb @ emb.T)[np.triu_indices(400, 1)]))
    estimate = dp_self_similarity(data, emb, NoisyMean(BIG, -2.0, 2.0), 100, ledger,
                                  NoiseSource(0), "similarity_threshold")
    assert estimate == pytest.approx(truth, abs=0.05)


def test_self_similarity_refuses_narrow_bounds(ledger):
    data = PrivateDataset(["a", "b"])
    with pytest.raises(ValueError, match="cover"):
        dp_self_similarity(data, np.eye(2), NoisyMean(1.0, -1.0, 1.0), 4, ledger,
                           NoiseSource(0), "similarity_threshold")


def test_class_keywords_prefer_distinctive_terms():
    groups = {"sport": ["the match ended with a goal", "a late goal won the match"],
              "money": ["the bank raised the rate", "the rate at the bank fell"]}
    words = class_keywords(groups, 2)
    assert set(words["sport"]) == {"goal", "match"}
    assert set(words["money"]) == {"bank", "rate"}


def test_bucket_values_are_cosines_whatever_the_embedder():
    emb = np.array([[3.0, 0.0], [2.0, 0.0], [-3.0, 0.0], [1.0, 1.0]])
    values = bucket_pair_similarities(emb, ["a", "b", "c", "d"], 1, b"k" * 16)
    assert values.size == 1 and -1.0 <= values[0] <= 1.0


def test_bucket_values_are_finite_for_huge_finite_rows():
    """An embedder that does not normalise may answer finite float32 rows whose product
    overflows: 1e20·1e20 is inf in float32, and opposite signs sum to NaN, which the noisy
    mean's grid refused after the release's charge. Coordinates are clipped first, in float64."""
    signs = np.where(np.arange(8) % 2, -1.0, 1.0)
    emb = np.array([1e20 * np.ones(8), 1e20 * signs], dtype=np.float32)
    values = bucket_pair_similarities(emb, ["a", "b"], 1, b"k" * 16)
    assert values.size == 1 and np.isfinite(values).all() and -1.0 <= values[0] <= 1.0
