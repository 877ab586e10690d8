"""Process limits a large run needs: every stream holds a socket (two when the
embedded simulator serves it from the same process)."""

from __future__ import annotations

import resource

from specreplay.errors import ConfigError

#: Descriptors the process needs besides the streams (files, pipes, the runtime).
BASE_FILES = 256


def ensure_open_files(streams: int, embedded: bool) -> None:
    """Raises the soft open-file limit as far as needed (up to the hard
    limit); fails with a clear message when even the hard limit is too low."""
    needed = BASE_FILES + streams * (2 if embedded else 1)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise ConfigError(
            f"{streams} concurrent streams need about {needed} open files, but this system allows "
            f"{hard} (hard limit): raise it (ulimit -Hn, /etc/security/limits.conf) or lower the concurrency"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed if hard == resource.RLIM_INFINITY else min(max(needed, soft), hard), hard))


def peak_streams(mode: str, value: float, max_concurrency: int | None, requests: int | None) -> int:
    """The most requests a point can have in flight (open loop without a cap:
    every request, at worst)."""
    if mode == "concurrency":
        return int(value)
    if max_concurrency is not None:
        return max_concurrency
    return requests or 1024
