"""The validity checks of the load itself (`checks` has the rest, and the
order): whether the client kept the schedule (client_saturated,
dependent_turns_late, engine_delay, worker_send_lag) or the machine held it
up (host_stalled), whether the server
kept up (queue_growing), and whether a worker or the engine was lost
(worker_lost, engine_panic)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from specreplay.analysis.finding import Finding, Level
from specreplay.analysis.point import OPEN_LOOP_MODES
from specreplay.analysis.summary_row import SummarisedPoint
from specreplay.results import derived

#: queue_growing: successful requests needed before a slope of TTFT over the send time is fitted.
MIN_SLOPE_REQUESTS = 10


def client_saturated(point: SummarisedPoint) -> Finding | None:
    rows, summary_row, thresholds = point.rows, point.summary, point.thresholds
    if point.mode not in OPEN_LOOP_MODES:
        # Closed loop: sends wait for the server by design, but a session's
        # later turn has a schedule (its predecessor's end plus its think time).
        return dependent_turns_late(point)
    problems: list[str] = []
    level: Level = "warning"
    lag_p99 = float(summary_row["send_lag_p99_ms"])
    if lag_p99 > thresholds.send_lag_p99_ms and machine_hold(point) is None:
        problems.append(
            f"send lag p99 is {lag_p99:.3f} ms (limit {thresholds.send_lag_p99_ms:g} ms): "
            "requests left later than scheduled, so the offered load was lower and burstier than planned"
            + pacer_held_up(point.scheduling, thresholds.send_lag_p99_ms)
            + host_steal(point.scheduling)
        )
    scheduled = float(summary_row["scheduled_rate_rps"])
    rate = float(summary_row["send_rate_rps"])
    # Sends against the schedule's own rate, not the nominal target: a short
    # Poisson sample may offer 6/s for a target of 8/s, and that is the
    # arrival process, not the client. Nor completions/duration: the tail of
    # the last responses would count as client slowness.
    if not math.isnan(scheduled) and not math.isnan(rate) and rate < thresholds.min_rate_ratio * scheduled:
        level = "error"
        problems.append(
            f"requests were sent at {rate:.2f}/s while the schedule offered {scheduled:.2f}/s "
            f"(below {thresholds.min_rate_ratio:.0%}): this point did not measure the load it names"
        )
    if not problems:
        return None
    return Finding(
        code="client_saturated",
        level=level,
        point=point.point,
        count=int(rows["sent_us"].notna().sum()),
        message="The client could not keep up: " + "; ".join(problems) + ". Lower the load per client host, or check that it is not a debug build or a busy machine.",
    )


@dataclass(frozen=True)
class MachineHold:
    """A late point's send lag, split between the spans in which the
    machine held the client up (its real-time pacing thread, or a CPU its
    threads run on) and the rest."""

    pacer_spans: int
    """The pacer's waits that ended 250 µs or more late (`specreplay.scheduling`'s `pacer_held_us`, and those dropped)."""
    cpu_spans: int
    """The spans a CPU was taken from the engine (`cpu_held_us`, and those dropped): its real-time watch woke 250 µs or more late, unseen by the guest's run queue."""
    dropped: int
    """Of them, those the engine did not keep (`pacer_held_dropped`, `cpu_held_dropped`): not in the split below."""
    held_ms: float
    """How long at least one of them lasted (overlapping spans counted once)."""
    worst_ms: float
    held_sends: int
    """Sends due within a span, or in its wake: as long again as the span, at least 1 ms (the backlog it left)."""
    held_lag_max_ms: float
    other_sends: int
    other_lag_p99_ms: float

    @property
    def spans(self) -> int:
        return self.pacer_spans + self.cpu_spans

    @property
    def whose(self) -> str:
        """Whose spans they were, for the finding's message."""
        if self.pacer_spans and self.cpu_spans:
            return "its real-time pacing thread and the CPUs its threads run on"
        return "its real-time pacing thread" if self.pacer_spans else "the CPUs its threads run on"


#: After a span the pacer was held up, the sends due this long again (at
#: least) are counted as its: the backlog takes the pacer and the workers a
#: moment to send.
HOLD_WAKE_MIN_US = 1000.0


def machine_hold(point: SummarisedPoint) -> MachineHold | None:
    """Whether a point's late sends are the machine's: its pacing thread ran
    real-time (nothing in user space could hold it up, so whatever did was
    the kernel or the hypervisor), it or a watched CPU lost at least one
    span, and the sends outside those spans kept the schedule (p99 within
    the limit). None otherwise: the client fell behind (`client_saturated`)."""
    got = point.scheduling or {}
    pacer_spans, cpu_spans = got.get("pacer_held_us") or [], got.get("cpu_held_us") or []
    if not (pacer_spans or cpu_spans) or not str(got.get("pacer")).startswith("SCHED_FIFO"):
        return None
    rows = point.rows
    scheduled = derived.as_float(rows, "scheduled_us").to_numpy()
    # The summary's own send lag column (`send_lag_us`, results.derived): its p99 is of these.
    lag_ms = derived.as_float(rows, "send_lag_us").to_numpy() / 1000
    sent = ~np.isnan(lag_ms)
    scheduled, lag_ms = scheduled[sent], lag_ms[sent]
    bounds = np.array(sorted([*pacer_spans, *cpu_spans]), dtype=float)
    start, end = bounds[:, 0], bounds[:, 1]
    # Spans sorted by start may overlap in their wakes: a send is held when
    # any span before it reaches it, so the reach is the running maximum.
    reach = np.maximum.accumulate(end + np.maximum(end - start, HOLD_WAKE_MIN_US))
    k = np.searchsorted(start, scheduled, side="right") - 1
    held = (k >= 0) & (scheduled <= reach[np.clip(k, 0, None)])
    others = lag_ms[~held]
    other_p99 = float(np.percentile(others, 99)) if len(others) else 0.0
    if other_p99 > point.thresholds.send_lag_p99_ms:
        return None
    pacer_dropped, cpu_dropped = int(got.get("pacer_held_dropped") or 0), int(got.get("cpu_held_dropped") or 0)
    return MachineHold(
        pacer_spans=len(pacer_spans) + pacer_dropped,
        cpu_spans=len(cpu_spans) + cpu_dropped,
        dropped=pacer_dropped + cpu_dropped,
        held_ms=covered_us(start, end) / 1000,
        worst_ms=float((end - start).max()) / 1000,
        held_sends=int(held.sum()),
        held_lag_max_ms=float(lag_ms[held].max()) if held.any() else 0.0,
        other_sends=len(others),
        other_lag_p99_ms=other_p99,
    )


def covered_us(start: np.ndarray, end: np.ndarray) -> float:
    """How long at least one of the spans [start, end) lasts, `start` sorted:
    two CPUs stalled at once are one stall of the client."""
    reach = np.maximum.accumulate(end)
    # Each span adds what reaches past everything before it.
    before = np.concatenate(([-np.inf], reach[:-1]))
    return float(np.clip(end - np.maximum(start, before), 0, None).sum())


def host_stalled(point: SummarisedPoint) -> Finding | None:
    """An open-loop point whose send lag p99 is over the limit only because
    the machine held the real-time client up (`machine_hold`)."""
    if point.mode not in OPEN_LOOP_MODES:
        return None
    lag_p99, limit = float(point.summary["send_lag_p99_ms"]), point.thresholds.send_lag_p99_ms
    if not lag_p99 > limit:
        return None
    hold = machine_hold(point)
    if hold is None:
        return None
    dropped = f" ({hold.dropped:,} of them not kept, so not counted below)" if hold.dropped else ""
    return Finding(
        code="host_stalled",
        level="warning",
        point=point.point,
        count=hold.held_sends,
        message=(
            f"The machine held the client up: {hold.whose} lost {hold.spans} span{'s' if hold.spans != 1 else ''} of 0.25 ms or more{dropped} "
            f"(up to {hold.worst_ms:.1f} ms, {hold.held_ms:.1f} ms in all) to the kernel or the hypervisor. The {hold.held_sends:,} "
            f"sends due then or just after left up to {hold.held_lag_max_ms:.1f} ms late, so the send lag p99 is {lag_p99:.3f} ms "
            f"(limit {limit:g} ms); the other {hold.other_sends:,} kept the schedule (p99 {hold.other_lag_p99_ms:.3f} ms): "
            "the client was not the bottleneck" + host_steal(point.scheduling)
            + ". Requests sent in those spans carry the stall in their latencies; "
            "a machine without stolen CPU time (a dedicated host) measures without it."
        ),
    )


def host_steal(scheduling: dict[str, Any] | None) -> str:
    """The steal time the hypervisor reported while the point ran
    (`specreplay.scheduling`'s `host_steal_ms`), when there was any: CPU
    time this VM's vCPUs lost to other tenants, which its own scheduler
    cannot see."""
    stolen = (scheduling or {}).get("host_steal_ms")
    if not isinstance(stolen, (int, float)) or stolen <= 0:
        return ""
    return f" (while it ran, the hypervisor took {stolen:,.0f} ms of CPU time from this machine's vCPUs: a busy host)"


def pacer_held_up(scheduling: dict[str, Any] | None, limit_ms: float) -> str:
    """What the pacing thread's own wake-ups say of a late point (`specreplay.scheduling`):
    a pacer that woke later than the limit was itself kept from the CPU.
    Real-time, nothing in user space can keep it: the machine did (the kernel,
    the hypervisor, a real-time tenant). At the normal policy, anything could."""
    got = scheduling or {}
    late_max = got.get("pacer_late_max_us")
    if not isinstance(late_max, int) or late_max < limit_ms * 1000:
        return ""
    said = f" (the pacing thread itself woke up to {late_max / 1000:.1f} ms late"
    if str(got.get("pacer")).startswith("SCHED_FIFO"):
        return said + ", real-time: the machine held the process up (the kernel, the hypervisor or a real-time tenant), so part of this lag is the machine's, not the client's load)"
    return said + ": it waited for a CPU behind other threads or processes; --realtime, where permitted, puts it ahead of them)"


def dependent_turns_late(point: SummarisedPoint) -> Finding | None:
    lag_p99, limit = float(point.summary["turn_lag_p99_ms"]), point.thresholds.send_lag_p99_ms
    if math.isnan(lag_p99) or lag_p99 <= limit:
        return None
    return Finding(
        code="client_saturated",
        level="warning",
        point=point.point,
        count=int(derived.as_float(point.rows, "predecessor_end_us").notna().sum()),
        message=(
            f"The client could not keep up: the later turns of sessions (due when the turn before ended, plus "
            f"the think time) left later than scheduled: their send lag p99 is {lag_p99:.3f} ms (limit {limit:g} ms), "
            "so users waited longer between turns than the trace says. Lower the load per client host, "
            "or check that it is not a debug build or a busy machine."
        ),
    )


def engine_delay(point: SummarisedPoint) -> Finding | None:
    summary_row, thresholds = point.summary, point.thresholds
    delay_p99 = float(summary_row["engine_delay_p99_ms"])
    if math.isnan(delay_p99) or delay_p99 <= thresholds.engine_delay_p99_ms:
        return None
    return Finding(
        code="engine_delay",
        level="warning",
        point=point.point,
        count=int(summary_row["ok"]),
        message=(
            f"The client was saturated: its own delay p99 was {delay_p99:.3f} ms "
            f"(limit {thresholds.engine_delay_p99_ms:g} ms) between the kernel receiving a chunk and the engine reading it. "
            "The kernel stamps are unaffected, but the send schedule may not be: "
            "a closed-loop request goes out only once the engine has read the previous answer."
        ),
    )


def queue_growing(point: SummarisedPoint) -> Finding | None:
    """Open loop: the server fell behind the offered rate when TTFT grows
    steadily with the send time (least-squares slope, seconds of TTFT per
    second of sending: 1 − served / offered rate for a saturated server; 0
    for one that keeps up)."""
    if point.mode not in OPEN_LOOP_MODES:
        return None
    ok, thresholds = point.ok_rows, point.thresholds
    sent = derived.as_float(ok, "sent_us").to_numpy() / 1e6
    ttft = derived.as_float(ok, "ttft_us").to_numpy() / 1e6
    keep = ~(np.isnan(sent) | np.isnan(ttft))
    sent, ttft = sent[keep], ttft[keep]
    span = float(sent.max() - sent.min()) if len(sent) else 0.0
    if len(sent) < MIN_SLOPE_REQUESTS or span <= 0:
        return None
    growth = float(np.polyfit(sent - sent.min(), ttft, 1)[0])
    if growth <= thresholds.max_queue_growth:
        return None
    return Finding(
        code="queue_growing",
        level="warning",
        point=point.point,
        count=len(sent),
        message=(
            f"TTFT grew by {growth * 1000:,.0f} ms per second of sending ({growth * span * 1000:,.0f} ms over the point's {span:.1f} s; "
            f"limit {thresholds.max_queue_growth:g} s/s): the server did not keep up with the offered rate, so each request "
            "queued longer than the one before. This point's latencies grow with its length, whatever they are now; "
            "a capacity search never takes it as held."
        ),
    )


def worker_lost(point: SummarisedPoint) -> Finding | None:
    rows = point.rows
    lost = rows[rows["error_kind"] == "worker_lost"]
    if lost.empty:
        return None
    workers = ", ".join(sorted(str(w) for w in lost["worker"].dropna().unique())) if "worker" in lost else "?"
    return Finding(
        code="worker_lost",
        level="error",
        point=point.point,
        count=len(lost),
        message=(
            f"{len(lost)} of {len(rows)} requests were lost with their Ray worker ({workers}): "
            "the point did not apply the load it names. Their rows have error kind worker_lost; "
            "the other workers' rows are complete."
        ),
    )


def engine_panic(point: SummarisedPoint) -> Finding | None:
    """A request's task panicked in the engine: a bug in specreplay, never the server's doing."""
    rows = point.rows
    panicked = rows[rows["error_kind"] == "engine_panic"]
    if panicked.empty:
        return None
    first = panicked.iloc[0]
    return Finding(
        code="engine_panic",
        level="error",
        point=point.point,
        count=len(panicked),
        message=(
            f"{len(panicked)} of {len(rows)} requests failed inside specreplay's engine (a panic; "
            f"first: request {first['request_index']}, {first['error_message']!r}): their measurements are "
            "gone and the point did not apply the load it names. This is a bug in specreplay; "
            "please report it with the message."
        ),
    )


def worker_send_lag(point: SummarisedPoint) -> Finding | None:
    """A distributed point's send lag per worker: which host could not keep its schedule."""
    rows = point.rows
    if "worker" not in rows or rows["worker"].nunique() < 2 or point.mode not in OPEN_LOOP_MODES:
        return None
    lag_ms = (derived.as_float(rows, "sent_us") - derived.as_float(rows, "scheduled_us")) / 1e3
    parts = []
    for worker, lag in lag_ms.groupby(rows["worker"]):
        lag = lag.dropna()
        if len(lag):
            parts.append(f"{worker} p50 {lag.quantile(0.5):.3f} / p99 {lag.quantile(0.99):.3f} ms ({len(lag)} sent)")
    return Finding(
        code="worker_send_lag",
        level="note",
        point=point.point,
        count=int(rows["sent_us"].notna().sum()),
        message="send lag by worker: " + "; ".join(parts),
    )
