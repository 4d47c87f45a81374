"""What the synthetic set alone says about itself: public, so the shareable report shows it.

Nothing here reads an evaluation or a real split: the figures come from the synthetic
texts and labels and from the run's config (the declared label set and names are public).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dpsynth.evaluate.privacy import normalise_text
from dpsynth.evaluate.tables import TextTable


@dataclass(frozen=True)
class SyntheticSummary:
    records: int
    distinct: int
    """Distinct texts after case and whitespace folding (as `copies.exact` compares)."""
    word_counts: list[int]
    label_counts: dict[str, int] | None
    """Records per label, declared labels first (in declared order, 0 for an absent one),
    then any label the set holds that was not declared; None for an unlabelled set."""

    @property
    def repeat_rate(self) -> float:
        """Share of records that repeat an earlier record's text."""
        return (self.records - self.distinct) / self.records if self.records else 0.0

    @property
    def missing_labels(self) -> list[str]:
        return [k for k, v in (self.label_counts or {}).items() if v == 0]

    def rows(self, display: Callable[[str], str]) -> list[tuple[str, str, str]]:
        """(statistic, value, how to read it); `display` names a label as declared."""
        words = np.asarray(self.word_counts or [0])
        rows = [
            ("Records", f"{self.records}", "Texts in the synthetic set."),
            ("Exact repeats", f"{100 * self.repeat_rate:.1f}% ({self.records - self.distinct})",
             "Records whose text repeats an earlier one (case and spacing ignored); a varied "
             "set has none, and each repeat is one fewer distinct example to train on."),
            ("Words per text", f"mean {words.mean():.1f}, median {np.median(words):g}, "
             f"range {words.min()}–{words.max()}",
             "Length of a synthetic text, in whitespace-separated words."),
        ]
        if self.label_counts is not None:
            present = len(self.label_counts) - len(self.missing_labels)
            missing = ", ".join(display(k) for k in self.missing_labels)
            rows.append(("Labels present", f"{present} of {len(self.label_counts)}",
                         f"No synthetic record for: {missing}; a classifier trained on the set "
                         "can never predict those." if missing else
                         "Every declared label has synthetic records."))
        return rows


def summarise(table: TextTable, declared: list[str] | None) -> SyntheticSummary:
    """The synthetic set's own statistics; `declared` is the config's label set."""
    counts = None
    if table.labels is not None:
        seen = Counter(table.labels)
        order = list(declared or []) + sorted(set(seen) - set(declared or []))
        counts = {label: seen.get(label, 0) for label in order}
    return SyntheticSummary(len(table), len({normalise_text(t) for t in table.texts}),
                            [len(t.split()) for t in table.texts], counts)


def label_display(config: dict | None) -> Callable[[str], str]:
    """A function naming a label as declared: `code (name)` for a label `data.label_names`
    names (as `dpsynth plan` lists them), else the label itself."""
    names = ((config or {}).get("data") or {}).get("label_names") or {}

    def display(label: str) -> str:
        name = names.get(str(label))
        return f"{label} ({name})" if name and name != str(label) else str(label)

    return display
