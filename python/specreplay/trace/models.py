"""Which model each request asks for: `--model` for all, `--model-mix` drawn
per request (LoRA adapters behind one server), or the trace record's own
`body.model` when neither is given.

The draw is seeded (`--seed`) and keyed by the request's session (or its id
without one), so a replay draws the same model for the same request every
time, a session's turns all ask for one model (an adapter per user), and
loops over the trace draw the same again.
"""

from __future__ import annotations

import hashlib
from specreplay.settings.config import ReplayConfig
from specreplay.settings.model_mix import parse_mix
from specreplay.trace.records import TraceRecord


def draw(mix: tuple[tuple[str, float], ...], seed: int, key: str) -> str:
    """The model of the request keyed `key` under `mix` (deterministic)."""
    digest = hashlib.sha256(f"{seed}\x00{key}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / float(1 << 64)
    acc = 0.0
    for name, share in mix:
        acc += share
        if u < acc:
            return name
    return mix[-1][0]


def model_for(record: TraceRecord, config: ReplayConfig, model: str | None) -> str | None:
    """The model to put in `record`'s body (None: leave the body's).
    `model` is `--model`, else the server's default: the default fills in
    only a body that names no model, so a trace's own models stay."""
    if config.model_mix:
        return draw(parse_mix(config.model_mix), config.seed, record.session_id if record.session_id is not None else record.id)
    if config.model is None and "model" in record.body:
        return None
    return model
