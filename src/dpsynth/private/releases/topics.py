"""The DP topic histogram of a private set over a public topic model (ctcl §3.3)."""

from __future__ import annotations

import numpy as np

from dpsynth.data import Access, PrivateDataset
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.privacy.mechanisms import Gaussian
from dpsynth.privacy.noise import NoiseSource
from dpsynth.private.engine.nearest import Voters
from dpsynth.private.engine.ray import ShardedVoters


def dp_topic_histogram(voters: Voters | ShardedVoters, centroids: np.ndarray,
                       mechanism: Gaussian, ledger: PrivacyLedger, noise: NoiseSource,
                       stage: str, label_codes: np.ndarray | None = None,
                       n_labels: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Each private record goes to its nearest topic (of the public `centroids`); Gaussian
    noise on the counts.

    `voters` hold the private records' embeddings (here, or on a Ray cluster's workers, which
    send back each record's topic only). With `label_codes` the counts are over (label, topic)
    cells, one row per label: a record is still in exactly one cell, so the sensitivity is
    that of the topic counts alone. Returns the assignments (private: they feed DP training
    only) and the noisy counts, of shape (n_labels, topics).
    """
    assigned = voters.nearest(centroids)
    topics = len(centroids)
    rows = np.zeros(len(assigned), dtype=int) if label_codes is None else np.asarray(label_codes)
    counts = np.bincount(rows * topics + assigned, minlength=n_labels * topics)
    noisy = np.asarray(ledger.release(stage, mechanism, counts, noise), dtype=float)
    return assigned, noisy.reshape(n_labels, topics)


def dp_condition_histogram(private: PrivateDataset, voters: Voters | ShardedVoters,
                           centroids: np.ndarray, mechanism: Gaussian, ledger: PrivacyLedger,
                           noise: NoiseSource, stage: str) -> tuple[np.ndarray, np.ndarray]:
    """`dp_topic_histogram` over (label, topic) cells when the data has labels (one row
    otherwise): CTCL's conditions."""
    codes = private.label_codes(Access.LEDGERED_OP) if private.has_labels else None
    return dp_topic_histogram(voters, centroids, mechanism, ledger, noise, stage, label_codes=codes,
                              n_labels=len(private.label_names or ()) or 1)
