"""docs/results.md stays in step with the code: every column, token source and
validity code is documented, and the by-hand pandas snippet agrees with
`summarize`."""

import math
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import T0, results_frame, results_table

from specreplay.analysis import summary
from specreplay.analysis import checks, checks_load, validity
from specreplay.analysis.analyse import analyse
from specreplay.results.schema import CHUNK_TOKEN_SOURCES, COLUMNS, SERVER_METRIC_COLUMNS, TOKEN_SOURCES
from specreplay.servermetrics.figures import FIGURES, point_figures

DOC = Path(__file__).resolve().parent.parent / "docs" / "results.md"
TEXT = DOC.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", [c.name for c in COLUMNS])
def test_every_column_is_documented(name: str) -> None:
    assert f"| `{name}` |" in TEXT


@pytest.mark.parametrize("name", [c.name for c in SERVER_METRIC_COLUMNS] + list(FIGURES))
def test_every_sample_column_and_server_figure_is_documented(name: str) -> None:
    assert f"| `{name}` |" in TEXT


def snippet_with(marker: str) -> str:
    """The page's one Python block that contains `marker`."""
    (snippet,) = [block for block in re.findall(r"```python\n(.*?)```", TEXT, flags=re.S) if marker in block]
    return snippet


@pytest.mark.parametrize("name", list(TOKEN_SOURCES) + list(CHUNK_TOKEN_SOURCES))
def test_every_token_source_is_documented(name: str) -> None:
    assert f"| `{name}` |" in TEXT


@pytest.mark.parametrize(
    "code",
    [
        "reasoning_ate_budget",
        "estimated_tokens",
        "multi_token_chunks",
        "burst_streams",
        "client_saturated",
        "engine_delay",
        "queue_growing",
        "error_rate",
        "session_turns_skipped",
        "too_few_requests",
        "too_few_sessions",
        "acceptance_mismatch",
        "predicted",
        "outside_calibration",
    ],
)
def test_every_validity_code_is_documented(code: str) -> None:
    assert f"| `{code}` |" in TEXT
    sources = "".join(Path(m.__file__ or "").read_text(encoding="utf-8") for m in (checks, checks_load))
    assert f'code="{code}"' in sources


@pytest.mark.parametrize("field", [f.name for f in fields(validity.ValidityThresholds)])
def test_every_threshold_and_its_default_is_documented(field: str) -> None:
    default = getattr(validity.ValidityThresholds(), field)
    assert f"| `{field}` | {default} |" in TEXT


def run_snippet(snippet: str, rows: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Runs a snippet of the page on `rows` written as results.arrow; its variables."""
    table = results_table(rows)
    with pa.OSFile(str(tmp_path / "results.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    monkeypatch.chdir(tmp_path)
    scope: dict[str, Any] = {}
    exec(snippet, scope)
    return scope


def test_the_by_hand_snippet_matches_summarize(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snippet = snippet_with("\nby_hand = {")
    rows: list[dict[str, Any]] = [{"warmup": True}]
    for i in range(12):
        chunks = [(40_000 + 7_000 * i, 5, "reasoning")] + [(90_000 + 9_000 * j + 100 * i, 1 + j % 3, "content") for j in range(6)]
        connect = {"connect_us": 900 + 70 * i} if i < 4 else {}
        rows.append({"sent_us": T0 + 100_000 * i, "scheduled_us": T0 + 100_000 * i - 30 * i, "chunks": chunks, **connect})
    rows.append({"sent_us": T0 + 1_250_000, "error_kind": "timeout", "chunks": None, "end_us": T0 + 1_300_000})
    scope = run_snippet(snippet, rows, tmp_path, monkeypatch)
    expected = summary.summarize(results_frame(rows)).set_index("point").loc["rate=8"]
    assert len(scope["by_hand"]) > 10
    for name, value in scope["by_hand"].items():
        assert not math.isnan(float(value)), name
        assert float(value) == pytest.approx(float(expected[name])), name


def test_the_session_snippet_matches_summarize(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snippet = snippet_with("session_by_hand = {")
    point = "concurrency=16"
    rows: list[dict[str, Any]] = [{"warmup": True, "point": point}]
    # Six sessions of three turns (turns 1, 2 late by 40 µs × session); the last one failed on its
    # second turn, so its third was skipped; and a request on its own.
    for sid in range(6):
        start = T0 + 1_000_000 * sid
        for turn in range(3):
            sent = start + 400_000 * turn + 10_000 * sid
            row: dict[str, Any] = {"point": point, "session_id": f"s{sid}", "turn_index": turn, "session_turns": 3,
                                   "sent_us": sent, "scheduled_us": sent - 40 * sid * turn,
                                   "chunks": [(60_000 + 5_000 * turn + 1_000 * sid + 8_000 * j, 1, "content") for j in range(4)]}
            if turn:
                row.update(predecessor_end_us=sent - 150_000 - 40 * sid * turn, think_time_us=150_000)
            if sid == 5 and turn == 1:
                row.update(error_kind="http", chunks=[], end_us=sent + 2_000)
            if sid == 5 and turn == 2:
                row.update(error_kind="skipped_after_failure", chunks=None, sent_us=None, end_us=None, think_time_us=None)
            rows.append(row)
    rows.append({"point": point, "sent_us": T0 + 9_000_000})
    scope = run_snippet(snippet, rows, tmp_path, monkeypatch)
    [run] = analyse(results_frame(rows))
    expected = run.summary.set_index("point").loc[point]
    assert expected["sessions"] == 6 and expected["sessions_completed"] == 5 and expected["skipped"] == 1
    assert expected["failed"] == 1 and expected["errors_by_kind"] == "http: 1"
    for name, value in scope["session_by_hand"].items():
        assert float(value) == pytest.approx(float(expected[name])), name
    by_turn = run.point(point).ttft_by_turn["ttft_p50_ms"]
    assert scope["ttft_p50_ms_by_turn"].to_dict() == pytest.approx(by_turn.to_dict())


def test_the_server_by_hand_snippet_matches_point_figures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specreplay.settings.config import ReplayConfig
    from specreplay.run.replay import run_replay

    snippet = snippet_with("server_by_hand = {")
    sim = {"tpot_ms": 5, "reasoning_tokens": [20, 30], "content_tokens": [5, 10], "spec_draft_len": 3, "spec_acceptance": 0.6,
           "capacity": {"max_num_seqs": 4, "kv_cache_tokens": 4000}}  # fmt: skip
    trace = str(Path(__file__).resolve().parent.parent / "traces" / "reasoning-prompts.jsonl")
    config = ReplayConfig(trace=trace, concurrency=[8], num_requests=16, label="ngram", sim=sim, metrics_interval=0.1, output=str(tmp_path / "results.arrow"))
    run_replay(config)
    monkeypatch.chdir(tmp_path)
    scope: dict[str, Any] = {}
    exec(snippet, scope)
    import specreplay

    samples = specreplay.load(tmp_path / "results.arrow", metrics=True)
    expected = point_figures(samples[(samples["label"] == "ngram") & (samples["point"] == "concurrency=8")])
    assert expected["server_running_max"] == 4 and expected["spec_drafts"] > 0 and expected["server_kv_usage_max"] > 0
    for name, value in scope["server_by_hand"].items():
        if name == "spec_acceptance_by_position":
            assert value == pytest.approx(expected[name]), name
            continue
        assert not math.isnan(float(value)), name
        assert float(value) == pytest.approx(float(expected[name])), name
