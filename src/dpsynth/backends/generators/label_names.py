"""Ask a generator for a label by its public name (`data.label_names`), not its code.

Recipes condition on the label values of the data (`0`, `1`) and keep them in their output;
this wrapper swaps each condition's label for its declared name (`negative review`) on the way
into the backend, for every operation, so a prompt, a pool query or a cache key holds the
name. The names are config, public like the label set.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from dpsynth.backends.base import Condition, Generator, WrappedGenerator


def named_conditions(conditions: Sequence[Condition], names: Mapping[str, str]
                     ) -> list[Condition]:
    """Each condition with its label replaced by the label's name where one is declared."""
    return [dataclasses.replace(c, label=names[c.label])
            if c.label is not None and c.label in names else c for c in conditions]


class LabelNamedGenerator(WrappedGenerator):
    """Forwards every operation to `inner` with each condition's label named."""

    def __init__(self, inner: Generator, names: Mapping[str, str]) -> None:
        super().__init__(inner)
        self.names = dict(names)

    def generate(self, conditions: Sequence[Condition]) -> list[str]:
        return self.inner.generate(named_conditions(conditions, self.names))

    def rewrite(self, texts: Sequence[str], conditions: Sequence[Condition],
                strength: float = 0.5) -> list[str]:
        return self.inner.rewrite(texts, named_conditions(conditions, self.names), strength)

    def fill(self, masked_texts: Sequence[str], conditions: Sequence[Condition]) -> list[str]:
        return self.inner.fill(masked_texts, named_conditions(conditions, self.names))

    def crossover(self, parent_groups: Sequence[Sequence[str]],
                  conditions: Sequence[Condition]) -> list[str]:
        return self.inner.crossover(parent_groups, named_conditions(conditions, self.names))


def with_label_names(generator: Generator, names: Mapping[str, str] | None) -> Generator:
    """`generator`, asking for labels by `names` when any are declared."""
    return LabelNamedGenerator(generator, names) if names else generator
