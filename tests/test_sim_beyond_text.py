"""The simulator beyond plain text, from Python: the embedded server's new
config keys (served models, media rule, tool-call rate, embedding size) and
`specreplay serve` with `[[models]]` in its file and `--extra-model` flags."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import click
import pytest

from specreplay._core import ConfigError, SimServer
from specreplay.commands.serve import parse_models

FAST = {"ttft_ms": 2, "prefill_us_per_token": 0, "tpot_ms": 1, "reasoning_tokens": [3, 5], "content_tokens": [2, 4]}


def post(url: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    req = urllib.request.Request(f"{url}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def png_uri(w: int, h: int) -> str:
    header = b"\x89PNG\r\n\x1a\n" + struct.pack(">I4sII5B", 13, b"IHDR", w, h, 8, 2, 0, 0, 0)
    return "data:image/png;base64," + base64.b64encode(header).decode()


def test_embedded_sim_serves_models_media_tools_and_embeddings() -> None:
    config: Any = {
        **FAST,
        "model": "base",
        "models": [{"name": "lora-a", "tpot_ms": 2}],
        "image_patch_px": 28,
        "image_merge": 1,
        "tool_call_rate": 1.0,
        "embedding_dim": 16,
    }
    with SimServer(port=0, config=config) as srv:
        with urllib.request.urlopen(f"{srv.url}/models", timeout=10) as resp:
            assert [m["id"] for m in json.load(resp)["data"]] == ["base", "lora-a"]
        # 280×140 at one token per 28×28 pixels: 10·5 = 50 tokens, plus the template's 4.
        image = {"type": "image_url", "image_url": {"url": png_uri(280, 140)}}
        status, answer = post(srv.url, "/chat/completions", {"model": "lora-a", "messages": [{"role": "user", "content": [image]}]})
        assert status == 200 and answer["model"] == "lora-a"
        assert answer["usage"]["prompt_tokens"] == 54
        tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}]
        status, called = post(srv.url, "/chat/completions", {"messages": [{"role": "user", "content": "go"}], "tools": tools})
        assert called["choices"][0]["finish_reason"] == "tool_calls"
        assert isinstance(json.loads(called["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])["x"], int)
        status, emb = post(srv.url, "/embeddings", {"input": ["a b", "c"]})
        assert status == 200 and [len(d["embedding"]) for d in emb["data"]] == [16, 16]
        assert emb["usage"]["prompt_tokens"] == 3
        status, missing = post(srv.url, "/embeddings", {"model": "nope", "input": "a"})
        assert status == 404 and missing["error"]["type"] == "not_found_error"


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"models": [{"name": ""}]}, "models[0].name"),
        ({"models": [{"name": "specreplay-sim"}]}, "models[0].name"),
        ({"models": [{"name": "x", "speed": 1}]}, "models"),
        ({"tool_call_rate": 1.5}, "tool_call_rate"),
        ({"image_merge": 0}, "image_merge"),
        ({"embedding_dim": 0}, "embedding_dim"),
    ],
)
def test_bad_new_keys_name_the_key(config: Any, key: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"sim: {key}")):
        SimServer(port=0, config=config)


def test_parse_models_flag() -> None:
    assert parse_models(("lora-a", "slow:ttft_ms=300,tpot_ms=40")) == [
        {"name": "lora-a"},
        {"name": "slow", "ttft_ms": 300.0, "tpot_ms": 40.0},
    ]
    with pytest.raises(click.BadParameter, match="'slow:fast'"):
        parse_models(("slow:fast",))


def test_cli_serve_with_models_from_file_and_flag(tmp_path: Path) -> None:
    cfg = tmp_path / "sim.toml"
    cfg.write_text('model = "base"\ntpot_ms = 1\nttft_ms = 2\n\n[[models]]\nname = "lora-a"\ntpot_ms = 2\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "specreplay", "serve", "--port", "0", "--config", str(cfg),
         "--extra-model", "lora-b:tpot_ms=3", "--embedding-dim", "4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        line = ""
        while time.monotonic() < deadline and not line.startswith("specreplay simulator serving"):
            line = proc.stdout.readline()
            assert line or proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        url = line.split()[3]
        with urllib.request.urlopen(f"{url}/models", timeout=10) as resp:
            assert [m["id"] for m in json.load(resp)["data"]] == ["base", "lora-a", "lora-b"]
        status, emb = post(url, "/embeddings", {"model": "lora-b", "input": "x y"})
        assert status == 200 and len(emb["data"][0]["embedding"]) == 4 and emb["model"] == "lora-b"
        status, rerank = post(url, "/rerank", {"query": "q", "documents": ["a", "b", "c"], "top_n": 1})
        assert status == 200 and len(rerank["results"]) == 1
        status, msg = post(url, "/messages", {"max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]})
        assert status == 200 and msg["type"] == "message" and msg["usage"]["input_tokens"] == 5
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def test_replay_against_the_embedded_sim_serves_every_dialect_media_and_models(tmp_path: Path) -> None:
    """`specreplay replay` without --url: an image request, a Responses and an
    Anthropic request on a second model name, and a tool-calling request."""
    import pyarrow as pa
    from click.testing import CliRunner

    from specreplay.cli import cli

    image = {"type": "image_url", "image_url": {"url": png_uri(280, 280)}}
    tools = [{"type": "function", "function": {"name": "w", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    rows = [
        {"id": "img", "arrival": 0.0, "api": "chat", "body": {"model": "base", "max_tokens": 500,
         "messages": [{"role": "user", "content": [{"type": "text", "text": "what is this"}, image]}]}},
        {"id": "resp", "arrival": 0.0, "api": "responses", "body": {"model": "lora-a", "input": "why is the sky blue", "max_output_tokens": 500}},
        {"id": "anth", "arrival": 0.0, "api": "anthropic", "body": {"model": "lora-a", "max_tokens": 500,
         "messages": [{"role": "user", "content": "why is the sky blue"}]}},
        {"id": "tool", "arrival": 0.0, "api": "chat", "body": {"model": "base", "messages": [{"role": "user", "content": "weather?"}], "tools": tools}},
    ]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sim = tmp_path / "sim.toml"
    sim.write_text(
        'model = "base"\nttft_ms = 5\nprefill_us_per_token = 0\ntpot_ms = 1\nreasoning_tokens = [5, 10]\n'
        'content_tokens = [3, 5]\n\n[[models]]\nname = "lora-a"\ntpot_ms = 2\n'
    )
    out = tmp_path / "r.arrow"
    result = CliRunner().invoke(cli, ["replay", str(trace), "--concurrency", "2", "--sim-config", str(sim), "-o", str(out)])
    assert result.exit_code == 0, result.output
    with pa.OSFile(str(out)) as f:
        table = pa.ipc.open_file(f).read_all()
    rows_by_id = {r["trace_id"]: r for r in table.to_pylist()}
    assert all(r["error_kind"] is None and r["http_status"] == 200 for r in rows_by_id.values())
    # 3 words + 4 template tokens + 100 image tokens (280×280 at one token per 28×28 pixels).
    assert rows_by_id["img"]["prompt_tokens"] == 107
    assert rows_by_id["resp"]["prompt_tokens"] == rows_by_id["anth"]["prompt_tokens"] == 9
    assert rows_by_id["resp"]["finish_reason"] == "stop"
    assert rows_by_id["anth"]["finish_reason"] == "end_turn"
    assert rows_by_id["tool"]["finish_reason"] == "tool_calls"
    # The text answers (tool-call tokens are the client's own column, issue 24's other half).
    for name in ("img", "resp", "anth"):
        r = rows_by_id[name]
        assert r["reasoning_tokens"] + r["content_tokens"] == r["output_tokens"]
