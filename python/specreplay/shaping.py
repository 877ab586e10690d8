"""Turns trace records into the requests the engine sends: the target URL for
each API, a streaming body with usage requested, and the user's overrides
(model, output budget, ignore_eos, extra body fields)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa

from specreplay.config import ReplayConfig
from specreplay.schema import REQUEST_COLUMNS, request_schema
from specreplay.trace import APIS, TraceRecord

#: Which body field carries the output budget, per API. Chat keeps whichever
#: of the two names the recorded body used (OpenAI's newer models want
#: `max_completion_tokens`; Ollama reads only `max_tokens`).
_BUDGET_FIELD = {"chat": "max_tokens", "completions": "max_tokens", "responses": "max_output_tokens", "anthropic": "max_tokens"}


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


def shape_body(record: TraceRecord, config: ReplayConfig, model: str | None) -> dict[str, Any]:
    """The body to send for `record`. Only top-level keys are set, so the
    record's own body is copied one level deep (nested values are shared,
    and never changed here)."""
    body = dict(record.body)
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
        field = _BUDGET_FIELD[api]
        if api == "chat" and "max_completion_tokens" in body:
            field = "max_completion_tokens"
        body[field] = config.max_tokens
    if config.ignore_eos and api in ("chat", "completions"):
        body["ignore_eos"] = True
    body.update(config.extra_body)
    return body


def prepare(records: list[TraceRecord], config: ReplayConfig, url: str, model: str | None) -> pa.RecordBatch:
    """The requests to send, as the engine takes them: one row per record,
    the columns of `schema.REQUEST_COLUMNS`."""
    base = base_url(url)
    columns: dict[str, list[Any]] = {c.name: [] for c in REQUEST_COLUMNS}
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
