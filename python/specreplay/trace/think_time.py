"""Think times: how long after the turn before it has ended a later turn of
a session is sent.

The engine waits the think time; it never computes one (the contract of
issue 16): replay asks `ThinkTimes.us` for each later turn, with the turn
before as the trace has it. The rule (docs/trace-format.md, "Sessions"),
first that applies:

1. the record's own `think_time` (what `synth` writes);
2. its recorded arrival minus the recorded end of the turn before
   (`arrival` + `response.end_us`: what `capture` writes, and BurstGPT's
   `Elapsed time`); a turn that arrived before the one before it had ended
   gets 0;
3. a draw from `--think-time`, seeded by `--seed`, the session's id and the
   turn (so a turn's think time depends on nothing else in the trace);
4. 0: sent as soon as the turn before has ended (said in a note).

`--think-time-scale` multiplies the result. The first turn of a session, and
a request without a session, has none.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from specreplay.settings.config import ReplayConfig
from specreplay.trace.records import TraceRecord


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


class ThinkTimes:
    """The think times of one replay (`config`'s `think_time`,
    `think_time_scale`, `seed`); `us` gives a later turn's. Stateless but for
    its counts: the same turn gets the same think time in any order."""

    def __init__(self, config: ReplayConfig) -> None:
        self.dist = config.think_time_dist()
        self.scale = config.think_time_scale
        self.seed = config.seed
        self.sources = ThinkTimeSources()

    def us(self, previous: TraceRecord, record: TraceRecord, turn_index: int) -> int:
        """How long after `previous` (the session's turn before, as the trace
        has it) has ended `record` (its turn `turn_index`) is sent, in µs."""
        return round(self._seconds(previous, record, turn_index) * self.scale * 1e6)

    def _seconds(self, previous: TraceRecord, record: TraceRecord, turn_index: int) -> float:
        if record.think_time is not None:
            self.sources.recorded += 1
            return record.think_time
        end_us = (previous.response or {}).get("end_us")
        if record.arrival is not None and previous.arrival is not None and end_us is not None:
            gap = record.arrival - (previous.arrival + float(end_us) / 1e6)
            if gap < 0:
                self.sources.overlapped += 1
                return 0.0
            self.sources.measured += 1
            return gap
        if self.dist is not None:
            self.sources.drawn += 1
            # One generator per turn, keyed by the seed, the session and the
            # turn (a string seed is hashed with SHA-512: the same in every
            # process): a turn's draw depends on nothing else.
            return self.dist.seconds(random.Random(f"{self.seed}:{record.session_id}:{turn_index}"))
        self.sources.unknown += 1
        return 0.0
