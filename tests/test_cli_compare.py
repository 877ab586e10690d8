"""`specreplay compare`: the table, --json and --csv carry the numbers of
`specreplay.compare`; invalid runs are refused unless --force; FILE:LABEL
picks a run of a file that holds several."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
from click.testing import CliRunner
from conftest import T0, config_metadata, results_table

import specreplay
from specreplay.cli import cli

POINTS = [{"point": "concurrency=4", "mode": "concurrency", "value": 4}]


def write(rows: list[dict[str, object]], path: Path) -> str:
    table = results_table(rows, config_metadata(POINTS))
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return str(path)


def rows(label: str, gap_us: int, n: int = 24, failed: int = 0) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for i in range(n):
        chunks = [(20_000 + gap_us * j + 37 * ((i * j) % 11), 1, "reasoning" if j < 10 else "content") for j in range(20)]
        row: dict[str, object] = {"label": label, "point": "concurrency=4", "trace_id": f"t{i}", "sent_us": T0 + i * 500_000, "chunks": chunks}
        if i < failed:
            row.update(chunks=None, error_kind="http", http_status=500, end_us=T0 + i * 500_000 + 1_000)
        out.append(row)
    return out


def test_json_and_csv_carry_the_python_numbers(sim_runs: dict[str, Path]) -> None:
    base, spec = str(sim_runs["base"]), str(sim_runs["spec"])
    expected = specreplay.compare(base, spec)
    result = CliRunner().invoke(cli, ["compare", base, spec, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["base"] == base and [r["valid"] for r in doc["runs"]] == [True, True]
    got = pd.DataFrame(doc["comparisons"])
    pd.testing.assert_frame_equal(got[list(expected.columns)], expected, check_dtype=False)
    csv = CliRunner().invoke(cli, ["compare", base, spec, "--csv"])
    assert csv.exit_code == 0
    pd.testing.assert_frame_equal(pd.read_csv(io.StringIO(csv.stdout)), expected, check_dtype=False)


def test_the_table(sim_runs: dict[str, Path]) -> None:
    result = CliRunner().invoke(cli, ["compare", str(sim_runs["base"]), str(sim_runs["spec"])], env={"COLUMNS": "150"})
    assert result.exit_code == 0, result.output
    assert "paired by trace id" in result.stdout
    assert "TPOT p50 ms" in result.stdout and "slower" in result.stdout
    assert "95% CI" in result.stdout


def test_labels_of_one_file(tmp_path: Path) -> None:
    ab = write(rows("baseline", 10_000) + rows("ngram", 12_000), tmp_path / "ab.arrow")
    whole = CliRunner().invoke(cli, ["compare", ab, "--csv"])
    assert whole.exit_code == 0, whole.output
    frame = pd.read_csv(io.StringIO(whole.stdout))
    assert set(frame["base"]) == {"baseline"} and set(frame["run"]) == {"ngram"}
    swapped = pd.read_csv(io.StringIO(CliRunner().invoke(cli, ["compare", f"{ab}:ngram", f"{ab}:baseline", "--csv"]).stdout))
    assert set(swapped["base"]) == {"ngram"}
    assert (swapped.set_index("metric")["change"] < 0).loc["tpot_p50_ms"]
    lonely = CliRunner().invoke(cli, ["compare", f"{ab}:ngram"])
    assert lonely.exit_code == 2 and "nothing to compare" in lonely.output
    missing = CliRunner().invoke(cli, ["compare", f"{ab}:spec", ab])
    assert missing.exit_code == 1 and "no run labelled 'spec'" in missing.output


def test_an_invalid_run_is_refused_unless_forced(tmp_path: Path) -> None:
    base = write(rows("run", 10_000), tmp_path / "base.arrow")
    broken = write(rows("run", 10_000, failed=6), tmp_path / "broken.arrow")
    refused = CliRunner().invoke(cli, ["compare", base, broken])
    assert refused.exit_code == 3
    assert "error_rate" in refused.stderr and "refusing to compare" in refused.stderr and "--force" in refused.stderr
    forced = CliRunner().invoke(cli, ["compare", base, broken, "--force", "--json"])
    assert forced.exit_code == 0, forced.output
    doc = json.loads(forced.stdout)
    assert doc["forced"] is True and [r["valid"] for r in doc["runs"]] == [True, False]
    assert "comparing anyway" in forced.stderr


def test_a_pipe_gets_whole_lines(tmp_path: Path) -> None:
    """Through a real pipe (as `| grep` or a CI log), each table row and its
    verdict stay on one line: rich would wrap the table at 80 columns."""
    import os
    import subprocess
    import sys

    base = write(rows("run", 10_000), tmp_path / "base.arrow")
    again = write(rows("run", 10_000), tmp_path / "again.arrow")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR")}
    done = subprocess.run([sys.executable, "-m", "specreplay", "compare", base, again], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.rstrip().endswith("ok requests  ·  paired by trace id") for line in lines), done.stdout
    ttft = next(line for line in lines if line.startswith("│ TTFT p50 ms"))
    assert "no significant difference" in ttft
    assert max(len(line) for line in lines) > 80


def test_the_table_has_the_servers_acceptance_beside_tpot(sim_runs: dict[str, Path]) -> None:
    result = CliRunner().invoke(cli, ["compare", str(sim_runs["base"]), str(sim_runs["spec"])], env={"COLUMNS": "150"})
    assert result.exit_code == 0, result.output
    names = [line.split("│")[1].strip() for line in result.output.splitlines() if line.startswith("│")]
    tpot = names.index("TPOT p99 ms")
    assert names[tpot + 1 : tpot + 4] == ["acceptance rate", "acceptance length", "break-even length"]
    row = next(line for line in result.output.splitlines() if line.startswith("│ acceptance length"))
    cells = [c.strip() for c in row.split("│")[1:-1]]
    # No speculation in the base: its side is empty; the run's is the server's; no interval.
    assert cells[1] == "—" and 1.3 < float(cells[2]) < 1.5 and cells[4] == "—" and cells[5] == "not resampled"


def test_two_seeds_of_one_config_print_no_faster_or_slower(sim_runs: dict[str, Path]) -> None:
    result = CliRunner().invoke(cli, ["compare", str(sim_runs["base"]), str(sim_runs["seed2"])], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert len(rows) > 10, result.stdout
    assert not [line for line in rows if " faster " in line or " slower " in line], result.stdout
    # How false verdicts are controlled, under the table.
    assert "Holm–Bonferroni over the" in result.stdout and "judged figures of this table" in result.stdout


def test_repeats_run_interleaved_and_compare_judges_between_them(tmp_path: Path) -> None:
    config = tmp_path / "ab.toml"
    config.write_text(
        'trace = "traces/poisson-200.jsonl"\nconcurrency = [4]\nnum_requests = 24\nsessions = "independent"\nrepeats = 2\n'
        f'output = "{tmp_path / "ab.arrow"}"\n'
        '[run.a]\nsim = { tpot_ms = 2, ttft_ms = 5, reasoning_tokens = [10, 20], content_tokens = [5, 10] }\n'
        '[run.b]\nsim = { tpot_ms = 2, ttft_ms = 5, reasoning_tokens = [10, 20], content_tokens = [5, 10] }\n'
    )
    done = CliRunner().invoke(cli, ["replay", "--config", str(config)], env={"COLUMNS": "200"})
    assert done.exit_code in (0, 2), done.output
    df = specreplay.load(tmp_path / "ab.arrow")
    assert list(dict.fromkeys(df["label"])) == ["a@1", "b@1", "a@2", "b@2"]  # A B A B
    result = CliRunner().invoke(cli, ["compare", str(tmp_path / "ab.arrow")], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "b vs a" in result.stdout and "2 interleaved repeats" in result.stdout, result.stdout
