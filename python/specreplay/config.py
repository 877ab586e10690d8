"""The replay configuration: one typed model shared by the CLI and the Python
API, so the two cannot drift. Secrets (the API key) live here only in memory:
`to_metadata()` is what gets written, and it leaves them out.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from specreplay.errors import ConfigError

ARRIVALS = ("poisson", "constant", "gamma")


@dataclass(frozen=True)
class Point:
    """One sweep point: a load mode and its value."""

    mode: str  # "rate" | "speedup" | "concurrency"
    value: float

    @property
    def name(self) -> str:
        return f"{self.mode}={self.value:g}"

    def to_dict(self) -> dict[str, Any]:
        value: float | int = int(self.value) if self.mode == "concurrency" else self.value
        return {"point": self.name, "mode": self.mode, "value": value}


@dataclass
class ReplayConfig:
    trace: str
    url: str | None = None
    model: str | None = None
    rates: list[float] = field(default_factory=list)
    speedups: list[float] = field(default_factory=list)
    concurrencies: list[int] = field(default_factory=list)
    arrival: str = "poisson"
    burstiness: float = 1.0
    seed: int = 0
    max_concurrency: int | None = None
    num_requests: int | None = None
    duration: float | None = None
    warmup: int = 0
    timeout: float | None = 600.0
    max_tokens: int | None = None
    ignore_eos: bool = False
    extra_body: dict[str, Any] = field(default_factory=dict)
    headers: list[tuple[str, str]] = field(default_factory=list)
    api_key: str | None = field(default=None, repr=False)
    label: str = "run"
    output: str | None = None
    continuous_usage: bool = True
    #: Set by the probe before a run when the server is llama.cpp: requests
    #: then ask for `timings_per_token` (its per-chunk token counts).
    llamacpp_timings: bool = False
    sim_config: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        def positive(name: str, values: list[float] | list[int]) -> None:
            for v in values:
                if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                    raise ConfigError(f"--{name}: must be positive, got {v}")

        positive("rate", self.rates)
        positive("speedup", self.speedups)
        positive("concurrency", self.concurrencies)
        if sum(bool(x) for x in (self.rates, self.speedups, self.concurrencies)) > 1:
            raise ConfigError("give only one of --rate, --speedup and --concurrency (each may list several values)")
        if self.arrival not in ARRIVALS:
            raise ConfigError(f"--arrival: expected one of {', '.join(ARRIVALS)}, got {self.arrival!r}")
        if not (self.burstiness > 0 and math.isfinite(self.burstiness)):
            raise ConfigError(f"--burstiness: must be positive, got {self.burstiness}")
        for name in ("max_concurrency", "num_requests", "max_tokens"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ConfigError(f"--{name.replace('_', '-')}: must be at least 1, got {v}")
        for name in ("duration", "timeout"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise ConfigError(f"--{name}: must be positive, got {v}")
        if self.warmup < 0:
            raise ConfigError(f"--warmup: must not be negative, got {self.warmup}")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ConfigError(f"--url: expected an http:// or https:// URL, got {self.url!r}")

    def points(self, trace_has_arrivals: bool) -> list[Point]:
        if self.rates:
            return [Point("rate", float(r)) for r in self.rates]
        if self.speedups:
            if not trace_has_arrivals:
                raise ConfigError("--speedup replays the trace's own arrival times, but this trace has none: use --rate")
            return [Point("speedup", float(s)) for s in self.speedups]
        if self.concurrencies:
            return [Point("concurrency", float(c)) for c in self.concurrencies]
        if trace_has_arrivals:
            return [Point("speedup", 1.0)]
        raise ConfigError("this trace has no arrival times: give --rate R or --concurrency N")

    def to_metadata(self) -> dict[str, Any]:
        """The resolved configuration as written into results files: no secrets."""
        out = dataclasses.asdict(self)
        out.pop("api_key")
        out["headers"] = [[k, "<redacted>" if is_secret_header(k) else v] for k, v in self.headers]
        out["api_key_set"] = self.api_key is not None
        return out


def is_secret_header(name: str) -> bool:
    return name.strip().lower() in {"authorization", "api-key", "x-api-key", "cookie", "proxy-authorization"}
