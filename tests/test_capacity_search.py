"""The capacity search's decisions on judged points, without a server: which
rate comes next, when it stops, and what it answers."""

from __future__ import annotations

import math

import pytest

from specreplay.run.capacity_compare import LESS, MORE, WITHIN, compare_answers
from specreplay.run.capacity import (
    BUDGET,
    CONVERGED,
    CUT,
    FAILED,
    FLOOR,
    HELD,
    INVALID,
    TOO_FEW_SAMPLES,
    TOO_FEW_UNITS,
    VOID,
    Answer,
    Search,
    Settings,
    Step,
    answer,
    requests_per_point,
    too_short,
    units_per_point,
)
from specreplay.analysis.resampling import samples_needed
from specreplay.settings.objectives import Slo


def step(rate: float, status: str, invalid: tuple[str, ...] = ()) -> Step:
    return Step(f"rate={rate:g}", rate, status, (), invalid)


def run(search: Search, limit: float = 50.0, invalid_above: float | None = None) -> list[float]:
    """Drives `search` against a server whose SLOs hold below `limit` (and
    whose points above `invalid_above` are invalid); returns the rates run."""
    rates = []
    while (rate := search.next_rate()) is not None:
        rates.append(rate)
        if invalid_above is not None and rate > invalid_above:
            search.record(step(rate, INVALID, ("client_saturated",)))
        else:
            search.record(step(rate, HELD if rate < limit else FAILED))
        assert len(rates) < 100
    return rates


@pytest.mark.parametrize(("start", "limit"), [(1.0, 50.0), (1.0, 0.3), (200.0, 50.0), (8.0, 8.5), (3.0, 1000.0)])
def test_the_search_brackets_then_bisects_to_the_tolerance(start: float, limit: float) -> None:
    search = Search(Settings(start=start, tolerance=0.05))
    rates = run(search, limit=limit)
    found = search.answer
    assert search.stop_reason == CONVERGED
    assert found.low is not None and found.high is not None
    assert found.low.rate < limit <= found.high.rate
    assert found.high.rate / found.low.rate - 1 <= 0.05
    assert len(set(rates)) == len(rates), rates  # never the same rate twice


def test_the_first_steps_double_then_bisect() -> None:
    search = Search(Settings(start=10.0, tolerance=0.05))
    rates = run(search, limit=50.0)
    assert rates[:4] == [10.0, 20.0, 40.0, 80.0]
    assert rates[4] == 60.0  # (40 + 80) / 2
    assert search.answer.lines()[0] == f"max rate holding the SLOs: {search.answer.low.rate:g} req/s ({search.answer.low.point})"  # type: ignore[union-attr]


def test_an_invalid_point_is_never_taken_as_held() -> None:
    # The server would hold to 50 req/s, but the client cannot send above 30:
    # the answer stays below the first invalid point.
    search = Search(Settings(start=10.0, tolerance=0.05))
    run(search, limit=50.0, invalid_above=30.0)
    found = search.answer
    assert found.high is not None and found.high.status == INVALID
    assert found.low is not None and found.low.rate <= 30.0
    assert "invalid measurement (client_saturated): never taken as held" in found.high.why()
    assert any("was not taken as held" in line for line in found.lines())


def test_a_void_measurement_stops_the_search() -> None:
    search = Search(Settings(start=10.0))
    assert search.next_rate() == 10.0
    search.record(step(10.0, INVALID, ("reasoning_ate_budget",)))
    assert search.next_rate() is None
    assert search.stop_reason == VOID
    assert search.answer.low is None
    assert search.answer.lines()[0] == "no rate held the SLOs (lowest tried: 10 req/s)"


def test_the_search_gives_up_at_its_floor() -> None:
    search = Search(Settings(start=1.0))
    rates = run(search, limit=0.0)
    assert search.stop_reason == FLOOR
    assert min(rates) >= 1.0 / 1024
    assert search.answer.low is None and search.answer.high is not None


def test_a_cut_point_gives_no_verdict() -> None:
    steps = [step(10, HELD), step(20, HELD), step(40, CUT)]
    found = answer(steps, BUDGET)
    assert found.low is not None and found.low.rate == 20 and found.high is None
    assert "every rate tried held: the limit is above the highest one" in found.lines()
    assert "note: rate=40 was cut short by the time budget: no verdict" in found.lines()
    assert found.lines()[-1] == "stopped: the time budget ran out"
    # A search whose only point was cut has no answer, and says so (not that every rate held).
    assert answer([step(40, CUT)], BUDGET).lines() == [
        "no answer: no point finished before the time budget ran out",
        "note: rate=40 was cut short by the time budget: no verdict",
        "stopped: the time budget ran out",
    ]
    search = Search(Settings(start=10))
    search.record(steps[0])
    search.record(steps[2])
    assert search.stop_reason == BUDGET and search.next_rate() is None


def test_a_point_that_held_above_a_failure_is_noted_and_not_taken() -> None:
    found = answer([step(10, HELD), step(20, FAILED), step(15, HELD), step(30, HELD)])
    assert found.low is not None and found.low.rate == 15
    assert found.high is not None and found.high.rate == 20
    assert [s.rate for s in found.above_failure] == [30]
    assert any("not monotonic" in line for line in found.lines())


def test_rates_are_rounded_to_what_the_tolerance_needs() -> None:
    assert Settings(tolerance=0.05).round(96.87512) == 96.9
    assert Settings(tolerance=0.001).round(96.87512) == 96.88


def test_a_point_runs_enough_requests_for_its_strictest_percentile() -> None:
    # resampling.samples_needed: 500 distinct records for a p99, 50 for a p90, 10 at least.
    p99 = Slo.from_table({"targets": ["p99 ttft < 2000", "p50 e2e < 9000"]})
    assert units_per_point(p99) == samples_needed(0.99) == 500
    assert requests_per_point(p99, None, 0) == 500
    assert requests_per_point(p99, None, 5) == 505
    assert requests_per_point(p99, 800, 5) == 800
    assert requests_per_point(Slo.from_table({"targets": ["p90 tpot < 50"]}), None, 0) == 50
    assert requests_per_point(Slo.from_table({"targets": ["p99.9 e2e < 9000"]}), None, 0) == 5000
    assert requests_per_point(Slo.from_table({"min_attainment": 0.9}), None, 0) == 10


def test_a_trace_too_short_for_the_percentile_stops_the_search_before_it_runs() -> None:
    p99 = Slo.from_table({"targets": ["p99 ttft < 2000"]})
    assert too_short(p99, 500, 0) == ""
    why = too_short(p99, 200, 0)
    assert "p99 target needs 500 distinct trace records" in why and "the trace has 200" in why
    assert "plus 3 warmup" in too_short(p99, 501, 3)
    assert too_short(Slo.from_table({"targets": ["p90 ttft < 2000"]}), 200, 0) == ""


def test_a_point_with_too_few_samples_stops_the_search() -> None:
    search = Search(Settings(start=8))
    search.record(Step("rate=8", 8, TOO_FEW_SAMPLES))
    assert search.next_rate() is None and search.stop_reason == TOO_FEW_UNITS


def test_two_answers_compare_by_their_brackets() -> None:
    slo = Slo.from_table({"targets": ["p99 ttft < 2000"]})

    def found(low: float | None, high: float | None) -> Answer:
        steps = ([step(low, HELD)] if low is not None else []) + ([step(high, FAILED)] if high is not None else [])
        return answer(steps)

    base = found(10, 11)
    more = compare_answers("base", base, "run", found(12, 13), slo, slo)
    assert more["verdict"] == MORE and more["change"] == pytest.approx(0.2)
    assert (more["change_low"], more["change_high"]) == (pytest.approx(12 / 11 - 1), pytest.approx(13 / 10 - 1))
    assert compare_answers("base", base, "run", found(8, 9.5), slo, slo)["verdict"] == LESS
    assert compare_answers("base", base, "run", found(10.5, 11.5), slo, slo)["verdict"] == WITHIN
    # A search that never failed: its limit is above its highest rate, so only "more" can be said.
    unbounded = compare_answers("base", base, "run", found(16, None), slo, slo)
    assert unbounded["verdict"] == MORE and math.isinf(unbounded["change_high"])
    assert compare_answers("base", base, "run", found(None, 5), slo, slo)["verdict"].startswith("n/a: no rate held in run")
    other = Slo.from_table({"targets": ["p99 ttft < 1000"]})
    assert compare_answers("base", base, "run", found(12, 13), slo, other)["verdict"] == "n/a: different SLOs"


def test_a_point_that_did_not_offer_its_load_stops_the_search_and_is_no_answer() -> None:
    from specreplay.run.capacity import LOAD_NOT_OFFERED, NOT_OFFERED

    search = Search(Settings(start=8.0, tolerance=0.05))
    assert search.next_rate() == 8.0
    search.record(step(8.0, HELD))
    assert search.next_rate() == 16.0
    search.record(Step("rate=16", 16.0, NOT_OFFERED, (), (), "", "sent 10.8 req/s for a target of 16: the sessions cap the load"))
    assert search.next_rate() is None and search.stop_reason == LOAD_NOT_OFFERED
    found = search.answer
    # 16 req/s was never offered: neither held nor the first failure.
    assert found.max_rate == 8.0 and found.high is None
    text = "\n".join(found.lines())
    assert "rate=16 did not offer its load: sent 10.8 req/s" in text and "the sessions cap the load" in text
    assert "every rate tried held" not in text
