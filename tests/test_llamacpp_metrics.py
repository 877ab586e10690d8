"""llama.cpp's own Prometheus metrics (`--metrics`), scraped by replay and
stored in the results: the figures specreplay derives must agree with what
the server's page says before and after the run, with its usage, and — with
speculative decoding, the scripted model drafting for itself — with the
draft counts in its `timings`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("xllamacpp", reason="no xllamacpp wheel for this platform: the llama.cpp server tests cannot run")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

import specreplay  # noqa: E402
from specreplay.analysis import validity  # noqa: E402
from specreplay.settings.config import ReplayConfig  # noqa: E402
from specreplay.run.replay import run_replay  # noqa: E402
from specreplay.servermetrics.figures import point_figures  # noqa: E402

from realservers.llamacpp import LlamaCppServer  # noqa: E402
from realservers.scripted_model import ANSWER, REASONING, write_scripted_gguf  # noqa: E402

COMPLETION_TOKENS = len(REASONING) + 2 + len(ANSWER) + 1  # 24, the EOS included
QUESTION = [{"role": "user", "content": "What is 2+2?"}]
DRAFT_MAX = 4


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("models") / "scripted.gguf"
    write_scripted_gguf(path, REASONING, ANSWER, close_think=True)
    return path


@pytest.fixture(scope="module")
def plain(model: Path) -> Iterator[LlamaCppServer]:
    with LlamaCppServer(model) as server:
        yield server


@pytest.fixture(scope="module")
def speculative(model: Path) -> Iterator[LlamaCppServer]:
    """The scripted model drafting for itself: every draft it proposes is
    the token the target would pick, so only the answer's end cuts a step short."""
    with LlamaCppServer(model, draft=model, draft_max=DRAFT_MAX) as server:
        yield server


def page(server: LlamaCppServer) -> dict[tuple[str, str], float]:
    """The server's page, read by the test itself: (name, labels) → value."""
    out = {}
    for family in text_string_to_metric_families(server.metrics()):
        for s in family.samples:
            out[(s.name, json.dumps(s.labels, sort_keys=True))] = s.value
    return out


def delta(before: dict[tuple[str, str], float], after: dict[tuple[str, str], float], name: str, **labels: str) -> float:
    key = (name, json.dumps(labels, sort_keys=True))
    return after[key] - before.get(key, 0.0)


def replay(tmp_path: Path, server: LlamaCppServer, n: int, **options: Any) -> Path:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"id": f"q{i}", "api": "chat", "body": {"messages": QUESTION}}) + "\n" for i in range(n)))
    config = ReplayConfig(
        trace=str(trace), url=server.api_url, concurrency=[2], max_tokens=100, output=str(tmp_path / "run.arrow"),
        timeout=30.0, metrics_interval=0.05, **options,
    )  # fmt: skip
    return run_replay(config).path


def test_its_metrics_are_scraped_stored_and_agree_with_its_page_and_usage(tmp_path: Path, plain: LlamaCppServer) -> None:
    before = page(plain)
    # Enough requests that the point outlasts a 50 ms scrape interval (6 of
    # them took 23-38 ms): the point must have a tick.
    n = 24
    path = replay(tmp_path, plain, n)
    after = page(plain)
    df = specreplay.load(path)
    samples = specreplay.load(path, metrics=True)
    assert df["error_kind"].isna().all()
    names = set(samples["name"])
    assert {"llamacpp:tokens_predicted_total", "llamacpp:requests_processing", "llamacpp:prompt_tokens_cached_total"} <= names
    assert set(samples["scrape"]) == {"start", "tick", "end"}
    f = point_figures(samples)
    # Its usage, its own page and the stored samples tell the same story.
    # The test's pages also saw replay's probe before the run (one request
    # of 1 token, the same prompt), which the point's own scrapes leave out.
    probe_prompt = int(df["prompt_tokens"].iloc[0])
    assert f["server_generation_tokens"] == df["output_tokens"].sum() == n * COMPLETION_TOKENS
    assert f["server_generation_tokens"] == delta(before, after, "llamacpp:tokens_predicted_total") - 1
    cached = delta(before, after, "llamacpp:prompt_tokens_cached_total")
    computed = delta(before, after, "llamacpp:prompt_tokens_total")
    assert cached + computed == df["prompt_tokens"].sum() + probe_prompt
    start = samples[samples["scrape"] == "start"].set_index("name")["value"]
    end = samples[samples["scrape"] == "end"].set_index("name")["value"]
    hits = end["llamacpp:prompt_tokens_cached_total"] - start["llamacpp:prompt_tokens_cached_total"]
    misses = end["llamacpp:prompt_tokens_total"] - start["llamacpp:prompt_tokens_total"]
    assert hits + misses == df["prompt_tokens"].sum()
    assert hits == df["cached_tokens"].sum()  # its usage's cached_tokens, request by request
    assert f["server_prefix_hit_rate"] == pytest.approx(hits / (hits + misses))
    # Two slots: never more than two requests running, and no queue.
    assert 0 <= f["server_running_mean"] <= f["server_running_max"] <= 2
    assert f["server_waiting_max"] == 0
    # It publishes the speculative counters at 0 without speculation:
    # no drafts, so no acceptance figure (not a 0% one).
    assert f["spec_drafts"] == 0 and f["spec_acceptance_by_position"] == ()
    assert f["spec_acceptance_rate"] != f["spec_acceptance_rate"]  # NaN


def test_speculative_decoding_figures_agree_with_its_timings_and_page(tmp_path: Path, speculative: LlamaCppServer) -> None:
    answer = speculative.post("/chat/completions", {"messages": QUESTION, "max_tokens": 100})
    timings = answer["timings"]
    assert answer["usage"]["completion_tokens"] == COMPLETION_TOKENS
    draft_n, accepted_n = timings["draft_n"], timings["draft_n_accepted"]
    assert draft_n > 0 and 0 < accepted_n <= draft_n
    before = page(speculative)
    n = 4
    path = replay(tmp_path, speculative, n)
    after = page(speculative)
    df = specreplay.load(path)
    assert df["error_kind"].isna().all() and (df["output_tokens"] == COMPLETION_TOKENS).all()
    f = point_figures(specreplay.load(path, metrics=True))
    drafts = delta(before, after, "llamacpp:spec_decode_num_drafts_total")
    # (The probe before the run asks for one token: it drafts nothing.)
    # Every request drafts as the one above did (a deterministic model).
    assert f["spec_draft_tokens"] == n * draft_n == delta(before, after, "llamacpp:spec_decode_num_draft_tokens_total")
    assert f["spec_accepted_tokens"] == n * accepted_n == delta(before, after, "llamacpp:spec_decode_num_accepted_tokens_total")
    assert f["spec_drafts"] == drafts > 0
    assert f["spec_draft_len"] == DRAFT_MAX
    assert f["spec_acceptance_rate"] == pytest.approx(accepted_n / draft_n)
    assert f["spec_acceptance_length"] == pytest.approx(1 + n * accepted_n / drafts)
    per_pos = [delta(before, after, "llamacpp:spec_decode_num_accepted_tokens_per_pos_total", position=str(i)) / drafts for i in range(DRAFT_MAX)]
    assert f["spec_acceptance_by_position"] == pytest.approx(tuple(per_pos))
    # A perfect drafter: the first draft is always accepted.
    assert f["spec_acceptance_by_position"][0] == 1.0
    assert f["server_generation_tokens"] == df["output_tokens"].sum()
    # llama.cpp streams each token as a chunk, accepted drafts too: the
    # client's chunks cannot show the acceptance, and the cross-check says so.
    row = specreplay.summarize(df).iloc[0]
    assert row["spec_acceptance_length"] == pytest.approx(f["spec_acceptance_length"])
    assert row["decode_chunk_tokens_mean"] < 1.5
    (note,) = [x for x in validity.check(df) if x.code == "acceptance_mismatch"]
    assert note.level == "note" and "llama.cpp streams each token as a chunk" in note.message
