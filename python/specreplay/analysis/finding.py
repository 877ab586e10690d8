"""A validity check's finding (`Finding`), how findings are stored with a
results file (`to_json`, `from_json`) and when they fail a run (`is_fatal`).
The checks themselves are in `checks` and `checks_load`."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Literal

Level = Literal["note", "warning", "error"]
#: Levels that `--strict` turns into a failed run.
FATAL_LEVELS = frozenset({"warning", "error"})


@dataclass(frozen=True)
class Finding:
    code: str
    level: Level
    point: str
    count: int
    """How many requests the finding concerns (for client_saturated: requests sent)."""
    message: str


def to_json(findings: list[Finding]) -> str:
    """The findings as the JSON list stored in `specreplay.validity`."""
    return json.dumps([asdict(f) for f in findings], ensure_ascii=False)


def from_json(text: str) -> list[Finding]:
    """Inverse of `to_json`."""
    items = json.loads(text)
    if not isinstance(items, list):
        raise ValueError("specreplay.analysis.validity is not a JSON list")
    return [Finding(**item) for item in items]


def is_fatal(findings: list[Finding], strict: bool) -> bool:
    """Whether the run should exit non-zero: with `--strict`, any error or
    warning is (notes never are).

    Without it nothing is: the results file is still worth keeping, and the
    findings are printed (errors as INVALID MEASUREMENT) and stored with it."""
    return strict and any(f.level in FATAL_LEVELS for f in findings)
