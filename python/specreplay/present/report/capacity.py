"""The report's capacity section: for runs with SLO targets over open-loop
rate points (a `--find-max-rate` search, or a rate sweep), each target's
figure against the offered rate with the target as a line, goodput against
the offered rate, a search's steps, and what each search found (compared
with the base's when there is one).

A chart is drawn only when at least one run has two rate points with
targets; otherwise the section is left out."""

from __future__ import annotations

import math
from html import escape

from specreplay.run import capacity, capacity_compare
from specreplay.present.report import data
from specreplay.present.report.svg import PALETTE, Series, xy
from specreplay.settings.objectives import Slo, SloTarget

#: Colours of a search step by how it went.
STEP_COLOURS = {capacity.HELD: "#1a7f37", "not held": "#cf222e", "no verdict": "#8c959f"}
SLO_LINE = "#59636e"


def _rate_points(r: data.RunData) -> list[data.PointData]:
    """The run's open-loop rate points, by rate."""
    points = [p for p in r.points if p.analysis.mode == "rate" and p.analysis.value is not None]
    return sorted(points, key=lambda p: float(p.analysis.value or 0.0))


def shown(runs: list[data.RunData]) -> bool:
    """Whether the section has anything to draw."""
    return any(r.run.analysis.slo.targets and len(_rate_points(r)) >= 2 for r in runs)


def _targets(runs: list[data.RunData]) -> list[tuple[SloTarget, Slo]]:
    """Every latency target of the runs, once (with the SLO that names it)."""
    out: dict[str, tuple[SloTarget, Slo]] = {}
    for r in runs:
        slo = r.run.analysis.slo
        for t in slo.targets:
            if not t.is_share:
                out.setdefault(t.text, (t, slo))
    return list(out.values())


def latency_vs_rate(runs: list[data.RunData], target: SloTarget, slo: Slo) -> str:
    series, rates = [], []
    for i, r in enumerate(runs):
        points = _rate_points(r)
        x, y = [], []
        for p in points:
            verdict = next((v for v in p.analysis.slo_verdicts if v.target == target), None)
            if verdict is not None:
                x.append(float(p.analysis.value or 0.0))
                y.append(verdict.value)
        rates += x
        series.append(Series(r.name, x, y, PALETTE[i % len(PALETTE)], "", "markers", 3.0))
    if rates:
        series.append(Series(f"SLO: {target.text}", [min(rates), max(rates)], [target.value, target.value], SLO_LINE, "6 4", "line"))
    name = f"{target.stat} {slo.label(target.metric)}"
    return xy(series, title=f"{name} against the offered rate (SLO dashed)", xlabel="offered rate, requests/s", ylabel=f"{name} ms", x_from_zero=True)


def goodput_vs_rate(runs: list[data.RunData]) -> str:
    series, rates = [], []
    for i, r in enumerate(runs):
        points = _rate_points(r)
        x = [float(p.analysis.value or 0.0) for p in points]
        y = [float(p.analysis.summary.get("goodput_rps", math.nan)) for p in points]
        rates += x
        series.append(Series(r.name, x, y, PALETTE[i % len(PALETTE)], "", "markers", 3.0))
    if rates:
        series.append(Series("offered (every request good)", [0.0, max(rates)], [0.0, max(rates)], SLO_LINE, "6 4", "line"))
    return xy(series, title="Goodput against the offered rate", xlabel="offered rate, requests/s", ylabel="requests/s that met every SLO", x_from_zero=True)


def search_steps(runs: list[data.RunData], answers: list[capacity.Answer | None]) -> str:
    series = []
    by_status: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in STEP_COLOURS}
    for i, (r, found) in enumerate(zip(runs, answers)):
        if found is None:
            continue
        steps = list(found.steps)
        x = [float(n + 1) for n in range(len(steps))]
        series.append(Series(f"{r.name}: rate of each step", x, [s.rate for s in steps], PALETTE[i % len(PALETTE)], "", "line"))
        for n, s in zip(x, steps):
            key = capacity.HELD if s.held else "no verdict" if s.status in (capacity.CUT, capacity.INVALID) else "not held"
            by_status[key][0].append(n)
            by_status[key][1].append(s.rate)
    names = {capacity.HELD: "held", "not held": "did not hold", "no verdict": "invalid or cut"}
    series += [Series(names[k], xs, ys, STEP_COLOURS[k], "", "points", 5.0) for k, (xs, ys) in by_status.items() if xs]
    return xy(series, title="The search's steps (bracket, then bisect)", xlabel="step", ylabel="offered rate, requests/s", x_from_zero=True)


def charts(runs: list[data.RunData], answers: list[capacity.Answer | None]) -> list[tuple[str, str]]:
    """(figure id, SVG) of the section's charts."""
    out = [(f"capacity-{i}", latency_vs_rate(runs, t, slo)) for i, (t, slo) in enumerate(_targets(runs))]
    out.append(("capacity-goodput", goodput_vs_rate(runs)))
    if any(a is not None for a in answers):
        out.append(("capacity-steps", search_steps(runs, answers)))
    return out


def answers_html(runs: list[data.RunData], answers: list[capacity.Answer | None]) -> str:
    """What each search found, in words, and the change against the base's."""
    out = []
    base_answer = answers[0] if answers else None
    for i, (r, found) in enumerate(zip(runs, answers)):
        if found is None:
            continue
        slo = r.run.analysis.slo
        items = "".join(f"<li>{escape(line)}</li>" for line in found.lines(slo))
        out.append(f"<div><h3>{escape(r.name)}: {escape(', '.join(t.text for t in slo.targets))}</h3><ul>{items}</ul></div>")
        if i > 0 and base_answer is not None:
            row = capacity_compare.compare_answers(runs[0].name, base_answer, r.name, found, runs[0].run.analysis.slo, slo)
            out.append(f'<p class="sub">{escape(change_text(row))}</p>')
    return "\n".join(out)


def change_text(row: dict[str, object]) -> str:
    """One line for a `capacity_compare.compare_answers` row."""
    change = row["change"]
    if not isinstance(change, float) or math.isnan(change):
        return f"{row['run']} vs {row['base']}: {row['verdict']}"
    low, high = float(row["change_low"]), float(row["change_high"])  # type: ignore[arg-type]
    high_text = "+∞" if math.isinf(high) else f"{high:+.0%}"
    return (
        f"{row['run']} vs {row['base']}: max rate {row['max_rate']:g} vs {row['base_max_rate']:g} req/s, "
        f"{change:+.0%} (the searches' brackets allow {low:+.0%} to {high_text}): {row['verdict']}"
    )
