"""The live view's per-request figures of a results batch, with numpy and
pyarrow only: a replay draws them while its point runs, and pandas is not
imported until the point has ended (`run/pandas_later`,
docs/benchmarks.md, "Start-up"). The analysis's own, pandas, version is
`derived.request_figures`; `tests/test_arrow_lists.py` checks that the two
agree to the bit."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


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
    """A numeric Arrow column as float64 with NaN for nulls, read from its
    buffers. Neither `to_numpy` (pyarrow's pandas conversion: it imports
    pandas, 0.2 s of CPU) nor `pyarrow.compute` (35 ms to import, and its
    `cast`/`fill_null` are what `Array.cast` calls): the live view runs
    this at a point's first batch, and neither is imported until the point
    has ended (docs/benchmarks.md, "Start-up")."""
    values = _one_chunk(values)
    if pa.types.is_null(values.type):
        return np.full(len(values), np.nan)
    if not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
        raise TypeError(f"floats: a numeric column expected, not {values.type}")
    kind = "f" if pa.types.is_floating(values.type) else "i" if pa.types.is_signed_integer(values.type) else "u"
    dtype = np.dtype(f"{kind}{values.type.bit_width // 8}")
    data = np.frombuffer(values.buffers()[1], dtype=dtype, count=values.offset + len(values))[values.offset :]
    out = data.astype(np.float64)  # a copy: writable, and the Arrow buffer may go
    out[~valid(values)] = np.nan
    return out


def valid(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """True where `values` is not null, from its validity bitmap (`floats`:
    no pyarrow.compute)."""
    values = _one_chunk(values)
    if pa.types.is_null(values.type):
        return np.zeros(len(values), dtype=bool)
    bitmap = values.buffers()[0]
    if values.null_count == 0 or bitmap is None:
        return np.ones(len(values), dtype=bool)
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")
    return bits[values.offset : values.offset + len(values)].astype(bool)


def _one_chunk(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
