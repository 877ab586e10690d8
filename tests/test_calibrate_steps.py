"""The decode step per batch size (`batch_step_factors`, docs/predict.md):
calibrating on simulator runs whose step is a known non-linear table
recovers the table, and the formula the fit assumes is the one the
prediction computes (`Capacity::step_factor`).

The table is llama.cpp's shape on one CPU thread (docs/predict-accuracy.md):
two sequences cost 2.1 one-sequence steps, three 3.0, four 3.2, which no
line through sizes 1 and 4 gives. The runs are at concurrency 1 and 4 on
answers of varied length, so that requests end apart and every batch size
from 1 to 4 decodes for a while. Tolerance: 8% of each factor (a step here
is 10 to 32 ms, the timer's resolution 1 ms, a shared machine's lateness a
few); a linear fit misses size 2 by 20%.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specreplay.errors import ConfigError
from specreplay.run.calibrate.decode import step_factor
from specreplay.run.calibrate.fit import calibrate
from specreplay.run.calibrate.model import Param
from specreplay.run.replay import run_replay
from specreplay.settings.config import ReplayConfig
from specreplay.trace.synth import SynthConfig, write_synth

TABLE = [1.0, 2.1, 3.0, 3.2]
TOLERANCE = 0.08
SIM: dict[str, Any] = {
    "seed": 5, "ttft_ms": 5, "prefill_us_per_token": 100, "tpot_ms": 10,
    "capacity": {"max_num_seqs": 4, "batch_step_cost": 0.2, "batch_step_factors": TABLE, "prefix_caching": False},
}


def _run(tmp: Path, name: str, **load: Any) -> Path:
    trace = tmp / f"{name}.jsonl"
    write_synth(SynthConfig(num_requests=24, input_len="uniform:20:100", output_len="uniform:8:40", seed=len(name) + 11), trace)
    out = tmp / f"{name}.arrow"
    run_replay(ReplayConfig(trace=str(trace), sim=SIM, output=str(out), label=name, metrics_interval=0.1, **load))
    return out


def test_calibration_recovers_a_non_linear_step_table(tmp_path: Path) -> None:
    model = calibrate([str(_run(tmp_path, "one", concurrency=[1])), str(_run(tmp_path, "four", concurrency=[4]))])
    table = model.params["batch_step_factors"]
    assert table.status == "fitted" and table.samples > 0, table
    assert len(table.value) == len(TABLE), table
    for size, (got, want) in enumerate(zip(table.value, TABLE), start=1):
        assert abs(got - want) <= TOLERANCE * want, (size, table.value, table.how)
    assert model.params["step_us"].value == pytest.approx(10_000, rel=0.1)
    assert model.calibration["step_table_sizes"] == len(TABLE)
    assert model.core_mapping(0)["batch_step_factors"] == table.value
    # A what-if on the line alone means the line everywhere.
    assert model.with_overrides({"batch_step_cost": 0.5}).core_mapping(0)["batch_step_factors"] == []
    assert model.with_overrides({"batch_step_factors": [1, 3]}).core_mapping(0)["batch_step_factors"] == [1.0, 3.0]
    with pytest.raises(ConfigError, match="batch_step_factors: expected a list of numbers"):
        model.with_overrides({"batch_step_factors": 2}).core_mapping(0)


def test_sizes_not_seen_are_interpolated_and_said_so() -> None:
    from specreplay.run.calibrate.decode import _table

    levels, counts = np.array([1.0, 4.0]), np.array([50, 50])
    got = _table(levels, np.array([10_000.0, 40_000.0]), counts, 10_000.0, 10_000.0, 10_000.0)
    assert got.value == [1.0, 2.0, 3.0, 4.0]
    assert "2, 3 not seen" in got.how and "interpolated" in got.how


def test_a_larger_batch_measured_faster_is_pooled_with_the_smaller() -> None:
    from specreplay.run.calibrate.decode import _table, never_shrinking

    assert never_shrinking(np.array([1.0, 3.0, 2.0, 4.0]), np.array([1, 1, 1, 1])).tolist() == [1.0, 2.5, 2.5, 4.0]
    assert never_shrinking(np.array([1.0, 3.0, 2.0]), np.array([1, 1, 3])).tolist() == [1.0, 2.25, 2.25]
    # A loaded sitting: size 2 measured below size 1 (other runs, a faster moment).
    got = _table(np.array([1.0, 2.0, 3.0]), np.array([10_000.0, 8_000.0, 30_000.0]), np.array([30, 10, 20]), 10_000.0, 0.0, 0.0)
    assert got.value == [0.95, 0.95, 3.0] and "sizes 1, 2 pooled" in got.how, got


def test_the_fits_formula_is_the_predictions() -> None:
    # The same cases as Capacity's a_step_table_is_interpolated_and_extended_by_the_linear_cost.
    cost, table = Param("batch_step_cost", "fitted", 0.25), Param("batch_step_factors", "fitted", [1.0, 2.2, 3.0])
    got = step_factor(np.array([0.5, 1, 1.5, 2, 3, 5]), cost, table)
    assert got == pytest.approx([1.0, 1.0, 1.6, 2.2, 3.0, 3.5])
    assert step_factor(np.array([3.0]), cost, Param("batch_step_factors", "unknown")) == pytest.approx([1.5])
