"""What a run is made of, between the orchestrator (`replay`) and the
capacity search (`capacity.SearchPlan`, a `Plan`): the points to run, each
point's progress, and a point that ran."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from specreplay.settings.config import Point, ReplayConfig

if TYPE_CHECKING:
    from specreplay.analysis.analyse import RunAnalysis


@dataclass(frozen=True)
class Progress:
    point: str
    scheduled: int
    sent: int
    finished: int
    failed: int
    output_tokens: int
    elapsed_s: float

    @property
    def in_flight(self) -> int:
        return max(self.sent - self.finished, 0)


@dataclass
class FinishedPoint:
    """A point that ran: its rows as written, how far it got, and (made on
    first use, once for everyone who reads it) its analysis."""

    point: Point
    label: str
    rows: pa.Table
    progress: Progress
    interrupted: bool = False
    cut: bool = False
    """Cancelled when the run's time budget ran out (a capacity search's)."""
    config: ReplayConfig | None = None
    """The run's config, typed: the analysis takes the thresholds, SLOs and
    max_tokens from it, as the capacity search does, rather than parsing
    them back out of the rows' metadata (None: it does, as for a file)."""
    server_samples: pa.Table | None = None
    """The server's samples scraped during the point (None: none were)."""
    scheduling: dict[str, Any] | None = None
    """The scheduling its engine threads got (`point.scheduling_of`; None: a
    distributed or predicted point, whose engine is not this process's)."""

    @cached_property
    def runs(self) -> list[RunAnalysis]:
        """The analysis of the rows (one run; none when no row was written)."""
        if not self.rows.num_rows:
            return []
        # Imported here, after the point ran: pandas is not needed before (run_replay, "The analysis").
        from specreplay.analysis.analyse import analyse, analyse_run, predictions_of
        from specreplay.results import server_samples as server_store
        from specreplay.results.files import to_frame

        df = to_frame(self.rows)
        if self.config is None:
            return analyse(df)
        config, point = self.config, self.point
        samples = None if self.server_samples is None else self.server_samples.cast(server_store.empty().schema).to_pandas()
        return [
            analyse_run(
                df,
                self.label,
                config.threshold_settings(),
                points=[{"point": point.name, "mode": point.mode, "value": point.value}],
                max_tokens=config.max_tokens,
                slo=config.slo_settings(),
                samples=samples,
                predictions=predictions_of(df, self.label),
                scheduling=None if self.scheduling is None else {point.name: self.scheduling},
            )
        ]


class Plan:
    """The points of a run: the configured sweep, in order. A plan may also
    set each point's request count, a deadline, and a status line
    (`capacity.SearchPlan` does)."""

    searching = False

    def __init__(self, points: list[Point]) -> None:
        self.points = list(points)

    def next_point(self) -> Point | None:
        return self.points.pop(0) if self.points else None

    def num_requests(self, config: ReplayConfig) -> int | None:
        return config.num_requests

    @property
    def deadline_us(self) -> float | None:
        return None

    def status(self) -> str | None:
        return None

    def finished(self, finished: FinishedPoint) -> None: ...

    def start(self, records: int) -> str | None:
        """Before the first point, with the trace's record count: a line for
        the console about how the plan sizes its points, if any."""
        return None
