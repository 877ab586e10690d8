"""Issue 16's Python half end to end, against the embedded simulator: the
session figures `replay` prints are the results file's; a multi-turn public
format (ShareGPT's conversations, Bailian's chains) imports and replays as
sessions; a capture replays with the think times its users took.
Bounded in count and time, loopback only."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import pandas as pd
import pytest
from click.testing import CliRunner

import specreplay
from specreplay._core import SimServer
from specreplay.trace.capture import BackgroundCapture
from specreplay.cli import cli
from specreplay.settings.config import ReplayConfig
from specreplay.trace.importers import import_trace
from specreplay.run.replay import run_replay
from specreplay.trace.records import load_trace

from session_walk import think_times

FAST_SIM: dict[str, Any] = {"ttft_ms": 5, "prefill_us_per_token": 0, "tpot_ms": 1, "reasoning_tokens": [2, 4], "content_tokens": [2, 4]}
PUBLIC = Path(__file__).resolve().parent.parent / "traces" / "public"


def replay(trace: Path, out: Path, **options: Any) -> pd.DataFrame:
    options.setdefault("sim", FAST_SIM)
    result = run_replay(ReplayConfig(trace=str(trace), output=str(out), **options))
    assert not result.interrupted
    return specreplay.load(result.path).sort_values("request_index").reset_index(drop=True)


def later_turns_waited(df: pd.DataFrame, think_us: list[int] | int) -> None:
    """Each later turn was due at its predecessor's end plus the think time given."""
    later = df[df["predecessor_end_us"].notna()].sort_values(["session_id", "turn_index"])
    expected = think_us if isinstance(think_us, list) else [think_us] * len(later)
    assert later["think_time_us"].tolist() == expected
    assert (later["scheduled_us"] == later["predecessor_end_us"] + later["think_time_us"]).all()
    assert (later["sent_us"] >= later["scheduled_us"]).all()


def test_the_done_when_command_prints_the_session_figures(tmp_path: Path) -> None:
    trace, out = tmp_path / "chat.jsonl", tmp_path / "run.arrow"
    made = CliRunner().invoke(cli, ["synth", "--turns", "uniform:2:5", "--num-requests", "48", "--rate", "20", "--think-time", "0.05",
                                    "--input-len", "20", "--output-len", "6", "-o", str(trace)])
    assert made.exit_code == 0, made.output
    sim = tmp_path / "sim.toml"
    sim.write_text("ttft_ms = 5\nprefill_us_per_token = 0\ntpot_ms = 1\n")
    ran = CliRunner().invoke(cli, ["replay", str(trace), "--concurrency", "16", "--sim-config", str(sim), "-o", str(out)])
    assert ran.exit_code == 0, ran.output
    df = specreplay.load(out)
    later_turns_waited(df, 50_000)
    row = specreplay.summarize(df).iloc[0]
    sessions = len({r.session_id for r in load_trace(trace).records})
    assert row["sessions"] == row["sessions_completed"] == sessions and row["skipped"] == 0
    line = next(line for line in ran.output.splitlines() if line.strip().startswith("sessions"))
    assert line.strip().startswith(f"sessions {sessions}: {sessions} completed  ·  {row['turns_per_session']:.1f} turns each")
    assert f"duration p50 {row['session_duration_p50_s']:.2f} s, p90 {row['session_duration_p90_s']:.2f} s" in line
    assert re.search(r"TTFT p50 by turn: 0: [\d.,]+ · 1: [\d.,]+ · 2: [\d.,]+ · 3: [\d.,]+ · 4: [\d.,]+ ms$", line), line


def test_sharegpt_conversations_import_and_replay_as_sessions(tmp_path: Path) -> None:
    trace = tmp_path / "sharegpt.jsonl"
    import_trace("sharegpt", PUBLIC / "sharegpt-v3-multiturn.json", trace)
    # No times in ShareGPT: the think times are --think-time's.
    df = replay(trace, tmp_path / "run.arrow", concurrency=[2], think_time="0.02", max_tokens=8)
    assert df["error_kind"].isna().all() and len(df) == 5
    turns = df[df["session_id"] == "dsOTKpn_0"].sort_values("turn_index")
    assert turns["turn_index"].tolist() == [0, 1, 2] and (turns["session_turns"] == 3).all()
    assert turns["trace_id"].tolist() == ["dsOTKpn_0", "dsOTKpn_0/1", "dsOTKpn_0/2"]
    later_turns_waited(df, 20_000)
    # Later turns carry the conversation so far: longer prompts.
    assert turns["prompt_tokens"].is_monotonic_increasing and turns["prompt_tokens"].iloc[2] > 2 * turns["prompt_tokens"].iloc[0]
    assert df["session_id"].isna().sum() == 2  # the one-turn conversations: requests on their own
    # Without --think-time the later turns go at once, and the run says so.
    sim = tmp_path / "sim.toml"
    sim.write_text("ttft_ms = 5\nprefill_us_per_token = 0\ntpot_ms = 1\n")
    ran = CliRunner().invoke(cli, ["replay", str(trace), "--concurrency", "2", "--max-tokens", "8", "--sim-config", str(sim),
                                   "-o", str(tmp_path / "again.arrow")])
    assert ran.exit_code == 0, ran.output
    assert "note: 2 of 2 later turns of sessions have no think time in the trace and --think-time is not set" in ran.output
    later_turns_waited(specreplay.load(tmp_path / "again.arrow"), 0)


def test_bailian_chains_import_and_replay_as_sessions(tmp_path: Path) -> None:
    rows = [
        {"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.0, "input_length": 40, "output_length": 4, "turn": 1, "type": "text", "hash_ids": [1, 2, 3]},
        {"chat_id": 2, "parent_chat_id": -1, "timestamp": 0.5, "input_length": 20, "output_length": 4, "turn": 1, "type": "text", "hash_ids": [7, 8]},
        {"chat_id": 3, "parent_chat_id": 1, "timestamp": 0.75, "input_length": 60, "output_length": 4, "turn": 2, "type": "text", "hash_ids": [1, 2, 3, 4]},
        {"chat_id": 4, "parent_chat_id": 3, "timestamp": 1.0, "input_length": 80, "output_length": 4, "turn": 3, "type": "text", "hash_ids": [1, 2, 3, 4, 5]},
    ]
    source = tmp_path / "bailian.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    trace = tmp_path / "trace.jsonl"
    import_trace("bailian", source, trace)
    df = replay(trace, tmp_path / "run.arrow", speedup=[10.0], think_time="0.03")
    assert df["error_kind"].isna().all()
    assert df.groupby("session_id")["turn_index"].apply(list).to_dict() == {"1": [0, 1, 2], "2": [0]}
    later_turns_waited(df, 30_000)
    # --speedup keeps the recorded session starts: chain 2 starts 0.5 s / 10 after chain 1.
    firsts = df[df["turn_index"] == 0].sort_values("scheduled_us")["scheduled_us"].tolist()
    assert firsts[1] - firsts[0] == 50_000


def test_a_capture_replays_with_the_think_times_its_users_took(tmp_path: Path) -> None:
    async def two_users(base: str) -> None:
        async def user(s: aiohttp.ClientSession, first: str, pause: float) -> None:
            history: list[dict[str, str]] = []
            for k in range(3):
                if k:
                    await asyncio.sleep(pause)
                history.append({"role": "user", "content": f"{first} {k}"})
                async with s.post(base + "/v1/chat/completions", json={"model": "m", "messages": history, "max_tokens": 8}) as r:
                    answer = (await r.json())["choices"][0]["message"]["content"]
                history.append({"role": "assistant", "content": answer})

        async with aiohttp.ClientSession() as s:
            await asyncio.gather(user(s, "alpha", 0.1), user(s, "beta", 0.25))

    trace = tmp_path / "captured.jsonl"
    with SimServer(config=FAST_SIM) as sim, BackgroundCapture(sim.url, trace) as cap:
        asyncio.run(two_users(cap.url.rsplit("/v1", 1)[0]))
    assert cap.stats is not None and (cap.stats.sessions, cap.stats.later_turns) == (2, 4)
    records = load_trace(trace).records
    expected, _ = think_times(records)
    df = replay(trace, tmp_path / "run.arrow", speedup=[1.0])
    assert df["error_kind"].isna().all() and df["session_id"].nunique() == 2
    # Replay waits exactly the think times the capture measured: the users' pauses.
    by_id = dict(zip((r.id for r in records), expected))
    later = df[df["predecessor_end_us"].notna()].sort_values(["session_id", "turn_index"])
    assert later["think_time_us"].tolist() == [by_id[t] for t in later["trace_id"]]
    pause = {r.session_id: 0.1 if "alpha" in r.body["messages"][0]["content"] else 0.25 for r in records}
    for sid, think_us in zip(later["session_id"], later["think_time_us"]):
        assert pause[sid] - 0.005 <= think_us / 1e6 < pause[sid] + 0.5, (sid, think_us)
    later_turns_waited(df, later["think_time_us"].tolist())
