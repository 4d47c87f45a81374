"""Read a public text pool: a .txt file (one text per line), a folder of .txt files, or a
table (CSV, TSV, JSONL, Parquet, saved Hugging Face dataset) with a text column.

The pool is deduplicated (the generator promises distinct outputs, which identical lines
would break) and capped at `max_texts` by a fixed-seed subsample: the same file always
gives the same pool, so its embeddings can be computed once and reused by every run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dpsynth.data.io import read_table
from dpsynth.errors import ConfigError, DataError

SUBSAMPLE_SEED = 0
"""Fixed, not the run's seed: a pool that changed with the seed would be re-embedded each run."""


def read_pool_texts(path: str | Path, column: str = "text",
                    max_texts: int | None = None) -> list[str]:
    """The distinct non-empty texts of the pool at `path`, in file order, at most `max_texts`."""
    path = Path(path)
    if not path.exists():
        raise DataError("pool not found (backends.generator.path)", path=str(path))
    if path.is_dir() and not (path / "dataset_info.json").exists():
        texts = _read_txt_folder(path)
    elif path.suffix.lower() == ".txt":
        texts = _read_lines(path)
    else:
        texts = _read_column(path, column)
    texts = list(dict.fromkeys(t.strip() for t in texts if t.strip()))
    if not texts:
        raise DataError("the pool holds no non-empty text", path=str(path))
    if max_texts is not None and len(texts) > max_texts:
        keep = np.random.default_rng(SUBSAMPLE_SEED).choice(len(texts), max_texts,
                                                            replace=False)
        texts = [texts[i] for i in np.sort(keep)]
    return texts


def refuse_private_pool(pool: Path, private: Path, field: str = "backends.generator.path",
                        private_field: str = "data.path") -> None:
    """Raise when a file read as public (a pool, whose texts can appear verbatim in the
    output; a vocabulary) is private data, holds it, or lies inside it."""
    pool, private = pool.resolve(), private.resolve()
    if pool.is_relative_to(private) or private.is_relative_to(pool):
        raise ConfigError(f"{field}: {pool} is or holds the private data ({private_field}: "
                          f"{private}); it must be public text")


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as exc:
        raise DataError(f"bytes that are not UTF-8 at byte offset {exc.start}; re-encode the "
                        "file as UTF-8", path=str(path)) from None


def _read_txt_folder(folder: Path) -> list[str]:
    files = sorted(folder.glob("*.txt"))
    if not files:
        raise DataError("folder holds no .txt files (a pool folder holds .txt files with one "
                        "text per line, or is a saved Hugging Face dataset)", path=str(folder))
    return [line for file in files for line in _read_lines(file)]


def _read_column(path: Path, column: str) -> list[str]:
    frame = read_table(path)
    if column not in frame.columns:
        raise DataError(f"no column '{column}' (columns: "
                        f"{', '.join(map(str, frame.columns))}); set backends.generator."
                        "text_column", path=str(path), field=column)
    return [str(t) for t in frame[column].dropna()]
