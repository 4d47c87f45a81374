"""Validate a raw table into clean records, with errors that name the file, row and field.

Messages never quote a private text: they say where the problem is, not what the text says.
Rows are numbered from 1 in file order, the header not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from dpsynth.data.config import DataConfig
from dpsynth.errors import DataError


@dataclass(frozen=True)
class ValidationReport:
    """What cleaning did: counts only, safe to log."""

    rows_read: int
    truncated: int = 0
    duplicate_rows: tuple[int, ...] = field(default=())
    duplicates_dropped: int = 0

    def summary(self) -> str:
        parts = [f"{self.rows_read} rows read"]
        if self.truncated:
            parts.append(f"{self.truncated} texts truncated")
        if self.duplicate_rows:
            action = "dropped" if self.duplicates_dropped else "kept"
            parts.append(f"{len(self.duplicate_rows)} duplicate texts {action}")
        return ", ".join(parts)


@dataclass(frozen=True)
class CleanTable:
    """Validated columns in file order (after the duplicate policy)."""

    texts: list[str]
    labels: list[str] | None
    users: list[str] | None
    report: ValidationReport


def validate(frame: pd.DataFrame, spec: DataConfig, source: str) -> CleanTable:
    """Check the named columns and apply the length and duplicate policies."""
    if len(frame) == 0:
        raise DataError("has no rows", path=source)
    for column in (spec.text_column, spec.label_column, spec.user_column):
        if column is not None and column not in frame.columns:
            raise DataError(
                f"missing column '{column}'; columns are: {', '.join(map(str, frame.columns))}",
                path=source,
            )
    texts = _text_column(frame[spec.text_column].tolist(), spec, source)
    labels = _required_strings(frame, spec.label_column, source, "label")
    users = _required_strings(frame, spec.user_column, source, "user id")

    truncated = 0
    if any(len(t) > spec.max_chars for t in texts):
        if spec.over_length == "reject":
            row = next(i for i, t in enumerate(texts, start=1) if len(t) > spec.max_chars)
            raise DataError(
                f"text longer than data.max_chars={spec.max_chars} characters; raise the cap "
                "or set data.over_length: truncate",
                path=source, row=row, field=spec.text_column,
            )
        truncated = sum(len(t) > spec.max_chars for t in texts)
        texts = [t[: spec.max_chars] for t in texts]

    seen: set[str] = set()
    duplicate_rows = []
    for row, text in enumerate(texts, start=1):
        if text in seen:
            duplicate_rows.append(row)
        seen.add(text)
    keep = list(range(len(texts)))
    if duplicate_rows and spec.duplicates == "drop":
        dropped = {r - 1 for r in duplicate_rows}
        keep = [i for i in keep if i not in dropped]

    texts = [texts[i] for i in keep]
    labels = [labels[i] for i in keep] if labels is not None else None
    users = [users[i] for i in keep] if users is not None else None
    if labels is not None:
        _check_label_counts(labels, [i + 1 for i in keep], spec, source)
    report = ValidationReport(
        rows_read=len(frame),
        truncated=truncated,
        duplicate_rows=tuple(duplicate_rows),
        duplicates_dropped=len(duplicate_rows) if spec.duplicates == "drop" else 0,
    )
    return CleanTable(texts=texts, labels=labels, users=users, report=report)


def _text_column(values: list, spec: DataConfig, source: str) -> list[str]:
    texts = []
    for row, value in enumerate(values, start=1):
        if _is_missing(value):
            raise DataError("text is missing", path=source, row=row, field=spec.text_column)
        if not isinstance(value, str):
            raise DataError(f"text is a {type(value).__name__}, expected a string",
                            path=source, row=row, field=spec.text_column)
        if not value.strip():
            raise DataError("text is empty or whitespace only", path=source, row=row,
                            field=spec.text_column)
        texts.append(value.strip())
    return texts


def _required_strings(frame: pd.DataFrame, column: str | None, source: str,
                      what: str) -> list[str] | None:
    if column is None:
        return None
    out = []
    for row, value in enumerate(frame[column].tolist(), start=1):
        if _is_missing(value) or not str(value).strip():
            raise DataError(f"{what} is missing", path=source, row=row, field=column)
        out.append(str(value).strip())
    return out


def _check_label_counts(labels: list[str], rows: list[int], spec: DataConfig,
                        source: str) -> None:
    counts = pd.Series(labels).value_counts()
    rare = counts[counts < spec.min_examples_per_label]
    if len(rare):
        label = str(rare.index[0])
        row = rows[labels.index(label)]
        raise DataError(
            f"label '{label}' has {int(rare.iloc[0])} example(s), fewer than "
            f"data.min_examples_per_label={spec.min_examples_per_label}; merge or remove it",
            path=source, row=row, field=spec.label_column,
        )


def _is_missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and value != value)
