"""Scrapes the target's Prometheus endpoint while a run goes.

Off the measurement path by construction: the engine runs on its own Rust
threads and waits for nothing in Python (its finished requests go into an
unbounded channel that the replay loop drains), and the scraper is one more
Python thread with HTTP connections of its own (`_core.fetch`, run on the
scraper's thread with the GIL released). While a point runs it only
fetches: each page is kept raw with its stamps (`SampleLog.add`) and parsed
when the point is over (`end_point`), since a parse costs 11–20 ms of CPU
for vLLM's 470-sample page on this project's 2-core machine, the cores the
engine paces on. `bench/scrape_tick_cpu.py` measures a tick's CPU, and
`bench/scrape_send_lag.py` the send lag with and without scraping
(docs/benchmarks.md).

Each point is bracketed by two scrapes the replay loop takes itself, `start`
just before the engine starts the point and `end` just after its last
response, so a counter's increase over the point is exact whatever the
interval; `tick` scrapes every `interval` between the two sample the gauges.
The pages are parsed with `prometheus_client`'s parser
(`server_samples.parse`: the Prometheus text format, or OpenMetrics when the
server answers with it); every sample is kept, known name or not. Only the
run's first page is looked at before any point starts
(`server_samples.check_looks_like_metrics`): it decides whether the target
has metrics at all.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

from specreplay import _core
from specreplay.errors import ConfigError
from specreplay.results.server_samples import Page, SampleLog, check_looks_like_metrics
from specreplay.trace.shaping import redact_url

#: How long one GET may take. A scrape that takes longer fails (and is
#: counted); the next tick comes on the interval's grid as usual.
TIMEOUT_S = 5.0
#: The classic text format first: every server in docs/results.md speaks it.
ACCEPT = "text/plain;version=0.0.4;q=1.0, application/openmetrics-text;q=0.5, */*;q=0.1"


def metrics_url(api_url: str) -> str:
    """`<server root>/metrics` for the API at `api_url`: `http://host:8000/v1`
    → `http://host:8000/metrics`, where vLLM, SGLang, llama.cpp and the
    simulator serve it."""
    parts = urlsplit(api_url)
    return urlunsplit((parts.scheme, parts.netloc, "/metrics", "", ""))


def same_origin(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme, pa.hostname, pa.port) == (pb.scheme, pb.hostname, pb.port)


def _yield_to_the_engine() -> None:
    """Puts the calling thread at the normal scheduling policy and a low
    priority. A client run under a real-time policy (`chrt -f 1 specreplay
    replay`, as docs/benchmarks.md advises on a shared box) would otherwise
    run this thread at the engine's priority, and a parse holding one of two
    cores could make the send thread wait (measured: bench/scrape_send_lag.py)."""
    try:
        if os.sched_getscheduler(0) != os.SCHED_OTHER:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):  # not Linux, or not allowed: scrape as we are
        pass


class Scraper:
    """Scrapes `url` for the points of one run into `log`.

    `start_point` and `end_point` take the bracketing scrapes on the caller's
    thread (the replay loop, between points: nothing is in flight then);
    between the two a daemon thread takes the `tick` scrapes. The first scrape
    decides whether the target has metrics: if it fails, `note` says so in
    one line and the run goes on without them. Later failures are counted
    and said once, at `close`."""

    def __init__(
        self, url: str, headers: list[tuple[str, str]], interval_s: float, log: SampleLog, note: Callable[[str], None]
    ) -> None:
        self.url = url
        self.shown = redact_url(url)
        self.headers = list({"Accept": ACCEPT, **dict(headers)}.items())
        self.interval_s = interval_s
        self.log = log
        self.note = note
        self.available: bool | None = None  # unknown until the first scrape
        self.scrapes = 0
        self.failures = 0
        self.first_failure = ""
        self._point: tuple[str, str] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start_point(self, label: str, point: str) -> None:
        if self.available is False:
            return
        self._point = (label, point)
        self.scrape("start")
        if not self.available:
            return
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._ticks, args=(self._stop,), name="specreplay-metrics", daemon=True)
        self._thread.start()

    def end_point(self) -> None:
        self.stop()
        if self.available and self._point is not None:
            self.scrape("end")
        self._point = None
        self.parse()

    def stop(self) -> None:
        """Stops the tick scrapes (a run that failed: no closing scrape)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def parse(self) -> None:
        """Parses the pages the point took (it is over: nothing is paced
        now); a page that is not Prometheus text counts as a failed scrape."""
        for reason in self.log.parse_pending():
            self._failed(reason)

    def close(self) -> None:
        self.end_point()
        if self.failures:
            # The first page only had a look before the run (it said the target
            # has metrics): its parse, after the point, may still fail.
            rest = "the server figures use the others" if self.failures < self.scrapes else "the run has no server figures"
            self.note(f"{self.failures} of {self.scrapes} scrapes of {self.shown} failed (first: {self.first_failure}); {rest}")

    def _ticks(self, stop: threading.Event) -> None:
        _yield_to_the_engine()
        # On a fixed grid from the point's start, so the samples stay evenly
        # spaced; a scrape slower than the interval skips the ticks it missed.
        t0 = time.monotonic()
        k = 1
        while not stop.wait(max(0.0, t0 + k * self.interval_s - time.monotonic())):
            self.scrape("tick")
            k = max(k + 1, math.floor((time.monotonic() - t0) / self.interval_s) + 1)

    def scrape(self, kind: str) -> None:
        """One GET of the page, kept in the log as it came (the run's first
        page looked at once: it says whether the target has metrics)."""
        assert self._point is not None
        label, point = self._point
        self.scrapes += 1
        try:
            got = _core.fetch("GET", self.url, self.headers, timeout_s=TIMEOUT_S)
        except (OSError, ConfigError) as e:  # refused, reset, timed out; a URL no request can carry
            self._failed(str(e))
            return
        if got.status >= 300:
            self._failed(f"HTTP {got.status} {got.reason}".rstrip())
            return
        # The server rendered the page between our send and its headers:
        # the midpoint is the best single instant, right to within rtt / 2.
        page = Page((got.sent_us + got.headers_us) // 2, got.headers_us - got.sent_us, label, point, kind, got.content_type, got.body)
        try:
            if self.available is None:
                check_looks_like_metrics(got.body)
            self.log.add(page)
        except ValueError as e:
            self._failed(f"not a Prometheus metrics page ({e})")
            return
        except OSError as e:  # the page could not be kept (the disk)
            self._failed(str(e))
            return
        if self.available is None:
            self.available = True

    def _failed(self, reason: str) -> None:
        if self.available is None:
            self.available = False
            self.note(
                f"no server metrics: GET {self.shown}: {reason}. The run goes on without them "
                "(--metrics-url URL points elsewhere, --no-metrics skips the attempt)"
            )
            return
        self.failures += 1
        if not self.first_failure:
            self.first_failure = reason
