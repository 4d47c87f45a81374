"""An OpenAI-compatible `/embeddings` client (OpenAI, Azure-style, vLLM, Ollama, TEI, ...).

It is remote by definition: the texts leave this process for a server dpsynth cannot vouch
for, so `PrivateDataset.embed` refuses it unless `allow_remote_on_private: true`, even when
the server runs on this machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dpsynth.backends.base import BackendError, Embedder
from dpsynth.backends.config import OpenAIEmbeddingsConfig
from dpsynth.backends.http.client import OpenAIHttpClient, estimate_tokens
from dpsynth.backends.http.prices import price_for
from dpsynth.errors import ConfigError
from dpsynth.progress import track


class OpenAIEmbedder(Embedder):
    """Batches of `batch_size` texts per request, `concurrency` requests in flight."""

    is_remote = True

    def __init__(self, cfg: OpenAIEmbeddingsConfig) -> None:
        if not cfg.model:
            raise ConfigError("backends.embedder.model: name the embedding model "
                              "(e.g. text-embedding-3-small)")
        self.cfg = cfg
        self.price = price_for(cfg.model, cfg.price)
        self.client = OpenAIHttpClient(cfg.base_url, api_key_env=cfg.api_key_env,
                                       http=cfg.http, concurrency=cfg.concurrency,
                                       where="backends.embedder")
        self._dim = cfg.dim

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self.cfg.model!r}, base_url={self.client.base_url!r})"

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.encode(["dimension probe"]).shape[1])
        return self._dim

    def identity(self) -> dict[str, object]:
        return {"backend": "openai", "base_url": self.client.base_url, "model": self.cfg.model,
                "dimensions": self.cfg.dim}

    def usage(self) -> dict[str, float]:
        return self.client.usage.report(self.price)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        size = self.cfg.batch_size
        batches = [texts[s : s + size] for s in range(0, len(texts), size)]
        per_round = self.cfg.concurrency * 4
        rounds = range(0, len(batches), per_round)
        vectors: list[np.ndarray] = []
        for start in track(rounds, "embedding (remote)", total=len(rounds)):
            chunk = batches[start : start + per_round]
            payloads = [self._payload(b) for b in chunk]
            estimates = [sum(estimate_tokens(t) for t in b) for b in chunk]
            results = self.client.post_many("embeddings", payloads, estimates, _vectors)
            for batch, result in zip(chunk, results, strict=True):
                if result is None or result.shape[0] != len(batch):
                    raise BackendError("backends.embedder: an embeddings request failed after "
                                       "its retries or returned the wrong number of vectors; "
                                       "see the log")
                vectors.append(result)
        out = np.concatenate(vectors)
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        if self._dim is None:
            self._dim = int(out.shape[1])
        return out.astype(np.float32, copy=False)

    def _payload(self, batch: list[str]) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self.cfg.model, "input": batch}
        if self.cfg.dim is not None:
            payload["dimensions"] = self.cfg.dim
        return payload


def _vectors(body: dict[str, Any]) -> np.ndarray:
    """The response's vectors in input order; malformed bodies raise."""
    data = sorted(body["data"], key=lambda item: int(item["index"]))
    out = np.asarray([item["embedding"] for item in data], dtype=np.float32)
    if out.ndim != 2 or not np.isfinite(out).all():
        raise ValueError("embeddings are not a finite matrix")
    return out
