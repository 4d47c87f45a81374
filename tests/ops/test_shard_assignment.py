"""Which shard holds a private record (`backends.executor: ray`), on neighbouring datasets.

A shard's node embeds and searches with its own low-order bits (another CPU, another thread
count, another HNSW graph), so a record's vote is a function of its text and of its shard.
If one record joining moved other records to other shards, their votes could move too, and
the histogram would change by more than the one vote charged (for eda's monotone
LimitedDomain, a count could even fall). No Ray needed: the nodes are simulated.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.private.engine.nearest import Voters
from dpsynth.private.engine.ray import shard_blocks

DIM, WORKERS, NODE_SHIFT = 16, 4, 1e-6


def _near_tie(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Three candidates and `n` voters a hair nearer the first than the second: a node whose
    bits lean by NODE_SHIFT towards the second sends all of them there. The third is far
    from them all: a record there is unlike every other."""
    candidates = np.zeros((3, DIM))
    candidates[0, 0] = candidates[1, 1] = candidates[2, 2] = 1.0
    lean = (candidates[1] - candidates[0]) / np.sqrt(2)
    base = np.full(DIM, 1.0)
    base[:2], base[2] = 2.0, 0.0
    base /= np.linalg.norm(base)
    voters = base + rng.uniform(-NODE_SHIFT / 4, -NODE_SHIFT / 8, (n, 1)) * lean
    return voters, candidates


def _sharded_counts(texts: list[str], voters: np.ndarray, candidates: np.ndarray
                    ) -> np.ndarray:
    """The summed histogram of the shards, node s leaning by s·NODE_SHIFT."""
    lean = (candidates[1] - candidates[0]) / np.sqrt(2)
    return sum(Voters(voters[block] + s * NODE_SHIFT * lean).counts(candidates)
               for s, block in enumerate(shard_blocks(texts, WORKERS)))


@pytest.mark.parametrize("n", [201, 202, 203])
def test_a_record_joining_moves_no_other_record_to_another_shard(n):
    rng = np.random.default_rng(n)
    voters, candidates = _near_tie(n + 1, rng)
    voters[n] = candidates[2]  # the record that joins is unlike the others
    texts = [f"record {i}" for i in range(n + 1)]
    base_texts, base_voters = texts[:n], voters[:n]
    base = _sharded_counts(base_texts, base_voters, candidates)
    for at in (0, n // 2, n):  # D' = D plus one record at the front, middle, end
        joined_texts = [*base_texts[:at], texts[n], *base_texts[at:]]
        joined_voters = np.insert(base_voters, at, voters[n], axis=0)
        joined = _sharded_counts(joined_texts, joined_voters, candidates)
        assert np.abs(joined - base).sum() == 1, (at, base, joined)
        assert (joined >= base).all()  # the fact eda's monotone charge rests on
        held = {t: s for s, block in enumerate(shard_blocks(base_texts, WORKERS))
                for t in (base_texts[i] for i in block)}
        for s, block in enumerate(shard_blocks(joined_texts, WORKERS)):
            assert all(held.get(joined_texts[i], s) == s for i in block)
