"""The `data:` section of a run config: where the private set is and how to clean it."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dpsynth.data.io import Format


class DataConfig(BaseModel):
    """Which file and columns hold the private records, and the cleaning policies."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path
    format: Format | None = Field(None, description="inferred from the suffix when omitted")
    text_column: str = "text"
    label_column: str | None = None
    labels: list[str] | None = Field(
        None,
        description="the public label domain; when omitted it is read from the private data "
        "and so treated as public",
    )
    user_column: str | None = Field(
        None, description="with a user column the unit of privacy is the user, not the record"
    )
    max_chars: int = Field(4000, gt=0, description="cap on a text's length in characters")
    over_length: Literal["truncate", "reject"] = "truncate"
    duplicates: Literal["drop", "keep"] = "drop"
    max_records_per_user: int = Field(
        1, ge=1, description="contribution bound k: records kept per user, chosen reproducibly"
    )
    min_examples_per_label: int = Field(2, ge=1)
