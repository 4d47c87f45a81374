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
from collections.abc import Iterator, Sequence
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
    """Rows of a group of texts whose KV caches are held between tokens; the rows past them
    are replayed from their prompt at every token (the same passes, so the same numbers, bit
    for bit): a batch's size follows a noisy count, and its memory must not."""
    texts_together: int = 1
    """Texts decoded in lockstep, their rows sharing forward passes (public: the config's)."""


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


class GroupScores:
    """The scores of the next token of each text of a group decoded together (a
    `ScoreSequences`): each text's public prompt and its batch's records in the LM's context.
    The texts advance in lockstep, one token each per round, so their rows share forward
    passes: the public rows one pass, the records' rows fixed-shape chunks of `forward_batch`
    rows that may mix texts, each chunk with its KV caches between tokens."""

    def __init__(self, lm: ContextLM, setup: DecodingSetup, requests: Sequence[TextRequest],
                 batches: Sequence[list[str]], widths: tuple[int, int] | None = None) -> None:
        import torch

        self._torch, self.lm, self.setup = torch, lm, setup
        self._eos, self._texts = lm.eos_id, len(requests)
        slots = [lm.slotted(r.private_instruction) for r in requests]
        width, public_width = widths or row_widths(lm, setup, requests)
        held: list[tuple[list[int], int, int]] = []  # (row, text, records it stands for)
        replayed: list[tuple[list[int], int, int]] = []
        for text, ((before, after), examples) in enumerate(zip(slots, batches, strict=True)):
            # records whose rows are the same tokens (copies of a text, or texts cut to the
            # same first max_example_tokens) have the same log-probabilities bit for bit
            # (fixed-shape passes): each such row is run once and its clipped shift counted
            # once per record, the same integer sum, while memory and passes follow the
            # distinct rows, not how many records repeat one (copies all join one batch)
            copies: dict[tuple[int, ...], int] = {}
            for x in examples:
                row = tuple(before + lm.encode(x, setup.max_example_tokens) + after)
                copies[row] = copies.get(row, 0) + 1
            rows = [(list(row), text, n) for row, n in copies.items()]
            # the group's first cached_rows rows hold KV caches; the rest (a label's noisy
            # count fell far under the true one) are replayed: memory stays bounded
            room = max(0, setup.cached_rows - len(held))
            held += rows[:room]
            replayed += rows[room:]
        publics = [lm.prompt(r.public_instruction) for r in requests]
        # one pass of texts_together rows (filled with a public row): a text's public
        # log-probabilities are the same bits whichever texts it is decoded with
        fill = [publics[0]] * (setup.texts_together - len(publics))
        self._public = self._forward(*self._padded(publics + fill, public_width), None)
        filler = publics[0][-width:]  # the padding rows of a chunk: public, masked out of sums
        self._chunks: list[_State | _Replay] = []
        f = setup.forward_batch
        for rows, keep in ((held, True), (replayed, False)):
            for start in range(0, len(rows), f):
                part = rows[start : start + f]
                padded = self._padded([r for r, _, _ in part] + [filler] * (f - len(part)),
                                      width)
                owners = np.array([t for _, t, _ in part], dtype=np.int64)
                counts = np.array([n for _, _, n in part], dtype=np.int64)
                self._chunks.append(_State(self._forward(*padded, None), owners, counts)
                                    if keep else _Replay(padded, owners, counts))
        self._rounds = 0
        self._fed: list[np.ndarray] = []  # the token each text's rows took at each round
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

    def _advance(self, value, tokens: np.ndarray):
        """One pass of one token a row (`tokens`, a row each)."""
        torch = self._torch
        _, mask, cache = value
        mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype)], dim=1)
        return self._forward(torch.as_tensor(tokens, dtype=torch.long)[:, None], mask, cache)

    def _row_tokens(self, state: _State | _Replay, fed: np.ndarray) -> np.ndarray:
        """Each row's token of a round: its text's; the filler rows take the pad token."""
        out = np.full(self.setup.forward_batch, self.lm.pad_id, dtype=np.int64)
        out[: state.owners.size] = fed[state.owners]
        return out

    def _replayed(self, chunk: _Replay) -> np.ndarray:
        """A chunk's log-probabilities after the rounds so far, by the passes a held cache
        would have taken: its prompt's, then one per round."""
        value = self._forward(*chunk.padded, None)
        for fed in self._fed:
            value = self._advance(value, self._row_tokens(chunk, fed))
        return value[0]

    def next_scores(self, drawn: Sequence[list[int]]
                    ) -> list[tuple[np.ndarray, np.ndarray] | None]:
        """Each text's (candidates, scores) for its next token, or None where it is finished
        (its last token ended the turn, or it was not drawn last round)."""
        rounds, self._rounds = self._rounds, self._rounds + 1
        if len(drawn) != self._texts:
            raise ValueError(f"one token list per text of the group: {self._texts} expected")
        live = [len(d) == rounds and not (d and d[-1] == self._eos) for d in drawn]
        if rounds:
            # a text that stopped keeps its rows in the passes, fed the pad token
            fed = np.array([d[-1] if len(d) == rounds else self.lm.pad_id for d in drawn],
                           dtype=np.int64)
            self._fed.append(fed)
            filler = np.full(self._public[1].shape[0] - fed.size, self.lm.pad_id)
            self._public = self._advance(self._public, np.concatenate([fed, filler]))
            for state in self._chunks:
                if isinstance(state, _State) and state.value is not None:
                    # a chunk whose texts have all stopped is read no more: its caches go
                    state.value = (self._advance(state.value, self._row_tokens(state, fed))
                                   if any(live[t] for t in state.owners) else None)
        public = self._public[0]
        candidates = [top_k_plus(public[t], self.setup.top_k, self.setup.clip)
                      if live[t] else None for t in range(self._texts)]
        totals = [np.zeros(c.size, dtype=np.int64) if c is not None else None
                  for c in candidates]
        for state in self._chunks:
            if not any(live[t] for t in state.owners):
                continue  # a held chunk still advanced above; a replayed one waits
            logp = state.value[0] if isinstance(state, _State) else self._replayed(state)
            for t in np.unique(state.owners):
                if candidates[t] is None:
                    continue
                rows = np.flatnonzero(state.owners == t)
                # a NaN shift (a record whose forward overflowed) counts as no shift, and
                # ±inf as ±C: data-independent rules, before the clip
                diff = np.nan_to_num(logp[np.ix_(rows, candidates[t])] - public[t, candidates[t]],
                                     nan=0.0, posinf=self.setup.clip, neginf=-self.setup.clip)
                shift = np.clip(np.rint(diff / GRID), -self._clip, self._clip).astype(np.int64)
                totals[t] += (shift * state.copies[rows, None]).sum(axis=0)
        return [None if c is None else
                (c, public[t, c] + totals[t] * GRID / self.setup.batch_size)
                for t, c in enumerate(candidates)]


class _State:
    def __init__(self, value, owners: np.ndarray, copies: np.ndarray) -> None:
        # each real row's text, and how many of that text's records the row stands for
        self.value, self.owners, self.copies = value, owners, copies


class _Replay:
    """A chunk of rows past their texts' `cached_rows`: its padded prompt rows only, no KV
    cache."""

    def __init__(self, padded, owners: np.ndarray, copies: np.ndarray) -> None:
        self.padded, self.owners, self.copies = padded, owners, copies


def row_widths(lm: ContextLM, setup: DecodingSetup, requests: Sequence[TextRequest]
               ) -> tuple[int, int]:
    """The one length of the records' rows and of the public rows, from the prompts of all
    `requests` (public): the longest, plus one pad column, so that every pass is masked (a
    pass of rows all at full length would take another attention path, and which rows share
    a pass follows the batches' sizes)."""
    private = max(len(before) + setup.max_example_tokens + len(after)
                  for before, after in (lm.slotted(r.private_instruction) for r in requests))
    public = max(len(lm.prompt(r.public_instruction)) for r in requests)
    return private + 1, public + 1


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


class _LazySources:
    """The texts' batches as a `GroupedSequences`: each group of `texts_together` texts'
    `GroupScores` built when the mechanism reaches it, so one group's KV caches are held at a
    time (a resumed release starts at the first text its journal lacks, building no batch
    for the texts before it)."""

    def __init__(self, lm, setup, requests, batches) -> None:
        self._args = lm, setup
        self._requests, self._batches = list(requests), batches
        # one row length for every text, whichever group it is decoded in
        self._widths = row_widths(lm, setup, self._requests) if self._requests else (0, 0)

    def __len__(self) -> int:
        return len(self._requests)

    def together(self, start: int, stop: int) -> GroupScores:
        """Texts start..stop−1's scores from their first token (each call new sequences)."""
        lm, setup = self._args
        return GroupScores(lm, setup, self._requests[start:stop], self._batches[start:stop],
                           self._widths)

    def groups(self, start: int) -> Iterator[tuple[int, int]]:
        """(start, stop) of each group of `together` texts from `start` on, with progress."""
        size = self._args[1].texts_together
        bounds = [(a, min(a + size, len(self))) for a in range(start, len(self), size)]
        yield from track(bounds, "DP decoding", log_progress=True,
                         cost=lambda bound: bound[1] - bound[0])
