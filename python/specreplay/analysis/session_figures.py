"""The figures of a point's sessions, from the result columns of issue 16
(`session_id`, `turn_index`, `predecessor_end_us`, `think_time_us`,
`session_turns`; docs/results.md, "Sessions"). Only sessions replayed as
sessions count: rows with a `session_turns` (`--sessions dependent`); with
`--sessions independent` a session id is a label, and a point has none.

Per session (`per_session`): its turns (rows: sent, failed or skipped),
how many succeeded, how many were skipped because an earlier turn failed
(`error_kind` = `skipped_after_failure`), its start (first `sent_us`), its
end (last `end_us`). A session is **completed** when it has all its turns
(`session_turns` of them) and every one succeeded;
its **duration** is end − start, for completed sessions only (a session cut
short by a failure would look fast).

Per point (`summary_of`): sessions, sessions completed, turns per session
(mean), session duration p50 and p90 (s), turns skipped, and the send lag
of dependent turns (`sent_us − scheduled_us` of the rows with a
`predecessor_end_us`: the engine schedules them at the predecessor's end
plus the think time). TTFT by turn index (`ttft_by_turn`): per turn index,
the successful requests and their TTFT p50 and p90 (ms): prefix caching
shows as later turns starting faster than their longer prompts would.

Percentiles as everywhere (`quantiles.describe`). A point without sessions
has 0 sessions and NaN figures.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from specreplay.results import derived
from specreplay.analysis.quantiles import describe

SKIPPED = "skipped_after_failure"
_PER_SESSION = ("turns", "ok", "skipped", "session_turns", "start_us", "end_us", "completed", "duration_s")
_BY_TURN = ("requests", "ttft_p50_ms", "ttft_p90_ms")

#: Summary keys this module adds to a point's summary row, in order.
SUMMARY_KEYS: tuple[str, ...] = (
    "sessions",
    "sessions_completed",
    "turns_per_session",
    "session_duration_p50_s",
    "session_duration_p90_s",
    "skipped",
    "turn_lag_p99_ms",
)


def in_session(rows: pd.DataFrame) -> np.ndarray:
    """Per row: a turn of a session replayed as a session (it has a `session_turns`)."""
    if "session_turns" not in rows.columns:
        return np.zeros(len(rows), dtype=bool)
    return rows["session_turns"].notna().to_numpy(dtype=bool)


def has_sessions(rows: pd.DataFrame) -> bool:
    return bool(in_session(rows).any())


def skipped_mask(rows: pd.DataFrame) -> np.ndarray:
    """Per row: a turn not sent because an earlier turn of its session failed."""
    return (rows["error_kind"] == SKIPPED).to_numpy(dtype=bool)


def per_session(rows: pd.DataFrame, ok: np.ndarray) -> pd.DataFrame:
    """One row per session of `rows` (one point's), indexed by session id:
    turns, ok, skipped, session_turns, start_us,
    end_us, completed, duration_s (NaN unless completed)."""
    if not has_sessions(rows):
        empty: pd.DataFrame = pd.DataFrame(columns=list(_PER_SESSION))
        return empty
    frame = pd.DataFrame(
        {
            "session_id": rows["session_id"].to_numpy(),
            "ok": ok,
            "skipped": skipped_mask(rows),
            "session_turns": derived.as_float(rows, "session_turns").to_numpy(),
            "sent_us": derived.as_float(rows, "sent_us").to_numpy(),
            "end_us": derived.as_float(rows, "end_us").to_numpy(),
        }
    )[in_session(rows)]
    grouped = frame.groupby("session_id", sort=False)
    out = pd.DataFrame(
        {
            "turns": grouped.size(),
            "ok": grouped["ok"].sum(),
            "skipped": grouped["skipped"].sum(),
            "session_turns": grouped["session_turns"].max(),
            "start_us": grouped["sent_us"].min(),
            "end_us": grouped["end_us"].max(),
        }
    )
    out["completed"] = (out["ok"] == out["turns"]) & (out["turns"] >= out["session_turns"])
    out["duration_s"] = ((out["end_us"] - out["start_us"]) / 1e6).where(out["completed"])
    sessions: pd.DataFrame = out
    return sessions


def summary_of(rows: pd.DataFrame, sessions: pd.DataFrame) -> dict[str, Any]:
    """The point's session figures (`SUMMARY_KEYS`) from its rows and
    their `per_session` frame."""
    durations = describe(sessions["duration_s"])
    # Only the two columns read: a filter of every column copies the chunk lists too.
    times = rows[["sent_us", "scheduled_us"]]
    dependent = times[derived.as_float(rows, "predecessor_end_us").notna()] if "predecessor_end_us" in rows.columns else times.iloc[:0]
    lag = describe(derived.as_float(dependent, "sent_us") - derived.as_float(dependent, "scheduled_us"), scale=1000.0)
    return {
        "sessions": len(sessions),
        "sessions_completed": int(sessions["completed"].sum()),
        "turns_per_session": float(sessions["turns"].mean()) if len(sessions) else math.nan,
        "session_duration_p50_s": durations["p50"],
        "session_duration_p90_s": durations["p90"],
        "skipped": int(skipped_mask(rows).sum()),
        "turn_lag_p99_ms": lag["p99"],
    }


def ttft_by_turn(rows: pd.DataFrame, ok: np.ndarray) -> pd.DataFrame:
    """Per turn index of the successful turns of sessions: requests,
    ttft_p50_ms, ttft_p90_ms; indexed by turn_index, in order. `rows` has
    the derived `ttft_us` (`derived.add_derived`)."""
    if not has_sessions(rows):
        none: pd.DataFrame = pd.DataFrame(columns=list(_BY_TURN))
        return none
    done = rows[ok & in_session(rows)]
    out = []
    for turn, group in done.groupby(derived.as_float(done, "turn_index").astype("int64"), sort=True):
        figures = describe(group["ttft_us"], scale=1000.0)
        out.append({"turn_index": int(turn), "requests": len(group), "ttft_p50_ms": figures["p50"], "ttft_p90_ms": figures["p90"]})
    by_turn: pd.DataFrame = pd.DataFrame(out, columns=["turn_index", *_BY_TURN]).set_index("turn_index")
    return by_turn
