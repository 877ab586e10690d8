"""The engine's opt-in `server_stamps` run setting (used by
bench/client_bench.py): each chunk's `sim_sent_us` comes back in an extra
`chunk_server_ts_us` column, parallel to `chunk_ts_us`; without the setting the
batches have exactly the engine columns."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from specreplay import _core
from specreplay._core import SimServer
from specreplay.results.schema import engine_schema, request_schema

FAST = {
    "ttft_ms": 5,
    "prefill_us_per_token": 0,
    "tpot_ms": 2,
    "reasoning_tokens": [5, 8],
    "content_tokens": [3, 5],
    "send_timestamps": True,
}


def run_point(url: str, **extra: Any) -> pa.Table:
    body = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True, "stream_options": {"include_usage": True}}
    ).encode()
    spec: Any = {"load": {"mode": "concurrency", "concurrency": 2}, "num_requests": 4, "timeout_s": 30, **extra}
    request = {"trace_id": "a", "api": "chat", "url": url + "/chat/completions", "body": body, "arrival_s": 0.0}
    run = _core.start_point(spec, pa.RecordBatch.from_pylist([request], schema=request_schema()))
    batches = []
    while (batch := run.next_batch(64, 0.25)) is not None:
        if batch.num_rows:
            batches.append(pa.record_batch(batch))
    return pa.Table.from_batches(batches)


def test_server_stamps_are_kept_per_chunk() -> None:
    with SimServer(port=0, config=FAST) as srv:
        table = run_point(srv.url, server_stamps=True)
    assert table.schema.names == engine_schema().names + ["chunk_server_ts_us"]
    assert table.num_rows == 4
    for client, server in zip(table["chunk_ts_us"].to_pylist(), table["chunk_server_ts_us"].to_pylist()):
        assert len(client) == len(server) > 0
        # Same clock in one process: a chunk is read after it was sent.
        assert all(s is not None and s <= c for c, s in zip(client, server))


def test_without_the_setting_the_batches_have_the_engine_columns() -> None:
    with SimServer(port=0, config=FAST) as srv:
        table = run_point(srv.url)
    assert table.schema.names == engine_schema().names
