"""Conversations replay as conversations (issue 16, the engine side), end to
end: a session's turn is sent when the turn before it has ended plus its
think time (scheduled by the engine, so its send lag is meaningful), the load
modes start sessions, `--sessions independent` keeps the schedule requests
on their own get, live history sends the answers the server gave, and a
failed turn ends its session. Bounded, loopback only."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

import specreplay
from specreplay.cli import cli
from specreplay.settings.config import ReplayConfig
from specreplay.errors import TraceError
from specreplay.run.replay import run_replay

FAST_SIM: dict[str, Any] = {"ttft_ms": 5, "prefill_us_per_token": 0, "tpot_ms": 1, "reasoning_tokens": [2, 4], "content_tokens": [2, 4]}


def replay(tmp_path: Path, trace: Path, **options: Any) -> pd.DataFrame:
    options.setdefault("sim", FAST_SIM)
    options.setdefault("output", str(tmp_path / "run.arrow"))
    result = run_replay(ReplayConfig(trace=str(trace), **options))
    assert not result.interrupted
    return specreplay.load(result.path).sort_values("request_index").reset_index(drop=True)


def synth(tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "chat.jsonl"
    result = CliRunner().invoke(cli, ["synth", "-o", str(out), "--input-len", "20", "--output-len", "6", *args])
    assert result.exit_code == 0, result.output
    return out


def sessions(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    return {s: t.sort_values("turn_index") for s, t in df.groupby("session_id")}


def check_dependent(df: pd.DataFrame) -> None:
    """Every later turn waited for its predecessor and its think time."""
    for turns in sessions(df).values():
        assert turns["turn_index"].tolist() == list(range(len(turns)))
        assert (turns["session_turns"] == len(turns)).all()
        first, later = turns.iloc[0], turns.iloc[1:]
        assert pd.isna(first["predecessor_end_us"]) and pd.isna(first["think_time_us"])
        assert (later["predecessor_end_us"].to_numpy() == turns["end_us"].to_numpy()[:-1]).all()
        assert (later["scheduled_us"] == later["predecessor_end_us"] + later["think_time_us"]).all()
        assert (later["sent_us"] >= later["scheduled_us"]).all()


def test_sessions_replay_as_sessions_from_the_cli(tmp_path: Path) -> None:
    """Issue 16's "done when": synth --turns, then replay --concurrency keeps
    that many users, each going through its conversations turn by turn."""
    trace = synth(tmp_path, "--turns", "uniform:2:5", "--num-requests", "60", "--rate", "20")
    sim_toml = tmp_path / "sim.toml"
    sim_toml.write_text("ttft_ms = 5\nprefill_us_per_token = 0\ntpot_ms = 1\nreasoning_tokens = [2, 4]\ncontent_tokens = [2, 4]\n")
    out = tmp_path / "run.arrow"
    result = CliRunner().invoke(cli, ["replay", str(trace), "--concurrency", "4", "--sim-config", str(sim_toml), "-o", str(out)])
    assert result.exit_code == 0, result.output
    df = specreplay.load(out)
    assert len(df) == 60 and df["error_kind"].isna().all()
    assert df["session_id"].nunique() == len({json.loads(line)["session_id"] for line in trace.read_text().splitlines()})
    check_dependent(df)
    # Four users: never more than four sessions between their first send and last end.
    spans = [(t["sent_us"].min(), t["end_us"].max()) for t in sessions(df).values()]
    assert max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans) <= 4


def test_rate_starts_sessions_and_speedup_keeps_their_recorded_starts(tmp_path: Path) -> None:
    trace = synth(tmp_path, "--turns", "3", "--num-requests", "15", "--rate", "10", "--arrival", "constant", "--think-time", "0.05")
    df = replay(tmp_path, trace, rate=[50.0], arrival="constant")
    starts = sorted(t["scheduled_us"].iloc[0] for t in sessions(df).values())
    assert [b - a for a, b in zip(starts, starts[1:])] == [20_000] * 4  # 50 sessions/s
    check_dependent(df)
    df = replay(tmp_path, trace, speedup=[4.0], output=str(tmp_path / "b.arrow"))
    starts = sorted(t["scheduled_us"].iloc[0] for t in sessions(df).values())
    assert [b - a for a, b in zip(starts, starts[1:])] == [25_000] * 4  # recorded 100 ms apart, 4x faster
    check_dependent(df)


def test_independent_mode_keeps_the_schedule_of_requests_on_their_own(tmp_path: Path) -> None:
    trace = synth(tmp_path, "--turns", "uniform:2:4", "--num-requests", "20", "--rate", "5", "--think-time", "0.1")
    # The same requests with no session: the schedule replay always gave them.
    alone = tmp_path / "alone.jsonl"
    alone.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items() if k not in ("session_id", "think_time")}) + "\n"
                             for line in trace.read_text().splitlines()))
    for options in ({"speedup": [20.0]}, {"rate": [40.0], "seed": 3}, {"concurrency": [3]}):
        independent = replay(tmp_path, trace, sessions="independent", **options)
        on_their_own = replay(tmp_path, alone, output=str(tmp_path / "alone.arrow"), **options)
        assert independent["trace_id"].tolist() == on_their_own["trace_id"].tolist()
        assert independent["predecessor_end_us"].isna().all() and independent["session_turns"].isna().all()
        assert independent["session_id"].notna().all()
        if "concurrency" not in options:
            def offsets(df: pd.DataFrame) -> list[int]:
                return (df["scheduled_us"] - df["scheduled_us"].min()).tolist()

            assert offsets(independent) == offsets(on_their_own), options
    # Speedup: each request at its recorded arrival over the speedup.
    arrivals = [json.loads(line)["arrival"] for line in trace.read_text().splitlines()]
    independent = replay(tmp_path, trace, sessions="independent", speedup=[20.0])
    want = [round((a - arrivals[0]) / 20.0 * 1e6) for a in arrivals]
    assert (independent["scheduled_us"] - independent["scheduled_us"].min()).tolist() == want


def test_think_times_from_a_capture_are_waited(tmp_path: Path) -> None:
    # As `specreplay capture` records them: turn 1 came 0.3 s after turn 0
    # ended (turn 0 took 0.1 s).
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    records = [
        {"id": "a0", "arrival": 0.0, "session_id": "a", "body": body, "response": {"status": 200, "end_us": 100_000}},
        {"id": "a1", "arrival": 0.4, "session_id": "a", "body": body, "response": {"status": 200, "end_us": 100_000}},
        {"id": "a2", "arrival": 0.9, "session_id": "a", "body": body},
    ]
    trace = tmp_path / "captured.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    df = replay(tmp_path, trace, speedup=[1.0])
    assert df["think_time_us"].tolist()[1:] == [300_000, 400_000]
    check_dependent(df)


class _Recorder(BaseHTTPRequestHandler):
    """An OpenAI-style server whose answer to a chat request is `answer to
    <its last user message>`; it keeps every chat body it received."""

    bodies: list[dict[str, Any]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._send(200, "application/json", json.dumps({"data": [{"id": "m"}]}).encode())

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).bodies.append(body)
        question = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
        events = [{"choices": [{"index": 0, "delta": {"content": f"answer to {question}"}}]},
                  {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 3}}]
        sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        self._send(200, "text/event-stream", sse.encode())

    def _send(self, status: int, kind: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    _Recorder.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", _Recorder.bodies
    finally:
        server.shutdown()
        server.server_close()


def conversation(tmp_path: Path) -> Path:
    """One three-turn chat whose later turns carry recorded answers."""
    lines, messages = [], []
    for k in range(3):
        if k:
            messages.append({"role": "assistant", "content": f"recorded answer {k - 1}"})
        messages.append({"role": "user", "content": f"q{k}"})
        lines.append(json.dumps({"id": f"t{k}", "session_id": "s", "body": {"model": "m", "messages": list(messages)}}))
    trace = tmp_path / "chat.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    return trace


@pytest.mark.parametrize("live", [True, False])
def test_live_history_sends_the_answers_the_server_gave(tmp_path: Path, recorder: tuple[str, list[dict[str, Any]]], live: bool) -> None:
    url, bodies = recorder
    df = replay(tmp_path, conversation(tmp_path), url=url, concurrency=[1], live_history=live)
    assert df["error_kind"].isna().all()
    sent = [b for b in bodies if b.get("max_tokens") != 1]  # the usage probe's is not a turn
    contents = [m["content"] for m in sent[-1]["messages"]]
    if live:
        assert contents == ["q0", "answer to q0", "q1", "answer to q1", "q2"]
    else:
        assert contents == ["q0", "recorded answer 0", "q1", "recorded answer 1", "q2"]


def test_a_failed_turn_ends_its_session(tmp_path: Path) -> None:
    trace = synth(tmp_path, "--turns", "4", "--num-requests", "80", "--rate", "50")
    sim = {**FAST_SIM, "faults": {"http_500": 0.2}}
    df = replay(tmp_path, trace, concurrency=[4], sim=sim, seed=5)
    assert len(df) == 80
    skipped = df[df["error_kind"] == "skipped_after_failure"]
    assert len(skipped) > 0
    assert skipped["sent_us"].isna().all() and skipped["end_us"].isna().all()
    for turns in sessions(df).values():
        failed = turns[turns["error_kind"].notna() & (turns["error_kind"] != "skipped_after_failure")]
        if failed.empty:
            continue
        at = failed.iloc[0]
        after = turns[turns["turn_index"] > at["turn_index"]]
        # Nothing of the session was sent after its failure; the rest say why.
        assert (after["error_kind"] == "skipped_after_failure").all()
        assert (after["scheduled_us"] == at["end_us"]).all()
        if len(after):
            assert after["predecessor_end_us"].iloc[0] == at["end_us"]
            assert after["predecessor_end_us"].iloc[1:].isna().all()
        assert all(f"turn {int(at['turn_index'])} ({at['trace_id']}) failed: http" in m for m in after["error_message"])


def test_a_longer_point_replays_sessions_again_under_new_names(tmp_path: Path) -> None:
    trace = synth(tmp_path, "--turns", "2", "--num-requests", "6", "--rate", "10")
    df = replay(tmp_path, trace, concurrency=[2], num_requests=15)
    assert len(df) == 15
    names = set(df["session_id"])
    assert {"s0", "s0#1", "s0#2"} <= names
    # The last session of the third pass was cut to fit 15 requests.
    cut = df[df["session_id"] == "s1#2"]
    assert len(cut) == 1 and (cut["session_turns"] == 1).all()
    check_dependent(df)


def test_a_bad_line_late_in_the_trace_stops_the_run_before_it_starts(tmp_path: Path) -> None:
    trace = tmp_path / "big.jsonl"
    good = [json.dumps({"id": str(i), "body": {"messages": [{"role": "user", "content": "x"}]}}) for i in range(3000)]
    trace.write_text("\n".join(good) + '\n{"id": "bad", "body": {"messages": []}, "arival": 3}\n')
    with pytest.raises(TraceError) as err:
        run_replay(ReplayConfig(trace=str(trace), concurrency=[1], num_requests=2, output=str(tmp_path / "r.arrow"), sim=FAST_SIM))
    assert (err.value.line, err.value.field) == (3001, "arival")
    assert not (tmp_path / "r.arrow").exists() and not (tmp_path / "r.arrow.partial").exists()
