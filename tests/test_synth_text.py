"""Text without a model (the approximation, redaction, prompts from blocks),
`--tokenizer` with a tokenizer built here, and `specreplay synth`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from specreplay.cli import cli
from specreplay.errors import ConfigError
from specreplay.trace.importers import Options, import_trace
from specreplay.settings.distributions import Dist
from specreplay.trace.synth import SynthConfig, synthesize
from specreplay.trace.text import FILLER, PromptMaker, Redactor, Tokenizer, approx_tokens
from specreplay.trace.records import load_trace


def test_approximation_and_filler() -> None:
    assert approx_tokens("") == 0
    assert approx_tokens("the cat") == 2
    assert approx_tokens("international,  travel\n") == 4 + 2
    assert len(FILLER) >= 200 and all(1 <= len(w) <= 4 for w in FILLER)
    maker = PromptMaker()
    text = maker.fresh(300)
    assert len(text.split()) == approx_tokens(text) == 300
    assert set(text.split()) <= set(FILLER)
    # Deterministic under the seed; a fresh prompt shares nothing with the one before.
    assert PromptMaker().fresh(300) == text and PromptMaker(seed=1).fresh(300) != text
    assert maker.fresh(300) != text


def test_redaction_keeps_lengths_whitespace_and_shared_prefixes() -> None:
    r = Redactor(b"k" * 32)
    a = "You are a helpful assistant.\n\nQuestion: what is the capital of France?"
    b = "You are a helpful assistant.\n\nQuestion: who wrote Hamlet, and when?"
    ra, rb = r.text(a), r.text(b)
    assert approx_tokens(ra) == approx_tokens(a) and approx_tokens(rb) == approx_tokens(b)
    assert ra.count("\n") == 2
    shared = "You are a helpful assistant.\n\nQuestion:"
    assert ra.startswith(r.text(shared)) and rb.startswith(r.text(shared))
    assert ra != rb
    assert not {"France", "capital", "helpful", "Hamlet"} & set(ra.split() + rb.split())
    # Another key (another capture) gives other filler: no dictionary to reverse it.
    assert Redactor(b"x" * 32).text(a) != ra


def test_redaction_of_bodies_keeps_structure() -> None:
    r = Redactor(b"k" * 32)
    body = {
        "model": "gpt-x", "max_tokens": 9, "temperature": 0.2,
        "messages": [
            {"role": "system", "content": "secret system prompt"},
            {"role": "user", "content": [{"type": "text", "text": "secret question"}]},
            {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"q\": \"secret\"}"}}]},
        ],
    }
    out = r.body(body)
    assert out["model"] == "gpt-x" and out["max_tokens"] == 9 and out["temperature"] == 0.2
    assert [m["role"] for m in out["messages"]] == ["system", "user", "assistant"]
    assert out["messages"][1]["content"][0]["type"] == "text"
    assert out["messages"][2]["tool_calls"][0]["id"] == "c1"
    assert "secret" not in json.dumps(out)
    assert r.body({"prompt": [1, 2, 3]}) == {"prompt": [1, 2, 3]}  # token ids are not text
    tools = [{"type": "function", "function": {"name": "weather", "description": "secret tool", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "description": "secret city", "enum": ["Paris"]}},
        "required": ["city"]}}}]
    out_tools = r.body({"messages": [], "tools": tools})["tools"]
    assert "secret" not in json.dumps(out_tools)
    out_tools[0]["function"]["description"] = tools[0]["function"]["description"]  # type: ignore[index]
    out_tools[0]["function"]["parameters"]["properties"]["city"]["description"] = "secret city"
    assert out_tools == tools  # the schema itself is unchanged


def test_distributions() -> None:
    import random

    rng = random.Random(0)
    assert Dist.parse("512", "x").draw(rng) == 512
    assert all(100 <= Dist.parse("uniform:100:200", "x").draw(rng) <= 200 for _ in range(100))
    assert all(Dist.parse("normal:5:50", "x").draw(rng) >= 1 for _ in range(100))
    for bad in ("uniform:5", "zipf:1", "lognormal:0:1", "uniform:9:1", "-3", "abc"):
        with pytest.raises(ConfigError):
            Dist.parse(bad, "--input-len")


def test_synth_single_turn_rate_and_prefix_groups() -> None:
    recs = synthesize(SynthConfig(num_requests=400, rate=20.0, input_len="uniform:50:60", output_len="32",
                                  prefix_groups=3, prefix_len=40, seed=5))
    assert len(recs) == 400
    arrivals = [r.arrival or 0.0 for r in recs]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0
    assert 400 / arrivals[-1] == pytest.approx(20.0, rel=0.2)
    systems = {r.body["messages"][0]["content"] for r in recs}
    assert len(systems) == 3 and all(len(s.split()) == 40 for s in systems)
    assert all(50 <= len(r.body["messages"][1]["content"].split()) <= 60 for r in recs)
    assert all(r.body["max_tokens"] == r.body["min_tokens"] == r.expected_output_tokens == 32 and r.body["ignore_eos"] for r in recs)
    assert all(r.approximate and r.session_id is None for r in recs)
    assert synthesize(SynthConfig(num_requests=5, seed=5))[3].body == synthesize(SynthConfig(num_requests=5, seed=5))[3].body


def test_synth_multi_turn_sessions_carry_the_conversation() -> None:
    recs = synthesize(SynthConfig(num_requests=30, rate=2.0, turns="3", think_time="exp:1", input_len="20", output_len="10", seed=1))
    by_session: dict[str, list[list[dict[str, str]]]] = {}
    for r in recs:
        assert r.session_id is not None
        by_session.setdefault(r.session_id, []).append(r.body["messages"])
    assert len(by_session) == 10
    for turns in by_session.values():
        assert [len(m) for m in turns] == [1, 3, 5]
        assert turns[1][:1] == turns[0] and turns[2][:3] == turns[1]
        assert [m["role"] for m in turns[2]] == ["user", "assistant", "user", "assistant", "user"]
        assert len(turns[2][1]["content"].split()) == 10


def test_synth_cli_writes_a_valid_trace(tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    result = CliRunner().invoke(cli, ["synth", "-o", str(out), "--num-requests", "20", "--rate", "4", "--arrival", "gamma",
                                      "--burstiness", "0.5", "--turns", "uniform:1:3", "--api", "completions"])
    assert result.exit_code == 0, result.output
    assert "wrote 20 requests" in result.output
    trace = load_trace(out)
    assert len(trace) == 20 and trace.has_arrivals and all(r.api == "completions" for r in trace.records)
    bad = CliRunner().invoke(cli, ["synth", "-o", str(out), "--input-len", "zipf:2"])
    assert bad.exit_code == 1 and "--input-len" in bad.output


def word_level_tokenizer(path: Path) -> Path:
    tokenizers = pytest.importorskip("tokenizers")
    words = ["[UNK]", "[SEP]"] + [f"w{c}{d}" for c in "abcdefgh" for d in "abcdefgh"] + ["hello", "world", "alpha", "beta"]
    model = tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]")
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.add_special_tokens(["[SEP]"])
    tok.save(str(path))
    return path


def test_tokenizer_gives_exact_lengths(tmp_path: Path) -> None:
    tok = Tokenizer(str(word_level_tokenizer(tmp_path / "tokenizer.json")))
    assert "hello" in tok.words and "[SEP]" not in tok.words
    maker = PromptMaker(tok)
    text = maker.from_blocks(40, 16, [1, 2, 3])
    assert tok.count(text) == 40 and not maker.is_approximate(text, 40)
    src = tmp_path / "m.jsonl"
    src.write_text(json.dumps({"timestamp": 0, "input_length": 1000, "output_length": 3, "hash_ids": [4, 5]}) + "\n")
    out = tmp_path / "o.jsonl"
    report = import_trace("mooncake", src, out, Options(), tok)
    rec = load_trace(out).records[0]
    assert tok.count(rec.body["messages"][0]["content"]) == 1000 and not rec.approximate
    assert report.approximate == 0


def test_tokenizer_errors(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{}")
    with pytest.raises(ConfigError, match="cannot load"):
        Tokenizer(str(bad))
