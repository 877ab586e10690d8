"""The report page: one self-contained HTML file.

Everything is inline (CSS, SVG charts, one small script), and a
Content-Security-Policy forbids loading anything else, so the page opens
offline and a stray external reference would show up as a console error.
The page holds no time of its own making: the same results give the same
bytes (the run's own start time, from the file, is shown).

The script only checks the page: once loaded it counts the charts that
rendered with a non-empty box and writes the count, the expected count and
any script error into attributes of `<html>` (`data-plots-rendered`,
`data-plots-expected`, `data-errors`), which a headless browser's
`--dump-dom` shows (the report tests read them).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from html import escape
from typing import Any

import pandas as pd

from specreplay import __version__
from specreplay.run import capacity_compare
from specreplay.present.compare_tables import figure_name, fmt_change
from specreplay.present.console import fmt_ms, fmt_rate, fmt_value
from specreplay.present.report import capacity as report_capacity
from specreplay.present.report import data, plots
from specreplay.analysis.summary_row import by_model
from specreplay.analysis.finding import Finding
from specreplay.analysis.verdicts import FASTER, SLOWER
from specreplay.results.files import MODEL_KEY, STARTED_AT_KEY, TARGET_KEY

CSS = """
:root { --fg:#1b1f24; --muted:#59636e; --line:#d1d9e0; --bg:#fff; --soft:#f6f8fa; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: var(--fg);
       background: var(--bg); margin: 0 auto; padding: 20px 28px 48px; max-width: 1260px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 10px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
.sub { color: var(--muted); margin: 0 0 12px; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; margin: 6px 0 14px; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: right; white-space: nowrap; }
th { background: var(--soft); font-weight: 600; } td.l, th.l { text-align: left; }
.scroll { overflow-x: auto; }
.finding { border-left: 4px solid; padding: 6px 10px; margin: 6px 0; background: var(--soft); }
.finding.error { border-color: #cf222e; background: #ffebe9; } .finding.warning { border-color: #bf8700; background: #fff8c5; }
.finding.note { border-color: #0969da; }
.banner { font-weight: 700; padding: 8px 12px; margin: 10px 0; }
.banner.error { background: #cf222e; color: #fff; } .banner.warning { background: #fff8c5; } .banner.ok { background: #dafbe1; }
.faster { color: #1a7f37; font-weight: 600; } .slower { color: #cf222e; font-weight: 600; } .same { color: var(--muted); }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 14px 22px; }
figure { margin: 0; } svg.plot { width: 100%; height: auto; display: block; }
svg.plot .title { font-size: 13px; font-weight: 600; fill: var(--fg); }
svg.plot .tick, svg.plot .legend { font-size: 11px; fill: var(--muted); } svg.plot .label { font-size: 12px; fill: var(--fg); }
svg.plot .empty { font-size: 13px; fill: var(--muted); }
svg.plot .area { fill: #fff; stroke: var(--line); } svg.plot .grid { stroke: #eef1f4; }
.tables { display: flex; flex-wrap: wrap; gap: 0 28px; }
.configs { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: 0 28px; }
h3 { font-size: 15px; margin: 12px 0 4px; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 6px 0 12px; }
dt { color: var(--muted); } dd { margin: 0; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12.5px; word-break: break-all; }
pre { background: var(--soft); padding: 10px; overflow-x: auto; font-size: 12px; }
"""

# Records script errors from the start (installed first in <head>).
ERROR_CAPTURE = """
window.__reportErrors = [];
window.addEventListener('error', function (e) { window.__reportErrors.push(String(e.message || e)); });
document.addEventListener('securitypolicyviolation', function (e) { window.__reportErrors.push('CSP blocked ' + e.blockedURI); });
(function () { var orig = console.error; console.error = function () {
  window.__reportErrors.push(Array.prototype.join.call(arguments, ' ')); return orig.apply(console, arguments); }; })();
"""

# Counts the charts that rendered (see the module doc).
CHECK = """
window.addEventListener('load', function () {
  var plots = document.querySelectorAll('svg.plot'), rendered = 0;
  for (var i = 0; i < plots.length; i++) {
    var box = plots[i].getBoundingClientRect();
    if (box.width > 100 && box.height > 100 && plots[i].querySelector('.series, .empty')) rendered++;
  }
  var root = document.documentElement;
  root.setAttribute('data-plots-rendered', String(rendered));
  root.setAttribute('data-plots-expected', root.getAttribute('data-plots'));
  root.setAttribute('data-resources', String(performance.getEntriesByType('resource').length));
  root.setAttribute('data-errors', JSON.stringify(window.__reportErrors));
});
"""

CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"

#: Summary table columns: (summary column, header, kind).
SUMMARY_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("requests", "requests", "int"),
    ("failed", "failed", "int"),
    ("duration_s", "duration s", "s"),
    ("achieved_rate_rps", "req/s", "rate2"),
    ("goodput_rps", "goodput req/s", "rate2"),
    ("ttft_p50_ms", "TTFT p50", "ms"),
    ("ttft_p99_ms", "TTFT p99", "ms"),
    ("ttfc_p50_ms", "TTFC p50", "ms"),
    ("ttfc_p99_ms", "TTFC p99", "ms"),
    ("tpot_p50_ms", "TPOT p50", "ms"),
    ("tpot_p99_ms", "TPOT p99", "ms"),
    ("itl_token_p50_ms", "ITL/token p50", "ms"),
    ("itl_chunk_p50_ms", "ITL/chunk p50", "ms"),
    ("e2e_p50_ms", "E2E p50", "ms"),
    ("e2e_p99_ms", "E2E p99", "ms"),
    ("send_lag_p99_ms", "send lag p99", "ms"),
    ("output_tok_s", "output tok/s", "rate"),
    ("content_tok_s", "content tok/s", "rate"),
    ("multi_token_chunks", "multi-token chunks", "pct"),
)


#: The server-metrics table (docs/results.md, "Server metrics"), when a run scraped them.
SERVER_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("spec_acceptance_rate", "acceptance rate", "pct"),
    ("spec_acceptance_length", "acceptance length (tok/step)", "x2"),
    ("decode_chunk_tokens_mean", "client tok/chunk after the first", "x2"),
    ("spec_draft_len", "drafts/step", "g3"),
    ("spec_drafts_per_s", "steps/s", "rate"),
    ("server_running_mean", "running mean", "g3"),
    ("server_running_max", "running max", "g3"),
    ("server_waiting_mean", "waiting mean", "g3"),
    ("server_waiting_max", "waiting max", "g3"),
    ("server_kv_usage_mean", "KV usage mean", "pct"),
    ("server_kv_usage_max", "KV usage max", "pct"),
    ("server_prefix_hit_rate", "prefix-cache hits", "pct"),
    ("server_preemptions", "preemptions", "int"),
    ("server_scrapes", "scrapes", "int"),
)


def _fmt(value: Any, kind: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if kind == "int":
        return str(int(value))
    if kind == "s":
        return f"{float(value):.1f}"
    if kind == "rate2":
        return fmt_rate(value, 2)
    if kind == "rate":
        return fmt_rate(value)
    if kind == "pct":
        return f"{float(value):.0%}"
    if kind == "x2":
        return f"{float(value):.2f}"
    if kind == "g3":
        return f"{float(value):.3g}"
    return fmt_ms(value)


def _findings(runs: list[data.RunData]) -> str:
    out = []
    for r in runs:
        found = r.run.findings
        errors = [f for f in found if f.level == "error"]
        warnings = [f for f in found if f.level == "warning"]
        notes = [f for f in found if f.level == "note"]
        name = escape(r.name)
        if errors:
            out.append(f'<div class="banner error">{name}: INVALID MEASUREMENT — {len(errors)} error(s), {len(warnings)} warning(s): read before using any figure</div>')
        elif warnings:
            out.append(f'<div class="banner warning">{name}: {len(warnings)} measurement warning(s)</div>')
        else:
            out.append(f'<div class="banner ok">{name}: validity checks found no errors or warnings</div>')
        out += [_finding(f) for f in errors + warnings]
        if notes:
            out.append(f"<details><summary>{len(notes)} note(s) on how to read some figures</summary>")
            out += [_finding(f) for f in notes]
            out.append("</details>")
    return "\n".join(out)


def _finding(f: Finding) -> str:
    return (
        f'<div class="finding {escape(f.level)}"><b>{escape(f.level.upper())}</b> {escape(f.point)} · '
        f"<code>{escape(f.code)}</code>: {escape(f.message)}</div>"
    )


def _summary_table(runs: list[data.RunData], columns: tuple[tuple[str, str, str], ...] = SUMMARY_COLUMNS, note: str = "Latencies in ms") -> str:
    table = _point_rows(runs, columns, lambda row: True)
    return f'<div class="scroll">{table}</div><p class="sub">{escape(note)}; definitions in docs/results.md.</p>'


#: (summary column, header, format) of the sessions table, shown when a run had sessions.
SESSION_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("sessions", "sessions", "int"),
    ("sessions_completed", "completed", "int"),
    ("turns_per_session", "turns each", "rate"),
    ("session_duration_p50_s", "duration p50 s", "rate2"),
    ("session_duration_p90_s", "duration p90 s", "rate2"),
    ("skipped", "turns skipped", "int"),
    ("turn_lag_p99_ms", "later-turn send lag p99", "ms"),
)


def _sessions_table(runs: list[data.RunData]) -> str:
    """The session figures of the points that had sessions ("" when none had)."""
    table = _point_rows(runs, SESSION_COLUMNS, lambda row: bool(int(row.get("sessions", 0) or 0)))
    if not table:
        return ""
    return (
        f'<h3>Sessions</h3><div class="scroll">{table}</div>'
        '<p class="sub">Each session\'s turns sent one after the other (docs/sessions.md); durations of completed sessions; '
        "TTFT by turn is charted under Plots.</p>"
    )


#: (summary column, header, format) of the request-kinds table, shown when a
#: run had tool calls, media, embeddings or rerank requests.
KIND_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("tool_call_requests", "tool-call requests", "int"),
    ("tool_call_tok_s", "tool-call tok/s", "rate"),
    ("media_requests", "media requests", "int"),
    ("ttft_media_p50_ms", "TTFT p50 with media", "ms"),
    ("ttft_text_p50_ms", "TTFT p50 without", "ms"),
    ("embeddings_requests", "embeddings", "int"),
    ("embeddings_e2e_p50_ms", "emb. E2E p50", "ms"),
    ("embeddings_e2e_p99_ms", "emb. E2E p99", "ms"),
    ("embeddings_items_s", "emb. items/s", "rate"),
    ("embeddings_input_tok_s", "emb. input tok/s", "rate"),
    ("rerank_requests", "rerank", "int"),
    ("rerank_e2e_p50_ms", "rerank E2E p50", "ms"),
    ("rerank_e2e_p99_ms", "rerank E2E p99", "ms"),
    ("rerank_items_s", "rerank items/s", "rate"),
    ("rerank_input_tok_s", "rerank input tok/s", "rate"),
)


def _kinds_table(runs: list[data.RunData]) -> str:
    """The request kinds' figures, and per model, of the points that had them ("" when none had)."""
    counts = ("tool_call_requests", "media_requests", "embeddings_requests", "rerank_requests")
    table = _point_rows(runs, KIND_COLUMNS, lambda row: any(int(row.get(c, 0) or 0) for c in counts))
    model_rows = []
    for r in runs:
        for p in r.points:
            for m in by_model(p.analysis):
                cells = "".join(f"<td>{_fmt(m[c], kind)}</td>" for c, kind in (
                    ("requests", "int"), ("ok", "int"), ("ttft_p50_ms", "ms"), ("ttft_p99_ms", "ms"),
                    ("tpot_p50_ms", "ms"), ("e2e_p50_ms", "ms"), ("output_tok_s", "rate")))
                model_rows.append(f'<tr><td class="l">{escape(r.name)}</td><td class="l">{escape(p.point)}</td><td class="l">{escape(m["model"])}</td>{cells}</tr>')
    out = ""
    if table:
        out += (
            f'<h3>Request kinds</h3><div class="scroll">{table}</div>'
            '<p class="sub">Embeddings and rerank are not streamed: their latency is E2E, and they are left out of the TTFT, TPOT '
            "and E2E columns above (docs/results.md, \"Request kinds\").</p>"
        )
    if model_rows:
        head = "".join(f"<th>{h}</th>" for h in ("requests", "ok", "TTFT p50", "TTFT p99", "TPOT p50", "E2E p50", "output tok/s"))
        out += (
            f'<h3>Per model</h3><div class="scroll"><table><tr><th class="l">run</th><th class="l">point</th><th class="l">model</th>{head}</tr>'
            f"{''.join(model_rows)}</table></div>"
        )
    return out


def _point_rows(runs: list[data.RunData], columns: tuple[tuple[str, str, str], ...], keep: Callable[[pd.Series], bool]) -> str:
    """A table of `columns` of the summary rows `keep` keeps, one per run and point ("" when none)."""
    rows = []
    for r in runs:
        for _, row in r.summary.iterrows():
            if keep(row):
                cells = "".join(f"<td>{_fmt(row.get(c), kind)}</td>" for c, _, kind in columns)
                rows.append(f'<tr><td class="l">{escape(r.name)}</td><td class="l">{escape(str(row["point"]))}</td>{cells}</tr>')
    if not rows:
        return ""
    head = '<tr><th class="l">run</th><th class="l">point</th>' + "".join(f"<th>{escape(h)}</th>" for _, h, _ in columns) + "</tr>"
    return f"<table>{head}{''.join(rows)}</table>"


def _comparison_table(frame: pd.DataFrame, confidence: float) -> str:
    out = []
    for (base, run, point), rows in frame.groupby(["base", "run", "point"], sort=False):
        first = rows.iloc[0]
        pairing = "paired by trace id" if bool(first["paired"]) else "unpaired"
        out.append(
            f"<div><h3>{escape(str(run))} vs {escape(str(base))} · {escape(str(point))} "
            f'</h3><p class="sub">{int(first["requests"])} vs {int(first["base_requests"])} ok requests, {pairing}</p>'
        )
        head = f'<tr><th class="l">metric</th><th>{escape(str(base))}</th><th>{escape(str(run))}</th><th>change</th><th>{confidence:.0%} CI</th><th class="l">verdict</th></tr>'
        body = []
        for _, row in rows.iterrows():
            name = figure_name(row)
            interval = "—" if pd.isna(row["ci_low"]) else f"[{fmt_change(row['ci_low'])}, {fmt_change(row['ci_high'])}]"
            verdict = str(row["verdict"])
            css = verdict if verdict in (FASTER, SLOWER) else "same"
            body.append(
                f'<tr><td class="l">{escape(name)}</td><td>{fmt_value(row["base_value"], row["unit"])}</td><td>{fmt_value(row["value"], row["unit"])}</td>'
                f'<td>{fmt_change(row["change"])}</td><td>{interval}</td><td class="l {css}">{escape(verdict)}</td></tr>'
            )
        out.append(f"<table>{head}{''.join(body)}</table></div>")
    return '<div class="tables">' + "\n".join(out) + "</div>"


def _config(runs: list[data.RunData]) -> tuple[str, str]:
    """(key facts per run, full configurations as JSON)."""
    facts, full = [], []
    for r in runs:
        config = r.run.config
        scheduling = data.scheduling_fact(r.run)
        shown = data.config_facts(config) + ([("scheduling", scheduling)] if scheduling else [])
        items = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in shown)
        facts.append(f"<div><h3>{escape(r.name)}</h3><dl>{items or '<dt>—</dt><dd>no configuration recorded</dd>'}</dl></div>")
        full.append(f"<h3>{escape(r.name)}</h3><pre>{escape(json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False))}</pre>")
    return '<div class="configs">' + "\n".join(facts) + "</div>", "\n".join(full)


def render(runs: list[data.RunData], comparison: pd.DataFrame | None = None, confidence: float = 0.95) -> str:
    """The whole page for `runs` (the first is the base when `comparison` is given)."""
    names = [r.name for r in runs]
    title = f"{names[-1]} vs {names[0]}" if comparison is not None and len(names) == 2 else ", ".join(names)
    attrs = runs[0].run.df.attrs
    meta = [
        ("files", ", ".join(dict.fromkeys(str(r.run.path) for r in runs if r.run.path)) or "—"),
        ("model", attrs.get(MODEL_KEY) or "—"),
        ("target", attrs.get(TARGET_KEY) or "—"),
        ("started", attrs.get(STARTED_AT_KEY) or "—"),
        ("recorded by", f"specreplay {attrs.get('specreplay.version', '?')}; report by specreplay {__version__}"),
    ]
    charts = plots.all_plots(runs)
    answers = [capacity_compare.answer_of(r.run) for r in runs]
    capacity_charts = report_capacity.charts(runs, answers) if report_capacity.shown(runs) else []
    facts, full = _config(runs)
    sections = [
        f"<h1>specreplay report: {escape(title)}</h1>",
        '<p class="sub">' + " · ".join(f"{escape(k)}: {escape(v)}" for k, v in meta) + "</p>",
        "<h2>Validity</h2>",
        _findings(runs),
        "<h2>Configuration</h2>",
        facts,
        "<h2>Summary</h2>",
        _summary_table(runs),
        _sessions_table(runs),
        _kinds_table(runs),
    ]
    if data.has_server_metrics(runs):
        note = "From the server's own /metrics, scraped during each point (counters over the point, gauges over its scrapes)"
        sections += ['<h2 id="server">Server metrics</h2>', _summary_table(runs, SERVER_COLUMNS, note)]
    sections += [
        '<h2 id="plots">Plots</h2>',
        '<div class="grid">' + "".join(f'<figure id="{pid}">{svg}</figure>' for pid, svg in charts) + "</div>",
    ]
    if capacity_charts:
        sections += [
            '<h2 id="capacity">Capacity</h2>',
            '<p class="sub">SLO targets against the offered rate, goodput, and what each capacity search found (docs/capacity.md).</p>',
            report_capacity.answers_html(runs, answers),
            '<div class="grid">' + "".join(f'<figure id="{pid}">{svg}</figure>' for pid, svg in capacity_charts) + "</div>",
        ]
    if comparison is not None and not comparison.empty:
        sections += [
            "<h2>Comparison</h2>",
            f'<p class="sub">change = run / base − 1, with a {confidence:.0%} bootstrap interval over requests'
            + (" (over sessions for the session durations)" if (comparison["unit"] == "s").any() else "")
            + "; faster/slower only when the figure's p-value, Holm–Bonferroni-adjusted over the figures of its table, "
            + f"is under {1 - confidence:.0%} and the change is large enough (docs/compare.md).</p>",
            _comparison_table(comparison, confidence),
        ]
    sections += [
        "<h2>Full configuration</h2>",
        f"<details><summary>as recorded in the results file</summary>{full}</details>",
    ]
    body = "\n".join(sections)
    return (
        f'<!DOCTYPE html>\n<html lang="en" data-plots="{len(charts) + len(capacity_charts)}">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>specreplay report: {escape(title)}</title>\n<script>{ERROR_CAPTURE}</script>\n<style>{CSS}</style>\n</head>\n"
        f"<body>\n{body}\n<script>{CHECK}</script>\n</body>\n</html>\n"
    )
