"""Where the scraped pages and their samples are kept, so that one results
file holds them.

During a point the scraper only fetches: every page is one Arrow record
batch, its raw bytes with their stamps, appended to `<output>.metrics.partial`
(an IPC *stream*) and flushed at once, so Ctrl-C or `kill -9` keeps every
scrape taken, as `<output>.partial` keeps every finished request. The pages
are parsed into samples between points (`SampleLog.parse_pending`), off the
cores the engine paces on: a vLLM page costs 11–20 ms of CPU to parse
(docs/benchmarks.md, "Scraping server metrics"). When the run ends, the
samples are folded into the results file itself, under the schema-metadata
key `specreplay.server_metrics`, and the stream is removed. The value is an
IPC stream too (strings dictionary-encoded, buffers zstd-compressed: a vLLM
page of ~470 samples repeats the same names every second), base64-encoded so
that the metadata stays valid UTF-8 for every Arrow reader.
`specreplay.load(path, metrics=True)` reads either, parsing a crashed run's
pages as the run would have.
"""

from __future__ import annotations

import base64
import json
import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.ipc as ipc

from specreplay.results.schema import server_metrics_schema

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

#: The results file's schema-metadata key that holds the samples.
METADATA_KEY = "specreplay.server_metrics"

#: One parsed sample: name, labels (JSON, sorted keys), family type, value.
Sample = tuple[str, str, str, float]

_SCHEMA = server_metrics_schema()
_STRINGS = [f.name for f in _SCHEMA if pa.types.is_string(f.type)]
#: What the partial stream holds: a scrape's stamps (the samples' first five
#: columns), and its page as the server sent it.
_STAMPS = _SCHEMA.names[:5]
_PAGES = pa.schema([*(_SCHEMA.field(n) for n in _STAMPS), pa.field("content_type", pa.string()), pa.field("page", pa.binary())])


@dataclass(frozen=True)
class Page:
    """One scrape as fetched: its stamps and the page's bytes."""

    ts_us: int
    rtt_us: int
    label: str
    point: str
    scrape: str
    content_type: str
    body: bytes


def parse(text: str, content_type: str = "") -> list[Sample]:
    """Every sample of a Prometheus (or OpenMetrics) page: name, labels as
    sorted-key JSON, the family's type, value. Raises ValueError for a page
    that is not one, or holds no sample."""
    families: Iterable[Metric]
    if content_type.startswith("application/openmetrics-text"):
        from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics

        families = openmetrics(text)  # type: ignore[no-untyped-call]
    else:
        from prometheus_client.parser import text_string_to_metric_families

        families = text_string_to_metric_families(text)
    out: list[Sample] = []
    labels_json: dict[tuple[tuple[str, str], ...], str] = {}
    for family in families:
        for sample in family.samples:
            key = tuple(sorted(sample.labels.items()))
            labels = labels_json.get(key)
            if labels is None:
                labels = labels_json[key] = json.dumps(dict(key), separators=(",", ":"))
            out.append((sample.name, labels, family.type, float(sample.value)))
    if not out:
        raise ValueError("the page holds no samples")
    return out


#: A sample line of the text format: a metric name, maybe labels, a value,
#: maybe a timestamp, maybe an OpenMetrics exemplar after " # ".
_SAMPLE_LINE = re.compile(rb"[A-Za-z_:][A-Za-z0-9_:]*(?:\{.*\})?[ \t]+(\S+)(?:[ \t]+-?[0-9.]+)?(?:[ \t]+#.*)?")


def check_looks_like_metrics(body: bytes) -> None:
    """Raises ValueError unless `body`'s first sample line reads as one
    (comments and blank lines skipped): an HTML or JSON page, or a bare
    "Not Found", does not. A cheap look, not a parse: the run's first page
    decides whether the target has metrics before any request is sent, and
    importing `prometheus_client` to parse it cost 14 ms of that CPU
    (bench/startup.py). Every page is parsed in full after its point, where a
    page that passed this look but does not parse is a failed scrape."""
    for line in body.splitlines():
        line = line.strip()
        if not line or line.startswith(b"#"):
            continue
        match = _SAMPLE_LINE.fullmatch(line)
        if match is None:
            raise ValueError(f"its first line that is not a comment is not a sample: {line[:60]!r}")
        try:
            float(match.group(1))
        except ValueError:
            raise ValueError(f"its first sample's value is not a number: {line[:60]!r}") from None
        return
    raise ValueError("the page holds no samples")


def samples_of(page: Page) -> pa.RecordBatch:
    """The page's samples, one row each, with its stamps. Raises ValueError
    for a page that is not Prometheus text."""
    samples = parse(page.body.decode("utf-8", "replace"), page.content_type)
    return _batch(page, samples)


def _batch(page: Page, samples: Sequence[Sample]) -> pa.RecordBatch:
    n = len(samples)
    names, labels, types, values = zip(*samples)
    return pa.RecordBatch.from_arrays(
        [
            pa.repeat(pa.scalar(page.ts_us, pa.int64()), n),
            pa.repeat(pa.scalar(page.rtt_us, pa.int64()), n),
            pa.repeat(pa.scalar(page.label, pa.string()), n),
            pa.repeat(pa.scalar(page.point, pa.string()), n),
            pa.repeat(pa.scalar(page.scrape, pa.string()), n),
            pa.array(names, pa.string()),
            pa.array(labels, pa.string()),
            pa.array(types, pa.string()),
            pa.array(values, pa.float64()),
        ],
        schema=_SCHEMA,
    )


def partial_path(output: str | Path) -> Path:
    return Path(f"{output}.metrics.partial")


class SampleLog:
    """The scrapes of a run: each page appended as fetched to the
    `.metrics.partial` stream (created with the first, so a run without
    server metrics leaves no file), and its samples, once parsed, kept in
    memory for the summaries and the final file."""

    def __init__(self, output: str | Path) -> None:
        self.partial = partial_path(output)
        self._sink: pa.OSFile | None = None
        self._writer: ipc.RecordBatchStreamWriter | None = None
        self._batches: list[pa.RecordBatch] = []
        self._pending: deque[Page] = deque()

    def add(self, page: Page) -> None:
        """Keeps `page` (on disk at once), parsed at the next `parse_pending`."""
        row = [pa.array([getattr(page, n)], _PAGES.field(n).type) for n in _STAMPS]
        batch = pa.RecordBatch.from_arrays([*row, pa.array([page.content_type], pa.string()), pa.array([page.body], pa.binary())], schema=_PAGES)
        if self._writer is None:
            self._sink = pa.OSFile(str(self.partial), "wb")
            self._writer = ipc.new_stream(self._sink, _PAGES, options=ipc.IpcWriteOptions(compression=_codec()))
        self._writer.write_batch(batch)
        assert self._sink is not None
        self._sink.flush()
        self._pending.append(page)

    def parse_pending(self) -> list[str]:
        """Parses the pages kept since the last call, in the order they were
        taken (between points: never while one runs). Returns why each page
        that is not Prometheus text was dropped."""
        dropped = []
        while self._pending:
            try:
                batch = samples_of(self._pending[0])
            except ValueError as e:
                dropped.append(f"not a Prometheus metrics page ({e})")
            else:
                self._batches.append(batch)
            self._pending.popleft()
        return dropped

    def table(self) -> pa.Table:
        """Every sample so far (the pages not yet parsed parsed now)."""
        self.parse_pending()
        return pa.Table.from_batches(self._batches, schema=_SCHEMA)

    def __len__(self) -> int:
        """The samples parsed so far."""
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


def from_partial(stream: pa.Table) -> pa.Table:
    """The samples of a crashed run's `.metrics.partial` stream, parsed from
    its pages as the run would have (pages that are not Prometheus text
    dropped, as the run drops them)."""
    if "page" not in stream.column_names:  # written before pages were kept raw: samples already
        return stream.cast(_SCHEMA)
    batches = []
    for row in stream.to_pylist():
        try:
            batches.append(samples_of(Page(**{**{n: row[n] for n in _STAMPS}, "content_type": row["content_type"], "body": row["page"]})))
        except ValueError:
            continue
    return pa.Table.from_batches(batches, schema=_SCHEMA)


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
