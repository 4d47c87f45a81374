"""Canary exposure: plant unique records in a private set, then look for them in the output.

After the Canary's Echo line of work (Meeus et al., 2025): a synthetic set leaks a planted
record when a model of the synthetic text finds that record more likely than equally random
records that were never planted. `make_canaries` draws the canaries (half planted, half kept
as the reference), `plant_canaries` adds the planted half to the private texts, and
`canary_exposure` scores a synthetic set with a smoothed word-bigram model fitted on it:

- membership AUC of planted vs reference canaries (0.5: no echo; 1: every planted canary is
  more likely than every reference one);
- exposure (Carlini et al., 2019): log2(reference count + 1) − log2(rank of the canary among
  the reference canaries), in bits; when nothing leaks the rank is uniform and the mean is
  about log2(e) ≈ 1.4 bits, and it reaches log2(reference count + 1) for a canary that is
  more likely than every reference one;
- verbatim: planted canaries whose secret words appear in order in some synthetic text.

Canaries are made of pseudo-words, so they are not private text and can be printed.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import numpy as np
import pandas as pd

from dpsynth.data.io import read_table, write_table
from dpsynth.errors import DataError, InputError
from dpsynth.evaluate.privacy import membership_auc

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_TEMPLATE = "my account {code} is held under the name {secret} in the {place} office"


@dataclass(frozen=True)
class Canaries:
    """Planted canaries and the same number of never-planted reference canaries."""

    planted: tuple[str, ...]
    reference: tuple[str, ...]

    def to_dict(self) -> dict[str, list[str]]:
        return {"planted": list(self.planted), "reference": list(self.reference)}


def make_canaries(k: int, seed: int, secret_words: int = 3) -> Canaries:
    """2k distinct canaries from one template with random pseudo-word secrets."""
    if k < 1:
        raise InputError(f"make_canaries: k must be at least 1, got {k}")
    rng = np.random.default_rng(seed)
    texts: list[str] = []
    while len(texts) < 2 * k:
        secret = " ".join(_pseudo_word(rng) for _ in range(secret_words))
        text = _TEMPLATE.format(code=int(rng.integers(10**7, 10**8)), secret=secret,
                                place=_pseudo_word(rng))
        if text not in texts:
            texts.append(text)
    return Canaries(planted=tuple(texts[:k]), reference=tuple(texts[k:]))


def plant_canaries(texts: Sequence[str], labels: Sequence[str] | None, canaries: Canaries,
                   seed: int, repeats: int = 1) -> tuple[list[str], list[str] | None]:
    """The private texts (and labels) with each planted canary inserted `repeats` times at
    random positions; each canary takes a random label from the existing ones.

    With `repeats` > 1 set the private data's `duplicates: keep`, or validation drops them.
    """
    out_texts, out_labels = list(texts), list(labels) if labels is not None else None
    classes = sorted(set(labels)) if labels else []
    for position, index, label in _insertions(len(texts), classes, canaries, seed, repeats):
        out_texts.insert(position, canaries.planted[index])
        if out_labels is not None:
            out_labels.insert(position, label)
    return out_texts, out_labels


def plant_canaries_in_file(path: str | Path, out_path: str | Path, k: int, seed: int,
                           text_column: str = "text", label_column: str | None = "label",
                           user_column: str | None = None, repeats: int = 1) -> Canaries:
    """Copy a private dataset file to `out_path` with k canaries planted (other columns kept,
    left empty in canary rows; each canary its own user when `user_column` is given), and
    write the canaries (planted and reference, not private) to `out_path`.canaries.json:
    the input for running a recipe end to end and then calling `canary_exposure`."""
    frame = read_table(path)
    for column in (text_column, label_column, user_column):
        if column is not None and column not in frame.columns:
            raise DataError(f"missing column '{column}'", path=str(path))
    canaries = make_canaries(k, seed)
    classes = sorted(set(map(str, frame[label_column]))) if label_column else []
    rows = frame.to_dict("records")
    for position, index, label in _insertions(len(rows), classes, canaries, seed, repeats):
        row = dict.fromkeys(frame.columns, "") | {text_column: canaries.planted[index]}
        if label_column is not None:
            row[label_column] = label
        if user_column is not None:
            row[user_column] = f"dpsynth-canary-{index}"
        rows.insert(position, row)
    out_path = Path(out_path)
    write_table(pd.DataFrame(rows, columns=frame.columns), out_path)
    Path(f"{out_path}.canaries.json").write_text(json.dumps(canaries.to_dict(), indent=2),
                                                 encoding="utf-8")
    return canaries


def _insertions(n_rows: int, classes: Sequence[str], canaries: Canaries, seed: int,
                repeats: int) -> list[tuple[int, int, str | None]]:
    """(position, canary index, label) for each insertion, to apply in order."""
    if repeats < 1:
        raise InputError(f"plant_canaries: repeats must be at least 1, got {repeats}")
    rng = np.random.default_rng(seed)
    out = []
    for index in range(len(canaries.planted)):
        label = classes[int(rng.integers(len(classes)))] if classes else None
        for _ in range(repeats):
            out.append((int(rng.integers(n_rows + 1)), index, label))
            n_rows += 1
    return out


def read_canaries(path: str | Path) -> Canaries:
    """Canaries saved by `plant_canaries_in_file`."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return Canaries(tuple(data["planted"]), tuple(data["reference"]))


def canary_exposure(canaries: Canaries, synthetic_texts: Sequence[str],
                    smoothing: float = 1.0) -> dict[str, object]:
    """How strongly the planted canaries echo in `synthetic_texts` (see the module doc)."""
    model = BigramModel(synthetic_texts, smoothing)
    planted = np.array([model.mean_log_prob(c) for c in canaries.planted])
    reference = np.array([model.mean_log_prob(c) for c in canaries.reference])
    # Mid-rank for ties: a canary scored like every reference canary sits in the middle.
    ranks = np.array([1 + np.sum(reference > s) + 0.5 * np.sum(reference == s)
                      for s in planted])
    exposure = math.log2(len(reference) + 1) - np.log2(ranks)
    joined = [f" {' '.join(_words(t))} " for t in synthetic_texts]
    verbatim = sum(any(f" {_secret(c)} " in t for t in joined) for c in canaries.planted)
    return {
        "k": len(canaries.planted),
        "auc": membership_auc(planted, reference),
        "mean_exposure_bits": float(exposure.mean()),
        "max_exposure_bits": float(exposure.max()),
        "verbatim": int(verbatim),
    }


class BigramModel:
    """Word bigrams with Dirichlet smoothing towards add-one unigrams, fitted on one corpus."""

    def __init__(self, texts: Sequence[str], smoothing: float = 1.0) -> None:
        self.smoothing = smoothing
        self.unigrams: Counter[str] = Counter()
        self.bigrams: Counter[tuple[str, str]] = Counter()
        for text in texts:
            words = ["<s>", *_words(text)]
            self.unigrams.update(words[1:])
            self.bigrams.update(pairwise(words))
        self.contexts: Counter[str] = Counter()
        for (first, _), count in self.bigrams.items():
            self.contexts[first] += count
        self.total = sum(self.unigrams.values())
        self.vocab = len(self.unigrams) + 1

    def mean_log_prob(self, text: str) -> float:
        words = ["<s>", *_words(text)]
        logs = []
        for prev, word in pairwise(words):
            unigram = (self.unigrams[word] + 1) / (self.total + self.vocab)
            p = ((self.bigrams[(prev, word)] + self.smoothing * unigram)
                 / (self.contexts[prev] + self.smoothing))
            logs.append(math.log(p))
        return float(np.mean(logs)) if logs else 0.0


def _pseudo_word(rng: np.random.Generator) -> str:
    syllables = int(rng.integers(2, 4))
    return "".join(rng.choice(list(_CONSONANTS)) + rng.choice(list(_VOWELS))
                   for _ in range(syllables))


def _secret(canary: str) -> str:
    """The random words of a canary (its name), in the normalised word form."""
    match = re.search(r"the name (.+) in the", canary)
    return " ".join(_words(match.group(1) if match else canary))


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.casefold())
