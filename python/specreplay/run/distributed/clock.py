"""Each worker's clock against the driver's, measured NTP-style before the
start: several round trips, the tightest kept. With the driver reading its
clock at t0, the worker at w, the driver again at t1, the worker's clock is
`w - (t0 + t1) / 2` ahead of the driver's, to within half the round trip
(the uncertainty). Both are µs on each process's anchored engine clock
(`_core.now_us`), the clock every results timestamp is taken on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

#: Round trips per measurement: Ray's first calls are slow (connection
#: warm-up), the later ones give the tight bound.
ROUNDS = 8


@dataclass(frozen=True)
class ClockOffset:
    offset_us: int
    """The worker's clock minus the driver's: add it to a driver instant to get the worker's."""
    uncertainty_us: int
    """Half the round trip of the measurement kept: the offset is right to within this."""
    rtt_us: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def measure(now_us: Callable[[], int], remote_now_us: Callable[[], int], rounds: int = ROUNDS) -> ClockOffset:
    """The offset of the clock `remote_now_us` reads against `now_us`: the
    round trip with the smallest delay wins (its midpoint is the least
    disturbed by queueing on either side)."""
    best: ClockOffset | None = None
    for _ in range(rounds):
        t0 = now_us()
        remote = remote_now_us()
        t1 = now_us()
        rtt = t1 - t0
        sample = ClockOffset(offset_us=remote - (t0 + t1) // 2, uncertainty_us=(rtt + 1) // 2, rtt_us=rtt)
        if best is None or sample.rtt_us < best.rtt_us:
            best = sample
    assert best is not None, "rounds must be at least 1"
    return best
