"""Which worker sends which request of a sweep point. Pure functions: the
engine applies the share (`RunSpec.share`, rust/specreplay-core/src/engine/
spec.rs `Share`) to the full schedule it generates from the same seed, so
every request keeps its index in the point's schedule.

- open loop: slot i goes to worker i mod N (every worker sees the same load
  shape at 1/N of the rate, and the union is exactly the local schedule);
- closed loop: the concurrency is split N ways (as evenly as it goes) and
  the requests dealt out the same way;
- a trace with sessions: every request of a session goes to one worker
  (sessions dealt out in order of first appearance), so a conversation's
  turns are never sent from two machines.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specreplay._core import Share


def concurrency_shares(concurrency: int, workers: int) -> list[int]:
    """`concurrency` split over `workers`, the first ones taking one more."""
    base, extra = divmod(concurrency, workers)
    return [base + (1 if k < extra else 0) for k in range(workers)]


def session_owners(session_ids: Sequence[str | None], workers: int) -> list[int] | None:
    """Per request, the worker of its session; None when no request has a
    session (then slots are dealt out in turn). A request without a session
    is a session of its own."""
    if all(s is None for s in session_ids):
        return None
    order: dict[str, int] = {}
    owners: list[int] = []
    for i, session in enumerate(session_ids):
        key = session if session is not None else f"\0{i}"
        owners.append(order.setdefault(key, len(order)) % workers)
    return owners


def shares(workers: int, owners: list[int] | None) -> list[Share]:
    """The `RunSpec.share` of each worker."""
    return [{"worker": k, "workers": workers, "owners": owners} for k in range(workers)]


def owns(share: Share, index: int, templates: int) -> bool:
    """Whether `share` sends slot `index` of the schedule (the engine's rule,
    `Share::owns`, for the driver's accounting of a lost worker)."""
    owners = share.get("owners")
    if owners is not None:
        return owners[index % templates] == share["worker"]
    return index % share["workers"] == share["worker"]


def owned_indices(share: Share, limit: int, templates: int) -> list[int]:
    """The schedule slots below `limit` that `share` sends."""
    return [i for i in range(limit) if owns(share, i, templates)]


def first_owned(share: Share, count: int, templates: int) -> list[int]:
    """The first `count` schedule slots that `share` sends (a point without a
    request limit: the slots a worker had scheduled)."""
    out: list[int] = []
    index = 0
    # A share that owns no slot at all stops at the bound instead of looping.
    bound = (count + 1) * share["workers"] * templates
    while len(out) < count and index < bound:
        if owns(share, index, templates):
            out.append(index)
        index += 1
    return out
