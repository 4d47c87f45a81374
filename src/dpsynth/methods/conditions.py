"""Sampling generation conditions from DP metadata: public randomness over DP releases."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpsynth.backends.base import BLANK, FAILED, Condition


@dataclass(frozen=True)
class Metadata:
    """DP metadata of the private set, as released (JSON-able through `to_json`)."""

    label_names: tuple[str, ...] | None
    label_probs: np.ndarray | None
    length_edges: np.ndarray | None
    length_probs: np.ndarray | None
    keywords: dict[str, list[str]]
    keyword_weights: dict[str, np.ndarray]

    def to_json(self) -> dict:
        def arr(a):
            return None if a is None else np.asarray(a).tolist()

        return {"label_names": list(self.label_names) if self.label_names else None,
                "label_probs": arr(self.label_probs), "length_edges": arr(self.length_edges),
                "length_probs": arr(self.length_probs), "keywords": self.keywords,
                "keyword_weights": {k: arr(v) for k, v in self.keyword_weights.items()}}

    @classmethod
    def from_json(cls, data: dict) -> Metadata:
        def arr(a, dtype=float):
            return None if a is None else np.asarray(a, dtype=dtype)

        return cls(tuple(data["label_names"]) if data["label_names"] else None,
                   arr(data["label_probs"]), arr(data["length_edges"], np.int64),
                   arr(data["length_probs"]), data["keywords"],
                   {k: arr(v) for k, v in data["keyword_weights"].items()})

    def sample(self, rng: np.random.Generator, label: str | None, n: int,
               keywords_per_sample: int) -> list[Condition]:
        """`n` conditions for `label`: a length from the DP length histogram and keywords
        drawn by their DP weights."""
        out = []
        key = label if label is not None else ""
        words, weights = self.keywords.get(key, []), self.keyword_weights.get(key)
        for _ in range(n):
            length = None
            if self.length_edges is not None and self.length_probs is not None:
                b = rng.choice(len(self.length_probs), p=self.length_probs)
                length = int(rng.integers(self.length_edges[b], max(self.length_edges[b + 1],
                                                                     self.length_edges[b] + 1)))
            chosen: tuple[str, ...] = ()
            if words:
                k = min(keywords_per_sample, len(words))
                idx = rng.choice(len(words), size=k, replace=False, p=weights)
                chosen = tuple(words[i] for i in sorted(idx))
            out.append(Condition(label=label, keywords=chosen, length=length))
        return out


def allocate(total: int, probs: np.ndarray, minimum: int = 1) -> np.ndarray:
    """Split `total` into integer parts proportional to `probs` (largest remainder), each at
    least `minimum` where `total` allows."""
    probs = np.asarray(probs, dtype=np.float64)
    base = np.full(len(probs), minimum if total >= minimum * len(probs) else 0)
    rest = total - base.sum()
    raw = probs / probs.sum() * rest
    parts = np.floor(raw).astype(np.int64)
    order = np.argsort(-(raw - parts), kind="stable")
    parts[order[: rest - parts.sum()]] += 1
    return base + parts


def mask_words(text: str, rate: float, rng: np.random.Generator) -> str:
    """Replace each word by the blank marker with probability `rate` (runs merged)."""
    out: list[str] = []
    for word in text.split():
        if rng.random() < rate:
            if not out or out[-1] != BLANK:
                out.append(BLANK)
        else:
            out.append(word)
    return " ".join(out) if out else BLANK


def softmax(values: Sequence[float], temperature: float) -> np.ndarray:
    z = np.asarray(values, dtype=np.float64) / temperature
    z = np.exp(z - z.max())
    return z / z.sum()


def keep_produced(texts: Sequence[str], labels: Sequence) -> tuple[list[str], list]:
    """Drop the outputs a backend failed to produce (`FAILED`), keeping labels aligned."""
    kept = [(t, y) for t, y in zip(texts, labels, strict=True) if t != FAILED]
    return [t for t, _ in kept], [y for _, y in kept]
