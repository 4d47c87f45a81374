"""Ask a generator for a label by its public name (`data.label_names`), not its code, and for
the kind of document the data holds (`data.document`).

Recipes condition on the label values of the data (`0`, `1`) and keep them in their output;
this wrapper swaps each condition's label for its declared name (`negative review`) and
fills its free-text field with the document kind (`news article`) on the way into the
backend, for every operation, so a prompt, a pool query or a cache key holds them. Both are
config, public like the label set.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from dpsynth.backends.base import Condition, Generator, WrappedGenerator


def named_conditions(conditions: Sequence[Condition], names: Mapping[str, str],
                     document: str | None = None) -> list[Condition]:
    """Each condition with its label replaced by the label's name where one is declared, and
    `document` as its text where it has none."""
    return [dataclasses.replace(
        c, label=names.get(c.label, c.label) if c.label is not None else None,
        text=c.text if c.text is not None else document) for c in conditions]


class NamedGenerator(WrappedGenerator):
    """Forwards every operation to `inner` with each condition's label named and its
    document kind set."""

    def __init__(self, inner: Generator, names: Mapping[str, str],
                 document: str | None = None) -> None:
        super().__init__(inner)
        self.names, self.document = dict(names), document

    def _named(self, conditions: Sequence[Condition]) -> list[Condition]:
        return named_conditions(conditions, self.names, self.document)

    def generate(self, conditions: Sequence[Condition]) -> list[str]:
        return self.inner.generate(self._named(conditions))

    def rewrite(self, texts: Sequence[str], conditions: Sequence[Condition],
                strength: float = 0.5) -> list[str]:
        return self.inner.rewrite(texts, self._named(conditions), strength)

    def fill(self, masked_texts: Sequence[str], conditions: Sequence[Condition]) -> list[str]:
        return self.inner.fill(masked_texts, self._named(conditions))

    def crossover(self, parent_groups: Sequence[Sequence[str]],
                  conditions: Sequence[Condition]) -> list[str]:
        return self.inner.crossover(parent_groups, self._named(conditions))


def with_public_names(generator: Generator, names: Mapping[str, str] | None,
                      document: str | None = None) -> Generator:
    """`generator`, asking for labels by `names` and for texts of the kind `document` when
    either is declared."""
    return NamedGenerator(generator, names or {}, document) if names or document else generator
