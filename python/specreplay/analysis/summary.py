"""The per-point summary and the per-request listing.

Which requests count (warmup rows are always left out):

- request counts and duration: every measured request of the point;
- send lag: every measured request that was sent (the client's own delay does
  not depend on how the server answered);
- TTFT, TTFC, TPOT, TPS, ITL, E2E and tokens/s: successful requests only
  (`error_kind` null), and of TTFT, TPOT and E2E only those that generate:
  embeddings and rerank requests have figures of their own (`kind_figures`).

Percentiles are pandas' `Series.quantile` with linear interpolation between
the two nearest samples (numpy's default "linear" method); NaN samples (a
request with no content has no TTFC) are dropped first. Latencies are reported
in milliseconds, in columns named `<metric>_<stat>_ms`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from specreplay.analysis.analyse import analyse
from specreplay.analysis.point import measured
from specreplay.results import derived


def summarize(df: pd.DataFrame, points: list[dict[str, Any]] | None = None) -> pd.DataFrame:
    """One row per sweep point, in run order (see the module doc for which
    requests count); a frame holding several runs (a config file's named
    runs) gives each run's rows in turn. `points` is the config's list of
    {point, mode, value}; when omitted it is read from `df.attrs` (set by
    `specreplay.load`), and failing that the mode is parsed from the point
    label. The rows are those of `analysis.analyse(df)`, run by run.

    Columns: label, point, mode, target_rate_rps (rate points only), requests,
    ok, failed, errors_by_kind, duration_s (last end - first send),
    achieved_rate_rps (ok requests / duration), send_rate_rps (requests sent
    per second between first and last send), scheduled_rate_rps,
    `<latency>_<stat>_ms` for every latency in `LATENCIES` and stat in
    `STATS` (generating requests: embeddings and rerank have their own),
    tps_<stat> (per-request tokens/s), output_tok_s, reasoning_tok_s,
    content_tok_s, tool_call_tok_s (tokens of ok requests / duration), the
    request kinds' figures (`kind_figures`), chunks, multi_token_chunks
    (share of chunks with a known count above 1), bursts (ok requests left
    out of TPOT, TPS and ITL: `derived.bursts`), the client's own figures
    (`client_figures`), the server's (`servermetrics.figures.FIGURES`: NaN
    when the run scraped no metrics), the client's side of the acceptance
    cross-check, decode_chunk_tokens_mean and tokens_beyond_chunks, and under
    SLOs slo_good, slo_attainment, goodput_rps, goodput_tok_s (`goodput`; NaN
    without SLOs).
    """
    frames = [run.summary for run in analyse(df, points=points)]
    if len(frames) == 1:
        return frames[0]
    combined: pd.DataFrame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return combined

PER_REQUEST_COLUMNS: tuple[str, ...] = (
    "point",
    "request_index",
    "trace_id",
    "reasoning_tokens",
    "content_tokens",
    "tool_call_tokens",
    "output_tokens",
    "token_source",
    "ttft_ms",
    "ttfc_ms",
    "tpot_ms",
    "tps",
    "e2e_ms",
    "finish_reason",
    "error",
)


def per_request(df: pd.DataFrame, include_warmup: bool = False) -> pd.DataFrame:
    """One line per request (the `--per-request` listing), columns
    `PER_REQUEST_COLUMNS`: token counts, TTFT/TTFC/TPOT/E2E in ms, TPS in
    tokens/s, finish reason, and `error` = "<error_kind>: <error_message>"."""
    return request_lines(derived.add_derived(df if include_warmup else measured(df)))


def request_lines(data: pd.DataFrame) -> pd.DataFrame:
    """`per_request`'s listing of rows that already have the derived columns
    (an analysis' `rows`)."""
    out = pd.DataFrame(index=data.index)
    for column in ("point", "request_index", "trace_id", "reasoning_tokens", "content_tokens", "tool_call_tokens", "output_tokens", "token_source"):
        out[column] = data[column] if column in data.columns else None
    for name in ("ttft", "ttfc", "tpot", "e2e"):
        out[f"{name}_ms"] = data[f"{name}_us"] / 1000.0
    out["tps"] = data["tps"]
    out["finish_reason"] = data["finish_reason"]
    kind, message = data["error_kind"], data["error_message"]
    out["error"] = kind.where(message.isna(), kind + ": " + message)
    listing: pd.DataFrame = out[list(PER_REQUEST_COLUMNS)].reset_index(drop=True)
    return listing
