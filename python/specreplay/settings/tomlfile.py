"""Reading TOML files (simulator settings, run configs) with errors that name
the file and the line."""

from __future__ import annotations

from typing import Any

from specreplay.errors import ConfigError


def read_toml(path: str) -> dict[str, Any]:
    return parse_toml(read_text(path), path)


def read_text(path: str) -> str:
    """The file's text as written (UTF-8, newlines untranslated, as tomllib reads them)."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            return f.read()
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror}") from None


def parse_toml(text: str, path: str) -> dict[str, Any]:
    """The TOML in `text`, read from `path` (named in errors)."""
    import tomllib  # here: 2 ms of CPU at import, and a replay without a config file never reads TOML

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: {e}") from None
