"""Nearest-neighbour search backends: exact on NumPy or faiss, approximate on faiss HNSW/IVF.
Whatever the search, each voter casts exactly one vote, chosen from its own embedding and the
candidates alone, so neighbouring voter sets differ by one vote in one bin."""

from __future__ import annotations

import types

import numpy as np
import pytest

from dpsynth.private.engine import nearest

faiss = pytest.importorskip("faiss")


@pytest.fixture(autouse=True)
def _one_faiss_thread():
    """HNSW inserts in parallel: one thread keeps each build identical."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


def _unit(rng, n, dim=16):
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("search", nearest.SEARCHES)
def test_each_voter_casts_exactly_one_vote(search):
    rng = np.random.default_rng(0)
    voters, cands = _unit(rng, 700), _unit(rng, 400)
    found = nearest.nearest_indices(voters, cands, search)
    assert found.shape == (700,) and found.min() >= 0 and found.max() < 400
    counts = nearest.vote_counts(voters, cands, search)
    assert counts.sum() == 700 and counts.shape == (400,)


@pytest.mark.parametrize("search", nearest.SEARCHES)
def test_removing_a_voter_moves_one_count_by_one(search):
    rng = np.random.default_rng(1)
    voters, cands = _unit(rng, 300), _unit(rng, 500)
    labels, cand_labels = rng.integers(0, 3, 300), rng.integers(0, 3, 500)
    whole = nearest.grouped_nearest(voters, labels, cands, cand_labels, search)
    for drop in (0, 117, 299):
        keep = np.arange(300) != drop
        part = nearest.grouped_nearest(voters[keep], labels[keep], cands, cand_labels, search)
        assert np.array_equal(part, whole[keep])  # the others' votes do not move
        diff = (np.bincount(whole, minlength=500) - np.bincount(part, minlength=500))
        assert np.abs(diff).sum() == 1 and diff[whole[drop]] == 1


def test_approximate_search_finds_mostly_the_exact_neighbour():
    rng = np.random.default_rng(2)
    centres = _unit(rng, 50)
    cands = centres.repeat(20, 0) + 0.05 * rng.standard_normal((1000, 16)).astype(np.float32)
    cands /= np.linalg.norm(cands, axis=1, keepdims=True)
    voters = cands[rng.choice(1000, 400)] + 0.01 * rng.standard_normal((400, 16)).astype(
        np.float32)
    exact = nearest.nearest_indices(voters, cands)
    for search in ("hnsw", "ivf"):
        assert np.mean(nearest.nearest_indices(voters, cands, search) == exact) > 0.8


def test_voters_an_index_cannot_answer_get_the_exact_answer():
    """An IVF probe of empty lists answers -1: that voter still votes, for its exact nearest."""

    class Blind:  # an index that finds nothing for every other query
        nprobe = 1

        def __init__(self, *args):
            pass

        def train(self, base):
            pass

        def add(self, base):
            self.base = base

        def search(self, queries, k):
            found = np.argmax(queries @ self.base.T, axis=1)[:, None]
            found[::2] = -1
            return np.zeros_like(found, dtype=np.float32), found

    class Faiss:
        METRIC_INNER_PRODUCT = 0
        cvar = types.SimpleNamespace(distance_compute_blas_threshold=20)
        IndexFlatIP = IndexIVFFlat = IndexHNSWFlat = Blind

    rng = np.random.default_rng(3)
    voters, cands = _unit(rng, 50), _unit(rng, 200)
    found = nearest._faiss_searcher(Faiss, cands, "ivf")(voters)
    assert np.array_equal(found, nearest.nearest_indices(voters, cands))


def test_candidate_tiles_keep_the_first_best(monkeypatch):
    """Tiled over candidates, a later tile takes over only with a strictly higher score."""
    rng = np.random.default_rng(4)
    voters, cands = _unit(rng, 300), _unit(rng, 90)
    cands[70] = cands[5]  # an exact duplicate in a later tile: the lower index keeps its votes
    whole = nearest.nearest_indices(voters, cands)
    monkeypatch.setattr(nearest, "CANDIDATE_TILE", 16)
    monkeypatch.setattr(nearest, "BLOCK_ROWS", 7)
    assert np.array_equal(nearest.nearest_indices(voters, cands), whole)
    float32 = np.argmax(voters @ cands.T, axis=1)  # may pick either copy of the duplicate
    assert np.array_equal(whole, np.where(float32 == 70, 5, float32))


def test_unknown_search_is_named():
    rng = np.random.default_rng(5)
    with pytest.raises(ValueError, match="annoy"):
        nearest.nearest_indices(_unit(rng, 2), _unit(rng, 2), "annoy")


def _batch_mismatches(index, queries, k=nearest.RESCORE):
    """Queries whose faiss answer (scores and ids, bit for bit) differs between the whole
    batch and sub-batches of other sizes and offsets."""
    whole_d, whole_i = index.search(queries, k)
    bad = 0
    for size in (1, 5, 19, 20, 21, 100, 1000):
        for first in (0, 7, 999):
            d, i = index.search(queries[first : first + size], k)
            rows = slice(first, first + size)
            bad += int(((d != whole_d[rows]) | (i != whole_i[rows])).any(axis=1).sum())
    return bad


def test_faiss_answers_each_query_on_its_own_inside_per_query():
    """From 20 queries on faiss' flat distances go through a blocked BLAS GEMM whose rounding
    depends on the batch (IVF's coarse quantiser is such a flat index); `_per_query` turns
    that off, and puts the setting back afterwards."""
    rng = np.random.default_rng(6)
    queries, cands = _unit(rng, 3000, 384), _unit(rng, 300, 384)
    flat = faiss.IndexFlatIP(384)
    flat.add(cands)
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(384), 384, 7, faiss.METRIC_INNER_PRODUCT)
    ivf.train(cands)
    ivf.add(cands)
    ivf.nprobe = 3
    before = faiss.cvar.distance_compute_blas_threshold
    assert _batch_mismatches(flat, queries) > 0  # the hazard is real
    with nearest._per_query(faiss):
        assert _batch_mismatches(flat, queries) == 0
        assert _batch_mismatches(ivf, queries) == 0
    assert faiss.cvar.distance_compute_blas_threshold == before
