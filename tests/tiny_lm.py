"""A tiny offline LM folder in the shipped layout (tokenizer, untied GPT-2, keyword table),
briefly trained so that it writes space-separated words: for tests of code paths."""

from __future__ import annotations

import random
from pathlib import Path

WORDS = tuple(("the cat sat on a mat while rain fell over quiet hills and old stone walls near "
               "river town market bread music film review story plot actor great terrible")
              .split())


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
