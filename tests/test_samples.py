"""The samples shipped inside the package (`specreplay.samples`): the quick
start works from a directory with no traces/ in it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from specreplay import samples
from specreplay.cli import cli
from specreplay.settings.config_file import load_config_file
from specreplay.errors import ConfigError, TraceError
from specreplay.trace.index import scan_trace

ROOT = Path(__file__).resolve().parent.parent


def test_the_samples_are_inside_the_package_and_the_clone_links_to_them() -> None:
    assert samples.names(samples.TRACE_SUFFIX) == ["poisson-200", "reasoning-prompts", "reasoning-prompts-60"]
    assert "spec-decode-ab" in samples.names(samples.CONFIG_SUFFIX)
    for name in samples.names(samples.TRACE_SUFFIX):
        # One copy in the repository: traces/ links to the package's file.
        assert (ROOT / "traces" / f"{name}.jsonl").resolve() == samples.HERE / f"{name}.jsonl"
    for name in samples.names(samples.CONFIG_SUFFIX):
        assert (ROOT / "examples" / f"{name}.toml").resolve() == samples.HERE / f"{name}.toml"


def test_a_sample_name_resolves_and_an_unknown_one_lists_the_others() -> None:
    index = scan_trace("sample:reasoning-prompts")
    assert index.records == 12 and Path(index.path).parent == samples.HERE
    assert samples.trace_path("traces/x.jsonl") == "traces/x.jsonl"
    with pytest.raises(TraceError, match="no such sample trace.*sample:poisson-200, sample:reasoning-prompts, sample:reasoning-prompts-60"):
        scan_trace("sample:nope")
    with pytest.raises(TraceError, match="no such sample"):
        scan_trace("sample:../cli")
    with pytest.raises(ConfigError, match="no such sample config.*sample:spec-decode-ab"):
        load_config_file("sample:nope", {})


def test_every_example_config_names_a_sample_and_loads_from_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in samples.names(samples.CONFIG_SUFFIX):
        for config in load_config_file(f"sample:{name}", {}):
            config.validate()
            assert samples.is_sample(config.trace), name
            assert scan_trace(config.trace).records > 0


def test_init_then_replay_work_in_an_empty_directory(tmp_path: Path) -> None:
    # A subprocess in a directory with no traces/: what a user of the wheel gets.
    env = {**os.environ, "PYTHONPATH": ""}
    run = lambda *args: subprocess.run([sys.executable, "-m", "specreplay", *args], cwd=tmp_path, env=env,
                                       capture_output=True, text=True, timeout=120)
    made = run("init")
    assert made.returncode == 0, made.stderr
    assert 'trace = "sample:reasoning-prompts"' in (tmp_path / "specreplay.toml").read_text()
    done = run("replay", "--config", "specreplay.toml", "--concurrency", "4", "--max-tokens", "64", "-o", "a.arrow")
    assert done.returncode == 0, done.stderr
    assert "12 requests: 12 ok" in done.stdout
    done = run("replay", "sample:reasoning-prompts", "--rate", "8", "--max-tokens", "64", "-o", "b.arrow")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "b.arrow").is_file()


def test_the_help_names_the_sample() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert "specreplay replay sample:reasoning-prompts --rate 8" in result.output
