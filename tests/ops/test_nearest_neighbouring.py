"""Neighbouring voter sets, floating point included: adding or removing one voter moves the
un-noised vote histogram by that voter's one vote and leaves every other vote where it was,
with candidates that tie exactly (duplicates) or nearly (1e-7 apart), whatever the search and
however the voters fall into blocks. A float32 GEMM fails this: which copy of a duplicate wins
depends on a row's place in its block."""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.private.engine import nearest

DIM, N_VOTERS, N_CANDIDATES, LABELS = 384, 3000, 300, 3
SEARCHES = [pytest.param(s, marks=[] if s == "exact" else pytest.mark.skipif(
    nearest._faiss() is None, reason="needs faiss")) for s in nearest.SEARCHES]


@pytest.fixture(autouse=True)
def _one_faiss_thread():
    """HNSW inserts in parallel: one thread builds the same graph for both voter sets."""
    faiss = nearest._faiss()
    if faiss is None:
        yield
        return
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


def _unit(x):
    x = x.astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _setting():
    """Candidates with two exact duplicates and a near-duplicate, each pair within one label;
    voters crowded around them, so a tie decides thousands of votes."""
    rng = np.random.default_rng(7)
    cands = _unit(rng.standard_normal((N_CANDIDATES, DIM)))
    cand_labels = np.arange(N_CANDIDATES) % LABELS
    cands[150] = cands[0]  # label 0
    cands[271] = cands[1]  # label 1
    cands[92] = cands[2] + 1e-7 * rng.standard_normal(DIM).astype(np.float32)  # label 2
    centre = rng.integers(0, 3, N_VOTERS + 3)
    voters = _unit(cands[centre] + 0.3 * rng.standard_normal((N_VOTERS + 3, DIM)))
    return voters[:N_VOTERS], centre[:N_VOTERS], voters[N_VOTERS:], cands, cand_labels


@pytest.fixture(params=["default", "small"])
def blocks(request, monkeypatch):
    """Default block sizes, or small ones (faiss still sees batches past its BLAS threshold of
    20 queries) so that adding a voter shifts every later block boundary."""
    if request.param == "small":
        monkeypatch.setattr(nearest, "BLOCK_ROWS", 37)
        monkeypatch.setattr(nearest, "CANDIDATE_TILE", 29)
        monkeypatch.setattr(nearest, "STREAM_ROWS", 401)


@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.parametrize("mode", ["vote_counts", "grouped_nearest", "labelled_cells"])
def test_one_voter_moves_the_histogram_by_its_own_vote(search, mode, blocks):
    voters, labels, extra, cands, cand_labels = _setting()

    def votes(v, lab):
        if mode == "grouped_nearest":
            return nearest.grouped_nearest(v, lab, cands, cand_labels, search)
        if mode == "labelled_cells":
            return nearest.Voters(v, lab, search).votes(cands, n_labels=LABELS)
        return nearest.nearest_indices(v, cands, search)

    def histogram(v, lab):
        if mode == "labelled_cells":
            return nearest.Voters(v, lab, search).counts(cands, n_labels=LABELS)
        if mode == "grouped_nearest":
            return np.bincount(votes(v, lab), minlength=N_CANDIDATES).astype(np.float64)
        return nearest.vote_counts(v, cands, search)

    base_votes, base = votes(voters, labels), histogram(voters, labels)
    assert len(np.unique(base_votes[np.isin(base_votes, [0, 150, 1, 271, 2, 92])])) >= 3
    for where, one in zip((0, N_VOTERS // 2, N_VOTERS), extra, strict=True):
        label = np.array([0])  # the added voter's label: candidates 0 and 150 tie in it
        more = np.insert(voters, where, one, axis=0)
        more_labels = np.insert(labels, where, label)
        others = np.delete(votes(more, more_labels), where)
        assert np.array_equal(others, base_votes), f"other votes moved (voter at {where})"
        diff = histogram(more, more_labels) - base
        own = votes(one[None], label)[0]
        assert np.abs(diff).sum() == 1 and diff[own] == 1, f"voter at {where}"
        # removing a voter, at the same places
        fewer = np.delete(voters, min(where, N_VOTERS - 1), axis=0)
        fewer_labels = np.delete(labels, min(where, N_VOTERS - 1))
        diff = base - histogram(fewer, fewer_labels)
        assert np.abs(diff).sum() == 1 and diff[base_votes[min(where, N_VOTERS - 1)]] == 1
