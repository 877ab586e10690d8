"""The numbers behind the report: for each run, its summary, findings and
configuration, and plot-ready series (thinned to a few hundred points, so
the HTML stays small however long the run was).

A series is one (run, sweep point) pair. Times on the x axis are seconds
from the point's first send, so the points of a sweep overlay.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from specreplay.results import derived
from specreplay.results.files import SCHEDULING_KEY
from specreplay.analysis.analyse import PointAnalysis
from specreplay.comparison.compare import Run
from specreplay.servermetrics import figures as server_figures

#: Most points drawn per series (CDF steps, point clouds).
MAX_POINTS = 400


@dataclass
class PointData:
    """One (run, sweep point): what the plots draw."""

    run: str
    analysis: PointAnalysis  # its requests, the successful ones and their chunks
    start_us: float  # first send of the point

    @property
    def point(self) -> str:
        return self.analysis.point

    @property
    def name(self) -> str:
        return f"{self.run} · {self.point}"


@dataclass
class RunData:
    run: Run
    summary: pd.DataFrame
    points: list[PointData] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.run.name


def prepare(run: Run) -> RunData:
    """Summary and per-point plot data of `run`, from its analysis (its
    findings are read from `run.findings` when the page is rendered)."""
    out = RunData(run=run, summary=run.analysis.summary)
    for point in run.analysis.points:
        sent = derived.as_float(point.rows, "sent_us").dropna()
        start = float(sent.min()) if len(sent) else float(derived.as_float(point.rows, "scheduled_us").min())
        out.points.append(PointData(run.name, point, start))
    return out


def thin(x: np.ndarray, y: np.ndarray, limit: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most `limit` of the (x, y) pairs, evenly spaced in their order (deterministic)."""
    if len(x) <= limit:
        return x, y
    keep = np.unique(np.linspace(0, len(x) - 1, limit).round().astype(int))
    return x[keep], y[keep]


def cdf(values: pd.Series | np.ndarray, limit: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """Empirical CDF steps: sorted values and the share of samples at or below
    each, thinned to `limit` steps (the last, 100%, always kept)."""
    v = np.sort(np.asarray(values, dtype="float64"))
    v = v[np.isfinite(v)]
    if not len(v):
        return v, v
    share = np.arange(1, len(v) + 1) / len(v)
    if len(v) > limit:
        keep = np.unique(np.concatenate([np.linspace(0, len(v) - 1, limit).round().astype(int), [len(v) - 1]]))
        v, share = v[keep], share[keep]
    return v, share


def latency_ms(point: PointData, metric: str) -> np.ndarray:
    """Per-request `metric` (ttft, ttfc, tpot, e2e) of the ok requests, in ms, NaN dropped."""
    values = point.analysis.ok_rows[f"{metric}_us"].to_numpy(dtype="float64") / 1000.0
    return values[np.isfinite(values)]


def over_time(point: PointData, column_us: str, value: str, scale: float = 1.0, ok_only: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(seconds since the point's first send at `column_us`, `value` / scale) per request, in time order."""
    rows = point.analysis.ok_rows if ok_only else point.analysis.rows
    t = (derived.as_float(rows, column_us).to_numpy() - point.start_us) / 1e6
    y = rows[value].to_numpy(dtype="float64") / scale
    keep = np.isfinite(t) & np.isfinite(y)
    order = np.argsort(t[keep], kind="stable")
    return thin(t[keep][order], y[keep][order])


def bin_width_s(duration_s: float) -> float:
    """A round bin width giving about 40 bins over `duration_s` (at least 50 ms)."""
    if not math.isfinite(duration_s) or duration_s <= 0:
        return 1.0
    raw = max(duration_s / 40, 0.05)
    magnitude = 10 ** math.floor(math.log10(raw))
    return float(next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw))


def throughput(point: PointData, width_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Output tokens/s in bins of `width_s` by chunk arrival: (bin centres in s, tok/s)."""
    frame = point.analysis.chunks
    if frame.empty:
        return np.array([]), np.array([])
    t = (frame["ts_us"].to_numpy(dtype="float64") - point.start_us) / 1e6
    tokens = frame["tokens"].fillna(1.0).to_numpy(dtype="float64")
    bins = np.floor(t / width_s).astype(int)
    bins -= min(bins.min(), 0)
    totals = np.bincount(bins, weights=tokens)
    centres = (np.arange(len(totals)) + 0.5) * width_s
    return centres, totals / width_s


def tokens_per_chunk(point: PointData, top: int = 8) -> dict[str, float]:
    """Share of chunks carrying 1, 2, … tokens; counts of `top` or more share one bin."""
    counts = point.analysis.chunks["tokens"].dropna().to_numpy(dtype="float64")
    counts = counts[counts > 0]
    out = {}
    for k in range(1, top + 1):
        label = f"{k}" if k < top else f"≥{top}"
        n = (counts == k).sum() if k < top else (counts >= top).sum()
        out[label] = float(n) / len(counts) if len(counts) else math.nan
    return out


def has_server_metrics(runs: list[RunData]) -> bool:
    return any(p.analysis.server["server_scrapes"] for r in runs for p in r.points)


def has_speculation(runs: list[RunData]) -> bool:
    return any(p.analysis.server["spec_drafts"] > 0 for r in runs for p in r.points)


def server_gauge(point: PointData, key: str) -> tuple[np.ndarray, np.ndarray]:
    """A server gauge (`running`, `waiting`, `kv_usage`) at each scrape: (s since the point's first send, value)."""
    series = server_figures.gauge_series(point.analysis.server_samples, key)
    return (series.index.to_numpy(dtype="float64") - point.start_us) / 1e6, series.to_numpy(dtype="float64")


def server_acceptance(point: PointData) -> tuple[np.ndarray, np.ndarray]:
    """The draft acceptance rate over each scrape interval: (s since the point's first send, %)."""
    series = server_figures.acceptance_series(point.analysis.server_samples)
    return (series.index.to_numpy(dtype="float64") - point.start_us) / 1e6, series.to_numpy(dtype="float64") * 100


def prompt_vs_ttft(point: PointData) -> tuple[np.ndarray, np.ndarray]:
    ok = point.analysis.ok_rows
    x = derived.as_float(ok, "prompt_tokens").to_numpy()
    y = ok["ttft_us"].to_numpy(dtype="float64") / 1000.0
    keep = np.isfinite(x) & np.isfinite(y)
    order = np.argsort(x[keep], kind="stable")
    return thin(x[keep][order], y[keep][order])


def config_facts(config: dict[str, Any]) -> list[tuple[str, str]]:
    """The configuration keys worth a glance, as (key, text), in a fixed order."""
    keys = ("trace", "target", "url", "served_model", "model", "points", "max_tokens", "num_requests", "duration",
            "warmup", "seed", "arrival", "ignore_eos", "extra_body", "sim", "trace_sha256")
    out = []
    for key in keys:
        value = config.get(key)
        if value in (None, "", [], {}):
            continue
        if key == "points" and isinstance(value, list):
            value = ", ".join(str(p.get("point", p)) if isinstance(p, dict) else str(p) for p in value)
        elif key == "trace_sha256":
            value = str(value)[:16] + "…"
        elif isinstance(value, dict):
            value = ", ".join(f"{k} = {v}" for k, v in value.items())
        out.append((key, str(value)))
    return out


def scheduling_fact(run: Run) -> str | None:
    """What the run's engine threads got (`specreplay.scheduling`), in one
    line: each distinct pacer / workers pair over its points; None when the
    file does not say (older files, distributed and predicted runs)."""
    entries = [e for e in json.loads(run.df.attrs.get(SCHEDULING_KEY) or "[]") if e.get("label") == run.label]
    if not entries:
        return None
    pairs = dict.fromkeys(f"pacer {e['pacer'] or 'none'}, workers {e['workers'] or 'none'}" for e in entries)
    asked = "real-time asked" if any(e["realtime_asked"] for e in entries) else "real-time not asked"
    return "; ".join(pairs) + f" ({asked})"
