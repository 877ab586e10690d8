"""What a run's scraped server metrics weigh, on a worst case: vLLM's page
(474 samples, tests/vectors/) scraped every second for an hour, every value
changing at every scrape (docs/results.md, "Where they are kept").

    .venv/bin/python bench/metrics_storage.py                 # an hour of scrapes, ~2 min
    .venv/bin/python bench/metrics_storage.py --scrapes 600

Each synthetic scrape is the page with every sample's value moved, kept as
a run keeps it (`SampleLog.add`: the raw page appended to the
`.metrics.partial` stream), then parsed and folded as the run's end does
(`encode`: the value of the results file's `specreplay.server_metrics`
metadata key) and written into a results file beside one row. Prints the
partial stream's size, the folded value's size, the time to encode it and to
decode it into pandas, and the results file's size; asserts nothing.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_util import write_result  # noqa: E402
from scrape_send_lag import PAGE  # noqa: E402

from specreplay.results.server_samples import METADATA_KEY, Page, SampleLog, decode, encode  # noqa: E402

#: A sample line's value: the last field of a line that is not a comment.
VALUE = re.compile(rb"^([^#\s][^\n]*\s)(\S+)$", re.MULTILINE)


def page_at(template: bytes, i: int) -> bytes:
    """The page at scrape `i`: every finite value moved by `i` times a random
    step (counters grow, gauges change; random, so nothing compresses away)."""
    draw = random.Random(i).random

    def moved(m: re.Match[bytes]) -> bytes:
        if m.group(2) in (b"NaN", b"+Inf", b"-Inf"):
            return m.group(0)
        return m.group(1) + repr(float(m.group(2)) + i * (1 + draw())).encode()

    return VALUE.sub(moved, template)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scrapes", type=int, default=3600, help="scrapes, one a second (default: an hour)")
    args = ap.parse_args()
    template = PAGE.read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.arrow"
        log = SampleLog(out)
        t0 = 1_800_000_000_000_000
        for i in range(args.scrapes):
            log.add(Page(ts_us=t0 + i * 1_000_000, rtt_us=900, label="p", point="rate=8", scrape="http://127.0.0.1/metrics",
                         content_type="text/plain; version=0.0.4", body=page_at(template, i)))
        log.close()
        partial_mb = log.partial.stat().st_size / 1e6
        t = time.perf_counter()
        table = log.table()
        parse_s = time.perf_counter() - t
        t = time.perf_counter()
        value = encode(table)
        encode_s = time.perf_counter() - t
        t = time.perf_counter()
        df = decode(value).to_pandas()
        decode_s = time.perf_counter() - t
        rows = pa.table({"request_index": [0]}).replace_schema_metadata({METADATA_KEY: value})
        with ipc.new_file(str(out), rows.schema) as writer:
            writer.write_table(rows)
        file_mb = out.stat().st_size / 1e6
    figures = {
        "scrapes": args.scrapes,
        "samples": len(df),
        "page_kb": round(len(template) / 1e3, 1),
        "partial_stream_mb": round(partial_mb, 2),
        "partial_kb_per_scrape": round(partial_mb * 1e3 / args.scrapes, 2),
        "parse_s": round(parse_s, 1),
        "folded_value_mb": round(len(value) / 1e6, 2),
        "encode_s": round(encode_s, 2),
        "decode_to_pandas_s": round(decode_s, 2),
        "results_file_mb": round(file_mb, 2),
    }
    for k, v in figures.items():
        print(f"{k:>22}: {v}")
    print(write_result("metrics-storage", figures))


if __name__ == "__main__":
    main()
