import math

import numpy as np
import pandas as pd
import pytest
from conftest import T0, MakeResults, results_table

from specreplay.results import derived as metrics


def test_tpot_and_tps_of_eleven_tokens_over_100_ms(make_results: MakeResults) -> None:
    df = metrics.add_derived(make_results([{}]))  # default: 11 one-token chunks, 10 ms apart
    assert df.loc[0, "tpot_us"] == pytest.approx(10_000.0)
    assert df.loc[0, "tps"] == pytest.approx(110.0)


def test_latencies_from_sent_and_send_lag(make_results: MakeResults) -> None:
    sent = T0 + 2_000
    chunks = [(50_000, 4, "reasoning"), (80_000, 2, "reasoning"), (300_000, 1, "content")]
    df = metrics.add_derived(make_results([{"scheduled_us": T0, "sent_us": sent, "chunks": chunks}]))
    row = df.loc[0]
    assert row["send_lag_us"] == 2_000
    assert row["ttft_us"] == 50_000
    assert row["ttfc_us"] == 300_000
    assert row["e2e_us"] == 301_000  # the helper ends a request 1 ms after its last chunk
    assert row["tpot_us"] == pytest.approx(250_000 / 6)  # 7 tokens: reasoning counts
    assert row["tps"] == pytest.approx(7 / 0.25)


def test_tpot_undefined_below_two_tokens_and_tps_undefined_for_zero_span(make_results: MakeResults) -> None:
    df = metrics.add_derived(make_results([{"chunks": [(10_000, 1, "content")]}]))
    assert math.isnan(df.loc[0, "tpot_us"])
    assert math.isnan(df.loc[0, "tps"])


def test_ttfc_missing_when_no_answer_was_streamed(make_results: MakeResults) -> None:
    df = metrics.add_derived(make_results([{"chunks": [(10_000, 1, "reasoning"), (20_000, 1, "reasoning")]}]))
    assert df.loc[0, "ttft_us"] == 10_000
    assert math.isnan(df.loc[0, "ttfc_us"])


def test_add_derived_returns_a_new_frame(make_results: MakeResults) -> None:
    df = make_results([{}])
    out = metrics.add_derived(df)
    assert "ttft_us" in out.columns
    assert "ttft_us" not in df.columns


def test_add_derived_accepts_pyarrow_backed_frames() -> None:
    df = results_table([{}]).to_pandas(types_mapper=pd.ArrowDtype)
    assert metrics.add_derived(df).loc[0, "tpot_us"] == pytest.approx(10_000.0)


def test_chunks_one_row_per_chunk_with_gaps_within_a_request(make_results: MakeResults) -> None:
    df = make_results(
        [
            {"chunks": [(10_000, 2, "reasoning"), (25_000, 1, "content")]},
            {"chunks": [(5_000, 1, "content"), (6_000, 3, "tool"), (10_000, 1, "content")]},
        ]
    )
    frame = metrics.chunks(df)
    assert list(frame.columns) == list(metrics.CHUNK_COLUMNS)
    assert frame["request_index"].tolist() == [0, 0, 1, 1, 1]
    assert frame["trace_id"].tolist() == ["t0", "t0", "t1", "t1", "t1"]
    assert frame["chunk_index"].tolist() == [0, 1, 0, 1, 2]
    assert frame["channel"].tolist() == ["reasoning", "content", "content", "tool", "content"]
    assert frame["tokens"].tolist() == [2, 1, 1, 3, 1]
    # No gap is taken across requests: each request's first chunk has none.
    itl = frame["itl_us"].tolist()
    assert math.isnan(itl[0]) and math.isnan(itl[2])
    assert [itl[1], itl[3], itl[4]] == [15_000, 1_000, 4_000]
    assert frame["ts_us"].iloc[1] == T0 + 25_000


def test_chunks_of_requests_without_chunks_or_counts(make_results: MakeResults) -> None:
    df = make_results(
        [
            {"chunks": None, "error_kind": "connect"},
            {"chunks": [(1_000, 1, "content"), (2_000, 1, "content")], "chunk_tokens": None},
        ]
    )
    frame = metrics.chunks(df)
    assert frame["request_index"].tolist() == [1, 1]
    assert frame["tokens"].isna().all()
    assert metrics.itl_per_token(frame).size == 0
    assert metrics.itl_per_chunk(frame).tolist() == [1_000]


def test_chunks_of_an_empty_frame(make_results: MakeResults) -> None:
    df = make_results([{}]).iloc[0:0]
    assert metrics.chunks(df).empty


def test_chunk_lists_must_line_up(make_results: MakeResults) -> None:
    df = make_results([{"chunks": [(1_000, 1, "content"), (2_000, 1, "content")], "chunk_tokens": [1]}])
    with pytest.raises(ValueError, match="chunk_tokens"):
        metrics.chunks(df)


def test_a_three_token_chunk_after_30_ms_gives_three_samples_of_10_ms(make_results: MakeResults) -> None:
    df = make_results([{"chunks": [(100_000, 1, "content"), (130_000, 3, "content")]}])
    frame = metrics.chunks(df)
    assert metrics.itl_per_chunk(frame).tolist() == [30_000]
    assert metrics.itl_per_token(frame).tolist() == [10_000, 10_000, 10_000]
    positions, per_token, tokens = metrics.token_gaps(frame)
    assert (positions.tolist(), per_token.tolist(), tokens.tolist()) == ([1], [10_000], [3])


def test_per_token_itl_is_weighted_by_tokens(make_results: MakeResults) -> None:
    chunks = [(0, 1, "content"), (10_000, 1, "content"), (40_000, 3, "content"), (40_500, 0, "content")]
    frame = metrics.chunks(make_results([{"chunks": chunks}]))
    samples = metrics.itl_per_token(frame)
    # 1 sample of 10 ms, 3 of 10 ms; the zero-token chunk has no token to charge.
    np.testing.assert_allclose(samples, [10_000, 10_000, 10_000, 10_000])
    assert metrics.itl_per_chunk(frame).tolist() == [10_000, 30_000, 500]
