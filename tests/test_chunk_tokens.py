"""Per-chunk token counts from any server (issue 13 §1): against the embedded
simulator streaming several tokens per chunk (speculative decoding) with usage
only in its final chunk, every row's per-chunk counts add up to its output
tokens, ITL/token is per token, and the multi-token figure, the note and the
counts agree."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import specreplay
from specreplay.analysis.analyse import analyse
from specreplay.cli import cli

ROOT = Path(__file__).resolve().parent.parent
REASONING = str(ROOT / "traces" / "reasoning-prompts.jsonl")
#: Up to 5 tokens per step (4 drafts, 90% accepted each): about 3.7 per chunk.
SIM = "ttft_ms = 10\nprefill_us_per_token = 0\ntpot_ms = 5\nreasoning_tokens = [30, 40]\ncontent_tokens = [10, 20]\nspec_draft_len = 4\nspec_acceptance = 0.9\nspec_step_cost = 0\n"


@pytest.fixture(scope="module")
def end_only_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    d = tmp_path_factory.mktemp("chunk-tokens")
    (d / "sim.toml").write_text(SIM)
    out = d / "run.arrow"
    args = ["replay", REASONING, "--concurrency", "4", "--num-requests", "16", "--no-continuous-usage",
            "--sim-config", str(d / "sim.toml"), "-o", str(out)]  # fmt: skip
    result = CliRunner().invoke(cli, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return out, result.output


def test_every_row_splits_its_final_count_over_its_chunks(end_only_run: tuple[Path, str]) -> None:
    df = specreplay.load(end_only_run[0])
    assert len(df) == 16 and df["error_kind"].isna().all()
    assert set(df["token_source"]) == {"usage"}
    assert set(df["chunk_token_source"]) == {"text_length"}
    sums = df["chunk_tokens"].map(lambda k: int(np.sum(k)))
    assert (sums == df["output_tokens"]).all()
    reasoning = [int(np.sum(np.asarray(k)[np.asarray(c) == 0])) for k, c in zip(df["chunk_tokens"], df["chunk_channel"])]
    assert reasoning == list(df["reasoning_tokens"])
    # Several tokens per chunk, as the server sent them.
    assert (df["output_tokens"] > 2 * df["chunk_count"]).all()


def test_itl_per_token_is_per_token(end_only_run: tuple[Path, str]) -> None:
    (point,) = analyse(specreplay.load(end_only_run[0]))[0].points
    itl_token, itl_chunk = point.itl_token_us.mean(), point.itl_chunk_us.mean()
    tpot = float(np.nanmean(point.ok_rows["tpot_us"]))
    # Every ITL/token sample is a gap divided by its chunk's tokens: their
    # mean is the decode time over the tokens after the first chunk, which
    # is TPOT within a few percent (TPOT divides by output − 1). Counted as
    # one token per chunk, ITL/token was ITL/chunk, about 3.7 times TPOT.
    assert itl_token == pytest.approx(tpot, rel=0.15)
    assert itl_chunk > 2.5 * itl_token


def test_figure_note_and_counts_agree(end_only_run: tuple[Path, str]) -> None:
    path, output = end_only_run
    df = specreplay.load(path)
    (point,) = analyse(df)[0].points
    tokens = np.concatenate(df["chunk_tokens"].map(np.asarray).to_list())
    share = float((tokens > 1).mean())
    assert point.summary["multi_token_chunks"] == pytest.approx(share)
    assert point.summary["chunks"] == len(tokens)
    (note,) = [f for f in point.findings if f.code == "multi_token_chunks"]
    several = int(df["chunk_tokens"].map(lambda k: bool((np.asarray(k) > 1).any())).sum())
    assert note.count == several
    assert f"{several} of 16 requests" in note.message
    assert f"{share:.0%} of chunks carry more than one token" in note.message
    assert "per-chunk token counts of 16 requests are estimated" in note.message
    # What the user reads: the same share on the summary line.
    assert re.search(rf"multi-token chunks {share:.0%} of {len(tokens)}\b", output), output


def word_tokenizer(path: Path) -> Path:
    """A tokenizer.json made here, without the network: every word (and
    every run of punctuation) is one token, as the simulator generates them."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    tokenizer = Tokenizer(WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()  # type: ignore[assignment]
    tokenizer.save(str(path))
    return path


def test_a_local_tokenizer_counts_what_continuous_usage_reports(tmp_path: Path) -> None:
    (tmp_path / "sim.toml").write_text(SIM)
    tokenizer = word_tokenizer(tmp_path / "tokenizer.json")
    frames = {}
    for name, flags in {"exact": [], "tokenizer": ["--no-continuous-usage", "--tokenizer", str(tokenizer)]}.items():
        out = tmp_path / f"{name}.arrow"
        args = ["replay", REASONING, "--concurrency", "4", "--num-requests", "16", "--sim-config", str(tmp_path / "sim.toml"), "-o", str(out), *flags]
        result = CliRunner().invoke(cli, args, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        frames[name] = specreplay.load(out).sort_values("request_index").reset_index(drop=True)
    exact, counted = frames["exact"], frames["tokenizer"]
    assert set(exact["chunk_token_source"]) == {"continuous_usage"}
    assert set(counted["chunk_token_source"]) == {"tokenizer"}
    assert "chunk_text" not in counted.columns
    # The same streams (same seed): the tokenizer's counts are the server's,
    # event for event. Within the event that carries both reasoning and
    # content, continuous usage can only guess (all but one token to the
    # first channel); the tokenizer counts each side's words.
    assert list(counted["trace_id"]) == list(exact["trace_id"])
    for (_, a), (_, b) in zip(exact.iterrows(), counted.iterrows()):
        assert len(a["chunk_tokens"]) == len(b["chunk_tokens"])
        # The chunks of one event share their read's stamp (a read may hold
        # several events: their sums are compared together).
        reads = pd.Series(a["chunk_ts_us"])
        events_a = pd.Series(a["chunk_tokens"]).groupby(reads).sum()
        events_b = pd.Series(b["chunk_tokens"]).groupby(reads).sum()
        assert list(events_a) == list(events_b)
        assert b["output_tokens"] == a["output_tokens"]
    assert (counted["chunk_tokens"].map(lambda k: int(np.sum(k))) == counted["output_tokens"]).all()


def test_a_bad_tokenizer_file_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{}")
    result = CliRunner().invoke(cli, ["replay", REASONING, "--concurrency", "1", "--num-requests", "1", "--tokenizer", str(bad), "-o", str(tmp_path / "r.arrow")])
    assert result.exit_code != 0
    assert "--tokenizer" in result.output and "tokenizer.json" in result.output


def test_a_token_counts_in_the_chunk_that_completes_it(tmp_path: Path) -> None:
    from specreplay.run.chunk_tokenizer import ChunkTokenizer

    tokenizer = ChunkTokenizer(word_tokenizer(tmp_path / "tokenizer.json"))
    # "hello world again" streamed as "hel" | "lo wor" | "ld again": "hello"
    # ends in the second chunk, "world" and "again" in the third.
    (counts,) = tokenizer.counts(["hello world again"], [np.array([3, 6, 8])])
    assert list(counts) == [0, 1, 2]


def test_a_server_without_tokenize_keeps_the_estimate_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "sim.toml").write_text(SIM)
    out = tmp_path / "run.arrow"
    args = ["replay", REASONING, "--concurrency", "2", "--num-requests", "4", "--no-continuous-usage", "--server-tokenize",
            "--sim-config", str(tmp_path / "sim.toml"), "-o", str(out)]  # fmt: skip
    result = CliRunner().invoke(cli, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "could not be counted" in result.output and "/tokenize" in result.output
    df = specreplay.load(out)
    assert set(df["chunk_token_source"]) == {"text_length"}
