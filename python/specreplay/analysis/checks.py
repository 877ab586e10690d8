"""The validity checks: what makes a measurement misleading, found and said aloud.

Each check (`CHECKS`) is a function of one analysed sweep point
(`summary_row.SummarisedPoint`: its rows and summary row), has a stable `code` (scripts may match on it)
and yields at most one `Finding`. Level "error" means the figures do not measure
what they claim; "warning" means they do, with a caveat to read; "note" is
how to read a figure (few samples, several tokens per chunk), which is not
wrong and so never fails `--strict`. Warmup rows are left out of every check.

The codes: reasoning_ate_budget, tool_args_cut, estimated_tokens, multi_token_chunks, burst_streams,
client_saturated, host_stalled, engine_delay, queue_growing, error_rate, session_turns_skipped,
acceptance_mismatch, too_few_requests, too_few_sessions, worker_lost, worker_send_lag, engine_panic.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from specreplay.analysis import checks_load
from specreplay.analysis.finding import Finding
from specreplay.analysis.resampling import record_id, samples_needed
from specreplay.analysis.summary_row import SummarisedPoint
from specreplay.results import derived
from specreplay.servermetrics import figures as server_figures

# Finish reasons meaning "the output hit the token limit", across dialects.
LENGTH_REASONS = frozenset({"length", "max_tokens", "max_output_tokens"})


def point_findings(point: SummarisedPoint) -> list[Finding]:
    """What `CHECKS` find on one analysed sweep point: errors, then
    warnings, then notes."""
    found = [f for f in (check_point(point) for check_point in CHECKS) if f is not None]
    return sorted(found, key=lambda f: ("error", "warning", "note").index(f.level))


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.0f}%" if whole else "n/a"


def _column(rows: pd.DataFrame, name: str) -> pd.Series:
    """`name` as float, 0 where a file of an earlier version has no such column."""
    if name not in rows.columns:
        zeros: pd.Series = pd.Series(np.zeros(len(rows)), index=rows.index)
        return zeros
    values: pd.Series = derived.as_float(rows, name)
    return values


def _reasoning_ate_budget(point: SummarisedPoint) -> Finding | None:
    rows, max_tokens = point.rows, point.max_tokens
    # No answer: neither content nor a tool call (a cut tool call is tool_args_cut).
    answer = derived.as_float(rows, "content_tokens") + _column(rows, "tool_call_tokens").fillna(0)
    hit = rows[rows["finish_reason"].isin(LENGTH_REASONS) & (answer == 0)]
    if hit.empty:
        return None
    spent = derived.as_float(hit, "reasoning_tokens")
    limit = f"max_tokens={max_tokens}" if max_tokens is not None else "max_tokens"
    return Finding(
        code="reasoning_ate_budget",
        level="error",
        point=point.point,
        count=len(hit),
        message=(
            f"{len(hit)} of {len(rows)} requests ({_pct(len(hit), len(rows))}) hit {limit} "
            f"with NO answer: all {int(spent.sum())} output tokens "
            f"(mean {spent.mean():.0f} per request) went to reasoning. "
            "Their TTFC is missing and their TPOT/TPS measure reasoning, not answers. "
            "Raise --max-tokens until no request ends this way."
        ),
    )


def _tool_args_cut(point: SummarisedPoint) -> Finding | None:
    """The agent's version of the budget trap: a tool call whose arguments
    the token limit cut, so they are not valid JSON and the call cannot run."""
    rows, max_tokens = point.rows, point.max_tokens
    tool = _column(rows, "tool_call_tokens").fillna(0)
    invalid = rows["tool_args_valid"].astype("boolean").fillna(True).eq(False) if "tool_args_valid" in rows.columns else pd.Series(False, index=rows.index)
    hit = rows[(tool > 0) & (rows["finish_reason"].isin(LENGTH_REASONS) | invalid.to_numpy(dtype=bool))]
    if hit.empty:
        return None
    limit = f"max_tokens={max_tokens}" if max_tokens is not None else "max_tokens"
    with_calls = int((tool > 0).sum())
    return Finding(
        code="tool_args_cut",
        level="error",
        point=point.point,
        count=len(hit),
        message=(
            f"{len(hit)} of {with_calls} requests with tool calls ({_pct(len(hit), with_calls)}) had their tool-call "
            f"arguments CUT (at {limit}, or not valid JSON): an agent could not run these calls, and their output "
            "figures measure a call that never completed. Raise --max-tokens until no tool call ends this way."
        ),
    )


def _error_rate(point: SummarisedPoint) -> Finding | None:
    rows, thresholds = point.rows, point.thresholds
    # A turn skipped after its session failed was never sent: not a request
    # that failed (session_turns_skipped says how many there were).
    sent = rows[~point.skipped]
    failed = rows[~point.ok & ~point.skipped]
    if sent.empty or len(failed) / len(sent) <= thresholds.max_error_rate:
        return None
    kinds = point.summary["errors_by_kind"]  # counted once, by the summary
    return Finding(
        code="error_rate",
        level="error",
        point=point.point,
        count=len(failed),
        message=(
            f"{len(failed)} of {len(sent)} requests failed ({_pct(len(failed), len(sent))}, "
            f"limit {thresholds.max_error_rate:.0%}) — {kinds}. "
            "Latency figures cover the successful requests only."
        ),
    )


def _session_turns_skipped(point: SummarisedPoint) -> Finding | None:
    skipped = int(point.skipped.sum())
    if not skipped:
        return None
    sessions = point.sessions
    cut = int((sessions["skipped"] > 0).sum())
    return Finding(
        code="session_turns_skipped",
        level="warning",
        point=point.point,
        count=skipped,
        message=(
            f"{skipped} turns of {cut} of {len(sessions)} sessions were not sent: an earlier turn of their "
            "session failed, and a session ends at its first failure (error_kind skipped_after_failure, "
            "counted apart from the errors). This point offered fewer requests than its trace has, "
            f"and its session figures cover the {int(sessions['completed'].sum())} completed sessions."
        ),
    )


def _estimated_tokens(point: SummarisedPoint) -> Finding | None:
    # The successful requests' counts only: the figures are theirs, and a
    # refused request (no usage, no tokens) estimated nothing.
    source = point.ok_rows["token_source"]
    no_usage = int((source == "chunks").sum())
    split = int((source == "usage_split_estimated").sum())
    if no_usage + split == 0:
        return None
    parts = []
    if no_usage:
        parts.append(
            f"{no_usage} requests had no usage from the server: every token count is one per chunk, "
            "an estimate (enable stream_options.include_usage, or continuous usage stats)"
        )
    if split:
        parts.append(f"{split} requests got a total from the server but the reasoning/content split is estimated")
    return Finding(
        code="estimated_tokens",
        level="warning",
        point=point.point,
        count=no_usage + split,
        message="Token counts are estimates: " + "; ".join(parts) + ". TPOT, TPS, per-token ITL and tokens/s inherit the error.",
    )


def _multi_token_chunks(point: SummarisedPoint) -> Finding | None:
    ok, frame = point.ok_rows, point.chunks
    several = frame.loc[frame["tokens"] > 1, "request_index"].unique()
    over = ok[derived.as_float(ok, "output_tokens") > derived.as_float(ok, "chunk_count")]
    requests = set(several) | set(over["request_index"])
    if not requests:
        return None
    share = float(point.summary["multi_token_chunks"])
    share_text = f"{share:.0%} of chunks carry more than one token; " if not math.isnan(share) else ""
    return Finding(
        code="multi_token_chunks",
        level="note",
        point=point.point,
        count=len(requests),
        message=(
            f"{len(requests)} of {len(ok)} requests received several tokens per chunk "
            f"(speculative decoding or server-side batching of the stream); {share_text}"
            "'ITL/chunk' is the gap between chunks, 'ITL/token' divides each gap by its chunk's tokens. "
            "Compare ITL/token (or TPOT) across servers, not ITL/chunk."
            + _estimated_chunk_counts(ok[ok["request_index"].isin(requests)])
        ),
    )


def _burst_streams(point: SummarisedPoint) -> Finding | None:
    ok = point.ok_rows
    burst = ok[ok["burst"]]
    if burst.empty:
        return None
    # Their TPOT as measured, before the analysis left it out.
    tpot = derived.as_float(burst, "last_token_us").sub(derived.as_float(burst, "first_token_us")) / (derived.as_float(burst, "output_tokens") - 1)
    e2e_share = (derived.as_float(burst, "ttft_us") / derived.as_float(burst, "e2e_us")).median()
    return Finding(
        code="burst_streams",
        level="warning",
        point=point.point,
        count=len(burst),
        message=(
            f"{len(burst)} of {len(ok)} requests arrived in a burst: their tokens after the first came at "
            f"{tpot.median():.3g} µs per token (median; under {point.thresholds.burst_us_per_token:g} µs, "
            "faster than any server decodes one stream), so the server or a proxy buffered the answer and sent it at once. "
            "They have no meaningful TPOT, TPS or ITL and are left out of those figures; "
            f"TTFT, E2E and tokens/s keep them (their TTFT is {e2e_share:.0%} of their E2E: it holds the whole generation)."
        ),
    )


def _acceptance_mismatch(point: SummarisedPoint) -> Finding | None:
    row = point.summary
    output = float(derived.as_float(point.ok_rows, "output_tokens").sum())
    message = server_figures.acceptance_mismatch(
        point.server, float(row["tokens_beyond_chunks"]), output, float(row["decode_chunk_tokens_mean"]),
        point.thresholds.max_acceptance_gap,
    )  # fmt: skip
    if message is None:
        return None
    return Finding(code="acceptance_mismatch", level="note", point=point.point, count=len(point.ok_rows), message=message)


def _estimated_chunk_counts(ok: pd.DataFrame) -> str:
    # Files written before `chunk_token_source` spread nothing: any count
    # but continuous usage was one per chunk there.
    if "chunk_token_source" in ok.columns:
        estimated = int(ok["chunk_token_source"].isin(("text_length", "one_per_chunk")).sum())
    else:
        estimated = int((ok["token_source"] != "continuous_usage").sum())
    if not estimated:
        return ""
    return (
        f" The per-chunk token counts of {estimated} requests are estimated (no continuous usage stats: "
        "the server's count split over the chunks by their text's length), so their ITL/token is right "
        "on average but not chunk by chunk: `replay --tokenizer tokenizer.json` counts them."
    )


def _percentiles_short(units: int, quantiles: tuple[float, ...] = (0.5, 0.9, 0.99)) -> tuple[list[str], str]:
    """The printed percentiles that `units` are too few to judge
    (`resampling.samples_needed`), and the counts they need."""
    short = [(f"p{round(q * 100)}", samples_needed(q)) for q in quantiles if units < samples_needed(q)]
    return [name for name, _ in short], ", ".join(f"{n} for a {name}" for name, n in short)


def _repeated_prompts(point: SummarisedPoint) -> int:
    """Successful requests that replay a trace record an earlier one sent."""
    ok = point.ok_rows
    if "trace_id" not in ok.columns:
        return 0
    return len(ok) - len({record_id(str(t)) for t in ok["trace_id"]})


def _too_few_requests(point: SummarisedPoint) -> Finding | None:
    ok = point.ok_rows
    units = len({record_id(str(t)) for t in ok["trace_id"]}) if "trace_id" in ok.columns else len(ok)
    short, needed = _percentiles_short(units)
    if not short:
        return None
    return Finding(
        code="too_few_requests",
        level="note",
        point=point.point,
        count=units,
        message=(
            f"only {units} distinct trace records among the {len(ok)} successful requests (at least {needed}: "
            f"resampling.samples_needed): the {' and '.join(short)} printed rest on fewer than 5 samples beyond them, "
            "so compare and the SLO verdicts call them `too few samples`."
        ),
    )


def _too_few_sessions(point: SummarisedPoint) -> Finding | None:
    sessions = point.sessions
    if sessions.empty:
        return None
    completed = int(sessions["completed"].sum())
    short, needed = _percentiles_short(completed, (0.5, 0.9))  # sessions print a p50 and a p90
    if not short:
        return None
    return Finding(
        code="too_few_sessions",
        level="note",
        point=point.point,
        count=completed,
        message=(
            f"only {completed} of {len(sessions)} sessions completed (at least {needed}: resampling.samples_needed): "
            f"the session duration {' and '.join(short)} printed rest on fewer than 5 sessions beyond them, "
            "so compare calls them `too few samples`."
        ),
    )


def _outside_calibration(point: SummarisedPoint) -> Finding | None:
    p = point.prediction
    if p is None:
        return None
    cal = p.get("calibration") or {}
    beyond = []
    seen = cal.get("max_in_flight")
    if isinstance(seen, int) and p.get("peak_running", 0) > seen:
        beyond.append(f"{p['peak_running']} requests running at once, the calibration runs saw at most {seen} in flight")
    sizes = cal.get("step_table_sizes")
    if isinstance(sizes, int) and sizes > 0 and p.get("peak_running", 0) > sizes:
        beyond.append(f"{p['peak_running']} requests in the batch, the decode step was measured for up to {sizes} decoding "
                      "(beyond: extrapolated by batch_step_cost)")
    if p.get("peak_waiting", 0) and isinstance(seen, int) and p["peak_running"] + p["peak_waiting"] > seen:
        beyond.append(f"{p['peak_waiting']} waiting at the peak")
    repeats = _repeated_prompts(point)
    if p.get("prefix_cache_modelled") is False and repeats:
        # Looping a short trace (--num-requests above its length) sends each
        # prompt again: a server's prefix cache serves those at a fraction of
        # the prefill, the model (which never saw a cache hit) at full cost.
        beyond.append(f"{repeats} of {len(point.ok_rows)} requests repeat a trace record's prompt, and the calibration "
                      "runs saw no prefix-cache hit: the model prefills each repeat in full, where a server with a "
                      "prefix cache serves it from there (calibrate with a run that repeats prompts too, e.g. the "
                      "same trace with --num-requests twice its length)")
    if not beyond and not p.get("assumptions"):
        return None
    parts = beyond + [a for a in p.get("assumptions", []) if "what-if" in a or "unknown" in a]
    return Finding(
        code="outside_calibration",
        # Beyond the measured range: a warning; only assumptions (unknowns, what-ifs): a note.
        level="warning" if beyond else "note",
        point=point.point,
        count=len(point.rows),
        message="predicted beyond what the calibration measured: " + "; ".join(parts),
    )


def _predicted(point: SummarisedPoint) -> Finding | None:
    p = point.prediction
    if p is None:
        return None
    return Finding(
        code="predicted",
        level="note",
        point=point.point,
        count=len(point.rows),
        message=f"PREDICTED, not measured: computed from the server model {p.get('model')} on a virtual clock (docs/predict.md)",
    )


#: Every check, in the order its findings are listed within a level. Each
#: takes an analysed sweep point and returns at most one finding.
CHECKS: tuple[Callable[[SummarisedPoint], Finding | None], ...] = (
    _predicted,
    _outside_calibration,
    _reasoning_ate_budget,
    checks_load.engine_panic,
    _tool_args_cut,
    checks_load.worker_lost,
    _error_rate,
    _session_turns_skipped,
    checks_load.client_saturated,
    checks_load.host_stalled,
    checks_load.engine_delay,
    checks_load.queue_growing,
    _estimated_tokens,
    _multi_token_chunks,
    _burst_streams,
    _acceptance_mismatch,
    _too_few_requests,
    _too_few_sessions,
    checks_load.worker_send_lag,
)
