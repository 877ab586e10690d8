"""What every measurement of `client_bench.py` shares: the simulator in its own
process, the bench's prompts, clocks mapped through CLOCK_MONOTONIC, the
process's CPU and memory, percentiles."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
N_PROMPTS = 64
# The reference Rust client (`bench/reference_client.rs`), built by `make bench`.
REFERENCE_CLIENT = HERE.parent / "target" / "release" / "examples" / "reference_client"


def payloads(n: int = N_PROMPTS, max_tokens: int = 4096) -> list[dict[str, Any]]:
    """Distinct prompts, so the simulator draws different lengths (the same
    bodies as `process_stats::chat_body` in the Rust benches)."""
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


def clock_offset_us(read_us: Callable[[], float]) -> float:
    """`now_us() − read_us()` in this process, from the tightest of 200 bracketed reads."""
    from specreplay import _core

    best_width, best = float("inf"), 0.0
    for _ in range(200):
        a = read_us()
        n = _core.now_us()
        b = read_us()
        if b - a < best_width:
            best_width, best = b - a, n - (a + b) / 2
    return best


def mono_offset_us() -> float:
    """`now_us() − CLOCK_MONOTONIC µs` in this process."""
    return clock_offset_us(lambda: time.monotonic_ns() / 1000)


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


def process_cpu() -> tuple[float, float]:
    """User and system CPU seconds of this process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


def cpu_figures(user_s: float, sys_s: float, chunks: int) -> dict[str, float]:
    """CPU seconds and µs per chunk, in total and split user / system."""
    per = 1e6 / max(chunks, 1)
    return {
        "cpu_s": user_s + sys_s, "user_s": user_s, "sys_s": sys_s,
        "cpu_us_per_chunk": (user_s + sys_s) * per,
        "user_us_per_chunk": user_s * per, "sys_us_per_chunk": sys_s * per,
    }


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def mem_result(n: int, rss0: int, samples: list[int], in_flight: list[int]) -> dict[str, Any]:
    peak = max(samples) if samples else 0
    return {
        "streams": n, "rss_base_kib": rss0, "rss_in_flight_kib": peak,
        "in_flight_min": min(in_flight) if in_flight else 0,
        "kib_per_stream": (peak - rss0) / n,
    }


def normal_policy() -> None:
    """In the simulator's process before it starts: leave any real-time policy."""
    if os.sched_getscheduler(0) != os.SCHED_OTHER:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


class Sim:
    """The simulator, in a child process (see client_bench's docstring for its policy)."""

    def __init__(self, config: dict[str, Any], policy: str):
        config = {"send_timestamps": True, "seed": 1, **config}
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "client_bench.py"), "_sim", json.dumps(config)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            preexec_fn=normal_policy if policy == "normal" else None,
        )
        assert self.proc.stdout is not None
        hello = json.loads(self.proc.stdout.readline())
        self.url = hello["url"]
        # The simulator's stamps minus this, in CLOCK_MONOTONIC µs.
        self.mono_offset_us = hello["mono_offset_us"]
        # Add to a simulator stamp to get this process's clock.
        self.correction_us = mono_offset_us() - self.mono_offset_us

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


def run_reference(args: list[str], timeout_s: float) -> dict[str, Any]:
    """Runs the reference Rust client and returns the JSON line it prints."""
    if not REFERENCE_CLIENT.exists():
        raise RuntimeError(f"{REFERENCE_CLIENT} is missing: run `make bench` (it builds it), or "
                           "`cargo build --release -p specreplay-core --example reference_client`")
    proc = subprocess.run([str(REFERENCE_CLIENT), *args], capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"reference_client {' '.join(args)} exited {proc.returncode}: {proc.stderr[-1000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


RESULTS = HERE / "results"


def provenance() -> dict[str, Any]:
    """What a figure was measured at and under: the commit (and whether the
    tree had uncommitted changes), the machine (the sessions' boxes are not
    all alike: the same code measured on another CPU model is another
    figure), its load, the command."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "loadavg": list(os.getloadavg()),
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model(),
        # SCHED_FIFO when run under `chrt -f N` (then the load does not queue it).
        "policy": {os.SCHED_OTHER: "normal", os.SCHED_FIFO: "fifo", os.SCHED_RR: "rr"}.get(os.sched_getscheduler(0), "other"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def cpu_model() -> str:
    """`/proc/cpuinfo`'s model name ("" where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return ""


def cached_bytecode(env: dict[str, str], directory: Path) -> dict[str, str]:
    """`env` as an installed wheel runs: bytecode cached, in `directory`
    (PYTHONPYCACHEPREFIX), even where the shell sets PYTHONDONTWRITEBYTECODE
    (this machine's does). pip compiles a wheel's modules at install; without
    this, every measured process compiles specreplay's from source again,
    about 0.35 s of CPU here. The cache is filled before it returns, by
    importing what a replay imports."""
    env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPYCACHEPREFIX": str(directory)}
    subprocess.run([sys.executable, "-c", "import specreplay.commands.replay, specreplay.analysis.analyse, specreplay.cli"], env=env, check=True)
    return env


def write_result(name: str, figures: dict[str, Any], directory: Path = RESULTS) -> Path:
    """Writes bench/results/<name>-<time>.json: `figures` under "results",
    with `provenance()`, and returns its path. Every bench writes through here."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"provenance": provenance(), "results": figures}, indent=1) + "\n")
    return path
