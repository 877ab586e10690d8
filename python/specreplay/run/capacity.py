"""The capacity search: the highest request rate whose SLO targets hold.

`replay --find-max-rate` runs open-loop points of the trace's own mix at
rates this module chooses, one after the other, each a normal sweep point of
the results file (`rate=R`, with its own summary and validity findings):

1. **Bracket.** Start at `Settings.start` (`--rate R`, default 1 req/s).
   While every point holds, multiply the rate by `growth` (2); once one does
   not, divide instead, until one holds.
2. **Bisect** between the highest rate that held (`low`) and the lowest that
   did not (`high`) until `high / low − 1` is at most `tolerance`.
3. **Stop** there, or when the next point would not fit in the time budget
   (a point still running when the budget ends is cancelled, kept in the
   file and marked cut), or when a measurement is void whatever the load
   (the reasoning ate the budget), or below `start / 1024`, or when a point
   did not offer the load it names (`offered_load`: the sessions cap the
   load, the trace is too short for the rate, or the client is saturated):
   a point counts only at the load it actually offered, and the search
   never reports a rate it did not offer; or before the first point, when
   the trace has fewer records than the SLO's strictest percentile needs
   (`too_short`), or at a point left with too few (`too few samples`): a
   percentile is judged only on `resampling.samples_needed` distinct
   records, and each point is sized for it (`requests_per_point`).

A point **holds** when every target held with confidence (`slo.judge`: the
far end of its bootstrap interval satisfies the target), the validity
checks found no error on it, and the server kept up with it (no
`queue_growing`: above the rate a server sustains, a finite point can still
meet a loose latency target, but only for as long as it lasts). An invalid
point (client saturated, errors over the limit, reasoning ate the budget)
never holds, whatever its figures.

The answer (`answer`) is a pure function of the judged points, so `compare`
and `report` recompute it from a results file: the lowest rate that did not
hold (cut points aside) is `high`, the highest that held below it is `low`.
docs/capacity.md explains the rule and how many requests a point runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from specreplay import _core
from specreplay.settings.config import Point, ReplayConfig
from specreplay.run.plan import FinishedPoint, Plan
from specreplay.analysis import verdicts as slo_verdicts
from specreplay.settings.objectives import Slo

if TYPE_CHECKING:
    # Annotations only: the analysis (pandas) is imported where used, so that
    # a command's --help loads none of it.
    from specreplay.analysis.analyse import PointAnalysis
    from specreplay.analysis.slo import TargetVerdict

#: Step statuses, the first the only one that holds. The first four are the
#: point's SLO verdicts (`analysis.verdicts`), read as the step's.
HELD = slo_verdicts.HELD
FAILED = slo_verdicts.FAILED
UNCERTAIN = slo_verdicts.UNCERTAIN
TOO_FEW_SAMPLES = slo_verdicts.TOO_FEW
INVALID = "invalid"
NOT_SUSTAINED = "not sustained"
NOT_OFFERED = "not offered"
CUT = "cut"

#: Findings that make a measurement void at any rate: the search stops on them.
VOID_AT_ANY_RATE = frozenset({"reasoning_ate_budget"})

#: Why a search ended (`Search.stop_reason`).
CONVERGED = "converged"
BUDGET = "budget"
VOID = "void"
FLOOR = "floor"
INTERRUPTED = "interrupted"
LOAD_NOT_OFFERED = "load not offered"
TOO_FEW_UNITS = slo_verdicts.TOO_FEW

#: A point's sends must reach this share of the rate it names (its schedule's
#: own rate, when the schedule is fixed in advance) to count at that rate.
MIN_OFFERED_RATIO = 0.9

DEFAULT_START = 1.0
DEFAULT_TOLERANCE = 0.05
DEFAULT_BUDGET_S = 1800.0
GROWTH = 2.0
#: The search gives up below start / FLOOR_FACTOR.
FLOOR_FACTOR = 1024.0


@dataclass(frozen=True)
class Settings:
    """How the search runs (config keys `rate`, `search_tolerance`, `search_budget`)."""

    start: float = DEFAULT_START
    tolerance: float = DEFAULT_TOLERANCE
    budget_s: float = DEFAULT_BUDGET_S
    growth: float = GROWTH

    def round(self, rate: float) -> float:
        """A rate rounded to the significant figures the tolerance needs (3 at
        5%), so that point names stay readable (`rate=96.9`)."""
        digits = max(3, math.ceil(-math.log10(self.tolerance)) + 1)
        return float(f"{rate:.{digits}g}")


def units_per_point(slo: Slo) -> int:
    """Distinct trace records (the unit a point's figures are resampled by)
    each point needs: the strictest `target_samples_needed` among the
    targets (500 for a p99, 50 for a p90, 10 for a p50)."""
    from specreplay.analysis.resampling import samples_needed  # pandas: imported where used (a command's --help needs none)
    from specreplay.analysis.slo import target_samples_needed

    return max([target_samples_needed(t) for t in slo.targets] + [samples_needed(0.5)])


def requests_per_point(slo: Slo, num_requests: int | None, warmup: int) -> int:
    """Requests each point sends: `units_per_point` plus the warmup, or
    `num_requests` when that is more."""
    return max(units_per_point(slo) + warmup, num_requests or 0)


def too_short(slo: Slo, records: int, warmup: int) -> str:
    """Why a trace of `records` records cannot size a point for the SLO's
    strictest percentile ("" when it can): a looped trace sends a record
    again, but a record sent twice is still one unit of the resampling."""
    needed = units_per_point(slo)
    if records >= needed + warmup:
        return ""
    from specreplay.analysis.slo import target_samples_needed

    strictest = max((t for t in slo.targets if t.quantile is not None), key=target_samples_needed, default=None)
    what = f"a {strictest.stat} target" if strictest is not None else "a point"
    extra = f" plus {warmup} warmup" if warmup else ""
    return (
        f"{what} needs {needed} distinct trace records per point{extra} (the unit its interval is resampled by; "
        f"docs/compare.md, \"The sample-count rule\"), and the trace has {records}: use a longer trace or a lower percentile"
    )


@dataclass(frozen=True)
class Step:
    """One point of a search, judged."""

    point: str
    rate: float
    status: str
    verdicts: tuple[TargetVerdict, ...] = ()
    invalid: tuple[str, ...] = ()
    """Codes of the validity errors found on the point."""
    behind: str = ""
    """What `queue_growing` said, when the server did not keep up."""
    not_offered: str = ""
    """Why the point's sends did not follow its rate (`offered_load`), when they did not."""
    offered: float = math.nan
    """The rate the point's schedule offered (`scheduled_rate_rps`): a
    Poisson sample of a few hundred arrivals is off its nominal rate by
    several percent, the same way at every rate under one seed."""

    @property
    def label(self) -> str:
        """`rate=19`, or `rate=19, offered 16.8 req/s` when the schedule was more than 2% off."""
        if math.isnan(self.offered) or abs(self.offered / self.rate - 1) <= 0.02:
            return self.point
        return f"{self.point}, offered {self.offered:.3g} req/s"

    @property
    def held(self) -> bool:
        return self.status == HELD

    def why(self, slo: Slo | None = None) -> str:
        """Why the point did not hold (or "held")."""
        if self.status == CUT:
            return "cut short by the time budget: no verdict"
        if self.status == NOT_OFFERED:
            return f"did not offer its load: {self.not_offered}"
        if self.status == INVALID:
            return f"invalid measurement ({', '.join(self.invalid)}): never taken as held"
        if self.status == NOT_SUSTAINED:
            return f"the server did not keep up (queue_growing): {self.behind}"
        if self.status == HELD:
            return "every target held"
        return "; ".join(v.describe(slo) for v in self.verdicts if not v.held)

    def to_dict(self) -> dict[str, Any]:
        offered = None if math.isnan(self.offered) else self.offered
        return {"point": self.point, "rate": self.rate, "offered": offered, "status": self.status, "invalid": list(self.invalid), "not_offered": self.not_offered}


def judge_point(point: PointAnalysis, cut: bool = False) -> Step:
    """The step a finished point makes: its status from its validity errors
    and its targets' verdicts (`point.slo_verdicts`)."""
    rate = float(point.value or 0.0)
    errors = tuple(sorted({f.code for f in point.findings if f.level == "error"}))
    behind = next((f.message.split(":")[0] for f in point.findings if f.code == "queue_growing"), "")
    verdicts = tuple(point.slo_verdicts)
    short = "" if cut else offered_load(point)
    if cut:
        status = CUT
    elif short:
        status = NOT_OFFERED
    elif errors:
        status = INVALID
    elif behind:
        status = NOT_SUSTAINED
    elif all(v.held for v in verdicts):
        status = HELD
    elif any(v.verdict == slo_verdicts.FAILED for v in verdicts):
        status = FAILED
    elif any(v.verdict == slo_verdicts.TOO_FEW for v in verdicts):
        status = TOO_FEW_SAMPLES
    else:
        status = UNCERTAIN
    return Step(point.point, rate, status, verdicts, errors, behind, short, float(point.summary.get("scheduled_rate_rps", math.nan)))


def offered_load(point: PointAnalysis) -> str:
    """Why an open-loop point did not offer the rate it names, or "" when it
    did. Its sends must reach `MIN_OFFERED_RATIO` of the rate: of its
    schedule's own rate when every arrival was scheduled in advance (a
    Poisson sample is off its nominal rate by a few percent, the same way at
    every rate under one seed), of the target itself when sessions' later
    turns wait for the turns before them."""
    if point.mode != "rate" or not point.value:
        return ""
    summary = point.summary
    target = float(point.value)
    sent = float(summary.get("send_rate_rps", math.nan))
    scheduled = float(summary.get("scheduled_rate_rps", math.nan))
    sessions = point.sessions
    has_sessions = not sessions.empty and len(sessions) < len(point.rows)
    reference = target if has_sessions or math.isnan(scheduled) else min(target, scheduled)
    n = int(point.rows["sent_us"].notna().sum())
    e2e_s = float(summary.get("e2e_p50_ms", math.nan)) / 1000
    span_s = (n - 1) / target if n > 1 else 0.0
    if math.isnan(sent) or sent >= MIN_OFFERED_RATIO * reference:
        return ""
    said = f"sent {sent:.3g} req/s for a target of {target:g}"
    if has_sessions:
        return (
            f"{said}: the sessions cap the load ({len(sessions)} sessions for {len(point.rows)} requests; each later turn "
            "waits for the turn before it, so more sessions at once, not a higher rate, would raise it; "
            "`--sessions independent` sends every turn at its own place in the schedule)"
        )
    if any(f.code == "client_saturated" for f in point.findings):
        return f"{said}: the client is saturated (client_saturated), so the load it names was never sent"
    if not math.isnan(e2e_s) and span_s < e2e_s:
        return f"{said}: the trace is too short for the rate ({n} requests are sent in {span_s:.3g} s, less than one request's E2E p50 of {e2e_s:.3g} s)"
    return f"{said}: the requests did not leave on their schedule"


@dataclass(frozen=True)
class Answer:
    """What a search found: `low`, the highest rate that held below `high`,
    the lowest rate that did not (either None when no point was so)."""

    low: Step | None
    high: Step | None
    steps: tuple[Step, ...]
    stop_reason: str | None = None
    tolerance: float = DEFAULT_TOLERANCE
    short: str = ""
    """Why the trace could not size a point for the SLO (`too_short`), when it could not."""

    @property
    def max_rate(self) -> float | None:
        return self.low.rate if self.low is not None else None

    @property
    def width(self) -> float:
        """high / low − 1: how far the answer may be below the true limit."""
        if self.low is None or self.high is None:
            return math.nan
        return self.high.rate / self.low.rate - 1

    @property
    def above_failure(self) -> list[Step]:
        """Points that held at a rate above `high`: the verdict was not
        monotonic in the rate (noise, or a server whose behaviour changes)."""
        if self.high is None:
            return []
        return [s for s in self.steps if s.held and s.rate > self.high.rate]

    def lines(self, slo: Slo | None = None) -> list[str]:
        """The answer in words, one line per fact."""
        out = []
        judged = [s for s in self.steps if s.status not in (CUT, NOT_OFFERED)]
        short = next((s for s in self.steps if s.status == NOT_OFFERED), None)
        if self.low is not None:
            out.append(f"max rate holding the SLOs: {self.low.rate:g} req/s ({self.low.label})")
        elif judged:
            out.append(f"no rate held the SLOs (lowest tried: {min(s.rate for s in judged):g} req/s)")
        elif self.short:
            out.append(f"no answer: {self.short}")
        elif short is not None:
            out.append("no answer: no point offered the load it names")
        else:
            out.append("no answer: " + ("no point finished before the time budget ran out" if self.steps else "no point ran"))
        if self.high is not None:
            out.append(f"first rate that did not hold: {self.high.rate:g} req/s ({self.high.label}) — {self.high.why(slo)}")
        elif short is not None:
            out.append(f"no limit found: {short.point} {short.why()}")
            out.append("  the limit is above the highest rate offered and held, if any; the search cannot go higher with this trace")
        elif judged:
            out.append("every rate tried held: the limit is above the highest one")
        if self.low is not None and self.high is not None:
            out.append(f"bracket [{self.low.rate:g}, {self.high.rate:g}) req/s, {self.width:.1%} wide (tolerance {self.tolerance:.0%})")
        for step in self.above_failure:
            out.append(f"note: {step.point} held above the first failure: the verdict is not monotonic in the rate here (noise, or a server that changes behaviour); the answer takes the lower rate")
        for step in self.steps:
            if step.status == INVALID:
                out.append(f"note: {step.point} is an invalid measurement ({', '.join(step.invalid)}) and was not taken as held")
            elif step.status == CUT:
                out.append(f"note: {step.point} was {step.why()}")
            elif step.status == NOT_OFFERED and self.high is not None:
                out.append(f"note: {step.point} {step.why()}")
        if self.stop_reason is not None:
            out.append(f"stopped: {STOP_REASONS.get(self.stop_reason, self.stop_reason)}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_rate": self.max_rate,
            "low": self.low.point if self.low else None,
            "high": self.high.point if self.high else None,
            "width": None if math.isnan(self.width) else self.width,
            "stop_reason": self.stop_reason,
            "tolerance": self.tolerance,
            "steps": [s.to_dict() for s in self.steps],
        }


STOP_REASONS = {
    CONVERGED: "the bracket is within the tolerance",
    BUDGET: "the time budget ran out",
    VOID: "the measurement is void at any rate (fix it first: see the findings)",
    FLOOR: "no rate held down to the search's floor (start / 1024)",
    INTERRUPTED: "interrupted",
    LOAD_NOT_OFFERED: "a point did not offer the load it names, so no higher rate can be judged with this trace and setup",
    TOO_FEW_UNITS: "a point cannot have enough trace records for its SLO's percentile, so no rate can be judged with this trace",
}


def answer(steps: Sequence[Step], stop_reason: str | None = None, tolerance: float = DEFAULT_TOLERANCE) -> Answer:
    """The answer the judged `steps` give (see the module doc)."""
    judged = [s for s in steps if s.status not in (CUT, NOT_OFFERED)]
    not_held = [s for s in judged if not s.held]
    high = min(not_held, key=lambda s: s.rate) if not_held else None
    held = [s for s in judged if s.held and (high is None or s.rate < high.rate)]
    low = max(held, key=lambda s: s.rate) if held else None
    return Answer(low, high, tuple(steps), stop_reason, tolerance)


@dataclass
class Search:
    """The search's state: which rate to run next, given the steps so far."""

    settings: Settings
    steps: list[Step] = field(default_factory=list)
    stop_reason: str | None = None

    def record(self, step: Step) -> None:
        self.steps.append(step)
        if step.status == CUT:
            self.stop_reason = BUDGET
        elif step.status == NOT_OFFERED:
            self.stop_reason = LOAD_NOT_OFFERED
        elif step.status == TOO_FEW_SAMPLES:
            self.stop_reason = TOO_FEW_UNITS
        elif step.status == INVALID and VOID_AT_ANY_RATE.intersection(step.invalid):
            self.stop_reason = VOID

    @property
    def answer(self) -> Answer:
        return answer(self.steps, self.stop_reason, self.settings.tolerance)

    def next_rate(self) -> float | None:
        """The next rate to run, or None (and `stop_reason` set) when done."""
        if self.stop_reason is not None:
            return None
        if not self.steps:
            return self.settings.round(self.settings.start)
        found = self.answer
        low, high = found.low, found.high
        if high is None:
            assert low is not None  # every judged step held
            return self.settings.round(low.rate * self.settings.growth)
        if low is None:
            rate = self.settings.round(high.rate / self.settings.growth)
            if rate < self.settings.start / FLOOR_FACTOR:
                self.stop_reason = FLOOR
                return None
            return rate
        if high.rate / low.rate - 1 <= self.settings.tolerance:
            self.stop_reason = CONVERGED
            return None
        mid = self.settings.round((low.rate + high.rate) / 2)
        if not low.rate < mid < high.rate:  # rounding left no rate in between
            self.stop_reason = CONVERGED
            return None
        return mid


class SearchPlan(Plan):
    """The points of a `find_max_rate` run (see the module doc): drives the
    search through `replay.run_replay`, one rate point at a time."""

    searching = True

    def __init__(self, config: ReplayConfig, now_us: Callable[[], float] | None = None) -> None:
        super().__init__([])

        self.config = config
        self.slo = config.slo_settings()
        self.settings = Settings(
            start=config.rate[0] if config.rate else DEFAULT_START,
            tolerance=config.search_tolerance,
            budget_s=config.search_budget,
        )
        self.search = Search(self.settings)
        self.requests = requests_per_point(self.slo, config.num_requests, config.warmup)
        self.units = units_per_point(self.slo)
        #: Why the trace cannot size a point (`too_short`), once `start` has seen it.
        self.short = ""
        self.now_us = now_us or _core.now_us
        self.started_us: float | None = None

    def start(self, records: int) -> str | None:
        """Before the first point: how each point is sized; a trace too short
        for the SLO's strictest percentile stops the search before it runs a
        point it could not judge."""
        self.short = too_short(self.slo, records, self.config.warmup)
        if self.short:
            self.search.stop_reason = TOO_FEW_UNITS
            return f"capacity search: {self.short}"
        return (
            f"capacity search: {self.requests} requests per point, to have the {self.units} distinct trace records "
            f"the SLO's strictest percentile needs (docs/capacity.md)"
        )

    def next_point(self) -> Point | None:
        if self.started_us is None:
            self.started_us = self.now_us()
        rate = self.search.next_rate()
        if rate is None:
            return None
        # Sending alone takes requests / rate: a point that cannot even send
        # its requests before the budget ends is not started.
        sending_s = self.requests / rate if self.config.duration is None else min(self.requests / rate, self.config.duration)
        left_s = self.settings.budget_s - (self.now_us() - self.started_us) / 1e6
        if sending_s > left_s:
            self.search.stop_reason = BUDGET
            return None
        return Point("rate", rate)

    def num_requests(self, config: ReplayConfig) -> int | None:
        return self.requests

    @property
    def deadline_us(self) -> float | None:
        return None if self.started_us is None else self.started_us + self.settings.budget_s * 1e6

    def status(self) -> str | None:
        if not self.search.steps:
            return None
        found = self.search.answer
        low = f"{found.low.rate:g}" if found.low else "—"
        high = f"{found.high.rate:g}" if found.high else "—"
        return f"[{low}, {high}) req/s"

    def finished(self, finished: FinishedPoint) -> None:
        point = next((p for run in finished.runs for p in run.points if p.point == finished.point.name), None)
        if point is None:  # not one request finished
            step = Step(finished.point.name, finished.point.value, CUT)
        else:
            step = judge_point(point, cut=finished.cut)
        self.search.record(step)
        if finished.interrupted:
            self.search.stop_reason = INTERRUPTED

    def result(self, interrupted: bool = False) -> Answer:
        if interrupted:
            self.search.stop_reason = INTERRUPTED
        return replace(self.search.answer, short=self.short)
