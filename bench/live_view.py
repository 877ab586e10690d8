"""Does the live view cost the measurement anything? Send lag (sent −
scheduled) of the same open-loop replay with the CLI's console hooks drawing
the live view on a terminal, printing plain status lines, and drawing
nothing; every mode in a fresh process, the modes interleaved repeat by
repeat so a busy moment of this shared machine hits them alike.

    .venv/bin/python bench/live_view.py                       # 100 and 1000 req/s, 4 repeats
    .venv/bin/python bench/live_view.py --rates 1000 --repeats 6

The replay is `specreplay.run.replay.run_replay` with `commands.replay.ConsoleHooks`,
exactly what `specreplay replay` runs, against the simulator in its own
process (bench/bench_util.py's `Sim`), constant arrivals, short answers.
The terminal is a rich Console forced into terminal mode that writes to
/dev/null, so the drawing work is done and nothing is shown. Modes:

- `terminal`: the live view as on a terminal (redrawn 4 times a second);
- `plain`: one status line a second (what a pipe or CI gets, 10x as often
  as the default);
- `off`: the same hooks with the live view left out (the per-point summary
  is printed in every mode, after the point).

Prints a table and writes the raw figures to
bench/results/live-view-<time>.json. Asserts nothing; 127.0.0.1 only;
every run bounded in requests and time.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_util import write_result

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
STREAMS = {"ttft_ms": 10, "tpot_ms": 10, "reasoning_tokens": [2, 5], "content_tokens": [2, 5]}
REQUESTS = {100.0: 2000, 1000.0: 10000}  # rate -> requests of one run
MODES = ("terminal", "plain", "off")
WORKER_TIMEOUT_S = 240.0


def write_trace(path: Path, n: int = 64) -> None:
    with path.open("w") as f:
        for i in range(n):
            body = {"messages": [{"role": "user", "content": f"bench question number {i}: why is the sky blue"}], "max_tokens": 4096}
            f.write(json.dumps({"id": f"q{i}", "api": "chat", "body": body}) + "\n")


def worker(job: dict[str, Any]) -> dict[str, Any]:
    """One replay in this process, with the hooks of `job["mode"]`."""
    sys.path.insert(0, str(HERE))
    import numpy as np
    from rich.console import Console

    from bench_util import Sim  # type: ignore[import-not-found]
    from specreplay.commands.replay import ConsoleHooks
    from specreplay.settings.config import ReplayConfig
    from specreplay.run.replay import run_replay
    from specreplay.results.files import load

    mode, rate = job["mode"], job["rate"]
    sim = Sim(STREAMS, "normal")
    with tempfile.TemporaryDirectory() as tmp, open(os.devnull, "w") as devnull:
        trace = Path(tmp) / "trace.jsonl"
        write_trace(trace)
        config = ReplayConfig.from_mapping(
            {"trace": str(trace), "url": sim.url, "rate": [rate], "arrival": "constant", "num_requests": REQUESTS[rate],
             "timeout": 60.0, "output": str(Path(tmp) / "run.arrow"), "continuous_usage": True,
             # The view alone: scraping the server's metrics has its own bench (scrape_send_lag.py).
             "metrics": False}
        )
        config.validate()
        err = Console(file=devnull, force_terminal=mode == "terminal", width=160)
        out = Console(file=devnull, width=160)
        hooks = ConsoleHooks(out, err, per_request=False, live=mode, status_interval=1.0)
        try:
            t = time.perf_counter()
            result = run_replay(config, hooks)
            wall = time.perf_counter() - t
        finally:
            sim.close()
        df = load(result.path)
    lag = (df["sent_us"] - df["scheduled_us"]).dropna().to_numpy(dtype="float64")
    return {
        "requests_sent": int(len(lag)),
        "requests_failed": int(df["error_kind"].notna().sum()),
        "wall_s": wall,
        "lag_us": {name: float(np.percentile(lag, q)) for name, q in (("p50", 50), ("p99", 99), ("p999", 99.9))} | {"max": float(lag.max())},
    }


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    load0 = os.getloadavg()[0]
    try:
        proc = subprocess.run([sys.executable, __file__, "_worker", json.dumps(job)], capture_output=True, text=True, timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {**job, "failed": f"worker took over {WORKER_TIMEOUT_S:.0f} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return {**job, **json.loads(line[7:]), "loadavg_1min": [load0, os.getloadavg()[0]]}
    return {**job, "failed": (proc.stderr or proc.stdout)[-2000:]}


def report(results: list[dict[str, Any]]) -> str:
    lines = ["rate   mode      runs  send lag p50 µs        p99 µs                 max µs"]
    for rate in sorted({r["rate"] for r in results}):
        for mode in MODES:
            runs = [r for r in results if r["rate"] == rate and r["mode"] == mode and "failed" not in r]
            if not runs:
                continue

            def span(stat: str, runs: list[dict[str, Any]] = runs) -> str:
                values = sorted(r["lag_us"][stat] for r in runs)
                return f"{values[0]:,.0f}–{values[-1]:,.0f}" if len(values) > 1 else f"{values[0]:,.0f}"

            lines.append(f"{rate:<6g} {mode:<9} {len(runs):<5} {span('p50'):<22} {span('p99'):<22} {span('max')}")
    failed = [r for r in results if "failed" in r]
    lines += [f"failed: {r['mode']} at {r['rate']:g} req/s: {r['failed'][-300:]}" for r in failed]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="100,1000", help="comma-separated request rates (of 100, 1000)")
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    results = []
    for repeat in range(args.repeats):
        for rate in rates:
            for mode in MODES if repeat % 2 == 0 else tuple(reversed(MODES)):
                res = run_job({"mode": mode, "rate": rate, "repeat": repeat})
                results.append(res)
                print(f"repeat {repeat} rate {rate:g} {mode}: " + (res.get("failed") or json.dumps(res["lag_us"])), flush=True)
    print(report(results))
    out = write_result("live-view", {"argv": sys.argv, "loadavg": os.getloadavg(), "results": results})
    print(f"raw figures: {out}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_worker":
        print("RESULT " + json.dumps(worker(json.loads(sys.argv[2]))), flush=True)
    else:
        main()
