"""DPGA-TextSyn's DP metadata as released (§3.2), and the generation conditions sampled from
it: public randomness over DP releases."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpsynth.backends.base import Condition
from dpsynth.methods.parts.lengths import Lengths


@dataclass(frozen=True)
class Metadata:
    """DP metadata of the private set, as released (JSON-able through `to_json`)."""

    label_names: tuple[str, ...] | None
    label_probs: np.ndarray | None
    lengths: Lengths | None
    keywords: dict[str, list[str]]
    keyword_weights: dict[str, np.ndarray]

    @property
    def groups(self) -> list[str | None]:
        """One group per public label, or a single unlabelled one."""
        return list(self.label_names) if self.label_names else [None]

    def to_json(self) -> dict:
        def arr(a):
            return None if a is None else np.asarray(a).tolist()

        lengths = self.lengths.to_json() if self.lengths is not None else {}
        return {"label_names": list(self.label_names) if self.label_names else None,
                "label_probs": arr(self.label_probs), "length_edges": lengths.get("edges"),
                "length_probs": lengths.get("probs"), "keywords": self.keywords,
                "keyword_weights": {k: arr(v) for k, v in self.keyword_weights.items()}}

    @classmethod
    def from_json(cls, data: dict) -> Metadata:
        def arr(a, dtype=float):
            return None if a is None else np.asarray(a, dtype=dtype)

        lengths = None if data["length_edges"] is None else Lengths.from_json(
            {"edges": data["length_edges"], "probs": data["length_probs"]})
        return cls(tuple(data["label_names"]) if data["label_names"] else None,
                   arr(data["label_probs"]), lengths, data["keywords"],
                   {k: arr(v) for k, v in data["keyword_weights"].items()})

    def sample(self, rng: np.random.Generator, label: str | None, n: int,
               keywords_per_sample: int) -> list[Condition]:
        """`n` conditions for `label`: a length from the DP length histogram and keywords
        drawn by their DP weights."""
        out = []
        key = label if label is not None else ""
        words, weights = self.keywords.get(key, []), self.keyword_weights.get(key)
        for _ in range(n):
            length = self.lengths.draw(rng) if self.lengths is not None else None
            chosen: tuple[str, ...] = ()
            if words:
                # a keyword whose DP weight underflowed to 0 cannot be drawn without replacement
                k = min(keywords_per_sample, int(np.count_nonzero(weights))
                        if weights is not None else len(words))
                idx = rng.choice(len(words), size=k, replace=False, p=weights)
                chosen = tuple(words[i] for i in sorted(idx))
            out.append(Condition(label=label, keywords=chosen, length=length))
        return out
