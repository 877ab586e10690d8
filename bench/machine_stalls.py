"""A canary for the machine's own stalls, run beside a measurement: a
process at the highest real-time priority of anything in the bench
(SCHED_FIFO 3, above the engine's pacer at 2 and its workers at 1) that does
nothing but sleep 1 ms at a time and note how late it woke.

Nothing in user space can hold it back: it preempts the replay, the server
and every other tenant. What still delays it is the machine: a kernel path
that does not reach a preemption point (this VM's kernel is built
PREEMPT_NONE), interrupts and softirqs, or the hypervisor taking the vCPU
away. So a send late by a millisecond that was due while the canary was also
held back is the machine's, not the client's (`attribute`). Like
cyclictest, in miniature; a Python loop, so its own wake-ups carry ~50 µs of
interpreter, which is below what it is used to find (stalls ≥ 0.25 ms).

Each stall also says whose it was, as far as the guest can tell. The canary
reads its own run-queue wait (/proc/self/schedstat) around every sleep: a
stall the guest's scheduler saw (the canary woken on time but kept from the
CPU, by a kernel path that did not yield) shows as run-queue wait; one it did
not see (the timer itself fired late: the vCPU was not running) shows none.
Beside it, the steal time the hypervisor reports (/proc/stat) over the run.

Without the right to run real-time (no root, no CAP_SYS_NICE) it runs at the
normal policy and says so: its stalls then include ordinary scheduling.

Alone, with nothing else running, it measures the machine's own floor:

    .venv/bin/python bench/machine_stalls.py --seconds 60

    with MachineStalls() as canary:
        ...                       # the measurement
    canary.result()               # {"policy", "wakes", "worst_us", "stall_count", "stalled_ms", "stalls_ms", "queued_ms", "steal_ms"}
    canary.stalls                 # [[wall-clock µs, length µs, run-queue wait µs], ...], for `attribute`
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

#: A wake-up this late (µs) is a stall: well above the canary's own
#: interpreter jitter (60–100 µs on a quiet box here), at the send lag's
#: 200 µs target.
STALL_US = 250

CANARY = r"""
import json, os, signal, sys, time
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(3))
    policy = "SCHED_FIFO:3"
except OSError:
    policy = "normal"
stall_us, period = int(sys.argv[1]), 0.001
schedstat = open("/proc/self/schedstat", "rb", buffering=0)
def queued_ns():
    schedstat.seek(0)
    return int(schedstat.read().split()[1])
wakes, worst, stalls, done = 0, 0, [], False
def stop(*_):
    global done
    done = True
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
while not done:
    queued = queued_ns()
    due = time.monotonic() + period
    wall_due = time.time() + period
    time.sleep(period)
    late = int((time.monotonic() - due) * 1e6)
    wakes += 1
    worst = max(worst, late)
    if late >= stall_us:
        stalls.append([int(wall_due * 1e6), late, (queued_ns() - queued) // 1000])
print(json.dumps({"policy": policy, "wakes": wakes, "worst_us": worst, "stalls": stalls}), flush=True)
"""


def steal_ms() -> float:
    """The hypervisor's steal time so far (`specreplay.run.host.host_steal_ms`; NaN where none is reported)."""
    from specreplay.run.host import host_steal_ms

    got = host_steal_ms()
    return float("nan") if got is None else got


class MachineStalls:
    """The canary as a context manager: started on entry, stopped on exit."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._result: dict[str, Any] = {}
        self._steal_ms = 0.0

    def __enter__(self) -> MachineStalls:
        self._proc = subprocess.Popen([sys.executable, "-c", CANARY, str(STALL_US)], stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        self._proc.stdout.readline()  # "ready": its priority is set
        self._steal_ms = steal_ms()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        self._steal_ms = steal_ms() - self._steal_ms
        self._proc.send_signal(signal.SIGTERM)
        out, _ = self._proc.communicate(timeout=10)
        self._result = json.loads(out.strip().splitlines()[-1])

    @property
    def stalls(self) -> list[list[int]]:
        """Each stall: [the wake-up it delayed, wall-clock µs; how late, µs;
        of which the canary sat on the guest's run queue, µs] (`attribute`'s input)."""
        stalls: list[list[int]] = self._result.get("stalls", [])
        return stalls

    def result(self) -> dict[str, Any]:
        """The canary's record for a result file: its policy, wake-ups, worst,
        each stall's length in ms, how much of the stalls the guest's own
        scheduler saw (`queued_ms`: the rest happened where the guest could
        not see it), and the steal time the hypervisor reported meanwhile."""
        lengths = [stall[1] for stall in self.stalls]
        return {k: v for k, v in self._result.items() if k != "stalls"} | {
            "stall_count": len(lengths), "stalled_ms": sum(lengths) / 1e3, "stalls_ms": [length / 1e3 for length in lengths],
            "queued_ms": sum(stall[2] for stall in self.stalls if len(stall) > 2) / 1e3, "steal_ms": self._steal_ms}


def attribute(scheduled_us: np.ndarray, lag_us: np.ndarray, stalls: list[list[int]], late_us: float = 1000.0, recovery_us: float = 2000.0) -> dict[str, Any]:
    """Of the sends late by more than `late_us`, how many were due during a
    machine stall or within `recovery_us` after it (the backlog a stall
    leaves takes the client a moment to send)."""
    late = lag_us > late_us
    if not stalls or not late.any():
        return {"late": int(late.sum()), "late_in_stalls": 0}
    # A stall began at some moment of the canary's 1 ms sleep and ended when it woke.
    starts = np.array([stall[0] for stall in stalls], dtype=float) - 1000.0
    ends = starts + np.array([stall[1] for stall in stalls], dtype=float) + recovery_us
    due = scheduled_us[late]
    k = np.searchsorted(starts, due, side="right") - 1
    inside = (k >= 0) & (due <= ends[np.clip(k, 0, None)])
    return {"late": int(late.sum()), "late_in_stalls": int(inside.sum())}


def main() -> None:
    """The canary alone: the machine's stalls with nothing of the bench running."""
    from bench_util import write_result

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--repeats", type=int, default=1)
    opts = parser.parse_args()
    runs = []
    for _ in range(opts.repeats):
        with MachineStalls() as canary:
            time.sleep(opts.seconds)
        record = canary.result()
        runs.append(record)
        worst = sorted(record["stalls_ms"], reverse=True)[:5]
        print(f"{opts.seconds:g} s, {record['policy']}: {record['stall_count']} stalls >= {STALL_US} us "
              f"({record['stall_count'] / opts.seconds:.1f}/s), {record['stalled_ms']:.1f} ms in all, worst {record['worst_us'] / 1e3:.2f} ms "
              f"(the five worst: {', '.join(f'{w:.2f}' for w in worst)} ms); the guest's run queue saw {record['queued_ms']:.1f} ms of them; "
              f"steal reported {record['steal_ms']:.0f} ms", flush=True)
    path = write_result("machine-stalls", {"seconds": opts.seconds, "stall_us": STALL_US, "runs": runs})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
