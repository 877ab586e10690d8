"""One analysis per run: the figures and findings of a results frame, derived
once and handed to everything that prints, checks, compares or plots them.

`analyse(df)` gives one `RunAnalysis` per run (label) of a results frame, in
run order. A run is its sweep points, each a `PointAnalysis` holding (the
derived parts made on first use, then kept):

- `rows`: the point's measured requests (warmup left out) with the columns
  of `derived.add_derived` (ttft_us, tpot_us, …) and `burst`, a request
  whose stream arrived at once, whose tpot_us and tps are NaN
  (`derived.leave_out_bursts`); `ok` / `ok_rows`, the successful ones
  (`error_kind` null);
- `chunks`: the chunk frame of the successful requests (`derived.chunks`),
  a burst's gaps NaN, and the ITL samples drawn from it, `itl_chunk_us`
  and `itl_token_us`;
- `sessions` (one row per session) and `ttft_by_turn`: the point's sessions
  (`session_figures`);
- `summary`: the point's summary row (`summary_row.point_summary`);
- `findings`: what the validity checks found (`checks.point_findings`),
  under the run's own thresholds and `max_tokens`;
- `slo_met` and `slo_verdicts`: under the run's SLOs (`slo.Slo`), which
  requests met every per-request threshold, and each target's verdict with
  its bootstrap interval (`slo.verdicts`).

`summary.summarize`, `validity.check`, the console, `comparison` and the
report read these; none derives them again. A new figure is a key of
`summary_row.point_summary`; a new check is a function in `checks.CHECKS`.
Each part is made a floor below this module (docs/architecture.md, "The
analysis package"): `point` (the rows), `summary_row`, `checks`, `slo`.
"""

from __future__ import annotations

import json

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import pandas as pd

from specreplay.analysis import checks
from specreplay.analysis.finding import Finding
from specreplay.analysis.point import is_ok, measured, point_mode
from specreplay.analysis.slo import TargetVerdict, verdicts
from specreplay.analysis.summary_row import SummarisedPoint
from specreplay.results import derived
from specreplay.results import server_samples as server_store
from specreplay.results.files import PREDICTED_KEY, SCHEDULING_KEY, config_points, run_config_of
from specreplay.settings.objectives import Slo
from specreplay.settings.thresholds import ValidityThresholds


@dataclass(frozen=True, eq=False)
class PointAnalysis(SummarisedPoint):
    """One sweep point of one run (see the module doc): its rows and what
    derives from them (`point.PointRows`), its summary row
    (`summary_row.SummarisedPoint`), its findings and its SLO verdicts."""

    @cached_property
    def findings(self) -> list[Finding]:
        return checks.point_findings(self)

    @cached_property
    def slo_verdicts(self) -> tuple[TargetVerdict, ...]:
        return verdicts(self)


@dataclass(frozen=True, eq=False)
class RunAnalysis:
    """One run (one label) of a results frame: its points in run order."""

    label: str
    rows: pd.DataFrame
    """Every measured request of the run, with the derived columns."""
    points: tuple[PointAnalysis, ...]
    thresholds: ValidityThresholds
    max_tokens: int | None
    slo: Slo = Slo()

    @cached_property
    def summary(self) -> pd.DataFrame:
        """One row per point: `summary.summarize`'s frame."""
        frame: pd.DataFrame = pd.DataFrame([p.summary for p in self.points])
        return frame

    @property
    def findings(self) -> list[Finding]:
        """Every point's findings, in point order."""
        return [f for p in self.points for f in p.findings]

    @property
    def point_names(self) -> list[str]:
        return [p.point for p in self.points]

    def point(self, name: str) -> PointAnalysis:
        for p in self.points:
            if p.point == name:
                return p
        raise KeyError(f"run {self.label!r} has no sweep point {name!r} (its points: {', '.join(self.point_names)})")


def by_label(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The rows of each run (label) of `df`, in run order (by first sweep
    point). A frame with one label, or none, is one run ("run" if unnamed)."""
    labels: list[Any] = list(df["label"].dropna().unique()) if "label" in df.columns else []
    if len(labels) <= 1:
        return [(str(labels[0]) if len(labels) else "run", df)]
    order = df.groupby("label", sort=False)["point_index"].min().sort_values(kind="stable")
    return [(str(label), df[df["label"] == label]) for label in order.index]


def analyse(
    df: pd.DataFrame,
    thresholds: ValidityThresholds | None = None,
    *,
    points: list[dict[str, Any]] | None = None,
    max_tokens: int | None = None,
) -> list[RunAnalysis]:
    """One analysis per run of `df`, in run order.

    `thresholds` and `max_tokens` default to each run's own, as its file
    recorded them (`df.attrs`, see `specreplay.load`), and so do its SLOs
    (its `slo` table, when it has one); `points`, the config's list of
    {point, mode, value}, to the file's, and failing that the mode is
    parsed from the point's name."""
    if points is None:
        points = config_points(df)
    samples: pd.DataFrame = server_store.from_metadata(df.attrs).to_pandas()
    predictions = _predictions(df)
    scheduling = _scheduling(df)
    runs = []
    for label, rows in by_label(df):
        config = run_config_of(df, label)
        runs.append(
            analyse_run(
                rows,
                label,
                thresholds or ValidityThresholds.from_dict(dict(config.get("thresholds") or {})),
                points=points,
                max_tokens=max_tokens if max_tokens is not None else _int_or_none(config.get("max_tokens")),
                slo=Slo.from_table(dict(config.get("slo") or {})),
                samples=samples[samples["label"] == label],
                predictions={p: v for (lab, p), v in predictions.items() if lab == label},
                scheduling={p: v for (lab, p), v in scheduling.items() if lab == label},
            )
        )
    return runs


def predictions_of(df: pd.DataFrame, label: str) -> dict[str, dict[str, Any]]:
    """Per point of run `label`, what a predicted point was predicted from
    (`results.files.PREDICTED_KEY`); empty for a measured run."""
    return {p: v for (lab, p), v in _predictions(df).items() if lab == label}


def _predictions(df: pd.DataFrame) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (label, point), what a predicted point was predicted from."""
    raw = df.attrs.get(PREDICTED_KEY)
    if not raw:
        return {}
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for run in json.loads(raw):
        for point in run.get("points", []):
            out[(str(point["label"]), str(point["point"]))] = {**point, "model": run.get("model"), "calibration": run.get("calibration", {})}
    return out


def _scheduling(df: pd.DataFrame) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (label, point), what its engine threads got (`SCHEDULING_KEY`)."""
    entries = json.loads(df.attrs.get(SCHEDULING_KEY) or "[]")
    return {(str(e["label"]), str(e["point"])): e for e in entries if isinstance(e, dict) and "point" in e}


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) else None


def analyse_run(
    df: pd.DataFrame,
    label: str,
    thresholds: ValidityThresholds,
    *,
    points: list[dict[str, Any]] | None,
    max_tokens: int | None,
    slo: Slo = Slo(),
    samples: pd.DataFrame | None = None,
    predictions: dict[str, dict[str, Any]] | None = None,
    scheduling: dict[str, dict[str, Any]] | None = None,
) -> RunAnalysis:
    """The analysis of `df`, the rows of one run, with `samples`, the
    server's metrics scraped during it (none if not given), and per point
    what was predicted and what the engine's threads got (none if not given)."""
    data = derived.request_figures(measured(df), thresholds.burst_us_per_token)
    ok = is_ok(data).to_numpy(dtype=bool)
    out = []
    for point in _ordered_points(data):
        mask = (data["point"] == point).to_numpy(dtype=bool)
        rows: pd.DataFrame = data[mask]
        mode, value = point_mode(point, points)
        out.append(
            PointAnalysis(
                label=str(rows["label"].iloc[0]) if "label" in rows.columns else None,
                point=point,
                mode=mode,
                value=value,
                rows=rows,
                ok=ok[mask],
                thresholds=thresholds,
                max_tokens=max_tokens,
                slo=slo,
                **({} if samples is None else {"server_samples": samples[samples["point"] == point]}),
                prediction=(predictions or {}).get(point),
                scheduling=(scheduling or {}).get(point),
            )
        )
    return RunAnalysis(label=label, rows=data, points=tuple(out), thresholds=thresholds, max_tokens=max_tokens, slo=slo)


def _ordered_points(df: pd.DataFrame) -> list[str]:
    # Run order: by point_index when present, else first appearance.
    if "point_index" in df.columns and df["point_index"].notna().all():
        order = df.groupby("point", sort=False)["point_index"].min().sort_values(kind="stable")
        return [str(p) for p in order.index]
    return [str(p) for p in pd.unique(df["point"])]


def findings_of(runs: Sequence[tuple[str, Sequence[Finding]]]) -> list[Finding]:
    """Every finding of `runs`, (label, findings) pairs in run and point
    order (a run may come in several pairs, a point each); when they are of
    several runs, each finding's point is named `label: point`."""
    several = len({label for label, _ in runs}) > 1
    return [replace(f, point=f"{label}: {f.point}") if several else f for label, found in runs for f in found]
