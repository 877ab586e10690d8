"""Replay reads the trace as a stream (issue 14): one validating pass that
keeps an index, then the requests read again, a batch at a time, in the
order the engine takes them (a session's turns together in dependent mode),
looped and cut as the point asks; and the rows it keeps for the summary are
compacted, so they cost what they hold."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from specreplay.settings.config import ReplayConfig
from specreplay.errors import TraceError
from specreplay.run.feed import BATCH_ROWS, Feeder, Prepared
from specreplay.trace.index import scan_trace


def record(i: int, session: str | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": f"r{i}", "arrival": float(i), "body": {"messages": [{"role": "user", "content": f"q{i}"}]}}
    if session is not None:
        out["session_id"] = session
    return {**out, **extra}


def write(tmp_path: Path, records: list[dict[str, Any]], name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in records))
    return p


class FakeRun:
    """What the feeder sees of an engine run: it wants `wanted` batches."""

    def __init__(self, wanted: int = 1_000) -> None:
        self.wanted = wanted
        self.events: list[Any] = []
        self.ended = False

    def wants_more(self) -> bool:
        return not self.ended and self.wanted > 0

    def feed(self, batch: pa.RecordBatch) -> None:
        self.wanted -= 1
        self.events.append(batch.to_pylist())

    def end_lap(self) -> None:
        self.events.append("lap")

    def end_feed(self) -> None:
        self.ended = True
        self.events.append("end")

    def rows(self) -> list[Any]:
        return [r for e in self.events if isinstance(e, list) for r in e]


def feed_all(path: Path, **options: Any) -> FakeRun:
    config = ReplayConfig(trace=str(path), **options)
    run = FakeRun()
    feeder = Feeder(scan_trace(path), config, "http://h:1/v1", None)
    while not feeder.done:
        feeder.top_up(run)  # type: ignore[arg-type]
    return run


# A trace whose sessions interleave, as a recording of several users does.
INTERLEAVED = [record(0, "a"), record(1, "b"), record(2), record(3, "a"), record(4, "b"), record(5, "a")]


def test_the_index_knows_the_sessions_and_keeps_no_record(tmp_path: Path) -> None:
    index = scan_trace(write(tmp_path, INTERLEAVED))
    assert (index.records, index.units, index.has_arrivals, index.has_sessions) == (6, 3, True, True)
    assert {k: len(v.offsets) for k, v in index.sessions.items()} == {"a": 3, "b": 2}
    assert list(index.sessions["a"].lines) == [1, 4, 6]
    assert len(index.later_turns) == 3 and list(index.later_turns) == sorted(index.later_turns)
    assert index.probe is not None and index.probe.id == "r0"


def test_dependent_mode_feeds_a_session_whole_when_its_first_turn_comes(tmp_path: Path) -> None:
    run = feed_all(write(tmp_path, INTERLEAVED))
    rows = run.rows()
    assert [(r["trace_id"], r["session_id"], r["turn_index"]) for r in rows] == [
        ("r0", "a", 0), ("r3", "a", 1), ("r5", "a", 2), ("r1", "b", 0), ("r4", "b", 1), ("r2", None, None),
    ]
    assert run.events[-1] == "end" and "lap" not in run.events


def test_independent_mode_feeds_the_files_order(tmp_path: Path) -> None:
    run = feed_all(write(tmp_path, INTERLEAVED), sessions="independent")
    assert [(r["trace_id"], r["turn_index"]) for r in run.rows()] == [
        ("r0", 0), ("r1", 0), ("r2", None), ("r3", 1), ("r4", 1), ("r5", 2),
    ]
    assert all(r["think_time_us"] is None for r in run.rows())


def test_a_longer_point_loops_lap_by_lap_and_stops_at_its_limit(tmp_path: Path) -> None:
    run = feed_all(write(tmp_path, INTERLEAVED), num_requests=14)
    ids = [e if isinstance(e, str) else [r["trace_id"] for r in e] for e in run.events]
    order = ["r0", "r3", "r5", "r1", "r4", "r2"]
    # Two whole passes, then the third cut in its first session: 6 + 6 + 2.
    assert ids == [order, "lap", order, "lap", ["r0", "r3"], "end"]


def test_batches_hold_whole_sessions(tmp_path: Path) -> None:
    records = [record(i, f"s{i // 10}") for i in range(300)]  # 30 sessions of 10 turns
    run = feed_all(write(tmp_path, records))
    batches = [e for e in run.events if isinstance(e, list)]
    assert all(len(b) == BATCH_ROWS + 6 or b is batches[-1] for b in batches)  # 7 sessions of 10
    for b in batches:
        assert b[0]["turn_index"] == 0 and len(b) % 10 == 0


def test_a_feed_stops_when_the_engine_wants_no_more(tmp_path: Path) -> None:
    path = write(tmp_path, [record(i) for i in range(1000)])
    feeder = Feeder(scan_trace(path), ReplayConfig(trace=str(path)), "http://h:1/v1", None)
    run = FakeRun(wanted=2)
    feeder.top_up(run)  # type: ignore[arg-type]
    assert len(run.rows()) == 2 * BATCH_ROWS and not feeder.done
    assert feeder.fed <= 2 * BATCH_ROWS + BATCH_ROWS  # read no further than the next batch


def start(path: Path, load: dict[str, Any], monkeypatch: pytest.MonkeyPatch, **options: Any) -> FakeRun:
    """Starts a streamed point through `Feeder.start` on a run that wants
    nothing more once started: what it was given is what was built before
    the start."""
    run = FakeRun(wanted=0)
    monkeypatch.setattr("specreplay.run.feed.WHOLE_MAX_BYTES", 0)

    def start_point(spec: Any, batch: pa.RecordBatch, feed: bool) -> FakeRun:
        assert feed
        run.events.append(batch.to_pylist())
        return run

    monkeypatch.setattr("specreplay.run.feed._core.start_point", start_point)
    config = ReplayConfig(trace=str(path), **options)
    Feeder(scan_trace(path), config, "http://h:1/v1", None).start({"load": load})  # type: ignore[typeddict-item]
    return run


def test_a_closed_loop_point_starts_with_its_first_n_units_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = write(tmp_path, [record(i) for i in range(1000)])
    closed = start(plain, {"mode": "concurrency", "concurrency": 300}, monkeypatch)
    assert 300 <= len(closed.rows()) < 300 + BATCH_ROWS
    assert [r["trace_id"] for r in closed.rows()] == [f"r{i}" for i in range(len(closed.rows()))]
    # An open loop starts with one batch: its first sends are spread over its schedule.
    opened = start(plain, {"mode": "rate", "rate": 10.0, "arrival": "constant", "burstiness": 1.0}, monkeypatch)
    assert len(opened.rows()) == BATCH_ROWS
    # Dependent sessions: N users start N sessions, each whole.
    sessions = write(tmp_path, [record(i, f"s{i // 3}") for i in range(900)], "s.jsonl")
    users = start(sessions, {"mode": "concurrency", "concurrency": 100}, monkeypatch)
    assert sum(r["turn_index"] == 0 for r in users.rows()) >= 100 and len(users.rows()) % 3 == 0
    # A trace shorter than N is looped, its laps marked in order.
    short = write(tmp_path, [record(i) for i in range(30)], "short.jsonl")
    looped = start(short, {"mode": "concurrency", "concurrency": 100}, monkeypatch, num_requests=100)
    sizes = [e if isinstance(e, str) else len(e) for e in looped.events]
    assert sizes == [30, "lap", 30, "lap", 30, "lap", 10, "end"]


def test_a_trace_that_fits_is_built_once_per_run_and_given_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 27: a point whose requests fit is handed to the engine as one
    batch before it starts (the engine loops over it), so nothing runs per
    request on the Python thread while the point runs; every point of a run
    reuses the batch."""
    started: list[tuple[bool, list[str]]] = []

    def start_point(spec: Any, batch: pa.RecordBatch, feed: bool = False) -> FakeRun:
        started.append((feed, batch.column("trace_id").to_pylist()))
        return FakeRun(wanted=0)

    monkeypatch.setattr("specreplay.run.feed._core.start_point", start_point)
    path = write(tmp_path, INTERLEAVED)
    load = {"mode": "rate", "rate": 10.0, "arrival": "constant", "burstiness": 1.0}
    order = ["r0", "r3", "r5", "r1", "r4", "r2"]
    prepared, built = Prepared(), []
    for limit in (None, 14, 14, 4):
        feeder = Feeder(scan_trace(path), ReplayConfig(trace=str(path), num_requests=limit), "http://h:1/v1", None, prepared)
        feeder.start({"load": load})  # type: ignore[typeddict-item]
        assert feeder.done  # nothing to top up
        built.append(prepared.batch)
    assert built[0] is built[1] is built[2] and built[3] is not built[0]  # one pass, reused
    # Once through; longer points loop in the engine over the same pass; a
    # shorter one is built only as far as it goes (the last session cut).
    assert started == [(False, order), (False, order), (False, order), (False, ["r0", "r3", "r5", "r1"])]
    # Built in column batches of WHOLE_ROWS requests, handed over as one.
    monkeypatch.setattr("specreplay.run.feed.WHOLE_ROWS", 2)
    feeder = Feeder(scan_trace(path), ReplayConfig(trace=str(path)), "http://h:1/v1", None)
    feeder.start({"load": load})  # type: ignore[typeddict-item]
    assert started[-1] == (False, order)
    # Over the size bound: streamed, as issue 14's large traces.
    monkeypatch.setattr("specreplay.run.feed.WHOLE_MAX_BYTES", 1)
    assert not Feeder(scan_trace(path), ReplayConfig(trace=str(path)), "http://h:1/v1", None).fits_whole()


def test_think_times_come_from_the_recorded_ends(tmp_path: Path) -> None:
    # A captured session: turn 0 arrived at 0 s and ended 1.5 s later; turn 1
    # arrived at 4 s: the user thought 2.5 s.
    records = [
        record(0, "a", response={"status": 200, "end_us": 1_500_000}),
        {**record(4, "a"), "response": {"status": 200}},
        record(5, "a"),
    ]
    rows = feed_all(write(tmp_path, records)).rows()
    # Turn 2's predecessor has no recorded end and no --think-time is set: 0
    # (sent when turn 1 ends; counted for the run's note, think_time.py).
    assert [r["think_time_us"] for r in rows] == [None, 2_500_000, 0]


def test_live_history_marks_where_each_earlier_answer_goes(tmp_path: Path) -> None:
    turns: list[dict[str, Any]] = []
    messages: list[dict[str, str]] = []
    for k in range(3):
        if k:
            messages.append({"role": "assistant", "content": f"recorded answer {k - 1}"})
        messages.append({"role": "user", "content": f"q{k}"})
        turns.append({"id": f"t{k}", "session_id": "s", "body": {"messages": list(messages)}})
    rows = feed_all(write(tmp_path, turns), live_history=True, concurrency=[1]).rows()
    assert [r["history_at"] for r in rows][0] is None
    last = rows[2]
    body = last["body"]
    # Both earlier answers are out of the body, and their places are given.
    assert b"recorded answer" not in body
    filled = body
    for j, at in sorted(enumerate(last["history_at"]), key=lambda p: -p[1]):
        filled = filled[:at] + f"live {j}".encode() + filled[at:]
    contents = [m["content"] for m in json.loads(filled)["messages"]]
    assert contents == ["q0", "live 0", "q1", "live 1", "q2"]
    # Without the option, the body is as recorded.
    rows = feed_all(write(tmp_path, turns), concurrency=[1]).rows()
    assert all(r["history_at"] is None for r in rows) and b"recorded answer 1" in rows[2]["body"]


def test_a_trace_that_changes_while_it_is_replayed_stops_the_feed(tmp_path: Path) -> None:
    path = write(tmp_path, [record(i) for i in range(10)])
    index = scan_trace(path)
    path.write_text(path.read_text() + json.dumps(record(10)) + "\n")
    os.utime(path, ns=(index.mtime_ns + 1_000_000, index.mtime_ns + 1_000_000))
    feeder = Feeder(index, ReplayConfig(trace=str(path)), "http://h:1/v1", None)
    with pytest.raises(TraceError, match="changed while it was being replayed"):
        feeder.top_up(FakeRun())  # type: ignore[arg-type]


def test_rows_kept_for_the_summary_are_compacted_in_order(tmp_path: Path) -> None:
    """The engine hands rows over a few at a time; the writer copies every
    COMPACT_EVERY batches into one (their buffers cost ~20 KB a row as they
    come), and the rows stay in order."""
    from specreplay.results.files import COMPACT_EVERY, ResultsWriter
    from specreplay.results.schema import engine_schema

    writer = ResultsWriter(tmp_path / "r.arrow", {})
    n = 2 * COMPACT_EVERY + 7
    for i in range(n):
        row = {name: None for name in engine_schema().names} | {"request_index": i, "trace_id": f"t{i}"}
        writer.write(pa.RecordBatch.from_pylist([row], schema=engine_schema()), run_id="r", label="l", point="p", point_index=0)
    table = writer.table()
    assert table.column("request_index").to_pylist() == list(range(n))
    assert table.column("request_index").num_chunks == 2 + 7  # two compacted batches, seven fresh ones
    assert writer.table(first_row=n - 3).column("trace_id").to_pylist() == [f"t{i}" for i in range(n - 3, n)]
    writer.close()
    assert pa.ipc.open_file(str(tmp_path / "r.arrow")).read_all().num_rows == n


def test_a_points_rows_are_replaced_from_its_first_row(tmp_path: Path) -> None:
    """A recount (--tokenizer) puts a point's rows in place of the ones
    written, across the writer's compactions, and the final file has them."""
    from specreplay.results.files import COMPACT_EVERY, ResultsWriter
    from specreplay.results.schema import engine_schema

    writer = ResultsWriter(tmp_path / "r.arrow", {})

    def write(i: int, point: str) -> None:
        row = {name: None for name in engine_schema().names} | {"request_index": i, "trace_id": f"t{i}"}
        writer.write(pa.RecordBatch.from_pylist([row], schema=engine_schema()), run_id="r", label="l", point=point, point_index=0)

    for i in range(COMPACT_EVERY + 3):
        write(i, "first")
    first_row = writer.rows
    for i in range(COMPACT_EVERY + 5):
        write(first_row + i, "second")
    mine = writer.table(first_row)
    recounted = mine.set_column(mine.schema.get_field_index("trace_id"), "trace_id", pa.array([f"x{i}" for i in range(mine.num_rows)]))
    writer.replace_from(first_row, recounted)
    table = writer.table()
    assert table.column("request_index").to_pylist() == list(range(table.num_rows))
    assert table.column("trace_id").to_pylist() == [f"t{i}" for i in range(first_row)] + [f"x{i}" for i in range(mine.num_rows)]
    with pytest.raises(ValueError, match="replace_from"):
        writer.replace_from(first_row, recounted.slice(1))
    writer.close()
    assert pa.ipc.open_file(str(tmp_path / "r.arrow")).read_all().column("trace_id").to_pylist()[-1] == f"x{mine.num_rows - 1}"


def test_live_history_marks_an_anthropic_tool_use_input(tmp_path: Path) -> None:
    """An Anthropic turn that answered with a `tool_use` block: the block's
    `input` is where the call the server made goes (the engine writes the
    object there; rust engine::body tests that half)."""
    first = [{"role": "user", "content": "weather in Paris?"}]
    call = {"role": "assistant", "content": [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "recorded"}},
    ]}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]}
    turns = [
        {"id": "t0", "session_id": "s", "api": "anthropic", "body": {"max_tokens": 50, "messages": first}},
        {"id": "t1", "session_id": "s", "api": "anthropic", "body": {"max_tokens": 50, "messages": [*first, call, result]}},
    ]
    rows = feed_all(write(tmp_path, turns), live_history=True, concurrency=[1]).rows()
    body, history = rows[1]["body"], rows[1]["history_at"]
    assert b"recorded" not in body
    (at,) = history
    assert body[at - 1 : at + 1] == b'""' and body[: at - 1].rstrip().endswith(b'"input":')
    sent = json.loads(body[: at - 1] + b'{"city": "live"}' + body[at + 1 :])
    blocks = sent["messages"][1]["content"]
    assert blocks[0] == {"type": "text", "text": "Let me look."}
    assert blocks[1]["input"] == {"city": "live"} and blocks[1]["id"] == "toolu_1"


def test_live_history_marks_a_responses_function_call(tmp_path: Path) -> None:
    """A Responses turn that answered with a `function_call` item: its
    `arguments` string is where the call the server made goes."""
    first = [{"role": "user", "content": "weather in Paris?"}]
    call = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "recorded"}'}
    result = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
    turns = [
        {"id": "t0", "session_id": "s", "api": "responses", "body": {"input": first}},
        {"id": "t1", "session_id": "s", "api": "responses", "body": {"input": [*first, call, result]}},
    ]
    rows = feed_all(write(tmp_path, turns), live_history=True, concurrency=[1]).rows()
    body, history = rows[1]["body"], rows[1]["history_at"]
    assert b"recorded" not in body
    (at,) = history
    sent = json.loads(body[:at] + b'{\\"city\\": \\"live\\"}' + body[at:])
    items = sent["input"]
    assert items[1] == {**call, "arguments": '{"city": "live"}'}
    assert items[2] == result


def test_a_compact_trace_is_weighed_by_its_synthesized_prompts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Four requests of 100,000 prompt tokens given by their blocks: a few
    # hundred bytes of file, about 2 MB of bodies once shaped. Under a bound
    # between the two, the point is streamed: a whole one would hold every
    # synthesized body at once (the Mooncake trace: 877 MiB instead of 282).
    blocks = {"tokens": 100_000, "block_size": 50_000, "hash_ids": [1, 2]}
    records = [{"id": f"b{i}", "arrival": 0.0, "api": "chat", "prompt_blocks": blocks, "body": {"max_tokens": 5}} for i in range(4)]
    path = write(tmp_path, records)
    index = scan_trace(path)
    assert index.shaped_size == index.size + 4 * 100_000 * 5
    monkeypatch.setattr("specreplay.run.feed.WHOLE_MAX_BYTES", 1 << 20)
    assert index.size < 1 << 20 < index.shaped_size
    assert not Feeder(index, ReplayConfig(trace=str(path)), "http://h:1/v1", None).fits_whole()
    # One of the four fits (500 KB): whole.
    assert Feeder(index, ReplayConfig(trace=str(path), num_requests=1), "http://h:1/v1", None).fits_whole()
