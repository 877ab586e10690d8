"""Reliability: every scheduled request ends as exactly one row, whatever the
server does; nothing that finished is lost; no secret is ever recorded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import specreplay
from specreplay.settings.config import ReplayConfig
from specreplay.run.replay import run_replay

ROOT = Path(__file__).resolve().parent.parent
REASONING = str(ROOT / "traces" / "reasoning-prompts.jsonl")
CHUNK = 'data: {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": null}]}\n\n'
END = (
    'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
    'data: {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 3}}\n\n'
    "data: [DONE]\n\n"
)


@contextmanager
def http_server(handle_post: Callable[[BaseHTTPRequestHandler, int], None]) -> Iterator[str]:
    """A tiny HTTP/1.1 server on 127.0.0.1 whose POST behaviour the test
    scripts; `handle_post(handler, n)` gets the 1-based request number."""
    counter = {"n": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None: ...

        def do_GET(self) -> None:
            body = b'{"data": [{"id": "m"}]}'
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            with lock:
                counter["n"] += 1
                n = counter["n"]
            handle_post(self, n)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        server.shutdown()


def stream(handler: BaseHTTPRequestHandler, parts: list[str | float]) -> None:
    """Sends an SSE body; a float in `parts` is a pause of that many seconds."""
    handler.send_response(200)
    handler.send_header("content-type", "text/event-stream")
    handler.send_header("connection", "close")
    handler.end_headers()
    for part in parts:
        if isinstance(part, float):
            time.sleep(part)
        else:
            handler.wfile.write(part.encode())
            handler.wfile.flush()


def replay(tmp_path: Path, url: str, **options: Any) -> pd.DataFrame:
    options.setdefault("concurrency", [1])
    options.setdefault("num_requests", 2)
    result = run_replay(ReplayConfig(trace=REASONING, url=url, continuous_usage=False, output=str(tmp_path / "r.arrow"), **options))
    return specreplay.load(result.path)


def test_retries_are_off_by_default_and_recorded_when_on(tmp_path: Path) -> None:
    def flaky(h: BaseHTTPRequestHandler, n: int) -> None:
        if n % 2 == 1:  # every other attempt: 503 with a short Retry-After
            body = b'{"error": {"message": "busy"}}'
            h.send_response(503)
            h.send_header("retry-after", "0.1")
            h.send_header("content-type", "application/json")
            h.send_header("content-length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
        else:
            stream(h, [CHUNK, CHUNK, CHUNK, END])

    with http_server(flaky) as url:
        df = replay(tmp_path, url, num_requests=1)
    assert df["error_kind"].tolist() == ["http"] and df["http_status"].tolist() == [503]
    assert df["attempts"].tolist() == [1]
    with http_server(flaky) as url:
        df = replay(tmp_path, url, num_requests=1, retries=2)
    assert df["error_kind"].isna().all()
    assert df["attempts"].tolist() == [2]
    assert df["http_status"].tolist() == [200]
    # Latency counts from the first attempt: the Retry-After wait is inside TTFT.
    assert ((df["first_token_us"] - df["sent_us"]) >= 100_000).all()


def test_stall_timeout_classifies_a_silent_server(tmp_path: Path) -> None:
    with http_server(lambda h, n: stream(h, [CHUNK, 1.5, CHUNK, END])) as url:
        df = replay(tmp_path, url, stall_timeout=0.3)
        assert df["error_kind"].tolist() == ["stall", "stall"]
        assert df["error_message"].str.contains("no bytes from the server for 0.3 s").all()
        # What arrived before the stall is kept.
        assert (df["chunk_count"] == 1).all() and df["first_token_us"].notna().all()
        df = replay(tmp_path, url, num_requests=1)
    assert df["error_kind"].isna().all()  # without it the pause is just a slow token


def test_whole_request_timeout(tmp_path: Path) -> None:
    with http_server(lambda h, n: stream(h, [CHUNK, 0.4, CHUNK, 0.4, CHUNK, 0.4, END])) as url:
        df = replay(tmp_path, url, num_requests=1, timeout=0.5)
    assert df["error_kind"].tolist() == ["timeout"]
    assert df["chunk_count"].tolist() == [2]


def test_secrets_never_reach_the_results_or_the_output(tmp_path: Path) -> None:
    key = "sk-live-0123456789abcdef"

    def echo_auth(h: BaseHTTPRequestHandler, n: int) -> None:
        body = json.dumps({"error": {"message": f"invalid key {h.headers['authorization']}, cookie {h.headers['cookie']}"}}).encode()
        h.send_response(401)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    trace = tmp_path / "t.jsonl"
    trace.write_text(Path(REASONING).read_text())
    with http_server(echo_auth) as url:
        env = {**os.environ, "OPENAI_API_KEY": key}
        out = tmp_path / "r.arrow"
        proc = subprocess.run(
            [sys.executable, "-m", "specreplay", "replay", str(trace), "--url", url, "--concurrency", "2",
             "--num-requests", "4", "--header", "Cookie: session-cookie-secret", "-o", str(out)],
            capture_output=True, env=env, timeout=60,
        )
    assert proc.returncode == 0, proc.stderr.decode()
    df = specreplay.load(out)
    assert (df["http_status"] == 401).all()
    assert df["error_message"].str.contains("invalid key <redacted>, cookie <redacted>").all()
    for blob in (out.read_bytes(), proc.stdout, proc.stderr):
        assert key.encode() not in blob
        assert b"session-cookie-secret" not in blob


def test_a_server_that_dies_mid_run_gives_error_rows_not_a_hang(tmp_path: Path) -> None:
    sim_toml = tmp_path / "sim.toml"
    sim_toml.write_text("ttft_ms = 10\ntpot_ms = 20\nreasoning_tokens = [40, 40]\ncontent_tokens = [10, 10]\n")
    server = subprocess.Popen(
        [sys.executable, "-m", "specreplay", "serve", "--port", "0", "--config", str(sim_toml)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline().decode()
        url = line[line.index("http://"):].split()[0]
        killer = threading.Timer(2.5, lambda: server.send_signal(signal.SIGKILL))
        killer.start()
        started = time.monotonic()
        df = replay(tmp_path, url, concurrency=[4], num_requests=40, timeout=30.0)
        elapsed = time.monotonic() - started
    finally:
        server.kill()
        server.wait(timeout=10)
    assert len(df) == 40 and sorted(df["request_index"]) == list(range(40))
    assert elapsed < 20
    kinds = set(df["error_kind"].dropna())
    assert df["error_kind"].isna().sum() >= 4  # ~1 s per request: some finished before the kill
    assert kinds and kinds <= {"stream", "connect", "truncated"}, kinds


def test_kill_9_keeps_every_request_finished_a_second_before(tmp_path: Path) -> None:
    sim_toml = tmp_path / "sim.toml"
    sim_toml.write_text("ttft_ms = 10\nprefill_us_per_token = 0\ntpot_ms = 5\nreasoning_tokens = [20, 20]\ncontent_tokens = [10, 10]\n")
    out = tmp_path / "run.arrow"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specreplay", "replay", str(ROOT / "traces" / "poisson-200.jsonl"), "--rate", "20",
         "--arrival", "constant", "--sessions", "independent", "--sim-config", str(sim_toml), "-o", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    # Start-up time (imports, the simulator) varies with the machine's load:
    # count the run's seconds from its partial file, not from the launch.
    partial = Path(f"{out}.partial")
    deadline = time.monotonic() + 60
    while not partial.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(3.0)
    killed_at_us = time.time() * 1e6
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert not out.exists() and partial.exists()
    df = specreplay.load(out)  # falls back to the interrupted run's stream
    assert len(df) > 0
    # Each request takes ~0.2 s (10 ms + 30 tokens × 5 ms); one leaves every 50 ms.
    # Every request scheduled more than 1.5 s before the kill had finished a
    # second before it, and must be in the file.
    t0 = df["scheduled_us"].min()
    expected = int((killed_at_us - 1_500_000 - t0) // 50_000) + 1
    assert expected > 20
    assert set(range(expected)) <= set(df["request_index"]), (expected, len(df))


def test_ten_thousand_concurrent_streams_each_end_as_one_row(tmp_path: Path) -> None:
    """10,000 streams in flight at once against a simulator in its own
    process (each stream holds a socket on both sides: one process would need
    twice the descriptors). Bounded: each stream lasts ~2 s."""
    sim_toml = tmp_path / "sim.toml"
    sim_toml.write_text("ttft_ms = 100\nprefill_us_per_token = 0\ntpot_ms = 500\nreasoning_tokens = [2, 2]\ncontent_tokens = [2, 2]\n")
    server = subprocess.Popen(
        [sys.executable, "-c",
         "import resource; s, h = resource.getrlimit(resource.RLIMIT_NOFILE); "
         "resource.setrlimit(resource.RLIMIT_NOFILE, (h, h)); "
         "from specreplay.cli import main; main()",
         "serve", "--port", "0", "--config", str(sim_toml)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline().decode()
        url = line[line.index("http://"):].split()[0]
        started = time.monotonic()
        df = replay(tmp_path, url, concurrency=[10_000], num_requests=10_000, timeout=60.0)
        elapsed = time.monotonic() - started
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
    assert len(df) == 10_000
    assert df["request_index"].is_unique and set(df["request_index"]) == set(range(10_000))
    failed = df[df["error_kind"].notna()]
    assert failed.empty, failed["error_message"].value_counts().head().to_dict()
    assert (df["output_tokens"] == 4).all()
    # They were in flight together: the most requests open at one moment
    # (between send and end) is the concurrency asked for, give or take the
    # connection storm at the start.
    events = pd.concat([pd.Series(1, index=df["sent_us"]), pd.Series(-1, index=df["end_us"])]).sort_index(kind="stable")
    peak = int(events.cumsum().max())
    print(f"10,000 streams: {elapsed:.1f} s, peak in flight {peak}")
    assert peak >= 9_000, peak


FAULT_SIM = {"ttft_ms": 10, "prefill_us_per_token": 0, "tpot_ms": 2, "reasoning_tokens": [10, 10], "content_tokens": [6, 6],
             "fault_stall_ms": 800, "fault_slow_headers_ms": 800}


@pytest.mark.parametrize(
    ("fault", "options", "kind", "status"),
    [
        ("none", {}, None, 200),
        ("reset_before_headers", {}, "connect", None),
        ("reset_mid_stream", {}, "stream", 200),
        ("http_429", {}, "http", 429),
        ("http_500", {}, "http", 500),
        ("http_503", {}, "http", 503),
        ("stall_before_first_token", {"stall_timeout": 0.3}, "stall", 200),
        ("stall_before_first_token", {}, None, 200),
        ("stall_between_tokens", {"stall_timeout": 0.3}, "stall", 200),
        ("stall_between_tokens", {}, None, 200),
        ("malformed_json", {}, "decode", 200),
        ("invalid_utf8", {}, "decode", 200),
        ("missing_done", {}, "truncated", 200),
        ("error_event", {}, "stream_error", 200),
        ("non_sse_body", {}, "decode", 200),
        ("oversized_event", {}, None, 200),
        ("oversized_event", {"sim": {**FAULT_SIM, "fault_oversized_bytes": 20 << 20}}, "decode", 200),
        ("slow_headers", {"stall_timeout": 0.3}, "stall", None),
        ("slow_headers", {}, None, 200),
    ],
)
def test_every_injected_fault_is_one_classified_row(
    tmp_path: Path, fault: str, options: dict[str, Any], kind: str | None, status: int | None
) -> None:
    options = {"sim": FAULT_SIM, **options}
    result = run_replay(ReplayConfig(trace=REASONING, concurrency=[2], num_requests=4, headers={"x-specreplay-fault": fault},
                                     output=str(tmp_path / "r.arrow"), timeout=30.0, **options))
    df = specreplay.load(result.path)
    assert len(df) == 4 and sorted(df["request_index"]) == [0, 1, 2, 3]
    assert df["error_kind"].tolist() == [kind] * 4 if kind else df["error_kind"].isna().all(), df["error_message"].tolist()
    if status is None:
        assert df["http_status"].isna().all()
    else:
        assert (df["http_status"] == status).all()
    assert df["sent_us"].notna().all() and df["end_us"].notna().all()
    assert df["error_message"].notna().all() if kind else df["error_message"].isna().all()
    if fault in ("reset_mid_stream", "error_event", "malformed_json", "stall_between_tokens"):
        # What arrived before the fault is kept.
        assert (df["chunk_count"] > 0).all() and df["first_token_us"].notna().all()


def test_429_with_retries_honours_retry_after_and_counts_attempts(tmp_path: Path) -> None:
    sim = {**FAULT_SIM, "fault_retry_after_s": 1}
    result = run_replay(ReplayConfig(trace=REASONING, concurrency=[1], num_requests=1, headers={"x-specreplay-fault": "http_429"},
                                     retries=1, sim=sim, output=str(tmp_path / "r.arrow")))
    df = specreplay.load(result.path)
    assert df["attempts"].tolist() == [2]
    assert df["error_kind"].tolist() == ["http"] and df["http_status"].tolist() == [429]
    assert (df["end_us"] - df["sent_us"]).iloc[0] >= 1_000_000  # waited the server's Retry-After


def test_a_fraction_of_faults_is_counted_by_kind_in_the_summary(tmp_path: Path) -> None:
    from specreplay.analysis.summary import summarize

    sim = {**FAULT_SIM, "faults": {"http_503": 0.2, "missing_done": 0.1}, "seed": 4}
    result = run_replay(ReplayConfig(trace=REASONING, concurrency=[8], num_requests=200, sim=sim, output=str(tmp_path / "r.arrow")))
    df = specreplay.load(result.path)
    assert len(df) == 200
    counts = df["error_kind"].value_counts().to_dict()
    assert set(counts) == {"http", "truncated"}
    assert 20 <= counts["http"] <= 60 and 5 <= counts["truncated"] <= 35
    row = summarize(df).iloc[0]
    assert row["errors_by_kind"] == ", ".join(f"{k}: {n}" for k, n in df["error_kind"].value_counts().items())
