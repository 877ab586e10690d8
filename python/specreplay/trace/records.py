"""The specreplay trace format (docs/trace-format.md): JSON Lines, one request
per line. Reading is strict: every problem names the file, the line and the
field, because a trace that silently drops or reorders requests would replay
a different workload than the one recorded.
"""

from __future__ import annotations

import hashlib
import json
import math
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specreplay._core import Filler
from specreplay.errors import TraceError

#: API name → (path under the base URL, the body field that must be present).
APIS: dict[str, tuple[str, str]] = {
    "chat": ("/chat/completions", "messages"),
    "completions": ("/completions", "prompt"),
    "responses": ("/responses", "input"),
    "anthropic": ("/messages", "messages"),
    "embeddings": ("/embeddings", "input"),
    "rerank": ("/rerank", "documents"),
}
#: APIs answered with one JSON body and no generated tokens: rows record
#: E2E, input tokens and items, and the summary no TTFT or TPOT for them.
RETRIEVAL_APIS = frozenset({"embeddings", "rerank"})

#: Longest line accepted; longer ones are almost certainly not a trace.
MAX_LINE_BYTES = 64 << 20

_KNOWN_FIELDS = {
    "id", "arrival", "api", "path", "body", "prompt_blocks", "session_id", "think_time", "expected_output_tokens",
    "approximate", "response",
}
_PROMPT_BLOCKS_FIELDS = ("tokens", "block_size", "hash_ids", "seed")
#: Block ids and seeds are unsigned 64-bit integers (the Rust synthesis's key).
_U64 = 1 << 64

#: Keys of the `response` object (what came back when the trace was
#: captured): integers except `finish_reason` and `error`; only `status` is
#: required, the others may be absent or null.
RESPONSE_INT_FIELDS = (
    "status", "ttfb_us", "end_us", "prompt_tokens", "completion_tokens", "reasoning_tokens", "cached_tokens",
)
RESPONSE_STR_FIELDS = ("finish_reason", "error")
_RESPONSE_FIELDS = set(RESPONSE_INT_FIELDS) | set(RESPONSE_STR_FIELDS)


@dataclass(frozen=True)
class PromptBlocks:
    """A prompt given by its length and block ids instead of its text (as
    Mooncake and Bailian traces give it): `tokens` tokens made of the blocks
    `hash_ids`, `block_size` tokens each, the last one cut short. The text is
    synthesized when the request is built (`specreplay._core.Filler`): equal
    ids give equal text, so shared prefixes stay shared."""

    tokens: int
    block_size: int
    hash_ids: list[int]
    #: Varies the text of every block at once (`specreplay import --seed`).
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tokens": self.tokens, "block_size": self.block_size, "hash_ids": self.hash_ids}
        if self.seed:
            out["seed"] = self.seed
        return out


@dataclass(frozen=True)
class TraceRecord:
    id: str
    api: str
    body: dict[str, Any]
    arrival: float | None = None
    session_id: str | None = None
    #: Seconds the user took between the answer to the session's previous
    #: turn and this request, as recorded or synthesized (docs/trace-format.md,
    #: "Sessions"); only on a later turn of a session.
    think_time: float | None = None
    expected_output_tokens: int | None = None
    #: The request path as captured, only when it is not the API's default
    #: (`/v1` + `APIS[api][0]`). Informational: replay sends to `--url` + the API's path.
    path: str | None = None
    #: True when token counts in this record (prompt length, expected output)
    #: come from specreplay's approximation rather than a tokenizer.
    approximate: bool = False
    #: What came back when the request was captured (see RESPONSE_*_FIELDS).
    response: dict[str, Any] | None = None
    #: The prompt as blocks, synthesized into the body's input when the
    #: request is built (`shaping.body_with_prompt`); the body then has none.
    prompt_blocks: PromptBlocks | None = None
    line: int = 0

    def to_json(self) -> str:
        out: dict[str, Any] = {"id": self.id}
        if self.arrival is not None:
            out["arrival"] = self.arrival
        out["api"] = self.api
        if self.path is not None:
            out["path"] = self.path
        if self.session_id is not None:
            out["session_id"] = self.session_id
        if self.think_time is not None:
            out["think_time"] = self.think_time
        if self.expected_output_tokens is not None:
            out["expected_output_tokens"] = self.expected_output_tokens
        if self.approximate:
            out["approximate"] = True
        if self.response is not None:
            out["response"] = self.response
        if self.prompt_blocks is not None:
            out["prompt_blocks"] = self.prompt_blocks.to_dict()
        out["body"] = self.body
        return json.dumps(out, ensure_ascii=False)


@dataclass
class Trace:
    path: str
    records: list[TraceRecord] = field(default_factory=list)
    #: sha256 of the file's bytes, as read (`rerun` refuses a changed trace).
    sha256: str = ""

    @property
    def has_arrivals(self) -> bool:
        return bool(self.records) and self.records[0].arrival is not None

    def __len__(self) -> int:
        return len(self.records)


def _parse_record(path: str, line_no: int, obj: Any) -> TraceRecord:
    def fail(fld: str | None, message: str) -> TraceError:
        return TraceError(path, line_no, fld, message)

    if not isinstance(obj, dict):
        raise fail(None, f"expected a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - _KNOWN_FIELDS)
    if unknown:
        raise fail(unknown[0], f"unknown field (known: {', '.join(sorted(_KNOWN_FIELDS))})")

    rid = obj.get("id", str(line_no))
    if not isinstance(rid, (str, int)) or isinstance(rid, bool) or rid == "":
        raise fail("id", "must be a non-empty string")

    api = obj.get("api", "chat")
    if api not in APIS:
        raise fail("api", f"unknown API {api!r} (expected one of: {', '.join(APIS)})")

    arrival = obj.get("arrival")
    if arrival is not None:
        if not isinstance(arrival, (int, float)) or isinstance(arrival, bool) or not math.isfinite(arrival):
            raise fail("arrival", f"must be a number of seconds, got {arrival!r}")
        if arrival < 0:
            raise fail("arrival", f"must not be negative, got {arrival}")

    body = obj.get("body")
    if not isinstance(body, dict):
        raise fail("body", "missing or not a JSON object (the request body as it was sent)")
    needed = APIS[api][1]
    blocks = _prompt_blocks(obj["prompt_blocks"], fail) if "prompt_blocks" in obj else None
    if blocks is None and needed not in body:
        raise fail(f"body.{needed}", f"missing: a {api} request needs '{needed}' (or prompt_blocks)")
    if blocks is not None and needed in body:
        raise fail(f"body.{needed}", "must not be given with prompt_blocks (the prompt is synthesized from them)")

    session = obj.get("session_id")
    if session is not None and not isinstance(session, (str, int)):
        raise fail("session_id", "must be a string")

    think = obj.get("think_time")
    if think is not None:
        if not isinstance(think, (int, float)) or isinstance(think, bool) or not math.isfinite(think) or think < 0:
            raise fail("think_time", f"must be a non-negative number of seconds, got {think!r}")
        if session is None:
            raise fail("think_time", "given without session_id (it is the pause before a session's next turn)")

    expected = obj.get("expected_output_tokens")
    if expected is not None and (not isinstance(expected, int) or isinstance(expected, bool) or expected < 0):
        raise fail("expected_output_tokens", f"must be a non-negative integer, got {expected!r}")

    req_path = obj.get("path")
    if req_path is not None and (not isinstance(req_path, str) or not req_path.startswith("/")):
        raise fail("path", f"must be a string starting with '/', got {req_path!r}")

    approximate = obj.get("approximate", False)
    if not isinstance(approximate, bool):
        raise fail("approximate", f"must be true or false, got {approximate!r}")

    response = obj.get("response")
    if response is not None:
        _check_response(response, fail)

    return TraceRecord(
        id=str(rid),
        api=api,
        body=body,
        arrival=float(arrival) if arrival is not None else None,
        session_id=str(session) if session is not None else None,
        think_time=float(think) if think is not None else None,
        expected_output_tokens=expected,
        path=req_path,
        approximate=approximate,
        response=response,
        prompt_blocks=blocks,
        line=line_no,
    )


def _prompt_blocks(value: Any, fail: Callable[[str | None, str], TraceError]) -> PromptBlocks:
    if not isinstance(value, dict):
        raise fail("prompt_blocks", "must be a JSON object {tokens, block_size, hash_ids}")
    unknown = sorted(set(value) - set(_PROMPT_BLOCKS_FIELDS))
    if unknown:
        raise fail(f"prompt_blocks.{unknown[0]}", f"unknown field (known: {', '.join(_PROMPT_BLOCKS_FIELDS)})")
    nums: dict[str, int] = {}
    for key, minimum, limit in (("tokens", 1, Filler.MAX_TOKENS), ("block_size", 1, _U64 - 1), ("seed", 0, _U64 - 1)):
        v = value.get(key, 0 if key == "seed" else None)
        if v is None:
            raise fail(f"prompt_blocks.{key}", "missing")
        if not _is_int(v) or not minimum <= v <= limit:
            raise fail(f"prompt_blocks.{key}", f"must be an integer from {minimum} to {limit}, got {v!r}")
        nums[key] = v
    ids = value.get("hash_ids")
    if ids is None:
        raise fail("prompt_blocks.hash_ids", "missing")
    if not isinstance(ids, list) or not all(_is_int(h) and 0 <= h < _U64 for h in ids):
        raise fail("prompt_blocks.hash_ids", "must be a list of integers from 0 to 2^64-1")
    need = -(-nums["tokens"] // nums["block_size"])
    if len(ids) != need:
        raise fail(
            "prompt_blocks.hash_ids",
            f"{len(ids)} blocks, but {nums['tokens']} tokens need ceil({nums['tokens']}/{nums['block_size']}) = {need}",
        )
    return PromptBlocks(tokens=nums["tokens"], block_size=nums["block_size"], hash_ids=ids, seed=nums["seed"])


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_response(response: Any, fail: Callable[[str | None, str], TraceError]) -> None:
    if not isinstance(response, dict):
        raise fail("response", "must be a JSON object")
    unknown = sorted(set(response) - _RESPONSE_FIELDS)
    if unknown:
        raise fail(f"response.{unknown[0]}", f"unknown field (known: {', '.join(sorted(_RESPONSE_FIELDS))})")
    if "status" not in response:
        raise fail("response.status", "missing (the HTTP status that came back)")
    for key in RESPONSE_INT_FIELDS:
        v = response.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise fail(f"response.{key}", f"must be a non-negative integer or null, got {v!r}")
    for key in RESPONSE_STR_FIELDS:
        v = response.get(key)
        if v is not None and not isinstance(v, str):
            raise fail(f"response.{key}", f"must be a string or null, got {v!r}")


def read_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, raw bytes) of each line, a line at a time."""
    for line_no, _offset, raw in read_lines_at(path):
        yield line_no, raw


def read_lines_at(path: Path) -> Iterator[tuple[int, int, bytes]]:
    """(line number, byte offset, raw bytes) of each line, a line at a time."""
    with path.open("rb") as f:
        line_no = 0
        offset = 0
        while True:
            # Bounded read: a multi-gigabyte "line" is refused, not loaded.
            raw = f.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            line_no += 1
            if len(raw) > MAX_LINE_BYTES:
                raise TraceError(str(path), line_no, None, f"line longer than {MAX_LINE_BYTES} bytes")
            yield line_no, offset, raw
            offset += len(raw)


def parse_line(name: str, line_no: int, raw: bytes) -> TraceRecord | None:
    """The record on one line (None for a blank or comment line), checked
    on its own; `TraceReader` adds the checks across lines."""
    text = raw.strip()
    if not text or text.startswith(b"#"):
        return None
    try:
        obj = json.loads(text)
    except UnicodeDecodeError as e:
        raise TraceError(name, line_no, None, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise TraceError(name, line_no, None, f"invalid JSON: {e.msg} (column {e.colno})") from None
    return _parse_record(name, line_no, obj)


class TraceReader:
    """Reads a trace a record at a time, checking every line as it comes
    (file, line and field in every error), with memory that does not grow
    with the records' size: ids are checked for duplicates by a 64-bit hash
    each (8 bytes a record), confirmed by a second look at the file only if
    two hashes are equal; each session's id is kept (a `think_time` on a
    session's first record is an error). Iterating yields (byte offset, record); after it,
    `sha256` and `records` describe the whole file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.name = str(path)
        self.sha256 = ""
        self.records = 0

    def __iter__(self) -> Iterator[tuple[int, TraceRecord]]:
        if not self.path.is_file():
            raise TraceError(self.name, None, None, "no such file")
        digest = hashlib.sha256()
        ids = array("q")
        sessions: set[str] = set()
        prev: TraceRecord | None = None
        for line_no, offset, raw in read_lines_at(self.path):
            digest.update(raw)
            rec = parse_line(self.name, line_no, raw)
            if rec is None:
                continue
            if prev is not None:
                _check_order(self.name, prev, rec)
            if rec.session_id is not None:
                if rec.think_time is not None and rec.session_id not in sessions:
                    raise TraceError(self.name, line_no, "think_time",
                                     f"on the first turn of session {rec.session_id!r} (no turn before it to think after)")
                sessions.add(rec.session_id)
            ids.append(hash(rec.id))
            prev = rec
            yield offset, rec
        if prev is None:
            raise TraceError(self.name, None, None, "the trace is empty (no request lines)")
        self._check_ids(ids)
        self.sha256 = digest.hexdigest()
        self.records = len(ids)

    def _check_ids(self, hashes: array[int]) -> None:
        import numpy as np

        values = np.sort(np.frombuffer(hashes, dtype=np.int64))
        repeated = set(values[1:][values[1:] == values[:-1]].tolist())
        if not repeated:
            return
        # Look again, at the ids whose hashes repeat, for a real duplicate.
        seen: dict[str, int] = {}
        for line_no, _offset, raw in read_lines_at(self.path):
            rec = parse_line(self.name, line_no, raw)
            if rec is None or hash(rec.id) not in repeated:
                continue
            if rec.id in seen:
                raise TraceError(self.name, line_no, "id", f"duplicate id {rec.id!r} (first on line {seen[rec.id]})")
            seen[rec.id] = line_no


def _check_order(name: str, prev: TraceRecord, rec: TraceRecord) -> None:
    if (rec.arrival is None) != (prev.arrival is None):
        raise TraceError(name, rec.line, "arrival", "either every record has an arrival time or none has")
    if rec.arrival is not None and prev.arrival is not None and rec.arrival < prev.arrival:
        raise TraceError(name, rec.line, "arrival", f"goes backwards: {rec.arrival} after {prev.arrival} on line {prev.line}")


def iter_trace(path: str | Path) -> Iterator[TraceRecord]:
    """The records of a trace, read and checked one at a time."""
    for _offset, rec in TraceReader(path):
        yield rec


def load_trace(path: str | Path) -> Trace:
    """Reads and validates a whole trace into memory (replay streams it
    instead: `trace_index`). Raises `TraceError` naming file, line and field
    for the first problem found."""
    reader = TraceReader(path)
    trace = Trace(path=str(path), records=[rec for _offset, rec in reader])
    trace.sha256 = reader.sha256
    return trace


def write_trace(records: list[TraceRecord], path: str | Path) -> None:
    with Path(path).open("w", encoding="utf-8") as f:
        for rec in records:
            f.write(rec.to_json() + "\n")
