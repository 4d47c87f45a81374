"""Progress on long steps: a bar with the time left on stderr in a terminal and as a live cell
output in Jupyter (none in a pipe, a file, CI), and, for steps whose size is public, a line in
the log every half minute, so that run.log and a notebook's log say how far a run is too."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from rich.console import Console
from rich.progress import Progress

T = TypeVar("T")
_console = Console(stderr=True)
log = logging.getLogger(__name__)

LOG_EVERY_S = 30.0
"""Seconds between two progress lines in the log."""


def console() -> Console:
    """The stderr console the bars draw on; log lines printed through it stay above them."""
    return _console


def track(items: Iterable[T], description: str, total: int | None = None,
          log_progress: bool = False) -> Iterator[T]:
    """Yield from `items`, showing a bar while it runs. `log_progress` also logs how far it is
    every `LOG_EVERY_S` seconds: only for steps whose size is public (the config's outputs,
    steps or iterations), never for one sized by the private data (the private embedding's
    batches), since the log is a file anyone may be sent."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    logged = _logged(items, description, total) if log_progress else items
    if not (_console.is_terminal or _console.is_jupyter):
        yield from logged
        return
    with Progress(console=_console, transient=True) as progress:
        task = progress.add_task(description, total=total)
        for item in logged:
            yield item
            progress.advance(task)


def _logged(items: Iterable[T], description: str, total: int | None) -> Iterator[T]:
    start = last = time.monotonic()
    done = 0
    for item in items:
        yield item
        done += 1
        now = time.monotonic()
        if now - last >= LOG_EVERY_S and done != total:
            last = now
            log.info("%s: %s", description, _how_far(done, total, now - start))
    elapsed = time.monotonic() - start
    if done and elapsed >= LOG_EVERY_S:
        log.info("%s: done, %d in %s", description, done, _duration(elapsed))


def _how_far(done: int, total: int | None, elapsed: float) -> str:
    if not total:
        return f"{done} so far, {_duration(elapsed)} elapsed"
    left = elapsed / done * max(0, total - done)
    return (f"{done}/{total} ({100 * done / total:.0f}%), {_duration(elapsed)} elapsed, "
            f"about {_duration(left)} left")


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
