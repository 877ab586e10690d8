"""The runs a comparison compares (`Run`: one label of a results file),
how the command line names them (`select`, `resolve`, `FILE:LABEL`), and
the one validity gate in front of every comparison (`gate`): `compare`
(the API) and the `compare` command both pass through it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from specreplay.analysis.analyse import RunAnalysis, analyse, by_label
from specreplay.analysis.finding import Finding
from specreplay.results.files import load, partial_path, run_config_of


@dataclass
class Run:
    """One run (one label) of a results file, ready to compare."""

    name: str
    label: str
    df: pd.DataFrame
    path: str | None = None
    findings: list[Finding] = field(default_factory=list)
    file_runs: int = 1
    """How many runs the file it came from holds."""

    @property
    def config(self) -> dict[str, Any]:
        """The run's resolved configuration as the file recorded it ({} if none)."""
        return run_config_of(self.df, self.label)

    @cached_property
    def analysis(self) -> RunAnalysis:
        """The run's figures and findings (under its own thresholds), made on first use."""
        return analyse(self.df)[0]

    @property
    def valid(self) -> bool:
        return not any(f.level == "error" for f in self.findings)

    @property
    def searched(self) -> bool:
        """Whether the run was a capacity search (`--find-max-rate`)."""
        return bool(self.config.get("find_max_rate"))


def _exists(path: str) -> bool:
    return Path(path).exists() or partial_path(path).exists()


def split_spec(spec: str) -> tuple[str, str | None]:
    """`FILE` or `FILE:LABEL` -> (file, label or None). A file whose name
    contains a colon is taken whole when it exists."""
    if _exists(spec) or ":" not in spec:
        return spec, None
    path, _, label = spec.rpartition(":")
    return path, label or None


def select(spec: str | os.PathLike[str] | pd.DataFrame, label: str | None = None) -> list[Run]:
    """The runs a `FILE`, `FILE:LABEL` or loaded DataFrame names: one per
    label, in run order, or just `label`'s. Names are the labels; `resolve`
    makes them unique across files."""
    if isinstance(spec, pd.DataFrame):
        df, path = spec, None
    else:
        path, spec_label = split_spec(os.fspath(spec))
        label = label or spec_label
        if not _exists(path):
            raise FileNotFoundError(f"{path}: no such results file")
        df = load(path)
    groups = by_label(df)
    if label is not None:
        if label not in [name for name, _ in groups]:
            where = path or "the results"
            raise ValueError(f"{where} has no run labelled {label!r} (its runs: {', '.join(name for name, _ in groups)})")
    runs = []
    for name, rows in groups:
        if label is None or name == label:
            rows = rows.copy()
            rows.attrs = dict(df.attrs)
            runs.append(Run(name=name, label=name, df=rows, path=path, file_runs=len(groups)))
    return runs


def resolve(specs: list[str]) -> list[Run]:
    """Every run the command-line arguments name, base first, with display
    names (`name_by_file`)."""
    runs: list[Run] = []
    for spec in specs:
        runs += select(spec)
    name_by_file(runs)
    return runs


def name_by_file(runs: list[Run]) -> None:
    """Names runs by their labels when all come from one file, else by file
    (`FILE:LABEL` for a file that holds several runs)."""
    if len({r.path for r in runs}) > 1:
        for run in runs:
            run.name = f"{run.path}:{run.label}" if run.file_runs > 1 else str(run.path)


def validate(run: Run, points: list[str] | None = None) -> list[Finding]:
    """The validity findings of `run` (on `points` only, if given), from its
    analysis; also stored in `run.findings`."""
    findings = run.analysis.findings
    if points is not None:
        findings = [f for f in findings if f.point in points]
    run.findings = findings
    return findings


def gate(runs: list[Run]) -> list[Run]:
    """The one validity gate of a comparison (`compare` and the `compare`
    command): checks every run on the sweep points it is compared on — those
    the base (`runs[0]`) shares with any other run — storing each run's
    findings there (`validate`), and returns the runs whose checks found an
    error, to refuse unless forced."""
    base = runs[0]
    points = sorted({p for other in runs[1:] for p in shared_points(base, other)})
    for run in runs:
        validate(run, points)
    return [r for r in runs if not r.valid]


def shared_points(base: Run, other: Run) -> list[str]:
    """Sweep points analysed in both (points with measured requests), in the
    base's run order. Between two capacity searches, a rate that either
    measured invalid is left out: it is part of that search's answer (never
    taken as held, docs/capacity.md), not a figure to compare."""
    theirs = set(other.analysis.point_names)
    points = [p for p in base.analysis.point_names if p in theirs]
    if base.searched and other.searched:
        points = [p for p in points if _error_free(base, p) and _error_free(other, p)]
    return points


def _error_free(run: Run, point: str) -> bool:
    return not any(f.level == "error" for f in run.analysis.point(point).findings)


def invalid_message(runs: list[Run]) -> str:
    parts = []
    for run in runs:
        codes = sorted({f.code for f in run.findings if f.level == "error"})
        parts.append(f"{run.name} ({', '.join(codes)})")
    return (
        "refusing to compare: the validity checks of "
        + " and ".join(parts)
        + " found errors, so their figures do not measure what they claim. Fix the runs, or force the comparison."
    )


def one_run(x: str | os.PathLike[str] | pd.DataFrame | Run, role: str) -> Run:
    if isinstance(x, Run):
        return x
    runs = select(x)
    if len(runs) != 1:
        names = ", ".join(r.label for r in runs)
        raise ValueError(f"the {role} holds several runs ({names}): pick one, e.g. 'FILE:{runs[0].label}' or df[df.label == ...]")
    return runs[0]
