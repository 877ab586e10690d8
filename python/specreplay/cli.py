"""The `specreplay` command line. Each subcommand is a thin shell over a module
that does the work, so the same thing is reachable from Python."""

from __future__ import annotations

import click

from specreplay import __version__
from specreplay.serve import serve


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="specreplay")
def cli() -> None:
    """Replay LLM request traces against inference servers, measured in Rust."""


cli.add_command(serve)


def main() -> None:
    cli()
