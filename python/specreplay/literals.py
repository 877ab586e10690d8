"""The engine's small vocabularies, shared by the settings and the binding's
stubs (`_core.pyi`): a leaf, so that neither has to import the other."""

from __future__ import annotations

from typing import Literal, get_args

#: Arrival processes of the open loop (the engine's `Arrival`).
Arrival = Literal["poisson", "constant", "gamma"]
ARRIVALS: tuple[Arrival, ...] = get_args(Arrival)
#: How a session's turns are sent (the engine's `SessionMode`;
#: docs/trace-format.md, "Sessions").
SessionMode = Literal["dependent", "independent"]
SESSION_MODES: tuple[SessionMode, ...] = get_args(SessionMode)
