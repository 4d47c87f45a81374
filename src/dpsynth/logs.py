"""Logging to stderr and to the run's `run.log`.

Log calls in dpsynth pass counts, names and DP releases, never private text; the canary
tests in tests/test_no_leaks.py hold every module to that.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.logging import RichHandler

from dpsynth import progress

LEVELS = ("debug", "info", "warning", "error")
FRAMES = 6
"""Innermost frames shown per exception by `where_raised`."""
_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def setup_logging(level: str = "info", log_file: Path | None = None) -> None:
    """Route the `dpsynth` logger to stderr and, when given, to `log_file` (appended); below
    debug, silence the libraries' chatter (`quiet_libraries`)."""
    if level.lower() != "debug":
        quiet_libraries()
    logger = logging.getLogger("dpsynth")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    logger.setLevel(level.upper())
    logger.propagate = False  # libraries may have configured the root logger; print once
    console = RichHandler(console=progress.console(), show_path=False, rich_tracebacks=False)
    console.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(console)
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        file_handler = logging.FileHandler(log_file, encoding="utf-8")
        file_handler.setFormatter(logging.Formatter(_FORMAT))
        logger.addHandler(file_handler)


@contextmanager
def run_logging(level: str | None, log_file: Path) -> Iterator[None]:
    """`setup_logging` for one library call: the run's log goes to `log_file` (and to stderr
    unless `level` is None), and the `dpsynth` logger is put back as it was afterwards, so a
    notebook's own logging setup is left alone."""
    logger = logging.getLogger("dpsynth")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    logger.handlers = []
    setup_logging(level or "info", log_file)
    if level is None:
        for handler in [h for h in logger.handlers if not isinstance(h, logging.FileHandler)]:
            logger.removeHandler(handler)
        logger.propagate = saved[2]
    try:
        yield
    finally:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
            handler.close()
        logger.handlers, logger.level, logger.propagate = saved[0], saved[1], saved[2]


_QUIET_ENV = {"TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
              "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
              "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}


def quiet_libraries() -> None:
    """Silence what the user cannot act on: transformers' and the Hub's progress bars
    (`Loading weights: 100%`), datasets' bars, and library warnings such as transformers'
    `loss_type=None`. The one place dpsynth does so. Libraries not yet imported read the
    environment (a variable the user set wins); those already imported are told directly."""
    for key, value in _QUIET_ENV.items():
        os.environ.setdefault(key, value)
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "datasets" in sys.modules:
        import datasets

        datasets.disable_progress_bars()
        datasets.logging.set_verbosity_error()


def where_raised(exc: BaseException) -> str:
    """An exception chain without its messages: each exception's type and the code locations
    that raised it. A library's message may quote the value it failed on, which can be a
    private record; a type, a file name, a line number and a function name are code."""
    lines: list[str] = []
    current: BaseException | None = exc
    while current is not None:
        lines.append(f"{type(current).__module__}.{type(current).__qualname__}")
        frames = traceback.extract_tb(current.__traceback__)[-FRAMES:]
        lines += [f"  {Path(f.filename).name}:{f.lineno} in {f.name}" for f in frames]
        current = current.__cause__ or (None if current.__suppress_context__
                                        else current.__context__)
    return "\n".join(lines)
