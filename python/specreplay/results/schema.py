"""The results file's columns: one place that names them, types them and says
what they mean. `docs/results.md` documents the same list (a test keeps the two
in step), and the Rust engine produces the engine columns in this order.

Conventions: timestamps are int64 microseconds since the Unix epoch, measured
in Rust on a monotonic clock anchored once to wall-clock time; a timestamp the
request never reached is null. Durations derived from them are microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

# Channel codes used in the per-chunk `chunk_channel` lists.
CHANNELS: tuple[str, ...] = ("reasoning", "content", "tool")

# How a request's token counts were obtained (`token_source`).
TOKEN_SOURCES: dict[str, str] = {
    "continuous_usage": "the server reported cumulative usage on every chunk: totals and per-chunk counts are exact",
    "usage": "the server's final usage report gave the totals and the reasoning/content split (or only one of the two was streamed); per-chunk counts are estimated (`chunk_token_source`)",
    "usage_split_estimated": "the server's usage gave the total only; the reasoning/content split was estimated from the chunks",
    "chunks": "the server reported no usage: every count is an estimate of one token per chunk",
}


# How a request's per-chunk counts (`chunk_tokens`) were obtained
# (`chunk_token_source`), best first. Whatever the source they add up to
# `output_tokens`, but for tokens no chunk carried (docs/results.md).
CHUNK_TOKEN_SOURCES: dict[str, str] = {
    "continuous_usage": "the server's cumulative count on every text chunk: exact",
    "tokenizer": "each chunk's text counted with the tokenizer given to `--tokenizer`, after the point, reconciled with the server's count (largest remainder)",
    "text_length": "the server's final count split over the chunks in proportion to their text's length in characters (largest remainder, at least one per chunk): an estimate",
    "one_per_chunk": "the server reported no usage: one token per chunk, as the total is",
}


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    unit: str
    doc: str
    nullable: bool = True


_US = "µs since epoch"

# Columns the Python layer adds to every batch (all but `worker` constant within a sweep point).
RUN_COLUMNS: tuple[Column, ...] = (
    Column("run_id", pa.string(), "", "identifier of the run (one `specreplay replay` invocation)"),
    Column("label", pa.string(), "", "the run's label (`--label`, or the config's run name)"),
    Column("point", pa.string(), "", "sweep point, e.g. `rate=8` or `concurrency=64`"),
    Column("point_index", pa.int32(), "", "position of the sweep point in the run, from 0"),
    Column("worker", pa.string(), "", "distributed replay (`--ray`): the worker that sent the request, `w<k>@<node ip>` (its node, clock offset and actor in the `specreplay.workers` metadata); null in a local run"),
)

# Columns produced by the Rust engine, one row per scheduled request.
ENGINE_COLUMNS: tuple[Column, ...] = (
    Column("request_index", pa.int64(), "", "position of the request in the point's schedule, from 0"),
    Column("trace_id", pa.string(), "", "the trace record's `id` (with `#k` appended on the k-th loop over the trace)"),
    Column("api", pa.string(), "", "request dialect: chat, completions, responses, anthropic, or the non-streamed embeddings and rerank"),
    Column("warmup", pa.bool_(), "", "true for the first `--warmup` requests: kept in the file, left out of summaries"),
    Column("scheduled_us", pa.int64(), _US, "when the schedule said the request should be sent"),
    Column("sent_us", pa.int64(), _US, "when the engine started sending it"),
    Column("first_byte_us", pa.int64(), _US, "the response's first byte: the kernel's receive stamp of the first read after the request was written (HTTP/1.1), else the engine's when the head was parsed, never after the first chunk"),
    Column("first_token_us", pa.int64(), _US, "first chunk carrying output text of any channel (reasoning, content or tool)"),
    Column("first_reasoning_us", pa.int64(), _US, "first chunk carrying reasoning text"),
    Column("first_content_us", pa.int64(), _US, "first chunk carrying the answer: content or tool-call text"),
    Column("last_token_us", pa.int64(), _US, "last chunk carrying output text"),
    Column("end_us", pa.int64(), _US, "response complete, failed or cancelled"),
    Column("http_status", pa.int32(), "", "HTTP status code; null if no response headers arrived"),
    Column("error_kind", pa.string(), "", "null for a successful request, else one of `connect`, `http`, `stream`, `stream_error`, `decode`, `truncated`, `timeout`, `stall`, `cancelled`, `skipped_after_failure`, `worker_lost`, `engine_panic` (docs/reliability.md)"),
    Column("error_message", pa.string(), "", "human-readable error detail (never contains credentials)"),
    Column("finish_reason", pa.string(), "", "the server's finish reason (stop, length, max_tokens, end_turn, …)"),
    Column("prompt_tokens", pa.int64(), "tokens", "prompt tokens as reported by the server's usage"),
    Column("cached_tokens", pa.int64(), "tokens", "prompt tokens served from the prefix cache, if reported"),
    Column("reasoning_tokens", pa.int64(), "tokens", "output tokens spent on reasoning"),
    Column("content_tokens", pa.int64(), "tokens", "output tokens of the answer's content (tool-call arguments are `tool_call_tokens`); null for embeddings and rerank"),
    Column("output_tokens", pa.int64(), "tokens", "reasoning_tokens + content_tokens + tool_call_tokens; null for embeddings and rerank"),
    Column("token_source", pa.string(), "", "how the counts were obtained: " + ", ".join(TOKEN_SOURCES)),
    Column("chunk_count", pa.int32(), "chunks", "number of streamed chunks that carried output text"),
    Column("chunk_ts_us", pa.list_(pa.int64()), _US, "per text-carrying chunk: when the kernel received the socket read that completed it (its receive stamp, see `stamp_source`); the engine's own stamp where there is none"),
    Column("chunk_tokens", pa.list_(pa.int32()), "tokens", "per text-carrying chunk: tokens it carried, obtained as `chunk_token_source` says; they add up to output_tokens but for tokens no chunk carried"),
    Column("chunk_channel", pa.list_(pa.int8()), "", "per text-carrying chunk: 0 = reasoning, 1 = content, 2 = tool"),
    Column("server_predicted_n", pa.int64(), "tokens", "llama.cpp `timings.predicted_n`, when the server sends it"),
    Column("server_predicted_ms", pa.float64(), "ms", "llama.cpp `timings.predicted_ms`, when the server sends it"),
    Column("attempts", pa.int32(), "", "attempts made: 1, or more with `--retries` (then `sent_us` is the first attempt's)"),
    Column("chunk_delay_us", pa.list_(pa.int32()), "µs", "per text-carrying chunk: the engine's own delay, when it got the chunk's bytes minus the kernel's receive stamp (`chunk_ts_us`); null where the chunk has no kernel stamp"),
    Column("stamp_source", pa.string(), "", "where the chunk stamps came from: `kernel` (every chunk has the kernel's receive stamp), `user` (none has: not Linux, the option refused, or the frame lookup missed; the engine's stamps then), `mixed`; null without chunks"),
    Column("connect_us", pa.int64(), "µs", "TCP connect + TLS handshake of the connection(s) this request was the first to use, when it opened one during the run; null when it used an open one (kept alive, or opened before the clock by `--preconnect`)"),
    Column("session_id", pa.string(), "", "the trace record's `session_id` (with `#k` appended on the k-th loop over the trace, as `trace_id`); null for a request on its own"),
    Column("turn_index", pa.int32(), "", "position of the request in its session, from 0, in trace order; null without a session"),
    Column("session_turns", pa.int32(), "", "dependent sessions: how many turns the session has in this point (its turns in the trace, fewer where `--num-requests` cut it); null in independent mode and without a session"),
    Column("predecessor_end_us", pa.int64(), _US, "dependent sessions: `end_us` of the session's previous turn (on a skipped turn, of the failed one); null for a first turn and in independent mode"),
    Column("think_time_us", pa.int64(), "µs", "dependent sessions: the think time waited after the previous turn ended, so `scheduled_us` = `predecessor_end_us` + `think_time_us`; null for a first turn, a skipped one and in independent mode"),
    Column("chunk_token_source", pa.string(), "", "how `chunk_tokens` was obtained: " + ", ".join(CHUNK_TOKEN_SOURCES) + "; null without chunks"),
    Column("tool_call_tokens", pa.int64(), "tokens", "output tokens of tool calls: the sum of the tool chunks' `chunk_tokens` (so obtained as `chunk_token_source` says; the server's usage gives the total only), plus the tokens after the last chunk when that chunk is a tool call's (a closing tag, the EOS); null for embeddings and rerank"),
    Column("tool_calls", pa.int32(), "", "tool calls the server made (chat `tool_calls`, Anthropic `tool_use` blocks, Responses `function_call` items); null when it made none"),
    Column("tool_args_valid", pa.bool_(), "", "whether every tool call's arguments are one complete JSON value (false: cut, as at max_tokens; the `tool_args_cut` finding); null without tool calls"),
    Column("items", pa.int64(), "", "embeddings and rerank: embeddings returned or documents scored; null for the generating APIs"),
    Column("model", pa.string(), "", "the model the request asked for (`--model`, `--model-mix`, or the trace record's body); null when the body names none"),
    Column("media_count", pa.int32(), "", "media parts in the request (image_url, input_audio, video_url, Anthropic and Responses images); null without any"),
    Column("media_bytes", pa.int64(), "bytes", "their decoded size (a URL part: 0, its bytes are not in the request)"),
    Column("media_pixels", pa.int64(), "pixels", "images' width × height, summed (0 where the size could not be read)"),
    Column("media_seconds", pa.float64(), "s", "audio clips' length, summed (WAV; 0 where it could not be read)"),
)

COLUMNS: tuple[Column, ...] = RUN_COLUMNS + ENGINE_COLUMNS

# The requests of a sweep point as they cross into the engine
# (`_core.start_point`, `EngineRun.feed`): record batches, one row per request,
# built by `shaping.request_rows`. Not results columns; the engine reads them
# by name. Nullable ones may be left out of a batch.
PROMPT_BLOCKS_TYPE = pa.struct([
    pa.field("tokens", pa.int64(), nullable=False),
    pa.field("block_size", pa.int64(), nullable=False),
    pa.field("hash_ids", pa.list_(pa.uint64()), nullable=False),
    pa.field("seed", pa.uint64(), nullable=False),
])
MEDIA_AT_TYPE = pa.list_(pa.struct([
    pa.field("at", pa.int64(), nullable=False),
    pa.field("file", pa.string(), nullable=False),
    pa.field("prefix", pa.string(), nullable=False),
]))
REQUEST_COLUMNS: tuple[Column, ...] = (
    Column("trace_id", pa.string(), "", "the trace record's `id`", nullable=False),
    Column("api", pa.string(), "", "request dialect: chat, completions, responses, anthropic, embeddings or rerank", nullable=False),
    Column("url", pa.string(), "", "where it is sent: the target's base URL + the API's path", nullable=False),
    Column("body", pa.binary(), "", "the JSON body as sent (shaped: streaming, usage requested, overrides), but for the text the engine puts in (below)", nullable=False),
    Column("arrival_s", pa.float64(), "s", "arrival offset in the trace (0 when it has none)", nullable=False),
    Column("session_id", pa.string(), "", "the record's `session_id`; null: a request on its own"),
    Column("turn_index", pa.int32(), "", "position in its session, from 0, in trace order (with a session)"),
    Column("think_time_us", pa.int64(), "µs", "dependent turns: how long after the previous turn's end to send it (`think_time.ThinkTimes`); null: at once"),
    Column("prompt_blocks", PROMPT_BLOCKS_TYPE, "", "the record's `prompt_blocks`: the engine synthesizes the prompt's text into the body"),
    Column("prompt_at", pa.int64(), "bytes", "with prompt_blocks: where the text goes, a byte offset between the quotes of an empty JSON string in `body`"),
    Column("history_at", pa.list_(pa.int64()), "bytes", "live history only: element j is where the answer generated for the session's turn j goes (as `prompt_at`; null: not in this body); the recorded answers are left out of `body`"),
    Column("media_at", MEDIA_AT_TYPE, "bytes", "stored media: where each object's data goes in `body` (an offset between the quotes of an empty JSON string, as `prompt_at`), the file it is read from and the text before it (a data URI's `data:image/png;base64,`); the engine writes prefix + base64"),
    Column("model", pa.string(), "", "the model the body asks for, copied to the row"),
    Column("media_count", pa.int32(), "", "media parts in the body (`media.MediaStats`), copied to the row; null: none"),
    Column("media_bytes", pa.int64(), "bytes", "their decoded size"),
    Column("media_pixels", pa.int64(), "pixels", "images' width × height, summed"),
    Column("media_seconds", pa.float64(), "s", "audio clips' length, summed"),
)


# The server's Prometheus samples, scraped during a run (`servermetrics/`):
# one row per sample, stored in the same results file (docs/results.md,
# "Server metrics"). Which scrape a sample came from (`scrape`):
SCRAPES: dict[str, str] = {
    "start": "taken just before the point's first request",
    "tick": "taken every `--metrics-interval` while the point ran",
    "end": "taken just after the point's last response",
}

SERVER_METRIC_COLUMNS: tuple[Column, ...] = (
    Column("ts_us", pa.int64(), _US, "when the server rendered the page, on the engine's clock: the midpoint between sending the GET and reading its response headers"),
    Column("rtt_us", pa.int64(), "µs", "from sending the GET to its response headers: `ts_us` is right to within half of it"),
    Column("label", pa.string(), "", "the run's label"),
    Column("point", pa.string(), "", "the sweep point that was running"),
    Column("scrape", pa.string(), "", "which scrape: " + ", ".join(SCRAPES)),
    Column("name", pa.string(), "", "the sample's name as the server wrote it (`vllm:spec_decode_num_drafts_total`, `…_bucket`)"),
    Column("labels", pa.string(), "", "the sample's labels as a JSON object with sorted keys (`{}` when it has none)"),
    Column("type", pa.string(), "", "its family's `# TYPE`: counter, gauge, histogram, summary, info, stateset, gaugehistogram or unknown"),
    Column("value", pa.float64(), "", "the sample's value"),
)


def server_metrics_schema() -> pa.Schema:
    """The Arrow schema of the server-metric samples."""
    return pa.schema([pa.field(c.name, c.type) for c in SERVER_METRIC_COLUMNS])


def results_schema(metadata: dict[str, str] | None = None) -> pa.Schema:
    """The Arrow schema of a results file."""
    fields = [pa.field(c.name, c.type) for c in COLUMNS]
    return pa.schema(fields, metadata={k.encode(): v.encode() for k, v in (metadata or {}).items()})


def request_schema() -> pa.Schema:
    """The schema of the requests handed to the engine."""
    return pa.schema([pa.field(c.name, c.type, nullable=c.nullable) for c in REQUEST_COLUMNS])


def engine_schema() -> pa.Schema:
    """The schema of the batches the Rust engine hands over."""
    return pa.schema([pa.field(c.name, c.type) for c in ENGINE_COLUMNS])
