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

The engine point fed here sends nothing but its first request (to a closed
port, at a rate of one request per million seconds). Prints one JSON line;
asserts nothing.

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
from specreplay.config import ReplayConfig
from specreplay.feed import Feeder
from specreplay.shaping import request_batch, shape_body
from specreplay.trace import iter_trace
from specreplay.trace_index import scan_trace

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

    feeder = Feeder(index, config, DEAD_URL, "m")
    batches: list[list[dict[str, Any]]] = []
    while True:
        rows, _lap_end, end = feeder._collect()
        if rows:
            batches.append(rows)
        if end:
            break
    t2 = time.perf_counter()
    arrow = [request_batch(rows) for rows in batches]
    t3 = time.perf_counter()

    spec: Any = {"load": {"mode": "rate", "rate": 1e-6, "arrival": "constant"}, "timeout_s": 5}
    run = _core.start_point(spec, arrow[0], feed=True)
    t4 = time.perf_counter()
    for batch in arrow[1:]:
        run.feed(batch)
    t5 = time.perf_counter()
    run.cancel()
    while run.next_batch(4096, 0.25) is not None:
        pass
    del arrow, batches

    t6 = time.perf_counter()
    text_bytes = 0
    for rec in iter_trace(args.trace):
        text_bytes += len(json.dumps(shape_body(rec, config, "m"), ensure_ascii=False).encode())
    t7 = time.perf_counter()
    per = 1e6 / index.records
    new_us = ((t3 - t1) + (t5 - t4)) * per
    print(json.dumps({
        "trace": args.trace,
        "requests": index.records,
        "scan_s": round(t1 - t0, 3),
        # Read, parse and shape (no prompt text), to Arrow, fed (text synthesized in Rust).
        "rows_us_per_request": round((t2 - t1) * per, 1),
        "arrow_us_per_request": round((t3 - t2) * per, 1),
        "feed_us_per_request": round((t5 - t4) * per, 1),
        "new_path_us_per_request": round(new_us, 1),
        "feed_rate_per_s": round(1e6 / new_us),
        # Read, parse, shape with the prompt text in Python, json.dumps, encode.
        "old_path_us_per_request": round((t7 - t6) * per, 1),
        "body_bytes": text_bytes,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }))

if __name__ == "__main__":
    main()
