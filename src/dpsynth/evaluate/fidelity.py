"""How close two sets of embeddings are as distributions, and how diverse one set is.

Every function takes `(n, d)` float arrays (rows unit-normalised where a cosine is meant) and
returns plain floats, so the metrics work with any embedder and are cheap to test on
constructed vectors. Large sets are subsampled to `max_samples` rows with a fixed seed: the
quadratic metrics (k-NN, self-similarity, optimal transport) then stay within seconds.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import pairwise_distances

from dpsynth.errors import InputError


def subsample(x: np.ndarray, n: int, seed: int) -> np.ndarray:
    """At most `n` rows of `x`, drawn without replacement by a seeded generator."""
    if len(x) <= n:
        return x
    idx = np.random.default_rng(seed).choice(len(x), size=n, replace=False)
    return x[np.sort(idx)]


def frechet_distance(real: np.ndarray, synthetic: np.ndarray) -> float:
    """Fréchet distance between Gaussians fitted to the two sets (FID on text embeddings).

    ‖μ_r − μ_s‖² + Tr(Σ_r + Σ_s − 2 (Σ_r Σ_s)^½): 0 for identical sets, ‖v‖² for a set
    shifted by v.
    """
    _check_pair(real, synthetic, "frechet_distance", minimum=2)
    mu_r, mu_s = real.mean(axis=0), synthetic.mean(axis=0)
    cov_r = np.atleast_2d(np.cov(real, rowvar=False))
    cov_s = np.atleast_2d(np.cov(synthetic, rowvar=False))
    # Tr((Σ_r Σ_s)^½) = Σ √λ over the eigenvalues of Σ_r^½ Σ_s Σ_r^½, a symmetric PSD
    # matrix: stable even when n < d leaves both covariances singular.
    root_r = _psd_sqrt(cov_r)
    cross = np.sqrt(np.clip(linalg.eigvalsh(root_r @ cov_s @ root_r), 0.0, None)).sum()
    trace = np.trace(cov_r) + np.trace(cov_s) - 2.0 * cross
    return float(max(np.sum((mu_r - mu_s) ** 2) + trace, 0.0))


def knn_precision_recall(real: np.ndarray, synthetic: np.ndarray, k: int = 3,
                         max_samples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Improved precision and recall (Kynkäänniemi et al., 2019).

    Each set's manifold is the union of balls around its points whose radius is the distance
    to the point's k-th nearest neighbour in the same set. Precision is the share of synthetic
    points inside the real manifold (are synthetic texts realistic?); recall is the share of
    real points inside the synthetic manifold (does the synthetic set cover the real one?).
    """
    _check_pair(real, synthetic, "knn_precision_recall", minimum=k + 1)
    real = subsample(real, max_samples, seed)
    synthetic = subsample(synthetic, max_samples, seed + 1)
    real_radius = _kth_neighbour_distance(real, k)
    synth_radius = _kth_neighbour_distance(synthetic, k)
    cross = pairwise_distances(synthetic, real)  # (n_synthetic, n_real)
    precision = float(np.mean((cross <= real_radius[None, :]).any(axis=1)))
    recall = float(np.mean((cross <= synth_radius[:, None]).any(axis=0)))
    return precision, recall


def self_similarity(x: np.ndarray, max_samples: int = 2000, seed: int = 0) -> float:
    """Mean cosine similarity over distinct pairs of one set (dpga-textsyn Fig. 3).

    High values mean a homogeneous set; compare with the same number for real data.
    """
    if len(x) < 2:
        raise InputError(f"self_similarity needs at least 2 rows, got {len(x)}")
    x = _unit(subsample(x, max_samples, seed))
    sims = x @ x.T
    n = len(x)
    return float((sims.sum() - np.trace(sims)) / (n * (n - 1)))


def wasserstein_distance(real: np.ndarray, synthetic: np.ndarray, max_samples: int = 2000,
                         seed: int = 0) -> float:
    """Exact 1-Wasserstein distance (Euclidean ground cost) between equal-size subsamples.

    Both sets are subsampled to the same size n; between two uniform measures on n points
    each, an optimal transport plan is a permutation (Birkhoff–von Neumann), so the linear
    assignment problem solves the transport problem exactly. This is the distance plotted
    in embedding-eda Fig. 3: 0 for identical sets, ‖v‖ for a set shifted by v.
    """
    _check_pair(real, synthetic, "wasserstein_distance", minimum=1)
    n = min(len(real), len(synthetic), max_samples)
    real, synthetic = subsample(real, n, seed), subsample(synthetic, n, seed + 1)
    cost = pairwise_distances(real, synthetic)
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].mean())


def mauve_score(real: np.ndarray, synthetic: np.ndarray, max_samples: int = 2000,
                seed: int = 0) -> float:
    """MAUVE (Pillutla et al., 2021) on precomputed embeddings, through mauve-text.

    1 means the two sets quantise into the same histogram; near 0, disjoint. Only rankings
    under one configuration are meaningful (ctcl Fig. 4 says the same).
    """
    _check_pair(real, synthetic, "mauve_score", minimum=10)
    try:
        import mauve
    except ImportError:
        raise InputError("MAUVE needs the 'dist' extra: pip install 'dpsynth[dist]'") from None
    real = subsample(real, max_samples, seed)
    synthetic = subsample(synthetic, max_samples, seed + 1)
    result = mauve.compute_mauve(p_features=real.astype(np.float32),
                                 q_features=synthetic.astype(np.float32),
                                 kmeans_num_redo=2, kmeans_max_iter=200, seed=seed,
                                 verbose=False)
    return float(result.mauve)


def _psd_sqrt(matrix: np.ndarray) -> np.ndarray:
    values, vectors = linalg.eigh(matrix)
    return (vectors * np.sqrt(np.clip(values, 0.0, None))) @ vectors.T


def _kth_neighbour_distance(x: np.ndarray, k: int) -> np.ndarray:
    dists = pairwise_distances(x)
    np.fill_diagonal(dists, np.inf)
    return np.partition(dists, k - 1, axis=1)[:, k - 1]


def _unit(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms == 0, 1.0, norms)


def _check_pair(a: np.ndarray, b: np.ndarray, name: str, minimum: int) -> None:
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise InputError(f"{name}: expected two (n, d) arrays of the same width, got "
                         f"{a.shape} and {b.shape}")
    if min(len(a), len(b)) < minimum:
        raise InputError(f"{name}: needs at least {minimum} rows per set, got "
                         f"{len(a)} and {len(b)}")
