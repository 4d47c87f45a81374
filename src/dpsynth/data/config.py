"""The `data:` section of a run config: where the private set is and how to clean it."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from dpsynth.data.io import Format


class DataConfig(BaseModel):
    """Which file and columns hold the private records, and the cleaning policies."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path = Field(description="the private set: CSV, TSV, JSONL, Parquet, or a folder "
                       "saved with datasets.Dataset.save_to_disk; relative to the config file")
    format: Format | None = Field(None, description="inferred from the suffix when omitted")
    text_column: str = Field("text", description="the column holding the private text")
    label_column: str | None = Field(None, description="an optional class label column")
    labels: list[str] | None = Field(
        None,
        description="the public label domain; a run with data.label_column needs it (it is "
        "never read from the private data)",
    )
    label_names: dict[str, str] | None = Field(
        None,
        description="public names for labels that are codes, e.g. {0: negative review, "
        "1: positive review}: a generator is asked for a text of a label by this name (the "
        "output keeps the codes); keys are labels of data.labels",
    )
    document: str | None = Field(
        None, max_length=80, description="what one record is, in a few public words (news "
        "article, question, tweet, restaurant review): every generator prompt asks for one, "
        "and ctcl, dpft and dp_decoding condition on it; unset, they ask for a 'text'")
    user_column: str | None = Field(
        None, description="with a user column the unit of privacy is the user, not the record"
    )
    max_chars: int = Field(4000, gt=0, le=1_000_000, description="cap on a text's length in "
                           "characters: bounds what one record can cost a later step")
    over_length: Literal["truncate", "reject"] = Field(
        "truncate", description="what to do with a text over max_chars: cut it, or refuse the "
        "data naming the row")
    duplicates: Literal["keep", "drop"] = Field(
        "keep", description="`drop` removes a text a user repeats (needs user_column); texts "
        "repeated across units are always kept, each unit its own"
    )
    max_units: int | None = Field(
        None, ge=3, description="a public upper bound on N, the number of privacy units, for "
        "when N itself is sensitive: δ, sampling rates and the plan use it instead of the "
        "data's N, which is then never shown; a set with more units is refused"
    )
    max_records_per_user: int = Field(
        1, ge=1, description="contribution bound k: records kept per user, chosen by a hash of "
        "each record so that one user's choice reads none of the others'"
    )

    @field_validator("labels", mode="before")
    @classmethod
    def _numbers_are_labels(cls, value: object) -> object:
        """`labels: [0, 1]` declares the labels a CSV column of 0s and 1s holds: the data's
        labels are read as text, so numbers here are too."""
        if isinstance(value, list | tuple):
            return [as_label(v) for v in value]
        return value

    @field_validator("labels")
    @classmethod
    def _a_label_set(cls, labels: list[str] | None) -> list[str] | None:
        """The data's labels are read stripped, so a declared ` a` would match none; a
        repeated label would get two codes for one class (config, public: safe to quote)."""
        if labels is None:
            return None
        stripped = [label.strip() for label in labels]
        if not stripped or not all(stripped):
            raise ValueError("declare at least one label, none of them blank")
        repeated = sorted({label for label in stripped if stripped.count(label) > 1})
        if repeated:
            raise ValueError(f"label(s) {repeated} declared more than once")
        return stripped

    @field_validator("label_names", mode="before")
    @classmethod
    def _number_keys_are_labels(cls, value: object) -> object:
        if isinstance(value, dict):
            return {as_label(k): v for k, v in value.items()}
        return value

    @field_validator("label_names")
    @classmethod
    def _names_of_declared_labels(cls, names: dict[str, str] | None,
                                  info: ValidationInfo) -> dict[str, str] | None:
        """Keys are declared labels (config, public: safe to quote); names are non-empty and
        no two labels are asked for by the same name."""
        if names is None:
            return None
        declared = info.data.get("labels")
        if declared is None:
            raise ValueError("needs data.labels: declare the label set the names are for")
        unknown = [k for k in names if k not in declared]
        if unknown:
            raise ValueError(f"'{unknown[0]}' is not a label of data.labels "
                             f"[{', '.join(declared)}]")
        blank = [k for k, v in names.items() if not v.strip()]
        if blank:
            raise ValueError(f"the name of label '{blank[0]}' is empty")
        names = {k: v.strip() for k, v in names.items()}
        seen: dict[str, str] = {}
        for label in declared:
            name = names.get(label, label)
            if name in seen:
                raise ValueError(f"labels '{seen[name]}' and '{label}' would both be asked "
                                 f"for as '{name}'; give each label its own name")
            seen[name] = label
        return names

    @field_validator("document")
    @classmethod
    def _a_document_kind(cls, document: str | None) -> str | None:
        """One line of words: it is spliced into every prompt (config, public: safe to quote)."""
        if document is None:
            return None
        document = " ".join(document.split())
        if not document:
            raise ValueError("is empty; leave it out to ask for a 'text'")
        return document

    def label_name(self, label: str | None) -> str | None:
        """The name a generator is asked for `label` by: its `label_names` entry, else the
        label itself."""
        if label is None or not self.label_names:
            return label
        return self.label_names.get(label, label)

    @model_validator(mode="after")
    def _dedupe_within_units(self) -> DataConfig:
        if self.duplicates == "drop" and self.user_column is None:
            raise ValueError(
                "duplicates: drop needs a user_column: without one every record is its own "
                "unit, and dropping one record's text because another record has it would "
                "make one unit's presence remove another's; keep duplicates or name the users")
        return self

    @property
    def records_per_unit(self) -> int:
        """k: what one privacy unit may hold, fixed by the config, never read off the data."""
        return self.max_records_per_user if self.user_column else 1


def as_label(value: object) -> object:
    """An integer label (YAML `0`) as the text the data's column is read as (`'0'`)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value
