"""Whole-process CPU and peak RSS of specreplay next to vLLM's Rust
`vllm-bench`, side by side against one `specreplay serve` (issue 27,
section 4): closed loop at each concurrency, every request 16 reasoning +
48 answer tokens, one token per chunk every 10 ms, the two clients in turn.

vllm-bench is not part of this repository: build it yourself and pass its
binary (`git clone https://github.com/vllm-project/vllm-bench; cargo build
--release`). Its prompts come from its `random` dataset with the built-in
`r50k_base` tokenizer (no download; `cl100k_base` panicked in tiktoken-rs on its random ids); specreplay's from `specreplay synth`
(20-token prompts, 64 output tokens).

    .venv/bin/python bench/vllm_bench_cost.py --vllm-bench /path/to/vllm-bench --concurrency 256 1024

specreplay runs as replay does by default (its requests built whole
before the point starts, `run/feed.py`) and, with `--feeds whole streamed`,
also with the feed streamed from the Python thread while the point runs
(what every point did before issue 27's change: `feed.WHOLE_MAX_BYTES` set
to 0). `--fixed` adds each client's fixed cost first: one request at
concurrency 1, so that the per-request cost can be told from the start-up.

`--also NAME=DIR` runs specreplay a second time as NAME with DIR first on
PYTHONPATH (a `specreplay` package there, its `_core` extension copied in:
another commit's Python against the same build, in the same sitting).
`--phases` runs each specreplay client through `bench/cost_phases.py` and
records where its CPU and memory went, phase by phase (start-up, the point,
the analysis, the printing, the file, the exit).

Measured with `/usr/bin/time -f`: user + system CPU seconds and maximum RSS
of each client process (children included for specreplay's CLI: none).
Writes bench/results/vllm-bench-cost-<time>.json; asserts nothing.
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

from bench_util import cached_bytecode, provenance

HERE = Path(__file__).resolve().parent
SPECREPLAY = [sys.executable, "-m", "specreplay"]
#: The CLI with the streamed feed forced (the "without" of issue 27's change).
STREAMED = [sys.executable, "-c", "import runpy, specreplay.run.feed as f; f.WHOLE_MAX_BYTES = 0; runpy.run_module('specreplay', run_name='__main__', alter_sys=True)"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def timed(cmd: list[str], timeout_s: float, env: dict[str, str]) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("r", suffix=".time") as out, tempfile.NamedTemporaryFile("r", suffix=".json") as phases:
        env = {**env, "SPECREPLAY_PHASES": phases.name}
        proc = subprocess.run(["/usr/bin/time", "-o", out.name, "-f", "%U %S %M %e", *cmd], capture_output=True, text=True, timeout=timeout_s, env=env)
        user, system, rss_kib, wall = Path(out.name).read_text().split()[-4:]
        phase_text = Path(phases.name).read_text()
    row: dict[str, Any] = {
        "cpu_s": float(user) + float(system),
        "user_s": float(user),
        "sys_s": float(system),
        "rss_mib": int(rss_kib) / 1024,
        "wall_s": float(wall),
        "returncode": proc.returncode,
        "tail": (proc.stdout + proc.stderr)[-600:],
    }
    if phase_text:
        row["phases"] = json.loads(phase_text)
        # What the process cost after the last phase: its exit.
        row["phases"].append({"phase": "exit", "cpu_s": round(row["cpu_s"] - sum(p["cpu_s"] for p in row["phases"]), 4)})
        # cost_phases resets the peak at each phase: the process' is the largest.
        row["rss_mib"] = max(p.get("peak_mib", 0.0) for p in row["phases"])
    return row


def phase_line(row: dict[str, Any]) -> str:
    return "  ".join(f"{p['phase']} {p['cpu_s']:.2f} s" + (f"/{p['peak_mib']:.0f} MiB" if "peak_mib" in p else "") for p in row.get("phases", []))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vllm-bench", required=True, help="the vllm-bench binary")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--requests-per-stream", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--feeds", nargs="+", choices=["whole", "streamed"], default=["whole"], help="specreplay's feed (see above)")
    parser.add_argument("--fixed", action="store_true", help="measure each client's fixed cost first (1 request, concurrency 1)")
    parser.add_argument("--also", nargs="*", default=[], metavar="NAME=DIR", help="specreplay again with DIR first on PYTHONPATH (see above)")
    parser.add_argument("--phases", action="store_true", help="record each specreplay run's phases (bench/cost_phases.py)")
    args = parser.parse_args()
    also = dict(a.split("=", 1) for a in args.also)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    serve = subprocess.Popen(
        [*SPECREPLAY, "serve", "--port", str(port), "--ttft-ms", "10", "--tpot-ms", "10", "--prefill-us-per-token", "0",
         "--reasoning-tokens", "16", "16", "--content-tokens", "48", "48", "--fixed-length-reasoning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    rows: list[dict[str, Any]] = []
    started = {"loadavg": Path("/proc/loadavg").read_text().strip(), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        with tempfile.TemporaryDirectory() as tmp:
            # specreplay as installed from its wheel: its bytecode compiled once, not in every run.
            base_env = cached_bytecode(dict(os.environ), Path(tmp) / "pycache")
            for conc in ([1] if args.fixed else []) + args.concurrency:
                n = 1 if conc == 1 and args.fixed else conc * args.requests_per_stream
                trace = Path(tmp) / f"t{conc}.jsonl"
                subprocess.run([*SPECREPLAY, "synth", "-o", str(trace), "--num-requests", str(n), "--input-len", "20", "--output-len", "64"], check=True, capture_output=True)
                for rep in range(args.repeats):
                    replay = ["replay", str(trace), "--url", f"{url}/v1", "--model", "specreplay-sim", "--concurrency", str(conc),
                              "--no-metrics", "-o", str(Path(tmp) / "out.arrow")]
                    run = [sys.executable, str(HERE / "cost_phases.py")] if args.phases else SPECREPLAY
                    streamed = STREAMED  # the feed forced before the CLI is imported: no phases
                    clients = {
                        **{("specreplay" if feed == "whole" else "specreplay-streamed"): [*(run if feed == "whole" else streamed), *replay] for feed in args.feeds},
                        **{name: [*run, *replay] for name in also},
                        "vllm-bench": [args.vllm_bench, "--backend", "openai-chat", "--base-url", url, "--endpoint", "/v1/chat/completions",
                                       "--model", "specreplay-sim", "--tokenizer", "r50k_base", "--dataset-name", "random",
                                       "--random-input-len", "20", "--random-output-len", "64", "--ignore-eos", "--num-prompts", str(n),
                                       "--max-concurrency", str(conc), "--disable-tqdm", "--num-warmups", "0"],
                    }  # fmt: skip
                    envs = {name: base_env | {"PYTHONPATH": os.pathsep.join([d, *filter(None, [os.environ.get("PYTHONPATH")])])} for name, d in also.items()}
                    for name, cmd in clients.items():
                        row = {"client": name, "concurrency": conc, "requests": n, "repeat": rep, **timed(cmd, 600, envs.get(name, base_env))}
                        row["loadavg_after"] = Path("/proc/loadavg").read_text().strip()
                        rows.append(row)
                        print(f"{name:<19} c={conc:<5} n={n:<5} cpu {row['cpu_s']:6.2f} s  rss {row['rss_mib']:6.1f} MiB  wall {row['wall_s']:6.2f} s  rc {row['returncode']}  load {row['loadavg_after']}", flush=True)
                        if row.get("phases"):
                            print(f"{'':<19} {phase_line(row)}", flush=True)
                        if row["returncode"] != 0:
                            print(row["tail"])
    finally:
        serve.terminate()
        serve.wait(timeout=10)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE.parent, capture_output=True, text=True).stdout.strip()
    out = HERE / "results" / f"vllm-bench-cost-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"provenance": provenance(), "command": " ".join(sys.argv), "commit": commit, "started": started, "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
