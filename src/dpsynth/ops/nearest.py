"""Nearest-neighbour vote counts: each private point votes for its most similar candidate.

This computes the exact, un-noised counts; the ops that release them add noise through the
ledger. With unit-normalised embeddings the inner product is the cosine similarity, and an
exact blocked search keeps memory bounded and results deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpsynth.data import Access, PrivateDataset

BLOCK_ROWS = 2048


def nearest_indices(queries: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """For each query row, the index of the candidate with the highest cosine similarity.

    Ties go to the lowest index, so the result is deterministic.
    """
    _check_pair(queries, candidates)
    out = np.empty(len(queries), dtype=np.int64)
    for start in range(0, len(queries), BLOCK_ROWS):
        block = queries[start : start + BLOCK_ROWS] @ candidates.T
        out[start : start + len(block)] = np.argmax(block, axis=1)
    return out


def vote_counts(voters: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """How many voters have each candidate as their nearest neighbour (float64 counts).

    Adding or removing one voter changes one count by one: L1 and L2 sensitivity 1 per
    record, times the records a privacy unit may hold.
    """
    counts = np.bincount(nearest_indices(voters, candidates), minlength=len(candidates))
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
                    candidates: np.ndarray, candidate_groups: np.ndarray | None) -> np.ndarray:
    """Nearest candidate within the query's own group (its label), or -1 where the group has
    no candidate. Without groups, the nearest over all candidates."""
    if query_groups is None or candidate_groups is None:
        return nearest_indices(queries, candidates)
    out = np.full(len(queries), -1, dtype=np.int64)
    for group in np.unique(query_groups):
        rows = np.flatnonzero(query_groups == group)
        pool = np.flatnonzero(candidate_groups == group)
        if len(pool):
            out[rows] = pool[nearest_indices(queries[rows], candidates[pool])]
    return out


@dataclass(frozen=True)
class Voters:
    """Private records as nearest-neighbour voters: their embeddings and label codes.

    Built by `private_voters` and read only by ops; a recipe holds one to hand it back. It
    refuses pickling, like the dataset it comes from."""

    embeddings: np.ndarray
    labels: np.ndarray | None = None

    def __reduce_ex__(self, protocol: object) -> object:
        raise TypeError("private voters must not reach a checkpoint, cache or worker")

    def __repr__(self) -> str:
        return "Voters(private)"


def private_voters(private: PrivateDataset, embeddings: np.ndarray) -> Voters:
    """The private set's voters; labels only where the data has them."""
    codes = private.label_codes(Access.LEDGERED_OP) if private.has_labels else None
    return Voters(np.asarray(embeddings), codes)
