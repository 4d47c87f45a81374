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


def noisy_votes(votes: np.ndarray, mechanism: Gaussian | Laplace, ledger: PrivacyLedger,
                noise: NoiseSource, stage: str) -> np.ndarray:
    """Release the vote rows with noise. The mechanism covers all rows at once: one teacher
    moves each row by at most two counts' worth (L2 √2, L1 2), so `max_changed` = 2 × rows,
    the same as composing one release per row, for any number of classes."""
    if mechanism.max_changed < 2 * len(votes):
        raise ValueError(f"mechanism covers {mechanism.max_changed} changed coordinates, "
                         f"the votes move {2 * len(votes)}")
    return np.asarray(ledger.release(stage, mechanism, votes, noise), dtype=float)


def shares(noisy: np.ndarray, soft: bool) -> np.ndarray:
    """What the student learns from, per query, post-processing only. Hard: the noisy
    argmax, one-hot. Soft: the noisy counts (of sampled soft votes, whose expectation is the
    soft sum) clipped at 0 and normalised (the seed renormalises
    out-of-range noisy values the same way, §3.5 note 2), uniform where none stays above 0."""
    if not soft:
        return np.eye(noisy.shape[1])[np.argmax(noisy, axis=1)]
    kept = np.clip(noisy, 0.0, None)
    total = kept.sum(axis=1, keepdims=True)
    return np.where(total > 0, kept / np.where(total > 0, total, 1.0), 1.0 / noisy.shape[1])


def label_within_budget(teachers: Teachers, queries: np.ndarray,
                        per_query: Gaussian | Laplace, batch: int, ledger: PrivacyLedger,
                        noise: NoiseSource, stage: str, n_classes: int = 2,
                        soft_key: bytes | None = None) -> np.ndarray:
    """Noisy teacher labels (`shares`, one row per query) for `queries`, in order and batch
    by batch, from hard votes or soft ones sampled with `soft_key` (`teachers.teacher_votes`:
    the same release either way); a batch that would exceed the budget is halved until
    it fits, and labelling stops when no query fits. `per_query` is the planned release of
    one query; a batch of b releases b of them at once (b times the changed coordinates:
    the same event as b separate releases). Returns the labels of the prefix of `queries`
    that was labelled."""
    labels = [np.zeros((0, n_classes))]
    done = 0
    while done < len(queries):
        size = min(batch, len(queries) - done)
        while size and ledger.would_spend(_batch(per_query, size).event) > ledger.epsilon:
            size //= 2
        if size == 0:
            break
        votes = teachers.votes(queries[done: done + size], n_classes, soft_key)
        labels.append(shares(noisy_votes(votes, _batch(per_query, size), ledger, noise,
                                         stage), soft_key is not None))
        done += size
    return np.vstack(labels)


def _batch(per_query: Gaussian | Laplace, size: int) -> Gaussian | Laplace:
    return replace(per_query, max_changed=per_query.max_changed * size)
