"""`specreplay import` on small real excerpts of the public traces
(traces/public/, sources and licences in traces/README.md): compact traces
that keep the source's block ids (issue 14 item 2), prompt-length counts and
caps (item 4), sessions, single-turn ShareGPT and source ids (item 5),
errors that say what went wrong (item 6)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from specreplay.cli import cli
from specreplay.errors import TraceError
from specreplay.trace.importers import ImportReport, Options, import_trace
from specreplay.trace.shaping import body_with_prompt
from specreplay.trace.text import approx_tokens
from specreplay.trace.records import TraceRecord, load_trace

from session_walk import think_times

PUBLIC = Path(__file__).resolve().parent.parent / "traces" / "public"
MOONCAKE = PUBLIC / "mooncake-conversation-head.jsonl"
MOONCAKE_LONG = PUBLIC / "mooncake-synthetic-241-260.jsonl"
AZURE = PUBLIC / "azure-conv-2023-head.csv"
BURSTGPT = PUBLIC / "burstgpt-v2-sessions.csv"
SHAREGPT = PUBLIC / "sharegpt-v3-filtered-500-head.json"
SHAREGPT_MULTI = PUBLIC / "sharegpt-v3-multiturn.json"


def run(fmt: str, src: Path, tmp_path: Path, **opts: object) -> tuple[list[TraceRecord], ImportReport, Path]:
    out = tmp_path / f"{fmt}.jsonl"
    report = import_trace(fmt, src, out, Options(**opts))  # type: ignore[arg-type]
    return load_trace(out).records, report, out


def words(rec: TraceRecord) -> list[str]:
    """The prompt replay sends, as words (one token each by the approximation)."""
    return str(body_with_prompt(rec)["messages"][0]["content"]).split()


def source_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- item 2: compact traces that keep the source's blocks --------------------------


def test_mooncake_trace_keeps_the_hash_ids_and_stays_the_size_of_its_source(tmp_path: Path) -> None:
    recs, report, out = run("mooncake", MOONCAKE, tmp_path)
    src = source_lines(MOONCAKE)
    assert report.written == len(recs) == len(src) == 40
    # The source is in time order (ms, many equal stamps): the ids are its line numbers.
    assert [r.id for r in recs] == [str(i) for i in range(1, 41)]
    assert [r.arrival for r in recs] == [float(s["timestamp"]) / 1000 for s in src]  # type: ignore[arg-type]
    for rec, s in zip(recs, src):
        assert rec.prompt_blocks is not None and rec.approximate
        assert (rec.prompt_blocks.tokens, rec.prompt_blocks.block_size, rec.prompt_blocks.hash_ids) == (
            s["input_length"], 512, s["hash_ids"])
        assert "messages" not in rec.body
        assert rec.body == {"max_tokens": s["output_length"], "min_tokens": s["output_length"], "ignore_eos": True}
    # Every record carries ids, not text: the trace is within a small factor of
    # its source (the text would be ~200× larger: 5 bytes per token).
    assert out.stat().st_size < 2 * MOONCAKE.stat().st_size
    text_bytes = sum(len(" ".join(words(r))) for r in recs)
    assert text_bytes > 100 * MOONCAKE.stat().st_size


def test_mooncake_prompts_share_text_exactly_as_far_as_their_blocks(tmp_path: Path) -> None:
    recs, _, out = run("mooncake", MOONCAKE, tmp_path)
    prompts = [words(r) for r in recs]
    assert [len(p) for p in prompts] == [r.prompt_blocks.tokens for r in recs if r.prompt_blocks]
    for a, pa in zip(recs, prompts):
        for b, pb in zip(recs, prompts):
            assert a.prompt_blocks is not None and b.prompt_blocks is not None
            ia, ib = a.prompt_blocks.hash_ids, b.prompt_blocks.hash_ids
            shared = next((k for k, (x, y) in enumerate(zip(ia, ib)) if x != y), min(len(ia), len(ib)))
            full = min(shared * 512, len(pa), len(pb))
            assert pa[:full] == pb[:full]
            if shared < min(len(ia), len(ib)):  # the first different block differs
                assert pa[shared * 512: shared * 512 + 64] != pb[shared * 512: shared * 512 + 64]
    # Deterministic: a second import is the same file; another seed, other text.
    again = tmp_path / "again.jsonl"
    import_trace("mooncake", MOONCAKE, again)
    assert again.read_bytes() == out.read_bytes()
    seeded, _, _ = run("mooncake", MOONCAKE, tmp_path, seed=9)
    assert words(seeded[0])[:50] != prompts[0][:50]


def test_limit_keeps_the_first_rows_and_reads_no_further(tmp_path: Path) -> None:
    lines = MOONCAKE.read_text().splitlines()
    src = tmp_path / "m.jsonl"
    src.write_text("\n".join(lines[:5] + ["{not json"] + lines[5:]) + "\n")
    recs, _, _ = run("mooncake", src, tmp_path, limit=5)
    assert [r.id for r in recs] == ["1", "2", "3", "4", "5"]
    with pytest.raises(TraceError, match="invalid JSON"):
        run("mooncake", src, tmp_path, limit=6)


def test_azure_prompts_get_fresh_blocks_and_share_nothing(tmp_path: Path) -> None:
    recs, report, out = run("azure", AZURE, tmp_path)
    with AZURE.open() as f:
        rows = list(csv.DictReader(f))
    assert report.written == len(recs) == len(rows) == 100
    assert [r.prompt_blocks.tokens for r in recs if r.prompt_blocks] == [int(x["ContextTokens"]) for x in rows]
    assert [r.expected_output_tokens for r in recs] == [int(x["GeneratedTokens"]) for x in rows]
    assert recs[0].arrival == 0.0 and recs[1].arrival == 4.314579  # 18:15:46.6805900 → 18:15:50.9951690
    ids = [h for r in recs if r.prompt_blocks for h in r.prompt_blocks.hash_ids]
    assert len(ids) == len(set(ids))  # no block shared: the source says nothing of prefixes
    assert words(recs[0])[:40] != words(recs[1])[:40]
    # A CSV row is ~37 bytes and a record ~245 (field names, the body): still
    # ~40× smaller than the text (~2,000 tokens of ~5 bytes per row).
    assert out.stat().st_size < 8 * AZURE.stat().st_size


# --- item 4: prompts longer than a context --------------------------------------------


def test_long_prompts_are_counted_and_the_summary_says_so(tmp_path: Path) -> None:
    src = source_lines(MOONCAKE)
    _, report, _ = run("mooncake", MOONCAKE, tmp_path)
    over_32k = sum(int(s["input_length"]) > 32_768 for s in src)  # type: ignore[call-overload]
    assert over_32k == 2 and report.longer_than[32_768] == 2 and report.longer_than[131_072] == 0
    assert any("prompt lengths: 2 longer than 32K tokens" in line and "--max-prompt-tokens" in line for line in report.lines())
    _, long_report, _ = run("mooncake", MOONCAKE_LONG, tmp_path)
    assert long_report.longer_than[131_072] == 1  # line 250 of the synthetic trace: 134,773 tokens
    assert any("1 longer than 128K" in line for line in long_report.lines())


def test_max_prompt_tokens_drops_or_truncates(tmp_path: Path) -> None:
    src = source_lines(MOONCAKE)
    recs, report, _ = run("mooncake", MOONCAKE, tmp_path, max_prompt_tokens=32_768)
    assert len(recs) == 38 and all(r.prompt_blocks and r.prompt_blocks.tokens <= 32_768 for r in recs)
    assert report.skipped == {"prompts longer than --max-prompt-tokens 32768 (--over-limit drop)": 2}
    recs, report, _ = run("mooncake", MOONCAKE, tmp_path, max_prompt_tokens=32_768, over_limit="truncate")
    assert len(recs) == 40 and report.truncated == 2
    cut = [r for r in recs if r.id in ("12", "26")]
    for rec in cut:
        assert rec.prompt_blocks is not None
        assert (rec.prompt_blocks.tokens, len(rec.prompt_blocks.hash_ids)) == (32_768, 64)
        # The kept blocks are the source's first 64: shared prefixes are kept.
        assert rec.prompt_blocks.hash_ids == src[int(rec.id) - 1]["hash_ids"][:64]  # type: ignore[index]
        assert len(words(rec)) == 32_768
    assert any("truncated 2 prompts to 32768 tokens" in line for line in report.lines())


# --- item 5: sessions, single-turn ShareGPT, source ids -------------------------------


def burstgpt_turns() -> dict[str, list[tuple[int, int, str]]]:
    """Each session's turns in file order: (line, request tokens, elapsed)."""
    turns: dict[str, list[tuple[int, int, str]]] = {}
    with BURSTGPT.open() as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            turns.setdefault(row["Session ID"], []).append((line, int(row["Request tokens"]), row["Elapsed time"]))
    return turns


def test_burstgpt_sessions_keep_their_history(tmp_path: Path) -> None:
    recs, report, _ = run("burstgpt", BURSTGPT, tmp_path)
    by_line = {int(r.id): r for r in recs}
    turns = burstgpt_turns()
    assert len(recs) == 96 and all(r.session_id for r in recs)
    continued = restarted = 0
    for session, session_turns in turns.items():
        for (line_a, tokens_a, _), (line_b, tokens_b, _) in zip(session_turns, session_turns[1:]):
            a, b = words(by_line[line_a]), words(by_line[line_b])
            assert by_line[line_b].session_id == session
            if tokens_b >= tokens_a:
                # The later turn's prompt extends the earlier one (its prompt, then
                # its answer's place, then the new message): a prefix cache hits.
                assert b[:tokens_a] == a
                continued += 1
            else:
                # The client dropped history to fit: nothing is shared any more.
                assert b[:32] != a[:32]
                restarted += 1
    assert (report.continued, report.restarted) == (continued, restarted)
    assert continued > 30 and restarted > 3
    # The session of the issue: 82 → 25,085 tokens over 9 turns, one growing prompt.
    grown = [words(by_line[line]) for line, _, _ in turns["70d0486e-d937-479b-ab8f-51b9b0e944a8"]]
    assert [len(w) for w in grown] == [82, 222, 498, 819, 985, 12149, 12570, 13103, 25085]
    assert all(later[: len(earlier)] == earlier for earlier, later in zip(grown, grown[1:]))
    assert any("sessions:" in line and f"{continued} requests extend" in line for line in report.lines())


def test_burstgpt_elapsed_time_is_kept_as_the_sources_response(tmp_path: Path) -> None:
    recs, _, _ = run("burstgpt", BURSTGPT, tmp_path)
    first = recs[0]
    assert first.response == {"status": 200, "end_us": 43_000_000, "prompt_tokens": 906, "completion_tokens": 446}
    assert [r.response["end_us"] for r in recs[:4] if r.response] == [43_000_000, 2_000_000, 8_000_000, 3_000_000]
    assert all(r.response is None for r in recs[4:])  # the excerpt has no Elapsed time there
    # Replay's think time where the turn before has its end: the user's real pause.
    got, times = think_times(recs)
    by_id = dict(zip((r.id for r in recs), got))
    assert (by_id["6"], by_id["8"]) == ((191 - 0 - 43) * 1_000_000, (419 - 144 - 3) * 1_000_000)
    assert times.sources.measured == 2 and times.sources.unknown == 63


def test_single_turn_sharegpt_is_accepted_with_its_source_ids(tmp_path: Path) -> None:
    entries = json.loads(SHAREGPT.read_text())
    recs, report, _ = run("sharegpt", SHAREGPT, tmp_path)
    assert [r.id for r in recs] == [e["id"] for e in entries]  # fzcoUcK_0, …
    assert [body_with_prompt(r)["messages"][0]["content"] for r in recs] == [e["conversations"][0]["value"] for e in entries]
    # No reply to take a length from, and no --default-output-tokens: no length set.
    assert all("max_tokens" not in r.body and r.expected_output_tokens is None for r in recs)
    assert report.no_output_length == 30
    assert any("30 requests have no output length" in line and "--default-output-tokens" in line for line in report.lines())
    recs, report, _ = run("sharegpt", SHAREGPT, tmp_path, default_output_tokens=128)
    assert all(r.body["max_tokens"] == r.body["min_tokens"] == r.expected_output_tokens == 128 for r in recs)
    assert all(r.body["ignore_eos"] is True for r in recs)
    assert any("they ask for 128 tokens (--default-output-tokens)" in line for line in report.lines())


def test_a_multi_turn_sharegpt_conversation_is_a_session(tmp_path: Path) -> None:
    recs, report, _ = run("sharegpt", SHAREGPT_MULTI, tmp_path)
    conv = json.loads(SHAREGPT_MULTI.read_text())[0]["conversations"]
    assert [(r.id, r.session_id) for r in recs] == [
        ("dsOTKpn_0", "dsOTKpn_0"), ("dsOTKpn_0/1", "dsOTKpn_0"), ("dsOTKpn_0/2", "dsOTKpn_0"),
        ("aLzORDR_0", None), ("1CDVnea_0", None)]
    roles = {"human": "user", "gpt": "assistant"}
    for k in range(3):
        # Turn k: the conversation up to its human message, the recorded answers as history,
        # asking for as many tokens as the recorded answer to it.
        assert recs[k].body["messages"] == [{"role": roles[t["from"]], "content": t["value"]} for t in conv[: 2 * k + 1]]
        assert recs[k].expected_output_tokens == approx_tokens(conv[2 * k + 1]["value"])
    assert report.sessions == {"dsOTKpn_0"} and report.session_requests == 3
    first, _, _ = run("sharegpt", SHAREGPT_MULTI, tmp_path, first_turn_only=True)
    assert [r.id for r in first] == ["dsOTKpn_0", "aLzORDR_0", "1CDVnea_0"] and not any(r.session_id for r in first)


def test_sharegpt_is_read_a_chunk_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import specreplay.trace.importers.rows as rows

    whole = [run("sharegpt", src, tmp_path)[0] for src in (SHAREGPT, SHAREGPT_MULTI)]
    monkeypatch.setattr(rows, "_CHUNK", 97)  # elements, strings and escapes cut at every place
    chunked = [run("sharegpt", src, tmp_path)[0] for src in (SHAREGPT, SHAREGPT_MULTI)]
    assert chunked == whole


# --- item 6: errors ---------------------------------------------------------------------


def test_when_every_row_fails_the_message_shows_the_first_error(tmp_path: Path) -> None:
    # A real mistake: Mooncake's 512-token blocks read as Bailian's 16.
    with pytest.raises(TraceError) as err:
        import_trace("mooncake", MOONCAKE, tmp_path / "o.jsonl", Options(block_size=16, skip_invalid=True))
    message = str(err.value)
    assert "no usable rows" in message and "skipped 40: malformed rows" in message
    assert "first: line 1: field 'hash_ids': 14 blocks, but input_length 6758 needs ceil(6758/16) = 423" in message
    assert "(is --block-size right?)" in message
    assert not (tmp_path / "o.jsonl").exists() and not (tmp_path / "o.jsonl.part").exists()


@pytest.mark.parametrize(("drop", "field"), [("timestamp", "timestamp"), ("input_length", "input_length"), ("output_length", "output_length")])
def test_a_missing_field_says_missing(tmp_path: Path, drop: str, field: str) -> None:
    rows = source_lines(MOONCAKE)[:3]
    del rows[1][drop]
    src = tmp_path / "m.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(TraceError) as err:
        import_trace("mooncake", src, tmp_path / "o.jsonl")
    assert str(err.value) == f"{src}:2: field '{field}': missing"


def test_an_empty_csv_cell_says_missing(tmp_path: Path) -> None:
    lines = AZURE.read_text().splitlines()
    lines[3] = ",".join(["", *lines[3].split(",")[1:]])
    src = tmp_path / "a.csv"
    src.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError) as err:
        import_trace("azure", src, tmp_path / "o.jsonl")
    assert str(err.value) == f"{src}:4: field 'TIMESTAMP': missing (empty cell)"


def test_import_cli_with_the_new_options(tmp_path: Path) -> None:
    out = tmp_path / "m.jsonl"
    result = CliRunner().invoke(cli, ["import", "mooncake", str(MOONCAKE), "-o", str(out), "--max-prompt-tokens", "32768",
                                      "--over-limit", "truncate"])
    assert result.exit_code == 0, result.output
    assert "imported 40 requests" in result.output and "truncated 2 prompts to 32768 tokens" in result.output
    result = CliRunner().invoke(cli, ["import", "sharegpt", str(SHAREGPT), "-o", str(out), "--default-output-tokens", "64"])
    assert result.exit_code == 0 and "they ask for 64 tokens" in result.output
    bad = CliRunner().invoke(cli, ["import", "mooncake", str(MOONCAKE), "-o", str(out), "--over-limit", "wrap"])
    assert bad.exit_code == 2 and "--over-limit" in bad.output


# --- replaying what was imported ---------------------------------------------------------

# A fast simulator (no prefill cost) whose context holds the capped prompts.
FAST_SIM = {"ttft_ms": 5, "prefill_us_per_token": 0, "tpot_ms": 1, "reasoning_tokens": [4, 8], "content_tokens": [4, 8]}


def test_an_imported_trace_replays_with_a_lower_budget_and_no_request_refused(tmp_path: Path) -> None:
    """Issue 14 items 1 and 2 end to end: the simulator, like vLLM, answers 400
    to min_tokens > max_tokens, and counts a completions prompt's words. Every
    request goes through (the usage probe included: an imported min_tokens must
    not make the server look like it refuses continuous usage), and every
    prompt it receives is the length the source says."""
    import specreplay
    from specreplay._core import SimServer
    from specreplay.settings.config import ReplayConfig
    from specreplay.run.replay import run_replay

    trace = tmp_path / "mc.jsonl"
    import_trace("mooncake", MOONCAKE, trace, Options(api="completions", max_prompt_tokens=8000, over_limit="truncate"))
    expected = {r.id: r.prompt_blocks.tokens for r in load_trace(trace).records if r.prompt_blocks}
    with SimServer(config=FAST_SIM) as sim:
        result = run_replay(ReplayConfig(trace=str(trace), url=sim.url, speedup=[100.0], max_tokens=32, output=str(tmp_path / "r.arrow")))
    df = specreplay.load(result.path)
    assert len(df) == 40
    assert df["error_kind"].isna().all(), df["error_message"].dropna().tolist()[:3]
    assert (df["token_source"] == "continuous_usage").all()
    assert (df["output_tokens"] <= 32).all()
    assert dict(zip(df["trace_id"], df["prompt_tokens"])) == expected
