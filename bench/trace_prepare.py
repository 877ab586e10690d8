"""What replay does with a trace besides sending it, step by step, and how
fast it can feed the engine:

- scan: the validating pass (`trace_index.scan_trace`), before the first request;
- rows: building every request as the feeder does (`feed.Feeder`): Python
  shapes each body, leaving out the prompt text of a record with
  `prompt_blocks`;
- feed: handing the rows to a running engine (`EngineRun.feed`), which
  synthesizes those prompts into the bodies (Rust, GIL released);
- old path: for comparison, in the same run, the previous way: each record
  read, the prompt synthesized into a Python string and the whole body
  serialized by `json.dumps` (`shaping.shape_body`).

The engine point fed here is cancelled before it sends anything: it
converts what it is fed and drops it. Prints one JSON line; asserts nothing.

    .venv/bin/python bench/trace_prepare.py mc.jsonl
    /usr/bin/time -v .venv/bin/python bench/trace_prepare.py mc.jsonl   # the whole process, from outside
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from typing import Any

from specreplay import _core
from bench_util import write_result
from specreplay.settings.config import ReplayConfig
from specreplay.run.feed import Feeder
from specreplay.trace.shaping import request_batch, shape_body
from specreplay.trace.records import iter_trace
from specreplay.trace.index import scan_trace

DEAD_URL = "http://127.0.0.1:9/v1"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    parser.add_argument("--max-tokens", type=int, default=None)
    args = parser.parse_args()
    config = ReplayConfig(trace=args.trace, max_tokens=args.max_tokens, rate=[1e-6], arrival="constant")

    t0 = time.perf_counter()
    index = scan_trace(args.trace)
    t1 = time.perf_counter()

    # Streamed as replay does it: a batch built, converted and fed, then
    # dropped. The point is cancelled at once, so the engine converts each
    # batch (synthesizing its prompts) and keeps nothing: what is measured is
    # the work per request, not the memory of holding a whole trace.
    spec: Any = {"load": {"mode": "rate", "rate": 1e-6, "arrival": "constant"}, "timeout_s": 5}
    feeder = Feeder(index, config, DEAD_URL, "m")
    run = None
    rows_s = arrow_s = feed_s = 0.0
    while True:
        a = time.perf_counter()
        rows, _lap_end, end = feeder._collect()
        b = time.perf_counter()
        batch = request_batch(rows) if rows else None
        c = time.perf_counter()
        if batch is not None:
            if run is None:
                run = _core.start_point(spec, batch, feed=True)
                run.cancel()
            else:
                run.feed(batch)
        d = time.perf_counter()
        rows_s, arrow_s, feed_s = rows_s + b - a, arrow_s + c - b, feed_s + d - c
        if end:
            break
    assert run is not None
    while run.next_batch(4096, 0.25) is not None:
        pass
    t1_end = time.perf_counter()

    t6 = time.perf_counter()
    text_bytes = 0
    for rec in iter_trace(args.trace):
        text_bytes += len(json.dumps(shape_body(rec, config, "m"), ensure_ascii=False).encode())
    t7 = time.perf_counter()
    per = 1e6 / index.records
    new_us = (rows_s + arrow_s + feed_s) * per
    figures = {
        "trace": args.trace,
        "requests": index.records,
        "scan_s": round(t1 - t0, 3),
        # Read, parse and shape (no prompt text), to Arrow, fed (text synthesized in Rust).
        "rows_us_per_request": round(rows_s * per, 1),
        "arrow_us_per_request": round(arrow_s * per, 1),
        "feed_us_per_request": round(feed_s * per, 1),
        "new_path_us_per_request": round(new_us, 1),
        "feed_rate_per_s": round(1e6 / new_us),
        # Read, parse, shape with the prompt text in Python, json.dumps, encode.
        "old_path_us_per_request": round((t7 - t6) * per, 1),
        "body_bytes": text_bytes,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    print(json.dumps(figures))
    print(f"wrote {write_result('trace-prepare', figures)}")

if __name__ == "__main__":
    main()
