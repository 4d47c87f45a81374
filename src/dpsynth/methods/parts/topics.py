"""A universal topic model built once on public text (ctcl §3.2); the DP topic
histogram of a private set over it is `dpsynth.private.releases.topics`.

Topics are clusters of MiniLM embeddings of public paragraphs — HDBSCAN on a PCA reduction,
falling back to k-means when HDBSCAN leaves most points as noise — each named by its 10
class-based TF-IDF keywords. The model is an artefact (centroids, keywords, metadata) saved
with a version, so it can be reused across private sets.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.cluster import HDBSCAN, KMeans
from sklearn.decomposition import PCA

from dpsynth.methods.parts.keywords import class_keywords

FORMAT = "dpsynth.topic-model/1"


@dataclass(frozen=True)
class TopicModel:
    """Unit-normalised topic centroids and their keywords."""

    centroids: np.ndarray
    keywords: list[list[str]]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def n_topics(self) -> int:
        return len(self.centroids)

    def save(self, folder: str | Path) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "centroids.npy", self.centroids.astype(np.float32))
        (folder / "topics.json").write_text(json.dumps(
            {"format": FORMAT, "keywords": self.keywords, "meta": self.meta}, indent=1),
            encoding="utf-8")
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> TopicModel:
        folder = Path(folder)
        data = json.loads((folder / "topics.json").read_text(encoding="utf-8"))
        if data.get("format") != FORMAT:
            raise ValueError(f"{folder}: not a dpsynth topic model ({data.get('format')!r})")
        centroids = np.load(folder / "centroids.npy")
        if len(centroids) != len(data["keywords"]):
            raise ValueError(f"{folder}: {len(centroids)} centroids but "
                             f"{len(data['keywords'])} keyword lists")
        return cls(centroids, data["keywords"], data.get("meta", {}))


def build_topic_model(texts: list[str], embeddings: np.ndarray, n_topics: int, seed: int,
                      n_keywords: int = 10, min_cluster_size: int = 25,
                      max_noise: float = 0.5) -> TopicModel:
    """Cluster public embeddings into topics and name each by its c-TF-IDF keywords."""
    labels, method = _cluster(embeddings, n_topics, seed, min_cluster_size, max_noise)
    topics = [t for t in np.unique(labels) if t >= 0]
    centroids = np.stack([embeddings[labels == t].mean(axis=0) for t in topics])
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    groups = {str(i): [texts[j] for j in np.flatnonzero(labels == t)]
              for i, t in enumerate(topics)}
    words = class_keywords(groups, n_keywords)
    meta = {"method": method, "documents": len(texts), "seed": seed,
            "noise_fraction": float(np.mean(labels < 0))}
    return TopicModel(centroids.astype(np.float32), [words[str(i)] for i in range(len(topics))],
                      meta)


def _cluster(embeddings: np.ndarray, n_topics: int, seed: int, min_cluster_size: int,
             max_noise: float) -> tuple[np.ndarray, str]:
    if len(embeddings) > 2 * min_cluster_size:
        reduced = PCA(n_components=min(20, embeddings.shape[1]),
                      random_state=seed).fit_transform(embeddings)
        labels = HDBSCAN(min_cluster_size=min_cluster_size, copy=True).fit_predict(reduced)
        if np.mean(labels < 0) <= max_noise and len(np.unique(labels[labels >= 0])) >= 2:
            return labels, "hdbscan"
    kmeans = KMeans(n_clusters=n_topics, n_init=3, random_state=seed).fit(embeddings)
    return kmeans.labels_, "kmeans"
