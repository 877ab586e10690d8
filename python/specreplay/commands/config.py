"""`specreplay config show RESULTS`: the configuration a results file recorded, as TOML."""

from __future__ import annotations

import click

from specreplay.settings.config import ReplayConfig
from specreplay.settings.config_file import stored_runs, to_toml
from specreplay.errors import ConfigError
from specreplay.results.files import read_table, stored_configs


def configs_of(path: str) -> tuple[list[ReplayConfig], list[dict[str, object]]]:
    """The runs recorded in a results file: as configs, and as stored."""
    try:
        table = read_table(path)
    except (FileNotFoundError, OSError) as e:
        raise click.ClickException(str(e)) from None
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    try:
        stored: list[dict[str, object]] = list(stored_configs(meta))
    except ValueError as e:
        raise click.ClickException(f"{path}: {e}") from None
    if not stored:
        raise click.ClickException(f"{path}: not a specreplay results file (no recorded configuration)")
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
