"""A large, realistic results file for timing the analysis (`specreplay
compare`, `specreplay report`), built reproducibly without a server.

    .venv/bin/python bench/analysis_file.py /tmp/analysis-100k.arrow [--rows 100000] [--seed 0]

What it holds: two runs in one file, as a config file's A/B writes them
(`baseline`, and `ngram`: speculative decoding that accepts few drafts, so
its chunks carry 1–5 tokens and each step takes 1.6 times as long), four closed-loop
sweep points each (`concurrency=8 16 32 64`), the rows split evenly. A point
replays a 1,000-record trace in a loop (trace ids `r17#3`), so both runs
replayed the same records and compare pairs them. Per request: 10–150
reasoning and 10–80 content tokens (so tens to a couple of hundred chunks),
TTFT growing with the prompt and the load, TPOT growing with the load, the
first 8 requests of a point marked warmup, and about 0.3% failed with an
HTTP 503. Every column of the results schema is filled as the engine fills
it (token_source `continuous_usage`, exact per-chunk counts), and the
metadata is what `specreplay replay --config` records.

The figures it leads to are in docs/benchmarks.md ("Analysis of a large
results file"). The same arguments give the same bytes, apart from nothing:
the file holds no time of its own making.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from specreplay.results.schema import CHANNELS, COLUMNS, results_schema

LABELS = ("baseline", "ngram")
CONCURRENCY = (8, 16, 32, 64)
TRACE_RECORDS = 1000
WARMUP = 8
T0 = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z in µs
FAILED_SHARE = 0.003
# ngram: accepted drafts per step (1 + geometric, at most 4), each step 1.6 times as long.
SPEC_ACCEPTANCE = 0.3
SPEC_DRAFTS = 4
SPEC_STEP_COST = 1.6


def _points() -> list[dict[str, object]]:
    return [{"point": f"concurrency={c}", "mode": "concurrency", "value": c} for c in CONCURRENCY]


def _config(label: str, sha: str, rows_per_point: int) -> dict[str, object]:
    return {
        "label": label,
        "trace": "traces/analysis-bench.jsonl",
        "trace_sha256": sha,
        "concurrency": list(CONCURRENCY),
        "num_requests": rows_per_point,
        "warmup": WARMUP,
        "max_tokens": 4096,
        "seed": 0,
        "points": _points(),
        "target": "http://127.0.0.1:8000/v1",
        "served_model": "bench-model",
    }


def _chunks(rng: np.random.Generator, tokens: np.ndarray, spec: bool) -> np.ndarray:
    """Tokens per chunk for a request of `tokens` tokens: 1 each, or 1 + the
    accepted drafts of each speculative step (the last chunk trimmed)."""
    if not spec:
        return np.ones(int(tokens), dtype="int32")
    steps = 1 + np.minimum(rng.geometric(1 - SPEC_ACCEPTANCE, size=int(tokens)) - 1, SPEC_DRAFTS)
    total = np.cumsum(steps)
    n = int(np.searchsorted(total, tokens)) + 1
    out = steps[:n].astype("int32")
    out[-1] -= int(total[n - 1] - tokens)
    return out


def _point_rows(rng: np.random.Generator, label: str, point_index: int, concurrency: int, n: int, start_us: int) -> dict[str, object]:
    spec = label == "ngram"
    record = (np.arange(n) % TRACE_RECORDS).astype("int64")
    loop = np.arange(n) // TRACE_RECORDS
    trace_id = [f"r{r}#{k}" if k else f"r{r}" for r, k in zip(record, loop)]
    prompt = (50 + (record * 7919) % 1950).astype("int64")  # a fixed prompt length per record
    reasoning = rng.integers(10, 151, size=n)
    content = rng.integers(10, 81, size=n)
    failed = rng.random(n) < FAILED_SHARE
    load = 1 + concurrency / 64
    tpot_us = 8_000 * load * (SPEC_STEP_COST if spec else 1.0)
    ttft_us = (20_000 + 30 * prompt) * load

    ts_lists, token_lists, channel_lists = [], [], []
    sent = np.empty(n, dtype="int64")
    # Closed loop: `concurrency` requests in flight; the next one starts when one ends.
    free_at = np.full(concurrency, start_us, dtype="int64")
    for i in range(n):
        slot = int(np.argmin(free_at))
        sent[i] = int(free_at[slot])
        if failed[i]:
            ts_lists.append(None)
            token_lists.append(None)
            channel_lists.append(None)
            free_at[slot] = sent[i] + 2_000
            continue
        per_chunk = _chunks(rng, reasoning[i] + content[i], spec)
        steps = len(per_chunk)
        gaps = tpot_us * (1 + 0.1 * rng.standard_normal(steps)).clip(0.5)
        offsets = (ttft_us[i] * (1 + 0.05 * rng.standard_normal())).clip(1_000) + np.concatenate([[0.0], np.cumsum(gaps[1:])])
        ts = sent[i] + offsets.astype("int64")
        # Channel by token position: reasoning first, then content.
        first_token_of_chunk = np.concatenate([[0], np.cumsum(per_chunk[:-1])])
        channel = np.where(first_token_of_chunk < reasoning[i], CHANNELS.index("reasoning"), CHANNELS.index("content")).astype("int8")
        ts_lists.append(ts)
        token_lists.append(per_chunk)
        channel_lists.append(channel)
        free_at[slot] = int(ts[-1]) + 1_000
    ok = ~failed
    first_ts = np.array([t[0] if t is not None else -1 for t in ts_lists], dtype="int64")
    last_ts = np.array([t[-1] if t is not None else -1 for t in ts_lists], dtype="int64")
    first_content = np.array(
        [t[np.argmax(c == CHANNELS.index("content"))] if t is not None else -1 for t, c in zip(ts_lists, channel_lists)], dtype="int64"
    )
    first_reasoning = first_ts
    end = np.where(ok, last_ts + 1_000, sent + 2_000)

    def nullable(values: np.ndarray) -> pa.Array:
        return pa.array(values, mask=~ok)

    def lists(items: list[np.ndarray | None], value_type: pa.DataType) -> pa.Array:
        return pa.array([x.tolist() if x is not None else None for x in items], type=pa.list_(value_type))

    return {
        "run_id": pa.array(["bench000000"] * n),
        "label": pa.array([label] * n),
        "point": pa.array([f"concurrency={concurrency}"] * n),
        "point_index": pa.array(np.full(n, point_index, dtype="int32")),
        "request_index": pa.array(np.arange(n, dtype="int64")),
        "trace_id": pa.array(trace_id),
        "api": pa.array(["chat"] * n),
        "warmup": pa.array(np.arange(n) < WARMUP),
        "scheduled_us": pa.array(sent),
        "sent_us": pa.array(sent),
        "first_byte_us": pa.array(np.where(ok, first_ts - 500, sent + 1_500)),
        "first_token_us": nullable(first_ts),
        "first_reasoning_us": nullable(first_reasoning),
        "first_content_us": nullable(first_content),
        "last_token_us": nullable(last_ts),
        "end_us": pa.array(end),
        "http_status": pa.array(np.where(ok, 200, 503).astype("int32")),
        "error_kind": pa.array([None if o else "http" for o in ok], type=pa.string()),
        "error_message": pa.array([None if o else "HTTP 503: server overloaded" for o in ok], type=pa.string()),
        "finish_reason": pa.array(["stop" if o else None for o in ok], type=pa.string()),
        "prompt_tokens": pa.array(prompt),
        "cached_tokens": pa.array(np.zeros(n, dtype="int64")),
        "reasoning_tokens": nullable(reasoning.astype("int64")),
        "content_tokens": nullable(content.astype("int64")),
        "output_tokens": nullable((reasoning + content).astype("int64")),
        "token_source": pa.array(["continuous_usage" if o else None for o in ok], type=pa.string()),
        "chunk_count": nullable(np.array([len(t) if t is not None else 0 for t in token_lists], dtype="int32")),
        "chunk_ts_us": lists(ts_lists, pa.int64()),
        "chunk_tokens": lists(token_lists, pa.int32()),
        "chunk_channel": lists(channel_lists, pa.int8()),
        "server_predicted_n": pa.nulls(n, pa.int64()),
        "server_predicted_ms": pa.nulls(n, pa.float64()),
        "attempts": pa.array(np.ones(n, dtype="int32")),
    }


def build(path: Path, rows: int, seed: int) -> None:
    per_point = rows // (len(LABELS) * len(CONCURRENCY))
    sha = hashlib.sha256(f"analysis-bench-trace-{TRACE_RECORDS}".encode()).hexdigest()
    configs = [_config(label, sha, per_point) for label in LABELS]
    metadata = {
        "specreplay.version": "bench",
        "specreplay.run_id": "bench000000",
        "specreplay.config": json.dumps(configs[0]),
        "specreplay.runs": json.dumps(configs),
        "specreplay.target": "http://127.0.0.1:8000/v1",
        "specreplay.model": "bench-model",
        "specreplay.started_at": "2026-01-01T00:00:00+00:00",
        "specreplay.host": "bench",
        "specreplay.interrupted": "false",
    }
    schema = results_schema(metadata)
    rng = np.random.default_rng(seed)
    start = T0
    with pa.OSFile(str(path), "wb") as sink, ipc.new_file(sink, schema) as writer:
        index = 0
        for label in LABELS:
            for concurrency in CONCURRENCY:
                columns = _point_rows(rng, label, index, concurrency, per_point, start)
                n = len(columns["end_us"])
                # What this bench does not model (one worker, single-turn text requests, no kernel
                # stamps or connections, no tool calls or media) is null, as in such a run's file.
                batch = pa.RecordBatch.from_arrays([columns.get(c.name, pa.nulls(n, c.type)) for c in COLUMNS], schema=schema)
                writer.write_batch(batch)
                start = int(pc.max(batch.column("end_us")).as_py()) + 1_000_000
                index += 1  # point_index counts on across runs, as in a config file's A/B


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", type=Path)
    parser.add_argument("--rows", type=int, default=100_000, help="requests in the file, split evenly over 2 runs × 4 points")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    build(args.path, args.rows, args.seed)
    table = ipc.open_file(str(args.path)).read_all()
    chunks = sum(pc.list_value_length(table.column("chunk_ts_us")).fill_null(0).to_pylist())
    print(f"wrote {args.path}: {table.num_rows:,} requests, {chunks:,} chunks, {args.path.stat().st_size / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
