"""What an import did, as the summary `specreplay import` prints."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

MALFORMED = "malformed rows (--skip-invalid)"
#: Common context sizes the summary counts longer prompts against.
CONTEXT_SIZES = ((32_768, "32K"), (131_072, "128K"))


@dataclass
class ImportReport:
    format: str
    source: str
    output: str
    written: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    reordered: int = 0
    approximate: int = 0
    first_malformed: str | None = None
    #: Prompts longer than each of CONTEXT_SIZES, before any cap.
    longer_than: Counter[int] = field(default_factory=Counter)
    max_prompt_tokens: int | None = None
    over_limit: str = "drop"
    truncated: int = 0
    #: Requests whose source gives no output length, and what they got.
    no_output_length: int = 0
    default_output_tokens: int | None = None
    #: Requests of a session whose prompts come from the session's history
    #: (sessions.BlockIds): extending the turn before, or starting over.
    continued: int = 0
    restarted: int = 0
    #: Requests that are a turn of a session, and the sessions they make.
    session_requests: int = 0
    sessions: set[str] = field(default_factory=set)

    def skip_lines(self) -> list[str]:
        out = []
        for reason, n in sorted(self.skipped.items()):
            first = f" (first: {self.first_malformed})" if reason == MALFORMED and self.first_malformed else ""
            out.append(f"skipped {n}: {reason}{first}")
        return out

    def lines(self) -> list[str]:
        out = [f"imported {self.written} requests from {self.source} ({self.format}) into {self.output}"]
        out += self.skip_lines()
        if self.reordered:
            out.append(f"sorted by arrival time: {self.reordered} rows were out of order")
        if self.approximate:
            out.append(
                f"{self.approximate} records have approximate token counts (marked \"approximate\": true; "
                "give --tokenizer for exact prompt lengths)"
            )
        out += self._length_lines()
        if self.no_output_length:
            n = self.no_output_length
            if self.default_output_tokens is not None:
                out.append(f"{n} requests have no output length in the source: they ask for "
                           f"{self.default_output_tokens} tokens (--default-output-tokens)")
            else:
                out.append(f"{n} requests have no output length in the source: none is set, so the model ends them "
                           "(or replay's --max-tokens caps them); --default-output-tokens N asks for N tokens")
        if self.sessions:
            out.append(f"sessions: {self.session_requests} requests are turns of {len(self.sessions)} sessions "
                       "(replay sends each turn after the one before it has ended, plus a think time: docs/sessions.md)")
        if self.continued or self.restarted:
            out.append(f"sessions: {self.continued} requests extend the prompt of their session's turn before "
                       f"(shared prefix), {self.restarted} start over (their prompt is shorter than the turn before)")
        return out

    def _length_lines(self) -> list[str]:
        out = []
        over = [f"{self.longer_than[size]} longer than {label}" for size, label in CONTEXT_SIZES if self.longer_than[size]]
        if over:
            hint = "" if self.max_prompt_tokens is not None else "; --max-prompt-tokens N --over-limit drop|truncate caps them"
            out.append(f"prompt lengths: {', '.join(over)} tokens (a server with a shorter context rejects them{hint})")
        if self.truncated:
            out.append(f"truncated {self.truncated} prompts to {self.max_prompt_tokens} tokens (--max-prompt-tokens, --over-limit truncate)")
        return out
