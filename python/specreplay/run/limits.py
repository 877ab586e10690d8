"""Process limits a large run needs: every stream in flight holds a socket
(two when the embedded simulator serves it from the same process).

What is in flight depends on the load mode. A closed loop, or an open loop
capped by `max_concurrency`, has a known most; those needs are checked
exactly, and a hard limit below them is refused before the run starts. An
uncapped open loop has rate × latency in flight (Little's law), which no
request count tells: a 4,000/s point of short requests has a few dozen in
flight whatever its length. Such a point raises the soft limit to the hard
one and runs with an in-flight ceiling of what the limit holds (`in_flight`):
reaching it delays sends, which the send lag and `client_saturated` then
show, rather than failing connections for want of a descriptor.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

from specreplay.errors import ConfigError

#: Descriptors the process needs besides the streams (files, pipes, the runtime).
BASE_FILES = 256


@dataclass(frozen=True)
class InFlight:
    """How many requests a point may have in flight, as far as open files go."""

    #: The most the point can have (`peak_streams`), or the ceiling the limit imposes.
    streams: int
    #: Set when the ceiling is the open-file limit's, not the point's own: the
    #: engine is given it as the point's `max_concurrency`.
    ceiling: int | None = None


def _files(streams: int, embedded: bool) -> int:
    return BASE_FILES + streams * (2 if embedded else 1)


def _raise_soft(needed: int | None) -> int:
    """Raises the soft open-file limit to `needed` (None: to the hard limit),
    no higher than the hard one; returns the soft limit now (-1: unlimited)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return -1
    target = hard if needed is None else needed
    if hard != resource.RLIM_INFINITY:
        target = min(target, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return int(soft)


def ensure_open_files(streams: int, embedded: bool) -> None:
    """Raises the soft open-file limit as far as `streams` need (up to the
    hard limit); fails with a clear message when even the hard limit is too low."""
    needed = _files(streams, embedded)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise ConfigError(
            f"{streams} concurrent streams need about {needed} open files, but this system allows "
            f"{hard} (hard limit): raise it (ulimit -Hn, /etc/security/limits.conf) or lower the concurrency"
        )
    _raise_soft(needed)


def in_flight(mode: str, value: float, max_concurrency: int | None, requests: int | None, embedded: bool) -> InFlight:
    """Makes room for what the point can have in flight and says how much
    that is. A known most (closed loop, `max_concurrency`) must fit under the
    hard limit (else ConfigError, as `ensure_open_files`); an uncapped open
    loop takes the soft limit up to the hard one, and is given the ceiling
    that holds when its request count would not fit under it."""
    streams = peak_streams(mode, value, max_concurrency, requests)
    if mode == "concurrency" or max_concurrency is not None:
        ensure_open_files(streams, embedded)
        return InFlight(streams)
    soft = _raise_soft(None)
    if soft < 0 or soft >= _files(streams, embedded):
        return InFlight(streams)
    holds = (soft - BASE_FILES) // (2 if embedded else 1)
    if holds < 1:
        raise ConfigError(
            f"this system allows {soft} open files (hard limit), fewer than the {BASE_FILES + 2} the smallest run needs: "
            "raise it (ulimit -Hn, /etc/security/limits.conf)"
        )
    return InFlight(holds, ceiling=holds)


def ceiling_note(ceiling: int, rate_rps: float | None) -> str:
    """What an open-file ceiling means for an uncapped open-loop point."""
    note = (
        f"open loop without max_concurrency: this system's open-file limit holds {ceiling} requests in flight, "
        "so that is the point's ceiling"
    )
    if rate_rps:
        note += f" (at {rate_rps:g} req/s it binds once requests last {ceiling / rate_rps:.2g} s on average)"
    return note + "; reaching it delays sends, which the send lag shows. Raise `ulimit -Hn` for more."


def peak_streams(mode: str, value: float, max_concurrency: int | None, requests: int | None) -> int:
    """The most requests a point can have in flight (open loop without a cap:
    every request, at worst)."""
    if mode == "concurrency":
        return int(value)
    if max_concurrency is not None:
        return max_concurrency
    return requests or 1024
