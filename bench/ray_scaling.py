"""How fast can one and two Ray workers send, and what does Ray cost per row?

    .venv/bin/python bench/ray_scaling.py                          # ~6 min
    .venv/bin/python bench/ray_scaling.py --rates 200,1000 --seconds 5

1. Send lag (sent − scheduled) of an open-loop replay at constant arrivals,
   `--seconds` of sends per run, in three conditions interleaved at each
   rate: `local` (the engine in this process, no Ray), `ray-1` and `ray-2`
   (`run_replay` with `ray`, one or two worker actors). The highest rate
   whose p99 stays under 1 ms is what each condition holds on this machine.
2. Ray's cost per row: the rows of a real results file handed back through
   an actor call (`ray.get` of an Arrow record batch, as `Worker.next_batch`
   returns them), per batch size, against the local path (the engine's batch
   through the C data interface: no copy).

One local Ray instance (`num_cpus=2`) serves every run; the simulator runs
in its own process (`specreplay serve`). Prints a table and writes the raw
figures to bench/results/ray-<time>.json. Asserts nothing; only 127.0.0.1;
every run is bounded (a fixed number of requests, a timeout per request).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_util import write_result

import numpy as np
import pyarrow as pa

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
# No sessions: the arrivals are dealt out in turn (a trace with sessions splits by session).
TRACE = ROOT / "traces" / "reasoning-prompts.jsonl"
SIM = "ttft_ms = 10\nprefill_us_per_token = 0\ntpot_ms = 10\nreasoning_tokens = [{lo}, {hi}]\ncontent_tokens = [2, 5]\n"
CONDITIONS = {"local": None, "ray-1": 1, "ray-2": 2}


def pct(values: Any) -> dict[str, float]:
    v = np.asarray(values, dtype=np.float64)
    return {"n": int(v.size), "p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99)), "max": float(v.max())}


def peak_streams(df: Any) -> int:
    """Most requests in flight at once (between sent_us and end_us)."""
    sent = df[df["sent_us"].notna()]
    events = np.concatenate([np.stack([sent["sent_us"].to_numpy(np.int64), np.ones(len(sent), np.int64)], 1),
                             np.stack([sent["end_us"].to_numpy(np.int64), -np.ones(len(sent), np.int64)], 1)])  # fmt: skip
    events = events[np.lexsort((events[:, 1], events[:, 0]))]
    return int(np.cumsum(events[:, 1]).max()) if len(events) else 0


def one_run(work: Path, url: str, workers: int | None, rate: float, seconds: float) -> dict[str, Any]:
    import specreplay
    from specreplay.settings.config import ReplayConfig
    from specreplay.run.replay import run_replay

    out = work / "run.arrow"
    config = ReplayConfig(trace=str(TRACE), url=url, rate=[rate], arrival="constant", num_requests=int(rate * seconds),
                          metrics=False, timeout=30.0, output=str(out), ray="local" if workers else None, workers=workers or 1)  # fmt: skip
    t = time.monotonic()
    run_replay(config)
    wall = time.monotonic() - t
    df = specreplay.load(out)
    out.unlink()
    sent = df[df["sent_us"].notna()]
    per_worker = {}
    if workers:
        for name, rows in sent.groupby("worker"):
            per_worker[str(name)] = pct(rows["sent_us"] - rows["scheduled_us"])["p99"]
    return {"lag_us": pct(sent["sent_us"] - sent["scheduled_us"]), "p99_by_worker_us": per_worker, "peak_streams": peak_streams(df),
            "rows": len(df), "failed": int(df["error_kind"].notna().sum()), "wall_s": wall, "load_avg": os.getloadavg()[0]}  # fmt: skip


def transfer_cost(ray: Any, rows: pa.Table, sizes: list[int], repeats: int) -> list[dict[str, Any]]:
    """µs per row to hand `n` result rows back from an actor (what each
    drain of a distributed point costs beyond the local path)."""

    @ray.remote(num_cpus=0)
    class Echo:
        def __init__(self, batch: pa.RecordBatch) -> None:
            self.batch = batch

        def get(self) -> pa.RecordBatch:
            return self.batch

    out = []
    for n in sizes:
        batch = rows.slice(0, n).combine_chunks().to_batches()[0]
        echo = Echo.remote(batch)
        ray.get(echo.get.remote())  # warm
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            ray.get(echo.get.remote())
            times.append(time.perf_counter() - t)
        ray.kill(echo)
        per_call = float(np.median(times))
        out.append({"rows": n, "bytes": batch.nbytes, "call_us": per_call * 1e6, "us_per_row": per_call * 1e6 / n})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="100,250,500,1000,2000")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--reasoning-tokens", default="2,5", help="the simulator's reasoning lengths MIN,MAX (10 ms each): long ones make many streams")
    ap.add_argument("--no-transfer", action="store_true", help="skip the per-row transfer cost")
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    import ray

    t = time.monotonic()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    ray_init_s = time.monotonic() - t
    with tempfile.TemporaryDirectory(prefix="specreplay-ray-bench-") as tmp:
        work = Path(tmp)
        lo, hi = (int(x) for x in args.reasoning_tokens.split(","))
        (work / "sim.toml").write_text(SIM.format(lo=lo, hi=hi))
        sim = subprocess.Popen([sys.executable, "-m", "specreplay", "serve", "--port", "0", "--config", str(work / "sim.toml")],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        assert sim.stdout is not None
        line = sim.stdout.readline()
        url = line[line.index("http://") :].split()[0]
        runs: list[dict[str, Any]] = []
        try:
            for rate in rates:
                for condition, workers in CONDITIONS.items():
                    res = one_run(work, url, workers, rate, args.seconds)
                    res.update(rate=rate, condition=condition)
                    runs.append(res)
                    lag = res["lag_us"]
                    print(f"{rate:>6g}/s  {condition:<6}  lag p50 {lag['p50']:>7.0f}  p99 {lag['p99']:>8.0f}  max {lag['max']:>8.0f} µs"
                          f"  rows {res['rows']}  streams {res['peak_streams']}  failed {res['failed']}  load {res['load_avg']:.1f}  {res['p99_by_worker_us'] or ''}", flush=True)  # fmt: skip
            transfer: list[dict[str, Any]] = []
            if not args.no_transfer:
                # Real rows for the transfer cost.
                from specreplay.settings.config import ReplayConfig
                from specreplay.run.replay import run_replay
                from specreplay.results.files import read_table

                config = ReplayConfig(trace=str(TRACE), url=url, rate=[500.0], num_requests=4096, metrics=False, output=str(work / "rows.arrow"))
                run_replay(config)
                rows = read_table(work / "rows.arrow")
                transfer = transfer_cost(ray, rows, [256, 4096], repeats=50)
                for t_ in transfer:
                    print(f"transfer {t_['rows']:>5} rows ({t_['bytes'] / 1e6:.2f} MB): {t_['call_us']:.0f} µs per call, {t_['us_per_row']:.2f} µs per row")
        finally:
            sim.terminate()
            sim.wait(timeout=10)
            ray.shutdown()
    path = write_result("ray", {"host": platform.node(), "cpus": os.cpu_count(), "ray_init_s": ray_init_s, "seconds": args.seconds, "reasoning_tokens": [lo, hi],
                                "runs": runs, "transfer": transfer})  # fmt: skip
    print(f"ray.init {ray_init_s:.1f} s; figures in {path}")


if __name__ == "__main__":
    main()
