"""Client benchmark (issue 3): how well does specreplay's client measure, and
what does it cost, next to a baseline Python client (baseline_client.py)?

    chrt -f 1 .venv/bin/python bench/client_bench.py            # every part
    .venv/bin/python bench/client_bench.py --parts error --concurrency 1,64
    .venv/bin/python bench/client_bench.py --parts mem --mem-streams 1024

Parts (each figure is measured for specreplay and the baseline in the same
run, interleaved point by point, every measurement in a fresh process):

- error: chunk timestamp error = client read time − simulator send stamp
  (`sim_sent_us`, mapped into the client's clock through CLOCK_MONOTONIC),
  per text chunk, closed loop at each concurrency; and, from the same run,
  client CPU per chunk (getrusage of the client process).
- lag:   send lag = sent − scheduled, open loop, constant arrivals.
- mem:   RSS growth per in-flight stream, N long streams at once.

The simulator always runs in its own process, as a server does. Started
under a real-time policy (`chrt -f 1`, which keeps the box's other tenants
out of the client's way), the bench drops the simulator back to the normal
policy (`--sim-policy normal`, the default): real-time threads of equal
priority never preempt each other, so a simulator at the client's priority
holds a core through each burst of sends and the client cannot read until it
ends; that is the cost of sharing two cores with the server, not a property
of the client. `--sim-policy inherit` measures that case.

Prints a table and writes the raw figures to bench/results/client-<time>.json.
Asserts nothing. Only 127.0.0.1; every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import Callable, Iterator
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

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
POINT_DURATION_S = 60.0  # closed loop stops scheduling after this
MEM_SETTLE_S = 6.0  # after the N streams are started, before RSS is sampled
MEM_SAMPLE_S = 3.0
WORKER_TIMEOUT_S = 240.0
N_PROMPTS = 64


# --------------------------------------------------------------------------
# helpers shared by the workers


def payloads(n: int = N_PROMPTS, max_tokens: int = 4096) -> list[dict[str, Any]]:
    """Distinct prompts, so the simulator draws different lengths."""
    return [
        {
            "model": "specreplay-sim",
            "messages": [{"role": "user", "content": f"bench question number {i}: why is the sky blue"}],
            "stream": True,
            "max_tokens": max_tokens,
            "stream_options": {"include_usage": True},
        }
        for i in range(n)
    ]


def mono_offset_us() -> float:
    """`now_us() − CLOCK_MONOTONIC µs` in this process (tightest bracket of 200)."""
    from specreplay import _core

    best_width, best = float("inf"), 0.0
    for _ in range(200):
        a = time.monotonic_ns()
        n = _core.now_us()
        b = time.monotonic_ns()
        if b - a < best_width:
            best_width, best = b - a, n - (a + b) / 2000.0
    return best


def pct(values: Any) -> dict[str, float]:
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return {"n": 0}
    return {
        "n": int(v.size),
        "min": float(v.min()),
        "p50": float(np.percentile(v, 50)),
        "p90": float(np.percentile(v, 90)),
        "p99": float(np.percentile(v, 99)),
        "p999": float(np.percentile(v, 99.9)),
        "max": float(v.max()),
        "mean": float(v.mean()),
    }


def thread_cpu() -> dict[str, float]:
    """CPU seconds per thread name, from /proc/self/task (clock-tick resolution)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
            name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def process_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def normal_policy() -> None:
    """In the simulator's process before it starts: leave any real-time policy."""
    if os.sched_getscheduler(0) != os.SCHED_OTHER:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


class Sim:
    """The simulator, in a child process (see the module docstring for its policy)."""

    def __init__(self, config: dict[str, Any], policy: str):
        config = {"send_timestamps": True, "seed": 1, **config}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "_sim", json.dumps(config)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            preexec_fn=normal_policy if policy == "normal" else None,
        )
        assert self.proc.stdout is not None
        hello = json.loads(self.proc.stdout.readline())
        self.url = hello["url"]
        # Add to a simulator stamp to get this process's clock.
        self.correction_us = mono_offset_us() - hello["mono_offset_us"]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def serve_sim(config_json: str) -> None:
    """Child process: serve until stdin closes."""
    from specreplay._core import SimServer

    with SimServer("127.0.0.1", 0, json.loads(config_json)) as srv:
        print(json.dumps({"url": srv.url, "mono_offset_us": mono_offset_us()}), flush=True)
        sys.stdin.read()


# --------------------------------------------------------------------------
# specreplay engine runs


def engine_requests(url: str, bodies: list[dict[str, Any]]) -> Any:
    """The requests as the engine takes them: one batch with the columns of `schema.REQUEST_COLUMNS`."""
    import pyarrow as pa
    from specreplay.schema import request_schema

    rows = [{"trace_id": f"q{i}", "api": "chat", "url": url + "/chat/completions", "body": json.dumps(b).encode(), "arrival_s": 0.0}
            for i, b in enumerate(bodies)]
    return pa.RecordBatch.from_pylist(rows, schema=request_schema())


def engine_run(spec: dict[str, Any], requests: Any, on_poll: Any = None) -> Any:
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


def engine_stream(url: str, concurrency: int, requests_n: int, warmup: int, correction_us: float) -> dict[str, Any]:
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
    reqs = engine_requests(url, payloads())
    cpu0, threads0, wall0 = process_cpu(), thread_cpu(), time.perf_counter()
    table = engine_run(spec, reqs)
    cpu1, threads1, wall1 = process_cpu(), thread_cpu(), time.perf_counter()
    ok = table.filter(pc.is_null(table["error_kind"]))
    failed = table.num_rows - ok.num_rows
    chunks_all = int(pc.sum(ok["chunk_count"]).as_py() or 0)
    steady = ok.filter(pc.invert(ok["warmup"]))

    def flat(t: Any, column: str) -> Any:
        return np.asarray(pc.list_flatten(t[column]).to_numpy(zero_copy_only=False), dtype=np.float64)

    def errors(t: Any, user_space: bool = False) -> Any:
        client = flat(t, "chunk_ts_us")
        if user_space and "chunk_delay_us" in t.column_names:
            # The engine's own stamp: the kernel stamp plus the engine's delay
            # (a chunk without a kernel stamp already carries the engine's).
            client = client + np.nan_to_num(flat(t, "chunk_delay_us"))
        server = flat(t, "chunk_server_ts_us") + correction_us
        keep = ~np.isnan(server)
        return client[keep] - server[keep]

    err_all, err = errors(ok), errors(steady)
    delays = flat(steady, "chunk_delay_us") if "chunk_delay_us" in steady.column_names else np.array([])
    per_thread = {k: threads1.get(k, 0.0) - threads0.get(k, 0.0) for k in threads1}
    return {
        "requests_ok": ok.num_rows, "requests_failed": failed,
        "errors": sorted(set(table.filter(pc.is_valid(table["error_kind"]))["error_message"].to_pylist()))[:5],
        "chunks": chunks_all, "wall_s": wall1 - wall0, "chunks_per_s": chunks_all / (wall1 - wall0),
        "error_us": pct(err), "error_us_all": pct(err_all),
        # chunk_ts_us is the kernel's receive stamp where there is one; the
        # engine's own stamp (what chunk_ts_us was before kernel stamps) for comparison.
        "user_error_us": pct(errors(steady, user_space=True)),
        "kernel_stamped": float(np.mean(~np.isnan(delays))) if len(delays) else None,
        "engine_delay_us": pct(delays[~np.isnan(delays)]) if len(delays) else None,
        "cpu_s": cpu1 - cpu0, "cpu_us_per_chunk": (cpu1 - cpu0) * 1e6 / max(chunks_all, 1),
        "thread_cpu_s": {k: round(v, 3) for k, v in per_thread.items() if v > 0},
    }


def engine_lag(url: str, rate: float, requests_n: int) -> dict[str, Any]:
    import pyarrow.compute as pc

    spec = {"load": {"mode": "rate", "rate": rate, "arrival": "constant"}, "num_requests": requests_n, "timeout_s": 60}
    table = engine_run(spec, engine_requests(url, payloads()))
    ok = table.filter(pc.is_valid(table["sent_us"]))
    lag = pc.subtract(ok["sent_us"], ok["scheduled_us"]).to_numpy()
    sched = ok["scheduled_us"].to_numpy()
    return {
        "requests_sent": ok.num_rows,
        "requests_failed": int(pc.sum(pc.is_valid(table["error_kind"]).cast("int64")).as_py() or 0),
        "schedule_span_s": float(sched.max() - sched.min()) / 1e6,
        "lag_us": pct(lag),
    }


def engine_mem(url: str, n: int) -> dict[str, Any]:
    # Warm up: runtime threads, the pool, pyarrow paths (short answers).
    engine_run({"load": {"mode": "concurrency", "concurrency": 4}, "num_requests": 8, "timeout_s": 60},
               engine_requests(url, payloads(max_tokens=2)))
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

    engine_run({"load": {"mode": "concurrency", "concurrency": n}, "num_requests": n, "timeout_s": 120},
               engine_requests(url, payloads()), on_poll)
    return mem_result(n, rss0, samples, in_flight)


def mem_result(n: int, rss0: int, samples: list[int], in_flight: list[int]) -> dict[str, Any]:
    peak = max(samples) if samples else 0
    return {
        "streams": n, "rss_base_kib": rss0, "rss_in_flight_kib": peak,
        "in_flight_min": min(in_flight) if in_flight else 0,
        "kib_per_stream": (peak - rss0) / n,
    }


# --------------------------------------------------------------------------
# baseline runs


def baseline_stream(url: str, concurrency: int, requests_n: int, warmup: int, correction_us: float) -> dict[str, Any]:
    import numpy as np

    import baseline_client as bc

    offset = bc.clock_offset_us()
    out = bc.Results()
    cpu0, threads0, wall0 = process_cpu(), thread_cpu(), time.perf_counter()
    bc.run(lambda: bc.closed_loop(url + "/chat/completions", payloads(), concurrency, requests_n, POINT_DURATION_S, out))
    cpu1, threads1, wall1 = process_cpu(), thread_cpu(), time.perf_counter()
    client = np.frombuffer(out.chunk_client, dtype=np.float64) * 1e6 + offset
    server = np.frombuffer(out.chunk_server_us, dtype=np.int64).astype(np.float64) + correction_us
    req = np.frombuffer(out.chunk_request, dtype=np.int64)
    err_all = client - server
    per_thread = {k: threads1.get(k, 0.0) - threads0.get(k, 0.0) for k in threads1}
    return {
        "requests_ok": out.ok, "requests_failed": out.failed, "errors": sorted(set(out.errors))[:5],
        "chunks": int(client.size), "wall_s": wall1 - wall0, "chunks_per_s": client.size / (wall1 - wall0),
        "error_us": pct(err_all[req >= warmup]), "error_us_all": pct(err_all),
        "cpu_s": cpu1 - cpu0, "cpu_us_per_chunk": (cpu1 - cpu0) * 1e6 / max(int(client.size), 1),
        "thread_cpu_s": {k: round(v, 3) for k, v in per_thread.items() if v > 0},
    }


def baseline_lag(url: str, rate: float, requests_n: int) -> dict[str, Any]:
    import numpy as np

    import baseline_client as bc

    out = bc.Results()
    bc.run(lambda: bc.open_loop(url + "/chat/completions", payloads(), rate, requests_n, out))
    sched = np.frombuffer(out.scheduled, dtype=np.float64)
    lag = (np.frombuffer(out.sent, dtype=np.float64) - sched) * 1e6
    return {
        "requests_sent": int(lag.size), "requests_failed": out.failed,
        "schedule_span_s": float(sched.max() - sched.min()) if sched.size else 0.0,
        "lag_us": pct(lag),
    }


def baseline_mem(url: str, n: int) -> dict[str, Any]:
    import asyncio

    import baseline_client as bc

    bc.run(lambda: bc.closed_loop(url + "/chat/completions", payloads(max_tokens=2), 4, 8, 60, bc.Results()))
    gc.collect()
    rss0 = rss_kib()
    out = bc.Results()
    samples: list[int] = []
    in_flight: list[int] = []

    async def main() -> None:
        task = asyncio.create_task(bc.closed_loop(url + "/chat/completions", payloads(), n, n, 60, out))
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
# one measurement per process


def worker(job: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    kind, client, policy = job["kind"], job["client"], job["sim_policy"]
    if kind == "error":
        c = job["concurrency"]
        tpot, steady = ERROR_POINTS[c]
        warmup = c
        sim = Sim({**SHORT_STREAMS, "tpot_ms": tpot}, policy)
        try:
            fn = engine_stream if client == "specreplay" else baseline_stream
            res = fn(sim.url, c, warmup + steady, warmup, sim.correction_us)
        finally:
            sim.close()
        res.update(tpot_ms=tpot, warmup_requests=warmup, sim_correction_us=sim.correction_us)
        return res
    if kind == "lag":
        sim = Sim(LAG_STREAMS, policy)
        try:
            fn = engine_lag if client == "specreplay" else baseline_lag
            return fn(sim.url, job["rate"], LAG_POINTS.get(job["rate"], 2000))
        finally:
            sim.close()
    if kind == "mem":
        sim = Sim(LONG_STREAMS, policy)
        try:
            return (engine_mem if client == "specreplay" else baseline_mem)(sim.url, job["streams"])
        finally:
            sim.close()
    raise ValueError(kind)


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    t = time.perf_counter()
    load0 = os.getloadavg()[0]
    try:
        proc = subprocess.run(
            [sys.executable, __file__, "_worker", json.dumps(job)],
            capture_output=True, text=True, timeout=WORKER_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return {**job, "failed": f"worker took over {WORKER_TIMEOUT_S:.0f} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
            res.update(job)
            res["job_wall_s"] = time.perf_counter() - t
            res["loadavg_1min"] = [load0, os.getloadavg()[0]]
            return res
    return {**job, "failed": (proc.stderr or proc.stdout)[-2000:]}


# --------------------------------------------------------------------------
# report


def machine() -> dict[str, Any]:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {
        "nproc": os.cpu_count(), "cpu_model": model, "kernel": platform.release(),
        "python": platform.python_version(), "loadavg_at_start": os.getloadavg(),
        "bench_policy": {os.SCHED_OTHER: "normal", os.SCHED_FIFO: "fifo", os.SCHED_RR: "rr"}.get(
            os.sched_getscheduler(0), "other"),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "–"
    return f"{a / b:.2f}"


def fmt(v: float | None, digits: int = 0) -> str:
    return "–" if v is None else f"{v:,.{digits}f}"


def get(res: dict[str, Any], *path: str) -> Any:
    for p in path:
        if not isinstance(res, dict) or p not in res:
            return None
        res = res[p]
    return res


def report(results: list[dict[str, Any]]) -> str:
    lines: list[str] = []
    by: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in results:
        key = (r["kind"], r.get("concurrency", r.get("rate", r.get("streams"))), r["client"])
        by[key] = r
    keys = sorted({k[:2] for k in by}, key=lambda k: (["error", "lag", "mem"].index(k[0]), k[1]))

    def table(kind: str, title: str, heads: list[str]) -> Iterator[tuple[Any, str, dict[str, Any], Callable[..., str]]]:
        """Writes the title and header, then yields (point, client, result,
        ratio_of) per row; ratio_of(key) is specreplay / baseline on the
        specreplay row and empty on the baseline row."""
        rows = [k for k in keys if k[0] == kind]
        if not rows:
            return
        lines.append(f"\n{title}")
        lines.append("| " + " | ".join(heads) + " |")
        lines.append("|" + "---|" * len(heads))
        for k in rows:
            s, b = by.get((*k, "specreplay"), {}), by.get((*k, "baseline"), {})
            def ratio_of(*path: str) -> str:
                return ratio(get(s, *path), get(b, *path))

            yield k[1], "specreplay", s, ratio_of
            yield k[1], "baseline", b, lambda *path: ""

    def stat_rows(kind: str, metric: str, title: str, head: str) -> None:
        heads = [head, "client", "chunks/reqs", "p50 µs", "p99 µs", "max µs", "p99 ratio", "failed"]
        for point, name, r, ratio_of in table(kind, title, heads):
            if "failed" in r and isinstance(r["failed"], str):
                lines.append(f"| {point} | {name} | worker failed | | | | | |")
                continue
            st = get(r, metric) or {}
            lines.append(f"| {point} | {name} | {fmt(st.get('n'))} | {fmt(st.get('p50'))} | {fmt(st.get('p99'))} | "
                         f"{fmt(st.get('max'))} | {ratio_of(metric, 'p99')} | {r.get('requests_failed')} |")

    stat_rows("error", "error_us", "Chunk timestamp error (client read − sim send), first wave excluded", "streams")
    heads = ["streams", "client", "chunks", "chunks/s", "CPU s", "CPU µs/chunk", "ratio"]
    for point, name, r, ratio_of in table("error", "Client CPU per text chunk (client process only, same runs)", heads):
        lines.append(f"| {point} | {name} | {fmt(r.get('chunks'))} | {fmt(r.get('chunks_per_s'))} | "
                     f"{fmt(r.get('cpu_s'), 2)} | {fmt(r.get('cpu_us_per_chunk'), 1)} | {ratio_of('cpu_us_per_chunk')} |")
    stat_rows("lag", "lag_us", "Send lag (sent − scheduled), open loop, constant arrivals", "rate/s")
    heads = ["streams", "client", "RSS base MiB", "RSS in flight MiB", "min in flight", "KiB/stream", "ratio"]
    title = "Memory per in-flight stream (RSS growth / N; simulator in a separate process)"
    for point, name, r, ratio_of in table("mem", title, heads):
        base, peak = r.get("rss_base_kib"), r.get("rss_in_flight_kib")
        lines.append(f"| {point} | {name} | {fmt(base and base / 1024, 1)} | {fmt(peak and peak / 1024, 1)} | "
                     f"{fmt(r.get('in_flight_min'))} | {fmt(r.get('kib_per_stream'), 1)} | {ratio_of('kib_per_stream')} |")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] == "_sim":
        serve_sim(sys.argv[2])
        return
    if len(sys.argv) >= 3 and sys.argv[1] == "_worker":
        print("RESULT " + json.dumps(worker(json.loads(sys.argv[2]))), flush=True)
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="error,lag,mem", help="comma list of error, lag, mem")
    ap.add_argument("--clients", default="specreplay,baseline")
    ap.add_argument("--concurrency", default="1,64,256,1024", help=f"error points, of {sorted(ERROR_POINTS)}")
    ap.add_argument("--rates", default="100,1000", help=f"lag points (requests per rate: {LAG_POINTS})")
    ap.add_argument("--mem-streams", default="1024,4096")
    ap.add_argument("--sim-policy", choices=["normal", "inherit"], default="normal",
                    help="the simulator's scheduling policy: normal, or the bench's own (see above)")
    ap.add_argument("--repeat", type=int, default=1, help="repeat every job (keeps all in the JSON, tables show the last)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()

    parts = args.parts.split(",")
    clients = args.clients.split(",")
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    jobs: list[dict[str, Any]] = []
    for _ in range(args.repeat):
        if "error" in parts:
            jobs += [{"kind": "error", "concurrency": c, "client": cl} for c in ints(args.concurrency) for cl in clients]
        if "lag" in parts:
            jobs += [{"kind": "lag", "rate": float(r), "client": cl} for r in args.rates.split(",") for cl in clients]
        if "mem" in parts:
            jobs += [{"kind": "mem", "streams": n, "client": cl} for n in ints(args.mem_streams) for cl in clients]
    for job in jobs:
        job["sim_policy"] = args.sim_policy
    info = machine()
    print(f"{info['nproc']} × {info['cpu_model']}, {info['date']}, load {info['loadavg_at_start']}, "
          f"bench policy {info['bench_policy']}, simulator policy {args.sim_policy}", flush=True)
    results = []
    for i, job in enumerate(jobs):
        print(f"[{i + 1}/{len(jobs)}] {json.dumps(job)} ...", end=" ", flush=True)
        res = run_job(job)
        results.append(res)
        print("FAILED" if isinstance(res.get("failed"), str) else f"{res['job_wall_s']:.0f} s", flush=True)
    table = report(results)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = args.out / f"client-{stamp}.json"
    path.write_text(json.dumps({"machine": info, "argv": sys.argv[1:], "results": results, "table": table}, indent=1))
    print(f"\nraw figures: {path}")


if __name__ == "__main__":
    main()
