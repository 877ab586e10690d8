"""A high rate of short requests against the embedded simulator, with no
`--max-concurrency`: does the client keep the schedule from the first
request on? Each setting runs in a fresh `specreplay replay` process (the
engine's scheduling policy is the process's), the settings alternating, so
that the with/without pairs share the machine's state:

- `default`: what a user gets (connections for 250 ms of arrivals opened
  before the clock, real-time threads where permitted);
- `--no-preconnect`: the warm-up opens its connections during the run;
- `--no-realtime`: the normal scheduling policy;
- both.

Per run: send lag (`sent_us - scheduled_us`) p50 / p99 over the run, p99 in
the first 0.25 s and after it, how many requests opened a connection during
the run, and the findings the run stored; beside each run the machine's own
stalls, as a real-time canary saw them (`machine_stalls.py`), and how many of
the sends late by > 1 ms were due in one, and the same against the spans the
engine itself saw (its pacer's held waits and its CPU watches,
`specreplay.scheduling`'s `pacer_held_us` and `cpu_held_us`). Asserts nothing.

    .venv/bin/python bench/open_loop_warmup.py                         # 4,000/s, 3 s, 3 repeats: about 1 min
    .venv/bin/python bench/open_loop_warmup.py --rate 2000 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

import specreplay

from bench_util import write_result
from machine_stalls import MachineStalls, attribute

HERE = Path(__file__).resolve().parent
SPECREPLAY = Path(sys.executable).with_name("specreplay")
SETTINGS = {
    "default": [],
    "no-preconnect": ["--no-preconnect"],
    "no-realtime": ["--no-realtime"],
    "neither": ["--no-preconnect", "--no-realtime"],
}
WARMUP_S = 0.25


def figures(path: Path, stalls: list[list[int]]) -> dict[str, Any]:
    df = specreplay.load(path)
    lag = (df["sent_us"] - df["scheduled_us"]).to_numpy(dtype=float)
    since = (df["scheduled_us"] - df["scheduled_us"].min()).to_numpy(dtype=float) / 1e6
    early, late = lag[since < WARMUP_S], lag[since >= WARMUP_S]
    validity = json.loads(df.attrs.get("specreplay.validity", "[]"))
    (scheduling,) = json.loads(df.attrs.get("specreplay.scheduling", "[{}]"))
    # The engine's own view of the machine's stalls (the pacer's held waits
    # and every CPU's watch), in the canary's form: [wall µs, length µs].
    engine_spans = sorted([start, end - start] for start, end in [*scheduling.get("pacer_held_us", []), *scheduling.get("cpu_held_us", [])])
    return {
        "requests": len(df),
        "lag_p50_us": round(float(np.percentile(lag, 50)), 1),
        "lag_p99_us": round(float(np.percentile(lag, 99)), 1),
        "warmup_lag_p99_us": round(float(np.percentile(early, 99)), 1) if early.size else None,
        "after_warmup_lag_p99_us": round(float(np.percentile(late, 99)), 1) if late.size else None,
        "connected_during_run": int(df["connect_us"].notna().sum()),
        "findings": sorted({f["code"] for f in validity if isinstance(f, dict) and "code" in f}),
        "late_sends": attribute(df["scheduled_us"].to_numpy(dtype=float), lag, stalls),
        "engine_spans": {"pacer": len(scheduling.get("pacer_held_us", [])), "cpu": len(scheduling.get("cpu_held_us", [])), "cpu_watched": scheduling.get("cpu_watched")},
        "late_sends_in_engine_spans": attribute(df["scheduled_us"].to_numpy(dtype=float), lag, engine_spans)["late_in_stalls"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=4000.0)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    args = parser.parse_args()
    n = int(args.rate * args.seconds)
    env = {k: v for k, v in os.environ.items() if k != "SPECREPLAY_REALTIME"}
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "short.jsonl"
        subprocess.run([str(SPECREPLAY), "synth", "-o", str(trace), "--num-requests", str(n), "--rate", str(args.rate),
                        "--input-len", "20", "--output-len", "4", "--arrival", "constant"], check=True, capture_output=True, env=env)  # fmt: skip
        for repeat in range(args.repeats):
            for name in args.settings:
                out = Path(tmp) / f"{name}-{repeat}.arrow"
                cmd = [str(SPECREPLAY), "replay", str(trace), "--rate", str(args.rate), "--arrival", "constant",
                       "--num-requests", str(n), "--no-metrics", "-o", str(out), *SETTINGS[name]]  # fmt: skip
                with MachineStalls() as canary:
                    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
                run = {"setting": name, "repeat": repeat, "exit": done.returncode, "machine": canary.result()}
                if out.exists():
                    run |= figures(out, canary.stalls)
                runs.append(run)
                print(json.dumps(run))
    print(f"wrote {write_result('open-loop-warmup', {'rate': args.rate, 'seconds': args.seconds, 'runs': runs})}")


if __name__ == "__main__":
    main()
