"""The latencies of a request, in one table: each one's name in the summary
(`<name>_<stat>_ms`), its column in µs (`derived.add_derived`'s, or an ITL
sample column), how the console labels it, the name a comparison gives it
(None: not compared), and the name an SLO gives it with what it means
(None: no SLO names it). The summary, the console, the comparison and the
SLO grammar (`objectives`) read their lists from here. It sits in
`settings`, the lowest floor that needs it (the SLO grammar)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Latency:
    name: str
    column: str
    label: str
    compared_as: str | None
    slo_name: str | None = None
    slo_meaning: str | None = None


LATENCIES: tuple[Latency, ...] = (
    Latency("ttft", "ttft_us", "TTFT (first token)", "TTFT", "ttft", "time to first token (see ttft_token)"),
    Latency("ttfc", "ttfc_us", "TTFC (first answer token)", "TTFC", "ttfc", "time to first answer token"),
    Latency("tpot", "tpot_us", "TPOT", "TPOT", "tpot", "time per output token"),
    Latency("itl_chunk", "itl_chunk_us", "ITL / chunk", None),
    Latency("itl_token", "itl_token_us", "ITL / token", "ITL", "itl", "inter-token latency (per token)"),
    Latency("e2e", "e2e_us", "E2E", "E2E", "e2e", "end-to-end latency"),
    Latency("send_lag", "send_lag_us", "send lag", None),
)
