"""Results files: writing them crash-safely during a run, and loading them.

During a run, batches are appended to `<output>.partial` in the Arrow IPC
*stream* format and flushed as they arrive: a stream is readable up to its
last complete batch, so a crash (even `kill -9`) loses at most the batch in
flight. When the run ends, the stream is rewritten as an Arrow IPC *file*
(what `pandas.read_feather` and `pyarrow.ipc.open_file` read) with the final
metadata (validity findings) and atomically renamed to `<output>`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.ipc as ipc

from specreplay.errors import ResultsError
from specreplay.results.schema import ENGINE_COLUMNS, results_schema
from specreplay.results import server_samples as metrics_store

if TYPE_CHECKING:
    import pandas as pd  # no use at run time: `to_pandas` gives the frames

def partial_path(path: str | Path) -> Path:
    return Path(f"{path}.partial")


#: How many of the engine's batches `ResultsWriter` keeps as they came
#: before it copies them into one.
COMPACT_EVERY = 256


class ResultsWriter:
    """Appends engine batches, tagged with their run and point, to a results file."""

    def __init__(self, path: str | Path, metadata: dict[str, str]) -> None:
        self.path = Path(path)
        self.partial = partial_path(self.path)
        self.metadata = dict(metadata)
        self.schema = results_schema(self.metadata)
        self._sink = pa.OSFile(str(self.partial), "wb")
        self._writer = ipc.new_stream(self._sink, self.schema)
        # Kept in memory too: summaries and the final file need every row
        # without re-reading. The engine hands rows over as they finish, a
        # few at a time, in buffers sized for more: kept as they come they
        # cost some 20 KB a row (a 12,000-request point: 240 MB), so every
        # COMPACT_EVERY of them are copied into one batch (about 0.5 KB a row).
        self._batches: list[pa.RecordBatch] = []
        self._fresh: list[pa.RecordBatch] = []
        self.rows = 0

    def write(self, batch: pa.RecordBatch, *, run_id: str, label: str, point: str, point_index: int) -> pa.RecordBatch | None:
        """Appends `batch` with its run columns; returns it as written (None if empty)."""
        n = batch.num_rows
        if n == 0:
            return None
        run_columns = [
            pa.repeat(pa.scalar(run_id, pa.string()), n),
            pa.repeat(pa.scalar(label, pa.string()), n),
            pa.repeat(pa.scalar(point, pa.string()), n),
            pa.repeat(pa.scalar(point_index, pa.int32()), n),
            # A distributed run's batches say which worker sent them.
            batch.column("worker") if "worker" in batch.schema.names else pa.nulls(n, pa.string()),
        ]
        engine_columns = [batch.column(c.name) for c in ENGINE_COLUMNS]
        out = pa.RecordBatch.from_arrays(run_columns + engine_columns, schema=self.schema)
        self._writer.write_batch(out)
        self._sink.flush()
        self._fresh.append(out)
        if len(self._fresh) >= COMPACT_EVERY:
            self._batches += pa.Table.from_batches(self._fresh, schema=self.schema).combine_chunks().to_batches()
            self._fresh = []
        self.rows += n
        return out

    def replace_from(self, first_row: int, rows: pa.Table) -> None:
        """Puts `rows` in place of every row from `first_row` on (as many) in
        the final file; the partial stream keeps them as written."""
        kept = self.table().slice(0, first_row)
        if kept.num_rows + rows.num_rows != self.rows:
            raise ValueError(f"replace_from: {rows.num_rows} rows for the {self.rows - first_row} from row {first_row}")
        self._batches = kept.to_batches() + rows.to_batches()
        self._fresh = []

    def table(self, first_row: int = 0) -> pa.Table:
        """Every row written so far (from `first_row` on)."""
        return pa.Table.from_batches(self._batches + self._fresh, schema=self.schema).slice(first_row)

    def close(
        self,
        extra_metadata: dict[str, str] | None = None,
        finalize: Callable[[pa.Table], dict[str, str]] | None = None,
    ) -> Path:
        """Finishes the stream and rewrites it as the final IPC file.
        `finalize(table)` may add metadata computed from all rows (the
        validity findings)."""
        self._writer.close()
        self._sink.close()
        table = self.table()
        metadata = {**self.metadata, **(extra_metadata or {})}
        if finalize is not None:
            metadata.update(finalize(table.replace_schema_metadata(metadata)))
        table = table.replace_schema_metadata(metadata)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with pa.OSFile(str(tmp), "wb") as sink, ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        os.replace(tmp, self.path)
        self.partial.unlink()
        return self.path


#: The columns the analysis reads: a file without one of them is not a
#: results file it can use. Other columns are not required, so that files of
#: earlier versions (without `attempts`, say) still load.
ANALYSED_COLUMNS: tuple[str, ...] = (
    "label", "point", "point_index", "request_index", "trace_id", "warmup",
    "scheduled_us", "sent_us", "first_token_us", "first_content_us", "last_token_us", "end_us",
    "error_kind", "error_message", "finish_reason", "prompt_tokens", "reasoning_tokens", "content_tokens",
    "output_tokens", "token_source", "chunk_count", "chunk_ts_us", "chunk_tokens", "chunk_channel",
)  # fmt: skip


def _read_file(path: Path) -> pa.Table:
    try:
        with pa.memory_map(str(path), "rb") as source:
            return ipc.open_file(source).read_all()
    except pa.ArrowInvalid as e:
        raise ResultsError(str(path), f"not an Arrow IPC file ({e})") from None


def _read_stream(path: Path) -> pa.Table:
    """Reads an IPC stream up to its last complete batch (a crashed run's
    stream has no end-of-stream marker and may end mid-batch)."""
    batches = []
    with pa.OSFile(str(path), "rb") as source:
        try:
            reader = ipc.open_stream(source)
        except pa.ArrowInvalid as e:
            raise ResultsError(str(path), f"not an Arrow IPC stream ({e})") from None
        schema = reader.schema
        while True:
            try:
                batches.append(reader.read_next_batch())
            except StopIteration:
                break
            except (pa.ArrowInvalid, OSError):
                break
    return pa.Table.from_batches(batches, schema=schema)


def read_table(path: str | os.PathLike[str]) -> pa.Table:
    """The results as a pyarrow Table. Reads a crashed run's `.partial`
    stream when the final file was never written. Raises `ResultsError`
    for a file that is not a results file (not Arrow, or without the
    columns the analysis reads)."""
    p = Path(path)
    partial = partial_path(p)
    if p.exists():
        table, read = _read_file(p), p
    elif partial.exists():
        table, read = _read_stream(partial), partial
        samples = metrics_store.partial_path(p)
        if samples.exists():
            # As the final file would have held them.
            encoded = metrics_store.encode(metrics_store.from_partial(_read_stream(samples)))
            table = table.replace_schema_metadata({**(table.schema.metadata or {}), metrics_store.METADATA_KEY: encoded})
    else:
        raise FileNotFoundError(f"{path}: no results file (nor an interrupted run's {partial.name})")
    missing = [c for c in ANALYSED_COLUMNS if c not in table.column_names]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ResultsError(str(read), f"an Arrow file without the column(s) {shown} (docs/results.md lists a results file's columns)")
    return table


def read_server_metrics(path: str | os.PathLike[str]) -> pa.Table:
    """The server's samples of the run at `path` (`servermetrics.store`):
    from the results file, or from a crashed run's `.metrics.partial`
    stream; empty when the run scraped none."""
    p = Path(path)
    if p.exists():
        with pa.memory_map(str(p), "rb") as source:
            metadata = ipc.open_file(source).schema.metadata or {}
        return metrics_store.from_metadata(metadata)
    samples = metrics_store.partial_path(p)
    if samples.exists():
        return metrics_store.from_partial(_read_stream(samples))
    if partial_path(p).exists():
        return metrics_store.empty()
    raise FileNotFoundError(f"{path}: no results file (nor an interrupted run's {partial_path(p).name})")


# The results file's metadata keys (docs/results.md), every one of them here.
CONFIG_KEY = "specreplay.config"
VALIDITY_KEY = "specreplay.validity"
RUNS_KEY = "specreplay.runs"
VERSION_KEY = "specreplay.version"
RUN_ID_KEY = "specreplay.run_id"
TARGET_KEY = "specreplay.target"
MODEL_KEY = "specreplay.model"
STARTED_AT_KEY = "specreplay.started_at"
HOST_KEY = "specreplay.host"
INTERRUPTED_KEY = "specreplay.interrupted"
#: The distributed run's workers (JSON).
WORKERS_KEY = "specreplay.workers"
#: What each predicted point was predicted from (JSON).
PREDICTED_KEY = "specreplay.predicted"
#: What each run's capacity search found (JSON).
CAPACITY_KEY = "specreplay.capacity"
#: The scheduling each point's engine threads got (JSON).
SCHEDULING_KEY = "specreplay.scheduling"


def to_frame(table: pa.Table, *, list_arrays: bool = True) -> pd.DataFrame:
    """The table as a DataFrame with the file's schema metadata
    (`specreplay.version`, `specreplay.config`, …) as strings in `df.attrs`,
    where the analysis functions find the run's sweep points and max_tokens.

    pandas' default conversion applies to the flat columns: an integer
    column with nulls becomes float64 with NaN. The per-chunk list columns
    stay in their Arrow buffers (`pd.ArrowDtype` columns: a row of one is a
    Python list only when read alone), what the analysis reads (a replay
    analyses each point this way: no Python object per request or chunk);
    with `list_arrays=False` they hold a numpy array per row, as `load`
    gives them."""
    mapper = _arrow_lists if list_arrays else None
    df: pd.DataFrame = table.to_pandas(types_mapper=mapper)
    df.attrs = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    return df


def _arrow_lists(arrow_type: pa.DataType) -> Any:
    import pandas as pd  # loaded already: `to_pandas` calls this

    return pd.ArrowDtype(arrow_type) if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) else None


def load(path: str | os.PathLike[str], chunks: bool = False, metrics: bool = False) -> pd.DataFrame:
    """The results at `path`, one row per request (see `to_frame`). Reads an
    interrupted run's `.partial` stream when the final file was never written;
    raises `ResultsError` (naming the file) when it is not a results file.

    With `chunks=True`, one row per text-carrying chunk instead
    (`derived.chunks`: label, point, request_index, trace_id, warmup, ok,
    chunk_index, ts_us, tokens, channel, itl_us), for ITL analysis; the
    summaries use the rows with `ok & ~warmup`.

    With `metrics=True`, the server's Prometheus samples scraped during the
    run instead, one row per sample (`schema.SERVER_METRIC_COLUMNS`: ts_us,
    rtt_us, label, point, scrape, name, labels, type, value); empty when the
    run scraped none."""
    if chunks and metrics:
        raise ValueError("load: chunks=True or metrics=True, not both")
    if metrics:
        samples: pd.DataFrame = read_server_metrics(path).to_pandas()
        return samples
    df = to_frame(read_table(path), list_arrays=chunks)  # the chunk frame is made from the Arrow lists
    if not chunks:
        return df
    from specreplay.results import derived  # pandas: a replay writes files before it needs it (docs/benchmarks.md, "Start-up")

    frame = derived.chunks(df)
    frame.attrs = dict(df.attrs)
    return frame


def stored_configs(metadata: Mapping[Any, Any]) -> list[dict[str, Any]]:
    """Every run's resolved config as a results file's metadata recorded it
    (a config file may name several runs); [] when it recorded none."""
    text = metadata.get(RUNS_KEY)
    if text:
        runs = json.loads(text)
        if isinstance(runs, list):
            return [r for r in runs if isinstance(r, dict)]
    text = metadata.get(CONFIG_KEY)
    if not text:
        return []
    config = json.loads(text)
    if not isinstance(config, dict):
        raise ValueError(f"{CONFIG_KEY} is not a JSON object")
    return [config]


def run_configs(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Every run's resolved config (`stored_configs` of `df.attrs`)."""
    return stored_configs(df.attrs)


def run_config_of(df: pd.DataFrame, label: str | None) -> dict[str, Any]:
    """The resolved config of the run labelled `label`; in a file of one run,
    that run's (its label may be unset); {} when the file recorded none."""
    runs = run_configs(df)
    for run in runs:
        if run.get("label") == label:
            return run
    return runs[0] if len(runs) == 1 else {}


def config_points(df: pd.DataFrame) -> list[dict[str, Any]] | None:
    """The `points` (point, mode, value) of every run, or None when unknown."""
    points: dict[str, dict[str, Any]] = {}
    for run in run_configs(df):
        for p in run.get("points") or []:
            if isinstance(p, dict) and "point" in p:
                points.setdefault(str(p["point"]), p)
    return list(points.values()) or None
