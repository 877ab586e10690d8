"""Loading results files: a file that is not one is the project's own error,
naming the file and what is wrong, never a raw pyarrow error."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

import specreplay
from specreplay.cli import cli


def test_a_file_that_is_not_arrow(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"id": "a", "body": {"messages": []}}\n')
    with pytest.raises(specreplay.ResultsError, match="not an Arrow IPC file") as info:
        specreplay.load(trace)
    assert str(info.value).startswith(f"{trace}: not a specreplay results file")
    assert isinstance(info.value, ValueError) and info.value.path == str(trace)
    with pytest.raises(specreplay.ResultsError):
        specreplay.load(trace, chunks=True)


def test_an_arrow_file_without_the_results_columns(tmp_path: Path) -> None:
    other = tmp_path / "other.arrow"
    table = pa.table({"label": ["a"], "latency": [1.0]})
    with pa.OSFile(str(other), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    with pytest.raises(specreplay.ResultsError, match=r"without the column\(s\) point, point_index, request_index, trace_id, warmup and 18 more"):
        specreplay.load(other)


def test_a_damaged_partial_stream_is_named(tmp_path: Path) -> None:
    (tmp_path / "run.arrow.partial").write_bytes(b"\x00garbage")
    with pytest.raises(specreplay.ResultsError, match=r"run\.arrow\.partial: not a specreplay results file: not an Arrow IPC stream"):
        specreplay.load(tmp_path / "run.arrow")


@pytest.mark.parametrize("command", [["compare"], ["report", "-o", "r.html"], ["config", "show"]])
def test_commands_say_it_in_one_line(tmp_path: Path, command: list[str]) -> None:
    bogus = tmp_path / "notes.txt"
    bogus.write_text("not results\n")
    args = [*command, str(bogus)] + ([str(bogus)] if command == ["compare"] else [])
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    assert f"{bogus}: not a specreplay results file: not an Arrow IPC file" in result.output
    assert "Traceback" not in result.output
