"""Length and label distributions of two text sets, and the distances between them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
from scipy import stats


def word_lengths(texts: Sequence[str]) -> np.ndarray:
    """Words per text (whitespace split), the unit dpga-textsyn's length metadata uses."""
    return np.array([len(t.split()) for t in texts], dtype=np.int64)


def length_distances(real: Sequence[str], synthetic: Sequence[str]) -> dict[str, float]:
    """Mean lengths, the 1-D Wasserstein distance (in words) and the Kolmogorov–Smirnov
    statistic between the two length distributions (dpga-textsyn Fig. 2)."""
    a, b = word_lengths(real), word_lengths(synthetic)
    return {
        "real_mean_words": float(a.mean()),
        "synthetic_mean_words": float(b.mean()),
        "wasserstein_words": float(stats.wasserstein_distance(a, b)),
        "ks_statistic": float(stats.ks_2samp(a, b).statistic),
    }


def label_shares(labels: Sequence[str], classes: Sequence[str]) -> np.ndarray:
    """The share of each class in `labels`, in the order of `classes`."""
    counts = Counter(labels)
    total = max(len(labels), 1)
    return np.array([counts.get(c, 0) / total for c in classes])


def label_distances(real: Sequence[str], synthetic: Sequence[str]) -> dict[str, object]:
    """Total variation distance between the label distributions (0 same, 1 disjoint), and
    each class's share on both sides."""
    classes = sorted(set(real) | set(synthetic))
    p, q = label_shares(real, classes), label_shares(synthetic, classes)
    return {
        "total_variation": float(0.5 * np.abs(p - q).sum()),
        "real_shares": dict(zip(classes, map(float, p), strict=True)),
        "synthetic_shares": dict(zip(classes, map(float, q), strict=True)),
    }
