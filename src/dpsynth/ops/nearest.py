"""Nearest-neighbour vote counts: each private point votes for its most similar candidate.

This computes the un-noised counts; the ops that release them add noise through the ledger.
With unit-normalised embeddings the inner product is the cosine similarity. The search is one
of SEARCHES:

- "exact" (default): the exact nearest candidate; a blocked NumPy GEMM + argmax, or faiss'
  exact flat index from FAISS_MIN_CANDIDATES candidates on where faiss is installed (the
  same answer up to float rounding on near-ties).
- "hnsw", "ivf": faiss' approximate indexes (graph; inverted lists), built from the
  candidates only, for large candidate sets. A query they cannot answer (an IVF probe of
  empty lists) gets its exact nearest candidate instead.

Every search maps each voter, on its own, to exactly one candidate: the candidate a voter
picks depends on that voter and the (public) candidates only, never on the other voters. So
one unit still casts one vote for one candidate, and the sensitivity of the counts, and with
it the privacy analysis, is the same whichever search runs (docs/privacy.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dpsynth.data import Access, PrivateDataset

BLOCK_ROWS = 2048
"""Query rows per NumPy GEMM: the product block is BLOCK_ROWS x candidates floats."""
STREAM_ROWS = 16_384
"""Private rows read per step of a vote: with embeddings out of core (`dpsynth.data.scratch`)
a vote holds this many rows of them in memory (a copy, for a label's rows), never all N."""
SEARCHES = ("exact", "hnsw", "ivf")
FAISS_MIN_CANDIDATES = 32_768
"""From this many candidates on, "exact" runs on faiss' flat index where faiss is installed:
the NumPy block (BLOCK_ROWS x candidates floats) would pass 256 MiB, while faiss tiles the
candidates too. Below it the two run at the same speed (benchmarks/nn_vote.py)."""
HNSW_NEIGHBOURS = 32
IVF_PROBE = 8

Search = Callable[[np.ndarray], np.ndarray]
"""A block of query rows -> the index of each row's nearest candidate."""


def nearest_indices(queries: np.ndarray, candidates: np.ndarray,
                    search: str = "exact") -> np.ndarray:
    """For each query row, the index of the candidate with the highest cosine similarity
    (exactly, or as an approximate index finds it: see the module docstring).

    On the NumPy path ties go to the lowest index, so the result is deterministic. The queries
    are read STREAM_ROWS at a time, so a memory-mapped array is never loaded whole.
    """
    _check_pair(queries, candidates)
    find = searcher(candidates, search)
    out = np.empty(len(queries), dtype=np.int64)
    for start in range(0, len(queries), STREAM_ROWS):
        block = queries[start : start + STREAM_ROWS]
        out[start : start + len(block)] = find(block)
    return out


def searcher(candidates: np.ndarray, search: str = "exact") -> Search:
    """The search over `candidates` (public): any index is built here, once per vote, and then
    answers block after block of queries."""
    if search not in SEARCHES:
        raise ValueError(f"search={search!r}: one of {', '.join(SEARCHES)}")
    faiss = _faiss()
    if search != "exact" and faiss is None:
        raise ValueError(f"search={search!r} needs faiss: pip install 'dpsynth[dist]'")
    if faiss is not None and (search != "exact" or len(candidates) >= FAISS_MIN_CANDIDATES):
        return _faiss_searcher(faiss, candidates, search)
    return functools.partial(_blocked_argmax, candidates=candidates)


def _faiss():
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def _faiss_searcher(faiss, candidates: np.ndarray, search: str) -> Search:
    dim = candidates.shape[1]
    base = np.ascontiguousarray(candidates, dtype=np.float32)
    if search == "hnsw":
        index = faiss.IndexHNSWFlat(dim, HNSW_NEIGHBOURS, faiss.METRIC_INNER_PRODUCT)
    elif search == "ivf":
        lists = max(1, min(int(np.sqrt(len(base))), len(base) // 39))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, lists,
                                   faiss.METRIC_INNER_PRODUCT)
        index.train(base)
        index.nprobe = min(IVF_PROBE, lists)
    else:
        index = faiss.IndexFlatIP(dim)
    index.add(base)

    def find(queries: np.ndarray) -> np.ndarray:
        _, found = index.search(np.ascontiguousarray(queries, dtype=np.float32), 1)
        out = found[:, 0].astype(np.int64)
        lost = np.flatnonzero(out < 0)  # nothing found in the probed lists: the exact answer
        if len(lost):
            out[lost] = _blocked_argmax(queries[lost], candidates)
        return out

    return find


def _blocked_argmax(queries: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    out = np.empty(len(queries), dtype=np.int64)
    for start in range(0, len(queries), BLOCK_ROWS):
        block = queries[start : start + BLOCK_ROWS] @ candidates.T
        out[start : start + len(block)] = np.argmax(block, axis=1)
    return out


def vote_counts(voters: np.ndarray, candidates: np.ndarray,
                search: str = "exact") -> np.ndarray:
    """How many voters have each candidate as their nearest neighbour (float64 counts).

    Adding or removing one voter changes one count by one: L1 and L2 sensitivity 1 per
    record, times the records a privacy unit may hold.
    """
    counts = np.bincount(nearest_indices(voters, candidates, search),
                         minlength=len(candidates))
    return counts.astype(np.float64)


def _check_pair(queries: np.ndarray, candidates: np.ndarray) -> None:
    if queries.ndim != 2 or candidates.ndim != 2:
        raise ValueError("embeddings must be 2-D arrays (n, dim)")
    if queries.shape[1] != candidates.shape[1]:
        raise ValueError(f"embedding dimensions differ: {queries.shape[1]} vs "
                         f"{candidates.shape[1]}")
    if len(candidates) == 0:
        raise ValueError("no candidates to vote for")


def grouped_nearest(queries: np.ndarray, query_groups: np.ndarray | None,
                    candidates: np.ndarray, candidate_groups: np.ndarray | None,
                    search: str = "exact") -> np.ndarray:
    """Nearest candidate within the query's own group (its label), or -1 where the group has
    no candidate. Without groups, the nearest over all candidates.

    Each group's search is built once; the queries stream through STREAM_ROWS at a time, split
    by group within the block, so no group's rows are gathered from the whole array."""
    if query_groups is None or candidate_groups is None:
        return nearest_indices(queries, candidates, search)
    _check_pair(queries, candidates)
    pools = {int(g): np.flatnonzero(candidate_groups == g) for g in np.unique(candidate_groups)}
    finds = {g: searcher(candidates[pools[g]], search)
             for g in map(int, np.unique(query_groups)) if g in pools}
    out = np.full(len(queries), -1, dtype=np.int64)
    for start in range(0, len(queries), STREAM_ROWS):
        block = queries[start : start + STREAM_ROWS]
        groups = query_groups[start : start + len(block)]
        for group, find in finds.items():
            rows = np.flatnonzero(groups == group)
            if len(rows):
                out[start + rows] = pools[group][find(block[rows])]
    return out


@dataclass(frozen=True)
class Voters:
    """Private records as nearest-neighbour voters: their embeddings and label codes.

    Built by `private_voters` and read only by ops; a recipe holds one to hand it back. It
    refuses pickling, like the dataset it comes from."""

    embeddings: np.ndarray
    labels: np.ndarray | None = None

    @property
    def has_labels(self) -> bool:
        return self.labels is not None

    def votes(self, candidates: np.ndarray, candidate_groups: np.ndarray | None = None,
              search: str = "exact") -> np.ndarray:
        """Each voter's nearest candidate of its own group (`grouped_nearest`), in record
        order; a voter whose group has no candidate casts no vote."""
        targets = grouped_nearest(self.embeddings, self.labels, candidates, candidate_groups,
                                  search)
        return targets[targets >= 0]

    def counts(self, candidates: np.ndarray, candidate_groups: np.ndarray | None = None,
               search: str = "exact") -> np.ndarray:
        """The un-noised vote histogram over the candidates (integers)."""
        return np.bincount(self.votes(candidates, candidate_groups, search),
                           minlength=len(candidates))

    def close(self) -> None:
        """Nothing to free: the embeddings go with this object (sharded voters stop their
        workers here)."""

    def __reduce_ex__(self, protocol: object) -> object:
        raise TypeError("private voters must not reach a checkpoint, cache or worker")

    def __repr__(self) -> str:
        return "Voters(private)"


def private_voters(private: PrivateDataset, embeddings: np.ndarray) -> Voters:
    """The private set's voters; labels only where the data has them."""
    codes = private.label_codes(Access.LEDGERED_OP) if private.has_labels else None
    return Voters(np.asarray(embeddings), codes)
