"""A tiny deterministic embedder, so evaluation tests need no model."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.feature_extraction.text import HashingVectorizer

from dpsynth.backends.base import Embedder


class HashingEmbedder(Embedder):
    """Bag of words hashed into 64 dimensions, unit-normalised."""

    def __init__(self, is_remote: bool = False) -> None:
        self.is_remote = is_remote
        self._vectorizer = HashingVectorizer(n_features=64, alternate_sign=False, norm="l2")

    @property
    def dim(self) -> int:
        return 64

    def encode(self, texts):
        x = self._vectorizer.transform(list(texts)).toarray().astype(np.float32)
        return x


@pytest.fixture
def hashing_embedder() -> HashingEmbedder:
    return HashingEmbedder()


@pytest.fixture
def remote_hashing_embedder() -> HashingEmbedder:
    return HashingEmbedder(is_remote=True)
