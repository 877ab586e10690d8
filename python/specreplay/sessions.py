"""Sessions in a replay: which turn of its session each request is, and how
long after the turn before it has ended it is sent (its think time).

The engine waits the think time; it never computes one (the contract of
issue 16). The rule (docs/trace-format.md, "Sessions"), for a later turn of
a session, first that applies:

1. the record's own `think_time` (what `synth` writes);
2. its recorded arrival minus the recorded end of the turn before
   (`arrival` + `response.end_us`: what `capture` writes, and BurstGPT's
   `Elapsed time`); a turn that arrived before the one before it had ended
   gets 0;
3. a draw from `--think-time`, seeded by `--seed` and the session's id (so
   a session's think times do not depend on the other sessions);
4. 0: sent as soon as the turn before has ended (said in a note).

`--think-time-scale` multiplies the result. The first turn of a session, and
a request without a session, has none.

The planner reads records one at a time and keeps one small entry per
session, so it works on a trace read as a stream.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from specreplay.distributions import Dist
from specreplay.trace import TraceRecord


@dataclass
class ThinkTimeSources:
    """How many later turns got their think time from each rule."""

    recorded: int = 0
    measured: int = 0
    #: Measured, but the turn arrived before the one before it had ended: 0.
    overlapped: int = 0
    drawn: int = 0
    unknown: int = 0

    @property
    def later_turns(self) -> int:
        return self.recorded + self.measured + self.overlapped + self.drawn + self.unknown

    def notes(self) -> list[str]:
        """What a user should know about the think times of a run."""
        out = []
        if self.unknown:
            out.append(
                f"{self.unknown} of {self.later_turns} later turns of sessions have no think time in the trace "
                "and --think-time is not set: each is sent as soon as the turn before it has ended"
            )
        if self.overlapped:
            out.append(
                f"{self.overlapped} later turns were recorded arriving before the turn before them had ended: "
                "their think time is 0 (sent as soon as that turn ends)"
            )
        return out


@dataclass
class _Session:
    turns: int = 0
    #: When the last turn ended in the recording, seconds on the trace's
    #: arrival clock; None when the trace does not say.
    recorded_end_s: float | None = None
    rng: random.Random | None = None


@dataclass
class TurnPlan:
    session_id: str | None
    turn_index: int | None
    think_time_us: int | None


@dataclass
class SessionPlanner:
    """Plans the turns of a trace's records, in trace order (`plan`)."""

    think_time: Dist | None = None
    scale: float = 1.0
    seed: int = 0
    sources: ThinkTimeSources = field(default_factory=ThinkTimeSources)
    _sessions: dict[str, _Session] = field(default_factory=dict)

    def plan(self, record: TraceRecord) -> TurnPlan:
        sid = record.session_id
        if sid is None:
            return TurnPlan(None, None, None)
        state = self._sessions.get(sid)
        if state is None:
            state = self._sessions[sid] = _Session()
        think_s = self._think_s(record, state, sid) if state.turns else None
        turn = state.turns
        state.turns += 1
        state.recorded_end_s = _recorded_end_s(record)
        think_us = None if think_s is None else round(think_s * self.scale * 1e6)
        return TurnPlan(sid, turn, think_us)

    def _think_s(self, record: TraceRecord, state: _Session, sid: str) -> float:
        if record.think_time is not None:
            self.sources.recorded += 1
            return record.think_time
        if record.arrival is not None and state.recorded_end_s is not None:
            gap = record.arrival - state.recorded_end_s
            if gap < 0:
                self.sources.overlapped += 1
                return 0.0
            self.sources.measured += 1
            return gap
        if self.think_time is not None:
            if state.rng is None:
                # A string seed is hashed with SHA-512: the same in every process.
                state.rng = random.Random(f"{self.seed}:{sid}")
            self.sources.drawn += 1
            return self.think_time.seconds(state.rng)
        self.sources.unknown += 1
        return 0.0


def _recorded_end_s(record: TraceRecord) -> float | None:
    end_us = (record.response or {}).get("end_us")
    if record.arrival is None or end_us is None:
        return None
    return record.arrival + end_us / 1e6


def plan_turns(records: list[TraceRecord], think_time: Dist | None, scale: float, seed: int) -> tuple[list[TurnPlan], ThinkTimeSources]:
    """Every record's plan, in trace order, and where the think times came from."""
    planner = SessionPlanner(think_time, scale, seed)
    return [planner.plan(r) for r in records], planner.sources
