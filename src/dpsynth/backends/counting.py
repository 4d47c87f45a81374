"""Count what a run asks of its generator, whatever the backend: outputs per operation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dpsynth.backends.base import FAILED, Condition, Generator
from dpsynth.backends.health import check_outputs


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

    def score(self, prompts: Sequence[str], continuations: Sequence[str]) -> np.ndarray:
        return self.inner.score(prompts, continuations)

    def generate(self, conditions: Sequence[Condition]) -> list[str]:
        return self._count("generate", self.inner.generate(conditions))

    def rewrite(self, texts: Sequence[str], conditions: Sequence[Condition],
                strength: float = 0.5) -> list[str]:
        return self._count("rewrite", self.inner.rewrite(texts, conditions, strength))

    def fill(self, masked_texts: Sequence[str], conditions: Sequence[Condition]) -> list[str]:
        return self._count("fill", self.inner.fill(masked_texts, conditions))

    def crossover(self, parent_groups: Sequence[Sequence[str]],
                  conditions: Sequence[Condition]) -> list[str]:
        return self._count("crossover", self.inner.crossover(parent_groups, conditions))
