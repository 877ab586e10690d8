"""Per-chunk token counts from the server's own tokenizer: llama.cpp's
`POST /tokenize` (`replay --server-tokenize`).

llama.cpp answers `{"content": text, "with_pieces": true}` with every token's
piece: `{"tokens": [{"id": 123, "piece": " The"}, …]}`, a piece that is not
whole UTF-8 given as its byte values (`"piece": [226]`). The pieces, joined,
spell the text once SentencePiece's space marker `▁` is read as a space (and
a leading space it added is dropped); each token then owns the bytes of its
piece, and counts in the chunk where its last byte arrived, as with a local
tokenizer (`chunk_tokenizer`). A text the pieces do not spell is left to the
engine's estimate (`counts` gives None for it).

Only llama.cpp's shape is spoken: vLLM's and SGLang's `/tokenize` give token
strings in the tokenizer's own alphabet (`Ġ` for a space in byte-level BPE),
not pieces of the text.

One request per response, sequential, after the point: the server is never
asked while a point is measured.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from specreplay.run.chunk_tokenizer import tokens_per_chunk
from specreplay.run.target import post_json

TIMEOUT_S = 30.0
#: SentencePiece's word-boundary marker, U+2581, in UTF-8.
SPACE_MARKER = np.frombuffer("▁".encode(), dtype=np.uint8)


def tokenize_url(api_url: str) -> str:
    """`<server root>/tokenize` for the API at `api_url`, where llama.cpp serves it."""
    parts = urlsplit(api_url)
    return urlunsplit((parts.scheme, parts.netloc, "/tokenize", "", ""))


class ServerTokenizer:
    """The target's `/tokenize` (llama.cpp's shape). After the first failed
    request it asks no more (`failure` says why): the rows keep the
    engine's estimate, and the run goes on."""

    def __init__(self, api_url: str, headers: list[tuple[str, str]]) -> None:
        self.url = tokenize_url(api_url)
        self.headers = headers
        self.failure: str | None = None

    def pieces(self, text: str) -> list[bytes] | None:
        if self.failure is not None:
            return None
        try:
            got = post_json(self.url, self.headers, {"content": text, "add_special": False, "with_pieces": True}, TIMEOUT_S)
            if got.status >= 300:
                self.failure = f"{self.url}: HTTP {got.status} {got.reason}"
                return None
            answer = json.loads(got.body)
        except (OSError, ValueError) as e:  # ValueError: not JSON, or a URL no request can carry (ConfigError)
            self.failure = f"{self.url}: {e}"
            return None
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list) or any(not isinstance(t, dict) or "piece" not in t for t in tokens):
            self.failure = f"{self.url} did not answer with llama.cpp's pieces ({str(answer)[:200]})"
            return None
        return [p.encode() if isinstance(p, str) else bytes(p) for p in (t["piece"] for t in tokens)]

    def counts(self, texts: list[str], chars: list[np.ndarray]) -> list[np.ndarray | None]:
        """Per request: its tokens per chunk (`chars`: characters per
        chunk), or None when there are none (the pieces do not spell its
        text, or the server failed)."""
        out: list[np.ndarray | None] = []
        for text, per_chunk in zip(texts, chars):
            pieces = self.pieces(text)
            out.append(None if pieces is None else chunk_counts(pieces, text, per_chunk))
        return out


def chunk_counts(pieces: list[bytes], text: str, chars: np.ndarray) -> np.ndarray | None:
    """Tokens per chunk: each token counts in the chunk that holds its last
    byte, once the pieces are read back into `text`; None if they do not spell it."""
    lengths = np.array([len(p) for p in pieces], dtype="int64")
    spelled = np.frombuffer(b"".join(pieces), dtype=np.uint8).copy()
    # `▁` is a space: its three bytes (maybe three byte tokens) all stand for it.
    n = len(spelled)
    marker = np.zeros(n, dtype=bool)
    if n >= 3:
        marker[: n - 2] = (spelled[: n - 2] == SPACE_MARKER[0]) & (spelled[1 : n - 1] == SPACE_MARKER[1]) & (spelled[2:] == SPACE_MARKER[2])
    starts = np.flatnonzero(marker)
    keep = np.ones(n, dtype=bool)
    keep[starts] = keep[starts + 1] = False
    spelled[starts + 2] = ord(" ")
    # Per byte of the pieces, the byte of the text it stands for.
    position = np.cumsum(keep) - 1
    position[starts] = position[starts + 1] = position[starts + 2]
    spelled = spelled[keep]
    wanted = np.frombuffer(text.encode(), dtype=np.uint8)
    if len(spelled) == len(wanted) + 1 and spelled[0] == ord(" "):
        spelled, position = spelled[1:], position - 1  # SentencePiece's dummy prefix
    if not np.array_equal(spelled, wanted):
        return None
    if not len(wanted):
        return np.zeros(len(chars), dtype="int64")
    # Per byte of the text, its character; per token, its last byte.
    char_of_byte = np.cumsum((wanted & 0xC0) != 0x80) - 1
    last = (np.cumsum(lengths) - 1)[lengths > 0]
    return tokens_per_chunk(char_of_byte[np.clip(position[last], 0, None)], chars)
