"""Streams that arrive in a burst (issue 13 §6): a server that buffers the
whole answer delivers every chunk within microseconds, so TPOT reads near zero
and per-request TPS in the hundreds of thousands. Such requests are left out
of TPOT, TPS and ITL with a finding; TTFT, E2E and tokens/s keep them."""

from __future__ import annotations

import pytest

from conftest import MakeResults
from specreplay.analysis.analyse import PointAnalysis, analyse
from specreplay.settings.thresholds import ValidityThresholds

def burst(spread_us: int) -> list[tuple[int, int, str]]:
    """As vLLM sent them (docs/real-servers.md): 40 tokens within `spread_us`
    (15–84 µs there), after 800 ms of buffered generation."""
    return [(800_000 + i * spread_us // 39, 1, "content") for i in range(40)]


#: Paced at 20 ms per token.
PACED = [(30_000 + 20_000 * i, 1, "content") for i in range(40)]


def point_of(make_results: MakeResults, thresholds: ValidityThresholds | None = None) -> PointAnalysis:
    rows = [{"chunks": burst(spread)} for spread in (15, 20, 31, 47, 60, 84)] + [{"chunks": PACED}, {"chunks": PACED}]
    (run,) = analyse(make_results(rows), thresholds or ValidityThresholds())
    (point,) = run.points
    return point


def test_bursts_are_left_out_of_tpot_tps_and_itl(make_results: MakeResults) -> None:
    point = point_of(make_results)
    row = point.summary
    assert row["bursts"] == 6 and row["ok"] == 8
    # Only the two paced requests: 780 ms over 39 tokens.
    assert row["tpot_mean_ms"] == pytest.approx(20.0)
    assert row["tps_mean"] == pytest.approx(40 / 0.78)
    assert row["itl_chunk_p99_ms"] == pytest.approx(20.0) and row["itl_token_p50_ms"] == pytest.approx(20.0)
    assert len(point.itl_chunk_us) == 2 * 39
    # E2E and tokens/s keep every request.
    e2e_ms = [801 + spread / 1000 for spread in (15, 20, 31, 47, 60, 84)] + [811.0, 811.0]
    assert row["e2e_mean_ms"] == pytest.approx(sum(e2e_ms) / 8)
    assert row["output_tok_s"] == pytest.approx(8 * 40 / row["duration_s"])
    # The chunks themselves stay (their token counts are real).
    assert row["chunks"] == 8 * 40


def test_the_finding_says_how_many_and_why(make_results: MakeResults) -> None:
    point = point_of(make_results)
    (finding,) = [f for f in point.findings if f.code == "burst_streams"]
    assert finding.level == "warning" and finding.count == 6
    assert finding.message.startswith("6 of 8 requests arrived in a burst")
    assert "buffered" in finding.message and "left out" in finding.message
    # Median spread 31–47 µs over 39 gaps: about 1 µs per token.
    assert "1 µs per token" in finding.message
    # Their TTFT is nearly their E2E (800 ms of 801).
    assert "TTFT is 100% of their E2E" in finding.message


def test_the_threshold_decides(make_results: MakeResults) -> None:
    # Below the bursts' 0.4–2.2 µs per token, nothing is a burst: TPOT and
    # TPS then hold the bursts' absurd values, as before.
    point = point_of(make_results, ValidityThresholds(burst_us_per_token=0.1))
    assert point.summary["bursts"] == 0
    assert not [f for f in point.findings if f.code == "burst_streams"]
    assert point.summary["tps_p99"] > 1_000_000
