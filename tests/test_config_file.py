"""Benchmark config files: precedence, validation that names file, line and
key, named runs into one file, the round trip through a results file, rerun
and init."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

import specreplay
from specreplay.cli import cli
from specreplay.settings.config import FIELDS, ReplayConfig
from specreplay.settings.config_file import load_config_file, stored_runs, to_toml
from specreplay.errors import ConfigError
from specreplay.samples import trace_path

ROOT = Path(__file__).resolve().parent.parent
REASONING = str(ROOT / "traces" / "reasoning-prompts.jsonl")
FAST_SIM = '{ ttft_ms = 20, prefill_us_per_token = 0, tpot_ms = 2, reasoning_tokens = [20, 40], content_tokens = [5, 10] }'


def write(tmp_path: Path, text: str, name: str = "bench.toml") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), env={"COLUMNS": "160"})
    return result.exit_code, result.output


def test_precedence_file_then_env_then_flags(tmp_path: Path) -> None:
    path = write(tmp_path, f'trace = "{REASONING}"\nmax_tokens = 100\nseed = 1\nwarmup = 2\n')
    env = {"SPECREPLAY_MAX_TOKENS": "200", "SPECREPLAY_SEED": "5"}
    [only_file] = load_config_file(path, {})
    assert (only_file.max_tokens, only_file.seed, only_file.warmup) == (100, 1, 2)
    [with_env] = load_config_file(path, env)
    assert (with_env.max_tokens, with_env.seed, with_env.warmup) == (200, 5, 2)
    [with_flags] = load_config_file(path, env, {"max_tokens": 300})
    assert (with_flags.max_tokens, with_flags.seed, with_flags.warmup) == (300, 5, 2)


def test_flags_override_the_file_on_the_command_line(tmp_path: Path) -> None:
    out = tmp_path / "r.arrow"
    path = write(tmp_path, f'trace = "{REASONING}"\nconcurrency = [2]\nmax_tokens = 100\nsim = {FAST_SIM}\noutput = "{out}"\n')
    code, text = invoke("replay", "--config", path, "--max-tokens", "7", "--concurrency", "4")
    assert code == 0, text
    df = specreplay.load(out)
    assert set(df["point"]) == {"concurrency=4"}
    assert (df["reasoning_tokens"] == 7).all()  # the flag's budget, not the file's


def test_secrets_come_only_from_the_environment(tmp_path: Path) -> None:
    path = write(tmp_path, f'trace = "{REASONING}"\napi_key = "sk-123"\n')
    with pytest.raises(ConfigError, match=r"bench.toml:2: api_key: secrets are never read from a file"):
        load_config_file(path, {})
    path = write(tmp_path, f'trace = "{REASONING}"\napi_key_env = "MY_KEY"\n')
    [config] = load_config_file(path, {})
    config.resolve_api_key({"MY_KEY": "sk-from-env", "OPENAI_API_KEY": "other"})
    assert config.api_key == "sk-from-env"
    assert "sk-from-env" not in str(config.to_metadata())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('trace = "t"\nmax_token = 5\n', r"bench.toml:2: max_token: unknown key \(did you mean 'max_tokens'\?\)"),
        ('trace = "t"\n\nseed = "one"\n', r"bench.toml:3: seed: expected an integer, got a string \('one'\)"),
        ('trace = "t"\nconcurrency = [1, 0]\n', r"bench.toml:2: concurrency: must be at least 1, got 0"),
        ('trace = "t"\nrate = [-2.0]\n', r"bench.toml:2: rate: must be positive, got -2"),
        ('trace = "t"\narrival = "weibull"\n', r"bench.toml:2: arrival: expected one of poisson, constant, gamma"),
        ('trace = "t"\nignore_eos = 1\n', r"bench.toml:2: ignore_eos: expected true or false"),
        ('trace = "t"\nurl = "localhost:8000"\n', r"bench.toml:2: url: expected an http:// or https:// URL"),
        ('trace = "t"\nheaders = { X-A = 1 }\n', r"bench.toml:2: headers: every value must be a string"),
        ('trace = "t"\n[run.a]\nseed = 1\n[run.b]\ntimeout = -1.0\n', r"bench.toml:5: run.b.timeout: must be positive"),
        ('trace = "t"\n[run.a]\nmax_tokens = 0\n', r"bench.toml:3: run.a.max_tokens: must be at least 1"),
        ('trace = "t"\n[run.a]\noutput = "x.arrow"\n', r"bench.toml:3: run.a.output: applies to the whole file"),
        ('trace = "t"\nrun = 3\n', r"bench.toml:2: run: runs are tables"),
        ('trace = "t"\nseed = \n', r"bench.toml: .*line 2"),
    ],
)
def test_validation_names_file_line_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=message):
        load_config_file(path, {})


def test_bad_environment_value_names_the_variable(tmp_path: Path) -> None:
    path = write(tmp_path, 'trace = "t"\n')
    with pytest.raises(ConfigError, match="environment variable SPECREPLAY_WARMUP"):
        load_config_file(path, {"SPECREPLAY_WARMUP": "many"})


def test_thresholds_are_checked(tmp_path: Path) -> None:
    [config] = load_config_file(write(tmp_path, f'trace = "{REASONING}"\n[thresholds]\nsend_lag_ms = 1.0\n'), {})
    with pytest.raises(ConfigError, match="thresholds: unknown thresholds: send_lag_ms"):
        config.validate()


def test_config_errors_on_the_command_line_are_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, 'trace = "t"\nmax_token = 5\n')
    code, text = invoke("replay", "--config", path)
    assert code == 2
    assert "did you mean 'max_tokens'" in text and "Traceback" not in text


def test_named_runs_go_into_one_labelled_file_and_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "ab.arrow"
    path = write(
        tmp_path,
        f"""trace = "{REASONING}"
concurrency = [4]
seed = 3
output = "{out}"

[run.baseline]
sim = {FAST_SIM}

[run.spec]
sim = {{ ttft_ms = 20, prefill_us_per_token = 0, tpot_ms = 2, reasoning_tokens = [20, 40], content_tokens = [5, 10], spec_draft_len = 4, spec_acceptance = 0.8 }}
""",
    )
    code, text = invoke("replay", "--config", path)
    assert code == 0, text
    assert "baseline · concurrency=4" in text and "spec · concurrency=4" in text
    df = specreplay.load(out)
    assert df.groupby("label").size().to_dict() == {"baseline": 12, "spec": 12}
    chunk_max = df.groupby("label")["chunk_tokens"].apply(lambda s: max(max(x) for x in s))
    assert chunk_max["baseline"] == 1 and chunk_max["spec"] > 1
    # Same seed, same prompts: the simulator gives both runs the same lengths.
    by_id = df.pivot_table(index="trace_id", columns="label", values="output_tokens")
    assert (by_id["baseline"] == by_id["spec"]).all()

    # config show prints a file that resolves to the same configurations.
    code, shown = invoke("config", "show", str(out))
    assert code == 0, shown
    again = load_config_file(write(tmp_path, shown, "shown.toml"), {})
    original = load_config_file(path, {})
    assert [c.to_metadata() for c in again] == [c.to_metadata() for c in original]


def test_single_run_round_trip_keeps_every_field(tmp_path: Path) -> None:
    config = ReplayConfig.from_mapping(
        {"trace": REASONING, "rate": [2.0, 4.0], "arrival": "gamma", "burstiness": 0.5, "seed": 9, "max_tokens": 64,
         "ignore_eos": True, "extra_body": {"temperature": 0}, "headers": {"X-Team": "a"}, "label": "x",
         "sim": {"tpot_ms": 3}, "thresholds": {"max_error_rate": 0.05}, "warmup": 1, "timeout": 30.0,
         "think_time": "exp:2", "think_time_scale": 0.5,
         "slo": {"ttft": 2000.0, "targets": ["p99 ttft < 2000"], "min_success_rate": 0.99, "ttft_token": "any"},
         "search_tolerance": 0.1, "search_budget": 60.0}
    )
    text = to_toml([config])
    [back] = load_config_file(write(tmp_path, text), {})
    assert back.to_metadata() == config.to_metadata()
    assert set(tomllib.loads(text)) <= set(FIELDS)


def test_rerun_repeats_the_schedule_under_the_seed(tmp_path: Path) -> None:
    first = tmp_path / "first.arrow"
    path = write(tmp_path, f'trace = "{REASONING}"\nrate = [50.0]\nseed = 11\nsim = {FAST_SIM}\noutput = "{first}"\n')
    code, text = invoke("replay", "--config", path)
    assert code == 0, text
    code, text = invoke("rerun", str(first), "-o", str(tmp_path / "second.arrow"))
    assert code == 0, text

    def offsets(p: Path) -> list[int]:
        df = specreplay.load(p).sort_values("request_index")
        s = df["scheduled_us"].to_numpy()
        return (s - s[0]).tolist()

    assert offsets(first) == offsets(tmp_path / "second.arrow")
    stored = specreplay.load(tmp_path / "second.arrow").attrs["specreplay.config"]
    assert '"seed": 11' in stored


def test_rerun_refuses_a_changed_trace(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(Path(REASONING).read_text())
    out = tmp_path / "r.arrow"
    code, text = invoke("replay", str(trace), "--concurrency", "4", "--sim-config", write(tmp_path, "tpot_ms = 2\nttft_ms = 20\nreasoning_tokens = [20, 40]\ncontent_tokens = [5, 10]\n", "sim.toml"), "-o", str(out))
    assert code == 0, text
    trace.write_text(trace.read_text().replace("binary search tree", "red-black tree"))
    code, text = invoke("rerun", str(out))
    assert code == 1 and "changed since" in text


def test_stored_secret_headers_are_not_replayed_blindly() -> None:
    with pytest.raises(ConfigError, match="Authorization"):
        stored_runs([{"trace": "t", "headers": {"Authorization": "<redacted>"}}], "r.arrow")


def test_init_probes_the_model(tmp_path: Path) -> None:
    from specreplay._core import SimServer

    with SimServer(config={"model": "my-model"}) as srv:
        code, text = invoke("init", "--url", srv.url, "-o", str(tmp_path / "s.toml"))
    assert code == 0, text
    written = (tmp_path / "s.toml").read_text()
    assert 'model = "my-model"' in written
    [config] = load_config_file(str(tmp_path / "s.toml"), {})
    assert config.url == srv.url and config.model == "my-model"
    code, text = invoke("init", "-o", str(tmp_path / "s.toml"))
    assert code == 1 and "exists" in text


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*.toml")), ids=lambda p: p.name)
def test_examples_are_valid(example: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    configs = load_config_file(str(example), {})
    for config in configs:
        config.validate()
        assert Path(trace_path(config.trace)).is_file()
    if example.name == "spec-decode-ab.toml":
        assert [c.label for c in configs] == ["baseline", "ngram"]




def test_find_max_rate_on_the_command_line_replaces_the_files_sweep(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from specreplay.commands.replay import replay as replay_command, resolve_configs

    path = write(tmp_path, f'trace = "{REASONING}"\nconcurrency = [1, 8]\n[slo]\ntargets = ["p99 ttft < 2000"]\n')
    seen: list[ReplayConfig] = []

    def capture(args: list[str]) -> None:
        ctx = replay_command.make_context("replay", list(args))
        seen[:] = resolve_configs(ctx, ctx.params)

    capture(["--config", path, "--find-max-rate", "--rate", "4", "--slo", "p90 tpot < 50"])
    [config] = seen
    assert config.find_max_rate and config.concurrency == [] and config.rate == [4.0]
    assert config.slo == {"targets": ["p99 ttft < 2000", "p90 tpot < 50"]}
    assert CliRunner().invoke(replay_command, ["--config", path, "--rate", "4", "--find-max-rate", "--slo", "soon"]).exit_code == 2
