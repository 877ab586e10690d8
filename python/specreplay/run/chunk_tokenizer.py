"""Per-chunk token counts from a tokenizer: a local Hugging Face one
(`replay --tokenizer tokenizer.json`, the `tokenizers` package: the
`tokenizer` extra, `ChunkTokenizer`), or the server's own `/tokenize`
(`replay --server-tokenize`, `server_tokenize.ServerTokenizer`).

Without continuous usage the engine splits the server's final count over the
chunks by their text's length (`chunk_token_source` = `text_length`). With a
tokenizer the engine also keeps each request's chunk text and hands it over
in the batch (`chunk_text`: the chunks' text in order, one string per request;
`chunk_text_chars`: the characters each chunk carried). After the point ends,
off the measurement path, `recount` tokenizes each such request's whole text
once: a token counts in the chunk that completed it (where its last character
arrived), which follows the model's own split across chunk boundaries better
than tokenizing each chunk apart. The counts are then reconciled with the
server's (`_core.reconcile_chunk_tokens`, the engine's largest-remainder
rule: each side over its own chunks when the server gave the split) and the
row says `tokenizer`. The text is dropped: it is not a results column.

Only `text_length` rows are recounted: continuous usage is exact already, and
without usage there is no server count to reconcile with.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from specreplay import _core
from specreplay.errors import ConfigError

#: The columns the engine adds for a tokenizer (`RunSpec.chunk_text`).
TEXT_COLUMNS: tuple[str, ...] = ("chunk_text", "chunk_text_chars")


class ChunkCounter(Protocol):
    """What counts tokens per chunk: per request, from its whole text and
    its characters per chunk; None for a request it cannot count. `failure`
    says why it stopped counting, if it did."""

    failure: str | None

    def counts(self, texts: list[str], chars: list[np.ndarray]) -> Sequence[np.ndarray | None]: ...


class ChunkTokenizer:
    """A local `tokenizer.json` loaded once for the run."""

    def __init__(self, path: str | Path) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise ConfigError(f"--tokenizer {path}: needs the `tokenizers` package (pip install 'specreplay[tokenizer]')") from None
        try:
            self._tokenizer: Any = Tokenizer.from_file(str(path))
        except Exception as e:  # the package raises plain Exception for a bad file
            raise ConfigError(f"--tokenizer {path}: not a Hugging Face tokenizer.json ({e})") from None
        self.path = str(path)
        self.failure: str | None = None

    def counts(self, texts: list[str], chars: list[np.ndarray]) -> list[np.ndarray]:
        """Per request: its tokens per chunk, a token counted in the chunk
        where its last character is (`chars`: characters per chunk)."""
        encodings = self._tokenizer.encode_batch(texts, add_special_tokens=False)
        out = []
        for encoding, per_chunk in zip(encodings, chars):
            offsets = np.asarray(encoding.offsets, dtype="int64").reshape(-1, 2)
            out.append(tokens_per_chunk(offsets[:, 1] - 1, per_chunk))
        return out


def tokens_per_chunk(last_chars: np.ndarray, chars: np.ndarray) -> np.ndarray:
    """Tokens per chunk, a token counted in the chunk that holds its last
    character (`last_chars`: per token, its position in the text; `chars`:
    characters per chunk)."""
    ends = np.cumsum(chars)
    chunk = np.minimum(np.searchsorted(ends, last_chars, side="right"), max(len(ends) - 1, 0))
    counts: np.ndarray = np.bincount(chunk, minlength=len(ends)).astype("int64")
    return counts


def recount(counter: ChunkCounter, rows: pa.RecordBatch, text: pa.Array, chars: pa.Array) -> pa.RecordBatch:
    """`rows` (results columns) with the `text_length` rows' per-chunk
    counts, reasoning/content split and `chunk_token_source` replaced by
    `counter`'s, reconciled with the server's counts; `text` and `chars` are
    the engine's `TEXT_COLUMNS` for the same rows. A row the counter cannot
    count keeps the estimate."""
    import pyarrow.compute as pc  # after the point's drain: not imported before a point ends (batch_figures.floats)

    source = rows.column("chunk_token_source")
    chosen = pc.fill_null(pc.equal(source, "text_length"), False)
    candidates = np.flatnonzero(chosen.to_numpy(zero_copy_only=False))
    if not len(candidates):
        return rows
    index = pa.array(candidates)
    texts = [str(t) for t in text.take(index).to_pylist()]
    picked_chars = chars.take(index)
    flat = pc.list_flatten(picked_chars).to_numpy(zero_copy_only=False).astype("int64")
    char_lists = np.split(flat, picked_chars.offsets.to_numpy()[1:-1])
    counted = list(counter.counts(texts, char_lists))
    kept = [i for i, c in enumerate(counted) if c is not None]
    if not kept:
        return rows
    picked = candidates[kept]
    index = pa.array(picked)
    # The server's split is kept where it gave one (token_source usage).
    given = pc.equal(rows.column("token_source").take(index), "usage")
    reasoning = pc.if_else(given, rows.column("reasoning_tokens").take(index), pa.nulls(len(picked), pa.int64()))
    request = pa.record_batch(
        {
            "weights": pa.array([counted[i] for i in kept], type=pa.list_(pa.int64())),
            "chunk_channel": rows.column("chunk_channel").take(index),
            "output_tokens": rows.column("output_tokens").take(index),
            "reasoning_tokens": reasoning,
        }
    )
    reconciled = pa.record_batch(_core.reconcile_chunk_tokens(request))
    return _replace_rows(rows, picked, reconciled)


def _tool_tokens(chunk_tokens: pa.Array, chunk_channel: pa.Array) -> pa.Array:
    """Per row: the tokens of its tool-call chunks (channel 2)."""
    import pyarrow.compute as pc

    tokens = pc.list_flatten(chunk_tokens).to_numpy(zero_copy_only=False)
    channels = pc.list_flatten(chunk_channel).to_numpy(zero_copy_only=False)
    parents = pc.list_parent_indices(chunk_tokens).to_numpy(zero_copy_only=False)
    sums = np.bincount(parents, weights=np.where(channels == 2, tokens, 0), minlength=len(chunk_tokens))
    return pa.array(sums.astype("int64"))


def _replace_rows(rows: pa.RecordBatch, picked: np.ndarray, reconciled: pa.RecordBatch) -> pa.RecordBatch:
    """`rows` with the rows at `picked` given the reconciled counts."""
    import pyarrow.compute as pc

    # Where each row's new value comes from: its own, or the reconciled row.
    position = np.full(rows.num_rows, -1, dtype="int64")
    position[picked] = np.arange(len(picked))
    mask = pa.array(position >= 0)
    take = pa.array(np.maximum(position, 0))

    def merged(name: str, new: pa.Array) -> pa.Array:
        return pc.if_else(mask, new.take(take), rows.column(name))

    reasoning = merged("reasoning_tokens", reconciled.column("reasoning_tokens"))
    chunk_tokens = merged("chunk_tokens", reconciled.column("chunk_tokens"))
    tool = _tool_tokens(chunk_tokens, rows.column("chunk_channel"))
    tool = pc.if_else(mask, pc.if_else(pc.is_null(rows.column("tool_call_tokens")), pa.nulls(rows.num_rows, pa.int64()), tool), rows.column("tool_call_tokens"))
    content = pc.subtract(pc.subtract(rows.column("output_tokens"), reasoning), pc.fill_null(tool, 0))
    columns = {
        "chunk_tokens": chunk_tokens,
        "reasoning_tokens": reasoning,
        "tool_call_tokens": tool,
        "content_tokens": pc.if_else(mask, content, rows.column("content_tokens")),
        "chunk_token_source": pc.if_else(mask, pa.scalar("tokenizer"), rows.column("chunk_token_source")),
    }
    arrays = [columns[f.name].cast(f.type) if f.name in columns else rows.column(i) for i, f in enumerate(rows.schema)]
    return pa.RecordBatch.from_arrays(arrays, schema=rows.schema)
