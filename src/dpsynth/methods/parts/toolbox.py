"""The recipes' toolbox: quotas, masks and output bookkeeping, all public post-processing."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpsynth.backends.base import BLANK, FAILED


def allocate(total: int, probs: np.ndarray, minimum: int = 1) -> np.ndarray:
    """Split `total` into integer parts proportional to `probs` (largest remainder), each at
    least `minimum` where `total` allows; all-zero `probs` split evenly."""
    probs = np.asarray(probs, dtype=np.float64)
    if not probs.sum() > 0:
        probs = np.ones(len(probs))
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
