"""One reader per public trace format (docs/trace-format.md, "Importing
public traces"): each turns its file into `Row`s, `Skip`s and `RowError`s, in
file order, one row at a time."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specreplay.errors import TraceError
from specreplay.trace.importers.rows import (
    Item,
    Row,
    RowError,
    Skip,
    csv_cell,
    csv_int,
    csv_seconds,
    csv_rows,
    guard,
    int_field,
    json_array,
    json_lines,
    seconds_field,
)
from specreplay.trace.text import Tokenizer, approx_tokens
from specreplay.trace.records import _parse_record


@dataclass
class Options:
    block_size: int | None = None
    time_unit: str | None = None
    api: str = "chat"
    model: str | None = None
    limit: int | None = None
    skip_invalid: bool = False
    seed: int = 0
    #: Output length of requests whose source gives none (single-turn
    #: ShareGPT, vLLM rows without `output_tokens`); None: no length is set.
    default_output_tokens: int | None = None
    #: Prompts longer than this are dropped or truncated (`over_limit`).
    max_prompt_tokens: int | None = None
    over_limit: str = "drop"
    #: ShareGPT: only the first human turn of each conversation.
    first_turn_only: bool = False


Reader = Callable[[Path, Options, "Tokenizer | None"], Iterator[Item]]


def read_mooncake(path: Path, opts: Options, tokenizer: Tokenizer | None = None) -> Iterator[Item]:
    """Mooncake (FAST'25) and Qwen Bailian (ATC'25) JSONL."""
    unit = opts.time_unit or "ms"
    block = opts.block_size or 512
    roots: dict[str, str] = {}
    for line, obj in json_lines(path):
        yield guard(_mooncake_row, line, obj, unit, block, roots)


def _mooncake_row(line: int, obj: Any, unit: str, block: int, roots: dict[str, str]) -> Row:
    if isinstance(obj, RowError):
        raise obj
    if not isinstance(obj, dict):
        raise RowError(line, None, f"expected a JSON object, got {type(obj).__name__}")
    ts = seconds_field(obj, "timestamp", line)
    inp = int_field(obj, "input_length", line)
    out = int_field(obj, "output_length", line)
    hash_ids = obj.get("hash_ids")
    if hash_ids is not None:
        if not isinstance(hash_ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) and 0 <= h < 1 << 64 for h in hash_ids):
            raise RowError(line, "hash_ids", "must be a list of integers from 0 to 2^64-1")
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
        line=line, id=str(line), arrival=ts / (1000.0 if unit == "ms" else 1.0),
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


def read_azure(path: Path, opts: Options, tokenizer: Tokenizer | None = None) -> Iterator[Item]:
    """Azure LLM inference traces 2023/2024: TIMESTAMP,ContextTokens,GeneratedTokens."""
    cols = {"ts": "TIMESTAMP", "in": "ContextTokens", "out": "GeneratedTokens"}
    for line, row in csv_rows(path, cols):
        yield guard(_azure_row, line, row)


def _azure_row(line: int, row: dict[str, str]) -> Row:
    if "__error__" in row:
        raise RowError(line, None, row["__error__"])
    try:
        us = parse_timestamp_us(csv_cell(row["ts"], line, "TIMESTAMP"))
    except ValueError as e:
        raise RowError(line, "TIMESTAMP", str(e)) from None
    return Row(
        line=line, id=str(line), arrival=us / 1e6,
        input_tokens=csv_int(row["in"], line, "ContextTokens"),
        output_tokens=csv_int(row["out"], line, "GeneratedTokens"),
    )


def read_burstgpt(path: Path, opts: Options, tokenizer: Tokenizer | None = None) -> Iterator[Item]:
    """BurstGPT: Timestamp (s), Request tokens, Response tokens; 0 response
    tokens = failed. Newer releases: Session ID (a conversation) and Elapsed
    time (s to the whole answer), used when the header has them."""
    cols = {"ts": "Timestamp", "in": "Request tokens", "out": "Response tokens"}
    for line, row in csv_rows(path, cols, {"session": "Session ID", "elapsed": "Elapsed time"}):
        yield guard(_burstgpt_row, line, row)


def _burstgpt_row(line: int, row: dict[str, str]) -> Row | Skip:
    if "__error__" in row:
        raise RowError(line, None, row["__error__"])
    ts = csv_seconds(row["ts"], line, "Timestamp")
    out = csv_int(row["out"], line, "Response tokens")
    if out == 0:
        return Skip(line, "failed requests (0 response tokens)")
    # API-log rows have no session: an empty cell is data, not an error.
    session = (row.get("session") or "").strip() or None
    elapsed = (row.get("elapsed") or "").strip()
    return Row(
        line=line, id=str(line), arrival=ts, input_tokens=csv_int(row["in"], line, "Request tokens"), output_tokens=out,
        session_id=session, elapsed_s=csv_seconds(elapsed, line, "Elapsed time") if elapsed else None,
    )


def read_sharegpt(path: Path, opts: Options, tokenizer: Tokenizer | None = None) -> Iterator[Item]:
    """ShareGPT: [{"id", "conversations": [{"from", "value"}, …]}]. Each
    human turn is a request whose prompt is the conversation so far (the
    recorded answers as its history), its output length the tokens of the
    answer that follows; a conversation of two or more human turns is a
    session. `first_turn_only`: the first human turn of each conversation
    (what vLLM's benchmark takes). A one-turn conversation (the single-turn
    benchmark derivatives) has no output length."""
    for index, line, obj in json_array(path):
        try:
            yield from _sharegpt_turns(line, index, obj, tokenizer, opts.first_turn_only)
        except RowError as e:
            yield e


#: ShareGPT speakers → chat roles (derivatives name them differently).
SHAREGPT_ROLES = {
    "human": "user", "user": "user",
    "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant", "bard": "assistant", "bing": "assistant",
    "model": "assistant",
    "system": "system",
}


def _sharegpt_turns(line: int, index: int, obj: Any, tokenizer: Tokenizer | None, first_only: bool) -> list[Item]:
    where = f"[{index}]"
    if not isinstance(obj, dict):
        raise RowError(line, where, f"expected an object, got {type(obj).__name__}")
    conv = obj.get("conversations")
    if conv is None:
        raise RowError(line, f"{where}.conversations", "missing")
    if not isinstance(conv, list):
        raise RowError(line, f"{where}.conversations", f"must be a list of turns, got {type(conv).__name__}")
    messages = _sharegpt_messages(line, where, conv)
    if not messages:
        return [Skip(line, "conversations with no turns")]
    source_id = obj.get("id")
    rid = source_id if isinstance(source_id, str) and source_id else str(index)
    users = [i for i, (role, _) in enumerate(messages) if role == "user"]
    if not users:
        return [Skip(line, "conversations with no human turn")]
    if first_only:
        users = users[:1]
    multi = len(users) > 1
    rows: list[Item] = []
    for k, i in enumerate(users):
        prompt = messages[i][1]
        answer = messages[i + 1][1] if i + 1 < len(messages) and messages[i + 1][0] == "assistant" else None
        if not prompt.strip() or (answer is not None and not answer.strip()):
            if k == 0:
                return [Skip(line, "empty prompt or reply")]
            break  # the conversation ends where its data does
        out = None
        if answer is not None:
            out = tokenizer.count(answer) if tokenizer is not None else approx_tokens(answer)
        rows.append(Row(
            line=line, id=rid if k == 0 else f"{rid}/{k}", prompt=prompt, history=messages[:i] or None,
            output_tokens=out, output_approximate=out is not None and tokenizer is None,
            session_id=rid if multi else None,
        ))
    return rows


def _sharegpt_messages(line: int, where: str, conv: list[Any]) -> list[tuple[str, str]]:
    """The turns as (role, text), consecutive turns of one speaker joined (a
    chat template wants the roles to alternate), leading answers dropped
    (nothing asked them)."""
    out: list[tuple[str, str]] = []
    for t, turn in enumerate(conv):
        at = f"{where}.conversations[{t}]"
        value = turn.get("value") if isinstance(turn, dict) else None
        if value is None:
            raise RowError(line, f"{at}.value", "missing")
        if not isinstance(value, str):
            raise RowError(line, f"{at}.value", f"must be a string, got {type(value).__name__}")
        speaker = turn.get("from")
        role = SHAREGPT_ROLES.get(speaker.lower()) if isinstance(speaker, str) else None
        if role is None:
            raise RowError(line, f"{at}.from", f"expected one of {', '.join(SHAREGPT_ROLES)}, got {speaker!r}")
        if out and out[-1][0] == role:
            out[-1] = (role, out[-1][1] + "\n\n" + value)
        elif role != "assistant" or out:
            out.append((role, value))
    return out


def read_vllm(path: Path, opts: Options, tokenizer: Tokenizer | None = None) -> Iterator[Item]:
    """vLLM custom dataset JSONL: {"prompt": "…", "output_tokens": N (optional)}."""
    for line, obj in json_lines(path):
        yield guard(_vllm_row, line, obj)


def _vllm_row(line: int, obj: Any) -> Row:
    if isinstance(obj, RowError):
        raise obj
    if not isinstance(obj, dict):
        raise RowError(line, None, f"expected a JSON object, got {type(obj).__name__}")
    prompt = obj.get("prompt")
    if prompt is None:
        raise RowError(line, "prompt", "missing")
    if not isinstance(prompt, str) or not prompt:
        raise RowError(line, "prompt", f"must be a non-empty string, got {prompt!r}")
    out = int_field(obj, "output_tokens", line, minimum=1) if obj.get("output_tokens") is not None else None
    return Row(line=line, id=str(line), prompt=prompt, output_tokens=out)


def read_capture(path: Path, opts: Options, tokenizer: Tokenizer | None = None) -> Iterator[Item]:
    """A specreplay trace in any record order (a capture that was killed
    before it could sort its records): validated line by line, then sorted."""
    for line, obj in json_lines(path):
        yield guard(_capture_row, line, str(path), obj)


def _capture_row(line: int, path: str, obj: Any) -> Row:
    if isinstance(obj, RowError):
        raise obj
    try:
        rec = _parse_record(path, line, obj)
    except TraceError as e:
        raise RowError(line, e.field, e.message) from None
    return Row(line=line, id=rec.id, arrival=rec.arrival, record=rec)


#: Endpoint path (after /v1) → trace API, for formats that name the endpoint.
ENDPOINTS: dict[str, str] = {
    "/chat/completions": "chat",
    "/completions": "completions",
    "/responses": "responses",
    "/messages": "anthropic",
    "/embeddings": "embeddings",
    "/rerank": "rerank",
}


def api_of_path(path: str) -> str | None:
    """The trace API of an endpoint path (`/v1/embeddings` → embeddings; `/v2/rerank` too); None if unknown."""
    bare = "/" + path.split("?", 1)[0].strip("/")
    for suffix, api in sorted(ENDPOINTS.items(), key=lambda kv: -len(kv[0])):
        if bare.endswith(suffix):
            return api
    return None


def read_openai_batch(path: Path, opts: Options, tokenizer: Tokenizer | None = None) -> Iterator[Item]:
    """OpenAI Batch API input JSONL: {custom_id, method, url, body}, one
    request a line; `url` names the endpoint (/v1/chat/completions,
    /v1/embeddings, /v1/rerank, …). No timestamps."""
    for line, obj in json_lines(path):
        yield guard(_batch_row, line, str(path), obj)


def _batch_row(line: int, path: str, obj: Any) -> Row:
    if isinstance(obj, RowError):
        raise obj
    if not isinstance(obj, dict):
        raise RowError(line, None, f"expected a JSON object, got {type(obj).__name__}")
    url = obj.get("url")
    if not isinstance(url, str):
        raise RowError(line, "url", "missing: the endpoint, e.g. /v1/chat/completions")
    api = api_of_path(url)
    if api is None:
        raise RowError(line, "url", f"unknown endpoint {url!r} (known: {', '.join('/v1' + p for p in ENDPOINTS)})")
    rid = obj.get("custom_id", line)
    try:
        rec = _parse_record(path, line, {"id": str(rid), "api": api, "body": obj.get("body")})
    except TraceError as e:
        raise RowError(line, e.field, e.message) from None
    return Row(line=line, id=rec.id, record=rec)


FORMATS: dict[str, tuple[str, Reader]] = {
    "mooncake": ("Mooncake JSONL: timestamp (ms), input_length, output_length, hash_ids (512-token blocks)", read_mooncake),
    "bailian": ("Qwen Bailian JSONL: Mooncake fields + chat_id, parent_chat_id, turn, type; timestamp (s), 16-token blocks", read_mooncake),
    "azure": ("Azure LLM inference CSV (2023, 2024): TIMESTAMP, ContextTokens, GeneratedTokens", read_azure),
    "burstgpt": ("BurstGPT CSV: Timestamp (s), Request tokens, Response tokens; Session ID, Elapsed time when present", read_burstgpt),
    "sharegpt": ("ShareGPT JSON: [{id, conversations: [{from, value}, …]}]: each human turn a request, a conversation a session; single-turn sets too (no timestamps)", read_sharegpt),
    "vllm": ("vLLM custom dataset JSONL: {prompt, output_tokens?} (no timestamps)", read_vllm),
    "capture": ("a specreplay capture left unsorted (killed before it stopped): sorts it", read_capture),
    "openai-batch": ("OpenAI Batch API input JSONL: {custom_id, method, url, body}; url /v1/chat/completions, /v1/embeddings, /v1/rerank, … (no timestamps)", read_openai_batch),
}
DEFAULTS: dict[str, dict[str, Any]] = {"bailian": {"block_size": 16, "time_unit": "s"}}
#: Formats whose ids come from the source (checked for duplicates); the
#: others number rows by line, unique by construction.
SOURCE_IDS = frozenset({"sharegpt", "capture", "openai-batch"})
