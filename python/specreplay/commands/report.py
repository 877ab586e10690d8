"""`specreplay report RUN [--vs BASE] -o report.html`: one self-contained HTML page."""

from __future__ import annotations

from typing import Any

import click

from specreplay.comparison import compare as comparison
from specreplay.present import report as report_mod


@click.command()
@click.argument("run")
@click.option("--vs", "base", metavar="BASE", help="A base run to overlay and compare with (FILE or FILE:LABEL).")
@click.option("-o", "--output", default="report.html", show_default=True, type=click.Path(dir_okay=False), help="The HTML file to write.")
@click.option("--confidence", type=click.FloatRange(0.5, 0.999), default=comparison.CONFIDENCE, show_default=True, help="Confidence level of the comparison's intervals.")
@click.option("--resamples", type=click.IntRange(100), default=comparison.RESAMPLES, show_default=True, help="Bootstrap resamples.")
@click.option("--seed", type=int, default=comparison.SEED, show_default=True, help="Seed of the bootstrap.")
@click.option("--min-change", type=click.FloatRange(0.0, 1.0), default=comparison.MIN_CHANGE, show_default=True, help="Smallest change called faster/slower.")
def report(run: str, base: str | None, output: str, **options: Any) -> None:
    """Write an HTML report of RUN (a results file, or FILE:LABEL): validity
    findings at the top, configuration, summary, and charts (latency CDFs,
    TPOT and throughput over time, tokens per chunk, TTFT against prompt
    length, send lag). With --vs, BASE is overlaid and compared; a file
    holding several runs (a config file's A/B) is overlaid and compared with
    its first run. The file opens offline: nothing is loaded from anywhere."""
    try:
        report_mod.write(output, run, base, **options)
    except (FileNotFoundError, ValueError, OSError) as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"wrote {output}")
