"""Runs one of the Rust benches (the `specreplay-core` examples under bench/)
and writes its console to bench/results/<name>-<time>.json with the
provenance every bench records (commit, dirty flag, load, command).

The Rust benches print their figures; this is what makes them result files
like the Python benches' (`bench_util.write_result`), without a second
provenance writer in Rust.

    .venv/bin/python bench/rust_bench.py sim_media
    .venv/bin/python bench/rust_bench.py prompt_synthesis -- /tmp/mc.jsonl 5
    .venv/bin/python bench/rust_bench.py predict_speed -- 1000 3600
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from bench_util import HERE, write_result

EXAMPLES = ("sim_capacity", "sim_media", "prompt_synthesis", "predict_speed", "engine_load")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("example", choices=EXAMPLES)
    parser.add_argument("args", nargs="*", help="the example's own arguments (after --)")
    opts = parser.parse_args()
    command = ["cargo", "run", "--release", "-q", "-p", "specreplay-core", "--example", opts.example, "--", *opts.args]
    started = time.monotonic()
    done = subprocess.run(command, cwd=HERE.parent, capture_output=True, text=True)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    path = write_result(
        opts.example.replace("_", "-"),
        {"example_command": " ".join(command), "returncode": done.returncode,
         "wall_s": round(time.monotonic() - started, 3), "console": done.stdout.splitlines()},
    )
    print(f"wrote {path}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
