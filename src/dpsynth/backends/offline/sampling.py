"""Batched, seeded nucleus sampling with per-row length control, for the offline LM.

Each row writes one or more segments: a whole text (ended by the end-of-text token) or, for
fill-in-the-middle, one span per blank (each ended by the separator token). A segment has a
word budget: its end token is blocked below `min_words`, new words are blocked from
`max_words` on, and once `target` words are written the segment ends at the next sentence
end. Byte-level BPE tokens are either whitespace or text with at most one leading space, so a
word starts at a text token that has a leading space or follows whitespace; the count is exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from dpsynth.backends.offline.decoder import Decoder, supports
from dpsynth.backends.offline.format import EOS, SEP, SPECIAL_TOKENS

_NEG = float("-inf")


@dataclass(frozen=True)
class Segment:
    """The word budget of one segment of a row."""

    min_words: int = 1
    target: float = float("inf")
    max_words: float = float("inf")


@dataclass(frozen=True)
class Request:
    """One row: its prompt ids and its segments, in order."""

    prompt: list[int]
    segments: tuple[Segment, ...]
    fill: bool = False
    """Segments end with the separator (fill-in-the-middle), not the end-of-text token."""
    words_so_far: int = 0
    """Words already in the text before generation starts (a kept prefix)."""
    contrast: list[int] | None = None
    """The prompt without the fields to stress, for guidance (None: no guidance)."""


class TokenClasses:
    """Per-token facts the length control needs, computed once per tokenizer."""

    def __init__(self, tokenizer) -> None:
        vocab = tokenizer.get_vocab_size()
        pieces = [tokenizer.id_to_token(i) or "" for i in range(vocab)]
        self.eos = tokenizer.token_to_id(EOS)
        self.sep = tokenizer.token_to_id(SEP)
        spaces = ("Ġ", "Ċ", "ĉ")
        self.is_space = torch.tensor([bool(p) and not p.strip("".join(spaces)) for p in pieces])
        self.lead_space = torch.tensor([p.startswith(spaces) for p in pieces]) & ~self.is_space
        self.starts_word = self.lead_space | self.is_space
        """Tokens that start a word after a text token (whitespace too: a word follows it)."""
        text_ends = (".", "!", "?", '."', '!"', '?"', ".'", ".)")
        self.sentence_end = torch.tensor([p.endswith(text_ends) for p in pieces])
        self.special = torch.zeros(vocab, dtype=torch.bool)
        for t in SPECIAL_TOKENS:
            self.special[tokenizer.token_to_id(t)] = True


TOP_K = 128
"""Nucleus sampling runs over the 128 likeliest tokens: sorting the whole vocabulary for
every row and step cost as much as the model itself, and at top_p <= 0.95 the nucleus of a
trained model lies within them."""


def _draw(logits: torch.Tensor, temperature: float, top_p: float,
          generator: torch.Generator) -> torch.Tensor:
    """One token per row: greedy at temperature 0, else nucleus sampling."""
    if temperature == 0:
        return logits.argmax(-1)
    values, index = torch.topk(logits, min(TOP_K, logits.shape[-1]), dim=-1)
    probs = (values / temperature).softmax(-1)
    if top_p < 1.0:
        outside = probs.cumsum(-1) - probs >= top_p  # the first token always stays
        probs = probs.masked_fill(outside, 0.0)
    pick = torch.multinomial(probs, 1, generator=generator)
    return index.gather(-1, pick).squeeze(-1)


def _combine(logits: torch.Tensor, b: int, guided: bool, guidance: float) -> torch.Tensor:
    if not guided:
        return logits
    cond, contrast = logits[:b], logits[b:]
    return contrast + guidance * (cond - contrast)


class _Rows:
    """The length control of a batch's rows: each row's word budgets and what it has written
    so far. Both engines ban, end and count tokens through it; `sample` drops finished rows
    from it (`keep`), the reference runs every row to the end."""

    PER_ROW = ("min_w", "target", "max_w", "n_segments", "end_token", "max_tokens", "seg",
               "words", "seg_tokens", "after_space", "last_ended_sentence", "done")

    def __init__(self, requests: Sequence[Request], classes: TokenClasses,
                 context: int) -> None:
        b, nseg = len(requests), max(len(r.segments) for r in requests)

        def table(attr: str, pad: float) -> torch.Tensor:
            return torch.tensor([[float(getattr(s, attr)) for s in r.segments]
                                 + [pad] * (nseg - len(r.segments)) for r in requests])

        self.classes = classes
        self.min_w, self.target = table("min_words", 0), table("target", 1e9)
        self.max_w = table("max_words", 1e9)
        self.n_segments = torch.tensor([len(r.segments) for r in requests])
        self.end_token = torch.where(torch.tensor([r.fill for r in requests]), classes.sep,
                                     classes.eos)
        self.max_tokens = (3 * self.max_w + 8).clamp(max=context)  # stops runs of punctuation
        self.seg = torch.zeros(b, dtype=torch.long)
        self.words = torch.tensor([float(r.words_so_far) for r in requests])
        self.seg_tokens = torch.zeros(b)
        self.after_space = torch.ones(b, dtype=torch.bool)  # a segment starts at a word boundary
        self.last_ended_sentence = torch.zeros(b, dtype=torch.bool)
        self.done = torch.zeros(b, dtype=torch.bool)

    def next_token(self, logits: torch.Tensor, temperature: float, top_p: float,
                   generator: torch.Generator) -> torch.Tensor:
        """One token per row, drawn under its segment's bans; the end token where the
        segment must end, and for rows already done."""
        c = self.classes
        rows = torch.arange(len(self.seg))
        s = self.seg.clamp(max=self.min_w.shape[1] - 1)
        lo, tgt, hi = self.min_w[rows, s], self.target[rows, s], self.max_w[rows, s]
        ban = c.special.expand(len(rows), -1).clone()
        ban[rows, self.end_token] = self.words < lo  # the end token only once long enough
        full = self.words >= hi  # no new word: after whitespace every token starts one
        ban |= (full & self.after_space)[:, None] | (full[:, None] & c.starts_word[None, :])
        force_end = ((self.words >= tgt) & self.last_ended_sentence) | self.done
        force_end |= self.seg_tokens >= self.max_tokens[rows, s]
        token = _draw(logits.masked_fill(ban, _NEG), temperature, top_p, generator)
        return torch.where(force_end, self.end_token, token)

    def advance(self, token: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Count each running row's token; returns the rows that ended a segment and those
        that ended their last one (now done)."""
        c = self.classes
        ended = (token == self.end_token) & ~self.done
        new_word = c.lead_space[token] | (self.after_space & ~c.is_space[token])
        self.words = torch.where(ended, 0.0, self.words + new_word.float())
        self.after_space = ended | c.is_space[token]
        self.seg_tokens = torch.where(ended, 0.0, self.seg_tokens + 1)
        self.last_ended_sentence = c.sentence_end[token] & ~ended
        self.seg = self.seg + ended.long()
        finished = ended & (self.seg >= self.n_segments)
        self.done = self.done | finished
        return ended, finished

    def keep(self, rows: torch.Tensor) -> None:
        for name in self.PER_ROW:
            setattr(self, name, getattr(self, name)[rows])


def _left_pad(prompts: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    valid = torch.zeros((len(prompts), width), dtype=torch.bool)
    for i, p in enumerate(prompts):  # left padding keeps every row's next token aligned
        ids[i, width - len(p):] = torch.tensor(p)
        valid[i, width - len(p):] = True
    return ids, valid


@torch.inference_mode()
def sample_reference(model, classes: TokenClasses, requests: Sequence[Request], *,
                     temperature: float, top_p: float, generator: torch.Generator,
                     context: int, guidance: float = 1.0) -> list[list[list[int]]]:
    """What `sample` computes, written plainly on the transformers model: every row runs
    until the whole batch is done, and every row has a contrast row when any has one. Kept
    as the reference that `sample` is tested and benchmarked against
    (benchmarks/offline_generator_speed.py), and for models `sample` does not support."""
    b = len(requests)
    prompts = [r.prompt for r in requests]
    guided = guidance != 1.0 and any(r.contrast for r in requests)
    if guided:
        prompts += [r.contrast or r.prompt for r in requests]
    ids, valid = _left_pad(prompts, classes.eos)
    mask = valid.long()
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    rows = _Rows(requests, classes, context)
    out: list[list[list[int]]] = [[[]] for _ in range(b)]

    logits_out = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                       use_cache=True)
    past = logits_out.past_key_values
    logits = _combine(logits_out.logits[:, -1, :].float(), b, guided, guidance)
    for _ in range(max(0, context - ids.shape[1])):
        token = rows.next_token(logits, temperature, top_p, generator)
        for i in torch.nonzero(~rows.done).flatten().tolist():
            if int(token[i]) != int(rows.end_token[i]):
                out[i][-1].append(int(token[i]))
        ended, finished = rows.advance(token)
        for i in torch.nonzero(ended & ~finished).flatten().tolist():
            out[i].append([])
        if bool(rows.done.all()):
            break
        mask = torch.cat([mask, torch.ones((len(prompts), 1), dtype=torch.long)], dim=1)
        positions = positions[:, -1:] + 1
        fed = torch.cat([token, token]) if guided else token
        step = model(input_ids=fed[:, None], attention_mask=mask, position_ids=positions,
                     past_key_values=past, use_cache=True)
        past = step.past_key_values
        logits = _combine(step.logits[:, -1, :].float(), b, guided, guidance)
    return out


COMPACT_FRACTION = 8
"""Finished rows leave the batch once they are at least 1/8 of it (each removal copies the
cache once)."""


@torch.inference_mode()
def sample(model, classes: TokenClasses, requests: Sequence[Request], *, temperature: float,
           top_p: float, generator: torch.Generator, context: int,
           guidance: float = 1.0, int8: bool = False) -> list[list[list[int]]]:
    """Generated token ids for each request, split into its segments (end tokens dropped).

    With `guidance` > 1 and requests that carry a `contrast` prompt, the next-token logits are
    `contrast + guidance * (prompt - contrast)` (classifier-free guidance): what the dropped
    fields change is stressed. The contrast rows run in the same batch; requests without a
    contrast prompt run once.

    Each row draws from the same distribution as in `sample_reference` (same logits, same
    bans, same nucleus); rows leave the batch as they finish, so a batch costs what its
    rows write, not what its longest row writes. The random stream differs: which row takes
    which draw depends on which rows are still running. `int8` runs the projections on
    int8 dynamic-quantised weights: faster, and no longer the same distribution (its
    perplexity is measured in benchmarks/offline_generator_speed.py)."""
    if not supports(model):
        return sample_reference(model, classes, requests, temperature=temperature,
                                top_p=top_p, generator=generator, context=context,
                                guidance=guidance)
    b = len(requests)
    guided = [i for i, r in enumerate(requests) if guidance != 1.0 and r.contrast]
    ids, valid = _left_pad([r.prompt for r in requests]
                           + [requests[i].contrast for i in guided], classes.eos)
    rows = _Rows(requests, classes, context)
    act = torch.arange(b)  # the request of each running row (the batch shrinks)
    pair = torch.tensor(guided, dtype=torch.long)  # the running row of each contrast row
    budget = max(0, context - ids.shape[1])
    record = torch.full((b, max(budget, 1)), -1, dtype=torch.long)
    ends, finished = rows.end_token.clone(), torch.zeros(b, dtype=torch.bool)

    decoder = Decoder(model, int8=int8)
    logits = decoder.logits(_guide(decoder.prefill(ids, valid), b, pair, guidance))
    for step in range(budget):
        token = rows.next_token(logits, temperature, top_p, generator)
        running = ~rows.done
        record[act[running], step] = token[running]
        _, newly = rows.advance(token)
        finished[act[newly]] = True
        a, n_done = len(act), int(rows.done.sum())
        if n_done == a or step == budget - 1:
            break
        fed = torch.cat([token, token[pair]])
        if n_done * COMPACT_FRACTION >= a:  # finished rows leave the batch
            keep = torch.nonzero(~rows.done).flatten()
            local = torch.full((a,), -1, dtype=torch.long)
            local[keep] = torch.arange(len(keep))
            kept_pairs = torch.nonzero(~rows.done[pair]).flatten()
            decoder.keep(torch.cat([keep, a + kept_pairs]))
            fed = fed[torch.cat([keep, a + kept_pairs])]
            pair = local[pair[kept_pairs]]
            act = act[keep]
            rows.keep(keep)
        logits = decoder.logits(_guide(decoder.step(fed), len(act), pair, guidance))
    return [_split(record[i], int(e), bool(f))
            for i, (e, f) in enumerate(zip(ends.tolist(), finished.tolist(), strict=True))]


def _split(tokens: torch.Tensor, end: int, finished: bool) -> list[list[int]]:
    """One row's recorded tokens (-1 after its last) cut into segments at its end token."""
    segments: list[list[int]] = [[]]
    for t in tokens[tokens >= 0].tolist():
        if t == end:
            segments.append([])
        else:
            segments[-1].append(t)
    return segments[:-1] if finished else segments


def _guide(features: torch.Tensor, a: int, pair: torch.Tensor,
           guidance: float) -> torch.Tensor:
    """Features of the `a` request rows, guided where a contrast row follows them (`pair`:
    the request row of each contrast row). The output head is linear, so mixing features
    as `contrast + guidance * (prompt - contrast)` mixes the logits the same way, and the
    head runs once per request instead of twice."""
    if not len(pair):
        return features[:a]
    out = features[:a].clone()
    cond, contrast = features[pair], features[a:]
    out[pair] = contrast + guidance * (cond - contrast)
    return out
