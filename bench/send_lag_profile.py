"""Where the send lag of a high-rate open loop comes from (issue 27).

Runs `specreplay replay` (the CLI, as a user would) at each rate against the
simulator in its own `specreplay serve` process, short requests (20 prompt
tokens, 4 output), constant arrivals, and while it runs samples every thread
of the replay process: CPU (/proc/<pid>/task/<tid>/stat, utime + stime) and
time spent runnable but waiting for a CPU (/proc/<pid>/task/<tid>/schedstat,
second field), summed by thread name. Each rate runs with 1 and 2 engine
threads (tokio's TOKIO_WORKER_THREADS), with the point's requests built
whole before it starts (`--feeds whole`, replay's default for a trace that
fits, `run/feed.py`) or streamed from the Python thread while it runs
(`streamed`: what every point did before issue 27's change, forced by
setting `feed.WHOLE_MAX_BYTES` to 0), and with each `--envs` variant (an
experiment's switches in the environment of a build that has them), all in
one run, interleaved, so the machine's load falls on every variant alike
(`--envs SPECREPLAY_REALTIME=1 ""`: the engine's threads real-time, where
permitted, against normal). Also records the pacing thread's own account
(its scheduling policy, each sleep's wake-up overshoot, time spun:
SPECREPLAY_PACER_STATS) and the `specreplay serve` process's CPU per request.
Records /proc/loadavg before and after: on a shared machine the figures are
only comparable within one run.

    .venv/bin/python bench/send_lag_profile.py --rates 1000 2000 3000 4000 5000 --seconds 3 --envs SPECREPLAY_REALTIME=1 ""

Writes bench/results/send-lag-profile-<time>.json and prints a table.
Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench_util import provenance
from machine_stalls import MachineStalls, attribute

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SPECREPLAY = [sys.executable, "-m", "specreplay"]
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


#: Per thread id: (name, CPU s, run-queue wait s, timeslices, nice, minor page faults).
Sample = dict[int, tuple[str, float, float, int, int, int]]


def thread_sample(pid: int) -> Sample:
    """Every thread of `pid` now (`Sample`)."""
    out: Sample = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            sched = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
        out[int(tid)] = (name, cpu, int(sched[1]) / 1e9, int(sched[2]), int(fields[16]), int(fields[7]))
    return out


def by_name(first: Sample, last: Sample) -> dict[str, dict[str, float]]:
    """CPU, run-queue wait, timeslices and minor page faults between two
    samples, summed per thread name (a thread born between them counts from
    zero)."""
    names: dict[str, dict[str, float]] = {}
    for tid, (name, cpu, wait, slices, nice, faults) in last.items():
        name0, cpu0, wait0, slices0, _, faults0 = first.get(tid, (name, 0.0, 0.0, 0, nice, 0))
        row = names.setdefault(name, {"threads": 0, "cpu_s": 0.0, "wait_s": 0.0, "slices": 0, "nice": nice, "minor_faults": 0})
        row["nice"] = min(row["nice"], nice)
        row["threads"] += 1
        row["cpu_s"] += cpu - cpu0
        row["wait_s"] += wait - wait0
        row["slices"] += slices - slices0
        row["minor_faults"] += faults - faults0
    for row in names.values():
        row["wait_us_per_slice"] = 1e6 * row["wait_s"] / row["slices"] if row["slices"] else 0.0
    return dict(sorted(names.items(), key=lambda kv: -kv[1]["cpu_s"]))


#: The CLI with the streamed feed forced (the "without" of issue 27's change).
STREAMED = [sys.executable, "-c", "import runpy, specreplay.run.feed as f; f.WHOLE_MAX_BYTES = 0; runpy.run_module('specreplay', run_name='__main__', alter_sys=True)"]
#: The CLI with pandas imported before the first request (the "without" of
#: the start-up change that imports it after: does that import, during the
#: first point, cost send lag?).
PANDAS_FIRST = [sys.executable, "-c", "import pandas, runpy; runpy.run_module('specreplay', run_name='__main__', alter_sys=True)"]


def process_cpu_s(pid: int) -> float:
    """utime + stime of a whole process (every thread, living or gone)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def p99_under_us(counts: list[int]) -> int:
    """The upper edge of the log2 µs bucket holding the 99th percentile
    (bucket k holds [2^(k-1), 2^k) µs)."""
    total, cum = sum(counts) or 1, 0
    for k, c in enumerate(counts):
        cum += c
        if cum >= 0.99 * total:
            return int(2**k)
    return int(2 ** (len(counts) - 1))


def pacer_stats(output: str) -> dict[str, Any]:
    """The pacing thread's own account (SPECREPLAY_PACER_STATS): its
    scheduling policy, sleeps, wake-up overshoot (log2 µs buckets) and time
    spent spinning; and each send's hand-over, where the build prints it:
    due time to `runtime.spawn` on the pacer, spawn to the unit's task first
    running on a worker."""
    stats: dict[str, Any] = {}
    for line in output.splitlines():
        if line.startswith("pacer-stats "):
            head, buckets = line.split(" late_log2us=")
            kv = dict(item.split("=", 1) for item in head.split()[1:])
            counts = json.loads(buckets)
            stats |= {"policy": kv["policy"], "sleeps": int(kv["sleeps"]), "late_max_us": int(kv["late_max_us"]),
                      "spun_s": int(kv["spun_ms"]) / 1e3, "late_log2us": counts, "late_p99_under_us": p99_under_us(counts)}  # fmt: skip
        elif line.startswith("handover-stats "):
            kv = dict(item.split("=", 1) for item in line.split(" ")[1:])
            due, run = json.loads(kv["due_to_spawn_log2us"]), json.loads(kv["spawn_to_run_log2us"])
            stats |= {"due_to_spawn_log2us": due, "due_to_spawn_p99_under_us": p99_under_us(due),
                      "spawn_to_run_log2us": run, "spawn_to_run_p99_under_us": p99_under_us(run),
                      "spawn_to_run_max_us": int(kv["spawn_to_run_max_us"])}  # fmt: skip
    return stats


def replay_once(trace: Path, url: str, rate: float, n: int, threads: int, feed: str, extra: str, out: Path, serve_pid: int) -> dict[str, Any]:
    env = {**os.environ, "TOKIO_WORKER_THREADS": str(threads), "SPECREPLAY_PACER_STATS": "1"}
    for kv in filter(None, extra.split(",")):
        name, value = kv.split("=", 1)
        env[name] = value
    launcher = {"streamed": STREAMED, "pandas-first": PANDAS_FIRST}.get(feed, SPECREPLAY)
    cmd = [*launcher, "replay", str(trace), "--url", url, "--model", "specreplay-sim", "--rate", f"{rate:g}",
           "--arrival", "constant", "--num-requests", str(n), "--no-metrics", "-o", str(out)]  # fmt: skip
    serve_cpu0 = process_cpu_s(serve_pid)
    first: Sample = {}
    last: Sample = {}
    with MachineStalls() as canary:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        while proc.poll() is None:
            sample = thread_sample(proc.pid)
            if sample:
                # The point's threads exist once the engine runs: start counting there.
                if not first and any(name.startswith("specreplay-disp") for name, *_ in sample.values()):
                    first = sample
                if first:
                    # Counters only grow: a thread's last sample stands after it exits.
                    last.update(sample)
            time.sleep(0.05)
    output = proc.stdout.read().decode() if proc.stdout else ""
    serve_cpu = process_cpu_s(serve_pid) - serve_cpu0
    import pyarrow.feather as feather

    table = feather.read_table(out, columns=["scheduled_us", "sent_us", "error_kind"])
    scheduled = np.asarray(table["scheduled_us"].to_numpy(), dtype=float)
    lag = np.asarray(table["sent_us"].to_numpy(zero_copy_only=False), dtype=float) - scheduled
    scheduled, lag = scheduled[~np.isnan(lag)], lag[~np.isnan(lag)]
    sent = np.asarray(table["sent_us"].to_numpy(zero_copy_only=False), dtype=float)
    span_s = (np.nanmax(sent) - np.nanmin(sent)) / 1e6 if len(lag) > 1 else float("nan")
    errors = int(sum(1 for e in table["error_kind"].to_pylist() if e is not None))
    return {
        "rate": rate,
        "threads": threads,
        "feed": feed,
        "env": extra,
        "requests": int(table.num_rows),
        "errors": errors,
        "sent_rate": (len(lag) - 1) / span_s if span_s == span_s and span_s > 0 else None,
        "lag_p50_us": float(np.percentile(lag, 50)),
        "lag_p99_us": float(np.percentile(lag, 99)),
        "lag_max_us": float(lag.max()),
        "client_saturated": "client_saturated" in output,
        "threads_profile": by_name(first, last) if first else {},
        "pacer": pacer_stats(output),
        # The canary's stalls (machine_stalls.py), and how many of the sends
        # late by > 1 ms (and > 200 µs, the 2,000/s target) were due in one.
        "machine": canary.result(),
        "late_sends": attribute(scheduled, lag, canary.stalls),
        "late_sends_200us": attribute(scheduled, lag, canary.stalls, late_us=200.0, recovery_us=1000.0),
        "serve_cpu_s": serve_cpu,
        "serve_cpu_us_per_request": 1e6 * serve_cpu / max(int(table.num_rows), 1),
        "returncode": proc.returncode,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", type=float, nargs="+", default=[1000, 2000, 4000, 5000])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--feeds", nargs="+", choices=["whole", "streamed", "pandas-first"], default=["whole"], help="requests built whole before the point (the default) or streamed while it runs; pandas-first: whole, with pandas imported before the first request")
    parser.add_argument("--envs", nargs="+", default=[""], help="variants' extra environment, each NAME=VALUE[,NAME=VALUE] ('' for none): an experiment's switches")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    serve = subprocess.Popen([*SPECREPLAY, "serve", "--port", str(port), "--ttft-ms", "5", "--tpot-ms", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    results: list[dict[str, Any]] = []
    started = {"loadavg": loadavg(), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        with tempfile.TemporaryDirectory() as tmp:
            for rate in args.rates:
                n = int(rate * args.seconds)
                trace = Path(tmp) / f"short-{rate:g}.jsonl"
                subprocess.run([*SPECREPLAY, "synth", "-o", str(trace), "--num-requests", str(n), "--rate", f"{rate:g}",
                                "--input-len", "20", "--output-len", "4", "--arrival", "constant"], check=True, capture_output=True)  # fmt: skip
                for rep in range(args.repeats):
                    for threads in args.threads:
                        for feed, extra in [(feed, extra) for feed in args.feeds for extra in args.envs]:
                            row = replay_once(trace, url, rate, n, threads, feed, extra, Path(tmp) / "out.arrow", serve.pid)
                            row["repeat"] = rep
                            row["loadavg_after"] = loadavg()
                            results.append(row)
                            print(
                                f"rate {rate:>6g}  {feed:<8}  threads {threads}  sent {row['sent_rate'] or 0:8.0f}/s  "
                                f"lag p50 {row['lag_p50_us']:8.0f}  p99 {row['lag_p99_us']:8.0f}  max {row['lag_max_us']:8.0f} µs  "
                                f"errors {row['errors']}  {extra}  {'SATURATED' if row['client_saturated'] else ''}  load {row['loadavg_after']}",
                                flush=True,
                            )
                            pacer = row["pacer"]
                            if pacer:
                                print(f"      pacer {pacer['policy']}: wake-up overshoot p99 < {pacer['late_p99_under_us']} µs, max {pacer['late_max_us']} µs, spun {pacer['spun_s']:.2f} s; "
                                      f"serve CPU {row['serve_cpu_s']:.2f} s ({row['serve_cpu_us_per_request']:.0f} µs/request)")  # fmt: skip
                                m, late, late200 = row["machine"], row["late_sends"], row["late_sends_200us"]
                                print(f"      machine ({m['policy']} canary): {m['stall_count']} stalls >= 0.25 ms, {m['stalled_ms']:.1f} ms in all ({m['queued_ms']:.1f} on the guest's run queue), worst {m['worst_us'] / 1e3:.1f} ms, steal {m['steal_ms']:.0f} ms; "
                                      f"sends late > 1 ms: {late['late']}, {late['late_in_stalls']} due in a stall; > 200 µs: {late200['late']}, {late200['late_in_stalls']}")  # fmt: skip
                                if "spawn_to_run_log2us" in pacer:
                                    print(f"      hand-over: due to spawn p99 < {pacer['due_to_spawn_p99_under_us']} µs; spawn to the task running p99 < "
                                          f"{pacer['spawn_to_run_p99_under_us']} µs, max {pacer['spawn_to_run_max_us']} µs")  # fmt: skip
                            for name, t in list(row["threads_profile"].items())[:6]:
                                print(f"      {name:<18} x{t['threads']:<2.0f} nice {t['nice']:>3.0f}  cpu {t['cpu_s']:6.2f} s  runqueue wait {t['wait_s']:6.3f} s  ({t['wait_us_per_slice']:6.1f} µs/slice)")
    finally:
        serve.terminate()
        serve.wait(timeout=10)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    doc = {"provenance": provenance(), "command": " ".join(sys.argv), "commit": commit, "started": started, "loadavg_end": loadavg(), "results": results}
    out_dir = HERE / "results"
    out_dir.mkdir(exist_ok=True)
    path = out_dir / f"send-lag-profile-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(doc, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
