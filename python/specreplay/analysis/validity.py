"""Validity checks: what makes a measurement misleading, found and said aloud.

`check(df)` runs every check (`checks.CHECKS`, `checks_load`) on every
sweep point of a results frame; a finding is a `Finding` (`finding`), with
a stable `code` scripts may match on. Level "error" means the figures do
not measure what they claim; "warning" means they do, with a caveat to
read; "note" is how to read a figure, never failing `--strict`
(`is_fatal`). docs/results.md lists the codes.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from specreplay.analysis.analyse import analyse, findings_of
from specreplay.analysis.finding import FATAL_LEVELS, Finding, Level, from_json, is_fatal, to_json
from specreplay.settings.thresholds import ValidityThresholds

# The names scripts use as `validity.X` (docs/results.md).
__all__ = ["FATAL_LEVELS", "Finding", "Level", "ValidityThresholds", "check", "findings_of", "from_json", "is_fatal", "to_json"]


def check(
    df: pd.DataFrame,
    thresholds: ValidityThresholds | None = None,
    *,
    points: list[dict[str, Any]] | None = None,
    max_tokens: int | None = None,
) -> list[Finding]:
    """Run every check on every sweep point of `df`; findings in point order,
    errors first, then warnings, then notes within a point. A frame holding
    several runs is checked run by run, each finding's point named
    `label: point`. `thresholds`, `points` and `max_tokens` default to each
    run's own, as its file recorded them (`df.attrs`, see `specreplay.load`);
    `max_tokens` only makes the advice more precise. The findings are those
    of `analysis.analyse(df)`."""
    return findings_of([(run.label, run.findings) for run in analyse(df, thresholds, points=points, max_tokens=max_tokens)])
