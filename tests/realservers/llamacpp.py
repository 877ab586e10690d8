"""llama.cpp's own HTTP server (llama-server), started in-process.

PyPI's `xllamacpp` wheel carries llama.cpp's C++ server prebuilt; `Server`
starts it on a thread of this process and stops it when the object is
dropped. `LlamaCppServer` wraps that with what tests need: 127.0.0.1 on an
ephemeral port, one compute thread (two threads on a busy 2-core machine
collapse to a few tokens/s), `--reasoning-format deepseek`, `--metrics` (its
Prometheus page at `/metrics`), a bounded wait for `/health`, and a
deterministic stop. With `draft=` a GGUF path, speculative decoding with that
draft model (xllamacpp's `speculative.draft`: path and `n_max`).
"""

from __future__ import annotations

import gc
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

START_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 30.0


class LlamaCppServer:
    """`with LlamaCppServer(gguf) as server:` → `server.url` is `http://127.0.0.1:PORT`."""

    def __init__(
        self,
        model: str | Path,
        *,
        parallel: int = 2,
        ctx: int = 2048,
        threads: int = 1,
        draft: str | Path | None = None,
        draft_max: int = 4,
        jinja: bool = False,
    ) -> None:
        self.model = str(model)
        #: Render the model's chat template with Jinja (llama-server's `--jinja`): needed for tool calls.
        self.jinja = jinja
        self.parallel = parallel
        self.ctx = ctx
        self.threads = threads
        self.draft = None if draft is None else str(draft)
        self.draft_max = draft_max
        self._server: Any = None
        self.url = ""

    def start(self, timeout: float = START_TIMEOUT_S) -> LlamaCppServer:
        import xllamacpp

        p = xllamacpp.CommonParams()
        p.model.path = self.model
        p.hostnames = ["127.0.0.1"]
        p.port = 0  # the server picks a free port; listening_address says which
        p.cpuparams.n_threads = self.threads
        p.cpuparams_batch.n_threads = self.threads
        p.n_parallel = self.parallel
        p.n_ctx = self.ctx  # shared by the slots
        p.reasoning_format = xllamacpp.common_reasoning_format.COMMON_REASONING_FORMAT_DEEPSEEK
        p.warmup = False
        p.endpoint_metrics = True
        if self.jinja:
            p.use_jinja = True  # xllamacpp's default may differ from llama-server's: set only when asked
        if self.draft is not None:
            p.speculative.types = [xllamacpp.common_speculative_type.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
            p.speculative.draft.mparams.path = self.draft
            p.speculative.draft.n_max = self.draft_max
            p.speculative.draft.cpuparams.n_threads = self.threads
            p.speculative.draft.cpuparams_batch.n_threads = self.threads
        self._server = xllamacpp.Server(p)
        self.url = str(self._server.listening_address).rstrip("/")
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, OSError) as e:
                last = e
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"llama.cpp server for {self.model} not healthy after {timeout:.0f} s: {last}")

    def stop(self) -> None:
        # xllamacpp stops the HTTP server and the model loop in Server's
        # destructor: drop the only reference.
        self._server = None
        gc.collect()

    def __enter__(self) -> LlamaCppServer:
        return self.start() if self._server is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def api_url(self) -> str:
        return self.url + "/v1"

    def metrics(self) -> str:
        """Its Prometheus page, as it is now."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=REQUEST_TIMEOUT_S) as resp:
            return str(resp.read().decode())

    def post(self, path: str, body: dict[str, Any]) -> Any:
        """POSTs JSON to `/v1{path}` and returns the decoded answer (non-streaming)."""
        req = urllib.request.Request(
            self.api_url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:
            return json.loads(resp.read())

    def stream(self, path: str, body: dict[str, Any]) -> list[Any]:
        """POSTs a streaming request and returns the SSE payloads: parsed JSON,
        or the raw string for `[DONE]`."""
        req = urllib.request.Request(
            self.api_url + path,
            data=json.dumps({**body, "stream": True}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        out: list[Any] = []
        with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:
            for line in resp.read().decode().splitlines():
                if line.startswith("data: "):
                    data = line[len("data: ") :]
                    out.append(data if data == "[DONE]" else json.loads(data))
        return out
