"""Where the scraped samples are kept, so that one results file holds them.

During a run every scrape is one Arrow record batch appended to
`<output>.metrics.partial` (an IPC *stream*) and flushed at once: Ctrl-C or
`kill -9` keeps every scrape taken, as `<output>.partial` keeps every finished
request. When the run ends, the samples are folded into the results file
itself, under the schema-metadata key `specreplay.server_metrics`, and the
stream is removed. The value is an IPC stream too (strings
dictionary-encoded, buffers zstd-compressed: a vLLM page of ~470 samples
repeats the same names every second), base64-encoded so that the metadata
stays valid UTF-8 for every Arrow reader. `specreplay.load(path,
metrics=True)` reads either.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

from specreplay.results.schema import server_metrics_schema

#: The results file's schema-metadata key that holds the samples.
METADATA_KEY = "specreplay.server_metrics"

#: One parsed sample: name, labels (JSON, sorted keys), family type, value.
Sample = tuple[str, str, str, float]

_SCHEMA = server_metrics_schema()
_STRINGS = [f.name for f in _SCHEMA if pa.types.is_string(f.type)]


def partial_path(output: str | Path) -> Path:
    return Path(f"{output}.metrics.partial")


class SampleLog:
    """The samples of a run: appended scrape by scrape to the `.metrics.partial`
    stream (created with the first scrape, so a run without server metrics
    leaves no file) and kept in memory for the summaries and the final file."""

    def __init__(self, output: str | Path) -> None:
        self.partial = partial_path(output)
        self._sink: pa.OSFile | None = None
        self._writer: ipc.RecordBatchStreamWriter | None = None
        self._batches: list[pa.RecordBatch] = []

    def append(self, *, ts_us: int, rtt_us: int, label: str, point: str, scrape: str, samples: Sequence[Sample]) -> None:
        n = len(samples)
        if n == 0:
            return
        names, labels, types, values = zip(*samples)
        batch = pa.RecordBatch.from_arrays(
            [
                pa.repeat(pa.scalar(ts_us, pa.int64()), n),
                pa.repeat(pa.scalar(rtt_us, pa.int64()), n),
                pa.repeat(pa.scalar(label, pa.string()), n),
                pa.repeat(pa.scalar(point, pa.string()), n),
                pa.repeat(pa.scalar(scrape, pa.string()), n),
                pa.array(names, pa.string()),
                pa.array(labels, pa.string()),
                pa.array(types, pa.string()),
                pa.array(values, pa.float64()),
            ],
            schema=_SCHEMA,
        )
        if self._writer is None:
            self._sink = pa.OSFile(str(self.partial), "wb")
            self._writer = ipc.new_stream(self._sink, _SCHEMA, options=ipc.IpcWriteOptions(compression=_codec()))
        self._writer.write_batch(batch)
        assert self._sink is not None
        self._sink.flush()
        self._batches.append(batch)

    def table(self) -> pa.Table:
        """Every sample so far."""
        return pa.Table.from_batches(self._batches, schema=_SCHEMA)

    def __len__(self) -> int:
        return sum(b.num_rows for b in self._batches)

    def close(self) -> None:
        """Ends the stream (it stays on disk until `remove`)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._sink is not None:
            self._sink.close()
            self._sink = None

    def remove(self) -> None:
        """Removes the stream, once its samples are in the results file."""
        self.close()
        self.partial.unlink(missing_ok=True)


def _codec() -> str | None:
    return "zstd" if pa.Codec.is_available("zstd") else None


def encode(table: pa.Table) -> str:
    """The samples as the metadata value: a compressed IPC stream, base64."""
    columns = [table.column(f.name).dictionary_encode() if f.name in _STRINGS else table.column(f.name) for f in _SCHEMA]
    packed = pa.Table.from_arrays(columns, names=_SCHEMA.names).combine_chunks().unify_dictionaries()
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, packed.schema, options=ipc.IpcWriteOptions(compression=_codec())) as writer:
        writer.write_table(packed)
    return base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")


def decode(text: str | bytes) -> pa.Table:
    """`encode`'s inverse: the samples with the plain-string schema."""
    data = base64.b64decode(text)
    table = ipc.open_stream(pa.BufferReader(data)).read_all()
    return table.cast(_SCHEMA)


def empty() -> pa.Table:
    return _SCHEMA.empty_table()


def from_metadata(metadata: Mapping[Any, Any]) -> pa.Table:
    """The samples a results file's schema metadata (bytes keys) or a loaded
    frame's `df.attrs` (str keys) holds; empty when it holds none."""
    text = metadata.get(METADATA_KEY) or metadata.get(METADATA_KEY.encode())
    return decode(text) if text else empty()
