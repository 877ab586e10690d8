"""Comparing runs: the relative change of each headline figure against a
base run, a bootstrap confidence interval for it, and a plain verdict.

What is compared, per sweep point present in both runs: TTFT, TTFC, TPOT,
ITL (per token) and E2E at p50, p90 and p99, and output tokens/s (total and
content); and when both had sessions, the session duration at p50 and p90
(resampled by session, `_session_rows`; `base_requests` and `requests` are
then the completed sessions). The figures are exactly those of
`summary.summarize` (same requests, same percentile definition); `change`
is `run / base - 1`.

**Interval.** A percentile bootstrap of `run / base - 1` over the trace's
records: each resample draws the point's records with replacement, takes
every request that replayed them (a looped trace sends a record several
times, and the same prompt gets a similar answer; a request's chunks, and
so its ITL samples, move with it), and recomputes the figure on both sides.
When both runs replayed the same trace (same SHA-256 where the files record
it, and at least half of the records in common) the draw is *paired*: one
draw of records serves both runs, so a prompt that is long in one run is
long in the other and the workload's own spread cancels out. Otherwise the
two runs are resampled independently. The generator is seeded from `seed`
and the point's name: the same files always give the same interval.

Tokens/s of a point is `sum(tokens) / duration`. Its resamples use the
identity `sum(tokens) / duration = sum(tokens) / sum(E2E) × sum(E2E) / duration`:
the first factor is resampled, the second (the mean number of requests in
flight, Little's law) is held at its measured value.

**Verdict**, per figure:

- `n/a` when the figure is missing on either side (no TTFC without answers);
- `too few samples` for a p90 or p99 when either run has fewer successful
  requests than the validity thresholds ask for it (`min_requests_p90` = 10,
  `min_requests_p99` = 100): such a percentile is the top sample or two;
- `faster` or `slower` when the interval excludes zero *and* the measured
  change is at least `min_change` (default 5%) in size;
- otherwise `no significant difference`.

The interval covers the noise of *which requests* were measured; it cannot
see the noise of the machine between two runs (a busy host, a GPU's clock),
which moves whole runs by a few percent. `min_change` is the allowance for
it: measure yours by comparing a run with its rerun (`specreplay rerun`),
and set `--min-change` above the largest change that shows.
"""

from __future__ import annotations

import math
import os
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specreplay import metrics
from specreplay.analysis import PointAnalysis, RunAnalysis, analyse, by_label
from specreplay.errors import InvalidRunError
from specreplay.quantiles import UnitQuantiles, weighted_quantiles
from specreplay.results import load, partial_path, run_config_of
from specreplay.servermetrics.compare import server_rows
from specreplay.trace import RETRIEVAL_APIS
from specreplay.validity import Finding, Thresholds

#: (summary prefix, display name) of the latencies compared, in table order.
LATENCY_METRICS: tuple[tuple[str, str], ...] = (
    ("ttft", "TTFT"),
    ("ttfc", "TTFC"),
    ("tpot", "TPOT"),
    ("itl_token", "ITL"),
    ("e2e", "E2E"),
)
LATENCY_STATS: dict[str, float] = {"p50": 0.50, "p90": 0.90, "p99": 0.99}
#: (summary column, display name, token column) of the throughputs compared.
THROUGHPUT_METRICS: tuple[tuple[str, str, str], ...] = (
    ("output_tok_s", "output tok/s", "output_tokens"),
    ("content_tok_s", "content tok/s", "content_tokens"),
)

FASTER = "faster"
SLOWER = "slower"
SAME = "no significant difference"
TOO_FEW = "too few samples"
NA = "n/a"
#: The server's figures (`servermetrics.compare`): one number per run, no interval.
NOT_RESAMPLED = "not resampled"

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
    "verdict",
    "paired",
    "base_requests",
    "requests",
)

#: Defaults of `compare` (and of the CLI's options).
CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 0
MIN_CHANGE = 0.05


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
    base_run, other_run = _one_run(base, "base"), _one_run(other, "other run")
    if isinstance(base, (str, os.PathLike)) and isinstance(other, (str, os.PathLike)):
        name_by_file([base_run, other_run])
    elif base_run.name == other_run.name:
        base_run.name, other_run.name = "base", "run"
    points = shared_points(base_run, other_run)
    invalid = [r for r in (base_run, other_run) if not r.valid or not _checked(r, points)]
    if invalid and not force:
        raise InvalidRunError(invalid_message(invalid), [f for r in invalid for f in r.findings if f.level == "error"])
    return compare_runs(base_run, other_run, confidence=confidence, resamples=resamples, seed=seed, min_change=min_change)


def compare_all(runs: list[Run], **options: Any) -> pd.DataFrame:
    """Every run after the first against the first (`compare_runs` options)."""
    frames = [compare_runs(runs[0], other, **options) for other in runs[1:]]
    frame: pd.DataFrame = pd.concat(frames, ignore_index=True)
    return frame


def _checked(run: Run, points: list[str]) -> bool:
    validate(run, points)
    return run.valid


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


def _one_run(x: str | os.PathLike[str] | pd.DataFrame | Run, role: str) -> Run:
    if isinstance(x, Run):
        return x
    runs = select(x)
    if len(runs) != 1:
        names = ", ".join(r.label for r in runs)
        raise ValueError(f"the {role} holds several runs ({names}): pick one, e.g. 'FILE:{runs[0].label}' or df[df.label == ...]")
    return runs[0]


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
        b, o = _PointData.of(base_point), _PointData.of(other_point)
        paired = same_trace and _overlap(b.ids, o.ids) >= 0.5
        ratios = _bootstrap(b, o, paired, resamples, _rng(seed, point))
        alpha = (1 - confidence) / 2
        needed = _needed(base.analysis.thresholds)
        for metric, name, unit, higher_is_better in _figures():
            enough = min(b.n_ok, o.n_ok) >= needed.get(metric.split("_")[-2], 1)
            base_value = float(base_point.summary[metric])
            value = float(other_point.summary[metric])
            change = value / base_value - 1 if base_value and not math.isnan(base_value) else math.nan
            r = ratios[metric]
            r = r[np.isfinite(r)]
            if math.isnan(change) or len(r) < resamples / 2:
                low = high = math.nan
            else:
                low, high = (float(x) - 1 for x in np.quantile(r, [alpha, 1 - alpha]))
            rows.append(
                {
                    "base": base.name,
                    "run": other.name,
                    "point": point,
                    "metric": metric,
                    "name": name,
                    "unit": unit,
                    "base_value": base_value,
                    "value": value,
                    "change": change,
                    "ci_low": low,
                    "ci_high": high,
                    "verdict": verdict(change, low, high, higher_is_better, min_change, enough),
                    "paired": paired,
                    "base_requests": b.n_ok,
                    "requests": o.n_ok,
                }
            )
        # The server's own figures, beside TPOT (not resampled).
        after_tpot = max(i for i, row in enumerate(rows) if row["metric"].startswith("tpot_")) + 1
        rows[after_tpot:after_tpot] = [
            {
                "base": base.name, "run": other.name, "point": point, "metric": metric, "name": name, "unit": unit,
                "base_value": base_value, "value": value,
                "change": value / base_value - 1 if base_value and not math.isnan(base_value) else math.nan,
                "ci_low": math.nan, "ci_high": math.nan, "verdict": NOT_RESAMPLED, "paired": paired,
                "base_requests": b.n_ok, "requests": o.n_ok,
            }
            for metric, name, unit, base_value, value in server_rows(base_point.summary, other_point.summary)
        ]  # fmt: skip
        rows += [
            {
                "base": base.name, "run": other.name, "point": point, "metric": metric, "name": name, "unit": unit,
                "base_value": base_value, "value": value,
                "change": value / base_value - 1 if base_value and not math.isnan(base_value) else math.nan,
                "ci_low": math.nan, "ci_high": math.nan, "verdict": NOT_RESAMPLED, "paired": paired,
                "base_requests": b.n_ok, "requests": o.n_ok,
            }
            for metric, name, unit, base_value, value in kind_rows(base_point, other_point)
        ]  # fmt: skip
        sessions = _session_rows(base_point, other_point, same_trace, resamples, _rng(seed, point + " sessions"), alpha, min_change)
        rows += [{"base": base.name, "run": other.name, **row} for row in sessions]
    frame: pd.DataFrame = pd.DataFrame(rows, columns=list(COLUMNS))
    return frame


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
    from specreplay.summary import by_model

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
    base: PointAnalysis, other: PointAnalysis, same_trace: bool, resamples: int, rng: np.random.Generator, alpha: float, min_change: float
) -> list[dict[str, Any]]:
    """The session figures of a point in both runs, when both had sessions.
    The unit of resampling is the session (its turns move together); a
    duration counts for a completed session only. Paired as the requests
    are: when both replayed the same trace and share most sessions."""
    b, o = base.sessions, other.sessions
    if b.empty or o.empty:
        return []
    ids_b, ids_o = [record_id(str(i)) for i in b.index], [record_id(str(i)) for i in o.index]
    paired = same_trace and _overlap(ids_b, ids_o) >= 0.5
    keys = list(dict.fromkeys(ids_b + ids_o)) if paired else None
    (unit_b, n_b), (unit_o, n_o) = _units(ids_b, keys), _units(ids_o, keys)
    draws_b = _draw(rng, n_b, resamples)
    draws_o = draws_b if paired else _draw(rng, n_o, resamples)
    qs = [q for _, _, q in SESSION_METRICS]

    def resampled(sessions: pd.DataFrame, unit: np.ndarray, draws: np.ndarray) -> np.ndarray:
        done = sessions["completed"].to_numpy(dtype=bool)
        values = sessions["duration_s"].to_numpy(dtype="float64")[done]
        order = np.argsort(values, kind="stable")
        return weighted_quantiles(values[order], draws[:, unit[done][order]], qs)

    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = resampled(o, unit_o, draws_o) / resampled(b, unit_b, draws_b)
    done_b, done_o = int(b["completed"].sum()), int(o["completed"].sum())
    out = []
    for i, (metric, name, q) in enumerate(SESSION_METRICS):
        base_value, value = float(base.summary[metric]), float(other.summary[metric])
        change = value / base_value - 1 if base_value and not math.isnan(base_value) else math.nan
        r = ratios[i][np.isfinite(ratios[i])]
        low = high = math.nan
        if not math.isnan(change) and len(r) >= resamples / 2:
            low, high = (float(x) - 1 for x in np.quantile(r, [alpha, 1 - alpha]))
        enough = q < 0.9 or min(done_b, done_o) >= base.thresholds.min_sessions_p90
        out.append({"point": base.point, "metric": metric, "name": name, "unit": "s", "base_value": base_value, "value": value,
                    "change": change, "ci_low": low, "ci_high": high, "verdict": verdict(change, low, high, False, min_change, enough),
                    "paired": paired, "base_requests": done_b, "requests": done_o})
    return out


def verdict(
    change: float, low: float, high: float, higher_is_better: bool, min_change: float = MIN_CHANGE, enough: bool = True
) -> str:
    """faster / slower / no significant difference / too few samples / n/a
    (see the module doc)."""
    if any(math.isnan(x) for x in (change, low, high)):
        return NA
    if not enough:
        return TOO_FEW
    if (low <= 0 <= high) or abs(change) < min_change:
        return SAME
    better = change > 0 if higher_is_better else change < 0
    return FASTER if better else SLOWER


def _figures() -> list[tuple[str, str, str, bool]]:
    """(summary column, display name, unit, higher is better) in table order."""
    out = [(f"{prefix}_{stat}_ms", f"{name} {stat}", "ms", False) for prefix, name in LATENCY_METRICS for stat in LATENCY_STATS]
    out += [(column, name, "tok/s", True) for column, name, _ in THROUGHPUT_METRICS]
    return out


def _needed(thresholds: Thresholds) -> dict[str, int]:
    """Samples a percentile needs on each side before it gets a verdict (the
    validity check `too_few_requests` uses the same thresholds)."""
    return {"p90": thresholds.min_requests_p90, "p99": thresholds.min_requests_p99}


def _rng(seed: int, point: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(point.encode())])


def _same_trace(a: Run, b: Run) -> bool:
    sha_a, sha_b = a.config.get("trace_sha256"), b.config.get("trace_sha256")
    return sha_a is None or sha_b is None or sha_a == sha_b


def _overlap(a: list[str], b: list[str]) -> float:
    if not a or not b:
        return 0.0
    return len(set(a) & set(b)) / max(len(set(a)), len(set(b)))


@dataclass
class _Samples:
    """Samples of one figure: sorted values, how many times each counts, and
    the request (index into the point's request list) each belongs to."""

    values: np.ndarray
    weights: np.ndarray
    request: np.ndarray


#: The suffix `#k` the engine appends to a trace id on the k-th loop over the trace.
_LOOP_SUFFIX = re.compile(r"#\d+$")


def record_id(trace_id: str) -> str:
    """The trace record a request replayed (its trace id without the loop suffix)."""
    return _LOOP_SUFFIX.sub("", trace_id)


@dataclass
class _PointData:
    ids: list[str]  # per measured request: the trace record it replayed
    n_ok: int
    samples: dict[str, _Samples]  # latency prefix -> samples
    tokens: dict[str, np.ndarray]  # token column -> per-request (ok) sums, by request
    e2e: np.ndarray  # per request: E2E µs of ok requests, else 0
    in_flight: float  # sum(E2E of ok requests) / duration

    @classmethod
    def of(cls, point: PointAnalysis) -> _PointData:
        rows = point.rows.reset_index(drop=True)
        ok = point.ok
        ids = [record_id(str(t)) for t in rows["trace_id"]]
        samples: dict[str, _Samples] = {}
        index = np.arange(len(rows))
        # Embeddings and rerank have their own figures (`kind_rows`), as in the summary.
        generating = ~rows["api"].isin(RETRIEVAL_APIS).to_numpy(dtype=bool) if "api" in rows.columns else np.ones(len(rows), dtype=bool)
        for prefix in ("ttft", "ttfc", "tpot", "e2e"):
            values = rows[f"{prefix}_us"].to_numpy(dtype="float64")
            keep = ok & ~np.isnan(values) & generating
            samples[prefix] = _sorted(values[keep] / 1000.0, np.ones(int(keep.sum()), dtype="int64"), index[keep])
        # ITL per token: a gap g ending a chunk of k tokens is k samples of g / k,
        # kept as one value of weight k that belongs to the chunk's request.
        # request_index is unique within a point: it names each chunk's request.
        position = pd.Series(index, index=rows["request_index"].to_numpy())
        parent = position.loc[point.chunks["request_index"].to_numpy()].to_numpy(dtype="int64")
        usable, per_token, k = metrics.token_gaps(point.chunks)
        samples["itl_token"] = _sorted(per_token / 1000.0, k, parent[usable])
        e2e = np.where(ok, rows["e2e_us"].to_numpy(dtype="float64"), 0.0)
        e2e = np.nan_to_num(e2e)
        tokens = {col: np.where(ok, np.nan_to_num(metrics.as_float(rows, col).to_numpy()), 0.0) for _, _, col in THROUGHPUT_METRICS}
        sent = metrics.as_float(rows, "sent_us").dropna()
        end = metrics.as_float(rows, "end_us").dropna()
        duration = float(end.max() - sent.min()) if len(sent) and len(end) else math.nan
        in_flight = float(e2e.sum()) / duration if duration and duration > 0 else math.nan
        return cls(ids=ids, n_ok=int(ok.sum()), samples=samples, tokens=tokens, e2e=e2e, in_flight=in_flight)


def _sorted(values: np.ndarray, weights: np.ndarray, request: np.ndarray) -> _Samples:
    order = np.argsort(values, kind="stable")
    return _Samples(values[order], weights[order], request[order])


def _units(ids: list[str], keys: list[str] | None = None) -> tuple[np.ndarray, int]:
    """Per request, the index of its resampling unit (its trace record) among
    `keys` (default: the records of `ids`, in order); and the number of units."""
    keys = keys if keys is not None else list(dict.fromkeys(ids))
    position = {key: i for i, key in enumerate(keys)}
    return np.array([position[i] for i in ids], dtype="int64"), len(keys)


def _bootstrap(base: _PointData, other: _PointData, paired: bool, resamples: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Resampled `other / base` of every compared figure: metric -> (resamples,).

    The unit of resampling is the trace record: all requests that replayed
    it (a looped trace sends each record several times) move together, since
    the same prompt gets a similar answer. Paired, one draw of records
    serves both runs."""
    if paired:
        keys = list(dict.fromkeys(base.ids + other.ids))
        (map_b, n_b), (map_o, n_o) = _units(base.ids, keys), _units(other.ids, keys)
    else:
        (map_b, n_b), (map_o, n_o) = _units(base.ids), _units(other.ids)
    quantiles_b, quantiles_o = _quantilers(base, map_b, n_b), _quantilers(other, map_o, n_o)
    # Draws come in blocks whose size (and, unpaired, the turns of base and
    # other) is part of what a seed reproduces. The figures are computed on
    # batches of blocks, large enough that each matrix product is worth its
    # call (one resample at a time, OpenBLAS's threads cost more than they do).
    biggest = max([len(s.values) for s in (*base.samples.values(), *other.samples.values())] + [1])
    block = max(1, min(resamples, 2_000_000 // biggest))
    batch = max(block, min(resamples, 2_000_000 // max(len(base.ids), len(other.ids), n_b, n_o, 1)))
    out: dict[str, list[np.ndarray]] = {m: [] for m, _, _, _ in _figures()}
    drawn_b: list[np.ndarray] = []
    drawn_o: list[np.ndarray] = []
    done = 0
    while done < resamples:
        size = min(block, resamples - done)
        if paired:
            units = _draw(rng, n_b, size)
            drawn_b.append(units)
            drawn_o.append(units)
        else:
            drawn_b.append(_draw(rng, n_b, size))
            drawn_o.append(_draw(rng, n_o, size))
        done += size
        if sum(len(d) for d in drawn_b) < batch and done < resamples:
            continue
        fig_b = _figures_of(base, quantiles_b, np.concatenate(drawn_b), map_b)
        fig_o = _figures_of(other, quantiles_o, np.concatenate(drawn_o), map_o)
        drawn_b, drawn_o = [], []
        with np.errstate(divide="ignore", invalid="ignore"):
            for metric in out:
                out[metric].append(fig_o[metric] / fig_b[metric])
    return {m: np.concatenate(v) for m, v in out.items()}


def _draw(rng: np.random.Generator, n: int, size: int) -> np.ndarray:
    """`size` resamples of n units with replacement, as counts per unit."""
    if n == 0:
        return np.zeros((size, 0), dtype="int64")
    return rng.multinomial(n, np.full(n, 1.0 / n), size=size)


def _quantilers(data: _PointData, unit_of_request: np.ndarray, units: int, prefixes: Iterable[str] | None = None) -> dict[str, UnitQuantiles]:
    """Per latency prefix (every one, or `prefixes`), the quantiles of its samples under unit counts."""
    wanted = data.samples if prefixes is None else prefixes
    return {prefix: UnitQuantiles(data.samples[prefix].values, unit_of_request[data.samples[prefix].request], data.samples[prefix].weights, units) for prefix in wanted}


#: A figure with its interval: (value, low, high).
Interval = tuple[float, float, float]


def point_intervals(
    point: PointAnalysis,
    latencies: Sequence[tuple[str, float]],
    shares: Mapping[str, np.ndarray],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> tuple[dict[tuple[str, float], Interval], dict[str, Interval]]:
    """One run's figures on one point with their bootstrap intervals,
    resampled as `compare` resamples a point (its trace records, seeded by
    `seed` and the point's name): each (latency prefix, quantile) ->
    (quantile, low, high), and each share (a per-request indicator over
    `point.rows`) -> (mean, low, high). The SLO verdicts read these."""
    data = _PointData.of(point)
    unit_of_request, units = _units(data.ids)
    wanted: dict[str, list[float]] = {}
    for prefix, q in latencies:
        wanted.setdefault(prefix, []).append(q)
    quantiles = _quantilers(data, unit_of_request, units, wanted)
    rng = _rng(seed, point.point)
    drawn: dict[tuple[str, float] | str, list[np.ndarray]] = {(prefix, q): [] for prefix, q in latencies}
    drawn.update({name: [] for name in shares})
    biggest = max([len(data.samples[p].values) for p in wanted] + [1])
    block = max(1, min(resamples, 2_000_000 // biggest))
    done = 0
    while done < resamples:
        size = min(block, resamples - done)
        counts = _draw(rng, units, size)
        for prefix, qs in wanted.items():
            for q, figures in zip(qs, quantiles[prefix](counts, qs)):
                drawn[(prefix, q)].append(figures)
        per_request = counts[:, unit_of_request]
        with np.errstate(divide="ignore", invalid="ignore"):
            for name, indicator in shares.items():
                drawn[name].append(per_request @ np.asarray(indicator, dtype="float64") / per_request.sum(axis=1))
        done += size
    alpha = (1 - confidence) / 2
    ones = np.ones((1, units), dtype="int64")

    def interval(value: float, samples: list[np.ndarray]) -> Interval:
        r = np.concatenate(samples)
        r = r[np.isfinite(r)]
        if math.isnan(value) or len(r) < resamples / 2:
            return value, math.nan, math.nan
        low, high = np.quantile(r, [alpha, 1 - alpha])
        return value, float(low), float(high)

    out_latency = {
        (prefix, q): interval(float(quantiles[prefix](ones, [q])[0, 0]), drawn[(prefix, q)]) for prefix, q in latencies
    }
    out_share = {
        name: interval(float(np.mean(indicator)) if len(indicator) else math.nan, drawn[name]) for name, indicator in shares.items()
    }
    return out_latency, out_share


def _figures_of(data: _PointData, quantiles: dict[str, UnitQuantiles], unit_counts: np.ndarray, unit_of_request: np.ndarray) -> dict[str, np.ndarray]:
    """Every compared figure of `data` under `unit_counts` (rows = resamples)."""
    out: dict[str, np.ndarray] = {}
    for prefix, _ in LATENCY_METRICS:
        figures = quantiles[prefix](unit_counts, list(LATENCY_STATS.values()))
        for i, stat in enumerate(LATENCY_STATS):
            out[f"{prefix}_{stat}_ms"] = figures[i]
    counts = unit_counts[:, unit_of_request]
    with np.errstate(divide="ignore", invalid="ignore"):
        e2e = counts @ data.e2e
        for metric, _, column in THROUGHPUT_METRICS:
            out[metric] = (counts @ data.tokens[column]) / e2e * data.in_flight * 1e6
    return out
