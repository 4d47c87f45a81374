"""Validate a raw table into clean records, with errors that name the file, row and field.

Messages never quote a private text: they say where the problem is, not what the text says.
Rows are numbered from 1 in file order, the header not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from dpsynth.data.config import DataConfig
from dpsynth.errors import DataError


@dataclass(frozen=True)
class CleanTable:
    """Validated columns in file order (after the duplicate policy).

    Holds no counts of what cleaning did: how many rows were truncated or dropped depends on
    the private records, so it is neither logged nor printed (docs/privacy.md).
    """

    texts: list[str]
    labels: list[str] | None
    users: list[str] | None


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
    if labels is not None and spec.labels is not None:
        _check_declared_labels(labels, spec, source)

    if any(len(t) > spec.max_chars for t in texts):
        if spec.over_length == "reject":
            row = next(i for i, t in enumerate(texts, start=1) if len(t) > spec.max_chars)
            raise DataError(
                f"text longer than data.max_chars={spec.max_chars} characters; raise the cap "
                "or set data.over_length: truncate",
                path=source, row=row, field=spec.text_column,
            )
        texts = [t[: spec.max_chars] for t in texts]

    keep = list(range(len(texts)))
    if spec.duplicates == "drop" and users is not None:
        keep = _first_per_user(texts, users)
    texts = [texts[i] for i in keep]
    labels = [labels[i] for i in keep] if labels is not None else None
    users = [users[i] for i in keep] if users is not None else None
    return CleanTable(texts=texts, labels=labels, users=users)


def _first_per_user(texts: list[str], users: list[str]) -> list[int]:
    """Rows whose text this user has not written before. Only repeats within one user are
    dropped: dropping a text because another unit wrote it first would let one unit's
    presence remove another unit's record (add/remove would become replace)."""
    seen: set[tuple[str, str]] = set()
    keep = []
    for i, pair in enumerate(zip(users, texts, strict=True)):
        if pair not in seen:
            seen.add(pair)
            keep.append(i)
    return keep


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
        _check_unicode(value, source, row, spec.text_column, "text")
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
        _check_unicode(str(value), source, row, column, what)
        out.append(str(value).strip())
    return out


def _check_unicode(value: str, source: str, row: int, field: str, what: str) -> None:
    """Refuse a value UTF-8 cannot encode (a lone surrogate, which JSON and in-memory tables
    can hold). Every later step encodes it (the keyed hash, the tokenizers), so accepting it
    would let one record stop the run after the first release: a stop D' makes and D does not,
    which no ledger entry charges."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise DataError(f"{what} holds a lone surrogate, which is not Unicode text; fix the "
                        "record or re-encode the source as UTF-8",
                        path=source, row=row, field=field) from None


def _check_declared_labels(labels: list[str], spec: DataConfig, source: str) -> None:
    declared = set(spec.labels or ())
    undeclared = next(((row, label) for row, label in enumerate(labels, start=1)
                       if label not in declared), None)
    if undeclared is not None:
        row = undeclared[0]  # the first; how many there are depends on the data. The value
        # is not quoted: a label column set to a text column would put a private text here
        raise DataError(
            f"the label is not one of data.labels [{', '.join(spec.labels or ())}]; add it to "
            "data.labels or fix the data",
            path=source, row=row, field=spec.label_column,
        )


def _is_missing(value: object) -> bool:
    """None, NaN, or pandas' NA and NaT (an in-memory frame's missing values)."""
    return (value is None or value is pd.NA or value is pd.NaT
            or (isinstance(value, float) and value != value))
