"""What replay does with a trace before the first request goes out: read and
validate it (`trace.load_trace`), then build every request body
(`shaping.prepare`). Prints the time of each step, the bytes of body built and
the process's peak memory (ru_maxrss), as one JSON line. Asserts nothing.

    .venv/bin/python bench/trace_prepare.py mc.jsonl
    /usr/bin/time -v .venv/bin/python bench/trace_prepare.py mc.jsonl   # the whole process, from outside

Sends nothing: the URL is only put into each request.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

from specreplay.config import ReplayConfig
from specreplay.shaping import prepare
from specreplay.trace import load_trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    parser.add_argument("--max-tokens", type=int, default=None)
    args = parser.parse_args()
    t0 = time.perf_counter()
    trace = load_trace(args.trace)
    t1 = time.perf_counter()
    config = ReplayConfig(trace=args.trace, max_tokens=args.max_tokens)
    requests = prepare(trace.records, config, "http://127.0.0.1:9/v1", "m")
    t2 = time.perf_counter()
    print(json.dumps({
        "trace": args.trace,
        "requests": len(requests),
        "body_bytes": sum(len(r.body) for r in requests),
        "load_s": round(t1 - t0, 3),
        "prepare_s": round(t2 - t1, 3),
        "prepare_us_per_request": round((t2 - t1) / len(requests) * 1e6, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }))


if __name__ == "__main__":
    main()
