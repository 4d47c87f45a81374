"""Deterministic stand-ins for model output: filler text and hashed bag-of-words vectors.

The loopback server answers with these, and dry-run mode returns filler text, so a recipe can
run end to end without a model. Same input, same output, on every machine.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

_VOCABULARY = (
    "the", "a", "service", "order", "account", "delivery", "team", "update", "customer",
    "request", "issue", "report", "system", "price", "quality", "support", "review", "result",
    "study", "patient", "data", "model", "method", "product", "time", "week", "was", "is",
    "will", "could", "should", "quickly", "slowly", "again", "never", "always", "clearly",
    "very", "rather", "good", "late", "broken", "new", "helpful", "wrong", "simple", "useful",
    "small", "large", "recent",
)
_TARGET_WORDS = re.compile(r"(\d{1,4})\s+words")


def _rng(seed_text: str) -> np.random.Generator:
    digest = hashlib.sha256(seed_text.encode("utf-8")).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def target_words(prompt: str, default: int = 24) -> int:
    """The word count a prompt asks for ("... must have 120 words"), else `default`."""
    found = _TARGET_WORDS.findall(prompt)
    return int(found[-1]) if found else default


def filler_text(seed_text: str, n_words: int) -> str:
    """`n_words` words drawn from a small vocabulary by a generator seeded from `seed_text`."""
    words = _rng(seed_text).choice(_VOCABULARY, size=max(1, n_words))
    return " ".join(words).capitalize() + "."


def hashed_embedding(text: str, dim: int) -> np.ndarray:
    """A unit vector: the sum of one fixed random vector per lower-cased word, so texts that
    share words point in similar directions."""
    total = np.zeros(dim)
    for word in text.lower().split() or [""]:
        total += _rng("word:" + word).standard_normal(dim)
    return (total / np.linalg.norm(total)).astype(np.float32)
