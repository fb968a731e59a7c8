"""The project's own errors: every bad input ends in one of these, never in a traceback.

Each error carries where the problem is (file, line, column or key path) and what is wrong, so the
CLI can print one clear line and exit with a non-zero status.
"""

from __future__ import annotations

__all__ = ["KantError", "InputError", "ConfigError", "SchedulingError"]


class KantError(Exception):
    """Base class for every error kant raises on purpose."""


class InputError(KantError):
    """A malformed input file: a bad trace row, a bad inventory line, a bad cluster spec.

    ``source`` is a file path or a short label (``"cluster spec"``); ``line`` is 1-based and counts
    the header line, as an editor would show it.
    """

    def __init__(
        self,
        source: str,
        message: str,
        *,
        line: int | None = None,
        column: str | None = None,
        value: object = None,
    ) -> None:
        self.source = source
        self.line = line
        self.column = column
        self.value = value
        self.reason = message
        where = source
        if line is not None:
            where += f":{line}"
        if column is not None:
            where += f": column {column!r}"
        if value is not None:
            message = f"{message} (got {value!r})"
        super().__init__(f"{where}: {message}")


class ConfigError(KantError):
    """A bad policy or services file; ``path`` is the dotted key path of the offending value."""

    def __init__(self, source: str, path: str, message: str) -> None:
        self.source = source
        self.path = path
        self.reason = message
        loc = f"{source}: {path}" if path else source
        super().__init__(f"{loc}: {message}")


class SchedulingError(KantError):
    """An internal invariant of the scheduler or simulator was broken (a bug, never bad input)."""
