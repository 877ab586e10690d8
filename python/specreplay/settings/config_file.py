"""Benchmark config files (TOML): every replay option, shared defaults at the
top, and named runs (`[run.baseline]`, `[run.ngram]`) that state only their
differences. Precedence, lowest first: the file, `SPECREPLAY_<KEY>`
environment variables, command-line flags.

```toml
trace = "sample:reasoning-prompts"   # or a path: traces/my-trace.jsonl
concurrency = [1, 8]
max_tokens = 4096

[run.baseline]
url = "http://127.0.0.1:8000/v1"

[run.ngram]
url = "http://127.0.0.1:8001/v1"
```
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specreplay.settings.config import FIELDS, ReplayConfig
from specreplay.errors import ConfigError
from specreplay.samples import config_path
from specreplay.settings.tomlfile import parse_toml, read_text

ENV_PREFIX = "SPECREPLAY_"
#: Keys that apply to the whole file, not to one run.
FILE_ONLY_KEYS = frozenset({"output"})


@dataclass
class ConfigFile:
    path: str
    text: str

    def where(self, table: str | None, key: str) -> str:
        """`path:line: key` for a key of a table (None = top level)."""
        line = _find_line(self.text, table, key)
        name = f"{table}.{key}" if table else key
        return f"{self.path}:{line}: {name}" if line else f"{self.path}: {name}"


def _find_line(text: str, table: str | None, key: str) -> int | None:
    current: str | None = None
    key_re = re.compile(rf'^\s*("{re.escape(key)}"|{re.escape(key)})\s*=')
    for number, line in enumerate(text.splitlines(), start=1):
        header = re.match(r"^\s*\[([^\[\]]+)\]\s*(#.*)?$", line)
        if header:
            current = header.group(1).strip().replace('"', "")
            continue
        if current == table and key_re.match(line):
            return number
    return None


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """`SPECREPLAY_MAX_TOKENS=4096` style variables, parsed by field type."""
    out: dict[str, Any] = {}
    for name, spec in FIELDS.items():
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is None:
            continue
        where = f"environment variable {ENV_PREFIX + name.upper()}"
        out[name] = spec.convert(where, _parse_env(where, spec.kind, raw))
    return out


def _parse_env(where: str, kind: str, raw: str) -> Any:
    try:
        if kind == "bool":
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ConfigError(f"{where}: expected true or false, got {raw!r}")
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind.startswith("list["):
            item = int if kind == "list[int]" else float
            return [item(v) for v in raw.replace(",", " ").split()]
        if kind in ("table", "str_table", "slo"):
            return json.loads(raw)
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from None
    return raw


def _split(data: dict[str, Any], cfg: ConfigFile) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    runs = data.pop("run", {})
    if not isinstance(runs, dict) or not all(isinstance(v, dict) for v in runs.values()):
        raise ConfigError(f"{cfg.where(None, 'run')}: runs are tables: [run.NAME]")
    for name, table in runs.items():
        for key in table:
            if key in FILE_ONLY_KEYS:
                raise ConfigError(f"{cfg.where(f'run.{name}', key)}: applies to the whole file (all runs go into one results file): set it at the top")
    return data, runs


def load_config_file(
    path: str,
    environ: Mapping[str, str],
    flags: Mapping[str, Any] | None = None,
) -> list[ReplayConfig]:
    """The runs a config file describes, each fully resolved: file defaults,
    then the run's own keys, then the environment, then `flags`. A
    `sample:NAME` is the packaged example's file (`specreplay.samples`)."""
    path = config_path(path)
    text = read_text(path)
    cfg = ConfigFile(path, text)
    defaults, runs = _split(parse_toml(text, path), cfg)
    base = ReplayConfig.from_mapping(defaults, lambda key: cfg.where(None, key))
    env = env_overrides(environ)
    named: list[tuple[str | None, dict[str, Any]]] = list(runs.items()) or [(None, {})]
    configs = []
    for name, table in named:

        def where(key: str, name: str | None = name, table: dict[str, Any] = table) -> str:
            return cfg.where(f"run.{name}" if name is not None and key in table else None, key)

        config = ReplayConfig.from_mapping({**base.values(), **table}, where)
        if name is not None and "label" not in table:
            config.label = name
        configs.append(apply_overrides(config, {**env, **(flags or {})}))
    return configs


def apply_overrides(config: ReplayConfig, overrides: Mapping[str, Any]) -> ReplayConfig:
    """A copy of `config` with already-validated values replaced."""
    values = config.values()
    values.update(overrides)
    out = ReplayConfig.from_mapping(values)
    out.api_key = config.api_key
    return out


#: Keys a results file stores beside the configuration (what the run
#: resolved), which are not options.
DERIVED_KEYS = frozenset({"points", "trace_sha256", "target", "embedded_simulator", "served_model", "llamacpp_timings", "metrics_target", "predicted"})


def stored_runs(run_metadata: list[dict[str, Any]], source: str) -> list[ReplayConfig]:
    """The configurations a results file recorded, ready to run again."""
    configs = []
    for i, stored in enumerate(run_metadata):
        values = {k: v for k, v in stored.items() if k not in DERIVED_KEYS}
        redacted = [k for k, v in values.get("headers", {}).items() if v == "<redacted>"]
        if redacted:
            raise ConfigError(
                f"{source}: run {i + 1} sent the secret header(s) {', '.join(redacted)}, which are never stored: "
                "pass them again with --header"
            )
        prefix = f"{source}: run {i + 1}"
        configs.append(ReplayConfig.from_mapping(values, lambda key: f"{prefix}: {key}"))
    return configs


def to_toml(configs: list[ReplayConfig]) -> str:
    """The configurations as a config file that `load_config_file` reads back
    to the same configurations. Keys left at None are omitted (TOML has no null)."""
    import tomli_w

    def table(config: ReplayConfig, drop: frozenset[str]) -> dict[str, Any]:
        return {k: v for k, v in config.values().items() if v is not None and k not in drop}

    header = "# specreplay benchmark config (see examples/ and docs/configs.md)\n"
    if len(configs) == 1:
        return header + tomli_w.dumps(table(configs[0], frozenset()))
    top: dict[str, Any] = {}
    if configs[0].output is not None:
        top["output"] = configs[0].output
    top["run"] = {c.label: table(c, frozenset({"label", "output"})) for c in configs}
    return header + tomli_w.dumps(top)
