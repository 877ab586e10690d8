"""What replay's trace reading does with sessions, for tests that need it
without the engine: each record's turn index, and each later turn's think
time from `think_time.ThinkTimes` (asked with the session's turn before)."""

from __future__ import annotations

from specreplay.settings.config import ReplayConfig
from specreplay.trace.think_time import ThinkTimes
from specreplay.trace.records import TraceRecord


def think_times(records: list[TraceRecord], config: ReplayConfig | None = None) -> tuple[list[int | None], ThinkTimes]:
    """Each record's think time in µs (None: a first turn, or no session), in trace order."""
    times = ThinkTimes(config or ReplayConfig())
    last: dict[str, tuple[TraceRecord, int]] = {}
    out: list[int | None] = []
    for rec in records:
        if rec.session_id is None:
            out.append(None)
            continue
        before = last.get(rec.session_id)
        turn = 0 if before is None else before[1] + 1
        out.append(None if before is None else times.us(before[0], rec, turn))
        last[rec.session_id] = (rec, turn)
    return out, times
