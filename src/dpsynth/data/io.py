"""Read and write tabular text datasets: CSV, TSV, JSONL, Parquet and saved Hugging Face datasets.

Readers return every column as read, without judging it; `validate` does the judging so that
each problem can be reported with its file, row and field.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Literal

import pandas as pd

from dpsynth.errors import DataError

Format = Literal["csv", "tsv", "jsonl", "parquet", "hf"]
FORMATS: tuple[str, ...] = ("csv", "tsv", "jsonl", "parquet", "hf")
_SUFFIXES = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl",
             ".parquet": "parquet", ".pq": "parquet"}


def infer_format(path: Path) -> Format:
    """Guess the format from the suffix; a directory is a saved Hugging Face dataset."""
    if path.is_dir():
        return "hf"
    fmt = _SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise DataError(
            f"cannot tell the format from the suffix '{path.suffix}'; "
            f"name one of {', '.join(FORMATS)} in data.format",
            path=str(path),
        )
    return fmt  # type: ignore[return-value]


def read_table(path: str | Path, fmt: Format | None = None) -> pd.DataFrame:
    """Read a dataset file into a DataFrame of raw values, with located errors."""
    path = Path(path)
    if not path.exists():
        raise DataError("file not found", path=str(path))
    fmt = fmt or infer_format(path)
    if fmt == "hf":
        return _read_hf(path)
    if path.is_dir():
        raise DataError(f"is a directory, expected a {fmt} file", path=str(path))
    if fmt == "parquet":
        try:
            frame = pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises many types for a bad file
            raise DataError(f"not a readable Parquet file ({type(exc).__name__})",
                            path=str(path)) from None
        return _decode_bytes_columns(frame, path)
    raw = path.read_bytes()
    if not raw.strip():
        raise DataError("file is empty", path=str(path))
    text = _decode_utf8(raw, path, header=fmt in ("csv", "tsv"))
    try:
        if fmt == "jsonl":
            return _read_jsonl(text, path)
        sep = "\t" if fmt == "tsv" else ","
        return pd.read_csv(io.StringIO(text), sep=sep, dtype=str, keep_default_na=False)
    except pd.errors.ParserError as exc:
        raise DataError(f"malformed {fmt.upper()}: {exc}", path=str(path)) from None


def write_table(frame: pd.DataFrame, path: str | Path, fmt: Format | None = None) -> Path:
    """Write a DataFrame in the given (or inferred) format, creating parent folders."""
    path = Path(path)
    fmt = fmt or infer_format(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt in ("csv", "tsv"):
        frame.to_csv(path, index=False, sep="," if fmt == "csv" else "\t",
                     quoting=_quoting(frame))
    elif fmt == "jsonl":
        frame.to_json(path, orient="records", lines=True, force_ascii=False)
    elif fmt == "parquet":
        frame.to_parquet(path, index=False)
    elif fmt == "hf":
        datasets = _import_datasets()
        datasets.Dataset.from_pandas(frame, preserve_index=False).save_to_disk(str(path))
    return path


def _quoting(frame: pd.DataFrame) -> int:
    """Every field quoted when a text holds a lone carriage return, which pandas writes
    unquoted (a reader then splits the row there); the usual minimal quoting otherwise."""
    texts = frame.select_dtypes(include=["object", "string"])
    lone_cr = texts.apply(lambda column: column.astype(str).str.contains("\r", regex=False))
    return csv.QUOTE_ALL if bool(lone_cr.to_numpy().any()) else csv.QUOTE_MINIMAL


def _decode_utf8(raw: bytes, path: Path, header: bool) -> str:
    """The file's text; bytes that are not UTF-8 are located by row, numbered as validation
    numbers them (a CSV's header is not a row; a line break inside a quoted field would put
    the row later than said, so the line is given too)."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        where = f"row {line - 1} (line {line})" if header and line > 1 else f"line {line}"
        raise DataError(
            f"bytes that are not UTF-8 at {where}, byte offset {exc.start}; "
            "re-encode the file as UTF-8",
            path=str(path),
        ) from None


def _read_jsonl(text: str, path: Path) -> pd.DataFrame:
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"invalid JSON ({exc.msg})", path=str(path), row=number) from None
        if not isinstance(value, dict):
            raise DataError("each line must be a JSON object", path=str(path), row=number)
        rows.append(value)
    # object columns: each value keeps its own JSON type, so one record's float id cannot
    # turn every other record's integer id into a float
    return pd.DataFrame(rows, dtype=object)


def _decode_bytes_columns(frame: pd.DataFrame, path: Path) -> pd.DataFrame:
    for column in frame.columns:
        values = frame[column].tolist()
        if not any(isinstance(v, bytes) for v in values):
            continue
        decoded = []
        for row, value in enumerate(values, start=1):
            if isinstance(value, bytes):
                try:
                    value = value.decode("utf-8")
                except UnicodeDecodeError:
                    raise DataError("bytes that are not UTF-8", path=str(path), row=row,
                                    field=str(column)) from None
            decoded.append(value)
        frame[column] = decoded
    return frame


def _read_hf(path: Path) -> pd.DataFrame:
    datasets = _import_datasets()
    try:
        loaded = datasets.load_from_disk(str(path))
    except FileNotFoundError:
        raise DataError("not a saved Hugging Face dataset (no dataset_info.json or state.json)",
                        path=str(path)) from None
    if isinstance(loaded, datasets.DatasetDict):
        raise DataError(
            f"holds several splits ({', '.join(loaded)}); point data.path at one split's folder",
            path=str(path),
        )
    return _decode_bytes_columns(loaded.to_pandas(), path)


def _import_datasets():
    try:
        import datasets
    except ImportError:
        raise DataError(
            "reading or writing a Hugging Face dataset needs the 'hf' extra: "
            "pip install 'dpsynth[hf]'"
        ) from None
    return datasets
