"""A tiny offline LM folder in the shipped layout (tokenizer, untied GPT-2, keyword table),
briefly trained so that it writes space-separated words: for tests of code paths."""

from __future__ import annotations

import contextlib
import random
from pathlib import Path

WORDS = tuple(("the cat sat on a mat while rain fell over quiet hills and old stone walls near "
               "river town market bread music film review story plot actor great terrible")
              .split())


@contextlib.contextmanager
def one_torch_thread():
    """Tiny models on a busy 2-core machine: a second torch thread only adds contention
    (ten times slower here)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def build_tiny_lm(folder: Path) -> Path:
    import torch
    from tokenizers import ByteLevelBPETokenizer

    from dpsynth.backends.offline import format as fmt
    from dpsynth.backends.offline.keywords import KeywordExtractor
    from dpsynth.backends.offline.model import KEYWORDS_FILE, TOKENIZER_FILE, build_model

    rng = random.Random(0)
    corpus = [" ".join(rng.choice(WORDS) for _ in range(20)) + "." for _ in range(300)]
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(corpus, vocab_size=400, special_tokens=list(fmt.SPECIAL_TOKENS),
                            show_progress=False)
    tok.save(str(folder / TOKENIZER_FILE))
    torch.manual_seed(0)
    model = build_model(tok.get_vocab_size(), tok.token_to_id(fmt.EOS), n_layer=1, n_embd=32,
                        n_head=2, n_positions=256)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for i in range(0, 240, 16):
        batch = torch.tensor([tok.encode(fmt.document_sequence(fmt.Fields(), t)).ids[:24]
                              for t in corpus[i : i + 16]])
        model(input_ids=batch, labels=batch).loss.backward()
        opt.step()
        opt.zero_grad()
    model.save_pretrained(folder)
    KeywordExtractor({w: 1.0 + i / 10 for i, w in enumerate(WORDS)}).save(folder / KEYWORDS_FILE)
    return folder


INVERSION_DIM = 32


def inversion_texts(n: int) -> list[str]:
    """The texts `build_tiny_inversion` trains on."""
    rng = random.Random(1)
    return [" ".join(rng.choice(WORDS) for _ in range(6)) for _ in range(n)]


def build_tiny_inversion(folder: Path, lm_dir: Path, dim: int, steps: int = 20,
                         n_texts: int = 320) -> Path:
    """A tiny inversion decoder over a tiny LM, briefly trained to write back
    `inversion_texts(n_texts)` from their hashed bag-of-words embeddings
    (tests.methods.fakes.HashEmbedder of `dim`), 16 texts a step, cycling."""
    import torch

    from dpsynth.backends.offline import format as fmt
    from dpsynth.backends.offline.inversion import (
        InversionSpec,
        new_model,
        save_model,
    )
    from dpsynth.backends.offline.model import load_tokenizer
    from tests.methods.fakes import HashEmbedder

    spec = InversionSpec(embedding_dim=dim, base_lm=str(lm_dir), prefix_length=2, hidden=32,
                         max_tokens=12)
    torch.manual_seed(0)
    model = new_model(spec, lm_dir)
    tok = load_tokenizer(lm_dir)
    texts = inversion_texts(n_texts) * (16 * steps // n_texts + 1)
    emb = torch.from_numpy(HashEmbedder(dim).encode(texts))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    eos = tok.token_to_id(fmt.EOS)
    for i in range(0, 16 * steps, 16):
        ids = torch.tensor([[*tok.encode(f"{fmt.TEXT} {t}").ids[:10], eos]
                            for t in texts[i : i + 16]])
        model.loss(emb[i : i + 16], ids, torch.ones_like(ids)).backward()
        opt.step()
        opt.zero_grad()
    save_model(model, spec, folder)
    return folder
