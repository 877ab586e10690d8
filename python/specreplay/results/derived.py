"""Derived per-request and per-chunk metrics, computed from a results DataFrame.

Every derived duration is in microseconds, as float64 with NaN where it is
undefined (a timestamp the request never reached, too few tokens). float64 is
exact here: epoch microseconds stay below 2**53 until the year 2255.

Per request (`add_derived`):

- ``ttft_us  = first_token_us - sent_us``    first output of any channel
- ``ttfc_us  = first_content_us - sent_us``  "time to answer": first content
- ``e2e_us   = end_us - sent_us``
- ``send_lag_us = sent_us - scheduled_us``   how late the client sent it
- ``tpot_us  = (last_token_us - first_token_us) / (output_tokens - 1)``,
  NaN when output_tokens < 2
- ``tps      = output_tokens / ((last_token_us - first_token_us) / 1e6)``,
  NaN when that span is not positive

``output_tokens`` is reasoning + content tokens, so TPOT and TPS include
reasoning: for a reasoning model they are not answer-only figures.

Per chunk (`chunks`): one row per text-carrying chunk, with ``itl_us`` the gap
to the previous text chunk of the same request (any channel; NaN for the first)
and ``delay_us`` the engine's own delay on that chunk (``chunk_delay_us``; NaN
where the chunk has no kernel stamp).

Inter-token latency comes in two flavours (`itl_per_chunk`, `itl_per_token`):
per chunk, each gap is one sample; per token, a gap ``g`` that ends a chunk of
``k`` tokens contributes ``k`` samples of ``g / k`` (`token_gaps`), so servers
that batch several tokens into one chunk are not credited with one slow token.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from specreplay.results.schema import CHANNELS

DERIVED_COLUMNS: tuple[str, ...] = ("ttft_us", "ttfc_us", "e2e_us", "send_lag_us", "tpot_us", "tps")

CHUNK_COLUMNS: tuple[str, ...] = (
    "label",
    "point",
    "request_index",
    "trace_id",
    "warmup",
    "ok",
    "chunk_index",
    "ts_us",
    "tokens",
    "channel",
    "itl_us",
    "delay_us",
)


def as_float(df: pd.DataFrame, column: str) -> pd.Series:
    """`column` as float64 with NaN for nulls, whatever dtype pandas chose
    (int64, float64 with NaN, nullable Int64 or pyarrow-backed)."""
    return pd.to_numeric(df[column], errors="raise").astype("float64")


def add_derived(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of `df` with the columns in `DERIVED_COLUMNS` added (see module doc)."""
    out: pd.DataFrame = df.copy()
    sent = as_float(df, "sent_us")
    first = as_float(df, "first_token_us")
    last = as_float(df, "last_token_us")
    tokens = as_float(df, "output_tokens")
    out["ttft_us"] = first - sent
    out["ttfc_us"] = as_float(df, "first_content_us") - sent
    out["e2e_us"] = as_float(df, "end_us") - sent
    out["send_lag_us"] = sent - as_float(df, "scheduled_us")
    span = last - first
    out["tpot_us"] = (span / (tokens - 1)).where(tokens >= 2)
    out["tps"] = (tokens / (span / 1e6)).where(span > 0)
    return out


def bursts(df: pd.DataFrame, us_per_token: float) -> pd.Series:
    """Per request of `df` (with `add_derived`'s columns): whether its stream
    arrived in a burst, its TPOT below `us_per_token`: the tokens after the
    first came faster than any server decodes one stream, so they were
    buffered and sent at once, and its chunk stamps time the network, not
    the decoding. False where TPOT is undefined (fewer than 2 tokens)."""
    burst: pd.Series = df["tpot_us"].lt(us_per_token).fillna(False).astype(bool)
    return burst


def leave_out_bursts(df: pd.DataFrame, us_per_token: float) -> pd.DataFrame:
    """A copy of `df` (with `add_derived`'s columns) with a `burst` column
    (`bursts`) and, for those requests, `tpot_us` and `tps` set to NaN: they
    have none that means anything. Their other figures stay."""
    out: pd.DataFrame = df.copy()
    burst = bursts(df, us_per_token)
    out["burst"] = burst
    out.loc[burst, ["tpot_us", "tps"]] = np.nan
    return out


def request_figures(df: pd.DataFrame, burst_us_per_token: float) -> pd.DataFrame:
    """The per-request figures every view reads: `add_derived`'s columns,
    then bursts left out of TPOT and TPS (`leave_out_bursts`). The analysis
    derives a point's rows with it, and the live view each drained batch, so
    that the TTFT and TPOT a run shows live are the summary's."""
    return leave_out_bursts(add_derived(df), burst_us_per_token)


def _list_array(df: pd.DataFrame, column: str, value_type: pa.DataType) -> pa.ListArray:
    return pa.array(df[column], type=pa.list_(value_type))


def chunks(df: pd.DataFrame) -> pd.DataFrame:
    """One row per text-carrying chunk of every request in `df` (columns `CHUNK_COLUMNS`).

    `label`, `point`, `request_index`, `trace_id` and `warmup` are the request's;
    `ok` is true when the request succeeded (`error_kind` null). Summaries use
    the chunks with `ok & ~warmup`.
    `channel` holds the names from `schema.CHANNELS`; `tokens` is NaN when the
    request has no per-chunk counts. The list columns are flattened by pyarrow
    in one pass: there is no Python loop per chunk.
    """
    ts_lists = _list_array(df, "chunk_ts_us", pa.int64())
    token_lists = _list_array(df, "chunk_tokens", pa.int32())
    channel_lists = _list_array(df, "chunk_channel", pa.int8())
    # Files written before the engine kept kernel stamps have no delays.
    delay_lists = (
        _list_array(df, "chunk_delay_us", pa.int32())
        if "chunk_delay_us" in df.columns
        else pa.nulls(len(df), type=pa.list_(pa.int32()))
    )
    lengths = pc.fill_null(pc.list_value_length(ts_lists), 0).to_numpy()
    # The per-chunk lists must line up; a null list (no chunks, or no counts) is allowed.
    for name, other in (("chunk_tokens", token_lists), ("chunk_channel", channel_lists), ("chunk_delay_us", delay_lists)):
        other_lengths = pc.list_value_length(other).to_numpy(zero_copy_only=False)
        mismatch = ~np.isnan(other_lengths.astype("float64")) & (other_lengths != lengths)
        if mismatch.any():
            raise ValueError(f"{name} and chunk_ts_us differ in length in {int(mismatch.sum())} rows")

    parent = pc.list_parent_indices(ts_lists).to_numpy()
    n_chunks = len(parent)
    ts = pc.list_flatten(ts_lists).to_numpy(zero_copy_only=False).astype("float64")
    starts = np.cumsum(lengths) - lengths
    chunk_index = np.arange(n_chunks) - np.repeat(starts, lengths)
    # Flatten the optional lists row by row against the timestamps' layout:
    # a row whose list is null gets NaN for each of its chunks.
    tokens = _aligned_values(token_lists, lengths)
    channel_codes = _aligned_values(channel_lists, lengths)
    delays = _aligned_values(delay_lists, lengths)

    gap = np.full(n_chunks, np.nan)
    if n_chunks > 1:
        gap[1:] = np.where(chunk_index[1:] > 0, np.diff(ts), np.nan)

    # The channel names are decoded by pyarrow from one byte a chunk (no
    # Python string per chunk); codes out of range read "unknown".
    codes = np.where(np.isnan(channel_codes), len(CHANNELS), channel_codes)
    codes = np.where((codes < 0) | (codes > len(CHANNELS)), len(CHANNELS), codes).astype("int8")
    channel = pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(CHANNELS + ("unknown",))).cast(pa.string())
    rows = df.reset_index(drop=True)
    label = rows["label"].array.take(parent) if "label" in rows.columns else np.full(n_chunks, None, dtype=object)
    warmup = rows["warmup"].astype("boolean").fillna(False).to_numpy(dtype=bool)
    ok = rows["error_kind"].isna().to_numpy(dtype=bool)
    # The string columns are taken as they are stored (pyarrow strings, for a
    # loaded file): turning them into Python objects and back would cost
    # more than the rest of the frame. The arrays made here are the frame's
    # own (copy=False): a copy would double the frame while it is built.
    frame: pd.DataFrame = pd.DataFrame(
        {
            "label": label,
            "point": rows["point"].array.take(parent),
            "request_index": rows["request_index"].to_numpy()[parent],
            "trace_id": rows["trace_id"].array.take(parent),
            "warmup": warmup[parent],
            "ok": ok[parent],
            "chunk_index": chunk_index.astype("int64"),
            "ts_us": ts,
            "tokens": tokens,
            "channel": pd.array(channel, dtype="str"),
            "itl_us": gap,
            "delay_us": delays,
        },
        columns=list(CHUNK_COLUMNS),
        copy=False,
    )
    return frame


def _aligned_values(lists: pa.ListArray, lengths: np.ndarray) -> np.ndarray:
    """Values of `lists` as float64, laid out like a flatten of lists of `lengths`
    items, with NaN for every item of a row whose list is null."""
    out = np.full(int(lengths.sum()), np.nan)
    present = ~np.asarray(pc.is_null(lists).to_numpy(zero_copy_only=False), dtype=bool)
    if present.any():
        mask = np.repeat(present, lengths)
        out[mask] = pc.list_flatten(lists).to_numpy(zero_copy_only=False).astype("float64")
    return out


def itl_per_chunk(chunk_frame: pd.DataFrame) -> np.ndarray:
    """Per-chunk ITL samples (µs), one per gap, in chunk order."""
    gaps = chunk_frame["itl_us"].to_numpy(dtype="float64")
    samples: np.ndarray = gaps[~np.isnan(gaps)]
    return samples


def token_gaps(chunk_frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The gaps that make per-token ITL samples: (their positions in
    `chunk_frame`, `g / k`, `k`) for each gap g ending a chunk of k tokens.
    Chunks with an unknown or zero token count give none (there is no token
    to attribute the gap to)."""
    gap = chunk_frame["itl_us"].to_numpy(dtype="float64")
    k = chunk_frame["tokens"].to_numpy(dtype="float64")
    usable = np.flatnonzero(~np.isnan(gap) & (k > 0))
    tokens = k[usable].astype("int64")
    return usable, gap[usable] / tokens, tokens


def itl_per_token(chunk_frame: pd.DataFrame) -> np.ndarray:
    """Per-token ITL samples (µs): a gap g ending a chunk of k tokens yields k
    samples of g / k (`token_gaps`)."""
    _, per_token, tokens = token_gaps(chunk_frame)
    samples: np.ndarray = np.repeat(per_token, tokens)
    return samples
