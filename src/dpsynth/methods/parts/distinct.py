"""Each text once: a recipe's output is a varied population, never one text many times over
(the bundled demo's dpga output held 13-22% exact repeats, issue 39).

Texts are compared after whitespace normalisation. Everything here reads synthetic (public)
text only, so dropping a repeat, or asking the generator again for its condition, is
post-processing: it changes no release and spends nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from dpsynth.backends.base import FAILED

R = TypeVar("R")

DRAW_TRIES = 3
"""Rounds in which a request whose text repeated is asked again. A generator that keeps
repeating (a small pool, a collapsed LM) ends with fewer texts rather than in a loop."""


def text_key(text: str) -> str:
    """What two texts must share to be one: their words, whitespace normalised."""
    return " ".join(text.split())


def distinct(texts: Sequence[str], labels: Sequence,
             seen: Iterable[str] = ()) -> tuple[list[str], list]:
    """The first occurrence of each text (with its label), none that `seen` holds."""
    keys = {text_key(t) for t in seen}
    kept: list[tuple[str, object]] = []
    for text, label in zip(texts, labels, strict=True):
        if (key := text_key(text)) not in keys:
            keys.add(key)
            kept.append((text, label))
    return [t for t, _ in kept], [y for _, y in kept]


def generate_distinct(generate: Callable[[list[R]], Sequence[str]], requests: Sequence[R],
                      seen: Iterable[str] = (),
                      tries: int = DRAW_TRIES) -> tuple[list[str], list[int]]:
    """A text per request (a condition, or a parent's index for an edit), each text once: a
    request whose text repeats an earlier one (or one of `seen`) is asked again, for up to
    `tries` more rounds (a generator's cache numbers a repeated request as a new sample);
    requests still without a new text, and those the backend failed (`FAILED`), are dropped.
    Returns the texts and the indices of the requests they answer, in request order."""
    keys = {text_key(t) for t in seen}
    answers: dict[int, str] = {}
    pending = list(range(len(requests)))
    for _ in range(1 + tries):
        if not pending:
            break
        texts = generate([requests[i] for i in pending])
        retry = []
        for i, text in zip(pending, texts, strict=True):
            if text == FAILED:
                continue
            if (key := text_key(text)) in keys:
                retry.append(i)
            else:
                keys.add(key)
                answers[i] = text
        pending = retry
    order = sorted(answers)
    return [answers[i] for i in order], order
