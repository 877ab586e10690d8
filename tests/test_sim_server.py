"""The simulated reasoning server from Python: in-process `SimServer` and the
`specreplay serve` command, spoken to with the standard library only."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import realtime_permitted

from specreplay._core import ConfigError, SimServer

FAST = {
    "ttft_ms": 40,
    "prefill_us_per_token": 0,
    "tpot_ms": 2,
    "reasoning_tokens": [15, 25],
    "content_tokens": [5, 10],
    "seed": 3,
}


@pytest.fixture()
def server() -> Iterator[SimServer]:
    with SimServer(port=0, config=FAST) as srv:
        yield srv


def post_stream(srv: SimServer, body: dict[str, Any]) -> tuple[list[Any], float, float]:
    """POSTs a chat request; returns the SSE payloads, the time to the first
    body bytes and the total time (seconds)."""
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=30)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.getheader("Content-Type") == "text/event-stream"
    first_line = resp.readline()
    t_first = time.perf_counter() - t0
    raw = first_line + resp.read()
    total = time.perf_counter() - t0
    conn.close()
    events: list[Any] = []
    for block in raw.decode().split("\n\n"):
        if not block:
            continue
        assert block.startswith("data: "), block
        data = block[len("data: ") :]
        events.append(data if data == "[DONE]" else json.loads(data))
    return events, t_first, total


def chat_body(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "specreplay-sim",
        "messages": [{"role": "user", "content": "How many fence posts for 120 meters?"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    body.update(extra)
    return body


def split_deltas(events: list[Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The chunks with choices (role chunk excluded) and the usage chunk."""
    assert events[-1] == "[DONE]"
    usage_chunk = events[-2]
    assert usage_chunk["choices"] == []
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    return events[1:-2], usage_chunk["usage"]


def words(value: object) -> int:
    return len(value.split()) if isinstance(value, str) else 0


def test_properties_and_url(server: SimServer) -> None:
    assert server.host == "127.0.0.1"
    assert server.port > 0
    assert server.url == f"http://127.0.0.1:{server.port}/v1"
    assert server.running
    with urllib.request.urlopen(f"{server.url}/models", timeout=10) as resp:
        models = json.load(resp)
    assert models["data"][0]["id"] == "specreplay-sim"


def test_stream_reasoning_then_content_then_usage(server: SimServer) -> None:
    events, t_first, total = post_stream(server, chat_body())
    deltas, usage = split_deltas(events)
    phases = []
    reasoning = content = 0
    for chunk in deltas:
        delta = chunk["choices"][0]["delta"]
        r, c = words(delta.get("reasoning_content")), words(delta.get("content"))
        reasoning += r
        content += c
        phases += ["reasoning"] * (r > 0) + ["content"] * (c > 0)
    # Order: every reasoning delta before every content delta.
    assert phases == sorted(phases, key=["reasoning", "content"].index)
    assert reasoning > 0 and content > 0
    assert deltas[-1]["choices"][0]["finish_reason"] == "stop"
    assert usage["completion_tokens"] == reasoning + content
    assert usage["completion_tokens_details"]["reasoning_tokens"] == reasoning
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    # Generous timing bounds: TTFT >= ttft; the whole stream >= ttft + (steps - 1) × tpot.
    assert t_first >= 0.040 * 0.95
    assert total >= 0.040 + (len(deltas) - 1) * 0.002 * 0.95


def test_small_max_tokens_is_eaten_by_reasoning(server: SimServer) -> None:
    events, _, _ = post_stream(server, chat_body(max_tokens=10))
    deltas, usage = split_deltas(events)
    assert all(not chunk["choices"][0]["delta"].get("content") for chunk in deltas)
    assert deltas[-1]["choices"][0]["finish_reason"] == "length"
    assert usage["completion_tokens"] == 10
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 10


def test_same_request_same_answer(server: SimServer) -> None:
    def texts() -> list[Any]:
        events, _, _ = post_stream(server, chat_body())
        return [chunk["choices"][0]["delta"] for chunk in split_deltas(events)[0]]

    assert texts() == texts()


def test_non_streaming_and_bad_json(server: SimServer) -> None:
    body = chat_body(stream=False, max_completion_tokens=12)
    del body["stream_options"]
    req = urllib.request.Request(
        f"{server.url}/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        answer = json.load(resp)
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["choices"][0]["message"]["content"] is None
    bad = urllib.request.Request(f"{server.url}/chat/completions", b"{nope", {"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(bad, timeout=10)
    assert err.value.code == 400
    assert json.load(err.value)["error"]["type"] == "invalid_request_error"


def test_stop_is_idempotent() -> None:
    srv = SimServer(config={"ttft_ms": 0})
    port = srv.port
    srv.stop()
    srv.stop()
    assert not srv.running
    with pytest.raises(OSError):
        http.client.HTTPConnection("127.0.0.1", port, timeout=2).request("GET", "/health")


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"tpot": 3}, "tpot"),
        ({"tpot_ms": "fast"}, "tpot_ms"),
        ({"tpot_ms": -1}, "tpot_ms"),
        ({"reasoning_tokens": [9, 1]}, "reasoning_tokens"),
        ({"reasoning_field": "thoughts"}, "reasoning_field"),
        ({"spec_acceptance": float("nan")}, "spec_acceptance"),
    ],
)
def test_bad_config_names_the_key(config: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        SimServer(config=config)


def test_config_error_is_a_value_error_family() -> None:
    with pytest.raises(ConfigError) as err:
        SimServer(config={"nope": 1})
    assert "nope" in str(err.value)


def _wait_for_line(proc: subprocess.Popen[str], deadline: float) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(f"serve exited early: {proc.poll()} {proc.stderr.read() if proc.stderr else ''}")
    assert time.monotonic() < deadline
    return line


def test_cli_serve_answers_and_stops(tmp_path: Path) -> None:
    cfg = tmp_path / "sim.toml"
    cfg.write_text('tpot_ms = 1\nttft_ms = 5\nreasoning_tokens = [4, 4]\ncontent_tokens = [3, 3]\nmodel = "file-model"\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "specreplay", "serve", "--port", "0", "--config", str(cfg), "--model", "flag-model"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = _wait_for_line(proc, time.monotonic() + 30)
        url = line.split()[3]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1"), line
        with urllib.request.urlopen(f"{url}/models", timeout=10) as resp:
            assert json.load(resp)["data"][0]["id"] == "flag-model"
        body = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
        req = urllib.request.Request(f"{url}/chat/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            answer = json.load(resp)
        assert answer["usage"]["completion_tokens"] == 7
        assert answer["usage"]["completion_tokens_details"]["reasoning_tokens"] == 4
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def test_cli_serve_config_error_names_file_and_key(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("tpot_ms = 2\ntop_ms = 3\n")
    proc = subprocess.run(
        [sys.executable, "-m", "specreplay", "serve", "--port", "0", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode != 0
    err = proc.stderr.strip()
    assert "bad.toml" in err and "top_ms" in err, err
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err


def test_fault_config_validates_and_injects() -> None:
    config = {**FAST, "faults": {"http_503": 0.05, "stall_between_tokens": 0.01}, "fault_stall_ms": 500, "fault_retry_after_s": 3}
    with SimServer(port=0, config=config) as srv:
        body = json.dumps(chat_body(stream=False)).encode()
        req = urllib.request.Request(
            f"{srv.url}/chat/completions",
            body,
            {"Content-Type": "application/json", "x-specreplay-fault": "http_429"},
        )
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 429
        assert err.value.headers["Retry-After"] == "3"
        with urllib.request.urlopen(f"http://{srv.host}:{srv.port}/sim/stats", timeout=10) as resp:
            stats = json.load(resp)
        assert stats["requests"] == 1 and stats["forced"] == 1
        assert stats["faults"]["http_429"] == 1


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"faults": {"http_503": 1.5}}, "faults.http_503: must be a probability in [0, 1]"),
        ({"faults": {"http_504": 0.1}}, "faults.http_504: unknown variant"),
        ({"faults": {"http_503": 0.6, "http_500": 0.6}}, "faults: the fractions add up to"),
        ({"faults": {"http_503": "often"}}, "faults.http_503:"),
        ({"fault_stall_ms": -1}, "fault_stall_ms:"),
        ({"fault_oversized_bytes": 2**40}, "fault_oversized_bytes:"),
    ],
)
def test_bad_fault_config_names_the_key(config: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        SimServer(config=config)
    assert f"invalid configuration: sim: {key}" in str(err.value)


def test_cli_fault_flags_merge_over_the_file() -> None:
    from specreplay.commands.serve import build_config, parse_faults

    flags = parse_faults(("http_503=0.3", "missing_done = 0.1"))
    assert flags == {"http_503": 0.3, "missing_done": 0.1}
    config = build_config({"faults": {"http_503": 0.1, "http_500": 0.2}, "fault_stall_ms": 9}, {"faults": flags, "fault_stall_ms": 5})
    assert config == {"faults": {"http_503": 0.3, "http_500": 0.2, "missing_done": 0.1}, "fault_stall_ms": 5}


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--fault", "http_504=0.1"], "command line: invalid configuration: sim: faults.http_504"),
        (["--fault", "http_503=2"], "command line: invalid configuration: sim: faults.http_503"),
        (["--fault", "http_503"], "KIND=FRACTION"),
        (["--fault-stall-ms", "-5"], "command line: invalid configuration: sim: fault_stall_ms"),
    ],
)
def test_cli_fault_flag_errors(args: list[str], expect: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "specreplay", "serve", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode != 0
    assert expect in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_fault_error_in_the_file_names_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "faults.toml"
    cfg.write_text("faults = { http_503 = 0.05, stall_between_tokens = 1.5 }\n")
    proc = subprocess.run(
        [sys.executable, "-m", "specreplay", "serve", "--port", "0", "--config", str(cfg), "--fault", "http_503=0.1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode != 0
    assert "faults.toml: invalid configuration: sim: faults.stall_between_tokens" in proc.stderr, proc.stderr



REAL_TIME_PROBE = """
import json, os, pathlib, time
from specreplay._core import SimServer
def policies(name):
    return sorted({os.sched_getscheduler(int(t.name)) for t in pathlib.Path("/proc/self/task").iterdir()
                   if (t / "comm").read_text().strip() == name})
with SimServer(port=0, embedded=True), SimServer(port=0):
    # A runtime's worker thread names itself once it has started.
    deadline = time.monotonic() + 10
    while not (policies("specreplay-esim") and policies("specreplay-sim")) and time.monotonic() < deadline:
        time.sleep(0.01)
    print(json.dumps([policies("specreplay-esim"), policies("specreplay-sim")]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")
@pytest.mark.parametrize("realtime", ["1", "0"])
def test_only_the_embedded_simulator_follows_the_engines_real_time_setting(realtime: str) -> None:
    # The embedded one sits beside the engine in the replaying process and,
    # when the engine runs real-time (opt-in), would fall behind it;
    # `specreplay serve` is a server like any other, at the normal policy.
    if not realtime_permitted():
        pytest.skip("this process may not take real-time priority (not root, no CAP_SYS_NICE)")
    env = {**os.environ, "SPECREPLAY_REALTIME": realtime}
    out = subprocess.run([sys.executable, "-c", REAL_TIME_PROBE], env=env, capture_output=True, text=True, timeout=60, check=True)
    embedded, served = json.loads(out.stdout)
    assert embedded == [os.SCHED_FIFO if realtime == "1" else os.SCHED_OTHER]
    assert served == [os.SCHED_OTHER]
