"""Count what a run asks of its generator, whatever the backend: outputs per operation."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpsynth.backends.base import FAILED, Condition, Generator
from dpsynth.backends.health import check_outputs

log = logging.getLogger(__name__)


class CountingGenerator(Generator):
    """Forwards every operation to `inner` and counts requested and failed outputs."""

    def __init__(self, inner: Generator) -> None:
        self.inner = inner
        self.is_remote = inner.is_remote
        self.outputs = {"generate": 0, "rewrite": 0, "fill": 0, "crossover": 0}
        self.failed = 0

    def __getattr__(self, name: str) -> Any:  # state_dict, perplexity, ... of the backend
        return getattr(self.inner, name)

    def _count(self, op: str, results: list[str]) -> list[str]:
        self.outputs[op] += len(results)
        self.failed += sum(r == FAILED for r in results)
        check_outputs(self.inner, op, results)  # a remote backend that failed them all stops
        return results

    def identity(self) -> dict[str, object]:
        return self.inner.identity()

    def usage(self) -> dict[str, float]:
        return {**self.inner.usage(), **{f"outputs_{op}": n for op, n in self.outputs.items()},
                "outputs": sum(self.outputs.values()), "outputs_failed": self.failed}

    def served_by(self) -> Generator:
        return self.inner.served_by()

    def score(self, prompts: Sequence[str], continuations: Sequence[str]) -> np.ndarray:
        return self.inner.score(prompts, continuations)

    def context_lm(self):
        return self.inner.context_lm()

    def generate(self, conditions: Sequence[Condition]) -> list[str]:
        _announce("generate", conditions)
        return self._count("generate", self.inner.generate(conditions))

    def rewrite(self, texts: Sequence[str], conditions: Sequence[Condition],
                strength: float = 0.5) -> list[str]:
        _announce("rewrite", conditions)
        return self._count("rewrite", self.inner.rewrite(texts, conditions, strength))

    def fill(self, masked_texts: Sequence[str], conditions: Sequence[Condition]) -> list[str]:
        _announce("fill", conditions)
        return self._count("fill", self.inner.fill(masked_texts, conditions))

    def crossover(self, parent_groups: Sequence[Sequence[str]],
                  conditions: Sequence[Condition]) -> list[str]:
        _announce("crossover", conditions)
        return self._count("crossover", self.inner.crossover(parent_groups, conditions))


def _announce(op: str, conditions: Sequence[Condition]) -> None:
    """One log line before each call, so a long one is not silence (outside a terminal
    there are no progress bars); the count is the recipe's, a public number."""
    if conditions:
        log.info("generator: %s, %d output(s)", op, len(conditions))
