"""Calibration and prediction against the embedded simulator, whose own
knobs are the ground truth (docs/predict.md).

The simulator's capacity model is the server: runs at concurrency 1 and 8
(batch limit 4, so requests wait) are calibrated, and the fit must recover
the knobs within the tolerances below. They are wide enough for the
timer's 1 ms resolution and a shared machine (a step here is 10 ms, a prefill 8 to 80 ms), narrow
enough that a wrong formula fails: a fit that ignored the batch would put
batch_step_cost at 0, one that counted prefill iterations as steps would
double it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import specreplay
from specreplay.analysis import validity
from specreplay.run.calibrate.fit import calibrate
from specreplay.run.calibrate.model import Param, ServerModel
from specreplay.cli import cli
from specreplay.settings.config import ReplayConfig
from specreplay.errors import ConfigError
from specreplay.run.replay import run_replay
from specreplay.results.schema import COLUMNS
from specreplay.analysis.summary import summarize
from specreplay.trace.synth import SynthConfig, write_synth

SIM: dict[str, Any] = {
    "seed": 3, "ttft_ms": 5, "prefill_us_per_token": 400, "tpot_ms": 10,
    "capacity": {"max_num_seqs": 4, "batch_step_cost": 0.2, "prefix_caching": False},
}
#: Relative tolerances of the recovered knobs.
TOLERANCE = {"prefill_us_per_token": 0.10, "step_us": 0.10, "batch_step_cost": 0.30}


def trace(tmp: Path, name: str, n: int = 40, seed: int = 1) -> str:
    path = tmp / f"{name}.jsonl"
    write_synth(SynthConfig(num_requests=n, input_len="uniform:20:200", output_len="20", seed=seed), path)
    return str(path)


def run(tmp: Path, name: str, trace_path: str, sim: dict[str, Any] = SIM, **load: Any) -> Path:
    out = tmp / f"{name}.arrow"
    run_replay(ReplayConfig(trace=trace_path, sim=sim, output=str(out), label=name, metrics_interval=0.1, **load))
    return out


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ServerModel]:
    tmp = tmp_path_factory.mktemp("calibrate")
    t = trace(tmp, "t")
    runs = [run(tmp, "c1", t, concurrency=[1]), run(tmp, "c8", t, concurrency=[8])]
    model = calibrate([str(p) for p in runs])
    model.write(tmp / "server.toml")
    return tmp, model


def test_calibration_recovers_the_simulators_knobs(calibrated: tuple[Path, ServerModel]) -> None:
    _, model = calibrated
    p = model.params
    truth = {"prefill_us_per_token": 400.0, "step_us": 10000.0, "batch_step_cost": 0.2}
    for name, want in truth.items():
        assert p[name].status == "fitted", p[name]
        assert abs(p[name].value - want) <= TOLERANCE[name] * want, (name, p[name].value, want)
        assert p[name].samples > 0 and p[name].r2 is not None  # its value depends on the machine's noise
    # The frontend: ttft_ms plus the HTTP round trip on loopback and the
    # timer's lateness (a millisecond or two, more on a loaded machine).
    assert 5000 <= p["frontend_us"].value <= 15000, p["frontend_us"]
    assert p["max_num_seqs"].status == "fitted" and p["max_num_seqs"].value == 4
    assert p["prompt_tokens_per_word"].value == pytest.approx(1.0, abs=0.01)
    assert p["steps_per_chunk"].value == pytest.approx(1.0, abs=0.01)
    # The simulator's steps cost the same every time: what spread shows is the timer's (under 1 ms of a 10 ms step).
    assert p["speed_spread"].status == "fitted" and p["speed_spread"].value < 0.08, p["speed_spread"]
    assert p["spec_acceptance"].status == "fitted" and p["spec_acceptance"].value == []
    # What the runs could not show is unknown, with the run that would show it.
    for name in ("prefill_us_per_cached_token", "kv_cache_tokens", "spec_step_cost"):
        assert p[name].status == "unknown" and p[name].needs, p[name]
    # No token budget: the stalls held whole prefills, so none shows.
    budget = p["max_num_batched_tokens"]
    assert budget.status == "unknown" and "whole prefill" in budget.needs, budget
    assert model.calibration["max_in_flight"] == 8


def test_calibration_recovers_a_token_budget(tmp_path: Path) -> None:
    # Chunked prefill: 96 tokens an iteration, prompts of 100 to 300 tokens,
    # so a newcomer's prefill spans several iterations between decode steps.
    sim = {**SIM, "capacity": {**SIM["capacity"], "max_num_batched_tokens": 96}}
    t = trace(tmp_path, "long", n=24)
    write_synth(SynthConfig(num_requests=24, input_len="uniform:100:300", output_len="30", seed=2), tmp_path / "long.jsonl")
    runs = [run(tmp_path, "b1", t, sim=sim, concurrency=[1]), run(tmp_path, "b4", t, sim=sim, concurrency=[4])]
    model = calibrate([str(p) for p in runs])
    budget = model.params["max_num_batched_tokens"]
    assert budget.status == "fitted" and budget.samples >= 5, budget
    assert abs(budget.value - 96) <= 0.2 * 96, budget
    assert model.core_mapping(0)["max_num_batched_tokens"] == budget.value


def test_the_file_round_trips_with_fit_quality(calibrated: tuple[Path, ServerModel]) -> None:
    tmp, model = calibrated
    text = (tmp / "server.toml").read_text()
    assert 'status = "unknown"' in text and "needs = " in text and "r2 = " in text and "samples = " in text
    again = ServerModel.read(tmp / "server.toml")
    assert again.params["step_us"].value == pytest.approx(model.params["step_us"].value)
    assert again.core_mapping(0) == model.core_mapping(0)


def test_a_concurrency_one_run_leaves_the_batch_unknown(calibrated: tuple[Path, ServerModel]) -> None:
    tmp, _ = calibrated
    model = calibrate([str(tmp / "c1.arrow")])
    assert model.params["batch_step_cost"].status == "unknown"
    assert "concurrency" in model.params["batch_step_cost"].needs
    assert model.params["max_num_seqs"].status == "unknown"
    assert any("batch_step_cost unknown" in a for a in model.assumptions(concurrent=True))


def test_an_unknown_cached_co_launch_is_said_only_where_the_launch_rules_apply(calibrated: tuple[Path, ServerModel]) -> None:
    _, model = calibrated
    said = "cached_co_launch unknown"
    for status, co_launch, cached, expected in (("fitted", 1.0, "unknown", True), ("unknown", None, "unknown", True),
                                                ("fitted", 0.0, "unknown", False), ("fitted", 1.0, "fitted", False)):
        m = model.with_overrides({})
        m.params["co_launch"] = Param("co_launch", status, co_launch)
        m.params["cached_co_launch"] = Param("cached_co_launch", cached, 0.5 if cached == "fitted" else None)
        m.params["prefill_us_per_cached_token"] = Param("prefill_us_per_cached_token", "fitted", 0.0)
        assert any(said in a for a in m.assumptions(concurrent=True)) is expected, (status, co_launch, cached)
        assert not any(said in a for a in m.assumptions(concurrent=False))
        assert m.core_mapping(0)["cached_co_launch"] == (0.5 if cached == "fitted" else None)


def test_the_cost_of_drafting_is_recovered_from_a_run_with_and_one_without(tmp_path: Path) -> None:
    # A speculative step's chunk holds 1 to 5 tokens made in one step (most
    # of them 5 at an acceptance of 0.9). Timing the drafting step on every
    # chunk, each gap divided by its tokens per step, shortened it: 0.126
    # against 0.15 on runs like these; a chunk a step, 0.151.
    t = trace(tmp_path, "s", n=16)
    plain = {**SIM, "tpot_ms": 20}
    base = run(tmp_path, "base", t, sim=plain, concurrency=[1])
    spec = run(tmp_path, "spec", t, sim={**plain, "spec_draft_len": 4, "spec_acceptance": 0.9, "spec_step_cost": 0.15}, concurrency=[1])
    cost = calibrate([str(base), str(spec)]).params["spec_step_cost"]
    assert cost.status == "fitted" and cost.value == pytest.approx(0.15, abs=0.015), cost


def test_speculative_acceptance_by_position_is_recovered(tmp_path: Path) -> None:
    sim = {**SIM, "spec_draft_len": 3, "spec_acceptance": 0.6}
    out = run(tmp_path, "spec", trace(tmp_path, "s", n=20), sim=sim, concurrency=[2])
    acceptance = calibrate([str(out)]).params["spec_acceptance"]
    assert acceptance.status == "fitted" and len(acceptance.value) == 3
    for a in acceptance.value:
        assert a == pytest.approx(0.6, abs=0.1), acceptance.value


def test_predict_produces_a_replays_columns_labelled_predicted(calibrated: tuple[Path, ServerModel], tmp_path: Path) -> None:
    tmp, _ = calibrated
    t = trace(tmp_path, "held", seed=7)
    out = tmp_path / "p.arrow"
    run_replay(ReplayConfig(trace=t, predict=str(tmp / "server.toml"), concurrency=[4], output=str(out)))
    df = specreplay.load(out)
    assert list(df.columns) == [c.name for c in COLUMNS]
    assert len(df) == 40 and df["error_kind"].isna().all()
    assert (df["label"] == "predicted").all()
    assert json.loads(df.attrs["specreplay.config"])["predicted"] is True
    assert json.loads(df.attrs["specreplay.predicted"])[0]["points"][0]["point"] == "concurrency=4"
    assert (df["output_tokens"] == 20).all() and (df["chunk_count"] == 20).all()
    assert (df["first_token_us"] > df["sent_us"]).all() and (df["end_us"] >= df["last_token_us"]).all()
    codes = {f.code for f in validity.check(df)}
    assert "predicted" in codes


def test_a_prediction_is_close_to_the_simulator_at_a_held_out_concurrency(calibrated: tuple[Path, ServerModel], tmp_path: Path) -> None:
    tmp, _ = calibrated
    t = trace(tmp_path, "held", seed=7)
    measured = summarize(specreplay.load(run(tmp_path, "real", t, concurrency=[4]))).iloc[0]
    out = tmp_path / "p.arrow"
    run_replay(ReplayConfig(trace=t, predict=str(tmp / "server.toml"), concurrency=[4], output=str(out)))
    predicted = summarize(specreplay.load(out)).iloc[0]
    for figure in ("ttft_p50_ms", "tpot_p50_ms", "e2e_p50_ms", "output_tok_s"):
        assert predicted[figure] == pytest.approx(measured[figure], rel=0.25), (figure, predicted[figure], measured[figure])


def test_beyond_the_calibrated_range_a_prediction_says_so(calibrated: tuple[Path, ServerModel], tmp_path: Path) -> None:
    tmp, _ = calibrated
    out = tmp_path / "p.arrow"
    t = trace(tmp_path, "held", seed=7)
    run_replay(ReplayConfig(trace=t, predict=str(tmp / "server.toml"), concurrency=[16], what_if={"max_num_seqs": 32}, output=str(out)))
    found = {f.code: f for f in validity.check(specreplay.load(out))}
    assert found["outside_calibration"].level == "warning"
    assert "16 requests running at once" in found["outside_calibration"].message
    # The step table measured batches of 1 to 4 (the c=8 run on 4 slots): beyond, extrapolated, and said.
    assert "the decode step was measured for up to 4 decoding" in found["outside_calibration"].message
    assert "what-if" in found["outside_calibration"].message


def test_what_if_batch_limit_changes_the_queue(calibrated: tuple[Path, ServerModel], tmp_path: Path) -> None:
    tmp, _ = calibrated
    t = trace(tmp_path, "held", seed=7)
    ttft = {}
    for limit in (1, 8):
        out = tmp_path / f"p{limit}.arrow"
        run_replay(ReplayConfig(trace=t, predict=str(tmp / "server.toml"), concurrency=[8], what_if={"max_num_seqs": limit}, output=str(out)))
        ttft[limit] = summarize(specreplay.load(out)).iloc[0]["ttft_p50_ms"]
    # One slot: each request waits for the seven before it.
    assert ttft[1] > 3 * ttft[8]


def test_predict_refuses_without_a_decode_step(calibrated: tuple[Path, ServerModel], tmp_path: Path) -> None:
    tmp, _ = calibrated
    text = (tmp / "server.toml").read_text().replace('[params.step_us]\nstatus = "fitted"', '[params.step_us]\nstatus = "unknown"')
    (tmp_path / "bad.toml").write_text(text)
    with pytest.raises(ConfigError, match="cannot predict without step_us"):
        run_replay(ReplayConfig(trace=trace(tmp_path, "t"), predict=str(tmp_path / "bad.toml"), concurrency=[1], output=str(tmp_path / "x.arrow")))


def test_cli_calibrate_then_predict_then_search_and_compare(calibrated: tuple[Path, ServerModel], tmp_path: Path) -> None:
    tmp, _ = calibrated
    runner = CliRunner()
    model = tmp_path / "server.toml"
    result = runner.invoke(cli, ["calibrate", str(tmp / "c1.arrow"), str(tmp / "c8.arrow"), "-o", str(model)])
    assert result.exit_code == 0, result.output
    assert "step_us = " in result.output and "kv_cache_tokens: unknown" in result.output
    t = trace(tmp_path, "held", seed=7)
    a, b = tmp_path / "a.arrow", tmp_path / "b.arrow"
    result = runner.invoke(cli, ["replay", t, "--predict", str(model), "--concurrency", "4", "-o", str(a)])
    assert result.exit_code == 0, result.output
    assert "PREDICTED" in result.output and "predicted · concurrency=4" in result.output
    result = runner.invoke(cli, ["replay", t, "--predict", str(model), "--concurrency", "4", "--what-if", "batch_step_cost=0.4",
                                 "--label", "slower", "-o", str(b)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["compare", str(a), str(b)])
    assert result.exit_code == 0, result.output
    # A steeper batch step: the what-if predicts slower decoding, and compare says so.
    tpot = next(line for line in result.output.splitlines() if "TPOT p50" in line)
    assert "slower" in tpot, result.output
    html = tmp_path / "r.html"
    result = runner.invoke(cli, ["report", str(a), "-o", str(html)])
    assert result.exit_code == 0, result.output
    assert "PREDICTED, not measured" in html.read_text()
    search = tmp_path / "s.arrow"
    # A p90 needs 50 distinct records per point (resampling.samples_needed): a longer trace.
    long_trace = trace(tmp_path, "search", n=60, seed=7)
    result = runner.invoke(cli, ["replay", long_trace, "--predict", str(model), "--find-max-rate", "--slo", "p90 ttft < 200", "--rate", "4",
                                 "--arrival", "constant", "--search-tolerance", "0.1", "-o", str(search)])
    assert result.exit_code == 0, result.output
    assert "max rate holding the SLOs" in result.output
    capacity = json.loads(specreplay.load(search).attrs["specreplay.capacity"])
    assert capacity["predicted"]["max_rate"] > 0


def test_a_prediction_reruns_as_a_prediction_with_the_same_rows(calibrated: tuple[Path, ServerModel], tmp_path: Path) -> None:
    tmp, _ = calibrated
    t = trace(tmp_path, "held", seed=7)
    first, again = tmp_path / "p.arrow", tmp_path / "again.arrow"
    run_replay(ReplayConfig(trace=t, predict=str(tmp / "server.toml"), concurrency=[4], output=str(first)))
    result = CliRunner().invoke(cli, ["rerun", str(first), "-o", str(again)])
    assert result.exit_code == 0, result.output
    a, b = specreplay.load(first), specreplay.load(again)
    assert (b["label"] == "predicted").all()
    # A virtual clock: the same schedule to the µs, from a different start.
    for df in (a, b):
        df["ttft"] = df["first_token_us"] - df["sent_us"]
    assert a.set_index("trace_id")["ttft"].sort_index().tolist() == b.set_index("trace_id")["ttft"].sort_index().tolist()


def test_acceptance_of_the_first_position_is_per_decode_step_when_some_steps_drafted_none() -> None:
    """vLLM counts a draft only in a step that proposed one: an n-gram
    proposer drafts nothing until the output repeats. The model drafts in
    every step, so the first position's acceptance is per decode step
    (generated − accepted − finished requests), which keeps the tokens per
    step the server made: here 20 decode steps, 10 of which drafted and
    accepted 36 tokens, 1 + 36 / 20 = 2.8 tokens a step (the vLLM job's
    n-gram prediction put TPOT 12x low taking 1 + 36 / 10)."""
    import pandas as pd

    from specreplay.run.calibrate.fit import fit_spec

    def counter(name: str, end: float, labels: str = "{}") -> list[dict[str, Any]]:
        return [{"group": "0/x/0", "name": name, "labels": labels, "ts_us": t, "value": v} for t, v in ((0, 0.0), (1, end))]

    samples = counter("vllm:spec_decode_num_drafts_total", 10) + counter("vllm:generation_tokens_total", 4 + 20 + 36)
    samples += counter("vllm:request_success_total", 4, '{"finished_reason": "stop"}')
    for pos, n in enumerate([10, 10, 8, 8]):
        samples += counter("vllm:spec_decode_num_accepted_tokens_per_pos_total", n, json.dumps({"position": str(pos)}))
    acceptance, per_drafting_step = fit_spec(pd.DataFrame(samples), pd.DataFrame())
    assert acceptance.value == [0.5, 1.0, 0.8, 1.0]
    a = acceptance.value
    assert 1 + a[0] + a[0] * a[1] + a[0] * a[1] * a[2] + a[0] * a[1] * a[2] * a[3] == pytest.approx(2.8)
    assert per_drafting_step == pytest.approx(1 + 36 / 10), "a drafting step's tokens, for the chunk gaps of the drafting run"
    assert "50% of which drafted" in acceptance.how


def test_another_draw_of_the_model_keeps_the_arrivals(calibrated: tuple[Path, ServerModel], tmp_path: Path) -> None:
    """`predict_draw` reseeds the model's own draws (here the speed spread,
    made wide) and not the schedule: the same sends, other latencies; draw 0
    is the prediction without it; without `predict` it is refused."""
    tmp, _ = calibrated
    t = trace(tmp_path, "held", seed=7)
    frames = {}
    for draw in (None, 0, 1):
        out = tmp_path / f"d{draw}.arrow"
        extra = {} if draw is None else {"predict_draw": draw}
        run_replay(ReplayConfig(trace=t, predict=str(tmp / "server.toml"), rate=[20.0], seed=5, what_if={"speed_spread": 0.5},
                                output=str(out), **extra))
        frames[draw] = specreplay.load(out).sort_values("trace_id").reset_index(drop=True)
    assert frames[0]["sent_us"].diff().equals(frames[None]["sent_us"].diff())
    assert frames[0]["end_us"].sub(frames[0]["sent_us"]).equals(frames[None]["end_us"].sub(frames[None]["sent_us"]))
    assert frames[1]["sent_us"].diff().equals(frames[0]["sent_us"].diff())
    assert not frames[1]["end_us"].sub(frames[1]["sent_us"]).equals(frames[0]["end_us"].sub(frames[0]["sent_us"]))
    with pytest.raises(ConfigError, match="predict_draw"):
        run_replay(ReplayConfig(trace=t, sim=SIM, predict_draw=1, concurrency=[1], output=str(tmp_path / "x.arrow")))


def test_a_measured_figures_interval_counts_every_request_of_joined_parts(calibrated: tuple[Path, ServerModel], tmp_path: Path) -> None:
    """`check.intervals` (the bench's "measured's 90% interval"): the
    bootstrap of a point joined from parts resamples every request, though
    each part's trace numbers its records from 0 (compare's unit, the trace
    record, would pool them: 12 units here, not 24); the interval holds the
    figure; a p90 and a p99 say how many requests they need."""
    from specreplay.run.calibrate.check import intervals, join_parts

    tmp, _ = calibrated
    parts = []
    for k in range(2):
        out = tmp_path / f"part{k}.arrow"
        run_replay(ReplayConfig(trace=trace(tmp_path, f"part{k}", n=12, seed=20 + k), predict=str(tmp / "server.toml"), rate=[20.0],
                                seed=5, what_if={"speed_spread": 0.3}, output=str(out)))
        parts.append(specreplay.load(out))
    joined = join_parts(parts)
    found = intervals(joined)
    point = str(summarize(joined)["point"].iloc[0])
    p50 = found[(point, "tpot_p50_ms")]
    assert (p50.requests, p50.needed) == (24, 10)
    value = float(summarize(joined)["tpot_p50_ms"].iloc[0])
    assert p50.low <= value <= p50.high and p50.low < p50.high
    low, high = p50.relative(value)
    assert low <= 0 <= high
    assert found[(point, "ttft_p90_ms")].needed == 50 and found[(point, "tpot_p99_ms")].needed == 500


def test_a_run_that_repeats_prompts_measures_the_prefix_cache(tmp_path: Path) -> None:
    # The simulator's prefix cache (on by default) serves a repeated prompt
    # with no prefill and reports the hit as usage's cached_tokens: a looped
    # trace lets calibrate fit the cached cost (truth 0), and a prediction
    # of another looped trace then matches the simulator's TTFT.
    sim = {**SIM, "capacity": {"max_num_seqs": 4, "batch_step_cost": 0.2}}
    t = trace(tmp_path, "t", n=12)
    model = calibrate([str(run(tmp_path, "c1", t, sim, concurrency=[1], num_requests=24)),
                       str(run(tmp_path, "c4", t, sim, concurrency=[4], num_requests=24))])
    cached = model.params["prefill_us_per_cached_token"]
    assert cached.status == "fitted", cached
    # The simulator starts the first arrival at an idle engine alone (the c=4 run's first four).
    assert (model.params["co_launch"].status, model.params["co_launch"].value) == ("fitted", 0.0)
    assert cached.value < 0.1 * SIM["prefill_us_per_token"], cached
    held = trace(tmp_path, "held", n=12, seed=7)
    measured = summarize(specreplay.load(run(tmp_path, "real", held, sim, concurrency=[2], num_requests=36))).iloc[0]
    model.write(tmp_path / "server.toml")
    out = tmp_path / "p.arrow"
    run_replay(ReplayConfig(trace=held, predict=str(tmp_path / "server.toml"), concurrency=[2], num_requests=36, output=str(out)))
    predicted = summarize(specreplay.load(out)).iloc[0]
    for figure in ("ttft_p50_ms", "output_tok_s"):
        assert predicted[figure] == pytest.approx(measured[figure], rel=0.25), (figure, predicted[figure], measured[figure])
    assert "repeat a trace record" not in validity.check(specreplay.load(out))[0].message


def test_a_looped_trace_predicted_without_a_measured_prefix_cache_says_so(calibrated: tuple[Path, ServerModel], tmp_path: Path) -> None:
    tmp, model = calibrated
    assert model.params["prefill_us_per_cached_token"].status == "unknown"  # SIM has no prefix cache
    out = tmp_path / "p.arrow"
    t = trace(tmp_path, "held", n=10, seed=7)
    run_replay(ReplayConfig(trace=t, predict=str(tmp / "server.toml"), concurrency=[2], num_requests=30, output=str(out)))
    found = {f.code: f for f in validity.check(specreplay.load(out))}
    assert found["outside_calibration"].level == "warning"
    assert "20 of 30 requests repeat a trace record's prompt" in found["outside_calibration"].message
