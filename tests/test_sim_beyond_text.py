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
