"""What the server's samples say about one sweep point: speculative decoding
(how many drafts it accepted, how many tokens a verification step gave) and
load (requests running and waiting, KV-cache usage, prefix-cache hits,
preemptions), plus the client's side of the acceptance cross-check.

Definitions (docs/results.md, "Server figures", shows each with pandas):

- a counter's figure is its **increase** over the point: from the point's
  first scrape (`start`, taken before its first request) to its last (`end`,
  after its last response), summed over label sets. A value lower than the
  one before is a reset (the server restarted) and counts from zero, as
  Prometheus' `increase()` does; a series that appears after the first
  scrape started from zero. So the increase covers the whole point, warmup
  requests included, and anything else the server did meanwhile;
- a gauge's figures come from the `tick` scrapes alone (the bracketing
  scrapes see the server idle between points): at each scrape the label
  sets are added (running, waiting: several engines) or averaged (KV usage
  and SGLang's own averages); then mean, p90 and max over the scrapes;
- rates divide by `server_window_s`, the time between the first and the
  last scrape.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from specreplay.servermetrics.names import AVERAGED_GAUGES, COUNTERS, SUMMED_GAUGES, known_names

#: Every figure `point_figures` returns, with what it means (docs/results.md
#: lists the same; a test keeps the two in step).
FIGURES: dict[str, str] = {
    "server_scrapes": "scrapes of the point's server metrics (0: none, and every other server figure is NaN)",
    "server_window_s": "seconds from the point's first scrape to its last: the window the counters' increases cover",
    "spec_drafts": "verification steps: the increase of `…spec_decode_num_drafts_total`",
    "spec_draft_tokens": "draft tokens proposed (`…num_draft_tokens_total`)",
    "spec_accepted_tokens": "draft tokens accepted (`…num_accepted_tokens_total`)",
    "spec_draft_len": "draft tokens per step, `spec_draft_tokens / spec_drafts`: the k of 'k drafts'",
    "spec_acceptance_rate": "`spec_accepted_tokens / spec_draft_tokens` (SGLang: the mean of `sglang:spec_accept_rate`)",
    "spec_acceptance_length": "tokens per verification step, `1 + spec_accepted_tokens / spec_drafts` (SGLang: the mean of `sglang:spec_accept_length`)",
    "spec_acceptance_by_position": "per draft position i from 0: the share of steps whose accepted run reached it (`…per_pos_total{position=i}` / `spec_drafts`); a tuple",
    "spec_drafts_per_s": "`spec_drafts / server_window_s`",
    "server_running_mean": "requests running (in the batch), mean over the tick scrapes",
    "server_running_p90": "requests running, p90 over the tick scrapes",
    "server_running_max": "requests running, the most any tick scrape saw",
    "server_waiting_mean": "requests waiting (queued), mean over the tick scrapes",
    "server_waiting_p90": "requests waiting, p90 over the tick scrapes",
    "server_waiting_max": "requests waiting, the most any tick scrape saw",
    "server_kv_usage_mean": "KV-cache usage as a fraction (1 = full), mean over the tick scrapes",
    "server_kv_usage_max": "KV-cache usage, the highest any tick scrape saw",
    "server_prefix_hit_rate": "prompt tokens found in the prefix cache / prompt tokens looked up, over the point (SGLang: the mean of `sglang:cache_hit_rate`)",
    "server_preemptions": "requests preempted (vLLM) or retracted (SGLang) during the point",
    "server_generation_tokens": "tokens the server generated during the point (`vllm:generation_tokens_total`, `llamacpp:tokens_predicted_total`, …)",
}


def empty_figures() -> dict[str, Any]:
    out: dict[str, Any] = {name: math.nan for name in FIGURES}
    out["server_scrapes"] = 0
    out["spec_acceptance_by_position"] = ()
    return out


def point_figures(samples: pd.DataFrame) -> dict[str, Any]:
    """The figures of one point from its samples (the rows of one label and
    point of `specreplay.load(path, metrics=True)`): every key of `FIGURES`,
    NaN where the server published nothing to compute it from."""
    out = empty_figures()
    if samples.empty:
        return out
    scrapes = np.sort(samples["ts_us"].unique())
    first = int(scrapes[0])
    window_s = (int(scrapes[-1]) - first) / 1e6
    out["server_scrapes"] = len(scrapes)
    out["server_window_s"] = window_s
    known = samples[samples["name"].isin(known_names())]

    inc = {key: _increase(known, names, first) for key, names in COUNTERS.items() if key != "accepted_per_position"}
    drafts, draft_tokens, accepted = inc["drafts"], inc["draft_tokens"], inc["accepted_tokens"]
    out["spec_drafts"], out["spec_draft_tokens"], out["spec_accepted_tokens"] = drafts, draft_tokens, accepted
    out["spec_draft_len"] = _ratio(draft_tokens, drafts)
    out["spec_acceptance_rate"] = _ratio(accepted, draft_tokens)
    out["spec_acceptance_length"] = 1 + _ratio(accepted, drafts)
    out["spec_drafts_per_s"] = _ratio(drafts, window_s)
    if drafts > 0:
        by_position = _increase_by_label(known, COUNTERS["accepted_per_position"], first, "position")
        out["spec_acceptance_by_position"] = tuple(by_position[p] / drafts for p in sorted(by_position, key=_position))

    ticks = known[known["scrape"] == "tick"]
    for key, names in SUMMED_GAUGES.items():
        series = _gauge(ticks, names, "sum")
        out[f"server_{key}_mean"], out[f"server_{key}_p90"], out[f"server_{key}_max"] = _stats(series)
    kv = _gauge(ticks, AVERAGED_GAUGES["kv_usage"], "mean")
    out["server_kv_usage_mean"], _, out["server_kv_usage_max"] = _stats(kv)
    # SGLang publishes its own averages instead of counters.
    if math.isnan(out["spec_acceptance_rate"]):
        out["spec_acceptance_rate"] = _stats(_gauge(ticks, AVERAGED_GAUGES["acceptance_rate"], "mean"))[0]
    if math.isnan(out["spec_acceptance_length"]):
        out["spec_acceptance_length"] = _stats(_gauge(ticks, AVERAGED_GAUGES["acceptance_length"], "mean"))[0]

    hits, queries, misses = inc["prefix_hits"], inc["prefix_queries"], inc["prefix_misses"]
    if not math.isnan(queries):
        out["server_prefix_hit_rate"] = _ratio(hits, queries)
    elif not math.isnan(misses):
        out["server_prefix_hit_rate"] = _ratio(hits, hits + misses)
    else:
        out["server_prefix_hit_rate"] = _stats(_gauge(ticks, AVERAGED_GAUGES["prefix_hit_rate"], "mean"))[0]
    out["server_preemptions"] = inc["preemptions"]
    out["server_generation_tokens"] = inc["generation_tokens"]
    return out


def gauge_series(samples: pd.DataFrame, key: str) -> pd.Series:
    """A gauge figure (`running`, `waiting`, `kv_usage`) at every scrape of
    `samples`, indexed by `ts_us`, its label sets added or averaged as in
    `point_figures`; for the report's time series."""
    how = "sum" if key in SUMMED_GAUGES else "mean"
    names = SUMMED_GAUGES.get(key) or AVERAGED_GAUGES[key]
    series: pd.Series = _gauge(samples[samples["name"].isin(names)], names, how)
    return series


def acceptance_series(samples: pd.DataFrame) -> pd.Series:
    """The draft acceptance rate between consecutive scrapes (accepted /
    draft tokens over each interval, where drafts were proposed), indexed by
    the interval's midpoint in µs; for the report's time series."""
    accepted = _counter_at_scrapes(samples, COUNTERS["accepted_tokens"])
    proposed = _counter_at_scrapes(samples, COUNTERS["draft_tokens"])
    if accepted.empty or proposed.empty:
        return pd.Series(dtype="float64")
    both = pd.concat([accepted, proposed], axis=1, keys=["accepted", "proposed"]).dropna()
    steps = both.diff().iloc[1:]
    ts = both.index.to_numpy(dtype="float64")
    rate = pd.Series((steps["accepted"] / steps["proposed"]).to_numpy(), index=(ts[1:] + ts[:-1]) / 2)
    # An interval without drafts has no rate; one across a reset, none we can tell.
    kept: pd.Series = rate[((steps["proposed"] > 0) & (steps["accepted"] >= 0)).to_numpy()]
    return kept


def _counter_at_scrapes(samples: pd.DataFrame, names: tuple[str, ...]) -> pd.Series:
    rows = _first_present(samples[samples["name"].isin(names)], names)
    totals: pd.Series = rows.groupby("ts_us")["value"].sum()
    return totals


def decode_tokens_per_chunk(chunks: pd.DataFrame) -> float:
    """The client's side of the acceptance cross-check: mean tokens per text
    chunk after each request's first (the first also carries the prefill's
    token), from the chunk frame (`derived.chunks`) of the successful
    requests. A server that streams each verification step as one chunk
    makes this its acceptance length."""
    if chunks.empty:
        return math.nan
    decode = chunks["tokens"][chunks["chunk_index"] > 0].dropna()
    return float(decode.mean()) if len(decode) else math.nan


def acceptance_mismatch(figures: dict[str, Any], beyond: float, output: float, per_chunk: float, max_gap: float) -> str | None:
    """The cross-check of the server's acceptance against what the client
    saw, or None when they agree (or there is no speculation to check).

    Compared as shares of the tokens generated, so that the server's window
    (warmup requests included, anything else it served) and the client's
    (this point's measured requests) need not hold the same requests: the
    server's `spec_accepted_tokens / server_generation_tokens` against the
    client's tokens beyond one per chunk / output tokens. They disagree when
    the difference exceeds `max_gap`; the message says which to trust, why."""
    accepted, generated = figures["spec_accepted_tokens"], figures["server_generation_tokens"]
    if not figures["spec_drafts"] > 0 or not generated > 0 or not output > 0:
        return None
    server, client = accepted / generated, beyond / output
    if abs(server - client) <= max_gap:
        return None
    said = (
        f"the server's counters say {server:.0%} of the tokens it generated were accepted drafts "
        f"({figures['spec_acceptance_length']:.2f} tokens per verification step), while "
        f"{client:.0%} of the output tokens arrived beyond one per chunk ({per_chunk:.2f} tokens per chunk after the first)"
    )
    if client < server:
        why = (
            "the server split its verification steps over several chunks (llama.cpp streams each token as a chunk), "
            "or its counters include requests this point did not measure (warmup, another client). Trust the server's "
            "acceptance: tokens per chunk do not show it here"
        )
    else:
        why = (
            "the server merged several steps into one chunk (a buffered stream, or a client that read late), or the "
            "output counts are estimates. Trust the server's acceptance; ITL per chunk is then not per step: "
            "compare ITL per token or TPOT"
        )
    return f"{said}: {why}."


def tokens_beyond_one_per_chunk(rows: pd.DataFrame) -> float:
    """The client's count of accepted drafts: over the successful requests in
    `rows`, the output tokens beyond one per text chunk,
    `sum(output_tokens - chunk_count)`. A server that streams each
    verification step as one chunk sends 1 + accepted tokens per step, so
    this equals its accepted-tokens counter, whatever share of its steps
    carried drafts (a step without one, or whose drafts were all rejected,
    is a chunk of one token). A token that makes no chunk of its own (the
    EOS, `</think>`) counts here too: about one per request."""
    ok = rows[rows["error_kind"].isna()]
    return float((ok["output_tokens"] - ok["chunk_count"]).sum()) if len(ok) else math.nan


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 and not math.isnan(a) else math.nan


def _first_present(frame: pd.DataFrame, names: tuple[str, ...]) -> pd.DataFrame:
    for name in names:
        rows: pd.DataFrame = frame[frame["name"] == name]
        if not rows.empty:
            return rows
    none: pd.DataFrame = frame.iloc[0:0]
    return none


def _series_increase(values: np.ndarray, appeared_late: bool) -> float:
    """The increase of one counter series over its samples in time order."""
    start = 0.0 if appeared_late else float(values[0])
    steps = np.diff(np.concatenate(([start], values)))
    # A drop is a reset: the counter restarted from 0 and reached this value.
    return float(np.where(steps < 0, values, steps).sum())


def _increases(rows: pd.DataFrame, first_ts: int) -> dict[str, float]:
    """Increase per label set (`labels` JSON)."""
    out: dict[str, float] = {}
    for labels, series in rows.sort_values("ts_us", kind="stable").groupby("labels", sort=False):
        values = series["value"].to_numpy(dtype=float)
        out[str(labels)] = _series_increase(values, appeared_late=int(series["ts_us"].iloc[0]) > first_ts)
    return out


def _increase(frame: pd.DataFrame, names: tuple[str, ...], first_ts: int) -> float:
    rows = _first_present(frame, names)
    return sum(_increases(rows, first_ts).values()) if not rows.empty else math.nan


def _increase_by_label(frame: pd.DataFrame, names: tuple[str, ...], first_ts: int, label: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for labels, increase in _increases(_first_present(frame, names), first_ts).items():
        value = str(json.loads(labels).get(label, ""))
        out[value] = out.get(value, 0.0) + increase
    return out


def _position(value: str) -> tuple[int, str]:
    return (int(value), "") if value.isdigit() else (1 << 30, value)


def _gauge(ticks: pd.DataFrame, names: tuple[str, ...], how: str) -> pd.Series:
    """The gauge at each tick scrape, its label sets added or averaged."""
    rows = _first_present(ticks, names)
    return rows.groupby("ts_us")["value"].agg(how)


def _stats(series: pd.Series) -> tuple[float, float, float]:
    if series.empty:
        return math.nan, math.nan, math.nan
    return float(series.mean()), float(series.quantile(0.9)), float(series.max())
