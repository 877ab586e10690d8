"""A replay analyses each point from a frame whose chunk lists stay in their
Arrow buffers (`results.files.to_frame`), not one numpy array per row (what
`specreplay.load` gives users): every derived figure must be the same from
either, to the bit."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import config_metadata, results_table

from specreplay.analysis.analyse import analyse
from specreplay.results import derived
from specreplay.results.batch_figures import batch_figures, floats, valid
from specreplay.results.files import to_frame

POINTS = [{"point": "concurrency=1", "mode": "concurrency", "value": 1}, {"point": "concurrency=2", "mode": "concurrency", "value": 2}]
LIST_COLUMNS = ("chunk_ts_us", "chunk_tokens", "chunk_channel", "chunk_delay_us")


def _table() -> pa.Table:
    reasoning_then_answer = [(50_000 + 7_000 * i, 1 + i % 3, "reasoning" if i < 4 else "content") for i in range(12)]
    burst = [(80_000 + 5 * i, 1, "content") for i in range(8)]  # 5 µs a token: a burst
    rows = [
        {"point": "concurrency=1", "warmup": True},
        {"point": "concurrency=1"},
        {"point": "concurrency=1", "chunks": reasoning_then_answer},
        {"point": "concurrency=1", "chunks": burst},
        {"point": "concurrency=1", "error_kind": "http_status", "error_message": "500", "chunks": reasoning_then_answer[:3]},
        {"point": "concurrency=2", "chunks": None, "error_kind": "connect", "error_message": "refused"},
        {"point": "concurrency=2", "chunks": [(40_000, 1, "content")]},
        {"point": "concurrency=2", "chunks": reasoning_then_answer, "chunk_tokens": None},  # no per-chunk counts
        {"point": "concurrency=2", "chunks": reasoning_then_answer, "point_index": 1},
    ]
    for row in rows:
        row.setdefault("point_index", 0 if row["point"] == "concurrency=1" else 1)
    metadata = config_metadata(POINTS, max_tokens=64)
    # Per-request thresholds, ITL's from the chunks: some requests meet them, some not.
    config = {**json.loads(metadata["specreplay.config"]), "slo": {"itl": 5, "ttft": 90, "targets": ["p90 ttft < 100"]}}
    return results_table(rows, {**metadata, "specreplay.config": json.dumps(config)})


def test_the_chunk_lists_stay_arrow_and_load_keeps_numpy_arrays() -> None:
    table = _table()
    arrow, numpy = to_frame(table), to_frame(table, list_arrays=False)
    for column in LIST_COLUMNS:
        assert isinstance(arrow[column].dtype, pd.ArrowDtype), column
        assert numpy[column].dtype == object, column
    assert arrow.attrs == numpy.attrs
    flat = [c for c in table.column_names if c not in LIST_COLUMNS]
    pd.testing.assert_frame_equal(arrow[flat], numpy[flat])


def test_the_chunk_frame_is_the_same_from_either() -> None:
    table = _table()
    arrow = derived.chunks(to_frame(table))
    numpy = derived.chunks(to_frame(table, list_arrays=False))
    assert len(arrow) > 40  # every chunk of the fixture's rows
    pd.testing.assert_frame_equal(arrow, numpy)
    # The channel names decoded by pyarrow are the strings a Python list of them gives.
    names = pd.DataFrame({"channel": numpy["channel"].astype(object).to_numpy()})["channel"]
    pd.testing.assert_series_equal(arrow["channel"], names)
    assert set(arrow["channel"]) == {"reasoning", "content"}


def test_every_figure_of_the_analysis_is_the_same_from_either() -> None:
    table = _table()
    (arrow,) = analyse(to_frame(table))
    (numpy,) = analyse(to_frame(table, list_arrays=False))
    pd.testing.assert_frame_equal(arrow.summary, numpy.summary)
    assert arrow.findings == numpy.findings
    for a, n in zip(arrow.points, numpy.points, strict=True):
        pd.testing.assert_frame_equal(a.chunks, n.chunks)
        assert a.itl_chunk_us.tobytes() == n.itl_chunk_us.tobytes()
        assert a.itl_token_us.tobytes() == n.itl_token_us.tobytes()
        assert a.slo_met.tolist() == n.slo_met.tolist()
        assert repr(a.slo_verdicts) == repr(n.slo_verdicts)  # repr: NaN equals NaN
        flat = [c for c in a.rows.columns if c not in LIST_COLUMNS]
        pd.testing.assert_frame_equal(a.rows[flat], n.rows[flat])
    # The fixture reaches the figures that read the chunks.
    assert arrow.points[0].rows["burst"].any()
    assert arrow.summary["chunks"].sum() > 0
    met = np.concatenate([p.slo_met for p in arrow.points])
    assert met.any() and not met[np.concatenate([p.ok for p in arrow.points])].all()
    assert all(p.slo_verdicts for p in arrow.points)


def test_a_batchs_live_figures_are_request_figures_to_the_bit() -> None:
    table = _table()
    frame = derived.request_figures(to_frame(table), 50.0)
    arrays = batch_figures(table, 50.0)
    for name in ("ttft_us", "tpot_us", "send_lag_us", "end_us"):
        expected = derived.as_float(frame, name).to_numpy()
        assert arrays[name].tobytes() == expected.tobytes(), name
    assert np.isnan(arrays["tpot_us"]).sum() >= 2  # a burst's and a one-token answer's


@pytest.mark.parametrize(
    "column",
    [
        pa.array([5, None, -3, 2**40, None], pa.int64()),
        pa.array([5, None, -3, 7, None, 1, 2, 3, 4, None], pa.int32()).slice(3),  # an offset inside the bitmap
        pa.array([1.5, None, float("nan")], pa.float64()),
        pa.array([7, 8, 9], pa.uint16()),
        pa.array([None, None], pa.null()),
        pa.chunked_array([pa.array([1, None], pa.int64()), pa.array([None, 4], pa.int64())]),
        pa.array([], pa.int64()),
    ],
    ids=["int64-nulls", "int32-sliced", "float64", "uint16-no-nulls", "null-type", "chunked", "empty"],
)
def test_floats_and_valid_read_the_buffers_as_pyarrow_compute_would(column: pa.Array | pa.ChunkedArray) -> None:
    as_float = pc.fill_null(pc.cast(column, pa.float64()), float("nan"))
    expected = np.array(as_float.to_pylist(), dtype=np.float64)
    assert floats(column).tobytes() == expected.tobytes()
    assert valid(column).tolist() == pc.is_valid(column).to_pylist()


def test_floats_refuses_a_column_that_is_not_numeric() -> None:
    with pytest.raises(TypeError, match="numeric column expected, not string"):
        floats(pa.array(["a"]))
