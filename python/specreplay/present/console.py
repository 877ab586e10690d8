"""Rendering the summary, the per-request listing and the validity findings
with rich. Every function takes the `Console` to print on, so the CLI, tests
(`Console(record=True)`) and notebooks choose where it goes; the CLI's come
from `cli_console`.

Text that comes from data (trace ids, error messages, findings) is passed as
`rich.text.Text`, never as markup: a `[` in a server's error must not be
parsed as a style tag.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

from specreplay.settings.latencies import LATENCIES
from specreplay.analysis.verdicts import FAILED, HELD, UNCERTAIN
from specreplay.analysis.finding import Finding
from specreplay.settings.objectives import Slo

if TYPE_CHECKING:
    # Annotations only; the analysis modules (pandas) are imported where used:
    # the console prints a replay's first lines before pandas is needed.
    import pandas as pd

    from specreplay.analysis.slo import TargetVerdict

# Summary prefix -> row label. TTFC is spelled out: it is the figure a user waits for.
LATENCY_LABELS: dict[str, str] = {latency.name: latency.label for latency in LATENCIES}
MISSING = "—"

#: The width of a CLI console whose output is not a terminal: wide enough that
#: no table is wrapped and no line split, so `grep` finds a whole line.
UNWRAPPED_WIDTH = 100_000


def cli_console(*, stderr: bool = False) -> Console:
    """A console for the CLI on stdout (or stderr). On a terminal, rich's own
    layout for its width. Anywhere else (a pipe, a file, a CI log) tables
    keep their natural width and lines are not wrapped: rich would otherwise
    wrap at 80 columns, and a verdict such as "no significant difference"
    split over two lines is one `grep` misses."""
    console = Console(stderr=stderr, emoji=False)  # no ":name:" is ours; data could hold one
    if not is_tty(console):
        console.width = UNWRAPPED_WIDTH
    return console


def is_tty(console: Console) -> bool:
    """Whether the console writes to a terminal (where a live display may redraw)."""
    # The file itself, not rich's is_terminal: FORCE_COLOR (set in many CI
    # logs for colour) makes rich treat a pipe as a terminal of 80 columns.
    isatty = getattr(console.file, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except ValueError:  # a closed file
        return False


def missing(value: Any) -> bool:
    pandas = sys.modules.get("pandas")  # pd.NA exists only once pandas is imported
    return value is None or (isinstance(value, float) and math.isnan(value)) or (pandas is not None and value is pandas.NA)


def fmt_ms(value: Any) -> str:
    """Milliseconds with about four significant figures: 0.042, 3.21, 45.6, 1,234."""
    if missing(value):
        return MISSING
    x = float(value)
    if abs(x) < 1:
        return f"{x:.3f}"
    if abs(x) < 10:
        return f"{x:.2f}"
    if abs(x) < 100:
        return f"{x:.1f}"
    return f"{x:,.0f}"


def fmt_value(value: Any, unit: str) -> str:
    """A compared figure in its unit (`comparison.COLUMNS`' `unit`): ms,
    seconds, a rate, a share (%), tokens per step, requests."""
    if unit == "ms":
        return fmt_ms(value)
    if missing(value):
        return MISSING
    if unit == "s":
        return f"{float(value):,.2f}"
    if unit == "%":
        return f"{float(value):.1%}"
    if unit in ("tok/step", "req"):
        return f"{float(value):.3g}" if unit == "req" else f"{float(value):.2f}"
    return fmt_rate(value)


def fmt_rate(value: Any, digits: int = 1) -> str:
    """A rate (tokens/s, requests/s) with thousands separators; — when unknown."""
    return MISSING if missing(value) else f"{float(value):,.{digits}f}"


def print_summary(
    console: Console,
    summary: pd.DataFrame,
    findings: Sequence[Finding] = (),
    slo: Slo | None = None,
    verdicts: Mapping[str, Sequence[TargetVerdict]] | None = None,
    ttft_by_turn: Mapping[str, pd.DataFrame] | None = None,
    models: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> None:
    """Per sweep point of a `summary.summarize` frame: a heading line (counts,
    duration, rates), a table of latencies in ms, a throughput line, with
    `slo` its goodput and the `verdicts` on its targets (by point), a
    sessions line when the point had sessions (with the point's TTFT by turn
    index from `ttft_by_turn`, by point name, when given), lines for the
    request kinds beyond text chat (`kind_lines`) and, per point in
    `models`, its figures per model (`summary_row.by_model`), and the
    `findings` on that point (those whose `point` is the row's), if any."""
    for _, row in summary.iterrows():
        console.print(Text(_point_heading(row), style="bold"))
        if int(row.get("sessions", 0) or 0):
            console.print(Text(_sessions_line(row, (ttft_by_turn or {}).get(str(row["point"])))))
        console.print(_latency_table(row))
        throughput = (
            f"  output {fmt_rate(row['output_tok_s'])} tok/s "
            f"(reasoning {fmt_rate(row['reasoning_tok_s'])}, content {fmt_rate(row['content_tok_s'])})"
        )
        share = row["multi_token_chunks"]
        if not missing(share):
            throughput += f"  ·  multi-token chunks {float(share):.0%} of {int(row['chunks'])}"
        console.print(Text(throughput))
        for line in kind_lines(row):
            console.print(Text(line))
        per_model = (models or {}).get(str(row["point"]))
        if per_model:
            console.print(_model_table(per_model))
        client = _client_line(row)
        if client:
            console.print(Text(client, style="dim"))
        for line in server_lines(row):
            console.print(Text(line))
        if slo is not None and not slo.empty:
            print_slo(console, row, slo, (verdicts or {}).get(str(row["point"]), ()))
        print_finding_lines(console, [f for f in findings if f.point == row["point"]])
        console.print()


def kind_lines(row: pd.Series) -> list[str]:
    """Lines for the request kinds beyond text chat (docs/results.md,
    "Request kinds"): tool calls, embeddings and rerank (E2E only: no
    tokens are generated, so no TTFT or TPOT), and TTFT with and without
    media. None when the point had none of them."""
    out = []
    tool_requests = int(row.get("tool_call_requests", 0) or 0)
    if tool_requests:
        out.append(f"  tool calls: {tool_requests} requests  ·  tool-call output {fmt_rate(row.get('tool_call_tok_s'))} tok/s")
    for api in ("embeddings", "rerank"):
        n = int(row.get(f"{api}_requests", 0) or 0)
        if n:
            out.append(
                f"  {api}: {n} requests ({int(row.get(f'{api}_ok', 0) or 0)} ok)  ·  "
                f"E2E p50 {fmt_ms(row.get(f'{api}_e2e_p50_ms'))} / p90 {fmt_ms(row.get(f'{api}_e2e_p90_ms'))} / p99 {fmt_ms(row.get(f'{api}_e2e_p99_ms'))} ms  ·  "
                f"{fmt_rate(row.get(f'{api}_items_s'))} items/s  ·  {fmt_rate(row.get(f'{api}_input_tok_s'))} input tok/s  "
                "(not streamed: no TTFT or TPOT; left out of the table above)"
            )
    media = int(row.get("media_requests", 0) or 0)
    if media:
        out.append(
            f"  media: {media} requests  ·  TTFT p50 with media {fmt_ms(row.get('ttft_media_p50_ms'))} ms, "
            f"without {fmt_ms(row.get('ttft_text_p50_ms'))} ms  ·  p99 {fmt_ms(row.get('ttft_media_p99_ms'))} / {fmt_ms(row.get('ttft_text_p99_ms'))} ms"
        )
    return out


def _model_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(title="per model", title_justify="left")
    for name in ("model", "requests", "ok", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "E2E p50 ms", "output tok/s"):
        table.add_column(name, justify="left" if name == "model" else "right")
    for r in rows:
        table.add_row(
            str(r["model"]), str(r["requests"]), str(r["ok"]), fmt_ms(r["ttft_p50_ms"]), fmt_ms(r["ttft_p99_ms"]),
            fmt_ms(r["tpot_p50_ms"]), fmt_ms(r["e2e_p50_ms"]), fmt_rate(r["output_tok_s"]),
        )
    return table


def _client_line(row: pd.Series) -> str:
    """The client's own figures: its delay behind the kernel stamps, and the
    requests that had to connect (their set-up is not in TTFT's meaning)."""
    parts = []
    if not missing(row.get("engine_delay_p99_ms")):
        parts.append(
            f"  client delay p50 {fmt_ms(row['engine_delay_p50_ms'])} / p99 {fmt_ms(row['engine_delay_p99_ms'])} ms "
            f"(kernel stamps on {float(row['kernel_stamped']):.0%} of chunks)"
        )
    elif row.get("chunks"):
        parts.append("  no kernel stamps: chunk times are the engine's own")
    if row.get("connected"):
        parts.append(
            f"{int(row['connected'])} requests connected: p50 {fmt_ms(row['connect_p50_ms'])} / p99 {fmt_ms(row['connect_p99_ms'])} ms"
        )
    return "  ·  ".join(parts)


#: Turn indices printed on the sessions line; the report charts them all.
TURNS_SHOWN = 8


def _sessions_line(row: pd.Series, by_turn: pd.DataFrame | None) -> str:
    """`sessions 16: 16 completed · 3.5 turns each · duration p50 4.21 s, p90
    6.02 s · TTFT p50 by turn: 0: 105 · 1: 98.1 · 2: 97.4 ms`."""
    def seconds(value: Any) -> str:
        return MISSING if missing(value) else f"{float(value):.2f} s"

    parts = [
        f"  sessions {int(row['sessions'])}: {int(row['sessions_completed'])} completed",
        f"{float(row['turns_per_session']):.1f} turns each",
        f"duration p50 {seconds(row['session_duration_p50_s'])}, p90 {seconds(row['session_duration_p90_s'])}",
    ]
    if by_turn is not None and len(by_turn):
        shown = [f"{turn}: {fmt_ms(ttft)}" for turn, ttft in by_turn["ttft_p50_ms"].head(TURNS_SHOWN).items()]
        more = f" … ({len(by_turn) - TURNS_SHOWN} more)" if len(by_turn) > TURNS_SHOWN else ""
        parts.append("TTFT p50 by turn: " + " · ".join(shown) + " ms" + more)
    return "  ·  ".join(parts)


#: Styles of the target verdicts.
TARGET_STYLES: dict[str, str] = {HELD: "green", FAILED: "bold red", UNCERTAIN: "yellow"}


def print_slo(console: Console, row: pd.Series, slo: Slo, verdicts: Sequence[TargetVerdict]) -> None:
    """A point's goodput (with per-request thresholds) and one line per target verdict."""
    if slo.thresholds:
        limits = ", ".join(f"{metric} ≤ {limit:g} ms" for metric, limit in slo.thresholds.items())
        console.print(
            Text(
                f"  goodput {fmt_rate(row['goodput_rps'], 2)} req/s{_interval(row, 'goodput_rps', 2)}, "
                f"{fmt_rate(row['goodput_tok_s'])} tok/s{_interval(row, 'goodput_tok_s')} "
                f"({_share(row['slo_attainment'])} of requests met every per-request SLO: {limits})"
            )
        )
    for verdict in verdicts:
        console.print(Text(f"  SLO {verdict.describe(slo)}", style=TARGET_STYLES.get(verdict.verdict, "dim")))


def _interval(row: pd.Series, column: str, digits: int = 1) -> str:
    """` [low, high]` of a figure with its bootstrap interval, "" without one."""
    low, high = row.get(f"{column}_low"), row.get(f"{column}_high")
    if missing(low) or missing(high):
        return ""
    return f" [{fmt_rate(low, digits)}, {fmt_rate(high, digits)}]"


def _share(value: Any) -> str:
    return MISSING if missing(value) else f"{float(value):.0%}"


def print_capacity(console: Console, label: str, lines: Sequence[str]) -> None:
    """What a capacity search found (`capacity.Answer.lines`), under a heading."""
    console.print(Text(f"capacity search · {label}", style="bold"))
    for i, line in enumerate(lines):
        console.print(Text(f"  {line}", style="bold" if i == 0 else ""))
    console.print()


def server_lines(row: pd.Series) -> list[str]:
    """What the server's own metrics said about the point (docs/results.md,
    "Server metrics"): speculative decoding, then load; nothing when the run
    scraped none, and only the figures the server published."""
    if not row.get("server_scrapes"):
        return []
    lines = []
    if not missing(row.get("spec_acceptance_length")):
        spec = []
        if not missing(row["spec_draft_len"]):
            spec.append(f"{float(row['spec_draft_len']):.3g} drafts/step")
        if not missing(row["spec_acceptance_rate"]):
            spec.append(f"acceptance rate {float(row['spec_acceptance_rate']):.1%}")
        length = f"acceptance length {float(row['spec_acceptance_length']):.2f} tokens/step"
        if not missing(row.get("decode_chunk_tokens_mean")):
            length += f" (client: {float(row['decode_chunk_tokens_mean']):.2f} tokens per chunk after the first)"
        spec.append(length)
        by_position = row.get("spec_acceptance_by_position")
        if isinstance(by_position, tuple) and by_position:
            spec.append("by position " + " ".join(f"{x:.0%}" for x in by_position[:8]) + (" …" if len(by_position) > 8 else ""))
        if not missing(row["spec_drafts_per_s"]):
            spec.append(f"{fmt_rate(row['spec_drafts_per_s'])} steps/s")
        lines.append("  server speculation: " + "  ·  ".join(spec))
    load = []
    for key, name in (("running", "running"), ("waiting", "waiting")):
        if not missing(row.get(f"server_{key}_mean")):
            load.append(
                f"{name} {float(row[f'server_{key}_mean']):.3g} mean, {float(row[f'server_{key}_p90']):.3g} p90, "
                f"{float(row[f'server_{key}_max']):.3g} max"
            )
    if not missing(row.get("server_kv_usage_mean")):
        load.append(f"KV cache {float(row['server_kv_usage_mean']):.0%} mean, {float(row['server_kv_usage_max']):.0%} max")
    if not missing(row.get("server_prefix_hit_rate")):
        load.append(f"prefix-cache hits {float(row['server_prefix_hit_rate']):.0%}")
    if not missing(row.get("server_preemptions")):
        load.append(f"preemptions {int(row['server_preemptions'])}")
    scrapes = f"{int(row['server_scrapes'])} scrapes over {float(row['server_window_s']):.1f} s"
    lines.append("  server load: " + "  ·  ".join(load + [scrapes]))
    return lines


def _point_heading(row: pd.Series) -> str:
    name = str(row["point"])
    if "label" in row.index and not missing(row["label"]):
        name = f"{row['label']} · {name}"
    skipped = int(row.get("skipped", 0) or 0)
    parts = [
        name,
        f"{int(row['requests'])} requests: {int(row['ok'])} ok, {int(row['failed'])} failed"
        + (f" ({row['errors_by_kind']})" if row.get("errors_by_kind") else "")
        + (f", {skipped} skipped after their session failed" if skipped else ""),
        MISSING if missing(row["duration_s"]) else f"{float(row['duration_s']):.1f} s",
    ]
    if not missing(row["target_rate_rps"]):
        parts.append(f"target {fmt_rate(row['target_rate_rps'], 2)} req/s")
        parts.append(f"sent {fmt_rate(row['send_rate_rps'], 2)} req/s")
    parts.append(f"achieved {fmt_rate(row['achieved_rate_rps'], 2)} req/s")
    return "  ·  ".join(parts)


def _latency_table(row: pd.Series) -> Table:
    from specreplay.analysis.quantiles import STATS

    table = Table()
    table.add_column("metric")
    for stat in STATS:
        table.add_column(f"{stat} ms", justify="right")
    for prefix, label in LATENCY_LABELS.items():
        table.add_row(label, *(fmt_ms(row[f"{prefix}_{stat}_ms"]) for stat in STATS))
    table.add_row("TPS per request (tok/s)", *(fmt_rate(row[f"tps_{stat}"]) for stat in STATS), style="dim")
    return table


def print_per_request(console: Console, lines: pd.DataFrame) -> None:
    """The `--per-request` listing: `summary.per_request`'s lines (or
    `summary.request_lines` of an analysis' rows)."""
    lines = lines.sort_values(["point", "request_index"], kind="stable")
    # One point (as after each sweep point): name it once, not on every line.
    single = lines["point"].nunique() == 1
    title = f"per request · {lines['point'].iloc[0]}" if single else "per request"
    table = Table(title=title, title_justify="left")
    names = ("#", "trace", "tokens reas/cont", "TTFT ms", "TTFC ms", "TPOT ms", "TPS", "finish", "error")
    for name in names if single else ("point", *names):
        justify: JustifyMethod = "right" if name in {"#", "TTFT ms", "TTFC ms", "TPOT ms", "TPS"} else "left"
        table.add_column(name, justify=justify)
    for _, line in lines.iterrows():
        tokens = f"{_int(line['reasoning_tokens'])}/{_int(line['content_tokens'])}"
        error = line["error"]
        table.add_row(
            *([] if single else [Text(str(line["point"]))]),
            str(_int(line["request_index"])),
            Text(str(line["trace_id"])),
            tokens,
            fmt_ms(line["ttft_ms"]),
            fmt_ms(line["ttfc_ms"]),
            fmt_ms(line["tpot_ms"]),
            fmt_rate(line["tps"]),
            Text(MISSING if missing(line["finish_reason"]) else str(line["finish_reason"])),
            Text("" if missing(error) else str(error), style="red"),
        )
    console.print(table)


def _int(value: Any) -> str:
    return MISSING if missing(value) else str(int(value))


#: (style of the level, point and code; style of the message) per level.
FINDING_STYLES: dict[str, tuple[str, str]] = {"error": ("bold red", "red"), "warning": ("yellow", ""), "note": ("cyan", "")}


def print_findings(console: Console, findings: list[Finding]) -> None:
    """The validity findings under a header no one can miss (`print_verdict`'s):
    errors in bold red, then warnings in yellow, then notes in cyan."""
    _print_header(console, findings)
    print_finding_lines(console, sorted(findings, key=lambda f: list(FINDING_STYLES).index(f.level)))


def print_finding_lines(console: Console, findings: Sequence[Finding]) -> None:
    """One line per finding, in the order given: level, point, code, message."""
    for finding in findings:
        head, body = FINDING_STYLES[finding.level]
        line = Text(f"{finding.level.upper():7} {finding.point}  {finding.code}: ", style=head)
        line.append(finding.message, style=body)
        console.print(line)


def print_verdict(console: Console, findings: list[Finding]) -> None:
    """The verdict over a whole run, for its end (the findings themselves
    were printed with each point): the header, then the point and code of
    each error and warning."""
    _print_header(console, findings)
    for finding in sorted((f for f in findings if f.level != "note"), key=lambda f: list(FINDING_STYLES).index(f.level)):
        console.print(Text(f"{finding.level.upper():7} {finding.point}  {finding.code}", style=FINDING_STYLES[finding.level][0]))


def _print_header(console: Console, findings: list[Finding]) -> None:
    # "INVALID MEASUREMENT" as soon as one finding is an error.
    errors = sum(f.level == "error" for f in findings)
    warnings = sum(f.level == "warning" for f in findings)
    if errors:
        header = f"INVALID MEASUREMENT: {errors} error(s), {warnings} warning(s) — read before using any figure"
        console.print(Text(header, style="bold white on red"))
    elif warnings:
        console.print(Text(f"MEASUREMENT WARNINGS: {warnings} warning(s)", style="bold yellow"))
    else:
        console.print(Text("validity: no errors or warnings", style="green"))
