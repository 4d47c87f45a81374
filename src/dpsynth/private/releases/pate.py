"""PATE's noisy aggregate (kd-tutor §3.4): the teachers' votes on each query released with
noise, batch by batch within the budget. The teachers themselves live where the private
embeddings do (`dpsynth.private.engine.teachers`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.privacy.mechanisms import Gaussian, Laplace
from dpsynth.privacy.noise import NoiseSource
from dpsynth.private.engine.teachers import Teachers


def noisy_argmax(votes: np.ndarray, mechanism: Gaussian | Laplace, ledger: PrivacyLedger,
                 noise: NoiseSource, stage: str) -> np.ndarray:
    """Release the argmax of each noisy vote vector (the class index). The mechanism covers
    all rows at once: one teacher moves two counts per row, so `max_changed` = 2 × rows, the
    same as composing one release per row, for any number of classes."""
    if mechanism.max_changed < 2 * len(votes):
        raise ValueError(f"mechanism covers {mechanism.max_changed} changed coordinates, "
                         f"the votes move {2 * len(votes)}")
    noisy = np.asarray(ledger.release(stage, mechanism, votes, noise))
    return np.argmax(noisy, axis=1)


def label_within_budget(teachers: Teachers, queries: np.ndarray,
                        per_query: Gaussian | Laplace, batch: int, ledger: PrivacyLedger,
                        noise: NoiseSource, stage: str, n_classes: int = 2) -> np.ndarray:
    """Noisy teacher labels for `queries`, in order and batch by batch; a batch that would
    exceed the budget is halved until it fits, and labelling stops when no query fits.
    `per_query` is the planned release of one query; a batch of b releases b of them at once
    (b times the changed coordinates: the same event as b separate releases). Returns the
    labels of the prefix of `queries` that was labelled."""
    labels: list[int] = []
    while len(labels) < len(queries):
        size = min(batch, len(queries) - len(labels))
        while size and ledger.would_spend(_batch(per_query, size).event) > ledger.epsilon:
            size //= 2
        if size == 0:
            break
        votes = teachers.votes(queries[len(labels): len(labels) + size], n_classes)
        labels += noisy_argmax(votes, _batch(per_query, size), ledger, noise, stage).tolist()
    return np.asarray(labels, dtype=np.int64)


def _batch(per_query: Gaussian | Laplace, size: int) -> Gaussian | Laplace:
    return replace(per_query, max_changed=per_query.max_changed * size)
