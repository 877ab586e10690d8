"""One measurement of `client_bench.py`, in a fresh process: `worker(job)` runs
a simulator in its own process and one client against it, and returns the
raw figures. Clients:

- specreplay: the engine through the binding, drained in Arrow batches as
  `specreplay replay` drains it;
- reference: `reference_client.rs`, a Rust client of the same kind (tokio,
  hyper-util's pooled client, serde_json per event);
- floor: the same binary's raw mode, no HTTP library and no parsing: what
  reading these streams costs at all on this machine;
- baseline: `baseline_client.py`, asyncio + aiohttp as vLLM's script.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import time
from typing import Any

from bench_util import (
    Sim, cpu_figures, mem_result, payloads, pct, process_cpu, rss_kib, run_reference, thread_cpu,
)

# Closed-loop points: concurrency -> (tpot_ms, requests after the first wave).
# ~75 text chunks per request; tpot keeps the total chunk rate (C / tpot)
# within what the simulator holds on one core (docs/simulator.md).
ERROR_POINTS: dict[int, tuple[float, int]] = {
    1: (5.0, 40),
    64: (10.0, 400),
    256: (20.0, 768),
    1024: (50.0, 2048),
}
SHORT_STREAMS = {"ttft_ms": 20, "reasoning_tokens": [25, 50], "content_tokens": [25, 50]}
LAG_STREAMS = {"ttft_ms": 10, "tpot_ms": 10, "reasoning_tokens": [2, 5], "content_tokens": [2, 5]}
LAG_POINTS: dict[float, int] = {100.0: 2000, 1000.0: 10000}  # rate -> requests
LONG_STREAMS = {"ttft_ms": 100, "tpot_ms": 500, "reasoning_tokens": [30, 30], "content_tokens": [10, 10]}
# One wave of short answers, as in issue 15's connect storm.
WAVE_STREAMS = {"ttft_ms": 20, "tpot_ms": 10, "prefill_us_per_token": 0,
                "reasoning_tokens": [5, 10], "content_tokens": [5, 10]}
# The smallest answer: what a point costs besides its chunks.
TINY_STREAMS = {"ttft_ms": 1, "tpot_ms": 1, "prefill_us_per_token": 0,
                "reasoning_tokens": [1, 1], "content_tokens": [1, 1]}
POINT_DURATION_S = 60.0  # closed loop stops scheduling after this
MEM_SETTLE_S = 6.0  # after the N streams are started, before RSS is sampled
MEM_SAMPLE_S = 3.0
CLIENT_TIMEOUT_S = 200.0


# --------------------------------------------------------------------------
# specreplay


def engine_requests(url: str, bodies: list[dict[str, Any]]) -> Any:
    """The requests as the engine takes them: one batch with the columns of `schema.REQUEST_COLUMNS`."""
    import pyarrow as pa
    from specreplay.results.schema import request_schema

    rows = [{"trace_id": f"q{i}", "api": "chat", "url": url + "/chat/completions", "body": json.dumps(b).encode(),
             "arrival_s": 0.0} for i, b in enumerate(bodies)]
    return pa.RecordBatch.from_pylist(rows, schema=request_schema())


def engine_run(spec: dict[str, Any], requests: Any, on_poll: Any = None) -> Any:
    """One point, drained as `specreplay replay` drains it (replay.POLL_S)."""
    import pyarrow as pa
    from specreplay import _core

    run = _core.start_point(spec, requests)
    batches = []
    while True:
        batch = run.next_batch(4096, 0.25)
        if batch is None:
            break
        if batch.num_rows:
            batches.append(pa.record_batch(batch))
        if on_poll is not None:
            on_poll(run)
    return pa.Table.from_batches(batches) if batches else None


def engine_stream(sim: Sim, concurrency: int, requests_n: int, warmup: int) -> dict[str, Any]:
    import numpy as np
    import pyarrow.compute as pc

    spec = {
        "load": {"mode": "concurrency", "concurrency": concurrency},
        "num_requests": requests_n,
        "duration_s": POINT_DURATION_S,
        "timeout_s": 120,
        "warmup": warmup,
        "server_stamps": True,
    }
    reqs = engine_requests(sim.url, payloads())
    (user0, sys0), threads0, wall0 = process_cpu(), thread_cpu(), time.perf_counter()
    table = engine_run(spec, reqs)
    (user1, sys1), threads1, wall1 = process_cpu(), thread_cpu(), time.perf_counter()
    ok = table.filter(pc.is_null(table["error_kind"]))
    chunks_all = int(pc.sum(ok["chunk_count"]).as_py() or 0)
    steady = ok.filter(pc.invert(ok["warmup"]))

    def flat(t: Any, column: str) -> Any:
        return np.asarray(pc.list_flatten(t[column]).to_numpy(zero_copy_only=False), dtype=np.float64)

    def errors(t: Any, user_space: bool = False) -> Any:
        client = flat(t, "chunk_ts_us")
        if user_space:
            # The engine's own stamp: the kernel stamp plus the engine's delay
            # (a chunk without a kernel stamp already carries the engine's).
            client = client + np.nan_to_num(flat(t, "chunk_delay_us"))
        server = flat(t, "chunk_server_ts_us") + sim.correction_us
        keep = ~np.isnan(server)
        return client[keep] - server[keep]

    delays = flat(steady, "chunk_delay_us")
    per_thread = {k: threads1.get(k, 0.0) - threads0.get(k, 0.0) for k in threads1}
    return {
        "requests_ok": ok.num_rows, "requests_failed": table.num_rows - ok.num_rows,
        "errors": sorted(set(table.filter(pc.is_valid(table["error_kind"]))["error_message"].to_pylist()))[:5],
        "chunks": chunks_all, "wall_s": wall1 - wall0, "chunks_per_s": chunks_all / (wall1 - wall0),
        # chunk_ts_us is the kernel's receive stamp where there is one; the
        # engine's own stamp (what chunk_ts_us was before kernel stamps) for comparison.
        "error_us": pct(errors(steady)), "error_us_all": pct(errors(ok)),
        "user_error_us": pct(errors(steady, user_space=True)),
        "kernel_stamped": float(np.mean(~np.isnan(delays))) if len(delays) else None,
        "engine_delay_us": pct(delays[~np.isnan(delays)]) if len(delays) else None,
        **cpu_figures(user1 - user0, sys1 - sys0, chunks_all),
        "thread_cpu_s": {k: round(v, 3) for k, v in per_thread.items() if v > 0},
    }


def engine_lag(sim: Sim, rate: float, requests_n: int) -> dict[str, Any]:
    import pyarrow.compute as pc

    spec = {"load": {"mode": "rate", "rate": rate, "arrival": "constant"}, "num_requests": requests_n, "timeout_s": 60}
    table = engine_run(spec, engine_requests(sim.url, payloads()))
    ok = table.filter(pc.is_valid(table["sent_us"]))
    lag = pc.subtract(ok["sent_us"], ok["scheduled_us"]).to_numpy()
    sched = ok["scheduled_us"].to_numpy()
    return {
        "requests_sent": ok.num_rows,
        "requests_failed": int(pc.sum(pc.is_valid(table["error_kind"]).cast("int64")).as_py() or 0),
        "schedule_span_s": float(sched.max() - sched.min()) / 1e6,
        "lag_us": pct(lag),
    }


def engine_mem(sim: Sim, n: int) -> dict[str, Any]:
    # Warm up: runtime threads, the pool, pyarrow paths (short answers).
    engine_run({"load": {"mode": "concurrency", "concurrency": 4}, "num_requests": 8, "timeout_s": 60},
               engine_requests(sim.url, payloads(max_tokens=2)))
    gc.collect()
    rss0 = rss_kib()
    samples: list[int] = []
    in_flight: list[int] = []
    t0 = time.perf_counter()

    def on_poll(run: Any) -> None:
        elapsed = time.perf_counter() - t0
        if MEM_SETTLE_S <= elapsed < MEM_SETTLE_S + MEM_SAMPLE_S:
            samples.append(rss_kib())
            progress = run.progress()
            in_flight.append(progress.sent - progress.finished)
        elif elapsed >= MEM_SETTLE_S + MEM_SAMPLE_S:
            run.cancel()

    # No preconnect: the other clients start their N streams with their
    # connections, and at 4,096 streams preconnect's waves outlast the settle
    # time (no stream was in flight in the sampled window).
    engine_run({"load": {"mode": "concurrency", "concurrency": n}, "num_requests": n, "timeout_s": 120,
                "preconnect": False},
               engine_requests(sim.url, payloads()), on_poll)
    return mem_result(n, rss0, samples, in_flight)


def engine_wave(sim: Sim, n: int, preconnect: bool) -> dict[str, Any]:
    """One wave of n requests sent at once (closed loop, n requests): TTFT
    (first_token_us − sent_us, as docs/results.md) and connection set-up."""
    import numpy as np
    import pyarrow.compute as pc

    spec = {"load": {"mode": "concurrency", "concurrency": n}, "num_requests": n, "timeout_s": 60,
            "preconnect": preconnect}
    table = engine_run(spec, engine_requests(sim.url, payloads(max_tokens=64)))
    ok = table.filter(pc.is_null(table["error_kind"]))
    ttft = pc.subtract(ok["first_token_us"], ok["sent_us"]).to_numpy(zero_copy_only=False)
    connect = ok["connect_us"].drop_null().to_numpy(zero_copy_only=False)
    return {
        "requests_ok": ok.num_rows, "requests_failed": table.num_rows - ok.num_rows,
        "ttft_us": pct(np.asarray(ttft, dtype=np.float64)),
        "connected": int(connect.size), "connect_us": pct(np.asarray(connect, dtype=np.float64)),
    }


def engine_fixed(sim: Sim) -> dict[str, Any]:
    """What the process pays besides its chunks: importing the extension (a
    fresh interpreter), then the first point (runtime, connector, the first
    connection and request) against a warm second and third."""
    probe = ("import resource, time; t = time.perf_counter(); import specreplay._core; w = time.perf_counter() - t; "
             "r = resource.getrusage(resource.RUSAGE_SELF); "
             "print(w, r.ru_utime + r.ru_stime, r.ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    import_wall, import_cpu, import_peak = (float(x) for x in out.stdout.split())
    points = []
    for _ in range(3):
        (user0, sys0), wall0 = process_cpu(), time.perf_counter()
        table = engine_run({"load": {"mode": "concurrency", "concurrency": 1}, "num_requests": 1, "timeout_s": 60},
                           engine_requests(sim.url, payloads(max_tokens=4)))
        (user1, sys1), wall1 = process_cpu(), time.perf_counter()
        ok = table.num_rows == 1 and table["error_kind"][0].as_py() is None
        row = table.to_pylist()[0]
        points.append({"ok": ok, "wall_s": wall1 - wall0, "cpu_s": user1 - user0 + sys1 - sys0,
                       "e2e_us": row["end_us"] - row["sent_us"]})
    return {
        "import_wall_s": import_wall, "import_cpu_s": import_cpu, "import_peak_rss_kib": import_peak,
        "points": points, "rss_after_kib": rss_kib(),
    }


# --------------------------------------------------------------------------
# the reference Rust client and the floor


def reference_stream(sim: Sim, concurrency: int, requests_n: int, warmup: int, raw: bool) -> dict[str, Any]:
    import numpy as np

    mode = "raw" if raw else "stream"
    out = run_reference([mode, sim.url, str(concurrency), str(requests_n), str(warmup), str(POINT_DURATION_S)],
                        CLIENT_TIMEOUT_S)
    res = {
        "requests_ok": out["requests_ok"], "requests_failed": out["requests_failed"],
        "chunks": out["chunks"], "wall_s": out["wall_s"], "chunks_per_s": out["chunks"] / out["wall_s"],
        **cpu_figures(out["user_s"], out["sys_s"], out["chunks"]),
    }
    if not raw:
        # Both sides in CLOCK_MONOTONIC µs: the client's arrival, the
        # simulator's stamp minus its offset.
        client = np.asarray(out["arrival_mono_us"], dtype=np.float64)
        server = np.asarray(out["server_us"], dtype=np.float64) - sim.mono_offset_us
        res["user_error_us"] = pct(client - server)
    return res


def reference_mem(sim: Sim, n: int, raw: bool) -> dict[str, Any]:
    out = run_reference(["raw-mem" if raw else "mem", sim.url, str(n), str(MEM_SETTLE_S), str(MEM_SAMPLE_S)],
                        CLIENT_TIMEOUT_S)
    return mem_result(n, out["rss_base_kib"], out["rss_samples_kib"], out["in_flight"])


# --------------------------------------------------------------------------
# the Python baseline


def baseline_stream(sim: Sim, concurrency: int, requests_n: int, warmup: int) -> dict[str, Any]:
    import numpy as np

    import baseline_client as bc

    offset = bc.clock_offset_us()
    out = bc.Results()
    (user0, sys0), threads0, wall0 = process_cpu(), thread_cpu(), time.perf_counter()
    bc.run(lambda: bc.closed_loop(sim.url + "/chat/completions", payloads(), concurrency, requests_n,
                                  POINT_DURATION_S, out))
    (user1, sys1), threads1, wall1 = process_cpu(), thread_cpu(), time.perf_counter()
    client = np.frombuffer(out.chunk_client, dtype=np.float64) * 1e6 + offset
    server = np.frombuffer(out.chunk_server_us, dtype=np.int64).astype(np.float64) + sim.correction_us
    req = np.frombuffer(out.chunk_request, dtype=np.int64)
    err_all = client - server
    per_thread = {k: threads1.get(k, 0.0) - threads0.get(k, 0.0) for k in threads1}
    return {
        "requests_ok": out.ok, "requests_failed": out.failed, "errors": sorted(set(out.errors))[:5],
        "chunks": int(client.size), "wall_s": wall1 - wall0, "chunks_per_s": client.size / (wall1 - wall0),
        "user_error_us": pct(err_all[req >= warmup]), "user_error_us_all": pct(err_all),
        **cpu_figures(user1 - user0, sys1 - sys0, int(client.size)),
        "thread_cpu_s": {k: round(v, 3) for k, v in per_thread.items() if v > 0},
    }


def baseline_lag(sim: Sim, rate: float, requests_n: int) -> dict[str, Any]:
    import numpy as np

    import baseline_client as bc

    out = bc.Results()
    bc.run(lambda: bc.open_loop(sim.url + "/chat/completions", payloads(), rate, requests_n, out))
    sched = np.frombuffer(out.scheduled, dtype=np.float64)
    lag = (np.frombuffer(out.sent, dtype=np.float64) - sched) * 1e6
    return {
        "requests_sent": int(lag.size), "requests_failed": out.failed,
        "schedule_span_s": float(sched.max() - sched.min()) if sched.size else 0.0,
        "lag_us": pct(lag),
    }


def baseline_mem(sim: Sim, n: int) -> dict[str, Any]:
    import asyncio

    import baseline_client as bc

    url = sim.url + "/chat/completions"
    bc.run(lambda: bc.closed_loop(url, payloads(max_tokens=2), 4, 8, 60, bc.Results()))
    gc.collect()
    rss0 = rss_kib()
    out = bc.Results()
    samples: list[int] = []
    in_flight: list[int] = []

    async def main() -> None:
        task = asyncio.create_task(bc.closed_loop(url, payloads(), n, n, 60, out))
        await asyncio.sleep(MEM_SETTLE_S)
        end = time.perf_counter() + MEM_SAMPLE_S
        while time.perf_counter() < end:
            samples.append(rss_kib())
            in_flight.append(out.streaming)
            await asyncio.sleep(0.25)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    bc.run(main)
    return mem_result(n, rss0, samples, in_flight)


# --------------------------------------------------------------------------


def worker(job: dict[str, Any]) -> dict[str, Any]:
    kind, client, policy = job["kind"], job["client"], job["sim_policy"]
    if kind == "error":
        c = job["concurrency"]
        tpot, steady = ERROR_POINTS[c]
        sim = Sim({**SHORT_STREAMS, "tpot_ms": tpot}, policy)
        try:
            if client == "specreplay":
                res = engine_stream(sim, c, c + steady, c)
            elif client in ("reference", "floor"):
                res = reference_stream(sim, c, c + steady, c, raw=client == "floor")
            else:
                res = baseline_stream(sim, c, c + steady, c)
        finally:
            sim.close()
        return {**res, "tpot_ms": tpot, "warmup_requests": c}
    if kind == "mem":
        sim = Sim(LONG_STREAMS, policy)
        try:
            if client == "specreplay":
                return engine_mem(sim, job["streams"])
            if client in ("reference", "floor"):
                return reference_mem(sim, job["streams"], raw=client == "floor")
            return baseline_mem(sim, job["streams"])
        finally:
            sim.close()
    if kind == "lag":
        sim = Sim(LAG_STREAMS, policy)
        try:
            fn = engine_lag if client == "specreplay" else baseline_lag
            return fn(sim, job["rate"], LAG_POINTS.get(job["rate"], 2000))
        finally:
            sim.close()
    if kind == "wave":
        sim = Sim(WAVE_STREAMS, policy)
        try:
            return engine_wave(sim, job["streams"], job["preconnect"])
        finally:
            sim.close()
    if kind == "fixed":
        sim = Sim(TINY_STREAMS, policy)
        try:
            return engine_fixed(sim)
        finally:
            sim.close()
    raise ValueError(kind)
