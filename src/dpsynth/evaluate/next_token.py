"""Next-token accuracy: train a small causal LM on synthetic texts, test it on real texts.

The generative metric of ctcl (§4.1) and dpga-textsyn (PubMed), scaled to a CPU: a tiny
GPT-2 from `transformers`, trained from scratch for a bounded number of steps. The tokenizer
is a fixed file (by default the WordPiece tokenizer shipped with the bundled MiniLM), never
fitted on the data, so accuracies of different synthetic sets are comparable. The output
vocabulary is the tokens seen in the training texts; a real token outside it counts as a
miss, because no model trained on those texts could predict it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from dpsynth.errors import InputError
from dpsynth.progress import track

PAD, BOS, UNK = 0, 1, 2
_RESERVED = 3


class NextTokenConfig(BaseModel):
    """Size and training budget of the downstream LM; the defaults take a few minutes on two
    CPU cores (ctcl trains a 10M-parameter model for 6,000 steps; this is a scaled proxy)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: int = Field(200, gt=0)
    batch_size: int = Field(16, gt=0)
    max_tokens: int = Field(64, ge=4, description="tokens per text, the rest is cut")
    n_layer: int = Field(2, gt=0)
    n_embd: int = Field(128, gt=0)
    n_head: int = Field(2, gt=0)
    learning_rate: float = Field(1e-3, gt=0)
    max_eval_texts: int = Field(500, gt=0)
    threads: int = Field(1, gt=0, description="torch threads while training and testing: a "
                         "model this small runs fastest on one, more so on a busy CPU")
    tokenizer: Path | None = Field(None, description="a tokenizer.json; default: MiniLM's")


def load_tokenizer(path: Path | None = None):
    """A `tokenizers.Tokenizer` from a local tokenizer.json (MiniLM's by default)."""
    from tokenizers import Tokenizer

    if path is None:
        from dpsynth.backends.embedders.sentence_transformer import minilm_path

        path = minilm_path() / "tokenizer.json"
    if not Path(path).is_file():
        raise InputError(f"next-token tokenizer: no tokenizer.json at {path}")
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def next_token_accuracy(train_texts: Sequence[str], test_texts: Sequence[str],
                        config: NextTokenConfig | None = None, seed: int = 0) -> dict[str, float]:
    """Top-1 next-token accuracy on `test_texts` of a tiny GPT-2 trained on `train_texts`."""
    import torch

    config = config or NextTokenConfig()
    if not train_texts or not test_texts:
        raise InputError("next_token_accuracy: needs training and test texts")
    tokenizer = load_tokenizer(config.tokenizer)
    train_raw = _encode(tokenizer, train_texts, config.max_tokens)
    test_raw = _encode(tokenizer, list(test_texts)[: config.max_eval_texts], config.max_tokens)
    vocab = {tok: i + _RESERVED for i, tok in enumerate(sorted({t for s in train_raw for t in s}))}
    train = [_remap(s, vocab) for s in train_raw]
    test = [_remap(s, vocab) for s in test_raw]

    previous_threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        return _train_and_test(train, test, len(vocab), config, seed)
    finally:
        torch.set_num_threads(previous_threads)


def _train_and_test(train: list[list[int]], test: list[list[int]], vocab_size: int,
                    config: NextTokenConfig, seed: int) -> dict[str, float]:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(
        vocab_size=vocab_size + _RESERVED, n_positions=config.max_tokens, n_embd=config.n_embd,
        n_layer=config.n_layer, n_head=config.n_head, bos_token_id=BOS, eos_token_id=BOS,
        pad_token_id=PAD))
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate,
                                  weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 1.0 - step / config.steps)
    rng = np.random.default_rng(seed)
    model.train()
    loss = math.nan
    for _ in track(range(config.steps), "next-token LM", total=config.steps):
        batch = [train[i] for i in rng.integers(len(train), size=config.batch_size)]
        ids, mask = _pad(batch, torch)
        labels = ids.masked_fill(mask == 0, -100)
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        schedule.step()
        loss = out.loss.item()

    model.eval()
    correct = total = 0
    with torch.no_grad():
        for start in range(0, len(test), 64):
            ids, mask = _pad(test[start:start + 64], torch)
            predicted = model(input_ids=ids, attention_mask=mask).logits[:, :-1].argmax(-1)
            target, counted = ids[:, 1:], mask[:, 1:].bool()
            hits = (predicted == target) & (target != UNK) & counted
            correct += int(hits.sum())
            total += int(counted.sum())
    return {"accuracy": correct / max(total, 1), "test_tokens": total,
            "oov_rate": sum(t == UNK for s in test for t in s[1:]) / max(total, 1),
            "final_train_loss": loss, "steps": config.steps}


def _encode(tokenizer, texts: Sequence[str], max_tokens: int) -> list[list[int]]:
    encodings = tokenizer.encode_batch(list(texts), add_special_tokens=False)
    return [e.ids[: max_tokens - 1] for e in encodings]


def _remap(ids: list[int], vocab: dict[int, int]) -> list[int]:
    return [BOS, *(vocab.get(t, UNK) for t in ids)]


def _pad(batch: list[list[int]], torch):
    width = max(len(s) for s in batch)
    ids = torch.full((len(batch), width), PAD, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, seq in enumerate(batch):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    return ids, mask
