"""`specreplay capture` finds sessions (issue 16), through the real capture
proxy in front of the simulator: users chat turn after turn (some at once,
two of them asking the very same first question), one edits the answers it
sends back, one names its session in a header, one retries a failed turn;
the trace gives each conversation one `session_id`, and its recorded times
give replay the think times the users took."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from specreplay._core import SimServer
from specreplay.trace.capture import BackgroundCapture
from specreplay.trace.conversations import ConversationFinder
from specreplay.errors import ConfigError
from specreplay.trace.records import TraceRecord, load_trace

from session_walk import think_times

SIM: dict[str, Any] = {"ttft_ms": 5, "prefill_us_per_token": 0, "tpot_ms": 1, "reasoning_tokens": [3, 6],
                       "content_tokens": [5, 12], "seed": 3}
THINK_S = 0.15
SYSTEM = {"role": "system", "content": "You are terse."}


def answer_of(payload: bytes) -> str:
    """The content text of a chat stream (what a chat client keeps)."""
    text = []
    for line in payload.decode().splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:]).get("choices", []):
                text.append(choice.get("delta", {}).get("content") or "")
    return "".join(text)


async def chat(s: aiohttp.ClientSession, base: str, messages: list[dict[str, str]], headers: dict[str, str] | None = None) -> tuple[int, str]:
    body = {"model": "m", "stream": True, "messages": messages}
    async with s.post(base + "/v1/chat/completions", json=body, headers=headers or {}) as r:
        return r.status, answer_of(await r.read())


async def user(s: aiohttp.ClientSession, base: str, questions: list[str], *, edit: bool = False,
               header: str | None = None, fail_turn: int | None = None) -> None:
    """One user's conversation: each question sent with the conversation so
    far, THINK_S after the answer before it arrived."""
    history = [SYSTEM]
    for k, question in enumerate(questions):
        if k:
            await asyncio.sleep(THINK_S)
        history.append({"role": "user", "content": question})
        headers = {"x-session-id": header} if header else {}
        if k == fail_turn:
            status, _ = await chat(s, base, history, dict(headers, **{"x-specreplay-fault": "http_500"}))
            assert status == 500
            await asyncio.sleep(THINK_S)  # then the client retries the same turn
        status, answer = await chat(s, base, history, headers)
        assert status == 200 and answer
        history.append({"role": "assistant", "content": f"(edited) {answer.upper()}" if edit else answer})
        if header:  # a stateless agent: each call its own prompt, tied by the header
            history = [SYSTEM]


async def users(base: str) -> None:
    async with aiohttp.ClientSession() as s:
        await asyncio.gather(
            user(s, base, ["What is 2+2?", "And 3+3?", "And 4+4?"]),                       # a
            user(s, base, ["What is 2+2?", "Now in French?", "Spell it."]),                 # b: same first turn
            user(s, base, ["Name a prime.", "A larger one?", "Is 91 one?"], edit=True),     # c: edits the answers
            user(s, base, ["Plan step 1", "Plan step 2", "Plan step 3"], header="agent-7"),  # d: a header
            user(s, base, ["Tell a joke.", "Another.", "Explain it."], fail_turn=1),        # e: a retried turn
        )
        async with s.post(base + "/v1/completions", json={"model": "m", "prompt": "Once upon"}) as r:
            assert r.status == 200


def origin(url: str) -> str:
    return url.rsplit("/v1", 1)[0]


def sessions_of(recs: list[TraceRecord]) -> dict[str | None, list[TraceRecord]]:
    out: dict[str | None, list[TraceRecord]] = {}
    for r in recs:
        out.setdefault(r.session_id, []).append(r)
    return out


def questions(turns: list[TraceRecord]) -> list[str]:
    return [t.body["messages"][-1]["content"] for t in turns]


@pytest.mark.parametrize("redact", [False, True])
def test_capture_gives_each_conversation_one_session_and_its_think_times(tmp_path: Path, redact: bool) -> None:
    trace_path = tmp_path / "trace.jsonl"
    with SimServer(config=SIM) as sim, BackgroundCapture(sim.url, trace_path, redact=redact) as cap:
        asyncio.run(users(origin(cap.url)))
    assert cap.stats is not None and cap.stats.recorded == 17
    # Found by the answer, but c's edited answers only by the messages (and d's by its header).
    assert (cap.stats.by_answer, cap.stats.by_messages) == (7, 2)
    assert (cap.stats.sessions, cap.stats.later_turns) == (5, 11) and "in 5 sessions (11 later turns)" in cap.stats.summary()
    recs = load_trace(trace_path).records
    by_session = sessions_of(recs)
    assert [r.api for r in by_session.pop(None)] == ["completions"]  # not a conversation, no header
    assert len(by_session) == 5 and "agent-7" in by_session
    if not redact:
        # Each conversation in its own session, its turns in order. a and b
        # asked the same first question and got the same answer: either pairing
        # of their first turns with their second ones is the same conversation.
        got = sorted(questions(turns)[1:] for turns in by_session.values())
        assert got == sorted([["And 3+3?", "And 4+4?"], ["Now in French?", "Spell it."], ["A larger one?", "Is 91 one?"],
                              ["Plan step 2", "Plan step 3"], ["Another.", "Another.", "Explain it."]])
        assert all(questions(turns)[0] in ("What is 2+2?", "Name a prime.", "Plan step 1", "Tell a joke.")
                   for turns in by_session.values())
    for sid, turns in by_session.items():
        assert len(turns) == (4 if any(t.response and t.response["status"] == 500 for t in turns) else 3)
        if sid == "agent-7":
            continue
        assert sid == f"c{turns[0].id}"  # named after its first request
        for before, after in zip(turns, turns[1:]):
            # A later turn is the turn before's messages, an answer, a new question
            # (or, for the retry, the failed turn's messages again).
            n = len(before.body["messages"])
            assert after.body["messages"][:n] == before.body["messages"]
            assert len(after.body["messages"]) in (n, n + 2)
    # What replay computes from the capture: each later turn's think time is
    # the pause the user took after the answer (and a bit of client time).
    got, times = think_times(recs)
    thinks = [t / 1e6 for t in got if t is not None]
    assert len(thinks) == 11 and times.sources.measured == 11 and not times.sources.notes()
    assert all(THINK_S - 0.005 <= t < THINK_S + 1.0 for t in thinks), thinks


def test_a_custom_session_header_and_a_secret_one(tmp_path: Path) -> None:
    async def two_calls(base: str) -> None:
        async with aiohttp.ClientSession() as s:
            for prompt in ("one", "two"):
                assert (await chat(s, base, [{"role": "user", "content": prompt}], {"X-Conversation": "conv-1"}))[0] == 200

    trace_path = tmp_path / "trace.jsonl"
    with SimServer(config=SIM) as sim, BackgroundCapture(sim.url, trace_path, session_header="x-conversation") as cap:
        asyncio.run(two_calls(origin(cap.url)))
    assert [r.session_id for r in load_trace(trace_path).records] == ["conv-1", "conv-1"]
    with SimServer(config=SIM) as sim, BackgroundCapture(sim.url, trace_path) as cap:
        asyncio.run(two_calls(origin(cap.url)))  # x-conversation means nothing by default
    assert [r.session_id for r in load_trace(trace_path).records] == ["c1", "c2"]
    with pytest.raises(ConfigError, match="session_header.*carries a secret"):
        with SimServer(config=SIM) as sim, BackgroundCapture(sim.url, trace_path, session_header="Authorization"):
            pass


def test_the_finder_pairs_identical_turns_oldest_first_and_forgets_the_oldest() -> None:
    finder = ConversationFinder(max_keys=2)
    ask = [{"role": "user", "content": "hi"}]
    assert finder.admit(1, "chat", {"messages": ask}, None, "s1") == "s1"
    assert finder.admit(2, "chat", {"messages": ask}, None, "s2") == "s2"
    finder.finish(1, True, "hello")
    finder.finish(2, True, " hello\n")  # the same answer, as a client would trim it
    more = ask + [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "how?"}]
    assert [finder.admit(n, "chat", {"messages": more}, None, f"s{n}") for n in (3, 4, 5)] == ["s1", "s2", "s2"]
    assert (finder.by_answer, finder.by_messages) == (3, 0)
    # Tool calls are part of the answer; Anthropic's system frames the conversation.
    tool_answer = {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": '{"a":1}'}}]}
    finder.admit(6, "chat", {"messages": ask}, None, "t")
    finder.finish(6, True, '{"a":1}')
    assert finder.admit(7, "chat", {"messages": ask + [tool_answer, {"role": "tool", "content": "1"}]}, None, "u") == "t"
    finder.admit(8, "anthropic", {"system": "A", "messages": ask}, None, "x")
    finder.finish(8, True, "yo")
    after = ask + [{"role": "assistant", "content": [{"type": "text", "text": "yo"}]}, {"role": "user", "content": "?"}]
    assert finder.admit(9, "anthropic", {"system": "B", "messages": after}, None, "y") == "y"
    assert finder.admit(10, "anthropic", {"system": "A", "messages": after}, None, "z") == "x"
    # Only the two newest keys of each kind are kept: "hi" → "hello" was forgotten.
    assert finder.admit(11, "chat", {"messages": more}, None, "new") == "new"
    # A failed request leaves nothing to continue.
    finder.admit(12, "chat", {"messages": [{"role": "user", "content": "x"}]}, None, "f")
    finder.finish(12, False, None)
    cont = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "?"}, {"role": "user", "content": "y"}]
    assert finder.admit(13, "chat", {"messages": cont}, None, "g") == "g"
