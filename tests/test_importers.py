"""`specreplay import`: each public trace format, written here in its exact
schema, becomes a valid specreplay trace; malformed rows fail with file,
line and field, or are skipped, counted and reported with --skip-invalid."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from specreplay.cli import cli
from specreplay.settings.config import ReplayConfig
from specreplay.errors import TraceError
from specreplay.trace.importers import Options, import_trace, parse_timestamp_us
from specreplay.trace.shaping import body_with_prompt
from specreplay.trace.text import approx_tokens
from specreplay.trace.records import TraceRecord, load_trace

from session_walk import think_times


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def jsonl(rows: list[object]) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


def prompt_of(rec: TraceRecord) -> str:
    """The prompt replay sends: as written, or synthesized from prompt_blocks."""
    body = body_with_prompt(rec)
    return str(body["messages"][0]["content"]) if rec.api == "chat" else str(body["prompt"])


def run_import(fmt: str, src: Path, tmp_path: Path, **opts: object) -> tuple[list[TraceRecord], object]:
    out = tmp_path / "out.jsonl"
    report = import_trace(fmt, src, out, Options(**opts))  # type: ignore[arg-type]
    return load_trace(out).records, report


MOONCAKE = [
    {"timestamp": 0, "input_length": 1030, "output_length": 10, "hash_ids": [0, 1, 2]},
    {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 7]},
    {"timestamp": 3000, "input_length": 512, "output_length": 354, "hash_ids": [9]},
    {"timestamp": 2500, "input_length": 1100, "output_length": 20, "hash_ids": [0, 1, 8]},
]


def test_mooncake_arrivals_lengths_and_shared_prefixes(tmp_path: Path) -> None:
    recs, report = run_import("mooncake", write(tmp_path, "m.jsonl", jsonl(MOONCAKE)), tmp_path)
    assert [r.arrival for r in recs] == [0.0, 0.0, 2.5, 3.0]  # ms → s, sorted
    assert report.reordered == 1  # type: ignore[attr-defined]
    assert [r.id for r in recs] == ["1", "2", "4", "3"]  # source line numbers
    words = {r.id: prompt_of(r).split() for r in recs}
    assert [len(words[i]) for i in ("1", "2", "3", "4")] == [1030, 600, 512, 1100]
    assert all(approx_tokens(prompt_of(r)) == len(words[r.id]) for r in recs)
    # Equal hash ids → equal text: 1 and 4 share blocks 0 and 1, 2 shares block 0.
    assert words["1"][:1024] == words["4"][:1024]
    assert words["1"][1024:] != words["4"][1024:1030]
    assert words["2"][:512] == words["1"][:512] and words["2"][512:] != words["1"][512:600]
    assert words["3"] != words["1"][:512]
    for r, src in zip(recs, [MOONCAKE[0], MOONCAKE[1], MOONCAKE[3], MOONCAKE[2]]):
        out = src["output_length"]
        assert r.body["max_tokens"] == r.body["min_tokens"] == r.expected_output_tokens == out
        assert r.body["ignore_eos"] is True
        assert r.approximate


def test_mooncake_completions_api_and_model(tmp_path: Path) -> None:
    recs, _ = run_import("mooncake", write(tmp_path, "m.jsonl", jsonl(MOONCAKE[:1])), tmp_path, api="completions", model="m1")
    assert recs[0].api == "completions" and recs[0].body["model"] == "m1"
    assert len(prompt_of(recs[0]).split()) == 1030


def test_bailian_defaults_sessions_and_block_size(tmp_path: Path) -> None:
    rows = [
        {"chat_id": 10, "parent_chat_id": -1, "timestamp": 0.5, "input_length": 40, "output_length": 8, "turn": 1, "type": "text", "hash_ids": [1, 2, 3]},
        {"chat_id": 11, "parent_chat_id": -1, "timestamp": 0.75, "input_length": 16, "output_length": 3, "turn": 1, "type": "search", "hash_ids": [5]},
        {"chat_id": 12, "parent_chat_id": 10, "timestamp": 2.25, "input_length": 70, "output_length": 9, "turn": 2, "type": "text", "hash_ids": [1, 2, 3, 4, 6]},
        {"chat_id": 13, "parent_chat_id": 12, "timestamp": 4.0, "input_length": 80, "output_length": 2, "turn": 3, "type": "text", "hash_ids": [1, 2, 3, 4, 6]},
    ]
    recs, _ = run_import("bailian", write(tmp_path, "b.jsonl", jsonl(rows)), tmp_path)
    assert [r.arrival for r in recs] == [0.0, 0.25, 1.75, 3.5]  # float seconds
    assert [r.session_id for r in recs] == ["10", "11", "10", "10"]  # the root of each chain
    p = [prompt_of(r).split() for r in recs]
    assert [len(x) for x in p] == [40, 16, 70, 80]
    assert p[2][:40] == p[0]  # blocks 1–3 (16 tokens each, last one partial in the first turn)
    assert p[3][:70] == p[2]
    # Bailian records no end times: the think times are --think-time's, else 0 (said in a note).
    assert think_times(recs)[0] == [None, None, 0, 0]
    got, times = think_times(recs, ReplayConfig(think_time="1.5"))
    assert got == [None, None, 1_500_000, 1_500_000] and times.sources.drawn == 2


@pytest.mark.parametrize(
    ("row", "field", "fragment"),
    [
        ({"timestamp": "x", "input_length": 1, "output_length": 1, "hash_ids": [0]}, "timestamp", "non-negative number"),
        ({"timestamp": 1, "output_length": 1, "hash_ids": [0]}, "input_length", "missing"),
        ({"timestamp": 1, "input_length": -4, "output_length": 1, "hash_ids": []}, "input_length", "integer ≥ 0"),
        ({"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": ["a"]}, "hash_ids", "list of integers"),
        ({"timestamp": 1, "input_length": 2000, "output_length": 1, "hash_ids": [0]}, "hash_ids", "--block-size"),
    ],
)
def test_mooncake_malformed_rows_name_the_line_and_field(tmp_path: Path, row: dict[str, object], field: str, fragment: str) -> None:
    src = write(tmp_path, "m.jsonl", jsonl([MOONCAKE[0], row, MOONCAKE[2]]))
    with pytest.raises(TraceError) as err:
        import_trace("mooncake", src, tmp_path / "o.jsonl")
    assert (err.value.line, err.value.field) == (2, field)
    assert fragment in str(err.value)
    assert str(err.value).startswith(f"{src}:2: field '{field}'")


def test_rows_are_put_in_order_within_a_window_and_a_file_beyond_it_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import specreplay.trace.importers.pipeline as pipeline

    monkeypatch.setattr(pipeline, "REORDER_WINDOW", 3)
    stamps = [0, 2000, 1000, 3000, 4000, 5000, 6000]
    rows = [{"timestamp": t, "input_length": 10, "output_length": 1, "hash_ids": [i]} for i, t in enumerate(stamps)]
    recs, report = run_import("mooncake", write(tmp_path, "m.jsonl", jsonl(rows)), tmp_path)
    assert [r.arrival for r in recs] == sorted(t / 1000 for t in stamps) and report.reordered == 1  # type: ignore[attr-defined]
    late = rows + [{"timestamp": 500, "input_length": 10, "output_length": 1, "hash_ids": [9]}]
    with pytest.raises(TraceError) as err:
        import_trace("mooncake", write(tmp_path, "late.jsonl", jsonl(late)), tmp_path / "o.jsonl")
    assert err.value.line == 8 and "sort the file by time first" in str(err.value)
    assert not (tmp_path / "o.jsonl").exists()


def test_prompts_beyond_what_can_be_synthesized_are_skipped(tmp_path: Path) -> None:
    small = {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}
    huge = {"timestamp": 5, "input_length": 2**24 + 1, "output_length": 1, "hash_ids": [1]}
    recs, report = run_import("mooncake", write(tmp_path, "m.jsonl", jsonl([small, huge])), tmp_path, block_size=2**25)
    assert len(recs) == 1
    assert report.skipped == {"prompts longer than 16777216 tokens (the most specreplay synthesizes)": 1}  # type: ignore[attr-defined]


def test_skip_invalid_counts_and_reports_malformed_rows(tmp_path: Path) -> None:
    src = write(tmp_path, "m.jsonl", jsonl([MOONCAKE[0], "{broken", {"timestamp": 5}, MOONCAKE[2]]))
    recs, report = run_import("mooncake", src, tmp_path, skip_invalid=True)
    assert len(recs) == 2
    lines = report.lines()  # type: ignore[attr-defined]
    assert any("skipped 2: malformed rows" in line and "first: line 2" in line for line in lines), lines


AZURE_2023 = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.2000000,879,0
2023-11-16 18:15:52.0000000,0,30
2023-11-16 18:16:02.1,1000,20
"""

AZURE_2024 = """TIMESTAMP,ContextTokens,GeneratedTokens
2024-05-10 00:00:00+00:00,2048,28
2024-05-10 00:00:00.004512+00:00,1121,11
2024-05-10 00:00:01.5+00:00,300,7
2024-05-10 02:00:00+02:00,301,8
"""


def test_azure_2023_fractional_timestamps_and_zero_counts(tmp_path: Path) -> None:
    recs, report = run_import("azure", write(tmp_path, "a.csv", AZURE_2023), tmp_path)
    assert [r.arrival for r in recs] == [0.0, 4.314579, 15.41941]
    assert [len(prompt_of(r).split()) for r in recs] == [374, 396, 1000]
    assert [r.expected_output_tokens for r in recs] == [44, 109, 20]
    assert report.skipped == {"requests with 0 output tokens": 1, "requests with 0 input tokens": 1}  # type: ignore[attr-defined]
    # No hash ids: every prompt is its own text.
    assert prompt_of(recs[0]).split()[:50] != prompt_of(recs[1]).split()[:50]


def test_azure_2024_time_zones_with_and_without_fractions(tmp_path: Path) -> None:
    recs, _ = run_import("azure", write(tmp_path, "a.csv", AZURE_2024), tmp_path)
    assert [r.arrival for r in recs] == [0.0, 0.0, 0.004512, 1.5]  # +02:00 two hours later is the same instant
    assert [r.expected_output_tokens for r in recs] == [28, 8, 11, 7]


def test_timestamp_parser() -> None:
    assert parse_timestamp_us("1970-01-01 00:00:01.5") == 1_500_000
    assert parse_timestamp_us("1970-01-01T00:00:01Z") == 1_000_000
    assert parse_timestamp_us("1970-01-01 01:00:00+01:00") == 0
    assert parse_timestamp_us("1970-01-01 00:00:00.1234567") == 123_456
    with pytest.raises(ValueError):
        parse_timestamp_us("16/11/2023 18:15")


@pytest.mark.parametrize(
    ("text", "line", "field", "fragment"),
    [
        ("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,3\n", 1, "GeneratedTokens", "missing column"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3,4\nyesterday,3,4\n", 3, "TIMESTAMP", "not a timestamp"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3,4\n2023-11-16 18:15:47,x,4\n", 3, "ContextTokens", "not a number"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3,4.5\n", 2, "GeneratedTokens", "non-negative integer"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3\n", 2, None, "expected 3 columns"),
    ],
)
def test_azure_malformed(tmp_path: Path, text: str, line: int, field: str | None, fragment: str) -> None:
    with pytest.raises(TraceError) as err:
        import_trace("azure", write(tmp_path, "a.csv", text), tmp_path / "o.jsonl")
    assert (err.value.line, err.value.field) == (line, field)
    assert fragment in str(err.value)


BURSTGPT = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
45,ChatGPT,1087,0,1087,Conversation log
118,GPT-4,417,276,693,API log
118,ChatGPT,24,54,78,Conversation log
"""


def test_burstgpt_drops_failures_and_finds_columns_by_name(tmp_path: Path) -> None:
    recs, report = run_import("burstgpt", write(tmp_path, "b.csv", BURSTGPT), tmp_path)
    assert [r.arrival for r in recs] == [0.0, 113.0, 113.0]
    assert [(len(prompt_of(r).split()), r.expected_output_tokens) for r in recs] == [(472, 18), (417, 276), (24, 54)]
    assert report.skipped == {"failed requests (0 response tokens)": 1}  # type: ignore[attr-defined]
    assert any("skipped 1: failed requests" in line for line in report.lines())  # type: ignore[attr-defined]
    # A newer release with extra columns, in another order.
    newer = "Session ID,Response tokens,Timestamp,Elapsed time,Request tokens\nabc,10,1.5,3.2,100\ndef,11,2.0,1.0,200\n"
    recs, _ = run_import("burstgpt", write(tmp_path, "b2.csv", newer), tmp_path)
    assert [(r.arrival, r.expected_output_tokens, len(prompt_of(r).split())) for r in recs] == [(0.0, 10, 100), (0.5, 11, 200)]


def test_burstgpt_malformed(tmp_path: Path) -> None:
    bad = BURSTGPT + "soon,ChatGPT,1,1,2,Conversation log\n"
    with pytest.raises(TraceError) as err:
        import_trace("burstgpt", write(tmp_path, "b.csv", bad), tmp_path / "o.jsonl")
    assert (err.value.line, err.value.field) == (6, "Timestamp")
    with pytest.raises(TraceError, match="missing column"):
        import_trace("burstgpt", write(tmp_path, "c.csv", "Timestamp,Request tokens\n1,2\n"), tmp_path / "o.jsonl")


SHAREGPT = [
    {"id": "QWJhYvA_0", "conversations": [
        {"from": "human", "value": "Summarize the plot of Hamlet in three sentences."},
        {"from": "gpt", "value": "Prince Hamlet seeks revenge on his uncle Claudius, who murdered his father."},
        {"from": "human", "value": "Thanks"},
    ]},
    {"id": "solo", "conversations": [{"from": "human", "value": "hello?"}]},
    {"id": "i6IyJda_0", "conversations": [{"from": "human", "value": "Write a haiku."}, {"from": "gpt", "value": "Autumn moonlight—"}]},
]


def test_sharegpt_prompts_reference_lengths_and_source_ids(tmp_path: Path) -> None:
    src = write(tmp_path, "s.json", json.dumps(SHAREGPT, indent=2))
    recs, report = run_import("sharegpt", src, tmp_path, first_turn_only=True)
    assert [r.arrival for r in recs] == [None, None, None]
    assert [r.id for r in recs] == ["QWJhYvA_0", "solo", "i6IyJda_0"]  # the source's ids
    assert [prompt_of(r) for r in recs] == ["Summarize the plot of Hamlet in three sentences.", "hello?", "Write a haiku."]
    answer = SHAREGPT[0]["conversations"][1]["value"]  # type: ignore[index]
    assert recs[0].expected_output_tokens == approx_tokens(answer) == recs[0].body["max_tokens"]
    assert recs[0].approximate and not recs[1].approximate
    # A conversation of one turn has no reply to take a length from: none is set.
    assert recs[1].expected_output_tokens is None and "max_tokens" not in recs[1].body
    assert report.no_output_length == 1  # type: ignore[attr-defined]
    assert all(r.session_id is None for r in recs)


def test_sharegpt_conversations_become_sessions_each_turn_carrying_the_conversation(tmp_path: Path) -> None:
    src = write(tmp_path, "s.json", json.dumps(SHAREGPT, indent=2))
    recs, report = run_import("sharegpt", src, tmp_path)
    assert [(r.id, r.session_id) for r in recs] == [
        ("QWJhYvA_0", "QWJhYvA_0"), ("QWJhYvA_0/1", "QWJhYvA_0"), ("solo", None), ("i6IyJda_0", None)]
    first, second = recs[0].body["messages"], recs[1].body["messages"]
    conv = SHAREGPT[0]["conversations"]  # type: ignore[index]
    assert first == [{"role": "user", "content": conv[0]["value"]}]
    # The later turn: the conversation so far, the recorded answer as history.
    assert second == first + [{"role": "assistant", "content": conv[1]["value"]}, {"role": "user", "content": "Thanks"}]
    assert recs[1].expected_output_tokens is None  # nothing answered "Thanks"
    assert any("sessions: 2 requests are turns of 1 sessions" in line for line in report.lines())  # type: ignore[attr-defined]
    # As completions, the conversation's texts joined.
    recs, _ = run_import("sharegpt", src, tmp_path, api="completions")
    assert recs[1].body["prompt"] == "\n\n".join(t["value"] for t in conv)


def test_sharegpt_speakers_roles_and_broken_conversations(tmp_path: Path) -> None:
    entries = [
        {"id": "c", "conversations": [
            {"from": "gpt", "value": "Hi! How can I help?"},          # nothing asked it: dropped
            {"from": "system", "value": "Be brief."},
            {"from": "human", "value": "One"}, {"from": "human", "value": "Two"},  # one speaker twice: joined
            {"from": "chatgpt", "value": "A reply"},
            {"from": "user", "value": "Three"}, {"from": "gpt", "value": "  "},   # an empty answer ends it
            {"from": "human", "value": "Four"}, {"from": "gpt", "value": "x"},
        ]},
        {"id": "e", "conversations": [{"from": "human", "value": " "}, {"from": "gpt", "value": "y"}]},
    ]
    recs, report = run_import("sharegpt", write(tmp_path, "s.json", json.dumps(entries)), tmp_path)
    assert [r.id for r in recs] == ["c"]  # "c/1" ended with its empty answer; "e" has an empty prompt
    assert recs[0].body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "One\n\nTwo"}]
    assert recs[0].session_id == "c"  # it has two human turns, though the data kept one
    assert report.skipped["empty prompt or reply"] == 1  # type: ignore[attr-defined]
    bad = [{"id": "b", "conversations": [{"from": "robot", "value": "x"}]}]
    with pytest.raises(TraceError) as err:
        import_trace("sharegpt", write(tmp_path, "b.json", json.dumps(bad)), tmp_path / "o.jsonl")
    assert err.value.field == "[0].conversations[0].from" and "got 'robot'" in err.value.message


def test_sharegpt_over_limit_keeps_the_start_of_the_conversation(tmp_path: Path) -> None:
    entry = {"id": "t", "conversations": [
        {"from": "human", "value": "word " * 10}, {"from": "gpt", "value": "yes " * 10},
        {"from": "human", "value": "more " * 10}, {"from": "gpt", "value": "ok"}]}
    src = write(tmp_path, "s.json", json.dumps([entry]))
    recs, report = run_import("sharegpt", src, tmp_path, max_prompt_tokens=25, over_limit="truncate")
    assert [approx_tokens(" ".join(m["content"] for m in r.body["messages"])) for r in recs] == [10, 25]
    later = recs[1].body["messages"]
    assert later[:1] == recs[0].body["messages"] and later[1]["content"] == "yes " * 10
    assert later[2] == {"role": "user", "content": ("more " * 5).strip()} and recs[1].approximate
    recs, _ = run_import("sharegpt", src, tmp_path, max_prompt_tokens=25)
    assert [r.id for r in recs] == ["t"]


def test_sharegpt_malformed_entries_name_line_and_entry(tmp_path: Path) -> None:
    bad = [SHAREGPT[0], {"conversations": [{"from": "human"}, {"from": "gpt", "value": "x"}]}]
    src = write(tmp_path, "s.json", json.dumps(bad, indent=1))
    with pytest.raises(TraceError) as err:
        import_trace("sharegpt", src, tmp_path / "o.jsonl")
    assert err.value.field == "[1].conversations[0].value"
    starts = [i + 1 for i, line in enumerate(json.dumps(bad, indent=1).splitlines()) if line == " {"]
    assert err.value.line == starts[1]
    with pytest.raises(TraceError, match="JSON array"):
        import_trace("sharegpt", write(tmp_path, "t.json", '{"conversations": []}'), tmp_path / "o.jsonl")
    with pytest.raises(TraceError, match="invalid JSON"):
        import_trace("sharegpt", write(tmp_path, "u.json", '[{"conversations": [}]'), tmp_path / "o.jsonl")


def test_vllm_custom_jsonl(tmp_path: Path) -> None:
    src = write(tmp_path, "v.jsonl", jsonl([{"prompt": "What is 2+2?"}, {"prompt": "Tell me a story", "output_tokens": 64}]))
    recs, _ = run_import("vllm", src, tmp_path, api="completions")
    assert [r.body for r in recs] == [
        {"prompt": "What is 2+2?"},
        {"prompt": "Tell me a story", "max_tokens": 64, "min_tokens": 64, "ignore_eos": True},
    ]
    assert not any(r.approximate for r in recs)
    with pytest.raises(TraceError) as err:
        import_trace("vllm", write(tmp_path, "w.jsonl", jsonl([{"prompt": "a"}, {"text": "b"}])), tmp_path / "o.jsonl")
    assert (err.value.line, err.value.field) == (2, "prompt")


def test_import_cli_is_discoverable_and_reports(tmp_path: Path) -> None:
    runner = CliRunner()
    top = runner.invoke(cli, ["--help"])
    assert all(name in top.output for name in ("capture", "import", "synth"))
    help_ = runner.invoke(cli, ["import", "--help"])
    assert help_.exit_code == 0
    assert all(name in help_.output for name in ("mooncake", "bailian", "azure", "burstgpt", "sharegpt", "vllm"))
    src = write(tmp_path, "b.csv", BURSTGPT)
    out = tmp_path / "t.jsonl"
    result = runner.invoke(cli, ["import", "burstgpt", str(src), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "imported 3 requests" in result.output and "skipped 1: failed requests" in result.output
    assert len(load_trace(out)) == 3
    bad = runner.invoke(cli, ["import", "azure", str(src), "-o", str(out)])
    assert bad.exit_code == 1 and "missing column" in bad.output


def test_capture_format_sorts_a_capture_left_unsorted(tmp_path: Path) -> None:
    rows = [
        "# specreplay capture of http://127.0.0.1:8000/v1 started 2026-01-01T00:00:00Z",
        {"id": "2", "arrival": 0.5, "api": "chat", "response": {"status": 200}, "body": {"messages": []}},
        {"id": "1", "arrival": 0.0, "api": "chat", "response": {"status": 200, "end_us": 900000}, "body": {"messages": []}},
    ]
    src = write(tmp_path, "c.jsonl", jsonl(rows))
    with pytest.raises(TraceError, match="goes backwards"):
        load_trace(src)
    recs, _ = run_import("capture", src, tmp_path)
    assert [(r.id, r.arrival, r.response) for r in recs] == [
        ("1", 0.0, {"status": 200, "end_us": 900000}), ("2", 0.5, {"status": 200})]
    bad = write(tmp_path, "d.jsonl", jsonl([rows[1], {"id": "3", "arrival": 1, "api": "chat", "response": {}, "body": {"messages": []}}]))
    with pytest.raises(TraceError) as err:
        import_trace("capture", bad, tmp_path / "o.jsonl")
    assert (err.value.line, err.value.field) == (2, "response.status")
