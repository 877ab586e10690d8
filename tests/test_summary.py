import math
from typing import Any
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from conftest import T0, MakeResults, config_metadata, results_table

import specreplay
from specreplay.analysis import summary
from specreplay.analysis.point import point_mode
from specreplay.analysis.quantiles import describe
from specreplay.results.files import load

POINTS = [
    {"point": "rate=8", "mode": "rate", "value": 8.0},
    {"point": "concurrency=8", "mode": "concurrency", "value": 8},
]


def test_describe_uses_linear_interpolation() -> None:
    stats = describe(np.arange(1, 101, dtype=float))
    assert stats == pytest.approx({"mean": 50.5, "p50": 50.5, "p90": 90.1, "p99": 99.01})
    assert describe([10.0, 20.0, math.nan], scale=10.0) == pytest.approx(
        {"mean": 1.5, "p50": 1.5, "p90": 1.9, "p99": 1.99}
    )


def test_describe_of_nothing_is_nan() -> None:
    assert all(math.isnan(v) for v in describe([]).values())


def test_counts_rates_and_duration(make_results: MakeResults) -> None:
    # 4 requests sent 125 ms apart (8/s); one fails; the last ends 201 ms after its send at 375 ms.
    rows = [{"sent_us": T0 + 125_000 * i} for i in range(4)]
    rows[1].update(error_kind="timeout", chunks=None, end_us=T0 + 125_000 + 50_000)
    out = summary.summarize(make_results(rows), points=POINTS).set_index("point")
    row = out.loc["rate=8"]
    assert (row["requests"], row["ok"], row["failed"]) == (4, 3, 1)
    assert row["mode"] == "rate"
    assert row["target_rate_rps"] == 8.0
    assert row["duration_s"] == pytest.approx(0.576)
    assert row["achieved_rate_rps"] == pytest.approx(3 / 0.576)
    assert row["send_rate_rps"] == pytest.approx(8.0)
    assert row["output_tok_s"] == pytest.approx(33 / 0.576)


def test_latency_figures_in_ms(make_results: MakeResults) -> None:
    rows = [{"sent_us": T0 + 1_000_000 * i, "scheduled_us": T0 + 1_000_000 * i - lag} for i, lag in enumerate([0, 200, 400])]
    rows[2]["chunks"] = [(300_000 + 10_000 * i, 1, "content") for i in range(11)]
    row = summary.summarize(make_results(rows)).iloc[0]
    assert row["ttft_p50_ms"] == pytest.approx(100.0)
    assert row["ttft_mean_ms"] == pytest.approx(500 / 3)
    assert row["ttft_p90_ms"] == pytest.approx(260.0)  # 100 + 0.8 * (300 - 100)
    assert row["tpot_p99_ms"] == pytest.approx(10.0)
    assert row["itl_chunk_p50_ms"] == pytest.approx(10.0)
    assert row["e2e_p50_ms"] == pytest.approx(201.0)
    assert row["send_lag_p50_ms"] == pytest.approx(0.2)
    assert row["send_lag_p99_ms"] == pytest.approx(0.396)
    assert row["tps_p50"] == pytest.approx(110.0)


def test_itl_per_chunk_and_per_token_differ_for_multi_token_chunks(make_results: MakeResults) -> None:
    chunks = [(100_000, 1, "content"), (130_000, 3, "content"), (140_000, 1, "content")]
    row = summary.summarize(make_results([{"chunks": chunks}])).iloc[0]
    # per chunk: [30, 10] ms; per token: [10, 10, 10, 10] ms.
    assert row["itl_chunk_mean_ms"] == pytest.approx(20.0)
    assert row["itl_token_mean_ms"] == pytest.approx(10.0)
    assert row["itl_token_p99_ms"] == pytest.approx(10.0)
    assert row["chunks"] == 3
    assert row["multi_token_chunks"] == pytest.approx(1 / 3)


def test_tokens_per_second_split_into_reasoning_and_content(make_results: MakeResults) -> None:
    chunks = [(0, 30, "reasoning"), (500_000, 10, "content"), (999_000, 10, "content")]
    row = summary.summarize(make_results([{"chunks": chunks}])).iloc[0]
    assert row["duration_s"] == pytest.approx(1.0)
    assert row["output_tok_s"] == pytest.approx(50.0)
    assert row["reasoning_tok_s"] == pytest.approx(30.0)
    assert row["content_tok_s"] == pytest.approx(20.0)


def test_warmup_rows_are_left_out(make_results: MakeResults) -> None:
    slow = [(5_000_000, 1, "content"), (6_000_000, 1, "content")]
    rows = [{"warmup": True, "chunks": slow}, {"warmup": True, "chunks": slow}, {}]
    row = summary.summarize(make_results(rows)).iloc[0]
    assert row["requests"] == 1
    assert row["ttft_p99_ms"] == pytest.approx(100.0)
    assert row["itl_chunk_p99_ms"] == pytest.approx(10.0)


def test_points_in_run_order_with_their_own_samples(make_results: MakeResults) -> None:
    fast = [(1_000 * i, 1, "content") for i in range(1, 4)]
    rows = [
        {"point": "concurrency=8", "point_index": 1, "chunks": fast},
        {"point": "rate=8", "point_index": 0},
    ]
    out = summary.summarize(make_results(rows), points=POINTS)
    assert out["point"].tolist() == ["rate=8", "concurrency=8"]
    assert out["itl_chunk_p50_ms"].tolist() == pytest.approx([10.0, 1.0])
    assert math.isnan(out.loc[1, "target_rate_rps"])


def test_point_mode_falls_back_to_the_label() -> None:
    assert point_mode("rate=8", None) == ("rate", 8.0)
    assert point_mode("speedup=2", [{"point": "speedup=2", "mode": "speedup", "value": 2.0}]) == ("speedup", 2.0)
    assert point_mode("baseline", None) == (None, None)


def test_load_keeps_metadata_and_summarize_uses_its_points(tmp_path: Path) -> None:
    metadata = config_metadata([{"point": "rate=8", "mode": "rate", "value": 8.0}], max_tokens=512)
    table = results_table([{}, {}], metadata)
    path = tmp_path / "results.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    df = load(path)
    assert specreplay.load is load
    assert df.attrs["specreplay.version"] == "0.1.0"
    assert len(df) == 2
    assert summary.summarize(df).loc[0, "target_rate_rps"] == 8.0


def test_per_request_lines(make_results: MakeResults) -> None:
    chunks = [(50_000, 6, "reasoning"), (150_000, 5, "content")]
    rows = [
        {"warmup": True},
        {"chunks": chunks, "finish_reason": "length"},
        {"chunks": None, "error_kind": "http", "error_message": "503 [overloaded]", "finish_reason": None},
    ]
    lines = summary.per_request(make_results(rows))
    assert list(lines.columns) == list(summary.PER_REQUEST_COLUMNS)
    assert lines["trace_id"].tolist() == ["t1", "t2"]
    first = lines.iloc[0]
    assert (first["reasoning_tokens"], first["content_tokens"], first["output_tokens"]) == (6, 5, 11)
    assert first["ttft_ms"] == pytest.approx(50.0)
    assert first["ttfc_ms"] == pytest.approx(150.0)
    assert first["tpot_ms"] == pytest.approx(10.0)
    assert first["finish_reason"] == "length"
    assert pd.isna(first["error"])
    assert lines.iloc[1]["error"] == "http: 503 [overloaded]"
    assert len(summary.per_request(make_results(rows), include_warmup=True)) == 3


def test_client_figures_from_the_delays_and_the_connect_times(make_results: MakeResults) -> None:
    rows: list[dict[str, Any]] = [
        {"chunk_delay_us": [100] * 11, "connect_us": 2_000},
        {"chunk_delay_us": [300] * 10 + [None], "connect_us": 4_000},
        {"chunk_delay_us": [None] * 11},
        {"error_kind": "timeout", "chunk_delay_us": [90_000] * 11, "connect_us": 6_000},
    ]
    row = summary.summarize(make_results(rows)).iloc[0]
    # Chunks of successful requests: 21 delays of 33 chunks.
    assert row["kernel_stamped"] == pytest.approx(21 / 33)
    assert row["engine_delay_p50_ms"] == pytest.approx(0.1)  # 11 of the 21 are 100 µs
    assert row["engine_delay_mean_ms"] == pytest.approx((11 * 100 + 10 * 300) / 21 / 1000)
    # Every measured request that connected, failed ones too: the set-up happened.
    assert row["connected"] == 3
    assert row["connect_p50_ms"] == pytest.approx(4.0)
