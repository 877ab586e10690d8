"""What one metrics scrape costs in CPU while a point runs, now that the page
is parsed after the point, against parsing it in the tick as before.

    .venv/bin/python bench/scrape_tick_cpu.py              # ~10 s
    .venv/bin/python bench/scrape_tick_cpu.py --ticks 500

A real vLLM page (474 samples, 57 KB: tests/vectors/) is served by a small
HTTP server in another process (its CPU is not counted). In this process a
`Scraper` takes ticks, the two kinds interleaved so the machine's other load
falls on both alike, each timed with the scraping thread's own CPU clock
(`time.thread_time_ns`):

- `fetch`: today's tick, the GET and the raw page appended to the partial
  stream (`SampleLog.add`);
- `fetch+parse`: the same tick with the page parsed at once, what every tick
  did before (the run's first scrape did it too, before any point, until it
  only looked at the page: `server_samples.check_looks_like_metrics`);
- `parse later`: parsing one kept page between points (`parse_pending`).

Prints median / p90 / max per kind; asserts nothing. Only 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_util import write_result  # noqa: E402
from scrape_send_lag import PAGE, PAGE_SERVER, start  # noqa: E402

from specreplay.results.server_samples import SampleLog  # noqa: E402
from specreplay.servermetrics.scrape import Scraper  # noqa: E402


def cpu_ms(f: Callable[[], object]) -> float:
    t = time.thread_time_ns()
    f()
    return (time.thread_time_ns() - t) / 1e6


def spread(values: list[float]) -> str:
    v = sorted(values)
    return f"median {statistics.median(v):6.2f} ms   p90 {v[int(0.9 * (len(v) - 1))]:6.2f} ms   max {v[-1]:6.2f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ticks", type=int, default=200, help="ticks of each kind")
    args = ap.parse_args()
    server, port = start([sys.executable, "-c", PAGE_SERVER, str(PAGE)])
    costs: dict[str, list[float]] = {"fetch": [], "fetch+parse": [], "parse later": []}
    try:
        with tempfile.TemporaryDirectory(prefix="specreplay-tick-bench-") as tmp:
            log = SampleLog(Path(tmp) / "run.arrow")
            scraper = Scraper(f"http://127.0.0.1:{port}/metrics", [], 1.0, log, print)
            scraper._point = ("bench", "rate=1")  # a point is running: the ticks' own state, no tick thread
            scraper.scrape("start")  # the first page (looked at), the parser imported
            scraper.parse()
            for _ in range(args.ticks):
                costs["fetch"].append(cpu_ms(lambda: scraper.scrape("tick")))
                costs["parse later"].append(cpu_ms(scraper.parse))
                costs["fetch+parse"].append(cpu_ms(lambda: (scraper.scrape("tick"), scraper.parse())))  # as every tick did before
            assert scraper.failures == 0 and len(log) == (2 * args.ticks + 1) * 474, (scraper.failures, len(log))
            log.remove()
    finally:
        server.kill()
        server.wait(10)
    print(f"thread CPU per scrape of a 474-sample vLLM page, {args.ticks} of each, load {os.getloadavg()[0]:.1f}:")
    for kind, values in costs.items():
        print(f"  {kind:12} {spread(values)}")
    ratio = statistics.median(costs["fetch+parse"]) / statistics.median(costs["fetch"])
    print(f"  a tick now costs 1/{ratio:.1f} of what it did (medians)")
    figures = {kind: {"median_ms": statistics.median(v), "p90_ms": sorted(v)[int(0.9 * (len(v) - 1))], "max_ms": max(v)} for kind, v in costs.items()}
    print(f"wrote {write_result('scrape-tick-cpu', {'ticks': args.ticks, 'page_samples': 474, 'cpu': figures})}")


if __name__ == "__main__":
    main()
