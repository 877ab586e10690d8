"""Block ids for prompts whose source gives none (Azure, BurstGPT): fresh
ids for a prompt that shares nothing, and, for a conversation (BurstGPT's
`Session ID`), one growing list of ids per session so that a later turn's
prompt extends the earlier turn's prompt and answer, as the conversation's
history did, and a server's prefix cache sees what the original one saw.

A turn's prompt is the first `tokens` tokens of its session's blocks. When a
turn's prompt is shorter than the turn before (the client dropped old
history to fit its context, so the prefix changed), the session starts a new
list of blocks: nothing is shared with what came before.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

#: Sessions kept at once; the one idle longest is forgotten first (a later
#: turn of it then starts a new history), so memory is bounded.
MAX_SESSIONS = 1 << 20


@dataclass
class _History:
    ids: list[int] = field(default_factory=list)
    tokens: int = 0


class BlockIds:
    """Hands out block ids for prompts without source hash ids."""

    def __init__(self, block_size: int, max_sessions: int = MAX_SESSIONS) -> None:
        self.block_size = block_size
        self._next = 0
        self._sessions: OrderedDict[str, _History] = OrderedDict()
        self._max_sessions = max_sessions
        #: Turns whose prompt extended an earlier turn of their session.
        self.continued = 0
        #: Turns that started their session's history over (shorter prompt).
        self.restarted = 0

    def fresh(self, tokens: int) -> list[int]:
        """Ids of a prompt of `tokens` tokens that shares nothing."""
        return self._new(self._blocks(tokens))

    def turn(self, session: str, tokens: int) -> list[int]:
        """Ids of one turn of `session`, a prompt of `tokens` tokens."""
        history = self._sessions.pop(session, None)
        if history is None or tokens < history.tokens:
            if history is not None:
                self.restarted += 1
            history = _History()
        else:
            self.continued += 1
        need = self._blocks(tokens)
        if len(history.ids) < need:
            history.ids += self._new(need - len(history.ids))
        history.tokens = tokens
        self._sessions[session] = history
        if len(self._sessions) > self._max_sessions:
            self._sessions.popitem(last=False)
        return history.ids[:need]

    def _blocks(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def _new(self, n: int) -> list[int]:
        ids = list(range(self._next, self._next + n))
        self._next += n
        return ids
