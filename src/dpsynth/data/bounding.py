"""Contribution bounding: cap the records each user contributes, so the user is the unit."""

from __future__ import annotations

import numpy as np


def bound_contributions(users: list[str], k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Keep at most `k` records per user, chosen uniformly at random but reproducibly.

    Returns the kept record indices (in file order) and, for each, the integer id of its unit.
    The choice depends only on the seed and the user column, so reruns keep the same records.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    codes, uniques = _factorize(users)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(users))
    taken = np.zeros(len(uniques), dtype=np.int64)
    keep = []
    for index in order:
        unit = codes[index]
        if taken[unit] < k:
            taken[unit] += 1
            keep.append(index)
    kept = np.sort(np.asarray(keep, dtype=np.int64))
    return kept, codes[kept]


def _factorize(values: list[str]) -> tuple[np.ndarray, list[str]]:
    index: dict[str, int] = {}
    codes = np.fromiter((index.setdefault(v, len(index)) for v in values), dtype=np.int64,
                        count=len(values))
    return codes, list(index)
