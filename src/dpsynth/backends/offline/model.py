"""The offline LM's architecture and the files that make up a model folder.

A GPT-2 decoder from transformers: a well-kept implementation that opacus can train, with
the input and output embeddings untied (opacus' ghost clipping refuses shared weights).
"""

from __future__ import annotations

from pathlib import Path

from dpsynth.backends.offline.format import EOS

TOKENIZER_FILE = "tokenizer.json"
KEYWORDS_FILE = "keywords_idf.json"
CARD_FILE = "MODEL_CARD.md"


def asset_dir() -> Path:
    """The model folder shipped inside the package."""
    return Path(__file__).resolve().parents[2] / "assets" / "public_lm"


def build_model(vocab_size: int, eos_id: int, n_layer: int = 4, n_embd: int = 256,
                n_head: int = 4, n_positions: int = 256):
    """A randomly initialised GPT-2 LM head model with untied embeddings."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=vocab_size, n_positions=n_positions, n_embd=n_embd,
                        n_layer=n_layer, n_head=n_head, bos_token_id=eos_id,
                        eos_token_id=eos_id, pad_token_id=eos_id,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        activation_function="gelu_pytorch_tanh",
                        tie_word_embeddings=False)
    return GPT2LMHeadModel(config)


def load_tokenizer(folder: str | Path):
    """The byte-level BPE tokenizer of a model folder."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(folder) / TOKENIZER_FILE))
    if tok.token_to_id(EOS) is None:
        raise ValueError(f"{folder}/{TOKENIZER_FILE}: has no {EOS} token; not an offline LM "
                         "tokenizer")
    return tok
