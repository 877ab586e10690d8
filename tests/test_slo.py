"""SLO settings: the expressions and the `[slo]` table, per-request
thresholds counted exactly on constructed requests, and the verdict rule."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from conftest import T0, results_frame, results_table

import specreplay
from specreplay.results import derived as metrics
from specreplay.analysis.analyse import analyse
from specreplay.settings.config import ReplayConfig
from specreplay.errors import ConfigError
from specreplay.analysis.slo import judge
from specreplay.analysis.slo_requests import met, request_values
from specreplay.analysis.verdicts import FAILED, HELD, NA, TOO_FEW, UNCERTAIN
from specreplay.settings.objectives import Slo, SloTarget, merge_tables, parse_target, table_from_expressions
from specreplay.analysis.summary import summarize
from specreplay.analysis.summary_row import GOODPUT_COLUMNS


def test_targets_parse_with_units_and_print_back() -> None:
    assert parse_target("p99 ttft < 2000") == SloTarget("ttft", "<", 2000.0, 0.99)
    assert parse_target("P90  TPOT<=50ms") == SloTarget("tpot", "<=", 50.0, 0.90)
    assert parse_target("p99.9 e2e < 30s") == SloTarget("e2e", "<", 30_000.0, 0.999)
    assert parse_target("success >= 99%") == SloTarget("success", ">=", 0.99)
    assert parse_target("attainment > 0.9") == SloTarget("attainment", ">", 0.9)
    assert parse_target("p99.9 e2e < 30s").text == "p99.9 e2e < 30000"
    assert parse_target("success >= 99%").text == "success >= 99%"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("p99 ttft > 2000", "upper bound"),
        ("p99 latency < 2", "unknown metric 'latency'"),
        ("ttft < 2000", "no percentile"),
        ("p99 success >= 99%", "not a latency"),
        ("success <= 99%", "at least"),
        ("success >= 120%", "between 0 and 100%"),
        ("p100 ttft < 5", "between p0 and p100"),
        ("p99 ttft < 0", "positive"),
        ("p99 ttft < 5%", "not %"),
        ("fast please", "cannot read"),
    ],
)
def test_a_bad_target_says_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_target(text, "--slo")


def test_expressions_become_the_table_and_read_back() -> None:
    table = table_from_expressions(["ttft < 2s", "tpot <= 50", "p99 ttft < 2000", "p90 tpot < 50", "success >= 99%", "attainment >= 90%"])
    assert table == {
        "ttft": 2000.0,
        "tpot": 50.0,
        "targets": ["p99 ttft < 2000", "p90 tpot < 50"],
        "min_success_rate": 0.99,
        "min_attainment": 0.9,
    }
    slo = Slo.from_table({**table, "ttft_token": "any"})
    assert slo.thresholds == {"ttft": 2000.0, "tpot": 50.0}
    assert [t.text for t in slo.targets] == ["p99 ttft < 2000", "p90 tpot < 50", "success >= 99%", "attainment >= 90%"]
    assert Slo.from_table(slo.to_table()) == slo


def test_the_command_line_merges_into_the_file_target_by_target() -> None:
    file = {"ttft": 2000, "targets": ["p99 ttft < 2000", "p90 tpot < 50"], "min_success_rate": 0.99}
    merged = merge_tables(file, table_from_expressions(["p99 ttft < 1000", "e2e < 9000"]))
    assert merged == {"ttft": 2000, "e2e": 9000.0, "min_success_rate": 0.99, "targets": ["p99 ttft < 1000", "p90 tpot < 50"]}


def test_a_bad_slo_table_in_a_config_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"bench.toml:3: slo.targets\[1\]: cannot read .soon."):
        ReplayConfig.from_mapping({"slo": {"targets": ["p99 ttft < 10", "soon"]}}, lambda key: f"bench.toml:3: {key}")
    with pytest.raises(ConfigError, match="slo.ttft_token: expected one of answer, any"):
        ReplayConfig.from_mapping({"slo": {"ttft_token": "first"}})
    with pytest.raises(ConfigError, match="slo.latency: unknown key"):
        ReplayConfig.from_mapping({"slo": {"latency": 5}})
    with pytest.raises(ConfigError, match="min_success_rate: expected a fraction"):
        ReplayConfig.from_mapping({"slo": {"min_success_rate": 99}})


def test_find_max_rate_needs_a_target_and_open_loop() -> None:
    base = {"trace": "t.jsonl", "find_max_rate": True}
    with pytest.raises(ConfigError, match="needs a target"):
        ReplayConfig.from_mapping({**base, "slo": {"ttft": 100}}).validate()
    with pytest.raises(ConfigError, match="open-loop"):
        ReplayConfig.from_mapping({**base, "concurrency": [4], "slo": {"targets": ["p99 ttft < 100"]}}).validate()
    with pytest.raises(ConfigError, match="at most one rate"):
        ReplayConfig.from_mapping({**base, "rate": [1, 2], "slo": {"targets": ["p99 ttft < 100"]}}).validate()
    ReplayConfig.from_mapping({**base, "rate": [3], "slo": {"targets": ["attainment >= 90%"]}}).validate()


def _requests() -> list[dict[str, object]]:
    """Six requests with known figures (ms): TTFT (first token) 50, answers at
    the times given, one per 10 ms after the first token unless said."""
    reasoning_then_answer = [(50_000, 1, "reasoning"), (60_000, 1, "reasoning"), (300_000, 1, "content"), (310_000, 1, "content")]
    return [
        {"chunks": [(50_000 + 10_000 * i, 1, "content") for i in range(6)]},  # fast: TTFT 50, TPOT 10, ITL 10
        {"chunks": reasoning_then_answer},  # first answer token at 300 ms; largest gap 240 ms
        {"chunks": [(50_000, 1, "reasoning"), (60_000, 1, "reasoning")], "finish_reason": "length"},  # never answered
        {"chunks": [(50_000, 1, "content"), (90_000, 4, "content")]},  # 4 tokens in one chunk: gap 40 ms = 10 ms/token
        {"chunks": [(50_000, 1, "content")]},  # one token: no TPOT, no ITL
        {"chunks": None, "error_kind": "http", "http_status": 503, "end_us": T0 + 5_000_000},  # failed
    ]


def _met(table: dict[str, object]) -> list[bool]:
    df = metrics.add_derived(results_frame(_requests()))
    ok = df["error_kind"].isna().to_numpy()
    slo = Slo.from_table(table)
    chunks = metrics.chunks(df[ok])
    values = request_values(df, chunks, slo)
    return [bool(x) for x in met(ok, values, slo)]


def test_per_request_thresholds_are_counted_exactly() -> None:
    # TTFT means the first answer token by default: the reasoning request waited 300 ms for it.
    assert _met({"ttft": 100}) == [True, False, False, True, True, False]
    # ... and the first token of any kind with ttft_token = "any": only the failure and nothing else misses.
    assert _met({"ttft": 100, "ttft_token": "any"}) == [True, True, True, True, True, False]
    assert _met({"ttfc": 300}) == [True, True, False, True, True, False]
    # TPOT over every output token: (310 − 50) / 3 = 86.7 ms for the reasoning request; 40 / 4 for the chunky one.
    assert _met({"tpot": 10}) == [True, False, True, True, True, False]
    # ITL: the largest per-token gap; the 4-token chunk's 40 ms is 10 ms a token.
    assert _met({"itl": 10}) == [True, False, True, True, True, False]
    assert _met({"itl": 239}) == [True, False, True, True, True, False]
    assert _met({"itl": 240}) == [True, True, True, True, True, False]
    assert _met({"e2e": 101}) == [True, False, True, True, True, False]
    assert _met({"ttft": 100, "tpot": 10}) == [True, False, False, True, True, False]
    assert _met({}) == [True, True, True, True, True, False]


def test_the_verdict_takes_the_far_end_of_the_interval() -> None:
    p99 = SloTarget("ttft", "<", 100.0, 0.99)
    assert judge(p99, 80, 70, 95, 200, 100).verdict == HELD
    assert judge(p99, 80, 70, 100, 200, 100).verdict == UNCERTAIN  # 100 is not < 100
    assert judge(p99, 120, 101, 130, 200, 100).verdict == FAILED
    assert judge(p99, 95, 90, 104, 200, 100).verdict == UNCERTAIN
    assert judge(p99, 80, 70, 95, 99, 100).verdict == TOO_FEW
    assert judge(p99, math.nan, math.nan, math.nan, 0, 100).verdict == NA
    share = SloTarget("success", ">=", 0.99)
    assert judge(share, 1.0, 0.99, 1.0, 200, 1).verdict == HELD
    assert judge(share, 0.995, 0.98, 1.0, 200, 1).verdict == UNCERTAIN
    assert judge(share, 0.9, 0.85, 0.95, 200, 1).verdict == FAILED
    failed = judge(p99, 158, 120, 170, 200, 100)
    assert failed.describe(Slo(targets=(p99,))) == "p99 TTFT (first answer token) 158 ms [120, 170] < 100 ms: failed, over by 58 ms (+58%)"
    assert np.isclose(failed.excess, 58)


def _slo_frame(slo: dict[str, object], rows: list[dict[str, object]] | None = None) -> pd.DataFrame:
    config = {"points": [{"point": "rate=8", "mode": "rate", "value": 8}], "slo": slo}
    return results_frame(rows if rows is not None else _requests(), {"specreplay.config": json.dumps(config)})


def test_goodput_is_counted_exactly_in_the_summary() -> None:
    df = _slo_frame({"ttft": 100, "tpot": 10})
    row = summarize(df).iloc[0]
    # Requests 0, 3 and 4 met both thresholds (see _requests); the point lasted
    # from the first send to the failed request's end: 5 s.
    duration = (T0 + 5_000_000 - T0) / 1e6
    assert row["duration_s"] == duration
    assert row["slo_good"] == 3
    assert row["slo_attainment"] == 3 / 6
    assert row["goodput_rps"] == 3 / duration
    assert row["goodput_tok_s"] == (6 + 5 + 1) / duration
    # Their intervals resample the records with the duration (resampling.point_intervals).
    for name in ("goodput_rps", "goodput_tok_s"):
        assert row[f"{name}_low"] < row[name] < row[f"{name}_high"], name
    # Without SLOs the columns are there, and NaN.
    plain = summarize(results_frame(_requests())).iloc[0]
    assert all(math.isnan(plain[c]) for c in GOODPUT_COLUMNS)


def _timed(n: int, ttft_ms: Callable[[int], float]) -> list[dict[str, object]]:
    return [{"sent_us": T0 + 10_000 * i, "chunks": [(int(ttft_ms(i) * 1000) + 5_000 * k, 1, "content") for k in range(4)]} for i in range(n)]


def test_targets_are_judged_with_compares_bootstrap() -> None:
    # 200 requests, TTFT 10 ms … 209 ms: p90 = 189.1 ms.
    rows = _timed(200, lambda i: 10.0 + i)
    [run] = analyse(_slo_frame({"targets": ["p90 ttft < 300", "p50 e2e <= 100", "p99 tpot < 100", "success >= 99%"]}, rows))
    [point] = run.points
    by_text = {v.target.text: v for v in point.slo_verdicts}
    held = by_text["p90 ttft < 300"]
    assert held.verdict == HELD and held.value == pytest.approx(189.1) == pytest.approx(float(point.summary["ttfc_p90_ms"]))
    assert held.low < held.value < held.high < 300
    failed = by_text["p50 e2e <= 100"]  # E2E = TTFT + 15 ms + 1 ms: p50 125.5 ms
    assert failed.verdict == FAILED and failed.value == pytest.approx(125.5) and failed.low > 100
    # A p99 needs 500 distinct trace records (resampling.samples_needed): 200 are too few.
    p99 = by_text["p99 tpot < 100"]
    assert p99.verdict == TOO_FEW and p99.value == pytest.approx(5.0) and (p99.samples, p99.needed) == (200, 500)
    assert "(200 trace records, 500 needed for a p99)" in p99.describe()
    assert by_text["success >= 99%"].verdict == HELD and by_text["success >= 99%"].value == 1.0
    [enough] = analyse(_slo_frame({"targets": ["p99 tpot < 100"]}, _timed(500, lambda i: 10.0 + i % 200)))
    assert [v.verdict for v in enough.points[0].slo_verdicts] == [HELD]
    # A p90 needs 50, a p50 10 (the p50 too is judged only on enough records).
    [few] = analyse(_slo_frame({"targets": ["p90 ttft < 300", "p50 ttft < 300"]}, rows[:49]))
    assert [v.verdict for v in few.points[0].slo_verdicts] == [TOO_FEW, HELD]
    [fewer] = analyse(_slo_frame({"targets": ["p50 ttft < 300"]}, rows[:9]))
    assert [(v.verdict, v.needed) for v in fewer.points[0].slo_verdicts] == [(TOO_FEW, 10)]


def test_the_goodput_snippet_in_the_docs_matches_the_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "capacity.md").read_text(encoding="utf-8")
    snippet = next(block for block in re.findall(r"```python\n(.*?)```", doc, flags=re.S) if "by_hand" in block)
    rows = [{"warmup": True}, *_requests()]
    rows[2] = {**rows[2], "chunks": [(50_000, 1, "reasoning"), (2_500_000, 1, "content"), (2_510_000, 1, "content")]}  # a late answer
    table = results_table(rows, {"specreplay.config": json.dumps({"slo": {"ttft": 2000, "tpot": 50}})})
    with pa.OSFile(str(tmp_path / "results.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {}
    exec(snippet, scope)
    row = summarize(specreplay.load(tmp_path / "results.arrow")).iloc[0]
    by_hand = scope["by_hand"]
    assert isinstance(by_hand, dict) and by_hand["slo_good"] == 3  # requests 0, 3 and 4 of _requests
    for key, value in by_hand.items():
        assert row[key] == pytest.approx(value), key
