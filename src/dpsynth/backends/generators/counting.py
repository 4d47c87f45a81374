"""Count what a run asks of its generator, whatever the backend: outputs per operation."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence

from dpsynth.backends.base import FAILED, Condition, Generator, WrappedGenerator
from dpsynth.backends.health import check_outputs

log = logging.getLogger(__name__)

OPERATIONS = ("generate", "rewrite", "fill", "crossover")


class CountingGenerator(WrappedGenerator):
    """Forwards every operation to `inner` and counts requested and failed outputs."""

    def __init__(self, inner: Generator, counts: Counter[str] | None = None) -> None:
        super().__init__(inner)
        self.counts = Counter() if counts is None else counts
        """Outputs per operation and `failed`: shared with the generators `counting` wraps."""

    def counting(self, other: Generator) -> CountingGenerator:
        """`other` counted into these same tallies: a recipe's own DP-trained LM (ctcl, dpft),
        so that the run's usage counts every output it asked of any generator."""
        return CountingGenerator(other, self.counts)

    def _count(self, op: str, results: list[str]) -> list[str]:
        self.counts[op] += len(results)
        self.counts["failed"] += sum(r == FAILED for r in results)
        check_outputs(self.inner, op, results)  # a remote backend that failed them all stops
        return results

    def usage(self) -> dict[str, float]:
        outputs = {f"outputs_{op}": self.counts[op] for op in OPERATIONS}
        return {**self.inner.usage(), **outputs, "outputs": sum(outputs.values()),
                "outputs_failed": self.counts["failed"]}

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
