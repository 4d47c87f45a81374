"""PATE teachers (kd-tutor §3.4) on disjoint partitions of the private units; their noisy
aggregate is `dpsynth.private.releases.pate`. Class 0 is "public"; a binary teacher's class 1
is "private", a labelled teacher's class 1 + c is "private, label c". A teacher votes hard (the
class it predicts) or soft: one class drawn from its probabilities (`soft_vote`) by a keyed
uniform that no record touches (`sampled_votes`), so that soft and hard votes are the same
release.

Partitions come from a keyed hash of each unit's own text, not from positions in a shuffled
list: adding or removing a unit then changes one teacher only, which is what bounds the
aggregate's sensitivity. On a Ray cluster (`dpsynth.private.engine.ray.ShardedVoters.teachers`)
each worker holds whole partitions and fits their teachers by the same `fit_teachers`; only
the vote counts come back, to be summed and released.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from dpsynth.data import Access, PrivateDataset


def partition_units(unit_texts: Sequence[str], n_teachers: int, key: bytes) -> np.ndarray:
    """Teacher index per unit, from a keyed hash of the unit's text."""
    return np.fromiter(
        (int.from_bytes(hashlib.blake2b(t.encode("utf-8"), key=key, digest_size=8).digest(),
                        "big") % n_teachers for t in unit_texts),
        dtype=np.int64, count=len(unit_texts))


def train_classifier(x: np.ndarray, y: np.ndarray, seed: int) -> LogisticRegression:
    """A classifier on embeddings, classes balanced: the public negatives outnumber a
    partition's private records."""
    model = LogisticRegression(max_iter=1000, class_weight="balanced", random_state=seed)
    return fit_quietly(model, x, y)


def train_on_shares(x: np.ndarray, shares: np.ndarray, seed: int) -> LogisticRegression:
    """A classifier on embeddings that learns each row's class shares (cross-entropy against
    soft labels; one-hot shares make it `train_classifier`): a row once per class it has a
    share of, weighted by the share, classes balanced by their total share."""
    mass = shares.sum(axis=0)
    rows, classes = np.nonzero(shares)
    weights = shares[rows, classes] * len(x) / (np.count_nonzero(mass) * mass[classes])
    model = LogisticRegression(max_iter=1000, random_state=seed)
    return fit_quietly(model, x[rows], classes, sample_weight=weights)


def fit_quietly(model: LogisticRegression, x: np.ndarray, y: np.ndarray,
                **fit: np.ndarray) -> LogisticRegression:
    """`model.fit` without its ConvergenceWarning: whether a teacher's partition converges
    depends on its private records, and the warning would write that bit to stderr (or a Ray
    worker's log) after the first release, uncharged."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(x, y, **fit)


def teacher_partitions(private: PrivateDataset, n_teachers: int, key: bytes,
                       labelled: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The records the teachers learn from, each one's teacher and each one's class: a unit's
    repeated texts count once; a unit's teacher is a keyed hash of its own texts, so a new unit
    moves one teacher; a record is class 1, or with `labelled` class 1 + its label."""
    texts = private.texts(Access.LEDGERED_OP)
    keep = first_per_unit(texts, private.unit_ids())
    classes = (1 + private.label_codes(Access.LEDGERED_OP)[keep] if labelled
               else np.ones(len(keep), dtype=np.int64))
    units = private.unit_ids()[keep]
    unit_texts: dict[int, list[str]] = {}
    for i, unit in zip(keep, units, strict=True):
        unit_texts.setdefault(int(unit), []).append(texts[i])
    ids = sorted(unit_texts)
    hashed = partition_units(["\n".join(sorted(unit_texts[u])) for u in ids], n_teachers, key)
    part_of_unit = dict(zip(ids, hashed.tolist(), strict=True))
    return keep, np.array([part_of_unit[int(u)] for u in units], dtype=np.int64), classes


def fit_teachers(embeddings: np.ndarray, parts: np.ndarray, classes: np.ndarray,
                 negatives: np.ndarray, teachers: Iterable[int], seed: int) -> list:
    """Teacher m, for each m of `teachers`: its partition's records (rows of `embeddings`,
    `parts` == m) against the public `negatives` (class 0). Wherever the embeddings are (here
    or on a Ray worker holding whole partitions), teacher m is fit on the same rows in the
    same order."""
    return [_fit_teacher(np.vstack([embeddings[parts == m], negatives]),
                         np.r_[classes[parts == m], np.zeros(len(negatives), np.int64)],
                         seed + m) for m in teachers]


def _fit_teacher(x: np.ndarray, y: np.ndarray, seed: int) -> LogisticRegression | _Always:
    """A classifier, or where its rows hold one class only (an empty partition, or no public
    negatives and one label) a teacher that always answers that class: a fixed rule of its
    own partition, as any teacher may be, where a fit would fail between two releases."""
    classes = np.unique(y)
    if len(classes) > 1:
        return train_classifier(x, y, seed)
    return _Always(int(classes[0]) if len(classes) else 0)


def train_teachers(private: PrivateDataset,
                   embed: Callable[[PrivateDataset], np.ndarray], negatives: np.ndarray,
                   n_teachers: int, key: bytes, seed: int, labelled: bool = False,
                   embedded: np.ndarray | None = None) -> list:
    """`n_teachers` classifiers of private records against the public `negatives`, teacher m
    on partition m of the private units (`teacher_partitions`); `embed` embeds private
    records (the run's private path), unless they are `embedded` already, row for row (read
    in place, out of core or not: the records a teacher skips are in no partition)."""
    keep, parts, classes = teacher_partitions(private, n_teachers, key, labelled)
    if embedded is None:
        return fit_teachers(embed(private.subset(keep)), parts, classes, negatives,
                            range(n_teachers), seed)
    every_part = np.full(len(embedded), -1, dtype=np.int64)
    every_class = np.zeros(len(embedded), dtype=np.int64)
    every_part[keep], every_class[keep] = parts, classes
    return fit_teachers(embedded, every_part, every_class, negatives, range(n_teachers), seed)


def first_per_unit(texts: list[str], units: np.ndarray) -> np.ndarray:
    """Indices of the first copy of each text within its unit: a unit's repeats would sit in
    its partition twice (kd-tutor §3.4). Copies held by different units all stay: dropping
    one because another unit holds it would let that unit move another's teacher."""
    seen: dict[tuple[int, str], int] = {}
    for i, (unit, text) in enumerate(zip(units.tolist(), texts, strict=True)):
        seen.setdefault((unit, text), i)
    return np.array(sorted(seen.values()), dtype=np.int64)


class _Always:
    """A teacher that has seen one class only (class 0, public, for an empty partition)."""

    def __init__(self, label: int = 0) -> None:
        self.classes_ = np.array([label], dtype=np.int64)

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.full(len(x), self.classes_[0], dtype=np.int64)

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        return np.ones((len(x), 1))


SOFT_GRID = 2.0**-8
"""The grid a soft vote lies on: its classes' cumulative sums are then exact and the last is
exactly 1, so a draw against them takes each class with exactly its probability."""


def soft_vote(teacher: LogisticRegression, queries: np.ndarray, n_classes: int) -> np.ndarray:
    """The teacher's probabilities per query and class, each private class floored to
    `SOFT_GRID` and the rest given to public: every row is a probability vector, whatever the
    classifier returns."""
    proba = np.zeros((len(queries), n_classes))
    proba[:, teacher.classes_] = np.nan_to_num(np.clip(teacher.predict_proba(queries), 0, 1))
    total = proba.sum(axis=1, keepdims=True)  # 1 up to rounding, for any sound classifier
    proba = np.where(total > 0, proba / np.where(total > 0, total, 1), np.eye(n_classes)[0])
    private = np.floor(proba[:, 1:] / SOFT_GRID) * SOFT_GRID
    return np.c_[1.0 - private.sum(axis=1), private]


def query_digests(queries: np.ndarray) -> list[bytes]:
    """A digest of each query's vector (as float64, so any copy of the queries hashes
    alike)."""
    rows = np.ascontiguousarray(queries, dtype=np.float64)
    return [hashlib.blake2b(row.tobytes(), digest_size=16).digest() for row in rows]


def draw_uniforms(key: bytes, teacher: int, digests: Sequence[bytes]) -> np.ndarray:
    """Teacher `teacher`'s uniform in [0, 1) per query (by its digest): a keyed hash of the
    teacher's global id and the query, so it depends on neither the records nor where the
    teacher is fit."""
    ident = int(teacher).to_bytes(8, "big")
    return np.fromiter(
        (int.from_bytes(hashlib.blake2b(ident + d, key=key, digest_size=8).digest(), "big")
         >> 11 for d in digests), dtype=np.float64, count=len(digests)) * 2.0**-53


def sampled_votes(teacher: LogisticRegression, queries: np.ndarray, n_classes: int,
                  uniforms: np.ndarray) -> np.ndarray:
    """The class each query's uniform falls in along the teacher's cumulative `soft_vote`:
    class c with probability exactly its share (the sums are exact, the last is 1 > u)."""
    cumulative = np.cumsum(soft_vote(teacher, queries, n_classes), axis=1)
    return (uniforms[:, None] >= cumulative).sum(axis=1)


def teacher_votes(teachers: Sequence[LogisticRegression], queries: np.ndarray,
                  n_classes: int = 2, soft_key: bytes | None = None,
                  ids: Sequence[int] | None = None) -> np.ndarray:
    """Votes per query and class summed over teachers, shape (n_queries, n_classes): how
    many teachers cast each class.

    A hard vote (PATE's) is the class the teacher predicts. A soft one (`soft_key` given,
    kd-tutor Eq. 4 sampled) is a class drawn from the teacher's `soft_vote` by its uniform
    (`draw_uniforms`, keyed on `soft_key` and teacher m's global id, `ids`: 0, 1, … unless
    given), so its expected count is the soft sum. Either way, when a unit joins or leaves
    only its teacher's vote may move from one class to another (for soft votes at any fixed
    draw, the uniforms being the same on both datasets): two counts change by one whatever
    the number of classes (L2 sensitivity √2, L1 2), and integer counts take exact discrete
    noise.
    """
    counts = np.zeros((len(queries), n_classes), dtype=np.int64)
    rows = np.arange(len(queries))
    digests = query_digests(queries) if soft_key is not None else []
    for m, teacher in zip(range(len(teachers)) if ids is None else ids, teachers, strict=True):
        if soft_key is None:
            cast = teacher.predict(queries).astype(np.int64)
        else:
            cast = sampled_votes(teacher, queries, n_classes,
                                 draw_uniforms(soft_key, m, digests))
        counts[rows, cast] += 1
    return counts


@dataclass(frozen=True, eq=False)
class Teachers:
    """Teachers trained here (`train_teachers`), as `label_within_budget` asks them: votes
    per query and class. On a Ray cluster `dpsynth.private.engine.ray.ShardedTeachers` answers the
    same from the workers that hold the embeddings."""

    models: list

    def __len__(self) -> int:
        return len(self.models)

    def votes(self, queries: np.ndarray, n_classes: int = 2,
              soft_key: bytes | None = None) -> np.ndarray:
        return teacher_votes(self.models, queries, n_classes, soft_key)

    def close(self) -> None:
        """Nothing to free (sharded teachers stop their actors here)."""

    def __reduce_ex__(self, protocol: object) -> object:
        raise TypeError("teachers of private records must not reach a checkpoint, cache or "
                        "worker")
