"""The replay configuration: one typed model shared by the CLI, config files
and the Python API, so the three cannot drift. Every field is declared once,
with its type and check; `from_mapping` validates any source against it.

Secrets never live here in a form that gets written: the API key is read from
the environment variable named by `api_key_env`, and `to_metadata()` (what
results files store) leaves it out.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specreplay._core import is_secret_header
from specreplay.settings.distributions import Dist
from specreplay.settings.extras import require_ray
from specreplay.settings.model_mix import parse_mix
from specreplay.settings.objectives import Slo
from specreplay.settings.thresholds import ValidityThresholds
from specreplay.errors import ConfigError
from specreplay.literals import ARRIVALS, SESSION_MODES, Arrival, SessionMode
from specreplay.settings.objectives import Slo



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
    """Everything a replay needs. Field names are the config-file keys and,
    with `-` for `_`, the command-line flags (`max_tokens` ↔ `--max-tokens`)."""

    trace: str = ""
    url: str | None = None
    model: str | None = None
    #: `--model-mix 'base:0.7,lora-a:0.3'`: each request's model drawn (`models`).
    model_mix: str | None = None
    rate: list[float] = field(default_factory=list)
    speedup: list[float] = field(default_factory=list)
    concurrency: list[int] = field(default_factory=list)
    arrival: Arrival = "poisson"
    burstiness: float = 1.0
    sessions: SessionMode = "dependent"
    live_history: bool = False
    seed: int = 0
    repeats: int = 1
    max_concurrency: int | None = None
    num_requests: int | None = None
    duration: float | None = None
    warmup: int = 0
    timeout: float | None = 600.0
    stall_timeout: float | None = None
    retries: int = 0
    #: Open the connections before the clock starts. None: on for closed loop
    #: (one per concurrent request) and for a rate (250 ms of its arrivals, the
    #: core's `RunSpec::preconnections`), off for recorded timing. True in an
    #: open loop opens `max_concurrency` connections and needs it set.
    preconnect: bool | None = None
    max_tokens: int | None = None
    ignore_eos: bool = False
    extra_body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    api_key_env: str = "OPENAI_API_KEY"
    label: str = "run"
    output: str | None = None
    continuous_usage: bool = True
    #: A Hugging Face tokenizer.json: counts each chunk's text after each
    #: point when the server gives no continuous usage (chunk_tokenizer.py).
    tokenizer: str | None = None
    #: The same from the server's own `/tokenize` (llama.cpp's shape), after each point.
    server_tokenize: bool = False
    #: Scrape the target's Prometheus metrics during the run (servermetrics/).
    metrics: bool = True
    #: Where: default `<server root>/metrics` of `url` (or of the simulator).
    metrics_url: str | None = None
    metrics_interval: float = 1.0
    sim: dict[str, Any] = field(default_factory=dict)
    #: Distributed replay (distributed/): "local" starts a Ray instance on
    #: this machine, else the address of a Ray cluster ("auto", "ray://…").
    #: None: the engine runs here, in this process.
    ray: str | None = None
    #: Ray actors that share each point (only with `ray`).
    workers: int = 1
    thresholds: dict[str, float] = field(default_factory=dict)
    #: Think time of a session's later turn where the trace knows none:
    #: fixed seconds or a distribution (`specreplay.sessions`).
    think_time: str | None = None
    think_time_scale: float = 1.0
    slo: dict[str, Any] = field(default_factory=dict)
    find_max_rate: bool = False
    search_tolerance: float = 0.05
    search_budget: float = 1800.0
    #: Predict every point from this server model (`specreplay calibrate`'s
    #: server.toml) on a virtual clock instead of sending it (docs/predict.md).
    predict: str | None = None
    #: What-if values for the prediction's server model (parameter → value).
    what_if: dict[str, Any] = field(default_factory=dict)
    #: Which draw of the prediction's own random numbers (the race of requests
    #: sent together, the server's speed, output lengths): 0 draws them from
    #: `seed`; another number, another draw on the same arrivals.
    predict_draw: int = 0
    #: Set by the probe before a run when the server is llama.cpp: requests
    #: then ask for `timings_per_token` (its per-chunk token counts). Not an
    #: option: never read from a file, never written.
    llamacpp_timings: bool = field(default=False, compare=False)
    # Set from the environment only (never from a file, never written).
    api_key: str | None = field(default=None, repr=False, compare=False)

    def validate(self) -> None:
        """Checks the combination of fields (each field's own type and range
        is checked by `from_mapping`)."""
        for name in FIELDS:
            FIELDS[name].check(name, getattr(self, name))
        if not self.trace:
            raise ConfigError("trace: missing (the trace file to replay)")
        if sum(bool(x) for x in (self.rate, self.speedup, self.concurrency)) > 1:
            raise ConfigError("give only one of rate, speedup and concurrency (each may list several values)")
        if self.workers != 1 and self.ray is None:
            raise ConfigError("workers: more than one worker needs ray (--ray for a local Ray instance, or --ray ADDRESS of a cluster)")
        if self.concurrency and self.ray is not None and min(self.concurrency) < self.workers:
            raise ConfigError(f"concurrency: {min(self.concurrency)} is below workers={self.workers}: every worker needs a request in flight")
        if self.ray is not None:
            require_ray()
        if self.tokenizer and self.server_tokenize:
            raise ConfigError("give tokenizer or server_tokenize, not both: one counts the chunks")
        if self.preconnect and not self.concurrency and self.max_concurrency is None:
            raise ConfigError("preconnect: an open-loop run opens max_concurrency connections before the clock; set max_concurrency too")
        if self.model_mix is not None:
            try:
                parse_mix(self.model_mix)
            except ValueError as e:
                raise ConfigError(f"model_mix: {e}") from None
            if self.model is not None:
                raise ConfigError("give model or model_mix, not both")
        try:
            self.threshold_settings()
        except (TypeError, ValueError) as e:
            raise ConfigError(f"thresholds: {e}") from None
        slo = self.slo_settings()
        if self.find_max_rate:
            if self.speedup or self.concurrency:
                raise ConfigError("find_max_rate searches open-loop request rates: drop speedup/concurrency (rate, if given, is where the search starts)")
            if len(self.rate) > 1:
                raise ConfigError("find_max_rate chooses its own rates: give at most one rate (where the search starts)")
            if not slo.targets:
                raise ConfigError(
                    "find_max_rate needs a target to hold, e.g. --slo 'p99 ttft < 2000' (or targets = [...] in [slo]); "
                    "per-request thresholds alone decide goodput, not whether a rate holds: add 'attainment >= 90%'"
                )

    def slo_settings(self) -> Slo:
        """The `slo` table, checked (`slo.Slo`)."""
        return Slo.from_table(self.slo)

    def threshold_settings(self) -> ValidityThresholds:
        """The `thresholds` table, typed (`thresholds.Thresholds`)."""
        return ValidityThresholds.from_dict(self.thresholds)

    def points(self, trace_has_arrivals: bool) -> list[Point]:
        if self.rate:
            return [Point("rate", float(r)) for r in self.rate]
        if self.speedup:
            if not trace_has_arrivals:
                raise ConfigError("--speedup replays the trace's own arrival times, but this trace has none: use --rate")
            return [Point("speedup", float(s)) for s in self.speedup]
        if self.concurrency:
            return [Point("concurrency", float(c)) for c in self.concurrency]
        if trace_has_arrivals:
            return [Point("speedup", 1.0)]
        raise ConfigError("this trace has no arrival times: give --rate R or --concurrency N")

    def think_time_dist(self) -> Dist | None:
        return None if self.think_time is None else Dist.parse(self.think_time, "think_time", allow_zero=True)

    def resolve_api_key(self, environ: Mapping[str, str] | None = None) -> None:
        """Reads the API key from the environment variable `api_key_env`."""
        env = os.environ if environ is None else environ
        self.api_key = env.get(self.api_key_env) or None

    def values(self) -> dict[str, Any]:
        """Every field by name, as set."""
        return {name: getattr(self, name) for name in FIELDS}

    def to_metadata(self) -> dict[str, Any]:
        """The resolved configuration as written into results files: every
        field but the key itself, with secret-looking headers redacted."""
        out = self.values()
        out["headers"] = {k: "<redacted>" if is_secret_header(k) else v for k, v in self.headers.items()}
        return out

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], where: Callable[[str], str] = lambda key: key) -> ReplayConfig:
        """Builds a config from a mapping (a config file's table, metadata, or
        keyword arguments), checking every key and value. `where(key)` says
        where a key came from, for messages (e.g. `bench.toml:12: max_tokens`)."""
        config = cls()
        for key, value in values.items():
            if key == "api_key":
                raise ConfigError(
                    f"{where(key)}: secrets are never read from a file or an option list: "
                    "put the key in an environment variable and name it with api_key_env (default OPENAI_API_KEY)"
                )
            spec = FIELDS.get(key)
            if spec is None:
                close = difflib.get_close_matches(key, list(FIELDS), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else f" (known keys: {', '.join(FIELDS)})"
                raise ConfigError(f"{where(key)}: unknown key{hint}")
            setattr(config, key, spec.convert(where(key), value))
        return config


# --- field specifications ----------------------------------------------------


def _type_name(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a table"}.get(
        type(value), type(value).__name__
    )


@dataclass(frozen=True)
class FieldSpec:
    kind: str  # str | url | int | float | bool | list[float] | list[int] | table | str_table | dist | slo
    optional: bool = False
    minimum: float | None = None  # inclusive lower bound
    positive: bool = False
    choices: tuple[str, ...] = ()

    def convert(self, where: str, value: Any) -> Any:
        """`value` as this field's type, or a ConfigError saying what is wrong."""
        if value is None:
            if self.optional:
                return None
            raise ConfigError(f"{where}: must not be empty")
        kind = self.kind
        if kind.startswith("list["):
            items = value if isinstance(value, list) else [value]
            item = FieldSpec(kind[5:-1], minimum=self.minimum, positive=self.positive)
            return [item.convert(where, v) for v in items]
        if kind == "bool":
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: expected true or false, got {_type_name(value)} ({value!r})")
            return value
        if kind in ("int", "float"):
            ok = isinstance(value, int) if kind == "int" else isinstance(value, (int, float))
            if isinstance(value, bool) or not ok:
                raise ConfigError(f"{where}: expected {'an integer' if kind == 'int' else 'a number'}, got {_type_name(value)} ({value!r})")
            number = int(value) if kind == "int" else float(value)
            self.check(where, number)
            return number
        if kind in ("str", "url"):
            if not isinstance(value, str):
                raise ConfigError(f"{where}: expected a string, got {_type_name(value)} ({value!r})")
            self.check(where, value)
            return value
        if kind == "dist":  # fixed seconds (a number) or a distribution (a string)
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise ConfigError(f"{where}: expected seconds or a distribution such as exp:2, got {_type_name(value)} ({value!r})")
            return str(Dist.parse(str(value), where, allow_zero=True))
        if kind == "slo":
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: expected a table such as {{ targets = ['p99 ttft < 2000'] }}, got {_type_name(value)} ({value!r})")
            Slo.from_table(value, where)  # every key checked here, where the file's line is known
            return dict(value)
        if kind in ("table", "str_table"):
            if isinstance(value, list) and kind == "str_table":  # [["Name", "value"], …]
                value = dict(value)
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: expected a table, got {_type_name(value)} ({value!r})")
            if kind == "str_table" and not all(isinstance(v, str) for v in value.values()):
                raise ConfigError(f"{where}: every value must be a string")
            return dict(value)
        raise AssertionError(kind)

    def check(self, where: str, value: Any) -> None:
        """Range and choice checks on an already-typed value."""
        if value is None:
            return
        if isinstance(value, list):
            for v in value:
                self.check(where, v)
            return
        if self.choices and value not in self.choices:
            raise ConfigError(f"{where}: expected one of {', '.join(self.choices)}, got {value!r}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise ConfigError(f"{where}: must be a finite number, got {value}")
            if self.positive and value <= 0:
                raise ConfigError(f"{where}: must be positive, got {value:g}")
            if self.minimum is not None and value < self.minimum:
                raise ConfigError(f"{where}: must be at least {self.minimum:g}, got {value:g}")
        if self.kind == "dist":
            Dist.parse(str(value), where, allow_zero=True)
        if self.kind == "url" and not str(value).startswith(("http://", "https://")):
            raise ConfigError(f"{where}: expected an http:// or https:// URL, got {value!r}")


FIELDS: dict[str, FieldSpec] = {
    "trace": FieldSpec("str"),
    "url": FieldSpec("url", optional=True),
    "model": FieldSpec("str", optional=True),
    "model_mix": FieldSpec("str", optional=True),
    "rate": FieldSpec("list[float]", positive=True),
    "speedup": FieldSpec("list[float]", positive=True),
    "concurrency": FieldSpec("list[int]", minimum=1),
    "arrival": FieldSpec("str", choices=ARRIVALS),
    "burstiness": FieldSpec("float", positive=True),
    "sessions": FieldSpec("str", choices=SESSION_MODES),
    "live_history": FieldSpec("bool"),
    "seed": FieldSpec("int", minimum=0),
    "repeats": FieldSpec("int", minimum=1),
    "max_concurrency": FieldSpec("int", optional=True, minimum=1),
    "num_requests": FieldSpec("int", optional=True, minimum=1),
    "duration": FieldSpec("float", optional=True, positive=True),
    "warmup": FieldSpec("int", minimum=0),
    "timeout": FieldSpec("float", optional=True, positive=True),
    "stall_timeout": FieldSpec("float", optional=True, positive=True),
    "retries": FieldSpec("int", minimum=0),
    "preconnect": FieldSpec("bool", optional=True),
    "max_tokens": FieldSpec("int", optional=True, minimum=1),
    "ignore_eos": FieldSpec("bool"),
    "extra_body": FieldSpec("table"),
    "headers": FieldSpec("str_table"),
    "api_key_env": FieldSpec("str"),
    "label": FieldSpec("str"),
    "output": FieldSpec("str", optional=True),
    "continuous_usage": FieldSpec("bool"),
    "tokenizer": FieldSpec("str", optional=True),
    "server_tokenize": FieldSpec("bool"),
    "metrics": FieldSpec("bool"),
    "metrics_url": FieldSpec("url", optional=True),
    "metrics_interval": FieldSpec("float", minimum=0.05),  # a scrape takes milliseconds of CPU: not a busy loop
    "sim": FieldSpec("table"),
    "ray": FieldSpec("str", optional=True),
    "workers": FieldSpec("int", minimum=1),
    "thresholds": FieldSpec("table"),
    "think_time": FieldSpec("dist", optional=True),
    "think_time_scale": FieldSpec("float", minimum=0),
    "slo": FieldSpec("slo"),
    "find_max_rate": FieldSpec("bool"),
    "search_tolerance": FieldSpec("float", positive=True),
    "search_budget": FieldSpec("float", positive=True),
    "predict": FieldSpec("str", optional=True),
    "what_if": FieldSpec("table"),
    "predict_draw": FieldSpec("int", minimum=0),
}
