"""The live view's per-request figures of a results batch, with numpy and
pyarrow only: a replay draws them while its point runs, and pandas is not
imported until the point has ended (`commands/pandas_later`,
docs/benchmarks.md, "Start-up"). The analysis's own, pandas, version is
`derived.request_figures`; `tests/test_arrow_lists.py` checks that the two
agree to the bit."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def batch_figures(batch: pa.RecordBatch | pa.Table, burst_us_per_token: float) -> dict[str, np.ndarray]:
    """`request_figures`' `ttft_us`, `tpot_us` (bursts NaN) and `send_lag_us`,
    with `end_us`, of a results batch: float64 arrays with NaN, computed by
    numpy from its Arrow columns (no pandas frame per batch: the live view
    takes every drained batch's), to the bit as `request_figures` has them."""

    def column(name: str) -> np.ndarray:
        return floats(batch.column(name))

    sent, first, tokens = column("sent_us"), column("first_token_us"), column("output_tokens")
    span = column("last_token_us") - first
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(tokens >= 2, span / (tokens - 1), np.nan)
    return {
        "ttft_us": first - sent,
        "tpot_us": np.where(tpot < burst_us_per_token, np.nan, tpot),
        "send_lag_us": sent - column("scheduled_us"),
        "end_us": column("end_us"),
    }


def floats(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """`values` as float64 with NaN for nulls. Through DLPack, not
    `to_numpy`: pyarrow's `to_numpy` runs its pandas conversion, which
    imports pandas (0.2 s of CPU) at a point's first batch."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    filled = pc.fill_null(pc.cast(values, pa.float64()), float("nan"))
    return np.array(np.from_dlpack(filled))  # a copy: writable, and the Arrow buffer may go


def flags(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A boolean Arrow column (nulls false) as a numpy bool array, without
    pandas (`floats`): DLPack takes no bit-packed booleans, so as bytes."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    as_bytes = pc.cast(pc.fill_null(values, False), pa.uint8())
    return np.from_dlpack(as_bytes).astype(bool)
