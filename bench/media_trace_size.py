"""What a trace with images weighs: 1,000 requests with one image each,
written by `specreplay synth` inline (every body carrying its image as a
data URI) and stored once (`TRACE.media/<sha256>.<ext>`, bodies holding a
reference), for every image its own and for one image shared by all; and
what building the requests costs either way (the feeder's `request_row`,
µs per request: the stored image is read and encoded once, then put back
into each body). Prints one JSON line; asserts nothing.

    .venv/bin/python bench/media_trace_size.py
    .venv/bin/python bench/media_trace_size.py --size 1024x768 --format jpeg
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_util import write_result
from specreplay.settings.config import ReplayConfig
from specreplay.trace.media import MediaStore, media_dir
from specreplay.trace.shaping import request_row
from specreplay.trace.synth import SynthConfig, write_synth
from specreplay.trace.records import load_trace


def _size(path: Path) -> int:
    total = path.stat().st_size
    media = media_dir(path)
    if media.is_dir():
        total += sum(p.stat().st_size for p in media.iterdir())
    return total


def _rows_us(path: Path) -> float:
    records = load_trace(path).records
    store = MediaStore(media_dir(path))
    config = ReplayConfig(trace=str(path))
    t0 = time.perf_counter()
    for rec in records:
        request_row(rec, config, "http://127.0.0.1:1/v1", None, media=store)
    return (time.perf_counter() - t0) / len(records) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--size", default="512x512")
    ap.add_argument("--format", default="png", choices=["png", "jpeg"])
    args = ap.parse_args()
    out: dict[str, Any] = {"requests": args.requests, "image": f"{args.size} {args.format}"}
    with tempfile.TemporaryDirectory() as tmp:
        for pool, what in ((0, "distinct"), (1, "shared")):
            config = SynthConfig(num_requests=args.requests, input_len="64", output_len="16", images=1, image_size=args.size, image_format=args.format, image_pool=pool)
            for inline in (True, False):
                path = Path(tmp) / f"{what}-{'inline' if inline else 'stored'}.jsonl"
                write_synth(config, path, inline_media=inline)
                key = f"{what}_{'inline' if inline else 'stored'}"
                out[f"{key}_bytes"] = _size(path)
                out[f"{key}_jsonl_bytes"] = path.stat().st_size
                out[f"{key}_rows_us"] = round(_rows_us(path), 1)
    print(json.dumps(out))
    print(f"wrote {write_result('media-trace-size', out)}")


if __name__ == "__main__":
    main()
