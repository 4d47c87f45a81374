"""A local causal LM held in this process, for recipes that put text in its context and read
its next-token distributions (DP decoding). Only local backends offer one (`Generator.
context_lm`): a remote generator never gets private text, and refuses.

The LM renders one chat prompt with a slot for an example text; the token ids before and
after the slot are public (fixed by the instruction), and whatever fills the slot is cut to a
fixed number of tokens, so every context has one public length.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import numpy as np

SENTENCE_END = re.compile(r"[.!?][\"'\u201d)\]]*$")
"""A text that matches ends a sentence."""
SLOT = "\u2063EXAMPLE\u2063"
"""Marks where the example goes in the rendered prompt (invisible separators: no instruction
holds it)."""


@dataclasses.dataclass
class ContextLM:
    """A tokenizer and a torch causal LM (`model(input_ids, attention_mask, position_ids,
    past_key_values, use_cache)` → logits), with the chat template when it has one."""

    tokenizer: Any
    model: Any
    name: str
    system: str = ""

    @property
    def eos_id(self) -> int:
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")  # SmolLM2's end of turn
        if isinstance(end, int) and end != self.tokenizer.unk_token_id:
            return end
        return int(self.tokenizer.eos_token_id)

    @property
    def pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.eos_id)

    def render(self, instruction: str) -> str:
        """The model's input text for one user turn (after `system`, when set), ready for the
        assistant's reply."""
        turns = [{"role": "user", "content": instruction}]
        if self.system:
            turns.insert(0, {"role": "system", "content": self.system})
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(turns, tokenize=False,
                                                      add_generation_prompt=True)
        return "\n\n".join(t["content"] for t in turns) + "\n\n"

    def encode(self, text: str, limit: int | None = None) -> list[int]:
        """Token ids of `text`; with `limit`, its first `limit` tokens, cut by the tokenizer
        itself (truncation on), so that transformers never warns about, and logs the length
        of, a long private record."""
        if limit is None:
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        side = getattr(self.tokenizer, "truncation_side", "right")
        self.tokenizer.truncation_side = "right"  # the first tokens, as the slice keeps them
        try:
            ids = self.tokenizer.encode(text, add_special_tokens=False, truncation=True,
                                        max_length=limit)
        finally:
            self.tokenizer.truncation_side = side
        return list(ids)[:limit]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True).strip()

    def slotted(self, instruction: str) -> tuple[list[int], list[int]]:
        """Token ids of the rendered prompt before and after `SLOT` (which `instruction`
        holds once)."""
        if instruction.count(SLOT) != 1:
            raise ValueError("the instruction must hold the example slot once")
        before, after = self.render(instruction).split(SLOT)
        return self.encode(before), self.encode(after)

    def prompt(self, instruction: str) -> list[int]:
        """Token ids of the rendered prompt (no slot)."""
        return self.encode(self.render(instruction))

    def at_precision(self, precision: str) -> ContextLM:
        """This LM with its model in `precision` (auto: bfloat16 where the CPU multiplies it
        natively, float32 elsewhere), a copy when that changes its dtype: the generator's own
        model, which other runs of the process may use, stays as it was."""
        import copy

        import torch

        if precision == "auto":
            precision = "bfloat16" if native_bfloat16() else "float32"
        dtype = getattr(torch, precision)
        if next(self.model.parameters()).dtype == dtype:
            return self
        return dataclasses.replace(self, model=copy.deepcopy(self.model).to(dtype))

    @property
    def precision(self) -> str:
        """The model's dtype, as `at_precision` names it."""
        return str(next(self.model.parameters()).dtype).removeprefix("torch.")

    def finish(self, instruction: str, ids: list[int], max_new_tokens: int, top_k: int,
               temperature: float, rng: np.random.Generator) -> list[int]:
        """`ids`, the start of a reply to `instruction`, continued by sampling the LM's own
        next-token distribution (top-k, temperature) until the end of the turn, the end of a
        sentence, or `max_new_tokens` more tokens: a reply cut by a token budget ends where
        a reader expects it to."""
        import torch

        out = list(ids)
        if max_new_tokens <= 0 or SENTENCE_END.search(self.decode(out)):
            return out
        step = torch.tensor([self.prompt(instruction) + out], dtype=torch.long)
        cache = None
        for _ in range(max_new_tokens):
            with torch.no_grad():
                result = self.model(input_ids=step, past_key_values=cache, use_cache=True)
            cache = result.past_key_values
            logits = result.logits[0, -1].double().numpy() / temperature
            top = np.argpartition(logits, -min(top_k, logits.size))[-top_k:]
            token = int(top[np.argmax(logits[top] + rng.gumbel(size=top.size))])
            out.append(token)
            if token == self.eos_id or SENTENCE_END.search(self.decode(out)):
                break
            step = torch.tensor([[token]], dtype=torch.long)
        return out


def native_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AMX or AVX512-BF16, from its flags):
    there bfloat16 passes take about a third of float32's, elsewhere they are emulated and
    slower."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return re.search(r"\b(amx_bf16|avx512_bf16)\b", flags) is not None


def hf_context_lm(folder: Any, name: str, model: Any = None) -> ContextLM:
    """A `ContextLM` over a local Hugging Face folder (float32 on the CPU), or over `model`
    when the caller already holds it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    if model is None:
        model = AutoModelForCausalLM.from_pretrained(folder).eval()
    return ContextLM(tokenizer, model, name)
