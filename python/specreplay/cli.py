"""The `specreplay` command line. Each subcommand lives in
`specreplay.commands` and is a thin shell over a module that does the work,
so everything is reachable from Python too."""

from __future__ import annotations

from typing import Any

import click

from specreplay import __version__
from specreplay.errors import SpecreplayError
from specreplay.commands.calibrate import calibrate
from specreplay.commands.compare import compare
from specreplay.commands.config import config_group
from specreplay.commands.init import init
from specreplay.commands.capture import capture
from specreplay.commands.import_trace import import_cmd
from specreplay.commands.replay import replay
from specreplay.commands.report import report
from specreplay.commands.rerun import rerun
from specreplay.commands.serve import serve
from specreplay.commands.synth import synth

class SpecreplayGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        # A user's mistake (a bad trace, config or URL) is one line, not a
        # traceback; --debug shows the traceback.
        try:
            return super().invoke(ctx)
        except (SpecreplayError, OSError) as e:
            if ctx.meta.get("specreplay.debug"):
                raise
            raise click.ClickException(str(e)) from None


@click.group(cls=SpecreplayGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="specreplay")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Replay LLM request traces against inference servers, measured in Rust.

    Start with: specreplay replay traces/reasoning-prompts.jsonl --rate 8

    Traces: record your own traffic with `specreplay capture`, convert public
    traces with `specreplay import`, make one with `specreplay synth`.
    """
    ctx.meta["specreplay.debug"] = debug


cli.add_command(replay)
cli.add_command(rerun)
cli.add_command(config_group)
cli.add_command(init)
cli.add_command(serve)
cli.add_command(capture)
cli.add_command(import_cmd)
cli.add_command(synth)
cli.add_command(compare)
cli.add_command(calibrate)
cli.add_command(report)


def main(**kwargs: Any) -> None:
    cli(**kwargs)
