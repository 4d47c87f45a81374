"""The sequence format of the offline LM: one place, shared by training and generation.

A training or prompt sequence is a condition followed by a body:

    <|type|> news report<|label|> positive<|keywords|> court, appeal<|length|><|len_5|>
    <|text|> The document ...<|endoftext|>

or, for fill-in-the-middle (several blanks filled in one pass):

    <condition><|masked|> The cat <|blank|> on the <|blank|> .<|fill|> sat<|sep|> mat<|sep|>
    <|endoftext|>

Every condition field is optional; training drops fields at random so any subset works.
"""

from __future__ import annotations

import bisect
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

EOS = "<|endoftext|>"
TYPE, LABEL, KEYWORDS, LENGTH = "<|type|>", "<|label|>", "<|keywords|>", "<|length|>"
TEXT, MASKED, BLANK_TOKEN, FILL, SEP = "<|text|>", "<|masked|>", "<|blank|>", "<|fill|>", "<|sep|>"

LENGTH_EDGES = (6, 9, 13, 19, 28, 42, 63, 94, 141)
"""Upper word counts of the length buckets: each about 1.5x the last, so a bucket is a
target within about ±20%. Longer texts fall in the last bucket."""
LENGTH_TOKENS = tuple(f"<|len_{i}|>" for i in range(len(LENGTH_EDGES) + 1))

SPECIAL_TOKENS = (EOS, TYPE, LABEL, KEYWORDS, LENGTH, TEXT, MASKED, BLANK_TOKEN, FILL, SEP,
                  *LENGTH_TOKENS)

_BLANK_RE = re.compile(r"_+")
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class Fields:
    """The condition fields as the model sees them (all optional)."""

    kind: str | None = None
    label: str | None = None
    keywords: tuple[str, ...] = ()
    length: int | None = None


def clean(text: str) -> str:
    """Collapse whitespace (and HTML line breaks in reviews) to single spaces."""
    return _SPACES.sub(" ", text.replace("<br />", " ").replace("<br/>", " ")).strip()


def count_words(text: str) -> int:
    return len(text.split())


def length_token(words: int) -> str:
    """The bucket token for a length in words."""
    return LENGTH_TOKENS[bisect.bisect_left(LENGTH_EDGES, max(1, words))]


def condition_prefix(fields: Fields) -> str:
    """The condition part of a sequence; fields that are None or empty are left out."""
    parts = []
    if fields.kind:
        parts.append(f"{TYPE} {clean(fields.kind)}")
    if fields.label:
        parts.append(f"{LABEL} {clean(fields.label)}")
    if fields.keywords:
        parts.append(f"{KEYWORDS} " + ", ".join(clean(k) for k in fields.keywords))
    if fields.length:
        parts.append(LENGTH + length_token(fields.length))
    return "".join(parts)


def generation_prompt(fields: Fields, prefix: str = "") -> str:
    """A prompt for a new document, optionally starting with `prefix`."""
    body = f" {clean(prefix)}" if prefix.strip() else ""
    return f"{condition_prefix(fields)}{TEXT}{body}"


def document_sequence(fields: Fields, text: str) -> str:
    """A whole training sequence for "condition -> document"."""
    return f"{generation_prompt(fields)} {clean(text)}{EOS}"


def masked_words(text: str) -> list[str]:
    """Words of a text with `_` blanks as standalone `BLANK_TOKEN` words."""
    return clean(_BLANK_RE.sub(f" {BLANK_TOKEN} ", text)).split(" ")


def infill_prompt(fields: Fields, words: Sequence[str]) -> str:
    """A prompt asking for the spans hidden by the `BLANK_TOKEN` words."""
    return f"{condition_prefix(fields)}{MASKED} {' '.join(words)}{FILL}"


def infill_sequence(fields: Fields, words: Sequence[str], spans: Sequence[str]) -> str:
    """A whole training sequence for fill-in-the-middle: one answer per blank, in order."""
    answers = "".join(f" {clean(s)}{SEP}" for s in spans)
    return f"{infill_prompt(fields, words)}{answers}{EOS}"


def random_spans(n: int, hidden: int, k: int, rng: random.Random) -> list[bool]:
    """A mask hiding `hidden` of `n` words in `k` separate runs at random places."""
    hidden = max(1, min(hidden, n))
    k = max(1, min(k, hidden, (n - hidden) + 1))
    cuts = sorted(rng.sample(range(1, hidden), k - 1)) if k > 1 else []
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, hidden], strict=True)]
    free = n - hidden - (k - 1)  # interior gaps need one kept word to keep runs apart
    bars = sorted(rng.randint(0, free) for _ in range(k))
    gaps = [b - a for a, b in zip([0, *bars], [*bars, free], strict=True)]
    mask: list[bool] = []
    for i in range(k):
        mask += [False] * (gaps[i] + (1 if i > 0 else 0)) + [True] * sizes[i]
    return mask + [False] * gaps[k]


def hide(words: Sequence[str], mask: Sequence[bool]) -> tuple[list[str], list[str]]:
    """Replace each run of masked words by one blank token; return (masked words, spans)."""
    masked: list[str] = []
    spans: list[str] = []
    for word, hidden in zip(words, mask, strict=True):
        if not hidden:
            masked.append(word)
        elif masked and masked[-1] == BLANK_TOKEN:
            spans[-1] += " " + word
        else:
            masked.append(BLANK_TOKEN)
            spans.append(word)
    return masked, spans


def merge_spans(words: Sequence[str], spans: Sequence[str]) -> str:
    """The text with each blank replaced by its span (missing spans drop the blank)."""
    out, it = [], iter(spans)
    for w in words:
        if w == BLANK_TOKEN:
            span = clean(next(it, ""))
            if span:
                out.append(span)
        else:
            out.append(w)
    return " ".join(out)
