"""Hands a point's requests to the engine, in one of two ways.

Whole (the usual case): a trace whose shaped requests fit in
`WHOLE_MAX_BYTES` is read and shaped once per run, before its first point
starts, and every point is given that one batch (`Prepared`); the engine
loops over it for more requests (issue 27: at thousands of requests per
second, nothing on the Python thread runs per request while a point runs,
so the pacer never waits for it).

Streamed (issue 14), for a larger trace: the trace is read again from the
file, a few requests at a time, shaped, and handed over in batches, so
replay's memory is bounded by what is in flight and the engine's
look-ahead, not by the trace. The drain loop of `point.run_point` calls
`top_up` every time it wakes (at least every quarter second; the engine
asks for two seconds of schedule ahead, docs/benchmarks.md "Replaying a trace as a stream"). It runs on the
Python thread, off the measurement path: if it falls behind, the engine
sends late and the send lag says so; nothing waits for it.

Order: in independent mode, the file's. In dependent mode (sessions, the
default), a session is one unit, fed whole when its first turn comes up in
the file: its later turns are read from where the validating pass found them
(`trace_index`), and skipped when the sequential read reaches them.

Loops: a point that asks for more requests than the trace has reads it
again (the engine names the k-th pass's rows `#k`); `--duration` without a
request limit loops until the engine stops asking.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from specreplay import _core
from specreplay.settings.config import ReplayConfig
from specreplay.errors import TraceError
from specreplay.trace.media import MediaStore, media_dir
from specreplay.trace.shaping import Conversation, SessionTurn, base_url, request_batch, request_row
from specreplay.trace.think_time import ThinkTimes
from specreplay.trace.records import MAX_LINE_BYTES, TraceRecord, parse_line, read_lines_at
from specreplay.trace.index import TraceIndex

if TYPE_CHECKING:
    from specreplay._core import RunSpec

#: Requests per batch handed over (a session's turns are never split, so a
#: batch may hold more).
BATCH_ROWS = 64
#: Longest one top-up keeps the drain loop from draining.
TOP_UP_S = 0.2
#: A point whose requests take about this much of the trace file or less is
#: built whole before it starts (a shaped body is about its record's size;
#: synthesized prompts and stored media are written by the engine).
WHOLE_MAX_BYTES = 64 << 20
#: Requests shaped into columns at a time while a whole point is built.
WHOLE_ROWS = 4096

#: A record and its turn index in its session (None without a session).
_Turn = tuple[TraceRecord, "int | None"]
_T = TypeVar("_T")


class _Lap:
    """Between two passes over the trace."""


_LAP = _Lap()


class Prepared:
    """A run's requests built whole, once, for all its points (every point
    replays the same turns; only a search's request count may differ)."""

    def __init__(self) -> None:
        self.limit: int | None = None
        self.batch: pa.RecordBatch | None = None


class Feeder:
    """The requests of one point, built whole or read from the trace as the
    engine wants them."""

    def __init__(self, index: TraceIndex, config: ReplayConfig, url: str, model: str | None, prepared: Prepared | None = None) -> None:
        self.index = index
        self.config = config
        self.url = url
        self.base = base_url(url)
        self.model = model
        self.dependent = config.sessions == "dependent"
        self.live_history = config.live_history and self.dependent
        self.limit = config.num_requests
        self.loops = (self.limit is not None and self.limit > index.records) or (self.limit is None and config.duration is not None)
        self.think = ThinkTimes(config)
        self.media = MediaStore(media_dir(index.path))
        self.fed = 0
        self.units = 0
        self.done = False
        self.prepared = prepared or Prepared()
        self._units = self._stream(self._rows)

    def start(self, spec: RunSpec) -> _core.EngineRun:
        """Starts the point: given whole when its requests fit (`whole`),
        else streamed (`start_streamed`)."""
        if spec.get("share") is None and self.fits_whole():
            self.done = True
            return _core.start_point(spec, self.whole())
        return self.start_streamed(spec)

    def fits_whole(self) -> bool:
        """Whether this point's requests are built whole before it starts."""
        index = self.index
        needed = index.records if self.limit is None else min(self.limit, index.records)
        # The shaped size, not the file's: a compact trace's prompts are
        # synthesized into every body when the point is given whole.
        return index.shaped_size * needed <= WHOLE_MAX_BYTES * max(index.records, 1)

    def whole(self) -> pa.RecordBatch:
        """One pass over the trace (up to the request limit) as one batch,
        built once per run (`Prepared`): the engine loops over it."""
        limit = None if self.limit is None or self.limit >= self.index.records else self.limit
        prepared = self.prepared
        if prepared.batch is None or prepared.limit != limit:
            # Columns every WHOLE_ROWS requests: no more request dicts alive at once.
            batches: list[pa.RecordBatch] = []
            rows: list[dict[str, Any]] = []
            built = 0
            for unit in self._one_pass():
                if limit is not None:
                    unit = unit[: limit - built]
                rows.extend(self._rows(unit))
                built += len(unit)
                if len(rows) >= WHOLE_ROWS:
                    batches.append(request_batch(rows))
                    rows = []
                if limit is not None and built >= limit:
                    break
            if rows or not batches:
                batches.append(request_batch(rows))
            prepared.batch = batches[0] if len(batches) == 1 else _one_batch(batches)
            prepared.limit = limit
        return prepared.batch

    def start_streamed(self, spec: RunSpec) -> _core.EngineRun:
        """Starts the point with its first requests, and feeds it its look-ahead.

        A closed-loop point of N has its first N units (requests, or sessions
        in dependent mode) built before it starts: it sends them all at once,
        and how fast this thread builds requests must not decide how many are
        in flight; a closed loop has no schedule to be late against, so
        nothing would say so. An open-loop point starts with one batch: its
        first sends are spread over its schedule, and a late one is send lag.
        """
        load = spec["load"]
        wanted = load["concurrency"] if load["mode"] == "concurrency" else 1
        share = spec.get("share")
        if share is not None:
            # A distributed worker is fed every unit and keeps 1 in N of them.
            wanted *= share["workers"]
        first = [self._collect()]
        while self.units < wanted and not first[-1][2]:
            first.append(self._collect())
        batches = [(request_batch(rows) if rows else None, lap_end, end) for rows, lap_end, end in first]
        batch, lap_end, end = batches[0]
        assert batch is not None, "a trace has a record"
        run = _core.start_point(spec, batch, feed=True)
        self._mark(run, lap_end, end)
        for batch, lap_end, end in batches[1:]:
            if batch is not None:
                run.feed(batch)
            self._mark(run, lap_end, end)
        self.top_up(run)
        return run

    def top_up(self, run: _core.EngineRun) -> None:
        """Feeds `run` while it wants more (for at most `TOP_UP_S`)."""
        deadline = time.monotonic() + TOP_UP_S
        while not self.done and run.wants_more() and time.monotonic() < deadline:
            rows, lap_end, end = self._collect()
            if rows:
                run.feed(request_batch(rows))
            self._mark(run, lap_end, end)

    def drain(self) -> Iterator[tuple[list[dict[str, Any]], int]]:
        """Every remaining batch's rows with the pass over the trace they
        belong to, at once: for a prediction (`predict.Predictor`), which
        has no engine asking."""
        lap = 0
        while not self.done:
            rows, lap_end, end = self._collect()
            if rows:
                yield rows, lap
            lap += lap_end
            self.done = end

    def _mark(self, run: _core.EngineRun, lap_end: bool, end: bool) -> None:
        if lap_end:
            run.end_lap()
        if end:
            run.end_feed()
            self.done = True

    def _collect(self) -> tuple[list[dict[str, Any]], bool, bool]:
        """The next batch's rows (whole units), and whether a pass over the
        trace, or the whole feed, ends after them."""
        rows: list[dict[str, Any]] = []
        while len(rows) < BATCH_ROWS:
            unit = next(self._units, None)
            if unit is None:
                return rows, False, True
            if isinstance(unit, _Lap):
                return rows, True, False
            rows.extend(unit)
        return rows, False, False

    def outline(self) -> Iterator[list[tuple[str, str, str | None]] | _Lap]:
        """The units a feeder of this point feeds, in order, each request as
        (trace id, api, session id), without building them: what a lost
        distributed worker had been given (`distributed.driver`). Use a
        feeder that feeds nothing."""
        return self._stream(lambda unit: [(rec.id, rec.api, rec.session_id) for rec, _ in unit])

    def _stream(self, build: Callable[[list[_Turn]], list[_T]]) -> Iterator[list[_T] | _Lap]:
        """Each unit's rows (`build`), pass after pass, up to the request limit."""
        while True:
            for unit in self._one_pass():
                if self.limit is not None:
                    unit = unit[: self.limit - self.fed]
                rows = build(unit)
                self.fed += len(rows)
                self.units += 1
                yield rows
                if self.limit is not None and self.fed >= self.limit:
                    return
            if not self.loops:
                return
            yield _LAP

    def _one_pass(self) -> Iterator[list[_Turn]]:
        """The trace's units, read from the file in one pass."""
        index = self.index
        index.check_unchanged()
        path = Path(index.path)
        later, next_later = index.later_turns, 0
        with path.open("rb") as turns_file:
            for line_no, offset, raw in read_lines_at(path):
                if self.dependent and next_later < len(later) and later[next_later] == offset:
                    next_later += 1  # fed with its session's first turn
                    continue
                rec = parse_line(index.path, line_no, raw)
                if rec is None:
                    continue
                if rec.session_id is None:
                    yield [(rec, None)]
                    continue
                turns = index.sessions[rec.session_id]
                if not self.dependent:
                    yield [(rec, _position(turns.offsets, offset))]
                    continue
                rest = (self._read_at(turns_file, o, n) for o, n in zip(turns.offsets[1:], turns.lines[1:]))
                session: list[_Turn] = [(rec, 0)]
                session += [(r, k) for k, r in enumerate(rest, start=1)]
                yield session

    def _read_at(self, f: IO[bytes], offset: int, line_no: int) -> TraceRecord:
        f.seek(offset)
        rec = parse_line(self.index.path, line_no, f.readline(MAX_LINE_BYTES + 1))
        if rec is None:
            raise TraceError(self.index.path, line_no, None, "changed while it was being replayed (no record where one was)")
        return rec

    def _rows(self, unit: list[_Turn]) -> list[dict[str, Any]]:
        conversation = Conversation() if self.live_history else None
        rows = []
        previous: TraceRecord | None = None
        for rec, k in unit:
            turn = None
            if rec.session_id is not None and k is not None:
                think = self.think.us(previous, rec, k) if self.dependent and previous is not None else None
                answers = conversation.places(rec, k) if conversation is not None else []
                turn = SessionTurn(rec.session_id, k, think, answers)
            rows.append(request_row(rec, self.config, self.base, self.model, turn, self.media))
            previous = rec
        return rows


def _one_batch(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    """`batches` (one schema) as one batch (under `WHOLE_MAX_BYTES`, no
    column outgrows 32-bit offsets)."""
    (batch,) = pa.Table.from_batches(batches).combine_chunks().to_batches()
    return batch


def _position(offsets: Any, offset: int) -> int:
    """Index of `offset` in the ascending `offsets`."""
    from bisect import bisect_left

    return bisect_left(offsets, offset)
