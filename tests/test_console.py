import io

import pytest
from conftest import MakeResults
from rich.console import Console

from specreplay.present import console as render
from specreplay.analysis.summary import per_request, summarize
from specreplay.analysis.validity import Finding


def recording() -> Console:
    return Console(record=True, width=200, file=io.StringIO(), color_system="truecolor", force_terminal=True)


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.0421, "0.042"), (3.214, "3.21"), (45.66, "45.7"), (34328.4, "34,328"), (float("nan"), "—"), (None, "—")],
)
def test_fmt_ms_precision(value: float | None, text: str) -> None:
    assert render.fmt_ms(value) == text


def test_summary_table_shows_the_figures(make_results: MakeResults) -> None:
    chunks = [(0, 30, "reasoning"), (100_000, 1, "content"), (130_000, 3, "content")]
    out = recording()
    render.print_summary(out, summarize(make_results([{}, {"chunks": chunks}])))
    text = out.export_text()
    assert "rate=8" in text and "2 requests: 2 ok, 0 failed" in text
    assert "target 8.00 req/s" in text
    for label in render.LATENCY_LABELS.values():
        assert label in text
    assert "p99 ms" in text
    tpot_line = next(line for line in text.splitlines() if line.lstrip("│ ").startswith("TPOT"))
    # TPOT 10 ms (11 tokens over 100 ms) and 130/33 ms: mean 6.97, p99 9.94.
    assert [cell.strip() for cell in tpot_line.split("│")[2:6]] == ["6.97", "6.97", "9.39", "9.94"]
    assert "reasoning" in text and "content" in text and "tok/s" in text
    assert "multi-token chunks" in text


def test_findings_errors_get_the_invalid_header_in_red() -> None:
    findings = [
        Finding("too_few_requests", "warning", "rate=8", 8, "only 8 successful requests"),
        Finding("reasoning_ate_budget", "error", "rate=8", 5, "5 of 8 requests hit max_tokens=512 with NO answer"),
    ]
    out = recording()
    render.print_findings(out, findings)
    text = out.export_text(clear=False)
    lines = text.splitlines()
    assert lines[0].startswith("INVALID MEASUREMENT: 1 error(s), 1 warning(s)")
    assert "reasoning_ate_budget" in lines[1]  # errors first
    assert "5 of 8 requests" in text and "too_few_requests" in text
    styled = out.export_text(styles=True)
    assert "\x1b[1;31m" in styled  # bold red for the error line


def test_warnings_only_do_not_say_invalid() -> None:
    out = recording()
    render.print_findings(out, [Finding("estimated_tokens", "warning", "rate=8", 2, "estimates")])
    text = out.export_text()
    assert "INVALID" not in text
    assert text.startswith("MEASUREMENT WARNINGS: 1 warning(s)")


def test_no_findings_says_so() -> None:
    out = recording()
    render.print_findings(out, [])
    assert "no errors or warnings" in out.export_text()


def test_data_text_is_not_parsed_as_markup() -> None:
    out = recording()
    render.print_findings(out, [Finding("error_rate", "error", "rate=8", 1, "http: 503 [bold]busy[/bold]")])
    assert "503 [bold]busy[/bold]" in out.export_text()


def test_per_request_listing(make_results: MakeResults) -> None:
    rows = [
        {"trace_id": "math-7"},
        {"trace_id": "code-[1]", "chunks": None, "error_kind": "timeout", "error_message": "no byte in 30 s"},
    ]
    out = recording()
    render.print_per_request(out, per_request(make_results(rows)))
    text = out.export_text()
    assert "math-7" in text and "code-[1]" in text
    assert "0/11" in text
    assert "110.0" in text  # TPS of the default request
    assert "timeout: no byte in 30 s" in text


def test_summary_prints_each_points_findings_after_its_figures(make_results: MakeResults) -> None:
    rows = [{"point": "rate=8"}, {"point": "rate=16", "point_index": 1}]
    findings = [
        Finding("too_few_requests", "note", "rate=16", 1, "only 1"),
        Finding("estimated_tokens", "warning", "rate=8", 1, "estimates"),
    ]
    out = recording()
    render.print_summary(out, summarize(make_results(rows)), findings)
    text = out.export_text()
    assert text.index("rate=8  ·") < text.index("WARNING rate=8  estimated_tokens: estimates") < text.index("rate=16  ·")
    assert text.index("rate=16  ·") < text.index("NOTE    rate=16  too_few_requests: only 1")


def test_the_verdict_names_errors_and_warnings_without_their_messages() -> None:
    findings = [
        Finding("too_few_requests", "note", "a: rate=8", 8, "only 8"),
        Finding("estimated_tokens", "warning", "a: rate=8", 2, "estimates"),
        Finding("reasoning_ate_budget", "error", "b: rate=8", 5, "5 of 8 requests"),
    ]
    out = recording()
    render.print_verdict(out, findings)
    assert out.export_text().splitlines() == [
        "INVALID MEASUREMENT: 1 error(s), 1 warning(s) — read before using any figure",
        "ERROR   b: rate=8  reasoning_ate_budget",
        "WARNING a: rate=8  estimated_tokens",
    ]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_cli_console_is_unwrapped_unless_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert render.cli_console().width == render.UNWRAPPED_WIDTH
    monkeypatch.setattr(sys, "stdout", _Terminal())
    assert render.cli_console().width < render.UNWRAPPED_WIDTH
