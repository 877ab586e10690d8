"""`specreplay replay` end to end against the embedded simulator: every
request one row, counts that add up, timings that match the simulator's
configuration, sweeps, limits and the validity checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import specreplay
from specreplay.settings.config import ReplayConfig
from specreplay.run.replay import run_replay
from specreplay.results.schema import results_schema

ROOT = Path(__file__).resolve().parent.parent
REASONING = str(ROOT / "traces" / "reasoning-prompts.jsonl")

# A fast simulator: 20 ms to first token, 2 ms per token, 20–40 reasoning tokens.
FAST_SIM: dict[str, Any] = {"ttft_ms": 20, "prefill_us_per_token": 0, "tpot_ms": 2, "reasoning_tokens": [20, 40], "content_tokens": [5, 10]}


def run(tmp_path: Path, **options: Any) -> pd.DataFrame:
    options.setdefault("sim", FAST_SIM)
    options.setdefault("output", str(tmp_path / "run.arrow"))
    options.setdefault("trace", REASONING)
    result = run_replay(ReplayConfig(**options))
    assert not result.interrupted
    return specreplay.load(result.path)


def test_rate_replay_gives_one_consistent_row_per_request(tmp_path: Path) -> None:
    df = run(tmp_path, rate=[50.0], seed=3)
    assert len(df) == 12
    assert sorted(df["trace_id"]) == sorted(json.loads(line)["id"] for line in open(REASONING))
    assert df["request_index"].tolist() == sorted(df["request_index"].tolist()) or set(df["request_index"]) == set(range(12))
    assert df["error_kind"].isna().all(), df["error_message"].dropna().tolist()
    assert (df["reasoning_tokens"] + df["content_tokens"] == df["output_tokens"]).all()
    assert (df["token_source"] == "continuous_usage").all()
    # Per-chunk token counts add up to the server's total.
    assert all(int(sum(t)) == o for t, o in zip(df["chunk_tokens"], df["output_tokens"]))
    assert df["reasoning_tokens"].between(20, 40).all()
    assert df["content_tokens"].between(5, 10).all()
    assert (df["finish_reason"] == "stop").all()
    # Timestamps are ordered as a request lives.
    for a, b in [("scheduled_us", "sent_us"), ("sent_us", "first_byte_us"), ("first_byte_us", "first_token_us"),
                 ("first_token_us", "first_content_us"), ("first_content_us", "last_token_us"), ("last_token_us", "end_us")]:
        assert (df[a] <= df[b]).all(), (a, b)
    assert (df["first_reasoning_us"] == df["first_token_us"]).all()
    # The file is a plain Arrow IPC file with the documented schema.
    table = pa.ipc.open_file(str(tmp_path / "run.arrow")).read_all()
    assert table.schema.remove_metadata().equals(results_schema().remove_metadata())
    assert pd.read_feather(tmp_path / "run.arrow").shape[0] == 12


def schedule_under(stamps: list[int]) -> tuple[float, float]:
    """The line under a request's chunk stamps, (stamp of chunk 0, µs per
    chunk): the edge of their lower convex hull over (chunk index, stamp)
    at the middle chunk. Chunks late from a stall lie above it, the ones on
    time on it."""
    hull: list[tuple[int, int]] = []
    for point in enumerate(stamps):
        while len(hull) >= 2 and (hull[-1][0] - hull[-2][0]) * (point[1] - hull[-2][1]) <= (hull[-1][1] - hull[-2][1]) * (point[0] - hull[-2][0]):
            hull.pop()
        hull.append(point)
    middle = len(stamps) // 2
    (k0, t0), (k1, t1) = next((a, b) for a, b in zip(hull, hull[1:]) if b[0] >= middle)
    slope = (t1 - t0) / (k1 - k0)
    return t0 - slope * k0, slope


def test_figures_match_the_simulator_configuration(tmp_path: Path) -> None:
    sim = {"ttft_ms": 50, "prefill_us_per_token": 0, "tpot_ms": 10, "reasoning_tokens": [30, 30], "content_tokens": [10, 10]}
    df = run(tmp_path, concurrency=[4], sim=sim)
    assert (df["output_tokens"] == 40).all()
    # TTFT and TPOT come from these stamps: one token a chunk here.
    assert all(len(ts) == 40 and ts[0] == first and ts[-1] == last for ts, first, last in zip(df["chunk_ts_us"], df["first_token_us"], df["last_token_us"]))
    # The simulator's step k is due at the request's arrival + 50 ms + k × 10
    # ms. A loaded machine only makes steps late, and the late ones then go
    # at once: a median TTFT of 55.9 ms here under load, and TPOTs short by
    # the first token's lateness. So the schedule is read from under the
    # stamps (`schedule_under`): where it puts the first token, after the
    # send, and its step, for the median request, against the simulator's
    # settings (the timer has 1 ms granularity).
    lines = [schedule_under(list(ts)) for ts in df["chunk_ts_us"]]
    ttft_ms = np.median([(start - sent) / 1000 for (start, _), sent in zip(lines, df["sent_us"])])
    tpot_ms = np.median([step / 1000 for _, step in lines])
    assert ttft_ms == pytest.approx(50, abs=5), lines
    assert tpot_ms == pytest.approx(10, abs=0.5), lines
    # Nothing comes early: each TTFT is at least the configured one (less
    # half a millisecond: the send stamp is the engine's clock, the chunk's
    # the kernel's).
    assert ((df["first_token_us"] - df["sent_us"]) / 1000 >= 49.5).all()


def test_concurrency_sweep_makes_labelled_points(tmp_path: Path) -> None:
    df = run(tmp_path, concurrency=[1, 8], label="baseline")
    assert df.groupby("point").size().to_dict() == {"concurrency=1": 12, "concurrency=8": 12}
    assert set(df["label"]) == {"baseline"}
    assert df.groupby("point")["point_index"].first().to_dict() == {"concurrency=1": 0, "concurrency=8": 1}
    config = json.loads(df.attrs["specreplay.config"])
    assert [p["point"] for p in config["points"]] == ["concurrency=1", "concurrency=8"]
    # Closed loop at 1: a request is sent only after the previous one ended.
    one = df[df["point"] == "concurrency=1"].sort_values("sent_us")
    assert (one["sent_us"].to_numpy()[1:] >= one["end_us"].to_numpy()[:-1]).all()


def test_reasoning_budget_trap_is_flagged(tmp_path: Path) -> None:
    from specreplay.analysis.validity import check

    df = run(tmp_path, concurrency=[4], max_tokens=10)
    assert (df["finish_reason"] == "length").all()
    assert (df["content_tokens"] == 0).all()
    assert (df["reasoning_tokens"] == 10).all()
    assert df["first_content_us"].isna().all()
    findings = check(df)
    budget = [f for f in findings if f.code == "reasoning_ate_budget"]
    assert len(budget) == 1 and budget[0].level == "error" and budget[0].count == 12


def test_num_requests_loops_the_trace_and_warmup_is_flagged(tmp_path: Path) -> None:
    df = run(tmp_path, concurrency=[8], num_requests=30, warmup=5)
    assert len(df) == 30
    assert sorted(df["request_index"]) == list(range(30))
    assert df["warmup"].sum() == 5
    assert set(df.loc[df["warmup"], "request_index"]) == set(range(5))
    assert "bst#1" in set(df["trace_id"]) and "bst#2" in set(df["trace_id"])


def test_speedup_replays_the_trace_timing(tmp_path: Path) -> None:
    # The trace's requests are 0.5 s apart; at speedup 5 they go 100 ms apart.
    df = run(tmp_path, speedup=[5.0])
    sched = df.sort_values("request_index")["scheduled_us"].to_numpy()
    gaps_ms = (sched[1:] - sched[:-1]) / 1000
    assert gaps_ms == pytest.approx([100.0] * 11, abs=0.01)
    lag_us = df["sent_us"] - df["scheduled_us"]
    assert (lag_us >= 0).all()


def test_rate_schedule_repeats_under_a_seed(tmp_path: Path) -> None:
    def gaps(seed: int, name: str) -> list[int]:
        df = run(tmp_path, rate=[100.0], seed=seed, output=str(tmp_path / name))
        s = df.sort_values("request_index")["scheduled_us"].to_numpy()
        return (s[1:] - s[:-1]).tolist()

    assert gaps(1, "a.arrow") == gaps(1, "b.arrow")
    assert gaps(1, "a.arrow") != gaps(2, "c.arrow")


def test_duration_stops_scheduling(tmp_path: Path) -> None:
    df = run(tmp_path, rate=[20.0], arrival="constant", duration=0.5, num_requests=1000)
    # Constant 20/s for 0.5 s: requests at 0, 50, …, 450 ms.
    assert len(df) == 10


def test_python_api_returns_a_table(tmp_path: Path) -> None:
    table = specreplay.replay(REASONING, concurrency=[4], sim=FAST_SIM)
    assert isinstance(table, pa.Table)
    assert table.num_rows == 12
    meta = table.schema.metadata
    assert meta[b"specreplay.version"] == specreplay.__version__.encode()
    assert json.loads(meta[b"specreplay.config"])["embedded_simulator"] is True
    assert meta[b"specreplay.model"] == b"specreplay-sim"


def test_unreachable_url_fails_before_the_run(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(specreplay.ConfigError, match="cannot reach"):
        run_replay(ReplayConfig(trace=REASONING, url=f"http://127.0.0.1:{port}/v1", concurrency=[1], output=str(tmp_path / "x.arrow")))
    assert not (tmp_path / "x.arrow").exists()


def test_replay_against_a_url(tmp_path: Path) -> None:
    from specreplay._core import SimServer

    with SimServer(config={**FAST_SIM, "model": "served-model"}) as srv:
        df = run(tmp_path, url=srv.url, concurrency=[2], api_key="sk-test-secret")
    assert len(df) == 12 and df["error_kind"].isna().all()
    raw = (tmp_path / "run.arrow").read_bytes()
    assert b"sk-test-secret" not in raw
    assert df.attrs["specreplay.model"] == "served-model"  # the trace names none: preflight picks the served one


def test_continuous_usage_is_dropped_where_the_server_refuses_it(tmp_path: Path) -> None:
    """A strict OpenAI-style server that answers 400 to unknown stream options."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from specreplay._core import SimServer

    with SimServer(config=FAST_SIM) as sim:
        upstream = sim.url

        class Strict(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None: ...

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"data": [{"id": "strict"}]}')

            def do_POST(self) -> None:
                import urllib.request

                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                if "continuous_usage_stats" in body.get("stream_options", {}):
                    self.send_response(400)
                    self.send_header("content-type", "application/json")
                    self.end_headers()
                    self.wfile.write(b'{"error": {"message": "unknown option"}}')
                    return
                req = urllib.request.Request(upstream + "/chat/completions", data=json.dumps(body).encode(), headers={"content-type": "application/json"})
                with urllib.request.urlopen(req) as resp:
                    data = resp.read()
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Strict)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            df = run(tmp_path, url=f"http://127.0.0.1:{server.server_port}/v1", concurrency=[2])
        finally:
            server.shutdown()
    assert df["error_kind"].isna().all(), df["error_message"].dropna().tolist()
    assert (df["token_source"] == "usage").all()
    assert json.loads(df.attrs["specreplay.config"])["continuous_usage"] is False
