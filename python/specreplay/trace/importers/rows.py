"""What a format reader yields, and the streaming file readers and field
checks they share.

A reader turns its file into `Row`s (arrival, token counts, hash ids,
session, or real prompt text), `Skip`s (rows the format itself marks as
unusable, e.g. BurstGPT's failed requests: always skipped and counted) and
`RowError`s (malformed rows, as values: a generator that raised could not go
on). Every reader streams: memory is bounded by one row (or one element of a
JSON array), never by the file.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specreplay.errors import TraceError
from specreplay.trace.records import MAX_LINE_BYTES, TraceRecord, read_lines


@dataclass
class Row:
    line: int | None
    id: str
    arrival: float | None = None  # seconds, any origin
    input_tokens: int | None = None
    #: None: the source gives no output length (single-turn ShareGPT, vLLM
    #: rows without `output_tokens`); `Options.default_output_tokens` decides.
    output_tokens: int | None = None
    hash_ids: list[int] | None = None
    session_id: str | None = None
    prompt: str | None = None  # real prompt text (ShareGPT, vLLM)
    #: The conversation before `prompt` (ShareGPT's later turns): (role, text),
    #: roles as the chat API names them.
    history: list[tuple[str, str]] | None = None
    output_approximate: bool = False
    #: Seconds the source system took to answer (BurstGPT's `Elapsed time`).
    elapsed_s: float | None = None
    record: TraceRecord | None = None  # `capture`: already a record


@dataclass
class Skip:
    line: int | None
    reason: str


class RowError(Exception):
    def __init__(self, line: int | None, field: str | None, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.field = field
        self.message = message

    def where(self) -> str:
        return f"line {self.line}: " + (f"field '{self.field}': " if self.field else "") + self.message


Item = Row | Skip | RowError


def guard(parse: Callable[..., Row | Skip], *args: Any) -> Item:
    """One row parsed, or its error as a value."""
    try:
        return parse(*args)
    except RowError as e:
        return e


# --- fields ----------------------------------------------------------------------


def int_field(obj: dict[str, Any], key: str, line: int | None, *, minimum: int = 0, name: str | None = None) -> int:
    v = obj.get(key)
    if v is None:
        raise RowError(line, name or key, "missing")
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise RowError(line, name or key, f"must be an integer ≥ {minimum}, got {v!r}")
    return v


def seconds_field(obj: dict[str, Any], key: str, line: int | None) -> float:
    v = obj.get(key)
    if v is None:
        raise RowError(line, key, "missing")
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
        raise RowError(line, key, f"must be a non-negative number, got {v!r}")
    return float(v)


def csv_cell(value: str | None, line: int, column: str) -> str:
    text = (value or "").strip()
    if not text:
        raise RowError(line, column, "missing (empty cell)")
    return text


def csv_int(value: str | None, line: int, column: str) -> int:
    f = csv_seconds(value, line, column, what="integer")
    if not f.is_integer():
        raise RowError(line, column, f"must be a non-negative integer, got {csv_cell(value, line, column)!r}")
    return int(f)


def csv_seconds(value: str | None, line: int, column: str, what: str = "number of seconds") -> float:
    text = csv_cell(value, line, column)
    try:
        f = float(text)
    except ValueError:
        raise RowError(line, column, f"not a number: {text!r}") from None
    if not math.isfinite(f) or f < 0:
        raise RowError(line, column, f"must be a non-negative {what}, got {text!r}")
    return f


# --- files -----------------------------------------------------------------------


def json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line, parsed JSON or RowError) per non-blank, non-comment line."""
    for line_no, raw in read_lines(path):
        text = raw.strip()
        if not text or text.startswith(b"#"):
            continue
        try:
            yield line_no, json.loads(text)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            yield line_no, RowError(line_no, None, f"invalid JSON: {e}")


def csv_rows(path: Path, required: dict[str, str], optional: dict[str, str] | None = None) -> Iterator[tuple[int, dict[str, str]]]:
    """Rows of a CSV file as {role: value} for the `required` roles (and the
    `optional` ones the header has), columns found by header name (case- and
    space-insensitive), never by position."""
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            raise TraceError(str(path), None, None, "empty file (expected a CSV header)") from None
        except UnicodeDecodeError as e:
            raise TraceError(str(path), 1, None, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
        norm = {h.strip().lower(): i for i, h in enumerate(header)}
        index: dict[str, int] = {}
        for role, column in required.items():
            if column.lower() not in norm:
                raise TraceError(str(path), 1, column, f"missing column (the header has: {', '.join(h.strip() for h in header)})")
            index[role] = norm[column.lower()]
        for role, column in (optional or {}).items():
            if column.lower() in norm:
                index[role] = norm[column.lower()]
        width = len(header)
        try:
            for row in reader:
                line = reader.line_num
                if not row or all(not c.strip() for c in row):
                    continue
                if len(row) != width:
                    yield line, {"__error__": f"expected {width} columns, got {len(row)}"}
                    continue
                yield line, {role: row[i] for role, i in index.items()}
        except UnicodeDecodeError as e:
            raise TraceError(str(path), reader.line_num + 1, None, f"not UTF-8 text ({e.reason})") from None


_SEPARATORS = re.compile(r"[\s,]*")
#: Bytes read at a time from a JSON array; an element longer than the buffer
#: grows it (up to MAX_LINE_BYTES, the same bound as a trace line).
_CHUNK = 1 << 20


def json_array(path: Path) -> Iterator[tuple[int, int, Any]]:
    """(index, line, element) of a top-level JSON array, read a chunk at a
    time: memory holds the element being parsed, not the file (ShareGPT's
    full file is 600+ MB). `line` is where the element starts."""
    decoder = json.JSONDecoder()
    name = str(path)
    with path.open("r", encoding="utf-8") as f:
        buf = ""
        pos = 0  # parse position in buf
        line = 1  # line number at pos
        eof = False

        def more() -> None:
            nonlocal buf, pos, eof
            try:
                chunk = f.read(max(_CHUNK, len(buf) - pos))
            except UnicodeDecodeError as e:
                raise TraceError(name, line, None, f"not UTF-8 text ({e.reason})") from None
            eof = not chunk
            buf = buf[pos:] + chunk
            pos = 0

        def skip_separators() -> None:
            nonlocal pos, line
            while True:
                end = _SEPARATORS.match(buf, pos).end()  # type: ignore[union-attr]
                line += buf.count("\n", pos, end)
                pos = end
                if pos < len(buf) or eof:
                    return
                more()

        skip_separators()
        if not buf.startswith("[", pos):
            raise TraceError(name, line, None, "expected a JSON array of conversations")
        pos += 1
        index = 0
        while True:
            skip_separators()
            if pos >= len(buf):
                raise TraceError(name, line, None, "invalid JSON: the array is not closed")
            if buf[pos] == "]":
                return
            while True:
                try:
                    obj, end = decoder.raw_decode(buf, pos)
                    if end < len(buf) or eof:
                        break
                    more()  # a number could go on in the next chunk
                except json.JSONDecodeError as e:
                    # Either the element is cut by the end of the buffer (read
                    # more) or it is not JSON (say where).
                    if eof or len(buf) - pos > MAX_LINE_BYTES:
                        at = line + buf.count("\n", pos, e.pos)
                        raise TraceError(name, at, None, f"invalid JSON: {e.msg}") from None
                    more()
            yield index, line, obj
            index += 1
            line += buf.count("\n", pos, end)
            pos = end
