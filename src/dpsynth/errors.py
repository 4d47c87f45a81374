"""Exceptions with a clear split between bad input (exit 2) and failures (exit 1)."""

from __future__ import annotations


class DpsynthError(Exception):
    """Base class for every error dpsynth raises on purpose."""

    exit_code = 1


class InputError(DpsynthError):
    """The user's data, config or arguments are wrong; the message says where and how."""

    exit_code = 2


class DataError(InputError):
    """A problem in an input data file, located by file, row and field where possible."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        row: int | None = None,
        field: str | None = None,
    ) -> None:
        self.path, self.row, self.field = path, row, field
        where = [p for p in (path, f"row {row}" if row is not None else None,
                             f"field '{field}'" if field else None) if p]
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class ConfigError(InputError):
    """The run configuration is invalid."""


class BudgetExceededError(DpsynthError):
    """A release would take the privacy spend past the budget; nothing was released."""


class Interrupted(DpsynthError):
    """The user stopped the run (Ctrl-C); the message says where, and how to resume."""

    exit_code = 130
