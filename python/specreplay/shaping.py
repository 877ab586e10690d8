"""Turns trace records into the requests the engine sends: the target URL for
each API, the body with its prompt (synthesized in Rust from the record's
`prompt_blocks` when it has them), streaming with usage requested, and the
user's overrides (model, output budget, ignore_eos, extra body fields)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa

from specreplay import _core
from specreplay.config import ReplayConfig
from specreplay.schema import REQUEST_COLUMNS, request_schema
from specreplay.trace import APIS, TraceRecord

#: Which body field carries the output budget, per API. Chat keeps whichever
#: of the two names the recorded body used (OpenAI's newer models want
#: `max_completion_tokens`; Ollama reads only `max_tokens`), and sets both
#: when the body has both.
_BUDGET_FIELD = {"chat": "max_tokens", "completions": "max_tokens", "responses": "max_output_tokens", "anthropic": "max_tokens"}
#: Fields that must not exceed the budget (vLLM and the simulator reject
#: `min_tokens` > `max_tokens`): lowered with it.
_AT_MOST_BUDGET = ("min_tokens",)

_FILLER = _core.Filler()


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
    body = dict(record.body)
    blocks = record.prompt_blocks
    if blocks is not None:
        text = _FILLER.text(blocks.tokens, blocks.block_size, blocks.hash_ids, blocks.seed)
        field = APIS[record.api][1]
        body[field] = [{"role": "user", "content": text}] if field == "messages" else text
    return body


def shape_body(record: TraceRecord, config: ReplayConfig, model: str | None) -> dict[str, Any]:
    """The body to send for `record`. Only top-level keys are set (nested
    values are shared with the record, and never changed here)."""
    body = body_with_prompt(record)
    api = record.api
    if model is not None:
        body["model"] = model
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


def prepare(records: list[TraceRecord], config: ReplayConfig, url: str, model: str | None) -> pa.RecordBatch:
    """The requests to send, as the engine takes them: one row per record,
    the columns of `schema.REQUEST_COLUMNS`. With `--num-requests N` under
    the trace's length only the first N can be sent (the engine takes them
    in order, warm-up included), so only they are built: a synthesized
    prompt costs its text in memory until the request is sent."""
    base = base_url(url)
    columns: dict[str, list[Any]] = {c.name: [] for c in REQUEST_COLUMNS}
    if config.num_requests is not None:
        records = records[: config.num_requests]
    for rec in records:
        columns["trace_id"].append(rec.id)
        columns["api"].append(rec.api)
        columns["url"].append(base + APIS[rec.api][0])
        columns["body"].append(json.dumps(shape_body(rec, config, model), ensure_ascii=False).encode())
        columns["arrival_s"].append(rec.arrival or 0.0)
    return pa.record_batch(list(columns.values()), schema=request_schema())


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
