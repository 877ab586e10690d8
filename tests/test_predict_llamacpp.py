"""The calibrate → predict → check loop against a real server: llama.cpp
(xllamacpp) serving SmolLM2-135M-Instruct with 4 slots on 1 thread
(`realservers/predict_loop.py`). Calibrated from runs at concurrency 1 and
4 (answers of 8 to 24 tokens, so that every batch size decodes), predicted
and measured at concurrency 2 (held out), on fresh prompts. The points run
in two interleaved rounds of 4 requests (calibration, then held out, twice),
so that a slow spell of the shared machine falls on both: in one round the
server prefilled at 13.3 ms a token while calibrating and 8 ms in the
held-out run, and tokens/s came out -37% on that alone.

The bounds are generous: tokens/s within 50%; the means and the p50 and
p90 of TTFT and TPOT within a factor of 3 (E2E's mean too). Not the
issue's 50% on the percentiles: on this shared 2-core machine the 1-thread
server's decode step moves by 2x within minutes (two sequences decoding at
29 ms in one pair of requests and 63-80 ms in the next, docs/predict.md),
so a 50% bound on TPOT at concurrency 2 fails in loaded sittings. They
catch a broken loop (a unit error, a prediction of nothing, a lost decode
step), not the precision: bench/predict_llamacpp.py measures that."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("xllamacpp", reason="no xllamacpp wheel for this platform: the llama.cpp server tests cannot run")

from realservers.llamacpp import LlamaCppServer  # noqa: E402
from realservers.predict_loop import loop  # noqa: E402
from realservers.smollm2 import smollm2_gguf  # noqa: E402

#: Tokens/s, relative; the latency figures, as a factor either way.
THROUGHPUT_BOUND = 0.5
LATENCY_FACTOR = 3.0


def test_predictions_from_a_calibrated_llamacpp_hold_at_a_held_out_concurrency(tmp_path: Path) -> None:
    with LlamaCppServer(smollm2_gguf(), parallel=4, threads=1, ctx=4096) as server:
        result = loop(server.api_url, tmp_path, n=8, input_len="uniform:60:160", output_len=16, held_out_rate_share=None,
                      calibrate_output_len="uniform:8:24", rounds=2)
    text = result.model_path.read_text()
    for name in ("prefill_us_per_token", "step_us", "batch_step_cost", "batch_step_factors", "speed_spread"):
        assert f'[params.{name}]\nstatus = "fitted"' in text, text
    # Four slots and at most four in flight: no run showed the batch limit.
    assert '[params.max_num_seqs]\nstatus = "unknown"' in text
    checked = ("ttft_mean_ms", "tpot_mean_ms", "e2e_mean_ms", "output_tok_s", "ttft_p50_ms", "ttft_p90_ms", "tpot_p50_ms", "tpot_p90_ms")
    figures = {e.figure: e for e in result.errors if e.figure in checked}
    assert set(figures) == set(checked)
    shown = [f"{x.figure} {x.predicted:.1f} vs {x.measured:.1f}" for x in result.errors]
    for e in figures.values():
        assert e.predicted > 0 and e.measured > 0, shown
        if e.figure == "output_tok_s":
            assert abs(e.relative) <= THROUGHPUT_BOUND, shown
        else:
            assert 1 / LATENCY_FACTOR <= e.predicted / e.measured <= LATENCY_FACTOR, shown
