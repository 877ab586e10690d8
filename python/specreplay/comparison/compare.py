"""Comparing runs: the relative change of each headline figure against a
base run, a bootstrap confidence interval for it, and a plain verdict.

What is compared, per sweep point present in both runs: TTFT, TTFC, TPOT,
ITL (per token) and E2E at p50, p90 and p99, and output tokens/s (total and
content); and when both had sessions, the session duration at p50 and p90
(resampled by session; `base_requests` and `requests` are then the
completed sessions). The figures are exactly those of `summary.summarize`
(same requests, same percentile definition); `change` is `run / base - 1`.

**Interval.** A percentile bootstrap of `run / base - 1` from
`resampling`, the one bootstrap behind every interval specreplay prints:
each resample draws the point's trace records with replacement (paired
when both runs replayed the same records) and recomputes the whole figure
on both sides, a rate's duration included (see `resampling`'s doc). The
generator is seeded from `seed` and the point's name: the same files always
give the same interval.

**Verdict**, per figure:

- `n/a` when the figure is missing on either side (no TTFC without answers);
- `too few samples` when either run has fewer units (requests, or sessions)
  than `resampling.samples_needed` asks for the percentile (10 for a p50,
  50 for a p90, 500 for a p99);
- `faster` or `slower` when the figure's bootstrap p-value, adjusted by
  Holm–Bonferroni over the figures of its table (`p_adjusted`), is at most
  `1 - confidence` *and* the measured change is at least `min_change`
  (default 5%) in size: the chance that an A/A table says anything is then
  at most `1 - confidence`;
- otherwise `no significant difference`.

The interval covers the noise of *which requests* were measured and what
they drew; it cannot see the noise of the machine between two runs (a busy
host, a GPU's clock), which moves whole runs by a few percent. Repeats
(`replay --repeats N`, docs/compare.md) measure it; `min_change` is the
allowance for it otherwise.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

import numpy as np
import pandas as pd

from specreplay.analysis.analyse import PointAnalysis
from specreplay.errors import InvalidRunError
from specreplay.analysis.draws import rng
from specreplay.analysis.resampling import (
    CONFIDENCE,
    LATENCY_METRICS,
    LATENCY_STATS,
    RESAMPLES,
    SEED,
    THROUGHPUT_METRICS,
    PointSample,
    between_repeats,
    holm,
    interval_of,
    overlap,
    p_value,
    pair_ratios,
    record_id,
    samples_needed,
    session_ratios,
)
from specreplay.servermetrics.compare import server_rows
from specreplay.trace.records import RETRIEVAL_APIS
from specreplay.analysis.summary_row import by_model
from specreplay.analysis.verdicts import FASTER, NA, NOT_RESAMPLED, SAME, SLOWER, TOO_FEW
from specreplay.comparison.runs import Run, gate, invalid_message, name_by_file, one_run, resolve, select, shared_points, split_spec, validate


COLUMNS: tuple[str, ...] = (
    "base",
    "run",
    "point",
    "metric",
    "name",
    "unit",
    "base_value",
    "value",
    "change",
    "ci_low",
    "ci_high",
    "p_adjusted",
    "verdict",
    "paired",
    "base_requests",
    "requests",
    "repeats",
)

#: Defaults of `compare` (and of the CLI's options).
# Names of the runs module kept here for callers of `comparison.compare.X` (the API's face).
__all__ = [
    "CONFIDENCE", "LATENCY_METRICS", "LATENCY_STATS", "RESAMPLES", "SEED", "THROUGHPUT_METRICS", "record_id",
    "Run", "gate", "invalid_message", "name_by_file", "resolve", "select", "shared_points", "split_spec", "validate",
]  # fmt: skip
MIN_CHANGE = 0.05


def compare(
    base: str | os.PathLike[str] | pd.DataFrame | Run,
    other: str | os.PathLike[str] | pd.DataFrame | Run,
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    min_change: float = MIN_CHANGE,
    force: bool = False,
) -> pd.DataFrame:
    """`other` against `base`, one row per sweep point in both and figure
    (columns `COLUMNS`; see the module doc for the method). Each may be a
    results DataFrame, a path, or `FILE:LABEL`, and must hold one run.

    Raises `InvalidRunError` when a validity check of either run found an
    error on a compared point, unless `force`."""
    base_run, other_run = one_run(base, "base"), one_run(other, "other run")
    if isinstance(base, (str, os.PathLike)) and isinstance(other, (str, os.PathLike)):
        name_by_file([base_run, other_run])
    elif base_run.name == other_run.name:
        base_run.name, other_run.name = "base", "run"
    invalid = gate([base_run, other_run])
    if invalid and not force:
        raise InvalidRunError(invalid_message(invalid), [f for r in invalid for f in r.findings if f.level == "error"])
    return compare_runs(base_run, other_run, confidence=confidence, resamples=resamples, seed=seed, min_change=min_change)


def compare_all(runs: list[Run], **options: Any) -> pd.DataFrame:
    """Every run after the first against the first (`compare_runs` options).
    When the runs are repeats (`replay --repeats`: labels `NAME@k`, every
    name at least twice), every name against the first name, judged on the
    variation between repeats (`compare_repeats`)."""
    groups = repeat_groups(runs)
    if groups is not None:
        names = list(groups)
        frames = [compare_repeats(groups[names[0]], groups[name], **options) for name in names[1:]]
    else:
        frames = [compare_runs(runs[0], other, **options) for other in runs[1:]]
    frame: pd.DataFrame = pd.concat(frames, ignore_index=True)
    return frame


#: A repeat's label: the run's name and the repeat's number (`replay --repeats`).
_REPEAT = re.compile(r"^(?P<name>.+)@(?P<k>\d+)$")


def repeat_groups(runs: list[Run]) -> dict[str, list[Run]] | None:
    """The runs by name in repeat order, when every run is a repeat
    (`NAME@k`), there are several names, and each has at least two repeats;
    else None."""
    groups: dict[str, list[tuple[int, Run]]] = {}
    for run in runs:
        match = _REPEAT.match(run.label)
        if match is None:
            return None
        prefix = f"{run.path}:" if run.name.startswith(f"{run.path}:") else ""
        groups.setdefault(prefix + match["name"], []).append((int(match["k"]), run))
    if len(groups) < 2 or any(len(g) < 2 for g in groups.values()):
        return None
    return {name: [run for _, run in sorted(g, key=lambda x: x[0])] for name, g in groups.items()}


def compare_repeats(
    base: list[Run],
    other: list[Run],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    min_change: float = MIN_CHANGE,
) -> pd.DataFrame:
    """`other`'s repeats against `base`'s, repeat k with repeat k (they ran
    side by side): per figure, the geometric mean of each side, the change,
    and a Student-t interval from the spread of the per-repeat changes
    (`resampling.between_repeats`), which holds every noise that moves one
    run against another, the machine's included. Verdicts as `compare_runs`'
    (Holm–Bonferroni over a table, `samples_needed` met in every repeat)."""
    pairs = list(zip(base, other))
    tables = [compare_runs(b, o, confidence=confidence, resamples=resamples, seed=seed, min_change=min_change) for b, o in pairs]
    base_name, name = _REPEAT.sub(r"\g<name>", base[0].name), _REPEAT.sub(r"\g<name>", other[0].name)
    rows: list[dict[str, Any]] = []
    first = tables[0]
    for point, point_rows in first.groupby("point", sort=False):
        table: list[dict[str, Any]] = []
        for _, row in point_rows.iterrows():
            per = [t[(t.point == point) & (t.metric == row["metric"])] for t in tables]
            if any(p.empty for p in per):
                continue
            base_values = [float(p["base_value"].iloc[0]) for p in per]
            values = [float(p["value"].iloc[0]) for p in per]
            out: dict[str, Any] = {**{str(k): v for k, v in row.items()}, "base": base_name, "run": name, "repeats": len(pairs)}
            out["base_requests"] = int(sum(int(p["base_requests"].iloc[0]) for p in per))
            out["requests"] = int(sum(int(p["requests"].iloc[0]) for p in per))
            out["base_value"], out["value"] = _geometric_mean(base_values), _geometric_mean(values)
            if row["verdict"] == NOT_RESAMPLED:
                out["change"] = out["value"] / out["base_value"] - 1 if out["base_value"] else math.nan
                table.append(out)
                continue
            change, low, high, p = between_repeats(base_values, values, confidence)
            enough = not any(str(x["verdict"].iloc[0]) == TOO_FEW for x in per)
            out.update(change=change, ci_low=low, ci_high=high, p_adjusted=p if enough else math.nan)
            out["_enough"], out["_better"] = enough, _higher_is_better(str(row["metric"]))
            table.append(out)
        resampled = [r for r in table if "_enough" in r]
        _judge(resampled, confidence, min_change)
        rows += table
    frame: pd.DataFrame = pd.DataFrame(rows, columns=list(COLUMNS))
    return frame


def _geometric_mean(values: list[float]) -> float:
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    return float(np.exp(np.mean(np.log(positive)))) if len(positive) == len(values) and positive else math.nan


def _higher_is_better(metric: str) -> bool:
    """From the table of compared figures (`_figures`; the session durations are times)."""
    return any(column == metric and better for column, _, _, better, _ in _figures())


def compare_runs(
    base: Run,
    other: Run,
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    min_change: float = MIN_CHANGE,
) -> pd.DataFrame:
    """`compare` without the validity gate, on already selected runs."""
    if not 0 < confidence < 1:
        raise ValueError("confidence must be between 0 and 1")
    if resamples < 10:
        raise ValueError("resamples must be at least 10")
    same_trace = _same_trace(base, other)
    rows: list[dict[str, Any]] = []
    for point in shared_points(base, other):
        base_point, other_point = base.analysis.point(point), other.analysis.point(point)
        b, o = PointSample.of(base_point), PointSample.of(other_point)
        paired = same_trace and overlap(b.ids, o.ids) >= 0.5
        ratios = pair_ratios(b, o, paired, resamples, rng(seed, point))
        table: list[dict[str, Any]] = []
        for metric, name, unit, higher_is_better, quantile in _figures():
            base_value = float(base_point.summary[metric])
            value = float(other_point.summary[metric])
            table.append(
                _row(point, metric, name, unit, base_value, value, ratios[metric], higher_is_better, quantile, b.n_ok, o.n_ok, paired, confidence, resamples,
                     min(b.n_units, o.n_units))
            )
        table += _session_rows(base_point, other_point, same_trace, resamples, rng(seed, point + " sessions"), confidence)
        _judge(table, confidence, min_change)
        # The server's own figures, beside TPOT (not resampled).
        after_tpot = max(i for i, row in enumerate(table) if row["metric"].startswith("tpot_")) + 1
        table[after_tpot:after_tpot] = [
            {
                "point": point, "metric": metric, "name": name, "unit": unit,
                "base_value": base_value, "value": value,
                "change": value / base_value - 1 if base_value and not math.isnan(base_value) else math.nan,
                "ci_low": math.nan, "ci_high": math.nan, "p_adjusted": math.nan, "verdict": NOT_RESAMPLED, "paired": paired,
                "base_requests": b.n_ok, "requests": o.n_ok,
            }
            for metric, name, unit, base_value, value in server_rows(base_point.summary, other_point.summary)
        ]  # fmt: skip
        # The request kinds' and the models' figures (not resampled).
        table += [
            {
                "point": point, "metric": metric, "name": name, "unit": unit,
                "base_value": base_value, "value": value,
                "change": value / base_value - 1 if base_value and not math.isnan(base_value) else math.nan,
                "ci_low": math.nan, "ci_high": math.nan, "p_adjusted": math.nan, "verdict": NOT_RESAMPLED, "paired": paired,
                "base_requests": b.n_ok, "requests": o.n_ok,
            }
            for metric, name, unit, base_value, value in kind_rows(base_point, other_point)
        ]  # fmt: skip
        rows += [{"base": base.name, "run": other.name, **row, "repeats": 1} for row in table]
    frame: pd.DataFrame = pd.DataFrame(rows, columns=list(COLUMNS))
    return frame


def _row(
    point: str, metric: str, name: str, unit: str, base_value: float, value: float, ratios: np.ndarray, higher_is_better: bool,
    quantile: float | None, base_n: int, n: int, paired: bool, confidence: float, resamples: int, units: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One figure's row, before the table's verdicts (`_judge`)."""
    change = value / base_value - 1 if base_value and not math.isnan(base_value) else math.nan
    count = min(base_n, n) if units is None else units
    low = high = p = math.nan
    if not math.isnan(change):
        low, high = (x - 1 for x in interval_of(ratios, confidence, resamples, count))
        p = p_value(ratios, count) if not math.isnan(low) else math.nan
    enough = count >= samples_needed(quantile)
    return {
        "point": point, "metric": metric, "name": name, "unit": unit, "base_value": base_value, "value": value,
        "change": change, "ci_low": low, "ci_high": high, "p_adjusted": p, "paired": paired,
        "base_requests": base_n, "requests": n, "_better": higher_is_better, "_enough": enough,
    }  # fmt: skip


def _judge(table: list[dict[str, Any]], confidence: float, min_change: float) -> None:
    """Verdicts of one table's figures: their p-values adjusted together
    (Holm–Bonferroni over the figures judged, those with enough samples)."""
    judged = [row for row in table if row["_enough"] and not math.isnan(row["p_adjusted"])]
    for row, p in zip(judged, holm([row["p_adjusted"] for row in judged])):
        row["p_adjusted"] = p
    for row in table:
        enough, better = row.pop("_enough"), row.pop("_better")
        if not enough:
            row["p_adjusted"] = math.nan
        significant = enough and row["p_adjusted"] <= 1 - confidence
        row["verdict"] = verdict(row["change"], row["ci_low"], row["ci_high"], better, min_change, enough, significant)


#: (summary column, display name, unit) of the request kinds' figures compared
#: when either run had such requests (docs/compare.md, "Request kinds").
KIND_METRICS: tuple[tuple[str, str, str], ...] = (
    ("tool_call_tok_s", "tool-call tok/s", "tok/s"),
    ("ttft_media_p50_ms", "TTFT p50 with media", "ms"),
    ("ttft_text_p50_ms", "TTFT p50 without media", "ms"),
    ("embeddings_e2e_p50_ms", "embeddings E2E p50", "ms"),
    ("embeddings_e2e_p99_ms", "embeddings E2E p99", "ms"),
    ("embeddings_items_s", "embeddings items/s", "items/s"),
    ("embeddings_input_tok_s", "embeddings input tok/s", "tok/s"),
    ("rerank_e2e_p50_ms", "rerank E2E p50", "ms"),
    ("rerank_e2e_p99_ms", "rerank E2E p99", "ms"),
    ("rerank_items_s", "rerank items/s", "items/s"),
    ("rerank_input_tok_s", "rerank input tok/s", "tok/s"),
)
#: Which requests a kind's figures need (summary count column).
_KIND_COUNT = {"tool_call": "tool_call_requests", "ttft": "media_requests", "embeddings": "embeddings_requests", "rerank": "rerank_requests"}


def kind_rows(base: PointAnalysis, other: PointAnalysis) -> list[tuple[str, str, str, float, float]]:
    """(metric, name, unit, base value, value) of the request kinds either
    point had (tool calls, media, embeddings, rerank), and per model (TTFT
    p50/p99, TPOT p50, output tok/s) for the models both points asked for:
    one number per run each, not resampled."""
    out = []
    for metric, name, unit in KIND_METRICS:
        count = _KIND_COUNT[metric.split("_")[0] if not metric.startswith("tool_call") else "tool_call"]
        if int(base.summary.get(count, 0) or 0) or int(other.summary.get(count, 0) or 0):
            out.append((metric, name, unit, float(base.summary.get(metric, math.nan)), float(other.summary.get(metric, math.nan))))
    theirs = {r["model"]: r for r in by_model(other)}
    for mine in by_model(base):
        match = theirs.get(mine["model"])
        if match is None:
            continue
        for key, label, unit in (("ttft_p50_ms", "TTFT p50", "ms"), ("ttft_p99_ms", "TTFT p99", "ms"), ("tpot_p50_ms", "TPOT p50", "ms"), ("output_tok_s", "output tok/s", "tok/s")):
            out.append((f"model[{mine['model']}].{key}", f"{label} [{mine['model']}]", unit, float(mine[key]), float(match[key])))
    return out


#: (summary column, display name, quantile) of the session figures compared.
SESSION_METRICS: tuple[tuple[str, str, float], ...] = (
    ("session_duration_p50_s", "session duration p50", 0.50),
    ("session_duration_p90_s", "session duration p90", 0.90),
)


def _session_rows(
    base: PointAnalysis, other: PointAnalysis, same_trace: bool, resamples: int, generator: np.random.Generator, confidence: float
) -> list[dict[str, Any]]:
    """The session figures of a point in both runs, when both had sessions.
    The unit of resampling is the session (its turns move together); a
    duration counts for a completed session only, and a percentile needs
    as many completed sessions as `samples_needed` asks."""
    b, o = base.sessions, other.sessions
    if b.empty or o.empty:
        return []
    ratios, paired = session_ratios(b, o, [q for _, _, q in SESSION_METRICS], same_trace, resamples, generator)
    done_b, done_o = int(b["completed"].sum()), int(o["completed"].sum())
    return [
        _row(base.point, metric, name, "s", float(base.summary[metric]), float(other.summary[metric]), ratios[i], False, q, done_b, done_o, paired, confidence, resamples)
        for i, (metric, name, q) in enumerate(SESSION_METRICS)
    ]


def verdict(
    change: float,
    low: float,
    high: float,
    higher_is_better: bool,
    min_change: float = MIN_CHANGE,
    enough: bool = True,
    significant: bool | None = None,
) -> str:
    """faster / slower / no significant difference / too few samples / n/a
    (see the module doc). `significant` is the table's adjusted test
    (`_judge`); without it, the interval excluding zero decides."""
    if any(math.isnan(x) for x in (change, low, high)):
        return NA
    if not enough:
        return TOO_FEW
    excluded = not (low <= 0 <= high) if significant is None else significant
    if not excluded or abs(change) < min_change:
        return SAME
    better = change > 0 if higher_is_better else change < 0
    return FASTER if better else SLOWER


def _figures() -> list[tuple[str, str, str, bool, float | None]]:
    """(summary column, display name, unit, higher is better, quantile) in table order."""
    out: list[tuple[str, str, str, bool, float | None]] = [
        (f"{prefix}_{stat}_ms", f"{name} {stat}", "ms", False, q) for prefix, name in LATENCY_METRICS for stat, q in LATENCY_STATS.items()
    ]
    out += [(column, name, "tok/s", True, None) for column, name, _ in THROUGHPUT_METRICS]
    return out


def _same_trace(a: Run, b: Run) -> bool:
    sha_a, sha_b = a.config.get("trace_sha256"), b.config.get("trace_sha256")
    return sha_a is None or sha_b is None or sha_a == sha_b
