"""A price table for the cost estimate: US dollars per million tokens.

List prices of OpenAI's public API as published in 2025; check them against your contract and
override with `price:` in the backend config. Self-hosted servers (vLLM, Ollama, llama.cpp,
TGI) cost nothing per token here: their cost is the machine, reported as time.
"""

from __future__ import annotations

from dpsynth.backends.config import Price

PRICES: dict[str, Price] = {
    "gpt-4o": Price(input=2.50, output=10.00),
    "gpt-4o-mini": Price(input=0.15, output=0.60),
    "gpt-4.1": Price(input=2.00, output=8.00),
    "gpt-4.1-mini": Price(input=0.40, output=1.60),
    "gpt-4.1-nano": Price(input=0.10, output=0.40),
    "gpt-4-turbo": Price(input=10.00, output=30.00),
    "gpt-3.5-turbo": Price(input=0.50, output=1.50),
    "text-embedding-3-small": Price(input=0.02),
    "text-embedding-3-large": Price(input=0.13),
    "text-embedding-ada-002": Price(input=0.10),
}


def price_for(model: str | None, override: Price | None = None) -> Price | None:
    """The override, else the longest table entry that prefixes `model` (so a dated snapshot
    such as gpt-4o-2024-08-06 prices as gpt-4o); None when unknown."""
    if override is not None:
        return override
    if not model:
        return None
    matches = [name for name in PRICES if model == name or model.startswith(name + "-")]
    return PRICES[max(matches, key=len)] if matches else None


def cost_usd(price: Price | None, prompt_tokens: int, completion_tokens: int) -> float | None:
    if price is None:
        return None
    return (prompt_tokens * price.input + completion_tokens * price.output) / 1e6
