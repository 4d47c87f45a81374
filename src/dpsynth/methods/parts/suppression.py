"""Similarity suppression (dpga-textsyn §3.3.2): pick by noisy votes, skip near-duplicates.

Pure post-processing of a DP release (the noisy votes) and public embeddings: it costs no
privacy. The threshold τ itself is a DP release made elsewhere.
"""

from __future__ import annotations

import numpy as np


def select_distinct(noisy_votes: np.ndarray, embeddings: np.ndarray, n_select: int,
                    tau: float, step: float = 0.01) -> tuple[np.ndarray, float]:
    """Select `n_select` candidates in descending vote order, suppressing neighbours.

    Each selected candidate excludes every remaining candidate whose cosine similarity to it
    exceeds τ. When a pass selects too few, τ rises by `step` and the pass reruns. Returns
    the selected indices (in selection order) and the τ that produced them.
    """
    n = len(noisy_votes)
    if len(embeddings) != n:
        raise ValueError("votes and embeddings differ in length")
    if not 0 < n_select <= n:
        raise ValueError(f"n_select must be in 1..{n}, got {n_select}")
    order = np.argsort(-noisy_votes, kind="stable")
    while True:
        chosen = _one_pass(order, embeddings, n_select, tau)
        if len(chosen) >= n_select or tau > 1.0:
            return np.asarray(chosen[:n_select], dtype=np.int64), tau
        tau = round(tau + step, 10)


def _one_pass(order: np.ndarray, embeddings: np.ndarray, n_select: int,
              tau: float) -> list[int]:
    suppressed = np.zeros(len(order), dtype=bool)
    chosen: list[int] = []
    for index in order:
        if suppressed[index]:
            continue
        chosen.append(int(index))
        if len(chosen) == n_select:
            break
        suppressed |= embeddings @ embeddings[index] > tau
    return chosen
