"""The repeat of a held-out run (`realservers.predict_loop.reworded`): the
bench measures each held-out part a second time on its trace reworded, and
publishes that run's error against the first as the server's own. The
second trace must be the same work (word counts, arrivals, output lengths)
and must not hit the prompt cache the first run left behind."""

from __future__ import annotations

import json
from pathlib import Path

from realservers.predict_loop import reworded, trace


def test_a_reworded_trace_is_the_same_work_in_other_words(tmp_path: Path) -> None:
    first = trace(tmp_path, "first", 12, "uniform:100:300", 32, seed=7)
    again = reworded(first, tmp_path / "again.jsonl", seed=70)
    a = [json.loads(line) for line in Path(first).read_text().splitlines()]
    b = [json.loads(line) for line in Path(again).read_text().splitlines()]
    assert len(a) == len(b) == 12
    for x, y in zip(a, b):
        assert (x["id"], x["arrival"], x["body"]["max_tokens"]) == (y["id"], y["arrival"], y["body"]["max_tokens"])
        words_x = x["body"]["messages"][-1]["content"].split()
        words_y = y["body"]["messages"][-1]["content"].split()
        assert len(words_x) == len(words_y)
        # No shared opening: a prefix cache keyed on the prompt finds nothing of the first run's.
        assert words_x[:8] != words_y[:8]
    contents = {m["content"] for r in b for m in r["body"]["messages"]}
    assert not contents & {m["content"] for r in a for m in r["body"]["messages"]}
