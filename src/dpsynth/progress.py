"""Progress bars for long steps: on stderr in a terminal, as a live cell output in Jupyter,
and quiet elsewhere (a pipe, a file, CI)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

from rich.console import Console
from rich.progress import Progress

T = TypeVar("T")
_console = Console(stderr=True)


def console() -> Console:
    """The stderr console the bars draw on; log lines printed through it stay above them."""
    return _console


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Yield from `items`, showing a bar while it runs (no bar outside a terminal or a
    notebook)."""
    if not (_console.is_terminal or _console.is_jupyter):
        yield from items
        return
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with Progress(console=_console, transient=True) as progress:
        task = progress.add_task(description, total=total)
        for item in items:
            yield item
            progress.advance(task)
