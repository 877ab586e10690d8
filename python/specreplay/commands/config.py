"""`specreplay config show RESULTS`: the configuration a results file recorded, as TOML."""

from __future__ import annotations

import json

import click

from specreplay.settings.config import ReplayConfig
from specreplay.settings.config_file import stored_runs, to_toml
from specreplay.errors import ConfigError
from specreplay.results.files import CONFIG_KEY, RUNS_KEY, read_table


def configs_of(path: str) -> tuple[list[ReplayConfig], list[dict[str, object]]]:
    """The runs recorded in a results file: as configs, and as stored."""
    try:
        table = read_table(path)
    except (FileNotFoundError, OSError) as e:
        raise click.ClickException(str(e)) from None
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    text = meta.get(RUNS_KEY) or ("[" + meta[CONFIG_KEY] + "]" if CONFIG_KEY in meta else None)
    if text is None:
        raise click.ClickException(f"{path}: not a specreplay results file (no recorded configuration)")
    stored = json.loads(text)
    try:
        return stored_runs(stored, path), stored
    except ConfigError as e:
        raise click.ClickException(str(e)) from None


@click.group("config")
def config_group() -> None:
    """Benchmark configuration files."""


@config_group.command("show")
@click.argument("results", type=click.Path(dir_okay=False))
def show(results: str) -> None:
    """Print the fully resolved configuration RESULTS was run with, as a
    config file (`specreplay replay --config` runs it again)."""
    configs, _ = configs_of(results)
    click.echo(to_toml(configs), nl=False)
