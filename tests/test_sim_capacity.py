"""The simulator's capacity model, fixed-length answers and `/metrics`, as a
user reaches them: `specreplay serve` flags and files, and replays against
the embedded simulator with `--sim-config`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import specreplay
from conftest import MACHINE_FINDINGS, stored_findings
from specreplay.cli import cli
from specreplay.commands.serve import build_config


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), env={"COLUMNS": "160"})
    return result.exit_code, result.output


def write_trace(path: Path, bodies: list[dict[str, object]]) -> str:
    with path.open("w") as f:
        for i, body in enumerate(bodies):
            record = {"id": f"r{i}", "arrival": 0.0, "api": "chat", "body": body}
            f.write(json.dumps(record) + "\n")
    return str(path)


def prompt(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"question number {i} about something"}]


@pytest.fixture()
def fast_reasoner(tmp_path: Path) -> str:
    """The default reasoning lengths (256 to 1024), quick steps."""
    p = tmp_path / "sim.toml"
    p.write_text("ttft_ms = 5\nprefill_us_per_token = 0\ntpot_ms = 0.2\n")
    return str(p)


def test_an_imported_fixed_length_trace_replays_as_a_valid_measurement(tmp_path: Path, fast_reasoner: str) -> None:
    # What the importers write: a length, not a question to think about.
    fixed = [{"messages": prompt(i), "max_tokens": 64, "min_tokens": 64, "ignore_eos": True} for i in range(8)]
    trace = write_trace(tmp_path / "fixed.jsonl", fixed)
    out = tmp_path / "fixed.arrow"
    code, text = invoke("replay", trace, "--concurrency", "4", "--sim-config", fast_reasoner, "-o", str(out))
    assert code == 0, text
    # No finding on the requests. Not --strict: at 0.2 ms a step, a stall of
    # a loaded machine sends a whole 64-token answer at once (burst_streams),
    # a finding about the machine (MACHINE_FINDINGS), not the trace.
    assert {f.code for f in stored_findings(out) if f.level != "note"} <= MACHINE_FINDINGS, text
    df = specreplay.load(out)
    assert (df["output_tokens"] == 64).all() and (df["content_tokens"] == 64).all()
    assert (df["reasoning_tokens"] == 0).all()

    # The same budget on ordinary requests: the reasoning model's trap, as before.
    plain = [{"messages": prompt(i), "max_tokens": 64} for i in range(8)]
    trace = write_trace(tmp_path / "plain.jsonl", plain)
    code, text = invoke("replay", trace, "--concurrency", "4", "--strict", "--sim-config", fast_reasoner, "-o", str(tmp_path / "p.arrow"))
    assert code == 3, text
    assert "reasoning_ate_budget" in text


def test_a_sim_config_with_capacity_makes_requests_queue(tmp_path: Path) -> None:
    sim = tmp_path / "capacity.toml"
    sim.write_text("ttft_ms = 10\nprefill_us_per_token = 0\ntpot_ms = 2\n\n[capacity]\nmax_num_seqs = 2\nbatch_step_cost = 0.0\n")
    bodies = [{"messages": prompt(i), "max_tokens": 32, "min_tokens": 32, "ignore_eos": True} for i in range(16)]
    trace = write_trace(tmp_path / "t.jsonl", bodies)
    out = tmp_path / "run.arrow"
    code, text = invoke("replay", trace, "--concurrency", "1", "8", "--sim-config", str(sim), "-o", str(out))
    assert code == 0, text
    df = specreplay.load(out)
    ttft = (df["first_token_us"] - df["sent_us"]).groupby(df["point"]).median()
    at8 = df[df["point"] == "concurrency=8"]
    answer = (at8["last_token_us"] - at8["first_token_us"]).median()
    # Eight in flight, two slots: each waits for about three answers of 32
    # steps (2 ms each) ahead of it, on top of what one at a time takes. In
    # answers, not milliseconds: a loaded machine delays the first tokens of
    # both points alike (by 30 ms, seen here), while the steps of an answer
    # keep their schedule.
    assert ttft["concurrency=8"] - ttft["concurrency=1"] > 2 * answer, (ttft, answer)


def test_capacity_flags_merge_over_the_file() -> None:
    config = build_config({"capacity": {"max_num_seqs": 4, "kv_cache_tokens": 100}}, {"capacity": {"max_num_seqs": 8}, "tpot_ms": 3})
    assert config == {"capacity": {"max_num_seqs": 8, "kv_cache_tokens": 100}, "tpot_ms": 3}


@contextmanager
def serving(*args: str) -> Iterator[str]:
    """`specreplay serve ARGS` on a free port: yields its base URL, then
    stops it with Ctrl-C (and checks that it exits cleanly)."""
    command = [sys.executable, "-m", "specreplay", "serve", "--port", "0", *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
        try:
            assert proc.stdout is not None
            yield proc.stdout.readline().split()[3]
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=15) == 0
        finally:
            if proc.poll() is None:
                proc.kill()


def post(url: str, body: dict[str, object]) -> dict[str, Any]:
    req = urllib.request.Request(f"{url}/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        answer: dict[str, Any] = json.load(resp)
    return answer


def test_cli_serve_capacity_and_fixed_length_flags() -> None:
    flags = ("--max-num-seqs", "2", "--kv-cache-tokens", "1000", "--batch-step-cost", "0.2", "--no-prefix-caching", "--fixed-length-reasoning", "--tpot-ms", "1")
    with serving(*flags) as url:
        with urllib.request.urlopen(f"{url.removesuffix('/v1')}/metrics", timeout=10) as resp:
            assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            page = resp.read().decode()
        assert "# TYPE vllm:num_requests_waiting gauge" in page
        assert 'vllm:kv_cache_usage_perc{engine="0",model_name="specreplay-sim"} 0' in page
        assert "prefix_cache" not in page  # --no-prefix-caching
        # --kv-cache-tokens reached the server: a request larger than the cache is refused.
        with pytest.raises(urllib.error.HTTPError) as err:
            post(url, {"messages": prompt(0), "max_tokens": 2000, "ignore_eos": True})
        assert err.value.code == 400
        assert "capacity.kv_cache_tokens 1000" in err.value.read().decode()
        # --fixed-length-reasoning: a fixed length is reasoned about too.
        usage = post(url, {"messages": prompt(0), "max_tokens": 600, "ignore_eos": True})["usage"]
        assert usage["completion_tokens"] == 600
        assert usage["completion_tokens_details"]["reasoning_tokens"] > 0


@pytest.mark.parametrize(
    ("args", "file_text", "expect"),
    [
        (["--max-num-seqs", "0"], None, "command line: invalid configuration: sim: capacity.max_num_seqs"),
        (["--batch-step-cost", "-1"], None, "command line: invalid configuration: sim: capacity.batch_step_cost"),
        (["--kv-cache-tokens", "5"], "[capacity]\nmax_num_seqs = 0\n", "cap.toml: invalid configuration: sim: capacity.max_num_seqs"),
        ([], "[capacity]\nmax_seqs = 4\n", "cap.toml: invalid configuration: sim: capacity.max_seqs"),
    ],
)
def test_capacity_errors_name_the_source_and_key(tmp_path: Path, args: list[str], file_text: str | None, expect: str) -> None:
    if file_text is not None:
        cfg = tmp_path / "cap.toml"
        cfg.write_text(file_text)
        args = [*args, "--config", str(cfg)]
    code, text = invoke("serve", "--port", "0", *args)
    assert code == 1, text
    assert expect in text and len(text.strip().splitlines()) == 1, text
