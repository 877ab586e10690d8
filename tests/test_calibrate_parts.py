"""The calibration's parts that need no server: output classes by prompt
length, the speed spread, joining interleaved parts (docs/predict.md).
Deterministic: synthetic samples drawn with fixed seeds, and two real
llama.cpp runs kept in tests/vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specreplay.run.calibrate.model import Param
from specreplay.run.calibrate.outputs import MIN_CLASS_SAMPLES, bucket, core_classes, fit_outputs
from specreplay.run.calibrate.spread import fit_speed


def answers(prompts: list[int], content: list[int], reasoning: list[int] | None = None, api: str = "chat") -> pd.DataFrame:
    n = len(prompts)
    return pd.DataFrame({
        "api": [api] * n, "prompt_tokens": prompts, "output_tokens": [c + r for c, r in zip(content, reasoning or [0] * n)],
        "reasoning_tokens": reasoning or [0] * n, "content_tokens": content, "finish_reason": ["stop"] * n,
    })


def test_output_lengths_are_kept_per_prompt_length_bucket() -> None:
    # Short prompts (≤ 64 tokens) answer 10 (+5 reasoning), long ones (≤ 512) 40.
    rows = pd.concat([
        answers([40 + i for i in range(12)], [10] * 12, [5] * 12),
        answers([300 + i for i in range(12)], [40] * 12),
        answers([2000], [99]),  # a lone long prompt: too few for a class, in the API's class only
    ], ignore_index=True)
    out = fit_outputs(rows, seed=0)
    assert set(out) == {"chat", "chat/<=64", "chat/<=512"}
    assert out["chat/<=64"]["content"] == [10] * 12 and out["chat/<=64"]["reasoning"] == [5] * 12
    assert out["chat/<=512"]["content"] == [40] * 12 and out["chat/<=512"]["max_prompt_tokens"] == 512
    assert out["chat"]["samples"] == 25
    classes = {(c["api"], c.get("max_prompt_tokens")): c for c in core_classes(out)}
    assert set(classes) == {("chat", None), ("chat", 64), ("chat", 512)}
    assert bucket(64) == 64 and bucket(65) == 128 and bucket(1) == 1


def test_one_bucket_or_few_answers_make_no_prompt_classes() -> None:
    rows = answers([100 + i for i in range(MIN_CLASS_SAMPLES * 2)], [7] * (MIN_CLASS_SAMPLES * 2))
    assert set(fit_outputs(rows, seed=0)) == {"chat"}
    few = pd.concat([answers([30] * (MIN_CLASS_SAMPLES - 1), [1] * (MIN_CLASS_SAMPLES - 1)), answers([300] * 20, [2] * 20)])
    assert set(fit_outputs(few, seed=0)) == {"chat"}
    # A class written by an older calibrate (keyed by API, no `api` field) still reads.
    assert core_classes({"chat": {"reasoning": [0], "content": [3]}}) == [{"api": "chat", "reasoning": [0], "content": [3]}]


@pytest.mark.parametrize("spread", [0.05, 0.2])
def test_the_speed_spread_of_known_log_normal_requests_is_recovered(spread: float) -> None:
    # 200 requests, each decoding 30 steps at one speed drawn log-normal
    # around the fitted step (10 ms alone, +50% per further sequence), plus
    # a 2% read jitter per gap that the per-request median removes.
    rng = np.random.default_rng(11)
    step, cost = Param("step_us", "fitted", 10_000.0), Param("batch_step_cost", "fitted", 0.5)
    per_request = []
    for k in range(200):
        decoding = np.full(30, 1 + k % 3)
        speed = np.exp(spread * rng.standard_normal())
        gaps = 10_000.0 * (1 + 0.5 * (decoding - 1)) * speed * (1 + 0.02 * rng.standard_normal(30))
        per_request.append((gaps, decoding, int(gaps.sum())))
    got, window = fit_speed(per_request, step, cost)
    assert got.status == "fitted" and got.samples == 200
    assert got.value == pytest.approx(spread, abs=0.015 + 0.1 * spread), got
    assert window.status == "fitted" and 300_000 < window.value < 800_000, window


def test_the_speed_spread_needs_a_step_and_enough_requests() -> None:
    got, window = fit_speed([], Param("step_us", "unknown", needs="x"), Param("batch_step_cost", "unknown"))
    assert got.status == "unknown" and window.status == "unknown" and got.needs
    few = [(np.full(10, 10_000.0), np.ones(10), 100_000)] * 3
    got, _ = fit_speed(few, Param("step_us", "fitted", 10_000.0), Param("batch_step_cost", "fitted", 0.0))
    assert got.status == "unknown" and "seen: 3" in got.needs


def test_the_prefill_regression_is_non_negative_and_follows_the_median() -> None:
    from specreplay.run.calibrate.regress import robust_lstsq

    # TTFT = 20 ms + 6 ms/token, 2% noise, and three requests caught in a slow spell (3x).
    rng = np.random.default_rng(5)
    tokens = rng.uniform(100, 340, 24)
    ttft = (20_000 + 6_000 * tokens) * (1 + 0.02 * rng.standard_normal(24))
    ttft[:3] *= 3
    a, b = robust_lstsq(np.column_stack([np.ones(24), tokens]), ttft)
    assert b == pytest.approx(6_000, rel=0.05) and 0 <= a < 200_000
    # A fit that would want a negative cost gets zero there instead.
    cached = np.full(24, 24.0)
    cached[5:7] = 150
    coef = robust_lstsq(np.column_stack([np.ones(24), tokens, cached]), ttft - 1_000 * cached)
    assert coef.min() >= 0 and coef[2] == 0


def _multi_token_rows(n: int = 8) -> pd.DataFrame:
    return pd.DataFrame({"chunk_tokens": [[1, 2, 3, 2, 1, 4]] * n})


def test_a_vllm_run_without_spec_counters_is_a_run_without_speculation() -> None:
    # vLLM merges steps into one chunk under load: with its metrics scraped
    # and no spec_decode counters among them, the run did not speculate.
    from specreplay.run.calibrate.fit import fit_spec

    metrics = pd.DataFrame({"name": ["vllm:num_requests_running", "vllm:num_requests_waiting"], "value": [4.0, 0.0]})
    spec, tokens_per_step = fit_spec(metrics, _multi_token_rows())
    assert spec.status == "fitted" and spec.value == [] and tokens_per_step == 1.0
    assert "steps merged" in spec.how


def test_multi_token_chunks_without_metrics_leave_speculation_unknown() -> None:
    from specreplay.run.calibrate.fit import fit_spec

    spec, _ = fit_spec(pd.DataFrame({"name": pd.Series([], dtype=str), "value": pd.Series([], dtype=float)}), _multi_token_rows())
    assert spec.status == "unknown" and "vllm:spec_decode_" in (spec.needs or "")


def _stamped_rows(one_step: bool, n: int = 8, seed: int = 4) -> pd.DataFrame:
    """Streams of a 20 ms step (±5% noise) where about one chunk in five
    carries 2 or 3 tokens, delivered a step after the chunk before it
    (`one_step`: one step made them all, as speculation does) or a step
    per token (each token took its own step)."""
    rng = np.random.default_rng(seed)
    stamps, tokens = [], []
    for _ in range(n):
        tok = np.where(rng.random(30) < 0.2, rng.integers(2, 4, 30), 1)
        tok[0] = 1
        step = 20_000 * (1 + 0.05 * rng.standard_normal(30))
        gap = step if one_step else step * tok
        stamps.append(np.cumsum(gap).astype(np.int64).tolist())
        tokens.append(tok.tolist())
    return pd.DataFrame({"chunk_ts_us": stamps, "chunk_tokens": tokens})


NO_METRICS = pd.DataFrame({"name": pd.Series([], dtype=str), "value": pd.Series([], dtype=float)})


def test_chunks_of_several_tokens_that_took_a_step_each_are_not_speculation() -> None:
    # llama.cpp holds back text that may start a stop string (or half a
    # UTF-8 character) and sends it with the next token: a chunk of two
    # tokens after two steps. Calibrating on such a run as "speculation
    # unknown" left it out of the decode fit (a CI failure: the concurrency-4
    # run dropped, no batch seen).
    from specreplay.run.calibrate.fit import fit_spec, merged_steps_ratio

    rows = _stamped_rows(one_step=False)
    assert merged_steps_ratio(rows) == pytest.approx(1.0, abs=0.1)
    spec, tokens_per_step = fit_spec(NO_METRICS, rows)
    assert spec.status == "fitted" and spec.value == [] and tokens_per_step == 1.0
    assert "steps merged" in spec.how


def test_chunks_of_several_tokens_made_in_one_step_leave_speculation_unknown() -> None:
    from specreplay.run.calibrate.fit import fit_spec, merged_steps_ratio

    rows = _stamped_rows(one_step=True)  # per token, 1/2 or 1/3 of a one-token chunk's gap
    ratio = merged_steps_ratio(rows)
    assert ratio is not None and 0.3 <= ratio <= 0.55
    spec, _ = fit_spec(NO_METRICS, rows)
    assert spec.status == "unknown" and f"{ratio:.2f} of a one-token chunk's gap per token" in (spec.needs or "")


@pytest.mark.parametrize("seed", [3, 5])
def test_the_frontend_is_at_least_the_first_byte_delay_of_requests_alone(seed: int) -> None:
    # 24 requests alone: the server's first byte 8 ± 2 ms after the send,
    # TTFT = 8 ms + 6 ms per prompt token at a log-normal speed (0.15, a
    # shared machine). On these draws the free TTFT intercept is 0: the noise
    # of 1.5 s prefills hides 8 ms. The frontend decides which requests sent
    # close together share a prefill iteration (des.rs `queue_arrivals`), so
    # it takes at least the measured first-byte delay, the slope refitted.
    from specreplay.run.calibrate.fit import fit_prefill
    from specreplay.run.calibrate.regress import robust_lstsq

    rng = np.random.default_rng(seed)
    n = 24
    prompt = rng.integers(140, 320, n)
    sent = np.arange(n) * 5_000_000
    first_byte = sent + 8_000 + rng.integers(-2_000, 2_000, n)
    ttft = (8_000 + 6_000 * prompt * np.exp(0.15 * rng.standard_normal(n))).astype(np.int64)
    rows = pd.DataFrame({"group": "0", "sent_us": sent, "first_byte_us": first_byte, "first_token_us": sent + ttft,
                         "end_us": sent + ttft + 100_000, "prompt_tokens": prompt, "cached_tokens": 0})
    assert robust_lstsq(np.column_stack([np.ones(n), prompt]), ttft.astype(float))[0] == 0.0
    frontend, per_token, _ = fit_prefill(rows)
    delay = float(np.median(first_byte - sent))
    assert frontend.value == pytest.approx(delay) and 6_000 <= delay <= 10_000
    assert per_token.value == pytest.approx(6_000, rel=0.05)
    assert "first-byte delay" in frontend.how


def test_the_template_prefix_every_prompt_finds_cached_is_fitted() -> None:
    # llama.cpp reports 24 cached tokens (its chat template's, left in the
    # slot) on most requests, sometimes 0 (a slot never used), and the usage
    # probe's prompt whole: the median of the requests not a hit of their own.
    from specreplay.run.calibrate.fit import fit_template_cache

    rows = pd.DataFrame({"prompt_tokens": [200, 250, 300, 180, 220, 301], "cached_tokens": [24, 24, 0, 24, 25, 300]})
    p = fit_template_cache(rows, Param("prefill_us_per_cached_token", "fitted", 20.0))
    assert (p.status, p.value, p.samples) == ("fitted", 24, 5)
    unknown = fit_template_cache(rows, Param("prefill_us_per_cached_token", "unknown", needs="x"))
    assert unknown.status == "unknown"


def _alone_rows(prompt: np.ndarray, cached: np.ndarray, seed: int = 7) -> pd.DataFrame:
    """Requests alone in the server, 5 s apart: TTFT = 10 ms + 9 ms per
    computed token + 0.1 ms per cached one, at a log-normal speed (0.1)."""
    rng = np.random.default_rng(seed)
    n = len(prompt)
    sent = np.arange(n) * 5_000_000
    ttft = ((10_000 + 9_000 * (prompt - cached) + 100 * cached) * np.exp(0.1 * rng.standard_normal(n))).astype(np.int64)
    return pd.DataFrame({"group": "0", "sent_us": sent, "first_byte_us": sent + 5_000, "first_token_us": sent + ttft,
                         "end_us": sent + ttft + 100_000, "prompt_tokens": prompt, "cached_tokens": cached})


def test_one_run_with_its_usage_probe_and_the_template_prefix_models_the_prefix_cache() -> None:
    # One calibration run at concurrency 1 against llama.cpp: the usage probe
    # left the first prompt cached whole, every other request found the chat
    # template's 24 tokens. One request that far off the usual count is enough
    # to fit a cached token's cost; without it the model charged the 24
    # template tokens of every prompt at the computed-token slope (the
    # concurrency-2 TTFT predicted +45-66%, tests/test_predict_llamacpp.py).
    from specreplay.run.calibrate.fit import fit_prefill, fit_template_cache

    rng = np.random.default_rng(11)
    prompt = rng.integers(100, 190, 8)
    cached = np.full(8, 24)
    cached[0] = prompt[0] - 1
    rows = _alone_rows(prompt, cached)
    _, per_token, per_cached = fit_prefill(rows)
    assert per_cached.status == "fitted" and per_cached.value < 1_000
    assert per_token.value == pytest.approx(9_000, rel=0.15)
    assert fit_template_cache(rows, per_cached).value == 24


def test_cached_counts_a_token_off_the_usual_one_do_not_fit_a_cached_cost() -> None:
    # 24 cached everywhere but one 25: the cached column is the intercept
    # again, and a cost fitted from one token's difference would be noise.
    from specreplay.run.calibrate.fit import fit_prefill

    prompt = np.random.default_rng(12).integers(100, 190, 8)
    cached = np.full(8, 24)
    cached[3] = 25
    _, per_token, per_cached = fit_prefill(_alone_rows(prompt, cached))
    assert per_cached.status == "unknown" and per_token.status == "fitted"


def test_the_frontend_spread_is_the_width_of_the_first_byte_delays() -> None:
    # 40 requests alone, first bytes uniform 6-10 ms after the send: a 4 ms
    # wide spread (twice the interquartile range), not the TTFT residual.
    from specreplay.run.calibrate.fit import fit_jitter

    rng = np.random.default_rng(4)
    n = 40
    sent = np.arange(n) * 5_000_000
    ttft = rng.integers(800_000, 2_000_000, n)
    rows = pd.DataFrame({"group": "0", "sent_us": sent, "first_byte_us": sent + rng.integers(6_000, 10_000, n),
                         "first_token_us": sent + ttft, "end_us": sent + ttft + 100_000})
    p = fit_jitter(rows)
    assert p.status == "fitted" and p.value == pytest.approx(4_000, rel=0.2)
    assert fit_jitter(rows.iloc[:5]).status == "unknown"


def _pairs(first_token_offsets_us: list[tuple[int, int]], cached: int = 0) -> pd.DataFrame:
    """Pairs of requests sent 0.3 ms apart to an idle server, each pair after the last ended."""
    rows = []
    for k, (a, b) in enumerate(first_token_offsets_us):
        t = k * 10_000_000
        for i, off in enumerate((a, b)):
            sent = t + 300 * i
            rows.append({"group": "0", "sent_us": sent, "first_token_us": t + off, "end_us": t + 5_000_000,
                         "prompt_tokens": 200, "cached_tokens": cached if i == 0 else 0})
    return pd.DataFrame(rows)


def test_requests_sent_together_to_an_idle_server_show_whether_it_launches_them_together() -> None:
    from specreplay.run.calibrate.fit import fit_co_launch

    # llama.cpp: both first tokens of a pair from one prefill iteration (read 0.4 ms apart).
    together = fit_co_launch(_pairs([(1_500_000, 1_500_400)] * 3))
    assert (together.status, together.value, together.samples) == ("fitted", 1.0, 3)
    # vLLM, the simulator: the first arrival alone, the second a prefill (60 ms) later; one pair of four together.
    apart = fit_co_launch(_pairs([(80_000, 140_000)] * 3 + [(80_000, 80_100)]))
    assert (apart.status, apart.value, apart.samples) == ("fitted", 0.25, 4)
    # A pair with a prompt found cached whole tells co_launch nothing (cached_co_launch's own fit, below).
    assert fit_co_launch(_pairs([(20_000, 140_000)] * 3, cached=199)).status == "unknown"
    # Sent 10 ms apart: not together.
    late = _pairs([(1_500_000, 1_500_400)])
    late.loc[1, "sent_us"] = 10_000
    assert fit_co_launch(late).status == "unknown"


def test_a_prompt_cached_whole_sent_with_others_shows_whether_it_starts_alone() -> None:
    from specreplay.run.calibrate.fit import fit_cached_co_launch

    # The cached one (first of each pair) alone: its first token 20 ms after
    # the send, its partner's a prefill later, in its first decode gap. The
    # chance for the next pair is not 0 from 3 pairs: (0 + 1) / (3 + 2).
    alone = fit_cached_co_launch(_pairs([(20_000, 800_000)] * 3, cached=199))
    assert (alone.status, alone.value, alone.samples) == ("fitted", 0.2, 3)
    assert "0 of 3" in alone.how
    # The race the other way in one pair of four: both first tokens from one iteration.
    mixed = fit_cached_co_launch(_pairs([(20_000, 800_000)] * 3 + [(712_000, 712_300)], cached=199))
    assert (mixed.status, mixed.value, mixed.samples) == ("fitted", round(2 / 6, 4), 4)
    # Many pairs: the share seen.
    many = fit_cached_co_launch(_pairs([(712_000, 712_300)] * 98, cached=199))
    assert many.value == pytest.approx(0.99)
    # The cached one after its partner's first token (it waited for a slot): no sample.
    assert fit_cached_co_launch(_pairs([(900_000, 700_000)] * 2, cached=199)).status == "unknown"
    # No prompt cached whole: co_launch's groups, not these.
    assert fit_cached_co_launch(_pairs([(1_500_000, 1_500_400)] * 3)).status == "unknown"


def test_a_real_llamacpp_run_whose_text_was_held_back_still_measures_the_batch() -> None:
    # Two real runs (tests/vectors: SmolLM2 on llama.cpp, 4 slots, 1 thread,
    # 8 requests each at concurrency 1 and 4). In the concurrency-4 run 12% of
    # the chunks after the first carry 2-3 tokens: text llama.cpp held back
    # for a step. Read as "speculation unknown" it was left out of the decode
    # fit, and calibrate saw one request decoding at most.
    from specreplay.run.calibrate.fit import calibrate

    vectors = Path(__file__).parent / "vectors"
    model = calibrate([str(vectors / "llamacpp-smollm2-c1.arrow"), str(vectors / "llamacpp-smollm2-c4-held-back-text.arrow")])
    assert model.calibration["max_decoding"] == 4
    assert model.params["batch_step_cost"].status == "fitted"
    assert model.params["batch_step_factors"].status == "fitted" and len(model.params["batch_step_factors"].value) == 4
    assert model.params["spec_acceptance"].value == []
