"""Load a private dataset from a `data:` config: read, validate, bound contributions."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from dpsynth.data.bounding import bound_contributions
from dpsynth.data.config import DataConfig
from dpsynth.data.io import read_table
from dpsynth.data.private import PrivateDataset
from dpsynth.data.validate import ValidationReport, validate

log = logging.getLogger(__name__)

BOUNDING_SEED = 0x5EED
"""Fixed so that reruns with any run seed keep the same records per user."""


@dataclass(frozen=True)
class LoadedData:
    dataset: PrivateDataset
    report: ValidationReport
    records_dropped_by_bounding: int


def resolve_path(spec: DataConfig, base_dir: Path | None) -> Path:
    """A relative data path is read relative to the config file's folder."""
    if spec.path.is_absolute() or base_dir is None:
        return spec.path
    return base_dir / spec.path


def load_private(spec: DataConfig, base_dir: Path | None = None) -> LoadedData:
    """Read, validate and bound the private set named by `spec`."""
    path = resolve_path(spec, base_dir)
    table = validate(read_table(path, spec.format), spec, source=str(path))
    texts, labels, units = table.texts, table.labels, None
    dropped = 0
    if table.users is not None:
        keep, units = bound_contributions(table.users, spec.max_records_per_user, BOUNDING_SEED)
        dropped = len(texts) - len(keep)
        texts = [texts[i] for i in keep]
        labels = [labels[i] for i in keep] if labels is not None else None
    if labels is not None and spec.labels is None:
        log.warning("label set read from the private data and treated as public; "
                    "declare it in data.labels to keep it from depending on the data")
    dataset = PrivateDataset(texts, labels=labels, label_names=spec.labels, units=units)
    log.info("private data: %s; %s", dataset, table.report.summary())
    if dropped:
        log.info("contribution bounding dropped %d records (k=%d per user)", dropped,
                 spec.max_records_per_user)
    return LoadedData(dataset, table.report, dropped)
