"""Offspring by an estimation-of-distribution step (embedding-eda Alg. 2): public
post-processing of the DP-selected parents.

With the parents e_rank[0], e_rank[1], ... in selection order (best first), μ and σ their
per-coordinate mean and standard deviation, and ē, σ_R those of the top R:

    μ̂ = (1 − α)·μ + α·(e_rank[0] + e_rank[1] − e_rank[−1])
    σ̂ = (1 − α)·σ + α·σ_R
    offspring ~ N(μ̂, diag σ̂²), each then scaled to unit length (the cosine geometry the
    votes and the decoder use).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class GaussianModel:
    """A diagonal Gaussian over embeddings: what a population is sampled from."""

    mean: np.ndarray
    std: np.ndarray

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """`n` unit-length float32 draws."""
        draws = self.mean + rng.standard_normal((n, len(self.mean))) * self.std
        norms = np.linalg.norm(draws, axis=1, keepdims=True)
        return (draws / np.maximum(norms, 1e-12)).astype(np.float32)

    def to_json(self) -> dict[str, Any]:
        return {"mean": self.mean.tolist(), "std": self.std.tolist()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GaussianModel:
        return cls(np.asarray(data["mean"], dtype=np.float64),
                   np.asarray(data["std"], dtype=np.float64))


def estimate(parents: np.ndarray, alpha: float, top_r: int) -> GaussianModel:
    """Alg. 2 lines 1-4 on `parents` in rank order (best first). With one parent the
    'second best' and 'worst' are that parent too."""
    e = np.asarray(parents, dtype=np.float64)
    if e.ndim != 2 or len(e) == 0:
        raise ValueError(f"parents: need a non-empty (n, dim) array, got shape {e.shape}")
    if not 0 <= alpha <= 1 or top_r < 1:
        raise ValueError(f"need 0 <= alpha <= 1 and top_r >= 1, got {alpha}, {top_r}")
    second = e[1] if len(e) > 1 else e[0]
    top = e[: min(top_r, len(e))]
    mean = (1 - alpha) * e.mean(0) + alpha * (e[0] + second - e[-1])
    std = (1 - alpha) * e.std(0) + alpha * np.sqrt(((top - top.mean(0)) ** 2).mean(0))
    return GaussianModel(mean, std)
