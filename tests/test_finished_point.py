"""A point that ran is analysed from the run's typed settings, handed over
in the process (`run.plan.FinishedPoint`: its config and the server samples
scraped during it), not parsed back out of the rows' metadata; without a
config (rows alone) the metadata still says them, as for a file."""

from __future__ import annotations

import pyarrow as pa
from conftest import config_metadata, results_table

from specreplay.results import server_samples as server_store
from specreplay.run.plan import FinishedPoint, Progress
from specreplay.settings.config import Point, ReplayConfig

POINTS = [{"point": "concurrency=1", "mode": "concurrency", "value": 1}]


def _rows() -> pa.Table:
    # The metadata holds no thresholds, SLOs, max_tokens nor samples.
    return results_table([{"point": "concurrency=1", "label": "run"}] * 4, config_metadata(POINTS))


def _samples() -> pa.Table:
    row = {"ts_us": 1, "rtt_us": 2, "label": "run", "point": "concurrency=1", "scrape": "start",
           "name": "vllm:num_requests_running", "labels": "{}", "type": "gauge", "value": 3.0}  # fmt: skip
    return pa.Table.from_pylist([row], schema=server_store.empty().schema)


def test_the_analysis_takes_the_runs_typed_settings() -> None:
    config = ReplayConfig.from_mapping({
        "trace": "t.jsonl", "concurrency": [1], "max_tokens": 64,
        "thresholds": {"burst_us_per_token": 9000.0}, "slo": {"targets": ["p99 ttft < 2000"]},
    })  # fmt: skip
    finished = FinishedPoint(Point("concurrency", 1), "run", _rows(), Progress("concurrency=1", 4, 4, 4, 0, 0, 1.0), config=config, server_samples=_samples())
    (run,) = finished.runs
    (point,) = run.points
    assert run.thresholds.burst_us_per_token == 9000.0
    assert run.max_tokens == 64
    assert [t.metric for t in run.slo.targets] == ["ttft"]
    assert (point.mode, point.value) == ("concurrency", 1.0)
    assert len(point.server_samples) == 1 and point.server_samples["value"].iloc[0] == 3.0


def test_rows_alone_are_read_as_a_file_is() -> None:
    finished = FinishedPoint(Point("concurrency", 1), "run", _rows(), Progress("concurrency=1", 4, 4, 4, 0, 0, 1.0))
    (run,) = finished.runs
    assert run.max_tokens is None and not run.slo.targets
    assert run.thresholds.burst_us_per_token == 50.0
    assert len(run.points[0].server_samples) == 0
