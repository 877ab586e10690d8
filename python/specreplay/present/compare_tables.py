"""The comparison's tables with rich (`specreplay compare`): one per
compared run and sweep point (`print_comparison`), and the capacity
searches' answers against each other (`print_capacity_comparison`). The
formatting of single figures is `console`'s."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table
from rich.text import Text

from specreplay.analysis.resampling import samples_needed
from specreplay.analysis.verdicts import FASTER, NA, SAME, SLOWER
from specreplay.present.console import MISSING, missing, fmt_value


VERDICT_STYLES: dict[str, str] = {FASTER: "bold green", SLOWER: "bold red", SAME: "dim", NA: "dim"}


def figure_name(row: pd.Series) -> str:
    """A compared figure's name, with its unit when it is a time: `TTFT p50 ms`."""
    return f"{row['name']} {row['unit']}" if row["unit"] in ("ms", "s") else str(row["name"])


def fmt_change(value: Any) -> str:
    """A relative change as a signed percentage: +12.3%, −4.0%."""
    return MISSING if missing(value) else f"{float(value):+.1%}"


def comparison_footnote(rows: pd.DataFrame, confidence: float = 0.95) -> str:
    """How a table's false verdicts are controlled, for its footnote."""
    judged = int(rows["p_adjusted"].notna().sum()) if "p_adjusted" in rows else 0
    return (
        f"verdicts: Holm–Bonferroni over the {judged} judged figures of this table, so an A/A table says "
        f"faster/slower with at most {1 - confidence:.0%} chance; a percentile is judged with at least "
        f"{samples_needed(0.5)} units (requests, or sessions) for a p50, {samples_needed(0.9)} for a p90, "
        f"{samples_needed(0.99)} for a p99 (docs/compare.md)"
    )


def print_comparison(console: Console, frame: pd.DataFrame, confidence: float = 0.95) -> None:
    """A `comparison.compare` frame: one table per compared run and sweep
    point, with the base's figure, the run's, the change, its interval and
    the verdict."""
    for (base, run, point), rows in frame.groupby(["base", "run", "point"], sort=False):
        first = rows.iloc[0]
        pairing = "paired by trace id" if bool(first["paired"]) else "unpaired (different traces)"
        repeats = int(first["repeats"]) if "repeats" in rows and not missing(first["repeats"]) else 1
        if repeats > 1:
            pairing = f"{repeats} interleaved repeats, interval from the variation between them"
        heading = (
            f"{run} vs {base}  ·  {point}  ·  {int(first['requests'])} vs {int(first['base_requests'])} ok requests  ·  {pairing}"
        )
        table = Table(title=Text(heading, style="bold"), title_justify="left")
        table.add_column("metric")
        table.add_column(str(base), justify="right")
        table.add_column(str(run), justify="right")
        table.add_column("change", justify="right")
        table.add_column(f"{confidence:.0%} CI", justify="right")
        table.add_column("verdict")
        for _, row in rows.iterrows():
            interval = MISSING if missing(row["ci_low"]) else f"[{fmt_change(row['ci_low'])}, {fmt_change(row['ci_high'])}]"
            table.add_row(
                figure_name(row),
                fmt_value(row["base_value"], row["unit"]),
                fmt_value(row["value"], row["unit"]),
                fmt_change(row["change"]),
                interval,
                Text(str(row["verdict"]), style=VERDICT_STYLES.get(str(row["verdict"]), "")),
            )
        console.print(table)
        console.print(Text(comparison_footnote(rows, confidence), style="dim"))
        console.print()


def print_capacity_comparison(console: Console, rows: Sequence[Mapping[str, Any]]) -> None:
    """`capacity_compare.compare_answers` rows: each run's highest rate holding the
    SLOs and its first failure against the base's, the change, the range the
    searches' brackets allow, and the verdict."""
    for slo, group in groupby_key(rows, "slo"):
        table = Table(title=Text(f"capacity at the SLOs: {slo}", style="bold"), title_justify="left")
        for name in ("run", "base", "max rate req/s", "first failure req/s", "change", "brackets allow", "verdict"):
            table.add_column(name, justify="left" if name in ("run", "base", "verdict") else "right")
        for row in group:
            change = row["change"]
            allowed = MISSING
            if not missing(change):
                high = row["change_high"]
                allowed = f"[{fmt_change(row['change_low'])}, {'+∞' if math.isinf(high) else fmt_change(high)}]"
            table.add_row(
                Text(str(row["run"])),
                Text(str(row["base"])),
                f"{_rate(row['max_rate'])} vs {_rate(row['base_max_rate'])}",
                f"{_rate(row['first_failure'])} vs {_rate(row['base_first_failure'])}",
                fmt_change(change),
                allowed,
                Text(str(row["verdict"]), style={"more capacity": "bold green", "less capacity": "bold red"}.get(str(row["verdict"]), "dim")),
            )
        console.print(table)
    console.print(
        Text(
            "max rate: the highest rate whose targets held with confidence on a valid point; first failure: the lowest that did not. "
            "Each search's limit lies between the two, so the change lies in the range the brackets allow (docs/capacity.md).",
            style="dim",
        )
    )
    console.print()


def groupby_key(rows: Sequence[Mapping[str, Any]], key: str) -> list[tuple[Any, list[Mapping[str, Any]]]]:
    """`rows` grouped by `rows[i][key]`, in order of first appearance."""
    groups: dict[Any, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row[key], []).append(row)
    return list(groups.items())


def _rate(value: Any) -> str:
    return MISSING if missing(value) else f"{float(value):g}"
