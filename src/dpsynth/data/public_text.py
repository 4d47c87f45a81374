"""Public text for the scripts that build shipped models (topics, inversion decoder).

Reads ../shared/data/public (Wikipedia, Wikinews, Gutenberg: one paragraph per line). Only
scripts and benchmarks call this; nothing at run time needs ../shared.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

PUBLIC_SOURCES = ("wikipedia_en", "wikinews_en", "gutenberg")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")


def public_paragraphs(shared: Path, n: int, seed: int, min_words: int = 20) -> list[str]:
    """A seeded sample of `n` paragraphs of at least `min_words` words, spread over sources."""
    rng = random.Random(seed)
    per_source = n // len(PUBLIC_SOURCES)
    out = []
    for source in PUBLIC_SOURCES:
        folder = shared / "public" / source
        parts = sorted(folder.glob("*.txt"))
        if not parts:
            raise FileNotFoundError(f"{folder}: no *.txt files of public text there")
        lines = [line.strip() for part in parts
                 for line in part.read_text(encoding="utf-8").splitlines()
                 if len(line.split()) >= min_words]
        out += rng.sample(lines, min(per_source, len(lines)))
    return out


def sentences(paragraph: str, min_words: int, max_words: int) -> list[str]:
    """The paragraph's sentences of `min_words` to `max_words` words."""
    return [s.strip() for s in _SENTENCE_END.split(paragraph)
            if min_words <= len(s.split()) <= max_words]
