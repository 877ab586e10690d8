"""The sample traces and example configs shipped inside the package, so the
quick start works from any directory after `pip install specreplay`.

`sample:NAME` names one wherever a trace or a config file is expected:
`specreplay replay sample:reasoning-prompts --rate 8`,
`specreplay replay --config sample:spec-decode-ab`. In a clone, `traces/` and
`examples/` hold links to these same files (one copy in the repository).

`reasoning-prompts-60.jsonl` (60 chat prompts of 20–60 words, budget 4096,
the answer's length the server's own: enough distinct records for a p90
target, 50) was written by `specreplay synth -o r60.jsonl --num-requests 60
--rate 0.5 --input-len uniform:20:60 --output-len 4096 --seed 7`, with
`min_tokens` and `ignore_eos` taken out of each body, `temperature` 0.6 put
in, and the ids numbered r00…r59.
"""

from __future__ import annotations

from pathlib import Path

from specreplay.errors import ConfigError, TraceError

PREFIX = "sample:"
TRACE_SUFFIX = ".jsonl"
CONFIG_SUFFIX = ".toml"
HERE = Path(__file__).resolve().parent


def names(suffix: str) -> list[str]:
    """The sample names with this suffix (`.jsonl` traces, `.toml` configs)."""
    return sorted(p.name[: -len(suffix)] for p in HERE.iterdir() if p.name.endswith(suffix))


def is_sample(value: str | Path) -> bool:
    return str(value).startswith(PREFIX)


def _resolve(value: str | Path, suffix: str) -> Path | None:
    if not is_sample(value):
        return None
    name = str(value)[len(PREFIX):]
    path = HERE / f"{name}{suffix}"
    if "/" in name or not path.is_file():
        return None
    return path


def trace_path(value: str | Path) -> str:
    """The file behind a trace argument: a `sample:` name's packaged file,
    anything else unchanged. An unknown sample is a `TraceError` listing the
    ones there are."""
    if not is_sample(value):
        return str(value)
    path = _resolve(value, TRACE_SUFFIX)
    if path is None:
        raise TraceError(str(value), None, None, f"no such sample trace (there are: {', '.join(PREFIX + n for n in names(TRACE_SUFFIX))})")
    return str(path)


def config_path(value: str) -> str:
    """The file behind a `--config` argument, as `trace_path` for traces."""
    if not is_sample(value):
        return value
    path = _resolve(value, CONFIG_SUFFIX)
    if path is None:
        raise ConfigError(f"{value}: no such sample config (there are: {', '.join(PREFIX + n for n in names(CONFIG_SUFFIX))})")
    return str(path)
