"""Request kinds beyond text chat, end to end from the client's side: tool
calls counted as output in their own column (and cut ones flagged),
embeddings and rerank sent non-streamed with their own figures, media parts
replayed byte-exact from a trace that stores each once, and a mix of models,
against a small scripted server whose answers are known exactly (the
simulator's side of issue 24 is tested against the simulator itself)."""

from __future__ import annotations

import base64
import io
import json
import threading
import wave
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import specreplay
from specreplay.trace import media
from specreplay.trace import models
from specreplay.settings import model_mix
from specreplay.present import report
from specreplay.comparison.compare import compare
from specreplay.analysis.analyse import analyse
from specreplay.settings.config import ReplayConfig
from specreplay.run.replay import run_replay
from specreplay.analysis.summary import summarize
from specreplay.analysis.summary_row import by_model
from specreplay.trace.synth import SynthConfig, write_synth
from specreplay.trace.records import load_trace
from specreplay.analysis.validity import check

TOOL_ARGS = ['{"city": ', '"Paris", ', '"unit": "C"}']


def _png(w: int, h: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (w, h), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


def _wav(seconds: float) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"\0\0" * int(8000 * seconds))
    return out.getvalue()


class Scripted(BaseHTTPRequestHandler):
    """Chat streams (a tool call when the body has tools; cut at max_tokens
    < 4), embeddings and rerank bodies; every body received is kept."""

    received: list[tuple[str, bytes]] = []

    def log_message(self, *args: object) -> None: ...

    def do_GET(self) -> None:
        self._json({"data": [{"id": "base"}, {"id": "lora-a"}]})

    def _json(self, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers["content-length"]))
        Scripted.received.append((self.path, raw))
        body = json.loads(raw)
        if self.path.endswith("/embeddings"):
            inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
            self._json({"data": [{"index": i, "embedding": [0.0, 1.0]} for i in range(len(inputs))], "usage": {"prompt_tokens": 3 * len(inputs), "total_tokens": 3 * len(inputs)}})
            return
        if self.path.endswith("/rerank"):
            self._json({"results": [{"index": i, "relevance_score": 0.5} for i in range(len(body["documents"]))], "usage": {"total_tokens": 10}})
            return
        chunks: list[dict[str, Any]] = []
        if body.get("tools"):
            cut = body.get("max_tokens", 100) < 4
            args = TOOL_ARGS[:2] if cut else TOOL_ARGS
            for k, piece in enumerate(args):
                call: dict[str, Any] = {"index": 0, "function": {"arguments": piece}}
                if k == 0:
                    call.update(id="call_1", type="function")
                    call["function"]["name"] = "get_weather"
                chunks.append({"delta": {"tool_calls": [call]}, "usage": {"prompt_tokens": 9, "completion_tokens": 2 * (k + 1)}})
            finish = "length" if cut else "tool_calls"
            total = 2 * len(args)
        else:
            for k, word in enumerate(["Hello", " there", "!"]):
                chunks.append({"delta": {"content": word}, "usage": {"prompt_tokens": 5, "completion_tokens": k + 1}})
            finish, total = "stop", 3
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        for c in chunks:
            usage = c.pop("usage")
            payload = {"choices": [{"index": 0, **c, "finish_reason": None}], "usage": usage}
            self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
            self.wfile.flush()
        final = {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": {"prompt_tokens": 9, "completion_tokens": total}}
        self.wfile.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())


@pytest.fixture
def server() -> Iterator[str]:
    Scripted.received = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}/v1"
    finally:
        srv.shutdown()


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


def _mixed_trace(path: Path, png: bytes) -> list[dict[str, Any]]:
    """Image requests, a two-turn tool-calling session, embeddings, rerank, two models; media stored once."""
    uri = "data:image/png;base64," + base64.b64encode(png).decode()
    records: list[dict[str, Any]] = []
    for i in range(3):
        records.append({"id": f"img{i}", "api": "chat", "body": {"model": "base", "messages": [{"role": "user", "content": [{"type": "text", "text": "what is it?"}, {"type": "image_url", "image_url": {"url": uri}}]}]}})
        records.append({"id": f"txt{i}", "api": "chat", "body": {"model": "lora-a", "messages": [{"role": "user", "content": "hi"}]}})
        records.append({"id": f"emb{i}", "api": "embeddings", "body": {"model": "base", "input": ["a", "b", "c", "d"]}})
        records.append({"id": f"rr{i}", "api": "rerank", "body": {"model": "base", "query": "q", "documents": ["x", "y"]}})
    first = [{"role": "user", "content": "weather in Paris?"}]
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}
    second = first + [{"role": "assistant", "content": None, "tool_calls": [call]}, {"role": "tool", "tool_call_id": "call_1", "content": "21 C"}]
    records.append({"id": "agent0", "api": "chat", "session_id": "agent", "body": {"model": "base", "tools": TOOLS, "messages": first}})
    records.append({"id": "agent1", "api": "chat", "session_id": "agent", "body": {"model": "base", "tools": TOOLS, "messages": second}})
    directory = media.media_dir(path)
    with path.open("w") as f:
        for r in records:
            f.write(json.dumps({**r, "body": media.dedup_body(r["body"], directory)}) + "\n")
    return records


def _replay(tmp_path: Path, **options: Any) -> pd.DataFrame:
    options.setdefault("output", str(tmp_path / "run.arrow"))
    result = run_replay(ReplayConfig(**options))
    assert not result.interrupted
    return specreplay.load(result.path)


def test_a_mixed_trace_counts_each_kind_in_its_own_columns(tmp_path: Path, server: str) -> None:
    png = _png(64, 48)
    trace = tmp_path / "mixed.jsonl"
    records = _mixed_trace(trace, png)
    # Stored once: one file for the three image requests, the trace holds references only.
    assert [p.name.endswith(".png") for p in media.media_dir(trace).iterdir()] == [True]
    assert base64.b64encode(png) not in trace.read_bytes()
    df = _replay(tmp_path, trace=str(trace), url=server, concurrency=[2], live_history=True, metrics=False)
    assert df["error_kind"].isna().all(), df["error_message"].dropna().tolist()
    by_id = df.set_index("trace_id")

    # Media: replayed byte-exact (the data URI as recorded), counted per request.
    sent = {json.loads(raw).get("messages", [{}])[0].get("content", [None])[-1].get("image_url", {}).get("url")
            for path, raw in Scripted.received if path.endswith("/chat/completions") and b"image_url" in raw}
    assert sent == {records[0]["body"]["messages"][0]["content"][1]["image_url"]["url"]}
    img = by_id.loc["img0"]
    assert (img["media_count"], img["media_bytes"], img["media_pixels"]) == (1, len(png), 64 * 48)
    assert pd.isna(by_id.loc["txt0", "media_count"])

    # Tool calls: output = reasoning + content + tool-call tokens, the calls counted and whole.
    agent = by_id.loc["agent0"]
    assert (agent["tool_call_tokens"], agent["content_tokens"], agent["output_tokens"]) == (6, 0, 6)
    assert (agent["tool_calls"], agent["tool_args_valid"], agent["finish_reason"]) == (1, True, "tool_calls")
    gen = df[~df["api"].isin(["embeddings", "rerank"])]
    assert (gen["reasoning_tokens"] + gen["content_tokens"] + gen["tool_call_tokens"] == gen["output_tokens"]).all()
    assert (by_id.loc["txt0", "content_tokens"], by_id.loc["txt0", "tool_call_tokens"]) == (3, 0)
    # Live history: the next turn carries the call the server actually made (Paris), not the recorded one (Rome).
    turn2 = [json.loads(raw) for _, raw in Scripted.received if b'"tool_call_id"' in raw]
    assert turn2 and turn2[0]["messages"][1]["tool_calls"][0]["function"]["arguments"] == "".join(TOOL_ARGS)

    # Embeddings and rerank: sent non-streamed; E2E, input tokens and items, no output.
    for path, raw in Scripted.received:
        if path.endswith(("/embeddings", "/rerank")):
            assert "stream" not in json.loads(raw)
    emb, rr = by_id.loc["emb0"], by_id.loc["rr0"]
    assert (emb["api"], emb["items"], emb["prompt_tokens"]) == ("embeddings", 4, 12)
    assert (rr["api"], rr["items"], rr["prompt_tokens"]) == ("rerank", 2, 10)
    assert pd.isna(emb["output_tokens"]) and pd.isna(emb["first_token_us"]) and emb["end_us"] > emb["sent_us"]

    # Models: as the records name them.
    assert by_id.loc["img0", "model"] == "base" and by_id.loc["txt0", "model"] == "lora-a"

    # The summary reports each kind with the figures that apply to it.
    row = summarize(df).iloc[0]
    assert row["embeddings_requests"] == 3 and row["rerank_requests"] == 3
    assert row["embeddings_items_s"] > 0 and row["rerank_input_tok_s"] > 0 and row["embeddings_e2e_p50_ms"] > 0
    assert row["tool_call_requests"] == 2 and row["tool_call_tok_s"] > 0
    assert row["media_requests"] == 3 and row["ttft_media_p50_ms"] > 0 and row["ttft_text_p50_ms"] > 0
    # TTFT covers the generating requests only: embeddings and rerank have none.
    ok_gen = gen[gen["error_kind"].isna()]
    assert row["ttft_p50_ms"] == pytest.approx(((ok_gen["first_token_us"] - ok_gen["sent_us"]) / 1000).median())
    assert row["e2e_p99_ms"] == pytest.approx(((ok_gen["end_us"] - ok_gen["sent_us"]) / 1000).quantile(0.99))
    point = analyse(df)[0].points[0]
    per_model = {r["model"]: r for r in by_model(point)}
    assert set(per_model) == {"base", "lora-a"} and per_model["lora-a"]["requests"] == 3
    assert [f.code for f in check(df) if f.code in ("tool_args_cut", "reasoning_ate_budget")] == []

    # compare shows each kind (one number per run: not resampled) and each model; A/A says nothing.
    frame = compare(df, df, force=True, resamples=50)
    kinds = frame.set_index("metric")
    for metric in ("embeddings_e2e_p50_ms", "rerank_items_s", "tool_call_tok_s", "ttft_media_p50_ms", "model[lora-a].ttft_p50_ms"):
        assert kinds.loc[metric, "verdict"] == "not resampled" and kinds.loc[metric, "change"] == 0, metric
    assert not frame["verdict"].isin(["faster", "slower"]).any()
    # E2E compared is the generating requests' only, as in the summary.
    assert kinds.loc["e2e_p50_ms", "value"] == pytest.approx(row["e2e_p50_ms"])
    # The report has the kinds' table and the per-model one.
    html = report.build(str(tmp_path / "run.arrow"))
    for text in ("Request kinds", "Per model", "emb. items/s", "lora-a", "TTFT p50 with media"):
        assert text in html, text


def test_tool_arguments_cut_at_max_tokens_are_flagged_loudly(tmp_path: Path, server: str) -> None:
    trace = tmp_path / "tools.jsonl"
    trace.write_text("".join(json.dumps({"id": str(i), "api": "chat", "body": {"model": "base", "tools": TOOLS, "messages": [{"role": "user", "content": "go"}]}}) + "\n" for i in range(4)))
    df = _replay(tmp_path, trace=str(trace), url=server, concurrency=[1], max_tokens=3, metrics=False)
    assert (df["tool_args_valid"] == False).all() and (df["finish_reason"] == "length").all()  # noqa: E712
    found = {f.code: f for f in check(df)}
    assert found["tool_args_cut"].level == "error" and found["tool_args_cut"].count == 4
    # Not the reasoning trap: the budget went to a tool call, not to reasoning.
    assert "reasoning_ate_budget" not in found


def test_media_stats_and_store_round_trip(tmp_path: Path) -> None:
    png, wav = _png(30, 20), _wav(0.25)
    body = {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}},
        {"type": "input_audio", "input_audio": {"data": base64.b64encode(wav).decode(), "format": "wav"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
    ]}]}
    stored = media.dedup_body(body, tmp_path / "t.media")
    assert media.REF_PREFIX in json.dumps(stored) and len(list((tmp_path / "t.media").iterdir())) == 2
    resolved, stats = media.MediaStore(tmp_path / "t.media").resolve(stored)
    assert resolved == body  # byte-exact once serialized alike
    assert (stats.count, stats.bytes, stats.pixels) == (3, len(png) + len(wav), 600)
    assert stats.seconds == pytest.approx(0.25)
    with pytest.raises(specreplay.errors.TraceError, match="not found"):
        media.MediaStore(tmp_path / "elsewhere").resolve(stored)


def test_jpeg_size_is_read_from_its_header() -> None:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (33, 17)).save(out, format="JPEG")
    assert media.image_size(out.getvalue()) == (33, 17)
    assert media.image_size(b"not an image") is None


def test_synth_draws_images_and_audio_stored_once(tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    config = SynthConfig(num_requests=6, turns="3", think_time="0", images=1, image_size="40x30", image_format="jpeg", audio_seconds=0.5, seed=2)
    write_synth(config, out)
    stored = sorted(p.suffix for p in media.media_dir(out).iterdir())
    # Two sessions of three turns: one image and one clip per user message, each stored once.
    assert stored == [".jpeg"] * 6 + [".wav"] * 6
    recs = load_trace(out).records
    last = recs[-1].body["messages"]
    refs = [p["image_url"]["url"] for m in last if isinstance(m["content"], list) for p in m["content"] if p["type"] == "image_url"]
    assert len(refs) == 3 and all(r.startswith(media.REF_PREFIX) for r in refs)
    _, stats = media.MediaStore(media.media_dir(out)).resolve(recs[-1].body)
    assert (stats.count, stats.pixels) == (6, 3 * 40 * 30) and stats.seconds == pytest.approx(1.5)
    inline = tmp_path / "inline.jsonl"
    write_synth(config, inline, inline_media=True)
    assert not media.media_dir(inline).exists() and inline.stat().st_size > out.stat().st_size


def test_model_mix_is_seeded_and_keeps_a_session_on_one_model() -> None:
    mix = model_mix.parse_mix("base:0.7,lora-a:0.2,lora-b:0.1")
    assert [n for n, _ in mix] == ["base", "lora-a", "lora-b"] and sum(s for _, s in mix) == pytest.approx(1.0)
    drawn = [models.draw(mix, 0, f"r{i}") for i in range(2000)]
    assert drawn == [models.draw(mix, 0, f"r{i}") for i in range(2000)]
    assert drawn != [models.draw(mix, 1, f"r{i}") for i in range(2000)]
    share = pd.Series(drawn).value_counts(normalize=True)
    assert share["base"] == pytest.approx(0.7, abs=0.05) and share["lora-b"] == pytest.approx(0.1, abs=0.03)
    for bad, message in [("base", "NAME:WEIGHT"), ("a:x", "not a number"), ("a:0", "positive"), ("a:1,a:2", "twice"), ("", "empty")]:
        with pytest.raises(ValueError, match=message):
            model_mix.parse_mix(bad)


def test_model_mix_end_to_end_gives_figures_per_model(tmp_path: Path, server: str) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"id": str(i), "api": "chat", "body": {"messages": [{"role": "user", "content": "hi"}]}}) + "\n" for i in range(40)))
    df = _replay(tmp_path, trace=str(trace), url=server, concurrency=[4], model_mix="base:0.5,lora-a:0.5", metrics=False)
    sent = [json.loads(raw)["model"] for _, raw in Scripted.received if b"messages" in raw and b"max_tokens\": 1," not in raw]
    assert set(df["model"]) == {"base", "lora-a"}
    assert sorted(df["model"]) == sorted(sent[-40:])
    rows = by_model(analyse(df)[0].points[0])
    assert sum(r["requests"] for r in rows) == 40 and all(r["ttft_p50_ms"] > 0 for r in rows)


def test_model_mix_and_model_are_exclusive() -> None:
    from specreplay.errors import ConfigError

    with pytest.raises(ConfigError, match="model_mix"):
        ReplayConfig(trace="t", model_mix="a:1,b").validate()
    with pytest.raises(ConfigError, match="not both"):
        ReplayConfig(trace="t", model="m", model_mix="a:1").validate()


def test_done_when_a_mixed_trace_replays_against_the_embedded_simulator(tmp_path: Path) -> None:
    """Issue 24's "Done when": image requests, a tool-calling session,
    embeddings and rerank calls and two model names, replayed against the
    embedded simulator; each kind counted in its own columns, the summary,
    compare and report showing each."""
    sim: dict[str, Any] = {
        "ttft_ms": 5, "prefill_us_per_token": 40, "tpot_ms": 1, "reasoning_tokens": [3, 5], "content_tokens": [4, 6],
        "model": "base", "models": [{"name": "lora-a", "tpot_ms": 4}],
        "image_patch_px": 28, "image_merge": 1, "tool_call_rate": 1.0, "embedding_dim": 8,
    }  # fmt: skip
    png = _png(560, 560)  # 20 × 20 patches: 400 prompt tokens more than the text alone
    trace = tmp_path / "mixed.jsonl"
    _mixed_trace(trace, png)
    df = _replay(tmp_path, trace=str(trace), sim=sim, concurrency=[2], max_tokens=64, metrics=False)
    assert df["error_kind"].isna().all(), df["error_message"].dropna().tolist()
    by_id = df.set_index("trace_id")
    # Media: charged as prompt tokens by the simulator, recorded per request on our side.
    assert by_id.loc["img0", "prompt_tokens"] >= by_id.loc["txt0", "prompt_tokens"] + 400
    assert (by_id.loc["img0", "media_count"], by_id.loc["img0", "media_pixels"]) == (1, 560 * 560)
    # Tool calls: every request with tools answered with a call, its tokens in their own column.
    agent = df[df["trace_id"].str.startswith("agent")]
    assert (agent["finish_reason"] == "tool_calls").all() and (agent["tool_calls"] >= 1).all() and agent["tool_args_valid"].all()
    assert (agent["tool_call_tokens"] > 0).all()
    gen = df[~df["api"].isin(["embeddings", "rerank"])]
    assert (gen["reasoning_tokens"] + gen["content_tokens"] + gen["tool_call_tokens"] == gen["output_tokens"]).all()
    assert (gen["token_source"] == "continuous_usage").all()
    text = gen[gen["trace_id"].str.startswith("txt")]
    assert (text["tool_call_tokens"] == 0).all() and (text["content_tokens"] > 0).all()
    # Embeddings and rerank: items and input tokens from the simulator's usage, no output.
    emb, rr = df[df["api"] == "embeddings"], df[df["api"] == "rerank"]
    assert (emb["items"] == 4).all() and (emb["prompt_tokens"] > 0).all() and emb["output_tokens"].isna().all()
    assert (rr["items"] == 2).all() and rr["first_token_us"].isna().all()
    # Two models, each at its own speed (lora-a decodes 4x slower).
    assert set(gen["model"]) == {"base", "lora-a"}
    point = analyse(df)[0].points[0]
    per_model = {r["model"]: r for r in by_model(point)}
    assert per_model["lora-a"]["tpot_p50_ms"] > 2 * per_model["base"]["tpot_p50_ms"]
    # The summary reports each kind with its figures.
    row = summarize(df).iloc[0]
    assert (row["embeddings_requests"], row["rerank_requests"], row["media_requests"], row["tool_call_requests"]) == (3, 3, 3, 2)
    assert row["embeddings_e2e_p50_ms"] > 0 and row["embeddings_items_s"] > 0 and row["rerank_input_tok_s"] > 0
    # Prefill of 400 more tokens at 40 µs each: TTFT with the image is later.
    assert row["ttft_media_p50_ms"] > row["ttft_text_p50_ms"] + 10
    assert row["tool_call_tok_s"] > 0
    frame = compare(df, df, force=True, resamples=50).set_index("metric")
    assert {"rerank_e2e_p50_ms", "tool_call_tok_s", "ttft_media_p50_ms", "model[lora-a].tpot_p50_ms"} <= set(frame.index)
    html = report.build(str(tmp_path / "run.arrow"))
    assert "Request kinds" in html and "Per model" in html and "rerank E2E p50" in html


def test_openai_batch_import_names_the_endpoints_and_stores_images_once(tmp_path: Path) -> None:
    from specreplay.errors import TraceError
    from specreplay.trace.importers import import_trace

    png = _png(8, 8)
    uri = "data:image/png;base64," + base64.b64encode(png).decode()
    image_body = {"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": uri}}]}]}
    lines = [
        {"custom_id": "c1", "method": "POST", "url": "/v1/chat/completions", "body": image_body},
        {"custom_id": "c2", "method": "POST", "url": "/v1/chat/completions", "body": image_body},
        {"custom_id": "e1", "method": "POST", "url": "/v1/embeddings", "body": {"model": "m", "input": "hello"}},
        {"custom_id": "r1", "method": "POST", "url": "/v1/rerank", "body": {"model": "m", "query": "q", "documents": ["a", "b"]}},
    ]
    source = tmp_path / "batch.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "trace.jsonl"
    import_trace("openai-batch", source, out)
    recs = load_trace(out).records
    assert [(r.id, r.api) for r in recs] == [("c1", "chat"), ("c2", "chat"), ("e1", "embeddings"), ("r1", "rerank")]
    assert len(list(media.media_dir(out).iterdir())) == 1 and uri.encode() not in out.read_bytes()
    resolved, _ = media.MediaStore(media.media_dir(out)).resolve(recs[1].body)
    assert resolved == image_body
    source.write_text(json.dumps({"custom_id": "x", "url": "/v1/images/generations", "body": {}}) + "\n")
    with pytest.raises(TraceError, match="line 1.*unknown endpoint|unknown endpoint"):
        import_trace("openai-batch", source, tmp_path / "bad.jsonl")


def test_capture_stores_a_sessions_repeated_image_once(tmp_path: Path) -> None:
    from specreplay._core import SimServer
    from specreplay.trace.capture import BackgroundCapture

    uri = "data:image/png;base64," + base64.b64encode(_png(16, 16)).decode()
    first = [{"role": "user", "content": [{"type": "text", "text": "what?"}, {"type": "image_url", "image_url": {"url": uri}}]}]
    out = tmp_path / "cap.jsonl"
    with SimServer(config={"ttft_ms": 1, "tpot_ms": 1, "reasoning_tokens": [0, 0], "content_tokens": [3, 3]}) as sim, BackgroundCapture(sim.url, out) as cap:
        import urllib.request

        messages = first
        for _ in range(3):
            req = urllib.request.Request(cap.url + "/chat/completions", json.dumps({"messages": messages, "max_tokens": 3}).encode(), {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as resp:
                answer = json.load(resp)["choices"][0]["message"]["content"]
            messages = messages + [{"role": "assistant", "content": answer}, {"role": "user", "content": "and?"}]
    recs = load_trace(out).records
    assert len(recs) == 3 and len({r.session_id for r in recs}) == 1
    # Three turns, the image in each: one file, and the trace holds references.
    assert len(list(media.media_dir(out).iterdir())) == 1 and uri.encode() not in out.read_bytes()


def test_tool_calls_of_every_dialect_against_the_simulator(tmp_path: Path) -> None:
    """Chat tool_calls deltas, Anthropic tool_use blocks (input_json_delta) and
    Responses function_call items (function_call_arguments.delta) all count
    as tool-call output."""
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    records = [
        {"id": "chat", "api": "chat", "body": {"messages": [{"role": "user", "content": "go"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}], "max_tokens": 64}},
        {"id": "anthropic", "api": "anthropic", "body": {"messages": [{"role": "user", "content": "go"}], "tools": [{"name": "f", "input_schema": schema}], "max_tokens": 64}},
        {"id": "responses", "api": "responses", "body": {"input": "go", "tools": [{"type": "function", "name": "f", "parameters": schema}], "max_output_tokens": 64}},
    ]
    trace = tmp_path / "dialects.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    sim = {"ttft_ms": 2, "prefill_us_per_token": 0, "tpot_ms": 1, "reasoning_tokens": [3, 5], "content_tokens": [2, 4], "tool_call_rate": 1.0}
    df = _replay(tmp_path, trace=str(trace), sim=sim, concurrency=[1], metrics=False)
    assert df["error_kind"].isna().all(), df["error_message"].dropna().tolist()
    assert sorted(df["api"]) == ["anthropic", "chat", "responses"]
    assert (df["tool_calls"] == 1).all() and df["tool_args_valid"].all() and (df["tool_call_tokens"] > 0).all()
    assert (df["reasoning_tokens"] + df["content_tokens"] + df["tool_call_tokens"] == df["output_tokens"]).all()
