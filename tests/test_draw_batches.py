"""The bootstrap computes its figures on batches of draws
(`specreplay.analysis.draws.draw_batches`); batching is for speed only and
must change no figure. The draws are those of blocks drawn one after another
(the stream a seed reproduces), and every figure of a batch equals the
same figure computed one resample at a time, bit for bit."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from test_resampling import simulated_run

from specreplay.analysis import analyse as analysis
from specreplay.analysis import draws, resampling


@pytest.mark.parametrize("n_units", [[7], [7, 5]])
def test_batches_hold_the_draws_of_blocks_drawn_in_turn(monkeypatch: pytest.MonkeyPatch, n_units: list[int]) -> None:
    monkeypatch.setattr(draws, "_ELEMENTS", 60)
    # Blocks of 60 // 20 = 3 resamples, batches of at least 60 // 6 = 10: 4 blocks a batch.
    batches = list(draws.draw_batches(draws.rng(0, "p"), n_units, 25, biggest=20, widest=6))
    assert [len(batch[0]) for batch in batches] == [12, 12, 1]
    generator = draws.rng(0, "p")
    expected: list[list[np.ndarray]] = [[] for _ in n_units]
    for size in [3] * 8 + [1]:
        for side, n in zip(expected, n_units):
            side.append(draws.draw(generator, n, size))
    for index, got in enumerate(zip(*batches)):
        assert np.array_equal(np.concatenate(got), np.concatenate(expected[index]))


def _one_at_a_time(*args: Any, **kwargs: Any) -> Iterator[list[np.ndarray]]:
    for counts in draws.draw_batches(*args, **kwargs):
        for row in range(len(counts[0])):
            yield [side[row : row + 1] for side in counts]


def _points(seed: int, looped: bool) -> resampling.PointSample:
    run = simulated_run(seed)
    if looped:  # a trace of 20 records looped: several requests a unit
        run["trace_id"] = [f"r{i % 20}#{i // 20}" if i >= 20 else f"r{i}" for i in range(len(run))]
    return resampling.PointSample.of(analysis.analyse(run)[0].points[0])


@pytest.mark.parametrize(("paired", "looped"), [(True, False), (False, False), (True, True)])
def test_compared_figures_on_a_batch_equal_those_of_one_resample_at_a_time(monkeypatch: pytest.MonkeyPatch, paired: bool, looped: bool) -> None:
    base, other = _points(1, looped), _points(2, looped)
    batched = resampling.pair_ratios(base, other, paired, 300, draws.rng(0, "p"))
    monkeypatch.setattr(resampling, "draw_batches", _one_at_a_time)
    single = resampling.pair_ratios(base, other, paired, 300, draws.rng(0, "p"))
    assert batched.keys() == single.keys()
    for metric in batched:
        assert len(batched[metric]) == 300
        assert np.array_equal(batched[metric], single[metric], equal_nan=True), metric


def test_slo_intervals_on_a_batch_equal_those_of_one_resample_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    point = analysis.analyse(simulated_run(3))[0].points[0]
    rows = point.rows
    latencies = [("ttft", 0.9), ("itl_token", 0.99), ("e2e", 0.5)]
    shares = {"fast": (rows["ttft_us"].to_numpy(dtype="float64") < 50_000).astype("float64")}
    rates = {"tokens": rows["output_tokens"].to_numpy(dtype="float64")}
    batched = resampling.point_intervals(point, latencies, shares, rates, resamples=300)
    monkeypatch.setattr(resampling, "draw_batches", _one_at_a_time)
    single = resampling.point_intervals(point, latencies, shares, rates, resamples=300)
    assert batched == single
    assert all(np.isfinite(low) and low < high for _, low, high in batched.latencies.values())


@pytest.mark.parametrize("closed", [False, True])
def test_durations_from_unit_sums_equal_those_summed_over_requests(closed: bool) -> None:
    data = dataclasses.replace(_points(4, looped=True), closed=closed)
    unit_of_request, n_units = resampling.units(data.ids)
    assert n_units < len(data.ids)
    counts = draws.draw(draws.rng(0, "p"), n_units, 200)
    per_request = counts[:, unit_of_request].astype("float64")
    assert np.array_equal(data.durations(counts, unit_of_request), data.durations(per_request))
    tokens = data.tokens["output_tokens"]
    assert np.array_equal(counts @ resampling.per_unit(tokens, unit_of_request, n_units), per_request @ tokens)
