"""Finding out what we are about to measure, before the run starts: the
embedded simulator when no URL is given, otherwise a preflight that checks the
endpoint answers and resolves the model name — so a wrong `--url` fails in a
second with a clear message instead of producing a file of error rows."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from specreplay import _core
from specreplay.errors import ConfigError, StreamFormatError
from specreplay.trace.shaping import base_url, clamp_to_budget, redact_url

if TYPE_CHECKING:
    from specreplay._core import SimConfig

PREFLIGHT_TIMEOUT_S = 10.0


@dataclass
class Target:
    url: str
    model: str | None
    embedded: _core.SimServer | None = None  # when we started one

    def close(self) -> None:
        if self.embedded is not None:
            self.embedded.stop()
            self.embedded = None


def list_models(url: str, headers: list[tuple[str, str]]) -> list[str]:
    """Model ids served at `url` (OpenAI `/models`). Raises ConfigError with the
    reason when the endpoint cannot be reached."""
    models_url = base_url(url) + "/models"
    shown = redact_url(models_url)
    try:
        got = _core.fetch("GET", models_url, headers, timeout_s=PREFLIGHT_TIMEOUT_S)
    except OSError as e:  # refused, reset, TLS, timed out
        raise ConfigError(f"cannot reach {shown}: {e}") from None
    if got.status in (401, 403):
        raise ConfigError(f"{shown}: HTTP {got.status}: the server refused our credentials (set OPENAI_API_KEY or --api-key)")
    if got.status == 404:
        return []  # Some servers (Anthropic-style gateways) have no /models: not fatal.
    if got.status >= 300:
        raise ConfigError(f"{shown}: HTTP {got.status} {got.reason}")
    try:
        payload = json.loads(got.body)
    except ValueError:
        raise ConfigError(f"{shown}: the answer is not JSON: is this an OpenAI-compatible server?") from None
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        return []
    return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]


def start_embedded(seed: int, sim_config: dict[str, Any]) -> Target:
    """The embedded simulator, configured by a config file's `sim` table
    (checked by the core: a bad key is a ConfigError naming it)."""
    config = cast("SimConfig", {"seed": seed, **sim_config})
    server = _core.SimServer("127.0.0.1", 0, config, embedded=True)
    return Target(url=server.url, model=str(config.get("model", "specreplay-sim")), embedded=server)


def preflight(url: str, model: str | None, headers: list[tuple[str, str]], trace_has_models: bool) -> Target:
    models = list_models(url, headers)
    if model is not None:
        if models and model not in models:
            raise ConfigError(f"--model {model!r} is not served at {redact_url(url)} (it serves: {', '.join(models)})")
        return Target(url=url, model=model)
    if trace_has_models:
        return Target(url=url, model=None)
    if not models:
        raise ConfigError(f"{redact_url(url)} lists no models and the trace names none: give --model")
    return Target(url=url, model=models[0])


@dataclass(frozen=True)
class UsageProbe:
    """What one 1-token probe request said about per-chunk token counts."""

    accepted: bool  # the server took `stream_options.continuous_usage_stats`
    llamacpp_timings: bool  # its stream carried llama.cpp's `timings` object


def post_json(url: str, headers: list[tuple[str, str]], payload: Any, timeout_s: float) -> _core.Fetched:
    """POSTs `payload` as JSON to the target with the run's headers (its
    auth), `Content-Type` set to JSON whatever they say: the preflight's
    requests beside the run's own (the usage probe, llama.cpp's `/tokenize`)."""
    merged = {**dict(headers), "Content-Type": "application/json"}
    return _core.fetch("POST", url, list(merged.items()), json.dumps(payload).encode(), timeout_s)


def probe_usage(url: str, api: str, body: dict[str, Any], headers: list[tuple[str, str]]) -> UsageProbe:
    """Whether the server takes `stream_options.continuous_usage_stats` (vLLM,
    SGLang and our simulator do; some OpenAI-compatible APIs answer 400 to an
    unknown option), and whether it is llama.cpp, which ignores that option
    but sends its `timings` object: asked with `timings_per_token`, llama.cpp
    puts its cumulative `predicted_n` on every chunk, the same exact
    per-chunk count. Probed with one 1-token request before the run."""
    probe = dict(body)
    probe.update({"stream": True, "max_tokens": 1, "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    probe.pop("max_completion_tokens", None)
    clamp_to_budget(probe, 1)  # an imported trace's min_tokens would make it a 400
    try:
        got = post_json(url, headers, probe, PREFLIGHT_TIMEOUT_S)
    except OSError:
        return UsageProbe(accepted=True, llamacpp_timings=False)  # not the option's fault: the run itself will report it
    if got.status >= 400:
        # 400/422: the server validates request fields and refused this one.
        return UsageProbe(accepted=got.status not in (400, 422), llamacpp_timings=False)
    stream, content_type = got.body, got.content_type
    return UsageProbe(accepted=True, llamacpp_timings=_has_llamacpp_timings(api, stream, content_type))


def _has_llamacpp_timings(api: str, stream: bytes, content_type: str) -> bool:
    """Whether the response carried llama.cpp's `timings.predicted_n` (read
    by the core's SSE parser and decoders, as the run will read it)."""
    try:
        return _core.decode_response(api, stream, content_type).predicted_tokens is not None
    except StreamFormatError:
        return False  # not a stream we can read: the run itself will report it
