"""What a recipe may know of the private data: public facts, fixed by the config, the
declared label set and N, never by a record's content. `PrivateDataset` has them for
planning; `ctx.private` has them during a run."""

from __future__ import annotations

from typing import Protocol


class DataFacts(Protocol):
    @property
    def label_names(self) -> tuple[str, ...] | None:
        """The declared label set, in code order (None without labels)."""

    @property
    def has_labels(self) -> bool: ...

    @property
    def records_per_unit(self) -> int:
        """k: the records one privacy unit may hold."""

    @property
    def n_units(self) -> int:
        """N, the privacy units."""
