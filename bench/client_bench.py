"""Client benchmark (issues 3 and 15): how well does specreplay's client measure,
and what does it cost, next to a reference Rust client, the floor and a
Python baseline, all in one run against the same simulator?

    .venv/bin/python bench/client_bench.py                  # every part, ~10 min
    .venv/bin/python bench/client_bench.py --parts error --concurrency 1,64
    .venv/bin/python bench/client_bench.py --parts mem --mem-streams 1024 --clients specreplay,reference

Parts (every measurement in a fresh process; the clients of one point run
back to back, so their ratios compare runs seconds apart):

- error: chunk stamp error = client stamp − simulator send stamp
  (`sim_sent_us`, mapped into the client's clock through CLOCK_MONOTONIC),
  per text chunk, closed loop at each concurrency: specreplay's kernel stamp
  and its engine (user-space) stamp side by side, and the other clients'
  user-space stamps; and, from the same runs, CPU per chunk (getrusage of
  the client process, split user / system).
- mem:   RSS growth per in-flight stream, N long streams at once.
- wave:  first-wave TTFT: N requests sent at once, with and without
  `--preconnect` (specreplay only), and the connection set-up they paid.
- fixed: what specreplay's process pays besides its chunks: importing the
  extension, the first point against the next ones.
- lag:   send lag = sent − scheduled, open loop, constant arrivals
  (specreplay and the baseline: the others have no open loop).

Clients (`--clients`): specreplay; reference (`reference_client.rs`: tokio,
hyper-util, serde_json per event, as lean Rust benchmark clients are); floor
(the same binary without HTTP library or parsing: the machine's floor);
baseline (`baseline_client.py`: asyncio + aiohttp, as vLLM's script).

The simulator always runs in its own process, at the normal scheduling
policy. Run at normal priority (no `chrt`) to measure what a user gets; under
`chrt -f 1` the clients preempt the box's other tenants (`--sim-policy
inherit` then gives the simulator the same priority, which makes it hold a
core through each burst of sends).

Prints tables and writes the raw figures, with the load average before and
after every job, to bench/results/client-<time>.json. Asserts nothing. Only
127.0.0.1; every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench_util import HERE, REFERENCE_CLIENT, serve_sim, write_result

RESULTS = HERE / "results"
WORKER_TIMEOUT_S = 300.0
CLIENTS = ["specreplay", "reference", "floor", "baseline"]
PARTS = ["error", "mem", "wave", "fixed", "lag"]
# Who takes part in what (the reference and the floor have no open loop;
# preconnect and the fixed cost are specreplay's).
PART_CLIENTS = {"error": CLIENTS, "mem": CLIENTS, "lag": ["specreplay", "baseline"],
                "wave": ["specreplay"], "fixed": ["specreplay"]}


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
            res: dict[str, Any] = json.loads(line[7:])
            res.update(job)
            res["job_wall_s"] = time.perf_counter() - t
            res["loadavg_1min"] = [load0, os.getloadavg()[0]]
            return res
    return {**job, "failed": (proc.stderr or proc.stdout)[-2000:]}


def machine() -> dict[str, Any]:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return {
        "nproc": os.cpu_count(), "cpu_model": model, "kernel": platform.release(),
        "python": platform.python_version(), "loadavg_at_start": os.getloadavg(), "uptime_at_start": uptime,
        "bench_policy": {os.SCHED_OTHER: "normal", os.SCHED_FIFO: "fifo", os.SCHED_RR: "rr"}.get(
            os.sched_getscheduler(0), "other"),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def jobs_for(args: argparse.Namespace) -> list[dict[str, Any]]:
    parts = args.parts.split(",")
    clients = args.clients.split(",")

    def ints(s: str) -> list[int]:
        return [int(x) for x in s.split(",") if x]

    def who(part: str) -> list[str]:
        return [c for c in clients if c in PART_CLIENTS[part]]

    jobs: list[dict[str, Any]] = []
    for _ in range(args.repeat):
        if "error" in parts:
            jobs += [{"kind": "error", "concurrency": c, "client": cl} for c in ints(args.concurrency) for cl in who("error")]
        if "mem" in parts:
            jobs += [{"kind": "mem", "streams": n, "client": cl} for n in ints(args.mem_streams) for cl in who("mem")]
        if "wave" in parts and who("wave"):
            jobs += [{"kind": "wave", "streams": n, "preconnect": p, "client": "specreplay"}
                     for n in ints(args.wave_streams) for p in (True, False)]
        if "fixed" in parts and who("fixed"):
            jobs.append({"kind": "fixed", "client": "specreplay"})
        if "lag" in parts:
            jobs += [{"kind": "lag", "rate": float(r), "client": cl} for r in args.rates.split(",") for cl in who("lag")]
    for job in jobs:
        job["sim_policy"] = args.sim_policy
    return jobs


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] == "_sim":
        serve_sim(sys.argv[2])
        return
    if len(sys.argv) >= 3 and sys.argv[1] == "_worker":
        from measure import worker

        print("RESULT " + json.dumps(worker(json.loads(sys.argv[2]))), flush=True)
        return
    from bench_report import report
    from measure import ERROR_POINTS, LAG_POINTS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {', '.join(PARTS)}")
    ap.add_argument("--clients", default=",".join(CLIENTS), help=f"comma list of {', '.join(CLIENTS)}")
    ap.add_argument("--concurrency", default="1,64,256,1024", help=f"error points, of {sorted(ERROR_POINTS)}")
    ap.add_argument("--mem-streams", default="1024,4096")
    ap.add_argument("--wave-streams", default="256,1024", help="first-wave sizes, each with and without preconnect")
    ap.add_argument("--rates", default="100,1000", help=f"lag points (requests per rate: {LAG_POINTS})")
    ap.add_argument("--sim-policy", choices=["normal", "inherit"], default="normal",
                    help="the simulator's scheduling policy: normal, or the bench's own (see above)")
    ap.add_argument("--repeat", type=int, default=1, help="repeat every job (all kept in the JSON; tables show every run)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()

    clients = args.clients.split(",")
    if any(c in clients for c in ("reference", "floor")) and not REFERENCE_CLIENT.exists():
        sys.exit(f"{REFERENCE_CLIENT} is missing: run `make bench`, or "
                 "`cargo build --release -p specreplay-core --example reference_client`")
    jobs = jobs_for(args)
    info = machine()
    print(f"{info['nproc']} × {info['cpu_model']}, {info['date']}, {info['uptime_at_start']}, "
          f"bench policy {info['bench_policy']}, simulator policy {args.sim_policy}", flush=True)
    results = []
    for i, job in enumerate(jobs):
        print(f"[{i + 1}/{len(jobs)}] {json.dumps(job)} ...", end=" ", flush=True)
        res = run_job(job)
        results.append(res)
        print("FAILED" if isinstance(res.get("failed"), str) else f"{res['job_wall_s']:.0f} s", flush=True)
    info["uptime_at_end"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    table = report(results)
    print(table)
    path = write_result("client", {"machine": info, "argv": sys.argv[1:], "results": results, "table": table}, args.out)
    print(f"\nraw figures: {path}")


if __name__ == "__main__":
    main()
