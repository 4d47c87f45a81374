"""TF-IDF + truncated SVD (latent semantic analysis): a light embedder that needs no model.

What it may be fit on: the vocabulary, the IDF weights and the SVD directions are functions of
the fit texts and travel with every vector the embedder produces, so fitting on private text
would release private words with no privacy accounting. It is therefore fit on PUBLIC text
only (`fit_texts:` in the config: a public corpus, or earlier synthetic output); it refuses a
`PrivateDataset`. Once fit, it embeds private text locally like any local embedder.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer

from dpsynth.backends.base import Embedder
from dpsynth.data.io import read_table
from dpsynth.data.private import PrivateDataset
from dpsynth.errors import InputError

log = logging.getLogger(__name__)


class TfidfEmbedder(Embedder):
    """Word 1-2-gram TF-IDF (sublinear tf) projected by a seeded truncated SVD, unit rows.

    A text that shares no term with the fit vocabulary maps to one fixed unit vector: to this
    embedder all such texts are indistinguishable.
    """

    is_remote = False

    def __init__(self, fit_texts: Sequence[str], dim: int = 256, seed: int = 0,
                 max_features: int = 100_000) -> None:
        if isinstance(fit_texts, PrivateDataset):
            raise TypeError("TfidfEmbedder is fit on public text only: fitting it on private "
                            "text would release private vocabulary without accounting")
        texts = [t for t in fit_texts if t and t.strip()]
        if len(texts) < 2:
            raise InputError(f"tfidf embedder: needs at least 2 non-empty public fit texts, "
                             f"got {len(texts)}")
        self._vectorizer = TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2),
                                           max_features=max_features, dtype=np.float32)
        matrix = self._vectorizer.fit_transform(texts)
        k = min(dim, matrix.shape[1] - 1, matrix.shape[0])
        if k < 1:
            raise InputError("tfidf embedder: the fit texts have too small a vocabulary")
        if k < dim:
            log.info("tfidf embedder: dimension %d instead of %d (limited by the fit texts)",
                     k, dim)
        self._svd = TruncatedSVD(n_components=k, algorithm="randomized", random_state=seed)
        self._svd.fit(matrix)
        self._fallback = np.full(k, 1 / np.sqrt(k), dtype=np.float32)
        self._fingerprint = hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()[:16]
        self.seed = seed

    def __repr__(self) -> str:
        return f"TfidfEmbedder(dim={self.dim}, fit={self._fingerprint})"

    @property
    def dim(self) -> int:
        return int(self._svd.n_components)

    def identity(self) -> dict[str, object]:
        return {"backend": "tfidf", "fit": self._fingerprint, "dim": self.dim, "seed": self.seed}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = self._svd.transform(self._vectorizer.transform(texts)).astype(np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        empty = norms[:, 0] < 1e-8
        out[~empty] /= norms[~empty]
        out[empty] = self._fallback
        return out


def read_public_texts(path: Path, column: str = "text") -> list[str]:
    """Public fit texts: a .txt file with one text per line, or a table with `column`."""
    if path.suffix.lower() == ".txt":
        if not path.is_file():
            raise InputError(f"backends.embedder.fit_texts: {path}: file not found")
        return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    frame = read_table(path)
    if column not in frame.columns:
        raise InputError(f"backends.embedder.fit_texts: {path} has no column '{column}' "
                         f"(columns: {', '.join(map(str, frame.columns))}); set fit_text_column")
    return [str(t) for t in frame[column].dropna()]
