"""specreplay.comparison.compare on synthetic results: the figures are the summary's,
the bootstrap is exact where it can be checked and deterministic under a
seed, pairing follows the trace, and the verdict rule is the documented one."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from conftest import T0, config_metadata, results_table

import specreplay
from specreplay.comparison import compare as comparison
from specreplay.analysis import quantiles
from specreplay.errors import InvalidRunError

POINTS = [{"point": "concurrency=4", "mode": "concurrency", "value": 4}]


def requests(n: int, gap_us: int, label: str = "run", seed: int = 0, jitter: float = 0.1, **spec: Any) -> list[dict[str, Any]]:
    """n requests, 4 in flight, `gap_us` between 1-token chunks (± jitter)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        tokens = int(rng.integers(20, 30))
        gaps = gap_us * (1 + jitter * rng.standard_normal(tokens)).clip(0.5)
        offsets = 20_000 + np.concatenate([[0.0], np.cumsum(gaps[1:])]).astype(int)  # first token at 20 ms
        chunks = [(int(o), 1, "reasoning" if j < tokens // 2 else "content") for j, o in enumerate(offsets)]
        rows.append({"label": label, "point": "concurrency=4", "trace_id": f"t{i}", "sent_us": T0 + (i // 4) * 400_000, "chunks": chunks, **spec})
    return rows


def frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    table = results_table(rows, config_metadata(POINTS))
    df: pd.DataFrame = table.to_pandas()
    df.attrs = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
    return df


def test_weighted_quantiles_equal_numpy_on_the_expanded_samples() -> None:
    rng = np.random.default_rng(3)
    values = np.sort(rng.normal(size=37))
    weights = rng.integers(0, 4, size=(50, 37))
    weights[0] = 0  # an empty resample
    got = quantiles.weighted_quantiles(values, weights, [0.5, 0.9, 0.99])
    assert np.isnan(got[:, 0]).all()
    for r in range(1, 50):
        expanded = np.repeat(values, weights[r])
        assert got[:, r] == pytest.approx(np.quantile(expanded, [0.5, 0.9, 0.99]))


@pytest.mark.parametrize(("samples", "units"), [(1, 1), (37, 5), (500, 40), (3000, 7), (3000, 2500)])
def test_unit_quantiles_are_the_weighted_quantiles_bit_for_bit(samples: int, units: int) -> None:
    rng = np.random.default_rng(samples + units)
    values = np.sort(rng.integers(0, 50, size=samples) / 7.0)  # ties, as µs-resolution latencies have
    unit = rng.integers(0, units, size=samples)
    weight = rng.integers(0, 4, size=samples)  # zero-token chunks carry no sample
    counts = rng.integers(0, 3, size=(60, units))
    counts[0] = 0  # a resample that drew nothing
    qs = [0.0, 0.5, 0.9, 0.99, 1.0]
    expected = quantiles.weighted_quantiles(values, counts[:, unit] * weight, qs)
    got = quantiles.UnitQuantiles(values, unit, weight, units)(counts, qs)
    np.testing.assert_array_equal(got, expected)


def test_figures_are_the_summary_figures_and_a_slower_run_is_slower() -> None:
    base, slow = frame(requests(40, 10_000)), frame(requests(40, 12_000, seed=1))
    out = specreplay.compare(base, slow).set_index("metric")
    s_base, s_slow = (specreplay.summarize(x).iloc[0] for x in (base, slow))
    for metric in out.index:
        assert out.loc[metric, "base_value"] == pytest.approx(s_base[metric])
        assert out.loc[metric, "value"] == pytest.approx(s_slow[metric])
    for metric in ("tpot_p50_ms", "itl_token_p50_ms", "e2e_p50_ms"):
        row = out.loc[metric]
        assert row["change"] == pytest.approx(0.2, abs=0.05)
        assert 0 < row["ci_low"] < row["change"] < row["ci_high"]
        assert row["verdict"] == "slower"
    assert out.loc["ttft_p50_ms", "verdict"] == "no significant difference"  # same 20 ms
    assert sorted(out.reset_index().columns) == sorted(comparison.COLUMNS)


def test_the_same_seed_gives_the_same_intervals_and_another_seed_others() -> None:
    base, other = frame(requests(40, 10_000)), frame(requests(40, 10_300, seed=1))
    a = specreplay.compare(base, other, seed=5)
    b = specreplay.compare(base, other, seed=5)
    c = specreplay.compare(base, other, seed=6)
    pd.testing.assert_frame_equal(a, b)
    assert not np.allclose(a["ci_low"], c["ci_low"], equal_nan=True)


def test_pairing_by_trace_id_and_not_across_traces() -> None:
    base = frame(requests(40, 10_000))
    assert bool(specreplay.compare(base, frame(requests(40, 10_000, seed=1)))["paired"].all())
    renamed = requests(40, 10_000, seed=1)
    for i, row in enumerate(renamed):
        row["trace_id"] = f"other{i}"
    assert not specreplay.compare(base, frame(renamed))["paired"].any()


def test_verdict_rule() -> None:
    assert comparison.verdict(0.10, 0.05, 0.15, higher_is_better=False) == "slower"
    assert comparison.verdict(-0.10, -0.15, -0.05, higher_is_better=False) == "faster"
    assert comparison.verdict(0.10, 0.05, 0.15, higher_is_better=True) == "faster"
    assert comparison.verdict(0.10, -0.01, 0.20, higher_is_better=False) == "no significant difference"
    # Significant but below the practical threshold (2% by default).
    assert comparison.verdict(0.01, 0.005, 0.015, higher_is_better=False) == "no significant difference"
    assert comparison.verdict(0.01, 0.005, 0.015, higher_is_better=False, min_change=0.0) == "slower"
    assert comparison.verdict(math.nan, math.nan, math.nan, higher_is_better=False) == "n/a"


def test_no_answer_means_no_ttfc_figure(tmp_path: Path) -> None:
    base = frame(requests(12, 10_000))
    rows = requests(12, 10_000, seed=1)
    for row in rows:
        row["chunks"] = [(c[0], c[1], "reasoning") for c in row["chunks"]]
    out = specreplay.compare(base, frame(rows)).set_index("metric")
    assert out.loc["ttfc_p50_ms", "verdict"] == "n/a"


def test_an_invalid_run_is_refused_unless_forced() -> None:
    base = frame(requests(20, 10_000))
    rows = requests(20, 10_000, seed=1)
    for row in rows[:5]:
        row.update(chunks=None, error_kind="http", http_status=500, end_us=row["sent_us"] + 1000)
    with pytest.raises(InvalidRunError, match="error_rate") as info:
        specreplay.compare(base, frame(rows))
    assert [f.code for f in info.value.findings] == ["error_rate"]  # type: ignore[attr-defined]
    out = specreplay.compare(base, frame(rows), force=True)
    assert out["requests"].iloc[0] == 15


def test_one_gate_checks_only_the_compared_points() -> None:
    # The other run's errors are on a point the base never ran: the API's
    # compare and the command's gate (both `comparison.gate`) let it through,
    # and refuse it once the base runs that point too.
    base_rows = requests(20, 10_000)
    bad = requests(20, 10_000, seed=2, point="concurrency=8")
    for row in bad[:5]:
        row.update(chunks=None, error_kind="http", http_status=500, end_us=row["sent_us"] + 1000)
    other_rows = requests(20, 10_000, seed=1) + bad
    runs = [comparison.Run(name=n, label=n, df=frame(rows)) for n, rows in (("base", base_rows), ("other", other_rows))]
    assert comparison.gate(runs) == []
    assert [f.point for f in runs[1].findings if f.level == "error"] == []
    specreplay.compare(frame(base_rows), frame(other_rows))  # not refused
    both = base_rows + requests(20, 10_000, seed=3, point="concurrency=8")
    runs = [comparison.Run(name=n, label=n, df=frame(rows)) for n, rows in (("base", both), ("other", other_rows))]
    assert [r.name for r in comparison.gate(runs)] == ["other"]
    with pytest.raises(InvalidRunError, match="error_rate"):
        specreplay.compare(frame(both), frame(other_rows))


def _write(df_rows: list[dict[str, Any]], path: Path) -> Path:
    table = results_table(df_rows, config_metadata(POINTS))
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return path


def test_runs_are_selected_by_file_and_label(tmp_path: Path) -> None:
    ab = _write(requests(8, 10_000, label="baseline") + requests(8, 12_000, label="ngram", seed=1), tmp_path / "ab.arrow")
    single = _write(requests(8, 10_000, label="run"), tmp_path / "one.arrow")
    assert [r.name for r in comparison.resolve([str(ab)])] == ["baseline", "ngram"]
    assert [r.name for r in comparison.resolve([f"{ab}:ngram", f"{ab}:baseline"])] == ["ngram", "baseline"]
    assert [r.name for r in comparison.resolve([str(single), f"{ab}:ngram"])] == [str(single), f"{ab}:ngram"]
    with pytest.raises(ValueError, match="no run labelled 'spec'.*baseline, ngram"):
        comparison.resolve([f"{ab}:spec"])
    with pytest.raises(ValueError, match="several runs"):
        specreplay.compare(str(ab), str(single))
    out = specreplay.compare(f"{ab}:baseline", f"{ab}:ngram")
    assert set(out["base"]) == {"baseline"} and set(out["run"]) == {"ngram"}


# --- simulated runs: the acceptance criteria of the compare command -------------


def test_speculation_that_accepts_too_few_drafts_is_slower(sim_runs: dict[str, Path]) -> None:
    """Several tokens per step at a lower per-step speed: 1.42 tokens per
    1.6× step, so about 13% slower per token, for the same prompts and lengths."""
    out = specreplay.compare(str(sim_runs["base"]), str(sim_runs["spec"])).set_index("metric")
    assert out["paired"].all()
    for metric in ("tpot_p50_ms", "tpot_p90_ms", "e2e_p50_ms", "ttfc_p50_ms"):
        row = out.loc[metric]
        assert row["verdict"] == "slower", (metric, row.to_dict())
        assert 0.05 < row["ci_low"] <= row["change"] <= row["ci_high"], (metric, row.to_dict())
    for metric in ("output_tok_s", "content_tok_s"):
        row = out.loc[metric]
        assert row["verdict"] == "slower", (metric, row.to_dict())  # fewer tokens per second
        assert row["ci_low"] <= row["change"] <= row["ci_high"] < -0.05, (metric, row.to_dict())
    # The prefill does not speculate.
    assert out.loc["ttft_p50_ms", "verdict"] == "no significant difference"


def test_identical_settings_with_another_seed_are_no_different(sim_runs: dict[str, Path]) -> None:
    out = specreplay.compare(str(sim_runs["base"]), str(sim_runs["seed2"]))
    assert out["paired"].all()
    # The server's figures are not resampled (test_the_servers_figures_sit_beside_tpot).
    out = out[out["verdict"] != "not resampled"]
    p99 = out["metric"].str.contains("_p99_")
    # 96 requests: enough for a p90, too few for a p99 (as the too_few_requests note says).
    assert set(out.loc[p99, "verdict"]) == {"too few samples"}
    assert set(out.loc[~p99, "verdict"]) == {"no significant difference"}, out.loc[~p99].to_string()


def test_the_servers_figures_sit_beside_tpot(sim_runs: dict[str, Path]) -> None:
    out = specreplay.compare(str(sim_runs["base"]), str(sim_runs["spec"]))
    metrics = list(out["metric"])
    server = out[out["verdict"] == "not resampled"].set_index("metric")
    # Right after the TPOT rows, before ITL.
    first = metrics.index("spec_acceptance_rate")
    assert metrics[first - 1] == "tpot_p99_ms" and metrics[first : first + 3] == [
        "spec_acceptance_rate", "spec_acceptance_length", "spec_break_even_length"]  # fmt: skip
    assert metrics.index("itl_token_p50_ms") > max(metrics.index(m) for m in server.index)
    # The baseline does not speculate: its side is empty, the run's is the server's.
    assert math.isnan(server.loc["spec_acceptance_length", "base_value"])
    accept = 0.3  # conftest.SIM_SPEC: 4 drafts, each accepted with probability 0.3
    expected_length = 1 + accept + accept**2 + accept**3 + accept**4
    assert server.loc["spec_acceptance_length", "value"] == pytest.approx(expected_length, rel=0.05)
    # TPOT ratio × acceptance length recovers the configured step cost: 1 + 4 × 0.15.
    assert server.loc["spec_break_even_length", "value"] == pytest.approx(1.6, rel=0.05)
    assert server["ci_low"].isna().all() and server["ci_high"].isna().all()
    # Both sides have the load figures: 8 in flight at most.
    assert 0 < server.loc["server_running_mean", "base_value"] <= 8 and 0 < server.loc["server_running_mean", "value"] <= 8
