"""DP decoding (private prediction): synthetic texts sampled token by token from a local LM
whose context holds private records (Amin et al. 2024; InvisibleInk, Vinod et al. 2025).

For each text, a disjoint batch of private records of its label. At each token:

    public     log-probabilities p of the LM given the public prompt (no record) and the
               text so far; candidates V = InvisibleInk's top-k+: the k most likely tokens
               under p and every token within 2C of the k-th (a public set)
    private    each record i in the batch: log-probabilities q_i with the record in the
               prompt; its contribution v_i = clip(q_i − p, −C, C) on V (on a 2^-16 grid,
               so that sums are exact)
    score      u = p + Σ_i v_i / B           (B the configured batch size, a public constant)
    draw       one token from softmax(u / T) by Gumbel-max: the exponential mechanism

Adding or removing one record moves every score by Σ-one-term v_i/B ∈ [−C/B, C/B], an
interval of width 2C/B: each draw is (2C/(B·T))-bounded-range. A record is in one batch, so
it moves one text: the texts compose in parallel and the whole decoding is charged as one
text's `length` draws (docs/recipes/dp_decoding.md).

Which batch a record joins is decided by a digest of its own text (and the public seed),
never by its place in the file or by other records, so adding one record changes one batch
by that record. Every forward pass runs in a fixed shape (rows of one public length,
chunks of `forward_batch` rows padded with a public filler row), so a record's
log-probabilities are a function of its own text, bit for bit, not of its companions.
Private token ids, log-probabilities and the KV caches stay in this module's objects, which
are dropped when the release returns. A batch holds about B records, more when its label's
noisy count fell far under the true one; its KV caches stay bounded whatever the noise drew:
past `cached_rows` rows, a chunk keeps no KV cache and is replayed from its prompt at each
token through the same fixed-shape passes, which costs time instead of memory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpsynth.backends.generators.context_lm import SLOT, ContextLM
from dpsynth.data import Access, PrivateDataset
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.privacy.mechanisms import DisjointSequences
from dpsynth.privacy.noise import NoiseSource
from dpsynth.progress import track

GRID = 2.0**-16
"""Clipped contributions are rounded to this grid and summed as integers: the sum is exact,
so one record moves it by exactly its own (clipped) term."""


@dataclass(frozen=True)
class DecodingSetup:
    """The public shape of DP decoding, fixed by the config."""

    batch_size: int
    """B: the public normaliser of the summed contributions."""
    clip: float
    """C: each record's log-probability shift is clipped to [−C, C]."""
    top_k: int
    max_example_tokens: int
    forward_batch: int
    max_tokens: int
    cached_rows: int
    """Rows of one batch whose KV caches are held between tokens; the chunks past them are
    replayed from their prompt at every token (the same passes, so the same numbers, bit for
    bit): a batch's size follows a noisy count, and its memory must not."""


@dataclass(frozen=True)
class TextRequest:
    """One synthetic text to decode: its group (label code, or 0), which of that group's
    batches feeds it, the public prompt, and the private prompt with its example slot."""

    group: int
    batch: int
    public_instruction: str
    private_instruction: str


def batch_of(text: str, n_buckets: int, seed: int) -> int:
    """The bucket a record joins: a digest of its own text and the public seed."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8,
                             key=str(seed).encode()[:64]).digest()
    return int.from_bytes(digest, "big") % n_buckets


def record_batches(private: PrivateDataset, requests: Sequence[TextRequest],
                   buckets: Sequence[int], seed: int) -> list[list[str]]:
    """The private texts of each request's batch: a record of group g joins bucket
    `batch_of(text, buckets[g])`; request r takes bucket `r.batch` of its group."""
    texts = private.texts(Access.LEDGERED_OP)
    codes = (private.label_codes(Access.LEDGERED_OP) if private.has_labels
             else np.zeros(len(texts), dtype=np.int64))
    wanted = {(r.group, r.batch): i for i, r in enumerate(requests)}
    out: list[list[str]] = [[] for _ in requests]
    for text, code in zip(texts, codes, strict=True):
        g = int(code)
        slot = wanted.get((g, batch_of(text, int(buckets[g]), seed)))
        if slot is not None:
            out[slot].append(text)
    return out


class BatchScores:
    """The scores of each next token of one text (a `ScoreSequence`), from the public prompt
    and the batch's records in the LM's context, with the KV caches between tokens."""

    def __init__(self, lm: ContextLM, setup: DecodingSetup, request: TextRequest,
                 examples: list[str]) -> None:
        import torch

        self._torch, self.lm, self.setup = torch, lm, setup
        self._eos = lm.eos_id
        before, after = lm.slotted(request.private_instruction)
        width = len(before) + setup.max_example_tokens + len(after)  # public: one row length
        # records whose rows are the same tokens (copies of a text, or texts cut to the same
        # first max_example_tokens) have the same log-probabilities bit for bit (fixed-shape
        # passes): each such row is run once and its clipped shift counted once per record,
        # the same integer sum, while memory and passes follow the distinct rows, not how
        # many records repeat one (copies all join one batch: their digest is one)
        copies: dict[tuple[int, ...], int] = {}
        for x in examples:
            row = tuple(before + lm.encode(x, setup.max_example_tokens) + after)
            copies[row] = copies.get(row, 0) + 1
        rows, counts = [list(row) for row in copies], np.fromiter(copies.values(), np.int64,
                                                                  len(copies))
        public = lm.prompt(request.public_instruction)
        filler = public[-width:]  # the padding rows of a chunk: public, masked out of sums
        self._public = _State(self._forward(*self._padded([public], len(public)), None), 1)
        self._chunks: list[_State | _Replay] = []
        f = setup.forward_batch
        cached = max(1, setup.cached_rows // f)  # chunks whose KV caches are held
        for start in range(0, len(rows), f):
            part = rows[start : start + f]
            real = len(part)
            padded = self._padded(part + [filler] * (f - real), width)
            chunk = (_State(self._forward(*padded, None), real, counts[start : start + f])
                     if len(self._chunks) < cached
                     else _Replay(padded, real, counts[start : start + f]))
            self._chunks.append(chunk)
        self._clip = int(np.floor(setup.clip / GRID))

    def _padded(self, rows: list[list[int]], width: int):
        torch = self._torch
        ids = torch.full((len(rows), width), self.lm.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, row in enumerate(rows):  # left padding: decoding continues the right edge
            ids[r, width - len(row):] = torch.tensor(row, dtype=torch.long)
            mask[r, width - len(row):] = 1
        return ids, mask

    def _forward(self, ids, mask, cache):
        torch = self._torch
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -ids.shape[1]:]
        with torch.no_grad():
            out = self.lm.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                                past_key_values=cache, use_cache=True, logits_to_keep=1)
        logp = torch.log_softmax(out.logits[:, -1].double(), dim=-1).numpy()
        return logp, mask, out.past_key_values

    def _advance(self, value, token: int):
        torch = self._torch
        _, mask, cache = value
        n = mask.shape[0]
        mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype)], dim=1)
        return self._forward(torch.full((n, 1), token, dtype=torch.long), mask, cache)

    def _replayed(self, chunk: _Replay, drawn: list[int]) -> np.ndarray:
        """A chunk's log-probabilities after `drawn`, by the passes a held cache would have
        taken: its prompt's, then one per token."""
        value = self._forward(*chunk.padded, None)
        for token in drawn:
            value = self._advance(value, token)
        return value[0]

    def next_scores(self, drawn: list[int]) -> tuple[np.ndarray, np.ndarray] | None:
        if drawn:
            if drawn[-1] == self._eos:
                return None
            for state in (self._public, *self._chunks):
                if isinstance(state, _State):
                    state.value = self._advance(state.value, drawn[-1])
        public = self._public.value[0][0]
        candidates = top_k_plus(public, self.setup.top_k, self.setup.clip)
        total = np.zeros(candidates.size, dtype=np.int64)
        for state in self._chunks:
            logp = (state.value[0] if isinstance(state, _State)
                    else self._replayed(state, drawn))[: state.real, candidates]
            # a NaN shift (a record whose forward overflowed) counts as no shift, and ±inf
            # as ±C: data-independent rules, before the clip
            diff = np.nan_to_num(logp - public[candidates], nan=0.0, posinf=self.setup.clip,
                                 neginf=-self.setup.clip)
            shift = np.clip(np.rint(diff / GRID), -self._clip, self._clip).astype(np.int64)
            total += (shift * state.copies[:, None]).sum(axis=0)
        return candidates, public[candidates] + total * GRID / self.setup.batch_size


class _State:
    def __init__(self, value, real: int, copies: np.ndarray | None = None) -> None:
        self.value, self.real = value, real
        # how many of the batch's records each of the `real` rows stands for
        self.copies = np.ones(real, dtype=np.int64) if copies is None else copies


class _Replay:
    """A chunk past `cached_rows`: its padded prompt rows only, no KV cache."""

    def __init__(self, padded, real: int, copies: np.ndarray) -> None:
        self.padded, self.real, self.copies = padded, real, copies


def top_k_plus(public_logp: np.ndarray, k: int, clip: float) -> np.ndarray:
    """A top-k+ set (after InvisibleInk's), from public log-probabilities alone: the k most
    likely tokens and every token within 2C of the k-th, in token order. The margin covers
    every token the clipped private shift could lift into the top k only for a batch of at
    most B records (the aggregate then moves by at most C); a batch of n > B moves it by up to
    n·C/B. The set is public either way: privacy does not depend on the margin."""
    k = min(k, public_logp.size)
    kth = np.partition(public_logp, public_logp.size - k)[public_logp.size - k]
    return np.flatnonzero(public_logp >= kth - 2 * clip)


def dp_decode(private: PrivateDataset, lm: ContextLM, setup: DecodingSetup,
              requests: Sequence[TextRequest], buckets: Sequence[int], seed: int,
              mechanism: DisjointSequences, ledger: PrivacyLedger, noise: NoiseSource,
              stage: str) -> list[list[int]]:
    """The token ids of each requested text (its end-of-turn token included where drawn),
    decoded from its batch by `mechanism`, one release for all texts (parallel over the
    disjoint batches)."""
    expected = 2 * setup.clip / setup.batch_size
    if abs(mechanism.step.score_range - expected) > 1e-12 * expected \
            or mechanism.length != setup.max_tokens:
        raise ValueError("the mechanism's score range must be 2C/B and its length max_tokens")
    if any(SLOT not in r.private_instruction for r in requests):
        raise ValueError("every private instruction needs the example slot")
    batches = record_batches(private, requests, buckets, seed)
    sources = _LazySources(lm, setup, requests, batches)
    return ledger.release(stage, mechanism, sources, noise)


LAYOUT_VERSION = 1
"""Bumped whenever `batch_of` or what it reads changes: a resume by another version must
not continue texts whose records it would put elsewhere."""


def layout(private: PrivateDataset, requests: Sequence[TextRequest], buckets: Sequence[int],
           seed: int) -> str:
    """A digest of the public facts that decide which records feed which text: the bucket
    rule's version, the data's identity on disk, the seed, each label's bucket count and
    each text's bucket (a resumed decoding continues its journaled texts only under the
    same). Empty for an in-memory table: it has no identity on disk, so a resume given
    another table (an edited record) could not be told apart, and is refused."""
    if not private.origin:
        return ""
    facts = [LAYOUT_VERSION, private.origin, seed, [int(b) for b in buckets],
             [(r.group, r.batch) for r in requests]]
    return hashlib.blake2b(repr(facts).encode(), digest_size=16).hexdigest()


class _LazySources(Sequence):
    """One `BatchScores` per request, built when the mechanism reaches it, so one text's
    KV caches are held at a time; a slice is the requests still to decode (a resumed release
    continues after the texts its journal holds, building none of them)."""

    def __init__(self, lm, setup, requests, batches) -> None:
        self._args = lm, setup
        self._requests, self._batches = list(requests), batches

    def __len__(self) -> int:
        return len(self._requests)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return _LazySources(*self._args, self._requests[i], self._batches[i])
        return self.fresh(i)

    def fresh(self, i: int) -> BatchScores:
        """Text i's scores from its first token (each call a new sequence)."""
        lm, setup = self._args
        return BatchScores(lm, setup, self._requests[i], self._batches[i])

    def __iter__(self):
        for i in track(range(len(self)), "DP decoding", log_progress=True):
            yield self[i]
