"""DP nearest-neighbour voting (dpga-textsyn §3.3.1, Private Evolution): each sampled private
record votes for its nearest candidate of its own label (or, by label, for its nearest
candidate of any label, in its own label's cell); Gaussian noise on the counts.

Poisson subsampling happens inside the mechanism, so the amplification the ledger credits is
the sampling that really happened.
"""

from __future__ import annotations

import numpy as np

from dpsynth.errors import DpsynthError, InputError
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.privacy.mechanisms import SubsampledGaussianHistogram, Votes
from dpsynth.privacy.noise import NoiseSource
from dpsynth.private.engine.nearest import Voters


def dp_nearest_votes(voters: Voters, candidate_embeddings: np.ndarray,
                     candidate_labels: np.ndarray | None,
                     mechanism: SubsampledGaussianHistogram, ledger: PrivacyLedger,
                     noise: NoiseSource, stage: str, records_per_unit: int = 1) -> np.ndarray:
    """Noisy vote count per candidate (floats; may be negative).

    The mechanism samples and counts one vote per unit, so units must hold one record.
    The voters' search (`dpsynth.private.engine.nearest.SEARCHES`) finds each unit's candidate; an
    approximate one still gives each unit one vote for one candidate, so the charge is the
    same.
    """
    _check(records_per_unit, candidate_embeddings)
    votes = voters.votes(candidate_embeddings, candidate_labels)
    return ledger.release(stage, mechanism, Votes(votes, len(candidate_embeddings)), noise)


def dp_labelled_votes(voters: Voters, candidate_embeddings: np.ndarray, n_labels: int,
                      mechanism: SubsampledGaussianHistogram, ledger: PrivacyLedger,
                      noise: NoiseSource, stage: str, records_per_unit: int = 1) -> np.ndarray:
    """Noisy vote count per candidate and label, shape (candidates, n_labels).

    Each record votes for its nearest candidate whatever label it was generated for, in its
    own label's cell: the votes say which label a candidate belongs to, where a generator's
    label conditioning may not steer (a pool retrieving by label name). One record still
    moves one cell by one, so the release and its charge are those of `dp_nearest_votes`;
    only the histogram is n_labels times longer.
    """
    _check(records_per_unit, candidate_embeddings)
    votes = voters.votes(candidate_embeddings, n_labels=n_labels)
    cells = Votes(votes, len(candidate_embeddings) * n_labels)
    return ledger.release(stage, mechanism, cells, noise).reshape(-1, n_labels)


def _check(records_per_unit: int, candidate_embeddings: np.ndarray) -> None:
    if records_per_unit != 1:
        raise InputError("nearest-neighbour voting counts one vote per privacy unit: set "
                         "data.max_records_per_user: 1 for this recipe")
    if len(candidate_embeddings) == 0:  # a public fact: how many candidates the generator gave
        raise DpsynthError("no candidates to vote on: the generator produced no usable text "
                           "for this step, so nothing was released; check the generator")
