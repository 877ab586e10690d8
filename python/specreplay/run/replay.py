"""Runs a replay: resolves the target, runs each sweep point on the Rust
engine, streams finished requests into the results file, and returns them.

Which points a run runs is its `Plan`: the configured sweep, in order, or a
capacity search (`capacity.SearchPlan`) that chooses each next rate from how
the points before it went.

The engine runs on its own threads; each point (`point.run_point`) is
handed its requests (`feed.Feeder`) and drained of finished ones in
columnar batches, so nothing here is on the measurement path.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from specreplay import _core
from specreplay.run import pandas_later
from specreplay.run.chunk_tokenizer import ChunkCounter, ChunkTokenizer
from specreplay.settings.config import Point, ReplayConfig
from specreplay.errors import ConfigError
from specreplay.run.feed import Feeder, Prepared
from specreplay.run.capacity import Answer, SearchPlan
from specreplay.run.limits import ceiling_note, in_flight
from specreplay.run.plan import FinishedPoint, Plan, Progress
from specreplay.run.point import StartPoint, local_start, run_point, scheduling_note
from specreplay.results.files import (
    CAPACITY_KEY,
    CONFIG_KEY,
    HOST_KEY,
    INTERRUPTED_KEY,
    MODEL_KEY,
    PREDICTED_KEY,
    RUN_ID_KEY,
    RUNS_KEY,
    SCHEDULING_KEY,
    STARTED_AT_KEY,
    TARGET_KEY,
    VERSION_KEY,
    WORKERS_KEY,
    ResultsWriter,
    read_table,
)
from specreplay.run.server_tokenize import ServerTokenizer
from specreplay.results import server_samples as metrics_store
from specreplay.servermetrics.scrape import Scraper, metrics_url, same_origin
from specreplay.trace.shaping import auth_headers, base_url, body_with_prompt, redact_url
from specreplay.run.target import Target, preflight, probe_usage, start_embedded
from specreplay.trace.media import MediaStore, media_dir
from specreplay.trace.records import APIS
from specreplay.trace.index import TraceIndex, scan_trace

if TYPE_CHECKING:
    from specreplay._core import ConcurrencyLoad, RateLoad, RunSpec, SpeedupLoad
    from specreplay.analysis.analyse import RunAnalysis
    from specreplay.run.distributed.driver import Cluster
    from specreplay.run.predict import Predictor

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
    capacity: dict[str, Answer] = field(default_factory=dict)
    """Per run label, what its capacity search found (runs that searched)."""

    def table(self) -> pa.Table:
        return read_table(self.path)


class Hooks:
    """What a front end wants to hear about while a run goes (the CLI draws a
    live view; the Python API stays quiet). `total` is None when a search
    decides how many points there will be; `expected` is the requests the
    point will send; `status` what its plan says about it (a search's bracket)."""

    def target(self, target: Target, description: str) -> None: ...
    def note(self, message: str) -> None: ...
    def point_started(self, point: Point, index: int, total: int | None, label: str, expected: int, status: str | None) -> None: ...
    def rows(self, batch: pa.RecordBatch) -> None: ...
    def progress(self, progress: Progress) -> None: ...
    def point_finished(self, finished: FinishedPoint) -> None: ...
    def search_finished(self, label: str, answer: Answer, lines: list[str]) -> None: ...


def _run_spec(config: ReplayConfig, point: Point, headers: list[tuple[str, str]]) -> RunSpec:
    """What the engine runs for `point` (the `RunSpec` of `_core.pyi`)."""
    load: RateLoad | SpeedupLoad | ConcurrencyLoad
    if point.mode == "rate":
        load = {"mode": "rate", "rate": point.value, "arrival": config.arrival, "burstiness": config.burstiness}
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
        "stall_timeout_s": config.stall_timeout,
        "retries": config.retries,
        "seed": config.seed,
        "preconnect": config.preconnect,
        "sessions": config.sessions,
        "live_history": config.live_history,
        "chunk_text": config.tokenizer is not None or config.server_tokenize,
    }


def _resolve_target(config: ReplayConfig, trace: TraceIndex, headers: list[tuple[str, str]]) -> Target:
    if config.predict is not None:
        from specreplay.run.predict import PREDICT_URL

        return Target(PREDICT_URL, config.model or "predicted")
    if config.url is None:
        return start_embedded(config.seed, config.sim)
    return preflight(config.url, config.model, headers, trace.all_have_model)


def _probe_continuous_usage(config: ReplayConfig, trace: TraceIndex, target: Target, headers: list[tuple[str, str]], hooks: Hooks) -> None:
    first = trace.probe
    if first is None:
        return
    url = base_url(target.url) + APIS[first.api][0]
    body, _ = MediaStore(media_dir(trace.path)).resolve(body_with_prompt(first))
    body = dict(body)
    if target.model or config.model:
        body["model"] = config.model or target.model
    probe = probe_usage(url, first.api, body, headers)
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


@dataclass
class _Run:
    """One run of a benchmark (a config file may hold several), resolved."""

    config: ReplayConfig
    trace: TraceIndex
    points: list[Point]
    headers: list[tuple[str, str]]
    trace_sha256: str
    plan: Plan
    target: Target | None = None
    scraper: Scraper | None = None
    tokenizer: ChunkCounter | None = None
    cluster: Cluster | None = None
    predictor: Predictor | None = None
    #: Its requests, built once for all its points (`feed.Prepared`).
    prepared: Prepared = field(default_factory=Prepared)
    #: What each of its points' engine threads got (`point.scheduling_of`).
    scheduling: list[dict[str, Any]] = field(default_factory=list)

    def start_point(self) -> StartPoint:
        """How this run's points start: here, on its Ray workers, or predicted."""
        if self.predictor is not None:
            return self.predictor.start_point
        if self.cluster is None:
            return local_start
        return self.cluster.start_point

    def metrics_target(self) -> str | None:
        """The metrics page to scrape, or None with `metrics = false`."""
        if not self.config.metrics or self.target is None:
            return None
        return self.config.metrics_url or metrics_url(self.target.url)

    def metadata(self) -> dict[str, Any]:
        """The run's resolved configuration as stored in results files (a
        search's points: those run so far)."""
        out = self.config.to_metadata()
        if self.config.url is not None:
            out["url"] = redact_url(self.config.url)
        if self.config.metrics_url is not None:
            out["metrics_url"] = redact_url(self.config.metrics_url)
        out["points"] = [p.to_dict() for p in self.points]
        out["trace_sha256"] = self.trace_sha256
        out["llamacpp_timings"] = self.config.llamacpp_timings
        out["predicted"] = self.predictor is not None
        if self.target is not None:
            out["target"] = redact_url(self.target.url)
            out["embedded_simulator"] = self.target.embedded is not None
            out["served_model"] = self.target.model
            scraped = self.metrics_target()
            out["metrics_target"] = redact_url(scraped) if scraped else None
        return out


def _prepare_run(config: ReplayConfig) -> _Run:
    config.validate()
    trace = scan_trace(config.trace)
    headers = auth_headers(config, set(trace.apis))
    tokenizer = ChunkTokenizer(config.tokenizer) if config.tokenizer else None
    predictor = _predictor(config)
    if config.find_max_rate:
        return _Run(config, trace, [], headers, trace.sha256, SearchPlan(config), tokenizer=tokenizer, predictor=predictor)
    points = config.points(trace.has_arrivals)
    return _Run(config, trace, points, headers, trace.sha256, Plan(points), tokenizer=tokenizer, predictor=predictor)


def _predictor(config: ReplayConfig) -> Predictor | None:
    """With `predict`: the server model (what-ifs applied) its points are
    predicted from; the run is relabelled and scrapes nothing."""
    if config.predict is None:
        if config.what_if or config.predict_draw:
            raise ConfigError("what_if and predict_draw change a prediction: give predict (--predict server.toml) too")
        return None
    from specreplay.run.calibrate.model import ServerModel
    from specreplay.run.predict import Predictor, model_seed, predicted_label

    if config.url is not None or config.ray is not None or config.tokenizer or config.server_tokenize:
        raise ConfigError("predict: a prediction sends nothing: drop url, ray, tokenizer and server_tokenize")
    if config.max_concurrency is not None or config.retries or config.stall_timeout is not None:
        raise ConfigError("predict: max_concurrency, retries and stall_timeout are not modelled by a prediction yet: drop them")
    model = ServerModel.read(config.predict).with_overrides(config.what_if)
    model.core_mapping(config.seed)  # refuses now, before any point, when a required parameter is unknown
    config.label = predicted_label(config.label)
    config.metrics = False
    return Predictor(model, model_seed(config.seed, config.predict_draw))


def _runs_metadata(runs: list[_Run]) -> dict[str, str]:
    return {
        # The first run's configuration (the only one, unless a config file named several).
        CONFIG_KEY: json.dumps(runs[0].metadata()),
        RUNS_KEY: json.dumps([r.metadata() for r in runs]),
    }


def _session_note(run: _Run) -> str | None:
    """What the user should know about how this run treats sessions."""
    config, trace = run.config, run.trace
    if config.live_history and (config.sessions == "independent" or not trace.has_sessions):
        why = "--sessions independent" if trace.has_sessions else "the trace has no sessions"
        return f"--live-history does nothing here: {why} (it replaces the answers in a dependent session's later turns)"
    return None


def _file_metadata(runs: list[_Run], run_id: str) -> dict[str, str]:
    first = runs[0]
    target = first.target.url if first.target is not None else ""
    return {
        VERSION_KEY: _core.__version__,
        RUN_ID_KEY: run_id,
        **_runs_metadata(runs),
        TARGET_KEY: redact_url(target),
        MODEL_KEY: (first.target.model if first.target is not None else None) or "",
        STARTED_AT_KEY: _dt.datetime.now(_dt.timezone.utc).isoformat(),
        HOST_KEY: platform.node(),
    }


def run_replay(
    config: ReplayConfig | list[ReplayConfig],
    hooks: Hooks | None = None,
    finalize: Callable[[pa.Table], dict[str, str]] | None = None,
) -> RunResult:
    """Runs every sweep point of `config` (or of each config in a list — the
    named runs of a config file, labelled) into one results file, and returns
    the result. `finalize(table)` may return extra metadata (validity
    findings) written into the final file. Ctrl-C cancels what is in flight,
    keeps what finished, and returns with `interrupted=True`; before the
    results file is opened (the trace being read, the targets reached) it
    raises KeyboardInterrupt: nothing was sent, nothing written."""
    configs = config if isinstance(config, list) else [config]
    if not configs:
        raise ConfigError("nothing to run")
    hooks = hooks or Hooks()
    # The analysis (pandas: about 0.2 s of CPU) is never imported while a
    # point runs: there it competes with the pacer and the engine for the
    # cores, and raised the send lag's p99 about 1.5x in 7 of 8 pairs
    # (docs/benchmarks.md, "Start-up"). The CLI defers it to after the first
    # point (`pandas_later.defer`: a third of a replay's fixed CPU), where the
    # point's summary imports it; any other caller (the Python API, Ray),
    # whose pyarrow may import pandas at its first conversion of Python
    # values, gets it now, before the first point.
    if not pandas_later.deferred():
        import specreplay.analysis.analyse  # noqa: F401

    # Every run checked, every target reached, before the first request goes
    # out: a typo in the last run must not cost the time of the first.
    runs = [_prepare_run(c) for c in configs]
    run_id = uuid.uuid4().hex[:12]
    output = Path(configs[0].output or f"specreplay-{run_id}.arrow")
    try:
        _reach_targets(runs, hooks)
        metadata = _file_metadata(runs, run_id)
        first_target = runs[0].target
        assert first_target is not None
        result = RunResult(
            path=output, run_id=run_id, points=[p for r in runs for p in r.points], target=redact_url(first_target.url),
            embedded=first_target.embedded is not None, model=first_target.model, metadata=metadata,
        )
        samples = metrics_store.SampleLog(output)
        writer = ResultsWriter(output, metadata)
        try:
            for run in runs:
                run.scraper = _scraper(run, samples, hooks, named=len(runs) > 1)
            total = None if any(r.plan.searching for r in runs) else len(result.points)
            index = 0
            for run in runs:
                index = _run_plan(run, writer, run_id, index, total, hooks, result)
                if run.scraper is not None:
                    run.scraper.close()
                if result.interrupted:
                    break
        except KeyboardInterrupt:
            # Outside a point's drain (which keeps its own Ctrl-C: `point.py`):
            # before the first point, or between two. The file keeps what finished.
            result.interrupted = True
        finally:
            for run in runs:
                if run.scraper is not None:
                    run.scraper.stop()
            result.points = [p for r in runs for p in r.points]
            writer.close(_closing_metadata(runs, result, samples), finalize)
            # Only once they are in the results file.
            samples.remove()
        return result
    finally:
        for run in runs:
            if run.cluster is not None:
                run.cluster.close()
            if run.target is not None:
                run.target.close()


def _reach_targets(runs: list[_Run], hooks: Hooks) -> None:
    """Each run's target reached (started, for the embedded simulator), said,
    and what the run needs of it set up: the server tokenizer, the usage
    probe, the Ray workers."""
    for run in runs:
        run.target = _resolve_target(run.config, run.trace, run.headers)
    for run in runs:
        assert run.target is not None
        desc = (
            f"PREDICTED, not measured: every point is computed from the server model {run.config.predict} (nothing is sent)"
            if run.predictor is not None
            else f"no --url given: replaying against the embedded simulated server at {run.target.url}"
            if run.target.embedded is not None
            else f"target {redact_url(run.target.url)}" + (f", model {run.target.model}" if run.target.model else "")
        )
        hooks.target(run.target, (f"{run.config.label}: " if len(runs) > 1 else "") + desc)
        if run.config.server_tokenize:
            run.tokenizer = ServerTokenizer(run.target.url, run.headers)
        if run.config.url is not None and run.config.continuous_usage:
            _probe_continuous_usage(run.config, run.trace, run.target, run.headers, hooks)
        note = _session_note(run)
        if note is not None:
            hooks.note(note)
        if run.config.ray is not None:
            from specreplay.run.distributed.driver import Cluster

            run.cluster = Cluster(run.config.ray, run.config.workers)
            hooks.note(f"{run.config.workers} Ray worker(s): " + ", ".join(w["worker"] for w in run.cluster.identities))


def _closing_metadata(runs: list[_Run], result: RunResult, samples: metrics_store.SampleLog) -> dict[str, str]:
    """What the file learns only at the end: whether it was interrupted, each
    run's config, the searches' answers, the workers, the predictions' models
    and the server samples."""
    extra = {INTERRUPTED_KEY: json.dumps(result.interrupted), **_runs_metadata(runs)}
    if result.capacity:
        extra[CAPACITY_KEY] = json.dumps({label: found.to_dict() for label, found in result.capacity.items()})
    clusters = [r.cluster.metadata() for r in runs if r.cluster is not None]
    if clusters:
        extra[WORKERS_KEY] = json.dumps(clusters[0] if len(clusters) == 1 else clusters)
    predictors = [r.predictor.metadata() for r in runs if r.predictor is not None]
    if predictors:
        extra[PREDICTED_KEY] = json.dumps(predictors)
    scheduling = [entry for r in runs for entry in r.scheduling]
    if scheduling:
        extra[SCHEDULING_KEY] = json.dumps(scheduling)
    taken = samples.table()  # pages a failed point left unparsed parsed now
    if taken.num_rows:
        extra[metrics_store.METADATA_KEY] = metrics_store.encode(taken)
    return extra


def _run_plan(run: _Run, writer: ResultsWriter, run_id: str, index: int, total: int | None, hooks: Hooks, result: RunResult) -> int:
    """Runs the points of `run`'s plan from `index` on; returns the next index."""
    assert run.target is not None
    model = run.target.model or run.config.model
    plan, label = run.plan, run.config.label
    first = True
    said = plan.start(run.trace.records)
    if said:
        hooks.note(said)
    while (point := plan.next_point()) is not None:
        num_requests = plan.num_requests(run.config)
        config = run.config if num_requests == run.config.num_requests else replace(run.config, num_requests=num_requests)
        # A prediction opens no connection: no open files to make room for.
        ceiling = None
        if run.predictor is None:
            flight = in_flight(point.mode, point.value, config.max_concurrency, num_requests or run.trace.records, run.target.embedded is not None)
            ceiling = flight.ceiling
        if ceiling is not None:
            hooks.note(ceiling_note(ceiling, point.value if point.mode == "rate" else None))
        if plan.searching:
            run.points.append(point)
        hooks.point_started(point, index, total, label, num_requests or run.trace.records, plan.status())
        spec = _run_spec(config, point, run.headers)
        if ceiling is not None:
            spec["max_concurrency"] = ceiling
        feeder = Feeder(run.trace, config, run.target.url, model, run.prepared)
        finished = run_point(spec, feeder, writer, run_id, label, point, index, hooks, run.scraper, run.tokenizer, plan.deadline_us, run.start_point())
        finished.config = run.config  # the analysis reads the settings from it, typed
        if finished.scheduling is not None:
            run.scheduling.append(finished.scheduling)
        if first:  # every point of a run replays the same turns: say it once
            for note in feeder.think.sources.notes():
                hooks.note(note)
            if finished.scheduling is not None:
                hooks.note(scheduling_note(finished.scheduling))
            first = False
        hooks.point_finished(finished)
        plan.finished(finished)
        index += 1
        if finished.interrupted:
            result.interrupted = True
            break
    if plan.searching:
        assert isinstance(plan, SearchPlan)
        found = plan.result(interrupted=result.interrupted)
        result.capacity[label] = found
        hooks.search_finished(label, found, found.lines(plan.slo))
    return index


def _scraper(run: _Run, samples: metrics_store.SampleLog, hooks: Hooks, named: bool) -> Scraper | None:
    url = run.metrics_target()
    if url is None or run.target is None:
        return None
    # The API's credentials go to the API's own server only.
    headers = run.headers if same_origin(url, run.target.url) else []
    label = run.config.label
    return Scraper(url, headers, run.config.metrics_interval, samples, (lambda m: hooks.note(f"{label}: {m}")) if named else hooks.note)


def replay(trace: str, api_key: str | None = None, **options: Any) -> pa.Table:
    """`specreplay replay` from Python: the same run, returned as a pyarrow
    Table (one row per request, run metadata in the schema). Options are the
    fields of `ReplayConfig`, checked the same way as a config file's keys
    (`rate=[8]`, `concurrency=[1, 8]`, `url=…`, `max_tokens=4096`). The API
    key is `api_key`, else the environment variable `api_key_env` names.
    Without `output` the results file is a temporary one, removed afterwards."""
    import tempfile

    config = ReplayConfig.from_mapping({"trace": str(trace), **options})
    config.resolve_api_key()
    if api_key is not None:
        config.api_key = api_key
    if config.output is not None:
        return run_replay(config).table()
    with tempfile.TemporaryDirectory(prefix="specreplay-") as tmp:
        config.output = str(Path(tmp) / "run.arrow")
        return run_replay(config).table()
