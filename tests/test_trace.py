"""The trace reader: valid traces load, and every malformed one fails with
file, line and field."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from specreplay.errors import TraceError
from specreplay.trace.records import PromptBlocks, TraceRecord, load_trace, write_trace

ROOT = Path(__file__).resolve().parent.parent


def chat(i: int, arrival: float | None = 0.0, **extra: object) -> dict[str, object]:
    rec: dict[str, object] = {"id": f"r{i}", "api": "chat", "body": {"messages": [{"role": "user", "content": "hi"}]}}
    if arrival is not None:
        rec["arrival"] = arrival
    rec.update(extra)
    return rec


def write(tmp_path: Path, lines: list[object]) -> Path:
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return p


@pytest.mark.parametrize("name", ["reasoning-prompts.jsonl", "poisson-200.jsonl"])
def test_sample_traces_load(name: str) -> None:
    trace = load_trace(ROOT / "traces" / name)
    assert len(trace) >= 12
    assert trace.has_arrivals
    arrivals = [r.arrival for r in trace.records]
    assert arrivals == sorted(arrivals)


def test_round_trip(tmp_path: Path) -> None:
    recs = [
        TraceRecord(id="a", api="chat", body={"messages": []}, arrival=0.0, session_id="s", expected_output_tokens=5),
        TraceRecord(id="b", api="completions", body={"prompt": "x"}, arrival=1.5),
    ]
    p = tmp_path / "rt.jsonl"
    write_trace(recs, p)
    back = load_trace(p).records
    assert [(r.id, r.api, r.body, r.arrival, r.session_id, r.expected_output_tokens) for r in back] == [
        (r.id, r.api, r.body, r.arrival, r.session_id, r.expected_output_tokens) for r in recs
    ]


def test_capture_fields_round_trip(tmp_path: Path) -> None:
    response = {"status": 200, "ttfb_us": 1200, "end_us": 90000, "prompt_tokens": 12, "completion_tokens": 30,
                "reasoning_tokens": 20, "cached_tokens": None, "finish_reason": "stop"}
    recs = [
        TraceRecord(id="a", api="chat", body={"messages": []}, arrival=0.000125, path="/openai/v1/chat/completions",
                    response=response, expected_output_tokens=30),
        TraceRecord(id="b", api="completions", body={"prompt": "x"}, arrival=1.5, approximate=True),
    ]
    p = tmp_path / "rt.jsonl"
    write_trace(recs, p)
    assert '"approximate"' not in p.read_text().splitlines()[0]  # written only when true
    back = load_trace(p).records
    assert [(r.path, r.response, r.approximate, r.arrival) for r in back] == [
        (r.path, r.response, r.approximate, r.arrival) for r in recs
    ]


def blocks(i: int, **fields: object) -> dict[str, object]:
    """A compact record: the prompt as blocks, the body without messages."""
    pb: dict[str, object] = {"tokens": 1030, "block_size": 512, "hash_ids": [0, 1, 2]}
    pb.update(fields)
    return {"id": f"b{i}", "arrival": 0.0, "api": "chat", "prompt_blocks": pb, "body": {"max_tokens": 5}}


def test_prompt_blocks_round_trip(tmp_path: Path) -> None:
    recs = [
        TraceRecord(id="a", api="chat", body={"max_tokens": 5}, arrival=0.0,
                    prompt_blocks=PromptBlocks(tokens=1030, block_size=512, hash_ids=[0, 1, 2])),
        TraceRecord(id="b", api="completions", body={}, arrival=1.0,
                    prompt_blocks=PromptBlocks(tokens=16, block_size=16, hash_ids=[2**64 - 1], seed=7)),
    ]
    p = tmp_path / "pb.jsonl"
    write_trace(recs, p)
    assert '"seed"' not in p.read_text().splitlines()[0]  # written only when not 0
    assert [r.prompt_blocks for r in load_trace(p).records] == [r.prompt_blocks for r in recs]


def test_comments_and_blank_lines_are_skipped_and_lines_counted(tmp_path: Path) -> None:
    p = write(tmp_path, ["# a comment", "", chat(1), chat(2, arrival=1.0)])
    trace = load_trace(p)
    assert [r.line for r in trace.records] == [3, 4]
    # The digest covers the whole file, skipped lines included.
    assert trace.sha256 == hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("lines", "line", "field", "fragment"),
    [
        ([chat(1), "{not json"], 2, None, "invalid JSON"),
        ([chat(1), "[1, 2]"], 2, None, "expected a JSON object"),
        ([chat(1, arrival=-1.0)], 1, "arrival", "must not be negative"),
        ([chat(1, arrival="soon")], 1, "arrival", "must be a number"),
        ([chat(1, arrival=2.0), chat(2, arrival=1.0)], 2, "arrival", "goes backwards"),
        ([chat(1, arrival=0.0), chat(2, arrival=None)], 2, "arrival", "either every record"),
        ([chat(1, api="grpc")], 1, "api", "unknown API"),
        ([{"id": "x", "api": "chat"}], 1, "body", "missing"),
        ([{"id": "x", "api": "completions", "body": {"messages": []}}], 1, "body.prompt", "missing"),
        ([chat(1), chat(1)], 2, "id", "duplicate id"),
        ([chat(1, arival=3)], 1, "arival", "unknown field"),
        ([chat(1, expected_output_tokens=-3)], 1, "expected_output_tokens", "non-negative"),
        ([chat(1, path="v1/chat")], 1, "path", "starting with '/'"),
        ([chat(1, approximate="yes")], 1, "approximate", "true or false"),
        ([chat(1, response=[200])], 1, "response", "JSON object"),
        ([chat(1, response={"ttfb_us": 5})], 1, "response.status", "missing"),
        ([chat(1, response={"status": 200, "ttfb": 5})], 1, "response.ttfb", "unknown field"),
        ([chat(1, response={"status": 200, "end_us": -1})], 1, "response.end_us", "non-negative integer"),
        ([chat(1, response={"status": 200, "prompt_tokens": 1.5})], 1, "response.prompt_tokens", "non-negative integer"),
        ([chat(1, response={"status": 200, "finish_reason": 3})], 1, "response.finish_reason", "string or null"),
        ([{"id": "x", "api": "chat", "body": {}}], 1, "body.messages", "or prompt_blocks"),
        ([blocks(1, tokens=2000)], 1, "prompt_blocks.hash_ids", "3 blocks, but 2000 tokens need ceil(2000/512) = 4"),
        ([blocks(1, hash_ids=[0, -1, 2])], 1, "prompt_blocks.hash_ids", "integers from 0 to 2^64-1"),
        ([blocks(1, hash_ids=[0, 1, 2**64])], 1, "prompt_blocks.hash_ids", "integers from 0 to 2^64-1"),
        ([blocks(1, hash_ids="0,1,2")], 1, "prompt_blocks.hash_ids", "list of integers"),
        ([blocks(1, tokens=0, hash_ids=[])], 1, "prompt_blocks.tokens", "integer from 1 to 16777216"),
        ([blocks(1, tokens=2**24 + 1, block_size=2**25, hash_ids=[0])], 1, "prompt_blocks.tokens", "from 1 to 16777216"),
        ([blocks(1, block_size=None)], 1, "prompt_blocks.block_size", "missing"),
        ([blocks(1, seed=-1)], 1, "prompt_blocks.seed", "integer from 0 to"),
        ([blocks(1, text="hi")], 1, "prompt_blocks.text", "unknown field"),
        ([{**blocks(1), "prompt_blocks": [0, 1]}], 1, "prompt_blocks", "JSON object"),
        ([{**blocks(1), "body": {"messages": []}}], 1, "body.messages", "must not be given with prompt_blocks"),
    ],
)
def test_malformed_traces_name_file_line_and_field(
    tmp_path: Path, lines: list[object], line: int, field: str | None, fragment: str
) -> None:
    p = write(tmp_path, lines)
    with pytest.raises(TraceError) as err:
        load_trace(p)
    assert err.value.line == line
    assert err.value.field == field
    assert fragment in str(err.value)
    assert str(err.value).startswith(f"{p}:{line}: ")


def test_empty_and_missing_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n# nothing\n")
    with pytest.raises(TraceError, match="empty"):
        load_trace(empty)
    with pytest.raises(TraceError, match="no such file"):
        load_trace(tmp_path / "nope.jsonl")


def test_invalid_utf8_is_reported_with_its_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_bytes(json.dumps(chat(1)).encode() + b"\n" + b'{"id": "\xff"}\n')
    with pytest.raises(TraceError) as err:
        load_trace(p)
    assert err.value.line == 2


def test_huge_lines_are_refused_with_their_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import specreplay.trace.records as trace_mod

    monkeypatch.setattr(trace_mod, "MAX_LINE_BYTES", 1 << 10)
    p = tmp_path / "huge.jsonl"
    p.write_text(json.dumps(chat(1)) + "\n" + json.dumps(chat(2, arrival=1.0, body={"messages": [{"role": "user", "content": "x" * 4096}]})) + "\n")
    with pytest.raises(TraceError, match="line longer than") as err:
        load_trace(p)
    assert err.value.line == 2
