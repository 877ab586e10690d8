"""What the machine under the client did to it: the CPU time a hypervisor
took from this VM while a point ran. Read before and after each point, off
the measurement path (two reads of /proc/stat)."""

from __future__ import annotations

import os
from pathlib import Path


def host_steal_ms() -> float | None:
    """The CPU time the hypervisor has taken from this machine's vCPUs so
    far, every vCPU summed (/proc/stat's steal field, in clock ticks); None
    where there is no such field. On a VM whose host is busy, a process can
    lose milliseconds at a time without its kernel seeing it
    (docs/benchmarks.md, "The machine's stalls")."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    return int(fields[8]) * 1000 / os.sysconf("SC_CLK_TCK") if len(fields) > 8 and fields[0] == "cpu" else None


def stolen_ms(at_start: float | None) -> float | None:
    """The steal time since `at_start` (`host_steal_ms`)."""
    now = host_steal_ms()
    return None if now is None or at_start is None else now - at_start
