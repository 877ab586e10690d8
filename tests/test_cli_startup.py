"""`specreplay --help` imports neither the extension nor pandas, pyarrow or
numpy (the command modules are imported when a command is used: cli.COMMANDS).
Its time is measured by bench/startup.py, not here."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from pathlib import Path

import click
import pytest

from specreplay.cli import COMMANDS, cli

HEAVY = ("pandas", "pyarrow", "numpy", "rich", "specreplay._core", "specreplay.commands")


def modules_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nimport json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY or any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize("args", [["--help"], [], ["--version"]], ids=["help", "bare", "version"])
def test_the_top_level_help_imports_nothing_heavy(args: list[str]) -> None:
    code = ("from specreplay.cli import cli\n"
            f"try:\n    cli({args!r}, prog_name='specreplay')\nexcept SystemExit:\n    pass")
    loaded = modules_after(code)
    assert "specreplay.cli" in loaded
    assert heavy(loaded) == []


def test_a_command_still_imports_what_it_needs() -> None:
    # The check above can fail: a command's own help does load its module.
    code = ("from specreplay.cli import cli\n"
            "try:\n    cli(['replay', '--help'], prog_name='specreplay')\nexcept SystemExit:\n    pass")
    loaded = modules_after(code)
    assert "specreplay.commands.replay" in loaded and "pyarrow" in loaded


def test_each_listed_help_line_is_the_commands_own() -> None:
    ctx = click.Context(cli)
    for name, (_module, _attribute, text) in COMMANDS.items():
        command = cli.get_command(ctx, name)
        assert command is not None and command.name == name
        assert text == command.get_short_help_str(limit=10**6), name
    assert cli.get_command(ctx, "nope") is None


def test_the_package_api_is_still_there_and_replay_is_the_function() -> None:
    import specreplay
    import specreplay.run.replay  # the submodule does not take the function's name

    assert callable(specreplay.replay) and specreplay.replay.__module__ == "specreplay.run.replay"
    assert specreplay.load.__name__ == "load" and isinstance(specreplay.__version__, str)
    with pytest.raises(AttributeError):
        specreplay.nope  # noqa: B018


#: Runs `specreplay replay` in this process, noting the modules loaded when
#: the first point's engine starts (after the opening metrics scrape and the
#: first request batch is asked for: what the replay paid for before its
#: first request; bench/startup.py measures the CPU of the same path) and
#: when the engine has returned the point's last row (what was imported
#: while the point ran).
REPLAY_PROBE = """
import json, sys
from specreplay.run import feed, point, replay
if sys.argv[1] == "streamed":
    feed.WHOLE_MAX_BYTES = 0  # the requests read from the trace while the point runs
start, drain = replay.local_start, point._drain
seen = {}
def noting(*args, **kwargs):
    run = start(*args, **kwargs)
    seen.setdefault("start", sorted(sys.modules))
    return run
def drained(*args, **kwargs):
    out = drain(*args, **kwargs)
    seen.setdefault("drained", sorted(sys.modules))
    return out
replay.local_start = noting  # what a local run starts its points with (Run.start_point)
point._drain = drained
from specreplay.cli import main
try:
    main(args=sys.argv[2:], prog_name="specreplay")
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "start": seen["start"], "drained": seen["drained"], "after": sorted(sys.modules)}))
"""


@pytest.mark.parametrize("feed", ["whole", "streamed"])
def test_a_replay_imports_its_analysis_after_its_first_point_not_before_or_during_it(tmp_path: Path, feed: str) -> None:
    # Before the first request, pandas is a third of a replay's fixed CPU;
    # while a point runs, it competes with the pacer for the cores
    # (docs/benchmarks.md, "Start-up"). Several batches, the plain live
    # line drawn at every one, the server's metrics scraped during the point.
    trace = Path(__file__).resolve().parents[1] / "traces" / "reasoning-prompts.jsonl"
    out = subprocess.run([sys.executable, "-c", REPLAY_PROBE, feed, "replay", str(trace), "--concurrency", "4", "--num-requests", "24",
                          "--max-tokens", "16", "--status-interval", "0.01", "--metrics-interval", "0.05", "-o", str(tmp_path / "r.arrow")],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    start, drained, after = (set(seen[k]) for k in ("start", "drained", "after"))
    assert "specreplay._core" in start and "pyarrow" in start  # the probe ran at the engine's start
    # Before the first request: the requests around the run went through the
    # extension (`_core.fetch`: urllib, http.client, email and ssl cost 20 ms
    # of CPU at import), and the first metrics page only got a look (the
    # parser's package, 14 ms, comes with the point's pages after it).
    before = {m.split(".")[0] for m in start}
    assert not before & {"http", "email", "ssl", "prometheus_client"} and "urllib.request" not in start
    assert "pandas" not in drained and not any(m.startswith("specreplay.analysis.analyse") for m in drained)
    assert "pyarrow.compute" not in drained  # 35 ms of CPU at import: the live view reads Arrow buffers instead
    assert "sent " in out.stderr  # the live line was drawn during the point
    # and nothing else heavy was left to import while it ran
    assert {m for m in drained - start if m.split(".")[0] in ("numpy", "pyarrow")} == set()
    assert "pandas" in after and "specreplay.analysis.analyse" in after  # the summary still came
    assert seen["code"] in (None, 0) and "24 requests: 24 ok" in out.stdout


#: The same probe for the Python API (no CLI: nothing defers pandas).
API_PROBE = REPLAY_PROBE.split("from specreplay.cli import main")[0] + """
import specreplay
rows = specreplay.replay(sys.argv[2], concurrency=4, num_requests=24, max_tokens=16, metrics=False)
print(json.dumps({"rows": rows.num_rows, "start": seen["start"], "drained": seen["drained"]}))
"""


def test_the_python_api_imports_the_analysis_before_its_first_point_never_during_it() -> None:
    # Without the CLI's deferral, pyarrow may import pandas at any conversion
    # of Python values; run_replay then imports the analysis up front.
    trace = Path(__file__).resolve().parents[1] / "traces" / "reasoning-prompts.jsonl"
    out = subprocess.run([sys.executable, "-c", API_PROBE, "whole", str(trace)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    start, drained = set(seen["start"]), set(seen["drained"])
    assert seen["rows"] == 24
    assert "specreplay.analysis.analyse" in start and "pandas" in start
    assert {m for m in drained - start if m.split(".")[0] in ("numpy", "pyarrow", "pandas")} == set()


def test_pyarrow_converts_pandas_objects_as_usual_once_pandas_is_imported_after_defer() -> None:
    # In a fresh process: pandas_later.defer(), typed conversions (no
    # pandas), then pandas imported: pyarrow must know it (NaN -> null,
    # pd.NA -> null, a Series' dtype), exactly as without defer.
    probe = """
import json, sys, math
defer = sys.argv[1] == "1"
import pyarrow as pa
if defer:
    from specreplay.run import pandas_later
    assert pandas_later.defer()
    pa.scalar("x", pa.string()); pa.RecordBatch.from_pylist([{"a": 1.5}], schema=pa.schema([("a", pa.float64())]))
    assert "pandas" not in sys.modules
import pandas as pd
print(json.dumps([pa.array(pd.Series([1.0, math.nan])).null_count, pa.array([pd.NA, 1], from_pandas=True).null_count,
                  str(pa.array(pd.Categorical(["a", "b"])).type), str(pa.scalar(pd.Timestamp("2020-01-01")).type),
                  type(pa.table({"x": [1]}).to_pandas()).__name__, pa.array([1.0, None]).to_numpy(zero_copy_only=False).tolist()[0]]))
"""
    runs = [subprocess.run([sys.executable, "-c", probe, flag], capture_output=True, text=True, timeout=60) for flag in ("0", "1")]
    assert all(r.returncode == 0 for r in runs), [r.stderr[-1000:] for r in runs]
    plain, deferred = (json.loads(r.stdout) for r in runs)
    assert deferred == plain and plain[:2] == [1, 1]


BLAS_PROBE = """
import os, sys
from specreplay.cli import main
try:
    main(args=sys.argv[1:], prog_name="specreplay")
except SystemExit:
    pass
import numpy  # what the analysis imports first; OpenBLAS starts its pool here
print(len(os.listdir("/proc/self/task")), os.cpu_count())
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_the_cli_starts_no_blas_thread_pool_on_the_engines_cores() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", BLAS_PROBE, "--version"], capture_output=True, text=True, timeout=60, env=env, check=True)
    threads, cpus = (int(v) for v in out.stdout.split()[-2:])
    assert threads == 1, f"{threads} threads after numpy's import on {cpus} CPUs: OpenBLAS started its pool"
    # A user's own setting still wins (the pool is then started as asked).
    env["OPENBLAS_NUM_THREADS"] = "2"
    out = subprocess.run([sys.executable, "-c", BLAS_PROBE, "--version"], capture_output=True, text=True, timeout=60, env=env, check=True)
    if (os.cpu_count() or 1) >= 2:
        assert int(out.stdout.split()[-2]) == 2
