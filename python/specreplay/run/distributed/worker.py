"""The worker: a Ray actor that runs sweep points on the Rust engine exactly
as a local replay does (`feed.Feeder`: the trace read as a stream, the same
pacing thread, the same kernel receive stamps) and hands finished rows back
as Arrow record batches, one per drain. It reads the trace file itself (the
same path on every node) and feeds its engine all of it; the engine keeps
this worker's share (`split`).

The actor is threaded (`max_concurrency` above 1) so that `cancel` and the
clock pings are served while a `next_batch` call waits on the engine."""

from __future__ import annotations

import os
import platform
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from specreplay import _core
from specreplay._core import EngineRun

from specreplay.errors import SpecreplayError
from specreplay.run.feed import Feeder
from specreplay.settings.config import ReplayConfig
from specreplay.trace.index import TraceIndex

if TYPE_CHECKING:
    from specreplay._core import RunSpec  # a TypedDict of the stub alone


class Worker:
    """What the actor runs (`driver` wraps it with `ray.remote`)."""

    def __init__(self, index: int, nice: int) -> None:
        self.index = index
        self.nice = nice
        self.run: EngineRun | None = None
        self.feeder: Feeder | None = None
        #: A trace that turned bad while it was fed: raised once the point is drained.
        self.failure: SpecreplayError | None = None

    def identity(self) -> dict[str, Any]:
        """Where this worker runs: the `worker` column's value and the metadata's."""
        import ray

        context = ray.get_runtime_context()
        node_ip = ray.util.get_node_ip_address()
        return {
            "worker": f"w{self.index}@{node_ip}",
            "index": self.index,
            "node_id": context.get_node_id(),
            "node_ip": node_ip,
            "host": platform.node(),
            "actor_id": context.get_actor_id(),
            "pid": os.getpid(),
        }

    def now_us(self) -> int:
        """This process's engine clock (`clock.measure` pings it)."""
        return _core.now_us()

    def start(self, spec: RunSpec, trace: TraceIndex, config: ReplayConfig, url: str, model: str | None) -> int:
        """Starts this worker's share of a point (`spec["share"]`), its clock
        starting at `spec["start_at_us"]` on this worker's clock, fed from
        the trace as a local replay's point is; returns the niceness its
        engine runs at."""
        _set_nice(self.nice)
        self.feeder = Feeder(trace, config, url, model)
        self.failure = None
        self.run = self.feeder.start(spec)
        return os.getpriority(os.PRIO_PROCESS, 0)

    def next_batch(self, max_rows: int, wait_s: float) -> tuple[pa.RecordBatch | None, dict[str, int], bool]:
        """Finished rows (None when there are none yet), the engine's
        counters, and whether the point is over and drained."""
        assert self.run is not None and self.feeder is not None, "next_batch before start"
        if self.failure is None:
            try:
                self.feeder.top_up(self.run)
            except SpecreplayError as e:
                self.failure = e
                self.run.cancel()
        batch = self.run.next_batch(max_rows, wait_s)
        p = self.run.progress()
        progress = {"scheduled": p.scheduled, "sent": p.sent, "finished": p.finished, "failed": p.failed, "output_tokens": p.output_tokens}
        if batch is None:
            self.run = self.feeder = None
            if self.failure is not None:
                raise self.failure
            return None, progress, True
        return (pa.record_batch(batch) if len(batch) else None), progress, False

    def cancel(self) -> None:
        """Stops scheduling; requests in flight end as `cancelled` rows."""
        if self.run is not None:
            self.run.cancel()

    def pid(self) -> int:
        return os.getpid()


def _set_nice(nice: int) -> None:
    """Gives every thread of this process the driver's niceness. Ray starts
    its workers at nice 15: at that share of a busy machine the engine's
    pacing thread sends late (measured: send lag p99 of 120–620 ms where the
    same load at nice 0 had 5–10 ms; docs/benchmarks.md). Linux keeps
    niceness per thread, and the engine's threads, started from this one,
    inherit it. Lowering it needs CAP_SYS_NICE (or an RLIMIT_NICE that allows
    it): without, the worker keeps Ray's, and the results metadata says so
    (`nice` per worker and point)."""
    for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else [str(os.getpid())]:
        try:
            os.setpriority(os.PRIO_PROCESS, int(tid), nice)
        except OSError:
            pass
