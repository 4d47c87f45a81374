"""Logging to stderr and to the run's `run.log`.

Log calls in dpsynth pass counts, names and DP releases, never private text; the canary
tests in tests/test_no_leaks.py hold every module to that.
"""

from __future__ import annotations

import logging
from pathlib import Path

from rich.console import Console
from rich.logging import RichHandler

LEVELS = ("debug", "info", "warning", "error")
_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def setup_logging(level: str = "info", log_file: Path | None = None) -> None:
    """Route the `dpsynth` logger to stderr and, when given, to `log_file` (appended)."""
    logger = logging.getLogger("dpsynth")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    logger.setLevel(level.upper())
    logger.propagate = False  # libraries may have configured the root logger; print once
    console = RichHandler(console=Console(stderr=True), show_path=False, rich_tracebacks=False)
    console.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(console)
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        file_handler = logging.FileHandler(log_file, encoding="utf-8")
        file_handler.setFormatter(logging.Formatter(_FORMAT))
        logger.addHandler(file_handler)
