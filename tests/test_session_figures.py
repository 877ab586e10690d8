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

from specreplay.results import derived as metrics
from specreplay.analysis.session_figures import per_session, summary_of, ttft_by_turn

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


# --- findings, console, compare, report on the same kind of frames ---------------------------


def conversations(make_results: MakeResults, n: int, *, turns: int = 3, gap_s: float = 0.5, ttft_ms: float = 100,
                  lag_ms: float = 0.05, fail: frozenset[int] = frozenset(), point: str = "concurrency=4", seed: int = 0) -> pd.DataFrame:
    """n sessions of `turns` turns, `gap_s` apart; session k fails at its second turn when k in `fail`."""
    rng = np.random.default_rng(seed)
    specs: list[dict[str, Any]] = []
    for k in range(n):
        for t in range(turns):
            turn: dict[str, Any] = {"s": f"s{k}", "t": t, "at": k * 0.1 + t * gap_s * (1 + 0.2 * rng.random()), "n": turns,
                                    "ttft_ms": ttft_ms * (1 + 0.1 * rng.random()), "lag_ms": lag_ms if t else 0}
            if k in fail and t == 1:
                turn["error"] = "http"
            if k in fail and t > 1:
                turn["error"] = "skipped_after_failure"
            specs.append(turn)
    df = sessions_frame(make_results, specs)
    df["point"] = point
    return df


def test_findings_on_sessions(make_results: MakeResults) -> None:
    from specreplay.analysis.validity import check
    from specreplay.settings.thresholds import ValidityThresholds

    df = conversations(make_results, 12, fail=frozenset({3, 7}))
    found = {f.code: f for f in check(df, ValidityThresholds())}
    skipped = found["session_turns_skipped"]
    assert (skipped.level, skipped.count) == ("warning", 2)
    assert "2 turns of 2 of 12 sessions were not sent" in skipped.message and "10 completed sessions" in skipped.message
    # 2 failures of the 34 requests sent (the 2 skipped turns were not): over the 1% limit.
    assert "2 of 34 requests failed" in found["error_rate"].message and "skipped" not in found["error_rate"].message
    # 10 completed sessions: enough for a p50, too few for a p90 (50: resampling.samples_needed).
    assert "client_saturated" not in found and "session duration p90 printed" in found["too_few_sessions"].message
    assert "p50 and" not in found["too_few_sessions"].message
    few = {f.code: f for f in check(conversations(make_results, 6), ValidityThresholds())}
    assert few["too_few_sessions"].level == "note" and "only 6 of 6 sessions completed" in few["too_few_sessions"].message
    assert "the session duration p50 and p90 printed" in few["too_few_sessions"].message
    # A closed loop's later turns have a schedule: late ones are the client's doing.
    late = check(conversations(make_results, 12, lag_ms=3.0), ValidityThresholds())
    saturated = [f for f in late if f.code == "client_saturated"]
    assert len(saturated) == 1 and saturated[0].count == 24 and "send lag p99 is 3.000 ms" in saturated[0].message


def test_the_console_prints_the_sessions_line(make_results: MakeResults) -> None:
    from rich.console import Console

    from specreplay.analysis.analyse import analyse
    from specreplay.present.console import print_summary

    [run] = analyse(conversations(make_results, 12, turns=10, fail=frozenset({3})))
    console = Console(record=True, width=400)
    print_summary(console, run.summary, run.findings, ttft_by_turn={p.point: p.ttft_by_turn for p in run.points})
    text = console.export_text()
    row = run.summary.iloc[0]
    assert "120 requests: 111 ok, 1 failed (http: 1), 8 skipped after their session failed" in text
    assert f"sessions 12: 11 completed  ·  10.0 turns each  ·  duration p50 {row['session_duration_p50_s']:.2f} s" in text
    by_turn = run.points[0].ttft_by_turn["ttft_p50_ms"]
    assert f"TTFT p50 by turn: 0: {by_turn[0]:.0f} · 1: {by_turn[1]:.0f}" in text and "… (2 more)" in text
    quiet = Console(record=True, width=400)
    [plain] = analyse(make_results([{}, {}]))
    print_summary(quiet, plain.summary)
    assert "sessions" not in quiet.export_text()


def test_compare_carries_the_session_durations(make_results: MakeResults) -> None:
    import specreplay

    base = conversations(make_results, 30, gap_s=0.5)
    slow = conversations(make_results, 30, gap_s=0.6, seed=1)
    out = specreplay.compare(base, slow).set_index("metric")
    for metric in ("session_duration_p50_s", "session_duration_p90_s"):
        row = out.loc[metric]
        # 30 sessions: enough for a p50 (10), too few for a p90 (50: resampling.samples_needed).
        expected = "slower" if metric.endswith("p50_s") else "too few samples"
        assert row["unit"] == "s" and row["verdict"] == expected and bool(row["paired"])
        assert row["base_value"] == pytest.approx(specreplay.summarize(base).iloc[0][metric])
        assert row["ci_low"] < row["change"] < row["ci_high"] and row["change"] == pytest.approx(0.2, abs=0.08)
        assert (row["base_requests"], row["requests"]) == (30, 30)  # completed sessions
    # Too few sessions for a p90 verdict; no session rows without sessions.
    few = specreplay.compare(conversations(make_results, 6), conversations(make_results, 6, gap_s=0.6, seed=1), force=True)
    assert few.set_index("metric").loc["session_duration_p90_s", "verdict"] == "too few samples"
    # Six sessions are too few for their p50 as well (the seven sessions were judged).
    assert few.set_index("metric").loc["session_duration_p50_s", "verdict"] == "too few samples"
    plain = make_results([{"point": "concurrency=4"}] * 12)
    assert "session_duration_p50_s" not in set(specreplay.compare(plain, plain, force=True)["metric"])


def test_the_report_draws_ttft_by_turn(make_results: MakeResults, tmp_path: Any) -> None:
    from specreplay.comparison.compare import select
    from specreplay.present.report import data, html, plots

    runs = [data.prepare(r) for r in select(conversations(make_results, 12))]
    charts = dict(plots.all_plots(runs))
    assert "ttft-turn" in charts and "TTFT by turn of session" in charts["ttft-turn"]
    page = html.render(runs)
    assert "<h3>Sessions</h3>" in page and "later-turn send lag p99" in page
    plain = [data.prepare(r) for r in select(make_results([{}, {}]))]
    assert "ttft-turn" not in dict(plots.all_plots(plain)) and "<h3>Sessions</h3>" not in html.render(plain)
