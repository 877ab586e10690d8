"""specreplay's exceptions, and the CLI's exit statuses. Exceptions are defined in Python so each can also subclass the
natural stdlib type (`except ValueError` keeps working); the Rust extension
raises these same classes (`rust/specreplay-py/src/errors.rs`).

This module must not import `specreplay._core`: the extension imports it.
"""

from __future__ import annotations

#: The run's validity checks failed under --strict (`replay`, `compare`).
EXIT_INVALID = 3
#: Stopped by Ctrl-C: 128 + SIGINT, as shells report it.
EXIT_INTERRUPTED = 130


class SpecreplayError(Exception):
    """Base class of every specreplay error."""


class ConfigError(SpecreplayError, ValueError):
    """An invalid option, configuration value or request shape."""


class TraceError(ConfigError):
    """A trace file that cannot be read: says file, line and field."""

    def __init__(self, path: str, line: int | None, field: str | None, message: str) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.message = message
        where = path if line is None else f"{path}:{line}"
        what = f"field '{field}': " if field else ""
        super().__init__(f"{where}: {what}{message}")


class StreamFormatError(SpecreplayError, ValueError):
    """A response stream that is not valid SSE or not the expected JSON."""


class EngineError(SpecreplayError, RuntimeError):
    """The replay engine failed (not a per-request error: those become rows)."""


class ResultsError(SpecreplayError, ValueError):
    """A file that is not a specreplay results file (or not one that can be
    read): says which file and what is wrong."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: not a specreplay results file: {message}")


class InvalidRunError(SpecreplayError, ValueError):
    """A run whose validity checks found errors, used where its figures would
    be taken at face value (comparing it). `findings` holds the errors."""

    def __init__(self, message: str, findings: list[object]) -> None:
        super().__init__(message)
        self.findings = findings
