"""`specreplay compare BASE RUN [RUN …]`: is this run faster than that one?

Each argument is a results file (every run it holds, in run order) or
`FILE:LABEL` (one named run of it). The first run is the base; every other
run is compared with it (`specreplay.comparison.compare` has the method).
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict
from typing import Any

import click
import pandas as pd
from rich.console import Console
from rich.text import Text

from specreplay.run import capacity_compare
from specreplay.comparison import compare as comparison
from specreplay.comparison.compare import Run
from specreplay.present.compare_tables import print_capacity_comparison, print_comparison
from specreplay.present.console import cli_console, print_findings
from specreplay.errors import EXIT_INVALID


def load_runs(specs: tuple[str, ...]) -> list[Run]:
    try:
        runs = comparison.resolve(list(specs))
    except (FileNotFoundError, ValueError, OSError) as e:
        raise click.ClickException(str(e)) from None
    if len(runs) < 2:
        raise click.UsageError(
            "nothing to compare: give a base and at least one other run "
            "(two files, a file holding several runs, or FILE:LABEL)"
        )
    return runs


def gate(runs: list[Run], force: bool, err: Console) -> None:
    """Checks the runs (`comparison.gate`, the one gate `compare` uses too),
    prints what the checks found, and exits unless every run is valid or
    `force`."""
    invalid = comparison.gate(runs)
    for run in runs:
        shown = [f for f in run.findings if f.level != "note"]
        notes = len(run.findings) - len(shown)
        if shown:
            err.print(Text(f"{run.name}:", style="bold"))
            print_findings(err, shown)
        if notes:
            err.print(Text(f"{run.name}: {notes} note(s) (how to read some figures; `specreplay replay` prints them)", style="dim"))
    if not invalid:
        return
    if not force:
        err.print(Text(comparison.invalid_message(invalid).replace("force the comparison", "use --force"), style="bold red"))
        sys.exit(EXIT_INVALID)
    err.print(Text(f"--force: comparing anyway; the figures of {', '.join(r.name for r in invalid)} are not valid", style="bold red"))


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item"):  # numpy scalars
        return _jsonable(value.item())
    return value


def capacity_rows(runs: list[Run]) -> list[dict[str, Any]]:
    """How the capacity of every run that searched compares with the base's
    (`capacity_compare.compare_answers`), when the base searched too."""
    base, base_answer = runs[0], capacity_compare.answer_of(runs[0])
    if base_answer is None:
        return []
    rows = []
    for other in runs[1:]:
        found = capacity_compare.answer_of(other)
        if found is not None:
            rows.append(capacity_compare.compare_answers(base.name, base_answer, other.name, found, base.analysis.slo, other.analysis.slo))
    return rows


def to_json(runs: list[Run], frame: pd.DataFrame, forced: bool, options: dict[str, Any], capacity_changes: list[dict[str, Any]] | None = None) -> str:
    """The comparison for scripts: the runs (with their findings), one
    object per compared figure (the columns of `comparison.COLUMNS`), and
    one per capacity comparison (`capacity_compare.CAPACITY_COLUMNS`)."""
    document = {
        "base": runs[0].name,
        "options": options,
        "forced": forced,
        "runs": [
            {"name": r.name, "path": r.path, "label": r.label, "valid": r.valid, "findings": [asdict(f) for f in r.findings]}
            for r in runs
        ],
        "comparisons": [{k: _jsonable(v) for k, v in row.items()} for row in frame.to_dict(orient="records")],
        "capacity": [{k: None if isinstance(v, float) and math.isinf(v) else _jsonable(v) for k, v in row.items()} for row in capacity_changes or []],
    }
    return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False)


@click.command()
@click.argument("runs", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (runs, findings, one object per figure) instead of tables.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV, one line per figure, instead of tables.")
@click.option("--force", is_flag=True, help="Compare even runs whose validity checks found errors.")
@click.option("--confidence", type=click.FloatRange(0.5, 0.999), default=comparison.CONFIDENCE, show_default=True, help="Confidence level of the intervals.")
@click.option("--resamples", type=click.IntRange(100), default=comparison.RESAMPLES, show_default=True, help="Bootstrap resamples.")
@click.option("--seed", type=int, default=comparison.SEED, show_default=True, help="Seed of the bootstrap (same seed, same intervals).")
@click.option("--min-change", type=click.FloatRange(0.0, 1.0), default=comparison.MIN_CHANGE, show_default=True, help="Smallest change called faster/slower (0.02 = 2%).")
def compare(runs: tuple[str, ...], as_json: bool, as_csv: bool, force: bool, **options: Any) -> None:
    """Compare runs with the first one (the base): per sweep point in both,
    TTFT, TTFC, TPOT, ITL and E2E (p50, p90, p99) and tokens/s, each with
    its change, a bootstrap confidence interval, and a verdict: faster,
    slower, or no significant difference.

    RUNS are results files (every run a file holds, in run order) or
    FILE:LABEL for one named run: `specreplay compare ab.arrow` compares a
    config file's A/B runs, `specreplay compare ab.arrow:ngram ab.arrow:baseline`
    picks the base. Runs whose validity checks found errors are refused
    unless --force. Two capacity searches (--find-max-rate) are compared on
    their answers too: the highest rate holding the SLOs, and whether one
    holds more load than the other (docs/capacity.md).
    """
    if as_json and as_csv:
        raise click.UsageError("--json and --csv: choose one")
    selected = load_runs(runs)
    err = cli_console(stderr=True)
    gate(selected, force, err)
    frame = comparison.compare_all(selected, **options)
    changes = capacity_rows(selected)
    if frame.empty and not changes:
        raise click.ClickException(f"no sweep point is in both {selected[0].name} and the other run(s)")
    if as_json:
        click.echo(to_json(selected, frame, force and not all(r.valid for r in selected), options, changes))
    elif as_csv:
        click.echo(frame.to_csv(index=False), nl=False)
    else:
        out = cli_console()
        if changes:
            print_capacity_comparison(out, changes)
        if frame.empty:
            return
        print_comparison(out, frame, options["confidence"])
        out.print(
            Text(
                f"change = run / base − 1; {options['confidence']:.0%} bootstrap interval over trace records "
                + ("(over sessions for the session durations; " if (frame["unit"] == "s").any() else "(")
                + f"{options['resamples']} resamples, seed {options['seed']}), each resample recomputing the whole figure, "
                "a rate's duration included; faster/slower when the figure's Holm-adjusted p-value is under "
                f"{1 - options['confidence']:.0%} and the change is at least {options['min_change']:.0%}.",
                style="dim",
            )
        )
