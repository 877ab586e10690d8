"""The live view of a running sweep point, for long runs.

It shows only what the drain loop already has: the engine's progress
counters and the rows of finished requests it has just written. The engine
measures on its own threads and never waits for this module; the view's
work happens when the drain loop hands it a batch, and its drawing on rich's
refresh thread (`bench/live_view.py` measures the send lag with and without
it).

- On a terminal: a rich display per point, redrawn four times a second: a
  progress bar with the ETA; requests sent, in flight, done and failed; TTFT,
  TPOT and send lag p50/p99 over the requests that finished in the last
  `WINDOW_S` seconds; output tokens/s over the same window; and, during a
  capacity search, the current bracket.
- Anywhere else (a pipe, a CI log): the same figures as one plain line every
  `interval_s` seconds, so a log shows progress without drawing codes.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from rich.console import Console, Group
from rich.text import Text

from specreplay import _core
from specreplay.results.batch_figures import batch_figures, valid

if TYPE_CHECKING:  # the terminal's display, imported when one is drawn (plain lines need neither)
    from rich.live import Live
    from rich.progress import Progress as Bar, TaskID

from specreplay.run.plan import Progress
from specreplay.settings.thresholds import ValidityThresholds

#: The rolling window of the live figures, seconds.
WINDOW_S = 10.0
#: Seconds between two plain lines when the output is not a terminal.
PLAIN_INTERVAL_S = 10.0


class Rolling:
    """Figures of the requests that finished in the last `window_s` seconds,
    and the output tokens/s over that window from the engine's counter.
    TTFT, TPOT and send lag are derived as the summary derives them
    (`batch_figures`, `derived.request_figures`' own: a burst's TPOT left out under
    `burst_us_per_token`, the run's threshold), over successful requests."""

    def __init__(self, window_s: float = WINDOW_S, burst_us_per_token: float = ValidityThresholds().burst_us_per_token) -> None:
        self.window_us = window_s * 1e6
        self.burst_us_per_token = burst_us_per_token
        # Per drained batch: (end_us, ttft_us, tpot_us, send_lag_us) of its requests.
        self._batches: deque[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = deque()
        self._tokens: deque[tuple[float, int]] = deque()  # (elapsed s, output tokens so far)

    def add(self, batch: pa.RecordBatch) -> None:
        """Takes the figures of a batch of finished requests (the results'
        columns), vectorised: no Python object per request."""
        if batch.num_rows == 0:
            return
        figures = batch_figures(batch, self.burst_us_per_token)
        ok = ~valid(batch.column("error_kind"))
        ttft = np.where(ok, figures["ttft_us"], np.nan)
        tpot = np.where(ok, figures["tpot_us"], np.nan)
        self._batches.append((figures["end_us"], ttft, tpot, figures["send_lag_us"]))

    def tick(self, progress: Progress) -> None:
        self._tokens.append((progress.elapsed_s, progress.output_tokens))
        while len(self._tokens) > 2 and self._tokens[1][0] < progress.elapsed_s - self.window_us / 1e6:
            self._tokens.popleft()

    def figures(self, now_us: float) -> dict[str, float]:
        """ttft/tpot/send_lag p50 and p99 in ms, and tok_s; NaN when unknown."""
        since = now_us - self.window_us
        while self._batches and np.nanmax(self._batches[0][0], initial=-math.inf) < since:
            self._batches.popleft()
        out: dict[str, float] = {}
        if self._batches:
            end = np.concatenate([b[0] for b in self._batches])
            recent = end >= since
            for i, name in enumerate(("ttft", "tpot", "send_lag"), start=1):
                values = np.concatenate([b[i] for b in self._batches])[recent]
                values = values[~np.isnan(values)]
                for stat, q in (("p50", 0.5), ("p99", 0.99)):
                    out[f"{name}_{stat}"] = quantile(values, q) / 1000 if len(values) else math.nan
        if len(self._tokens) >= 2:
            (t0, n0), (t1, n1) = self._tokens[0], self._tokens[-1]
            out["tok_s"] = (n1 - n0) / (t1 - t0) if t1 > t0 else math.nan
        return out


def quantile(values: np.ndarray, q: float) -> float:
    """`np.quantile(values, q)` (its default, linear method, to the bit) of a
    non-empty array without NaN. Not `np.quantile` itself: its first call
    imports numpy.ma (11 ms of CPU), which would land either before a
    replay's first request or inside its first point."""
    ordered = np.sort(values)
    position = (len(ordered) - 1) * q
    below = math.floor(position)
    a, b = float(ordered[below]), float(ordered[min(below + 1, len(ordered) - 1)])
    t = position - below
    # numpy's _lerp: from the nearer end, so q = 1 gives the maximum exactly
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t


def _ms(x: float | None) -> str:
    if x is None or math.isnan(x):
        return "—"
    return f"{x:.3f}" if x < 1 else f"{x:.1f}" if x < 100 else f"{x:,.0f}"


def status_text(progress: Progress, figures: dict[str, float], bracket: str | None) -> str:
    """The figures of the live view as one line (what the plain output prints)."""
    parts = [
        f"sent {progress.sent}  in flight {progress.in_flight}  done {progress.finished}  errors {progress.failed}",
        "  ".join(
            f"{label} p50/p99 {_ms(figures.get(f'{name}_p50'))}/{_ms(figures.get(f'{name}_p99'))} ms"
            for name, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("send_lag", "send lag"))
        ),
    ]
    tok_s = figures.get("tok_s", math.nan)
    parts.append(f"{tok_s:,.0f} tok/s" if not math.isnan(tok_s) else "— tok/s")
    if bracket:
        parts.append(f"bracket {bracket}")
    return "  ·  ".join(parts)


class LiveView:
    """The live display of one point at a time (see the module doc). `start`
    at a point's start, `rows` and `update` as the drain loop goes, `stop`
    when it ends."""

    def __init__(
        self,
        console: Console,
        terminal: bool,
        interval_s: float = PLAIN_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        now_us: Callable[[], float] | None = None,
    ) -> None:
        self.console = console
        self.terminal = terminal
        self.interval_s = interval_s
        self.clock = clock
        self.now_us = now_us or _core.now_us
        self.rolling = Rolling()
        self.bracket: str | None = None
        self.expected = 0
        self._live: Live | None = None
        self._bar: Bar | None = None
        self._task: TaskID | None = None
        self._last_line = -math.inf

    def start(self, title: str, expected: int, bracket: str | None = None, thresholds: ValidityThresholds | None = None) -> None:
        """A new point: `expected` requests (the progress bar's total), under
        its run's `thresholds` (the burst limit: the summary's TPOT)."""
        self.stop()
        self.rolling = Rolling(burst_us_per_token=(thresholds or ValidityThresholds()).burst_us_per_token)
        self.bracket = bracket
        self.expected = expected
        self._last_line = self.clock()
        if not self.terminal:
            return
        from rich.live import Live
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeRemainingColumn

        self._bar = Bar(
            TextColumn("  {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            auto_refresh=False,
        )
        self._task = self._bar.add_task(title, total=max(expected, 1))
        self._live = Live(Group(self._bar, Text("")), console=self.console, refresh_per_second=4, transient=True)
        self._live.start()

    def rows(self, batch: pa.RecordBatch) -> None:
        self.rolling.add(batch)

    def update(self, progress: Progress) -> None:
        self.rolling.tick(progress)
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=progress.finished)
            line = Text("  " + status_text(progress, self.rolling.figures(self.now_us()), self.bracket))
            if self._live is not None:
                # A new renderable rather than a changed one: rich draws from its own thread.
                self._live.update(Group(self._bar, line))
            return
        now = self.clock()
        if now - self._last_line >= self.interval_s:
            self._last_line = now
            self.console.print(Text(self.plain_line(progress)), highlight=False)

    def plain_line(self, progress: Progress) -> str:
        """`  12.0 s  412/1000 (41%)  ETA 17 s  sent …`: the line printed on a pipe."""
        done = f"{progress.finished}/{self.expected} ({progress.finished / self.expected:.0%})" if self.expected else str(progress.finished)
        eta = "ETA —"
        if progress.finished and self.expected > progress.finished:
            eta = f"ETA {(self.expected - progress.finished) * progress.elapsed_s / progress.finished:.0f} s"
        return f"  {progress.elapsed_s:6.1f} s  {done}  {eta}  ·  " + status_text(progress, self.rolling.figures(self.now_us()), self.bracket)

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
        self._live = None
        self._bar = None
        self._task = None
