"""Request shaping: what replay changes in a recorded body, and nothing else."""

from __future__ import annotations

import json

import pytest

from specreplay.settings.config import ReplayConfig
from specreplay.errors import ConfigError
from specreplay.results.schema import request_schema
from specreplay.trace.shaping import auth_headers, base_url, body_with_prompt, prepare, redact_url, shape_body
from specreplay.trace.records import PromptBlocks, TraceRecord


def rec(api: str, body: dict[str, object]) -> TraceRecord:
    return TraceRecord(id="x", api=api, body=body, arrival=1.0)


def test_chat_body_streams_with_usage_and_keeps_the_rest() -> None:
    cfg = ReplayConfig(trace="t", max_tokens=64, ignore_eos=True, extra_body={"temperature": 0})
    body = shape_body(rec("chat", {"messages": [], "temperature": 0.7, "top_p": 0.9}), cfg, "m")
    assert body == {
        "messages": [],
        "temperature": 0,
        "top_p": 0.9,
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "max_tokens": 64,
        "ignore_eos": True,
    }


def test_budget_goes_in_the_field_each_api_uses() -> None:
    cfg = ReplayConfig(trace="t", max_tokens=10)
    assert shape_body(rec("chat", {"messages": [], "max_completion_tokens": 5}), cfg, None)["max_completion_tokens"] == 10
    assert shape_body(rec("responses", {"input": "x"}), cfg, None)["max_output_tokens"] == 10
    anthropic = shape_body(rec("anthropic", {"messages": []}), cfg, None)
    assert anthropic["max_tokens"] == 10
    assert "stream_options" not in anthropic


def test_lowering_the_budget_keeps_the_body_coherent() -> None:
    """Issue 14 item 1: an imported body asks for max_tokens = min_tokens = 500;
    --max-tokens 32 must lower min_tokens too (vLLM and the simulator answer
    400 'min_tokens 500 is larger than max_tokens 32')."""
    imported = {"messages": [], "max_tokens": 500, "min_tokens": 500, "ignore_eos": True}
    body = shape_body(rec("chat", imported), ReplayConfig(trace="t", max_tokens=32), None)
    assert (body["max_tokens"], body["min_tokens"], body["ignore_eos"]) == (32, 32, True)
    # A min_tokens already within the budget is kept; raising the budget keeps it too.
    assert shape_body(rec("chat", {**imported, "min_tokens": 20}), ReplayConfig(trace="t", max_tokens=32), None)["min_tokens"] == 20
    assert shape_body(rec("chat", imported), ReplayConfig(trace="t", max_tokens=900), None)["min_tokens"] == 500
    # Both budget names in one body: both are set.
    both = shape_body(rec("chat", {**imported, "max_completion_tokens": 500}), ReplayConfig(trace="t", max_tokens=8), None)
    assert (both["max_completion_tokens"], both["max_tokens"], both["min_tokens"]) == (8, 8, 8)
    responses = shape_body(rec("responses", {"input": "x", "min_tokens": 50}), ReplayConfig(trace="t", max_tokens=10), None)
    assert (responses["max_output_tokens"], responses["min_tokens"]) == (10, 10)
    assert imported["min_tokens"] == 500  # the record is not changed


def test_prompt_blocks_become_the_input_of_each_api() -> None:
    pb = PromptBlocks(tokens=600, block_size=512, hash_ids=[4, 9])
    bodies = {api: body_with_prompt(TraceRecord(id="x", api=api, body={"max_tokens": 3}, prompt_blocks=pb))
              for api in ("chat", "completions", "responses", "anthropic")}
    text = bodies["completions"]["prompt"]
    assert len(text.split()) == 600
    assert bodies["chat"]["messages"] == [{"role": "user", "content": text}] == bodies["anthropic"]["messages"]
    assert bodies["responses"]["input"] == text
    assert all(b["max_tokens"] == 3 for b in bodies.values())
    # A record with text keeps it; the same blocks always give the same text.
    assert body_with_prompt(rec("chat", {"messages": [{"role": "user", "content": "hi"}]}))["messages"][0]["content"] == "hi"
    again = body_with_prompt(TraceRecord(id="y", api="completions", body={}, prompt_blocks=pb))
    assert again["prompt"] == text
    seeded = PromptBlocks(tokens=600, block_size=512, hash_ids=[4, 9], seed=3)
    assert body_with_prompt(TraceRecord(id="z", api="completions", body={}, prompt_blocks=seeded))["prompt"] != text
    # Replay hands the blocks to the engine, which writes the same text where
    # the request's body leaves its place.
    row = prepare([TraceRecord(id="x", api="completions", body={}, prompt_blocks=pb)], ReplayConfig(trace="t"), "http://h:1", None).to_pylist()[0]
    assert row["prompt_blocks"] == {"tokens": 600, "block_size": 512, "hash_ids": [4, 9], "seed": 0}
    at = row["prompt_at"]
    assert json.loads(row["body"][:at] + text.encode() + row["body"][at:])["prompt"] == text


def test_only_the_requests_a_run_can_send_are_built() -> None:
    records = [TraceRecord(id=str(i), api="completions", body={}, arrival=float(i),
                           prompt_blocks=PromptBlocks(tokens=8, block_size=8, hash_ids=[i])) for i in range(10)]
    assert prepare(records, ReplayConfig(trace="t", num_requests=3), "http://h:1", None)["trace_id"].to_pylist() == ["0", "1", "2"]
    assert prepare(records, ReplayConfig(trace="t", num_requests=25), "http://h:1", None).num_rows == 10  # the engine loops them
    assert prepare(records, ReplayConfig(trace="t"), "http://h:1", None).num_rows == 10


def test_no_continuous_usage() -> None:
    cfg = ReplayConfig(trace="t", continuous_usage=False)
    assert shape_body(rec("completions", {"prompt": "p"}), cfg, None)["stream_options"] == {"include_usage": True}


def test_recorded_body_is_not_mutated() -> None:
    original = {"messages": [{"role": "user", "content": "x"}]}
    r = rec("chat", original)
    shape_body(r, ReplayConfig(trace="t", extra_body={"messages": []}), "m")
    assert original == {"messages": [{"role": "user", "content": "x"}]}


def test_urls() -> None:
    assert base_url("http://h:8000") == "http://h:8000/v1"
    assert base_url("http://h:8000/v1/") == "http://h:8000/v1"
    assert base_url("https://h/openai/v1") == "https://h/openai/v1"
    assert redact_url("https://user:secret@h:443/v1?key=abc") == "https://h:443/v1"
    reqs = prepare([rec("chat", {"messages": []}), rec("completions", {"prompt": "p"})], ReplayConfig(trace="t"), "http://h:1", "m")
    assert reqs.schema == request_schema()
    assert reqs.column("url").to_pylist() == ["http://h:1/v1/chat/completions", "http://h:1/v1/completions"]
    assert json.loads(reqs.column("body")[0].as_py())["model"] == "m"
    assert reqs.column("arrival_s").to_pylist() == [1.0, 1.0]


def test_api_key_becomes_headers_and_never_metadata() -> None:
    cfg = ReplayConfig(trace="t", api_key="sk-secret", headers={"X-Api-Key": "other-secret", "X-Trace": "1"})
    headers = auth_headers(cfg, {"chat", "anthropic"})
    assert ("Authorization", "Bearer sk-secret") in headers
    assert ("anthropic-version", "2023-06-01") in headers
    assert not any(k == "x-api-key" for k, _ in headers)  # the user's own X-Api-Key wins
    meta = json.dumps(cfg.to_metadata())
    assert "sk-secret" not in meta and "other-secret" not in meta
    assert '"X-Trace": "1"' in meta


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"rate": [0.0]}, "rate: must be positive"),
        ({"rate": [1.0], "concurrency": [2]}, "only one of"),
        ({"arrival": "weibull"}, "arrival: expected one of"),
        ({"burstiness": -1.0}, "burstiness: must be positive"),
        ({"num_requests": 0}, "num_requests: must be at least 1"),
        ({"duration": 0.0}, "duration: must be positive"),
        ({"url": "ftp://x"}, "url: expected an http"),
    ],
)
def test_config_validation(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        ReplayConfig(trace="t", **kwargs).validate()  # type: ignore[arg-type]


def test_points() -> None:
    assert [p.name for p in ReplayConfig(trace="t", concurrency=[1, 8]).points(False)] == ["concurrency=1", "concurrency=8"]
    assert [p.name for p in ReplayConfig(trace="t").points(True)] == ["speedup=1"]
    with pytest.raises(ConfigError, match="no arrival times"):
        ReplayConfig(trace="t").points(False)
    with pytest.raises(ConfigError, match="has none"):
        ReplayConfig(trace="t", speedup=[2.0]).points(False)


def test_llamacpp_is_asked_for_timings_on_every_chunk() -> None:
    # Set by the probe when the server streams llama.cpp's `timings`.
    cfg = ReplayConfig(trace="t", llamacpp_timings=True)
    assert shape_body(rec("chat", {"messages": []}), cfg, None)["timings_per_token"] is True
    assert shape_body(rec("completions", {"prompt": "p"}), cfg, None)["timings_per_token"] is True
    assert "timings_per_token" not in shape_body(rec("responses", {"input": "x"}), cfg, None)
    off = ReplayConfig(trace="t", llamacpp_timings=True, continuous_usage=False)
    assert "timings_per_token" not in shape_body(rec("chat", {"messages": []}), off, None)
    assert "timings_per_token" not in shape_body(rec("chat", {"messages": []}), ReplayConfig(trace="t"), None)
