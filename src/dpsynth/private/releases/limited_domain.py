"""DP parent selection (embedding-eda Alg. 1 lines 5-11): every private record votes for its
nearest candidate of its own label, and LimitedDomain top-k (Alg. 3) picks each label's
parents from the vote histogram.

A record votes once, in its own label's histogram: one count moves by one under adding or
removing the record (Δ∞ = Δ0 = 1), and the labels' releases compose in parallel.
"""

from __future__ import annotations

import numpy as np

from dpsynth.errors import InputError
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.privacy.mechanisms import Disjoint, LimitedDomainTopK
from dpsynth.privacy.noise import NoiseSource
from dpsynth.private.engine.nearest import Voters


def dp_select_parents(voters: Voters, candidate_embeddings: np.ndarray,
                      candidate_groups: np.ndarray,
                      mechanism: LimitedDomainTopK, ledger: PrivacyLedger, noise: NoiseSource,
                      stage: str, records_per_unit: int = 1) -> dict[int, list[int]]:
    """Per candidate group (public): the selected candidate indices, best noisy count first;
    a list may be short or empty (the ⊥ bar came first).

    `candidate_groups` holds one group code per candidate; without private groups every
    record votes over all candidates and the candidates must form one group.
    """
    if records_per_unit != 1:
        raise InputError("nearest-neighbour voting counts one vote per privacy unit: set "
                         "data.max_records_per_user: 1 for this recipe")
    groups = [int(g) for g in np.unique(candidate_groups)]
    if not voters.has_labels and len(groups) != 1:
        raise ValueError(f"unlabelled private data needs one candidate group, got {groups}")
    # a record whose label has no candidates casts no vote
    counts = voters.counts(candidate_embeddings, candidate_groups).astype(np.float64)
    pools = [np.flatnonzero(candidate_groups == g) for g in groups]
    released = ledger.release(stage, Disjoint(mechanism), [counts[pool] for pool in pools],
                              noise)
    return {g: pool[np.asarray(picked, dtype=np.int64)].tolist()
            for g, pool, picked in zip(groups, pools, released, strict=True)}

