"""The live view: rolling figures from the batches the drain loop hands it,
one plain line per interval off a terminal, and a rich display on one."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
from conftest import T0, results_table
from rich.console import Console

from specreplay.analysis.analyse import analyse
from specreplay.analysis.summary import summarize
from specreplay.commands.replay import ConsoleHooks
from specreplay.present.live import LiveView, Rolling, quantile, status_text
from specreplay.run.plan import Progress
from specreplay.settings.thresholds import ValidityThresholds


def batch(n: int, start_us: int, ttft_us: int, lag_us: int = 50, fail_every: int = 0) -> list[dict[str, object]]:
    rows = []
    for i in range(n):
        sent = start_us + 1_000 * i
        failed = fail_every and i % fail_every == 0
        rows.append(
            {
                "scheduled_us": sent - lag_us * (i % 3),
                "sent_us": sent,
                "chunks": None if failed else [(ttft_us + 10_000 * k, 1, "content") for k in range(5)],
                "error_kind": "http" if failed else None,
                "end_us": sent + ttft_us + 50_000,
            }
        )
    return rows


def test_rolling_figures_are_those_of_the_last_window() -> None:
    rolling = Rolling(window_s=10.0)
    old = results_table(batch(50, T0, ttft_us=900_000))  # ends ~1 s after T0
    recent = results_table(batch(100, T0 + 20_000_000, ttft_us=30_000, lag_us=40, fail_every=10))
    for table in (old, recent):
        for b in table.to_batches():
            rolling.add(b)
    figures = rolling.figures(now_us=T0 + 25_000_000)
    # Only the recent batch is in the window; its failed requests give send lag but no TTFT.
    assert figures["ttft_p50"] == pytest.approx(30.0)
    assert figures["tpot_p99"] == pytest.approx(10.0)
    lag = np.array([40 * (i % 3) for i in range(100)]) / 1000
    assert figures["send_lag_p50"] == pytest.approx(float(np.quantile(lag, 0.5)))
    assert figures["send_lag_p99"] == pytest.approx(float(np.quantile(lag, 0.99)))
    assert "tok_s" not in figures  # no progress ticks yet
    rolling.tick(Progress("rate=8", 10, 10, 5, 0, 1000, 1.0))
    rolling.tick(Progress("rate=8", 20, 20, 15, 0, 3000, 3.0))
    assert rolling.figures(T0 + 25_000_000)["tok_s"] == pytest.approx(1000.0)
    assert math.isnan(rolling.figures(T0 + 60_000_000).get("ttft_p50", math.nan))  # the window emptied


def test_the_live_tpot_and_ttft_are_the_summarys() -> None:
    # Ordinary streams (10 ms a token), bursts (every token in one 20 µs
    # gap: below the 50 µs burst limit) and failures: the live view's TPOT
    # leaves the bursts out exactly as the summary does, so its p50 and p99
    # are the summary's, and its TTFT too.
    rows = batch(60, T0, ttft_us=30_000, fail_every=7)
    for i, row in enumerate(rows):
        if i % 4 == 1 and row["chunks"] is not None:
            row["chunks"] = [(30_000 + 20 * k, 1, "content") for k in range(5)]
        elif row["chunks"] is not None:
            row["chunks"] = [(30_000 + (8_000 + 300 * i) * k, 1, "content") for k in range(5)]
    table = results_table(rows)
    rolling = Rolling(window_s=1e6)
    for b in table.to_batches(max_chunksize=16):
        rolling.add(b)
    live = rolling.figures(now_us=T0 + 1_000_000)
    df = table.to_pandas()
    row = summarize(df).iloc[0]
    assert row["bursts"] > 0
    assert live["tpot_p50"] == pytest.approx(row["tpot_p50_ms"])
    assert live["tpot_p99"] == pytest.approx(row["tpot_p99_ms"])
    assert live["ttft_p99"] == pytest.approx(row["ttft_p99_ms"])
    # A stricter burst limit of the run's own moves both alike.
    strict = Rolling(window_s=1e6, burst_us_per_token=9_000.0)
    for b in table.to_batches(max_chunksize=16):
        strict.add(b)
    point = analyse(df, ValidityThresholds(burst_us_per_token=9_000.0))[0].points[0]
    assert strict.figures(now_us=T0 + 1_000_000)["tpot_p50"] == pytest.approx(point.summary["tpot_p50_ms"])
    assert point.summary["tpot_p50_ms"] != pytest.approx(row["tpot_p50_ms"])


def test_off_a_terminal_one_plain_line_per_interval() -> None:
    out = io.StringIO()
    clock = iter([0.0, 0.5, 1.2, 1.9, 2.6])
    view = LiveView(Console(file=out, width=300), terminal=False, interval_s=1.0, clock=lambda: next(clock), now_us=lambda: T0 + 30_000_000)
    view.start("rate=8", expected=200, bracket="[4, 8) req/s")
    for b in results_table(batch(20, T0 + 25_000_000, ttft_us=20_000)).to_batches():
        view.rows(b)
    for finished in (10, 40, 80, 120):
        view.update(Progress("rate=8", finished + 5, finished + 5, finished, 1, finished * 10, finished / 40))
    view.stop()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines  # at 1.2 s and 2.6 s: one per interval
    assert lines[0].strip().startswith("1.0 s  40/200 (20%)  ETA 4 s")
    assert "sent 45  in flight 5  done 40  errors 1" in lines[0]
    assert "TTFT p50/p99 20.0/20.0 ms" in lines[0] and "bracket [4, 8) req/s" in lines[0]


def test_on_a_terminal_a_progress_bar_with_the_figures() -> None:
    out = io.StringIO()
    view = LiveView(Console(file=out, force_terminal=True, width=200), terminal=True, now_us=lambda: T0)
    view.start("rate=8", expected=100)
    view.update(Progress("rate=8", 60, 60, 50, 0, 500, 2.0))
    view.stop()
    text = out.getvalue()
    assert "50/100" in text and "ETA" in text and "in flight 10" in text


def test_console_hooks_choose_the_view_from_the_output() -> None:
    plain = ConsoleHooks(Console(file=io.StringIO()), Console(file=io.StringIO()), per_request=False)
    assert plain.view is not None and not plain.view.terminal
    assert ConsoleHooks(Console(), Console(), per_request=False, live="off").view is None
    assert ConsoleHooks(Console(), Console(), per_request=False, live="terminal").view.terminal  # type: ignore[union-attr]


def test_the_status_line_says_what_it_does_not_know() -> None:
    line = status_text(Progress("rate=8", 0, 0, 0, 0, 0, 0.0), {}, None)
    assert line == "sent 0  in flight 0  done 0  errors 0  ·  TTFT p50/p99 —/— ms  TPOT p50/p99 —/— ms  send lag p50/p99 —/— ms  ·  — tok/s"


@pytest.mark.parametrize("n", [1, 2, 3, 10, 101, 1000])
def test_the_live_quantile_is_numpys_to_the_bit(n: int) -> None:
    rng = np.random.default_rng(n)
    values = rng.lognormal(8.0, 1.5, n)  # microseconds-like, heavy tail
    for q in (0.0, 0.5, 0.9, 0.99, 1.0):
        assert quantile(values, q) == float(np.quantile(values, q)), (n, q)
