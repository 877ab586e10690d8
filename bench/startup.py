"""What specreplay costs before it does anything: `specreplay --help` (wall
time and peak RSS of the process) and the fixed CPU of a replay (user + system
CPU of a whole `specreplay replay` process that sends one request of one
token to the embedded simulator: imports, trace scan, preflight, simulator
start, results file), and its CPU up to the moment the engine starts the
first point (after the point's opening metrics scrape). Each run is a fresh process; medians of --runs.
A replay imports its analysis (pandas) after its first point
(`run/replay.py`, "The analysis"): "before the first send" leaves it out,
"in all" has it.

Bytecode is cached (`bench_util.cached_bytecode`) as it is for an installed
wheel, whose modules pip compiles at install, even where the shell sets
PYTHONDONTWRITEBYTECODE (this machine's does).
`--no-bytecode-cache` measures the way earlier figures were taken.

    .venv/bin/python bench/startup.py                 # this tree
    .venv/bin/python bench/startup.py --pythonpath /tmp/base/python --tag before
    .venv/bin/python bench/startup.py --env OPENBLAS_NUM_THREADS=2 --tag blas-pool   # the CLI's BLAS default undone

Writes bench/results/startup-<time>.json (bench_util.write_result). Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_util import HERE, cached_bytecode, write_result

TRACE = HERE.parent / "traces" / "reasoning-prompts.jsonl"


#: Runs the CLI, printing the process's CPU once the first sweep point's
#: opening scrape of the server's metrics is done: the engine starts sending
#: right after it (`replay._run_point`).
DRIVER = """
import resource, sys
from specreplay.cli import limit_blas_threads, main
limit_blas_threads()  # what main() does first
def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
def cpu_mark(name):
    u = resource.getrusage(resource.RUSAGE_SELF)
    sys.stderr.write(f"\\nBENCH_CPU {name} {u.ru_utime + u.ru_stime} {rss_mib()}\\n")
cpu_mark("interpreter")
# The stages' order is the CLI's own: the command's module (numpy, pyarrow and
# rich first, each on its own, which the command would import anyway), then
# the point (a package that loads its analysis, pandas, before the first
# point, as before 2026-12-03, pays for it in that stage; `pandas_at_first_point`
# says which).
import numpy
cpu_mark("numpy_imported")
import pyarrow
cpu_mark("pyarrow_imported")
import rich.console
cpu_mark("rich_imported")
import specreplay.commands.replay
cpu_mark("command_imported")
from specreplay.servermetrics import scrape
start_point = scrape.Scraper.start_point
def after_start_scrape(self, *args, **kwargs):
    out = start_point(self, *args, **kwargs)
    if not getattr(scrape, "_bench_seen", False):
        scrape._bench_seen = True
        cpu_mark("first_point")
        sys.stderr.write(f"\\nBENCH_PANDAS {int('pandas' in sys.modules)}\\n")
    return out
scrape.Scraper.start_point = after_start_scrape
main(args=sys.argv[1:], prog_name="specreplay")
"""


def measure(args: list[str], env: dict[str, str], cwd: str) -> dict[str, float]:
    start = time.perf_counter()
    launch = ["-c", DRIVER] if args[0] == "replay" else ["-m", "specreplay"]
    proc = subprocess.Popen([sys.executable, *launch, *args], env=env, cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"specreplay {' '.join(args)} failed: {err[-2000:]!r}")
    figures = {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "user_s": usage.ru_utime,
               "sys_s": usage.ru_stime, "max_rss_mib": usage.ru_maxrss / 1024}
    marks = {line.split()[1]: line.split()[2:4] for line in err.splitlines() if line.startswith("BENCH_CPU ")}
    if "first_point" in marks:
        figures["cpu_before_first_send_s"] = float(marks["first_point"][0])
        figures["rss_before_first_send_mib"] = float(marks["first_point"][1])
        # Where it went: the process's CPU and RSS at each stage's end.
        figures |= {f"cpu_at_{name}_s": float(cpu) for name, (cpu, _rss) in marks.items() if name != "first_point"}
        figures |= {f"rss_at_{name}_mib": float(rss) for name, (_cpu, rss) in marks.items() if name != "first_point"}
        figures["pandas_at_first_point"] = float(any(line == "BENCH_PANDAS 1" for line in err.splitlines()))
    return figures


def medians(samples: list[dict[str, float]]) -> dict[str, Any]:
    return {key: statistics.median(s[key] for s in samples) for key in samples[0]} | {"runs": len(samples)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--pythonpath", help="measure the specreplay package in this directory instead")
    parser.add_argument("--tag", default="head")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="set in every measured process (repeatable)")
    parser.add_argument("--no-bytecode-cache", action="store_true", help="compile from source in every process, as PYTHONDONTWRITEBYTECODE does")
    opts = parser.parse_args()
    env = {**os.environ, **dict(item.split("=", 1) for item in opts.env)}
    if opts.pythonpath:
        env["PYTHONPATH"] = opts.pythonpath
    with tempfile.TemporaryDirectory() as tmp:
        if opts.no_bytecode_cache:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        else:
            env = cached_bytecode(env, Path(tmp) / "pycache")
        measure(["--help"], env, tmp)  # warm the page cache
        help_runs = [measure(["--help"], env, tmp) for _ in range(opts.runs)]
        replay_args = ["replay", str(TRACE), "--concurrency", "1", "--num-requests", "1", "--max-tokens", "1", "-o", "r.arrow"]
        measure(replay_args, env, tmp)
        replay_runs = [measure(replay_args, env, tmp) for _ in range(max(3, opts.runs // 2))]
    figures = {"tag": opts.tag, "pythonpath": opts.pythonpath, "env": opts.env, "bytecode_cache": not opts.no_bytecode_cache, "help": medians(help_runs), "replay_one_request": medians(replay_runs),
               "help_samples": help_runs, "replay_samples": replay_runs}
    path = write_result(f"startup-{opts.tag}", figures)
    h, r = figures["help"], figures["replay_one_request"]
    print(f"--help: {h['wall_s'] * 1000:.0f} ms wall, {h['cpu_s'] * 1000:.0f} ms CPU, {h['max_rss_mib']:.1f} MiB peak RSS")
    print(f"replay of one 1-token request: {r['cpu_before_first_send_s'] * 1000:.0f} ms CPU before the first send, "
          f"{r['cpu_s'] * 1000:.0f} ms CPU in all, {r['wall_s'] * 1000:.0f} ms wall, {r['max_rss_mib']:.1f} MiB")
    stages = [("the interpreter's start", "interpreter"), ("numpy", "numpy_imported"), ("pyarrow", "pyarrow_imported"),
              ("rich", "rich_imported"), ("the rest of the replay command's imports", "command_imported")]
    print("  CPU and RSS by the end of: " + ", ".join(
        f"{label} {r[f'cpu_at_{key}_s'] * 1000:.0f} ms {r[f'rss_at_{key}_mib']:.0f} MiB" for label, key in stages)
        + f", the first point's start {r['cpu_before_first_send_s'] * 1000:.0f} ms {r['rss_before_first_send_mib']:.0f} MiB,"
        f" the process {r['cpu_s'] * 1000:.0f} ms (peak {r['max_rss_mib']:.0f} MiB);"
        f" pandas imported before the first send: {'yes' if r['pandas_at_first_point'] else 'no'}")
    print(f"wrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")


if __name__ == "__main__":
    main()
