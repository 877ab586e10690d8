"""`specreplay rerun RESULTS`: the same benchmark again."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import click

from specreplay.commands.config import configs_of
from specreplay.commands.replay import run_and_report
from specreplay.samples import trace_path


@click.command()
@click.argument("results", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Results file of the new run (default: RESULTS with -rerun).")
@click.option("--force", is_flag=True, help="Run even if the trace file changed since RESULTS was recorded.")
@click.option("--per-request", is_flag=True, help="Print one line per request.")
@click.option("--strict", is_flag=True, help="Exit non-zero when a validity check finds an error or warning.")
def rerun(results: str, output: str | None, force: bool, **opts: Any) -> None:
    """Run the benchmark recorded in RESULTS again: same trace, target,
    load, sweep, seed and options (the API key comes from the environment,
    as then). Under the same seed the schedule is the same."""
    configs, stored = configs_of(results)
    for config, recorded in zip(configs, stored):
        trace = Path(trace_path(config.trace))
        if not trace.is_file():
            raise click.ClickException(f"{results}: the trace {config.trace} it was run with is not here")
        digest = hashlib.sha256(trace.read_bytes()).hexdigest()
        if recorded.get("trace_sha256") not in (None, digest) and not force:
            raise click.ClickException(
                f"{config.trace} changed since {results} was recorded (sha256 differs): "
                "a rerun would replay a different workload. Use --force to run it anyway."
            )
        config.output = output or str(Path(results).with_name(Path(results).stem + "-rerun.arrow"))
        config.resolve_api_key()
    run_and_report(configs, per_request=opts["per_request"], strict=opts["strict"])
