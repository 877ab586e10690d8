"""The `specreplay` command line. Each subcommand lives in
`specreplay.commands` and is a thin shell over a module that does the work,
so everything is reachable from Python too."""

from __future__ import annotations

import importlib
import os
from typing import Any

import click

from specreplay.errors import EXIT_INTERRUPTED, SpecreplayError

#: name -> (module, attribute, one-line help). A command's module is imported
#: only when the command runs (or its own --help is asked for), so that
#: `specreplay --help` imports neither pandas, pyarrow, numpy nor the
#: extension. tests/test_cli_startup.py checks each line against the
#: command's own help.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "replay": ("specreplay.commands.replay", "replay", "Replay TRACE against a server (or the embedded simulator) and measure it."),
    "rerun": ("specreplay.commands.rerun", "rerun", "Run the benchmark recorded in RESULTS again: same trace, target, load, sweep, seed and options (the API key comes from the environment, as then)."),
    "config": ("specreplay.commands.config", "config_group", "Benchmark configuration files."),
    "init": ("specreplay.commands.init", "init", "Write a commented starter config."),
    "serve": ("specreplay.commands.serve", "serve", "Serve the simulated reasoning model (OpenAI-compatible chat and completions, the Responses and Anthropic Messages APIs, embeddings, rerank and score) until Ctrl-C."),
    "capture": ("specreplay.commands.capture", "capture", "Record the requests applications send: a transparent proxy in front of UPSTREAM."),
    "import": ("specreplay.commands.import_trace", "import_cmd", "Convert a public trace FILE of FORMAT into a specreplay trace."),
    "synth": ("specreplay.commands.synth", "synth", "Write a synthetic trace: arrival process, length distributions, shared-prefix groups, multi-turn sessions."),
    "compare": ("specreplay.commands.compare", "compare", "Compare runs with the first one (the base): per sweep point in both, TTFT, TTFC, TPOT, ITL and E2E (p50, p90, p99) and tokens/s, each with its change, a bootstrap confidence interval, and a verdict: faster, slower, or no significant difference."),
    "calibrate": ("specreplay.commands.calibrate", "calibrate", "Fit the server model to RUNS (results files of real replays, with the server's metrics scraped): prefill cost per prompt token and per cached token, the decode step against the batch, the batch and KV limits, delivery, speculative acceptance by position, and output lengths per API."),
    "report": ("specreplay.commands.report", "report", "Write an HTML report of RUN (a results file, or FILE:LABEL): validity findings at the top, configuration, summary, and charts (latency CDFs, TPOT and throughput over time, tokens per chunk, TTFT against prompt length, send lag)."),
}


class SpecreplayGroup(click.Group):
    """The commands of COMMANDS, each imported when it is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attribute, _help = COMMANDS[cmd_name]
        command: click.Command = getattr(importlib.import_module(module), attribute)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click's own would import every command for its one-line help.
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [(name, click.Command(name, help=COMMANDS[name][2]).get_short_help_str(limit)) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        # A user's mistake (a bad trace, config or URL) is one line, not a
        # traceback; --debug shows the traceback.
        try:
            return super().invoke(ctx)
        except (SpecreplayError, OSError) as e:
            if ctx.meta.get("specreplay.debug"):
                raise
            raise click.ClickException(str(e)) from None
        except KeyboardInterrupt:
            # Where a command has something to keep (a replay's finished
            # rows), it handles Ctrl-C itself; elsewhere the shell's usual
            # 128 + SIGINT, not click's "Aborted!" and 1.
            click.echo("interrupted", err=True)
            raise SystemExit(EXIT_INTERRUPTED) from None


@click.group(cls=SpecreplayGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="specreplay", prog_name="specreplay")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Replay LLM request traces against inference servers, measured in Rust.

    Start with: specreplay replay sample:reasoning-prompts --rate 8

    Traces: record your own traffic with `specreplay capture`, convert public
    traces with `specreplay import`, make one with `specreplay synth`.
    """
    ctx.meta["specreplay.debug"] = debug


def limit_blas_threads() -> None:
    """One OpenBLAS thread, unless the user's environment says otherwise; to
    take effect, before numpy is imported.

    numpy's OpenBLAS starts a worker thread per core at import, which spins
    for its first work: 50 ms of CPU at numpy's import, 0.14 s by pandas'
    end, on a 2-core box (docs/benchmarks.md, "Start-up"), on the cores the
    engine measures with. The analysis's matrices are a few thousand rows
    (the calibration's fits): one thread does them."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main(**kwargs: Any) -> None:
    """The `specreplay` command: the process ends when it returns."""
    limit_blas_threads()
    try:
        cli(**kwargs)
    finally:
        # The interpreter's last collection would walk every object pandas,
        # pyarrow and the analysis made, to free memory the exit frees
        # anyway: 0.1 s of CPU a process (docs/benchmarks.md, "Whole-process
        # CPU and memory next to vllm-bench"). Frozen, they are left to the
        # exit; atexit handlers run and open files are closed as before.
        import gc

        gc.freeze()
