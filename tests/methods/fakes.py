"""Small local backends for recipe tests: a bag-of-words embedder and a generator that
builds text from its conditions and records every input it was given."""

from __future__ import annotations

import functools
import hashlib
import zlib

import numpy as np

from dpsynth.backends.base import BLANK, Embedder, Generator
from dpsynth.data import PrivateDataset

VOCAB = {
    "billing": ["invoice", "refund", "charge", "payment", "card", "bill", "fee", "price"],
    "shipping": ["parcel", "courier", "delivery", "box", "tracking", "address", "order", "late"],
    "technical": ["wifi", "screen", "battery", "update", "error", "crash", "sync", "bluetooth"],
    "account": ["password", "login", "email", "locked", "reset", "profile", "security", "access"],
}
FILLER = ["the", "a", "my", "is", "was", "please", "help", "today", "again", "thanks"]


class HashEmbedder(Embedder):
    """Hashed bag of words: texts sharing words are close; deterministic."""

    is_remote = False

    def __init__(self, dim: int = 64) -> None:
        self._dim = dim

    @property
    def dim(self) -> int:
        return self._dim

    def encode(self, texts):
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                out[row, zlib.crc32(word.encode()) % self._dim] += 1.0
        out[~out.any(axis=1), 0] = 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)


class RecordingGenerator(Generator):
    """Writes texts from the condition's label vocabulary; remembers all it was sent."""

    def __init__(self) -> None:
        self.inputs: list[str] = []
        self.calls = 0

    def _rng(self, *parts) -> np.random.Generator:
        digest = hashlib.sha256(repr(parts).encode()).digest()
        return np.random.default_rng(int.from_bytes(digest[:8], "big"))

    def _text(self, condition, seed_parts) -> str:
        rng = self._rng(*seed_parts)
        words = VOCAB.get(condition.label or "", FILLER) + list(condition.keywords)
        n = condition.length or 8
        return " ".join(rng.choice(words + FILLER, size=max(1, n)))

    def _record(self, *items) -> None:
        self.calls += 1
        for item in items:
            self.inputs.extend(item if isinstance(item, list) else [str(item)])

    def context_lm(self):
        """A tiny local GPT-2 for DP decoding: private text reaches its context only, never
        `inputs`."""
        return tiny_context_lm()

    def generate(self, conditions):
        self._record([repr(c) for c in conditions])
        return [self._text(c, ("g", i, repr(c))) for i, c in enumerate(conditions)]

    def rewrite(self, texts, conditions, strength=0.5):
        self._record(list(texts), [repr(c) for c in conditions])
        return [t.split()[0] + " " + self._text(c, ("r", i, t)) for i, (t, c) in
                enumerate(zip(texts, conditions, strict=True))]  # copies: other rewrites

    def fill(self, masked_texts, conditions):
        self._record(list(masked_texts), [repr(c) for c in conditions])
        return [t.replace(BLANK, self._text(c, ("f", t)).split()[0]) for t, c in
                zip(masked_texts, conditions, strict=True)]

    def crossover(self, parent_groups, conditions):
        self._record([p for g in parent_groups for p in g], [repr(c) for c in conditions])
        return [" ".join(g[0].split()[:3] + g[1].split()[3:]) for g in parent_groups]


@functools.cache
def tiny_context_lm():
    """A one-layer GPT-2 (random weights, seeded) over a byte-level BPE of the ticket words,
    as a `ContextLM`: DP decoding's code paths in a blink."""
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from dpsynth.backends.generators.context_lm import ContextLM

    corpus = [" ".join(words) for words in VOCAB.values()] + [" ".join(FILLER)]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus * 4, vocab_size=300, min_frequency=1,
                            special_tokens=["<pad>", "<s>", "</s>"])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, pad_token="<pad>",
                                        bos_token="<s>", eos_token="</s>")
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=512, n_embd=32, n_layer=1,
                        n_head=2, bos_token_id=tokenizer.bos_token_id,
                        eos_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.pad_token_id)
    return ContextLM(tokenizer, GPT2LMHeadModel(config).eval(), "tiny-gpt2")


CANARY = "zqx-canary-4417 my secret diagnosis"


def ticket_texts(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """Labelled private-like texts built from the label vocabularies, plus one canary."""
    rng = np.random.default_rng(seed)
    labels = list(VOCAB)
    texts, ys = [], []
    for i in range(n):
        y = labels[i % len(labels)]
        words = rng.choice(VOCAB[y], size=int(rng.integers(5, 15)))
        texts.append(f"{' '.join(words)} ticket {i}")
        ys.append(y)
    texts[0] = CANARY
    return texts, ys


def ticket_dataset(tickets: tuple[list[str], list[str]]) -> PrivateDataset:
    """`ticket_texts` as a private dataset, its label set declared."""
    return PrivateDataset(tickets[0], labels=tickets[1], label_names=sorted(VOCAB))


class RepeatingGenerator(RecordingGenerator):
    """Answers every call's requests in pairs: the second of each pair repeats the first
    with its spaces doubled (a repeat once whitespace is normalised), and a request made
    again alone gets its first answer again, as a small pool or a greedy LM would."""

    @staticmethod
    def _pairs(out: list[str]) -> list[str]:
        return [out[i] if i % 2 == 0 else out[i - 1].replace(" ", "  ") + " "
                for i in range(len(out))]

    def generate(self, conditions):
        return self._pairs(super().generate(conditions))

    def rewrite(self, texts, conditions, strength=0.5):
        return self._pairs(super().rewrite(texts, conditions, strength))

    def fill(self, masked_texts, conditions):
        return self._pairs(super().fill(masked_texts, conditions))

    def crossover(self, parent_groups, conditions):
        return self._pairs(super().crossover(parent_groups, conditions))
