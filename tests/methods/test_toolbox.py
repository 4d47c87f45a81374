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

    meta = Metadata(("a",), np.array([1.0]), None, None, {"a": ["x", "y", "z"]},
                    {"a": np.array([1.0, 0.0, 0.0])})
    conditions = meta.sample(np.random.default_rng(0), "a", 5, keywords_per_sample=3)
    assert all(c.keywords == ("x",) for c in conditions)
