"""Where one `specreplay replay` process spends its CPU and memory, phase by
phase (issue 27, section 4): run as the CLI itself,

    .venv/bin/python bench/cost_phases.py replay TRACE --url … -o out.arrow

and it prints one line per phase on stderr (and, with SPECREPLAY_PHASES=FILE,
writes them there as JSON). The phases, in process order:

- `cli`: the interpreter, the imports of the CLI and the replay command, the
  options and the config read: everything up to `run_replay`;
- `analysis_import`: what `run_replay` does before the runs are prepared:
  the analysis (pandas) imported;
- `prepare`: each run prepared (`_prepare_run`: the trace scanned, the
  feed built, the plan);
- `reach`: the targets reached (`_reach_targets`: the model list, the
  usage and metrics probes against a server; the embedded simulator
  started);
- `start`: the rest before the first point's engine starts (the results
  file opened, the scraper);
- `point`: the engine's run and the Python drain, with the main (Python)
  thread's share of the CPU (`main_cpu_s`) apart from the engine threads';
- `analysis`: the end-of-point analysis (`FinishedPoint.runs`: the rows to
  pandas, the derived figures, the summary, the findings);
- `print`: the summary printed (the rest of `point_finished`);
- `write`: the final file written (`ResultsWriter.close`, the findings'
  reuse included);
- `exit`: from there to the process' end (what is left of the
  `/usr/bin/time` total: the bench computes it).

Each phase's `peak_mib` is the process' peak RSS within the phase (VmHWM,
reset at the phase's start through /proc/self/clear_refs), `rss_mib` its
RSS at the phase's end. The reset also resets what `/usr/bin/time` reports
as the process' peak: the largest phase peak is the process' peak here. The phases are found without touching the import
order: each module is patched just after it is first imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import resource
import sys
import time
from functools import cached_property, wraps
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

PHASES: list[dict[str, Any]] = []
_mark: dict[str, float] = {}


def _status(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _reset_peak() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _begin() -> None:
    _mark.update(cpu=_cpu(resource.RUSAGE_SELF), main=_cpu(resource.RUSAGE_THREAD), wall=time.monotonic())
    _reset_peak()


def _end(name: str) -> None:
    PHASES.append(
        {
            "phase": name,
            "cpu_s": round(_cpu(resource.RUSAGE_SELF) - _mark["cpu"], 4),
            "main_cpu_s": round(_cpu(resource.RUSAGE_THREAD) - _mark["main"], 4),
            "wall_s": round(time.monotonic() - _mark["wall"], 4),
            "rss_mib": round(_status("VmRSS"), 1),
            "peak_mib": round(_status("VmHWM"), 1),
        }
    )
    _begin()


def _phase(name: str, before: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Wraps a function as phase `name`; what ran since the last phase ends
    as `before` (when given) first."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            if before is not None:
                _end(before)
            else:
                _begin()
            try:
                return fn(*args, **kwargs)
            finally:
                _end(name)

        return inner

    return wrap


def _ends(before: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Wraps a function whose call ends the phase `before` (and begins the
    next, which a later boundary names)."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            _end(before)
            return fn(*args, **kwargs)

        return inner

    return wrap


def _patch_replay(m: ModuleType) -> None:
    m.run_replay = _ends("cli")(m.run_replay)
    m._prepare_run = _phase("prepare", before="analysis_import")(m._prepare_run)
    m._reach_targets = _phase("reach", before="between")(m._reach_targets)
    m.run_point = _phase("point", before="start")(m.run_point)


def _patch_plan(m: ModuleType) -> None:
    runs = m.FinishedPoint.runs
    patched = cached_property(_phase("analysis", before="between")(runs.func))
    patched.__set_name__(m.FinishedPoint, "runs")
    m.FinishedPoint.runs = patched


def _patch_files(m: ModuleType) -> None:
    m.ResultsWriter.close = _phase("write", before="between")(m.ResultsWriter.close)


def _patch_commands(m: ModuleType) -> None:
    for name, value in vars(m).items():
        if isinstance(value, type) and "point_finished" in vars(value):
            value.point_finished = _phase("print", before="between")(value.point_finished)


PATCHES = {
    "specreplay.run.replay": _patch_replay,
    "specreplay.run.plan": _patch_plan,
    "specreplay.results.files": _patch_files,
    "specreplay.commands.replay": _patch_commands,
}


class _AfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        patch = PATCHES.get(name)
        if patch is None:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def main() -> None:
    import importlib.util  # noqa: F401  (find_spec above)

    _mark.update(cpu=0.0, main=0.0, wall=time.monotonic())
    sys.meta_path.insert(0, _AfterImport())
    sys.argv = ["specreplay", *sys.argv[1:]]
    try:
        from specreplay.cli import main as cli

        cli()
    finally:
        _end("between")
        phases = [p for p in PHASES if not (p["phase"] == "between" and p["cpu_s"] < 0.005)]
        for p in phases:
            print(f"phase {p['phase']:<9} cpu {p['cpu_s']:6.3f} s (main thread {p['main_cpu_s']:6.3f})  wall {p['wall_s']:6.3f} s  rss {p['rss_mib']:6.1f}  peak {p['peak_mib']:6.1f} MiB", file=sys.stderr)
        out = os.environ.get("SPECREPLAY_PHASES")
        if out:
            Path(out).write_text(json.dumps(phases))


if __name__ == "__main__":
    main()
