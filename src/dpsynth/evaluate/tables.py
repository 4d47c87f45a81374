"""Read a dataset to evaluate (synthetic or real) into texts and optional labels."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dpsynth.data.config import DataConfig
from dpsynth.data.io import read_table
from dpsynth.data.validate import validate
from dpsynth.errors import DataError


@dataclass(frozen=True)
class TextTable:
    """Texts with optional labels, in file order; `source` names where they came from."""

    texts: list[str]
    labels: list[str] | None
    source: str

    def __post_init__(self) -> None:
        if self.labels is not None and len(self.labels) != len(self.texts):
            raise DataError(f"{len(self.texts)} texts but {len(self.labels)} labels",
                            path=self.source)

    def __len__(self) -> int:
        return len(self.texts)

    def __repr__(self) -> str:  # counts only: a real table may be private
        labels = len(set(self.labels)) if self.labels is not None else 0
        return f"TextTable(source={self.source!r}, records={len(self.texts)}, labels={labels})"


def read_text_table(path: str | Path, text_column: str = "text",
                    label_column: str | None = "label", require_labels: bool = False) -> TextTable:
    """Read and validate a file with the data layer's rules (duplicates kept: a synthetic set
    with repeats is what is being measured). A missing label column means an unlabelled set
    unless `require_labels`."""
    path = Path(path)
    frame = read_table(path)
    if label_column is not None and label_column not in frame.columns:
        if require_labels:
            raise DataError(f"missing label column '{label_column}'; columns are: "
                            f"{', '.join(map(str, frame.columns))}", path=str(path))
        label_column = None
    spec = DataConfig(path=path, text_column=text_column, label_column=label_column,
                      duplicates="keep")
    table = validate(frame, spec, source=str(path))
    return TextTable(table.texts, table.labels, str(path))
