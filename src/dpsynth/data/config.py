"""The `data:` section of a run config: where the private set is and how to clean it."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

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
    duplicates: Literal["keep", "drop"] = Field(
        "keep", description="`drop` removes a text a user repeats (needs user_column); texts "
        "repeated across units are always kept, each unit its own"
    )
    max_records_per_user: int = Field(
        1, ge=1, description="contribution bound k: records kept per user, chosen by a hash of "
        "each record so that one user's choice reads none of the others'"
    )
    min_examples_per_label: int = Field(2, ge=1)

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
