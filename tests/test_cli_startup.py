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
#: first request batch is asked for): what the replay paid for before its
#: first request. bench/startup.py measures the CPU of the same path.
REPLAY_PROBE = """
import json, sys
from specreplay.run import replay
start = replay.local_start
seen = {}
def noting(*args, **kwargs):
    run = start(*args, **kwargs)
    seen.setdefault("modules", sorted(sys.modules))
    return run
replay.local_start = noting  # what a local run starts its points with (Run.start_point)
from specreplay.cli import main
try:
    main(args=sys.argv[1:], prog_name="specreplay")
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "before": seen["modules"], "after": sorted(sys.modules)}))
"""


def test_a_replay_loads_its_analysis_before_its_first_point_not_during_it(tmp_path: Path) -> None:
    trace = Path(__file__).resolve().parents[1] / "traces" / "reasoning-prompts.jsonl"
    out = subprocess.run([sys.executable, "-c", REPLAY_PROBE, "replay", str(trace), "--concurrency", "1", "--num-requests", "2",
                          "--max-tokens", "8", "-o", str(tmp_path / "r.arrow")],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    before, after = set(seen["before"]), set(seen["after"])
    assert "specreplay._core" in before and "pyarrow" in before  # the probe ran at the engine's start
    # Imported while the point runs, pandas would compete with the pacer for
    # the cores (docs/benchmarks.md, "Start-up"): it comes before, with the
    # analysis, and nothing of it is left to import during the point.
    assert "pandas" in before and "specreplay.analysis.analyse" in before
    assert {m for m in after - before if m.split(".")[0] in ("pandas", "numpy", "pyarrow")} <= {"pyarrow.feather"}
    assert seen["code"] in (None, 0) and "2 requests: 2 ok" in out.stdout


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
