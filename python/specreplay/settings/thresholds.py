"""The validity checks' limits (`[thresholds]` in a config): a setting, read
by `analysis.validity`."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class ValidityThresholds:
    """Limits of the checks. Defaults are deliberately strict for a client that
    timestamps in µs: a millisecond of send lag is already visible in TTFT."""

    send_lag_p99_ms: float = 1.0
    """client_saturated: p99 send lag (sent − scheduled) above this."""
    min_rate_ratio: float = 0.95
    """client_saturated: send rate below this share of the scheduled rate."""
    engine_delay_p99_ms: float = 5.0
    """engine_delay: p99 of the engine's own delay per chunk above this. Looser
    than the send lag's: the kernel stamps do not move with it, and open-loop
    sends are watched by client_saturated; what it warns of is a closed loop
    whose next request waits for the engine to read the previous answer."""
    max_error_rate: float = 0.01
    """error_rate: share of failed requests above this."""
    max_queue_growth: float = 0.05
    """queue_growing: TTFT growth per second of an open-loop point (s/s) above this."""
    max_acceptance_gap: float = 0.1
    """acceptance_mismatch: the server's and the client's shares of accepted
    tokens differ by more than this (docs/results.md, "Server metrics")."""
    burst_us_per_token: float = 50.0
    """burst_streams: a successful request whose TPOT is below this many µs
    (faster than 20,000 tokens/s in one stream, which no server decodes)
    arrived in a burst and is left out of TPOT, TPS and ITL
    (`derived.bursts`)."""

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ValidityThresholds:
        """The thresholds from a mapping such as the config's `thresholds`; an
        unknown key is an error rather than a silently ignored typo."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in values.items() if k not in RETIRED}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown thresholds: {', '.join(sorted(unknown))}")
        return cls(**values)


#: ValidityThresholds of files recorded before the sample counts became one rule
#: (`analysis.resampling.samples_needed`, for too_few_requests,
#: too_few_sessions, the SLO verdicts and `compare` alike): read and ignored.
RETIRED = frozenset({"min_requests_p90", "min_requests_p99", "min_sessions_p90"})
