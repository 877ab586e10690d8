"""specreplay against a real llama.cpp server (llama-server, from PyPI's
xllamacpp wheel) running a scripted model made on the spot (see
realservers/scripted_model.py): the results must agree with the server's own
usage and timings, and the budget trap must be flagged from a real stream.

The model reasons 12 tokens, writes `</think>` and a blank line, answers 9
tokens and stops: llama.cpp counts 24 completion tokens (the EOS included)
and streams 21 text chunks (`</think>`, the blank line and the EOS make none).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

pytest.importorskip("xllamacpp", reason="no xllamacpp wheel for this platform: the llama.cpp server tests cannot run")

import specreplay  # noqa: E402
from specreplay.analysis import validity  # noqa: E402
from specreplay.settings.config import ReplayConfig  # noqa: E402
from specreplay.run.replay import run_replay  # noqa: E402
from specreplay.results.schema import CHANNELS  # noqa: E402

from realservers.llamacpp import LlamaCppServer  # noqa: E402
from realservers.scripted_model import ANSWER, REASONING, ScriptedModel, write_scripted_gguf  # noqa: E402

REASONING_CHUNKS = len(REASONING)  # 12: one chunk per reasoning token
CONTENT_CHUNKS = len(ANSWER)  # 9
COMPLETION_TOKENS = len(REASONING) + 2 + len(ANSWER) + 1  # + </think>, "\n\n" … + EOS = 24
QUESTION = [{"role": "user", "content": "What is 2+2?"}]


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LlamaCppServer, ScriptedModel]]:
    path = tmp_path_factory.mktemp("models") / "scripted.gguf"
    model = write_scripted_gguf(path, REASONING, ANSWER, close_think=True)
    with LlamaCppServer(path) as server:
        yield server, model


@pytest.fixture(scope="module")
def endless(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaCppServer]:
    path = tmp_path_factory.mktemp("models") / "endless.gguf"
    write_scripted_gguf(path, REASONING, ANSWER, close_think=False)
    with LlamaCppServer(path) as server:
        yield server


def write_trace(path: Path, n: int, api: str = "chat", **body: Any) -> str:
    with open(path, "w") as f:
        for i in range(n):
            payload = {"messages": QUESTION} if api == "chat" else {"prompt": f"Question {i}: what is 2+2?"}
            f.write(json.dumps({"id": f"q{i}", "api": api, "body": {**payload, **body}}) + "\n")
    return str(path)


def replay(tmp_path: Path, server: LlamaCppServer, trace: str, **options: Any) -> pd.DataFrame:
    if "rate" not in options and "speedup" not in options:
        options.setdefault("concurrency", [2])
    result = run_replay(ReplayConfig(trace=trace, url=server.api_url, output=str(tmp_path / "run.arrow"), timeout=30.0, **options))
    assert not result.interrupted
    df = specreplay.load(result.path)
    assert df["error_kind"].isna().all(), df["error_message"].dropna().tolist()
    return df


def channels(row: pd.Series) -> list[str]:
    return [CHANNELS[c] for c in row["chunk_channel"]]


def test_the_scripted_model_answers_as_scripted(scripted: tuple[LlamaCppServer, ScriptedModel]) -> None:
    server, model = scripted
    answer = server.post("/chat/completions", {"messages": QUESTION, "max_tokens": 100})
    message = answer["choices"][0]["message"]
    assert message["reasoning_content"] == "".join(REASONING)
    assert message["content"] == "".join(ANSWER)
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["usage"]["completion_tokens"] == COMPLETION_TOKENS == len(model.script)
    assert answer["timings"]["predicted_n"] == COMPLETION_TOKENS


def test_chat_replay_agrees_with_the_servers_usage_and_timings(tmp_path: Path, scripted: tuple[LlamaCppServer, ScriptedModel]) -> None:
    server, _ = scripted
    usage = server.post("/chat/completions", {"messages": QUESTION, "max_tokens": 100})["usage"]
    df = replay(tmp_path, server, write_trace(tmp_path / "t.jsonl", 6), max_tokens=100)
    assert len(df) == 6
    assert (df["finish_reason"] == "stop").all()
    assert (df["output_tokens"] == usage["completion_tokens"]).all()
    assert (df["reasoning_tokens"] + df["content_tokens"] == df["output_tokens"]).all()
    assert (df["prompt_tokens"] == usage["prompt_tokens"]).all()
    assert (df["server_predicted_n"] == df["output_tokens"]).all()
    assert (df["server_predicted_ms"] > 0).all()
    # `</think>`, the blank line and the EOS are tokens without a chunk.
    assert (df["chunk_count"] == REASONING_CHUNKS + CONTENT_CHUNKS).all()
    assert (df["chunk_count"] < df["output_tokens"]).all()
    # The probe saw llama.cpp's timings, so every request asked for
    # `timings_per_token`: each chunk's `predicted_n` gives exact counts.
    assert json.loads(df.attrs["specreplay.config"])["llamacpp_timings"] is True
    assert (df["token_source"] == "continuous_usage").all()
    assert (df["reasoning_tokens"] == REASONING_CHUNKS).all()
    assert (df["content_tokens"] == COMPLETION_TOKENS - REASONING_CHUNKS).all()
    for _, row in df.iterrows():
        assert channels(row) == ["reasoning"] * REASONING_CHUNKS + ["content"] * CONTENT_CHUNKS
        # "Here" carries `</think>` and the blank line; the EOS is in no chunk.
        assert list(row["chunk_tokens"]) == [1] * REASONING_CHUNKS + [3] + [1] * (CONTENT_CHUNKS - 1)
        assert row["sent_us"] < row["first_byte_us"] <= row["first_reasoning_us"] == row["first_token_us"]
        # `<=`: kernel stamps of two chunks that arrived within one µs are equal.
        assert row["first_token_us"] <= row["first_content_us"] <= row["last_token_us"] <= row["end_us"]
    levels = {f.code: f.level for f in validity.check(df)}
    assert "estimated_tokens" not in levels and "reasoning_ate_budget" not in levels
    assert levels["multi_token_chunks"] == "note"


def test_without_per_chunk_counts_the_split_is_estimated_and_flagged(tmp_path: Path, scripted: tuple[LlamaCppServer, ScriptedModel]) -> None:
    server, _ = scripted
    df = replay(tmp_path, server, write_trace(tmp_path / "t.jsonl", 4), max_tokens=100, continuous_usage=False)
    # llama.cpp's usage has the total only: with both channels streamed the
    # split is estimated from the chunks' text (24 over 12 reasoning and 9
    # content chunks → 13 + 11, as for the recorded stream in the engine's
    # tests; exact is 12 + 12), and so are the per-chunk counts.
    assert (df["token_source"] == "usage_split_estimated").all()
    assert (df["chunk_token_source"] == "text_length").all()
    assert (df["output_tokens"] == COMPLETION_TOKENS).all()
    assert (df["reasoning_tokens"] == 13).all() and (df["content_tokens"] == 11).all()
    assert all(int(sum(k)) == COMPLETION_TOKENS for k in df["chunk_tokens"])
    assert (df["server_predicted_n"] == COMPLETION_TOKENS).all()
    levels = {f.code: f.level for f in validity.check(df)}
    assert levels["estimated_tokens"] == "warning"


def test_budget_below_the_reasoning_is_the_trap_and_is_flagged(tmp_path: Path, scripted: tuple[LlamaCppServer, ScriptedModel]) -> None:
    server, _ = scripted
    raw = server.stream("/chat/completions", {"messages": QUESTION, "max_tokens": 5, "stream_options": {"include_usage": True}})
    assert not any(c["choices"] and "content" in c["choices"][0]["delta"] and c["choices"][0]["delta"]["content"] for c in raw[:-1])
    df = replay(tmp_path, server, write_trace(tmp_path / "t.jsonl", 4), max_tokens=5)
    assert (df["finish_reason"] == "length").all()
    assert (df["content_tokens"] == 0).all()
    assert (df["reasoning_tokens"] == 5).all() and (df["output_tokens"] == 5).all()
    assert (df["server_predicted_n"] == 5).all()
    assert (df["chunk_count"] == 5).all()
    assert df["first_content_us"].isna().all()
    assert (df["token_source"] == "continuous_usage").all()
    findings = [f for f in validity.check(df) if f.code == "reasoning_ate_budget"]
    assert len(findings) == 1 and findings[0].level == "error" and findings[0].count == 4


def test_a_model_that_never_closes_its_think_block_is_the_trap_at_any_budget(tmp_path: Path, endless: LlamaCppServer) -> None:
    df = replay(tmp_path, endless, write_trace(tmp_path / "t.jsonl", 4), max_tokens=200)
    assert (df["finish_reason"] == "length").all()
    assert (df["output_tokens"] == 200).all() and (df["reasoning_tokens"] == 200).all()
    assert (df["content_tokens"] == 0).all()
    assert (df["server_predicted_n"] == 200).all()
    assert (df["chunk_count"] == 200).all()  # every token of the loop is a word: one chunk each
    levels = {f.code: f.level for f in validity.check(df)}
    assert levels["reasoning_ate_budget"] == "error"


def test_completions_api_streams_everything_as_text(tmp_path: Path, scripted: tuple[LlamaCppServer, ScriptedModel]) -> None:
    server, _ = scripted
    usage = server.post("/completions", {"prompt": "Question 0: what is 2+2?", "max_tokens": 100})["usage"]
    assert usage["completion_tokens"] == COMPLETION_TOKENS
    df = replay(tmp_path, server, write_trace(tmp_path / "t.jsonl", 4, api="completions"), max_tokens=100)
    assert (df["finish_reason"] == "stop").all()
    assert (df["output_tokens"] == COMPLETION_TOKENS).all()
    # The completions API parses no reasoning: `</think>` and the blank line
    # are text chunks like any other; only the EOS makes none.
    assert (df["reasoning_tokens"] == 0).all() and (df["content_tokens"] == COMPLETION_TOKENS).all()
    assert (df["chunk_count"] == COMPLETION_TOKENS - 1).all()
    assert (df["token_source"] == "continuous_usage").all()
    assert (df["server_predicted_n"] == COMPLETION_TOKENS).all()


def test_cli_replay_against_llamacpp_prints_the_trap(tmp_path: Path, scripted: tuple[LlamaCppServer, ScriptedModel]) -> None:
    from click.testing import CliRunner

    from specreplay.cli import cli

    server, _ = scripted
    trace = write_trace(tmp_path / "t.jsonl", 3)
    args = ["replay", trace, "--url", server.api_url, "--concurrency", "2", "--max-tokens", "5", "--strict", "-o", str(tmp_path / "r.arrow")]
    result = CliRunner().invoke(cli, args, env={"COLUMNS": "160"})
    assert result.exit_code != 0, result.output
    assert "INVALID MEASUREMENT" in result.output and "reasoning_ate_budget" in result.output


def test_capture_through_the_proxy_against_llamacpp(tmp_path: Path, scripted: tuple[LlamaCppServer, ScriptedModel]) -> None:
    """An application talks to llama.cpp through `specreplay capture`; the
    trace records what llama.cpp answered, and replays against it."""
    import os
    import re
    import subprocess
    import sys
    import urllib.request

    from specreplay.trace.records import load_trace

    server, _ = scripted
    trace_path = tmp_path / "captured.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specreplay", "capture", "--upstream", server.api_url, "--listen", "127.0.0.1:0",
         "-o", str(trace_path), "--max-requests", "3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"forwarding (http://\S+/v1)", line)
        assert match, line
        body = {"messages": QUESTION, "max_tokens": 100, "stream": True, "stream_options": {"include_usage": True}}

        def content(url: str) -> str:
            req = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(), headers={"content-type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as resp:
                events = [json.loads(x[6:]) for x in resp.read().decode().split("\n") if x.startswith("data: {")]
            return "".join((c["delta"].get("content") or "") for e in events for c in e.get("choices", []))

        through = [content(match.group(1)) for _ in range(3)]
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert through == [content(server.api_url)] * 3 == ["".join(ANSWER)] * 3
    records = load_trace(trace_path).records
    assert len(records) == 3
    for rec in records:
        assert rec.response is not None
        assert rec.response["status"] == 200
        assert rec.response["completion_tokens"] == COMPLETION_TOKENS
        assert rec.response["finish_reason"] == "stop"
    df = replay(tmp_path, server, str(trace_path), speedup=[1.0])
    assert len(df) == 3 and (df["output_tokens"] == COMPLETION_TOKENS).all()


def test_an_imported_mooncake_excerpt_replays_with_no_request_refused(tmp_path: Path) -> None:
    """Issue 14's end to end: `specreplay import mooncake EXCERPT -o mc.jsonl &&
    specreplay replay mc.jsonl --url LLAMA --speedup 10 --max-tokens 64`. The
    excerpt is real Mooncake lines (the conversation trace's first eight
    prompts under 1K tokens: a byte-level vocabulary makes ~6 tokens of each
    filler word, so this server needs a 8K context per slot). Every body must
    be one llama.cpp accepts: the imported min_tokens lowered with the
    budget, the prompt synthesized from its blocks."""
    from click.testing import CliRunner

    from specreplay.cli import cli
    from specreplay.trace.records import load_trace

    excerpt = Path(__file__).resolve().parent.parent / "traces" / "public" / "mooncake-conversation-short.jsonl"
    trace = tmp_path / "mc.jsonl"
    imported = CliRunner().invoke(cli, ["import", "mooncake", str(excerpt), "-o", str(trace)])
    assert imported.exit_code == 0, imported.output
    records = load_trace(trace).records
    assert len(records) == 8 and all(r.prompt_blocks is not None for r in records)
    assert sum(r.body["min_tokens"] > 64 for r in records) == 6  # what --max-tokens 64 must lower
    model = tmp_path / "scripted-8k.gguf"
    write_scripted_gguf(model, REASONING, ANSWER, close_think=True, context=8192)
    with LlamaCppServer(model, ctx=16384) as server:
        args = ["replay", str(trace), "--url", server.api_url, "--speedup", "10", "--max-tokens", "64", "--timeout", "60",
                "-o", str(tmp_path / "r.arrow")]
        result = CliRunner().invoke(cli, args, env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    df = specreplay.load(tmp_path / "r.arrow")
    assert len(df) == 8
    assert df["error_kind"].isna().all(), df["error_message"].dropna().tolist()
    assert (df["http_status"] == 200).all()
    assert (df["output_tokens"] == 64).all() and (df["finish_reason"] == "length").all()  # ignore_eos: the whole budget
    # Each prompt reached the server whole: at least one token per filler word.
    words = {r.id: r.prompt_blocks.tokens for r in records if r.prompt_blocks}
    assert all(df["prompt_tokens"] >= df["trace_id"].map(words))


def test_the_servers_tokenize_counts_the_chunks_after_the_point(tmp_path: Path, scripted: tuple[LlamaCppServer, ScriptedModel]) -> None:
    server, _ = scripted
    df = replay(tmp_path, server, write_trace(tmp_path / "t.jsonl", 4), max_tokens=100, continuous_usage=False, server_tokenize=True)
    assert (df["chunk_token_source"] == "tokenizer").all()
    assert (df["output_tokens"] == COMPLETION_TOKENS).all()
    assert all(int(sum(k)) == COMPLETION_TOKENS for k in df["chunk_tokens"])
    assert (df["reasoning_tokens"] + df["content_tokens"] == df["output_tokens"]).all()
    # The scripted model's tokenizer spells text byte by byte (its generated
    # tokens are whole words), so /tokenize counts bytes: reconciled with the
    # 24 tokens, every chunk keeps at least one, none is zero.
    assert all(min(k) >= 1 for k in df["chunk_tokens"])


# --- tool calls (llama.cpp with --jinja parses the scripted model's <tool_call>) ---

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def tool_caller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaCppServer]:
    from realservers.scripted_model import TOOL_CALL, TOOL_TEMPLATE

    path = tmp_path_factory.mktemp("models") / "tools.gguf"
    write_scripted_gguf(path, [], TOOL_CALL, close_think=True, template=TOOL_TEMPLATE)
    with LlamaCppServer(path, jinja=True) as server:
        yield server


def test_tool_calls_from_llamacpp_are_output_of_their_own(tmp_path: Path, tool_caller: LlamaCppServer) -> None:
    whole = tool_caller.post("/chat/completions", {"messages": QUESTION, "tools": TOOLS, "max_tokens": 100})
    call = whole["choices"][0]["message"]["tool_calls"][0]["function"]
    assert (call["name"], json.loads(call["arguments"])) == ("get_weather", {"city": "Paris"})
    df = replay(tmp_path, tool_caller, write_trace(tmp_path / "t.jsonl", 4, tools=TOOLS), max_tokens=100)
    assert (df["finish_reason"] == "tool_calls").all()
    assert (df["tool_calls"] == 1).all() and df["tool_args_valid"].all()
    assert (df["output_tokens"] == whole["usage"]["completion_tokens"]).all()
    assert (df["reasoning_tokens"] + df["content_tokens"] + df["tool_call_tokens"] == df["output_tokens"]).all()
    # The call's tokens are tool-call output; only the EOS, which made no chunk, is left to the content.
    assert (df["tool_call_tokens"] >= df["output_tokens"] - 1).all() and (df["tool_call_tokens"] > 0).all()
    for _, row in df.iterrows():
        assert set(channels(row)) == {"tool"}
    assert "tool_args_cut" not in {f.code for f in validity.check(df)}


def test_a_tool_call_cut_at_max_tokens_is_flagged(tmp_path: Path, tool_caller: LlamaCppServer) -> None:
    df = replay(tmp_path, tool_caller, write_trace(tmp_path / "t.jsonl", 2, tools=TOOLS), max_tokens=4)
    assert (df["finish_reason"] == "length").all()
    assert (df["tool_call_tokens"] > 0).all(), df[["content_tokens", "tool_call_tokens"]]
    found = {f.code: f.level for f in validity.check(df)}
    assert found.get("tool_args_cut") == "error"
