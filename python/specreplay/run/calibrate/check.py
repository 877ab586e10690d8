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


#: Columns holding instants (µs), moved when parts are joined; the lists of chunk stamps too.
INSTANTS = ("scheduled_us", "sent_us", "first_byte_us", "first_token_us", "first_reasoning_us", "first_content_us",
            "last_token_us", "end_us", "predecessor_end_us")


def join_parts(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Runs of one point made in parts (interleaved with other points, so
    that a shared machine's slow spells fall on every point alike), joined
    end to end: each part's instants moved to start where the previous part
    ended. Latencies are unchanged; tokens/s is the parts' tokens over their
    summed spans. The metadata is the first part's."""
    moved, at = [], None
    for df in parts:
        df = df.copy()
        start = int(df["sent_us"].min())
        shift = 0 if at is None else at - start
        for col in INSTANTS:
            if col in df:
                df[col] = df[col] + shift
        df["chunk_ts_us"] = df["chunk_ts_us"].map(lambda ts: [t + shift for t in ts] if ts is not None else ts)
        at = int(df["end_us"].max())
        moved.append(df)
    out = pd.concat(moved, ignore_index=True)
    out.attrs = dict(parts[0].attrs)
    return out


#: The percentile figures `intervals` gives an interval for: (figure, latency prefix, quantile).
PERCENTILES: tuple[tuple[str, str, float], ...] = tuple(
    (f"{prefix}_{stat}_ms", prefix, q) for prefix in ("ttft", "tpot") for stat, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
)


@dataclass(frozen=True)
class Interval:
    """A measured figure's bootstrap interval over its requests, and
    whether its requests are enough for it (`resampling.samples_needed`)."""

    low: float
    high: float
    requests: int
    needed: int

    def relative(self, value: float) -> tuple[float, float]:
        """The interval as relative deviations from `value`: (low − value) / value, (high − value) / value."""
        if not value or math.isnan(value):
            return float("nan"), float("nan")
        return (self.low - value) / value, (self.high - value) / value


def intervals(measured: pd.DataFrame, confidence: float = 0.9) -> dict[tuple[str, str], Interval]:
    """Per (point, figure) of `PERCENTILES`, the measured figure's bootstrap
    interval at `confidence`, resampled by request (`resampling.point_intervals`,
    as `compare` resamples a point, expanded for few requests): how far the
    measurement itself could have landed with other requests of the same
    kind, the yardstick an error against it needs. Every request is its own
    unit: the parts of `join_parts` reuse trace ids (each part's trace
    numbers its records from 0), and `compare`'s unit, the trace record,
    would pool the parts' k-th requests into one."""
    from specreplay.analysis.analyse import analyse
    from specreplay.analysis.resampling import point_intervals, samples_needed

    df = measured.copy()
    df["trace_id"] = df["run_id"].astype(str) + "/" + df["trace_id"].astype(str) if "run_id" in df else df["trace_id"]
    out: dict[tuple[str, str], Interval] = {}
    for run in analyse(df):
        for point in run.points:
            found = point_intervals(point, [(prefix, q) for _, prefix, q in PERCENTILES], {}, confidence=confidence)
            for figure, prefix, q in PERCENTILES:
                _, low, high = found.latencies[(prefix, q)]
                out[(str(point.point), figure)] = Interval(low, high, found.units, samples_needed(q))
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
