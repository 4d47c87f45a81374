"""Load a private dataset from a `data:` config: read, validate, bound contributions."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from dpsynth.data.bounding import bound_contributions
from dpsynth.data.config import DataConfig
from dpsynth.data.io import read_table
from dpsynth.data.private import PrivateDataset
from dpsynth.data.validate import validate
from dpsynth.errors import DataError, InputError

log = logging.getLogger(__name__)


def resolve_path(spec: DataConfig, base_dir: Path | None) -> Path:
    """A relative data path is read relative to the config file's folder."""
    if spec.path.is_absolute() or base_dir is None:
        return spec.path
    return base_dir / spec.path


IN_MEMORY = "<DataFrame>"
"""How errors name an in-memory table (rows numbered from 1 by position)."""


def load_private(spec: DataConfig, base_dir: Path | None = None,
                 frame: pd.DataFrame | None = None) -> PrivateDataset:
    """Read, validate and bound the private set named by `spec`, or held in `frame` (an
    in-memory table, read as is and never written anywhere; `spec.path` is then unused).

    Logs only what is public: the unit count N, the bound k and the label set. Counts of
    truncated, duplicate or bounded-away records depend on the data and are not logged.
    """
    if frame is not None:
        source, origin = IN_MEMORY, ""
        table = validate(frame, spec, source)
    else:
        path = resolve_path(spec, base_dir)
        source, origin = str(path), disk_identity(path)
        table = validate(read_table(path, spec.format), spec, source)
    texts, labels, units = table.texts, table.labels, None
    if table.users is not None:
        keep, units = bound_contributions(table.users, texts, spec.max_records_per_user)
        texts = [texts[i] for i in keep]
        if labels is not None:
            labels = [labels[i] for i in keep]
    try:
        dataset = PrivateDataset(texts, labels=labels, label_names=spec.labels, units=units,
                                 records_per_unit=spec.records_per_unit,
                                 max_units=spec.max_units, origin=origin)
    except InputError as error:
        raise DataError(str(error), path=source) from None
    log.info("private data: N %s privacy units (%s-level, k = %d)", units_text(dataset),
             "user" if spec.user_column else "record", spec.records_per_unit)
    return dataset


def units_text(dataset: PrivateDataset) -> str:
    """N as it may be shown, after "N": "= count", or "≤ bound" where N is not public."""
    if dataset.n_units_is_a_bound:
        return f"≤ {dataset.n_units} (data.max_units)"
    return f"= {dataset.n_units}"


def disk_identity(path: Path) -> str:
    """The data's identity on disk, never its content: the inode and modification time of
    the file, or of each file of a folder, so that an edit or a replacement changes it."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    stats = [f.stat() for f in files]
    return ";".join(f"{st.st_ino}:{st.st_mtime_ns}" for st in stats)
