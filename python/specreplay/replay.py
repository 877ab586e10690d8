"""Runs a replay: resolves the target, runs each sweep point on the Rust
engine, streams finished requests into the results file, and returns them.

The engine runs on its own threads; this loop only drains finished requests
(in columnar batches) every quarter second, so nothing here is on the
measurement path.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from specreplay import _core
from specreplay.config import Point, ReplayConfig
from specreplay.results import ResultsWriter, read_table
from specreplay.shaping import auth_headers, base_url, prepare, redact_url
from specreplay.target import Target, preflight, probe_usage, start_embedded
from specreplay.trace import APIS, Trace, load_trace

#: How long one drain waits for finished requests before reporting progress.
POLL_S = 0.25


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
class RunResult:
    path: Path
    run_id: str
    points: list[Point]
    interrupted: bool = False
    target: str = ""
    embedded: bool = False
    model: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)

    def table(self) -> pa.Table:
        return read_table(self.path)


class Hooks:
    """What a front end wants to hear about while a run goes (the CLI draws a
    progress display; the Python API stays quiet)."""

    def target(self, target: Target, description: str) -> None: ...
    def note(self, message: str) -> None: ...
    def point_started(self, point: Point, index: int, total: int) -> None: ...
    def progress(self, progress: Progress) -> None: ...
    def point_finished(self, point: Point, progress: Progress, rows: pa.Table) -> None: ...


def _run_spec(config: ReplayConfig, point: Point, headers: list[tuple[str, str]]) -> dict[str, Any]:
    if point.mode == "rate":
        load: dict[str, Any] = {"mode": "rate", "rate": point.value, "arrival": config.arrival, "burstiness": config.burstiness}
    elif point.mode == "speedup":
        load = {"mode": "speedup", "speedup": point.value}
    else:
        load = {"mode": "concurrency", "concurrency": int(point.value)}
    return {
        "headers": headers,
        "load": load,
        "num_requests": config.num_requests,
        "duration_s": config.duration,
        "max_concurrency": config.max_concurrency,
        "warmup": config.warmup,
        "timeout_s": config.timeout,
        "seed": config.seed,
    }


def _resolve_target(config: ReplayConfig, trace: Trace, headers: list[tuple[str, str]]) -> Target:
    if config.url is None:
        return start_embedded(config.seed, config.sim_config)
    trace_has_models = all("model" in r.body for r in trace.records)
    return preflight(config.url, config.model, headers, trace_has_models)


def _probe_continuous_usage(config: ReplayConfig, trace: Trace, target: Target, headers: list[tuple[str, str]], hooks: Hooks) -> None:
    first = next((r for r in trace.records if r.api in ("chat", "completions")), None)
    if first is None:
        return
    url = base_url(target.url) + APIS[first.api][0]
    body = dict(first.body)
    if target.model or config.model:
        body["model"] = config.model or target.model
    probe = probe_usage(url, body, headers)
    if probe.llamacpp_timings:
        # llama.cpp ignores continuous_usage_stats; its own per-chunk count
        # is `timings_per_token` (the engine reads `timings.predicted_n`).
        config.llamacpp_timings = True
    elif not probe.accepted:
        config.continuous_usage = False
        hooks.note(
            "the server refused stream_options.continuous_usage_stats: tokens per chunk will be estimated "
            "(totals still come from its final usage report)"
        )


def _base_metadata(config: ReplayConfig, target: Target, run_id: str, points: list[Point]) -> dict[str, str]:
    resolved = config.to_metadata()
    resolved["url"] = redact_url(target.url)
    resolved["points"] = [p.to_dict() for p in points]
    resolved["embedded_simulator"] = target.embedded is not None
    return {
        "specreplay.version": _core.__version__,
        "specreplay.run_id": run_id,
        "specreplay.config": json.dumps(resolved),
        "specreplay.target": redact_url(target.url),
        "specreplay.model": target.model or "",
        "specreplay.started_at": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "specreplay.host": platform.node(),
    }


def run_replay(
    config: ReplayConfig,
    hooks: Hooks | None = None,
    finalize: Callable[[pa.Table], dict[str, str]] | None = None,
) -> RunResult:
    """Runs every sweep point of `config` into `config.output` and returns the
    result. `finalize(table)` may return extra metadata (validity findings)
    written into the final file. Ctrl-C cancels what is in flight, keeps what
    finished, and returns with `interrupted=True`."""
    config.validate()
    hooks = hooks or Hooks()
    trace = load_trace(config.trace)
    points = config.points(trace.has_arrivals)
    apis = {r.api for r in trace.records}
    headers = auth_headers(config, apis)
    run_id = uuid.uuid4().hex[:12]
    output = Path(config.output or f"specreplay-{run_id}.arrow")

    target = _resolve_target(config, trace, headers)
    try:
        desc = (
            f"no --url given: replaying against the embedded simulated server at {target.url}"
            if target.embedded is not None
            else f"target {redact_url(target.url)}" + (f", model {target.model}" if target.model else "")
        )
        hooks.target(target, desc)
        if config.url is not None and config.continuous_usage:
            _probe_continuous_usage(config, trace, target, headers, hooks)
        requests = [r.as_tuple() for r in prepare(trace.records, config, target.url, target.model or config.model)]
        metadata = _base_metadata(config, target, run_id, points)
        writer = ResultsWriter(output, metadata)
        result = RunResult(
            path=output, run_id=run_id, points=points, target=redact_url(target.url),
            embedded=target.embedded is not None, model=target.model, metadata=metadata,
        )
        try:
            for index, point in enumerate(points):
                hooks.point_started(point, index, len(points))
                spec = json.dumps(_run_spec(config, point, headers))
                if not _run_point(spec, requests, writer, run_id, config.label, point, index, hooks):
                    result.interrupted = True
                    break
        finally:
            writer.close({"specreplay.interrupted": json.dumps(result.interrupted)}, finalize)
        return result
    finally:
        target.close()


def _run_point(
    spec: str,
    requests: list[tuple[str, str, str, bytes, float]],
    writer: ResultsWriter,
    run_id: str,
    label: str,
    point: Point,
    index: int,
    hooks: Hooks,
) -> bool:
    """Runs one point to the end; False if the user interrupted it."""
    run = _core.start_point(spec, requests)
    started = _core.now_us()
    interrupted = False

    def progress() -> Progress:
        scheduled, sent, finished, failed, tokens = run.progress()
        return Progress(point.name, scheduled, sent, finished, failed, tokens, (_core.now_us() - started) / 1e6)

    while True:
        try:
            batch = run.next_batch(4096, POLL_S)
        except KeyboardInterrupt:
            # Stop scheduling, cancel in-flight requests (they still report a
            # row), and keep draining so nothing that finished is lost.
            interrupted = True
            run.cancel()
            continue
        if batch is None:
            break
        if batch.num_rows:
            writer.write(pa.record_batch(batch), run_id=run_id, label=label, point=point.name, point_index=index)
        hooks.progress(progress())
    table = writer.table()
    rows = table.filter(pc.equal(table["point_index"], index))
    hooks.point_finished(point, progress(), rows)
    return not interrupted


def replay(trace: str, **options: Any) -> pa.Table:
    """`specreplay replay` from Python: the same run, returned as a pyarrow
    Table (one row per request, run metadata in the schema). Options are the
    fields of `ReplayConfig` (`rates=[8]`, `concurrencies=[1, 8]`, `url=…`).
    Without `output` the results file is a temporary one, removed afterwards."""
    import tempfile

    config = ReplayConfig(trace=str(trace), **options)
    if config.output is not None:
        return run_replay(config).table()
    with tempfile.TemporaryDirectory(prefix="specreplay-") as tmp:
        config.output = str(Path(tmp) / "run.arrow")
        return run_replay(config).table()
