"""Generators that serve every operation by prompting a chat model with a prompt set.

The four operations differ only in the prompt they render; a subclass supplies `complete`,
which turns a batch of chat prompts into a batch of texts.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

from dpsynth.backends.base import Condition, Generator
from dpsynth.backends.generators.prompt_sets import ChatPrompt, PromptSet
from dpsynth.errors import InputError


class PromptedGenerator(Generator):
    """A `Generator` over a chat model: render prompts, then `complete` them as one batch."""

    def __init__(self, prompts: PromptSet) -> None:
        self.prompts = prompts

    @abstractmethod
    def complete(self, prompts: Sequence[ChatPrompt]) -> list[str]:
        """One text per prompt (`FAILED` for a prompt the backend could not serve)."""

    def identity(self) -> dict[str, object]:
        return {"backend": type(self).__name__, "prompts": self.prompts.digest}

    def generate(self, conditions: Sequence[Condition]) -> list[str]:
        return self.complete([self.prompts.generate(c) for c in conditions])

    def rewrite(self, texts: Sequence[str], conditions: Sequence[Condition],
                strength: float = 0.5) -> list[str]:
        same_length("texts", texts, conditions)
        return self.complete([self.prompts.rewrite(t, c, strength)
                              for t, c in zip(texts, conditions, strict=True)])

    def fill(self, masked_texts: Sequence[str], conditions: Sequence[Condition]) -> list[str]:
        same_length("masked_texts", masked_texts, conditions)
        return self.complete([self.prompts.fill(t, c)
                              for t, c in zip(masked_texts, conditions, strict=True)])

    def crossover(self, parent_groups: Sequence[Sequence[str]],
                  conditions: Sequence[Condition]) -> list[str]:
        same_length("parent_groups", parent_groups, conditions)
        return self.complete([self.prompts.crossover(list(g), c)
                              for g, c in zip(parent_groups, conditions, strict=True)])


def same_length(name: str, items: Sequence[object], conditions: Sequence[Condition]) -> None:
    if len(items) != len(conditions):
        raise InputError(f"{name} has {len(items)} entries but conditions has "
                         f"{len(conditions)}; give one condition per input")
