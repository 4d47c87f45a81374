"""The recipes' small public helpers: quotas, masks, dropped outputs."""

import numpy as np
import pytest

from dpsynth.backends.base import BLANK, FAILED
from dpsynth.methods.parts.toolbox import allocate, keep_produced, mask_words


def test_allocate_splits_exactly_in_proportion_with_a_minimum():
    parts = allocate(10, np.array([0.5, 0.3, 0.2]))
    assert parts.sum() == 10 and parts.tolist() == [5, 3, 2]
    assert allocate(10, np.array([0.98, 0.01, 0.01])).tolist() == [8, 1, 1]  # minimum 1
    assert allocate(2, np.array([0.5, 0.3, 0.2])).sum() == 2  # too few for the minimum
    assert allocate(7, np.array([1.0, 0.0]), minimum=0).tolist() == [7, 0]


def test_allocate_splits_evenly_when_every_probability_is_zero():
    """DP probabilities can all come out 0 (dpga's labels from votes): an even split, not a
    negative overflow after a division by zero."""
    assert allocate(7, np.zeros(3), minimum=0).tolist() == [3, 2, 2]
    assert allocate(7, np.zeros(3)).sum() == 7


@pytest.mark.parametrize("total", [0, 1, 3, 17, 100])
def test_allocate_always_sums_to_the_total(total):
    rng = np.random.default_rng(total)
    assert allocate(total, rng.dirichlet(np.ones(5))).sum() == total


def test_mask_words_merges_runs_of_blanks():
    rng = np.random.default_rng(0)
    assert mask_words("a b c d", 1.0, rng) == BLANK
    assert mask_words("a b c d", 0.0, rng) == "a b c d"
    masked = mask_words(" ".join(f"w{i}" for i in range(200)), 0.5, rng)
    assert BLANK in masked and f"{BLANK} {BLANK}" not in masked


def test_keep_produced_drops_failures_and_keeps_labels_aligned():
    texts, labels = keep_produced(["a", FAILED, "c"], ["x", "y", "z"])
    assert (texts, labels) == (["a", "c"], ["x", "z"])
    with pytest.raises(ValueError, match="shorter|longer"):
        keep_produced(["a"], ["x", "y"])


def test_dpga_conditions_skip_keywords_whose_weight_underflowed():
    from dpsynth.methods.dpga_metadata import Metadata

    meta = Metadata(("a",), np.array([1.0]), None, {"a": ["x", "y", "z"]},
                    {"a": np.array([1.0, 0.0, 0.0])})
    conditions = meta.sample(np.random.default_rng(0), "a", 5, keywords_per_sample=3)
    assert all(c.keywords == ("x",) for c in conditions)


def test_geometric_length_bins_keep_their_relative_width_from_tweets_to_reviews():
    from dpsynth.methods.parts.lengths import geometric_edges

    edges = geometric_edges(512, 24)
    assert edges[0] == 1 and edges[-1] == 513 and (np.diff(edges) > 0).all()
    wide = (np.diff(edges) / edges[:-1])[edges[:-1] >= 8]
    assert wide.max() < 0.45  # a 15-word tweet's bin and a 300-word review's: about 30%
    assert len(edges) == len(geometric_edges(512, 24))  # public: the config alone


def test_length_bins_below_the_floor_are_never_drawn():
    from dpsynth.methods.parts.lengths import Lengths

    lengths = Lengths.from_noisy(np.array([1, 5, 10, 400]), np.array([2.9, 60.0, -4.0]),
                                 floor=3.0)
    rng = np.random.default_rng(0)
    assert all(5 <= lengths.draw(rng) < 10 for _ in range(200))
    assert Lengths.from_noisy(np.array([1, 5, 10]), np.array([2.0, 1.0]), floor=3.0) is None


def test_a_repeated_generation_is_asked_again_then_dropped():
    from dpsynth.backends.base import Condition
    from dpsynth.methods.parts.distinct import DRAW_TRIES, generate_distinct

    answers = iter(["a b", "a  b ", FAILED, "c", "c", "d"] + ["c"] * DRAW_TRIES)
    calls = []

    def generate(conditions):
        calls.append(len(conditions))
        return [next(answers) for _ in conditions]

    conditions = [Condition(label=str(i)) for i in range(5)]
    texts, asked = generate_distinct(generate, conditions)
    assert texts == ["a b", "d", "c"] and asked == [0, 1, 3]  # request 1: "d" on its retry
    assert calls == [5, 2] + [1] * (DRAW_TRIES - 1)  # FAILED is not retried; request 4 gives up
