"""Embedding → text inversion (embedding-eda §3.1 "Preparation"), trained on public text only.

A sentence embedding is projected by a small MLP into `prefix_length` vectors that stand in
front of the offline public LM's `<|text|>` token; the LM, initialised from the shipped public
LM, then writes the text back. Its token embedding and output head stay frozen in training
and are stored in the decoder's own folder with the rest, so a new public LM (same tokenizer
and shape) leaves the decoder's output unchanged; the public LM folder still gives the shape,
the tokenizer and the perplexity model of `scorer()`.

`decode` is greedy. `decode_closest` is a training-free correction in the spirit of Morris et
al. (2023): it also samples a few texts per embedding, embeds every hypothesis with the
encoder being inverted, and keeps the one closest to the target (on the shipped decoder,
best of greedy + 8 samples lifts held-out cosine from 0.32 to 0.42; see its model card). Both
are deterministic: sampling draws from a generator seeded by the call's `seed`.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpsynth.backends.base import Embedder
from dpsynth.backends.offline import format as fmt
from dpsynth.backends.offline.model import asset_dir, load_tokenizer
from dpsynth.errors import InputError

CONFIG_FILE = "inversion.json"
WEIGHTS_FILE = "inversion.safetensors"
SHIPPED_BASE = "public_lm"
"""`base_lm` value naming the public LM shipped in the package."""
FROZEN = ("lm.transformer.wte.weight", "lm.lm_head.weight")
"""Parameters kept as the public LM's in training (stored with the trained ones)."""
SAMPLE_TEMPERATURE = 0.8
SAMPLE_TOP_P = 0.9
"""Sampling of `decode_closest`'s extra hypotheses (T = 0.8 and T = 1.0 scored alike)."""


def inversion_dir() -> Path:
    """The decoder folder shipped inside the package."""
    return Path(__file__).resolve().parents[2] / "assets" / "inversion"


@dataclass(frozen=True)
class InversionSpec:
    """What a decoder folder's `inversion.json` records."""

    embedding_dim: int
    base_lm: str = SHIPPED_BASE
    prefix_length: int = 4
    hidden: int = 1024
    max_tokens: int = 48
    embedder: dict[str, Any] = field(default_factory=dict)
    """The identity of the embedder it was trained on (checked against the run's)."""

    def base_dir(self, folder: Path | None = None) -> Path:
        if self.base_lm == SHIPPED_BASE:
            return asset_dir()
        base = Path(self.base_lm)
        return base if base.is_absolute() or folder is None else folder / base


def _torch_model(spec: InversionSpec, base_dir: Path):
    """The trainable module: projection + public LM (frozen embeddings and head)."""
    import torch
    from transformers import GPT2LMHeadModel

    class InversionModel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = GPT2LMHeadModel.from_pretrained(base_dir, dtype=torch.float32)
            width = int(self.lm.config.n_embd)
            self.width = width
            self.project = torch.nn.Sequential(
                torch.nn.Linear(spec.embedding_dim, spec.hidden), torch.nn.GELU(),
                torch.nn.Linear(spec.hidden, spec.prefix_length * width))
            for name, param in self.named_parameters():
                param.requires_grad_(name not in FROZEN)

        def prefix(self, embeddings: torch.Tensor) -> torch.Tensor:
            return self.project(embeddings).view(len(embeddings), spec.prefix_length,
                                                 self.width)

        def loss(self, embeddings: torch.Tensor, ids: torch.Tensor,
                 mask: torch.Tensor) -> torch.Tensor:
            """Mean token loss of `ids` (`<|text|>` text `<|endoftext|>`, right-padded)
            after the embedding's prefix; the `<|text|>` token itself is not predicted."""
            b, p = len(ids), spec.prefix_length
            inputs = torch.cat([self.prefix(embeddings), self.lm.transformer.wte(ids)], 1)
            attention = torch.cat([torch.ones(b, p, dtype=mask.dtype), mask], 1)
            labels = torch.where(mask.bool(), ids, -100)
            labels[:, 0] = -100
            labels = torch.cat([torch.full((b, p), -100, dtype=ids.dtype), labels], 1)
            return self.lm(inputs_embeds=inputs, attention_mask=attention, labels=labels).loss

    return InversionModel()


class InversionDecoder:
    """Maps embeddings of `spec.embedding_dim` dimensions back to text."""

    def __init__(self, folder: str | Path | None = None, *, batch_size: int = 64) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.folder = Path(folder) if folder is not None else inversion_dir()
        config = self.folder / CONFIG_FILE
        if not config.is_file():
            raise InputError(f"decoder: {self.folder} holds no inversion decoder ({CONFIG_FILE} "
                             "missing); train one with scripts/train_inversion_decoder.py")
        self.spec = InversionSpec(**json.loads(config.read_text(encoding="utf-8")))
        self.base_dir = self.spec.base_dir(self.folder)
        if not (self.base_dir / "config.json").is_file():
            raise InputError(f"decoder: its public LM {self.base_dir} is missing")
        self.batch_size = batch_size
        self.model = load_model(self.folder, self.spec, self.base_dir).eval()
        self.tokenizer = load_tokenizer(self.base_dir)

    @property
    def dim(self) -> int:
        return self.spec.embedding_dim

    def scorer(self):
        """The decoder's public LM as a perplexity model (eda's readability filter)."""
        from dpsynth.backends.offline.generator import OfflineGenerator

        return OfflineGenerator(self.base_dir, seed=0)

    def check_embedder(self, embedder: Embedder) -> None:
        """Refuse an embedder other than the one the decoder learned to invert."""
        if embedder.dim != self.dim:
            raise InputError(f"decoder: {self.folder} inverts {self.dim}-d embeddings, the "
                             f"embedder gives {embedder.dim}-d ({embedder.identity()})")
        want = self.spec.embedder.get("model")
        have = embedder.identity().get("model")
        if want and have and want != have:
            raise InputError(f"decoder: {self.folder} was trained on embedder {want!r}, the "
                             f"run uses {have!r}")

    def decode(self, embeddings: np.ndarray) -> list[str]:
        """One text per embedding row (greedy, so deterministic)."""
        return self._generate(self._checked(embeddings), samples=0, seed=0)

    def decode_closest(self, embeddings: np.ndarray, embedder: Embedder, samples: int = 8,
                       seed: int = 0) -> list[str]:
        """Per row, of the greedy text and `samples` sampled ones, the text whose embedding
        by `embedder` (the encoder the decoder inverts) has the highest cosine to the row."""
        emb = self._checked(embeddings)
        if samples < 0:
            raise ValueError(f"samples: need >= 0, got {samples}")
        if samples == 0 or not len(emb):
            return self.decode(emb)
        greedy = self.decode(emb)
        sampled = self._generate(emb, samples, seed)
        texts = [[g, *sampled[i * samples : (i + 1) * samples]] for i, g in enumerate(greedy)]
        flat = [t for row in texts for t in row]
        back = np.asarray(embedder.encode(flat), dtype=np.float32)
        back = back.reshape(len(emb), samples + 1, -1)
        best = np.einsum("nkd,nd->nk", back, emb).argmax(axis=1)
        return [row[k] for row, k in zip(texts, best, strict=True)]

    def _checked(self, embeddings: np.ndarray) -> np.ndarray:
        emb = np.asarray(embeddings, dtype=np.float32)
        if emb.ndim != 2 or emb.shape[1] != self.dim:
            raise ValueError(f"embeddings: need shape (n, {self.dim}), got {emb.shape}")
        return emb

    def _generate(self, emb: np.ndarray, samples: int, seed: int) -> list[str]:
        """Greedy texts (`samples` = 0), or `samples` nucleus samples per row, row-major."""
        import torch

        eos = self.tokenizer.token_to_id(fmt.EOS)
        start = self.tokenizer.token_to_id(fmt.TEXT)
        banned = [[self.tokenizer.token_to_id(t)] for t in fmt.SPECIAL_TOKENS if t != fmt.EOS]
        how = (dict(do_sample=True, temperature=SAMPLE_TEMPERATURE, top_p=SAMPLE_TOP_P,
                    num_return_sequences=samples) if samples else dict(do_sample=False))
        out: list[str] = []
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for lo in range(0, len(emb), self.batch_size):
                x = torch.from_numpy(emb[lo : lo + self.batch_size])
                with torch.inference_mode(), warnings.catch_warnings():
                    # the n-gram ban covers only generated tokens: the prefix has none
                    warnings.filterwarnings("ignore", message=".*no_repeat_ngram_size.*")
                    head = self.model.lm.transformer.wte(torch.full((len(x), 1), start))
                    inputs = torch.cat([self.model.prefix(x), head], 1)
                    ids = self.model.lm.generate(
                        inputs_embeds=inputs, attention_mask=torch.ones(inputs.shape[:2],
                                                                        dtype=torch.long),
                        max_new_tokens=self.spec.max_tokens, no_repeat_ngram_size=3,
                        bad_words_ids=banned, eos_token_id=eos, pad_token_id=eos, **how)
                for row in ids.tolist():
                    row = row[: row.index(eos)] if eos in row else row
                    out.append(fmt.clean(self.tokenizer.decode(row)))
        return out


def new_model(spec: InversionSpec, base_dir: Path):
    """A decoder to train: projection at random, LM from `base_dir`."""
    return _torch_model(spec, base_dir)


def load_model(folder: Path, spec: InversionSpec, base_dir: Path):
    """The trained module: the public LM's shape, every weight from the folder."""
    from safetensors.torch import load_file

    model = _torch_model(spec, base_dir)
    stored = {k: v.float() for k, v in load_file(str(folder / WEIGHTS_FILE)).items()}
    missing, unexpected = model.load_state_dict(stored, strict=False)
    if missing or unexpected:
        raise InputError(f"decoder: {folder / WEIGHTS_FILE} does not match its config "
                         f"(missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})")
    return model


def save_model(model, spec: InversionSpec, folder: Path) -> None:
    """Write every parameter (float16) and the config."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().half().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(folder / WEIGHTS_FILE))
    (folder / CONFIG_FILE).write_text(json.dumps(asdict(spec), indent=2) + "\n",
                                      encoding="utf-8")
