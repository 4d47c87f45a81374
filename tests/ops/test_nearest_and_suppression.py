import numpy as np
import pytest

from dpsynth.methods.parts.suppression import select_distinct
from dpsynth.private.engine.nearest import nearest_indices, vote_counts


def unit(rows):
    rows = np.asarray(rows, dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_votes_go_to_the_nearest_candidate():
    candidates = unit([[1, 0], [0, 1], [-1, 0]])
    voters = unit([[1, 0.1], [0.9, 0.2], [0.1, 1], [-1, -0.2]])
    np.testing.assert_array_equal(nearest_indices(voters, candidates), [0, 0, 1, 2])
    np.testing.assert_array_equal(vote_counts(voters, candidates), [2, 1, 1])


def test_blocked_search_matches_brute_force(monkeypatch):
    rng = np.random.default_rng(0)
    voters, candidates = unit(rng.normal(size=(300, 8))), unit(rng.normal(size=(50, 8)))
    expected = np.argmax(voters @ candidates.T, axis=1)
    monkeypatch.setattr("dpsynth.private.engine.nearest.BLOCK_ROWS", 7)
    np.testing.assert_array_equal(nearest_indices(voters, candidates), expected)


def test_one_voter_moves_one_count_by_one():
    rng = np.random.default_rng(1)
    voters, candidates = unit(rng.normal(size=(100, 5))), unit(rng.normal(size=(20, 5)))
    diff = vote_counts(voters, candidates) - vote_counts(voters[1:], candidates)
    assert np.abs(diff).sum() == 1


def test_dimension_mismatch_is_named():
    with pytest.raises(ValueError, match="dimensions differ: 2 vs 3"):
        vote_counts(np.ones((1, 2)), np.ones((1, 3)))


def test_suppression_skips_near_duplicates_of_chosen():
    emb = unit([[1, 0], [1, 0.01], [0, 1], [-1, 0]])
    votes = np.array([10.0, 9.0, 5.0, 1.0])
    chosen, tau = select_distinct(votes, emb, n_select=3, tau=0.9)
    np.testing.assert_array_equal(chosen, [0, 2, 3])
    assert tau == 0.9


def test_threshold_rises_until_enough_are_selected():
    emb = unit([[1, 0], [1, 0.05], [1, 0.1]])
    chosen, tau = select_distinct(np.array([3.0, 2.0, 1.0]), emb, n_select=3, tau=0.5)
    assert sorted(chosen.tolist()) == [0, 1, 2]
    assert tau > 0.99


def test_without_suppression_order_is_by_votes():
    emb = unit(np.random.default_rng(2).normal(size=(6, 4)))
    votes = np.array([1.0, 6.0, 3.0, 5.0, 2.0, 4.0])
    chosen, _ = select_distinct(votes, emb, n_select=6, tau=1.01)
    np.testing.assert_array_equal(chosen, [1, 3, 5, 2, 4, 0])


def test_grouped_search_streams_rows_and_stays_within_groups(monkeypatch):
    from dpsynth.private.engine.nearest import grouped_nearest

    rng = np.random.default_rng(3)
    voters, candidates = unit(rng.normal(size=(500, 8))), unit(rng.normal(size=(60, 8)))
    voter_groups, candidate_groups = rng.integers(0, 4, 500), rng.integers(0, 3, 60)
    expected = np.full(500, -1)
    for g in range(3):  # group 3 has no candidate: its voters cast no vote
        rows, pool = voter_groups == g, np.flatnonzero(candidate_groups == g)
        expected[rows] = pool[np.argmax(voters[rows] @ candidates[pool].T, axis=1)]
    monkeypatch.setattr("dpsynth.private.engine.nearest.STREAM_ROWS", 37)
    found = grouped_nearest(voters, voter_groups, candidates, candidate_groups)
    np.testing.assert_array_equal(found, expected)
