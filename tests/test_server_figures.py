"""The server figures on constructed counter and gauge series: increases
over the point (resets, late series, label sets), acceptance by position,
gauges from the tick scrapes only, and each server's names."""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd
import pytest

from specreplay.servermetrics.figures import FIGURES, decode_tokens_per_chunk, point_figures

T0 = 1_750_000_000_000_000
POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


def samples(scrapes: list[tuple[str, dict[str, Any]]]) -> pd.DataFrame:
    """One scrape per second: (kind, {name or (name, lab(...)): value})."""
    rows = []
    for i, (kind, values) in enumerate(scrapes):
        for key, value in values.items():
            name, labels = key if isinstance(key, tuple) else (key, ())
            rows.append(
                {"ts_us": T0 + 1_000_000 * i, "rtt_us": 400, "label": "run", "point": "rate=1", "scrape": kind,
                 "name": name, "labels": json.dumps(dict(labels), sort_keys=True, separators=(",", ":")),
                 "type": "counter" if name.endswith("_total") else "gauge", "value": float(value)}
            )  # fmt: skip
    return pd.DataFrame(rows)


def lab(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def spec(drafts: float, draft_tokens: float, accepted: float, per_pos: list[float] | None = None) -> dict[Any, float]:
    out: dict[Any, float] = {
        "vllm:spec_decode_num_drafts_total": drafts,
        "vllm:spec_decode_num_draft_tokens_total": draft_tokens,
        "vllm:spec_decode_num_accepted_tokens_total": accepted,
    }
    for i, v in enumerate(per_pos or []):
        out[(POS, lab(engine="0", position=str(i)))] = v
    return out


def test_acceptance_from_counter_increases() -> None:
    # The counters did not start at 0: only the increase over the point counts.
    f = point_figures(
        samples([
            ("start", spec(100, 400, 200, [60, 50, 40, 50])),
            ("tick", spec(150, 600, 260, [90, 60, 45, 55])),
            ("end", spec(300, 1200, 380, [180, 90, 60, 60])),
        ])
    )  # fmt: skip
    assert f["spec_drafts"] == 200 and f["spec_draft_tokens"] == 800 and f["spec_accepted_tokens"] == 180
    assert f["spec_acceptance_rate"] == pytest.approx(180 / 800)
    assert f["spec_acceptance_length"] == pytest.approx(1 + 180 / 200)
    assert f["spec_draft_len"] == 4
    assert f["spec_acceptance_by_position"] == pytest.approx((120 / 200, 40 / 200, 20 / 200, 10 / 200))
    assert f["server_window_s"] == 2.0 and f["spec_drafts_per_s"] == 100
    assert f["server_scrapes"] == 3


def test_a_reset_counts_from_zero_and_a_late_series_from_zero() -> None:
    f = point_figures(
        samples([
            ("start", {"vllm:generation_tokens_total": 1000}),
            ("tick", {"vllm:generation_tokens_total": 1500}),
            ("tick", {"vllm:generation_tokens_total": 200}),  # the server restarted
            ("end", {"vllm:generation_tokens_total": 300, ("vllm:num_preemptions_total", lab(engine="1")): 2}),
        ])
    )  # fmt: skip
    assert f["server_generation_tokens"] == 500 + 200 + 100
    assert f["server_preemptions"] == 2  # appeared after the first scrape: it started at 0


def test_label_sets_add_up() -> None:
    a, b = lab(engine="0"), lab(engine="1")
    name = "vllm:spec_decode_num_drafts_total"
    f = point_figures(
        samples([
            ("start", {(name, a): 10, (name, b): 5, ("vllm:num_requests_running", a): 0, ("vllm:num_requests_running", b): 0}),
            ("tick", {(name, a): 20, (name, b): 25, ("vllm:num_requests_running", a): 3, ("vllm:num_requests_running", b): 4}),
            ("end", {(name, a): 30, (name, b): 45, ("vllm:num_requests_running", a): 0, ("vllm:num_requests_running", b): 0}),
        ])
    )  # fmt: skip
    assert f["spec_drafts"] == 20 + 40
    assert f["server_running_mean"] == 7 and f["server_running_max"] == 7


def test_gauges_come_from_the_ticks_alone() -> None:
    running = [0, 8, 8, 6, 2, 0]
    kv = [0.0, 0.5, 0.7, 0.6, 0.2, 0.0]
    kinds = ["start"] + ["tick"] * 4 + ["end"]
    f = point_figures(
        samples([(k, {"vllm:num_requests_running": r, "vllm:num_requests_waiting": 0, "vllm:kv_cache_usage_perc": u}) for k, r, u in zip(kinds, running, kv)])
    )
    ticks = pd.Series(running[1:5], dtype=float)
    assert f["server_running_mean"] == ticks.mean() == 6
    assert f["server_running_p90"] == pytest.approx(ticks.quantile(0.9))
    assert f["server_running_max"] == 8
    assert f["server_waiting_max"] == 0
    assert f["server_kv_usage_mean"] == pytest.approx(0.5) and f["server_kv_usage_max"] == pytest.approx(0.7)
    # No speculation published: no acceptance, not zero.
    assert math.isnan(f["spec_acceptance_rate"]) and f["spec_acceptance_by_position"] == ()


def test_prefix_cache_hit_rate() -> None:
    vllm = point_figures(
        samples([("start", {"vllm:prefix_cache_queries_total": 100, "vllm:prefix_cache_hits_total": 10}),
                 ("end", {"vllm:prefix_cache_queries_total": 500, "vllm:prefix_cache_hits_total": 110})])
    )  # fmt: skip
    assert vllm["server_prefix_hit_rate"] == pytest.approx(100 / 400)
    # llama.cpp counts the prompt tokens it computed and those it reused.
    llamacpp = point_figures(
        samples([("start", {"llamacpp:prompt_tokens_total": 39, "llamacpp:prompt_tokens_cached_total": 0}),
                 ("end", {"llamacpp:prompt_tokens_total": 41, "llamacpp:prompt_tokens_cached_total": 72})])
    )  # fmt: skip
    assert llamacpp["server_prefix_hit_rate"] == pytest.approx(72 / 74)


def test_sglang_publishes_averages_not_counters() -> None:
    gauges = [{"sglang:spec_accept_length": 2.0 + i, "sglang:spec_accept_rate": 0.4, "sglang:num_running_reqs": 5,
               "sglang:num_queue_reqs": i, "sglang:token_usage": 0.25, "sglang:cache_hit_rate": 0.5,
               "sglang:num_retracted_requests_total": 3 * i} for i in range(4)]  # fmt: skip
    f = point_figures(samples([("start", gauges[0]), ("tick", gauges[1]), ("tick", gauges[2]), ("end", gauges[3])]))
    assert f["spec_acceptance_length"] == pytest.approx(3.5) and f["spec_acceptance_rate"] == pytest.approx(0.4)
    assert f["server_waiting_max"] == 2 and f["server_kv_usage_mean"] == 0.25 and f["server_prefix_hit_rate"] == 0.5
    assert f["server_preemptions"] == 9
    assert math.isnan(f["spec_drafts"])


def test_no_samples_no_figures() -> None:
    f = point_figures(samples([]).reindex(columns=["ts_us", "rtt_us", "label", "point", "scrape", "name", "labels", "type", "value"]))
    assert set(f) == set(FIGURES)
    assert f["server_scrapes"] == 0
    assert all(math.isnan(v) for k, v in f.items() if k not in ("server_scrapes", "spec_acceptance_by_position"))


def test_decode_chunks_leave_the_first_chunk_out() -> None:
    chunks = pd.DataFrame({"chunk_index": [0, 1, 2, 3, 0, 1], "tokens": [1, 5, 5, 2, 1, 3]})
    assert decode_tokens_per_chunk(chunks) == pytest.approx((5 + 5 + 2 + 3) / 4)
    assert math.isnan(decode_tokens_per_chunk(chunks.iloc[0:0]))
