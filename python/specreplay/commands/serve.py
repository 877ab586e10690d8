"""`specreplay serve`: run the simulated reasoning-model server in the foreground.

The configuration comes from an optional TOML file of `SimConfig` keys (see
docs/simulator.md), overridden by the flags. The server runs on the Rust
engine's runtime; this command only waits for Ctrl-C (or SIGTERM) and then
stops it cleanly.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, cast

import click

from specreplay._core import SimServer
from specreplay.errors import ConfigError
from specreplay.settings.tomlfile import read_toml

if TYPE_CHECKING:
    from specreplay._core import SimConfig

REASONING_FIELDS = ("reasoning_content", "reasoning", "none")
# Config keys that hold a table; a flag replaces one entry and keeps the file's others.
NESTED = ("faults", "capacity")
# The flags of the `capacity` table's keys.
CAPACITY_FLAGS = ("max_num_seqs", "kv_cache_tokens", "batch_step_cost", "prefix_caching")


def load_config_file(path: Path) -> dict[str, Any]:
    """Reads a TOML file of `SimConfig` keys; errors name the file."""
    try:
        return read_toml(str(path))
    except ConfigError as e:
        raise click.ClickException(str(e)) from None


def build_config(file_config: dict[str, Any], overrides: dict[str, Any]) -> dict[str, object]:
    """The file's keys, then every flag that was given. The tables merge per
    entry: `--fault http_503=0.1` replaces the file's `http_503` only, and
    `--max-num-seqs 8` the file's `capacity.max_num_seqs` only."""
    config: dict[str, object] = dict(file_config)
    flag_tables = {key: overrides.pop(key, None) for key in NESTED}
    config.update({k: v for k, v in overrides.items() if v is not None})
    for key, entries in flag_tables.items():
        if entries:
            from_file = config.get(key)
            merged = dict(from_file) if isinstance(from_file, dict) else {}
            merged.update(entries)
            config[key] = merged
    return config


def parse_faults(values: tuple[str, ...]) -> dict[str, float]:
    """`KIND=FRACTION` pairs of the repeatable `--fault` flag; the kind and
    the range are checked by the server's config validation."""
    faults: dict[str, float] = {}
    for value in values:
        kind, sep, fraction = value.partition("=")
        try:
            if not sep or not kind.strip():
                raise ValueError
            faults[kind.strip()] = float(fraction)
        except ValueError:
            raise click.BadParameter(f"{value!r} is not KIND=FRACTION (e.g. http_503=0.05)", param_hint="--fault") from None
    return faults


def parse_models(values: tuple[str, ...]) -> list[dict[str, object]]:
    """`NAME` or `NAME:KEY=VALUE,...` of the repeatable `--extra-model` flag
    (KEY one of ttft_ms, prefill_us_per_token, tpot_ms); the core checks the
    names and values."""
    models: list[dict[str, object]] = []
    for value in values:
        name, _, speeds = value.partition(":")
        model: dict[str, object] = {"name": name}
        for pair in filter(None, speeds.split(",")):
            key, sep, number = pair.partition("=")
            try:
                if not sep:
                    raise ValueError
                model[key.strip()] = float(number)
            except ValueError:
                raise click.BadParameter(
                    f"expected NAME or NAME:KEY=MS,..., got {value!r}", param_hint="--extra-model"
                ) from None
        models.append(model)
    return models


def _config_error_source(message: str, file_keys: set[str], path: Path | None) -> str:
    """Which input a ConfigError came from: the file (named) or the flags
    (the core names the key: `invalid configuration: sim: KEY: ...`)."""
    if path is not None and any(message.startswith(f"invalid configuration: sim: {k}:") for k in file_keys):
        return str(path)
    return "command line"


def wait_for_interrupt() -> None:
    """Sleeps in short steps until Ctrl-C or SIGTERM."""
    stop = False

    def on_term(signum: int, frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        while not stop:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="Port (0 = any free port).")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="TOML file of simulator keys (flags override it).",
)
@click.option("--model", help="Served model name.")
@click.option("--seed", type=int, help="Base seed of the per-request draws.")
@click.option("--ttft-ms", type=float, help="Fixed part of the time to first token (ms).")
@click.option("--prefill-us-per-token", type=float, help="Prefill cost per prompt token (µs).")
@click.option("--tpot-ms", type=float, help="Time of one decode step (ms).")
@click.option("--reasoning-tokens", nargs=2, type=int, metavar="MIN MAX", help="Range of reasoning lengths.")
@click.option("--content-tokens", nargs=2, type=int, metavar="MIN MAX", help="Range of answer lengths.")
@click.option("--reasoning-field", type=click.Choice(REASONING_FIELDS), help="Where reasoning text goes in chat deltas.")
@click.option("--spec-draft-len", type=int, help="Draft tokens per decode step (0 = no speculation).")
@click.option("--spec-acceptance", type=float, help="Acceptance probability of each draft token.")
@click.option("--spec-step-cost", type=float, help="Extra step cost per draft token, as a fraction of tpot.")
@click.option("--send-timestamps/--no-send-timestamps", default=None, help="Add sim_sent_us to every chunk.")
@click.option(
    "--fixed-length-reasoning/--no-fixed-length-reasoning",
    default=None,
    help="Reason before answering fixed-length requests (ignore_eos, or min_tokens at the budget) too.",
)
@click.option("--max-num-seqs", type=int, help="Capacity model: most sequences in a batch (turns the model on).")
@click.option("--kv-cache-tokens", type=int, help="Capacity model: KV-cache budget in tokens (0 = none).")
@click.option("--batch-step-cost", type=float, help="Capacity model: extra step time per running sequence, as a fraction of tpot.")
@click.option("--prefix-caching/--no-prefix-caching", default=None, help="Capacity model: reuse cached prompt prefixes (on by default).")
@click.option(
    "--fault",
    "faults",
    multiple=True,
    metavar="KIND=FRACTION",
    help="Inject fault KIND into that fraction of requests (repeatable; see docs/simulator.md).",
)
@click.option("--fault-stall-ms", type=float, help="Length of the stall faults (ms).")
@click.option("--fault-slow-headers-ms", type=float, help="Wait before the headers under slow_headers (ms).")
@click.option("--fault-retry-after-s", type=int, help="Retry-After of the http_429 fault (s).")
@click.option("--fault-oversized-bytes", type=int, help="Size of the oversized_event event (bytes).")
@click.option(
    "--extra-model",
    "extra_models",
    multiple=True,
    metavar="NAME[:KEY=MS,...]",
    help="Serve another model name, e.g. 'lora-a' or 'slow:ttft_ms=300,tpot_ms=40' (repeatable; added to the file's models).",
)
@click.option("--image-patch-px", type=int, help="Image patch size in pixels (media token rule).")
@click.option("--image-merge", type=int, help="Patches merged per side into one image token.")
@click.option("--image-url-size", nargs=2, type=int, metavar="W H", help="Size an http(s) image URL counts as (never fetched).")
@click.option("--audio-tokens-per-s", type=float, help="Prompt tokens per second of audio.")
@click.option("--video-tokens", type=int, help="Prompt tokens of one video part.")
@click.option("--tool-call-rate", type=float, help="Fraction of requests with tools answered with a tool call.")
@click.option("--embedding-dim", type=int, help="Length of each /v1/embeddings vector.")
def serve(
    host: str,
    port: int,
    config_path: Path | None,
    faults: tuple[str, ...],
    extra_models: tuple[str, ...],
    **flags: Any,
) -> None:
    """Serve the simulated reasoning model (OpenAI-compatible chat and
    completions, the Responses and Anthropic Messages APIs, embeddings,
    rerank and score) until Ctrl-C."""
    file_config = load_config_file(config_path) if config_path is not None else {}
    overrides = {k: (list(v) if isinstance(v, tuple) else v) for k, v in flags.items()}
    # click gives an empty tuple for an unused nargs=2 option.
    overrides = {k: v for k, v in overrides.items() if v != []}
    flag_tables: dict[str, dict[str, Any]] = {
        "faults": parse_faults(faults),
        "capacity": {k: v for k in CAPACITY_FLAGS if (v := overrides.pop(k, None)) is not None},
    }
    file_keys = {k for k in file_config if overrides.get(k) is None and k not in NESTED}
    for key, entries in flag_tables.items():
        from_file = file_config.get(key)
        if isinstance(from_file, dict):
            # An error names `faults.KIND` (or `capacity.KEY`), or the table itself.
            file_keys |= {f"{key}.{name}" for name in from_file if name not in entries}
            if not entries:
                file_keys.add(key)
        elif key in file_config:
            file_keys.add(key)
        if entries:
            overrides[key] = entries
    config = build_config(file_config, overrides)
    if extra_models:
        from_file = config.get("models")
        config["models"] = [*(from_file if isinstance(from_file, list) else []), *parse_models(extra_models)]
    try:
        # The keys and values are checked by the core: a bad one is a ConfigError naming it.
        server = SimServer(host=host, port=port, config=cast("SimConfig", config))
    except ConfigError as e:
        raise click.ClickException(f"{_config_error_source(str(e), file_keys, config_path)}: {e}") from None
    except OSError as e:
        raise click.ClickException(f"cannot serve on {host}:{port}: {e}") from None
    with server:
        click.echo(f"specreplay simulator serving {server.url} (Ctrl-C to stop)")
        wait_for_interrupt()
    click.echo("specreplay simulator stopped", err=True)
