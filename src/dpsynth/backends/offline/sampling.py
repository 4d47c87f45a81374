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
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), classes.eos, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):  # left padding keeps every row's next token aligned
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    nseg = max(len(r.segments) for r in requests)

    def table(attr: str, pad: float) -> torch.Tensor:
        return torch.tensor([[float(getattr(s, attr)) for s in r.segments]
                             + [pad] * (nseg - len(r.segments)) for r in requests])

    min_w, target, max_w = table("min_words", 0), table("target", 1e9), table("max_words", 1e9)
    n_segments = torch.tensor([len(r.segments) for r in requests])
    end_token = torch.where(torch.tensor([r.fill for r in requests]), classes.sep, classes.eos)
    max_tokens = (3 * max_w + 8).clamp(max=context)  # stops runs of punctuation
    seg = torch.zeros(b, dtype=torch.long)
    words = torch.tensor([float(r.words_so_far) for r in requests])
    seg_tokens = torch.zeros(b)
    after_space = torch.ones(b, dtype=torch.bool)  # a segment starts at a word boundary
    last_ended_sentence = torch.zeros(b, dtype=torch.bool)
    done = torch.zeros(b, dtype=torch.bool)
    out: list[list[list[int]]] = [[[]] for _ in range(b)]
    rows = torch.arange(b)
    budget = context - width

    logits_out = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                       use_cache=True)
    past = logits_out.past_key_values
    logits = _combine(logits_out.logits[:, -1, :].float(), b, guided, guidance)
    for _ in range(max(0, budget)):
        s = seg.clamp(max=nseg - 1)
        lo, tgt, hi = min_w[rows, s], target[rows, s], max_w[rows, s]
        ban = classes.special.expand(b, -1).clone()
        ban[rows, end_token] = words < lo  # the segment's end token only once long enough
        starts_word = classes.lead_space[None, :] | classes.is_space[None, :] | (
            after_space[:, None] & ~classes.is_space[None, :])
        ban |= (words >= hi)[:, None] & starts_word
        logits = logits.masked_fill(ban, _NEG)
        force_end = ((words >= tgt) & last_ended_sentence) | done
        force_end |= seg_tokens >= max_tokens[rows, s]
        token = _draw(logits, temperature, top_p, generator)
        token = torch.where(force_end, end_token, token)
        for i in torch.nonzero(~done).flatten().tolist():
            if int(token[i]) != int(end_token[i]):
                out[i][-1].append(int(token[i]))
        ended = (token == end_token) & ~done
        new_word = classes.lead_space[token] | (after_space & ~classes.is_space[token])
        words = torch.where(ended, 0.0, words + new_word.float())
        after_space = ended | classes.is_space[token]
        seg_tokens = torch.where(ended, 0.0, seg_tokens + 1)
        last_ended_sentence = classes.sentence_end[token] & ~ended
        seg = seg + ended.long()
        finished = ended & (seg >= n_segments)
        for i in torch.nonzero(ended & ~finished).flatten().tolist():
            out[i].append([])
        done |= finished
        if bool(done.all()):
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


def _left_pad(prompts: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    valid = torch.zeros((len(prompts), width), dtype=torch.bool)
    for i, p in enumerate(prompts):  # left padding keeps every row's next token aligned
        ids[i, width - len(p):] = torch.tensor(p)
        valid[i, width - len(p):] = True
    return ids, valid


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
    width = ids.shape[1]
    nseg = max(len(r.segments) for r in requests)

    def table(attr: str, pad: float) -> torch.Tensor:
        return torch.tensor([[float(getattr(s, attr)) for s in r.segments]
                             + [pad] * (nseg - len(r.segments)) for r in requests])

    # per running row (the batch shrinks as rows finish; `act` maps back to requests)
    act = torch.arange(b)
    pair = torch.tensor(guided, dtype=torch.long)  # the request row of each contrast row
    min_w, target, max_w = table("min_words", 0), table("target", 1e9), table("max_words", 1e9)
    n_segments = torch.tensor([len(r.segments) for r in requests])
    end_token = torch.where(torch.tensor([r.fill for r in requests]), classes.sep, classes.eos)
    max_tokens = (3 * max_w + 8).clamp(max=context)  # stops runs of punctuation
    seg = torch.zeros(b, dtype=torch.long)
    words = torch.tensor([float(r.words_so_far) for r in requests])
    seg_tokens = torch.zeros(b)
    after_space = torch.ones(b, dtype=torch.bool)  # a segment starts at a word boundary
    last_ended_sentence = torch.zeros(b, dtype=torch.bool)
    done = torch.zeros(b, dtype=torch.bool)
    budget = max(0, context - width)
    record = torch.full((b, max(budget, 1)), -1, dtype=torch.long)
    ends, finished = end_token.clone(), torch.zeros(b, dtype=torch.bool)
    starts_after_text = classes.lead_space | classes.is_space  # word starts after a text token

    decoder = Decoder(model, int8=int8)
    logits = decoder.logits(_guide(decoder.prefill(ids, valid), b, pair, guidance))
    for step in range(budget):
        a = len(act)
        rows = torch.arange(a)
        s = seg.clamp(max=nseg - 1)
        lo, tgt, hi = min_w[rows, s], target[rows, s], max_w[rows, s]
        ban = classes.special.expand(a, -1).clone()
        ban[rows, end_token] = words < lo  # the segment's end token only once long enough
        full = words >= hi  # no new word: after whitespace every token starts one
        ban |= (full & after_space)[:, None] | (full[:, None] & starts_after_text[None, :])
        logits = logits.masked_fill(ban, _NEG)
        force_end = ((words >= tgt) & last_ended_sentence) | done
        force_end |= seg_tokens >= max_tokens[rows, s]
        token = _draw(logits, temperature, top_p, generator)
        token = torch.where(force_end, end_token, token)
        running = ~done
        record[act[running], step] = token[running]
        ended = (token == end_token) & running
        new_word = classes.lead_space[token] | (after_space & ~classes.is_space[token])
        words = torch.where(ended, 0.0, words + new_word.float())
        after_space = ended | classes.is_space[token]
        seg_tokens = torch.where(ended, 0.0, seg_tokens + 1)
        last_ended_sentence = classes.sentence_end[token] & ~ended
        seg = seg + ended.long()
        newly = ended & (seg >= n_segments)
        finished[act[newly]] = True
        done = done | newly
        n_done = int(done.sum())
        if n_done == a or step == budget - 1:
            break
        fed = torch.cat([token, token[pair]])
        if n_done * COMPACT_FRACTION >= a:  # finished rows leave the batch
            keep = torch.nonzero(~done).flatten()
            local = torch.full((a,), -1, dtype=torch.long)
            local[keep] = torch.arange(len(keep))
            kept_pairs = torch.nonzero(~done[pair]).flatten()
            decoder.keep(torch.cat([keep, a + kept_pairs]))
            fed = fed[torch.cat([keep, a + kept_pairs])]
            pair = local[pair[kept_pairs]]
            act, min_w, target, max_w = act[keep], min_w[keep], target[keep], max_w[keep]
            n_segments, end_token, max_tokens = n_segments[keep], end_token[keep], max_tokens[keep]
            seg, words, seg_tokens = seg[keep], words[keep], seg_tokens[keep]
            after_space, last_ended_sentence = after_space[keep], last_ended_sentence[keep]
            done = done[keep]
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
