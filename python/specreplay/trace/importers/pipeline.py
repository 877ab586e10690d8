"""`import_trace`: a public trace file into a specreplay trace, as a stream.

Rows go one at a time from the format's reader (`formats`), through a
bounded look-ahead that puts them in arrival order (`in_arrival_order`), to
a record each (`RecordBuilder`), written at once. Memory is bounded by the
look-ahead and the per-session state, not by the file.

Where the source gives token counts, the record keeps the prompt as blocks
(`prompt_blocks`: the source's hash ids, or ids handed out by
`sessions.BlockIds`), synthesized into text only when the request is built,
so the trace stays about the size of its source. With a tokenizer the text
is written out instead (the tokenizer's words are not known at replay).
Output lengths become `max_tokens` + `min_tokens` + `ignore_eos` so the
server generates what the trace says.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from specreplay._core import Filler
from specreplay.trace.media import dedup_body, media_dir
from specreplay.errors import ConfigError, TraceError
from specreplay.trace.importers.formats import DEFAULTS, FORMATS, SOURCE_IDS, Options
from specreplay.trace.importers.outcome import CONTEXT_SIZES, MALFORMED, ImportReport
from specreplay.trace.importers.rows import Item, Row, RowError, Skip
from specreplay.trace.importers.sessions import BlockIds
from specreplay.trace.text import PromptMaker, Tokenizer, approx_tokens
from specreplay.trace.records import PromptBlocks, TraceRecord

#: Rows are put in arrival order within this many rows; a row earlier than
#: one already written is refused (sort the file first). Every public trace
#: known is in order, a killed capture nearly so.
REORDER_WINDOW = 10_000
OVER_LIMIT = ("drop", "truncate")


def import_trace(
    fmt: str, source: str | Path, output: str | Path, opts: Options | None = None, tokenizer: Tokenizer | None = None
) -> ImportReport:
    opts = _checked(fmt, dataclasses.replace(opts) if opts is not None else Options())
    path = Path(source)
    if not path.is_file():
        raise TraceError(str(source), None, None, "no such file")
    report = ImportReport(
        format=fmt, source=str(source), output=str(output), max_prompt_tokens=opts.max_prompt_tokens,
        over_limit=opts.over_limit, default_output_tokens=opts.default_output_tokens,
    )
    rows = _usable_rows(FORMATS[fmt][1](path, opts, tokenizer), opts, report, str(source))
    builder = RecordBuilder(opts, tokenizer, report)
    out = Path(output)
    part = out.with_name(out.name + ".part")  # renamed into place when complete
    seen: set[str] | None = set() if fmt in SOURCE_IDS else None
    try:
        with part.open("w", encoding="utf-8") as f:
            t0: float | None = None
            for row in in_arrival_order(rows, str(source), report):
                if row.arrival is not None and t0 is None:
                    t0 = row.arrival
                arrival = round(row.arrival - t0, 6) if row.arrival is not None and t0 is not None else None
                rec = builder.record(row, arrival)
                if rec is None:
                    continue
                if seen is not None:
                    if rec.id in seen:
                        raise TraceError(str(source), row.line, "id", f"duplicate id {rec.id!r}")
                    seen.add(rec.id)
                if rec.body:
                    # Each distinct image or clip once, beside the trace (docs/trace-format.md, "Media").
                    rec = dataclasses.replace(rec, body=dedup_body(rec.body, media_dir(out)))
                f.write(rec.to_json() + "\n")
                report.written += 1
                if rec.session_id is not None:
                    report.session_requests += 1
                    report.sessions.add(rec.session_id)
                report.approximate += rec.approximate
        if not report.written:
            skips = "; ".join(report.skip_lines())
            raise TraceError(str(source), None, None, "no usable rows" + (f" ({skips})" if skips else ""))
        os.replace(part, out)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    report.continued, report.restarted = builder.block_ids.continued, builder.block_ids.restarted
    return report


def _checked(fmt: str, opts: Options) -> Options:
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r} (expected one of: {', '.join(FORMATS)})")
    for k, v in DEFAULTS.get(fmt, {}).items():
        if getattr(opts, k) is None:
            setattr(opts, k, v)
    if opts.api not in ("chat", "completions"):
        raise ConfigError(f"--api: expected chat or completions, got {opts.api!r}")
    for name in ("block_size", "default_output_tokens", "max_prompt_tokens", "limit"):
        value = getattr(opts, name)
        if value is not None and value < 1:
            raise ConfigError(f"--{name.replace('_', '-')}: must be at least 1, got {value}")
    if opts.over_limit not in OVER_LIMIT:
        raise ConfigError(f"--over-limit: expected drop or truncate, got {opts.over_limit!r}")
    return opts


def _usable_rows(items: Iterator[Item], opts: Options, report: ImportReport, source: str) -> Iterator[Row]:
    """The reader's rows; skips counted, malformed rows raised (or counted
    with the first one kept, under --skip-invalid); at most --limit rows."""
    kept = 0
    for item in items:
        if isinstance(item, RowError):
            if not opts.skip_invalid:
                raise TraceError(source, item.line, item.field, item.message) from None
            if report.first_malformed is None:
                report.first_malformed = item.where()
            report.skipped[MALFORMED] += 1
        elif isinstance(item, Skip):
            report.skipped[item.reason] += 1
        else:
            kept += 1
            yield item
            if opts.limit is not None and kept >= opts.limit:
                return  # read no further


def in_arrival_order(rows: Iterator[Row], source: str, report: ImportReport) -> Iterator[Row]:
    """`rows` sorted by arrival (stable), through a look-ahead of
    REORDER_WINDOW rows. Rows without arrival times pass in file order."""
    heap: list[tuple[float, int, Row]] = []
    released = -math.inf  # the latest arrival already handed on
    latest = -math.inf
    timed: bool | None = None
    for seq, row in enumerate(rows):
        if timed is None:
            timed = row.arrival is not None
        if (row.arrival is not None) != timed:
            raise TraceError(source, row.line, "arrival", "either every record has an arrival time or none has")
        if row.arrival is None:
            yield row
            continue
        if row.arrival < latest:
            report.reordered += 1
        latest = max(latest, row.arrival)
        if row.arrival < released:
            raise TraceError(
                source, row.line, None,
                f"arrival {row.arrival:g} s comes after rows of later times more than {REORDER_WINDOW} rows back "
                f"(rows are put in time order within {REORDER_WINDOW} rows): sort the file by time first",
            )
        heapq.heappush(heap, (row.arrival, seq, row))
        if len(heap) > REORDER_WINDOW:
            released, _, first = heapq.heappop(heap)
            yield first
    while heap:
        yield heapq.heappop(heap)[2]


class RecordBuilder:
    """One trace record per row, in arrival order (the sessions' histories
    depend on it)."""

    def __init__(self, opts: Options, tokenizer: Tokenizer | None, report: ImportReport) -> None:
        self.opts = opts
        self.block_size = opts.block_size or 512
        self.tokenizer = tokenizer
        self.maker = PromptMaker(tokenizer, seed=opts.seed) if tokenizer is not None else None
        self.block_ids = BlockIds(self.block_size)
        self.report = report

    def record(self, row: Row, arrival: float | None) -> TraceRecord | None:
        if row.record is not None:
            return dataclasses.replace(row.record, arrival=arrival if row.record.arrival is not None else None)
        if row.prompt is None and not row.input_tokens:
            self.report.skipped["requests with 0 input tokens"] += 1
            return None
        output = row.output_tokens
        if output is None:
            self.report.no_output_length += 1
            output = self.opts.default_output_tokens
        if output == 0:
            self.report.skipped["requests with 0 output tokens"] += 1
            return None
        made = self._text_prompt(row) if row.prompt is not None else self._token_prompt(row)
        if made is None:
            return None
        text, blocks, approximate = made
        response = None
        if row.elapsed_s is not None:
            # The source's own measurement; its failed rows were skipped, so 200.
            response = {"status": 200, "end_us": round(row.elapsed_s * 1e6), "prompt_tokens": row.input_tokens,
                        "completion_tokens": row.output_tokens}
        return TraceRecord(
            id=row.id,
            api=self.opts.api,
            body=_body(self.opts.api, text, output, self.opts.model),
            arrival=arrival,
            session_id=row.session_id,
            expected_output_tokens=output,
            approximate=approximate,
            response=response,
            prompt_blocks=blocks,
        )

    def _over_limit(self, tokens: int) -> bool:
        """Counts the prompt's length; True if it is over the cap (and
        dropped: counted as skipped)."""
        for size, _ in CONTEXT_SIZES:
            if tokens > size:
                self.report.longer_than[size] += 1
        cap = self.opts.max_prompt_tokens
        if cap is None or tokens <= cap:
            return False
        if self.opts.over_limit == "drop":
            self.report.skipped[f"prompts longer than --max-prompt-tokens {cap} (--over-limit drop)"] += 1
        else:
            self.report.truncated += 1
        return True

    def _token_prompt(self, row: Row) -> tuple[str | list[dict[str, str]] | None, PromptBlocks | None, bool] | None:
        tokens = row.input_tokens or 0
        if tokens > Filler.MAX_TOKENS:
            self.report.skipped[f"prompts longer than {Filler.MAX_TOKENS} tokens (the most specreplay synthesizes)"] += 1
            return None
        block_size = self.block_size
        if row.hash_ids is not None:
            ids = row.hash_ids
        elif row.session_id is not None:
            ids = self.block_ids.turn(row.session_id, tokens)
        else:
            ids = self.block_ids.fresh(tokens)
        if self._over_limit(tokens):
            if self.opts.over_limit == "drop":
                return None
            tokens = self.opts.max_prompt_tokens or tokens
            ids = ids[: -(-tokens // block_size)]
        if self.maker is not None:
            text = self.maker.from_blocks(tokens, block_size, ids)
            return text, None, self.maker.is_approximate(text, tokens)
        return None, PromptBlocks(tokens=tokens, block_size=block_size, hash_ids=list(ids), seed=self.opts.seed), True

    def _text_prompt(self, row: Row) -> tuple[str | list[dict[str, str]] | None, PromptBlocks | None, bool] | None:
        messages = [*(row.history or []), ("user", row.prompt or "")]
        count = self.tokenizer.count if self.tokenizer is not None else approx_tokens
        tokens = sum(count(text) for _, text in messages)
        if not self._over_limit(tokens):
            return _prompt_of(messages), None, row.output_approximate
        if self.opts.over_limit == "drop":
            return None
        return _prompt_of(_truncate_messages(messages, self.opts.max_prompt_tokens or tokens)), None, True


_WORD = re.compile(r"\S+")


def _prompt_of(messages: list[tuple[str, str]]) -> str | list[dict[str, str]]:
    """A lone user message as its text, a conversation as chat messages."""
    if len(messages) == 1 and messages[0][0] == "user":
        return messages[0][1]
    return [{"role": role, "content": text} for role, text in messages]


def _truncate_messages(messages: list[tuple[str, str]], tokens: int) -> list[tuple[str, str]]:
    """The leading messages that fit in `tokens` tokens by the
    approximation, the one that crosses cut at a word's end (so what
    conversations share at their start stays shared)."""
    out: list[tuple[str, str]] = []
    left = tokens
    for role, text in messages:
        need = approx_tokens(text)
        if need > left:
            cut = _truncate(text, left)
            if cut:
                out.append((role, cut))
            break
        out.append((role, text))
        left -= need
    return out


def _truncate(text: str, tokens: int) -> str:
    """The longest leading part of `text`, cut at a word's end, of at most
    `tokens` tokens by the approximation."""
    used = 0
    end = 0
    for m in _WORD.finditer(text):
        used += -(-len(m.group()) // 4)
        if used > tokens:
            break
        end = m.end()
    return text[:end]


def _body(api: str, prompt: str | list[dict[str, str]] | None, output: int | None, model: str | None) -> dict[str, Any]:
    """The request body; without `prompt` its input comes from prompt_blocks.
    A conversation is chat messages, or for completions its texts joined."""
    body: dict[str, Any] = {}
    if model is not None:
        body["model"] = model
    if isinstance(prompt, list):
        if api == "chat":
            body["messages"] = prompt
        else:
            body["prompt"] = "\n\n".join(m["content"] for m in prompt)
    elif prompt is not None:
        if api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
    if output is not None:
        body["max_tokens"] = output
        body["min_tokens"] = output
        body["ignore_eos"] = True
    return body
