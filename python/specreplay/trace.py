"""The specreplay trace format (docs/trace-format.md): JSON Lines, one request
per line. Reading is strict: every problem names the file, the line and the
field, because a trace that silently drops or reorders requests would replay
a different workload than the one recorded.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specreplay.errors import TraceError

#: API name → (path under the base URL, the body field that must be present).
APIS: dict[str, tuple[str, str]] = {
    "chat": ("/chat/completions", "messages"),
    "completions": ("/completions", "prompt"),
    "responses": ("/responses", "input"),
    "anthropic": ("/messages", "messages"),
}

#: Longest line accepted; longer ones are almost certainly not a trace.
MAX_LINE_BYTES = 64 << 20

_KNOWN_FIELDS = {
    "id", "arrival", "api", "path", "body", "session_id", "expected_output_tokens", "approximate", "response",
}

#: Keys of the `response` object (what came back when the trace was
#: captured): integers except `finish_reason` and `error`; only `status` is
#: required, the others may be absent or null.
RESPONSE_INT_FIELDS = (
    "status", "ttfb_us", "end_us", "prompt_tokens", "completion_tokens", "reasoning_tokens", "cached_tokens",
)
RESPONSE_STR_FIELDS = ("finish_reason", "error")
_RESPONSE_FIELDS = set(RESPONSE_INT_FIELDS) | set(RESPONSE_STR_FIELDS)


@dataclass(frozen=True)
class TraceRecord:
    id: str
    api: str
    body: dict[str, Any]
    arrival: float | None = None
    session_id: str | None = None
    expected_output_tokens: int | None = None
    #: The request path as captured, only when it is not the API's default
    #: (`/v1` + `APIS[api][0]`). Informational: replay sends to `--url` + the API's path.
    path: str | None = None
    #: True when token counts in this record (prompt length, expected output)
    #: come from specreplay's approximation rather than a tokenizer.
    approximate: bool = False
    #: What came back when the request was captured (see RESPONSE_*_FIELDS).
    response: dict[str, Any] | None = None
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
        if self.expected_output_tokens is not None:
            out["expected_output_tokens"] = self.expected_output_tokens
        if self.approximate:
            out["approximate"] = True
        if self.response is not None:
            out["response"] = self.response
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
    if needed not in body:
        raise fail(f"body.{needed}", f"missing: a {api} request needs '{needed}'")

    session = obj.get("session_id")
    if session is not None and not isinstance(session, (str, int)):
        raise fail("session_id", "must be a string")

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
        expected_output_tokens=expected,
        path=req_path,
        approximate=approximate,
        response=response,
        line=line_no,
    )


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


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    with path.open("rb") as f:
        line_no = 0
        while True:
            # Bounded read: a multi-gigabyte "line" is refused, not loaded.
            raw = f.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            line_no += 1
            if len(raw) > MAX_LINE_BYTES:
                raise TraceError(str(path), line_no, None, f"line longer than {MAX_LINE_BYTES} bytes")
            yield line_no, raw


def load_trace(path: str | Path) -> Trace:
    """Reads and validates a trace file. Raises `TraceError` naming file, line
    and field for the first problem found."""
    p = Path(path)
    name = str(path)
    if not p.is_file():
        raise TraceError(name, None, None, "no such file")
    trace = Trace(path=name)
    digest = hashlib.sha256()
    seen: dict[str, int] = {}
    for line_no, raw in _lines(p):
        digest.update(raw)
        text = raw.strip()
        if not text or text.startswith(b"#"):
            continue
        try:
            obj = json.loads(text)
        except UnicodeDecodeError as e:
            raise TraceError(name, line_no, None, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
        except json.JSONDecodeError as e:
            raise TraceError(name, line_no, None, f"invalid JSON: {e.msg} (column {e.colno})") from None
        rec = _parse_record(name, line_no, obj)
        if rec.id in seen:
            raise TraceError(name, line_no, "id", f"duplicate id {rec.id!r} (first on line {seen[rec.id]})")
        seen[rec.id] = line_no
        if trace.records:
            prev = trace.records[-1]
            if (rec.arrival is None) != (prev.arrival is None):
                raise TraceError(name, line_no, "arrival", "either every record has an arrival time or none has")
            if rec.arrival is not None and prev.arrival is not None and rec.arrival < prev.arrival:
                raise TraceError(
                    name, line_no, "arrival", f"goes backwards: {rec.arrival} after {prev.arrival} on line {prev.line}"
                )
        trace.records.append(rec)
    if not trace.records:
        raise TraceError(name, None, None, "the trace is empty (no request lines)")
    trace.sha256 = digest.hexdigest()
    return trace


def write_trace(records: list[TraceRecord], path: str | Path) -> None:
    with Path(path).open("w", encoding="utf-8") as f:
        for rec in records:
            f.write(rec.to_json() + "\n")
