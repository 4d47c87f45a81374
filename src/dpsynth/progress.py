"""Progress bars for long steps, on stderr, quiet when stderr is not a terminal."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

from rich.console import Console
from rich.progress import Progress

T = TypeVar("T")
_console = Console(stderr=True)


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Yield from `items`, showing a bar while it runs (no bar when not on a terminal)."""
    if not _console.is_terminal:
        yield from items
        return
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with Progress(console=_console, transient=True) as progress:
        task = progress.add_task(description, total=total)
        for item in items:
            yield item
            progress.advance(task)
