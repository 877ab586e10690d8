"""`specreplay calibrate RUN.arrow [RUN2.arrow …] -o server.toml`: the server
model fitted to real runs, for `specreplay replay --predict` (docs/predict.md)."""

from __future__ import annotations

import click

from specreplay.run.calibrate.fit import calibrate as fit_runs
from specreplay.present.console import cli_console
from specreplay.errors import SpecreplayError


@click.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(dir_okay=False, exists=True))
@click.option("-o", "--output", default="server.toml", show_default=True, type=click.Path(dir_okay=False), help="The server model to write.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds the subsample of output lengths kept.")
def calibrate(runs: tuple[str, ...], output: str, seed: int) -> None:
    """Fit the server model to RUNS (results files of real replays, with the
    server's metrics scraped): prefill cost per prompt token and per cached
    token, the decode step against the batch, the batch and KV limits,
    delivery, speculative acceptance by position, and output lengths per
    API. Each parameter is written with its fit quality and sample count; one
    the runs cannot measure is written as unknown, with the run that would."""
    try:
        model = fit_runs(list(runs), seed)
    except (ValueError, OSError, SpecreplayError) as e:
        raise click.ClickException(str(e)) from None
    model.write(output)
    out = cli_console()
    cal = model.calibration
    out.print(f"calibrated from {len(runs)} run(s), {cal['requests']} requests, points {', '.join(cal['points'])}", highlight=False)
    for param in model.params.values():
        style = "yellow" if param.status == "unknown" else ""
        out.print(f"  {param.describe()}", style=style, highlight=False, markup=False)
    for api, cls in model.output.items():
        out.print(f"  output lengths ({api}): {cls['samples']} answers ({cls['cut_at_budget']} cut at the budget)", highlight=False)
    table = f", the decode step measured for batches of 1 to {cal['step_table_sizes']}" if cal.get("step_table_sizes") else ""
    out.print(f"range seen: up to {cal['max_in_flight']} requests in flight, {cal['max_decoding']} decoding at once{table}", highlight=False)
    out.print(f"wrote {output}", highlight=False)
