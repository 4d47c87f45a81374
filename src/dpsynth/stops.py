"""Stopping a run on a signal: Ctrl-C (SIGINT) and SIGTERM (what `timeout`, Slurm and
Kubernetes send) both raise KeyboardInterrupt where the main thread is.

Python drops an exception raised inside some callbacks (a weakref callback run during an
import prints "KeyboardInterrupt ignored in ..." and carries on), so the request is also
remembered, and the ledger honours it before its next charge: once a stop is asked for,
nothing more is released, even when the first KeyboardInterrupt was lost. Some code turns a
KeyboardInterrupt into another error (a module whose import it cut short raises a
RuntimeError), so an error leaving the run after a stop was asked for is the stop, not a
crash. While a stopping run writes down what it spent (`shielded`), a repeated signal is not
raised: it would leave privacy.json behind the journal.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_requested = threading.Event()
_shielded = threading.Event()


def raise_if_stop_requested() -> None:
    """Raise KeyboardInterrupt when a signal asked the run to stop."""
    if _requested.is_set():
        raise KeyboardInterrupt


@contextmanager
def signals_stop_the_run() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM stop the run (and stay asked for until it ends).
    Off the main thread, where Python cannot set handlers, the block changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        _requested.set()
        if not _shielded.is_set():
            raise KeyboardInterrupt

    def quiet(unraisable: object) -> None:
        """A KeyboardInterrupt Python dropped (see above) is remembered, not news: without
        this it prints a traceback beside the one-line message the stopped run ends with."""
        if isinstance(getattr(unraisable, "exc_value", None), KeyboardInterrupt):
            return
        hook(unraisable)

    _requested.clear()
    hook, sys.unraisablehook = sys.unraisablehook, quiet
    previous = {signum: signal.signal(signum, interrupt)
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except Exception as exc:
        if _requested.is_set():
            raise KeyboardInterrupt from exc
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        sys.unraisablehook = hook
        _requested.clear()


@contextmanager
def shielded() -> Iterator[None]:
    """A block a signal must not cut short (the stopped run's spend being written)."""
    _shielded.set()
    try:
        yield
    finally:
        _shielded.clear()
