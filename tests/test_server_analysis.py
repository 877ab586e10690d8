"""The server's figures in the analysis: summary columns, the console's
lines, and the acceptance cross-check (`acceptance_mismatch`) against what
the client's chunks show."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from conftest import T0, MakeResults
from rich.console import Console

import specreplay
from specreplay.analysis import validity
from specreplay.present.console import print_summary
from specreplay.results import server_samples as store
from specreplay.servermetrics.figures import FIGURES, point_figures


def test_the_summary_has_the_servers_figures(sim_runs: dict[str, Path]) -> None:
    df = specreplay.load(sim_runs["spec"])
    row = specreplay.summarize(df).iloc[0]
    samples = specreplay.load(sim_runs["spec"], metrics=True)
    expected = point_figures(samples[samples["point"] == row["point"]])
    for name in FIGURES:
        assert row[name] == pytest.approx(expected[name], nan_ok=True), name
    assert row["spec_drafts"] > 0 and row["server_scrapes"] >= 3
    # The client saw the same acceptance in its chunks (one chunk per step).
    assert row["decode_chunk_tokens_mean"] == pytest.approx(row["spec_acceptance_length"], rel=0.05)
    assert "acceptance_mismatch" not in {f.code for f in validity.check(df)}


def test_the_console_prints_the_servers_lines(sim_runs: dict[str, Path]) -> None:
    console = Console(record=True, width=400)
    print_summary(console, specreplay.summarize(specreplay.load(sim_runs["spec"])))
    text = console.export_text()
    assert "server speculation: 4 drafts/step  ·  acceptance rate" in text
    assert "tokens/step (client:" in text and "by position" in text
    assert "server load: running" in text and "scrapes over" in text
    # Without server metrics, no server line.
    plain = specreplay.load(sim_runs["spec"])
    plain.attrs.pop(store.METADATA_KEY)
    console = Console(record=True, width=400)
    print_summary(console, specreplay.summarize(plain))
    assert "server" not in console.export_text()


def scrapes(drafts: int, accepted: int, generated: int) -> str:
    """Samples of two scrapes (start at 0, end at the given totals), encoded as a results file holds them."""
    rows = []
    for kind, factor in (("start", 0), ("end", 1)):
        for name, value in (
            ("vllm:spec_decode_num_drafts_total", drafts),
            ("vllm:spec_decode_num_draft_tokens_total", 4 * drafts),
            ("vllm:spec_decode_num_accepted_tokens_total", accepted),
            ("vllm:generation_tokens_total", generated),
        ):
            rows.append({"ts_us": T0 + 10_000_000 * factor, "rtt_us": 300, "label": "test", "point": "rate=8", "scrape": kind,
                         "name": name, "labels": "{}", "type": "counter", "value": float(value * factor)})  # fmt: skip
    return store.encode(pa.Table.from_pylist(rows, schema=store.empty().schema))


def with_samples(make_results: MakeResults, chunks: list[tuple[int, int, str]], encoded: str, n: int = 10) -> pd.DataFrame:
    df = make_results([{"chunks": chunks} for _ in range(n)])
    df.attrs[store.METADATA_KEY] = encoded
    return df


def finding(df: pd.DataFrame) -> Any:
    found = [f for f in validity.check(df) if f.code == "acceptance_mismatch"]
    return found[0] if found else None


# Ten requests of 1 + 4 × 4 tokens: a first chunk, then four steps of 4 tokens.
STEPS = [(0, 1, "content")] + [(10_000 * (i + 1), 4, "content") for i in range(4)]


def test_acceptance_that_the_chunks_show_is_no_finding(make_results: MakeResults) -> None:
    # 40 steps accepted 3 of 4 drafts each: 120 of 170 tokens, as the chunks carry.
    df = with_samples(make_results, STEPS, scrapes(drafts=40, accepted=120, generated=170))
    assert finding(df) is None


def test_a_server_that_streams_each_token_as_a_chunk_hides_its_acceptance(make_results: MakeResults) -> None:
    tokens = [(1_000 * i, 1, "content") for i in range(17)]
    df = with_samples(make_results, tokens, scrapes(drafts=40, accepted=120, generated=170))
    f = finding(df)
    assert f is not None and f.level == "note" and f.count == 10
    assert "71% of the tokens it generated were accepted drafts (4.00 tokens per verification step)" in f.message
    assert "0% of the output tokens arrived beyond one per chunk (1.00 tokens per chunk after the first)" in f.message
    assert "split its verification steps over several chunks" in f.message and "Trust the server's acceptance" in f.message


def test_a_server_that_merges_steps_shows_more_than_it_accepted(make_results: MakeResults) -> None:
    # The same tokens in two chunks of 8 after the first: the server says 1 in 5 drafts was kept.
    merged = [(0, 1, "content"), (20_000, 8, "content"), (40_000, 8, "content")]
    df = with_samples(make_results, merged, scrapes(drafts=80, accepted=64, generated=170))
    f = finding(df)
    assert f is not None and "merged several steps into one chunk" in f.message and "ITL per chunk is then not per step" in f.message
    # The gap is a threshold like any other.
    df.attrs["specreplay.config"] = json.dumps({"thresholds": {"max_acceptance_gap": 0.9}})
    assert finding(df) is None
