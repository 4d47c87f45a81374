"""`EditedPool`: retrieve public text, then let an LM rewrite it (AUG-PE's setting).

`generate`, `crossover` and `fill` retrieve the public text nearest to what they ask for and
the editor (any generator: the offline LM, an OpenAI-compatible server, a local HF model)
rewrites it under the same condition at a fixed strength; `rewrite` is the editor's own, as
AUG-PE varies a selected sample by paraphrase rather than by another retrieval. Outputs are
then no longer pool texts verbatim, and the editor's quality caps them as much as the pool's
coverage does: a weak editor turns good public text into worse text, so measure
generator-only utility with and without `edit`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dpsynth.backends.base import Condition, Embedder, Generator
from dpsynth.backends.pool.generator import PoolGenerator


class EditedPool(Generator):
    """Retrieval by the pool, edited by `editor.rewrite` at `strength` (module docstring)."""

    def __init__(self, pool: PoolGenerator, editor: Generator, strength: float) -> None:
        self.pool = pool
        self.editor = editor
        self.strength = strength
        self.is_remote = editor.is_remote

    def __repr__(self) -> str:
        return f"EditedPool({self.pool!r}, edit={self.editor!r}, strength={self.strength})"

    def identity(self) -> dict[str, object]:
        return {**self.pool.identity(), "edit": self.editor.identity(),
                "edit_strength": self.strength}

    def usage(self) -> dict[str, float]:
        return {**self.pool.usage(), **{f"edit_{k}": v for k, v in self.editor.usage().items()}}

    def served_by(self) -> Generator:
        """The editor where it is remote: the server whose health decides this pool's."""
        return self.editor.served_by() if self.editor.is_remote else self

    def state_dict(self) -> dict[str, Any]:
        """Both parts' sampling positions, for checkpoints."""
        return {"pool": self.pool.state_dict(), "edit": self.editor.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pool.load_state_dict(state["pool"])
        self.editor.load_state_dict(state["edit"])

    def stored_embeddings(self, texts: Sequence[str], embedder: Embedder
                          ) -> dict[str, np.ndarray]:
        """The pool's, for outputs the editor left as they were retrieved."""
        return self.pool.stored_embeddings(texts, embedder)

    def _edit(self, retrieved: list[str], conditions: Sequence[Condition]) -> list[str]:
        return self.editor.rewrite(retrieved, conditions, self.strength) if retrieved else []

    def generate(self, conditions: Sequence[Condition]) -> list[str]:
        return self._edit(self.pool.generate(conditions), conditions)

    def rewrite(self, texts: Sequence[str], conditions: Sequence[Condition],
                strength: float = 0.5) -> list[str]:
        return self.editor.rewrite(texts, conditions, strength)

    def crossover(self, parent_groups: Sequence[Sequence[str]],
                  conditions: Sequence[Condition]) -> list[str]:
        return self._edit(self.pool.crossover(parent_groups, conditions), conditions)

    def fill(self, masked_texts: Sequence[str], conditions: Sequence[Condition]) -> list[str]:
        return self._edit(self.pool.fill(masked_texts, conditions), conditions)
