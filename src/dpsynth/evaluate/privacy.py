"""Privacy diagnostics: how much of the private set shows through the synthetic set.

These read the private records, so nothing they return is differentially private: every
result carries `PRIVATE_NOTICE`, and no function here returns or logs a private text, only
counts, similarities and AUCs. They are checks for the data owner, not numbers to publish.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np
from sklearn.metrics import roc_auc_score

from dpsynth.errors import InputError

PRIVATE_NOTICE = ("computed on private data; not differentially private and not for "
                  "publication")

HISTOGRAM_EDGES = np.round(np.linspace(0.0, 1.0, 21), 2)
"""Cosine-similarity bins of width 0.05; negative similarities fall into the first bin."""


def nearest_similarity(query: np.ndarray, reference: np.ndarray, chunk: int = 2048) -> np.ndarray:
    """For each query row, its highest cosine similarity to any reference row (rows are
    unit-normalised embeddings)."""
    if query.shape[1] != reference.shape[1]:
        raise InputError(f"nearest_similarity: widths differ ({query.shape[1]} vs "
                         f"{reference.shape[1]})")
    if len(reference) == 0:
        raise InputError("nearest_similarity: the reference set is empty")
    out = np.empty(len(query), dtype=np.float64)
    for start in range(0, len(query), chunk):
        out[start:start + chunk] = (query[start:start + chunk] @ reference.T).max(axis=1)
    return out


def similarity_histogram(similarities: np.ndarray) -> dict[str, object]:
    """Counts per 0.05-wide bin and a few quantiles: the nearest-private-neighbour histogram."""
    counts, _ = np.histogram(np.clip(similarities, 0.0, 1.0), bins=HISTOGRAM_EDGES)
    quantiles = np.quantile(similarities, [0.5, 0.9, 0.99, 1.0]) if len(similarities) else []
    return {
        "bin_edges": HISTOGRAM_EDGES.tolist(),
        "counts": counts.tolist(),
        "median": float(quantiles[0]) if len(quantiles) else None,
        "p90": float(quantiles[1]) if len(quantiles) else None,
        "p99": float(quantiles[2]) if len(quantiles) else None,
        "max": float(quantiles[3]) if len(quantiles) else None,
    }


def normalise_text(text: str) -> str:
    """Case-folded with whitespace collapsed: the form in which a copy counts as exact."""
    return re.sub(r"\s+", " ", text).strip().casefold()


def text_fingerprints(texts: Sequence[str]) -> list[str]:
    """A SHA-256 of each normalised text, so copies are found without keeping the texts."""
    return [hashlib.sha256(normalise_text(t).encode("utf-8")).hexdigest() for t in texts]


def copies_of_private(synthetic_texts: Sequence[str], private_texts: Sequence[str],
                      synthetic_to_private: np.ndarray, threshold: float = 0.95,
                      max_rows: int = 100) -> dict[str, object]:
    """Synthetic records that repeat a private record exactly (after normalisation) or nearly
    (nearest-private cosine ≥ `threshold` but not exact).

    Returns counts, fractions and the synthetic row numbers (0-based, at most `max_rows`),
    which point into the synthetic set so the copies can be dropped; no text.
    """
    if len(synthetic_to_private) != len(synthetic_texts):
        raise InputError("copies_of_private: one similarity per synthetic text is needed")
    private = set(text_fingerprints(private_texts))
    exact = np.array([fp in private for fp in text_fingerprints(synthetic_texts)], dtype=bool)
    near = (np.asarray(synthetic_to_private) >= threshold) & ~exact
    n = max(len(synthetic_texts), 1)
    return {
        "exact": int(exact.sum()),
        "exact_fraction": float(exact.sum() / n),
        "near": int(near.sum()),
        "near_fraction": float(near.sum() / n),
        "near_threshold": threshold,
        "exact_rows": np.flatnonzero(exact)[:max_rows].tolist(),
        "near_rows": np.flatnonzero(near)[:max_rows].tolist(),
    }


def membership_auc(member_scores: np.ndarray, nonmember_scores: np.ndarray) -> float:
    """ROC AUC of telling members from non-members by a score (higher = member).

    0.5 is chance: the attack learns nothing about who was in the private set.
    """
    if len(member_scores) == 0 or len(nonmember_scores) == 0:
        raise InputError("membership_auc: needs members and non-members")
    y = np.r_[np.ones(len(member_scores)), np.zeros(len(nonmember_scores))]
    return float(roc_auc_score(y, np.r_[member_scores, nonmember_scores]))


def balanced_indices(n_members: int, n_nonmembers: int, limit: int,
                     seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Equal-size random subsets of members and non-members, so AUC 0.5 means chance."""
    n = min(n_members, n_nonmembers, limit)
    rng = np.random.default_rng(seed)
    return (np.sort(rng.choice(n_members, n, replace=False)),
            np.sort(rng.choice(n_nonmembers, n, replace=False)))
