"""Turns trace records into the requests the engine sends: the target URL for
each API, the body with its prompt, streaming with usage requested, and the
user's overrides (model, output budget, ignore_eos, extra body fields).

Text the engine writes into a body is left out of it here, and its place
given instead (an empty JSON string and its byte offset): a prompt given by
its blocks (`prompt_blocks`; the engine synthesizes the text, faster than a
round trip through a Python string and `json.dumps`), and with live history
the answers to a session's earlier turns (the engine has them only once the
server has answered)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa

from specreplay import _core
from specreplay.settings.config import ReplayConfig
from specreplay.results.schema import request_schema
from specreplay.trace.media import MediaStore
from specreplay.trace.models import model_for
from specreplay.trace.records import APIS, RETRIEVAL_APIS, TraceRecord

#: Which body field carries the output budget, per API. Chat keeps whichever
#: of the two names the recorded body used (OpenAI's newer models want
#: `max_completion_tokens`; Ollama reads only `max_tokens`), and sets both
#: when the body has both.
_BUDGET_FIELD = {"chat": "max_tokens", "completions": "max_tokens", "responses": "max_output_tokens", "anthropic": "max_tokens"}
#: Fields that must not exceed the budget (vLLM and the simulator reject
#: `min_tokens` > `max_tokens`): lowered with it.
_AT_MOST_BUDGET = ("min_tokens",)

_FILLER = _core.Filler()
#: Resolves nothing (a body without stored media), counts inline media.
_NO_MEDIA = MediaStore(None)


def base_url(url: str) -> str:
    """`http://host:8000` and `http://host:8000/v1/` both mean `http://host:8000/v1`."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if path == "":
        path = "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def redact_url(url: str) -> str:
    """The URL as it may be written down: no user:password, no query string."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def body_with_prompt(record: TraceRecord) -> dict[str, Any]:
    """The record's body with its prompt: as recorded, or synthesized from
    its `prompt_blocks` as one user message (chat, anthropic), `prompt`
    (completions) or `input` (responses). A copy one level deep: nested
    values are shared with the record, and must not be changed."""
    blocks = record.prompt_blocks
    if blocks is None:
        return dict(record.body)
    return _with_prompt(record, _FILLER.text(blocks.tokens, blocks.block_size, blocks.hash_ids, blocks.seed))


def _with_prompt(record: TraceRecord, text: str) -> dict[str, Any]:
    body = dict(record.body)
    field = APIS[record.api][1]
    body[field] = [{"role": "user", "content": text}] if field == "messages" else text
    return body


def shape_body(record: TraceRecord, config: ReplayConfig, model: str | None) -> dict[str, Any]:
    """The body to send for `record`, prompt included. Only top-level keys
    are set (nested values are shared with the record, and never changed
    here)."""
    return _shaped(body_with_prompt(record), record.api, config, model)


def _shaped(body: dict[str, Any], api: str, config: ReplayConfig, model: str | None) -> dict[str, Any]:
    """`body` (a copy of a record's) with replay's changes."""
    if model is not None:
        body["model"] = model
    if api in RETRIEVAL_APIS:
        # One JSON answer, no tokens generated: nothing to stream or budget.
        body.update(config.extra_body)
        return body
    # Measurement needs the stream: per-chunk times exist only there.
    body["stream"] = True
    if api in ("chat", "completions"):
        options = dict(body.get("stream_options") or {})
        options["include_usage"] = True
        if config.continuous_usage:
            # Usage on every chunk is the only tokenizer-free way to know how
            # many tokens each chunk carried (vLLM, SGLang, our simulator).
            options["continuous_usage_stats"] = True
        body["stream_options"] = options
        if config.continuous_usage and config.llamacpp_timings:
            # llama.cpp's equivalent: cumulative `timings.predicted_n` on every chunk.
            body["timings_per_token"] = True
    if config.max_tokens is not None:
        _set_budget(body, api, config.max_tokens)
    if config.ignore_eos and api in ("chat", "completions"):
        body["ignore_eos"] = True
    body.update(config.extra_body)
    return body


def _set_budget(body: dict[str, Any], api: str, budget: int) -> None:
    """`--max-tokens`: the budget in the field the API reads, and every field
    that must not exceed it lowered to it, so the body stays one a server
    accepts (docs/trace-format.md, "What replay changes in the body")."""
    fields = [_BUDGET_FIELD[api]]
    if api == "chat" and "max_completion_tokens" in body:
        fields = ["max_completion_tokens"] + (["max_tokens"] if "max_tokens" in body else [])
    for field in fields:
        body[field] = budget
    clamp_to_budget(body, budget)


def clamp_to_budget(body: dict[str, Any], budget: int) -> None:
    """Lowers the fields that must not exceed the output budget (`min_tokens`)
    to `budget`: a recorded `min_tokens` 500 with `max_tokens` 32 is a 400."""
    for field in _AT_MOST_BUDGET:
        value = body.get(field)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > budget:
            body[field] = budget


#: Where text goes: a string no recorded body holds (it has NUL characters),
#: found in the serialized body and removed, leaving `""` and its offset.
_PROMPT_MARK = "\x00specreplay:prompt\x00"


def _answer_mark(turn: int) -> str:
    return f"\x00specreplay:answer {turn}\x00"


def _encoded(mark: str) -> bytes:
    """How a mark appears in `json.dumps` output: between quotes, escaped."""
    return json.dumps(mark).encode()[1:-1]


@dataclass
class Conversation:
    """A session's turns as live history sees them: where the answers to the
    earlier turns sit in each turn's messages. Turn n's messages hold turn
    n-1's answer when they extend turn n-1's messages by an assistant message
    with text and then more; the places found for turn n-1 hold in turn n
    then too. Chat and anthropic messages, and Responses `input` items (a
    prompt given by blocks, or a completions prompt, has no answer to
    replace)."""

    previous: list[Any] | None = None
    #: (message index, turn whose answer it is).
    answers: list[tuple[int, int]] = field(default_factory=list)

    def places(self, record: TraceRecord, turn_index: int) -> list[tuple[int, int]]:
        # Responses: the `input` items (a `function_call` item is an answer).
        key = "input" if record.api == "responses" else "messages"
        messages = record.body.get(key) if record.api in ("chat", "anthropic", "responses") else None
        if record.prompt_blocks is not None or not isinstance(messages, list):
            self.previous, self.answers = None, []
            return []
        prev = self.previous
        if (
            prev is not None
            and len(messages) > len(prev) + 1
            and _is_answer(messages[len(prev)])
            and messages[: len(prev)] == prev
        ):
            self.answers = self.answers + [(len(prev), turn_index - 1)]
        else:
            self.answers = []
        self.previous = messages
        return self.answers


def _is_answer(message: Any) -> bool:
    if isinstance(message, dict) and message.get("type") == "function_call":
        return isinstance(message.get("arguments"), str)
    if not (isinstance(message, dict) and message.get("role") == "assistant"):
        return False
    content = message.get("content")
    # An Anthropic tool call: a `tool_use` block whose `input` the engine replaces.
    tool_use = isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content)
    return isinstance(content, str) or tool_use or _first_call(message) is not None


def _first_call(message: dict[str, Any]) -> dict[str, Any] | None:
    """The first tool call of an assistant message, when its arguments are a
    JSON string (chat): live history puts the call the server made there."""
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls and isinstance(calls[0], dict):
        function = calls[0].get("function")
        if isinstance(function, dict) and isinstance(function.get("arguments"), str):
            return calls[0]
    return None


def _with_answer_mark(message: dict[str, Any], mark: str) -> dict[str, Any]:
    """The assistant `message` with `mark` where the live answer goes: its
    first tool call's arguments when it made one (chat), its first `tool_use`
    block's `input` (Anthropic: the engine writes the call's JSON object in
    place of the mark's string), a Responses `function_call` item's
    `arguments`, else its content."""
    if message.get("type") == "function_call":
        return {**message, "arguments": mark}
    call = _first_call(message)
    content = message.get("content")
    if call is None and isinstance(content, list):
        for k, block in enumerate(content):
            if isinstance(block, dict) and block.get("type") == "tool_use":
                blocks = list(content)
                blocks[k] = {**block, "input": mark}
                return {**message, "content": blocks}
    if call is None:
        return {**message, "content": mark}
    calls = list(message["tool_calls"])
    calls[0] = {**call, "function": {**call["function"], "arguments": mark}}
    return {**message, "tool_calls": calls}


@dataclass(frozen=True)
class SessionTurn:
    """A request's place in its session, as the engine takes it."""

    session_id: str
    index: int
    think_time_us: int | None = None
    #: Live history: (message index, turn) of each earlier answer in its messages.
    answers: list[tuple[int, int]] = field(default_factory=list)


def request_row(
    record: TraceRecord,
    config: ReplayConfig,
    base: str,
    model: str | None,
    turn: SessionTurn | None = None,
    media: MediaStore | None = None,
) -> dict[str, Any]:
    """One request as the engine takes it: a row of `schema.REQUEST_COLUMNS`
    (`base` is the target's base URL; `media`, the trace's stored media)."""
    blocks = record.prompt_blocks
    body = _with_prompt(record, _PROMPT_MARK) if blocks is not None else dict(record.body)
    # Stored media: a mark where the data goes, written by the engine (`media_at`).
    store = media or _NO_MEDIA
    unmarked = body
    body, stats, media_slots = store.mark(body)
    model = model_for(record, config, model)
    answers = turn.answers if turn is not None else []
    shaped = _shaped(_with_answers(body, answers), record.api, config, model)
    raw = json.dumps(shaped, ensure_ascii=False).encode()
    marks = ([_PROMPT_MARK] if blocks is not None else []) + [_answer_mark(j) for _, j in answers] + [m for m, _, _ in media_slots]
    raw, places = _take_marks(raw, marks)
    media_places = places[len(places) - len(media_slots) :]
    places = places[: len(places) - len(media_slots)]
    if any(p is None for p in media_places):
        # A mark not found once (never in a valid trace, but never guess): the data, put in here.
        shaped = _shaped(_with_answers(store.resolve(unmarked)[0], answers), record.api, config, model)
        raw, places = _take_marks(json.dumps(shaped, ensure_ascii=False).encode(), marks[: len(places)])
        media_slots, media_places = [], []
    prompt_at: int | None = places.pop(0) if blocks is not None else None
    if blocks is not None and prompt_at is None:
        # The mark was not found once (it cannot be in a valid trace's text,
        # but never guess): the prompt's text, built here.
        raw = json.dumps(_shaped(dict(body_with_prompt(record)), record.api, config, model), ensure_ascii=False).encode()
        places = [None] * len(places)
    history: list[int | None] | None = None
    if turn is not None and answers:
        history = [None] * turn.index
        for (_, j), place in zip(answers, places):
            history[j] = place
    return {
        "trace_id": record.id,
        "api": record.api,
        "url": base + APIS[record.api][0],
        "body": raw,
        "arrival_s": record.arrival or 0.0,
        "session_id": turn.session_id if turn is not None else None,
        "turn_index": turn.index if turn is not None else None,
        "think_time_us": turn.think_time_us if turn is not None else None,
        "prompt_blocks": None if blocks is None or prompt_at is None else {
            "tokens": blocks.tokens, "block_size": blocks.block_size, "hash_ids": blocks.hash_ids, "seed": blocks.seed,
        },
        "prompt_at": prompt_at,
        "history_at": history,
        "media_at": [{"at": at, "file": file, "prefix": prefix} for at, (_, file, prefix) in zip(media_places, media_slots)] or None,
        "model": shaped.get("model") if isinstance(shaped.get("model"), str) else None,
        "media_count": stats.count or None,
        "media_bytes": stats.bytes if stats.count else None,
        "media_pixels": stats.pixels if stats.count else None,
        "media_seconds": stats.seconds if stats.count else None,
    }


def _with_answers(body: dict[str, Any], answers: list[tuple[int, int]]) -> dict[str, Any]:
    """A copy of `body` (one level deep) with the live answers' marks in its messages."""
    body = dict(body)
    if answers:
        key = "messages" if "messages" in body else "input"  # Responses: its input items
        messages = list(body[key])
        for at, j in answers:
            messages[at] = _with_answer_mark(messages[at], _answer_mark(j))
        body[key] = messages
    return body


def _take_marks(raw: bytes, marks: list[str]) -> tuple[bytes, list[int | None]]:
    """`raw` without the marks that occur in it exactly once, and the byte
    offset each leaves (None for one not found once)."""
    found: list[tuple[int, int, int]] = []  # (position, length, which)
    for k, mark in enumerate(marks):
        encoded = _encoded(mark)
        at = raw.find(encoded)
        if at >= 0 and raw.find(encoded, at + 1) < 0:
            found.append((at, len(encoded), k))
    places: list[int | None] = [None] * len(marks)
    if not found:
        return raw, places
    parts: list[bytes] = []
    start = removed = 0
    for at, length, k in sorted(found):
        parts.append(raw[start:at])
        places[k] = at - removed
        start = at + length
        removed += length
    parts.append(raw[start:])
    return b"".join(parts), places


def request_batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    """Rows of `request_row` as one batch."""
    return pa.RecordBatch.from_pylist(rows, schema=request_schema())


def prepare(records: list[TraceRecord], config: ReplayConfig, url: str, model: str | None, media: MediaStore | None = None) -> pa.RecordBatch:
    """The requests of `records`, each on its own, as one batch the engine
    takes whole (`_core.start_point`; it loops over them for more). With
    `--num-requests N` under their number only the first N are built.
    Replay itself streams the trace instead (`feed.Feeder`)."""
    base = base_url(url)
    if config.num_requests is not None:
        records = records[: config.num_requests]
    return request_batch([request_row(rec, config, base, model, media=media) for rec in records])


def auth_headers(config: ReplayConfig, apis: set[str]) -> list[tuple[str, str]]:
    headers = list(config.headers.items())
    names = {k.lower() for k, _ in headers}
    if config.api_key:
        if "authorization" not in names:
            headers.append(("Authorization", f"Bearer {config.api_key}"))
        if "anthropic" in apis and "x-api-key" not in names:
            headers.append(("x-api-key", config.api_key))
    if "anthropic" in apis and "anthropic-version" not in names:
        headers.append(("anthropic-version", "2023-06-01"))
    return headers
