"""TF-IDF keywords with an IDF table fitted on the public corpus and shipped with the model.

Training labels every public document with its top TF-IDF terms; the generator uses the same
table to read keywords off parent texts (crossover) so that its conditions look like the ones
the model was trained on.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

_WORD = re.compile(r"[a-z][a-z'-]{2,}")


def terms(text: str) -> list[str]:
    """Lower-cased words of three letters or more, without English stop words."""
    return [w for w in _WORD.findall(text.lower()) if w not in ENGLISH_STOP_WORDS]


class KeywordExtractor:
    """Top TF-IDF terms of a text (sublinear term frequency times public IDF)."""

    def __init__(self, idf: dict[str, float]) -> None:
        self.idf = idf

    @classmethod
    def load(cls, path: str | Path) -> KeywordExtractor:
        return cls(json.loads(Path(path).read_text(encoding="utf-8")))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.idf, sort_keys=True), encoding="utf-8")

    def top(self, text: str, k: int = 8) -> tuple[str, ...]:
        """The k highest-scoring known terms, best first (ties broken alphabetically)."""
        counts = Counter(t for t in terms(text) if t in self.idf)
        scored = sorted(counts, key=lambda t: (-(1 + math.log(counts[t])) * self.idf[t], t))
        return tuple(scored[:k])
