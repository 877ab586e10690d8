"""One sweep point's summary row (`point_summary`: the columns of
`summary.summarize`, whose module doc says which requests count), the
per-model rows (`by_model`) and the goodput; and `SummarisedPoint`, a
point with its summary row made on first use, which the checks read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from specreplay.analysis.point import PointRows
from specreplay.analysis.quantiles import describe
from specreplay.analysis.session_figures import summary_of
from specreplay.analysis.slo import goodput_intervals
from specreplay.results import derived
from specreplay.settings import latencies
from specreplay.servermetrics import figures as server_figures
from specreplay.trace.records import RETRIEVAL_APIS

# Summary name -> per-request column (µs) of `derived.add_derived`, or ITL sample column.
LATENCIES: dict[str, str] = {latency.name: latency.column for latency in latencies.LATENCIES}


def _span_s(start: pd.Series, end: pd.Series) -> float:
    if start.dropna().empty or end.dropna().empty:
        return math.nan
    return float(end.max() - start.min()) / 1e6

def point_summary(point: PointRows) -> dict[str, Any]:
    """The summary row of one analysed sweep point (`summarize`'s columns)."""
    rows, ok = point.rows, point.ok_rows
    sent = derived.as_float(rows, "sent_us").dropna()
    duration_s = _span_s(sent, derived.as_float(rows, "end_us"))
    send_span_s = _span_s(sent, sent)
    scheduled = derived.as_float(rows, "scheduled_us")[derived.as_float(rows, "sent_us").notna()]
    scheduled_span_s = _span_s(scheduled, scheduled)

    row: dict[str, Any] = {
        "label": point.label,
        "point": point.point,
        "mode": point.mode,
        "target_rate_rps": point.value if point.mode == "rate" else math.nan,
        "requests": len(rows),
        "ok": len(ok),
        # Turns skipped after their session failed are not failures: counted apart.
        "failed": len(rows) - len(ok) - int(point.skipped.sum()),
        # e.g. "http: 3, stall: 1": failures counted by error_kind, most first.
        "errors_by_kind": ", ".join(
            f"{kind}: {n}" for kind, n in rows["error_kind"][~point.skipped].dropna().value_counts().items()
        ),
        "duration_s": duration_s,
        "achieved_rate_rps": len(ok) / duration_s if duration_s > 0 else math.nan,
        "send_rate_rps": (len(sent) - 1) / send_span_s if send_span_s > 0 else math.nan,
        "scheduled_rate_rps": (len(scheduled) - 1) / scheduled_span_s if scheduled_span_s > 0 else math.nan,
    }
    itl = {"itl_chunk_us": point.itl_chunk_us, "itl_token_us": point.itl_token_us}
    # Embeddings and rerank have no tokens to time: their E2E is theirs (below).
    generating = ok[~_retrieval(ok)]
    for name, column in LATENCIES.items():
        samples = rows[column] if name == "send_lag" else itl[column] if column in itl else generating[column]
        for stat, figure in describe(samples, scale=1000.0).items():
            row[f"{name}_{stat}_ms"] = figure
    for stat, figure in describe(ok["tps"]).items():
        row[f"tps_{stat}"] = figure
    for kind in ("output", "reasoning", "content", "tool_call"):
        total = float(_numbers(ok, f"{kind}_tokens").sum())
        row[f"{kind}_tok_s"] = total / duration_s if duration_s > 0 else math.nan
    row.update(kind_figures(rows, ok, duration_s))
    tokens = point.chunks["tokens"].dropna()
    row["chunks"] = len(point.chunks)
    row["bursts"] = int(ok["burst"].sum()) if "burst" in ok.columns else 0
    row["multi_token_chunks"] = float((tokens > 1).mean()) if len(tokens) else math.nan
    row.update(client_figures(rows, point.chunks))
    row.update(summary_of(rows, point.sessions))
    row.update(goodput(point, duration_s))
    row.update(point.server)
    # The client's side of the acceptance cross-check (docs/results.md, "Server metrics").
    row["decode_chunk_tokens_mean"] = server_figures.decode_tokens_per_chunk(point.chunks)
    row["tokens_beyond_chunks"] = server_figures.tokens_beyond_one_per_chunk(rows)
    return row


def _numbers(rows: pd.DataFrame, column: str) -> pd.Series:
    """`column` as float; NaN throughout when a file of an earlier version lacks it."""
    if column not in rows.columns:
        missing: pd.Series = pd.Series(np.full(len(rows), math.nan), index=rows.index)
        return missing
    return derived.as_float(rows, column)


def _retrieval(rows: pd.DataFrame) -> pd.Series:
    if "api" not in rows.columns:
        none: pd.Series = pd.Series(np.zeros(len(rows), dtype=bool), index=rows.index)
        return none
    mask: pd.Series = rows["api"].isin(RETRIEVAL_APIS)
    return mask


def kind_figures(rows: pd.DataFrame, ok: pd.DataFrame, duration_s: float) -> dict[str, Any]:
    """Figures of the request kinds beyond text chat (docs/results.md, "Request kinds"):

    - `tool_call_requests`: ok requests the server answered with a tool call;
    - per non-streamed API (embeddings, rerank): `<api>_requests`, `<api>_ok`,
      `<api>_e2e_<stat>_ms` (their latency: no TTFT or TPOT, no tokens are
      generated), `<api>_items_s` (items per second of the point) and
      `<api>_input_tok_s` (input tokens per second, from the server's usage);
    - `media_requests` (ok requests with media parts) and TTFT split by
      requests with and without media, `ttft_media_<stat>_ms` and
      `ttft_text_<stat>_ms` (generating requests only);
    - `models`: requests per model, most first (`by_model` has their figures).
    """
    per_s = duration_s if duration_s > 0 else math.nan
    out: dict[str, Any] = {"tool_call_requests": int((_numbers(ok, "tool_calls").fillna(0) > 0).sum())}
    for api in sorted(RETRIEVAL_APIS):
        # Only the columns read: a filter of every column copies the chunk lists too.
        read = ok[[c for c in ("e2e_us", "items", "prompt_tokens") if c in ok.columns]]
        mine_ok = read[ok["api"] == api] if "api" in ok.columns else read.iloc[:0]
        out[f"{api}_requests"] = int((rows["api"] == api).sum()) if "api" in rows.columns else 0
        out[f"{api}_ok"] = len(mine_ok)
        for stat, figure in describe(mine_ok["e2e_us"], scale=1000.0).items():
            out[f"{api}_e2e_{stat}_ms"] = figure
        out[f"{api}_items_s"] = float(_numbers(mine_ok, "items").sum()) / per_s if len(mine_ok) else math.nan
        out[f"{api}_input_tok_s"] = float(_numbers(mine_ok, "prompt_tokens").sum()) / per_s if len(mine_ok) else math.nan
    generating = ok[~_retrieval(ok)]
    media = _numbers(generating, "media_count").fillna(0) > 0
    out["media_requests"] = int(media.sum())
    for split, mask in (("media", media), ("text", ~media)):
        for stat, figure in describe(generating["ttft_us"][mask], scale=1000.0).items():
            out[f"ttft_{split}_{stat}_ms"] = figure
    models = rows["model"].dropna() if "model" in rows.columns else pd.Series(dtype="object")
    out["models"] = ", ".join(f"{name}: {n}" for name, n in models.value_counts().items())
    return out


#: `by_model`'s columns after label, point and model.
MODEL_FIGURES: tuple[str, ...] = ("requests", "ok", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "e2e_p50_ms", "output_tok_s")


def by_model(point: PointRows) -> list[dict[str, Any]]:
    """One row per model the point's requests asked for (`model` column):
    requests, ok, TTFT p50/p99, TPOT p50, E2E p50 and output tokens/s over
    the point's duration. Empty when no request names a model, or only one
    does (the point's own figures are that model's)."""
    rows, ok = point.rows, point.ok_rows
    if "model" not in rows.columns or rows["model"].dropna().nunique() < 2:
        return []
    sent = derived.as_float(rows, "sent_us").dropna()
    duration_s = _span_s(sent, derived.as_float(rows, "end_us"))
    out = []
    for name in rows["model"].dropna().value_counts().index:
        mine, mine_ok = rows[rows["model"] == name], ok[ok["model"] == name]
        generating = mine_ok[~_retrieval(mine_ok)]
        ttft = describe(generating["ttft_us"], scale=1000.0)
        out.append({
            "label": point.label, "point": point.point, "model": str(name),
            "requests": len(mine), "ok": len(mine_ok),
            "ttft_p50_ms": ttft["p50"], "ttft_p99_ms": ttft["p99"],
            "tpot_p50_ms": describe(generating["tpot_us"], scale=1000.0)["p50"],
            "e2e_p50_ms": describe(mine_ok["e2e_us"], scale=1000.0)["p50"],
            "output_tok_s": float(_numbers(mine_ok, "output_tokens").sum()) / duration_s if duration_s > 0 else math.nan,
        })
    return out


def client_figures(rows: pd.DataFrame, chunk_frame: pd.DataFrame) -> dict[str, Any]:
    """The client's own part, from a point's measured `rows` and the chunks of
    its successful requests:

    - `engine_delay_<stat>_ms`: the engine's own delay per chunk (when it got
      the bytes minus the kernel's receive stamp), and `kernel_stamped`, the
      share of chunks that have a kernel stamp (the others carry the engine's
      stamp and no delay);
    - `connected`: requests that opened a connection during the run, and
      `connect_<stat>_ms`, their connection set-up time (kept out of no other
      figure: TTFT still counts from `sent_us`).
    """
    delays = chunk_frame["delay_us"]
    out: dict[str, Any] = {f"engine_delay_{stat}_ms": v for stat, v in describe(delays, scale=1000.0).items()}
    out["kernel_stamped"] = float(delays.notna().mean()) if len(delays) else math.nan
    connect = derived.as_float(rows, "connect_us").dropna() if "connect_us" in rows.columns else pd.Series(dtype="float64")
    out["connected"] = len(connect)
    out.update({f"connect_{stat}_ms": v for stat, v in describe(connect, scale=1000.0).items()})
    return out


#: Goodput columns: NaN for a run without SLOs (docs/capacity.md).
GOODPUT_COLUMNS: tuple[str, ...] = (
    "slo_good", "slo_attainment", "goodput_rps", "goodput_rps_low", "goodput_rps_high",
    "goodput_tok_s", "goodput_tok_s_low", "goodput_tok_s_high",
)  # fmt: skip


def goodput(point: PointRows, duration_s: float) -> dict[str, float]:
    """The point's requests that met every per-request SLO threshold: how
    many, their share of the measured requests, and per second of the
    point (requests and their output tokens), each rate with its bootstrap
    interval (`slo.goodput_intervals`: the trace records resampled, the
    duration with them, as `compare` resamples a throughput)."""
    if point.slo.empty:
        return dict.fromkeys(GOODPUT_COLUMNS, math.nan)
    good = point.slo_met
    n = int(good.sum())
    tokens = float(derived.as_float(point.rows, "output_tokens").to_numpy()[good].sum())
    per_s = duration_s if duration_s > 0 else math.nan
    out = {"slo_good": n, "slo_attainment": n / len(good) if len(good) else math.nan, "goodput_rps": n / per_s, "goodput_tok_s": tokens / per_s}
    intervals = goodput_intervals(point)
    for name in ("goodput_rps", "goodput_tok_s"):
        _, low, high = intervals.get(name, (math.nan, math.nan, math.nan))
        out[f"{name}_low"], out[f"{name}_high"] = low, high
    return out


@dataclass(frozen=True, eq=False)
class SummarisedPoint(PointRows):
    """A point with its summary row (`point_summary`), made on first use."""

    @cached_property
    def summary(self) -> dict[str, Any]:
        return point_summary(self)

