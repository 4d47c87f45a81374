"""Progress on long steps: a bar with the time left on stderr in a terminal and as a live cell
output in Jupyter (none in a pipe, a file, CI), and, for steps whose size is public, a line in
the log every half minute, so that run.log and a notebook's log say how far a run is too."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
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
          log_progress: bool = False, cost: Callable[[T], float] | None = None) -> Iterator[T]:
    """Yield from `items`, showing a bar while it runs. `log_progress` also logs how far it is
    every `LOG_EVERY_S` seconds: only for steps whose size is public (the config's outputs,
    steps or iterations), never for one sized by the private data (the private embedding's
    batches), since the log is a file anyone may be sent. `cost` (a sequence's items only)
    gives each item's share of the work, so that the time left follows the work where items
    differ in size: generation batches sorted by length take longest last."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    costs = _costs(items, cost)
    logged = _logged(items, description, total, costs) if log_progress else items
    if not (_console.is_terminal or _console.is_jupyter):
        yield from logged
        return
    with Progress(console=_console, transient=True) as progress:
        task = progress.add_task(description, total=sum(costs) if costs else total)
        for i, item in enumerate(logged):
            yield item
            progress.advance(task, costs[i] if costs else 1)


def _costs(items: Iterable[T], cost: Callable[[T], float] | None) -> list[float] | None:
    if cost is None:
        return None
    if not isinstance(items, Sequence):
        raise TypeError("track: `cost` needs the items as a sequence, to know the whole work")
    costs = [float(cost(item)) for item in items]
    if any(c < 0 for c in costs) or not sum(costs):
        raise ValueError("track: `cost` must be non-negative and not all zero")
    return costs


def _logged(items: Iterable[T], description: str, total: int | None,
            costs: list[float] | None) -> Iterator[T]:
    start = last = time.monotonic()
    done = 0
    for item in items:
        yield item
        done += 1
        now = time.monotonic()
        if now - last >= LOG_EVERY_S and done != total:
            last = now
            share = sum(costs[:done]) / sum(costs) if costs else None
            log.info("%s: %s", description, _how_far(done, total, now - start, share))
    elapsed = time.monotonic() - start
    if done and elapsed >= LOG_EVERY_S:
        log.info("%s: done, %d in %s", description, done, _duration(elapsed))


def _how_far(done: int, total: int | None, elapsed: float, share: float | None) -> str:
    """`share`: the part of the work done, where items differ in cost; else done / total."""
    if not total:
        return f"{done} so far, {_duration(elapsed)} elapsed"
    share = done / total if share is None else share
    so_far = f"{done}/{total} ({100 * share:.0f}%), {_duration(elapsed)} elapsed"
    return f"{so_far}, about {_duration(elapsed / share * (1 - share))} left" if share else so_far


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
