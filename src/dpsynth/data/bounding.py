"""Contribution bounding: cap the records each user contributes, so the user is the unit.

Which k records a user keeps must depend on that user's records alone: then adding or
removing one user leaves every other user's kept records as they were, and neighbouring
datasets differ by exactly one unit. A rule that shuffles all records together (one
permutation of the whole file) fails this: one new user reorders everyone's choice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

_DOMAIN = b"dpsynth.bounding/1"


def record_rank(text: str) -> int:
    """A pseudo-random rank of one record, from its own text only."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), key=_DOMAIN,
                                          digest_size=8).digest(), "big")


def bound_contributions(users: Sequence[str], texts: Sequence[str],
                        k: int) -> tuple[np.ndarray, np.ndarray]:
    """Keep each user's `k` records of smallest `record_rank` (ties: the user's own order).

    Returns the kept record indices (in file order) and, for each, the integer id of its
    unit. Reproducible across runs; the choice for one user reads none of the others'.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if len(users) != len(texts):
        raise ValueError("users and texts differ in length")
    codes, n_units = _factorize(users)
    by_unit: list[list[tuple[int, int]]] = [[] for _ in range(n_units)]
    for index, (unit, text) in enumerate(zip(codes.tolist(), texts, strict=True)):
        by_unit[unit].append((record_rank(text), index))
    kept = np.sort(np.fromiter((index for records in by_unit
                                for _, index in sorted(records)[:k]), dtype=np.int64))
    return kept, codes[kept]


def _factorize(values: Sequence[str]) -> tuple[np.ndarray, int]:
    index: dict[str, int] = {}
    codes = np.fromiter((index.setdefault(v, len(index)) for v in values), dtype=np.int64,
                        count=len(values))
    return codes, len(index)
