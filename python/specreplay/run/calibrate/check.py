"""Predicted against measured: the relative error of each figure a
prediction makes, point by point (docs/predict.md, "Checking a prediction")."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

#: The summary figures a prediction is checked on.
FIGURES: tuple[str, ...] = (
    "ttft_mean_ms", "tpot_mean_ms", "e2e_mean_ms",
    "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms",
    "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms",
    "e2e_p50_ms", "e2e_p90_ms", "e2e_p99_ms",
    "output_tok_s",
)


@dataclass(frozen=True)
class Error:
    point: str
    figure: str
    predicted: float
    measured: float

    @property
    def relative(self) -> float:
        """(predicted − measured) / measured."""
        if not self.measured or math.isnan(self.measured) or math.isnan(self.predicted):
            return float("nan")
        return (self.predicted - self.measured) / self.measured

    def to_dict(self) -> dict[str, Any]:
        return {"point": self.point, "figure": self.figure, "predicted": self.predicted, "measured": self.measured, "error": self.relative}


def errors(predicted: pd.DataFrame, measured: pd.DataFrame) -> list[Error]:
    """Per point both runs have (by point name), each figure of `FIGURES`
    from both summaries (`summary.summarize`)."""
    from specreplay.analysis.summary import summarize

    p = summarize(predicted).set_index("point")
    m = summarize(measured).set_index("point")
    out = []
    for point in p.index.intersection(m.index):
        for figure in FIGURES:
            out.append(Error(str(point), figure, _figure(p, point, figure), _figure(m, point, figure)))
    return out


def _figure(summary: pd.DataFrame, point: Any, figure: str) -> float:
    """A summary's figure (a float column) at a point."""
    return float(summary[figure].astype("float64")[point])


def markdown(rows: list[Error]) -> str:
    """The errors as a Markdown table."""
    lines = ["| point | figure | predicted | measured | error |", "|---|---|---|---|---|"]
    for e in rows:
        lines.append(f"| {e.point} | {e.figure} | {e.predicted:,.1f} | {e.measured:,.1f} | {e.relative:+.1%} |")
    return "\n".join(lines)
