"""What finding sessions costs `specreplay capture`'s recorder
(`specreplay.trace.conversations.ConversationFinder`): CPU per request and memory
per remembered request, for chat conversations of a given length. The
recorder runs on its own thread, off the forwarding path, so this is the
rate it keeps up with, not a delay any client sees.

    .venv/bin/python bench/conversation_finder.py [--sessions 2000] [--turns 8] [--words 300]

Each session is a user's chat: turn k sends the k previous questions and
answers plus a new question of `--words` words (answers as long); the
sessions are interleaved turn by turn, as concurrent users would be. Prints
µs per request (admit + finish), per message hashed, and the bytes a
remembered request holds (tracemalloc, after a full collection).
"""

from __future__ import annotations

import argparse
import gc
import random
import time
import tracemalloc

from specreplay.trace.conversations import ConversationFinder

from bench_util import write_result


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(("the", "cache", "token", "model", "prefix", "batch", "server", "answer")) for _ in range(n))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--words", type=int, default=300)
    args = parser.parse_args()
    rng = random.Random(0)
    questions = [[words(rng, args.words) for _ in range(args.turns)] for _ in range(args.sessions)]
    answers = [[words(rng, args.words) for _ in range(args.turns)] for _ in range(args.sessions)]

    finder = ConversationFinder()
    histories: list[list[dict[str, str]]] = [[] for _ in range(args.sessions)]
    seq = 0
    elapsed = 0.0
    messages = 0
    found = 0
    for turn in range(args.turns):
        for s in range(args.sessions):
            history = histories[s]
            history.append({"role": "user", "content": questions[s][turn]})
            body = {"model": "m", "messages": list(history)}
            seq += 1
            start = time.perf_counter()
            session = finder.admit(seq, "chat", body, None, f"c{seq}")
            finder.finish(seq, True, answers[s][turn])
            elapsed += time.perf_counter() - start
            messages += len(history)
            found += session != f"c{seq}"
            history.append({"role": "assistant", "content": answers[s][turn]})
    assert found == args.sessions * (args.turns - 1), found  # every later turn found its session

    del histories, questions, answers
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = ConversationFinder()
    for n in range(1, 20_001):
        kept.admit(n, "chat", {"messages": [{"role": "user", "content": f"q{n}"}]}, None, f"c{n}")
        kept.finish(n, True, f"a{n}")
    gc.collect()
    per_request = (tracemalloc.get_traced_memory()[0] - before) / 20_000
    tracemalloc.stop()

    print(f"{seq} requests ({args.sessions} sessions × {args.turns} turns, {args.words}-word messages): "
          f"{elapsed / seq * 1e6:.0f} µs per request, {elapsed / messages * 1e6:.1f} µs per message hashed")
    print(f"memory: {per_request:.0f} bytes per remembered request (both keys); "
          f"the bound, {ConversationFinder().max_keys} keys per table, is about {per_request * ConversationFinder().max_keys / 2**20:.0f} MiB")
    path = write_result("conversation-finder", {"requests": seq, "sessions": args.sessions, "turns": args.turns, "words": args.words,
                                                "us_per_request": elapsed / seq * 1e6, "us_per_message": elapsed / messages * 1e6,
                                                "bytes_per_remembered_request": per_request})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
