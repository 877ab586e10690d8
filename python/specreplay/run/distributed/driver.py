"""The driver side of a distributed replay: a `Cluster` of worker actors,
and the `DistributedRun` of one sweep point, which `point.run_point`
drains exactly like the engine's own `EngineRun` (`next_batch`, `progress`,
`cancel`), so the results writer, the crash-safe `.partial` stream, the
scraper and the tokenizer recount are those of a local replay.

Per point: the worker clocks are measured (`clock.measure`), one absolute
start instant is chosen on the driver's clock and handed to each worker on
its own clock, and each worker is told its share of the point (`split`).
Each worker reads the trace itself and feeds its own engine as a local
replay does (`feed.Feeder`): the driver's feeder only says what to read, and
feeds nothing. Each drain call returns one record batch per worker: nothing
per chunk crosses Ray. A worker whose actor dies has its unfinished
requests written as `worker_lost` rows.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from specreplay import _core
from specreplay.run.distributed import clock, import_ray, loopback, split
from specreplay.run.distributed.worker import Worker
from specreplay.run.feed import Feeder
from specreplay.errors import ConfigError, EngineError
from specreplay.results.schema import engine_schema

if TYPE_CHECKING:
    from specreplay._core import RunSpec  # a TypedDict of the stub alone

#: Between choosing the start instant and the first send: time for every
#: worker to receive its spec and open its connections. A worker that is not
#: ready by then starts at once, and its lateness is its send lag.
START_LEAD_US = 1_500_000

#: The error kind of a request whose worker died before reporting it.
WORKER_LOST = "worker_lost"

#: `--ray` without an address: start a local Ray instance for the run.
LOCAL = "local"

#: What each worker hands back per call: at most this many rows, after
#: waiting at most this long (as `replay.POLL_S` for a local run).
DRAIN_ROWS = 4096
DRAIN_WAIT_S = 0.25


@dataclass
class Counters:
    """The sum of the workers' engine counters (what `EngineProgress` gives)."""

    scheduled: int = 0
    sent: int = 0
    finished: int = 0
    failed: int = 0
    output_tokens: int = 0


class Cluster:
    """N worker actors on a Ray cluster (a local one for `address="local"`)."""

    def __init__(self, address: str, workers: int) -> None:
        ray = import_ray()
        if workers < 1:
            raise ConfigError(f"workers: must be at least 1, got {workers}")
        self.ray = ray
        self.started_ray = False
        # A process already connected to Ray (a notebook, the tests) keeps
        # its connection, whatever the address says.
        if not ray.is_initialized():
            import logging

            kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
            try:
                if address == LOCAL:
                    # A new instance here (never one that `ray start` left
                    # running), reachable from this machine only.
                    loopback.init_local(ray, num_cpus=max(workers, os.cpu_count() or 1), **kwargs)
                else:
                    ray.init(address=address, include_dashboard=False, **kwargs)
            except ConfigError:
                raise
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise ConfigError(f"--ray {address}: could not connect to the Ray cluster ({e})") from None
            self.started_ray = True
        actor = ray.remote(num_cpus=1, max_concurrency=4, max_restarts=0, scheduling_strategy="SPREAD")(Worker)
        nice = os.getpriority(os.PRIO_PROCESS, 0)
        self.actors = [actor.remote(k, nice) for k in range(workers)]
        self.identities: list[dict[str, Any]] = ray.get([a.identity.remote() for a in self.actors])
        #: Per point started: the clock offsets measured (results metadata).
        self.points: list[dict[str, Any]] = []
        #: Workers lost in an earlier point: later points share over the rest.
        self.lost: set[int] = set()

    def start_point(self, spec: RunSpec, feeder: Feeder, label: str, point: str) -> DistributedRun:
        """Starts `spec` shared over the workers, every one at the same
        instant, each fed by its own `Feeder` like `feeder`."""
        ray = self.ray
        members = [k for k in range(len(self.actors)) if k not in self.lost]
        if not members:
            raise EngineError("every Ray worker was lost in an earlier point: the remaining points were not run")
        n = len(members)
        actors = [self.actors[k] for k in members]
        names = [self.identities[k]["worker"] for k in members]
        load = spec["load"]
        concurrency = split.concurrency_shares(load["concurrency"], n) if load["mode"] == "concurrency" else None
        if concurrency is not None and min(concurrency) == 0:
            raise ConfigError(f"--concurrency {sum(concurrency)} is below --workers {n}: every worker needs one request in flight")
        max_concurrency = spec.get("max_concurrency")
        caps = split.concurrency_shares(max_concurrency, n) if max_concurrency else None
        shares = split.shares(n)
        offsets = [clock.measure(_core.now_us, _pinger(ray, a)) for a in actors]
        start_us = _core.now_us() + START_LEAD_US
        trace, config = ray.put(feeder.index), ray.put(feeder.config)
        specs: list[RunSpec] = []
        for k in range(n):
            worker_spec: RunSpec = {**spec, "share": shares[k], "start_at_us": start_us + offsets[k].offset_us}
            if concurrency is not None:
                worker_spec["load"] = {"mode": "concurrency", "concurrency": concurrency[k]}
            if caps is not None:
                worker_spec["max_concurrency"] = max(caps[k], 1)
            specs.append(worker_spec)
        nice = ray.get([a.start.remote(s, trace, config, feeder.url, feeder.model) for a, s in zip(actors, specs)])
        self.points.append({
            "label": label, "point": point, "start_us": start_us,
            "workers": [{"worker": names[i], **offsets[i].to_dict(), "nice": nice[i]} for i in range(n)],
        })  # fmt: skip
        return DistributedRun(self, members, specs, feeder)

    def metadata(self) -> dict[str, Any]:
        """The `specreplay.workers` metadata: who ran, and each point's clock offsets."""
        return {"workers": self.identities, "points": self.points}

    def close(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor)
        if self.started_ray:
            self.ray.shutdown()


class DistributedRun:
    """One point running on every worker; drained like `_core.EngineRun`.
    Workers are numbered by their position in `members` (the cluster's
    workers not lost before this point), as their shares are."""

    def __init__(self, cluster: Cluster, members: list[int], specs: list[RunSpec], feeder: Feeder) -> None:
        self.cluster = cluster
        self.actors = [cluster.actors[k] for k in members]
        self.names: list[str] = [cluster.identities[k]["worker"] for k in members]
        self.members = members
        self.specs = specs
        self.feeder = feeder
        self.counters = [Counters() for _ in specs]
        self.received: list[set[int]] = [set() for _ in specs]
        self.pending: dict[Any, int] = {}
        self.lost: list[int] = []
        for k in range(len(specs)):
            self._ask(k, DRAIN_ROWS, DRAIN_WAIT_S)

    def _ask(self, k: int, max_rows: int, wait_s: float) -> None:
        self.pending[self.actors[k].next_batch.remote(max_rows, wait_s)] = k

    def next_batch(self, max_rows: int = 4096, wait_s: float = 0.25) -> pa.RecordBatch | None:
        """The next worker's finished rows with their `worker` column (an
        empty batch when none came within `wait_s`); None when every worker
        is over and drained."""
        ray = self.cluster.ray
        if not self.pending:
            return None
        ready, _ = ray.wait(list(self.pending), num_returns=1, timeout=wait_s)
        if not ready:
            return pa.RecordBatch.from_pylist([])
        ref = ready[0]
        k = self.pending.pop(ref)
        try:
            batch, progress, done = ray.get(ref)
        except ray.exceptions.RayActorError as e:
            self.lost.append(k)
            self.cluster.lost.add(self.members[k])
            return self._lost_rows(k, e)
        self.counters[k] = Counters(**progress)
        if not done:
            self._ask(k, max_rows, wait_s)
        if batch is None:
            return pa.RecordBatch.from_pylist([])
        self.received[k].update(batch.column("request_index").to_pylist())
        return _with_worker(batch, self.names[k])

    def _lost_rows(self, k: int, cause: Exception) -> pa.RecordBatch:
        """Worker `k`'s requests it never reported, as `worker_lost` rows."""
        name = self.names[k]
        warmup = int(self.specs[k].get("warmup") or 0)
        reason = f"worker {name} was lost before reporting this request ({type(cause).__name__})"
        rows = []
        for index, trace_id, api in self._given(k):
            if index in self.received[k]:
                continue
            rows.append({
                "request_index": index, "trace_id": trace_id, "api": api, "warmup": index < warmup,
                "error_kind": WORKER_LOST, "error_message": reason,
                "chunk_count": 0, "chunk_ts_us": [], "chunk_tokens": [], "chunk_channel": [], "chunk_delay_us": [],
            })  # fmt: skip
        counters = self.counters[k]
        counters.scheduled = max(counters.scheduled, len(rows) + len(self.received[k]))
        counters.finished += len(rows)
        counters.failed += len(rows)
        return _with_worker(pa.RecordBatch.from_pylist(rows, schema=engine_schema()), name)

    def _given(self, k: int) -> list[tuple[int, str, str]]:
        """Worker `k`'s requests (index, trace id as the engine names it,
        api): the trace read again as the worker's feeder read it, dealt out
        as its engine did. A point without a request limit but with a
        duration: the requests it had scheduled by its last report."""
        share = self.specs[k]["share"]
        assert share is not None
        budget = self.counters[k].scheduled if self.feeder.limit is None and self.feeder.loops else None
        dealer = split.Dealer(share["workers"])
        given: list[tuple[int, str, str]] = []
        index = lap = 0
        for unit in self.feeder.outline():
            if budget is not None and len(given) >= budget:
                break
            if not isinstance(unit, list):  # the next pass over the trace
                lap += 1
                continue
            if dealer.deal(unit[0][2]) == share["worker"]:
                given += [(index + j, trace_id + (f"#{lap}" if lap else ""), api) for j, (trace_id, api, _) in enumerate(unit)]
            index += len(unit)
        return given

    def progress(self) -> Counters:
        total = Counters()
        for c in self.counters:
            for field in ("scheduled", "sent", "finished", "failed", "output_tokens"):
                setattr(total, field, getattr(total, field) + getattr(c, field))
        return total

    def wants_more(self) -> bool:
        """Never: each worker feeds its own engine (the driver's
        `Feeder.top_up` has nothing to do)."""
        return False

    def cancel(self) -> None:
        """Stops every worker that is still there; each reports what it had."""
        for k, actor in enumerate(self.actors):
            if k not in self.lost:
                actor.cancel.remote()


def _pinger(ray: Any, actor: Any) -> Callable[[], int]:
    """Reads `actor`'s engine clock (one Ray round trip)."""
    return lambda: int(ray.get(actor.now_us.remote()))


def _with_worker(batch: pa.RecordBatch, name: str) -> pa.RecordBatch:
    return batch.append_column("worker", pa.repeat(pa.scalar(name, pa.string()), batch.num_rows))
