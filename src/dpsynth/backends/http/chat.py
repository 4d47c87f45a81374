"""The OpenAI-compatible chat generator: OpenAI, Azure-style endpoints, vLLM, Ollama, the
llama.cpp server and TGI all speak `/chat/completions`."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

from dpsynth.backends.base import FAILED
from dpsynth.backends.config import OpenAIChatConfig
from dpsynth.backends.generators.prompt_sets import ChatPrompt, PromptSet
from dpsynth.backends.generators.prompted import PromptedGenerator
from dpsynth.backends.http.client import OpenAIHttpClient, estimate_tokens
from dpsynth.backends.http.deterministic import filler_text
from dpsynth.backends.http.prices import price_for
from dpsynth.errors import ConfigError


class OpenAIChatGenerator(PromptedGenerator):
    """Serves each operation with one chat-completions request per output, `concurrency` at a
    time. In dry-run mode nothing is sent: calls and estimated tokens are counted and each
    output is deterministic filler text of the target length."""

    is_remote = True

    def __init__(self, cfg: OpenAIChatConfig, prompts: PromptSet) -> None:
        super().__init__(prompts)
        if not cfg.model:
            raise ConfigError("backends.generator.model: name the model the server serves "
                              "(e.g. gpt-4o-mini, or the name vLLM/Ollama was started with)")
        self.cfg = cfg
        self.price = price_for(cfg.model, cfg.price)
        self.client = OpenAIHttpClient(cfg.base_url, api_key_env=cfg.api_key_env, http=cfg.http,
                                       concurrency=cfg.concurrency,
                                       where="backends.generator", quote_errors=True)
        self._sent = 0  # requests built so far: numbers each one's seed

    def __repr__(self) -> str:
        return (f"OpenAIChatGenerator(model={self.cfg.model!r}, base_url="
                f"{self.client.base_url!r}, dry_run={self.cfg.dry_run})")

    def identity(self) -> dict[str, object]:
        return {"backend": "openai", "base_url": self.client.base_url, "model": self.cfg.model,
                "temperature": self.cfg.temperature, "top_p": self.cfg.top_p,
                "max_tokens": self.cfg.max_tokens, "seed": self.cfg.seed,
                "prompts": self.prompts.digest}

    def usage(self) -> dict[str, float]:
        return {**self.client.usage.report(self.price), **self.client.endpoint_report()}

    def state_dict(self) -> dict[str, int]:
        """The request count that numbers each request's seed, for checkpoints."""
        return {"requests": self._sent}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._sent = int(state["requests"])

    def complete(self, prompts: Sequence[ChatPrompt]) -> list[str]:
        if self.cfg.dry_run:
            return [self._dry_run(p) for p in prompts]
        payloads = [self._payload(p) for p in prompts]  # built in order: seeds in order
        estimates = [self._prompt_tokens(p) + self.cfg.max_tokens for p in prompts]
        results = self.client.post_many("chat/completions", payloads, estimates, _content)
        return [FAILED if r is None else r for r in results]

    def _payload(self, prompt: ChatPrompt) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.cfg.model, "messages": prompt.messages(),
            "temperature": self.cfg.temperature, "top_p": self.cfg.top_p,
            "max_tokens": self.cfg.max_tokens,
        }
        if self.cfg.seed is not None:
            payload["seed"] = request_seed(self.cfg.seed, self._sent)
        self._sent += 1
        return payload

    def _dry_run(self, prompt: ChatPrompt) -> str:
        usage = self.client.usage
        usage.dry_run_calls += 1
        usage.prompt_tokens += self._prompt_tokens(prompt)
        words = prompt.length or self.cfg.max_tokens * 3 // 4
        tokens = math.ceil(words * 4 / 3)  # about 4/3 tokens per English word
        usage.completion_tokens += min(self.cfg.max_tokens, tokens)
        return filler_text(prompt.user, words)

    @staticmethod
    def _prompt_tokens(prompt: ChatPrompt) -> int:
        return sum(estimate_tokens(m["content"]) + 4 for m in prompt.messages())


def request_seed(seed: int, index: int) -> int:
    """The seed sent with the `index`-th request of a generator seeded with `seed`.

    Servers that honour `seed` (vLLM, `transformers serve`, OpenAI's best effort) answer the
    same prompt with the same seed with the same text, and recipes ask for many samples of
    one prompt; so each request gets its own seed, derived from the config's seed and the
    request's number: the same calls in the same order get the same seeds. 31 bits, which
    every server accepts."""
    digest = hashlib.sha256(f"dpsynth-request-seed:{seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def _content(body: dict[str, Any]) -> str:
    """The first choice's text; anything else (no choices, null content) is malformed."""
    content = body["choices"][0]["message"]["content"]
    if not isinstance(content, str):
        raise TypeError("message content is not a string")
    return content.strip()

