"""Session figures (issue 16) on constructed result frames with the
contract's columns: sessions completed, turns per session, session duration
p50/p90, turns skipped after a failure, the send lag of dependent turns,
TTFT by turn index; each checked against its definition in
docs/results.md."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from specreplay import metrics
from specreplay.session_figures import per_session, summary_of, ttft_by_turn

from conftest import T0, MakeResults

S = 1_000_000  # µs


def sessions_frame(make_results: MakeResults, turns: list[dict[str, Any]]) -> pd.DataFrame:
    """A point's rows: each dict a turn with session (s), turn (t), sent
    offset in s (at), TTFT (ttft_ms), and optionally error, lag_ms,
    session_turns (n; without it, the session was replayed independently)."""
    specs = []
    for turn in turns:
        sent = T0 + int(turn["at"] * S)
        ttft = int(turn.get("ttft_ms", 100) * 1000)
        spec: dict[str, Any] = {"sent_us": sent, "scheduled_us": sent - int(turn.get("lag_ms", 0) * 1000),
                                "chunks": [(ttft + 10_000 * i, 1, "content") for i in range(5)]}
        if turn.get("error"):
            spec.update(error_kind=turn["error"], chunks=[], first_token_us=None, output_tokens=0)
            if turn["error"] == "skipped_after_failure":
                spec.update(chunks=None, sent_us=None, end_us=None, http_status=None, finish_reason=None)
        specs.append(spec)
    df = make_results(specs)
    df["session_id"] = [t["s"] for t in turns]
    df["turn_index"] = pd.array([t["t"] for t in turns], dtype="Int32")
    df["session_turns"] = pd.array([t.get("n") for t in turns], dtype="Int32")
    df["predecessor_end_us"] = pd.array([T0 if t["t"] else None for t in turns], dtype="Int64")
    return metrics.add_derived(df)


def ok_of(df: pd.DataFrame) -> np.ndarray:
    return df["error_kind"].isna().to_numpy(dtype=bool)


def test_sessions_completed_turns_durations_and_skips(make_results: MakeResults) -> None:
    df = sessions_frame(make_results, [
        {"s": "a", "t": 0, "at": 0.0, "n": 3}, {"s": "a", "t": 1, "at": 2.0, "n": 3}, {"s": "a", "t": 2, "at": 4.0, "n": 3},
        {"s": "b", "t": 0, "at": 1.0, "n": 2}, {"s": "b", "t": 1, "at": 2.0, "n": 2},
        # c failed on its second turn: its third was skipped; not completed.
        {"s": "c", "t": 0, "at": 1.0, "n": 3}, {"s": "c", "t": 1, "at": 3.0, "n": 3, "error": "http"},
        {"s": "c", "t": 2, "at": 0.0, "n": 3, "error": "skipped_after_failure"},
        # d: a run stopped (--duration) after its first of two turns: not completed either.
        {"s": "d", "t": 0, "at": 5.0, "n": 2},
        {"s": None, "t": None, "at": 6.0},  # a request on its own
    ])
    sessions = per_session(df, ok_of(df))
    assert sessions["turns"].to_dict() == {"a": 3, "b": 2, "c": 3, "d": 1}
    assert sessions["completed"].to_dict() == {"a": True, "b": True, "c": False, "d": False}
    # Duration = last end − first send; each turn ends 141 ms after it is sent.
    end = 0.1 + 4 * 0.01 + 0.001
    assert sessions.loc["a", "duration_s"] == pytest.approx(4.0 + end)
    assert sessions.loc["b", "duration_s"] == pytest.approx(1.0 + end)
    assert np.isnan(sessions.loc["c", "duration_s"])
    figures = summary_of(df, per_session(df, ok_of(df)))
    assert figures["sessions"] == 4 and figures["sessions_completed"] == 2 and figures["skipped"] == 1
    assert figures["turns_per_session"] == pytest.approx(9 / 4)
    durations = pd.Series([4.0 + end, 1.0 + end])
    assert figures["session_duration_p50_s"] == pytest.approx(durations.quantile(0.5))
    assert figures["session_duration_p90_s"] == pytest.approx(durations.quantile(0.9))


def test_sessions_replayed_independently_are_labels(make_results: MakeResults) -> None:
    # --sessions independent: session ids and turns, but no session_turns.
    df = sessions_frame(make_results, [{"s": "a", "t": 0, "at": 0.0}, {"s": "a", "t": 1, "at": 1.0}])
    assert per_session(df, ok_of(df)).empty and ttft_by_turn(df, ok_of(df)).empty
    assert summary_of(df, per_session(df, ok_of(df)))["sessions"] == 0


def test_dependent_turn_lag_and_ttft_by_turn(make_results: MakeResults) -> None:
    turns = []
    for k in range(10):
        turns += [{"s": f"s{k}", "t": 0, "at": k, "ttft_ms": 200 + k, "n": 3},
                  {"s": f"s{k}", "t": 1, "at": k + 0.5, "ttft_ms": 50 + k, "lag_ms": 0.2 * k, "n": 3},
                  {"s": f"s{k}", "t": 2, "at": k + 0.8, "ttft_ms": 40 + k, "lag_ms": 3.0 if k == 9 else 0.1, "n": 3}]
    df = sessions_frame(make_results, turns)
    figures = summary_of(df, per_session(df, ok_of(df)))
    dependent = pd.Series([0.2 * k for k in range(10)] + [0.1] * 9 + [3.0])
    assert figures["turn_lag_p99_ms"] == pytest.approx(dependent.quantile(0.99), abs=1e-3)
    by_turn = ttft_by_turn(df, ok_of(df))
    assert by_turn.index.tolist() == [0, 1, 2] and by_turn["requests"].tolist() == [10, 10, 10]
    assert by_turn["ttft_p50_ms"].tolist() == pytest.approx([204.5, 54.5, 44.5])
    assert by_turn.loc[0, "ttft_p90_ms"] == pytest.approx(pd.Series(range(200, 210)).quantile(0.9))


def test_a_point_without_sessions(make_results: MakeResults) -> None:
    df = metrics.add_derived(make_results([{}, {}]))
    figures = summary_of(df, per_session(df, ok_of(df)))
    assert figures["sessions"] == 0 and figures["skipped"] == 0
    assert all(np.isnan(figures[k]) for k in ("turns_per_session", "session_duration_p50_s", "turn_lag_p99_ms"))
    assert ttft_by_turn(df, ok_of(df)).empty
