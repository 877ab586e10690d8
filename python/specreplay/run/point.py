"""Runs one sweep point: starts it, drains its finished requests into the
results file until it is over (topping up a streamed feed, cutting it at a
deadline, cancelling it on Ctrl-C or a bad trace), bracketed by the
scraper's scrapes, then recounts its chunks with a tokenizer if any and
attaches its server samples to its rows.

The engine runs on its own threads; the drain wakes every quarter second
at most, so nothing here is on the measurement path.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from specreplay import _core
from specreplay.errors import SpecreplayError
from specreplay.results.files import ResultsWriter
from specreplay.run.chunk_tokenizer import ChunkCounter, recount
from specreplay.run.feed import Feeder
from specreplay.run.host import host_steal_ms, stolen_ms
from specreplay.run.plan import FinishedPoint, Progress
from specreplay.settings.config import Point

if TYPE_CHECKING:
    from specreplay._core import RunSpec
    from specreplay.servermetrics.scrape import Scraper

class PointHooks(Protocol):
    """What a point tells its front end while it runs: the part of
    `replay.Hooks` a point uses (named here, so that the point needs nothing
    from the orchestrator above it)."""

    def note(self, message: str) -> None: ...
    def rows(self, batch: pa.RecordBatch) -> None: ...
    def progress(self, progress: Progress) -> None: ...


#: What starts one point: the feeder, on the local engine (`Feeder.start`),
#: or a distributed replay's workers, each feeding its own engine its share
#: (`distributed.driver.Cluster.start_point`). Either returns something
#: drained like `_core.EngineRun`.
StartPoint = Callable[["RunSpec", Feeder, str, str], Any]

#: How long one drain waits for finished requests before reporting progress.
POLL_S = 0.25


def local_start(spec: RunSpec, feeder: Feeder, label: str, point: str) -> Any:
    return feeder.start(spec)


@dataclass
class _Drained:
    """How a point's drain ended, and what the recount needs."""

    interrupted: bool = False
    cut: bool = False
    failure: SpecreplayError | None = None
    #: For the tokenizer, per batch written: its rows, and the engine's chunk
    #: text columns (None for a lost worker's rows, which have no chunks).
    texts: list[tuple[int, pa.Array | None, pa.Array | None]] = field(default_factory=list)


def run_point(
    spec: RunSpec,
    feeder: Feeder,
    writer: ResultsWriter,
    run_id: str,
    label: str,
    point: Point,
    index: int,
    hooks: PointHooks,
    scraper: Scraper | None = None,
    tokenizer: ChunkCounter | None = None,
    deadline_us: float | None = None,
    start: StartPoint = local_start,
) -> FinishedPoint:
    """Runs one point to the end, feeding it as it asks (or, past
    `deadline_us`, cancels what is left of it: its rows are kept, and it is
    marked cut), bracketed by the scraper's own scrapes of the server's
    metrics, then recounts its chunks with `tokenizer` if any. A trace that
    turns out bad while it is fed (it changed since it was checked) cancels
    the point, keeps what finished, and raises once every row is written."""
    try:
        if scraper is not None:
            scraper.start_point(label, point.name)
        steal_at_start = host_steal_ms()
        # A distributed start takes a second (clocks, the start lead): an
        # interrupt then has nothing finished to keep.
        run = start(spec, feeder, label, point.name)
    except KeyboardInterrupt:
        return FinishedPoint(point, label, writer.schema.empty_table(), Progress(point.name, 0, 0, 0, 0, 0, 0.0), interrupted=True)
    started = _core.now_us()
    first_row = writer.rows  # this point's rows follow in the file

    def progress() -> Progress:
        p = run.progress()
        elapsed_s = (_core.now_us() - started) / 1e6
        return Progress(point.name, p.scheduled, p.sent, p.finished, p.failed, p.output_tokens, elapsed_s)

    where = {"run_id": run_id, "label": label, "point": point.name, "point_index": index}
    with _interrupt_flag() as interrupted:
        drained = _drain(run, feeder, writer, hooks, progress, deadline_us, where, tokenizer is not None, interrupted)
    try:
        if scraper is not None:
            scraper.end_point()
    except KeyboardInterrupt:
        drained.interrupted = True
    if tokenizer is not None:
        _recount(writer, first_row, drained.texts, tokenizer, hooks)
    rows = _with_metadata(writer.table(first_row), getattr(run, "point_metadata", None))
    samples = _samples_of(scraper, label, point.name)
    if drained.failure is not None:
        raise drained.failure
    return FinishedPoint(
        point, label, rows, progress(), drained.interrupted, drained.cut, server_samples=samples,
        scheduling=scheduling_of(run, label, point.name, stolen_ms(steal_at_start)),
    )


@contextmanager
def _interrupt_flag() -> Iterator[Callable[[], bool]]:
    """While a point drains, Ctrl-C (SIGINT) sets a flag that the drain loop
    reads between batches, instead of raising KeyboardInterrupt wherever
    Python is when the signal comes: raised while a batch was being written
    or shown, it escaped the loop, and the run ended in click's "Aborted!"
    (exit 1) instead of keeping what finished (seen on a loaded machine,
    where that work takes longer). Off the main thread no handler can be
    set: there the interrupt raises as before."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    seen = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.set())
    try:
        yield seen.is_set
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)


def _drain(
    run: Any,
    feeder: Feeder,
    writer: ResultsWriter,
    hooks: PointHooks,
    progress: Callable[[], Progress],
    deadline_us: float | None,
    where: dict[str, Any],
    keep_texts: bool,
    interrupted: Callable[[], bool],
) -> _Drained:
    """Writes the point's batches as they finish until the engine has
    returned every row (or `interrupted()` asked to cancel it); `where`
    names the rows (`ResultsWriter.write`)."""
    out = _Drained()
    while True:
        if interrupted() and not out.interrupted:
            out.interrupted = True
            run.cancel()
        wait_s = POLL_S
        if deadline_us is not None and not out.cut:
            # A wait returns only when it ends: end it at the deadline, so that
            # the cut comes when the budget runs out, not up to POLL_S later.
            wait_s = min(POLL_S, max(0.0, (deadline_us - _core.now_us()) / 1e6))
        try:
            if out.failure is None and not out.interrupted and not out.cut:
                feeder.top_up(run)
            batch = run.next_batch(4096, wait_s)
        except SpecreplayError as e:
            out.failure = e
            run.cancel()
            continue
        except KeyboardInterrupt:  # off the main thread (`_interrupt_flag`)
            # Stop scheduling, cancel in-flight requests (they still report a
            # row), and keep draining so nothing that finished is lost.
            out.interrupted = True
            run.cancel()
            continue
        if batch is None:
            return out
        engine_batch = pa.record_batch(batch)
        written = writer.write(engine_batch, **where)
        if written is not None:
            hooks.rows(written)
            if keep_texts:
                if "chunk_text" in engine_batch.schema.names:
                    out.texts.append((written.num_rows, engine_batch.column("chunk_text"), engine_batch.column("chunk_text_chars")))
                else:
                    out.texts.append((written.num_rows, None, None))
        hooks.progress(progress())
        if deadline_us is not None and not out.cut and _core.now_us() > deadline_us:
            out.cut = True
            run.cancel()


def _recount(
    writer: ResultsWriter,
    first_row: int,
    texts: list[tuple[int, pa.Array | None, pa.Array | None]],
    tokenizer: ChunkCounter,
    hooks: PointHooks,
) -> None:
    """Between points, off the measurement path. The partial file keeps the
    engine's estimate; the final file gets the recount."""
    if texts:
        # Batch by batch as the engine handed them over (the writer has
        # compacted its copies: they are sliced back out of its rows).
        mine, start_row, recounted = writer.table(first_row), 0, []
        for n, text, chars in texts:
            (rows,) = mine.slice(start_row, n).combine_chunks().to_batches()
            recounted.append(rows if text is None or chars is None else recount(tokenizer, rows, text, chars))
            start_row += n
        writer.replace_from(first_row, pa.Table.from_batches(recounted, schema=writer.schema))
    texts.clear()
    if tokenizer.failure:
        hooks.note(f"the chunks could not be counted: {tokenizer.failure}; the rows keep the estimate from the chunks' text")


def _with_metadata(rows: pa.Table, point_metadata: dict[str, str] | None) -> pa.Table:
    """The point's rows as the file will hold them: a predicted point's with
    what it was predicted from."""
    if point_metadata:
        rows = rows.replace_schema_metadata({**(rows.schema.metadata or {}), **{k.encode(): v.encode() for k, v in point_metadata.items()}})
    return rows


def _samples_of(scraper: Scraper | None, label: str, point: str) -> pa.Table | None:
    """The server samples scraped during this point, handed to its analysis
    as they are (the file gets them all at the end)."""
    if scraper is None or not len(scraper.log):
        return None
    import pyarrow.compute as pc  # after the point's drain: not imported before a point ends (batch_figures.floats)

    taken = scraper.log.table()
    return taken.filter(pc.and_(pc.equal(taken["label"], label), pc.equal(taken["point"], point)))


def scheduling_of(run: Any, label: str, point: str, steal_ms: float | None = None) -> dict[str, Any] | None:
    """What the point's engine threads got, as the results file records it
    (`specreplay.scheduling`), once the point is over, with the steal time
    the hypervisor reported while it ran (`host_steal_ms`); None for a run
    whose engine is not this process's (distributed, predicted)."""
    if not isinstance(run, _core.EngineRun):
        return None
    got = run.scheduling()
    return {"label": label, "point": point, "pacer": got.pacer, "workers": got.workers, "realtime_asked": got.realtime_asked, "host_steal_ms": steal_ms,
            "pacer_late_max_us": got.pacer_late_max_us, "pacer_late_p99_us": got.pacer_late_p99_us,
            "pacer_held_us": [list(span) for span in got.pacer_held_us], "pacer_held_dropped": got.pacer_held_dropped,
            "cpu_watched": got.cpu_watched, "cpu_held_us": [list(span) for span in got.cpu_held_us], "cpu_held_dropped": got.cpu_held_dropped}  # fmt: skip


def scheduling_note(entry: dict[str, Any]) -> str:
    """`scheduling_of`'s entry in one line, for the run's notes."""
    got = f"pacer {entry['pacer'] or 'none'}, workers {entry['workers'] or 'none'}"
    realtime = all(str(entry[k]).startswith("SCHED_FIFO") for k in ("pacer", "workers") if entry[k] is not None)
    if entry["realtime_asked"] and not realtime:
        return (f"--realtime asked for SCHED_FIFO, but the engine threads did not get it ({got}): "
                "this process may not (it needs root, CAP_SYS_NICE or an RLIMIT_RTPRIO)")  # fmt: skip
    if realtime:
        return f"engine threads ran real-time ({got})"
    return f"engine threads ran at the normal policy ({got}; --realtime asks for SCHED_FIFO)"
