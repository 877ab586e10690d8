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

Without the right to run real-time (no root, no CAP_SYS_NICE) it runs at the
normal policy and says so: its stalls then include ordinary scheduling.

    with MachineStalls() as canary:
        ...                       # the measurement
    canary.result()               # {"policy", "wakes", "worst_us", "stall_count", "stalled_ms", "stalls_ms"}
    canary.stalls                 # [[wall-clock µs, length µs], ...], for `attribute`
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
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
wakes, worst, stalls, done = 0, 0, [], False
def stop(*_):
    global done
    done = True
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
while not done:
    due = time.monotonic() + period
    wall_due = time.time() + period
    time.sleep(period)
    late = int((time.monotonic() - due) * 1e6)
    wakes += 1
    worst = max(worst, late)
    if late >= stall_us:
        stalls.append([int(wall_due * 1e6), late])
print(json.dumps({"policy": policy, "wakes": wakes, "worst_us": worst, "stalls": stalls}), flush=True)
"""


class MachineStalls:
    """The canary as a context manager: started on entry, stopped on exit."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._result: dict[str, Any] = {}

    def __enter__(self) -> MachineStalls:
        self._proc = subprocess.Popen([sys.executable, "-c", CANARY, str(STALL_US)], stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        self._proc.stdout.readline()  # "ready": its priority is set
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        self._proc.send_signal(signal.SIGTERM)
        out, _ = self._proc.communicate(timeout=10)
        self._result = json.loads(out.strip().splitlines()[-1])

    @property
    def stalls(self) -> list[list[int]]:
        """Each stall: [the wake-up it delayed, wall-clock µs; how late, µs] (`attribute`'s input)."""
        stalls: list[list[int]] = self._result.get("stalls", [])
        return stalls

    def result(self) -> dict[str, Any]:
        """The canary's record for a result file: its policy, wake-ups, worst, and each stall's length in ms."""
        lengths = [length for _, length in self.stalls]
        return {k: v for k, v in self._result.items() if k != "stalls"} | {
            "stall_count": len(lengths), "stalled_ms": sum(lengths) / 1e3, "stalls_ms": [length / 1e3 for length in lengths]}


def attribute(scheduled_us: np.ndarray, lag_us: np.ndarray, stalls: list[list[int]], late_us: float = 1000.0, recovery_us: float = 2000.0) -> dict[str, Any]:
    """Of the sends late by more than `late_us`, how many were due during a
    machine stall or within `recovery_us` after it (the backlog a stall
    leaves takes the client a moment to send)."""
    late = lag_us > late_us
    if not stalls or not late.any():
        return {"late": int(late.sum()), "late_in_stalls": 0}
    # A stall began at some moment of the canary's 1 ms sleep and ended when it woke.
    starts = np.array([s for s, _ in stalls], dtype=float) - 1000.0
    ends = starts + np.array([length for _, length in stalls], dtype=float) + recovery_us
    due = scheduled_us[late]
    k = np.searchsorted(starts, due, side="right") - 1
    inside = (k >= 0) & (due <= ends[np.clip(k, 0, None)])
    return {"late": int(late.sum()), "late_in_stalls": int(inside.sum())}
