"""How long a user thinks between two turns of a session: the wait after a
turn's predecessor has ended before the turn is sent (dependent sessions,
docs/trace-format.md "Sessions").

The rule: the recorded arrival of turn n+1 minus the recorded end of turn n,
where the trace knows that end (a captured record's `response.end_us`, µs
after its arrival), at least 0. Where it does not, no think time (the turn
goes as soon as its predecessor ended).

This module is the one place the think time is decided; the engine only
waits it. The configured distribution for traces that do not know the end
(`--think-time`, `--think-time-scale`) is issue 16's Python half, and comes
here.
"""

from __future__ import annotations

from specreplay.config import ReplayConfig
from specreplay.trace import TraceRecord


class ThinkTimes:
    """The think times of a point's turns (one per point: a configured
    distribution draws from its own seeded stream)."""

    def __init__(self, config: ReplayConfig) -> None:
        self.config = config

    def us(self, previous: TraceRecord, record: TraceRecord, turn_index: int) -> int | None:
        """µs to wait after `previous` (turn `turn_index` - 1 of the same
        session, as read from the trace) ended before sending `record`;
        None: no wait."""
        end_us = previous.response.get("end_us") if previous.response else None
        if not isinstance(end_us, int) or previous.arrival is None or record.arrival is None:
            return None
        return max(0, round((record.arrival - previous.arrival) * 1e6) - end_us)
