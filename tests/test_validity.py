import json
from typing import Any

import numpy as np
import pytest
from conftest import T0, MakeResults, config_metadata

from specreplay.analysis.checks_load import covered_us
from specreplay.analysis.validity import Finding, check, from_json, is_fatal, to_json
from specreplay.settings.thresholds import ValidityThresholds

#: The default thresholds (too_few_requests is a note, ignored by the checks below).
FEW = ValidityThresholds()


def codes(findings: list[Finding]) -> list[str]:
    return [f.code for f in findings]


def only(findings: list[Finding], code: str) -> Finding:
    matching = [f for f in findings if f.code == code]
    assert len(matching) == 1, findings
    return matching[0]


def budget_eaten(reasoning: int = 512) -> dict[str, Any]:
    return {"chunks": [(1_000 * (i + 1), 1, "reasoning") for i in range(reasoning)], "finish_reason": "length"}


def test_a_clean_point_has_no_findings(make_results: MakeResults) -> None:
    # 500 records: enough for a p99 (resampling.samples_needed), so not even a note.
    rows = [{"sent_us": T0 + 125_000 * i} for i in range(500)]
    assert check(make_results(rows), points=[{"point": "rate=8", "mode": "rate", "value": 8.0}]) == []


def test_reasoning_ate_budget_five_of_eight(make_results: MakeResults) -> None:
    rows = [budget_eaten() for _ in range(5)] + [{} for _ in range(3)]
    finding = only(check(make_results(rows), FEW, max_tokens=512), "reasoning_ate_budget")
    assert finding.level == "error"
    assert finding.count == 5
    assert finding.point == "rate=8"
    assert "5 of 8" in finding.message
    assert "2560" in finding.message  # 5 × 512 reasoning tokens spent
    assert "max_tokens=512" in finding.message
    assert "--max-tokens" in finding.message
    assert "TPOT/TPS" in finding.message


def test_reasoning_ate_budget_reads_max_tokens_from_the_config(make_results: MakeResults) -> None:
    df = make_results([budget_eaten(64)], config_metadata([], max_tokens=64))
    assert "max_tokens=64" in only(check(df, FEW), "reasoning_ate_budget").message


def test_one_run_of_several_is_advised_with_its_own_max_tokens(make_results: MakeResults) -> None:
    runs = [{"label": "a", "max_tokens": 64, "points": []}, {"label": "b", "max_tokens": 128, "points": []}]
    metadata = {"specreplay.version": "0.1.0", "specreplay.runs": json.dumps(runs)}
    # The file's rows of run "b" only, as `load(...)` filtered by label gives them.
    df = make_results([{**budget_eaten(128), "label": "b"}], metadata)
    assert "max_tokens=128" in only(check(df, FEW), "reasoning_ate_budget").message


def test_reasoning_ate_budget_across_dialects_and_not_for_truncated_answers(make_results: MakeResults) -> None:
    rows = [
        {**budget_eaten(8), "finish_reason": "max_tokens"},  # anthropic
        {**budget_eaten(8), "finish_reason": "max_output_tokens"},  # responses
        {"finish_reason": "length"},  # an answer was given, just cut short
        {**budget_eaten(8), "finish_reason": "stop"},
    ]
    assert only(check(make_results(rows), FEW), "reasoning_ate_budget").count == 2


def test_warmup_rows_are_left_out_of_checks(make_results: MakeResults) -> None:
    rows = [{**budget_eaten(8), "warmup": True}, {"warmup": True, "error_kind": "connect", "chunks": None}, {}]
    # The one measured request is too few for any percentile: only that note.
    assert codes(check(make_results(rows), FEW)) == ["too_few_requests"]


def test_estimated_tokens(make_results: MakeResults) -> None:
    # The refused request (HTTP 400, no usage and no tokens) estimated nothing:
    # not counted (the Mooncake replay's 830 refused prompts were, until this test).
    refused = {"token_source": "chunks", "http_status": 400, "error_kind": "http", "chunks": []}
    rows = [{"token_source": "chunks"}, {"token_source": "usage_split_estimated"}, {"token_source": "usage"}, {}, refused]
    finding = only(check(make_results(rows), FEW), "estimated_tokens")
    assert finding.level == "warning"
    assert finding.count == 2
    assert finding.message.startswith("Token counts are estimates: 1 requests had no usage")
    assert "no usage" in finding.message and "split" in finding.message


def test_multi_token_chunks_from_chunk_counts_or_usage(make_results: MakeResults) -> None:
    rows = [
        {"chunks": [(1_000, 1, "content"), (2_000, 4, "content")]},
        # usage says 20 tokens, but only 11 chunks came: several per chunk
        # (counted one per chunk, as files before `chunk_token_source` did).
        {"token_source": "usage", "output_tokens": 20, "content_tokens": 20, "chunk_token_source": "text_length"},
        {},
    ]
    finding = only(check(make_results(rows), FEW), "multi_token_chunks")
    assert finding.level == "note"
    assert finding.count == 2
    assert "ITL/chunk" in finding.message and "ITL/token" in finding.message
    assert "per-chunk token counts of 1 requests are estimated" in finding.message


def test_one_token_per_chunk_is_not_flagged(make_results: MakeResults) -> None:
    assert "multi_token_chunks" not in codes(check(make_results([{}, {}]), FEW))


def lagging(point: str, lag_us: int, n: int = 10, spacing_us: int = 125_000) -> list[dict[str, Any]]:
    return [
        {"point": point, "scheduled_us": T0 + spacing_us * i, "sent_us": T0 + spacing_us * i + lag_us}
        for i in range(n)
    ]


def test_client_saturated_by_send_lag_on_open_loop_points_only(make_results: MakeResults) -> None:
    df = make_results(lagging("rate=8", 2_000) + lagging("concurrency=8", 2_000))
    finding = only(check(df, FEW), "client_saturated")
    assert finding.point == "rate=8"
    assert finding.level == "warning"
    assert "2.000 ms" in finding.message


@pytest.mark.parametrize(
    ("pacer", "late_max_us", "said"),
    [
        ("SCHED_FIFO:2", 30_000, "woke up to 30.0 ms late, real-time: the machine held the process up"),
        ("SCHED_OTHER", 4_000, "woke up to 4.0 ms late: it waited for a CPU"),
        ("SCHED_FIFO:2", 300, None),  # woke in time: the lag came after it
        (None, None, None),  # not recorded (a file from before, or no pacer)
    ],
)
def test_client_saturated_says_when_the_pacer_itself_was_held_up(
    make_results: MakeResults, pacer: str | None, late_max_us: int | None, said: str | None
) -> None:
    scheduling = [{"label": "test", "point": "rate=8", "pacer": pacer, "workers": pacer, "realtime_asked": True,
                   "pacer_late_max_us": late_max_us, "pacer_late_p99_us": 64}]  # fmt: skip
    df = make_results(lagging("rate=8", 2_000), {"specreplay.scheduling": json.dumps(scheduling)})
    message = only(check(df, FEW), "client_saturated").message
    assert "2.000 ms" in message
    if said is None:
        assert "pacing thread" not in message
    else:
        assert said in message


def stalled_point(stall_at: int, stall_us: int, n: int = 400, spacing_us: int = 250) -> list[dict[str, Any]]:
    """4,000/s, every send 30 µs late except those due in a stall of
    `stall_us` starting at send `stall_at`: they leave together at its end."""
    stall_from, stall_to = T0 + spacing_us * stall_at, T0 + spacing_us * stall_at + stall_us
    return [
        {"point": "rate=4000", "scheduled_us": due, "sent_us": max(due, stall_to + 5 * (i - stall_at)) + 30 if stall_from <= due < stall_to else due + 30}
        for i, due in enumerate(T0 + spacing_us * k for k in range(n))
    ]


def held_scheduling(pacer: str, spans: list[list[int]], cpu_spans: list[list[int]] | None = None) -> dict[str, str]:
    entry = {"label": "test", "point": "rate=4000", "pacer": pacer, "workers": pacer, "realtime_asked": True,
             "pacer_late_max_us": 20_000, "pacer_late_p99_us": 64, "pacer_held_us": spans, "pacer_held_dropped": 0,
             "cpu_watched": cpu_spans is not None, "cpu_held_us": cpu_spans or [], "cpu_held_dropped": 0,
             "host_steal_ms": 420.0}  # fmt: skip
    return {"specreplay.scheduling": json.dumps([entry])}


def test_a_real_time_pacer_held_up_by_the_machine_is_host_stalled_not_client_saturated(make_results: MakeResults) -> None:
    # 20 ms stall at send 100 (of 400): 80 sends due in it, late by up to 20 ms; a p99 of about 16 ms.
    rows = stalled_point(100, 20_000)
    span = [[T0 + 250 * 100 - 40, T0 + 250 * 100 + 20_000]]
    findings = check(make_results(rows, held_scheduling("SCHED_FIFO:2", span)), FEW)
    assert "client_saturated" not in codes(findings)
    finding = only(findings, "host_stalled")
    assert finding.level == "warning"
    # The span is 20.04 ms: sends 100-260 are due in it or in its wake (as long again), 161 in all.
    assert finding.count == 161, finding.message
    assert "lost 1 span of 0.25 ms or more (up to 20.0 ms" in finding.message
    assert "the other 239 kept the schedule (p99 0.030 ms)" in finding.message
    assert "the hypervisor took 420 ms of CPU time" in finding.message


def test_a_cpu_taken_from_the_workers_is_host_stalled_though_the_pacer_kept_time(make_results: MakeResults) -> None:
    # The pacer woke on time (no span of its own) but a worker's vCPU was
    # taken: two CPUs' watches saw it, overlapping (one 20 ms stall of the
    # client in all, not 30).
    rows = stalled_point(100, 20_000)
    cpu_spans = [[T0 + 250 * 100 - 40, T0 + 250 * 100 + 10_000], [T0 + 250 * 100, T0 + 250 * 100 + 20_000]]
    findings = check(make_results(rows, held_scheduling("SCHED_FIFO:2", [], cpu_spans)), FEW)
    assert "client_saturated" not in codes(findings)
    finding = only(findings, "host_stalled")
    assert "the CPUs its threads run on lost 2 spans of 0.25 ms or more (up to 20.0 ms, 20.0 ms in all)" in finding.message
    assert "the other 239 kept the schedule" in finding.message


def test_spans_held_at_once_count_once() -> None:
    start, end = np.array([0.0, 5.0, 6.0, 20.0]), np.array([10.0, 8.0, 12.0, 21.0])
    assert covered_us(start, end) == 13.0
    assert covered_us(np.array([3.0]), np.array([4.0])) == 1.0


@pytest.mark.parametrize(
    ("pacer", "span_shift_us", "whose"),
    [
        ("SCHED_OTHER", 0, "pacer"),  # the normal policy: our own threads could have held the pacer
        ("SCHED_FIFO:2", 100_000, "pacer"),  # a held span elsewhere: the late sends are the client's
        ("SCHED_FIFO:2", 100_000, "cpu"),  # a CPU taken elsewhere: the same
        ("SCHED_OTHER", 0, "cpu"),  # no real-time pacer: nothing is the machine's for sure
    ],
)
def test_late_sends_the_machine_does_not_explain_stay_client_saturated(make_results: MakeResults, pacer: str, span_shift_us: int, whose: str) -> None:
    rows = stalled_point(100, 20_000)
    span = [[T0 + 250 * 100 + span_shift_us, T0 + 250 * 100 + 20_000 + span_shift_us]]
    scheduling = held_scheduling(pacer, span) if whose == "pacer" else held_scheduling(pacer, [], span)
    findings = check(make_results(rows, scheduling), FEW)
    assert "host_stalled" not in codes(findings)
    assert "the hypervisor took 420 ms of CPU time" in only(findings, "client_saturated").message


def test_client_saturated_when_sending_slower_than_the_schedule(make_results: MakeResults) -> None:
    # Scheduled 8/s, sent 4/s: the point did not offer the load it names.
    rows = [{"point": "rate=8", "scheduled_us": T0 + 125_000 * i, "sent_us": T0 + 250_000 * i} for i in range(10)]
    finding = only(check(make_results(rows), FEW), "client_saturated")
    assert finding.level == "error"
    assert "4.00/s" in finding.message and "8.00/s" in finding.message


def test_a_sparse_arrival_sample_is_not_client_saturation(make_results: MakeResults) -> None:
    # Target 8/s but the (random) schedule offered 4/s, and the client kept it.
    rows = lagging("rate=8", 0, spacing_us=250_000)
    assert "client_saturated" not in codes(check(make_results(rows), FEW))


def test_slow_responses_do_not_count_as_client_saturation(make_results: MakeResults) -> None:
    slow = [(5_000_000 + 10_000 * i, 1, "content") for i in range(11)]
    rows = [{**row, "chunks": slow} for row in lagging("rate=8", 0)]
    assert "client_saturated" not in codes(check(make_results(rows), FEW))


def test_error_rate_lists_counts_by_kind(make_results: MakeResults) -> None:
    rows: list[dict[str, Any]] = [{} for _ in range(7)]
    rows += [{"error_kind": "timeout", "chunks": None}] * 2 + [{"error_kind": "http", "chunks": None, "http_status": 503}]
    finding = only(check(make_results(rows), FEW), "error_rate")
    assert finding.level == "error"
    assert finding.count == 3
    assert "timeout: 2" in finding.message and "http: 1" in finding.message
    assert "error_rate" not in codes(check(make_results(rows), ValidityThresholds(max_error_rate=0.5)))


def test_engine_panic_is_an_error_naming_the_first_message(make_results: MakeResults) -> None:
    panic = {"error_kind": "engine_panic", "chunks": None, "error_message": "the engine panicked while running this request: boom"}
    rows: list[dict[str, Any]] = [{} for _ in range(9)] + [panic]
    finding = only(check(make_results(rows), FEW), "engine_panic")
    assert finding.level == "error" and finding.count == 1
    assert "1 of 10 requests" in finding.message and "request 9" in finding.message and "boom" in finding.message
    assert codes(check(make_results(rows), FEW))[0] == "engine_panic"
    assert "engine_panic" not in codes(check(make_results([{} for _ in range(10)]), FEW))


def test_too_few_requests_follows_the_sample_count_rule(make_results: MakeResults) -> None:
    # resampling.samples_needed: 10 distinct records for a p50, 50 for a p90, 500 for a p99.
    eight = only(check(make_results([{} for _ in range(8)])), "too_few_requests")
    assert eight.count == 8 and eight.level == "note"
    assert "the p50 and p90 and p99 printed" in eight.message
    assert "at least 10 for a p50, 50 for a p90, 500 for a p99" in eight.message
    fifty = only(check(make_results([{} for _ in range(50)])), "too_few_requests")
    assert "the p99 printed" in fifty.message and "at least 500 for a p99" in fifty.message
    assert "too_few_requests" not in codes(check(make_results([{} for _ in range(500)])))
    # A looped trace's records count once: 60 requests of 6 records are 6 units.
    looped = only(check(make_results([{"trace_id": f"r{i % 6}" + (f"#{i // 6}" if i >= 6 else "")} for i in range(60)])), "too_few_requests")
    assert looped.count == 6 and "only 6 distinct trace records among the 60 successful requests" in looped.message


def test_errors_come_first_within_a_point(make_results: MakeResults) -> None:
    rows = [{**budget_eaten(4), "token_source": "chunks"}]
    assert codes(check(make_results(rows))) == ["reasoning_ate_budget", "estimated_tokens", "too_few_requests"]


def test_findings_round_trip_through_json() -> None:
    findings = [
        Finding("reasoning_ate_budget", "error", "rate=8", 5, "5 of 8 — «no answer»"),
        Finding("too_few_requests", "warning", "rate=8", 8, "only 8"),
    ]
    assert from_json(to_json(findings)) == findings
    assert to_json([]) == "[]"


def test_is_fatal_only_when_strict_and_never_for_notes() -> None:
    warning = Finding("estimated_tokens", "warning", "rate=8", 8, "no usage")
    note = Finding("too_few_requests", "note", "rate=8", 8, "only 8")
    assert is_fatal([warning], strict=True)
    assert not is_fatal([warning], strict=False)
    assert not is_fatal([], strict=True)
    assert not is_fatal([note], strict=True)


def test_thresholds_from_config() -> None:
    assert ValidityThresholds.from_dict({"send_lag_p99_ms": 5.0}).send_lag_p99_ms == 5.0
    with pytest.raises(ValueError, match="send_lag_ms"):
        ValidityThresholds.from_dict({"send_lag_ms": 5.0})


def test_each_run_is_checked_with_its_own_recorded_thresholds(make_results: MakeResults) -> None:
    # Run "a" allows 1% of failed requests, run "b" 50%: one failure in eight
    # is too many for a and within b's limit.
    runs = [{"label": "a", "points": []}, {"label": "b", "points": [], "thresholds": {"max_error_rate": 0.5}}]
    metadata = {"specreplay.version": "0.1.0", "specreplay.runs": json.dumps(runs)}
    failed = {"error_kind": "timeout", "chunks": None}
    rows = [{"label": label, "point_index": i, **(failed if k == 0 else {})} for i, label in enumerate("ab") for k in range(8)]
    df = make_results(rows, metadata)
    assert [f.point for f in check(df) if f.code == "error_rate"] == ["a: rate=8"]
    # Given thresholds replace the recorded ones, for every run.
    assert [f.point for f in check(df, ValidityThresholds()) if f.code == "error_rate"] == ["a: rate=8", "b: rate=8"]


def test_retired_sample_count_thresholds_are_read_and_ignored() -> None:
    # Files recorded before the sample counts became resampling.samples_needed.
    assert ValidityThresholds.from_dict({"min_requests_p90": 1, "min_requests_p99": 5, "min_sessions_p90": 3}) == ValidityThresholds()


def test_engine_delay_says_the_client_was_saturated(make_results: MakeResults) -> None:
    # 11 chunks per request; one request's chunks waited 8 ms in the client.
    slow = {"chunk_delay_us": [8_000] * 11}
    rows: list[dict[str, Any]] = [{}] * 9 + [slow]
    finding = only(check(make_results(rows), FEW), "engine_delay")
    assert finding.level == "warning"
    assert finding.message.startswith("The client was saturated: its own delay p99 was 8.000 ms")
    assert "kernel stamps are unaffected, but the send schedule may not be" in finding.message
    # Within the limit (the default delays are 20–116 µs), or no kernel stamps at all: nothing.
    assert "engine_delay" not in codes(check(make_results([{}] * 10), FEW))
    unstamped = [{"chunk_delay_us": [None] * 11, "stamp_source": "user"}] * 10
    assert "engine_delay" not in codes(check(make_results(unstamped), FEW))
    assert "engine_delay" not in codes(check(make_results(rows), ValidityThresholds(engine_delay_p99_ms=10.0)))


def test_queue_growing_when_ttft_climbs_through_an_open_loop_point(make_results: MakeResults) -> None:
    # 40 requests 50 ms apart (2 s): TTFT climbing by 100 ms a second of
    # sending (a server serving 90% of the offered rate), then flat.
    def rows(growth: float, point: str) -> list[dict[str, Any]]:
        out = []
        for i in range(40):
            sent = T0 + 50_000 * i
            ttft = 20_000 + int(growth * 50_000 * i)
            out.append({"point": point, "sent_us": sent, "chunks": [(ttft + 5_000 * k, 1, "content") for k in range(5)]})
        return out

    points = [{"point": "rate=20", "mode": "rate", "value": 20}, {"point": "rate=10", "mode": "rate", "value": 10}, {"point": "concurrency=8", "mode": "concurrency", "value": 8}]
    df = make_results(rows(0.1, "rate=20") + rows(0.0, "rate=10") + rows(0.1, "concurrency=8"), config_metadata(points))
    found = [f for f in check(df) if f.code == "queue_growing"]
    assert [(f.point, f.level, f.count) for f in found] == [("rate=20", "warning", 40)]
    assert found[0].message.startswith("TTFT grew by 100 ms per second of sending (195 ms over the point's 2.0 s; limit 0.05 s/s)")
    assert not [f for f in check(df, ValidityThresholds(max_queue_growth=0.2)) if f.code == "queue_growing"]
