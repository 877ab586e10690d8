"""Think times (issue 16): the rule that gives each later turn of a session
its pause, the trace field that records one, `synth --think-time`, and the
`think_time` / `think_time_scale` options."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from specreplay.cli import cli
from specreplay.settings.config import ReplayConfig
from specreplay.settings.distributions import Dist
from specreplay.errors import ConfigError, TraceError
from specreplay.trace.think_time import ThinkTimes
from specreplay.trace.synth import SynthConfig, synthesize
from specreplay.trace.records import TraceRecord, load_trace

from session_walk import think_times


def rec(rid: str, session: str | None, arrival: float | None = None, end_us: int | None = None, think: float | None = None) -> TraceRecord:
    response = {"status": 200, "end_us": end_us} if end_us is not None else None
    return TraceRecord(id=rid, api="chat", body={"messages": []}, arrival=arrival, session_id=session,
                       think_time=think, response=response)


def config(**values: Any) -> ReplayConfig:
    return ReplayConfig.from_mapping({"trace": "t.jsonl", **values})


def test_recorded_arrival_minus_recorded_end_then_the_fallbacks() -> None:
    records = [
        rec("1", "cap", arrival=10.0, end_us=2_500_000),    # ends at 12.5 s
        rec("0", None, arrival=11.0),                       # a request on its own: none
        rec("2", "cap", arrival=13.0, end_us=1_000_000),    # 0.5 s after → ends at 14.0
        rec("3", "cap", arrival=13.5, end_us=100),          # arrived before 14.0: overlapped → 0
        rec("4", "cap", arrival=20.0, think=1.25),          # the record's own think time wins
        rec("5", "cap", arrival=30.0),                      # "4" has no recorded end: unknown → 0
    ]
    got, times = think_times(records)
    assert got == [None, None, 500_000, 0, 1_250_000, 0]
    s = times.sources
    assert (s.measured, s.overlapped, s.recorded, s.unknown, s.drawn) == (1, 1, 1, 1, 0)
    notes = s.notes()
    assert any("1 of 4 later turns" in n and "--think-time is not set" in n for n in notes)
    assert any("1 later turns were recorded arriving before" in n for n in notes)
    # --think-time fills only what the trace does not know; the scale applies to all.
    got, times = think_times(records, config(think_time=2, think_time_scale=3))
    assert got == [None, None, 1_500_000, 0, 3_750_000, 6_000_000]
    assert times.sources.drawn == 1 and not times.sources.unknown and len(times.sources.notes()) == 1


def test_drawn_think_times_are_seeded_by_seed_session_and_turn() -> None:
    many = [rec(f"{s}.{t}", f"s{s}") for t in range(4) for s in range(50)]
    a, _ = think_times(many, config(think_time="exp:2", seed=7))
    b, _ = think_times(many, config(think_time="exp:2", seed=7))
    c, _ = think_times(many, config(think_time="exp:2", seed=8))
    assert a == b and a != c
    # A session's draws do not depend on which other sessions are in the trace.
    alone, _ = think_times([r for r in many if r.session_id == "s3"], config(think_time="exp:2", seed=7))
    assert alone == [t for t, r in zip(a, many) if r.session_id == "s3"]
    drawn = [t / 1e6 for t in a if t is not None]
    assert len(drawn) == 150 and 1.5 < sum(drawn) / len(drawn) < 2.5 and min(drawn) >= 0
    # Asked in any order, a turn gets the same draw.
    times = ThinkTimes(config(think_time="exp:2", seed=7))
    assert times.us(many[3], many[53], 1) == a[53] == times.us(many[3], many[53], 1)


# --- the trace field ---------------------------------------------------------------


def write(path: Path, *objs: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    return path


def test_think_time_is_read_written_and_strictly_checked(tmp_path: Path) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}]}
    good = write(tmp_path / "t.jsonl", {"id": "a", "session_id": "s", "body": body},
                 {"id": "b", "session_id": "s", "think_time": 1.5, "body": body})
    recs = load_trace(good).records
    assert [r.think_time for r in recs] == [None, 1.5]
    assert json.loads(recs[1].to_json())["think_time"] == 1.5 and "think_time" not in json.loads(recs[0].to_json())
    bad_cases = [
        ({"id": "a", "session_id": "s", "think_time": -1, "body": body}, 1, "must be a non-negative number"),
        ({"id": "a", "session_id": "s", "think_time": "2", "body": body}, 1, "must be a non-negative number"),
        ({"id": "a", "think_time": 2, "body": body}, 1, "given without session_id"),
        ({"id": "a", "session_id": "s", "think_time": 2, "body": body}, 1, "on the first turn of session 's'"),
    ]
    for obj, line, message in bad_cases:
        with pytest.raises(TraceError, match=message) as err:
            load_trace(write(tmp_path / "bad.jsonl", obj))
        assert err.value.line == line and err.value.field == "think_time"


# --- synth ------------------------------------------------------------------------------


def test_synth_records_each_later_turns_think_time() -> None:
    recs = synthesize(SynthConfig(num_requests=40, rate=2.0, turns="uniform:2:4", think_time="uniform:0.1:0.3", seed=3))
    by_session: dict[str, list[TraceRecord]] = {}
    for r in recs:
        assert r.session_id is not None
        by_session.setdefault(r.session_id, []).append(r)
    for turns in by_session.values():
        assert turns[0].think_time is None
        for before, after in zip(turns, turns[1:]):
            assert after.think_time is not None and 0.1 <= after.think_time <= 0.3
            # The arrival is the turn before's plus the think time (answers taking no time).
            assert after.arrival == pytest.approx((before.arrival or 0) + after.think_time, abs=2e-6)
    # The rule at replay takes the recorded think times as they are.
    got, times = think_times(recs)
    assert times.sources.recorded == sum(len(t) - 1 for t in by_session.values()) and not times.sources.notes()
    assert got == [None if r.think_time is None else round(r.think_time * 1e6) for r in recs]
    fixed = synthesize(SynthConfig(num_requests=10, turns="2", think_time="0", seed=1))
    assert {r.think_time for r in fixed} == {None, 0.0}


def test_synth_think_time_option(tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    ok = CliRunner().invoke(cli, ["synth", "-o", str(out), "--num-requests", "12", "--turns", "3", "--think-time", "0.2"])
    assert ok.exit_code == 0, ok.output
    assert {r.think_time for r in load_trace(out).records} == {None, 0.2}
    bad = CliRunner().invoke(cli, ["synth", "-o", str(out), "--think-time", "exp:-1"])
    assert bad.exit_code == 1 and "--think-time" in bad.output


# --- options --------------------------------------------------------------------------------


def test_think_time_options_are_checked_and_kept_as_written() -> None:
    config = ReplayConfig.from_mapping({"trace": "t.jsonl", "think_time": 0.5, "think_time_scale": 2})
    assert config.think_time == "0.5" and config.think_time_dist() == Dist("const", 0.5) and config.think_time_scale == 2.0
    assert ReplayConfig.from_mapping({"think_time": "exp:2"}).think_time == "exp:2"
    assert ReplayConfig.from_mapping({"think_time": 0}).think_time_dist() == Dist("const", 0.0)
    for bad, message in [({"think_time": "zipf:1"}, "not a distribution"), ({"think_time": True}, "expected seconds"),
                         ({"think_time_scale": -1}, "must be at least 0")]:
        with pytest.raises(ConfigError, match=message):
            ReplayConfig.from_mapping(bad)
