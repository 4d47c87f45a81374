"""A local Hugging Face generator: any causal or seq2seq model folder, sampled in batches.

The prompt set's chat messages go through the tokenizer's chat template when it has one
(instruction-tuned models expect their own format), else system and user text are joined
with blank lines, which is what a plain language model can continue.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpsynth.backends.base import BackendError
from dpsynth.backends.config import HFConfig
from dpsynth.backends.fingerprint import folder_digest
from dpsynth.backends.generators.prompt_sets import ChatPrompt, PromptSet
from dpsynth.backends.generators.prompted import PromptedGenerator
from dpsynth.errors import InputError
from dpsynth.progress import track


class HFGenerator(PromptedGenerator):
    """Runs `model.generate` on `batch_size` prompts at a time (left-padded for causal
    models), with temperature / top-p sampling and a per-batch seed derived from `seed`."""

    is_remote = False

    def __init__(self, model_path: str | Path, prompts: PromptSet,
                 cfg: HFConfig) -> None:
        super().__init__(prompts)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            import torch
            from transformers import (
                AutoConfig,
                AutoModelForCausalLM,
                AutoModelForSeq2SeqLM,
                AutoTokenizer,
            )
        except ImportError:
            raise InputError("the hf generator needs the 'local' extra: "
                             "pip install -c constraints.txt 'dpsynth[local]'") from None
        path = Path(model_path)
        if not path.is_dir():
            raise InputError(f"backends.generator.model: {path}: no Hugging Face model folder "
                             "there (hub names cannot be fetched offline; give a local path)")
        self._torch = torch
        self.cfg = cfg
        self.batch_size = cfg.batch_size or 8
        self.model_path = path
        self.seq2seq = bool(getattr(AutoConfig.from_pretrained(path), "is_encoder_decoder",
                                    False))
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        if not self.seq2seq:
            self.tokenizer.padding_side = "left"  # generation continues the right edge
        if self.tokenizer.pad_token is None:
            if self.tokenizer.eos_token is None:
                raise InputError(f"{path}: the tokenizer has neither a pad nor an eos token")
            self.tokenizer.pad_token = self.tokenizer.eos_token
        model_cls = AutoModelForSeq2SeqLM if self.seq2seq else AutoModelForCausalLM
        self.model = model_cls.from_pretrained(path).to(cfg.device or "cpu").eval()
        self._fingerprint = f"{path.name}:{folder_digest(path)}"
        self._batches = 0
        self._counts = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}

    def __repr__(self) -> str:
        kind = "seq2seq" if self.seq2seq else "causal"
        return f"HFGenerator({str(self.model_path)!r}, {kind})"

    def identity(self) -> dict[str, object]:
        return {"backend": "hf", "model": self._fingerprint, "temperature": self.cfg.temperature,
                "top_p": self.cfg.top_p, "max_tokens": self.cfg.max_tokens,
                "seed": self.cfg.seed, "prompts": self.prompts.digest}

    def usage(self) -> dict[str, float]:
        return {k: float(v) for k, v in self._counts.items()}

    def render(self, prompt: ChatPrompt) -> str:
        """The model's input text for one chat prompt."""
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(prompt.messages(), tokenize=False,
                                                      add_generation_prompt=True)
        return "\n\n".join(m["content"] for m in prompt.messages()) + "\n\n"

    def complete(self, prompts: Sequence[ChatPrompt]) -> list[str]:
        texts = [self.render(p) for p in prompts]
        size = self.batch_size
        starts = range(0, len(texts), size)
        out: list[str] = []
        for start in track(starts, "generating", total=len(starts), log_progress=True):
            out += self._sample(texts[start : start + size])
        return out

    def context_lm(self):
        """This generator's causal model and tokenizer (DP decoding)."""
        from dpsynth.backends.generators.context_lm import ContextLM

        if self.seq2seq:
            raise BackendError(f"{self.model_path}: DP decoding needs a causal LM, this one "
                               "is seq2seq")
        return ContextLM(self.tokenizer, self.model, self._fingerprint)

    def score(self, prompts: Sequence[str], continuations: Sequence[str]) -> np.ndarray:
        """Summed log-probability of each continuation after its prompt (plain text, no chat
        template), for causal models."""
        from dpsynth.backends.generators.scoring import continuation_logprobs

        if self.seq2seq:
            raise BackendError(f"{self.model_path}: scoring continuations needs a causal LM, "
                               "this one is seq2seq")
        if len(prompts) != len(continuations):
            raise InputError(f"score: {len(prompts)} prompts but {len(continuations)} "
                             "continuations")
        encode = self.tokenizer.encode
        rows = [(encode(p), encode(" " + c.strip(), add_special_tokens=False))
                for p, c in zip(prompts, continuations, strict=True)]
        context = int(getattr(self.model.config, "n_positions", 0)
                      or getattr(self.model.config, "max_position_embeddings", 1024))
        return continuation_logprobs(self.model, rows, self.tokenizer.pad_token_id, context,
                                     self.batch_size)

    def _sample(self, texts: list[str]) -> list[str]:
        torch = self._torch
        templated = bool(getattr(self.tokenizer, "chat_template", None))
        batch = self.tokenizer(texts, return_tensors="pt", padding=True,
                               add_special_tokens=not templated).to(self.model.device)
        if self.cfg.seed is not None:
            torch.manual_seed(self.cfg.seed * 1_000_003 + self._batches)
        self._batches += 1
        sampling: dict[str, Any] = (
            {"do_sample": True, "temperature": self.cfg.temperature, "top_p": self.cfg.top_p}
            if self.cfg.temperature > 0 else {"do_sample": False})
        with torch.no_grad():
            generated = self.model.generate(**batch, max_new_tokens=self.cfg.max_tokens,
                                            pad_token_id=self.tokenizer.pad_token_id,
                                            **sampling)
        new = generated if self.seq2seq else generated[:, batch["input_ids"].shape[1]:]
        pad = self.tokenizer.pad_token_id
        self._counts["calls"] += len(texts)
        self._counts["prompt_tokens"] += int(batch["attention_mask"].sum())
        self._counts["completion_tokens"] += int((new != pad).sum())
        return [t.strip() for t in self.tokenizer.batch_decode(new, skip_special_tokens=True)]
