"""The properties `compare`'s verdicts rest on (`specreplay.analysis.resampling`), on
simulated runs of one configuration: a server that draws each answer's
length anew per run (a sampling server), Poisson arrivals drawn anew per
run. Two such runs differ only by chance, so

- every interval is at least as wide as the figure's spread across seeds;
- over all pairs of seeds, at most 1 judged figure in 100 is called faster
  or slower, and no figure more than 5% of the time;
- a known shift (a slower decode) is found.

Pure numpy/pandas rows, no server."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from conftest import T0, config_metadata, results_table

import specreplay
from specreplay.analysis import analyse as analysis
from specreplay.analysis import resampling

RATE_POINTS = [{"point": "rate=8", "mode": "rate", "value": 8}]
RECORDS = 48
#: Each record's typical answer length: the prompt decides it, the run draws around it.
TYPICAL = np.random.default_rng(100).integers(15, 60, RECORDS)


def simulated_run(seed: int, tpot_us: float = 10_000, rate: float = 8.0, label: str = "run", slo: dict[str, Any] | None = None) -> pd.DataFrame:
    """One run of the simulated configuration (see the module doc), under `slo` when given."""
    rng = np.random.default_rng(seed)
    sent = T0 + np.cumsum(rng.exponential(1e6 / rate, RECORDS)).astype(int)
    rows: list[dict[str, Any]] = []
    for i in range(RECORDS):
        tokens = max(2, int(TYPICAL[i] * rng.lognormal(0, 0.5)))
        ttft = 40_000 + rng.exponential(10_000)
        gaps = tpot_us * (1 + 0.1 * rng.standard_normal(tokens - 1)).clip(0.5)
        offsets = ttft + np.concatenate([[0.0], np.cumsum(gaps)])
        chunks = [(int(o), 1, "reasoning" if j < tokens // 2 else "content") for j, o in enumerate(offsets)]
        rows.append({"label": label, "point": "rate=8", "trace_id": f"r{i}", "sent_us": int(sent[i]), "scheduled_us": int(sent[i]), "chunks": chunks})
    metadata = config_metadata(RATE_POINTS)
    if slo is not None:
        metadata["specreplay.config"] = json.dumps({**json.loads(metadata["specreplay.config"]), "slo": slo})
    table = results_table(rows, metadata)
    df: pd.DataFrame = table.to_pandas()
    df.attrs = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
    return df


SEEDS = 8


@pytest.fixture(scope="module")
def aa_tables() -> tuple[list[pd.DataFrame], pd.DataFrame]:
    runs = [simulated_run(seed) for seed in range(1, SEEDS + 1)]
    tables = [specreplay.compare(a, b).assign(pair=f"{i}-{j}") for (i, a), (j, b) in itertools.combinations(enumerate(runs), 2)]
    return runs, pd.concat(tables, ignore_index=True)


JUDGED = ("faster", "slower", "no significant difference")


def test_each_interval_is_at_least_as_wide_as_the_figure_spreads_across_seeds(aa_tables: tuple[list[pd.DataFrame], pd.DataFrame]) -> None:
    runs, table = aa_tables
    figures = pd.DataFrame([specreplay.summarize(run).iloc[0] for run in runs])
    checked = 0
    for metric in ("output_tok_s", "content_tok_s", "e2e_p50_ms", "ttfc_p50_ms", "tpot_p50_ms", "ttft_p50_ms"):
        values = figures[metric].to_numpy(dtype="float64")
        # The spread of one run's figure across seeds, as a relative change between two runs.
        spread = float(np.std(np.log(values), ddof=1)) * math.sqrt(2)
        rows = table[table.metric == metric]
        width = float(np.median(np.log1p(rows["ci_high"]) - np.log1p(rows["ci_low"])))
        # A 95% interval of the change spans about ±2 of its spreads: at least ±1 of them.
        assert width >= 2 * spread, f"{metric}: median interval {width:.3f} wide, spread across seeds {spread:.3f}"
        # And it covers nearly every A/A change (the true change is 0).
        covered = float(((rows["ci_low"] <= 0) & (rows["ci_high"] >= 0)).mean())
        assert covered >= 0.85, f"{metric}: {covered:.0%} of A/A intervals hold 0"
        checked += 1
    assert checked == 6


def test_a_aa_pair_is_almost_never_called_faster_or_slower(aa_tables: tuple[list[pd.DataFrame], pd.DataFrame]) -> None:
    _, table = aa_tables
    judged = table[table.verdict.isin(JUDGED)]
    assert len(judged) >= 100  # enough figures judged for the rate to mean something
    false = judged.verdict.isin(("faster", "slower"))
    assert false.mean() <= 0.01, judged[false][["pair", "name", "change", "ci_low", "ci_high", "p_adjusted"]]
    per_figure = false.groupby(judged["metric"]).mean()
    assert (per_figure <= 0.05).all(), per_figure


def test_the_old_throughput_interval_would_have_missed_the_spread(aa_tables: tuple[list[pd.DataFrame], pd.DataFrame]) -> None:
    # Holding the duration at its measured value (the old resampling) makes the
    # tokens/s interval a fraction of what the runs actually move: a check that
    # the simulated runs do vary the way the issue saw.
    runs, _ = aa_tables
    tok_s = np.array([specreplay.summarize(run).iloc[0]["output_tok_s"] for run in runs])
    assert np.std(np.log(tok_s)) > 0.05


def test_a_known_shift_is_found() -> None:
    base, slow = simulated_run(1), simulated_run(2, tpot_us=13_000)
    out = specreplay.compare(base, slow).set_index("metric")
    assert out.loc["tpot_p50_ms", "verdict"] == "slower"
    assert out.loc["itl_token_p50_ms", "verdict"] == "slower"
    assert out.loc["tpot_p50_ms", "change"] == pytest.approx(0.3, abs=0.05)


def test_percentiles_need_five_units_beyond_them_and_rates_two() -> None:
    assert [resampling.samples_needed(q) for q in (0.5, 0.9, 0.99)] == [10, 50, 500]
    assert resampling.samples_needed(None) == 2


def test_a_p50_of_few_units_is_too_few_samples() -> None:
    # 8 records looped six times: 48 requests, but only 8 independent units.
    base, other = simulated_run(1), simulated_run(2)
    for df in (base, other):
        df["trace_id"] = [f"r{i % 8}#{i // 8}" if i >= 8 else f"r{i}" for i in range(len(df))]
    out = specreplay.compare(base, other).set_index("metric")
    assert out.loc["e2e_p50_ms", "verdict"] == "too few samples"
    assert out.loc["output_tok_s", "verdict"] != "too few samples"


def test_holm_adjusts_the_smallest_p_value_by_the_number_of_figures() -> None:
    adjusted = resampling.holm([0.01, 0.04, math.nan, 0.03])
    assert adjusted[0] == pytest.approx(0.03)
    assert adjusted[3] == pytest.approx(0.06)  # 2 × 0.03
    assert adjusted[1] == pytest.approx(0.06)  # max(0.06, 1 × 0.04)
    assert math.isnan(adjusted[2])


def test_the_duration_of_an_open_loop_point_resamples_its_arrival_gaps() -> None:
    run = simulated_run(1)
    analysis = specreplay.analysis.analyse.analyse(run)[0].points[0]
    data = resampling.PointSample.of(analysis)
    assert not data.closed
    ones = np.ones((1, len(data.ids)))
    # Every request drawn once: the measured duration back, to the microsecond.
    measured = float(run["end_us"].max() - run["sent_us"].min())
    assert data.durations(ones)[0] == pytest.approx(measured, rel=1e-9)
    # Only the longest gap drawn, as often as there are requests: a longer run.
    longest = np.zeros((1, len(data.ids)))
    longest[0, int(np.argmax(data.gap))] = len(data.ids)
    assert data.durations(longest)[0] > measured


def repeats_file(shift: float) -> pd.DataFrame:
    """Interleaved repeats A@k, B@k (k = 1..4) in one file; B's decode `shift` slower."""
    parts = []
    for k in range(1, 5):
        parts += [simulated_run(10 + k, label=f"A@{k}"), simulated_run(20 + k, tpot_us=10_000 * (1 + shift), label=f"B@{k}")]
    df = pd.concat(parts, ignore_index=True)
    df.attrs = dict(parts[0].attrs)
    return df


def test_repeats_are_judged_on_the_variation_between_them() -> None:
    from specreplay.comparison import compare as comparison

    shifted = comparison.compare_all(comparison.select(repeats_file(0.3))).set_index("metric")
    assert (shifted["repeats"] == 4).all()
    assert shifted.loc["tpot_p50_ms", "verdict"] == "slower"
    assert shifted.loc["tpot_p50_ms", "change"] == pytest.approx(0.3, abs=0.05)
    assert list(shifted["base"].unique()) == ["A"] and list(shifted["run"].unique()) == ["B"]
    same = comparison.compare_all(comparison.select(repeats_file(0.0)))
    assert not same["verdict"].isin(["faster", "slower"]).any(), same[["name", "change", "ci_low", "ci_high", "verdict"]]


def test_between_repeats_is_a_student_t_interval() -> None:
    change, low, high, p = resampling.between_repeats([1.0, 1.0, 1.0], [1.1, 1.15, 1.2], 0.95)
    logs = np.log([1.1, 1.15, 1.2])
    half = 4.302653 * logs.std(ddof=1) / math.sqrt(3)  # t(0.975, 2 df)
    assert change == pytest.approx(math.expm1(logs.mean()))
    assert (low, high) == pytest.approx((math.expm1(logs.mean() - half), math.expm1(logs.mean() + half)), rel=1e-5)
    assert low > 0 and 0 < p < 0.05  # the interval and the test agree
    assert math.isnan(resampling.between_repeats([1.0], [1.1], 0.95)[0])


def test_replay_interleaves_repeats_with_their_own_seeds() -> None:
    from specreplay.commands.replay import interleave_repeats
    from specreplay.settings.config import ReplayConfig

    configs = interleave_repeats([ReplayConfig(label="A", seed=7, repeats=2), ReplayConfig(label="B", seed=7, repeats=2)])
    assert [(c.label, c.seed) for c in configs] == [("A@1", 7), ("B@1", 7), ("A@2", 8), ("B@2", 8)]


# --- SLO verdicts: the same resampling, the same A/A property -----------------

SLO_SEEDS = 40


def _slo_verdicts(seed: int, targets: list[str], tpot_us: float = 10_000) -> dict[str, str]:
    [run] = analysis.analyse(simulated_run(seed, tpot_us=tpot_us, slo={"targets": targets}))
    return {v.target.text: v.verdict for v in run.points[0].slo_verdicts}


@pytest.fixture(scope="module")
def population_p50() -> dict[str, float]:
    """Each figure's p50 over the runs of every seed pooled: what the
    configuration's own p50 is, so a target set there is met by chance only."""
    runs = [analysis.analyse(simulated_run(seed))[0].points[0].summary for seed in range(1, SLO_SEEDS + 1)]
    return {m: float(np.median([r[f"{m}_p50_ms"] for r in runs])) for m in ("ttfc", "e2e")}


def test_slo_verdicts_of_one_configuration_do_not_flip_between_seeds(population_p50: dict[str, float]) -> None:
    # 48 records: enough for a p50 (10), too few for a p90 (50): that one is never judged.
    targets = [f"p50 ttft < {population_p50['ttfc']:.3f}", f"p50 e2e < {population_p50['e2e']:.3f}", "p90 e2e < 100000"]
    verdicts = [_slo_verdicts(seed, targets) for seed in range(1, SLO_SEEDS + 1)]
    for target in targets[:2]:
        seen = [v[target] for v in verdicts]
        # At the configuration's own p50 any held/failed is a false verdict: a 95%
        # interval is on one side by chance at most 2.5% + 2.5% of the time.
        confident = sum(v in ("held", "failed") for v in seen)
        assert confident <= 0.05 * SLO_SEEDS + 1, (target, seen)
        flips = sum(a == "held" and b == "failed" or a == "failed" and b == "held" for a, b in itertools.combinations(seen, 2))
        assert flips <= 0.01 * math.comb(SLO_SEEDS, 2), (target, seen)
    assert {v["p90 e2e < 100000"] for v in verdicts} == {"too few samples"}


def test_slo_verdicts_find_a_clear_shift(population_p50: dict[str, float]) -> None:
    # A decode twice as slow moves E2E p50 well past the configuration's own p50; twice as fast, well below.
    target = f"p50 e2e < {population_p50['e2e']:.3f}"
    slower = [_slo_verdicts(seed, [target], tpot_us=20_000)[target] for seed in range(1, 11)]
    faster = [_slo_verdicts(seed, [target], tpot_us=5_000)[target] for seed in range(1, 11)]
    assert slower.count("failed") >= 9, slower
    assert faster.count("held") >= 9, faster
