"""`specreplay import FORMAT FILE`: public traces into the specreplay trace
format (docs/trace-format.md, "Importing public traces").

Each reader turns its file into `Row`s (arrival, token counts, hash ids,
session, or real prompt text) or `Skip`s (rows the format itself marks as
unusable, e.g. BurstGPT's failed requests: always skipped and counted).
A malformed row raises `RowError`; `import_trace` turns it into a
`TraceError` naming the file, line and field, or with `skip_invalid` counts
it and goes on. Rows are then sorted by arrival (stable), re-based so the
first arrives at 0, and given prompts: token counts become synthesized text
(`specreplay.text`), output lengths become `max_tokens` + `min_tokens` +
`ignore_eos` so the server generates what the trace says.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specreplay.errors import ConfigError, TraceError
from specreplay.text import PromptMaker, Tokenizer, approx_tokens
from specreplay.trace import TraceRecord, _parse_record


@dataclass
class Row:
    line: int | None
    id: str
    arrival: float | None = None  # seconds, any origin
    input_tokens: int | None = None
    output_tokens: int | None = None
    hash_ids: list[int] | None = None
    session_id: str | None = None
    prompt: str | None = None  # real prompt text (ShareGPT, vLLM)
    output_approximate: bool = False
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


MALFORMED = "malformed rows (--skip-invalid)"


@dataclass
class ImportReport:
    format: str
    source: str
    output: str
    written: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    reordered: int = 0
    approximate: int = 0
    first_malformed: str | None = None

    def lines(self) -> list[str]:
        out = [f"imported {self.written} requests from {self.source} ({self.format}) into {self.output}"]
        for reason, n in sorted(self.skipped.items()):
            first = f" (first: {self.first_malformed})" if reason == MALFORMED and self.first_malformed else ""
            out.append(f"skipped {n}: {reason}{first}")
        if self.reordered:
            out.append(f"sorted by arrival time: {self.reordered} rows were out of order")
        if self.approximate:
            out.append(
                f"{self.approximate} records have approximate token counts (marked \"approximate\": true; "
                "give --tokenizer for exact prompt lengths)"
            )
        return out


@dataclass
class Options:
    block_size: int | None = None
    time_unit: str | None = None
    api: str = "chat"
    model: str | None = None
    limit: int | None = None
    skip_invalid: bool = False
    seed: int = 0


def _int(obj: dict[str, Any], key: str, line: int | None, *, minimum: int = 0, name: str | None = None) -> int:
    v = obj.get(key)
    if v is None:
        raise RowError(line, name or key, "missing")
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise RowError(line, name or key, f"must be an integer ≥ {minimum}, got {v!r}")
    return v


def _csv_int(value: str | None, line: int, column: str) -> int:
    text = (value or "").strip()
    try:
        f = float(text)
    except ValueError:
        raise RowError(line, column, f"not a number: {text!r}") from None
    if not math.isfinite(f) or f < 0 or not f.is_integer():
        raise RowError(line, column, f"must be a non-negative integer, got {text!r}")
    return int(f)


def _json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, start=1):
            text = raw.strip()
            if not text or text.startswith(b"#"):
                continue
            try:
                yield line_no, json.loads(text)
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                yield line_no, RowError(line_no, None, f"invalid JSON: {e}")


def _csv_rows(path: Path, required: dict[str, str]) -> Iterator[tuple[int, dict[str, str]]]:
    """Rows of a CSV file as {role: value} for the `required` roles, columns
    found by header name (case- and space-insensitive)."""
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            raise TraceError(str(path), None, None, "empty file (expected a CSV header)") from None
        norm = {h.strip().lower(): i for i, h in enumerate(header)}
        index: dict[str, int] = {}
        for role, column in required.items():
            if column.lower() not in norm:
                raise TraceError(str(path), 1, column, f"missing column (the header has: {', '.join(h.strip() for h in header)})")
            index[role] = norm[column.lower()]
        width = len(header)
        for row in reader:
            line = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != width:
                yield line, {"__error__": f"expected {width} columns, got {len(row)}"}
                continue
            yield line, {role: row[i] for role, i in index.items()}


def _guard(parse: Callable[..., Row | Skip], *args: Any) -> Row | Skip | RowError:
    """One row parsed, or its error as a value (a generator that raised could not go on)."""
    try:
        return parse(*args)
    except RowError as e:
        return e


# --- formats -------------------------------------------------------------------


def read_mooncake(path: Path, opts: Options) -> Iterator[Row | Skip | RowError]:
    """Mooncake (FAST'25) and Qwen Bailian (ATC'25) JSONL."""
    unit = opts.time_unit or "ms"
    block = opts.block_size or 512
    roots: dict[str, str] = {}
    for line, obj in _json_lines(path):
        yield _guard(_mooncake_row, line, obj, unit, block, roots)


def _mooncake_row(line: int, obj: Any, unit: str, block: int, roots: dict[str, str]) -> Row:
    if isinstance(obj, RowError):
        raise obj
    if not isinstance(obj, dict):
        raise RowError(line, None, f"expected a JSON object, got {type(obj).__name__}")
    ts = obj.get("timestamp")
    if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not math.isfinite(ts) or ts < 0:
        raise RowError(line, "timestamp", f"must be a non-negative number, got {ts!r}")
    inp = _int(obj, "input_length", line)
    out = _int(obj, "output_length", line)
    hash_ids = obj.get("hash_ids")
    if hash_ids is not None:
        if not isinstance(hash_ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hash_ids):
            raise RowError(line, "hash_ids", "must be a list of integers")
        need = -(-inp // block)
        if len(hash_ids) != need:
            raise RowError(
                line, "hash_ids",
                f"{len(hash_ids)} blocks, but input_length {inp} needs ceil({inp}/{block}) = {need} "
                f"at block size {block} (is --block-size right?)",
            )
    session = None
    if "chat_id" in obj:
        chat = str(obj["chat_id"])
        parent = obj.get("parent_chat_id")
        root = chat if parent in (None, -1, "-1", "") else roots.get(str(parent), str(parent))
        if len(roots) < 1 << 22:
            roots[chat] = root
        session = root
    return Row(
        line=line, id=str(line), arrival=float(ts) / (1000.0 if unit == "ms" else 1.0),
        input_tokens=inp, output_tokens=out, hash_ids=hash_ids, session_id=session,
    )


_AZURE_TS = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s*(Z|[+-]\d{2}:?\d{2})?$"
)


def parse_timestamp_us(text: str) -> int:
    """`2023-11-16 18:17:03.979960`, `2024-05-10 00:00:00+00:00`,
    `…00:00:00.0014+00:00`, `…Z` → µs since the epoch (no zone = UTC)."""
    m = _AZURE_TS.match(text.strip())
    if not m:
        raise ValueError(f"not a timestamp like 2023-11-16 18:17:03.979960[+00:00]: {text!r}")
    y, mo, d, h, mi, s, frac, tz = m.groups()
    offset = dt.timedelta(0)
    if tz and tz != "Z":
        sign = -1 if tz[0] == "-" else 1
        digits = tz[1:].replace(":", "")
        offset = sign * dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    base = dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), tzinfo=dt.timezone(offset))
    seconds = int(base.timestamp())
    micros = int((frac or "0").ljust(6, "0")[:6])
    return seconds * 1_000_000 + micros


def read_azure(path: Path, opts: Options) -> Iterator[Row | Skip | RowError]:
    """Azure LLM inference traces 2023/2024: TIMESTAMP,ContextTokens,GeneratedTokens."""
    cols = {"ts": "TIMESTAMP", "in": "ContextTokens", "out": "GeneratedTokens"}
    for line, row in _csv_rows(path, cols):
        yield _guard(_azure_row, line, row)


def _azure_row(line: int, row: dict[str, str]) -> Row:
    if "__error__" in row:
        raise RowError(line, None, row["__error__"])
    try:
        us = parse_timestamp_us(row["ts"])
    except ValueError as e:
        raise RowError(line, "TIMESTAMP", str(e)) from None
    return Row(
        line=line, id=str(line), arrival=us / 1e6,
        input_tokens=_csv_int(row["in"], line, "ContextTokens"),
        output_tokens=_csv_int(row["out"], line, "GeneratedTokens"),
    )


def read_burstgpt(path: Path, opts: Options) -> Iterator[Row | Skip | RowError]:
    """BurstGPT: Timestamp (s), Request tokens, Response tokens; 0 response tokens = failed."""
    cols = {"ts": "Timestamp", "in": "Request tokens", "out": "Response tokens"}
    for line, row in _csv_rows(path, cols):
        yield _guard(_burstgpt_row, line, row)


def _burstgpt_row(line: int, row: dict[str, str]) -> Row | Skip:
    if "__error__" in row:
        raise RowError(line, None, row["__error__"])
    try:
        ts = float(row["ts"])
    except ValueError:
        raise RowError(line, "Timestamp", f"not a number: {row['ts']!r}") from None
    if not math.isfinite(ts) or ts < 0:
        raise RowError(line, "Timestamp", f"must be a non-negative number of seconds, got {row['ts']!r}")
    out = _csv_int(row["out"], line, "Response tokens")
    if out == 0:
        return Skip(line, "failed requests (0 response tokens)")
    return Row(line=line, id=str(line), arrival=ts, input_tokens=_csv_int(row["in"], line, "Request tokens"), output_tokens=out)


def _json_array(path: Path) -> Iterator[tuple[int, int, Any]]:
    """(index, line, element) of a top-level JSON array, with the line where
    each element starts."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise TraceError(str(path), None, None, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    decoder = json.JSONDecoder()
    ws = re.compile(r"[\s,]*")
    pos = ws.match(text, 0).end()  # type: ignore[union-attr]
    if not text.startswith("[", pos):
        raise TraceError(str(path), None, None, "expected a JSON array of conversations")
    pos += 1
    line, counted, index = 1, 0, 0
    while True:
        pos = ws.match(text, pos).end()  # type: ignore[union-attr]
        line += text.count("\n", counted, pos)
        counted = pos
        if pos >= len(text):
            raise TraceError(str(path), line, None, "invalid JSON: the array is not closed")
        if text[pos] == "]":
            return
        try:
            obj, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise TraceError(str(path), e.lineno, None, f"invalid JSON: {e.msg} (column {e.colno})") from None
        yield index, line, obj
        index += 1
        pos = end


def read_sharegpt(path: Path, opts: Options, tokenizer: Tokenizer | None = None) -> Iterator[Row | Skip | RowError]:
    """ShareGPT: [{"conversations": [{"from", "value"}, …]}]: prompt = first turn,
    output length = tokens of the second; fewer than two turns = skipped."""
    for index, line, obj in _json_array(path):
        yield _guard(_sharegpt_row, line, index, obj, tokenizer)


def _sharegpt_row(line: int, index: int, obj: Any, tokenizer: Tokenizer | None) -> Row | Skip:
    where = f"[{index}]"
    if not isinstance(obj, dict):
        raise RowError(line, where, f"expected an object, got {type(obj).__name__}")
    conv = obj.get("conversations")
    if not isinstance(conv, list):
        raise RowError(line, f"{where}.conversations", "missing or not a list")
    if len(conv) < 2:
        return Skip(line, "conversations with fewer than two turns")
    values = []
    for t in (0, 1):
        turn = conv[t]
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise RowError(line, f"{where}.conversations[{t}].value", "missing or not a string")
        values.append(turn["value"])
    prompt, answer = values
    out = tokenizer.count(answer) if tokenizer is not None else approx_tokens(answer)
    if not prompt.strip() or out == 0:
        return Skip(line, "empty prompt or reply")
    return Row(line=line, id=str(index), prompt=prompt, output_tokens=out, output_approximate=tokenizer is None)


def read_vllm(path: Path, opts: Options) -> Iterator[Row | Skip | RowError]:
    """vLLM custom dataset JSONL: {"prompt": "…", "output_tokens": N (optional)}."""
    for line, obj in _json_lines(path):
        yield _guard(_vllm_row, line, obj)


def _vllm_row(line: int, obj: Any) -> Row:
    if isinstance(obj, RowError):
        raise obj
    if not isinstance(obj, dict):
        raise RowError(line, None, f"expected a JSON object, got {type(obj).__name__}")
    prompt = obj.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise RowError(line, "prompt", "missing or not a non-empty string")
    out = _int(obj, "output_tokens", line, minimum=1) if obj.get("output_tokens") is not None else None
    return Row(line=line, id=str(line), prompt=prompt, output_tokens=out)


def read_capture(path: Path, opts: Options) -> Iterator[Row | Skip | RowError]:
    """A specreplay trace in any record order (a capture that was killed
    before it could sort its records): validated line by line, then sorted."""
    for line, obj in _json_lines(path):
        yield _guard(_capture_row, line, str(path), obj)


def _capture_row(line: int, path: str, obj: Any) -> Row:
    if isinstance(obj, RowError):
        raise obj
    try:
        rec = _parse_record(path, line, obj)
    except TraceError as e:
        raise RowError(line, e.field, e.message) from None
    return Row(line=line, id=rec.id, arrival=rec.arrival, record=rec)


FORMATS: dict[str, tuple[str, Callable[..., Iterator[Row | Skip | RowError]]]] = {
    "mooncake": ("Mooncake JSONL: timestamp (ms), input_length, output_length, hash_ids (512-token blocks)", read_mooncake),
    "bailian": ("Qwen Bailian JSONL: Mooncake fields + chat_id, parent_chat_id, turn, type; timestamp (s), 16-token blocks", read_mooncake),
    "azure": ("Azure LLM inference CSV (2023, 2024): TIMESTAMP, ContextTokens, GeneratedTokens", read_azure),
    "burstgpt": ("BurstGPT CSV: Timestamp (s), Request tokens, Response tokens", read_burstgpt),
    "sharegpt": ("ShareGPT JSON: [{conversations: [{from, value}, …]}] (no timestamps)", read_sharegpt),
    "vllm": ("vLLM custom dataset JSONL: {prompt, output_tokens?} (no timestamps)", read_vllm),
    "capture": ("a specreplay capture left unsorted (killed before it stopped): sorts it", read_capture),
}
_DEFAULTS = {"bailian": {"block_size": 16, "time_unit": "s"}}


def _body(api: str, prompt: str, output: int | None, model: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if model is not None:
        body["model"] = model
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if output is not None:
        body["max_tokens"] = output
        body["min_tokens"] = output
        body["ignore_eos"] = True
    return body


def import_trace(
    fmt: str, source: str | Path, output: str | Path, opts: Options | None = None, tokenizer: Tokenizer | None = None
) -> ImportReport:
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r} (expected one of: {', '.join(FORMATS)})")
    opts = opts or Options()
    for k, v in _DEFAULTS.get(fmt, {}).items():
        if getattr(opts, k) is None:
            setattr(opts, k, v)
    if opts.api not in ("chat", "completions"):
        raise ConfigError(f"--api: expected chat or completions, got {opts.api!r}")
    if opts.block_size is not None and opts.block_size < 1:
        raise ConfigError(f"--block-size: must be at least 1, got {opts.block_size}")
    path = Path(source)
    if not path.is_file():
        raise TraceError(str(source), None, None, "no such file")
    report = ImportReport(format=fmt, source=str(source), output=str(output))
    reader = FORMATS[fmt][1]
    items = reader(path, opts, tokenizer) if fmt == "sharegpt" else reader(path, opts)

    rows: list[Row] = []
    while opts.limit is None or len(rows) < opts.limit:
        item = next(items, None)
        if item is None:
            break
        if isinstance(item, RowError):
            e = item
            if not opts.skip_invalid:
                raise TraceError(str(source), e.line, e.field, e.message) from None
            if report.first_malformed is None:
                report.first_malformed = f"line {e.line}: " + (f"field '{e.field}': " if e.field else "") + e.message
            report.skipped[MALFORMED] += 1
            continue
        if isinstance(item, Skip):
            report.skipped[item.reason] += 1
        else:
            rows.append(item)
    if not rows:
        raise TraceError(str(source), None, None, "no usable rows" + (f" ({_skips(report)})" if report.skipped else ""))

    timed = rows[0].arrival is not None
    t0 = 0.0
    if timed:
        order = sorted(range(len(rows)), key=lambda i: rows[i].arrival or 0.0)
        report.reordered = sum(1 for a, b in zip(order, order[1:]) if a > b)
        rows = [rows[i] for i in order]
        t0 = rows[0].arrival or 0.0
    seen: set[str] = set()
    maker = PromptMaker(tokenizer, seed=opts.seed)
    block = opts.block_size or 512
    with Path(output).open("w", encoding="utf-8") as f:
        for row in rows:
            arrival = round((row.arrival or 0.0) - t0, 6) if timed else None
            rec: TraceRecord | None
            if row.record is not None:
                rec = dataclasses.replace(row.record, arrival=arrival if row.record.arrival is not None else None)
            else:
                rec = _make_record(row, arrival, opts, maker, block, report)
            if rec is None:
                continue
            if rec.id in seen:
                raise TraceError(str(source), row.line, "id", f"duplicate id {rec.id!r}")
            seen.add(rec.id)
            f.write(rec.to_json() + "\n")
            report.written += 1
            report.approximate += rec.approximate
    return report


def _skips(report: ImportReport) -> str:
    return "; ".join(f"skipped {n}: {r}" for r, n in report.skipped.items() if n)


def _make_record(row: Row, arrival: float | None, opts: Options, maker: PromptMaker, block: int, report: ImportReport) -> TraceRecord | None:
    if row.prompt is not None:
        prompt = row.prompt
        approximate = row.output_approximate
    else:
        n = row.input_tokens or 0
        if n == 0:
            report.skipped["requests with 0 input tokens"] += 1
            return None
        if row.hash_ids is not None:
            prompt = maker.from_blocks(n, block, row.hash_ids)
        else:
            prompt = maker.unique(n, row.line, row.id)
        approximate = maker.is_approximate(prompt, n)
    if row.output_tokens == 0:
        report.skipped["requests with 0 output tokens"] += 1
        return None
    return TraceRecord(
        id=row.id,
        api=opts.api,
        body=_body(opts.api, prompt, row.output_tokens, opts.model),
        arrival=arrival,
        session_id=row.session_id,
        expected_output_tokens=row.output_tokens,
        approximate=approximate,
    )
