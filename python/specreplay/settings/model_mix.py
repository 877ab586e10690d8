"""The `model_mix` setting (`--model-mix 'base:0.7,lora-a:0.3'`) parsed;
`trace.models` draws each request's model from it."""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=8)
def parse_mix(text: str) -> tuple[tuple[str, float], ...]:
    """`'base:0.7,lora-a:0.2,lora-b:0.1'` → ((name, share), …), the shares
    normalized to sum to 1. Raises ValueError naming the bad entry."""
    out: list[tuple[str, float]] = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, sep, weight = entry.rpartition(":")
        if not sep or not name:
            raise ValueError(f"model mix entry {entry!r}: expected NAME:WEIGHT")
        try:
            w = float(weight)
        except ValueError:
            raise ValueError(f"model mix entry {entry!r}: weight {weight!r} is not a number") from None
        if not w > 0 or w != w or w == float("inf"):
            raise ValueError(f"model mix entry {entry!r}: weight must be a positive number")
        if any(n == name for n, _ in out):
            raise ValueError(f"model mix entry {entry!r}: {name!r} is given twice")
        out.append((name, w))
    if not out:
        raise ValueError("model mix is empty: expected NAME:WEIGHT[,NAME:WEIGHT…]")
    total = sum(w for _, w in out)
    return tuple((n, w / total) for n, w in out)
