"""Nearest-neighbour vote counts: each private point votes for its most similar candidate.

This computes the un-noised counts; the releases (`dpsynth.private.releases`) add noise
through the ledger.
With unit-normalised embeddings the inner product is the cosine similarity. The search is one
of SEARCHES:

- "exact" (default): the exact nearest candidate on the integer grid below, by blocked
  float64 GEMMs over tiles of voters and of candidates.
- "hnsw", "ivf": faiss' approximate indexes (graph; inverted lists), built from the
  candidates only, for large candidate sets. Their RESCORE best guesses are re-scored on the
  grid; a query they cannot answer (an IVF probe of empty lists) gets its exact nearest.

Every search maps each voter, on its own, to exactly one candidate: the candidate a voter
picks depends on that voter and the (public) candidates only, never on the other voters. So
one unit still casts one vote for one candidate, and the sensitivity of the counts, and with
it the privacy analysis, is the same whichever search runs (docs/privacy.md).

That must hold bit for bit, floating point included. A float32 score's low-order bits depend
on how a GEMM blocks it (the block's size, the row's place in it), and with two equal or
nearly equal candidates those bits pick the winner: one more voter would then move other
voters' votes. So scores are exact: coordinates are clipped to [-1, 1] and rounded to a grid
of 2**-bits (`grid_bits`), and dot products of the grid integers are summed in float64, where
every partial sum is an integer below 2**53: the same score whatever the order of the sum.
Ties go to the lowest candidate index. faiss' searches answer each query on its own once
their BLAS path (taken from 20 queries on, and blocked by batch) is switched off
(`_per_query`): an approximate search is deterministic per query, never batch by batch. Its
index is a function of the candidates (and, for HNSW built on several threads, of their
scheduling), never of the voters.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dpsynth.data import Access, PrivateDataset

BLOCK_ROWS = 1024
"""Query rows per GEMM block."""
CANDIDATE_TILE = 4096
"""Candidates per GEMM block: a block is BLOCK_ROWS x CANDIDATE_TILE float64 (32 MiB)."""
STREAM_ROWS = 16_384
"""Private rows read per step of a vote: with embeddings out of core (`dpsynth.data.scratch`)
a vote holds this many rows of them in memory (a copy, for a label's rows), never all N."""
SEARCHES = ("exact", "hnsw", "ivf")
HNSW_NEIGHBOURS = 32
IVF_PROBE = 8
RESCORE = 8
"""Candidates an approximate index proposes per query, re-scored exactly on the grid."""

Search = Callable[[np.ndarray], np.ndarray]
"""A block of query rows -> the index of each row's nearest candidate."""


def nearest_indices(queries: np.ndarray, candidates: np.ndarray,
                    search: str = "exact") -> np.ndarray:
    """For each query row, the index of the candidate with the highest cosine similarity
    (exactly, or as an approximate index finds it: see the module docstring).

    The queries are read STREAM_ROWS at a time, so a memory-mapped array is never loaded
    whole.
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
    if search == "exact":
        grid = _on_grid(candidates, grid_bits(candidates.shape[1]))
        return lambda queries: _blocked_argmax(queries, grid)
    faiss = _faiss()
    if faiss is None:
        raise ValueError(f"search={search!r} needs faiss: pip install 'dpsynth[dist]'")
    return _faiss_searcher(faiss, candidates, search)


def grid_bits(dim: int) -> int:
    """The finest grid on which `dim`-long dot products stay exact in float64: each product of
    clipped coordinates is at most 2**(2 * bits), their sum at most dim times that <= 2**52."""
    return (52 - (dim - 1).bit_length()) // 2


def _on_grid(rows: np.ndarray, bits: int) -> np.ndarray:
    """Rows as float64 integers: coordinates clipped to [-1, 1] (a unit vector's already are),
    times 2**bits, rounded. Elementwise, so a row's grid depends on that row only."""
    scaled = np.clip(np.asarray(rows, dtype=np.float64), -1.0, 1.0) * float(2**bits)
    return np.ascontiguousarray(np.rint(scaled))


def _faiss():
    try:
        import faiss
    except ImportError:
        return None
    return faiss


_BLAS_LOCK = threading.Lock()


@contextlib.contextmanager
def _per_query(faiss):
    """faiss' flat distances (IVF's coarse quantiser) without BLAS: from
    `distance_compute_blas_threshold` queries on faiss computes them by a blocked GEMM whose
    rounding depends on the batch; below it, query by query. Restored after."""
    with _BLAS_LOCK:
        saved = faiss.cvar.distance_compute_blas_threshold
        faiss.cvar.distance_compute_blas_threshold = 2**30
        try:
            yield
        finally:
            faiss.cvar.distance_compute_blas_threshold = saved


def _faiss_searcher(faiss, candidates: np.ndarray, search: str) -> Search:
    dim = candidates.shape[1]
    base = np.ascontiguousarray(candidates, dtype=np.float32)
    if search == "hnsw":
        index = faiss.IndexHNSWFlat(dim, HNSW_NEIGHBOURS, faiss.METRIC_INNER_PRODUCT)
    else:
        lists = max(1, min(int(np.sqrt(len(base))), len(base) // 39))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, lists,
                                   faiss.METRIC_INNER_PRODUCT)
        index.train(base)
        index.nprobe = min(IVF_PROBE, lists)
    index.add(base)
    bits = grid_bits(dim)
    grid = _on_grid(candidates, bits)
    k = min(RESCORE, len(base))

    def find(queries: np.ndarray) -> np.ndarray:
        with _per_query(faiss):
            _, found = index.search(np.ascontiguousarray(queries, dtype=np.float32), k)
        out = np.empty(len(queries), dtype=np.int64)
        for start in range(0, len(queries), BLOCK_ROWS):
            rows = slice(start, start + BLOCK_ROWS)
            out[rows] = _rescored(_on_grid(queries[rows], bits), found[rows], grid)
        lost = np.flatnonzero(out < 0)  # nothing found in the probed lists: the exact answer
        if len(lost):
            out[lost] = _blocked_argmax(queries[lost], grid)
        return out

    return find


def _rescored(queries: np.ndarray, found: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Of each query's proposed candidates (-1: none), the best by exact score, ties to the
    lowest index; -1 where none was proposed."""
    scores = np.full(found.shape, -np.inf)
    for j in range(found.shape[1]):
        hit = found[:, j] >= 0
        scores[hit, j] = np.einsum("nd,nd->n", queries[hit], grid[found[hit, j]])
    best = scores.max(axis=1, keepdims=True)
    top = np.where((scores == best) & (found >= 0), found, np.iinfo(np.int64).max).min(axis=1)
    return np.where(np.isfinite(best[:, 0]), top, -1)


def _blocked_argmax(queries: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Each query's best candidate of `grid` (candidates on the grid), ties to the lowest
    index: a running best over candidate tiles, replaced only by a strictly higher score."""
    bits = grid_bits(grid.shape[1])
    out = np.empty(len(queries), dtype=np.int64)
    for start in range(0, len(queries), BLOCK_ROWS):
        block = _on_grid(queries[start : start + BLOCK_ROWS], bits)
        best = np.full(len(block), -np.inf)
        arg = np.zeros(len(block), dtype=np.int64)
        rows = np.arange(len(block))
        for first in range(0, len(grid), CANDIDATE_TILE):
            scores = block @ grid[first : first + CANDIDATE_TILE].T
            top = np.argmax(scores, axis=1)
            value = scores[rows, top]
            better = value > best
            best[better], arg[better] = value[better], top[better] + first
        out[start : start + len(block)] = arg
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


def labelled_cells(nearest: np.ndarray, labels: np.ndarray | None,
                   n_labels: int) -> np.ndarray:
    """Bin `candidate·n_labels + label` of each vote: one record, one cell."""
    if labels is None:
        raise ValueError("votes by label need labelled voters")
    return nearest * n_labels + labels


@dataclass(frozen=True)
class Voters:
    """Private records as nearest-neighbour voters: their embeddings and label codes.

    Built by `private_voters` and read only by the releases (`dpsynth.private.Private`). It
    refuses pickling, like the dataset it comes from. `search` (one of SEARCHES) is how every
    vote finds a voter's nearest candidate: the run's `backends.executor.search`."""

    embeddings: np.ndarray
    labels: np.ndarray | None = None
    search: str = "exact"

    def __post_init__(self) -> None:
        if self.search not in SEARCHES:
            raise ValueError(f"search={self.search!r}: one of {', '.join(SEARCHES)}")

    @property
    def has_labels(self) -> bool:
        return self.labels is not None

    def votes(self, candidates: np.ndarray, candidate_groups: np.ndarray | None = None,
              n_labels: int | None = None) -> np.ndarray:
        """Each voter's nearest candidate of its own group (`grouped_nearest`), in record
        order; a voter whose group has no candidate casts no vote.

        With `n_labels`, candidates have no group: each voter's nearest candidate over all
        of them, cast in the cell of the voter's own label (bin `candidate·n_labels +
        label`), so that the votes, not the generator, say which label a candidate is."""
        if n_labels is not None:
            return labelled_cells(self.nearest(candidates), self.labels, n_labels)
        targets = grouped_nearest(self.embeddings, self.labels, candidates, candidate_groups,
                                  self.search)
        return targets[targets >= 0]

    def nearest(self, candidates: np.ndarray) -> np.ndarray:
        """Each voter's nearest candidate over all of them, in record order: private, for an
        release that needs each record's own answer (ctcl's topic of each record)."""
        return nearest_indices(self.embeddings, candidates, self.search)

    def counts(self, candidates: np.ndarray, candidate_groups: np.ndarray | None = None,
               n_labels: int | None = None) -> np.ndarray:
        """The un-noised vote histogram over the candidates (integers), or over the
        (candidate, label) cells with `n_labels`."""
        cells = len(candidates) * (n_labels or 1)
        return np.bincount(self.votes(candidates, candidate_groups, n_labels),
                           minlength=cells)

    def close(self) -> None:
        """Nothing to free: the embeddings go with this object (sharded voters stop their
        workers here)."""

    def __reduce_ex__(self, protocol: object) -> object:
        raise TypeError("private voters must not reach a checkpoint, cache or worker")

    def __repr__(self) -> str:
        return "Voters(private)"


def private_voters(private: PrivateDataset, embeddings: np.ndarray,
                   search: str = "exact") -> Voters:
    """The private set's voters; labels only where the data has them."""
    codes = private.label_codes(Access.LEDGERED_OP) if private.has_labels else None
    return Voters(np.asarray(embeddings), codes, search)
