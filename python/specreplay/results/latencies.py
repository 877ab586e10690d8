"""The latencies of a request, in one table: each one's name in the summary
(`<name>_<stat>_ms`), its column in µs (`derived.add_derived`'s, or an ITL
sample column), how the console labels it, and the name a comparison gives
it (None: not compared). The summary, the console and the comparison read
their lists from here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Latency:
    name: str
    column: str
    label: str
    compared_as: str | None


LATENCIES: tuple[Latency, ...] = (
    Latency("ttft", "ttft_us", "TTFT (first token)", "TTFT"),
    Latency("ttfc", "ttfc_us", "TTFC (first answer token)", "TTFC"),
    Latency("tpot", "tpot_us", "TPOT", "TPOT"),
    Latency("itl_chunk", "itl_chunk_us", "ITL / chunk", None),
    Latency("itl_token", "itl_token_us", "ITL / token", "ITL"),
    Latency("e2e", "e2e_us", "E2E", "E2E"),
    Latency("send_lag", "send_lag_us", "send lag", None),
)
