"""Which worker sends which request of a sweep point. Every worker reads the
whole trace, in the same order, and feeds all of it to its engine; the
engine's feed computes the full schedule from the same seed (every request
keeps its index and due time in the point) and keeps only the units this
worker owns (`RunSpec.share`, rust/specreplay-core/src/engine/share.rs
`Dealer`):

- open loop: units are dealt out in turn (every worker sees every Nth
  arrival: the same load shape at 1/N of the rate, and the union is exactly
  the local schedule);
- closed loop: the concurrency is split N ways (as evenly as it goes), and
  the requests dealt out the same way;
- a trace with sessions: every request of a session goes to the worker its
  session was first dealt to, so a conversation's turns are never sent from
  two machines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specreplay._core import Share


def concurrency_shares(concurrency: int, workers: int) -> list[int]:
    """`concurrency` split over `workers`, the first ones taking one more."""
    base, extra = divmod(concurrency, workers)
    return [base + (1 if k < extra else 0) for k in range(workers)]


def shares(workers: int) -> list[Share]:
    """The `RunSpec.share` of each worker."""
    return [{"worker": k, "workers": workers} for k in range(workers)]


class Dealer:
    """The engine's rule (`share::Dealer`), for the driver's accounting of a
    lost worker: units in feed order, each dealt to the next worker in turn,
    but a unit of a session already dealt goes to that session's worker."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.sessions: dict[str, int] = {}
        self.dealt = 0

    def deal(self, session: str | None) -> int:
        """The worker of the next unit, whose first request is of `session`."""
        if session is not None and session in self.sessions:
            return self.sessions[session]
        worker = self.dealt % self.workers
        self.dealt += 1
        if session is not None:
            self.sessions[session] = worker
        return worker
