"""Text of a given token length, without a model: what the importers and
`specreplay synth` put in prompts when a trace gives only token counts, and
what `specreplay capture --redact` puts in place of message text.

The approximation (docs/trace-format.md, "Token counts without a tokenizer"):

* a whitespace-separated word of `c` characters counts as `ceil(c / 4)`
  tokens (`approx_tokens`);
* filler text is made of short common English words (at most 4 letters, each
  one token in the usual BPE vocabularies when preceded by a space), so `n`
  filler words are `n` tokens by that rule and close to `n` under a real
  tokenizer.

With a tokenizer (`Tokenizer`, HF `tokenizers`, an optional extra), filler is
made of words from the tokenizer's own vocabulary and counted with it, so the
length is exact wherever the re-encoded text matches.

Everything here is deterministic: equal keys (hash ids, words) give equal
text, so prefix sharing in the source survives in the synthesized prompts.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

from specreplay import _core
from specreplay.errors import ConfigError

#: Filler vocabulary: short common words, each ≤ 4 characters. The list
#: lives with the synthesis in Rust (`specreplay_core::prompt::FILLER`).
FILLER: tuple[str, ...] = tuple(_core.Filler().words)

_WORD_OR_SPACE = re.compile(r"(\s+)")


def approx_tokens(text: str) -> int:
    """Tokens in `text` by the documented approximation: each
    whitespace-separated word of c characters is ceil(c / 4) tokens."""
    return sum(-(-len(w) // 4) for w in text.split())


class Redactor:
    """Replaces text by filler of the same approximate token length, word by
    word: each word becomes ceil(len/4) filler words chosen by a keyed hash of
    the word, whitespace is kept. Equal text gives equal filler (so shared
    prefixes stay shared); without the key (random per capture, never
    written) the filler cannot be mapped back to words."""

    def __init__(self, key: bytes) -> None:
        self._key = key
        self._cache: dict[str, str] = {}

    def word(self, word: str) -> str:
        out = self._cache.get(word)
        if out is None:
            n = -(-len(word) // 4)
            digest = b""
            counter = 0
            while len(digest) < n:
                digest += hashlib.blake2b(word.encode(), key=self._key, digest_size=64, person=counter.to_bytes(8, "little")).digest()
                counter += 1
            out = " ".join(FILLER[b % len(FILLER)] for b in digest[:n])
            if len(self._cache) < 1 << 20:
                self._cache[word] = out
        return out

    def text(self, text: str) -> str:
        return "".join(part if not part or part.isspace() else self.word(part) for part in _WORD_OR_SPACE.split(text))

    #: Keys whose string values are structure, not text, and are kept.
    KEEP_KEYS = frozenset({"role", "type", "id", "tool_call_id", "model", "cache_control", "detail", "format"})
    #: Body fields that carry text (everything else in the body is kept).
    TEXT_FIELDS = frozenset({"messages", "prompt", "input", "system", "instructions", "suffix"})
    #: Tool definitions: only their descriptions are text; names, types,
    #: `required` and `enum` must keep matching the schema and the calls.
    TOOL_FIELDS = frozenset({"tools", "functions"})

    def body(self, body: dict[str, Any]) -> dict[str, Any]:
        """A copy of a request body with every text string under the
        text-carrying fields replaced (and tool descriptions); token-id
        prompts, numbers and tool schemas are kept."""
        out = {}
        for k, v in body.items():
            if k in self.TEXT_FIELDS:
                out[k] = self._walk(v)
            elif k in self.TOOL_FIELDS:
                out[k] = self._descriptions(v)
            else:
                out[k] = v
        return out

    def _descriptions(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self._descriptions(v) for v in value]
        if isinstance(value, dict):
            return {
                k: (self.text(v) if k == "description" and isinstance(v, str) else self._descriptions(v))
                for k, v in value.items()
            }
        return value

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self._walk(v) for v in value]
        if isinstance(value, dict):
            return {k: (v if k in self.KEEP_KEYS and isinstance(v, str) else self._walk(v)) for k, v in value.items()}
        return value


class Tokenizer:
    """A HF `tokenizers` tokenizer file (`tokenizer.json`), used to make
    prompts of exact token lengths. Needs `pip install specreplay[tokenizer]`."""

    def __init__(self, path: str) -> None:
        try:
            import tokenizers
        except ImportError:
            raise ConfigError(
                "--tokenizer needs the HF tokenizers package: pip install 'specreplay[tokenizer]' (or pip install tokenizers)"
            ) from None
        try:
            self._tok = tokenizers.Tokenizer.from_file(path)
        except Exception as e:  # tokenizers raises its own Exception subclass
            raise ConfigError(f"--tokenizer: cannot load {path}: {e}") from None
        self.path = path
        words = []
        for token, _id in sorted(self._tok.get_vocab(with_added_tokens=False).items(), key=lambda kv: kv[1]):
            text = self._tok.decode([_id]).strip()
            if 2 <= len(text) <= 8 and text.isascii() and text.isalpha() and text.islower():
                words.append(text)
        # Keep the words that encode back to one token after a space.
        self.words = tuple(w for w in dict.fromkeys(words) if len(self._tok.encode(" " + w, add_special_tokens=False).ids) == 1)
        if len(self.words) < 16:
            raise ConfigError(f"--tokenizer: {path} has too few plain word tokens ({len(self.words)}) to make prompts from")

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)


class PromptMaker:
    """Prompt text of given token lengths, synthesized from block ids in Rust
    (`specreplay._core.Filler`: block `h` is always the same text, a block
    cut short is a prefix of it). With a tokenizer, the words are its own
    single-token words and the text is re-counted with it: `is_approximate`
    says whether that count misses the target. `fresh` hands out block ids
    no other prompt of this maker uses (text that shares nothing)."""

    def __init__(self, tokenizer: Tokenizer | None = None, seed: int = 0) -> None:
        self.tokenizer = tokenizer
        self.seed = seed
        self._filler = _core.Filler(list(tokenizer.words)) if tokenizer is not None else _core.Filler()
        self._next_id = 0

    def from_blocks(self, total: int, block_size: int, hash_ids: Sequence[int]) -> str:
        return self._filler.text(total, block_size, list(hash_ids), self.seed)

    def new_ids(self, n: int) -> list[int]:
        """`n` block ids never handed out before by this maker."""
        ids = list(range(self._next_id, self._next_id + n))
        self._next_id += n
        return ids

    def fresh(self, n: int) -> str:
        """`n` tokens of text sharing nothing with other prompts."""
        return self.from_blocks(n, n, self.new_ids(1)) if n > 0 else ""

    def count(self, text: str) -> int:
        return self.tokenizer.count(text) if self.tokenizer is not None else approx_tokens(text)

    def is_approximate(self, text: str, target: int) -> bool:
        return self.tokenizer is None or self.tokenizer.count(text) != target
