"""The `specreplay` command line. Each subcommand lives in
`specreplay.commands` and is a thin shell over a module that does the work,
so everything is reachable from Python too."""

from __future__ import annotations

import re
from typing import Any

import click

from specreplay import __version__
from specreplay.commands.compare import compare
from specreplay.commands.config import config_group
from specreplay.commands.init import init
from specreplay.commands.replay import replay
from specreplay.commands.report import report
from specreplay.commands.rerun import rerun
from specreplay.commands.serve import serve

#: Options that take a list of numbers: `--rate 1 2 4` is read as
#: `--rate 1 --rate 2 --rate 4` (click options take one value each).
LIST_OPTIONS = frozenset({"--rate", "--speedup", "--concurrency"})
_NUMBER = re.compile(r"^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$")


def expand_list_options(args: list[str]) -> list[str]:
    out: list[str] = []
    current: str | None = None  # the list option whose values are being read
    emitted = False  # whether `current` has been written out with a value
    for arg in args:
        if current is not None and _NUMBER.match(arg):
            out += [current, arg]
            emitted = True
            continue
        if current is not None and not emitted:
            out.append(current)  # no number followed: let click report it
        current = arg if arg in LIST_OPTIONS else None
        emitted = False
        if current is None:
            out.append(arg)
    if current is not None and not emitted:
        out.append(current)
    return out


class SpecreplayGroup(click.Group):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, expand_list_options(args))


@click.group(cls=SpecreplayGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="specreplay")
def cli() -> None:
    """Replay LLM request traces against inference servers, measured in Rust.

    Start with: specreplay replay traces/reasoning-prompts.jsonl --rate 8
    """


cli.add_command(replay)
cli.add_command(rerun)
cli.add_command(config_group)
cli.add_command(init)
cli.add_command(serve)
cli.add_command(compare)
cli.add_command(report)


def main(**kwargs: Any) -> None:
    cli(**kwargs)
