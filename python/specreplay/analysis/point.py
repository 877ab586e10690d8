"""One sweep point's measured rows and what derives from them alone: the
bottom of the analysis (docs/architecture.md, "The analysis package").

`PointRows` holds a point's requests (warmup left out, the derived columns
of `derived.add_derived`, bursts marked) with the run's settings, and makes
on first use what needs nothing but them: the successful rows, the chunk
frame and its ITL samples, the sessions, the server's figures, which
requests met the SLO's thresholds. The summary row (`summary_row`), the
findings (`checks`) and the SLO verdicts (`slo`) are made above it, from it;
`analyse.PointAnalysis` is the point with all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from specreplay.analysis import session_figures
from specreplay.analysis.slo_requests import met, request_values
from specreplay.results import derived
from specreplay.results import server_samples as server_store
from specreplay.servermetrics import figures as server_figures
from specreplay.settings.objectives import Slo
from specreplay.settings.thresholds import ValidityThresholds

#: Load modes whose requests are sent on a schedule, not as answers come back.
OPEN_LOOP_MODES = frozenset({"rate", "speedup"})


def measured(df: pd.DataFrame) -> pd.DataFrame:
    """`df` without its warmup rows."""
    warmup = df["warmup"].astype("boolean").fillna(False).astype(bool)
    rows: pd.DataFrame = df[~warmup]
    return rows


def is_ok(df: pd.DataFrame) -> pd.Series:
    """True for successful requests (`error_kind` null)."""
    return df["error_kind"].isna()


def point_mode(point: str, points: list[dict[str, Any]] | None) -> tuple[str | None, float | None]:
    """(mode, value) of a sweep point: from the config's `points` when it lists
    it, else parsed from a `mode=value` label; (None, None) when neither works."""
    for entry in points or []:
        if entry.get("point") == point:
            value = entry.get("value")
            return entry.get("mode"), float(value) if value is not None else None
    mode, sep, value_text = point.partition("=")
    if not sep:
        return None, None
    try:
        return mode, float(value_text)
    except ValueError:
        return mode, None


@dataclass(frozen=True, eq=False)
class PointRows:
    """One sweep point of one run: its rows, the run's settings, and what
    derives from the rows alone (see the module doc)."""

    label: str | None
    point: str
    mode: str | None
    """The load mode (rate, speedup, concurrency), from the config or the point's name."""
    value: float | None
    rows: pd.DataFrame
    ok: np.ndarray
    """Per row of `rows`: whether the request succeeded."""
    thresholds: ValidityThresholds
    max_tokens: int | None
    slo: Slo = Slo()
    server_samples: pd.DataFrame = field(default_factory=lambda: server_store.empty().to_pandas())
    """The server's Prometheus samples scraped during the point (`specreplay.load(path, metrics=True)`'s rows of it)."""
    prediction: dict[str, Any] | None = None
    """A predicted point: what it was predicted from (`results.files.PREDICTED_KEY`'s entry for it); None when measured."""
    scheduling: dict[str, Any] | None = None
    """What the point's engine threads got (`results.files.SCHEDULING_KEY`'s entry for it); None when not recorded."""

    @cached_property
    def ok_rows(self) -> pd.DataFrame:
        rows: pd.DataFrame = self.rows[self.ok]
        return rows

    @cached_property
    def chunks(self) -> pd.DataFrame:
        """The chunks of the successful requests; a burst's gaps (`itl_us`)
        are NaN, so that ITL leaves them out as TPOT does (`derived.bursts`)."""
        frame = derived.chunks(self.ok_rows)
        burst = self.ok_rows.loc[self.ok_rows["burst"], "request_index"]
        if len(burst):
            frame.loc[frame["request_index"].isin(burst), "itl_us"] = np.nan
        return frame

    @cached_property
    def itl_chunk_us(self) -> np.ndarray:
        return derived.itl_per_chunk(self.chunks)

    @cached_property
    def itl_token_us(self) -> np.ndarray:
        return derived.itl_per_token(self.chunks)

    @cached_property
    def sessions(self) -> pd.DataFrame:
        return session_figures.per_session(self.rows, self.ok)

    @cached_property
    def ttft_by_turn(self) -> pd.DataFrame:
        return session_figures.ttft_by_turn(self.rows, self.ok)

    @cached_property
    def skipped(self) -> np.ndarray:
        """Per row of `rows`: a turn not sent because an earlier turn of its session failed."""
        return session_figures.skipped_mask(self.rows)

    @cached_property
    def server(self) -> dict[str, Any]:
        """The server's figures (`servermetrics.figures.point_figures`)."""
        return server_figures.point_figures(self.server_samples)

    @cached_property
    def slo_met(self) -> np.ndarray:
        """Per row of `rows`: whether the request met every per-request threshold."""
        return met(self.ok, request_values(self.rows, self.chunks, self.slo), self.slo)
