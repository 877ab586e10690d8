"""The baseline: a streaming client written the way common Python benchmark
clients are (vLLM's `benchmark_serving` / `backend_request_func`).

- one asyncio event loop (the default one, not uvloop) and one
  `aiohttp.ClientSession`, whose connector has no connection limit
  (aiohttp's default of 100 would cap the concurrency);
- the request body is passed as `json=` (aiohttp serialises it per request);
- the body is iterated line by line (`async for line in response.content`),
  each line stripped, `data: ` removed, `[DONE]` skipped, then
  `time.perf_counter()` is read and the line parsed with `json.loads`,
  exactly as vLLM does;
- perf_counter seconds are turned into the engine's clock (µs since the
  epoch, anchored monotonic) by one offset measured once against
  `specreplay._core.now_us()` at start (both read CLOCK_MONOTONIC on Linux).

Open loop sends at absolute deadlines (`start + i / rate`, slept with
`asyncio.sleep`). vLLM sleeps a relative interval after each send, which adds
the lags up into drift; the absolute form is the kinder baseline.

Used by `client_bench.py`; it records, per text-carrying chunk, the client
time and the simulator's `sim_sent_us` read from the chunk's JSON.
"""

from __future__ import annotations

import asyncio
import json
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

import bench_util

# vLLM's AIOHTTP_TIMEOUT is 6 hours; a bench is bounded tighter.
TIMEOUT = aiohttp.ClientTimeout(total=180)


def clock_offset_us() -> float:
    """`now_us() − perf_counter() µs`."""
    return bench_util.clock_offset_us(lambda: time.perf_counter() * 1e6)


@dataclass
class Results:
    """Flat per-chunk and per-request figures (perf_counter seconds until
    `to_us` converts them)."""

    chunk_client: array = field(default_factory=lambda: array("d"))
    chunk_server_us: array = field(default_factory=lambda: array("q"))
    chunk_request: array = field(default_factory=lambda: array("q"))
    scheduled: array = field(default_factory=lambda: array("d"))
    sent: array = field(default_factory=lambda: array("d"))
    ok: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    in_flight: int = 0
    streaming: int = 0


async def stream_chat(
    session: aiohttp.ClientSession,
    url: str,
    payload: dict[str, Any],
    index: int,
    scheduled: float,
    out: Results,
) -> None:
    """One streaming chat request, read the way vLLM's client reads it."""
    out.in_flight += 1
    sent = time.perf_counter()
    try:
        async with session.post(url=url, json=payload) as response:
            if response.status != 200:
                out.failed += 1
                out.errors.append(f"HTTP {response.status}")
                return
            out.streaming += 1
            try:
                async for chunk_bytes in response.content:
                    chunk_bytes = chunk_bytes.strip()
                    if not chunk_bytes:
                        continue
                    chunk = chunk_bytes.decode("utf-8").removeprefix("data: ")
                    if chunk != "[DONE]":
                        timestamp = time.perf_counter()
                        data = json.loads(chunk)
                        if choices := data.get("choices"):
                            delta = choices[0]["delta"]
                            text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
                            if text:
                                out.chunk_client.append(timestamp)
                                out.chunk_server_us.append(data.get("sim_sent_us", -1))
                                out.chunk_request.append(index)
            finally:
                out.streaming -= 1
        out.ok += 1
        out.scheduled.append(scheduled)
        out.sent.append(sent)
    except Exception as e:  # a bench keeps going and counts failures
        out.failed += 1
        out.errors.append(repr(e)[:200])
    finally:
        out.in_flight -= 1


def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(timeout=TIMEOUT, connector=aiohttp.TCPConnector(limit=0))


async def closed_loop(
    url: str,
    payloads: list[dict[str, Any]],
    concurrency: int,
    num_requests: int,
    duration_s: float,
    out: Results,
) -> None:
    """`concurrency` workers, each sending its next request when one ends,
    until `num_requests` are sent or `duration_s` has passed."""
    next_index = 0
    deadline = time.perf_counter() + duration_s
    async with _session() as session:

        async def worker() -> None:
            nonlocal next_index
            while next_index < num_requests and time.perf_counter() < deadline:
                i = next_index
                next_index += 1
                await stream_chat(session, url, payloads[i % len(payloads)], i, time.perf_counter(), out)

        await asyncio.gather(*(worker() for _ in range(concurrency)))


async def open_loop(
    url: str,
    payloads: list[dict[str, Any]],
    rate: float,
    num_requests: int,
    out: Results,
    lead_s: float = 0.02,
) -> None:
    """Constant arrivals at `rate`/s: request i is due at start + i / rate."""
    async with _session() as session:
        start = time.perf_counter() + lead_s
        tasks = []
        for i in range(num_requests):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(stream_chat(session, url, payloads[i % len(payloads)], i, due, out)))
        await asyncio.gather(*tasks)


def run(coro_factory: Callable[[], Any]) -> None:
    asyncio.run(coro_factory())
