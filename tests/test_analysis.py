"""One analysis per run: `analysis.analyse` derives each run's rows, chunks,
ITL samples, summary and findings once, and `summarize`, `validity.check`,
`compare` and `report` are read from it rather than deriving them again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from click.testing import CliRunner
from conftest import T0, MakeResults, config_metadata, results_table

import specreplay
from specreplay.analysis import analyse as analysis
from specreplay.results import derived as metrics
from specreplay.present import report
from specreplay.analysis import validity
from specreplay.cli import cli

POINTS = [
    {"point": "concurrency=2", "mode": "concurrency", "value": 2},
    {"point": "concurrency=4", "mode": "concurrency", "value": 4},
]


def two_runs(n: int = 12) -> list[dict[str, Any]]:
    """Runs "base" and "spec", points concurrency=2 and 4, in run order."""
    rows: list[dict[str, Any]] = []
    for run, label in enumerate(("base", "spec")):
        for index, point in enumerate(p["point"] for p in POINTS):
            for i in range(n):
                chunks = [(20_000 + (10_000 + 1_000 * run) * j + 37 * i, 1 + run * (j % 2), "content") for j in range(12)]
                rows.append({"label": label, "point": point, "point_index": 2 * run + index, "trace_id": f"t{i}", "sent_us": T0 + 300_000 * i, "chunks": chunks})
    return rows


def write(rows: list[dict[str, Any]], path: Path) -> str:
    table = results_table(rows, config_metadata(POINTS))
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return str(path)


def test_runs_and_points_in_run_order(make_results: MakeResults) -> None:
    rows = two_runs()
    runs = analysis.analyse(make_results(rows[24:] + rows[:24], config_metadata(POINTS)))  # spec's rows first in the file
    assert [r.label for r in runs] == ["base", "spec"]
    assert [r.point_names for r in runs] == [["concurrency=2", "concurrency=4"]] * 2
    point = runs[1].point("concurrency=4")
    assert (point.label, point.mode, point.value) == ("spec", "concurrency", 4.0)
    assert len(point.rows) == 12 and point.ok.all() and len(point.chunks) == 12 * 12
    # Per request, 11 gaps: 6 end a chunk of 2 tokens (two samples each), 5 a chunk of 1.
    assert len(point.itl_chunk_us) == 12 * 11
    assert len(point.itl_token_us) == 12 * (6 * 2 + 5)
    with pytest.raises(KeyError, match="no sweep point 'rate=8'"):
        runs[0].point("rate=8")


def test_summarize_and_check_are_the_analysis(make_results: MakeResults) -> None:
    df = make_results(two_runs(), config_metadata(POINTS))
    runs = analysis.analyse(df)
    expected = pd.concat([r.summary for r in runs], ignore_index=True)
    pd.testing.assert_frame_equal(specreplay.summarize(df), expected)
    assert validity.check(df) == analysis.findings_of([(r.label, r.findings) for r in runs])
    assert {f.point for f in validity.check(df)} == {f"{r}: {p}" for r in ("base", "spec") for p in ("concurrency=2", "concurrency=4")}


def test_by_label() -> None:
    df = pd.DataFrame({"label": ["b", "a", "b"], "point_index": [1, 0, 1]})
    assert [(label, len(rows)) for label, rows in analysis.by_label(df)] == [("a", 1), ("b", 2)]
    assert [label for label, _ in analysis.by_label(df.drop(columns="label"))] == ["run"]
    assert [label for label, _ in analysis.by_label(df.iloc[0:0])] == ["run"]


@pytest.fixture()
def derivations(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts the row derivations and chunk frames built (what used to be
    repeated for every consumer)."""
    counts = {"add_derived": 0, "chunks": 0}
    for name in counts:
        original = getattr(metrics, name)

        def counting(df: pd.DataFrame, _name: str = name, _original: Any = original) -> pd.DataFrame:
            counts[_name] += 1
            result: pd.DataFrame = _original(df)
            return result

        monkeypatch.setattr(metrics, name, counting)
    return counts


def test_compare_and_report_derive_each_run_once(tmp_path: Path, derivations: dict[str, int]) -> None:
    path = write(two_runs(), tmp_path / "ab.arrow")
    result = CliRunner().invoke(cli, ["compare", path, "--resamples", "100"])
    assert result.exit_code == 0, result.output
    # Two runs: one derivation each, one chunk frame per run and point.
    assert derivations == {"add_derived": 2, "chunks": 4}
    derivations.update(add_derived=0, chunks=0)
    report.build(path, resamples=100)
    assert derivations == {"add_derived": 2, "chunks": 4}
    derivations.update(add_derived=0, chunks=0)
    specreplay.compare(f"{path}:base", f"{path}:spec", resamples=100)
    assert derivations == {"add_derived": 2, "chunks": 4}


def test_findings_record_each_runs_thresholds_and_max_tokens(make_results: MakeResults) -> None:
    runs_config = [
        {"label": "base", "points": POINTS, "max_tokens": 64},
        {"label": "spec", "points": POINTS, "max_tokens": 128, "thresholds": {"max_error_rate": 0.5}},
    ]
    df = make_results(two_runs(), {"specreplay.version": "0.1.0", "specreplay.runs": json.dumps(runs_config)})
    base, spec = analysis.analyse(df)
    assert (base.max_tokens, spec.max_tokens) == (64, 128)
    assert (base.thresholds.max_error_rate, spec.thresholds.max_error_rate) == (0.01, 0.5)
