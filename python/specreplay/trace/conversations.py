"""Which conversation a captured request continues (`specreplay capture`
finds sessions; docs/sessions.md, "Capture").

A chat request continues an earlier one when its messages are that
request's messages, then that request's answer (as the assistant message),
then what came after. So each request that got an answer leaves a key: a
hash of its messages followed by its answer, and a later request whose
messages start with the same thing is its next turn. Where the client
changed the answer before sending it back (trimmed, reformatted tool calls),
the earlier request's messages followed by *any* assistant message still
match, as a weaker second choice. The longest match wins; a request that
matches nothing starts a session of its own. A session header sent by the
client (`x-session-id` by default) wins over all of this.

Several earlier requests can leave the same key (two users asking the same
question of a deterministic server): each is continued once, oldest first.
When all have been, a request that matches by the answer continues the
latest again (a retry of a failed turn, or a regenerated answer, stays in
its conversation); a weaker match does not.

Only hashes are kept, never text: messages and answers go through a chain
of SHA-256 digests (one per message, each covering everything before it),
so every prefix of a request's messages has its digest in one pass.
Memory is bounded: the oldest keys are forgotten first.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

#: APIs whose requests carry a conversation as `messages`.
CONVERSATION_APIS = frozenset({"chat", "anthropic"})
#: Keys kept at once (per kind); the oldest are forgotten first. About 560
#: bytes a remembered request (bench/conversation_finder.py): at most about
#: 140 MiB, and a conversation continues if fewer than 262,144 requests
#: ended since its last turn (44 minutes at 100 requests/s).
MAX_KEYS = 1 << 18


@dataclass(slots=True)
class _Turn:
    session: str
    continued: bool = False


@dataclass
class _Asked:
    """What the finder keeps of a request until it ends."""

    session: str | None
    #: Digest of the request's messages (None: not a conversation).
    digest: bytes | None


class ConversationFinder:
    """`admit` each request as it arrives (its session id), `finish` it when
    its response has ended."""

    def __init__(self, max_keys: int = MAX_KEYS) -> None:
        self.max_keys = max_keys
        #: digest(messages + answer) → the requests that got that answer.
        self._answered: OrderedDict[bytes, list[_Turn]] = OrderedDict()
        #: digest(messages) → the requests that asked it and got an answer.
        self._asked: OrderedDict[bytes, list[_Turn]] = OrderedDict()
        self._pending: dict[int, _Asked] = {}
        #: Requests found to continue an earlier one, by each way.
        self.by_header = 0
        self.by_answer = 0
        self.by_messages = 0

    def admit(self, seq: int, api: str, body: dict[str, Any], header: str | None, new_id: str) -> str | None:
        """The session of a request that has just arrived: `header` (the
        session header's value) when given, else the conversation it
        continues, else `new_id` (a conversation of its own); None for a
        request that is not a conversation and has no header."""
        chain = _chain(api, body) if api in CONVERSATION_APIS else None
        session: str | None = header
        if header is not None:
            self.by_header += 1
        elif chain is not None:
            session = self._continued(body["messages"], chain) or new_id
        self._pending[seq] = _Asked(session, chain[-1] if chain else None)
        return session

    def finish(self, seq: int, answered: bool, answer: str | None) -> None:
        """Its response has ended: `answered` when it succeeded, with the
        answer's text when the response could be decoded."""
        asked = self._pending.pop(seq, None)
        if asked is None or asked.session is None or asked.digest is None or not answered:
            return
        turn = _Turn(asked.session)  # one turn in both tables: continued once, by either way
        self._remember(self._asked, asked.digest, turn)
        if answer is not None:
            self._remember(self._answered, _step(asked.digest, _assistant(answer)), turn)

    def _continued(self, messages: list[Any], chain: list[bytes]) -> str | None:
        # chain[k] covers messages[:k]; a continuation ends its match on an
        # assistant message (the earlier request's answer).
        for k in range(len(messages), 0, -1):
            if _role(messages[k - 1]) != "assistant":
                continue
            session = _take(self._answered.get(chain[k]), again=True)
            if session is not None:
                self.by_answer += 1
                return session
            session = _take(self._asked.get(chain[k - 1]), again=False)
            if session is not None:
                self.by_messages += 1
                return session
        return None

    def _remember(self, table: OrderedDict[bytes, list[_Turn]], key: bytes, turn: _Turn) -> None:
        table.setdefault(key, []).append(turn)
        table.move_to_end(key)
        while len(table) > self.max_keys:
            table.popitem(last=False)


def _take(turns: list[_Turn] | None, again: bool) -> str | None:
    """The session of the oldest turn not yet continued, else (`again`) of
    the latest."""
    if not turns:
        return None
    turn = next((t for t in turns if not t.continued), turns[-1] if again else None)
    if turn is None:
        return None
    turn.continued = True
    return turn.session


def _role(message: Any) -> str | None:
    return message.get("role") if isinstance(message, dict) else None


def _chain(api: str, body: dict[str, Any]) -> list[bytes] | None:
    """Digests of every prefix of the request's messages: [k] covers the
    first k (and what else frames them: the API, Anthropic's `system`)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    head = hashlib.sha256(api.encode() + b"\0" + _json(body.get("system") if api == "anthropic" else None)).digest()
    chain = [head]
    for message in messages:
        canon = _assistant(_answer_of(message)) if _role(message) == "assistant" else b"M" + _json(message)
        chain.append(_step(chain[-1], canon))
    return chain


def _step(digest: bytes, canon: bytes) -> bytes:
    return hashlib.sha256(digest + canon).digest()


def _assistant(answer: str) -> bytes:
    # Clients commonly trim what they keep of an answer.
    return b"A" + answer.strip().encode()


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def _answer_of(message: dict[str, Any]) -> str:
    """An assistant message's answer as the server streamed it: its text,
    then its tool calls' arguments (OpenAI `tool_calls`, Anthropic
    `tool_use` blocks)."""
    content = message.get("content")
    text: list[str] = []
    tools: list[str] = []
    if isinstance(content, str):
        text.append(content)
    elif isinstance(content, list):
        for part in content:
            if not isinstance(part, dict):
                continue
            if isinstance(part.get("text"), str):
                text.append(part["text"])
            elif part.get("type") == "tool_use":
                tools.append(json.dumps(part.get("input"), separators=(",", ":")))
    for call in message.get("tool_calls") or []:
        arguments = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
        if isinstance(arguments, str):
            tools.append(arguments)
    return "".join(text) + "".join(tools)
