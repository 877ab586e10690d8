"""The HTML report: one self-contained file with a run's configuration,
validity findings, summary, charts and (against a base run) the comparison.

- `data`: the numbers behind the page (summaries, plot-ready series);
- `svg`: a small SVG chart writer (no plotting library, no script needed);
- `plots`: the charts;
- `html`: the page.

`build(run, vs=None)` returns the page as a string; `specreplay report`
writes it to a file.
"""

from __future__ import annotations

import os
from typing import Any

import pandas as pd

from specreplay.comparison import compare as comparison
from specreplay.comparison.compare import Run
from specreplay.present.report import data, html

RunSpec = str | os.PathLike[str] | pd.DataFrame | Run


def runs_of(run: RunSpec | list[Run], vs: RunSpec | None = None) -> list[Run]:
    """The runs a report shows, base first: `vs`'s run then `run`'s, or every
    run of `run` (a file with several runs compares them with its first)."""
    selected = run if isinstance(run, list) else [run] if isinstance(run, Run) else comparison.select(run)
    if vs is None:
        return list(selected)
    base = [vs] if isinstance(vs, Run) else comparison.select(vs)
    if len(base) != 1:
        raise ValueError(f"--vs names several runs ({', '.join(r.label for r in base)}): pick one with FILE:LABEL")
    if base[0].name in {r.name for r in selected}:
        base[0].name = f"{base[0].name} (base)"
    return base + list(selected)


def build(run: RunSpec | list[Run], vs: RunSpec | None = None, **compare_options: Any) -> str:
    """The report page of `run` (against `vs` when given) as HTML. Validity
    findings are shown at the top, never a reason to refuse: the page says
    when a figure is not to be trusted. `compare_options` go to
    `comparison.compare_runs` (confidence, resamples, seed, min_change)."""
    runs = runs_of(run, vs)
    if len({r.name for r in runs}) < len(runs):
        for r in runs:
            r.name = f"{r.path}:{r.label}" if r.path else r.label
    prepared = [data.prepare(r) for r in runs]
    for r in runs:
        comparison.validate(r)
    table = comparison.compare_all(runs, **compare_options) if len(runs) > 1 else None
    return html.render(prepared, table, compare_options.get("confidence", comparison.CONFIDENCE))


def write(path: str | os.PathLike[str], run: RunSpec | list[Run], vs: RunSpec | None = None, **compare_options: Any) -> str:
    """`build` written to `path` (UTF-8); returns the page."""
    page = build(run, vs, **compare_options)
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
    return page
