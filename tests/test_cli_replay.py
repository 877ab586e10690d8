"""The `specreplay replay` command: what a user types and what they see."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import specreplay
from specreplay.cli import cli
from specreplay.commands.replay import expand_list_options

ROOT = Path(__file__).resolve().parent.parent
REASONING = str(ROOT / "traces" / "reasoning-prompts.jsonl")


@pytest.fixture()
def sim_toml(tmp_path: Path) -> str:
    p = tmp_path / "sim.toml"
    p.write_text("ttft_ms = 20\nprefill_us_per_token = 0\ntpot_ms = 2\nreasoning_tokens = [20, 40]\ncontent_tokens = [5, 10]\n")
    return str(p)


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), env={"COLUMNS": "160"})
    return result.exit_code, result.output


def test_list_options_expand() -> None:
    assert expand_list_options(["replay", "t", "--rate", "1", "2.5", "-o", "x"]) == ["replay", "t", "--rate", "1", "--rate", "2.5", "-o", "x"]
    assert expand_list_options(["--concurrency", "1", "8", "64"]) == ["--concurrency", "1", "--concurrency", "8", "--concurrency", "64"]
    assert expand_list_options(["--rate", "--seed", "3"]) == ["--rate", "--seed", "3"]


def test_only_replay_reads_lists(tmp_path: Path) -> None:
    # synth's --rate takes one number: a second one is an error, not a silent override.
    code, text = invoke("synth", "-o", str(tmp_path / "t.jsonl"), "--rate", "1", "100")
    assert code == 2 and "100" in text, text
    assert not (tmp_path / "t.jsonl").exists()


def test_sweep_from_the_command_line(tmp_path: Path, sim_toml: str) -> None:
    out = tmp_path / "run.arrow"
    code, text = invoke("replay", REASONING, "--concurrency", "1", "8", "--sim-config", sim_toml, "-o", str(out))
    assert code == 0, text
    assert "embedded simulated server" in text
    assert "concurrency=1" in text and "concurrency=8" in text
    assert "TTFT" in text and "TPOT" in text
    df = specreplay.load(out)
    assert sorted(set(df["point"])) == ["concurrency=1", "concurrency=8"]


def test_preconnect_keeps_the_handshakes_out_of_the_first_wave(tmp_path: Path, sim_toml: str) -> None:
    # On by default for closed loop: no first-wave request connects. Without
    # it, each first-wave request opens its connection and its row says how long
    # that took, and the summary counts them.
    runs = {}
    for flag in ("--preconnect", "--no-preconnect"):
        out = tmp_path / f"{flag}.arrow"
        code, text = invoke("replay", REASONING, "--concurrency", "4", "--num-requests", "8", "--sim-config", sim_toml, "-o", str(out), flag)
        assert code == 0, text
        runs[flag] = (specreplay.load(out).sort_values("request_index"), text)
    warm, warm_text = runs["--preconnect"]
    assert warm["connect_us"].iloc[:4].isna().all(), warm["connect_us"].tolist()
    cold, cold_text = runs["--no-preconnect"]
    assert (cold["connect_us"].iloc[:4] > 0).all(), cold["connect_us"].tolist()
    connected = int(cold["connect_us"].notna().sum())
    assert f"{connected} requests connected" in cold_text
    if sys.platform == "linux":
        assert "kernel stamps on 100% of chunks" in warm_text, warm_text
        assert (warm["stamp_source"] == "kernel").all()


def test_budget_trap_warns_and_strict_fails(tmp_path: Path, sim_toml: str) -> None:
    args = ["replay", REASONING, "--concurrency", "4", "--max-tokens", "10", "--sim-config", sim_toml]
    code, text = invoke(*args, "-o", str(tmp_path / "a.arrow"))
    assert code == 0
    assert "INVALID MEASUREMENT" in text and "reasoning_ate_budget" in text and "--max-tokens" in text
    code, text = invoke(*args, "--strict", "-o", str(tmp_path / "b.arrow"))
    assert code == 3
    assert "--strict" in text
    # The findings are in the file too.
    from specreplay.validity import from_json

    stored = from_json(specreplay.load(tmp_path / "b.arrow").attrs["specreplay.validity"])
    assert "reasoning_ate_budget" in {f.code for f in stored}


def test_strict_passes_a_valid_run(tmp_path: Path, sim_toml: str) -> None:
    code, text = invoke("replay", REASONING, "--concurrency", "4", "--strict", "--sim-config", sim_toml, "-o", str(tmp_path / "r.arrow"))
    assert code == 0, text


def test_per_request_lines(tmp_path: Path, sim_toml: str) -> None:
    code, text = invoke("replay", REASONING, "--concurrency", "4", "--per-request", "--sim-config", sim_toml, "-o", str(tmp_path / "r.arrow"))
    assert code == 0
    assert "fencing" in text and "bst" in text


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--rate", "0"], "--rate"),
        (["--rate", "1", "--concurrency", "2"], "only one of"),
        (["--extra-body", "{nope"], "--extra-body"),
        (["--header", "NoColon"], "--header"),
        (["--arrival", "weibull"], "--arrival"),
        (["--rate", "abc"], "not a number"),
        (["--rate", "4", "--preconnect"], "preconnect: an open-loop run opens max_concurrency connections"),
    ],
)
def test_bad_options_are_one_line_errors(args: list[str], fragment: str) -> None:
    code, text = invoke("replay", REASONING, *args)
    assert code != 0
    assert fragment in text
    assert "Traceback" not in text


def test_bad_trace_names_file_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "body": {"messages": []}}\n{"id": "b", "api": "grpc", "body": {}}\n')
    code, text = invoke("replay", str(bad), "--rate", "1")
    assert code == 1
    assert f"{bad}:2: field 'api'" in text
    assert "Traceback" not in text


def test_ctrl_c_keeps_finished_requests_and_exits_non_zero(tmp_path: Path, sim_toml: str) -> None:
    out = tmp_path / "run.arrow"
    trace = ROOT / "traces" / "poisson-200.jsonl"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "specreplay", "replay", str(trace), "--speedup", "1", "--sim-config", sim_toml, "-o", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
    )
    try:
        time.sleep(3.0)  # the trace lasts ~50 s: interrupt it early
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, output.decode()
    df = specreplay.load(out)
    assert 0 < len(df) < 200
    assert df["error_kind"].isna().sum() > 0
    # Whatever was in flight is a row too, marked cancelled, never lost.
    assert set(df["error_kind"].dropna()) <= {"cancelled"}
    assert not Path(f"{out}.partial").exists()


def test_debug_shows_the_traceback_of_a_user_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "api": "grpc", "body": {}}\n')
    result = CliRunner().invoke(cli, ["--debug", "replay", str(bad), "--rate", "1"])
    assert result.exit_code == 1
    assert isinstance(result.exception, specreplay.TraceError)  # raised, not turned into one line
    code, text = invoke("replay", str(bad), "--rate", "1")
    assert code == 1 and "Traceback" not in text and "field 'api'" in text
