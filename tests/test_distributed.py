"""Distributed replay without Ray: how a point is split between workers
(pure functions), the clock offset estimate, the engine's share of a
schedule and its start instant, and the options. The runs on a real local
Ray instance are in tests/test_ray.py (`make test-ray`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner

from specreplay import _core
from specreplay.cli import cli
from specreplay.settings.config import ReplayConfig
from specreplay.run.distributed import INSTALL_HINT, clock, import_ray, split
from specreplay.errors import ConfigError
from specreplay.results.schema import request_schema

ROOT = Path(__file__).resolve().parent.parent
TRACE = str(ROOT / "traces" / "reasoning-prompts.jsonl")
FAST: Any = {"ttft_ms": 1, "tpot_ms": 1, "reasoning_tokens": [2, 2], "content_tokens": [2, 2]}
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()


def test_concurrency_is_split_as_evenly_as_it_goes() -> None:
    assert split.concurrency_shares(8, 2) == [4, 4]
    assert split.concurrency_shares(7, 3) == [3, 2, 2]
    assert split.concurrency_shares(1, 2) == [1, 0]
    assert sum(split.concurrency_shares(1000, 7)) == 1000


def test_open_loop_units_are_dealt_out_in_turn() -> None:
    dealer = split.Dealer(3)
    owners = [dealer.deal(None) for _ in range(10)]
    owned = [[i for i, w in enumerate(owners) if w == k] for k in range(3)]
    assert owned == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert split.shares(2) == [{"worker": 0, "workers": 2}, {"worker": 1, "workers": 2}]


def test_sessions_stay_whole_on_one_worker() -> None:
    sessions = ["a", "b", "a", None, "c", "b", None]
    dealer = split.Dealer(2)
    owners = [dealer.deal(s) for s in sessions]
    # Sessions in order of first appearance: a → 0, b → 1, (own) → 0, c → 1, (own) → 0.
    assert owners == [0, 1, 0, 0, 1, 1, 0]
    # A second lap over the 7 requests: a session's turns go to its worker on every lap.
    owners += [dealer.deal(s) for s in sessions]
    owned = [[i for i, w in enumerate(owners) if w == k] for k in range(2)]
    assert sorted(owned[0] + owned[1]) == list(range(14))
    for k, indices in enumerate(owned):
        assert {sessions[i % 7] for i in indices if sessions[i % 7]} == ({"a"} if k == 0 else {"b", "c"})


def test_the_tightest_round_trip_gives_the_offset() -> None:
    # The remote clock is 5000 µs ahead; round trips of 900, 100 and 500 µs,
    # the reply read at the midpoint of each but for the first (queued on return).
    driver = iter([0, 900, 10_000, 10_100, 20_000, 20_500])
    remote = iter([5_100 + 700, 15_050, 25_250])
    got = clock.measure(lambda: next(driver), lambda: next(remote), rounds=3)
    assert got == clock.ClockOffset(offset_us=5_000, uncertainty_us=50, rtt_us=100)


def _start_share(url: str, share: Any, start_at_us: int | None, sessions: list[str | None] | None = None) -> _core.EngineRun:
    sessions = sessions or [None] * 3
    rows = [
        {"trace_id": f"r{i}", "api": "chat", "url": url, "body": BODY, "arrival_s": 0.0, "session_id": s, "turn_index": None if s is None else sessions[:i].count(s)}
        for i, s in enumerate(sessions)
    ]
    spec: Any = {
        "load": {"mode": "rate", "rate": 200.0, "arrival": "constant"}, "num_requests": 9, "timeout_s": 30,
        "share": share, "start_at_us": start_at_us, "sessions": "independent",
    }  # fmt: skip
    return _core.start_point(spec, pa.RecordBatch.from_pylist(rows, schema=request_schema()))


def _drain(run: _core.EngineRun) -> pa.Table:
    batches = []
    while (batch := run.next_batch(64, 0.25)) is not None:
        batches.append(pa.record_batch(batch))
    return pa.Table.from_batches(batches)


@pytest.mark.parametrize("mode", ["turn", "sessions"])
def test_the_engine_sends_its_share_of_the_schedule_from_the_start_instant(mode: str) -> None:
    sessions: list[str | None] | None = ["s", None, "s"] if mode == "sessions" else None
    with _core.SimServer(config=FAST) as sim:
        url = sim.url + "/chat/completions"
        start = _core.now_us() + 300_000
        # Both workers at once, as on two machines.
        runs = [_start_share(url, {"worker": k, "workers": 2}, start, sessions) for k in range(2)]
        tables = [_drain(run) for run in runs]
    indices = [sorted(t["request_index"].to_pylist()) for t in tables]
    if mode == "turn":
        assert indices == [[0, 2, 4, 6, 8], [1, 3, 5, 7]]
    else:
        # Session s (templates 0 and 2, indices ≡ 0, 2 mod 3) is worker 0's on
        # every lap; the request on its own is dealt in turn: to 1, 0, 1.
        assert indices == [[0, 2, 3, 4, 5, 6, 8], [1, 7]]
        assert {i % 3 for i in indices[1]} == {1}
    for t in tables:
        assert t["error_kind"].null_count == t.num_rows
        # Slot i is due at start + 5 ms × i on every worker: the full schedule's time.
        for i, scheduled in zip(t["request_index"].to_pylist(), t["scheduled_us"].to_pylist()):
            assert scheduled == start + 5_000 * i


def test_a_share_past_the_workers_is_refused() -> None:
    with pytest.raises(ConfigError, match="share: worker 2 of 2"):
        _start_share("http://127.0.0.1:9/v1/chat/completions", {"worker": 2, "workers": 2}, None)


def test_without_ray_the_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray → ImportError
    with pytest.raises(ConfigError) as err:
        import_ray()
    assert str(err.value) == INSTALL_HINT
    with pytest.raises(ConfigError, match="pip install 'specreplay\\[ray\\]'"):
        ReplayConfig(trace=TRACE, rate=[1.0], ray="local", workers=2).validate()
    result = CliRunner().invoke(cli, ["replay", TRACE, "--rate", "8", "--ray", "--workers", "2"])
    assert result.exit_code == 2
    assert "--ray needs Ray: pip install 'specreplay[ray]'" in result.output


def test_ray_options_are_checked_and_recorded(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="more than one worker needs ray"):
        ReplayConfig(trace=TRACE, rate=[1.0], workers=2).validate()
    with pytest.raises(ConfigError, match="concurrency: 1 is below workers=2"):
        ReplayConfig(trace=TRACE, concurrency=[1], ray="local", workers=2).validate()
    config = ReplayConfig.from_mapping({"trace": TRACE, "rate": 8, "ray": "ray://head:10001", "workers": 3})
    assert ReplayConfig.from_mapping(config.to_metadata()) == config  # what rerun reads back
    result = CliRunner().invoke(cli, ["replay", TRACE, "--rate", "8", "--workers", "2"])
    assert result.exit_code == 2 and "more than one worker needs ray" in result.output
